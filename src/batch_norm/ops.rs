//! Functional BatchNorm on cudarc buffers: validate, plan, launch. No allocation and no host
//! synchronization (graph-capture safe); the caller provides every buffer, including the f32
//! workspace of [`super::workspace_len`] elements.

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, SyncOnDrop};

use crate::buffers::{check_context, check_len};
use crate::plan::Executor;
use crate::runtime::{device_props, GpuExecutor};
use crate::{Element, Error, Result};

use super::desc::{BatchNormDesc, ForwardMode};
use super::plan::{plan_batch_norm_bwd, plan_batch_norm_fwd, workspace_len, BwdPtrs, FwdPtrs};

/// The buffers of a forward call: activations of `T`, parameters and running statistics of
/// `P` (f32, or `T`). `None` = not given (see [`FwdPtrs`] for what each one means).
pub struct ForwardBuffers<'a, T, P> {
    /// Input, `N * C * S` elements in `desc.layout`.
    pub x: &'a dyn DevicePtr<T>,
    /// Output, like `x`.
    pub y: &'a mut dyn DevicePtrMut<T>,
    /// Scale (C).
    pub gamma: Option<&'a dyn DevicePtr<P>>,
    /// Shift (C).
    pub beta: Option<&'a dyn DevicePtr<P>>,
    /// Running mean (C), updated in training.
    pub running_mean: Option<&'a mut dyn DevicePtrMut<P>>,
    /// Running variance (C), updated in training.
    pub running_var: Option<&'a mut dyn DevicePtrMut<P>>,
    /// Batch counter (1), incremented in training.
    pub num_batches_tracked: Option<&'a mut dyn DevicePtrMut<i64>>,
    /// Saved mean for backward (C f32).
    pub save_mean: Option<&'a mut dyn DevicePtrMut<f32>>,
    /// Saved invstd for backward (C f32).
    pub save_invstd: Option<&'a mut dyn DevicePtrMut<f32>>,
    /// Workspace ([`workspace_len`] f32).
    pub workspace: &'a mut dyn DevicePtrMut<f32>,
}

/// The buffers of a backward call.
pub struct BackwardBuffers<'a, T, P> {
    /// The forward input.
    pub x: &'a dyn DevicePtr<T>,
    /// Gradient of the output.
    pub dy: &'a dyn DevicePtr<T>,
    /// Gradient of the input (written).
    pub dx: &'a mut dyn DevicePtrMut<T>,
    /// Scale used by the forward (C).
    pub gamma: Option<&'a dyn DevicePtr<P>>,
    /// The forward's saved mean (C f32).
    pub save_mean: &'a dyn DevicePtr<f32>,
    /// The forward's saved invstd (C f32).
    pub save_invstd: &'a dyn DevicePtr<f32>,
    /// Gradient of gamma (C, written).
    pub dgamma: Option<&'a mut dyn DevicePtrMut<P>>,
    /// Gradient of beta (C, written).
    pub dbeta: Option<&'a mut dyn DevicePtrMut<P>>,
    /// Workspace ([`workspace_len`] f32).
    pub workspace: &'a mut dyn DevicePtrMut<f32>,
}

fn check_types<T: Element, P: Element>(desc: &BatchNormDesc) -> Result<()> {
    for (what, want, got) in [
        ("activation buffers", desc.dtype, T::DTYPE),
        ("parameter buffers", desc.param_dtype, P::DTYPE),
    ] {
        if want != got {
            return Err(Error::DType {
                what: what.into(),
                expected: want.to_string(),
                given: got.to_string(),
            });
        }
    }
    Ok(())
}

/// Context and length of one read buffer.
fn check_in<T>(
    stream: &Arc<CudaStream>,
    what: &str,
    b: &dyn DevicePtr<T>,
    len: usize,
) -> Result<()> {
    check_context(what, b, stream)?;
    check_len(what, b, len)
}

/// Context and length of one written buffer.
fn check_out<T>(
    stream: &Arc<CudaStream>,
    what: &str,
    b: &dyn DevicePtrMut<T>,
    len: usize,
) -> Result<()> {
    check_context(what, b, stream)?;
    check_len(what, b, len)
}

fn workspace_check(stream: &Arc<CudaStream>, b: &dyn DevicePtrMut<f32>, need: usize) -> Result<()> {
    check_context("workspace", b, stream)?;
    if b.len() < need {
        return Err(Error::Length {
            what: "workspace (at least)".into(),
            expected: need,
            given: b.len(),
        });
    }
    Ok(())
}

/// Runs a BatchNorm forward on `stream`: training (`mode.batch_stats`) normalizes with the
/// batch statistics, updates the running statistics and increments num_batches_tracked when
/// they are given; eval normalizes with the running statistics. Every check happens before
/// the first launch: an error leaves every buffer untouched.
pub fn batch_norm_forward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &BatchNormDesc,
    mode: &ForwardMode,
    b: ForwardBuffers<'_, T, P>,
) -> Result<()> {
    check_types::<T, P>(desc)?;
    let g = desc.geometry()?;
    let numel = usize::try_from(g.numel).map_err(|_| Error::Overflow("numel".into()))?;
    let c = g.c as usize;
    check_in(stream, "x", b.x, numel)?;
    check_out(stream, "y", &*b.y, numel)?;
    if let Some(p) = b.gamma {
        check_in(stream, "gamma", p, c)?;
    }
    if let Some(p) = b.beta {
        check_in(stream, "beta", p, c)?;
    }
    if let Some(p) = b.running_mean.as_deref() {
        check_out(stream, "running_mean", p, c)?;
    }
    if let Some(p) = b.running_var.as_deref() {
        check_out(stream, "running_var", p, c)?;
    }
    if let Some(p) = b.num_batches_tracked.as_deref() {
        check_out(stream, "num_batches_tracked", p, 1)?;
    }
    if let Some(p) = b.save_mean.as_deref() {
        check_out(stream, "save_mean", p, c)?;
    }
    if let Some(p) = b.save_invstd.as_deref() {
        check_out(stream, "save_invstd", p, c)?;
    }
    let props = device_props(stream)?;
    workspace_check(stream, &*b.workspace, workspace_len(desc, &props)?)?;

    let (x, g1) = b.x.device_ptr(stream);
    let gamma = b.gamma.map(|p| p.device_ptr(stream));
    let beta = b.beta.map(|p| p.device_ptr(stream));
    let (y, g2) = b.y.device_ptr_mut(stream);
    let running_mean = b.running_mean.map(|p| p.device_ptr_mut(stream));
    let running_var = b.running_var.map(|p| p.device_ptr_mut(stream));
    let num_batches_tracked = b.num_batches_tracked.map(|p| p.device_ptr_mut(stream));
    let save_mean = b.save_mean.map(|p| p.device_ptr_mut(stream));
    let save_invstd = b.save_invstd.map(|p| p.device_ptr_mut(stream));
    let (workspace, g3) = b.workspace.device_ptr_mut(stream);
    let addr = |p: &Option<(u64, SyncOnDrop<'_>)>| p.as_ref().map(|p| p.0);
    let ptrs = FwdPtrs {
        x,
        y,
        gamma: addr(&gamma),
        beta: addr(&beta),
        running_mean: addr(&running_mean),
        running_var: addr(&running_var),
        num_batches_tracked: addr(&num_batches_tracked),
        save_mean: addr(&save_mean),
        save_invstd: addr(&save_invstd),
        workspace,
    };
    let plan = plan_batch_norm_fwd(desc, mode, &ptrs, &props)?;
    let r = GpuExecutor::new(stream).execute(&plan);
    // The guards record the launches' stream events; keep them alive until here.
    drop((g1, g2, g3, gamma, beta, running_mean, running_var));
    drop((num_batches_tracked, save_mean, save_invstd));
    r
}

/// Runs a BatchNorm backward on `stream` (see [`plan_batch_norm_bwd`] for `frozen`).
pub fn batch_norm_backward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &BatchNormDesc,
    frozen: bool,
    b: BackwardBuffers<'_, T, P>,
) -> Result<()> {
    check_types::<T, P>(desc)?;
    let g = desc.geometry()?;
    let numel = usize::try_from(g.numel).map_err(|_| Error::Overflow("numel".into()))?;
    let c = g.c as usize;
    check_in(stream, "x", b.x, numel)?;
    check_in(stream, "dy", b.dy, numel)?;
    check_out(stream, "dx", &*b.dx, numel)?;
    if let Some(p) = b.gamma {
        check_in(stream, "gamma", p, c)?;
    }
    check_in(stream, "save_mean", b.save_mean, c)?;
    check_in(stream, "save_invstd", b.save_invstd, c)?;
    if let Some(p) = b.dgamma.as_deref() {
        check_out(stream, "dgamma", p, c)?;
    }
    if let Some(p) = b.dbeta.as_deref() {
        check_out(stream, "dbeta", p, c)?;
    }
    let props = device_props(stream)?;
    workspace_check(stream, &*b.workspace, workspace_len(desc, &props)?)?;

    let (x, g1) = b.x.device_ptr(stream);
    let (dy, g2) = b.dy.device_ptr(stream);
    let (save_mean, g3) = b.save_mean.device_ptr(stream);
    let (save_invstd, g4) = b.save_invstd.device_ptr(stream);
    let gamma = b.gamma.map(|p| p.device_ptr(stream));
    let (dx, g5) = b.dx.device_ptr_mut(stream);
    let dgamma = b.dgamma.map(|p| p.device_ptr_mut(stream));
    let dbeta = b.dbeta.map(|p| p.device_ptr_mut(stream));
    let (workspace, g6) = b.workspace.device_ptr_mut(stream);
    let ptrs = BwdPtrs {
        x,
        dy,
        dx,
        gamma: gamma.as_ref().map(|p| p.0),
        save_mean,
        save_invstd,
        dgamma: dgamma.as_ref().map(|p| p.0),
        dbeta: dbeta.as_ref().map(|p| p.0),
        workspace,
    };
    let plan = plan_batch_norm_bwd(desc, frozen, &ptrs, &props)?;
    let r = GpuExecutor::new(stream).execute(&plan);
    // The guards record the launches' stream events; keep them alive until here.
    drop((g1, g2, g3, g4, g5, g6, gamma, dgamma, dbeta));
    r
}
