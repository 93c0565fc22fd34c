//! Race and initialization reports: what tests and tools read, and how a launch's reports are
//! deduplicated (one [`Report`] per kind, space and pair of PTX lines, with a count) and ordered
//! deterministically whatever the order in which parallel block workers found them.

use super::fasthash::FastMap;
use std::fmt;

/// Memory space of a checked access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemSpace {
    /// Global memory (device allocations).
    Global,
    /// The block's shared memory.
    Shared,
}

/// What an access did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccessKind {
    /// A load (`ld`).
    Load,
    /// A store (`st`).
    Store,
    /// An atomic read-modify-write (`atom`, `red`).
    Atomic,
}

impl AccessKind {
    fn name(self) -> &'static str {
        match self {
            AccessKind::Load => "read",
            AccessKind::Store => "write",
            AccessKind::Atomic => "atomic",
        }
    }
}

/// The kind of data race between two accesses by different threads that nothing orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hazard {
    /// A read of bytes an unordered earlier write (in simulation order) wrote.
    ReadAfterWrite,
    /// A write of bytes an unordered earlier read (in simulation order) read.
    WriteAfterRead,
    /// Two unordered writes of the same bytes.
    WriteAfterWrite,
    /// A read and a write of the same global bytes by threads of different blocks, which are
    /// never ordered within a launch; which one the simulator ran first is not meaningful.
    /// `first` is the write, `second` the read.
    ReadWrite,
}

impl Hazard {
    fn name(self) -> &'static str {
        match self {
            Hazard::ReadAfterWrite => "read-after-write",
            Hazard::WriteAfterRead => "write-after-read",
            Hazard::WriteAfterWrite => "write-after-write",
            Hazard::ReadWrite => "read-write (different blocks)",
        }
    }
}

/// What a [`Report`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReportKind {
    /// A data race (racecheck).
    Race(Hazard),
    /// A read of bytes never written (initcheck): global memory not written by the host, a
    /// zero-filling allocation or the kernel; shared memory not written by this block.
    Uninitialized,
}

/// One access named by a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AccessSite {
    /// 1-based PTX line of the instruction.
    pub line: usize,
    /// Block index of the thread.
    pub block: [u32; 3],
    /// Thread index within the block.
    pub thread: [u32; 3],
    /// What the access did.
    pub kind: AccessKind,
}

impl AccessSite {
    /// Launch order of the thread: blocks and threads in x-fastest order.
    fn order(&self) -> (u32, u32, u32, u32, u32, u32) {
        let (b, t) = (self.block, self.thread);
        (b[2], b[1], b[0], t[2], t[1], t[0])
    }
}

impl fmt::Display for AccessSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (b, t) = (self.block, self.thread);
        write!(
            f,
            "{} by block ({},{},{}) thread ({},{},{}) at PTX line {}",
            self.kind.name(),
            b[0],
            b[1],
            b[2],
            t[0],
            t[1],
            t[2],
            self.line
        )
    }
}

/// A race or an uninitialized read found in a launch.
///
/// ```
/// use ptxsim::{Device, Hazard, LaunchConfig, MemSpace, Module, ReportKind};
///
/// // Every thread writes the same shared word: a write-after-write race.
/// let ptx = r#"
/// .version 7.0
/// .target sm_80
/// .address_size 64
/// .visible .entry clash()
/// {
///     .shared .align 4 .b8 s[4];
///     .reg .b32 %r<2>;
///     mov.u32 %r1, %tid.x;
///     st.shared.u32 [s], %r1;
///     ret;
/// }
/// "#;
/// let line = ptx.lines().position(|l| l.contains("st.shared")).unwrap() + 1;
/// let m = Module::parse(ptx)?;
/// let mut dev = Device::new();
/// let cfg = LaunchConfig { grid: [1, 1, 1], block: [64, 1, 1], shared_mem_bytes: 0 };
/// let stats = dev.launch(&m, "clash", cfg, &[])?;
/// let r = &stats.reports[0];
/// assert_eq!(r.kind, ReportKind::Race(Hazard::WriteAfterWrite));
/// assert_eq!((r.space, r.address), (MemSpace::Shared, 0));
/// assert_eq!(r.lines(), (line, line));
/// assert_eq!(r.first.thread, [0, 0, 0]);
/// assert_eq!(r.second.unwrap().thread, [1, 0, 0]);
/// assert_eq!(r.count, 63); // threads 1..64 each overwrite an unordered write
/// println!("{r}");
/// # Ok::<(), ptxsim::SimError>(())
/// ```
///
/// Reports are merged by (kind, space, first line, second line): `count` says how many hazards
/// were merged (one per lane access within a block; one per overlapping access range for
/// global races across blocks), and the sites and address are those of the first hazard in
/// launch order (lowest block, then address, then threads), so reports do not depend on how
/// blocks were scheduled on worker threads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Race or uninitialized read.
    pub kind: ReportKind,
    /// Memory space of the bytes.
    pub space: MemSpace,
    /// The first conflicting (or uninitialized) byte: an address for global memory, a byte
    /// offset into the block's shared memory for shared memory.
    pub address: u64,
    /// For races the earlier access (for [`Hazard::ReadWrite`] the write); for uninitialized
    /// reads the read.
    pub first: AccessSite,
    /// For races the later access; `None` for uninitialized reads.
    pub second: Option<AccessSite>,
    /// Number of hazards merged into this report (at least 1).
    pub count: u64,
}

impl Report {
    /// Whether this is a race report.
    pub fn is_race(&self) -> bool {
        matches!(self.kind, ReportKind::Race(_))
    }

    /// The PTX lines named: `(first, second)`, `second` 0 when there is none.
    pub fn lines(&self) -> (usize, usize) {
        (self.first.line, self.second.map_or(0, |s| s.line))
    }

    pub(super) fn key(&self) -> Key {
        Key {
            kind: self.kind,
            space: self.space,
            first: self.first.line,
            second: self.second.map_or(0, |s| s.line),
        }
    }

    /// Launch order of the hazard, used to choose one representative per key.
    #[allow(clippy::type_complexity)]
    fn order(
        &self,
    ) -> (
        (u32, u32, u32, u32, u32, u32),
        u64,
        (u32, u32, u32, u32, u32, u32),
    ) {
        let second = self.second.map_or((0, 0, 0, 0, 0, 0), |s| s.order());
        let first = self.first.order();
        // Order by the block of the later access when it has one (the block that saw the
        // hazard), then address, then the threads.
        match self.second {
            Some(_) => (second, self.address, first),
            None => (first, self.address, second),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = match self.space {
            MemSpace::Global => format!("global memory at {:#x}", self.address),
            MemSpace::Shared => format!("shared memory at offset {:#x}", self.address),
        };
        match (self.kind, self.second) {
            (ReportKind::Race(h), Some(second)) => {
                write!(
                    f,
                    "{} race on {at}: {}, then {}",
                    h.name(),
                    self.first,
                    second
                )?;
            }
            (ReportKind::Race(h), None) => write!(f, "{} race on {at}: {}", h.name(), self.first)?,
            (ReportKind::Uninitialized, _) => {
                write!(f, "uninitialized read of {at}: {}", self.first)?
            }
        }
        if self.count > 1 {
            write!(f, " ({} occurrences)", self.count)?;
        }
        Ok(())
    }
}

/// Deduplication key of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Key {
    kind: ReportKind,
    space: MemSpace,
    first: usize,
    second: usize,
}

/// Reports merged by key; merging is order-independent (counts add, the representative is the
/// minimum in launch order).
#[derive(Default)]
pub(super) struct ReportSet {
    map: FastMap<Key, Report>,
}

impl ReportSet {
    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Adds one report (its `count` is added to an existing report of the same key).
    pub(super) fn add(&mut self, r: Report) {
        use std::collections::hash_map::Entry;
        match self.map.entry(r.key()) {
            Entry::Vacant(v) => {
                v.insert(r);
            }
            Entry::Occupied(mut o) => {
                let e = o.get_mut();
                let count = e.count + r.count;
                if r.order() < e.order() {
                    *e = r;
                }
                e.count = count;
            }
        }
    }

    /// Moves every report of `other` into `self`.
    pub(super) fn merge(&mut self, other: &mut ReportSet) {
        for (_, r) in other.map.drain() {
            self.add(r);
        }
    }

    /// The reports sorted by PTX lines (then kind, space), at most `cap` of them, and how many
    /// distinct reports were left out.
    pub(super) fn into_sorted(self, cap: usize) -> (Vec<Report>, u64) {
        let mut v: Vec<Report> = self.map.into_values().collect();
        v.sort_by_key(|r| {
            let k = r.key();
            (k.first, k.second, k.kind, k.space)
        });
        let omitted = v.len().saturating_sub(cap) as u64;
        v.truncate(cap);
        (v, omitted)
    }
}
