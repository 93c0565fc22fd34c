//! Checks and metrics driven by the executor's memory and synchronization events: racecheck
//! (data races in shared and global memory), initcheck (reads of never-written memory) and
//! memory-traffic metrics (requests, sectors, bank conflicts, unique bytes, instruction mix).
//!
//! # How the executor drives it
//! 1. At launch start, [`LaunchChecks::for_kernel`] with the [`CheckConfig`], the launch
//!    [`Geometry`] and the kernel's code (for instruction classes).
//! 2. Each block worker takes one [`BlockChecks`] from [`LaunchChecks::block`] (boxed as the
//!    executor's `BlockEvents` receiver by [`LaunchChecks::receiver`], `receiver.rs`) and, for
//!    every block it runs: [`BlockChecks::start`], then the block's events in execution order
//!    ([`BlockChecks::access`] for each warp-level global/shared memory instruction,
//!    [`BlockChecks::barrier`] when a block barrier completes, [`BlockChecks::warp_sync`] when
//!    a warp-synchronous instruction completes for its member lanes,
//!    [`BlockChecks::instruction`] for every warp-level instruction), then
//!    [`BlockChecks::end`], which merges the block's findings into the launch.
//! 3. At launch end, [`LaunchChecks::finish`] compares the global bytes of different blocks
//!    and returns the metrics and the reports, sorted and deduplicated, independent of how
//!    blocks were spread over workers.
//!
//! # What is checked
//! - Races: two accesses to the same byte by different threads, at least one a write, with
//!   nothing ordering them (see `race.rs` for the ordering model). Atomics and strong accesses
//!   (`.volatile`, `.relaxed`, `.acquire`, `.release`) are never reported. Fences and flags are not modelled: threads of
//!   different blocks are never ordered, so a plain store in one block read by a plain load in
//!   another block of the same launch is always reported, even behind a
//!   `__threadfence()`-plus-atomic-flag handshake.
//! - Uninitialized reads: global bytes whose initialization shadow (kept by global memory) is
//!   clear when a load or atomic reads them, shared bytes no thread of the block wrote before.
//! - Limitations (each can only hide a race, never invent one): a completing block barrier
//!   (named or not, whatever its thread count) orders every access the block made before it
//!   against every later one, including accesses of threads that only arrived (`bar.arrive`)
//!   and went on; a write after reads by three or more threads in one barrier interval is
//!   checked against two of them; atomics and strong accesses are never checked against plain
//!   accesses.
//! - Metrics: each warp-level execution of a memory instruction is one request (exact for
//!   convergent code); `ld.const` and local/parameter accesses are not counted as traffic. A
//!   global request is uncoalesced when it touches more 32-byte sectors than
//!   `ceil(distinct bytes / 32)` (`coalesce.rs`); such requests are summed per PTX line.

mod classify;
mod coalesce;
mod cross_block;
mod fasthash;
mod metrics;
mod metrics_table;
mod race;
mod receiver;
mod report;
#[cfg(test)]
mod tests;
mod traffic;

pub use coalesce::UncoalescedLine;
pub use metrics::{InstrClass, Metrics};
pub use report::{AccessKind, AccessSite, Hazard, MemSpace, Report, ReportKind};

use cross_block::GRange;
use race::{BlockRace, RawHazard};
use report::ReportSet;
use std::sync::Mutex;
use traffic::{SectorSet, SECTOR_BYTES};

/// Distinct reports kept per launch; the rest are counted in [`Outcome::reports_omitted`].
pub(crate) const MAX_REPORTS: usize = 100;

/// One active lane of a warp-level memory access: the executor's type (global address or
/// shared offset, lane, and for global loads/atomics whether a byte was never written).
pub(crate) use crate::exec::events::LaneAcc as LaneAccess;

/// One warp-level execution of a global or shared memory instruction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WarpAccess<'a> {
    /// Memory space (after resolving generic addresses).
    pub space: MemSpace,
    /// Load, store or atomic.
    pub kind: AccessKind,
    /// A strong access (`.volatile`, `.relaxed`, `.acquire`, `.release`): never a race.
    pub strong: bool,
    /// 1-based PTX line.
    pub line: u32,
    /// Warp index in the block (threads `32 * warp ..` in linear thread order).
    pub warp: u32,
    /// Bytes accessed per lane (all vector elements together: 16 for `ld.v4.f32`).
    pub size: u32,
    /// The active lanes, in increasing lane order.
    pub lanes: &'a [LaneAccess],
}

/// Which checks run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CheckConfig {
    /// Race detection.
    pub racecheck: bool,
    /// Uninitialized-read detection.
    pub initcheck: bool,
    /// Metrics collection.
    pub metrics: bool,
}

impl CheckConfig {
    /// Whether anything is enabled (when not, the executor need not send events).
    pub(crate) fn any(&self) -> bool {
        self.racecheck || self.initcheck || self.metrics
    }
}

/// Launch shape, for thread and block indices in reports and shadow sizes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Geometry {
    /// Grid dimensions in blocks.
    pub grid: [u32; 3],
    /// Block dimensions in threads.
    pub block: [u32; 3],
    /// Shared memory per block (static plus dynamic), bytes.
    pub shared_bytes: usize,
}

impl Geometry {
    fn threads(&self) -> u32 {
        self.block.iter().product()
    }

    fn thread_id(&self, tid: u32) -> [u32; 3] {
        let [x, y, _] = self.block.map(|d| d.max(1));
        [tid % x, tid / x % y, tid / (x * y)]
    }

    fn block_id(&self, b: u64) -> [u32; 3] {
        let [x, y, _] = self.grid.map(|d| d.max(1) as u64);
        [(b % x) as u32, (b / x % y) as u32, (b / (x * y)) as u32]
    }
}

/// What a launch's checks produced.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    /// Metrics, when enabled.
    pub metrics: Option<Metrics>,
    /// Races and uninitialized reads, sorted by PTX line, at most [`MAX_REPORTS`].
    pub reports: Vec<Report>,
    /// Distinct reports left out of `reports`.
    pub reports_omitted: u64,
}

#[derive(Default)]
struct Acc {
    metrics: Metrics,
    reports: ReportSet,
    ranges: Vec<GRange>,
    loads: SectorSet,
    stores: SectorSet,
}

/// Per-launch check state, shared by the block workers.
pub(crate) struct LaunchChecks {
    cfg: CheckConfig,
    geo: Geometry,
    /// Class of each instruction of the kernel, by program counter (metrics).
    classes: Vec<InstrClass>,
    acc: Mutex<Acc>,
}

impl LaunchChecks {
    /// Check state for one launch of a kernel with no code attached (instruction classes
    /// unknown: [`BlockChecks::instruction`] counts them as [`InstrClass::Other`]).
    pub(crate) fn new(cfg: CheckConfig, geo: Geometry) -> LaunchChecks {
        LaunchChecks {
            cfg,
            geo,
            classes: Vec::new(),
            acc: Mutex::new(Acc::default()),
        }
    }

    /// Check state for one launch of a kernel whose code is `code`.
    pub(crate) fn for_kernel(
        cfg: CheckConfig,
        geo: Geometry,
        code: &[crate::ir::Instr],
    ) -> LaunchChecks {
        let classes = if cfg.metrics {
            classify::classes(code)
        } else {
            Vec::new()
        };
        LaunchChecks {
            classes,
            ..LaunchChecks::new(cfg, geo)
        }
    }

    /// Per-worker block state (reuse it for every block the worker runs).
    pub(crate) fn block(&self) -> BlockChecks<'_> {
        BlockChecks {
            launch: self,
            cfg: self.cfg,
            block: 0,
            block_id: [0; 3],
            race: BlockRace::default(),
            shared_init: Vec::new(),
            metrics: Metrics::default(),
            sectors: Vec::new(),
            loads: SectorSet::default(),
            stores: SectorSet::default(),
            reports: ReportSet::default(),
            ranges: Vec::new(),
        }
    }

    /// Finishes the launch: compares global accesses across blocks, counts unique bytes and
    /// returns the results.
    pub(crate) fn finish(self) -> Outcome {
        let geo = self.geo;
        let mut acc = self.acc.into_inner().unwrap_or_else(|e| e.into_inner());
        if self.cfg.racecheck {
            let mut found = |hazard, a: GRange, b: GRange, address| {
                let kinds = match hazard {
                    Hazard::WriteAfterWrite => (AccessKind::Store, AccessKind::Store),
                    _ => (AccessKind::Store, AccessKind::Load),
                };
                let site = |g: GRange, kind| AccessSite {
                    line: g.line as usize,
                    block: geo.block_id(g.block),
                    thread: geo.thread_id(g.tid_at(address)),
                    kind,
                };
                acc.reports.add(Report {
                    kind: ReportKind::Race(hazard),
                    space: MemSpace::Global,
                    address,
                    first: site(a, kinds.0),
                    second: Some(site(b, kinds.1)),
                    count: 1,
                });
            };
            let mut ranges = std::mem::take(&mut acc.ranges);
            cross_block::cross_block(&mut ranges, &mut found);
        }
        let metrics = self.cfg.metrics.then(|| {
            let mut m = std::mem::take(&mut acc.metrics);
            m.unique_load_bytes = acc.loads.len() * SECTOR_BYTES;
            m.unique_store_bytes = acc.stores.len() * SECTOR_BYTES;
            m.unique_bytes = acc.loads.union_len(&acc.stores) * SECTOR_BYTES;
            m.finish_lines();
            m
        });
        let (reports, reports_omitted) = acc.reports.into_sorted(MAX_REPORTS);
        Outcome {
            metrics,
            reports,
            reports_omitted,
        }
    }
}

/// Check state of the block a worker is running.
pub(crate) struct BlockChecks<'l> {
    launch: &'l LaunchChecks,
    cfg: CheckConfig,
    block: u64,
    block_id: [u32; 3],
    race: BlockRace,
    /// Shared bytes written by this block, one bit each.
    shared_init: Vec<u64>,
    metrics: Metrics,
    /// Sectors of the current request (scratch).
    sectors: Vec<u64>,
    /// Sectors this worker loaded / stored in the launch (merged into the launch on drop).
    loads: SectorSet,
    stores: SectorSet,
    reports: ReportSet,
    ranges: Vec<GRange>,
}

impl BlockChecks<'_> {
    /// Starts block `linear` (x-fastest linear index) with index `id`.
    pub(crate) fn start(&mut self, linear: u64, id: [u32; 3]) {
        self.block = linear;
        self.block_id = id;
        let geo = &self.launch.geo;
        if self.cfg.racecheck {
            self.race.start(geo.threads(), geo.shared_bytes);
        }
        if self.cfg.initcheck {
            let words = geo.shared_bytes.div_ceil(64);
            self.shared_init.clear();
            self.shared_init.resize(words, 0);
        }
    }

    fn site(&self, line: u32, tid: u32, kind: AccessKind) -> AccessSite {
        AccessSite {
            line: line as usize,
            block: self.block_id,
            thread: self.launch.geo.thread_id(tid),
            kind,
        }
    }

    /// One warp-level global or shared memory instruction.
    pub(crate) fn access(&mut self, ev: &WarpAccess<'_>) {
        if self.cfg.metrics {
            self.metrics.record_access(
                ev.space,
                ev.kind,
                ev.line,
                ev.size,
                ev.lanes,
                &mut self.sectors,
            );
            if !self.sectors.is_empty() {
                let set = if ev.kind == AccessKind::Load {
                    &mut self.loads
                } else {
                    &mut self.stores
                };
                set.insert_all(&self.sectors);
                self.sectors.clear();
            }
        }
        if self.cfg.initcheck {
            self.initcheck(ev);
        }
        if self.cfg.racecheck && ev.kind != AccessKind::Atomic && !ev.strong {
            let mut hz: Vec<RawHazard> = Vec::new();
            self.race.access(ev, &mut |h| hz.push(h));
            for h in hz {
                let first_kind = match h.hazard {
                    Hazard::WriteAfterRead => AccessKind::Load,
                    _ => AccessKind::Store,
                };
                let r = Report {
                    kind: ReportKind::Race(h.hazard),
                    space: ev.space,
                    address: h.addr,
                    first: self.site(h.first.line, h.first.tid, first_kind),
                    second: Some(self.site(h.line, h.tid, ev.kind)),
                    count: 1,
                };
                self.reports.add(r);
            }
        }
    }

    fn initcheck(&mut self, ev: &WarpAccess<'_>) {
        let reads = ev.kind != AccessKind::Store;
        let writes = ev.kind != AccessKind::Load;
        let size = ev.size as u64;
        for l in ev.lanes {
            let tid = ev.warp * 32 + l.lane as u32;
            let uninit = match ev.space {
                MemSpace::Global => (reads && l.uninit).then_some(l.addr),
                MemSpace::Shared => {
                    let (w, b) = ((l.addr / 64) as usize, l.addr % 64);
                    match self.shared_init.get_mut(w) {
                        // Aligned accesses never cross a 64-byte word of the bitmap.
                        Some(word) if b + size <= 64 && size < 64 => {
                            let mask = ((1u64 << size) - 1) << b;
                            let missing = !*word & mask;
                            if writes {
                                *word |= mask;
                            }
                            (reads && missing != 0)
                                .then(|| w as u64 * 64 + missing.trailing_zeros() as u64)
                        }
                        _ => self.shared_init_slow(l.addr, size, reads, writes),
                    }
                }
            };
            if let Some(address) = uninit {
                let r = Report {
                    kind: ReportKind::Uninitialized,
                    space: ev.space,
                    address,
                    first: self.site(ev.line, tid, ev.kind),
                    second: None,
                    count: 1,
                };
                self.reports.add(r);
            }
        }
    }

    /// [`BlockChecks::initcheck`] of shared bytes for an access crossing a bitmap word: the
    /// first unwritten byte read, after marking written bytes.
    fn shared_init_slow(&mut self, addr: u64, size: u64, reads: bool, writes: bool) -> Option<u64> {
        let mut first = None;
        for a in addr..addr.saturating_add(size) {
            let (w, b) = ((a / 64) as usize, a % 64);
            let Some(word) = self.shared_init.get_mut(w) else {
                break;
            };
            if reads && first.is_none() && *word >> b & 1 == 0 {
                first = Some(a);
            }
            if writes {
                *word |= 1 << b;
            }
        }
        first
    }

    /// A block barrier completed (every thread of the block that has not exited arrived).
    pub(crate) fn barrier(&mut self) {
        if self.cfg.racecheck {
            self.race.barrier();
        }
        if self.cfg.metrics {
            self.metrics.barriers += 1;
        }
    }

    /// A warp-synchronous instruction completed for the lanes in `mask` of `warp`.
    pub(crate) fn warp_sync(&mut self, warp: u32, mask: u32) {
        if self.cfg.racecheck {
            self.race.warp_sync(warp, mask);
        }
    }

    /// The warp-level instruction at `pc` executed by `active` lanes (guard true).
    #[inline]
    pub(crate) fn instruction(&mut self, pc: u32, active: u32) {
        if self.cfg.metrics {
            let class = self.launch.classes.get(pc as usize).copied();
            self.count(class.unwrap_or(InstrClass::Other), active);
        }
    }

    /// Counts one warp-level instruction of `class` executed by `active` lanes.
    #[inline]
    pub(crate) fn count(&mut self, class: InstrClass, active: u32) {
        if self.cfg.metrics {
            self.metrics.instructions_by_class[class as usize] += 1;
            self.metrics.thread_instructions_by_class[class as usize] += active as u64;
        }
    }

    /// Ends the block and merges what it found into the launch.
    pub(crate) fn end(&mut self) {
        if self.cfg.racecheck {
            self.race.global_ranges(self.block, &mut self.ranges);
        }
        let mut acc = self.launch.acc.lock().unwrap_or_else(|e| e.into_inner());
        if self.cfg.metrics {
            acc.metrics.add(&self.metrics);
        }
        if !self.reports.is_empty() {
            acc.reports.merge(&mut self.reports);
        }
        acc.ranges.append(&mut self.ranges);
        drop(acc);
        self.metrics = Metrics::default();
    }
}

impl Drop for BlockChecks<'_> {
    /// Merges the worker's unique-sector sets into the launch.
    fn drop(&mut self) {
        if self.cfg.metrics {
            let mut acc = self.launch.acc.lock().unwrap_or_else(|e| e.into_inner());
            acc.loads.merge(&self.loads);
            acc.stores.merge(&self.stores);
        }
    }
}
