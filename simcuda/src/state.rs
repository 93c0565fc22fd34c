//! The emulated driver's state: one device, its primary context (memory on a
//! [`ptxsim::Device`], modules, functions, streams, events) and the calling thread's current
//! context. Everything runs synchronously under one global lock.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use ptxsim::{Arg, Device, FaultKind, LaunchConfig, Module, Options, SimError};

use crate::consts::*;
use crate::fatbin::LoadError;

/// The emulated device's name.
pub const DEVICE_NAME: &str = "ptxsim emulated CUDA device";
/// Compute capability when `SIMCUDA_COMPUTE_CAP` is not set: 12.0, the architecture of the
/// PTX that warpnorm's default build puts in its fatbins (`compute_120`), so that the code
/// that runs is the code an sm_120 GPU would run (see [`crate::fatbin::select_ptx`]).
pub const DEFAULT_ARCH: u32 = 120;
/// Streaming multiprocessors when `SIMCUDA_SM_COUNT` is not set.
pub const DEFAULT_SM_COUNT: u32 = 8;
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
/// Shared memory per block without opting in (bytes).
pub const SHARED_PER_BLOCK: u32 = 48 * 1024;
pub const REGISTERS_PER_SM: i32 = 65_536;
pub const MAX_GRID_X: u32 = i32::MAX as u32;
pub const MAX_GRID_YZ: u32 = 65_535;
/// Device memory the emulated device reports (bytes); ptxsim maps host memory lazily.
pub const TOTAL_MEM: u64 = 16 << 30;
/// CUDA 13.0, as `cuDriverGetVersion` reports it.
pub const DRIVER_VERSION: i32 = 13_000;

/// The emulated device: its compute capability and the per-SM limits of that architecture
/// (as NVIDIA's CUDA C++ Core Libraries `cuda::arch_traits` list them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// `major * 10 + minor`, e.g. 120.
    pub arch: u32,
    pub sm_count: u32,
    pub threads_per_sm: u32,
    pub blocks_per_sm: u32,
    pub shared_per_sm: u32,
    /// Shared memory the driver reserves per block (bytes).
    pub reserved_shared: u32,
}

impl Spec {
    /// The limits of architecture `arch` (`major * 10 + minor`), if known.
    pub fn of(arch: u32, sm_count: u32) -> Option<Spec> {
        let (shared_kib, blocks, threads) = match arch {
            75 => (64, 16, 1024),
            80 => (164, 32, 2048),
            86 | 88 => (100, 16, 1536),
            87 => (164, 16, 1536),
            89 => (100, 24, 1536),
            90 | 100 | 103 => (228, 32, 2048),
            110 => (228, 24, 1536),
            120 | 121 => (100, 24, 1536),
            _ => return None,
        };
        Some(Spec {
            arch,
            sm_count,
            threads_per_sm: threads,
            blocks_per_sm: blocks,
            shared_per_sm: shared_kib * 1024,
            reserved_shared: if arch >= 80 { 1024 } else { 0 },
        })
    }

    /// Shared memory per block with `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
    pub fn shared_optin(&self) -> u32 {
        self.shared_per_sm - self.reserved_shared
    }

    /// The device `SIMCUDA_COMPUTE_CAP` (`120`, `12.0`, `90`, ...; default 12.0) and
    /// `SIMCUDA_SM_COUNT` (default 8) describe, or why they describe none.
    pub fn from_env() -> Result<Spec, String> {
        let arch = match std::env::var("SIMCUDA_COMPUTE_CAP") {
            Err(_) => DEFAULT_ARCH,
            Ok(v) => parse_arch(&v)
                .ok_or_else(|| format!("SIMCUDA_COMPUTE_CAP={v:?} is not a compute capability"))?,
        };
        let sm_count = match std::env::var("SIMCUDA_SM_COUNT") {
            Err(_) => DEFAULT_SM_COUNT,
            Ok(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=1024).contains(n))
                .ok_or_else(|| format!("SIMCUDA_SM_COUNT={v:?} is not a count of 1 to 1024"))?,
        };
        Spec::of(arch, sm_count).ok_or_else(|| {
            format!(
                "compute capability {}.{} is not one simcuda knows",
                arch / 10,
                arch % 10
            )
        })
    }
}

/// `"12.0"` or `"120"` -> 120.
pub(crate) fn parse_arch(v: &str) -> Option<u32> {
    let v = v.trim();
    match v.split_once('.') {
        Some((major, minor)) => Some(major.parse::<u32>().ok()? * 10 + minor.parse::<u32>().ok()?),
        None => v.parse().ok(),
    }
}

/// The emulated device, fixed at the first `cuInit`.
pub fn spec() -> Result<Spec, String> {
    static SPEC: OnceLock<Result<Spec, String>> = OnceLock::new();
    SPEC.get_or_init(Spec::from_env).clone()
}

/// The value of device attribute `a`, or `None` for a value that is not a `CUdevice_attribute`.
pub fn device_attribute(s: &Spec, a: i32) -> Option<i32> {
    Some(match a {
        ATTR_MAX_THREADS_PER_BLOCK => MAX_THREADS_PER_BLOCK as i32,
        ATTR_MAX_BLOCK_DIM_X | ATTR_MAX_BLOCK_DIM_Y => 1024,
        ATTR_MAX_BLOCK_DIM_Z => 64,
        ATTR_MAX_GRID_DIM_X => MAX_GRID_X as i32,
        ATTR_MAX_GRID_DIM_Y | ATTR_MAX_GRID_DIM_Z => MAX_GRID_YZ as i32,
        ATTR_MAX_SHARED_MEMORY_PER_BLOCK => SHARED_PER_BLOCK as i32,
        ATTR_TOTAL_CONSTANT_MEMORY => 65_536,
        ATTR_WARP_SIZE => 32,
        ATTR_MAX_PITCH => i32::MAX,
        ATTR_MAX_REGISTERS_PER_BLOCK => 65_536,
        ATTR_CLOCK_RATE => 1_410_000,
        ATTR_TEXTURE_ALIGNMENT => 512,
        ATTR_GPU_OVERLAP => 1,
        ATTR_MULTIPROCESSOR_COUNT => s.sm_count as i32,
        ATTR_CAN_MAP_HOST_MEMORY => 0,
        ATTR_CONCURRENT_KERNELS => 1,
        ATTR_MEMORY_CLOCK_RATE => 1_215_000,
        ATTR_GLOBAL_MEMORY_BUS_WIDTH => 5120,
        ATTR_L2_CACHE_SIZE => 40 << 20,
        ATTR_MAX_THREADS_PER_MULTIPROCESSOR => s.threads_per_sm as i32,
        ATTR_ASYNC_ENGINE_COUNT => 2,
        ATTR_UNIFIED_ADDRESSING => 1,
        ATTR_COMPUTE_CAPABILITY_MAJOR => (s.arch / 10) as i32,
        ATTR_COMPUTE_CAPABILITY_MINOR => (s.arch % 10) as i32,
        ATTR_STREAM_PRIORITIES_SUPPORTED => 1,
        ATTR_GLOBAL_L1_CACHE_SUPPORTED | ATTR_LOCAL_L1_CACHE_SUPPORTED => 1,
        ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => s.shared_per_sm as i32,
        ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR => REGISTERS_PER_SM,
        ATTR_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO => 2,
        ATTR_COMPUTE_PREEMPTION_SUPPORTED => 1,
        ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => s.shared_optin() as i32,
        ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR => s.blocks_per_sm as i32,
        ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK => s.reserved_shared as i32,
        // No memory pools: cudarc then allocates with cuMemAlloc and frees with cuMemFree.
        ATTR_MEMORY_POOLS_SUPPORTED => 0,
        // Everything else (textures, surfaces, managed memory, cooperative and cluster
        // launches, IPC, ...) is absent.
        a if (1..=ATTR_LAST).contains(&a) => 0,
        _ => return None,
    })
}

/// A loaded module.
pub struct LoadedModule {
    pub module: Arc<Module>,
}

/// A function handle.
pub struct Function {
    pub module: Arc<Module>,
    pub module_handle: usize,
    pub name: String,
    pub static_shared: u32,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
    pub max_dynamic_shared: u32,
    /// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`.
    pub carveout: i32,
}

/// An event: its creation flags and the host time of its last record.
pub struct Event {
    pub flags: u32,
    pub recorded: Option<Instant>,
}

/// The primary context of device 0.
pub struct Context {
    pub handle: usize,
    pub refcount: u32,
    /// The sticky error after a failed launch: every later call in the context returns it.
    pub sticky: Option<CUresult>,
    pub dev: Device,
    /// Live allocations: base address -> size.
    pub allocs: BTreeMap<u64, usize>,
    pub allocated: u64,
    pub modules: HashMap<usize, LoadedModule>,
    pub functions: HashMap<usize, Function>,
    pub streams: HashSet<usize>,
    pub events: HashMap<usize, Event>,
    pub limits: HashMap<i32, usize>,
    pub cache_config: i32,
    pub flags: u32,
}

/// The driver: initialization, the primary context while retained, handles, and PTX parsed
/// once per text (kept across contexts).
pub struct Driver {
    /// The device, set by `cuInit`.
    pub spec: Option<Spec>,
    pub initialized: bool,
    pub ctx: Option<Context>,
    next_handle: usize,
    parsed: HashMap<(u64, usize), Arc<Module>>,
}

/// The global driver state, locked. A panic while it was held (caught at the FFI boundary)
/// does not poison it.
pub fn driver() -> MutexGuard<'static, Driver> {
    static D: OnceLock<Mutex<Driver>> = OnceLock::new();
    D.get_or_init(|| {
        Mutex::new(Driver {
            spec: None,
            initialized: false,
            ctx: None,
            next_handle: 0x5100_0000,
            parsed: HashMap::new(),
        })
    })
    .lock()
    .unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    /// The calling thread's context stack; the last entry is the current context.
    static CURRENT: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's current context handle (0: none).
pub fn current() -> usize {
    CURRENT.with(|c| c.borrow().last().copied().unwrap_or(0))
}

/// `cuCtxSetCurrent`: replaces the current context (0 unbinds it).
pub fn set_current(h: usize) {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.pop();
        if h != 0 {
            c.push(h);
        }
    })
}

/// `cuCtxPushCurrent`.
pub fn push_current(h: usize) {
    CURRENT.with(|c| c.borrow_mut().push(h))
}

/// `cuCtxPopCurrent`: the popped handle (0 when the stack was empty).
pub fn pop_current() -> usize {
    CURRENT.with(|c| c.borrow_mut().pop().unwrap_or(0))
}

/// Prints a diagnostic line to stderr.
pub fn say(msg: impl std::fmt::Display) {
    eprintln!("simcuda: {msg}");
}

impl Driver {
    /// The emulated device (the default one before `cuInit`).
    pub fn spec(&self) -> Spec {
        self.spec.unwrap_or_else(|| {
            Spec::of(DEFAULT_ARCH, DEFAULT_SM_COUNT).expect("the default architecture is known")
        })
    }

    /// A fresh handle value (never 0, 1 or 2, which are the special stream handles).
    pub fn handle(&mut self) -> usize {
        self.next_handle += 0x10;
        self.next_handle
    }

    /// The primary context, retained once more (created when none is alive).
    pub fn retain(&mut self) -> usize {
        if let Some(c) = self.ctx.as_mut() {
            c.refcount += 1;
            return c.handle;
        }
        let handle = self.handle();
        let mut dev = Device::new();
        dev.set_options(Options {
            threads: 0,
            racecheck: true,
            initcheck: true,
            metrics: false,
            ..Options::default()
        });
        self.ctx = Some(Context {
            handle,
            refcount: 1,
            sticky: None,
            dev,
            allocs: BTreeMap::new(),
            allocated: 0,
            modules: HashMap::new(),
            functions: HashMap::new(),
            streams: HashSet::new(),
            events: HashMap::new(),
            limits: HashMap::new(),
            cache_config: 0,
            flags: 0,
        });
        handle
    }

    /// Releases the primary context once; the last release destroys it (its memory, modules,
    /// streams, events and any sticky error go with it), as the real driver does.
    pub fn release(&mut self) -> CUresult {
        match self.ctx.as_mut() {
            None => CUDA_ERROR_INVALID_CONTEXT,
            Some(c) => {
                c.refcount -= 1;
                if c.refcount == 0 {
                    self.ctx = None;
                }
                CUDA_SUCCESS
            }
        }
    }

    /// The current context, when the driver is initialized, the calling thread has the live
    /// context current and it has no sticky error.
    pub fn ctx(&mut self) -> Result<&mut Context, CUresult> {
        if !self.initialized {
            return Err(CUDA_ERROR_NOT_INITIALIZED);
        }
        let cur = current();
        match self.ctx.as_mut() {
            Some(c) if cur != 0 && c.handle == cur => match c.sticky {
                Some(e) => Err(e),
                None => Ok(c),
            },
            _ => Err(CUDA_ERROR_INVALID_CONTEXT),
        }
    }

    /// Parses PTX, or returns the module parsed earlier from the same text.
    pub fn parse(&mut self, text: &str) -> Result<Arc<Module>, LoadError> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        let key = (h.finish(), text.len());
        if let Some(m) = self.parsed.get(&key) {
            return Ok(m.clone());
        }
        let m = Module::parse(text).map_err(|e| match e {
            SimError::Unsupported { .. } => LoadError {
                code: CUDA_ERROR_NOT_SUPPORTED,
                message: format!("ptxsim cannot run this PTX (the emulator lacks it): {e}"),
            },
            e => LoadError {
                code: CUDA_ERROR_INVALID_PTX,
                message: format!("PTX rejected: {e}"),
            },
        })?;
        let m = Arc::new(m);
        self.parsed.insert(key, m.clone());
        Ok(m)
    }
}

impl Context {
    /// Whether `s` is a stream handle of the context (or one of the special handles).
    pub fn stream_ok(&self, s: usize) -> bool {
        s == 0 || s == STREAM_LEGACY || s == STREAM_PER_THREAD || self.streams.contains(&s)
    }

    /// Checked host-to-device copy.
    pub fn write(&mut self, what: &str, dst: u64, bytes: &[u8]) -> CUresult {
        if bytes.is_empty() {
            return CUDA_SUCCESS;
        }
        match self.dev.write(dst, bytes) {
            Ok(()) => CUDA_SUCCESS,
            Err(e) => {
                say(format_args!("{what}: {e}"));
                CUDA_ERROR_INVALID_VALUE
            }
        }
    }

    /// Checked device-to-host read.
    pub fn read(&mut self, what: &str, src: u64, len: usize) -> Result<Vec<u8>, CUresult> {
        if len == 0 {
            return Ok(Vec::new());
        }
        self.dev.read(src, len).map_err(|e| {
            say(format_args!("{what}: {e}"));
            CUDA_ERROR_INVALID_VALUE
        })
    }

    /// Runs a kernel on ptxsim with racecheck and initcheck. A fault, a race or a read of
    /// uninitialized memory is printed and becomes the context's sticky error.
    pub fn launch(&mut self, f: usize, cfg: LaunchConfig, args: &[Arg]) -> CUresult {
        let Some(func) = self.functions.get(&f) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        let (module, name) = (func.module.clone(), func.name.clone());
        let trace = std::env::var_os("SIMCUDA_TRACE").is_some();
        let start = Instant::now();
        let result = self.dev.launch(&module, &name, cfg, args);
        let what = format!(
            "kernel {name} (grid {:?}, block {:?}, {} bytes dynamic shared memory)",
            cfg.grid, cfg.block, cfg.shared_mem_bytes
        );
        if trace {
            say(format_args!(
                "{what}: {:.1} ms on ptxsim",
                start.elapsed().as_secs_f64() * 1e3
            ));
        }
        let code = match result {
            Ok(stats) if stats.reports.is_empty() => return CUDA_SUCCESS,
            Ok(stats) => {
                say(format_args!(
                    "{what}: {} finding(s) of racecheck/initcheck{}:",
                    stats.reports.len() as u64 + stats.reports_omitted,
                    if stats.reports_omitted > 0 {
                        format!(" ({} not shown)", stats.reports_omitted)
                    } else {
                        String::new()
                    }
                ));
                for r in &stats.reports {
                    say(format_args!("  {r}"));
                }
                CUDA_ERROR_LAUNCH_FAILED
            }
            Err(SimError::Fault(fault)) => {
                say(format_args!("{what} faulted: {fault}"));
                match fault.kind {
                    FaultKind::OutOfBounds
                    | FaultKind::UseAfterFree
                    | FaultKind::SharedOutOfBounds
                    | FaultKind::LocalOutOfBounds
                    | FaultKind::ParamOutOfBounds => CUDA_ERROR_ILLEGAL_ADDRESS,
                    FaultKind::Misaligned => CUDA_ERROR_MISALIGNED_ADDRESS,
                    _ => CUDA_ERROR_LAUNCH_FAILED,
                }
            }
            Err(e @ SimError::StepLimit { .. }) => {
                say(format_args!("{what}: {e}"));
                CUDA_ERROR_LAUNCH_TIMEOUT
            }
            Err(SimError::InvalidArgument(m)) => {
                // A bad launch configuration: an error of this call only, as on a GPU.
                say(format_args!("{what} rejected: {m}"));
                return CUDA_ERROR_INVALID_VALUE;
            }
            Err(e) => {
                say(format_args!("{what}: the emulator failed: {e}"));
                CUDA_ERROR_LAUNCH_FAILED
            }
        };
        self.sticky = Some(code);
        say(format_args!(
            "the context is now in error ({}): every later call in it fails, as after a kernel fault on a GPU",
            ERRORS
                .iter()
                .find(|e| e.0 == code)
                .map_or("?", |e| e.1.to_str().unwrap_or("?"))
        ));
        code
    }
}
