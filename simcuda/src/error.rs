//! Errors: `cuGetErrorName` and `cuGetErrorString`, from one table of the result codes'
//! names and descriptions ([`ERRORS`]), which diagnostics use too ([`error_name`]).

use std::ffi::{c_char, CStr};

use crate::consts::*;
use crate::ffi::*;

/// Names and descriptions for `cuGetErrorName` / `cuGetErrorString` (the codes above plus the
/// ones a caller is likely to ask about).
pub const ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (CUDA_SUCCESS, c"CUDA_SUCCESS", c"no error"),
    (
        CUDA_ERROR_INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument",
    ),
    (
        CUDA_ERROR_OUT_OF_MEMORY,
        c"CUDA_ERROR_OUT_OF_MEMORY",
        c"out of memory",
    ),
    (
        CUDA_ERROR_NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error",
    ),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (
        34,
        c"CUDA_ERROR_STUB_LIBRARY",
        c"CUDA driver is a stub library",
    ),
    (
        CUDA_ERROR_NO_DEVICE,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (
        CUDA_ERROR_INVALID_DEVICE,
        c"CUDA_ERROR_INVALID_DEVICE",
        c"invalid device ordinal",
    ),
    (
        CUDA_ERROR_INVALID_IMAGE,
        c"CUDA_ERROR_INVALID_IMAGE",
        c"device kernel image is invalid",
    ),
    (
        CUDA_ERROR_INVALID_CONTEXT,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        CUDA_ERROR_NO_BINARY_FOR_GPU,
        c"CUDA_ERROR_NO_BINARY_FOR_GPU",
        c"no kernel image is available for execution on the device",
    ),
    (
        CUDA_ERROR_INVALID_PTX,
        c"CUDA_ERROR_INVALID_PTX",
        c"a PTX JIT compilation failed",
    ),
    (
        222,
        c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        c"the provided PTX was compiled with an unsupported toolchain.",
    ),
    (
        CUDA_ERROR_INVALID_HANDLE,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (
        CUDA_ERROR_ILLEGAL_STATE,
        c"CUDA_ERROR_ILLEGAL_STATE",
        c"the operation cannot be performed in the present state",
    ),
    (
        CUDA_ERROR_NOT_FOUND,
        c"CUDA_ERROR_NOT_FOUND",
        c"named symbol not found",
    ),
    (
        CUDA_ERROR_NOT_READY,
        c"CUDA_ERROR_NOT_READY",
        c"device not ready",
    ),
    (
        CUDA_ERROR_ILLEGAL_ADDRESS,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (
        701,
        c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        c"too many resources requested for launch",
    ),
    (
        CUDA_ERROR_LAUNCH_TIMEOUT,
        c"CUDA_ERROR_LAUNCH_TIMEOUT",
        c"the launch timed out and was terminated",
    ),
    (
        CUDA_ERROR_ASSERT,
        c"CUDA_ERROR_ASSERT",
        c"device-side assert triggered",
    ),
    (
        CUDA_ERROR_MISALIGNED_ADDRESS,
        c"CUDA_ERROR_MISALIGNED_ADDRESS",
        c"misaligned address",
    ),
    (
        CUDA_ERROR_LAUNCH_FAILED,
        c"CUDA_ERROR_LAUNCH_FAILED",
        c"unspecified launch failure",
    ),
    (
        CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
        c"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
        c"too many blocks in cooperative launch",
    ),
    (
        CUDA_ERROR_NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
        c"operation not permitted when stream is capturing",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        c"operation failed due to a previous error during capture",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_MERGE,
        c"CUDA_ERROR_STREAM_CAPTURE_MERGE",
        c"operation would result in a merge of separate capture sequences",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
        c"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
        c"capture was not ended in the same stream as it began",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
        c"CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
        c"capturing stream has unjoined work",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        c"CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
        c"dependency created on uncaptured work in another stream",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
        c"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
        c"operation would make the legacy stream depend on a capturing blocking stream",
    ),
    (
        CUDA_ERROR_CAPTURED_EVENT,
        c"CUDA_ERROR_CAPTURED_EVENT",
        c"operation not permitted on an event last recorded in a capturing stream",
    ),
    (
        CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
        c"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
        c"attempt to terminate a thread-local capture sequence from another thread",
    ),
    (CUDA_ERROR_UNKNOWN, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

/// The table entry of `code`: the code, its name and its description.
fn error_entry(code: CUresult) -> Option<&'static (CUresult, &'static CStr, &'static CStr)> {
    ERRORS.iter().find(|e| e.0 == code)
}

/// The name of result code `code` (`"CUDA_ERROR_ILLEGAL_ADDRESS"`), `"?"` for one not in
/// [`ERRORS`].
pub fn error_name(code: CUresult) -> &'static str {
    error_entry(code).map_or("?", |e| e.1.to_str().unwrap_or("?"))
}

/// Writes the name or the description (`text` picks it from the entry) of `code` through `s`,
/// or null and `CUDA_ERROR_INVALID_VALUE` for a code not in [`ERRORS`].
unsafe fn error_text(
    code: CUresult,
    s: *mut *const c_char,
    text: fn(&(CUresult, &'static CStr, &'static CStr)) -> &'static CStr,
) -> CUresult {
    match error_entry(code) {
        Some(e) => out(s, text(e).as_ptr()),
        None => {
            out(s, std::ptr::null());
            CUDA_ERROR_INVALID_VALUE
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(code: CUresult, s: *mut *const c_char) -> CUresult {
    guard! { error_text(code, s, |e| e.2) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(code: CUresult, s: *mut *const c_char) -> CUresult {
    guard! { error_text(code, s, |e| e.1) }
}
