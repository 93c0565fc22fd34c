//! Streams: `cuStreamCreate*`, `cuStreamDestroy*`, `cuStreamSynchronize`, `cuStreamQuery`,
//! `cuStreamWaitEvent`, `cuStreamIsCapturing`, and `cuLaunchHostFunc`.
//!
//! Everything runs synchronously at its call, so a stream is only a handle of the context
//! (besides the null stream, `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`): calls on it check
//! it and find all its work done. Nothing is ever captured (no graphs).

use std::ffi::{c_int, c_uint, c_void};

use crate::consts::*;
use crate::ffi::*;
use crate::state::driver;

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
    guard! { with_ctx(|c| found(c.streams.remove(&(stream as usize)))) }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy(stream: Handle) -> CUresult {
    cuStreamDestroy_v2(stream)
}

/// Validates a stream of the current context (all work is already done). Returns with the
/// driver unlocked.
pub fn stream_call(stream: Handle) -> CUresult {
    with_stream(stream, |_| CUDA_SUCCESS)
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
    guard! { with_stream(stream, |c| found(c.events.contains_key(&(event as usize)))) }
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
