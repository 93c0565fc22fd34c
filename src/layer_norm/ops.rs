//! The functional LayerNorm ops on the GPU: cudarc views in, caller-provided outputs written.
//!
//! Nothing here allocates device memory or synchronizes with the host, so the calls can be
//! captured in a CUDA graph. Every check (dtypes, contexts, lengths, alignment, overlap,
//! workspace) runs before the first launch: a rejected call changes nothing.

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut};

use crate::buffers::{InOut, Lender};
use crate::check::check_element_types;
use crate::plan::Executor;
use crate::profile::{self, Op};
use crate::runtime::GpuExecutor;
use crate::{Element, Result};

use super::desc::{LayerNormDesc, Problem};
use super::plan::{
    plan_backward_checked, plan_backward_residual_checked, plan_forward_checked,
    plan_forward_residual_checked, workspace_bytes, workspace_bytes_residual, BackwardPtrs,
    Direction, ForwardPtrs, ResidualGrads, ResidualPtrs,
};

/// Workspace bytes [`forward`] needs for `desc` on the stream's device (0: pass `None`).
pub fn forward_workspace_bytes(stream: &Arc<CudaStream>, desc: &LayerNormDesc) -> Result<usize> {
    workspace_bytes(desc, Direction::Forward, GpuExecutor::new(stream)?.props())
}

/// Workspace bytes [`backward`] needs for `desc` on the stream's device (0: pass `None`).
pub fn backward_workspace_bytes(stream: &Arc<CudaStream>, desc: &LayerNormDesc) -> Result<usize> {
    workspace_bytes(desc, Direction::Backward, GpuExecutor::new(stream)?.props())
}

/// Workspace bytes [`backward_residual`] needs for `desc` on the stream's device: those of
/// [`backward`], plus the bias gradient's partial rows when `dbias` is formed (0: pass
/// `None`).
pub fn backward_residual_workspace_bytes(
    stream: &Arc<CudaStream>,
    desc: &LayerNormDesc,
    dbias: bool,
) -> Result<usize> {
    workspace_bytes_residual(desc, dbias, GpuExecutor::new(stream)?.props())
}

/// The buffers of a [`forward`] call: activations of `T`, parameters of `P` (f32, or `T`).
/// Views of the caller's `CudaSlice`s (`.as_view()`, `.as_view_mut()`, `.slice(..)`).
pub struct ForwardBuffers<'a, T, P> {
    /// Input, rows * cols elements.
    pub x: CudaView<'a, T>,
    /// Output, rows * cols elements.
    pub y: CudaViewMut<'a, T>,
    /// Scale, cols elements: given exactly when `desc.affine` has a weight.
    pub gamma: Option<CudaView<'a, P>>,
    /// Shift, cols elements: given exactly when `desc.affine` has a bias.
    pub beta: Option<CudaView<'a, P>>,
    /// Saved mean, one f32 per row (for [`backward`]); `None` for inference: nothing is
    /// stored.
    pub mean: Option<CudaViewMut<'a, f32>>,
    /// Saved 1 / sqrt(var + eps), one f32 per row (for [`backward`]); `None`: not stored.
    pub rstd: Option<CudaViewMut<'a, f32>>,
    /// The saved mean's rounding error, one f32 per row (the row mean is `mean + mean_lo`),
    /// for [`backward`], which re-centres x on the pair: dx on rows with a large offset is
    /// then as accurate as y; `None`: not stored (see [`ForwardPtrs::mean_lo`]).
    pub mean_lo: Option<CudaViewMut<'a, f32>>,
    /// At least [`forward_workspace_bytes`] bytes, 16-byte aligned, zeroed before its first use
    /// (`alloc_zeros`: it starts with the cooperative split pass's barrier counts, which every
    /// call leaves zero; a backward never writes them, so one buffer may serve both), `None`
    /// when that is 0.
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// The buffers of a [`forward_in_place`] call: as [`ForwardBuffers`], with one buffer that
/// holds x and is overwritten by y.
pub struct ForwardInPlaceBuffers<'a, T, P> {
    /// Input, overwritten by the output, rows * cols elements.
    pub xy: CudaViewMut<'a, T>,
    /// Scale, cols elements: given exactly when `desc.affine` has a weight.
    pub gamma: Option<CudaView<'a, P>>,
    /// Shift, cols elements: given exactly when `desc.affine` has a bias.
    pub beta: Option<CudaView<'a, P>>,
    /// Saved mean, one f32 per row; `None`: not stored.
    pub mean: Option<CudaViewMut<'a, f32>>,
    /// Saved rstd, one f32 per row; `None`: not stored.
    pub rstd: Option<CudaViewMut<'a, f32>>,
    /// The saved mean's rounding error, as [`ForwardBuffers::mean_lo`].
    pub mean_lo: Option<CudaViewMut<'a, f32>>,
    /// At least [`forward_workspace_bytes`] bytes, 16-byte aligned, zeroed before its first use
    /// (`alloc_zeros`: it starts with the cooperative split pass's barrier counts, which every
    /// call leaves zero; a backward never writes them, so one buffer may serve both), `None`
    /// when that is 0.
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// The buffers of a [`backward`] call.
pub struct BackwardBuffers<'a, T, P> {
    /// The forward's input, rows * cols elements.
    pub x: CudaView<'a, T>,
    /// Gradient of the output, rows * cols elements.
    pub dy: CudaView<'a, T>,
    /// The forward's saved mean (rows f32).
    pub mean: CudaView<'a, f32>,
    /// The forward's saved rstd (rows f32).
    pub rstd: CudaView<'a, f32>,
    /// The forward's saved mean_lo (rows f32), or `None`: taken as zeros (a mean saved
    /// without it, as PyTorch's; dx is then good to about u32 |mean| rstd relative).
    pub mean_lo: Option<CudaView<'a, f32>>,
    /// Scale, cols elements: given exactly when `desc.affine` has a weight.
    pub gamma: Option<CudaView<'a, P>>,
    /// Gradient of the input (written), rows * cols elements.
    pub dx: CudaViewMut<'a, T>,
    /// Gradient of gamma (written), cols elements: given exactly when there is a weight.
    pub dgamma: Option<CudaViewMut<'a, P>>,
    /// Gradient of beta (written), cols elements: given exactly when there is a bias.
    pub dbeta: Option<CudaViewMut<'a, P>>,
    /// At least [`backward_workspace_bytes`] bytes, 16-byte aligned (`None` when that is 0); its
    /// first [`SPLIT_BARRIER_BYTES`](crate::layer_norm::SPLIT_BARRIER_BYTES) are never
    /// written (a forward's barrier counts, when shared with one).
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// The buffers of a [`backward_in_place`] call: as [`BackwardBuffers`], with one buffer that
/// holds dy and is overwritten by dx.
pub struct BackwardInPlaceBuffers<'a, T, P> {
    /// The forward's input, rows * cols elements.
    pub x: CudaView<'a, T>,
    /// Gradient of the output, overwritten by the gradient of the input, rows * cols elements.
    pub dy_dx: CudaViewMut<'a, T>,
    /// The forward's saved mean (rows f32).
    pub mean: CudaView<'a, f32>,
    /// The forward's saved rstd (rows f32).
    pub rstd: CudaView<'a, f32>,
    /// The forward's saved mean_lo (rows f32), or `None`: taken as zeros (a mean saved
    /// without it, as PyTorch's; dx is then good to about u32 |mean| rstd relative).
    pub mean_lo: Option<CudaView<'a, f32>>,
    /// Scale, cols elements: given exactly when `desc.affine` has a weight.
    pub gamma: Option<CudaView<'a, P>>,
    /// Gradient of gamma (written), cols elements: given exactly when there is a weight.
    pub dgamma: Option<CudaViewMut<'a, P>>,
    /// Gradient of beta (written), cols elements: given exactly when there is a bias.
    pub dbeta: Option<CudaViewMut<'a, P>>,
    /// At least [`backward_workspace_bytes`] bytes, 16-byte aligned (`None` when that is 0); its
    /// first [`SPLIT_BARRIER_BYTES`](crate::layer_norm::SPLIT_BARRIER_BYTES) are never
    /// written (a forward's barrier counts, when shared with one).
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// A forward call's buffers with x and y apart or in place: what [`ForwardBuffers`] and
/// [`ForwardInPlaceBuffers`] become, and what the module types build.
pub(crate) struct Forward<'a, T, P> {
    pub(crate) io: InOut<'a, T>,
    pub(crate) gamma: Option<CudaView<'a, P>>,
    pub(crate) beta: Option<CudaView<'a, P>>,
    pub(crate) mean: Option<CudaViewMut<'a, f32>>,
    pub(crate) rstd: Option<CudaViewMut<'a, f32>>,
    pub(crate) mean_lo: Option<CudaViewMut<'a, f32>>,
    pub(crate) workspace: Option<CudaViewMut<'a, u8>>,
}

impl<'a, T, P> From<ForwardBuffers<'a, T, P>> for Forward<'a, T, P> {
    fn from(b: ForwardBuffers<'a, T, P>) -> Self {
        Forward {
            io: InOut::Apart(b.x, b.y),
            gamma: b.gamma,
            beta: b.beta,
            mean: b.mean,
            rstd: b.rstd,
            mean_lo: b.mean_lo,
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
            mean: b.mean,
            rstd: b.rstd,
            mean_lo: b.mean_lo,
            workspace: b.workspace,
        }
    }
}

/// A backward call's buffers with dy and dx apart or in place: what [`BackwardBuffers`] and
/// [`BackwardInPlaceBuffers`] become, and what the module types build.
pub(crate) struct Backward<'a, T, P> {
    pub(crate) x: CudaView<'a, T>,
    /// dy in, dx out.
    pub(crate) grad: InOut<'a, T>,
    pub(crate) mean: CudaView<'a, f32>,
    pub(crate) rstd: CudaView<'a, f32>,
    pub(crate) mean_lo: Option<CudaView<'a, f32>>,
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
            mean: b.mean,
            rstd: b.rstd,
            mean_lo: b.mean_lo,
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
            mean: b.mean,
            rstd: b.rstd,
            mean_lo: b.mean_lo,
            gamma: b.gamma,
            dgamma: b.dgamma,
            dbeta: b.dbeta,
            workspace: b.workspace,
        }
    }
}

/// LayerNorm forward on `stream`: writes `y`, and the saved statistics `mean` and `rstd` that
/// [`backward`] takes when they are given (without them, for inference, the kernels store
/// nothing for them).
pub fn forward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &LayerNormDesc,
    b: ForwardBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    forward_checked(&mut exec, &problem, b.into())
}

/// LayerNorm forward in place on `stream`: `xy` holds x and is overwritten by y (every kernel
/// reads a thread's elements before it writes the same elements). `mean` / `rstd` as in
/// [`forward`].
pub fn forward_in_place<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &LayerNormDesc,
    b: ForwardInPlaceBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    forward_checked(&mut exec, &problem, b.into())
}

/// [`forward`] and [`forward_in_place`] of a checked description on `exec` (what the module
/// types call, so that a call validates once).
pub(crate) fn forward_checked<T: Element, P: Element>(
    exec: &mut GpuExecutor<'_>,
    problem: &Problem,
    mut b: Forward<'_, T, P>,
) -> Result<()> {
    let _range = profile::range(Op::LayerNormForward, problem);
    let desc = problem.desc();
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    let (n, rows, cols) = (problem.elements(), desc.rows as u64, desc.cols as u64);
    let mut lend = Lender::new(exec.stream());
    let (workspace, workspace_bytes) = lend.workspace(b.workspace.as_mut())?;
    let (x, y) = lend.in_out(["x", "y", "xy"], &mut b.io, n)?;
    let ptrs = ForwardPtrs {
        x,
        y,
        gamma: lend.input_opt("gamma", b.gamma.as_ref(), cols)?,
        beta: lend.input_opt("beta", b.beta.as_ref(), cols)?,
        mean: lend.output_opt("mean", b.mean.as_mut(), rows)?,
        rstd: lend.output_opt("rstd", b.rstd.as_mut(), rows)?,
        mean_lo: lend.output_opt("mean_lo", b.mean_lo.as_mut(), rows)?,
        workspace,
        workspace_bytes,
    };
    let plan = plan_forward_checked(problem, &ptrs, exec.props())?;
    exec.execute(&plan)
}

/// LayerNorm backward from the forward's input and saved statistics: writes `dx`, and
/// `dgamma` / `dbeta` (in the parameter dtype) when the LayerNorm has them. dgamma/dbeta are
/// reduced in a fixed order: reruns are bitwise identical.
pub fn backward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &LayerNormDesc,
    b: BackwardBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    backward_checked(&mut exec, &problem, b.into())
}

/// LayerNorm backward in place on `stream`: `dy_dx` holds dy and is overwritten by dx (every
/// kernel reads a thread's elements of dy before it writes dx there); the rest as
/// [`backward`].
pub fn backward_in_place<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &LayerNormDesc,
    b: BackwardInPlaceBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    backward_checked(&mut exec, &problem, b.into())
}

/// [`backward`] and [`backward_in_place`] of a checked description on `exec` (what the module
/// types call, so that a call validates once).
pub(crate) fn backward_checked<T: Element, P: Element>(
    exec: &mut GpuExecutor<'_>,
    problem: &Problem,
    mut b: Backward<'_, T, P>,
) -> Result<()> {
    let _range = profile::range(Op::LayerNormBackward, problem);
    let desc = problem.desc();
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    let (n, rows, cols) = (problem.elements(), desc.rows as u64, desc.cols as u64);
    let mut lend = Lender::new(exec.stream());
    let (workspace, workspace_bytes) = lend.workspace(b.workspace.as_mut())?;
    let x = lend.input("x", &b.x, n)?;
    let (dy, dx) = lend.in_out(["dy", "dx", "dy_dx"], &mut b.grad, n)?;
    let ptrs = BackwardPtrs {
        x,
        dy,
        dx,
        gamma: lend.input_opt("gamma", b.gamma.as_ref(), cols)?,
        mean: lend.input("mean", &b.mean, rows)?,
        rstd: lend.input("rstd", &b.rstd, rows)?,
        mean_lo: lend.input_opt("mean_lo", b.mean_lo.as_ref(), rows)?,
        dgamma: lend.output_opt("dgamma", b.dgamma.as_mut(), cols)?,
        dbeta: lend.output_opt("dbeta", b.dbeta.as_mut(), cols)?,
        workspace,
        workspace_bytes,
    };
    let plan = plan_backward_checked(problem, &ptrs, exec.props())?;
    exec.execute(&plan)
}

/// The buffer pair of the fused residual add that may be one buffer: the residual in and h
/// out ([`ForwardResidualBuffers::residual_h`]), or the gradient arriving on h in and dx out
/// ([`BackwardResidualBuffers::dh_dx`]). In place, as a transformer block updates its
/// residual stream: every kernel reads a thread's elements before it writes the same ones.
pub enum ResidualIo<'a, T> {
    /// Read from the first buffer, written to the second.
    Apart(CudaView<'a, T>, CudaViewMut<'a, T>),
    /// Read from the buffer, then overwritten.
    InPlace(CudaViewMut<'a, T>),
}

impl<'a, T> From<ResidualIo<'a, T>> for InOut<'a, T> {
    fn from(io: ResidualIo<'a, T>) -> Self {
        match io {
            ResidualIo::Apart(a, b) => InOut::Apart(a, b),
            ResidualIo::InPlace(ab) => InOut::InPlace(ab),
        }
    }
}

/// The buffers of a [`forward_residual`] call: h = x + residual (+ bias), y = LayerNorm(h).
pub struct ForwardResidualBuffers<'a, T, P> {
    /// x, rows * cols.
    pub x: CudaView<'a, T>,
    /// The residual in and h out (rows * cols each), apart or h over the residual.
    pub residual_h: ResidualIo<'a, T>,
    /// A bias added to h (cols, parameter dtype). Its gradient, the column sum of dx, is
    /// [`BackwardResidualBuffers::dbias`].
    pub bias: Option<CudaView<'a, P>>,
    /// y, rows * cols.
    pub y: CudaViewMut<'a, T>,
    /// gamma (cols), when the LayerNorm has a weight.
    pub gamma: Option<CudaView<'a, P>>,
    /// beta (cols), when the LayerNorm has a bias.
    pub beta: Option<CudaView<'a, P>>,
    /// Saved mean (rows f32), for [`backward_residual`]; `None` for inference.
    pub mean: Option<CudaViewMut<'a, f32>>,
    /// Saved 1 / sqrt(var + eps) (rows f32); `None` for inference.
    pub rstd: Option<CudaViewMut<'a, f32>>,
    /// The saved mean's rounding error (rows f32), as [`ForwardBuffers::mean_lo`].
    pub mean_lo: Option<CudaViewMut<'a, f32>>,
    /// Workspace of [`forward_workspace_bytes`] bytes, zeroed before its first use (as
    /// [`ForwardBuffers::workspace`]), `None` when that is 0.
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// The buffers of a [`backward_residual`] call.
pub struct BackwardResidualBuffers<'a, T, P> {
    /// h as [`forward_residual`] wrote it (the backward re-reads h, not x and the residual).
    pub h: CudaView<'a, T>,
    /// The gradient arriving on y, rows * cols.
    pub dy: CudaView<'a, T>,
    /// The gradient arriving on h (from later in the residual stream) in, and dx out: the
    /// gradient of h, which is also that of x and of the residual. Apart or dx over it.
    pub dh_dx: ResidualIo<'a, T>,
    /// The forward's saved mean and rstd (rows f32 each).
    pub mean: CudaView<'a, f32>,
    /// See `mean`.
    pub rstd: CudaView<'a, f32>,
    /// The forward's saved mean_lo (rows f32), or `None` (zeros), as
    /// [`BackwardBuffers::mean_lo`].
    pub mean_lo: Option<CudaView<'a, f32>>,
    /// gamma (cols), when the LayerNorm has a weight.
    pub gamma: Option<CudaView<'a, P>>,
    /// dgamma (cols), when the LayerNorm has a weight.
    pub dgamma: Option<CudaViewMut<'a, P>>,
    /// dbeta (cols), when the LayerNorm has a bias.
    pub dbeta: Option<CudaViewMut<'a, P>>,
    /// The gradient of the forward's bias (cols, parameter dtype, written), or `None`: the
    /// column sum over rows of dx, summed in f32 by the backward kernels from dx before its
    /// rounding, in a fixed order (deterministic), and rounded once. dbeta then comes from the
    /// same kernel in the block and split tiers (rows of more than 512 elements) and from a
    /// column sum of dy, two launches that read dy again, for shorter rows; the workspace grows
    /// by one set of partial rows or by the column sum's.
    pub dbias: Option<CudaViewMut<'a, P>>,
    /// Workspace of [`backward_residual_workspace_bytes`] bytes (with `dbias` when it is
    /// given; `None` when that is 0).
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// LayerNorm forward with the residual add fused in, on `stream`: h = x + residual (+ bias),
/// formed in f32 and rounded once to `T`, is written, and y = LayerNorm(h) of that stored h
/// (so y and the statistics equal [`forward`] on h), reading x and the residual once and
/// writing h and y once. The same tiers and workspace as [`forward`]; every check before the
/// first launch.
pub fn forward_residual<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &LayerNormDesc,
    b: ForwardResidualBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    forward_residual_checked(&mut exec, &problem, b)
}

/// [`forward_residual`] of a checked description on `exec` (what the module types call).
pub(crate) fn forward_residual_checked<T: Element, P: Element>(
    exec: &mut GpuExecutor<'_>,
    problem: &Problem,
    mut b: ForwardResidualBuffers<'_, T, P>,
) -> Result<()> {
    let _range = profile::range(Op::LayerNormForwardResidual, problem);
    let desc = problem.desc();
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    let (n, rows, cols) = (problem.elements(), desc.rows as u64, desc.cols as u64);
    let mut io: InOut<'_, T> = b.residual_h.into();
    let mut lend = Lender::new(exec.stream());
    let (workspace, workspace_bytes) = lend.workspace(b.workspace.as_mut())?;
    let x = lend.input("x", &b.x, n)?;
    let (residual, h) = lend.in_out(["residual", "h", "residual_h"], &mut io, n)?;
    let ptrs = ForwardPtrs {
        x,
        y: lend.output("y", &mut b.y, n)?,
        gamma: lend.input_opt("gamma", b.gamma.as_ref(), cols)?,
        beta: lend.input_opt("beta", b.beta.as_ref(), cols)?,
        mean: lend.output_opt("mean", b.mean.as_mut(), rows)?,
        rstd: lend.output_opt("rstd", b.rstd.as_mut(), rows)?,
        mean_lo: lend.output_opt("mean_lo", b.mean_lo.as_mut(), rows)?,
        workspace,
        workspace_bytes,
    };
    let r = ResidualPtrs {
        residual,
        bias: lend.input_opt("bias", b.bias.as_ref(), cols)?,
        h,
    };
    let plan = plan_forward_residual_checked(problem, &ptrs, &r, exec.props())?;
    exec.execute(&plan)
}

/// LayerNorm backward of [`forward_residual`] on `stream`: dx = LayerNorm's dx + dh, added
/// in f32 before dx's one rounding, in one pass over each row; dgamma / dbeta as
/// [`backward`] on h (bitwise equal to it), deterministic.
pub fn backward_residual<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &LayerNormDesc,
    b: BackwardResidualBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    backward_residual_checked(&mut exec, &problem, b)
}

/// [`backward_residual`] of a checked description on `exec` (what the module types call).
pub(crate) fn backward_residual_checked<T: Element, P: Element>(
    exec: &mut GpuExecutor<'_>,
    problem: &Problem,
    mut b: BackwardResidualBuffers<'_, T, P>,
) -> Result<()> {
    let _range = profile::range(Op::LayerNormBackwardResidual, problem);
    let desc = problem.desc();
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    let (n, rows, cols) = (problem.elements(), desc.rows as u64, desc.cols as u64);
    let mut io: InOut<'_, T> = b.dh_dx.into();
    let mut lend = Lender::new(exec.stream());
    let (workspace, workspace_bytes) = lend.workspace(b.workspace.as_mut())?;
    let (dh, dx) = lend.in_out(["dh", "dx", "dh_dx"], &mut io, n)?;
    let ptrs = BackwardPtrs {
        x: lend.input("h", &b.h, n)?,
        dy: lend.input("dy", &b.dy, n)?,
        dx,
        gamma: lend.input_opt("gamma", b.gamma.as_ref(), cols)?,
        mean: lend.input("mean", &b.mean, rows)?,
        rstd: lend.input("rstd", &b.rstd, rows)?,
        mean_lo: lend.input_opt("mean_lo", b.mean_lo.as_ref(), rows)?,
        dgamma: lend.output_opt("dgamma", b.dgamma.as_mut(), cols)?,
        dbeta: lend.output_opt("dbeta", b.dbeta.as_mut(), cols)?,
        workspace,
        workspace_bytes,
    };
    let g = ResidualGrads {
        dh: Some(dh),
        dbias: lend.output_opt("dbias", b.dbias.as_mut(), cols)?,
    };
    let plan = plan_backward_residual_checked(problem, &ptrs, &g, exec.props())?;
    exec.execute(&plan)
}
