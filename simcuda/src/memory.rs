//! Device memory: `cuMemAlloc*`, `cuMemFree*`, `cuMemGetInfo`, `cuMemcpy{HtoD,DtoH,DtoD}*`,
//! `cuMemsetD{8,16,32}*` (each with its `Async` form, which runs at the call like the rest unless
//! its stream is being captured).
//!
//! The memory is ptxsim's ([`ptxsim::Device`]): `cuMemAlloc` returns uninitialized memory
//! (initcheck reports a kernel's read of bytes nothing wrote), `cuMemAlloc(0)` is
//! `CUDA_ERROR_INVALID_VALUE` as on the driver, and copies and memsets are bounds-checked
//! against the allocation (`CUDA_ERROR_INVALID_VALUE` otherwise, not sticky). The device
//! reports [`TOTAL_MEM`] bytes; no managed or pinned host memory.
//!
//! During stream capture ([`crate::graph`]) the `Async` copies and memsets on the capturing
//! stream are recorded, and `cuMemAlloc`, `cuMemFree` and the synchronous copies and memsets
//! are rejected where the capture mode prohibits them (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`,
//! the capture is invalidated), as by the driver.

use std::cell::Cell;
use std::ffi::c_void;

use crate::consts::*;
use crate::device::TOTAL_MEM;
use crate::ffi::*;
use crate::graph::Node;
use crate::state::Context;

// ---- allocation -----------------------------------------------------------------------

/// Allocates `bytes` in the context.
unsafe fn alloc(c: &mut Context, dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
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
            ALLOCATIONS.with(|n| n.set(n.get() + 1));
            out(dptr, p)
        }
        Err(_) => CUDA_ERROR_OUT_OF_MEMORY,
    }
}

/// Frees the allocation at `dptr` (null: nothing).
fn free(c: &mut Context, dptr: CUdeviceptr) -> CUresult {
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
            say(format_args!(
                "cuMemFree of {dptr:#x}, which is not a live allocation"
            ));
            CUDA_ERROR_INVALID_VALUE
        }
    }
}

/// The stream-ordered allocator's calls on a capturing stream (graph memory nodes) are not
/// modelled: `CUDA_ERROR_NOT_SUPPORTED`.
fn async_alloc_check(c: &Context, stream: Handle, call: &str) -> CUresult {
    if c.captures.contains_key(&(stream as usize)) {
        say(format_args!(
            "{call} on a capturing stream: graph memory nodes are not modelled (CUDA_ERROR_NOT_SUPPORTED)"
        ));
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    CUDA_SUCCESS
}

thread_local! {
    /// Successful device allocations (`cuMemAlloc*`, `cuMemAllocAsync`) made by this thread;
    /// see [`simcuda_alloc_count`].
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Not a driver function: the number of successful device allocations the calling thread
/// has made, for tests that show a call allocates nothing (they look the symbol up in the
/// loaded `libcuda.so`; a real driver has no such symbol). Per thread, so that tests running
/// in parallel do not count each other's allocations (every call runs on its caller's
/// thread).
#[no_mangle]
pub extern "C" fn simcuda_alloc_count() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    guard! {
        with_ctx(|c| {
            check!(c.unsafe_call_check("cuMemAlloc"));
            alloc(c, dptr, bytes)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: Handle,
) -> CUresult {
    guard! {
        with_stream(stream, |c| {
            check!(async_alloc_check(c, stream, "cuMemAllocAsync"));
            check!(c.legacy_check(stream as usize, "cuMemAllocAsync on the legacy stream"));
            alloc(c, dptr, bytes)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    guard! {
        with_ctx(|c| {
            check!(c.unsafe_call_check("cuMemFree"));
            free(c, dptr)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, stream: Handle) -> CUresult {
    guard! {
        with_stream(stream, |c| {
            check!(async_alloc_check(c, stream, "cuMemFreeAsync"));
            check!(c.legacy_check(stream as usize, "cuMemFreeAsync on the legacy stream"));
            free(c, dptr)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    guard! {
        with_ctx(|c| {
            let used = c.allocated;
            check!(out(free, (TOTAL_MEM - used) as usize));
            out(total, TOTAL_MEM as usize)
        })
    }
}

// ---- copies and memsets ---------------------------------------------------------------

/// Whether a copy or memset is the synchronous form (on the legacy stream, a "potentially
/// unsafe" call during capture) or the `Async` form on a stream.
#[derive(Clone, Copy)]
enum On {
    Sync,
    Stream(Handle),
}

/// Enqueues a copy or memset: checked (the synchronous forms against the captures that
/// prohibit them), then recorded on a capturing stream or run now (see [`Context::submit`]).
///
/// # Safety
/// Host addresses in `node` are valid for the copy, as the driver API requires.
unsafe fn enqueue(
    on: On,
    call: &str,
    node: impl FnOnce() -> Result<Option<Node>, CUresult>,
) -> CUresult {
    let stream = match on {
        On::Sync => std::ptr::null_mut(),
        On::Stream(s) => s,
    };
    with_stream(stream, |c| {
        if let On::Sync = on {
            check!(c.unsafe_call_check(call));
        }
        match node() {
            Ok(Some(n)) => c.submit(stream as usize, n, call),
            Ok(None) => c.legacy_check(stream as usize, call),
            Err(e) => e,
        }
    })
}

/// `cuMemcpyHtoD`: `n` bytes from host `src` to `dst`.
unsafe fn htod(dst: CUdeviceptr, src: *const c_void, n: usize, on: On) -> CUresult {
    enqueue(on, "cuMemcpyHtoD", || match (n, src.is_null()) {
        (0, _) => Ok(None),
        (_, true) => Err(CUDA_ERROR_INVALID_VALUE),
        _ => Ok(Some(Node::HtoD {
            dst,
            src: src as usize,
            n,
        })),
    })
}

/// `cuMemcpyDtoH`: `n` bytes from `src` to host `dst`.
unsafe fn dtoh(dst: *mut c_void, src: CUdeviceptr, n: usize, on: On) -> CUresult {
    enqueue(on, "cuMemcpyDtoH", || match (n, dst.is_null()) {
        (0, _) => Ok(None),
        (_, true) => Err(CUDA_ERROR_INVALID_VALUE),
        _ => Ok(Some(Node::DtoH {
            dst: dst as usize,
            src,
            n,
        })),
    })
}

/// `cuMemcpyDtoD`: `n` bytes from `src` to `dst`.
unsafe fn dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize, on: On) -> CUresult {
    enqueue(on, "cuMemcpyDtoD", || Ok(Some(Node::DtoD { dst, src, n })))
}

/// `cuMemsetD8/16/32`: `n` copies of `pattern` (1, 2 or 4 bytes) at `dst`, which must be
/// aligned to the pattern's size.
unsafe fn memset(dst: CUdeviceptr, pattern: &[u8], n: usize, on: On) -> CUresult {
    enqueue(on, "cuMemset", || {
        if !dst.is_multiple_of(pattern.len() as u64) || n.checked_mul(pattern.len()).is_none() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(Some(Node::Memset {
            dst,
            pattern: pattern.to_vec(),
            n,
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
) -> CUresult {
    guard! { htod(dst, src, n, On::Sync) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { htod(dst, src, n, On::Stream(stream)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    guard! { dtoh(dst, src, n, On::Sync) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { dtoh(dst, src, n, On::Stream(stream)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CUresult {
    guard! { dtod(dst, src, n, On::Sync) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { dtod(dst, src, n, On::Stream(stream)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize) -> CUresult {
    guard! { memset(dst, &[v], n, On::Sync) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    v: u8,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { memset(dst, &[v], n, On::Stream(stream)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16_v2(dst: CUdeviceptr, v: u16, n: usize) -> CUresult {
    guard! { memset(dst, &v.to_le_bytes(), n, On::Sync) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async(
    dst: CUdeviceptr,
    v: u16,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { memset(dst, &v.to_le_bytes(), n, On::Stream(stream)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: CUdeviceptr, v: u32, n: usize) -> CUresult {
    guard! { memset(dst, &v.to_le_bytes(), n, On::Sync) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: CUdeviceptr,
    v: u32,
    n: usize,
    stream: Handle,
) -> CUresult {
    guard! { memset(dst, &v.to_le_bytes(), n, On::Stream(stream)) }
}
