//! The emulated driver's state: initialization, the device's primary context (memory on a
//! [`ptxsim::Device`], modules, functions, streams, events, sticky error), handles, the PTX
//! parse cache, and the calling thread's current context. Everything runs synchronously under
//! one global lock ([`driver`]). The exports that read and change it are in the area modules
//! (see the table in the crate docs); running a launch is [`crate::launch`]'s.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use ptxsim::{Device, Module, Options, SimError};

use crate::consts::*;
use crate::device::{Spec, DEFAULT_ARCH, DEFAULT_SM_COUNT};
use crate::fatbin::LoadError;
use crate::ffi::say;
use crate::graph::{Capture, Node};

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

/// An event: its creation flags, the host time of its last record, and the capture sequence
/// (its id) it was last recorded in when that record was captured (a captured event).
pub struct Event {
    pub flags: u32,
    pub recorded: Option<Instant>,
    pub captured: Option<u64>,
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
    /// The streams created without `CU_STREAM_NON_BLOCKING` (they synchronize with the legacy
    /// stream, which matters while one is captured).
    pub blocking: HashSet<usize>,
    pub events: HashMap<usize, Event>,
    /// The capture sequences under way, by the stream they capture (see [`crate::graph`]).
    pub captures: HashMap<usize, Capture>,
    /// Graphs (`CUgraph`) and executable graphs (`CUgraphExec`): their nodes in launch order.
    pub graphs: HashMap<usize, Arc<[Node]>>,
    pub execs: HashMap<usize, Arc<[Node]>>,
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
            blocking: HashSet::new(),
            events: HashMap::new(),
            captures: HashMap::new(),
            graphs: HashMap::new(),
            execs: HashMap::new(),
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
}
