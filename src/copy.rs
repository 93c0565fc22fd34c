//! Device-to-device copy: the bandwidth roofline the normalization kernels are measured
//! against, and the smallest op that exercises the whole path (ABI, planner, fatbin, launch).

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut};

use crate::abi::WnCopyArgs;
use crate::buffers::Lender;
use crate::check::Buffers;
use crate::device::DeviceProps;
use crate::plan::{grid_dim, Executor, Launch, Plan};
use crate::runtime::GpuExecutor;
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
    let mut bufs = Buffers::new(&[]);
    bufs.input("source", src, n_bytes, 1)?;
    bufs.output("destination", dst, n_bytes, 1)?;
    bufs.finish()?;
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
pub fn copy<T>(
    stream: &Arc<CudaStream>,
    src: CudaView<'_, T>,
    mut dst: CudaViewMut<'_, T>,
) -> Result<()> {
    let n = src.len() as u64;
    let n_bytes = n
        .checked_mul(std::mem::size_of::<T>() as u64)
        .ok_or_else(|| Error::Overflow("copy size in bytes".into()))?;
    let mut lend = Lender::new(stream);
    let s = lend.input("source", &src, n)?;
    let d = lend.output("destination", &mut dst, n)?;
    if n_bytes == 0 {
        return Ok(());
    }
    let mut exec = GpuExecutor::new(stream)?;
    let plan = plan_copy(s, d, n_bytes, exec.props())?;
    exec.execute(&plan)
}
