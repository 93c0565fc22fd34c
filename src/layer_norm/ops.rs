//! The functional LayerNorm ops on the GPU: cudarc views in, caller-provided outputs written.
//!
//! Nothing here allocates device memory or synchronizes with the host, so the calls can be
//! captured in a CUDA graph. Every check (dtypes, contexts, lengths, alignment, workspace)
//! runs before the first launch: a rejected call changes nothing.

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice};

use crate::buffers::{check_context, check_len};
use crate::plan::Executor;
use crate::runtime::{device_props, GpuExecutor};
use crate::{Element, Error, Result};

use super::desc::LayerNormDesc;
use super::plan::{plan_bwd, plan_fwd, workspace_bytes, BwdPtrs, Direction, FwdPtrs};

/// Workspace bytes [`forward`] needs for `desc` on the stream's device (0: pass `None`).
pub fn forward_workspace_bytes(stream: &Arc<CudaStream>, desc: &LayerNormDesc) -> Result<usize> {
    workspace_bytes(desc, Direction::Forward, &device_props(stream)?)
}

/// Workspace bytes [`backward`] needs for `desc` on the stream's device (0: pass `None`).
pub fn backward_workspace_bytes(stream: &Arc<CudaStream>, desc: &LayerNormDesc) -> Result<usize> {
    workspace_bytes(desc, Direction::Backward, &device_props(stream)?)
}

fn check_dtypes<T: Element, P: Element>(desc: &LayerNormDesc) -> Result<()> {
    if T::DTYPE != desc.dtype {
        return Err(Error::DType {
            what: "activations (x, y, dy, dx)".into(),
            expected: desc.dtype.to_string(),
            given: T::DTYPE.to_string(),
        });
    }
    if P::DTYPE != desc.param_dtype {
        return Err(Error::DType {
            what: "parameters (gamma, beta, dgamma, dbeta)".into(),
            expected: desc.param_dtype.to_string(),
            given: P::DTYPE.to_string(),
        });
    }
    Ok(())
}

/// Validates `desc` and the element types; returns the number of activation elements.
fn check_call<T: Element, P: Element>(desc: &LayerNormDesc) -> Result<usize> {
    desc.validate()?;
    check_dtypes::<T, P>(desc)?;
    desc.elements()
}

fn check_buf<T, B: DeviceSlice<T> + ?Sized>(
    what: &str,
    buf: &B,
    len: usize,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    check_context(what, buf, stream)?;
    check_len(what, buf, len)
}

/// [`check_buf`] for an optional buffer (nothing to check when it is absent).
fn check_opt_buf<T, B: DeviceSlice<T> + ?Sized>(
    what: &str,
    buf: Option<&B>,
    len: usize,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    buf.map_or(Ok(()), |b| check_buf(what, b, len, stream))
}

/// The workspace, when given, must live in the stream's context (its size is the plan's check).
fn check_workspace(
    workspace: Option<&CudaViewMut<'_, u8>>,
    stream: &Arc<CudaStream>,
) -> Result<()> {
    workspace.map_or(Ok(()), |w| check_context("workspace", w, stream))
}

/// LayerNorm forward: writes `y`, and the saved statistics `mean` and `rstd` (f32, one per
/// row) that [`backward`] takes.
///
/// `gamma` must be given exactly when `desc.affine` has a weight, `beta` exactly when it has
/// a bias. `workspace` must hold at least [`forward_workspace_bytes`] bytes, 16-byte aligned
/// (`None` when that is 0).
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &LayerNormDesc,
    x: &CudaView<'_, T>,
    gamma: Option<&CudaView<'_, P>>,
    beta: Option<&CudaView<'_, P>>,
    y: &mut CudaViewMut<'_, T>,
    mean: &mut CudaViewMut<'_, f32>,
    rstd: &mut CudaViewMut<'_, f32>,
    workspace: Option<&mut CudaViewMut<'_, u8>>,
) -> Result<()> {
    let n = check_call::<T, P>(desc)?;
    check_buf("x", x, n, stream)?;
    check_buf("y", y, n, stream)?;
    check_opt_buf("gamma", gamma, desc.cols, stream)?;
    check_opt_buf("beta", beta, desc.cols, stream)?;
    check_buf("mean", mean, desc.rows, stream)?;
    check_buf("rstd", rstd, desc.rows, stream)?;
    check_workspace(workspace.as_deref(), stream)?;
    let props = device_props(stream)?;
    let (px, _gx) = x.device_ptr(stream);
    let (py, _gy) = y.device_ptr_mut(stream);
    let g = gamma.map(|g| g.device_ptr(stream));
    let b = beta.map(|b| b.device_ptr(stream));
    let (pm, _gm) = mean.device_ptr_mut(stream);
    let (pr, _gr) = rstd.device_ptr_mut(stream);
    let ws_len = workspace.as_deref().map_or(0, |w| w.len());
    let ws = workspace.map(|w| w.device_ptr_mut(stream));
    let ptrs = FwdPtrs {
        x: px,
        y: py,
        gamma: g.as_ref().map(|g| g.0),
        beta: b.as_ref().map(|b| b.0),
        mean: pm,
        rstd: pr,
        workspace: ws.as_ref().map_or(0, |w| w.0),
        workspace_bytes: ws_len as u64,
    };
    let plan = plan_fwd(desc, &ptrs, &props)?;
    GpuExecutor::new(stream).execute(&plan)
}

/// LayerNorm backward from the forward's input and saved statistics: writes `dx`, and
/// `dgamma` / `dbeta` (in the parameter dtype) when the LayerNorm has them.
///
/// `gamma` and `dgamma` must be given exactly when `desc.affine` has a weight, `dbeta` exactly
/// when it has a bias. `workspace`: at least [`backward_workspace_bytes`] bytes, 16-byte
/// aligned. dgamma/dbeta are reduced in a fixed order: reruns are bitwise identical.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &LayerNormDesc,
    x: &CudaView<'_, T>,
    dy: &CudaView<'_, T>,
    mean: &CudaView<'_, f32>,
    rstd: &CudaView<'_, f32>,
    gamma: Option<&CudaView<'_, P>>,
    dx: &mut CudaViewMut<'_, T>,
    dgamma: Option<&mut CudaViewMut<'_, P>>,
    dbeta: Option<&mut CudaViewMut<'_, P>>,
    workspace: Option<&mut CudaViewMut<'_, u8>>,
) -> Result<()> {
    let n = check_call::<T, P>(desc)?;
    check_buf("x", x, n, stream)?;
    check_buf("dy", dy, n, stream)?;
    check_buf("dx", dx, n, stream)?;
    check_buf("mean", mean, desc.rows, stream)?;
    check_buf("rstd", rstd, desc.rows, stream)?;
    check_opt_buf("gamma", gamma, desc.cols, stream)?;
    check_opt_buf("dgamma", dgamma.as_deref(), desc.cols, stream)?;
    check_opt_buf("dbeta", dbeta.as_deref(), desc.cols, stream)?;
    check_workspace(workspace.as_deref(), stream)?;
    let props = device_props(stream)?;
    let (px, _gx) = x.device_ptr(stream);
    let (pdy, _gdy) = dy.device_ptr(stream);
    let (pdx, _gdx) = dx.device_ptr_mut(stream);
    let (pm, _gm) = mean.device_ptr(stream);
    let (pr, _gr) = rstd.device_ptr(stream);
    let g = gamma.map(|g| g.device_ptr(stream));
    let dg = dgamma.map(|g| g.device_ptr_mut(stream));
    let db = dbeta.map(|b| b.device_ptr_mut(stream));
    let ws_len = workspace.as_deref().map_or(0, |w| w.len());
    let ws = workspace.map(|w| w.device_ptr_mut(stream));
    let ptrs = BwdPtrs {
        x: px,
        dy: pdy,
        dx: pdx,
        gamma: g.as_ref().map(|g| g.0),
        mean: pm,
        rstd: pr,
        dgamma: dg.as_ref().map(|g| g.0),
        dbeta: db.as_ref().map(|b| b.0),
        workspace: ws.as_ref().map_or(0, |w| w.0),
        workspace_bytes: ws_len as u64,
    };
    let plan = plan_bwd(desc, &ptrs, &props)?;
    GpuExecutor::new(stream).execute(&plan)
}
