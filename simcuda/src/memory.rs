//! Device memory: `cuMemAlloc*`, `cuMemFree*`, `cuMemGetInfo`, `cuMemcpy{HtoD,DtoH,DtoD}*`,
//! `cuMemsetD{8,16,32}*` (each with its `Async` form, which runs at the call like the rest).
//!
//! The memory is ptxsim's ([`ptxsim::Device`]): `cuMemAlloc` returns uninitialized memory
//! (initcheck reports a kernel's read of bytes nothing wrote), `cuMemAlloc(0)` is
//! `CUDA_ERROR_INVALID_VALUE` as on the driver, and copies and memsets are bounds-checked
//! against the allocation (`CUDA_ERROR_INVALID_VALUE` otherwise, not sticky). The device
//! reports [`TOTAL_MEM`] bytes; no managed or pinned host memory.

use std::cell::Cell;
use std::ffi::c_void;

use crate::consts::*;
use crate::device::TOTAL_MEM;
use crate::ffi::*;
use crate::stream::stream_call;

// ---- allocation -----------------------------------------------------------------------

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
        check!(stream_call(stream));
        cuMemAlloc_v2(dptr, bytes)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    guard! {
        with_ctx(|c| {
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
        })
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
        with_ctx(|c| {
            let used = c.allocated;
            check!(out(free, (TOTAL_MEM - used) as usize));
            out(total, TOTAL_MEM as usize)
        })
    }
}

// ---- copies and memsets ---------------------------------------------------------------

/// `cuMemcpyHtoD`: `n` bytes from host `src` to `dst`.
unsafe fn htod(dst: CUdeviceptr, src: *const c_void, n: usize, stream: Handle) -> CUresult {
    with_stream(stream, |c| {
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
    })
}

/// `cuMemcpyDtoH`: `n` bytes from `src` to host `dst`.
unsafe fn dtoh(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: Handle) -> CUresult {
    with_stream(stream, |c| {
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
    })
}

/// `cuMemcpyDtoD`: `n` bytes from `src` to `dst`.
fn dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Handle) -> CUresult {
    with_stream(stream, |c| {
        let what = format!("cuMemcpyDtoD of {n} bytes from {src:#x} to {dst:#x}");
        match c.read(&what, src, n) {
            Ok(b) => c.write(&what, dst, &b),
            Err(e) => e,
        }
    })
}

/// `cuMemsetD8/16/32`: `n` copies of `pattern` (1, 2 or 4 bytes) at `dst`, which must be
/// aligned to the pattern's size.
fn memset(dst: CUdeviceptr, pattern: &[u8], n: usize, stream: Handle) -> CUresult {
    with_stream(stream, |c| {
        if !dst.is_multiple_of(pattern.len() as u64) {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let Some(len) = n.checked_mul(pattern.len()) else {
            return CUDA_ERROR_INVALID_VALUE;
        };
        let bytes = pattern.repeat(n);
        c.write(&format!("cuMemset of {len} bytes at {dst:#x}"), dst, &bytes)
    })
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
