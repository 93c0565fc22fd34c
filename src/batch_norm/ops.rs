//! The functional BatchNorm ops on the GPU: cudarc views in, caller-provided outputs written.
//!
//! Nothing here allocates device memory or synchronizes with the host, so the calls can be
//! captured in a CUDA graph. Every check (dtypes, mode, contexts, lengths, alignment,
//! overlap, workspace) runs before the first launch: a rejected call changes nothing, not
//! even a running statistic.

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut};

use crate::buffers::{InOut, Lender};
use crate::check::check_element_types;
use crate::plan::{Direction, Executor};
use crate::profile::{self, Op};
use crate::runtime::GpuExecutor;
use crate::{Element, Result};

use super::desc::{BatchNormDesc, Problem};
use super::plan::{
    plan_backward_checked, plan_forward_checked, workspace_bytes, BackwardPtrs, ForwardPtrs,
};

/// Workspace bytes [`forward`] needs for `desc` on the stream's device. Allocate it zeroed
/// (`alloc_zeros`): it starts with the reductions' arrival counters, which must be zero before
/// its first use and which every call leaves at zero (see [`workspace_bytes`]).
pub fn forward_workspace_bytes(stream: &Arc<CudaStream>, desc: &BatchNormDesc) -> Result<usize> {
    workspace_bytes(desc, Direction::Forward, GpuExecutor::new(stream)?.props())
}

/// Workspace bytes [`backward`] needs for `desc` on the stream's device; zeroed before its
/// first use, as [`forward_workspace_bytes`].
pub fn backward_workspace_bytes(stream: &Arc<CudaStream>, desc: &BatchNormDesc) -> Result<usize> {
    workspace_bytes(desc, Direction::Backward, GpuExecutor::new(stream)?.props())
}

/// The buffers of a [`forward`] call: activations of `T`, parameters and running statistics
/// of `P` (f32, or `T`). Views of the caller's `CudaSlice`s (`.as_view()`,
/// `.as_view_mut()`, `.slice(..)`); `None` = not given.
pub struct ForwardBuffers<'a, T, P> {
    /// Input, `N * C * S` elements in `desc.layout`.
    pub x: CudaView<'a, T>,
    /// Output, like `x`.
    pub y: CudaViewMut<'a, T>,
    /// Scale (C), with `beta`.
    pub gamma: Option<CudaView<'a, P>>,
    /// Shift (C), with `gamma`.
    pub beta: Option<CudaView<'a, P>>,
    /// Running mean (C), with `running_var`: updated in training, used in eval.
    pub running_mean: Option<CudaViewMut<'a, P>>,
    /// Running variance (C), with `running_mean`.
    pub running_var: Option<CudaViewMut<'a, P>>,
    /// Batch counter (1), incremented in training.
    pub num_batches_tracked: Option<CudaViewMut<'a, i64>>,
    /// Saved mean for [`backward`] (C f32): the batch mean rounded to f32, as PyTorch's
    /// `save_mean`.
    pub save_mean: Option<CudaViewMut<'a, f32>>,
    /// The saved mean's rounding error for [`backward`] (C f32): the mean is
    /// `save_mean + save_mean_lo` (0 in eval).
    pub save_mean_lo: Option<CudaViewMut<'a, f32>>,
    /// Saved 1 / sqrt(var + eps) for [`backward`] (C f32).
    pub save_invstd: Option<CudaViewMut<'a, f32>>,
    /// At least [`forward_workspace_bytes`] bytes, 16-byte aligned, zeroed before its first use.
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// The buffers of a [`forward_in_place`] call: as [`ForwardBuffers`], with one buffer that
/// holds x and is overwritten by y.
pub struct ForwardInPlaceBuffers<'a, T, P> {
    /// Input, overwritten by the output, `N * C * S` elements in `desc.layout`.
    pub xy: CudaViewMut<'a, T>,
    /// Scale (C), with `beta`.
    pub gamma: Option<CudaView<'a, P>>,
    /// Shift (C), with `gamma`.
    pub beta: Option<CudaView<'a, P>>,
    /// Running mean (C), with `running_var`: updated in training, used in eval.
    pub running_mean: Option<CudaViewMut<'a, P>>,
    /// Running variance (C), with `running_mean`.
    pub running_var: Option<CudaViewMut<'a, P>>,
    /// Batch counter (1), incremented in training.
    pub num_batches_tracked: Option<CudaViewMut<'a, i64>>,
    /// Saved mean (C f32), as [`ForwardBuffers::save_mean`].
    pub save_mean: Option<CudaViewMut<'a, f32>>,
    /// The saved mean's rounding error (C f32), as [`ForwardBuffers::save_mean_lo`].
    pub save_mean_lo: Option<CudaViewMut<'a, f32>>,
    /// Saved 1 / sqrt(var + eps) (C f32).
    pub save_invstd: Option<CudaViewMut<'a, f32>>,
    /// At least [`forward_workspace_bytes`] bytes, 16-byte aligned, zeroed before its first use.
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// The buffers of a [`backward`] call.
pub struct BackwardBuffers<'a, T, P> {
    /// The forward input.
    pub x: CudaView<'a, T>,
    /// Gradient of the output.
    pub dy: CudaView<'a, T>,
    /// The forward's saved mean (C f32).
    pub save_mean: CudaView<'a, f32>,
    /// The forward's `save_mean_lo` (C f32); `None` takes it as zeros (a PyTorch `save_mean`
    /// alone: gradients then lose accuracy when the mean is large against the spread).
    pub save_mean_lo: Option<CudaView<'a, f32>>,
    /// The forward's saved invstd (C f32).
    pub save_invstd: CudaView<'a, f32>,
    /// Scale used by the forward (C).
    pub gamma: Option<CudaView<'a, P>>,
    /// Gradient of the input (written).
    pub dx: CudaViewMut<'a, T>,
    /// Gradient of gamma (C, written).
    pub dgamma: Option<CudaViewMut<'a, P>>,
    /// Gradient of beta (C, written).
    pub dbeta: Option<CudaViewMut<'a, P>>,
    /// At least [`backward_workspace_bytes`] bytes, 16-byte aligned, zeroed before its first use.
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// The buffers of a [`backward_in_place`] call: as [`BackwardBuffers`], with one buffer that
/// holds dy and is overwritten by dx.
pub struct BackwardInPlaceBuffers<'a, T, P> {
    /// The forward input.
    pub x: CudaView<'a, T>,
    /// Gradient of the output, overwritten by the gradient of the input.
    pub dy_dx: CudaViewMut<'a, T>,
    /// The forward's saved mean (C f32).
    pub save_mean: CudaView<'a, f32>,
    /// The forward's `save_mean_lo` (C f32), as [`BackwardBuffers::save_mean_lo`].
    pub save_mean_lo: Option<CudaView<'a, f32>>,
    /// The forward's saved invstd (C f32).
    pub save_invstd: CudaView<'a, f32>,
    /// Scale used by the forward (C).
    pub gamma: Option<CudaView<'a, P>>,
    /// Gradient of gamma (C, written).
    pub dgamma: Option<CudaViewMut<'a, P>>,
    /// Gradient of beta (C, written).
    pub dbeta: Option<CudaViewMut<'a, P>>,
    /// At least [`backward_workspace_bytes`] bytes, 16-byte aligned, zeroed before its first use.
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// A forward call's buffers with x and y apart or in place: what [`ForwardBuffers`] and
/// [`ForwardInPlaceBuffers`] become, and what the module type builds.
pub(crate) struct Forward<'a, T, P> {
    pub(crate) io: InOut<'a, T>,
    pub(crate) gamma: Option<CudaView<'a, P>>,
    pub(crate) beta: Option<CudaView<'a, P>>,
    pub(crate) running_mean: Option<CudaViewMut<'a, P>>,
    pub(crate) running_var: Option<CudaViewMut<'a, P>>,
    pub(crate) num_batches_tracked: Option<CudaViewMut<'a, i64>>,
    pub(crate) save_mean: Option<CudaViewMut<'a, f32>>,
    pub(crate) save_mean_lo: Option<CudaViewMut<'a, f32>>,
    pub(crate) save_invstd: Option<CudaViewMut<'a, f32>>,
    pub(crate) workspace: Option<CudaViewMut<'a, u8>>,
}

impl<'a, T, P> From<ForwardBuffers<'a, T, P>> for Forward<'a, T, P> {
    fn from(b: ForwardBuffers<'a, T, P>) -> Self {
        Forward {
            io: InOut::Apart(b.x, b.y),
            gamma: b.gamma,
            beta: b.beta,
            running_mean: b.running_mean,
            running_var: b.running_var,
            num_batches_tracked: b.num_batches_tracked,
            save_mean: b.save_mean,
            save_mean_lo: b.save_mean_lo,
            save_invstd: b.save_invstd,
            workspace: b.workspace,
        }
    }
}

impl<'a, T, P> From<ForwardInPlaceBuffers<'a, T, P>> for Forward<'a, T, P> {
    fn from(b: ForwardInPlaceBuffers<'a, T, P>) -> Self {
        Forward {
            io: InOut::InPlace(b.xy),
            gamma: b.gamma,
            beta: b.beta,
            running_mean: b.running_mean,
            running_var: b.running_var,
            num_batches_tracked: b.num_batches_tracked,
            save_mean: b.save_mean,
            save_mean_lo: b.save_mean_lo,
            save_invstd: b.save_invstd,
            workspace: b.workspace,
        }
    }
}

/// A backward call's buffers with dy and dx apart or in place: what [`BackwardBuffers`] and
/// [`BackwardInPlaceBuffers`] become, and what the module type builds.
pub(crate) struct Backward<'a, T, P> {
    pub(crate) x: CudaView<'a, T>,
    /// dy in, dx out.
    pub(crate) grad: InOut<'a, T>,
    pub(crate) save_mean: CudaView<'a, f32>,
    pub(crate) save_mean_lo: Option<CudaView<'a, f32>>,
    pub(crate) save_invstd: CudaView<'a, f32>,
    pub(crate) gamma: Option<CudaView<'a, P>>,
    pub(crate) dgamma: Option<CudaViewMut<'a, P>>,
    pub(crate) dbeta: Option<CudaViewMut<'a, P>>,
    pub(crate) workspace: Option<CudaViewMut<'a, u8>>,
}

impl<'a, T, P> From<BackwardBuffers<'a, T, P>> for Backward<'a, T, P> {
    fn from(b: BackwardBuffers<'a, T, P>) -> Self {
        Backward {
            x: b.x,
            grad: InOut::Apart(b.dy, b.dx),
            save_mean: b.save_mean,
            save_mean_lo: b.save_mean_lo,
            save_invstd: b.save_invstd,
            gamma: b.gamma,
            dgamma: b.dgamma,
            dbeta: b.dbeta,
            workspace: b.workspace,
        }
    }
}

impl<'a, T, P> From<BackwardInPlaceBuffers<'a, T, P>> for Backward<'a, T, P> {
    fn from(b: BackwardInPlaceBuffers<'a, T, P>) -> Self {
        Backward {
            x: b.x,
            grad: InOut::InPlace(b.dy_dx),
            save_mean: b.save_mean,
            save_mean_lo: b.save_mean_lo,
            save_invstd: b.save_invstd,
            gamma: b.gamma,
            dgamma: b.dgamma,
            dbeta: b.dbeta,
            workspace: b.workspace,
        }
    }
}

/// BatchNorm forward on `stream`: in training (`desc.mode.batch_stats`) normalizes with the
/// batch statistics, updates the running statistics and increments num_batches_tracked when
/// they are given; in eval normalizes with the running statistics. The saved statistics, when
/// given, are what [`backward`] takes.
pub fn forward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &BatchNormDesc,
    b: ForwardBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    forward_checked(&mut exec, &problem, b.into())
}

/// BatchNorm forward in place on `stream`: `xy` holds x and is overwritten by y; the rest as
/// [`forward`]. Every kernel reads an element before the element is written (the elementwise
/// passes by the same thread, the fused training forward from shared memory after its block
/// has read all of its channels), so the result is the same as out of place. Meant for eval
/// (inference); a training forward in place works too, but its backward needs x.
pub fn forward_in_place<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &BatchNormDesc,
    b: ForwardInPlaceBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    forward_checked(&mut exec, &problem, b.into())
}

/// [`forward`] and [`forward_in_place`] of a checked description on `exec` (what the module
/// type calls, so that a call validates once).
pub(crate) fn forward_checked<T: Element, P: Element>(
    exec: &mut GpuExecutor<'_>,
    problem: &Problem,
    mut b: Forward<'_, T, P>,
) -> Result<()> {
    let _range = profile::range(Op::BatchNormForward, problem);
    let desc = problem.desc();
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    let (n, c) = (problem.ncs().numel, problem.ncs().c);
    let mut lend = Lender::new(exec.stream());
    let (workspace, workspace_bytes) = lend.workspace(b.workspace.as_mut())?;
    let (x, y) = lend.in_out(["x", "y", "xy"], &mut b.io, n)?;
    let ptrs = ForwardPtrs {
        x,
        y,
        gamma: lend.input_opt("gamma", b.gamma.as_ref(), c)?,
        beta: lend.input_opt("beta", b.beta.as_ref(), c)?,
        running_mean: lend.output_opt("running_mean", b.running_mean.as_mut(), c)?,
        running_var: lend.output_opt("running_var", b.running_var.as_mut(), c)?,
        num_batches_tracked: lend.output_opt(
            "num_batches_tracked",
            b.num_batches_tracked.as_mut(),
            1,
        )?,
        save_mean: lend.output_opt("save_mean", b.save_mean.as_mut(), c)?,
        save_mean_lo: lend.output_opt("save_mean_lo", b.save_mean_lo.as_mut(), c)?,
        save_invstd: lend.output_opt("save_invstd", b.save_invstd.as_mut(), c)?,
        workspace,
        workspace_bytes,
    };
    let plan = plan_forward_checked(problem, &ptrs, exec.props())?;
    exec.execute(&plan)
}

/// BatchNorm backward on `stream` from the forward's input and saved statistics: writes `dx`,
/// and `dgamma` / `dbeta` when given. The backward of an eval-mode forward (`desc.mode`) is
/// dx = dy * gamma * invstd. Reduced in a fixed order: reruns are bitwise identical.
pub fn backward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &BatchNormDesc,
    b: BackwardBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    backward_checked(&mut exec, &problem, b.into())
}

/// BatchNorm backward in place on `stream`: `dy_dx` holds dy and is overwritten by dx (the
/// reductions read dy before the elementwise pass, which reads each element before writing
/// it; the fused backward writes from shared memory); the rest as [`backward`].
pub fn backward_in_place<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &BatchNormDesc,
    b: BackwardInPlaceBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    backward_checked(&mut exec, &problem, b.into())
}

/// [`backward`] and [`backward_in_place`] of a checked description on `exec` (what the module
/// type calls, so that a call validates once).
pub(crate) fn backward_checked<T: Element, P: Element>(
    exec: &mut GpuExecutor<'_>,
    problem: &Problem,
    mut b: Backward<'_, T, P>,
) -> Result<()> {
    let _range = profile::range(Op::BatchNormBackward, problem);
    let desc = problem.desc();
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    let (n, c) = (problem.ncs().numel, problem.ncs().c);
    let mut lend = Lender::new(exec.stream());
    let (workspace, workspace_bytes) = lend.workspace(b.workspace.as_mut())?;
    let x = lend.input("x", &b.x, n)?;
    let (dy, dx) = lend.in_out(["dy", "dx", "dy_dx"], &mut b.grad, n)?;
    let ptrs = BackwardPtrs {
        x,
        dy,
        dx,
        gamma: lend.input_opt("gamma", b.gamma.as_ref(), c)?,
        save_mean: lend.input("save_mean", &b.save_mean, c)?,
        save_mean_lo: lend.input_opt("save_mean_lo", b.save_mean_lo.as_ref(), c)?,
        save_invstd: lend.input("save_invstd", &b.save_invstd, c)?,
        dgamma: lend.output_opt("dgamma", b.dgamma.as_mut(), c)?,
        dbeta: lend.output_opt("dbeta", b.dbeta.as_mut(), c)?,
        workspace,
        workspace_bytes,
    };
    let plan = plan_backward_checked(problem, &ptrs, exec.props())?;
    exec.execute(&plan)
}
