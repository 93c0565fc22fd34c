//! Memory-traffic metrics of a launch, as Nsight Compute would count them for convergent code:
//! one request per warp-level execution of a memory instruction, 32-byte sectors per global
//! request, shared-memory wavefronts per request (bank conflicts), unique bytes (first touch of
//! each 32-byte sector, a lower bound on DRAM traffic), per-request coalescing (ideal sectors,
//! uncoalesced requests by PTX line, see `coalesce.rs`), instruction counts by class, barriers.
//!
//! The counters live here; the table that `Display` prints is in `metrics_table.rs`, the
//! sector and bank arithmetic in `traffic.rs`.

use super::coalesce::{self, UncoalescedLine};
use super::report::{AccessKind, MemSpace};
use super::traffic::{push_sectors, wavefronts, SECTOR_BYTES};
use super::LaneAccess;

macro_rules! instr_classes {
    ($($(#[$doc:meta])* $name:ident = $label:literal,)*) => {
        /// Class of a dynamic instruction, for [`Metrics::instructions_by_class`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum InstrClass { $($(#[$doc])* $name,)* }

        impl InstrClass {
            /// Every class, in index order.
            pub const ALL: &'static [InstrClass] = &[$(InstrClass::$name,)*];
            /// Number of classes.
            pub const COUNT: usize = Self::ALL.len();
            /// Short name used in the metrics table.
            pub fn name(self) -> &'static str {
                match self { $(InstrClass::$name => $label,)* }
            }
        }
    };
}

instr_classes! {
    /// Integer and bit arithmetic (add, mul, shifts, logic, bfe, popc, ...).
    Int = "int",
    /// Half-precision arithmetic (f16, f16x2, bf16, bf16x2).
    F16 = "f16/bf16",
    /// Single-precision arithmetic.
    F32 = "f32",
    /// Double-precision arithmetic.
    F64 = "f64",
    /// Type conversions (`cvt`).
    Convert = "convert",
    /// Moves, packs, selects.
    Move = "move",
    /// Comparisons (`setp`, `set`).
    Compare = "compare",
    /// `ld.global` (and generic loads that resolved to global memory).
    GlobalLoad = "ld.global",
    /// `st.global`.
    GlobalStore = "st.global",
    /// `ld.shared`.
    SharedLoad = "ld.shared",
    /// `st.shared`.
    SharedStore = "st.shared",
    /// `ld.local`.
    LocalLoad = "ld.local",
    /// `st.local`.
    LocalStore = "st.local",
    /// `ld.param` and `ld.const`.
    ParamLoad = "ld.param/const",
    /// Loads through generic addresses (when the executor does not classify them by window).
    GenericLoad = "ld (generic)",
    /// Stores through generic addresses.
    GenericStore = "st (generic)",
    /// Atomics and reductions (`atom`, `red`), any space.
    Atomic = "atomic",
    /// Branches.
    Branch = "branch",
    /// Block barriers (`bar`, `barrier`).
    Barrier = "barrier",
    /// Warp-synchronous instructions (`shfl`, `vote`, `bar.warp.sync`, `redux`, `match`, ...).
    WarpSync = "warp sync",
    /// Calls, returns, exits.
    Control = "control",
    /// Everything else.
    Other = "other",
}

/// Memory-traffic and instruction metrics of one launch.
///
/// A request is one warp-level execution of a memory instruction by its active lanes (the
/// simulator executes a warp's lanes together, so for convergent code this is exactly the
/// hardware's grouping of the k-th execution of an instruction across the lanes of a warp).
///
/// ```
/// use ptxsim::{Arg, Device, LaunchConfig, Module, Options};
///
/// let ptx = r#"
/// .version 7.0
/// .target sm_80
/// .address_size 64
/// .visible .entry copy(.param .u64 src, .param .u64 dst)
/// {
///     .reg .b32 %r<2>; .reg .f32 %f<2>; .reg .b64 %rd<6>;
///     ld.param.u64 %rd1, [src];
///     ld.param.u64 %rd2, [dst];
///     mov.u32 %r1, %tid.x;
///     mul.wide.u32 %rd3, %r1, 4;
///     add.s64 %rd4, %rd1, %rd3;
///     add.s64 %rd5, %rd2, %rd3;
///     ld.global.f32 %f1, [%rd4];
///     st.global.f32 [%rd5], %f1;
///     ret;
/// }
/// "#;
/// let m = Module::parse(ptx)?;
/// let mut dev = Device::with_options(Options { metrics: true, ..Options::default() });
/// let (src, dst) = (dev.alloc(4096)?, dev.alloc(4096)?);
/// dev.write_slice(src, &[1.0f32; 1024])?;
/// let cfg = LaunchConfig { grid: [1, 1, 1], block: [1024, 1, 1], shared_mem_bytes: 0 };
/// let stats = dev.launch(&m, "copy", cfg, &[Arg::Ptr(src), Arg::Ptr(dst)])?;
/// let metrics = stats.metrics.expect("metrics are on");
/// assert_eq!(metrics.global_load_requests, 32); // one per warp
/// assert_eq!(metrics.sectors_per_request(), 4.0); // 32 lanes x 4 bytes = 4 sectors
/// assert_eq!(metrics.unique_bytes, 8192); // 4 KiB read + 4 KiB written
/// println!("{metrics}");
/// # Ok::<(), ptxsim::SimError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Warp-level instruction executions by class, indexed by `InstrClass as usize`.
    pub instructions_by_class: [u64; InstrClass::COUNT],
    /// Thread-level instruction executions (active lanes) by class.
    pub thread_instructions_by_class: [u64; InstrClass::COUNT],
    /// Global load requests.
    pub global_load_requests: u64,
    /// Global store requests.
    pub global_store_requests: u64,
    /// Global atomic requests.
    pub global_atomic_requests: u64,
    /// Distinct 32-byte sectors per load request, summed.
    pub global_load_sectors: u64,
    /// Distinct 32-byte sectors per store request, summed.
    pub global_store_sectors: u64,
    /// Distinct 32-byte sectors per atomic request, summed.
    pub global_atomic_sectors: u64,
    /// Ideal sectors of load requests: per request, `ceil(distinct bytes its active lanes
    /// read / 32)`, summed (a broadcast counts its bytes once).
    pub global_load_ideal_sectors: u64,
    /// Ideal sectors of store requests, summed (as for loads).
    pub global_store_ideal_sectors: u64,
    /// Ideal sectors of atomic requests, summed (as for loads).
    pub global_atomic_ideal_sectors: u64,
    /// Load requests that touched more sectors than their ideal.
    pub uncoalesced_load_requests: u64,
    /// Store requests that touched more sectors than their ideal.
    pub uncoalesced_store_requests: u64,
    /// Atomic requests that touched more sectors than their ideal.
    pub uncoalesced_atomic_requests: u64,
    /// The instructions that made uncoalesced requests, one entry per PTX line, ordered by
    /// excess sectors (most first), then by line: every such instruction of the launch.
    pub uncoalesced_lines: Vec<UncoalescedLine>,
    /// Bytes requested by active lanes of load requests.
    pub global_load_bytes: u64,
    /// Bytes requested by active lanes of store requests.
    pub global_store_bytes: u64,
    /// 32 x the number of distinct sectors loaded in the launch.
    pub unique_load_bytes: u64,
    /// 32 x the number of distinct sectors stored (or updated atomically) in the launch.
    pub unique_store_bytes: u64,
    /// 32 x the number of distinct sectors touched in the launch: a lower bound on DRAM
    /// traffic (each sector read or written at least once, assuming a cold cache).
    pub unique_bytes: u64,
    /// Shared load requests.
    pub shared_load_requests: u64,
    /// Shared store requests.
    pub shared_store_requests: u64,
    /// Shared atomic requests.
    pub shared_atomic_requests: u64,
    /// Shared-memory wavefronts of load requests, summed.
    pub shared_load_wavefronts: u64,
    /// Shared-memory wavefronts of store requests, summed.
    pub shared_store_wavefronts: u64,
    /// Wavefronts the load requests would need without bank conflicts (one per phase with
    /// an active lane).
    pub shared_load_ideal_wavefronts: u64,
    /// Wavefronts the store requests would need without bank conflicts.
    pub shared_store_ideal_wavefronts: u64,
    /// Block barriers completed (summed over blocks).
    pub barriers: u64,
}

/// `a / b`, 0 when `b` is 0.
pub(super) fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl Metrics {
    /// Warp-level executions of instructions of `class`.
    pub fn instructions(&self, class: InstrClass) -> u64 {
        self.instructions_by_class[class as usize]
    }

    /// Thread-level executions of instructions of `class`.
    pub fn thread_instructions(&self, class: InstrClass) -> u64 {
        self.thread_instructions_by_class[class as usize]
    }

    /// Average sectors per global load request (0 without requests).
    pub fn load_sectors_per_request(&self) -> f64 {
        ratio(self.global_load_sectors, self.global_load_requests)
    }

    /// Average sectors per global store request (0 without requests).
    pub fn store_sectors_per_request(&self) -> f64 {
        ratio(self.global_store_sectors, self.global_store_requests)
    }

    /// Average sectors per global load or store request (0 without requests).
    pub fn sectors_per_request(&self) -> f64 {
        ratio(
            self.global_load_sectors + self.global_store_sectors,
            self.global_load_requests + self.global_store_requests,
        )
    }

    /// Average wavefronts per shared load request (1 for a conflict-free 32-bit access).
    pub fn shared_load_wavefronts_per_request(&self) -> f64 {
        ratio(self.shared_load_wavefronts, self.shared_load_requests)
    }

    /// Average wavefronts per shared store request.
    pub fn shared_store_wavefronts_per_request(&self) -> f64 {
        ratio(self.shared_store_wavefronts, self.shared_store_requests)
    }

    /// Extra wavefronts caused by bank conflicts (loads and stores).
    pub fn shared_bank_conflicts(&self) -> u64 {
        self.shared_load_wavefronts + self.shared_store_wavefronts
            - self.shared_load_ideal_wavefronts
            - self.shared_store_ideal_wavefronts
    }

    /// Bytes requested by global loads and stores.
    pub fn requested_bytes(&self) -> u64 {
        self.global_load_bytes + self.global_store_bytes
    }

    /// Global requests: loads, stores and atomics.
    pub fn global_requests(&self) -> u64 {
        self.global_load_requests + self.global_store_requests + self.global_atomic_requests
    }

    /// Sectors of all global requests (loads, stores and atomics), summed per request.
    pub fn global_sectors(&self) -> u64 {
        self.global_load_sectors + self.global_store_sectors + self.global_atomic_sectors
    }

    /// Ideal sectors of all global requests (loads, stores and atomics).
    pub fn global_ideal_sectors(&self) -> u64 {
        self.global_load_ideal_sectors
            + self.global_store_ideal_sectors
            + self.global_atomic_ideal_sectors
    }

    /// Global requests (loads, stores and atomics) that touched more sectors than their ideal.
    pub fn uncoalesced_requests(&self) -> u64 {
        self.uncoalesced_load_requests
            + self.uncoalesced_store_requests
            + self.uncoalesced_atomic_requests
    }

    /// Sectors of global requests beyond their ideal: 0 when every request is coalesced.
    pub fn excess_sectors(&self) -> u64 {
        self.global_sectors() - self.global_ideal_sectors()
    }

    /// Sectors of load requests beyond their ideal.
    pub fn excess_load_sectors(&self) -> u64 {
        self.global_load_sectors - self.global_load_ideal_sectors
    }

    /// Sectors of store requests beyond their ideal.
    pub fn excess_store_sectors(&self) -> u64 {
        self.global_store_sectors - self.global_store_ideal_sectors
    }

    /// Ideal over actual sectors of all global requests: 1 when fully coalesced (and without
    /// requests).
    pub fn coalescing_efficiency(&self) -> f64 {
        let s = self.global_sectors();
        if s == 0 {
            1.0
        } else {
            self.global_ideal_sectors() as f64 / s as f64
        }
    }

    /// Adds every counter of `o` (unique bytes included: callers merge them only when they
    /// describe disjoint launches). `uncoalesced_lines` of both must be sorted by line and kind
    /// (as while a launch runs); [`Metrics::finish_lines`] orders them for reading.
    pub(super) fn add(&mut self, o: &Metrics) {
        for (a, b) in self
            .instructions_by_class
            .iter_mut()
            .zip(&o.instructions_by_class)
        {
            *a += b;
        }
        for (a, b) in self
            .thread_instructions_by_class
            .iter_mut()
            .zip(&o.thread_instructions_by_class)
        {
            *a += b;
        }
        self.global_load_requests += o.global_load_requests;
        self.global_store_requests += o.global_store_requests;
        self.global_atomic_requests += o.global_atomic_requests;
        self.global_load_sectors += o.global_load_sectors;
        self.global_store_sectors += o.global_store_sectors;
        self.global_atomic_sectors += o.global_atomic_sectors;
        self.global_load_ideal_sectors += o.global_load_ideal_sectors;
        self.global_store_ideal_sectors += o.global_store_ideal_sectors;
        self.global_atomic_ideal_sectors += o.global_atomic_ideal_sectors;
        self.uncoalesced_load_requests += o.uncoalesced_load_requests;
        self.uncoalesced_store_requests += o.uncoalesced_store_requests;
        self.uncoalesced_atomic_requests += o.uncoalesced_atomic_requests;
        coalesce::merge_lines(&mut self.uncoalesced_lines, &o.uncoalesced_lines);
        self.global_load_bytes += o.global_load_bytes;
        self.global_store_bytes += o.global_store_bytes;
        self.unique_load_bytes += o.unique_load_bytes;
        self.unique_store_bytes += o.unique_store_bytes;
        self.unique_bytes += o.unique_bytes;
        self.shared_load_requests += o.shared_load_requests;
        self.shared_store_requests += o.shared_store_requests;
        self.shared_atomic_requests += o.shared_atomic_requests;
        self.shared_load_wavefronts += o.shared_load_wavefronts;
        self.shared_store_wavefronts += o.shared_store_wavefronts;
        self.shared_load_ideal_wavefronts += o.shared_load_ideal_wavefronts;
        self.shared_store_ideal_wavefronts += o.shared_store_ideal_wavefronts;
        self.barriers += o.barriers;
    }

    /// Orders `uncoalesced_lines` for reading (most excess sectors first), at launch end.
    pub(super) fn finish_lines(&mut self) {
        coalesce::sort_by_excess(&mut self.uncoalesced_lines);
    }

    /// Counts one warp-level memory request of the instruction at PTX `line`; pushes the global
    /// sectors it touched (deduplicated within the request) onto `sectors` for the
    /// unique-bytes count.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_access(
        &mut self,
        space: MemSpace,
        kind: AccessKind,
        line: u32,
        size: u32,
        lanes: &[LaneAccess],
        sectors: &mut Vec<u64>,
    ) {
        if lanes.is_empty() {
            return;
        }
        match space {
            MemSpace::Global => {
                let start = sectors.len();
                push_sectors(lanes, size, sectors);
                let n = (sectors.len() - start) as u64;
                let bytes = lanes.len() as u64 * size as u64;
                let ideal = coalesce::distinct_bytes(lanes, size).div_ceil(SECTOR_BYTES);
                let uncoalesced = n > ideal;
                let (requests, total, ideal_total, bad) = match kind {
                    AccessKind::Load => {
                        self.global_load_bytes += bytes;
                        (
                            &mut self.global_load_requests,
                            &mut self.global_load_sectors,
                            &mut self.global_load_ideal_sectors,
                            &mut self.uncoalesced_load_requests,
                        )
                    }
                    AccessKind::Store => {
                        self.global_store_bytes += bytes;
                        (
                            &mut self.global_store_requests,
                            &mut self.global_store_sectors,
                            &mut self.global_store_ideal_sectors,
                            &mut self.uncoalesced_store_requests,
                        )
                    }
                    AccessKind::Atomic => (
                        &mut self.global_atomic_requests,
                        &mut self.global_atomic_sectors,
                        &mut self.global_atomic_ideal_sectors,
                        &mut self.uncoalesced_atomic_requests,
                    ),
                };
                *requests += 1;
                *total += n;
                *ideal_total += ideal;
                if uncoalesced {
                    *bad += 1;
                    coalesce::add_line(&mut self.uncoalesced_lines, line, kind, n, ideal);
                }
            }
            MemSpace::Shared => {
                if kind == AccessKind::Atomic {
                    self.shared_atomic_requests += 1;
                    return;
                }
                let (w, ideal) = wavefronts(lanes, size);
                if kind == AccessKind::Load {
                    self.shared_load_requests += 1;
                    self.shared_load_wavefronts += w;
                    self.shared_load_ideal_wavefronts += ideal;
                } else {
                    self.shared_store_requests += 1;
                    self.shared_store_wavefronts += w;
                    self.shared_store_ideal_wavefronts += ideal;
                }
            }
        }
    }
}
