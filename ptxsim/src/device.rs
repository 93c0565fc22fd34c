//! [`Device`]: simulated global memory and kernel launches.

use crate::error::SimError;
use crate::exec::{self, LaunchCtx};
use crate::memory::GlobalMem;
use crate::module::Module;
use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

/// Largest kernel parameter block (bytes) CUDA accepts.
const MAX_PARAM_BYTES: usize = 32764;
/// The most blocks of a cooperative launch ([`Device::launch_cooperative`]): one worker thread
/// each. A GPU's limit is its SMs times the blocks one SM holds (132 x 8 of 256 threads on an
/// H100); test plans for small emulated devices stay far below this.
pub const MAX_COOPERATIVE_BLOCKS: u32 = 512;
/// Largest local memory per thread (bytes) CUDA accepts.
const MAX_LOCAL_BYTES: u64 = 512 * 1024;

/// Grid and block shape of a launch, plus dynamic shared memory bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads per block in x, y, z.
    pub block: [u32; 3],
    /// Bytes of dynamic (`.extern .shared`) shared memory.
    pub shared_mem_bytes: u32,
}

/// A kernel argument. Its size must equal the parameter's size in the PTX.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A `.u8`/`.s8`/`.b8` parameter.
    U8(u8),
    /// A 16-bit parameter.
    U16(u16),
    /// A 32-bit integer parameter.
    U32(u32),
    /// A 64-bit integer parameter.
    U64(u64),
    /// A 32-bit signed parameter.
    I32(i32),
    /// A 64-bit signed parameter.
    I64(i64),
    /// A `.f32` parameter.
    F32(f32),
    /// A `.f64` parameter.
    F64(f64),
    /// A device pointer (from [`Device::alloc`]).
    Ptr(u64),
    /// Raw bytes of a by-value struct parameter `.align N .b8 p[K]` (length must be K).
    Bytes(Vec<u8>),
}

impl Arg {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Arg::U8(v) => v.to_le_bytes().to_vec(),
            Arg::U16(v) => v.to_le_bytes().to_vec(),
            Arg::U32(v) => v.to_le_bytes().to_vec(),
            Arg::U64(v) | Arg::Ptr(v) => v.to_le_bytes().to_vec(),
            Arg::I32(v) => v.to_le_bytes().to_vec(),
            Arg::I64(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
            Arg::F64(v) => v.to_le_bytes().to_vec(),
            Arg::Bytes(b) => b.clone(),
        }
    }
}

/// Simulator options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Worker threads running blocks in parallel; 0 = `std::thread::available_parallelism`.
    pub threads: usize,
    /// Data races in shared and global memory, reported in [`LaunchStats::reports`].
    pub racecheck: bool,
    /// Reads of never-written global or shared memory, reported in [`LaunchStats::reports`].
    pub initcheck: bool,
    /// Memory-traffic metrics in [`LaunchStats::metrics`].
    pub metrics: bool,
    /// Maximum warp instructions executed by one block; exceeding it is [`SimError::StepLimit`].
    pub max_warp_steps: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 0,
            racecheck: true,
            initcheck: true,
            metrics: true,
            max_warp_steps: 50_000_000,
        }
    }
}

/// Result of a successful launch.
#[derive(Clone, Debug, Default)]
pub struct LaunchStats {
    /// Instructions executed, counted once per participating thread.
    pub thread_instructions: u64,
    /// Instructions executed, counted once per warp (group of converged lanes).
    pub warp_instructions: u64,
    /// Blocks run.
    pub blocks: u64,
    /// Threads run.
    pub threads: u64,
    /// Host wall-clock time of the launch.
    pub wall: Duration,
    /// Memory-traffic metrics (when [`Options::metrics`] is on).
    pub metrics: Option<crate::Metrics>,
    /// Races and uninitialized reads found ([`Options::racecheck`], [`Options::initcheck`]),
    /// sorted by PTX line, at most 100.
    pub reports: Vec<crate::Report>,
    /// Distinct reports left out of `reports`.
    pub reports_omitted: u64,
}

/// A plain scalar that can be copied to and from device memory (little-endian).
pub trait Scalar: Copy {
    /// Size in bytes.
    const SIZE: usize;
    /// Appends the little-endian bytes of `self`.
    fn write_le(self, out: &mut Vec<u8>);
    /// Reads a value from exactly `SIZE` little-endian bytes.
    fn read_le(b: &[u8]) -> Self;
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_le_bytes(a)
            }
        }
    )*};
}
scalar!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

/// A simulated GPU: global memory plus kernel launches.
pub struct Device {
    opts: Options,
    mem: GlobalMem,
    /// Addresses of module-level variables, per module id.
    module_vars: HashMap<u64, Vec<u64>>,
}

impl Default for Device {
    fn default() -> Self {
        Device::new()
    }
}

impl Device {
    /// A device with [`Options::default`].
    pub fn new() -> Device {
        Device::with_options(Options::default())
    }

    /// A device with the given options.
    pub fn with_options(o: Options) -> Device {
        Device {
            opts: o,
            mem: GlobalMem::new(),
            module_vars: HashMap::new(),
        }
    }

    /// Current options.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Replaces the options.
    pub fn set_options(&mut self, o: Options) {
        self.opts = o;
    }

    /// Allocates `bytes` of global memory (contents unspecified, zero in practice, and not
    /// marked initialized). The address is 256-byte aligned, never 0, and allocations are
    /// separated by unmapped gaps so that overruns fault.
    pub fn alloc(&mut self, bytes: usize) -> Result<u64, SimError> {
        self.mem
            .alloc(bytes, false)
            .ok_or_else(|| SimError::Memory(format!("cannot allocate {bytes} bytes")))
    }

    /// Allocates `bytes` of zeroed (initialized) global memory.
    pub fn alloc_zeroed(&mut self, bytes: usize) -> Result<u64, SimError> {
        self.mem
            .alloc(bytes, true)
            .ok_or_else(|| SimError::Memory(format!("cannot allocate {bytes} bytes")))
    }

    /// Frees an allocation; `ptr` must be the start of a live allocation.
    pub fn free(&mut self, ptr: u64) -> Result<(), SimError> {
        if self.mem.free(ptr) {
            Ok(())
        } else {
            Err(SimError::Memory(format!(
                "free of {ptr:#x}, which is not the start of a live allocation"
            )))
        }
    }

    /// Writes bytes at `ptr` (which may point inside an allocation).
    pub fn write(&mut self, ptr: u64, bytes: &[u8]) -> Result<(), SimError> {
        self.mem.write_bytes(ptr, bytes).map_err(|e| {
            SimError::Memory(format!(
                "host write of {} bytes at {ptr:#x}: {} (allocation {:?})",
                bytes.len(),
                e.kind,
                e.allocation
            ))
        })
    }

    /// Reads `len` bytes at `ptr`.
    pub fn read(&self, ptr: u64, len: usize) -> Result<Vec<u8>, SimError> {
        self.mem.read_bytes(ptr, len).map_err(|e| {
            SimError::Memory(format!(
                "host read of {len} bytes at {ptr:#x}: {} (allocation {:?})",
                e.kind, e.allocation
            ))
        })
    }

    /// Writes a slice of scalars at `ptr`.
    pub fn write_slice<T: Scalar>(&mut self, ptr: u64, data: &[T]) -> Result<(), SimError> {
        let mut b = Vec::with_capacity(data.len() * T::SIZE);
        for v in data {
            v.write_le(&mut b);
        }
        self.write(ptr, &b)
    }

    /// Reads `n` scalars at `ptr`.
    pub fn read_slice<T: Scalar>(&self, ptr: u64, n: usize) -> Result<Vec<T>, SimError> {
        let len = n.checked_mul(T::SIZE).ok_or_else(|| {
            SimError::Memory(format!(
                "host read of {n} elements at {ptr:#x}: size overflows"
            ))
        })?;
        let b = self.read(ptr, len)?;
        Ok(b.chunks_exact(T::SIZE).map(T::read_le).collect())
    }

    fn module_vars(&mut self, m: &Module) -> Result<Vec<u64>, SimError> {
        if let Some(v) = self.module_vars.get(&m.id) {
            return Ok(v.clone());
        }
        let mut addrs = Vec::new();
        for g in &m.globals {
            let a = self.alloc_zeroed(g.size.max(1))?;
            addrs.push(a);
        }
        for (g, a) in m.globals.iter().zip(&addrs) {
            let mut bytes = g.init.clone();
            for (off, t, add) in &g.relocs {
                let v = addrs[*t as usize].wrapping_add(*add as u64);
                if off + 8 <= bytes.len() {
                    bytes[*off..off + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            if !bytes.is_empty() {
                self.write(*a, &bytes)?;
            }
        }
        self.module_vars.insert(m.id, addrs.clone());
        Ok(addrs)
    }

    /// Launches entry `entry` of `module`.
    ///
    /// Blocks run in parallel over [`Options::threads`] workers; results do not depend on the
    /// scheduling. On a guest fault the fault of the lowest-numbered faulting block is returned.
    pub fn launch(
        &mut self,
        module: &Module,
        entry: &str,
        cfg: LaunchConfig,
        args: &[Arg],
    ) -> Result<LaunchStats, SimError> {
        let [gx, gy, gz] = cfg.grid;
        self.launch_blocks(module, entry, cfg, args, [0..gx, 0..gy, 0..gz])
    }

    /// A cooperative launch (`cuLaunchCooperativeKernel`) of entry `entry` of `module`: every
    /// block runs at once, each on its own worker thread, so that blocks may wait for each
    /// other (a grid-wide barrier: a block spinning on a flag should `nanosleep` in its loop,
    /// which yields the worker's CPU). At most [`MAX_COOPERATIVE_BLOCKS`] blocks. A block that
    /// fails makes the blocks sleeping in wait loops give up; the launch returns the failure.
    pub fn launch_cooperative(
        &mut self,
        module: &Module,
        entry: &str,
        cfg: LaunchConfig,
        args: &[Arg],
    ) -> Result<LaunchStats, SimError> {
        let [gx, gy, gz] = cfg.grid;
        let blocks = gx as u64 * gy as u64 * gz as u64;
        if blocks > MAX_COOPERATIVE_BLOCKS as u64 {
            return Err(SimError::InvalidArgument(format!(
                "cooperative launch of {entry}: grid {:?} has {blocks} blocks, more than the {MAX_COOPERATIVE_BLOCKS} the simulator runs at once",
                cfg.grid
            )));
        }
        self.launch_checked(module, entry, cfg, args, [0..gx, 0..gy, 0..gz], true)
    }

    /// [`Device::launch`] of only the blocks in `only`, a box of the grid (a range of block
    /// indices per dimension); the other blocks do not run. Every block sees the whole
    /// launch's `gridDim`, so a kernel whose blocks are independent computes exactly what
    /// the full launch computes in those blocks: a way to test the far end of a huge grid
    /// (64-bit offsets, say) without simulating the rest. Checks and metrics cover the blocks
    /// that ran; [`LaunchStats::blocks`] counts them.
    pub fn launch_blocks(
        &mut self,
        module: &Module,
        entry: &str,
        cfg: LaunchConfig,
        args: &[Arg],
        only: [Range<u32>; 3],
    ) -> Result<LaunchStats, SimError> {
        self.launch_checked(module, entry, cfg, args, only, false)
    }

    /// [`Device::launch_blocks`], cooperative or not.
    fn launch_checked(
        &mut self,
        module: &Module,
        entry: &str,
        cfg: LaunchConfig,
        args: &[Arg],
        only: [Range<u32>; 3],
        cooperative: bool,
    ) -> Result<LaunchStats, SimError> {
        use crate::check::{CheckConfig, Geometry, LaunchChecks};
        let k = module
            .kernel(entry)
            .ok_or_else(|| SimError::UnknownEntry(entry.to_string()))?;
        let cc = CheckConfig {
            racecheck: self.opts.racecheck,
            initcheck: self.opts.initcheck,
            metrics: self.opts.metrics,
        };
        if !cc.any() {
            return self.launch_with(module, entry, cfg, args, only, cooperative, &|| None);
        }
        let geo = Geometry {
            grid: cfg.grid,
            block: cfg.block,
            shared_bytes: (k.dyn_shared_offset + cfg.shared_mem_bytes as u64).max(k.static_shared)
                as usize,
        };
        let checks = LaunchChecks::for_kernel(cc, geo, &k.code);
        let factory = || Some(checks.receiver());
        let mut stats = self.launch_with(module, entry, cfg, args, only, cooperative, &factory)?;
        let finish = std::time::Instant::now();
        let out = checks.finish();
        stats.metrics = out.metrics;
        stats.reports = out.reports;
        stats.reports_omitted = out.reports_omitted;
        stats.wall += finish.elapsed();
        Ok(stats)
    }

    /// [`Device::launch_blocks`] with a receiver of execution events per worker.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_with(
        &mut self,
        module: &Module,
        entry: &str,
        cfg: LaunchConfig,
        args: &[Arg],
        only: [Range<u32>; 3],
        cooperative: bool,
        events: &crate::exec::events::EventsFactory<'_>,
    ) -> Result<LaunchStats, SimError> {
        let start = Instant::now();
        let k = module
            .kernel(entry)
            .ok_or_else(|| SimError::UnknownEntry(entry.to_string()))?;
        let [bx, by, bz] = cfg.block;
        let [gx, gy, gz] = cfg.grid;
        if bx == 0 || by == 0 || bz == 0 || gx == 0 || gy == 0 || gz == 0 {
            return Err(SimError::InvalidArgument(format!(
                "launch of {entry}: grid {:?} and block {:?} must have every dimension >= 1",
                cfg.grid, cfg.block
            )));
        }
        let nthreads = bx as u64 * by as u64 * bz as u64;
        if nthreads > 1024 || bz > 64 {
            return Err(SimError::InvalidArgument(format!(
                "launch of {entry}: block {:?} has {nthreads} threads (max 1024, z max 64)",
                cfg.block
            )));
        }
        if let Some(m) = k.maxntid {
            if nthreads > m[0] as u64 * m[1] as u64 * m[2] as u64 {
                return Err(SimError::InvalidArgument(format!(
                    "launch of {entry}: block {:?} exceeds the kernel's .maxntid {m:?}",
                    cfg.block
                )));
            }
        }
        if let Some(r) = k.reqntid {
            let want: u64 = r.iter().map(|v| *v as u64).product();
            if nthreads != want {
                return Err(SimError::InvalidArgument(format!(
                    "launch of {entry}: block {:?} differs from the kernel's .reqntid {r:?}",
                    cfg.block
                )));
            }
        }
        if gx > i32::MAX as u32 || gy > 65535 || gz > 65535 {
            return Err(SimError::InvalidArgument(format!(
                "launch of {entry}: grid {:?} exceeds (2^31-1, 65535, 65535)",
                cfg.grid
            )));
        }
        if only
            .iter()
            .zip(cfg.grid)
            .any(|(r, g)| r.start > r.end || r.end > g)
        {
            return Err(SimError::InvalidArgument(format!(
                "launch of {entry}: blocks {only:?} are not a box of the grid {:?}",
                cfg.grid
            )));
        }
        let only = only.map(|r| (r.start, r.end - r.start));
        let shared_total = k.dyn_shared_offset + cfg.shared_mem_bytes as u64;
        if shared_total > 232_448 {
            return Err(SimError::InvalidArgument(format!(
                "launch of {entry}: {shared_total} bytes of shared memory (static {} + dynamic {}) exceed 227 KiB",
                k.static_shared, cfg.shared_mem_bytes
            )));
        }
        if k.param_size > MAX_PARAM_BYTES {
            return Err(SimError::InvalidArgument(format!(
                "launch of {entry}: the kernel declares {} bytes of parameters, more than the {MAX_PARAM_BYTES} a GPU accepts",
                k.param_size
            )));
        }
        if k.local_size > MAX_LOCAL_BYTES {
            return Err(SimError::InvalidArgument(format!(
                "launch of {entry}: the kernel needs {} bytes of local memory per thread, more than the {MAX_LOCAL_BYTES} a GPU accepts",
                k.local_size
            )));
        }
        if args.len() != k.params.len() {
            return Err(SimError::InvalidArgument(format!(
                "launch of {entry}: expected {} arguments, given {}",
                k.params.len(),
                args.len()
            )));
        }
        let mut params = vec![0u8; k.param_size];
        for (a, p) in args.iter().zip(&k.params) {
            let b = a.bytes();
            if b.len() != p.size {
                return Err(SimError::InvalidArgument(format!(
                    "launch of {entry}: parameter `{}` is {} bytes, argument {a:?} is {} bytes",
                    p.name,
                    p.size,
                    b.len()
                )));
            }
            params[p.offset..p.offset + p.size].copy_from_slice(&b);
        }
        let syms = self.module_vars(module)?;
        let threads = if self.opts.threads == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            self.opts.threads
        };
        let cx = LaunchCtx {
            k,
            g: &self.mem,
            params: &params,
            syms: &syms,
            grid: cfg.grid,
            only,
            block: cfg.block,
            dyn_shared: cfg.shared_mem_bytes,
            max_steps: self.opts.max_warp_steps,
            cooperative,
            failed: std::sync::atomic::AtomicBool::new(false),
        };
        let c = exec::run(&cx, threads, events)?;
        let blocks = only.iter().map(|&(_, n)| n as u64).product::<u64>();
        Ok(LaunchStats {
            thread_instructions: c.thread_instructions,
            warp_instructions: c.warp_instructions,
            blocks,
            threads: blocks * nthreads,
            wall: start.elapsed(),
            ..LaunchStats::default()
        })
    }
}
