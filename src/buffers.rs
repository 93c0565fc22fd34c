//! Checks shared by the functional ops on cudarc buffers: context, length, alignment.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceSlice};

use crate::{Error, Result};

/// `buf` must live in the stream's context.
pub(crate) fn check_context<T, B: DeviceSlice<T> + ?Sized>(
    what: &str,
    buf: &B,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    let mine = stream.context();
    let theirs = buf.stream().context();
    if mine.cu_ctx() != theirs.cu_ctx() {
        return Err(Error::ContextMismatch {
            what: what.into(),
            expected: mine.ordinal(),
            given: theirs.ordinal(),
        });
    }
    Ok(())
}

/// `buf` must hold exactly `expected` elements.
pub(crate) fn check_len<T, B: DeviceSlice<T> + ?Sized>(
    what: &str,
    buf: &B,
    expected: usize,
) -> Result<()> {
    if buf.len() != expected {
        return Err(Error::Length {
            what: what.into(),
            expected,
            given: buf.len(),
        });
    }
    Ok(())
}

/// `address` must be a multiple of `align` bytes.
pub fn check_alignment(what: &str, address: u64, align: u64) -> Result<()> {
    if !address.is_multiple_of(align) {
        return Err(Error::Alignment {
            what: what.into(),
            address,
            required: align,
        });
    }
    Ok(())
}
