//! What every export shares, written once: the driver API's C types, the panic guard, result
//! checks, out-parameters, argument checks, the driver lock with the device or the current
//! context, and diagnostics on stderr.
//!
//! An export's body is `guard! { ... }` (no panic crosses into C). Inside it:
//! - [`with_device`] runs a closure on the locked driver once the device ordinal is checked;
//! - [`with_ctx`], [`with_spec_ctx`] and [`with_stream`] run one on the calling thread's
//!   current context (with the device's [`Spec`], or with a stream of it checked first) under
//!   the driver lock, or return the context's error when there is none usable (not
//!   initialized, not current, sticky error);
//! - where the body also needs the driver itself, for a fresh handle or the PTX cache, it locks
//!   with [`driver`] and takes the context with `ctx!(d)`;
//! - [`out`] writes a result through a caller's pointer, `check!` returns a failed result.
//!
//! The closure runs with the driver locked: it must not call another export (the lock is not
//! reentrant), which is why the allocation exports share a helper that takes the locked
//! context instead of calling each other, and `cuLaunchHostFunc` and `cuGraphLaunch` call host
//! functions after the check, with the driver unlocked.

use std::ffi::{c_int, c_void};

use crate::consts::*;
use crate::device::Spec;
use crate::state::{driver, Context, Driver};

/// `CUdevice`: a device ordinal.
pub type CUdevice = c_int;
/// `CUcontext`, `CUstream`, `CUevent`, `CUmodule`, `CUfunction`: opaque handles.
pub type Handle = *mut c_void;
/// `CUdeviceptr`: a device address.
pub type CUdeviceptr = u64;
/// `CUhostFn`: the callback of `cuLaunchHostFunc`.
pub type CUhostFn = Option<unsafe extern "C" fn(*mut c_void)>;

/// Runs the body, turning a panic into `CUDA_ERROR_UNKNOWN`.
macro_rules! guard {
    ($($body:tt)*) => {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(
            || -> $crate::consts::CUresult { $($body)* },
        )) {
            Ok(r) => r,
            Err(_) => $crate::consts::CUDA_ERROR_UNKNOWN,
        }
    };
}
pub(crate) use guard;

/// The current context of the locked driver `$d`, or return its error.
macro_rules! ctx {
    ($d:ident) => {
        match $d.ctx() {
            Ok(c) => c,
            Err(e) => return e,
        }
    };
}
pub(crate) use ctx;

/// Returns the result `$e` unless it is `CUDA_SUCCESS` (a path, so that the pattern is the
/// constant wherever the macro is used, never a binding).
macro_rules! check {
    ($e:expr) => {
        match $e {
            $crate::consts::CUDA_SUCCESS => {}
            e => return e,
        }
    };
}
pub(crate) use check;

/// Writes `v` through `p`, or `CUDA_ERROR_INVALID_VALUE` when `p` is null.
///
/// # Safety
/// `p` is null or valid for a write of a `T` (alignment not needed).
pub unsafe fn out<T>(p: *mut T, v: T) -> CUresult {
    if p.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    p.write_unaligned(v);
    CUDA_SUCCESS
}

/// `CUDA_SUCCESS` once `cuInit` has succeeded, else `CUDA_ERROR_NOT_INITIALIZED`.
pub fn check_init(d: &Driver) -> CUresult {
    if d.initialized {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_NOT_INITIALIZED
    }
}

/// Locks the driver and runs `f` on it when it is initialized and `dev` is the emulated device
/// (`CUDA_ERROR_NOT_INITIALIZED` or `CUDA_ERROR_INVALID_DEVICE` otherwise).
pub fn with_device(dev: CUdevice, f: impl FnOnce(&mut Driver) -> CUresult) -> CUresult {
    let mut d = driver();
    check!(check_init(&d));
    if dev != 0 {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    f(&mut d)
}

/// Whether `config` is a `CUfunc_cache` value (`CU_FUNC_CACHE_PREFER_NONE` to `..._EQUAL`).
pub fn valid_cache_config(config: c_int) -> bool {
    (0..=4).contains(&config)
}

/// `CUDA_SUCCESS` when a handle was found, else `CUDA_ERROR_INVALID_HANDLE`.
pub fn found(handle_known: bool) -> CUresult {
    if handle_known {
        CUDA_SUCCESS
    } else {
        CUDA_ERROR_INVALID_HANDLE
    }
}

/// Locks the driver and runs `f` on the current context, or returns why there is none
/// (see [`Driver::ctx`]).
pub fn with_ctx(f: impl FnOnce(&mut Context) -> CUresult) -> CUresult {
    with_spec_ctx(|_, c| f(c))
}

/// [`with_ctx`], with the emulated device's [`Spec`] too.
pub fn with_spec_ctx(f: impl FnOnce(Spec, &mut Context) -> CUresult) -> CUresult {
    let mut d = driver();
    let spec = d.spec();
    let c = ctx!(d);
    f(spec, c)
}

/// [`with_ctx`], with `stream` checked first to be a stream of the context
/// (`CUDA_ERROR_INVALID_HANDLE` otherwise).
pub fn with_stream(stream: Handle, f: impl FnOnce(&mut Context) -> CUresult) -> CUresult {
    with_ctx(|c| {
        if !c.stream_ok(stream as usize) {
            return CUDA_ERROR_INVALID_HANDLE;
        }
        f(c)
    })
}

/// Prints a diagnostic line to stderr.
pub fn say(msg: impl std::fmt::Display) {
    eprintln!("simcuda: {msg}");
}
