//! Race detection: a per-block shadow (one cell per 4-byte word, split into one cell per byte
//! for words that see narrower accesses; shared and global memory) checked at every non-atomic
//! access, and a per-launch comparison of the global bytes each block read and
//! wrote (`cross_block.rs`).
//!
//! Ordering model. A block barrier orders every access of the block before it against every
//! access after it: accesses are stamped with the block's barrier interval. Within an
//! interval, two threads are ordered only when they are lanes of one warp and a warp-
//! synchronous instruction (`bar.warp.sync`, `shfl.sync`, `vote.sync`, ...) joined them in
//! between; this is tracked with a vector clock per lane (32 components, one per lane of its
//! warp). Threads of different blocks are never ordered.
//!
//! Shadow cell of a word (or byte): the last write and up to two reads of the current interval (the
//! first read, and the latest read by another thread), each as (thread, interval, lane epoch,
//! PTX line). A write after three or more reads by different threads is checked against two
//! of them only, so a hazard hidden behind a reader that happens to be ordered may be missed
//! (never a false report).

use super::cross_block::{GRange, RangeBuilder};
use super::fasthash::FastMap;
use super::report::{AccessKind, Hazard, MemSpace};
use super::WarpAccess;

/// "No access" marker for [`Rec::tid`].
const NONE: u32 = u32::MAX;

/// One recorded access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rec {
    /// Linear thread index in the block, `NONE` when empty.
    pub tid: u32,
    /// Barrier interval of the access.
    pub interval: u32,
    /// The lane's own clock component at the access.
    pub epoch: u32,
    /// PTX line.
    pub line: u32,
}

const EMPTY: Rec = Rec {
    tid: NONE,
    interval: 0,
    epoch: 0,
    line: 0,
};

impl Rec {
    #[inline]
    fn is_some(&self) -> bool {
        self.tid != NONE
    }
}

/// Shadow state of one word or byte. `gen` tags the block that wrote the cell; a cell of
/// another block reads as empty, so the shadow needs no clearing between blocks. A word cell
/// with `split` set defers to four byte cells in the block's split table.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))] // one cache line per cell
struct Cell {
    gen: u32,
    split: bool,
    w: Rec,
    r1: Rec,
    r2: Rec,
}

const FRESH: Cell = Cell {
    gen: 0,
    split: false,
    w: EMPTY,
    r1: EMPTY,
    r2: EMPTY,
};

/// Vector clocks of the 32 lanes of a warp. Lane `l`'s clock is `rows[l]` when `l` is in
/// `explicit`, else `base` with its own component `own[l]` (the state a whole-warp sync
/// leaves, kept implicit so that such a sync costs O(32) instead of O(32 x 32)).
/// Invariant: `own[k]` is the largest component `k` of any lane (only lane `k` advances it).
#[derive(Clone)]
struct WarpClock {
    base: [u32; 32],
    own: [u32; 32],
    explicit: u32,
    rows: Box<[[u32; 32]; 32]>,
}

impl WarpClock {
    fn new() -> WarpClock {
        WarpClock {
            base: [0; 32],
            own: [1; 32],
            explicit: 0,
            rows: Box::new([[0; 32]; 32]),
        }
    }

    /// Component `k` of lane `l`'s clock.
    #[inline]
    fn get(&self, l: usize, k: usize) -> u32 {
        if self.explicit >> l & 1 == 1 {
            self.rows[l][k]
        } else if k == l {
            self.own[l]
        } else {
            self.base[k]
        }
    }

    /// Joins the clocks of the lanes in `mask`, then advances each one's own component.
    fn sync(&mut self, mask: u32) {
        if mask == u32::MAX {
            // The join of every lane is the diagonal (see the invariant).
            self.base = self.own;
            for o in &mut self.own {
                *o += 1;
            }
            self.explicit = 0;
            return;
        }
        let mut join = [0u32; 32];
        for l in (0..32).filter(|l| mask >> l & 1 == 1) {
            for (k, j) in join.iter_mut().enumerate() {
                *j = (*j).max(self.get(l, k));
            }
        }
        for l in (0..32).filter(|l| mask >> l & 1 == 1) {
            self.rows[l] = join;
            self.rows[l][l] += 1;
            self.own[l] = self.rows[l][l];
        }
        self.explicit |= mask;
    }
}

/// The thread making an access, with its warp's clocks.
struct Who<'a> {
    tid: u32,
    interval: u32,
    line: u32,
    clock: &'a WarpClock,
}

impl Who<'_> {
    #[inline]
    fn rec(&self) -> Rec {
        Rec {
            tid: self.tid,
            interval: self.interval,
            epoch: self.clock.own[(self.tid & 31) as usize],
            line: self.line,
        }
    }

    /// Whether `r` happens before this access (or is by the same thread).
    #[inline]
    fn after(&self, r: &Rec) -> bool {
        r.tid == self.tid
            || r.interval < self.interval
            || (r.tid >> 5 == self.tid >> 5
                && self
                    .clock
                    .get((self.tid & 31) as usize, (r.tid & 31) as usize)
                    >= r.epoch)
    }
}

impl Cell {
    #[inline]
    fn refresh(&mut self, gen: u32) {
        if self.gen != gen {
            *self = FRESH;
            self.gen = gen;
        }
    }

    #[inline(always)]
    fn op(&mut self, store: bool, who: &Who<'_>) -> Option<(Hazard, Rec)> {
        if store {
            self.store(who)
        } else {
            self.load(who)
        }
    }

    #[inline(always)]
    fn load(&mut self, who: &Who<'_>) -> Option<(Hazard, Rec)> {
        let hz = if self.w.is_some() && !who.after(&self.w) {
            Some((Hazard::ReadAfterWrite, self.w))
        } else {
            None
        };
        let me = who.rec();
        if !self.r1.is_some() || self.r1.interval < who.interval {
            self.r1 = me;
            self.r2 = EMPTY;
        } else if self.r1.tid == who.tid {
            self.r1 = me;
        } else {
            self.r2 = me;
        }
        hz
    }

    #[inline(always)]
    fn store(&mut self, who: &Who<'_>) -> Option<(Hazard, Rec)> {
        let hz = if self.w.is_some() && !who.after(&self.w) {
            Some((Hazard::WriteAfterWrite, self.w))
        } else if self.r1.is_some() && !who.after(&self.r1) {
            Some((Hazard::WriteAfterRead, self.r1))
        } else if self.r2.is_some() && !who.after(&self.r2) {
            Some((Hazard::WriteAfterRead, self.r2))
        } else {
            None
        };
        self.w = who.rec();
        hz
    }
}

/// A hazard found within a block: the earlier access `first`, the thread and line of the
/// later one, and the byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RawHazard {
    pub hazard: Hazard,
    pub first: Rec,
    pub tid: u32,
    pub line: u32,
    pub addr: u64,
}

/// Words per page of the global shadow.
const PAGE_BITS: u32 = 9;
const PAGE: usize = 1 << PAGE_BITS;

/// Shadow cells of the global words one block touched (indexed by address / 4), in pages
/// reused from block to block.
#[derive(Default)]
struct Paged {
    map: FastMap<u64, u32>,
    pages: Vec<Box<[Cell]>>,
    /// Lowest and highest word index touched in each page in use (by page index).
    bounds: Vec<(u32, u32)>,
    used: usize,
    last: Option<(u64, u32)>,
}

impl Paged {
    fn clear(&mut self) {
        self.map.clear();
        self.used = 0;
        self.last = None;
    }

    #[inline]
    fn cell(&mut self, word: u64) -> &mut Cell {
        let page = word >> PAGE_BITS;
        let idx = match self.last {
            Some((p, i)) if p == page => i,
            _ => {
                let i = match self.map.get(&page) {
                    Some(&i) => i,
                    None => {
                        if self.used == self.pages.len() {
                            self.pages.push(vec![FRESH; PAGE].into_boxed_slice());
                            self.bounds.push((0, 0));
                        }
                        self.bounds[self.used] = (u32::MAX, 0);
                        let i = self.used as u32;
                        self.used += 1;
                        self.map.insert(page, i);
                        i
                    }
                };
                self.last = Some((page, i));
                i
            }
        };
        let w = (word as usize) & (PAGE - 1);
        let b = &mut self.bounds[idx as usize];
        b.0 = b.0.min(w as u32);
        b.1 = b.1.max(w as u32);
        &mut self.pages[idx as usize][w]
    }

    fn reset_gens(&mut self) {
        for p in &mut self.pages {
            p.fill(FRESH);
        }
    }
}

/// Race-detection state of the block a worker is running (reused for its next blocks).
#[derive(Default)]
pub(super) struct BlockRace {
    gen: u32,
    interval: u32,
    /// Lane clocks of each warp.
    clocks: Vec<WarpClock>,
    /// Shared memory, one cell per word.
    shared: Vec<Cell>,
    global: Paged,
    /// Byte cells of split words (by word index), shared and global; cleared per block.
    shared_split: FastMap<u64, [Cell; 4]>,
    global_split: FastMap<u64, [Cell; 4]>,
}

impl BlockRace {
    /// Starts a block of `threads` threads with `shared_bytes` of shared memory.
    pub(super) fn start(&mut self, threads: u32, shared_bytes: usize) {
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            // Tags wrapped: clear every cell once so that no stale tag can match.
            self.shared.fill(FRESH);
            self.global.reset_gens();
            self.gen = 1;
        }
        self.interval = 1;
        let words = shared_bytes.div_ceil(4);
        if self.shared.len() < words {
            self.shared.resize(words, FRESH);
        }
        // Clocks carry over from the previous block: every sync bumps the owner's component
        // past what the other lanes learned, so old knowledge never orders new accesses.
        let warps = threads.div_ceil(32) as usize;
        if self.clocks.len() < warps {
            self.clocks.resize_with(warps, WarpClock::new);
        }
        self.global.clear();
        self.shared_split.clear();
        self.global_split.clear();
    }

    /// A block barrier completed.
    pub(super) fn barrier(&mut self) {
        self.interval += 1;
    }

    /// A warp-synchronous instruction completed for the lanes of `mask` of `warp`.
    pub(super) fn warp_sync(&mut self, warp: u32, mask: u32) {
        if let Some(c) = self.clocks.get_mut(warp as usize) {
            c.sync(mask);
        }
    }

    /// Checks one warp-level non-atomic access. Shared offsets out of range are ignored (the
    /// executor faults on them).
    pub(super) fn access(&mut self, ev: &WarpAccess<'_>, found: &mut impl FnMut(RawHazard)) {
        let shared = ev.space == MemSpace::Shared;
        let store = ev.kind == AccessKind::Store;
        let gen = self.gen;
        for l in ev.lanes {
            let tid = ev.warp * 32 + l.lane as u32;
            let Some(clock) = self.clocks.get(ev.warp as usize) else {
                continue;
            };
            let who = Who {
                tid,
                interval: self.interval,
                line: ev.line,
                clock,
            };
            let mut first: Option<(Hazard, Rec, u64)> = None;
            let end = l.addr.saturating_add(ev.size.max(1) as u64);
            let mut word = l.addr / 4;
            while word * 4 < end {
                let base = word * 4;
                let lo = l.addr.max(base) - base;
                let hi = end.min(base + 4) - base;
                let (cell, split) = if shared {
                    match self.shared.get_mut(word as usize) {
                        Some(c) => (c, &mut self.shared_split),
                        None => break,
                    }
                } else {
                    (self.global.cell(word), &mut self.global_split)
                };
                cell.refresh(gen);
                if lo == 0 && hi == 4 && !cell.split {
                    if let Some((h, r)) = cell.op(store, &who) {
                        first = first.or(Some((h, r, base)));
                    }
                } else {
                    let bytes = split.entry(word).or_insert([*cell; 4]);
                    cell.split = true;
                    for b in lo..hi {
                        if let Some((h, r)) = bytes[b as usize].op(store, &who) {
                            first = first.or(Some((h, r, base + b)));
                        }
                    }
                }
                word += 1;
            }
            if let Some((hazard, rec, addr)) = first {
                found(RawHazard {
                    hazard,
                    first: rec,
                    tid,
                    line: ev.line,
                    addr,
                });
            }
        }
    }

    /// Appends the runs of global bytes this block wrote and read (tagged `block`).
    pub(super) fn global_ranges(&self, block: u64, out: &mut Vec<GRange>) {
        let mut pages: Vec<(u64, u32)> = self.global.map.iter().map(|(&p, &i)| (p, i)).collect();
        pages.sort_unstable();
        let (mut writes, mut reads) = (RangeBuilder::new(), RangeBuilder::new());
        for (page, idx) in pages {
            let (lo, hi) = self.global.bounds[idx as usize];
            let cells = &self.global.pages[idx as usize][lo as usize..=hi as usize];
            for (i, c) in cells.iter().enumerate() {
                if c.gen != self.gen {
                    continue;
                }
                let word = (page << PAGE_BITS) + lo as u64 + i as u64;
                match (c.split, self.global_split.get(&word)) {
                    (true, Some(bytes)) => {
                        for (b, c) in bytes.iter().enumerate() {
                            let addr = word * 4 + b as u64;
                            if c.w.is_some() {
                                writes.push(addr, 1, &c.w, block, true, out);
                            }
                            if c.r1.is_some() {
                                reads.push(addr, 1, &c.r1, block, false, out);
                            }
                        }
                    }
                    _ => {
                        if c.w.is_some() {
                            writes.push(word * 4, 4, &c.w, block, true, out);
                        }
                        if c.r1.is_some() {
                            reads.push(word * 4, 4, &c.r1, block, false, out);
                        }
                    }
                }
            }
        }
        writes.finish(out);
        reads.finish(out);
    }
}
