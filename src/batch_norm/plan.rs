//! Launch planning for BatchNorm: validation, tier and variant choice, grids, workspace.
//!
//! Every function here is pure: the same description, pointers and [`DeviceProps`] always give
//! the same [`Plan`]. All validation happens here, before any launch.
//!
//! Kernels (`cuda/batch_norm.cu`), with `<layout>` = `nchw` or `nhwc` (channels innermost:
//! channels-last, or any `(N, C)` input) and `<access>` = `vec` (16-byte packs: the packed
//! dimension - S for nchw, C for nhwc - divisible by 16 / sizeof(T), every activation pointer
//! 16-byte aligned) or `scalar` (anything else):
//! - `warpnorm_batch_norm_fwd_<T>_stats_<layout>_<access>`, grid (C or channel tiles, splits),
//! - `warpnorm_batch_norm_fwd_<P>params_finalize`, block (up to 32 channels, split rows),
//! - `warpnorm_batch_norm_fwd_<T>_apply_<layout>_<access>`, grid-stride elementwise,
//! - `warpnorm_batch_norm_bwd_<T>_reduce_<layout>_<access>`, same grid as the statistics,
//! - `warpnorm_batch_norm_bwd_<P>params_finalize`,
//! - `warpnorm_batch_norm_bwd_<T>_apply_<layout>_<access>` (training backward; eval-mode
//!   backward uses the forward apply kernel on dy),
//! - `warpnorm_batch_norm_fwd_<T>_<P>params_fused_<layout>_<access>`: the whole training
//!   forward in one pass (2s per element) under the same conditions as the fused backward,
//!   followed by the finalize kernel as a one-thread counter bump when a counter is given,
//! - `warpnorm_batch_norm_bwd_<T>_<P>params_fused_<layout>_<access>`: the whole training
//!   backward in one launch when x and dy of a block's channels fit in [`FUSED_MAX_SHARED`]
//!   bytes of shared memory and there are at least 2 channel tiles per SM (3s per element
//!   instead of 5s).
//!
//! The reduction is split along N * S until the grid has about one full wave of blocks
//! (`sm_count * max_threads_per_sm / 256`), keeping at least 4 units per thread per split and
//! the partial results within 1% of the activation bytes.

use crate::abi::{
    WnBatchNormApplyArgs, WnBatchNormBwdFinalizeArgs, WnBatchNormFinalizeArgs,
    WnBatchNormFusedBwdArgs, WnBatchNormFusedFwdArgs, WnBatchNormReduceArgs, WN_BN_BATCH_STATS,
    WN_BN_CUMULATIVE, WN_BN_FROZEN,
};
use crate::check::{check_workspace, Buffers};
use crate::device::DeviceProps;
pub use crate::plan::Direction;
use crate::plan::{grid_dim, Launch, Plan};
use crate::{DType, Error, Result};

use super::desc::{BatchNormDesc, Momentum, Ncs, Problem};

crate::abi::abi_args!(
    WnBatchNormReduceArgs,
    WnBatchNormFinalizeArgs,
    WnBatchNormBwdFinalizeArgs,
    WnBatchNormApplyArgs,
    WnBatchNormFusedBwdArgs,
    WnBatchNormFusedFwdArgs
);

/// Threads per block of the reduction and elementwise kernels (and the most the kernels'
/// shared memory supports).
pub const BLOCK: u32 = 256;
/// Threads per block of the finalize kernels (channels x split rows).
pub const FINALIZE_BLOCK: u32 = 128;
/// Most shared memory the fused backward may use per block (x and dy of its channels plus
/// its merge scratch, all dynamic), leaving room for several resident blocks per SM.
pub const FUSED_MAX_SHARED: u64 = 64 * 1024;
/// Bytes of one forward partial (count, mean, m2) per (split, channel).
const PARTIAL_BYTES: u64 = 12;
/// Minimum reduction units per thread in one split.
const UNITS_PER_THREAD: u64 = 4;

/// Device addresses of a forward call (0 is never a valid address; `None` = not given).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForwardPtrs {
    /// Input, `desc.dtype`.
    pub x: u64,
    /// Output, `desc.dtype`, same layout (may equal `x`).
    pub y: u64,
    /// Scale, C elements of `desc.param_dtype` (affine only; requires `beta`).
    pub gamma: Option<u64>,
    /// Shift, C elements of `desc.param_dtype` (affine only; requires `gamma`).
    pub beta: Option<u64>,
    /// Running mean, C elements of `desc.param_dtype` (with `running_var`).
    pub running_mean: Option<u64>,
    /// Running variance, C elements of `desc.param_dtype` (with `running_mean`).
    pub running_var: Option<u64>,
    /// One i64, incremented by every training call; read for [`Momentum::Cumulative`].
    pub num_batches_tracked: Option<u64>,
    /// Saved mean for backward, C f32 (batch mean; running mean in eval).
    pub save_mean: Option<u64>,
    /// Saved 1 / sqrt(var + eps), C f32 (batch; running in eval).
    pub save_invstd: Option<u64>,
    /// Workspace of at least [`workspace_bytes`] bytes, 16-byte aligned.
    pub workspace: u64,
    /// Workspace size in bytes.
    pub workspace_bytes: u64,
}

/// Device addresses of a backward call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackwardPtrs {
    /// The forward input, `desc.dtype`.
    pub x: u64,
    /// Gradient of the output, `desc.dtype`.
    pub dy: u64,
    /// Gradient of the input (output), `desc.dtype`; may equal `dy`.
    pub dx: u64,
    /// Scale used in the forward (affine only).
    pub gamma: Option<u64>,
    /// The forward's saved mean, C f32.
    pub save_mean: u64,
    /// The forward's saved invstd, C f32.
    pub save_invstd: u64,
    /// Gradient of gamma (output), C of `desc.param_dtype`.
    pub dgamma: Option<u64>,
    /// Gradient of beta (output), C of `desc.param_dtype`.
    pub dbeta: Option<u64>,
    /// Workspace of at least [`workspace_bytes`] bytes, 16-byte aligned.
    pub workspace: u64,
    /// Workspace size in bytes.
    pub workspace_bytes: u64,
}

/// Elements of `T` in one 16-byte vector.
fn vec_width(dtype: DType) -> u64 {
    16 / dtype.size() as u64
}

fn layout_name(g: &Ncs) -> &'static str {
    if g.nhwc {
        "nhwc"
    } else {
        "nchw"
    }
}

/// True when the vector variant may run: packed dimension divisible, pointers aligned.
fn vec_ok(g: &Ncs, dtype: DType, ptrs: &[u64]) -> bool {
    let v = vec_width(dtype);
    let packed = if g.nhwc { g.c } else { g.s };
    packed.is_multiple_of(v) && ptrs.iter().all(|p| p.is_multiple_of(16))
}

/// Channel coefficient arrays are `coef_stride` floats apart: C rounded up to 8, so that every
/// array starts on a 32-byte sector (fully coalesced per-channel requests).
fn coef_stride(c: u64) -> u64 {
    c.div_ceil(8) * 8
}

/// Grid, block and split of one reduction launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReduceGeom {
    grid: [u64; 2],
    block: [u32; 2],
    chunk: u64,
    splits: u64,
}

fn target_blocks(props: &DeviceProps) -> u64 {
    (props.sm_count as u64 * (props.max_threads_per_sm / BLOCK).max(1) as u64).max(1)
}

fn reduce_geom(g: &Ncs, vec: bool, dtype: DType, props: &DeviceProps) -> ReduceGeom {
    let v = if vec { vec_width(dtype) } else { 1 };
    let (tiles, units, bx) = if g.nhwc {
        let cp = g.c / v;
        let bx = cp.next_power_of_two().min(32);
        (cp.div_ceil(bx), g.count(), bx)
    } else {
        (g.c, g.n * (g.s / v), 1)
    };
    let max_by = BLOCK as u64 / bx;
    let min_by = (32 / bx).max(1);
    let by = units.max(1).next_power_of_two().clamp(min_by, max_by);
    let per_split = by * UNITS_PER_THREAD;
    let want = target_blocks(props).div_ceil(tiles.max(1)).max(1);
    // Each split writes (and the finalize reads) 12 bytes per channel: keep that within 1% of
    // the channel's activation bytes, so the statistics add at most ~1% DRAM traffic.
    let traffic_cap = (g.count() * dtype.size() as u64 / (PARTIAL_BYTES * 100)).max(1);
    let splits = want
        .min(units.div_ceil(per_split))
        .min(traffic_cap)
        .clamp(1, props.max_grid_yz.max(1) as u64);
    // nchw: splits start on a 32-byte sector of each slice (units are packs of v elements).
    let unit_bytes = v * dtype.size() as u64;
    let align = if g.nhwc { 1 } else { (32 / unit_bytes).max(1) };
    let chunk = units.div_ceil(splits).max(1).next_multiple_of(align);
    let splits = units.div_ceil(chunk).max(1);
    ReduceGeom {
        grid: [tiles, splits],
        block: [bx as u32, by as u32],
        chunk,
        splits,
    }
}

/// Workspace bytes the plans of `desc` in direction `dir` need on `props`: the per-channel
/// coefficients plus one partial per (split, channel), whatever the buffers' alignment.
pub fn workspace_bytes(desc: &BatchNormDesc, dir: Direction, props: &DeviceProps) -> Result<usize> {
    workspace_bytes_checked(&desc.check()?, dir, props)
}

fn workspace_bytes_checked(
    problem: &Problem,
    _dir: Direction,
    props: &DeviceProps,
) -> Result<usize> {
    let (desc, g) = (problem.desc(), problem.ncs());
    // The vector variant is possible when the packed dimension divides (alignment is only
    // known at plan time): size for whichever of the two needs more.
    let vec_possible = vec_ok(g, desc.dtype, &[]);
    let splits = [false, vec_possible]
        .iter()
        .map(|&vec| reduce_geom(g, vec, desc.dtype, props).splits)
        .max()
        .unwrap_or(1);
    let floats = coef_stride(g.c)
        .checked_mul(4)
        .and_then(|a| splits.checked_mul(g.c)?.checked_mul(3)?.checked_add(a))
        .and_then(|f| f.checked_mul(4))
        .ok_or_else(|| Error::Overflow("BatchNorm workspace size".into()))?;
    usize::try_from(floats).map_err(|_| Error::Overflow("BatchNorm workspace size".into()))
}

/// The in-place pairs BatchNorm accepts: `y == x` forward, `dx == dy` backward.
const IN_PLACE: &[(&str, &str)] = &[("y", "x"), ("dx", "dy")];

/// Grid, block and dynamic shared memory of the fused backward, when it applies: every
/// block's channels fit in [`FUSED_MAX_SHARED`] and there are at least two channel tiles per SM
/// (so the single, unsplit pass still fills the GPU).
fn fused_geom(
    g: &Ncs,
    vec: bool,
    dtype: DType,
    props: &DeviceProps,
    forward: bool,
) -> Option<ReduceGeom> {
    let v = if vec { vec_width(dtype) } else { 1 };
    let want = 2 * props.sm_count as u64;
    let (tiles, units, bx) = if g.nhwc {
        let cp = g.c / v;
        let mut bx = 32u64;
        while bx > 1 && cp.div_ceil(bx) < want {
            bx /= 2;
        }
        (cp.div_ceil(bx), g.count(), bx)
    } else {
        (g.c, g.n * (g.s / v), 1)
    };
    if tiles < want || units == 0 {
        return None;
    }
    // The x packs (forward) or x and dy packs (backward), rounded up to 16 bytes, then the
    // merge scratch and coefficients (see fused_fwd / fused_bwd in cuda/batch_norm.cu):
    // 1024 + 2560 bytes per channel a thread owns (forward), 2560 per channel (backward).
    let arrays = if forward { 1 } else { 2 };
    let data = units
        .checked_mul(bx)?
        .checked_mul(v * dtype.size() as u64 * arrays)?
        .div_ceil(16)
        * 16;
    let cv = if g.nhwc { v } else { 1 };
    let bytes = data + 2560 * cv + if forward { 1024 } else { 0 };
    if bytes > FUSED_MAX_SHARED || bytes > props.max_shared_per_block_optin as u64 / 2 {
        return None;
    }
    let by = units
        .next_power_of_two()
        .clamp((32 / bx).max(1), BLOCK as u64 / bx);
    Some(ReduceGeom {
        grid: [tiles, 1],
        block: [bx as u32, by as u32],
        chunk: bytes,
        splits: 1,
    })
}

fn partials_ptr(workspace: u64, g: &Ncs) -> u64 {
    workspace + coef_stride(g.c) * 4 * 4
}

fn both_or_neither(a: (&str, Option<u64>), b: (&str, Option<u64>)) -> Result<()> {
    if a.1.is_some() != b.1.is_some() {
        return Err(Error::invalid(
            format!("{} / {}", a.0, b.0),
            "give both or neither".to_string(),
        ));
    }
    Ok(())
}

fn reduce_launch(kernel: String, rg: &ReduceGeom, args: &WnBatchNormReduceArgs) -> Result<Launch> {
    Ok(Launch::new(
        kernel.clone(),
        [
            grid_dim(rg.grid[0], &kernel)?,
            grid_dim(rg.grid[1], &kernel)?,
            1,
        ],
        [rg.block[0], rg.block[1], 1],
        0,
        args,
    ))
}

/// Block (channels, split rows) of the finalize kernels: up to 8 consecutive channels per
/// block (one 32-byte sector of f32 per split, so a warp's partial reads are whole sectors),
/// the rest of the [`FINALIZE_BLOCK`] threads over the splits.
fn finalize_block(c: u64) -> [u32; 3] {
    let bx = c.max(1).next_power_of_two().min(8) as u32;
    [bx, FINALIZE_BLOCK / bx, 1]
}

/// A finalize launch over C channels.
fn finalize_launch<T: crate::plan::AbiArgs>(kernel: &str, c: u64, args: &T) -> Result<Launch> {
    let block = finalize_block(c);
    Ok(Launch::new(
        kernel.to_string(),
        [grid_dim(c.div_ceil(block[0] as u64), kernel)?, 1, 1],
        block,
        0,
        args,
    ))
}

fn apply_launch(
    kernel: String,
    g: &Ncs,
    vec: bool,
    dtype: DType,
    props: &DeviceProps,
    args: &WnBatchNormApplyArgs,
) -> Result<Launch> {
    let v = if vec { vec_width(dtype) } else { 1 };
    let cap = target_blocks(props) * 2;
    let (grid, block) = if g.nhwc {
        // Block (bx, by): bx channel vectors x by rows; grid (channel tiles, row groups).
        let cp = g.c / v;
        let bx = cp.next_power_of_two().min(32);
        let rows = g.count();
        let by = rows
            .next_power_of_two()
            .clamp((32 / bx).max(1), BLOCK as u64 / bx);
        let tiles = cp.div_ceil(bx);
        let groups = rows
            .div_ceil(by * UNITS_PER_THREAD)
            .clamp(1, cap.div_ceil(tiles).clamp(1, props.max_grid_yz as u64));
        ([tiles, groups], [bx, by])
    } else {
        let packs = g.numel / v;
        let threads = packs.next_power_of_two().clamp(32, BLOCK as u64);
        let blocks = packs.div_ceil(threads * UNITS_PER_THREAD).clamp(1, cap);
        ([blocks, 1], [threads, 1])
    };
    Ok(Launch::new(
        kernel.clone(),
        [grid_dim(grid[0], &kernel)?, grid_dim(grid[1], &kernel)?, 1],
        [block[0] as u32, block[1] as u32, 1],
        0,
        args,
    ))
}

/// Pointers of a reduction launch (see `WnBatchNormReduceArgs`).
struct ReduceInputs {
    x: u64,
    dy: u64,
    mean: u64,
    shift: u64,
    partials: u64,
}

/// Pushes the per-channel reduction `warpnorm_batch_norm_<dir>_<T>_<stage>_<layout>_<access>`
/// (vector access when `reads` allow it); returns its number of splits.
#[allow(clippy::too_many_arguments)]
fn push_reduce(
    plan: &mut Plan,
    desc: &BatchNormDesc,
    g: &Ncs,
    props: &DeviceProps,
    dir: &str,
    stage: &str,
    reads: &[u64],
    p: ReduceInputs,
) -> Result<i64> {
    let vec = vec_ok(g, desc.dtype, reads);
    let rg = reduce_geom(g, vec, desc.dtype, props);
    let args = WnBatchNormReduceArgs {
        x: p.x,
        dy: p.dy,
        mean: p.mean,
        shift: p.shift,
        partials: p.partials,
        n: g.n as i64,
        c: g.c as i64,
        s: g.s as i64,
        chunk: rg.chunk as i64,
    };
    let access = if vec { "vec" } else { "scalar" };
    let kernel = format!(
        "warpnorm_batch_norm_{dir}_{}_{stage}_{}_{access}",
        desc.dtype,
        layout_name(g)
    );
    plan.push(reduce_launch(kernel, &rg, &args)?);
    Ok(rg.splits as i64)
}

/// Pushes the fused kernel `warpnorm_batch_norm_<dir>_<T>_<P>params_fused_<layout>_<access>`
/// with the grid, block and dynamic shared memory of `fg` (see [`fused_geom`]).
fn push_fused<T: crate::plan::AbiArgs>(
    plan: &mut Plan,
    desc: &BatchNormDesc,
    g: &Ncs,
    dir: &str,
    vec: bool,
    fg: &ReduceGeom,
    args: &T,
) -> Result<()> {
    let access = if vec { "vec" } else { "scalar" };
    let kernel = format!(
        "warpnorm_batch_norm_{dir}_{}_{}params_fused_{}_{access}",
        desc.dtype,
        desc.param_dtype,
        layout_name(g)
    );
    plan.push(Launch::new(
        kernel.clone(),
        [grid_dim(fg.grid[0], &kernel)?, 1, 1],
        [fg.block[0], fg.block[1], 1],
        fg.chunk as u32,
        args,
    ));
    Ok(())
}

/// Pointers of an elementwise launch (see `WnBatchNormApplyArgs`).
struct ApplyInputs {
    x: u64,
    dy: u64,
    out: u64,
    coef: u64,
    counter_bump: u64,
}

/// Pushes the elementwise pass `warpnorm_batch_norm_<dir>_<T>_apply_<layout>_<access>`
/// (vector access when `reads` allow it).
fn push_apply(
    plan: &mut Plan,
    desc: &BatchNormDesc,
    g: &Ncs,
    props: &DeviceProps,
    dir: &str,
    reads: &[u64],
    p: ApplyInputs,
) -> Result<()> {
    let vec = vec_ok(g, desc.dtype, reads);
    let args = WnBatchNormApplyArgs {
        x: p.x,
        dy: p.dy,
        out: p.out,
        coef: p.coef,
        counter_bump: p.counter_bump,
        n: g.n as i64,
        c: g.c as i64,
        s: g.s as i64,
        coef_stride: coef_stride(g.c) as i64,
    };
    let access = if vec { "vec" } else { "scalar" };
    let kernel = format!(
        "warpnorm_batch_norm_{dir}_{}_apply_{}_{access}",
        desc.dtype,
        layout_name(g)
    );
    plan.push(apply_launch(kernel, g, vec, desc.dtype, props, &args)?);
    Ok(())
}

/// Validates a forward call and plans its launches: [`BatchNormDesc::check`], then
/// [`plan_forward_checked`].
pub fn plan_forward(desc: &BatchNormDesc, ptrs: &ForwardPtrs, props: &DeviceProps) -> Result<Plan> {
    plan_forward_checked(&desc.check()?, ptrs, props)
}

/// Plans a forward call of a checked description. See the module docs for the kernels.
///
/// Errors (all before anything is launched): `gamma`/`beta` or `running_mean`/`running_var`
/// given alone; eval without running statistics; [`Momentum::Cumulative`] with running
/// statistics but no counter; a null, misaligned or overflowing buffer, an output overlapping
/// another buffer (except `y == x`, in place); a workspace smaller than [`workspace_bytes`].
pub fn plan_forward_checked(
    problem: &Problem,
    ptrs: &ForwardPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    let (desc, g) = (problem.desc(), problem.ncs());
    let mode = &desc.mode;
    both_or_neither(("gamma", ptrs.gamma), ("beta", ptrs.beta))?;
    both_or_neither(
        ("running_mean", ptrs.running_mean),
        ("running_var", ptrs.running_var),
    )?;
    let running = ptrs.running_mean.is_some();
    if !mode.batch_stats && !running {
        return Err(Error::invalid(
            "BatchNorm eval",
            "eval normalizes with the running statistics, but none were given (use batch statistics, as track_running_stats=False does)",
        ));
    }
    let cumulative = mode.momentum == Momentum::Cumulative;
    if mode.batch_stats && running && cumulative && ptrs.num_batches_tracked.is_none() {
        return Err(Error::invalid(
            "momentum",
            "the cumulative average (momentum None) needs num_batches_tracked",
        ));
    }
    let (t, p) = (desc.dtype.size() as u64, desc.param_dtype.size() as u64);
    let mut bufs = Buffers::new(IN_PLACE);
    bufs.input("x", ptrs.x, g.numel, t)?;
    bufs.output("y", ptrs.y, g.numel, t)?;
    bufs.input_opt("gamma", ptrs.gamma, g.c, p)?;
    bufs.input_opt("beta", ptrs.beta, g.c, p)?;
    bufs.output_opt("running_mean", ptrs.running_mean, g.c, p)?;
    bufs.output_opt("running_var", ptrs.running_var, g.c, p)?;
    bufs.output_opt("num_batches_tracked", ptrs.num_batches_tracked, 1, 8)?;
    bufs.output_opt("save_mean", ptrs.save_mean, g.c, 4)?;
    bufs.output_opt("save_invstd", ptrs.save_invstd, g.c, 4)?;
    bufs.output("workspace", ptrs.workspace, ptrs.workspace_bytes, 1)?;
    bufs.finish()?;
    let need = workspace_bytes_checked(problem, Direction::Forward, props)? as u64;
    check_workspace(ptrs.workspace, ptrs.workspace_bytes, need)?;

    let counter = if mode.batch_stats {
        ptrs.num_batches_tracked
    } else {
        None
    };
    let mut plan = Plan::empty();
    let finalize_kernel = format!(
        "warpnorm_batch_norm_fwd_{}params_finalize",
        desc.param_dtype
    );
    let momentum = match mode.momentum {
        Momentum::Factor(m) => m,
        Momentum::Cumulative => 0.0,
    };
    let mut fin = WnBatchNormFinalizeArgs {
        partials: partials_ptr(ptrs.workspace, g),
        coef: ptrs.workspace,
        gamma: ptrs.gamma.unwrap_or(0),
        beta: ptrs.beta.unwrap_or(0),
        running_mean: ptrs.running_mean.unwrap_or(0),
        running_var: ptrs.running_var.unwrap_or(0),
        save_mean: ptrs.save_mean.unwrap_or(0),
        save_invstd: ptrs.save_invstd.unwrap_or(0),
        counter: counter.unwrap_or(0),
        counter_bump: 0,
        count: g.count() as i64,
        c: g.c as i64,
        splits: 0,
        coef_stride: coef_stride(g.c) as i64,
        momentum,
        eps: desc.eps,
        flags: if mode.batch_stats {
            WN_BN_BATCH_STATS
        } else {
            0
        } | if cumulative { WN_BN_CUMULATIVE } else { 0 },
        _pad: 0,
    };
    if g.numel == 0 {
        // Empty batch: nothing to normalize; training still counts the batch.
        if let Some(counter) = counter {
            fin.counter_bump = counter;
            fin.c = 1;
            plan.push(finalize_launch(&finalize_kernel, 1, &fin)?);
        }
        return Ok(plan);
    }
    if mode.batch_stats {
        let vec = vec_ok(g, desc.dtype, &[ptrs.x, ptrs.y]);
        if let Some(fg) = fused_geom(g, vec, desc.dtype, props, true) {
            let args = WnBatchNormFusedFwdArgs {
                x: ptrs.x,
                y: ptrs.y,
                gamma: fin.gamma,
                beta: fin.beta,
                running_mean: fin.running_mean,
                running_var: fin.running_var,
                save_mean: fin.save_mean,
                save_invstd: fin.save_invstd,
                counter: fin.counter,
                n: g.n as i64,
                c: g.c as i64,
                s: g.s as i64,
                momentum: fin.momentum,
                eps: fin.eps,
                flags: fin.flags,
                _pad: 0,
            };
            push_fused(&mut plan, desc, g, "fwd", vec, &fg, &args)?;
            // The counter is read by every block above; bump it afterwards (one thread).
            if let Some(counter) = counter {
                fin.counter_bump = counter;
                fin.count = 0;
                fin.c = 1;
                plan.push(finalize_launch(&finalize_kernel, 1, &fin)?);
            }
            plan.check(props)?;
            return Ok(plan);
        }
    }
    if mode.batch_stats {
        let ins = ReduceInputs {
            x: ptrs.x,
            dy: 0,
            mean: 0,
            shift: ptrs.workspace,
            partials: fin.partials,
        };
        fin.splits = push_reduce(&mut plan, desc, g, props, "fwd", "stats", &[ptrs.x], ins)?;
    }
    plan.push(finalize_launch(&finalize_kernel, g.c, &fin)?);
    let ins = ApplyInputs {
        x: ptrs.x,
        dy: 0,
        out: ptrs.y,
        coef: ptrs.workspace,
        counter_bump: counter.unwrap_or(0),
    };
    push_apply(&mut plan, desc, g, props, "fwd", &[ptrs.x, ptrs.y], ins)?;
    plan.check(props)?;
    Ok(plan)
}

/// Validates a backward call and plans its launches: [`BatchNormDesc::check`], then
/// [`plan_backward_checked`].
pub fn plan_backward(
    desc: &BatchNormDesc,
    ptrs: &BackwardPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    plan_backward_checked(&desc.check()?, ptrs, props)
}

/// Plans a backward call of a checked description. In eval mode (`desc.mode.batch_stats`
/// false: the statistics were the running ones, saved by an eval forward) dx = dy * gamma *
/// invstd. In training: dx = gamma * invstd * (dy - mean(dy) - (x - mean) * invstd^2 *
/// mean(dy * (x - mean))). dgamma = sum(dy * (x - mean)) * invstd and dbeta = sum(dy) in both
/// modes. Buffers and workspace are checked as in [`plan_forward_checked`] (`dx == dy` may
/// be in place).
pub fn plan_backward_checked(
    problem: &Problem,
    ptrs: &BackwardPtrs,
    props: &DeviceProps,
) -> Result<Plan> {
    let (desc, g) = (problem.desc(), problem.ncs());
    let frozen = !desc.mode.batch_stats;
    let (t, p) = (desc.dtype.size() as u64, desc.param_dtype.size() as u64);
    let mut bufs = Buffers::new(IN_PLACE);
    bufs.input("x", ptrs.x, g.numel, t)?;
    bufs.input("dy", ptrs.dy, g.numel, t)?;
    bufs.output("dx", ptrs.dx, g.numel, t)?;
    bufs.input_opt("gamma", ptrs.gamma, g.c, p)?;
    bufs.input("save_mean", ptrs.save_mean, g.c, 4)?;
    bufs.input("save_invstd", ptrs.save_invstd, g.c, 4)?;
    bufs.output_opt("dgamma", ptrs.dgamma, g.c, p)?;
    bufs.output_opt("dbeta", ptrs.dbeta, g.c, p)?;
    bufs.output("workspace", ptrs.workspace, ptrs.workspace_bytes, 1)?;
    bufs.finish()?;
    let need = workspace_bytes_checked(problem, Direction::Backward, props)? as u64;
    check_workspace(ptrs.workspace, ptrs.workspace_bytes, need)?;
    let grads = ptrs.dgamma.is_some() || ptrs.dbeta.is_some();
    let mut plan = Plan::empty();
    let finalize_kernel = format!(
        "warpnorm_batch_norm_bwd_{}params_finalize",
        desc.param_dtype
    );
    let mut fin = WnBatchNormBwdFinalizeArgs {
        partials: partials_ptr(ptrs.workspace, g),
        coef: ptrs.workspace,
        mean: ptrs.save_mean,
        invstd: ptrs.save_invstd,
        gamma: ptrs.gamma.unwrap_or(0),
        dgamma: ptrs.dgamma.unwrap_or(0),
        dbeta: ptrs.dbeta.unwrap_or(0),
        count: g.count() as i64,
        c: g.c as i64,
        splits: 0,
        coef_stride: coef_stride(g.c) as i64,
        flags: if frozen { WN_BN_FROZEN } else { 0 },
        _pad: 0,
    };
    if g.numel == 0 {
        // Empty batch: zero parameter gradients, nothing else.
        if grads {
            plan.push(finalize_launch(&finalize_kernel, g.c, &fin)?);
        }
        return Ok(plan);
    }
    if !frozen {
        let vec = vec_ok(g, desc.dtype, &[ptrs.x, ptrs.dy, ptrs.dx]);
        if let Some(fg) = fused_geom(g, vec, desc.dtype, props, false) {
            let args = WnBatchNormFusedBwdArgs {
                x: ptrs.x,
                dy: ptrs.dy,
                dx: ptrs.dx,
                mean: ptrs.save_mean,
                invstd: ptrs.save_invstd,
                gamma: ptrs.gamma.unwrap_or(0),
                dgamma: ptrs.dgamma.unwrap_or(0),
                dbeta: ptrs.dbeta.unwrap_or(0),
                n: g.n as i64,
                c: g.c as i64,
                s: g.s as i64,
            };
            push_fused(&mut plan, desc, g, "bwd", vec, &fg, &args)?;
            plan.check(props)?;
            return Ok(plan);
        }
    }
    if grads || !frozen {
        let ins = ReduceInputs {
            x: ptrs.x,
            dy: ptrs.dy,
            mean: ptrs.save_mean,
            shift: 0,
            partials: fin.partials,
        };
        let reads = [ptrs.x, ptrs.dy];
        fin.splits = push_reduce(&mut plan, desc, g, props, "bwd", "reduce", &reads, ins)?;
    }
    plan.push(finalize_launch(&finalize_kernel, g.c, &fin)?);
    let ins = ApplyInputs {
        x: if frozen { ptrs.dy } else { ptrs.x },
        dy: ptrs.dy,
        out: ptrs.dx,
        coef: ptrs.workspace,
        counter_bump: 0,
    };
    if frozen {
        push_apply(&mut plan, desc, g, props, "fwd", &[ptrs.dy, ptrs.dx], ins)?;
    } else {
        let reads = [ptrs.x, ptrs.dy, ptrs.dx];
        push_apply(&mut plan, desc, g, props, "bwd", &reads, ins)?;
    }
    plan.check(props)?;
    Ok(plan)
}
