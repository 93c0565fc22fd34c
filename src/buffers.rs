//! The functional ops' side of validation: buffers live in the stream's context and hold
//! exactly the elements the call needs, then lend their device addresses to a plan; plus the
//! module types' allocation helpers.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
    DeviceSlice, DriverError, SyncOnDrop, ValidAsZeroBits,
};

use crate::{Element, Error, Result};

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
    expected: u64,
) -> Result<()> {
    if buf.len() as u64 != expected {
        return Err(Error::Length {
            what: what.into(),
            expected: expected as usize,
            given: buf.len(),
        });
    }
    Ok(())
}

/// Lends the device addresses of a call's buffers to its plan: checks each buffer's context
/// and length first, and keeps cudarc's stream-ordering guards alive until the launches are
/// enqueued (drop it after executing the plan).
pub(crate) struct Lender<'a> {
    stream: &'a Arc<CudaStream>,
    guards: Vec<SyncOnDrop<'a>>,
}

impl<'a> Lender<'a> {
    pub(crate) fn new(stream: &'a Arc<CudaStream>) -> Lender<'a> {
        Lender {
            stream,
            guards: Vec::with_capacity(10),
        }
    }

    /// The address of a buffer the call reads, which must hold `len` elements.
    pub(crate) fn input<T>(
        &mut self,
        what: &str,
        buf: &'a CudaView<'_, T>,
        len: u64,
    ) -> Result<u64> {
        check_context(what, buf, self.stream)?;
        check_len(what, buf, len)?;
        let (ptr, guard) = buf.device_ptr(self.stream);
        self.guards.push(guard);
        Ok(ptr)
    }

    /// The address of a buffer the call writes, which must hold `len` elements.
    pub(crate) fn output<T>(
        &mut self,
        what: &str,
        buf: &'a mut CudaViewMut<'_, T>,
        len: u64,
    ) -> Result<u64> {
        check_context(what, buf, self.stream)?;
        check_len(what, buf, len)?;
        let (ptr, guard) = buf.device_ptr_mut(self.stream);
        self.guards.push(guard);
        Ok(ptr)
    }

    /// [`Lender::input`] for an optional buffer.
    pub(crate) fn input_opt<T>(
        &mut self,
        what: &str,
        buf: Option<&'a CudaView<'_, T>>,
        len: u64,
    ) -> Result<Option<u64>> {
        buf.map(|b| self.input(what, b, len)).transpose()
    }

    /// [`Lender::output`] for an optional buffer.
    pub(crate) fn output_opt<T>(
        &mut self,
        what: &str,
        buf: Option<&'a mut CudaViewMut<'_, T>>,
        len: u64,
    ) -> Result<Option<u64>> {
        buf.map(|b| self.output(what, b, len)).transpose()
    }

    /// The address and size in bytes of an optional workspace (any size: the plan checks it
    /// against what the op's `*_workspace_bytes` query returns).
    pub(crate) fn workspace(
        &mut self,
        buf: Option<&'a mut CudaViewMut<'_, u8>>,
    ) -> Result<(u64, u64)> {
        match buf {
            None => Ok((0, 0)),
            Some(b) => {
                let len = b.len() as u64;
                Ok((self.output("workspace", b, len)?, len))
            }
        }
    }
}

/// A call's activations: an input and an output apart, or one buffer that holds the input and
/// is overwritten by the output (the in-place forms). The public `*Buffers` / `*InPlaceBuffers`
/// structs of an op become one crate-private call with an `InOut`, so that each direction of
/// an op has one body.
pub(crate) enum InOut<'a, T> {
    /// Input and output in separate buffers.
    Apart(CudaView<'a, T>, CudaViewMut<'a, T>),
    /// One buffer: read, then overwritten.
    InPlace(CudaViewMut<'a, T>),
}

impl<'a> Lender<'a> {
    /// The (input, output) addresses of `io`, both the in-place buffer's address in place;
    /// `names` are the input's, the output's and the in-place buffer's names for errors.
    pub(crate) fn in_out<T>(
        &mut self,
        names: [&str; 3],
        io: &'a mut InOut<'_, T>,
        len: u64,
    ) -> Result<(u64, u64)> {
        match io {
            InOut::Apart(x, y) => Ok((
                self.input(names[0], x, len)?,
                self.output(names[1], y, len)?,
            )),
            InOut::InPlace(xy) => {
                let p = self.output(names[2], xy, len)?;
                Ok((p, p))
            }
        }
    }
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

/// `len` elements equal to `value` on `stream`, written on the device (cuMemsetD16/D32), so
/// that no host buffer scales with `len`: a size that cannot be allocated is a driver error,
/// never a host allocation failure (an abort).
pub(crate) fn alloc_filled<E: Element>(
    stream: &Arc<CudaStream>,
    len: usize,
    value: E,
) -> std::result::Result<CudaSlice<E>, DriverError> {
    let mut s = alloc_uninit::<E>(stream, len)?;
    if len == 0 {
        return Ok(s);
    }
    let mut bits = [0u8; 4];
    let size = std::mem::size_of::<E>();
    // SAFETY: Element types are plain data of 2 or 4 bytes (f16, bf16, f32).
    unsafe {
        std::ptr::copy_nonoverlapping(&value as *const E as *const u8, bits.as_mut_ptr(), size)
    };
    let (ptr, _guard) = s.device_ptr_mut(stream);
    // SAFETY: `ptr` is a live allocation of `len` elements of `size` bytes made on `stream`;
    // the pattern is `value`'s own bits, valid for E.
    unsafe {
        match size {
            4 => sys::cuMemsetD32Async(ptr, u32::from_ne_bytes(bits), len, stream.cu_stream()),
            _ => sys::cuMemsetD16Async(
                ptr,
                u16::from_ne_bytes([bits[0], bits[1]]),
                len,
                stream.cu_stream(),
            ),
        }
    }
    .result()?;
    drop(_guard);
    Ok(s)
}

/// A host copy of a module's buffer (synchronizes with the stream), or `None` without one.
pub(crate) fn download_entry<E: DeviceRepr>(
    stream: &Arc<CudaStream>,
    what: &str,
    src: Option<&CudaSlice<E>>,
) -> Result<Option<Vec<E>>> {
    let Some(s) = src else { return Ok(None) };
    if s.is_empty() {
        return Ok(Some(Vec::new()));
    }
    stream
        .clone_dtoh(s)
        .map(Some)
        .map_err(Error::driver(format!("downloading {what}")))
}
