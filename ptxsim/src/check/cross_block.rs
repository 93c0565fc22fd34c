//! Races between blocks: the global bytes each block read and wrote, as runs ([`GRange`],
//! built by [`RangeBuilder`] from a block's shadow at block end), and the per-launch sweep
//! that finds runs of different blocks overlapping with at least one write. Threads of
//! different blocks are never ordered, so every such overlap is a hazard.

use super::race::Rec;
use super::report::Hazard;

/// A run of global bytes one block wrote (or read) at one PTX line, by one thread, or by a
/// sequence of threads `per` bytes each whose indices advance by `tstep` (a coalesced access:
/// `tstep` 1; a strided one: the thread stride).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct GRange {
    pub start: u64,
    pub end: u64,
    pub block: u64,
    pub write: bool,
    pub line: u32,
    /// Linear thread index of the access to `start`.
    pub tid: u32,
    /// Bytes per thread; 0 when one thread accessed the whole range.
    pub per: u32,
    /// Thread index step from one `per`-byte run to the next.
    pub tstep: i32,
}

impl GRange {
    /// The thread that accessed `addr` (inside the range).
    pub(super) fn tid_at(&self, addr: u64) -> u32 {
        match self.per {
            0 => self.tid,
            p => {
                let runs = ((addr - self.start) / p as u64) as i64;
                (self.tid as i64 + runs * self.tstep as i64) as u32
            }
        }
    }
}

/// Builds [`GRange`]s from bytes visited in increasing address order.
pub(super) struct RangeBuilder {
    open: Option<GRange>,
    /// Thread of the last byte and where its run started.
    last_tid: u32,
    run_start: u64,
}

impl RangeBuilder {
    pub(super) fn new() -> RangeBuilder {
        RangeBuilder {
            open: None,
            last_tid: 0,
            run_start: 0,
        }
    }

    /// Adds the `len` bytes at `addr` (above every byte added before), accessed by `r`.
    pub(super) fn push(
        &mut self,
        addr: u64,
        len: u64,
        r: &Rec,
        block: u64,
        write: bool,
        out: &mut Vec<GRange>,
    ) {
        if let Some(g) = &mut self.open {
            if g.end == addr && g.line == r.line {
                // Bytes of the current thread's run so far.
                let run = addr - self.run_start;
                if r.tid == self.last_tid && (g.per == 0 || run + len <= g.per as u64) {
                    g.end += len;
                    return;
                }
                let step = r.tid as i64 - self.last_tid as i64;
                let first_run = g.per == 0 && self.run_start == g.start;
                let (per, tstep) = if first_run {
                    (run, step)
                } else {
                    (g.per as u64, g.tstep as i64)
                };
                if step == tstep && run == per && len <= per && per <= u32::MAX as u64 {
                    g.per = per as u32;
                    g.tstep = tstep as i32;
                    g.end += len;
                    self.last_tid = r.tid;
                    self.run_start = addr;
                    return;
                }
            }
            out.push(*g);
        }
        self.open = Some(GRange {
            start: addr,
            end: addr + len,
            block,
            write,
            line: r.line,
            tid: r.tid,
            per: 0,
            tstep: 0,
        });
        self.last_tid = r.tid;
        self.run_start = addr;
    }

    pub(super) fn finish(self, out: &mut Vec<GRange>) {
        out.extend(self.open);
    }
}

/// The two ranges seen so far that reach furthest, from different blocks: `a` reaches
/// furthest of all, `b` furthest among blocks other than `a`'s.
#[derive(Default)]
struct Top2 {
    a: Option<GRange>,
    b: Option<GRange>,
}

impl Top2 {
    fn push(&mut self, r: GRange) {
        match self.a {
            None => self.a = Some(r),
            Some(a) if r.end > a.end => {
                if r.block != a.block {
                    self.b = Some(a);
                }
                self.a = Some(r);
            }
            Some(a) => {
                if r.block != a.block && self.b.is_none_or(|b| r.end > b.end) {
                    self.b = Some(r);
                }
            }
        }
    }

    /// A range from another block than `r`'s that overlaps `r`, given that every range
    /// pushed so far starts at or before `r`.
    fn conflict(&self, r: &GRange) -> Option<GRange> {
        [self.a, self.b]
            .into_iter()
            .flatten()
            .find(|x| x.block != r.block && x.end > r.start)
    }
}

/// Finds overlaps between ranges of different blocks: write/write and read/write. Calls
/// `found(hazard, first, second, address)` at most once per range (for the range that starts
/// later); for read/write `first` is the write. Deterministic for a given set of ranges.
pub(super) fn cross_block(
    ranges: &mut [GRange],
    found: &mut impl FnMut(Hazard, GRange, GRange, u64),
) {
    ranges.sort_unstable();
    let (mut writes, mut reads) = (Top2::default(), Top2::default());
    for &r in ranges.iter() {
        if r.write {
            if let Some(x) = writes.conflict(&r) {
                let (first, second) = if (x.block, x.line) <= (r.block, r.line) {
                    (x, r)
                } else {
                    (r, x)
                };
                found(Hazard::WriteAfterWrite, first, second, r.start);
            } else if let Some(x) = reads.conflict(&r) {
                found(Hazard::ReadWrite, r, x, r.start);
            }
            writes.push(r);
        } else {
            if let Some(x) = writes.conflict(&r) {
                found(Hazard::ReadWrite, x, r, r.start);
            }
            reads.push(r);
        }
    }
}
