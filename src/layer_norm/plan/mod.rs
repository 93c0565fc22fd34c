//! LayerNorm launch planning: validation of every pointer and size, then the launches
//! (kernel, grid, block, shared memory, argument struct) as data. A plan is a pure function of
//! the checked description, the pointers (their residues mod 16 choose the variant),
//! [`DeviceProps`] and the build's `ptxas` figures ([`crate::kernels::RESOURCES`], through
//! [`crate::occupancy`]). The tiers, packs and grids: [`geometry`].

use crate::abi::{
    WnLayerNormBwdArgs, WnLayerNormColSumArgs, WnLayerNormFinalizeArgs, WnLayerNormFwdArgs,
    WN_LN_COLSUM_LANES, WN_LN_COLSUM_ROWS, WN_LN_FINALIZE_COLS, WN_LN_FINALIZE_LANES,
};
use crate::check::{check_workspace, Buffers};
use crate::device::DeviceProps;
pub use crate::plan::Direction;
use crate::plan::{grid_dim, Launch, Plan};
use crate::{Error, Result};

use super::desc::{Affine, LayerNormDesc, Problem};

mod geometry;
pub use geometry::{
    access_bytes, bwd_grid_for_heads, bwd_min_rows_per_block, coop_split, geometry, head_period,
    nested_first_grid, pack_width, part_stride, wide_elems, CoopSplit, Geometry, Tier,
    SPLIT_BARRIER_BYTES, SPLIT_MIN_CHUNK, SPLIT_MIN_COLS,
};
pub(crate) use geometry::{geometry_of, geometry_with, residual_pass, with_barrier, RowNorm};
use geometry::{kernel, launched_pass, round_up};

pub use crate::check::WORKSPACE_ALIGN;

crate::abi::abi_args!(
    WnLayerNormFwdArgs,
    WnLayerNormBwdArgs,
    WnLayerNormFinalizeArgs,
    WnLayerNormColSumArgs
);

/// Workspace bytes a plan for `desc` may need on `props` (the maximum over the aligned and
/// misaligned variants, so that it does not depend on the buffers' addresses). 0 when none.
pub fn workspace_bytes(desc: &LayerNormDesc, dir: Direction, props: &DeviceProps) -> Result<usize> {
    workspace_bytes_checked(&desc.check()?, dir, props)
}

/// [`workspace_bytes`] of a checked description.
pub fn workspace_bytes_checked(
    problem: &Problem,
    dir: Direction,
    props: &DeviceProps,
) -> Result<usize> {
    workspace_bytes_of(RowNorm::Layer, problem, dir, props)
}

/// [`workspace_bytes_checked`] for the kernels of `op`.
pub(crate) fn workspace_bytes_of(
    op: RowNorm,
    problem: &Problem,
    dir: Direction,
    props: &DeviceProps,
) -> Result<usize> {
    max_workspace(op, problem, dir, false, props)
}

/// The largest workspace over the aligned and misaligned variants' geometries, with the
/// bias gradient's extra bytes ([`dbias_extra_bytes`]) when `dbias`.
fn max_workspace(
    op: RowNorm,
    problem: &Problem,
    dir: Direction,
    dbias: bool,
    props: &DeviceProps,
) -> Result<usize> {
    let desc = problem.desc();
    if desc.rows == 0 || desc.cols == 0 {
        return Ok(0);
    }
    let gdesc = geometry_desc(desc, dbias);
    let mut max = 0u64;
    for (vec, aligned) in [(true, true), (true, false), (false, true)] {
        let geo = geometry_with(op, &gdesc, dir, vec, aligned, dbias, props)?;
        let extra = if dbias {
            dbias_extra_bytes(op, desc, &geo, props)
        } else {
            0
        };
        let bytes = geo
            .workspace_bytes
            .checked_add(extra)
            .ok_or_else(|| Error::Overflow("workspace size".into()))?;
        max = max.max(bytes);
    }
    let max = with_barrier(max);
    usize::try_from(max).map_err(|_| Error::Overflow(format!("workspace of {max} bytes")))
}

/// Workspace bytes a backward plan of the fused residual add for `desc` may need on `props`:
/// [`workspace_bytes`] of the backward, plus, when `dbias` is formed, one more set of partial
/// rows for a multi-block grid (LayerNorm with a bias: dbeta's, which the block and split
/// tiers sum beside dbias; dbias's without a bias) or, for LayerNorm with a bias in the warp
/// tiers,
/// the partial rows of dbeta's column sum ([`ColumnSumGeometry::workspace_bytes`]: the
/// backward's dbeta accumulators then sum dbias). 0 when none.
pub fn workspace_bytes_residual(
    desc: &LayerNormDesc,
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
    workspace_bytes_residual_of(RowNorm::Layer, problem, dbias, props)
}

/// [`workspace_bytes_residual_checked`] for the kernels of `op`.
pub(crate) fn workspace_bytes_residual_of(
    op: RowNorm,
    problem: &Problem,
    dbias: bool,
    props: &DeviceProps,
) -> Result<usize> {
    max_workspace(op, problem, Direction::Backward, dbias, props)
}

/// The description a backward's geometry is planned for: with the bias gradient and no
/// affine parameters, as if it had a weight, so that the geometry holds the team reduction's
/// shared memory and one set of partial rows (dbias's) and sizes its grid by the partial rows'
/// traffic, as for a parameter gradient.
fn geometry_desc(desc: &LayerNormDesc, dbias: bool) -> LayerNormDesc {
    if dbias && !desc.affine.has_weight() {
        LayerNormDesc {
            affine: Affine::Weight,
            ..*desc
        }
    } else {
        *desc
    }
}

/// The bytes a backward with the bias gradient needs beyond `geo`'s (planned for
/// [`geometry_desc`]): where there is a dbeta (its accumulators sum dbias), its own partial
/// rows in the block and split tiers ([`dy_sums_in_kernel`]) or its column sum's in the warp
/// tiers; else,
/// with a weight, dbias's own partial rows. No partial rows for a single block (it writes its
/// outputs directly); without parameters the geometry has dbias's.
fn dbias_extra_bytes(
    op: RowNorm,
    desc: &LayerNormDesc,
    geo: &Geometry,
    props: &DeviceProps,
) -> u64 {
    let one_set = || {
        if geo.grid_x > 1 {
            round_up(
                geo.grid_x * part_stride(desc.cols as u64) * 4,
                WORKSPACE_ALIGN,
            )
        } else {
            0
        }
    };
    if desc.affine.has_bias() {
        if dy_sums_in_kernel(op, desc, geo) {
            one_set()
        } else {
            column_sum_geometry(desc, props).workspace_bytes
        }
    } else if desc.affine.has_weight() {
        one_set()
    } else {
        0
    }
}

/// Whether a backward with the bias gradient forms dbeta in its own kernel: LayerNorm with a
/// bias in the block and split tiers, whose `block_dbias` / `split_dx_dbias` kernels sum dy in
/// shared memory beside the dbias accumulators (`dy_sum_part` / `dy_sum`; the geometry's
/// dynamic shared memory includes [`geometry::dy_sum_shared_bytes`]). The warp tiers (their
/// dbias sums chosen at run time, where a third sum spilled the 16-bit warp kernels at their
/// register bound) take the column sum.
fn dy_sums_in_kernel(op: RowNorm, desc: &LayerNormDesc, geo: &Geometry) -> bool {
    op == RowNorm::Layer
        && desc.affine.has_bias()
        && matches!(
            geo.tier,
            Tier::Block { .. } | Tier::Wide { .. } | Tier::Split { .. }
        )
}

/// The column sum (`warpnorm_layer_norm_bwd_<T>_colsum`, then the finalize kernel) that forms
/// LayerNorm's dbeta in a backward with the fused residual add's bias gradient: how the rows *
/// cols dy is cut into blocks and chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnSumGeometry {
    /// Blocks across the columns (32 lanes of 16 bytes each: 32 * V columns a block).
    pub col_blocks: u64,
    /// Row chunks (grid.y), one f32 partial row each.
    pub chunks: u64,
    /// Rows per chunk.
    pub chunk_rows: u64,
    /// Bytes of partial rows (chunks * part_stride f32, rounded up to 16); 0 without rows.
    pub workspace_bytes: u64,
}

/// Blocks per SM the column sum aims at (it needs several in flight per SM to cover the
/// memory latency with its one or four 16-byte loads per thread).
pub const COLSUM_BLOCKS_PER_SM: u64 = 8;
/// Fewest rows per chunk: each partial row costs 4 * cols bytes written and read again, at
/// most 1/32 of the chunk's own bytes for 16-bit data at this size.
pub const COLSUM_MIN_CHUNK_ROWS: u64 = 64;

/// [`ColumnSumGeometry`] of a description on `props`: enough chunks for
/// [`COLSUM_BLOCKS_PER_SM`] blocks per SM, none shorter than [`COLSUM_MIN_CHUNK_ROWS`] rows
/// (one chunk for fewer rows).
pub fn column_sum_geometry(desc: &LayerNormDesc, props: &DeviceProps) -> ColumnSumGeometry {
    let (rows, cols) = (desc.rows as u64, desc.cols as u64);
    if rows == 0 || cols == 0 {
        return ColumnSumGeometry {
            col_blocks: 0,
            chunks: 0,
            chunk_rows: 0,
            workspace_bytes: 0,
        };
    }
    let v = 16 / desc.dtype.size() as u64;
    let col_blocks = cols.div_ceil(u64::from(WN_LN_COLSUM_LANES) * v);
    let want = u64::from(props.sm_count) * COLSUM_BLOCKS_PER_SM;
    let chunks = want
        .div_ceil(col_blocks)
        .min(rows.div_ceil(COLSUM_MIN_CHUNK_ROWS))
        .max(1);
    let chunk_rows = rows.div_ceil(chunks);
    let chunks = rows.div_ceil(chunk_rows);
    ColumnSumGeometry {
        col_blocks,
        chunks,
        chunk_rows,
        workspace_bytes: round_up(chunks * part_stride(cols) * 4, WORKSPACE_ALIGN),
    }
}

/// The workspace must hold what the chosen geometry uses (`used` bytes); a shortfall is
/// reported with the number the workspace query returns (`needed`), which is what callers
/// size it by.
fn check_workspace_for(
    ptr: u64,
    given: u64,
    used: u64,
    needed: impl FnOnce() -> Result<usize>,
) -> Result<()> {
    if given < used {
        return check_workspace(ptr, given, needed()? as u64);
    }
    check_workspace(ptr, given, used)
}

/// The in-place pairs LayerNorm accepts: `y == x` forward, `dx == dy` backward (every kernel
/// reads a thread's elements before writing the same elements).
const IN_PLACE: &[(&str, &str)] = &[("y", "x"), ("dx", "dy")];

/// Device addresses of a forward call (0 allowed only for empty buffers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwardPtrs {
    /// Input, rows * cols activation elements.
    pub x: u64,
    /// Output, rows * cols activation elements.
    pub y: u64,
    /// Scale, cols parameter elements (Some exactly when the desc has a weight).
    pub gamma: Option<u64>,
    /// Shift, cols parameter elements (Some exactly when the desc has a bias).
    pub beta: Option<u64>,
    /// Saved mean, rows f32, or `None`: not saved (inference; the kernels store nothing).
    pub mean: Option<u64>,
    /// Saved rstd, rows f32, or `None`: not saved.
    pub rstd: Option<u64>,
    /// The saved mean's rounding error, rows f32, or `None`: not saved. The row mean is
    /// `mean + mean_lo` (`mean` is it rounded to f32, PyTorch's saved mean); pass it to the
    /// backward ([`BackwardPtrs::mean_lo`]), which then re-centres x on the pair: on rows with
    /// a large offset (1e6 + 0.01 N(0, 1)) dx is then as accurate as the forward's y, where
    /// the f32 mean alone leaves it good to about 1e-2. LayerNorm only.
    pub mean_lo: Option<u64>,
    /// Workspace (16-byte aligned), its first [`SPLIT_BARRIER_BYTES`] zero before the first
    /// call (the cooperative split pass's barrier counts, left zero by every call).
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
    /// Scale, cols (Some exactly when the desc has a weight).
    pub gamma: Option<u64>,
    /// Saved mean, rows f32.
    pub mean: u64,
    /// Saved rstd, rows f32.
    pub rstd: u64,
    /// The forward's saved mean_lo ([`ForwardPtrs::mean_lo`]), rows f32, or `None`: taken as
    /// zeros (a mean saved without it, as PyTorch's). LayerNorm only.
    pub mean_lo: Option<u64>,
    /// Gradient of gamma (written), cols (Some exactly when the desc has a weight).
    pub dgamma: Option<u64>,
    /// Gradient of beta (written), cols (Some exactly when the desc has a bias).
    pub dbeta: Option<u64>,
    /// Workspace (16-byte aligned).
    pub workspace: u64,
    /// Workspace size in bytes.
    pub workspace_bytes: u64,
}

/// The in-place pairs of the fused residual add: LayerNorm's, plus `h == residual` and
/// `h == x` (every tier reads a thread's x and residual elements before storing the same
/// elements of h; the split tier's second pass reads h back) and `dx == dh` (read before dx is
/// stored).
const IN_PLACE_RESIDUAL: &[(&str, &str)] = &[
    ("y", "x"),
    ("dx", "dy"),
    ("h", "residual"),
    ("h", "x"),
    ("dx", "dh"),
];

/// The extra device addresses of a forward with the fused residual add: h = x + residual
/// (+ bias), y = norm(h). `h` is formed in f32 from x, the residual and the bias and rounded
/// once to the activation dtype; y and the saved statistics are those of the stored h.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResidualPtrs {
    /// The residual, rows * cols activation elements.
    pub residual: u64,
    /// A bias added to h, cols parameter elements, or `None`.
    pub bias: Option<u64>,
    /// h (written), rows * cols activation elements; may be the residual or x in place.
    pub h: u64,
}

fn check_presence(what: &str, given: bool, expected: bool) -> Result<()> {
    if given != expected {
        let msg = if expected {
            "the LayerNorm has this parameter but none was given"
        } else {
            "the LayerNorm has no such parameter (see LayerNormDesc::affine) but one was given"
        };
        return Err(Error::invalid(what, msg));
    }
    Ok(())
}

/// Validates a forward call and plans its launches: [`LayerNormDesc::check`], then
/// [`plan_forward_checked`].
pub fn plan_forward(desc: &LayerNormDesc, p: &ForwardPtrs, props: &DeviceProps) -> Result<Plan> {
    plan_forward_checked(&desc.check()?, p, props)
}

/// Plans a forward call of a checked description.
///
/// Checks every buffer (non-null when non-empty, aligned to its element size, no address
/// overflow, no output overlapping another buffer except `y == x` in place), parameter
/// presence against `desc.affine`, and the workspace (size and 16-byte alignment). `mean` and
/// `rstd` are each optional: without them (inference) nothing is stored for them, and the
/// workspace is the same (only the split tier has one). An empty input (rows == 0) gives an
/// empty plan; cols == 0 writes mean = 0 and rstd = NaN per row, as PyTorch.
pub fn plan_forward_checked(
    problem: &Problem,
    p: &ForwardPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_forward_of(RowNorm::Layer, problem, p, props)
}

/// [`plan_forward_checked`] launching the kernels of `op` (RMSNorm: `p.mean` and `p.beta`
/// are `None`, checked by the caller).
pub(crate) fn plan_forward_of(
    op: RowNorm,
    problem: &Problem,
    p: &ForwardPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_forward_res_of(op, problem, p, None, props)
}

/// Validates a forward call with the fused residual add (h = x + residual (+ bias),
/// y = LayerNorm(h)) and plans its launches: [`LayerNormDesc::check`], then
/// [`plan_forward_residual_checked`].
pub fn plan_forward_residual(
    desc: &LayerNormDesc,
    p: &ForwardPtrs,
    r: &ResidualPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_forward_residual_checked(&desc.check()?, p, r, props)
}

/// Plans a forward call with the fused residual add of a checked description: the checks of
/// [`plan_forward_checked`], plus the residual and h (activation elements) and the bias
/// (parameter elements); h may be the residual or x in place, y may be x in place (not h).
/// The launches are those of the plain forward (same kernels, tiers and workspace), with the
/// residual, bias and h in their arguments.
pub fn plan_forward_residual_checked(
    problem: &Problem,
    p: &ForwardPtrs,
    r: &ResidualPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_forward_res_of(RowNorm::Layer, problem, p, Some(r), props)
}

/// [`plan_forward_of`] with the fused residual add when `r` is given.
pub(crate) fn plan_forward_res_of(
    op: RowNorm,
    problem: &Problem,
    p: &ForwardPtrs,
    r: Option<&ResidualPtrs>,
    props: &DeviceProps,
) -> Result<Plan> {
    let desc = problem.desc();
    let n = problem.elements();
    let (rows, cols) = (desc.rows as u64, desc.cols as u64);
    let (s, ps) = (desc.dtype.size() as u64, desc.param_dtype.size() as u64);
    check_presence("gamma", p.gamma.is_some(), desc.affine.has_weight())?;
    check_presence("beta", p.beta.is_some(), desc.affine.has_bias())?;
    let mut bufs = Buffers::new(if r.is_some() {
        IN_PLACE_RESIDUAL
    } else {
        IN_PLACE
    });
    bufs.input("x", p.x, n, s)?;
    bufs.output("y", p.y, n, s)?;
    if let Some(r) = r {
        bufs.input("residual", r.residual, n, s)?;
        bufs.input_opt("bias", r.bias, cols, ps)?;
        bufs.output("h", r.h, n, s)?;
    }
    bufs.input_opt("gamma", p.gamma, cols, ps)?;
    bufs.input_opt("beta", p.beta, cols, ps)?;
    bufs.output_opt("mean", p.mean, rows, 4)?;
    bufs.output_opt("rstd", p.rstd, rows, 4)?;
    if op == RowNorm::Layer {
        bufs.output_opt("mean_lo", p.mean_lo, rows, 4)?;
    } else if p.mean_lo.is_some() {
        return Err(Error::invalid("mean_lo", "RMSNorm has no saved mean"));
    }
    if p.workspace_bytes > 0 {
        bufs.output("workspace", p.workspace, p.workspace_bytes, 1)?;
    }
    bufs.finish()?;
    if rows == 0 {
        return Ok(Plan::empty());
    }
    // Vector variant: x and y (and the residual and h) congruent mod the access width (heads
    // are predicated).
    let a = access_bytes(desc.dtype, desc.param_dtype);
    let vec =
        p.x % a == p.y % a && r.is_none_or(|r| p.x % a == r.residual % a && p.x % a == r.h % a);
    let rows_aligned = p.x.is_multiple_of(a) && (cols * s).is_multiple_of(a);
    let geo = geometry_with(
        op,
        desc,
        Direction::Forward,
        vec,
        rows_aligned,
        r.is_some(),
        props,
    )?;
    check_workspace_for(
        p.workspace,
        p.workspace_bytes,
        with_barrier(geo.workspace_bytes),
        || workspace_bytes_of(op, problem, Direction::Forward, props),
    )?;
    let mut args = WnLayerNormFwdArgs {
        x: p.x,
        y: p.y,
        gamma: p.gamma.unwrap_or(0),
        beta: p.beta.unwrap_or(0),
        mean: p.mean.unwrap_or(0),
        rstd: p.rstd.unwrap_or(0),
        mean_lo: p.mean_lo.unwrap_or(0),
        partials: 0,
        rows: rows as i64,
        cols: cols as i64,
        chunk: cols as i64,
        splits: 1,
        eps: desc.eps,
        group: 0,
        residual: r.map_or(0, |r| r.residual),
        bias: r.and_then(|r| r.bias).unwrap_or(0),
        h: r.map_or(0, |r| r.h),
    };
    // The fused residual add's forward kernels: `..._res_<tier>_vec` and
    // `..._res_split_stats_scalar`; the plain scalar subwarp, warp and block kernels take the
    // residual at run time (`args.residual` set).
    let res_tier = |tier: &str| {
        if r.is_some() {
            residual_pass(tier, vec)
        } else {
            tier.to_string()
        }
    };
    let block = [geo.threads, 1, 1];
    let mut plan = Plan::empty();
    match geo.tier {
        Tier::Subwarp { .. } | Tier::Warp | Tier::Block { .. } => {
            args.group = match geo.tier {
                Tier::Subwarp { group } => group,
                Tier::Warp => 32,
                _ => 0,
            };
            let name = kernel(op, "fwd", desc, &res_tier(geo.tier.name()), vec);
            let grid = [grid_dim(geo.grid_x, &name)?, 1, 1];
            plan.push(Launch::new(name, grid, block, 0, &args));
        }
        Tier::Wide { .. } => {
            // The wide tier is backward-only (geometry_with never picks it forward).
            return Err(Error::UnknownKernel(kernel(op, "fwd", desc, "wide", vec)));
        }
        Tier::Split { chunk, splits, .. } => {
            // The workspace: the cooperative pass's barrier counts, then the chunk partials.
            args.partials = p.workspace + SPLIT_BARRIER_BYTES;
            args.chunk = chunk as i64;
            args.splits = splits as i64;
            if let Some(co) = geo.coop {
                // One cooperative launch: every chunk held on chip, x read once (its barrier
                // counts in the SPLIT_BARRIER_BYTES before the partials).
                let name = kernel(op, "fwd", desc, &res_tier("split_coop"), vec);
                let grid = [grid_dim(co.grid, &name)?, 1, 1];
                let l = Launch::new(name, grid, block, co.shared_mem_bytes, &args);
                plan.push(l.into_cooperative());
                plan.check(props)?;
                return Ok(plan);
            }
            for pass in ["split_stats", "split_norm"] {
                let mut a = args;
                let tier = if pass == "split_stats" {
                    res_tier(pass)
                } else {
                    // The plain pass 2 normalizes h, as the fused split_stats stored it.
                    if let Some(r) = r {
                        (a.x, a.residual, a.bias, a.h) = (r.h, 0, 0, 0);
                    }
                    pass.to_string()
                };
                let name = kernel(op, "fwd", desc, &tier, vec);
                // split_stats on a grid of its own occupancy (Geometry::first_grid_x).
                let gx = if pass == "split_stats" {
                    geo.first_grid_x
                } else {
                    geo.grid_x
                };
                let grid = [grid_dim(gx, &name)?, grid_dim(geo.grid_y, &name)?, 1];
                plan.push(Launch::new(name, grid, block, 0, &a));
            }
        }
    }
    plan.check(props)?;
    Ok(plan)
}

/// Validates a backward call and plans its launches (dx, then the dgamma/dbeta finalize):
/// [`LayerNormDesc::check`], then [`plan_backward_checked`].
pub fn plan_backward(desc: &LayerNormDesc, p: &BackwardPtrs, props: &DeviceProps) -> Result<Plan> {
    plan_backward_checked(&desc.check()?, p, props)
}

/// Plans a backward call of a checked description.
///
/// Same checks as [`plan_forward_checked`] (`dx == dy` may be in place), plus
/// dgamma/dbeta presence against `desc.affine`. rows == 0 writes zero dgamma/dbeta;
/// cols == 0 gives an empty plan.
pub fn plan_backward_checked(
    problem: &Problem,
    p: &BackwardPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_backward_of(RowNorm::Layer, problem, p, props)
}

/// [`plan_backward_checked`] launching the kernels of `op` (RMSNorm: no mean - `p.mean` is
/// 0 and not checked - and no bias).
pub(crate) fn plan_backward_of(
    op: RowNorm,
    problem: &Problem,
    p: &BackwardPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_backward_res_of(op, problem, p, None, props)
}

/// The extra device addresses of a backward with the fused residual add.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResidualGrads {
    /// The gradient arriving on h (from later in the residual stream), rows * cols activation
    /// elements, or `None`; may be dx in place.
    pub dh: Option<u64>,
    /// The bias gradient (written), cols parameter elements, or `None`: the column sum over
    /// rows of dx (the gradient of h), summed by the backward kernels from the f32 dx before
    /// its rounding, in a fixed order, and rounded once. Needs [`workspace_bytes_residual`]
    /// with `dbias`.
    pub dbias: Option<u64>,
}

/// Validates a backward call of the fused residual add and plans its launches:
/// [`LayerNormDesc::check`], then [`plan_backward_residual_checked`].
pub fn plan_backward_residual(
    desc: &LayerNormDesc,
    p: &BackwardPtrs,
    g: &ResidualGrads,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_backward_residual_checked(&desc.check()?, p, g, props)
}

/// Plans a backward call of the fused residual add of a checked description: `p.x` is h as
/// the forward stored it (the backward re-reads h, not x and the residual), and `g.dh`, the
/// gradient arriving on h (rows * cols activation elements, may be dx in place), is added in
/// f32 to the normalization's dx before its one rounding, so that dx is the gradient of h,
/// of x and of the residual alike. Without `dh` it is the plain backward on h. With
/// `g.dbias` the backward kernels sum the bias gradient from the f32 dx before its rounding
/// (dh included) in the accumulators and partial rows that otherwise hold dbeta, and dbeta,
/// when the description has a bias, is summed beside it by the block and split tiers'
/// kernels (in shared memory, into its own partial rows; the one finalize then writes dgamma,
/// dbias and dbeta) and comes from two launches before the backward in the warp tiers (the column
/// sum of dy into f32 partial rows, then the finalize kernel); the workspace is then
/// [`workspace_bytes_residual`] with `dbias`.
pub fn plan_backward_residual_checked(
    problem: &Problem,
    p: &BackwardPtrs,
    g: &ResidualGrads,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_backward_res_of(RowNorm::Layer, problem, p, Some(g), props)
}

/// The finalize launches: each (partial rows, output) pair is summed over `part_rows`
/// partial rows into its output (parameter dtype), three outputs a launch; `part_rows == 0`
/// writes zeros (the partial-row address then only says which outputs to write).
fn push_finalize(
    plan: &mut Plan,
    op: RowNorm,
    desc: &LayerNormDesc,
    part_rows: u64,
    outputs: &[(u64, u64)],
) -> Result<()> {
    let cols = desc.cols as u64;
    let name = format!(
        "warpnorm_{}_bwd_{}_finalize",
        op.prefix(),
        desc.param_dtype.name()
    );
    for set in outputs.chunks(3) {
        let (db_part, db) = set.get(1).copied().unwrap_or((0, 0));
        let (ds_part, ds) = set.get(2).copied().unwrap_or((0, 0));
        let args = WnLayerNormFinalizeArgs {
            dgamma_part: set[0].0,
            dbeta_part: db_part,
            dgamma: set[0].1,
            dbeta: db,
            dy_sum_part: ds_part,
            dy_sum: ds,
            part_rows: part_rows as i64,
            cols: cols as i64,
            part_stride: part_stride(cols) as i64,
        };
        let grid = [
            grid_dim(cols.div_ceil(u64::from(WN_LN_FINALIZE_COLS)), &name)?,
            1,
            1,
        ];
        let block = [WN_LN_FINALIZE_COLS, WN_LN_FINALIZE_LANES, 1];
        plan.push(Launch::new(name.clone(), grid, block, 0, &args));
    }
    Ok(())
}

/// dbeta by the column sum of dy (LayerNorm with a bias, when the backward's dbeta
/// accumulators form dbias): the column sum into partial rows at `part`, then the finalize
/// into `dbeta` (rows > 0).
fn push_column_sum(
    plan: &mut Plan,
    desc: &LayerNormDesc,
    dy: u64,
    part: u64,
    dbeta: u64,
    props: &DeviceProps,
) -> Result<()> {
    let (rows, cols) = (desc.rows as u64, desc.cols as u64);
    let cg = column_sum_geometry(desc, props);
    let name = format!(
        "warpnorm_{}_bwd_{}_colsum",
        RowNorm::Layer.prefix(),
        desc.dtype.name()
    );
    let vec = dy.is_multiple_of(16) && (cols * desc.dtype.size() as u64).is_multiple_of(16);
    let args = WnLayerNormColSumArgs {
        src: dy,
        part,
        rows: rows as i64,
        cols: cols as i64,
        chunk_rows: cg.chunk_rows as i64,
        part_stride: part_stride(cols) as i64,
        vec: u32::from(vec),
        _pad: 0,
    };
    let grid = [
        grid_dim(cg.col_blocks, &name)?,
        grid_dim(cg.chunks, &name)?,
        1,
    ];
    plan.push(Launch::new(
        name,
        grid,
        [WN_LN_COLSUM_LANES, WN_LN_COLSUM_ROWS, 1],
        0,
        &args,
    ));
    push_finalize(plan, RowNorm::Layer, desc, cg.chunks, &[(part, dbeta)])
}

/// [`plan_backward_of`] with the fused residual add's gradients when `g` is given: `dh`
/// added into dx, `dbias` summed from the f32 dx by the backward kernels (`db_dx`: in the
/// accumulators and partial rows that otherwise hold dbeta), LayerNorm's dbeta then beside
/// it in the block and split tiers ([`dy_sums_in_kernel`]) or else by a column sum of dy
/// launched first
/// (dy may be dx in place).
pub(crate) fn plan_backward_res_of(
    op: RowNorm,
    problem: &Problem,
    p: &BackwardPtrs,
    g: Option<&ResidualGrads>,
    props: &DeviceProps,
) -> Result<Plan> {
    let dh = g.and_then(|g| g.dh);
    let dbias = g.and_then(|g| g.dbias);
    let desc = problem.desc();
    let n = problem.elements();
    let (rows, cols) = (desc.rows as u64, desc.cols as u64);
    let (s, ps) = (desc.dtype.size() as u64, desc.param_dtype.size() as u64);
    check_presence("gamma", p.gamma.is_some(), desc.affine.has_weight())?;
    check_presence("dgamma", p.dgamma.is_some(), desc.affine.has_weight())?;
    check_presence("dbeta", p.dbeta.is_some(), desc.affine.has_bias())?;
    let mut bufs = Buffers::new(if g.is_some() {
        IN_PLACE_RESIDUAL
    } else {
        IN_PLACE
    });
    bufs.input("x", p.x, n, s)?;
    bufs.input("dy", p.dy, n, s)?;
    bufs.output("dx", p.dx, n, s)?;
    bufs.input_opt("dh", dh, n, s)?;
    bufs.output_opt("dbias", dbias, cols, ps)?;
    bufs.input_opt("gamma", p.gamma, cols, ps)?;
    if op == RowNorm::Layer {
        bufs.input("mean", p.mean, rows, 4)?;
        bufs.input_opt("mean_lo", p.mean_lo, rows, 4)?;
    } else if p.mean != 0 {
        return Err(Error::invalid("mean", "RMSNorm has no saved mean"));
    } else if p.mean_lo.is_some() {
        return Err(Error::invalid("mean_lo", "RMSNorm has no saved mean"));
    }
    bufs.input("rstd", p.rstd, rows, 4)?;
    bufs.output_opt("dgamma", p.dgamma, cols, ps)?;
    bufs.output_opt("dbeta", p.dbeta, cols, ps)?;
    if p.workspace_bytes > 0 {
        bufs.output("workspace", p.workspace, p.workspace_bytes, 1)?;
    }
    bufs.finish()?;
    let mut plan = Plan::empty();
    if cols == 0 {
        return Ok(plan);
    }
    // The parameter outputs: dgamma (with a weight), the second accumulator's (dbias when it
    // is formed, else dbeta with a bias) and dbeta by the column sum (both).
    let dgamma = p.dgamma.filter(|_| desc.affine.has_weight());
    let dbeta = p.dbeta.filter(|_| desc.affine.has_bias());
    let second = dbias.or(dbeta);
    let colsum_dbeta = if dbias.is_some() { dbeta } else { None };
    if rows == 0 {
        // No rows: the finalize kernel writes zeros (the partial-row addresses are only
        // non-null to say which outputs to write; nothing is read with 0 partial rows).
        let outs: Vec<(u64, u64)> = [dgamma, second, colsum_dbeta]
            .into_iter()
            .flatten()
            .map(|out| (1, out))
            .collect();
        push_finalize(&mut plan, op, desc, 0, &outs)?;
        plan.check(props)?;
        return Ok(plan);
    }
    // Vector variant: x, dy, dx congruent mod the access width (heads are predicated).
    let a = access_bytes(desc.dtype, desc.param_dtype);
    let vec = p.x % a == p.dy % a && p.x % a == p.dx % a && dh.is_none_or(|h| p.x % a == h % a);
    let rows_aligned = p.x.is_multiple_of(a) && (cols * s).is_multiple_of(a);
    let gdesc = geometry_desc(desc, dbias.is_some());
    let geo = geometry_with(
        op,
        &gdesc,
        Direction::Backward,
        vec,
        rows_aligned,
        dbias.is_some(),
        props,
    )?;
    let extra = if dbias.is_some() {
        dbias_extra_bytes(op, desc, &geo, props)
    } else {
        0
    };
    // dbeta beside dbias in the block / split_dx kernel (dy_sums_in_kernel), else by the
    // column sum.
    let in_kernel = dbias.is_some() && dy_sums_in_kernel(op, desc, &geo);
    let colsum_dbeta = colsum_dbeta.filter(|_| !in_kernel);
    let kernel_dbeta = if in_kernel { dbeta } else { None };
    check_workspace_for(
        p.workspace,
        p.workspace_bytes,
        with_barrier(geo.workspace_bytes + extra),
        || workspace_bytes_residual_of(op, problem, dbias.is_some(), props),
    )?;
    let stride = part_stride(cols);
    let part = round_up(geo.grid_x * stride * 4, WORKSPACE_ALIGN);
    // (The workspace starts with the forward's barrier counts, untouched here.)
    let mut next = p.workspace + SPLIT_BARRIER_BYTES;
    let mut take = |bytes: u64| {
        let at = next;
        next += bytes;
        at
    };
    // One block: it writes its outputs itself, without partial rows or finalize.
    let direct = geo.grid_x == 1;
    let dgamma_part = if dgamma.is_some() && !direct {
        take(part)
    } else {
        0
    };
    let second_part = if second.is_some() && !direct {
        take(part)
    } else {
        0
    };
    let row_sums = match geo.tier {
        Tier::Split { splits, .. } => take(round_up(rows * splits * 8, WORKSPACE_ALIGN)),
        _ => 0,
    };
    let dy_sum_part = if kernel_dbeta.is_some() && !direct {
        take(part)
    } else {
        0
    };
    if let Some(dbeta) = colsum_dbeta {
        // First: dx may be written over dy.
        let part = take(column_sum_geometry(desc, props).workspace_bytes);
        push_column_sum(&mut plan, desc, p.dy, part, dbeta, props)?;
    }
    let mut args = WnLayerNormBwdArgs {
        x: p.x,
        dy: p.dy,
        dx: p.dx,
        gamma: p.gamma.unwrap_or(0),
        mean: p.mean,
        rstd: p.rstd,
        mean_lo: p.mean_lo.unwrap_or(0),
        dgamma_part,
        dbeta_part: second_part,
        row_sums,
        dgamma: if direct { dgamma.unwrap_or(0) } else { 0 },
        dbeta: if direct { second.unwrap_or(0) } else { 0 },
        rows: rows as i64,
        cols: cols as i64,
        chunk: cols as i64,
        splits: 1,
        part_stride: stride as i64,
        group: 0,
        db_dx: u32::from(dbias.is_some()),
        dh: dh.unwrap_or(0),
        dy_sum_part,
        dy_sum: if direct { kernel_dbeta.unwrap_or(0) } else { 0 },
    };
    let block = [geo.threads, 1, 1];
    match geo.tier {
        Tier::Subwarp { group } => {
            args.group = group;
            push_bwd_warp(&mut plan, op, desc, "subwarp", vec, &geo, &args)?;
        }
        Tier::Warp => {
            args.group = 32;
            push_bwd_warp(&mut plan, op, desc, "warp", vec, &geo, &args)?;
        }
        Tier::Block { .. } | Tier::Wide { .. } => {
            // With the bias gradient, the block and wide tiers' own entry points (it is fixed
            // at compile time there, as in the split tier; the warp tiers read `db_dx`): the
            // same rule the geometry sized the grid by.
            let tier = launched_pass(geo.tier.name(), false, dbias.is_some(), vec);
            let name = kernel(op, "bwd", desc, &tier, vec);
            let grid = [grid_dim(geo.grid_x, &name)?, 1, 1];
            // The row teams sum their dgamma/dbeta in shared memory (teams * cols floats),
            // which with dbeta beside dbias first holds the threads' dy sums (the wide tier:
            // its slots, wide_shared_bytes).
            let block = [geo.threads, geo.rows_per_block, 1];
            plan.push(Launch::new(name, grid, block, geo.shared_mem_bytes, &args));
        }
        Tier::Split { chunk, splits, .. } => {
            args.chunk = chunk as i64;
            args.splits = splits as i64;
            // split_dx stages its chunk of dgamma/dbeta in shared memory (chunk floats; with
            // dbeta beside dbias, first the threads' dy sums); with the bias gradient its
            // `split_dx_dbias` entry points.
            // split_sums writes no partial rows: a grid of its own occupancy
            // (Geometry::first_grid_x; two blocks per SM where split_dx has one).
            for (pass, smem, gx) in [
                ("split_sums", 0, geo.first_grid_x),
                ("split_dx", geo.shared_mem_bytes, geo.grid_x),
            ] {
                let pass = launched_pass(pass, false, dbias.is_some(), vec);
                let name = kernel(op, "bwd", desc, &pass, vec);
                let grid = [grid_dim(gx, &name)?, grid_dim(geo.grid_y, &name)?, 1];
                plan.push(Launch::new(name, grid, block, smem, &args));
            }
        }
    }
    if !direct {
        let outs: Vec<(u64, u64)> = [
            (dgamma_part, dgamma),
            (second_part, second),
            (dy_sum_part, kernel_dbeta),
        ]
        .into_iter()
        .filter_map(|(part, out)| out.map(|o| (part, o)))
        .collect();
        if !outs.is_empty() {
            push_finalize(&mut plan, op, desc, geo.grid_x, &outs)?;
        }
    }
    plan.check(props)?;
    Ok(plan)
}

fn push_bwd_warp(
    plan: &mut Plan,
    op: RowNorm,
    desc: &LayerNormDesc,
    tier: &str,
    vec: bool,
    geo: &Geometry,
    args: &WnLayerNormBwdArgs,
) -> Result<()> {
    let name = kernel(op, "bwd", desc, tier, vec);
    // The groups' dgamma/dbeta accumulators are summed in shared memory (groups * cols floats).
    let grid = [grid_dim(geo.grid_x, &name)?, 1, 1];
    plan.push(Launch::new(
        name,
        grid,
        [geo.threads, 1, 1],
        geo.shared_mem_bytes,
        args,
    ));
    Ok(())
}
