//! The primary context and the current context: `cuDevicePrimaryCtx*` and `cuCtx*` (current
//! context stack, device, synchronize, API version, flags, limits, stream priorities, cache
//! configuration).
//!
//! The device has one context, its primary context, reference counted: the first retain
//! creates it (a fresh [`ptxsim::Device`] with racecheck and initcheck on), the last release
//! destroys it with everything in it (memory, modules, streams, events, sticky error). A
//! calling thread has a stack of current contexts ([`crate::state::current`]); every call that
//! works in a context needs the primary context current and fails with the context's sticky
//! error once a launch has faulted (see [`crate::state::Driver::ctx`]). Everything already ran
//! at its call, so synchronizing only checks.

use std::ffi::{c_int, c_uint};

use crate::consts::*;
use crate::ffi::*;
use crate::state::{current, driver, pop_current, push_current, set_current, Driver};

// ---- primary context ------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut Handle, dev: CUdevice) -> CUresult {
    guard! {
        with_device(dev, |d| {
            if pctx.is_null() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            let h = d.retain();
            out(pctx, h as Handle)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    guard! {
        with_device(dev, |d| d.release())
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
        with_device(dev, |d| {
            let (f, a) = d.ctx.as_ref().map_or((0, 0), |c| (c.flags, 1));
            check!(out(flags, f));
            out(active, a)
        })
    }
}

// ---- current context ------------------------------------------------------------------

/// `CUDA_SUCCESS` when `h` is the live context (or null, when `null_ok`).
fn check_ctx_handle(d: &Driver, h: usize, null_ok: bool) -> CUresult {
    check!(check_init(d));
    if (h == 0 && null_ok) || d.ctx.as_ref().is_some_and(|c| c.handle == h) {
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
        check!(check_init(&driver()));
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
        check!(check_init(&driver()));
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

// ---- the current context's properties -------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CUresult {
    guard! { with_ctx(|_| out(dev, 0)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    guard! {
        with_ctx(|c| {
            // Synchronizing the context would synchronize its capturing streams: rejected, and
            // every capture of the context is invalidated (see crate::graph).
            let capturing: Vec<usize> = c.captures.keys().copied().collect();
            for s in &capturing {
                c.invalidate(*s, "cuCtxSynchronize", CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
            }
            if capturing.is_empty() {
                CUDA_SUCCESS
            } else {
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            }
        })
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
    guard! { with_ctx(|c| out(flags, c.flags)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetFlags(flags: c_uint) -> CUresult {
    guard! {
        with_ctx(|c| {
            c.flags = flags;
            CUDA_SUCCESS
        })
    }
}

/// The value of `CUlimit` `limit` until it is set, or `None` for a value that is not one.
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
        with_ctx(|c| match c.limits.get(&limit).copied().or_else(|| default_limit(limit)) {
            Some(v) => out(value, v),
            None => CUDA_ERROR_INVALID_VALUE,
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: c_int, value: usize) -> CUresult {
    guard! {
        with_ctx(|c| {
            if default_limit(limit).is_none() {
                return CUDA_ERROR_INVALID_VALUE;
            }
            c.limits.insert(limit, value);
            CUDA_SUCCESS
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CUresult {
    guard! {
        with_ctx(|_| {
            if !least.is_null() {
                *least = 0;
            }
            if !greatest.is_null() {
                *greatest = -5;
            }
            CUDA_SUCCESS
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut c_int) -> CUresult {
    guard! { with_ctx(|c| out(config, c.cache_config)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCacheConfig(config: c_int) -> CUresult {
    guard! {
        with_ctx(|c| {
            if !valid_cache_config(config) {
                return CUDA_ERROR_INVALID_VALUE;
            }
            c.cache_config = config;
            CUDA_SUCCESS
        })
    }
}
