//! Events: `cuEventCreate`, `cuEventRecord`, `cuEventSynchronize`, `cuEventQuery`,
//! `cuEventElapsedTime*`, `cuEventDestroy*`.
//!
//! Work runs at its call, so recording an event takes the host time then, and
//! `cuEventElapsedTime` returns real host milliseconds between two records; as from the real
//! driver, it is `CUDA_ERROR_INVALID_HANDLE` for an event created with
//! `CU_EVENT_DISABLE_TIMING` or never recorded. An event recorded on a capturing stream is a
//! captured event ([`crate::graph`]): querying, synchronizing or timing it is
//! `CUDA_ERROR_CAPTURED_EVENT`.

use std::ffi::c_uint;
use std::time::Instant;

use crate::consts::*;
use crate::ffi::*;
use crate::state::{driver, Event};

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut Handle, flags: c_uint) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        if event.is_null() || flags & !0xF != 0 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let h = d.handle();
        ctx!(d).events.insert(h, Event { flags, recorded: None, captured: None });
        out(event, h as Handle)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: Handle, stream: Handle) -> CUresult {
    guard! {
        with_stream(stream, |c| {
            let s = stream as usize;
            if !c.events.contains_key(&(event as usize)) {
                return CUDA_ERROR_INVALID_HANDLE;
            }
            check!(c.legacy_check(s, "cuEventRecord on the legacy stream"));
            let capture = match c.captures.get(&s) {
                Some(cap) if cap.invalidated => return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                Some(cap) => Some(cap.id),
                None => None,
            };
            let e = c.events.get_mut(&(event as usize)).expect("checked above");
            e.captured = capture;
            if capture.is_none() {
                e.recorded = Some(Instant::now());
            }
            CUDA_SUCCESS
        })
    }
}

/// Validates an event of the current context (all work is already done). An event last
/// recorded in a capture is `CUDA_ERROR_CAPTURED_EVENT`, and its capture, while under way, is
/// invalidated.
fn event_call(event: Handle, call: &str) -> CUresult {
    with_ctx(|c| {
        let Some(e) = c.events.get(&(event as usize)) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        let Some(id) = e.captured else {
            return CUDA_SUCCESS;
        };
        let stream = c.captures.iter().find(|(_, k)| k.id == id).map(|(s, _)| *s);
        match stream {
            Some(s) => c.invalidate(
                s,
                &format!("{call} of an event recorded in the capture"),
                CUDA_ERROR_CAPTURED_EVENT,
            ),
            None => CUDA_ERROR_CAPTURED_EVENT,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: Handle) -> CUresult {
    guard! { event_call(event, "cuEventSynchronize") }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(event: Handle) -> CUresult {
    guard! { event_call(event, "cuEventQuery") }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: Handle, end: Handle) -> CUresult {
    guard! {
        with_ctx(|c| {
            let (Some(a), Some(b)) = (c.events.get(&(start as usize)), c.events.get(&(end as usize))) else {
                return CUDA_ERROR_INVALID_HANDLE;
            };
            if a.captured.is_some() || b.captured.is_some() {
                return CUDA_ERROR_CAPTURED_EVENT;
            }
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
        })
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
    guard! { with_ctx(|c| found(c.events.remove(&(event as usize)).is_some())) }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy(event: Handle) -> CUresult {
    cuEventDestroy_v2(event)
}
