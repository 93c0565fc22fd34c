//! Checks shared by the functional ops on cudarc buffers: context, length, alignment.

use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, CudaStream, DeviceRepr, DeviceSlice, DriverError, ValidAsZeroBits,
};

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

/// `len` uninitialized elements on `stream`. CUDA rejects zero-byte allocations
/// (`cuMemAlloc(0)` is `CUDA_ERROR_INVALID_VALUE`), so an empty slice is backed by a
/// one-element allocation that it frees when dropped.
pub(crate) fn alloc_uninit<E: DeviceRepr>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> std::result::Result<CudaSlice<E>, DriverError> {
    // SAFETY: device memory of a plain-data type; callers write every element before any
    // is read (or never read an empty slice).
    let s = unsafe { stream.alloc::<E>(len.max(1)) }?;
    if len > 0 {
        return Ok(s);
    }
    let ptr = s.leak();
    // SAFETY: `ptr` is a live allocation of one E made on `stream` (with the same allocator
    // the returned slice frees it with when dropped); zero elements fit in it.
    Ok(unsafe { stream.upgrade_device_ptr(ptr, 0) })
}

/// `len` zeroed elements on `stream` (see [`alloc_uninit`] for `len == 0`).
pub(crate) fn alloc_zeros<E: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> std::result::Result<CudaSlice<E>, DriverError> {
    let mut s = alloc_uninit(stream, len)?;
    if len > 0 {
        stream.memset_zeros(&mut s)?;
    }
    Ok(s)
}

/// A device copy of `data` on `stream` (see [`alloc_uninit`] for empty data).
pub(crate) fn upload<E: DeviceRepr>(
    stream: &Arc<CudaStream>,
    data: &[E],
) -> std::result::Result<CudaSlice<E>, DriverError> {
    let mut s = alloc_uninit(stream, data.len())?;
    if !data.is_empty() {
        stream.memcpy_htod(data, &mut s)?;
    }
    Ok(s)
}
