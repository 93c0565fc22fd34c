//! Running plans on a GPU through cudarc: module loading (once per context), function lookup,
//! and launches on the caller's stream.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{result::DriverError, sys, CudaContext, CudaFunction, CudaModule, CudaStream};

use crate::device::DeviceProps;
use crate::kernels;
use crate::plan::{Executor, Plan};
use crate::{Error, Result};

/// Modules and functions loaded into one context.
struct Loaded {
    modules: HashMap<&'static str, Arc<CudaModule>>,
    /// Each function with the most dynamic shared memory a launch of it may use.
    functions: Mutex<HashMap<String, (CudaFunction, u32)>>,
    props: DeviceProps,
}

/// One entry per context, matched by `Arc::ptr_eq`. Each entry holds its `Arc<CudaContext>`,
/// so a context that has used warpnorm stays alive, with its modules loaded, until the process
/// exits (like candle's per-device kernel cache); its address can therefore never be reused by
/// another context while the entry exists.
type Cache = Mutex<Vec<(Arc<CudaContext>, Arc<Loaded>)>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(Vec::new()))
}

/// True when the CUDA driver library can be opened. warpnorm's own check, not cudarc's
/// (`sys::is_culib_present` exists only when cudarc loads the driver at run time): with cudarc's
/// `dynamic-linking` or `static-linking` (candle's `cuda` feature turns the former on) the
/// library was already needed to start the program, and this check passes.
fn driver_library_present() -> bool {
    #[cfg(windows)]
    const NAMES: &[&str] = &["nvcuda.dll"];
    #[cfg(not(windows))]
    const NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];
    NAMES.iter().any(|name| {
        // SAFETY: opening the driver library runs no code of ours; its initializers are
        // the driver's own (the same as cudarc's loading does). No symbol is called here.
        unsafe { libloading::Library::new(*name) }.is_ok()
    })
}

/// Number of CUDA devices, or an error saying why there are none. Never panics: the driver
/// library's presence is checked before any driver call, and a stub libcuda (as in containers
/// without a GPU) answers with an error that is returned as [`Error::NoDevice`].
pub fn device_count() -> Result<usize> {
    if !driver_library_present() {
        return Err(Error::NoDevice(
            "the CUDA driver library (libcuda.so) was not found".into(),
        ));
    }
    let n = std::panic::catch_unwind(CudaContext::device_count)
        .map_err(|_| Error::NoDevice("the CUDA driver library could not be used".into()))?
        .map_err(|e| Error::NoDevice(format!("cuDeviceGetCount/cuInit failed: {e}")))?;
    if n <= 0 {
        return Err(Error::NoDevice("the driver reports no CUDA device".into()));
    }
    Ok(n as usize)
}

/// Creates a context on device `ordinal`, with the same never-panic guarantees as
/// [`device_count`].
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    let n = device_count()?;
    if ordinal >= n {
        return Err(Error::NoDevice(format!(
            "device {ordinal} requested but only {n} present"
        )));
    }
    CudaContext::new(ordinal).map_err(Error::driver(format!(
        "creating a context on device {ordinal}"
    )))
}

fn no_image(ctx: &CudaContext, e: DriverError) -> Error {
    let (major, minor) = ctx
        .compute_capability()
        .map(|(a, b)| (a as u32, b as u32))
        .unwrap_or((0, 0));
    Error::NoKernelImage {
        major,
        minor,
        built: kernels::SASS_ARCHS
            .iter()
            .map(|a| format!("sm_{a}"))
            .collect::<Vec<_>>()
            .join(", "),
        chosen_by: kernels::ARCHS_SOURCE,
        ptx: kernels::FATBIN_PTX_ARCH,
        nvcc: kernels::NVCC_VERSION,
        driver: e.to_string(),
    }
}

fn load(ctx: &Arc<CudaContext>) -> Result<Arc<Loaded>> {
    kernels::ensure_built()?;
    let mut cache = cache().lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, l)) = cache.iter().find(|(c, _)| Arc::ptr_eq(c, ctx)) {
        return Ok(l.clone());
    }
    let mut modules = HashMap::new();
    for f in kernels::FAMILIES {
        let image = cudarc::nvrtc::Ptx::from_binary(f.fatbin.to_vec());
        let m = ctx.load_module(image).map_err(|e| match e.0 {
            sys::cudaError_enum::CUDA_ERROR_NO_BINARY_FOR_GPU
            | sys::cudaError_enum::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
            | sys::cudaError_enum::CUDA_ERROR_INVALID_PTX
            | sys::cudaError_enum::CUDA_ERROR_INVALID_IMAGE => no_image(ctx, e),
            _ => Error::Driver {
                during: format!("loading the {} module", f.name),
                source: e,
            },
        })?;
        modules.insert(f.name, m);
    }
    let loaded = Arc::new(Loaded {
        modules,
        functions: Mutex::new(HashMap::new()),
        props: DeviceProps::query(ctx)?,
    });
    cache.push((ctx.clone(), loaded.clone()));
    Ok(loaded)
}

impl Loaded {
    /// The function `name`, ready for a launch with `shared_mem_bytes` of dynamic shared
    /// memory: an error (before anything is launched) when the kernel's static shared memory
    /// plus that exceeds what a block may have.
    fn function(&self, name: &str, shared_mem_bytes: u32) -> Result<CudaFunction> {
        let mut fns = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        let (f, max_dynamic) = match fns.get(name) {
            Some(e) => e.clone(),
            None => {
                let e = self.load_function(name)?;
                fns.insert(name.to_string(), e.clone());
                e
            }
        };
        if shared_mem_bytes > max_dynamic {
            return Err(Error::invalid(
                format!("launch of {name}"),
                format!(
                    "{shared_mem_bytes} bytes of dynamic shared memory; the kernel can have at most {max_dynamic} next to its static shared memory on this device"
                ),
            ));
        }
        Ok(f)
    }

    /// Looks `name` up and, once per function, raises its dynamic shared memory limit to
    /// everything a block may have beside the kernel's static shared memory (the opt-in
    /// limit), so that any later launch up to that size works whatever the first one used.
    fn load_function(&self, name: &str) -> Result<(CudaFunction, u32)> {
        let family = kernels::family_of(name).ok_or_else(|| Error::UnknownKernel(name.into()))?;
        let module = &self.modules[family.name];
        let f = module
            .load_function(name)
            .map_err(Error::driver(format!("looking up kernel {name}")))?;
        let static_bytes = f.shared_size_bytes().map_err(Error::driver(format!(
            "reading {name}'s static shared memory"
        )))?;
        let static_bytes = u32::try_from(static_bytes).unwrap_or(0);
        let default_max = self.props.max_shared_per_block.saturating_sub(static_bytes);
        let optin_max = self
            .props
            .max_shared_per_block_optin
            .saturating_sub(static_bytes);
        if optin_max <= default_max {
            return Ok((f, default_max));
        }
        f.set_attribute(
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            i32::try_from(optin_max).unwrap_or(i32::MAX),
        )
        .map_err(Error::driver(format!(
            "raising {name}'s shared memory limit"
        )))?;
        Ok((f, optin_max))
    }
}

/// The device properties of the stream's device (cached with its modules).
pub fn device_props(stream: &Arc<CudaStream>) -> Result<DeviceProps> {
    Ok(load(stream.context())?.props)
}

/// Runs plans on a CUDA stream. Launches are asynchronous: nothing here synchronizes with
/// the host or allocates device memory, so plans can be captured in a CUDA graph.
pub struct GpuExecutor<'a> {
    stream: &'a Arc<CudaStream>,
    loaded: Arc<Loaded>,
}

impl<'a> GpuExecutor<'a> {
    /// An executor that launches on `stream`, with warpnorm's modules loaded into its context
    /// (once per context; later calls find them in a cache).
    pub fn new(stream: &'a Arc<CudaStream>) -> Result<Self> {
        Ok(GpuExecutor {
            stream,
            loaded: load(stream.context())?,
        })
    }

    /// The stream's device properties, which plans for this executor are made for.
    pub fn props(&self) -> &DeviceProps {
        &self.loaded.props
    }

    /// The stream it launches on.
    pub fn stream(&self) -> &'a Arc<CudaStream> {
        self.stream
    }
}

impl Executor for GpuExecutor<'_> {
    fn props(&self) -> &DeviceProps {
        &self.loaded.props
    }

    fn execute(&mut self, plan: &Plan) -> Result<()> {
        if plan.launches.is_empty() {
            return Ok(());
        }
        let loaded = &self.loaded;
        plan.check(&loaded.props)?;
        // Resolve every function before the first launch, so that a lookup failure cannot
        // leave a plan half-executed.
        let functions = plan
            .launches
            .iter()
            .map(|l| loaded.function(&l.kernel, l.shared_mem_bytes))
            .collect::<Result<Vec<_>>>()?;
        self.stream
            .context()
            .bind_to_thread()
            .map_err(Error::driver("binding the context"))?;
        for (l, f) in plan.launches.iter().zip(&functions) {
            let mut params = [l.args.as_ptr() as *mut c_void];
            // SAFETY: the kernel takes exactly one by-value struct parameter whose C layout is
            // the one `l.args` holds (both come from cuda/abi.h); the pointers inside it were
            // taken from live device buffers by the planner's caller, which keeps them borrowed
            // for the duration of this call.
            unsafe {
                let launch = if l.cooperative {
                    cudarc::driver::result::launch_cooperative_kernel
                } else {
                    cudarc::driver::result::launch_kernel
                };
                launch(
                    f.cu_function(),
                    (l.grid[0], l.grid[1], l.grid[2]),
                    (l.block[0], l.block[1], l.block[2]),
                    l.shared_mem_bytes,
                    self.stream.cu_stream(),
                    &mut params,
                )
            }
            .map_err(Error::driver(format!("launching {}", l.kernel)))?;
        }
        Ok(())
    }
}
