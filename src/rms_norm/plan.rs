//! RMSNorm launch planning. RMSNorm shares LayerNorm's tiers, geometry and planner
//! ([`crate::layer_norm::plan`]): a call is checked here with RMSNorm's names (x, y, weight,
//! rstd, dweight), then planned as the LayerNorm with a weight and no bias, launching the
//! `warpnorm_rms_norm_*` kernels (cuda/rms_norm.cu: the same bodies without the mean). No
//! mean is saved or read; the finalize of dweight is RMSNorm's own entry point.

use crate::check::Buffers;
use crate::device::DeviceProps;
use crate::layer_norm::plan::{
    self as ln, geometry_of, plan_backward_res_of, plan_forward_res_of, RowNorm,
};
pub use crate::layer_norm::plan::{ResidualGrads, ResidualPtrs};
pub use crate::plan::Direction;
use crate::plan::Plan;
use crate::{Error, Result};

use super::desc::{Problem, RmsNormDesc};

pub use ln::WORKSPACE_ALIGN;

/// Workspace bytes a plan for `desc` may need on `props` (the maximum over the aligned and
/// misaligned variants). 0 when none.
pub fn workspace_bytes(desc: &RmsNormDesc, dir: Direction, props: &DeviceProps) -> Result<usize> {
    workspace_bytes_checked(&desc.check()?, dir, props)
}

/// [`workspace_bytes`] of a checked description.
pub fn workspace_bytes_checked(
    problem: &Problem,
    dir: Direction,
    props: &DeviceProps,
) -> Result<usize> {
    ln::workspace_bytes_of(RowNorm::Rms, problem.layer_norm(), dir, props)
}

/// Workspace bytes a backward plan of the fused residual add for `desc` may need on `props`:
/// [`workspace_bytes`] of the backward, plus the bias gradient's partial rows when `dbias`
/// is formed (a multi-block grid's). 0 when none.
pub fn workspace_bytes_residual(
    desc: &RmsNormDesc,
    dbias: bool,
    props: &DeviceProps,
) -> Result<usize> {
    workspace_bytes_residual_checked(&desc.check()?, dbias, props)
}

/// [`workspace_bytes_residual`] of a checked description.
pub fn workspace_bytes_residual_checked(
    problem: &Problem,
    dbias: bool,
    props: &DeviceProps,
) -> Result<usize> {
    ln::workspace_bytes_residual_of(RowNorm::Rms, problem.layer_norm(), dbias, props)
}

/// The tier and launch geometry a plan of `desc` uses (see [`crate::layer_norm::plan`]).
pub fn geometry(
    desc: &RmsNormDesc,
    dir: Direction,
    vec: bool,
    rows_aligned: bool,
    props: &DeviceProps,
) -> Result<ln::Geometry> {
    let problem = desc.check()?;
    geometry_of(
        RowNorm::Rms,
        problem.layer_norm().desc(),
        dir,
        vec,
        rows_aligned,
        props,
    )
}

/// The in-place pairs RMSNorm accepts: `y == x` forward, `dx == dy` backward.
const IN_PLACE: &[(&str, &str)] = &[("y", "x"), ("dx", "dy")];

/// Device addresses of a forward call (0 allowed only for empty buffers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwardPtrs {
    /// Input, rows * cols activation elements.
    pub x: u64,
    /// Output, rows * cols activation elements.
    pub y: u64,
    /// Weight, cols parameter elements (Some exactly when the desc has a weight).
    pub weight: Option<u64>,
    /// Saved rstd, rows f32, or `None`: not saved (inference; the kernels store nothing).
    pub rstd: Option<u64>,
    /// Workspace (16-byte aligned).
    pub workspace: u64,
    /// Workspace size in bytes.
    pub workspace_bytes: u64,
}

/// Device addresses of a backward call (0 allowed only for empty buffers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackwardPtrs {
    /// Forward input, rows * cols.
    pub x: u64,
    /// Output gradient, rows * cols.
    pub dy: u64,
    /// Input gradient (written), rows * cols.
    pub dx: u64,
    /// Weight, cols (Some exactly when the desc has a weight).
    pub weight: Option<u64>,
    /// Saved rstd, rows f32.
    pub rstd: u64,
    /// Gradient of the weight (written), cols (Some exactly when the desc has a weight).
    pub dweight: Option<u64>,
    /// Workspace (16-byte aligned).
    pub workspace: u64,
    /// Workspace size in bytes.
    pub workspace_bytes: u64,
}

fn check_presence(what: &str, given: bool, expected: bool) -> Result<()> {
    if given != expected {
        let msg = if expected {
            "the RMSNorm has a weight but none was given"
        } else {
            "the RMSNorm has no weight (RmsNormDesc::weight is false) but one was given"
        };
        return Err(Error::invalid(what, msg));
    }
    Ok(())
}

/// Validates a forward call and plans its launches: [`RmsNormDesc::check`], then
/// [`plan_forward_checked`].
pub fn plan_forward(desc: &RmsNormDesc, p: &ForwardPtrs, props: &DeviceProps) -> Result<Plan> {
    plan_forward_checked(&desc.check()?, p, props)
}

/// Plans a forward call of a checked description.
///
/// Checks every buffer (non-null when non-empty, aligned to its element size, no address
/// overflow, no output overlapping another buffer except `y == x` in place), the weight's
/// presence against `desc.weight`, and the workspace. `rstd` is optional (inference: nothing
/// stored). rows == 0 gives an empty plan; cols == 0 writes rstd = NaN per row, as PyTorch.
pub fn plan_forward_checked(
    problem: &Problem,
    p: &ForwardPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_forward_res(problem, p, None, props)
}

/// Validates a forward call with the fused residual add (h = x + residual (+ bias),
/// y = RMSNorm(h)) and plans its launches: [`RmsNormDesc::check`], then
/// [`plan_forward_residual_checked`].
pub fn plan_forward_residual(
    desc: &RmsNormDesc,
    p: &ForwardPtrs,
    r: &ResidualPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_forward_residual_checked(&desc.check()?, p, r, props)
}

/// Plans a forward call with the fused residual add of a checked description: the checks of
/// [`plan_forward_checked`], plus the residual and h (activation elements) and the bias
/// (parameter elements, `None` for none); h may be the residual or x in place, y may be x in
/// place (not h). h is formed in f32 and rounded once to the activation dtype; y and rstd
/// are those of the stored h. Same kernels, tiers and workspace as the plain forward.
pub fn plan_forward_residual_checked(
    problem: &Problem,
    p: &ForwardPtrs,
    r: &ResidualPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_forward_res(problem, p, Some(r), props)
}

fn plan_forward_res(
    problem: &Problem,
    p: &ForwardPtrs,
    r: Option<&ResidualPtrs>,
    props: &DeviceProps,
) -> Result<Plan> {
    let desc = problem.desc();
    let n = problem.elements();
    let (rows, cols) = (desc.rows as u64, desc.cols as u64);
    let (s, ps) = (desc.dtype.size() as u64, desc.param_dtype.size() as u64);
    check_presence("weight", p.weight.is_some(), desc.weight)?;
    let mut bufs = Buffers::new(IN_PLACE);
    bufs.input("x", p.x, n, s)?;
    bufs.output("y", p.y, n, s)?;
    bufs.input_opt("weight", p.weight, cols, ps)?;
    bufs.output_opt("rstd", p.rstd, rows, 4)?;
    if p.workspace_bytes > 0 {
        bufs.output("workspace", p.workspace, p.workspace_bytes, 1)?;
    }
    bufs.finish()?;
    let lp = ln::ForwardPtrs {
        x: p.x,
        y: p.y,
        gamma: p.weight,
        beta: None,
        mean: None,
        rstd: p.rstd,
        mean_lo: None,
        workspace: p.workspace,
        workspace_bytes: p.workspace_bytes,
    };
    plan_forward_res_of(RowNorm::Rms, problem.layer_norm(), &lp, r, props)
}

/// Validates a backward call and plans its launches (dx, then the dweight finalize):
/// [`RmsNormDesc::check`], then [`plan_backward_checked`].
pub fn plan_backward(desc: &RmsNormDesc, p: &BackwardPtrs, props: &DeviceProps) -> Result<Plan> {
    plan_backward_checked(&desc.check()?, p, props)
}

/// Plans a backward call of a checked description.
///
/// Same checks as [`plan_forward_checked`] (`dx == dy` may be in place), plus the presence of
/// dweight against `desc.weight`. rows == 0 writes a zero dweight; cols == 0 gives an empty
/// plan.
pub fn plan_backward_checked(
    problem: &Problem,
    p: &BackwardPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_backward_res(problem, p, None, props)
}

/// Validates a backward call of the fused residual add and plans its launches:
/// [`RmsNormDesc::check`], then [`plan_backward_residual_checked`].
pub fn plan_backward_residual(
    desc: &RmsNormDesc,
    p: &BackwardPtrs,
    g: &ResidualGrads,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_backward_residual_checked(&desc.check()?, p, g, props)
}

/// Plans a backward call of the fused residual add of a checked description: `p.x` is h as
/// the forward stored it, and `g.dh` (the gradient arriving on h, rows * cols activation
/// elements, may be dx in place) is added in f32 to the normalization's dx before its one
/// rounding: dx is the gradient of h, x and the residual alike. With `g.dbias` the backward
/// kernels also sum the bias gradient, from the f32 dx before its rounding, in the
/// accumulators LayerNorm's dbeta would use (no extra launch beyond the finalize; the
/// workspace is then [`workspace_bytes_residual`] with `dbias`).
pub fn plan_backward_residual_checked(
    problem: &Problem,
    p: &BackwardPtrs,
    g: &ResidualGrads,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_backward_res(problem, p, Some(g), props)
}

fn plan_backward_res(
    problem: &Problem,
    p: &BackwardPtrs,
    g: Option<&ResidualGrads>,
    props: &DeviceProps,
) -> Result<Plan> {
    let desc = problem.desc();
    let n = problem.elements();
    let (rows, cols) = (desc.rows as u64, desc.cols as u64);
    let (s, ps) = (desc.dtype.size() as u64, desc.param_dtype.size() as u64);
    check_presence("weight", p.weight.is_some(), desc.weight)?;
    check_presence("dweight", p.dweight.is_some(), desc.weight)?;
    let mut bufs = Buffers::new(IN_PLACE);
    bufs.input("x", p.x, n, s)?;
    bufs.input("dy", p.dy, n, s)?;
    bufs.output("dx", p.dx, n, s)?;
    bufs.input_opt("weight", p.weight, cols, ps)?;
    bufs.input("rstd", p.rstd, rows, 4)?;
    bufs.output_opt("dweight", p.dweight, cols, ps)?;
    if p.workspace_bytes > 0 {
        bufs.output("workspace", p.workspace, p.workspace_bytes, 1)?;
    }
    bufs.finish()?;
    let lp = ln::BackwardPtrs {
        x: p.x,
        dy: p.dy,
        dx: p.dx,
        gamma: p.weight,
        mean: 0,
        rstd: p.rstd,
        mean_lo: None,
        dgamma: p.dweight,
        dbeta: None,
        workspace: p.workspace,
        workspace_bytes: p.workspace_bytes,
    };
    plan_backward_res_of(RowNorm::Rms, problem.layer_norm(), &lp, g, props)
}
