//! Streams: `cuStreamCreate*`, `cuStreamDestroy*`, `cuStreamSynchronize`, `cuStreamQuery`,
//! `cuStreamWaitEvent`, and `cuLaunchHostFunc`.
//!
//! Everything runs synchronously at its call, so a stream is only a handle of the context
//! (besides the null stream, `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`): calls on it check
//! it and find all its work done, unless the stream is being captured into a graph, where work
//! is recorded and synchronizing or querying is rejected as the driver rejects it (see
//! [`crate::graph`], which also has `cuStreamIsCapturing` and the other capture calls).

use std::ffi::{c_int, c_uint, c_void};

use crate::consts::*;
use crate::ffi::*;
use crate::graph::{note_stream_flags, Node};
use crate::state::driver;

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut Handle, flags: c_uint) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        if stream.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let h = d.handle();
        let c = ctx!(d);
        c.streams.insert(h);
        note_stream_flags(c, h, flags);
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
        with_ctx(|c| {
            let s = stream as usize;
            c.blocking.remove(&s);
            // A capture under way ends with its stream (not modelled further: see graph).
            c.captures.remove(&s);
            found(c.streams.remove(&s))
        })
    }
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

/// Synchronizing or querying `stream` (all its work is already done): rejected while it is
/// captured (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, the capture is invalidated), or for the
/// legacy stream while a blocking stream is (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`).
fn wait_for_stream(stream: Handle, call: &str) -> CUresult {
    with_stream(stream, |c| {
        let s = stream as usize;
        if c.captures.contains_key(&s) {
            return c.invalidate(
                s,
                &format!("{call} of a capturing stream"),
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            );
        }
        c.legacy_check(s, &format!("{call} of the legacy stream"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: Handle) -> CUresult {
    guard! { wait_for_stream(stream, "cuStreamSynchronize") }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(stream: Handle) -> CUresult {
    guard! { wait_for_stream(stream, "cuStreamQuery") }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    stream: Handle,
    event: Handle,
    flags: c_uint,
) -> CUresult {
    guard! {
        with_stream(stream, |c| {
            let s = stream as usize;
            if flags & !EVENT_WAIT_EXTERNAL != 0 {
                return CUDA_ERROR_INVALID_VALUE;
            }
            let Some(e) = c.events.get(&(event as usize)) else {
                return CUDA_ERROR_INVALID_HANDLE;
            };
            let event_capture = e.captured;
            check!(c.legacy_check(s, "cuStreamWaitEvent on the legacy stream"));
            let event_live = event_capture.is_some_and(|id| c.captures.values().any(|k| k.id == id));
            let own = c.captures.get(&s).map(|k| (k.id, k.invalidated));
            match own {
                Some((_, true)) => CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                // An ordering inside the sequence, which is a chain already.
                Some((id, _)) if event_capture == Some(id) => CUDA_SUCCESS,
                // An external event wait node: nothing to wait for, all work is done.
                Some(_) if flags & EVENT_WAIT_EXTERNAL != 0 => CUDA_SUCCESS,
                Some(_) if event_live => c.invalidate(
                    s,
                    "cuStreamWaitEvent on an event of another capture sequence",
                    CUDA_ERROR_STREAM_CAPTURE_MERGE,
                ),
                Some(_) => c.invalidate(
                    s,
                    "cuStreamWaitEvent on an event recorded outside the capture",
                    CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                ),
                None if flags & EVENT_WAIT_EXTERNAL != 0 => CUDA_ERROR_INVALID_VALUE,
                None if event_live => {
                    say("cuStreamWaitEvent on a captured event from a stream not capturing: \
                         joining a stream into a capture is not modelled (CUDA_ERROR_NOT_SUPPORTED)");
                    CUDA_ERROR_NOT_SUPPORTED
                }
                None => CUDA_SUCCESS,
            }
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(
    stream: Handle,
    f: CUhostFn,
    data: *mut c_void,
) -> CUresult {
    guard! {
        let Some(f) = f else {
            check!(stream_call(stream));
            return CUDA_ERROR_INVALID_VALUE;
        };
        let s = stream as usize;
        let mut captured = false;
        check!(with_stream(stream, |c| {
            check!(c.legacy_check(s, "cuLaunchHostFunc on the legacy stream"));
            if c.captures.contains_key(&s) {
                captured = true;
                return c.submit(s, Node::Host { f, data: data as usize }, "cuLaunchHostFunc");
            }
            CUDA_SUCCESS
        }));
        if !captured {
            // Called without the driver lock held: all earlier work on the stream is done.
            f(data);
        }
        CUDA_SUCCESS
    }
}
