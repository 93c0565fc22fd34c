//! Device-to-device copy: the bandwidth roofline the normalization kernels are measured
//! against, and the smallest op that exercises the whole path (ABI, planner, fatbin, launch).

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use crate::abi::WnCopyArgs;
use crate::buffers::{check_context, check_len};
use crate::device::DeviceProps;
use crate::plan::{grid_dim, Executor, Launch, Plan};
use crate::runtime::{device_props, GpuExecutor};
use crate::{Error, Result};

/// Threads per block of the copy kernels.
pub const COPY_BLOCK: u32 = 256;

/// Plans a copy of `n_bytes` from device address `src` to `dst`.
///
/// Both 16-byte aligned: the `vec16` kernel (16-byte loads and stores, byte tail);
/// otherwise the `scalar` kernel. The grid is capped at 8 blocks per SM with a grid-stride
/// loop. Overlapping ranges are rejected.
pub fn plan_copy(src: u64, dst: u64, n_bytes: u64, props: &DeviceProps) -> Result<Plan> {
    if n_bytes == 0 {
        return Ok(Plan::empty());
    }
    let end = |p: u64, what: &str| {
        p.checked_add(n_bytes)
            .ok_or_else(|| Error::Overflow(format!("{what} address {p:#x} + {n_bytes} bytes")))
    };
    let (src_end, dst_end) = (end(src, "source")?, end(dst, "destination")?);
    if src < dst_end && dst < src_end {
        return Err(Error::invalid(
            "copy ranges",
            format!(
                "source [{src:#x}, {src_end:#x}) overlaps destination [{dst:#x}, {dst_end:#x})"
            ),
        ));
    }
    let vec16 = src.is_multiple_of(16) && dst.is_multiple_of(16);
    let (kernel, units) = if vec16 {
        ("warpnorm_copy_fwd_u8_vec16", n_bytes / 16)
    } else {
        ("warpnorm_copy_fwd_u8_scalar", n_bytes)
    };
    let max_blocks = props.sm_count as u64 * 8;
    let blocks = units
        .max(1)
        .div_ceil(COPY_BLOCK as u64)
        .clamp(1, max_blocks);
    let args = WnCopyArgs { src, dst, n_bytes };
    let mut plan = Plan::empty();
    plan.push(Launch::new(
        kernel,
        [grid_dim(blocks, kernel)?, 1, 1],
        [COPY_BLOCK, 1, 1],
        0,
        &args,
    ));
    Ok(plan)
}

/// Copies `src` into `dst` on `stream` (asynchronously; no allocation, no host sync).
///
/// Both must hold the same number of elements and live in the stream's context.
pub fn copy<T, S, D>(stream: &Arc<CudaStream>, src: &S, dst: &mut D) -> Result<()>
where
    S: DevicePtr<T>,
    D: DevicePtrMut<T>,
{
    check_context("source", src, stream)?;
    check_context("destination", dst, stream)?;
    check_len("destination", dst, src.len())?;
    let n_bytes = (src.len() as u64)
        .checked_mul(std::mem::size_of::<T>() as u64)
        .ok_or_else(|| Error::Overflow("copy size in bytes".into()))?;
    if n_bytes == 0 {
        return Ok(());
    }
    let props = device_props(stream)?;
    let (s, _sg) = src.device_ptr(stream);
    let (d, _dg) = dst.device_ptr_mut(stream);
    let plan = plan_copy(s, d, n_bytes, &props)?;
    GpuExecutor::new(stream).execute(&plan)
}
