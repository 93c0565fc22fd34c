//! The functional RMSNorm ops on the GPU: cudarc views in, caller-provided outputs written.
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

use super::desc::{Problem, RmsNormDesc};
use super::plan::{
    plan_backward_checked, plan_backward_residual_checked, plan_forward_checked,
    plan_forward_residual_checked, workspace_bytes, workspace_bytes_residual, BackwardPtrs,
    Direction, ForwardPtrs, ResidualGrads, ResidualPtrs,
};
pub use crate::layer_norm::ResidualIo;

/// Workspace bytes [`forward`] needs for `desc` on the stream's device (0: pass `None`).
pub fn forward_workspace_bytes(stream: &Arc<CudaStream>, desc: &RmsNormDesc) -> Result<usize> {
    workspace_bytes(desc, Direction::Forward, GpuExecutor::new(stream)?.props())
}

/// Workspace bytes [`backward`] needs for `desc` on the stream's device (0: pass `None`).
pub fn backward_workspace_bytes(stream: &Arc<CudaStream>, desc: &RmsNormDesc) -> Result<usize> {
    workspace_bytes(desc, Direction::Backward, GpuExecutor::new(stream)?.props())
}

/// Workspace bytes [`backward_residual`] needs for `desc` on the stream's device: those of
/// [`backward`], plus the bias gradient's partial rows when `dbias` is formed (0: pass
/// `None`).
pub fn backward_residual_workspace_bytes(
    stream: &Arc<CudaStream>,
    desc: &RmsNormDesc,
    dbias: bool,
) -> Result<usize> {
    workspace_bytes_residual(desc, dbias, GpuExecutor::new(stream)?.props())
}

/// The buffers of a [`forward`] call: activations of `T`, weight of `P` (f32, or `T`).
/// Views of the caller's `CudaSlice`s (`.as_view()`, `.as_view_mut()`, `.slice(..)`).
pub struct ForwardBuffers<'a, T, P> {
    /// Input, rows * cols elements.
    pub x: CudaView<'a, T>,
    /// Output, rows * cols elements.
    pub y: CudaViewMut<'a, T>,
    /// Weight, cols elements: given exactly when `desc.weight`.
    pub weight: Option<CudaView<'a, P>>,
    /// Saved 1 / sqrt(mean(x^2) + eps), one f32 per row (for [`backward`]); `None` for
    /// inference: nothing is stored.
    pub rstd: Option<CudaViewMut<'a, f32>>,
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
    /// Weight, cols elements: given exactly when `desc.weight`.
    pub weight: Option<CudaView<'a, P>>,
    /// Saved rstd, one f32 per row; `None`: not stored.
    pub rstd: Option<CudaViewMut<'a, f32>>,
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
    /// The forward's saved rstd (rows f32).
    pub rstd: CudaView<'a, f32>,
    /// Weight, cols elements: given exactly when `desc.weight`.
    pub weight: Option<CudaView<'a, P>>,
    /// Gradient of the input (written), rows * cols elements.
    pub dx: CudaViewMut<'a, T>,
    /// Gradient of the weight (written), cols elements: given exactly when `desc.weight`.
    pub dweight: Option<CudaViewMut<'a, P>>,
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
    /// The forward's saved rstd (rows f32).
    pub rstd: CudaView<'a, f32>,
    /// Weight, cols elements: given exactly when `desc.weight`.
    pub weight: Option<CudaView<'a, P>>,
    /// Gradient of the weight (written), cols elements: given exactly when `desc.weight`.
    pub dweight: Option<CudaViewMut<'a, P>>,
    /// At least [`backward_workspace_bytes`] bytes, 16-byte aligned (`None` when that is 0); its
    /// first [`SPLIT_BARRIER_BYTES`](crate::layer_norm::SPLIT_BARRIER_BYTES) are never
    /// written (a forward's barrier counts, when shared with one).
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// A forward call's buffers with x and y apart or in place: what [`ForwardBuffers`] and
/// [`ForwardInPlaceBuffers`] become, and what the module type builds.
pub(crate) struct Forward<'a, T, P> {
    pub(crate) io: InOut<'a, T>,
    pub(crate) weight: Option<CudaView<'a, P>>,
    pub(crate) rstd: Option<CudaViewMut<'a, f32>>,
    pub(crate) workspace: Option<CudaViewMut<'a, u8>>,
}

impl<'a, T, P> From<ForwardBuffers<'a, T, P>> for Forward<'a, T, P> {
    fn from(b: ForwardBuffers<'a, T, P>) -> Self {
        let io = InOut::Apart(b.x, b.y);
        Forward {
            io,
            weight: b.weight,
            rstd: b.rstd,
            workspace: b.workspace,
        }
    }
}

impl<'a, T, P> From<ForwardInPlaceBuffers<'a, T, P>> for Forward<'a, T, P> {
    fn from(b: ForwardInPlaceBuffers<'a, T, P>) -> Self {
        let io = InOut::InPlace(b.xy);
        Forward {
            io,
            weight: b.weight,
            rstd: b.rstd,
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
    pub(crate) rstd: CudaView<'a, f32>,
    pub(crate) weight: Option<CudaView<'a, P>>,
    pub(crate) dweight: Option<CudaViewMut<'a, P>>,
    pub(crate) workspace: Option<CudaViewMut<'a, u8>>,
}

impl<'a, T, P> From<BackwardBuffers<'a, T, P>> for Backward<'a, T, P> {
    fn from(b: BackwardBuffers<'a, T, P>) -> Self {
        let grad = InOut::Apart(b.dy, b.dx);
        let (x, rstd, weight, dweight, workspace) = (b.x, b.rstd, b.weight, b.dweight, b.workspace);
        Backward {
            x,
            grad,
            rstd,
            weight,
            dweight,
            workspace,
        }
    }
}

impl<'a, T, P> From<BackwardInPlaceBuffers<'a, T, P>> for Backward<'a, T, P> {
    fn from(b: BackwardInPlaceBuffers<'a, T, P>) -> Self {
        let grad = InOut::InPlace(b.dy_dx);
        let (x, rstd, weight, dweight, workspace) = (b.x, b.rstd, b.weight, b.dweight, b.workspace);
        Backward {
            x,
            grad,
            rstd,
            weight,
            dweight,
            workspace,
        }
    }
}

/// RMSNorm forward on `stream`: writes `y`, and the saved `rstd` that [`backward`] takes when
/// it is given (without it, for inference, the kernels store nothing for it).
pub fn forward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &RmsNormDesc,
    b: ForwardBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    forward_checked(&mut exec, &problem, b.into())
}

/// RMSNorm forward in place on `stream`: `xy` holds x and is overwritten by y (every kernel
/// reads a thread's elements before it writes the same elements). `rstd` as in [`forward`].
pub fn forward_in_place<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &RmsNormDesc,
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
    let _range = profile::range(Op::RmsNormForward, problem);
    let desc = problem.desc();
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    let (n, rows, cols) = (problem.elements(), desc.rows as u64, desc.cols as u64);
    let mut lend = Lender::new(exec.stream());
    let (workspace, workspace_bytes) = lend.workspace(b.workspace.as_mut())?;
    let (x, y) = lend.in_out(["x", "y", "xy"], &mut b.io, n)?;
    let ptrs = ForwardPtrs {
        x,
        y,
        weight: lend.input_opt("weight", b.weight.as_ref(), cols)?,
        rstd: lend.output_opt("rstd", b.rstd.as_mut(), rows)?,
        workspace,
        workspace_bytes,
    };
    let plan = plan_forward_checked(problem, &ptrs, exec.props())?;
    exec.execute(&plan)
}

/// RMSNorm backward from the forward's input and saved rstd: writes `dx`, and `dweight` (in
/// the parameter dtype) when there is a weight. dweight is reduced in a fixed order (per-block
/// partial rows and a finalize kernel, no atomics): reruns are bitwise identical.
pub fn backward<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &RmsNormDesc,
    b: BackwardBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    backward_checked(&mut exec, &problem, b.into())
}

/// RMSNorm backward in place on `stream`: `dy_dx` holds dy and is overwritten by dx (every
/// kernel reads a thread's elements of dy before it writes dx there); the rest as
/// [`backward`].
pub fn backward_in_place<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &RmsNormDesc,
    b: BackwardInPlaceBuffers<'_, T, P>,
) -> Result<()> {
    let problem = desc.check()?;
    let mut exec = GpuExecutor::new(stream)?;
    backward_checked(&mut exec, &problem, b.into())
}

/// [`backward`] and [`backward_in_place`] of a checked description on `exec`.
pub(crate) fn backward_checked<T: Element, P: Element>(
    exec: &mut GpuExecutor<'_>,
    problem: &Problem,
    mut b: Backward<'_, T, P>,
) -> Result<()> {
    let _range = profile::range(Op::RmsNormBackward, problem);
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
        weight: lend.input_opt("weight", b.weight.as_ref(), cols)?,
        rstd: lend.input("rstd", &b.rstd, rows)?,
        dweight: lend.output_opt("dweight", b.dweight.as_mut(), cols)?,
        workspace,
        workspace_bytes,
    };
    let plan = plan_backward_checked(problem, &ptrs, exec.props())?;
    exec.execute(&plan)
}

/// The buffers of a [`forward_residual`] call: h = x + residual (+ bias), y = RMSNorm(h).
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
    /// The weight (cols), when the RMSNorm has one.
    pub weight: Option<CudaView<'a, P>>,
    /// Saved 1 / sqrt(mean(h^2) + eps) (rows f32), for [`backward_residual`]; `None` for
    /// inference.
    pub rstd: Option<CudaViewMut<'a, f32>>,
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
    /// The forward's saved rstd (rows f32).
    pub rstd: CudaView<'a, f32>,
    /// The weight (cols), when the RMSNorm has one.
    pub weight: Option<CudaView<'a, P>>,
    /// dweight (cols), when the RMSNorm has a weight.
    pub dweight: Option<CudaViewMut<'a, P>>,
    /// The gradient of the forward's bias (cols, parameter dtype, written), or `None`: the
    /// column sum over rows of dx, summed in f32 by the backward kernels from dx before its
    /// rounding, in a fixed order (deterministic), and rounded once: no extra pass over the
    /// data; the workspace grows by its partial rows.
    pub dbias: Option<CudaViewMut<'a, P>>,
    /// Workspace of [`backward_residual_workspace_bytes`] bytes (with `dbias` when it is
    /// given; `None` when that is 0).
    pub workspace: Option<CudaViewMut<'a, u8>>,
}

/// RMSNorm forward with the residual add fused in, on `stream`: h = x + residual (+ bias),
/// formed in f32 and rounded once to `T`, is written, and y = RMSNorm(h) of that stored h
/// (so y and rstd equal [`forward`] on h), reading x and the residual once and writing h and
/// y once. The same tiers and workspace as [`forward`]; every check before the first launch.
pub fn forward_residual<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &RmsNormDesc,
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
    let _range = profile::range(Op::RmsNormForwardResidual, problem);
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
        weight: lend.input_opt("weight", b.weight.as_ref(), cols)?,
        rstd: lend.output_opt("rstd", b.rstd.as_mut(), rows)?,
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

/// RMSNorm backward of [`forward_residual`] on `stream`: dx = RMSNorm's dx + dh, added in f32
/// before dx's one rounding, in one pass over each row; dweight as [`backward`] on h (bitwise
/// equal to it), deterministic.
pub fn backward_residual<T: Element, P: Element>(
    stream: &Arc<CudaStream>,
    desc: &RmsNormDesc,
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
    let _range = profile::range(Op::RmsNormBackwardResidual, problem);
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
        weight: lend.input_opt("weight", b.weight.as_ref(), cols)?,
        rstd: lend.input("rstd", &b.rstd, rows)?,
        dweight: lend.output_opt("dweight", b.dweight.as_mut(), cols)?,
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
