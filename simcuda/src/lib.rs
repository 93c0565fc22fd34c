//! # simcuda: an emulated CUDA driver on ptxsim
//!
//! A shared library (`libsimcuda.so`) that exports the part of the CUDA driver API
//! (`libcuda.so`) that cudarc 0.19 calls for what warpnorm and its GPU tests do, and runs
//! every kernel on [ptxsim](../ptxsim) with racecheck and initcheck on. Linked (or symlinked)
//! as `libcuda.so` in a folder on `LD_LIBRARY_PATH`, it lets the GPU layer (context, module
//! loading from the embedded fatbin, launches, copies, events) execute on a machine without a
//! GPU. `scripts/test-emulated-gpu.sh` runs warpnorm's GPU tests and demo this way.
//!
//! **This is an emulator, not a GPU.** Results are checked, timings mean nothing.
//!
//! What is emulated:
//! - one device (ordinal 0, "ptxsim emulated CUDA device", 8 SMs, compute capability 12.0 by
//!   default with that architecture's limits; `SIMCUDA_COMPUTE_CAP` (e.g. `90`) and
//!   `SIMCUDA_SM_COUNT` choose others; no memory pools, so cudarc uses
//!   `cuMemAlloc`/`cuMemFree`) and its primary context (reference counted; the last release
//!   destroys it);
//! - everything runs synchronously at the call under one global lock: streams and events are
//!   handles, an event records the host time so `cuEventElapsedTime` returns real host
//!   milliseconds (and `CUDA_ERROR_INVALID_HANDLE` for events created with
//!   `CU_EVENT_DISABLE_TIMING` or never recorded, as the driver does);
//! - device memory is ptxsim's: `cuMemAlloc` returns uninitialized memory (initcheck reports
//!   kernel reads of bytes nothing wrote), copies and memsets are bounds-checked against the
//!   allocation (`CUDA_ERROR_INVALID_VALUE` otherwise);
//! - `cuModuleLoadData` takes a fatbin (zstd-compressed entries included), a
//!   `__fatBinC_Wrapper_t` or PTX text. From a fatbin it runs the PTX that is the code a GPU
//!   of the emulated architecture would run: the `compute_XY` PTX where the GPU would run
//!   `sm_XY` SASS (nvcc's code depends on `__CUDA_ARCH__`), the PTX it would JIT otherwise
//!   (see [`fatbin::select_ptx`]). The default 12.0 matches warpnorm's default build (SASS up
//!   to sm_120 plus compute_120 PTX);
//! - `cuLaunchKernel` checks the launch like the driver (block and grid limits, dynamic shared
//!   memory against `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`), copies each parameter
//!   by the entry's PTX layout and launches on ptxsim. A fault (out of bounds, misaligned,
//!   barrier divergence, ...), a data race or a read of uninitialized memory is printed to
//!   stderr and returned (`CUDA_ERROR_ILLEGAL_ADDRESS`, `CUDA_ERROR_MISALIGNED_ADDRESS` or
//!   `CUDA_ERROR_LAUNCH_FAILED`), and becomes the context's sticky error: every later call in
//!   it fails, as on a GPU.
//!
//! Not emulated: register limits (`CU_FUNC_ATTRIBUTE_NUM_REGS` is unknown from PTX and
//! returns `CUDA_ERROR_NOT_SUPPORTED`), SASS, graphs, memory pools, managed and pinned host
//! memory, peer access, cooperative launches. No export ever unwinds into its caller: a panic
//! is caught and returned as `CUDA_ERROR_UNKNOWN`.
//!
//! `SIMCUDA_TRACE=1` prints every launch with its host time on ptxsim.

// Every export is a CUDA driver API function with NVIDIA's documented contract.
#![allow(clippy::missing_safety_doc)]
#![allow(non_snake_case)]

pub mod consts;
pub mod fatbin;
pub mod state;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::time::Instant;

use ptxsim::{Arg, LaunchConfig};

use consts::*;
use state::*;

type CUdevice = c_int;
type Handle = *mut c_void;
type CUdeviceptr = u64;
type CUhostFn = Option<unsafe extern "C" fn(*mut c_void)>;

/// Runs the body, turning a panic into `CUDA_ERROR_UNKNOWN`.
macro_rules! guard {
    ($($body:tt)*) => {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> CUresult { $($body)* })) {
            Ok(r) => r,
            Err(_) => CUDA_ERROR_UNKNOWN,
        }
    };
}

/// The current context of the locked driver `$d`, or return its error.
macro_rules! ctx {
    ($d:ident) => {
        match $d.ctx() {
            Ok(c) => c,
            Err(e) => return e,
        }
    };
}

/// Writes `v` through `p`, or `CUDA_ERROR_INVALID_VALUE` when `p` is null.
unsafe fn out<T>(p: *mut T, v: T) -> CUresult {
    if p.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    p.write_unaligned(v);
    CUDA_SUCCESS
}

/// `CUDA_SUCCESS` when the driver is initialized and `dev` is the emulated device.
fn check_device(d: &Driver, dev: CUdevice) -> CUresult {
    if !d.initialized {
        CUDA_ERROR_NOT_INITIALIZED
    } else if dev != 0 {
        CUDA_ERROR_INVALID_DEVICE
    } else {
        CUDA_SUCCESS
    }
}

macro_rules! check {
    ($e:expr) => {
        match $e {
            CUDA_SUCCESS => {}
            e => return e,
        }
    };
}

// ---- initialization, version, errors --------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    guard! {
        if flags != 0 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        match spec() {
            Ok(s) => {
                let mut d = driver();
                d.spec = Some(s);
                d.initialized = true;
                CUDA_SUCCESS
            }
            Err(m) => {
                say(format_args!("cuInit: {m}"));
                CUDA_ERROR_NO_DEVICE
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    guard! { out(version, DRIVER_VERSION) }
}

fn error_entry(code: CUresult) -> Option<&'static (CUresult, &'static CStr, &'static CStr)> {
    ERRORS.iter().find(|e| e.0 == code)
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(code: CUresult, s: *mut *const c_char) -> CUresult {
    guard! {
        match error_entry(code) {
            Some(e) => out(s, e.2.as_ptr()),
            None => {
                out(s, std::ptr::null());
                CUDA_ERROR_INVALID_VALUE
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(code: CUresult, s: *mut *const c_char) -> CUresult {
    guard! {
        match error_entry(code) {
            Some(e) => out(s, e.1.as_ptr()),
            None => {
                out(s, std::ptr::null());
                CUDA_ERROR_INVALID_VALUE
            }
        }
    }
}

// ---- device ---------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    guard! {
        if !driver().initialized {
            return CUDA_ERROR_NOT_INITIALIZED;
        }
        out(count, 1)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut CUdevice, ordinal: c_int) -> CUresult {
    guard! {
        check!(check_device(&driver(), ordinal));
        out(dev, 0)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    guard! {
        check!(check_device(&driver(), dev));
        if name.is_null() || len <= 0 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let bytes = DEVICE_NAME.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), name as *mut u8, n);
        *name.add(n) = 0;
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    dev: CUdevice,
) -> CUresult {
    guard! {
        let d = driver();
        check!(check_device(&d, dev));
        match device_attribute(&d.spec(), attrib) {
            Some(v) => out(pi, v),
            None => CUDA_ERROR_INVALID_VALUE,
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    dev: CUdevice,
) -> CUresult {
    guard! {
        let d = driver();
        check!(check_device(&d, dev));
        let arch = d.spec().arch;
        check!(out(major, (arch / 10) as c_int));
        out(minor, (arch % 10) as c_int)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    guard! {
        check!(check_device(&driver(), dev));
        out(bytes, TOTAL_MEM as usize)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut usize, dev: CUdevice) -> CUresult {
    cuDeviceTotalMem_v2(bytes, dev)
}

/// The emulated device's UUID ("ptxsim-emulated\0" as bytes).
const UUID: [u8; 16] = *b"ptxsim-emulated\0";

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    guard! {
        check!(check_device(&driver(), dev));
        out(uuid, UUID)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    cuDeviceGetUuid(uuid, dev)
}

// ---- primary context and current context ----------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut Handle, dev: CUdevice) -> CUresult {
    guard! {
        let mut d = driver();
        check!(check_device(&d, dev));
        if pctx.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let h = d.retain();
        out(pctx, h as Handle)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    guard! {
        let mut d = driver();
        check!(check_device(&d, dev));
        d.release()
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    cuDevicePrimaryCtxRelease_v2(dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    guard! {
        let d = driver();
        check!(check_device(&d, dev));
        let (f, a) = d.ctx.as_ref().map_or((0, 0), |c| (c.flags, 1));
        check!(out(flags, f));
        out(active, a)
    }
}

/// `CUDA_SUCCESS` when `h` is the live context (or null, when `null_ok`).
fn check_ctx_handle(d: &Driver, h: usize, null_ok: bool) -> CUresult {
    if !d.initialized {
        CUDA_ERROR_NOT_INITIALIZED
    } else if (h == 0 && null_ok) || d.ctx.as_ref().is_some_and(|c| c.handle == h) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_CONTEXT
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: Handle) -> CUresult {
    guard! {
        check!(check_ctx_handle(&driver(), ctx as usize, true));
        set_current(ctx as usize);
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut Handle) -> CUresult {
    guard! {
        if !driver().initialized {
            return CUDA_ERROR_NOT_INITIALIZED;
        }
        out(pctx, current() as Handle)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: Handle) -> CUresult {
    guard! {
        check!(check_ctx_handle(&driver(), ctx as usize, false));
        push_current(ctx as usize);
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut Handle) -> CUresult {
    guard! {
        if !driver().initialized {
            return CUDA_ERROR_NOT_INITIALIZED;
        }
        if current() == 0 {
            return CUDA_ERROR_INVALID_CONTEXT;
        }
        let h = pop_current();
        if !pctx.is_null() {
            *pctx = h as Handle;
        }
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        out(dev, 0)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: Handle, version: *mut c_uint) -> CUresult {
    guard! {
        let d = driver();
        let h = if ctx.is_null() { current() } else { ctx as usize };
        check!(check_ctx_handle(&d, h, false));
        out(version, 3020)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        out(flags, c.flags)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetFlags(flags: c_uint) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d).flags = flags;
        CUDA_SUCCESS
    }
}

fn default_limit(limit: c_int) -> Option<usize> {
    match limit {
        LIMIT_STACK_SIZE => Some(1024),
        LIMIT_PRINTF_FIFO_SIZE => Some(1 << 20),
        LIMIT_MALLOC_HEAP_SIZE => Some(8 << 20),
        3..=7 => Some(0),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_int) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        match c.limits.get(&limit).copied().or_else(|| default_limit(limit)) {
            Some(v) => out(value, v),
            None => CUDA_ERROR_INVALID_VALUE,
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: c_int, value: usize) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        if default_limit(limit).is_none() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        c.limits.insert(limit, value);
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        if !least.is_null() {
            *least = 0;
        }
        if !greatest.is_null() {
            *greatest = -5;
        }
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut c_int) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        out(config, c.cache_config)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCacheConfig(config: c_int) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        if !(0..=4).contains(&config) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        c.cache_config = config;
        CUDA_SUCCESS
    }
}

// ---- streams --------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut Handle, _flags: c_uint) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        if stream.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let h = d.handle();
        ctx!(d).streams.insert(h);
        out(stream, h as Handle)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    stream: *mut Handle,
    flags: c_uint,
    _priority: c_int,
) -> CUresult {
    cuStreamCreate(stream, flags)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: Handle) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        if c.streams.remove(&(stream as usize)) {
            CUDA_SUCCESS
        } else {
            CUDA_ERROR_INVALID_HANDLE
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy(stream: Handle) -> CUresult {
    cuStreamDestroy_v2(stream)
}

/// Validates a stream of the current context (all work is already done).
fn stream_call(stream: Handle) -> CUresult {
    let mut d = driver();
    let c = ctx!(d);
    if c.stream_ok(stream as usize) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_HANDLE
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: Handle) -> CUresult {
    guard! { stream_call(stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(stream: Handle) -> CUresult {
    guard! { stream_call(stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    stream: Handle,
    event: Handle,
    _flags: c_uint,
) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        if !c.stream_ok(stream as usize) || !c.events.contains_key(&(event as usize)) {
            return CUDA_ERROR_INVALID_HANDLE;
        }
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: Handle, status: *mut c_int) -> CUresult {
    guard! {
        check!(stream_call(stream));
        out(status, 0) // CU_STREAM_CAPTURE_STATUS_NONE
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(
    stream: Handle,
    f: CUhostFn,
    data: *mut c_void,
) -> CUresult {
    guard! {
        check!(stream_call(stream));
        let Some(f) = f else {
            return CUDA_ERROR_INVALID_VALUE;
        };
        // Called without the driver lock held: all earlier work on the stream is done.
        f(data);
        CUDA_SUCCESS
    }
}

// ---- events ---------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut Handle, flags: c_uint) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        if event.is_null() || flags & !0xF != 0 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let h = d.handle();
        ctx!(d).events.insert(h, Event { flags, recorded: None });
        out(event, h as Handle)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: Handle, stream: Handle) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        if !c.stream_ok(stream as usize) {
            return CUDA_ERROR_INVALID_HANDLE;
        }
        match c.events.get_mut(&(event as usize)) {
            Some(e) => {
                e.recorded = Some(Instant::now());
                CUDA_SUCCESS
            }
            None => CUDA_ERROR_INVALID_HANDLE,
        }
    }
}

/// Validates an event of the current context (all work is already done).
fn event_call(event: Handle) -> CUresult {
    let mut d = driver();
    let c = ctx!(d);
    if c.events.contains_key(&(event as usize)) {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_HANDLE
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: Handle) -> CUresult {
    guard! { event_call(event) }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(event: Handle) -> CUresult {
    guard! { event_call(event) }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: Handle, end: Handle) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        let (Some(a), Some(b)) = (c.events.get(&(start as usize)), c.events.get(&(end as usize))) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        if (a.flags | b.flags) & EVENT_DISABLE_TIMING != 0 {
            say("cuEventElapsedTime: an event was created with CU_EVENT_DISABLE_TIMING \
                 (CUDA_ERROR_INVALID_HANDLE, as from the real driver)");
            return CUDA_ERROR_INVALID_HANDLE;
        }
        let (Some(ta), Some(tb)) = (a.recorded, b.recorded) else {
            say("cuEventElapsedTime: an event was never recorded (CUDA_ERROR_INVALID_HANDLE)");
            return CUDA_ERROR_INVALID_HANDLE;
        };
        let v = if tb >= ta {
            tb.duration_since(ta).as_secs_f64() * 1e3
        } else {
            -(ta.duration_since(tb).as_secs_f64() * 1e3)
        };
        out(ms, v as f32)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    start: Handle,
    end: Handle,
) -> CUresult {
    cuEventElapsedTime(ms, start, end)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: Handle) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        match c.events.remove(&(event as usize)) {
            Some(_) => CUDA_SUCCESS,
            None => CUDA_ERROR_INVALID_HANDLE,
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy(event: Handle) -> CUresult {
    cuEventDestroy_v2(event)
}

// ---- memory ---------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        if dptr.is_null() || bytes == 0 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        if c.allocated.saturating_add(bytes as u64) > TOTAL_MEM {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        match c.dev.alloc(bytes) {
            Ok(p) => {
                c.allocs.insert(p, bytes);
                c.allocated += bytes as u64;
                out(dptr, p)
            }
            Err(_) => CUDA_ERROR_OUT_OF_MEMORY,
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    guard! {
        check!(stream_call(stream));
        cuMemAlloc_v2(dptr, bytes)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        if dptr == 0 {
            return CUDA_SUCCESS;
        }
        match c.allocs.remove(&dptr) {
            Some(n) => {
                c.allocated -= n as u64;
                match c.dev.free(dptr) {
                    Ok(()) => CUDA_SUCCESS,
                    Err(_) => CUDA_ERROR_INVALID_VALUE,
                }
            }
            None => {
                say(format_args!("cuMemFree of {dptr:#x}, which is not a live allocation"));
                CUDA_ERROR_INVALID_VALUE
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: Handle) -> CUresult {
    guard! {
        check!(stream_call(stream));
        cuMemFree_v2(dptr)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        let used = c.allocated;
        check!(out(free, (TOTAL_MEM - used) as usize));
        out(total, TOTAL_MEM as usize)
    }
}

unsafe fn htod(dst: CUdeviceptr, src: *const c_void, n: usize, stream: Handle) -> CUresult {
    let mut d = driver();
    let c = ctx!(d);
    if !c.stream_ok(stream as usize) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if n == 0 {
        return CUDA_SUCCESS;
    }
    if src.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let bytes = std::slice::from_raw_parts(src as *const u8, n);
    c.write(
        &format!("cuMemcpyHtoD of {n} bytes to {dst:#x}"),
        dst,
        bytes,
    )
}

unsafe fn dtoh(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: Handle) -> CUresult {
    let mut d = driver();
    let c = ctx!(d);
    if !c.stream_ok(stream as usize) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if n == 0 {
        return CUDA_SUCCESS;
    }
    if dst.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match c.read(&format!("cuMemcpyDtoH of {n} bytes from {src:#x}"), src, n) {
        Ok(b) => {
            std::ptr::copy_nonoverlapping(b.as_ptr(), dst as *mut u8, n);
            CUDA_SUCCESS
        }
        Err(e) => e,
    }
}

fn dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Handle) -> CUresult {
    let mut d = driver();
    let c = ctx!(d);
    if !c.stream_ok(stream as usize) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    let what = format!("cuMemcpyDtoD of {n} bytes from {src:#x} to {dst:#x}");
    match c.read(&what, src, n) {
        Ok(b) => c.write(&what, dst, &b),
        Err(e) => e,
    }
}

fn memset(dst: CUdeviceptr, pattern: &[u8], n: usize, stream: Handle) -> CUresult {
    let mut d = driver();
    let c = ctx!(d);
    if !c.stream_ok(stream as usize) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if !dst.is_multiple_of(pattern.len() as u64) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let Some(len) = n.checked_mul(pattern.len()) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let bytes = pattern.repeat(n);
    c.write(&format!("cuMemset of {len} bytes at {dst:#x}"), dst, &bytes)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
) -> CUresult {
    guard! { htod(dst, src, n, std::ptr::null_mut()) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { htod(dst, src, n, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    guard! { dtoh(dst, src, n, std::ptr::null_mut()) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { dtoh(dst, src, n, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    guard! { dtod(dst, src, n, std::ptr::null_mut()) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { dtod(dst, src, n, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize) -> CUresult {
    guard! { memset(dst, &[v], n, std::ptr::null_mut()) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    v: u8,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { memset(dst, &[v], n, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16_v2(dst: CUdeviceptr, v: u16, n: usize) -> CUresult {
    guard! { memset(dst, &v.to_le_bytes(), n, std::ptr::null_mut()) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async(
    dst: CUdeviceptr,
    v: u16,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { memset(dst, &v.to_le_bytes(), n, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: CUdeviceptr, v: u32, n: usize) -> CUresult {
    guard! { memset(dst, &v.to_le_bytes(), n, std::ptr::null_mut()) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: CUdeviceptr,
    v: u32,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { memset(dst, &v.to_le_bytes(), n, stream) }
}

// ---- modules and functions ------------------------------------------------------------

/// The PTX to run from an image `cuModuleLoadData` was given.
unsafe fn load_image(
    image: *const c_void,
    unwrap: bool,
    arch: u32,
) -> Result<fatbin::Ptx, fatbin::LoadError> {
    let fail = |code, message: &str| fatbin::LoadError {
        code,
        message: message.into(),
    };
    if image.is_null() {
        return Err(fail(CUDA_ERROR_INVALID_VALUE, "null image"));
    }
    let p = image as *const u8;
    let magic = (p as *const u32).read_unaligned();
    if magic == fatbin::WRAPPER_MAGIC && unwrap {
        let data = (p.add(8) as *const *const c_void).read_unaligned();
        return load_image(data, false, arch);
    }
    if magic == fatbin::FATBIN_MAGIC {
        let header = (p as *const [u8; 16]).read_unaligned();
        let len = fatbin::fatbin_len(&header)?;
        let data = std::slice::from_raw_parts(p, len);
        return fatbin::select_ptx(data, arch);
    }
    if magic == u32::from_le_bytes(*b"\x7fELF") {
        return Err(fail(
            CUDA_ERROR_NO_BINARY_FOR_GPU,
            "the image is a cubin (SASS): simcuda runs PTX only",
        ));
    }
    let text = fatbin::ptx_text(CStr::from_ptr(p as *const c_char).to_bytes())?;
    Ok(fatbin::Ptx { text, arch: 0 })
}

/// The `sm_XX` number of a PTX `.target` (e.g. 90 for `sm_90a`).
fn target_arch(target: &str) -> Option<u32> {
    let digits: String = target
        .trim_start_matches("sm_")
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        if module.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let arch = d.spec().arch;
        let loaded = load_image(image, true, arch).and_then(|ptx| {
            let m = d.parse(&ptx.text)?;
            if ptx.arch == 0 && target_arch(m.target()).is_some_and(|a| a > arch) {
                return Err(fatbin::LoadError {
                    code: CUDA_ERROR_INVALID_PTX,
                    message: format!(
                        "PTX for {} cannot be compiled for a compute capability {}.{} device",
                        m.target(),
                        arch / 10,
                        arch % 10
                    ),
                });
            }
            Ok(m)
        });
        match loaded {
            Ok(m) => {
                let h = d.handle();
                ctx!(d).modules.insert(h, LoadedModule { module: m });
                out(module, h as Handle)
            }
            Err(e) => {
                say(format_args!("cuModuleLoadData: {}", e.message));
                e.code
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadFatBinary(
    module: *mut Handle,
    image: *const c_void,
) -> CUresult {
    cuModuleLoadData(module, image)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(module: Handle) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        let h = module as usize;
        if c.modules.remove(&h).is_none() {
            return CUDA_ERROR_INVALID_HANDLE;
        }
        c.functions.retain(|_, f| f.module_handle != h);
        CUDA_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    func: *mut Handle,
    module: Handle,
    name: *const c_char,
) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        if func.is_null() || name.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let Ok(name) = CStr::from_ptr(name).to_str() else {
            return CUDA_ERROR_NOT_FOUND;
        };
        let mh = module as usize;
        let c = ctx!(d);
        let Some(m) = c.modules.get(&mh) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        let m = m.module.clone();
        // One handle per function, as the driver does, so that attributes stick.
        if let Some((&h, _)) = c.functions.iter().find(|(_, f)| f.module_handle == mh && f.name == name) {
            return out(func, h as Handle);
        }
        let Some(entry) = m.entry(name) else {
            return CUDA_ERROR_NOT_FOUND;
        };
        let static_shared = entry.static_shared_bytes as u32;
        let f = Function {
            module: m.clone(),
            module_handle: mh,
            name: name.to_string(),
            static_shared,
            max_dynamic_shared: SHARED_PER_BLOCK.saturating_sub(static_shared),
            carveout: -1,
        };
        let h = d.handle();
        ctx!(d).functions.insert(h, f);
        out(func, h as Handle)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(func: Handle, attrib: c_int, value: c_int) -> CUresult {
    guard! {
        let mut d = driver();
        let optin = d.spec().shared_optin();
        let c = ctx!(d);
        let Some(f) = c.functions.get_mut(&(func as usize)) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        match attrib {
            FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                if value < 0 || value as u32 > optin - f.static_shared.min(optin) {
                    say(format_args!(
                        "cuFuncSetAttribute({}, MAX_DYNAMIC_SHARED_SIZE_BYTES, {value}): more than the {optin} bytes the device allows",
                        f.name
                    ));
                    return CUDA_ERROR_INVALID_VALUE;
                }
                f.max_dynamic_shared = value as u32;
                CUDA_SUCCESS
            }
            FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT => {
                if !(-1..=100).contains(&value) {
                    return CUDA_ERROR_INVALID_VALUE;
                }
                f.carveout = value;
                CUDA_SUCCESS
            }
            _ => CUDA_ERROR_INVALID_VALUE,
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    func: Handle,
) -> CUresult {
    guard! {
        let mut d = driver();
        let arch = d.spec().arch;
        let c = ctx!(d);
        let Some(f) = c.functions.get(&(func as usize)) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        let Some(entry) = f.module.entry(&f.name) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        let (major, minor) = f.module.version();
        let v = match attrib {
            FUNC_MAX_THREADS_PER_BLOCK => MAX_THREADS_PER_BLOCK as i32,
            FUNC_SHARED_SIZE_BYTES => f.static_shared as i32,
            FUNC_CONST_SIZE_BYTES => 0,
            FUNC_LOCAL_SIZE_BYTES => entry.local_bytes as i32,
            // Registers are allocated by ptxas for SASS; PTX does not say.
            FUNC_NUM_REGS => return CUDA_ERROR_NOT_SUPPORTED,
            FUNC_PTX_VERSION => (major * 10 + minor) as i32,
            FUNC_BINARY_VERSION => arch as i32,
            FUNC_CACHE_MODE_CA => 0,
            FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES => f.max_dynamic_shared as i32,
            FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT => f.carveout,
            a if (0..FUNC_ATTR_END).contains(&a) => 0,
            _ => return CUDA_ERROR_INVALID_VALUE,
        };
        out(pi, v)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetCacheConfig(func: Handle, config: c_int) -> CUresult {
    guard! {
        let mut d = driver();
        let c = ctx!(d);
        if !c.functions.contains_key(&(func as usize)) {
            return CUDA_ERROR_INVALID_HANDLE;
        }
        if !(0..=4).contains(&config) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        CUDA_SUCCESS
    }
}

// ---- launches -------------------------------------------------------------------------

/// The parameter buffer given through `cuLaunchKernel`'s `extra` (`CU_LAUNCH_PARAM_*`).
unsafe fn extra_buffer<'a>(extra: *mut *mut c_void) -> Option<&'a [u8]> {
    let (mut ptr, mut size): (*const u8, Option<usize>) = (std::ptr::null(), None);
    let mut i = 0;
    loop {
        let key = *extra.add(i) as usize;
        match key {
            LAUNCH_PARAM_END => break,
            LAUNCH_PARAM_BUFFER_POINTER => ptr = *extra.add(i + 1) as *const u8,
            LAUNCH_PARAM_BUFFER_SIZE => {
                let p = *extra.add(i + 1) as *const usize;
                if p.is_null() {
                    return None;
                }
                size = Some(p.read_unaligned());
            }
            _ => return None,
        }
        i += 2;
    }
    match (ptr.is_null(), size) {
        (false, Some(n)) => Some(std::slice::from_raw_parts(ptr, n)),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    func: Handle,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: Handle,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    guard! {
        let mut d = driver();
        let optin = d.spec().shared_optin();
        let c = ctx!(d);
        let fh = func as usize;
        let Some(f) = c.functions.get(&fh) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        if !c.stream_ok(stream as usize) {
            return CUDA_ERROR_INVALID_HANDLE;
        }
        let (grid, block) = ([grid_x, grid_y, grid_z], [block_x, block_y, block_z]);
        let reject = |why: String| {
            say(format_args!(
                "cuLaunchKernel({}, grid {grid:?}, block {block:?}, {shared_mem_bytes} bytes dynamic shared memory): {why}",
                f.name
            ));
            CUDA_ERROR_INVALID_VALUE
        };
        let threads = block.iter().map(|&b| b as u64).product::<u64>();
        if grid.contains(&0) || block.contains(&0) {
            return reject("a zero dimension".into());
        }
        if block_x > 1024 || block_y > 1024 || block_z > 64 || threads > MAX_THREADS_PER_BLOCK as u64 {
            return reject("block larger than (1024, 1024, 64) or 1024 threads".into());
        }
        if grid_x > MAX_GRID_X || grid_y > MAX_GRID_YZ || grid_z > MAX_GRID_YZ {
            return reject("grid larger than (2^31 - 1, 65535, 65535)".into());
        }
        if shared_mem_bytes > f.max_dynamic_shared {
            return reject(format!(
                "more dynamic shared memory than the function's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ({})",
                f.max_dynamic_shared
            ));
        }
        if f.static_shared as u64 + shared_mem_bytes as u64 > optin as u64 {
            return reject(format!(
                "{} bytes of static plus dynamic shared memory, more than the device's {optin}",
                f.static_shared as u64 + shared_mem_bytes as u64
            ));
        }
        let Some(entry) = f.module.entry(&f.name) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        let mut args = Vec::with_capacity(entry.params.len());
        if !kernel_params.is_null() {
            for (i, p) in entry.params.iter().enumerate() {
                let ptr = *kernel_params.add(i) as *const u8;
                if ptr.is_null() {
                    return reject(format!("kernelParams[{i}] is null"));
                }
                args.push(Arg::Bytes(std::slice::from_raw_parts(ptr, p.size).to_vec()));
            }
        } else if !extra.is_null() {
            let Some(buf) = extra_buffer(extra) else {
                return reject("malformed extra".into());
            };
            for p in &entry.params {
                let Some(b) = buf.get(p.offset..p.offset + p.size) else {
                    return reject("parameter buffer too small".into());
                };
                args.push(Arg::Bytes(b.to_vec()));
            }
        } else if !entry.params.is_empty() {
            return reject("no kernelParams and no extra".into());
        }
        let cfg = LaunchConfig { grid, block, shared_mem_bytes };
        c.launch(fh, cfg, &args)
    }
}

#[cfg(test)]
mod tests;
