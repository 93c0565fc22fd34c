//! Events: `cuEventCreate`, `cuEventRecord`, `cuEventSynchronize`, `cuEventQuery`,
//! `cuEventElapsedTime*`, `cuEventDestroy*`.
//!
//! Work runs at its call, so recording an event takes the host time then, and
//! `cuEventElapsedTime` returns real host milliseconds between two records; as from the real
//! driver, it is `CUDA_ERROR_INVALID_HANDLE` for an event created with
//! `CU_EVENT_DISABLE_TIMING` or never recorded.

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
        ctx!(d).events.insert(h, Event { flags, recorded: None });
        out(event, h as Handle)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: Handle, stream: Handle) -> CUresult {
    guard! {
        with_stream(stream, |c| match c.events.get_mut(&(event as usize)) {
            Some(e) => {
                e.recorded = Some(Instant::now());
                CUDA_SUCCESS
            }
            None => CUDA_ERROR_INVALID_HANDLE,
        })
    }
}

/// Validates an event of the current context (all work is already done).
fn event_call(event: Handle) -> CUresult {
    with_ctx(|c| found(c.events.contains_key(&(event as usize))))
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
        with_ctx(|c| {
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
