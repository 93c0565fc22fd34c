//! Launch planning for BatchNorm: validation, tier and variant choice, grids, workspace.
//!
//! Every function here is pure: the same description, pointers and [`DeviceProps`] always give
//! the same [`Plan`]. All validation happens here, before any launch.
//!
//! Kernels (`cuda/batch_norm.cu`), with `<layout>` = `nchw` or `nhwc` (channels innermost:
//! channels-last, or any `(N, C)` input) and `<access>` = `vec` (16-byte packs: the packed
//! dimension - S for nchw, C for nhwc - divisible by V = 16 / sizeof(T), every activation
//! pointer 16-byte aligned), `vecodd` (nchw only, 16-byte packs for S >= V not divisible by V,
//! such as 7 x 7 and 14 x 14, with aligned pointers: the reductions read the whole 32-byte
//! sectors covering each slice and mask the other channels' lanes, the elementwise passes
//! stream the flat tensor with a per-lane channel, and the fused tier loads the covering packs
//! and stores each slice's lanes, not in place) or `scalar` (anything else: misaligned views,
//! S < V, nhwc with C % V != 0):
//! - `warpnorm_batch_norm_fwd_<T>_stats_<layout>_<access>`, grid (C or channel tiles, splits),
//!   which in NCHW finalizes in the last block of each channel to arrive (WN_BN_FOLD: an
//!   arrival counter per channel at the start of the workspace, zero before and after every
//!   call; at most [`FOLD_MAX_ROUNDS`] rounds of partial loads, the splits capped to that),
//! - `warpnorm_batch_norm_fwd_<P>params_finalize`, block (up to 8 channels, split rows), only
//!   after a channels-last reduction, which does not finalize itself,
//! - `warpnorm_batch_norm_fwd_<T>_apply_<layout>_<access>`, grid-stride elementwise,
//! - `warpnorm_batch_norm_bwd_<T>_reduce_<layout>_<access>`, same grid as the statistics,
//!   folding its finalize in the same way,
//! - `warpnorm_batch_norm_bwd_<P>params_finalize`, where it does not,
//! - `warpnorm_batch_norm_bwd_<T>_apply_<layout>_<access>` (training backward),
//! - `warpnorm_batch_norm_fwd_<T>_<P>params_eval_apply_<layout>_<access>`: the eval forward in
//!   one launch (each channel's coefficients computed from the running statistics and
//!   parameters; it writes the saved statistics too), and the eval-mode backward's dx =
//!   dy * gamma * invstd (over dy, from the saved invstd) when no parameter gradient is asked
//!   for or the shape is vecodd and in place,
//! - `warpnorm_batch_norm_bwd_<T>_<P>params_eval_reduce_<layout>_<access>` (every variant;
//!   vecodd not in place): the eval-mode backward with dgamma / dbeta in one sweep, the sums
//!   over x and dy writing dx as well and finalizing as the other reductions (3 bytes per
//!   element of the activation size; one launch where the finalize folds); channels-last with
//!   vector access on a device with cooperative launches,
//!   `warpnorm_batch_norm_bwd_<T>_<P>params_eval_coop_nhwc_vec`: those sums, a grid barrier,
//!   and the finalize's merge spread over the grid (see the cooperative passes below), one
//!   launch,
//! - `warpnorm_batch_norm_fwd_<T>_<P>params_fused_<layout>_<access>`: the whole training
//!   forward in one pass (2s per element) under the same conditions as the fused backward,
//!   one launch that also bumps the counter, or with [`Momentum::Cumulative`] (every block
//!   reads the counter) followed by the finalize kernel as a one-thread counter bump,
//! - `warpnorm_batch_norm_bwd_<T>_<P>params_fused_<layout>_<access>`: the whole training
//!   backward in one launch when x and dy of a block's channels fit in [`FUSED_MAX_SHARED`]
//!   bytes of shared memory and there are at least 2 channel tiles per SM (3s per element
//!   instead of 5s),
//! - `warpnorm_batch_norm_{fwd,bwd}_<T>_coop_<layout>_vec`: where the fused tier does not
//!   apply, a training forward or backward with vector access in one cooperative launch
//!   ([`crate::Launch::cooperative`], devices with [`DeviceProps::cooperative_launch`]): the
//!   reduction's items (channel or channel tile, split), grid-strided over at most one wave of
//!   the kernel's certainly resident blocks (the build's figures, or one per SM without them),
//!   a grid barrier on a counter at the start of the workspace (zero before and after every
//!   call), then NCHW each item's channel merged in the finalize's order and its elements
//!   written; channels-last the finalize's merge spread over the grid (groups of 8 channels,
//!   as the finalize kernel's blocks), a second barrier on the next counter, then each item's
//!   rows written (the same traffic as the two or three launches it replaces, one launch
//!   overhead instead of two or three).
//!
//! The reduction is split along N * S into at most one wave of the kernel's resident blocks
//! (`sm_count` x [`crate::occupancy::resident_blocks`] from the build's ptxas figures for the
//! device's SASS; `max_threads_per_sm / 256` per SM where the build has none), or, with a wave
//! or more of channels, into the splits (at most 8) whose grid ends nearest whole waves,
//! keeping at least 4 units per thread per split and the partial results within 1/16 of the
//! activation bytes.
//! The elementwise passes stride over the tensor with at most two full-occupancy waves of
//! blocks, cut to whole waves of the kernel's resident blocks.

use crate::abi::{
    WnBatchNormApplyArgs, WnBatchNormBwdFinalizeArgs, WnBatchNormCoopBwdArgs,
    WnBatchNormCoopFwdArgs, WnBatchNormFinalizeArgs, WnBatchNormFusedBwdArgs,
    WnBatchNormFusedFwdArgs, WnBatchNormReduceArgs, WnBatchNormStatsArgs, WnBatchNormSumsArgs,
    WN_BN_CUMULATIVE, WN_BN_FROZEN, WN_BN_PARAMS_F32,
};
use crate::check::{check_workspace, Buffers};
use crate::device::DeviceProps;
pub use crate::plan::Direction;
use crate::plan::Plan;
use crate::DType;
use crate::{Error, Result};

use super::desc::{BatchNormDesc, Momentum, Ncs, Problem};

mod launches;
pub use launches::FOLD_MAX_ROUNDS;
use launches::{
    access, coef_stride, coop_applies, coop_geom, finalize_launch, fused_geom, push_apply,
    push_coop, push_fused, push_reduce, reduce_geom, reduce_kernel, Access, ApplyInputs,
    CoefSource, Finish, FrozenInputs, ReduceInputs,
};

crate::abi::abi_args!(
    WnBatchNormReduceArgs,
    WnBatchNormFinalizeArgs,
    WnBatchNormBwdFinalizeArgs,
    WnBatchNormApplyArgs,
    WnBatchNormFusedBwdArgs,
    WnBatchNormFusedFwdArgs,
    WnBatchNormStatsArgs,
    WnBatchNormSumsArgs,
    WnBatchNormCoopFwdArgs,
    WnBatchNormCoopBwdArgs
);

/// Threads per block of the reduction and elementwise kernels (and the most the kernels'
/// shared memory supports).
pub const BLOCK: u32 = 256;
/// Threads per block of the finalize kernels (channels x split rows).
pub const FINALIZE_BLOCK: u32 = 128;
/// Most shared memory the fused backward may use per block (x and dy of its channels plus
/// its merge scratch, all dynamic), leaving room for several resident blocks per SM.
pub const FUSED_MAX_SHARED: u64 = 64 * 1024;
/// Activation bytes of a channel per split at most: the forward partials (count, mean hi,
/// mean lo, m2: 16 bytes per split and channel) stay within 1/16 of the activation bytes.
/// (1200, 1.33%, left channels-last grids short of a wave: 0.31 waves for [256, 256, 14, 14]
/// bf16 on an H200, whose statistics kernel then ran latency-bound; the performance model
/// counts the partials' bytes.)
const SPLIT_CAP_BYTES: u64 = 256;
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
    /// Saved mean for backward, C f32 (batch mean rounded to f32, as PyTorch's; running mean
    /// in eval).
    pub save_mean: Option<u64>,
    /// The saved mean's rounding error, C f32: the batch mean is `save_mean + save_mean_lo`
    /// (0 in eval). Give it to [`plan_backward`] with `save_mean` for gradients as accurate
    /// as the forward when the mean is large against the spread.
    pub save_mean_lo: Option<u64>,
    /// Saved 1 / sqrt(var + eps), C f32 (batch; running in eval).
    pub save_invstd: Option<u64>,
    /// Workspace of at least [`workspace_bytes`] bytes, 16-byte aligned, zeroed before its
    /// first use (see [`workspace_bytes`]).
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
    /// The forward's `save_mean_lo`, C f32 (`None`: zeros, for a mean saved without it).
    pub save_mean_lo: Option<u64>,
    /// The forward's saved invstd, C f32.
    pub save_invstd: u64,
    /// Gradient of gamma (output), C of `desc.param_dtype`.
    pub dgamma: Option<u64>,
    /// Gradient of beta (output), C of `desc.param_dtype`.
    pub dbeta: Option<u64>,
    /// Workspace of at least [`workspace_bytes`] bytes, 16-byte aligned, zeroed before its
    /// first use (see [`workspace_bytes`]).
    pub workspace: u64,
    /// Workspace size in bytes.
    pub workspace_bytes: u64,
}

/// Workspace bytes the plans of `desc` in direction `dir` need on `props`: one arrival counter
/// per channel tile of the reductions that finalize themselves (the cooperative passes' grid
/// barriers use the first two or four: arrivals and departures per barrier; at least 8 are
/// always there), the per-channel coefficients and one partial per (split, channel),
/// whatever the buffers' alignment.
///
/// The counters come first and must be zero before a workspace's first use (allocate it with
/// `alloc_zeros`, or zero it once); every call leaves them at zero, so one workspace serves
/// any number of calls, forward and backward, of any BatchNorm on its stream, one at a time
/// (not concurrently on two streams). A counter that is not zero makes the call write NaN
/// statistics, outputs and gradients for the channels concerned, so that the mistake shows.
/// Eval (`desc.mode.batch_stats` false) forward needs none (one launch computes each
/// channel's coefficients from the running statistics); an eval-mode backward needs this
/// only with dgamma or dbeta (dx alone is one launch without a workspace).
pub fn workspace_bytes(desc: &BatchNormDesc, dir: Direction, props: &DeviceProps) -> Result<usize> {
    workspace_bytes_checked(&desc.check()?, dir, props)
}

/// [`workspace_bytes`] of a checked description.
pub fn workspace_bytes_checked(
    problem: &Problem,
    dir: Direction,
    props: &DeviceProps,
) -> Result<usize> {
    let (desc, g) = (problem.desc(), problem.ncs());
    if !desc.mode.batch_stats && dir == Direction::Forward {
        return Ok(0);
    }
    // A vector variant is possible when the shape allows it (alignment is only known at plan
    // time): size for whichever of it and the scalar variant needs more.
    // The splits follow the kernel's occupancy: size for both directions' reductions.
    let shape_access = access(g, desc.dtype, &[]);
    let eval_reduce = eval_reduce_stage(desc);
    let splits = [Access::Scalar, shape_access]
        .iter()
        .flat_map(|&acc| {
            [
                ("fwd", "stats"),
                ("bwd", "reduce"),
                ("bwd", eval_reduce.as_str()),
            ]
            .map(|(dir, stage)| {
                let kernel = reduce_kernel(desc, g, dir, stage, acc);
                reduce_geom(g, acc, desc.dtype, props, &kernel).splits
            })
        })
        .chain(
            // the cooperative passes' (vector access; channels-last also the eval-mode one)
            [
                ("fwd", "coop".to_string()),
                ("bwd", "coop".to_string()),
                ("bwd", eval_coop_stage(desc)),
            ]
            .into_iter()
            .filter(|(_, stage)| stage == "coop" || g.nhwc)
            .filter(|_| props.cooperative_launch && shape_access == Access::Vec)
            .map(|(dir, stage)| {
                let kernel = reduce_kernel(desc, g, dir, &stage, Access::Vec);
                coop_geom(g, Access::Vec, desc.dtype, props, &kernel).splits
            }),
        )
        .max()
        .unwrap_or(1);
    // Counters (one u32 per tile, at most C, padded like a coefficient array), coefficients,
    // partials: 4-byte words.
    let floats = coef_stride(g.c)
        .checked_mul(5)
        .and_then(|a| splits.checked_mul(g.c)?.checked_mul(4)?.checked_add(a))
        .and_then(|f| f.checked_mul(4))
        .ok_or_else(|| Error::Overflow("BatchNorm workspace size".into()))?;
    usize::try_from(floats).map_err(|_| Error::Overflow("BatchNorm workspace size".into()))
}

/// The stage name of the eval-mode backward sums that also write dx
/// (`warpnorm_batch_norm_bwd_<T>_<P>params_eval_reduce_<layout>_<access>`).
fn eval_reduce_stage(desc: &BatchNormDesc) -> String {
    format!("{}params_eval_reduce", desc.param_dtype)
}

/// The stage name of the channels-last eval-mode backward with dgamma / dbeta in one
/// cooperative launch (`warpnorm_batch_norm_bwd_<T>_<P>params_eval_coop_nhwc_vec`).
fn eval_coop_stage(desc: &BatchNormDesc) -> String {
    format!("{}params_eval_coop", desc.param_dtype)
}

/// The in-place pairs BatchNorm accepts: `y == x` forward, `dx == dy` backward.
const IN_PLACE: &[(&str, &str)] = &[("y", "x"), ("dx", "dy")];

/// The workspace's regions (see [`workspace_bytes`]): the reductions' arrival counters at its
/// start, then the coefficient arrays, then the partials.
fn coef_ptr(workspace: u64, g: &Ncs) -> u64 {
    workspace + coef_stride(g.c) * 4
}

fn partials_ptr(workspace: u64, g: &Ncs) -> u64 {
    coef_ptr(workspace, g) + coef_stride(g.c) * 4 * 4
}

/// WN_BN_PARAMS_F32 for f32 parameters (the reductions that finalize themselves are typed by
/// the activations only).
fn params_flag(desc: &BatchNormDesc) -> u32 {
    if desc.param_dtype == DType::F32 {
        WN_BN_PARAMS_F32
    } else {
        0
    }
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
    bufs.output_opt("save_mean_lo", ptrs.save_mean_lo, g.c, 4)?;
    bufs.output_opt("save_invstd", ptrs.save_invstd, g.c, 4)?;
    bufs.output("workspace", ptrs.workspace, ptrs.workspace_bytes, 1)?;
    bufs.finish()?;
    // Eval needs none (0 bytes): its one launch reads no workspace.
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
        coef: coef_ptr(ptrs.workspace, g),
        gamma: ptrs.gamma.unwrap_or(0),
        beta: ptrs.beta.unwrap_or(0),
        running_mean: ptrs.running_mean.unwrap_or(0),
        running_var: ptrs.running_var.unwrap_or(0),
        save_mean: ptrs.save_mean.unwrap_or(0),
        save_mean_lo: ptrs.save_mean_lo.unwrap_or(0),
        save_invstd: ptrs.save_invstd.unwrap_or(0),
        counter: counter.unwrap_or(0),
        counter_bump: 0,
        tickets: ptrs.workspace,
        count: g.count() as i64,
        c: g.c as i64,
        splits: 0,
        coef_stride: coef_stride(g.c) as i64,
        momentum,
        eps: desc.eps,
        flags: if cumulative { WN_BN_CUMULATIVE } else { 0 } | params_flag(desc),
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
        let acc = access(g, desc.dtype, &[ptrs.x, ptrs.y]);
        // The vecodd fused kernel reads whole covering sectors, neighbouring channels' elements
        // included, while other blocks write their y: in place (y == x) that is a race, so
        // an in-place vecodd forward takes the split kernels.
        let fused = if acc == Access::VecOdd && ptrs.y == ptrs.x {
            None
        } else {
            fused_geom(g, acc, desc.dtype, props, true)
        };
        if let Some(fg) = fused {
            let args = WnBatchNormFusedFwdArgs {
                x: ptrs.x,
                y: ptrs.y,
                gamma: fin.gamma,
                beta: fin.beta,
                running_mean: fin.running_mean,
                running_var: fin.running_var,
                save_mean: fin.save_mean,
                save_mean_lo: fin.save_mean_lo,
                save_invstd: fin.save_invstd,
                counter: fin.counter,
                // No block reads the counter with a momentum factor: block 0 bumps it.
                counter_bump: if cumulative { 0 } else { fin.counter },
                n: g.n as i64,
                c: g.c as i64,
                s: g.s as i64,
                momentum: fin.momentum,
                eps: fin.eps,
                flags: fin.flags,
                _pad: 0,
            };
            push_fused(&mut plan, desc, g, "fwd", acc, &fg, &args)?;
            bump_after(&mut plan, &finalize_kernel, fin, counter, cumulative)?;
            plan.check(props)?;
            return Ok(plan);
        }
        if coop_applies(desc, g, props, &[ptrs.x, ptrs.y]) {
            // The statistics and y in one cooperative launch; with a momentum factor no block
            // reads the counter, so block 0 bumps it.
            let f = WnBatchNormFinalizeArgs {
                counter_bump: if cumulative { 0 } else { fin.counter },
                ..fin
            };
            let ins = ReduceInputs {
                x: ptrs.x,
                partials: fin.partials,
                ..ReduceInputs::default()
            };
            let (out, barrier) = (ptrs.y, ptrs.workspace);
            let finish = Finish::Fwd(f);
            push_coop(&mut plan, desc, g, props, "coop", ins, out, barrier, finish)?;
            bump_after(&mut plan, &finalize_kernel, fin, counter, cumulative)?;
            plan.check(props)?;
            return Ok(plan);
        }
    }
    let source = if mode.batch_stats {
        let ins = ReduceInputs {
            x: ptrs.x,
            partials: fin.partials,
            ..ReduceInputs::default()
        };
        push_reduce(
            &mut plan,
            desc,
            g,
            props,
            "fwd",
            "stats",
            &[ptrs.x],
            ins,
            Finish::Fwd(fin),
        )?;
        CoefSource::Workspace(fin.coef)
    } else {
        // Eval: one launch, the coefficients computed from the running statistics.
        CoefSource::Frozen(FrozenInputs {
            gamma: fin.gamma,
            beta: fin.beta,
            running_mean: fin.running_mean,
            running_var: fin.running_var,
            invstd: 0,
            save_mean: fin.save_mean,
            save_mean_lo: fin.save_mean_lo,
            save_invstd: fin.save_invstd,
            eps: desc.eps,
        })
    };
    let ins = ApplyInputs {
        x: ptrs.x,
        dy: 0,
        out: ptrs.y,
        source,
        counter_bump: counter.unwrap_or(0),
    };
    push_apply(&mut plan, desc, g, props, "fwd", &[ptrs.x, ptrs.y], ins)?;
    plan.check(props)?;
    Ok(plan)
}

/// With cumulative momentum, the launch after a one-launch training forward that bumps the
/// counter (one thread of the finalize kernel): every block of that launch read it.
fn bump_after(
    plan: &mut Plan,
    finalize_kernel: &str,
    fin: WnBatchNormFinalizeArgs,
    counter: Option<u64>,
    cumulative: bool,
) -> Result<()> {
    if let (Some(counter), true) = (counter, cumulative) {
        let f = WnBatchNormFinalizeArgs {
            counter_bump: counter,
            count: 0,
            c: 1,
            ..fin
        };
        plan.push(finalize_launch(finalize_kernel, 1, &f)?);
    }
    Ok(())
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
    bufs.input_opt("save_mean_lo", ptrs.save_mean_lo, g.c, 4)?;
    bufs.input("save_invstd", ptrs.save_invstd, g.c, 4)?;
    bufs.output_opt("dgamma", ptrs.dgamma, g.c, p)?;
    bufs.output_opt("dbeta", ptrs.dbeta, g.c, p)?;
    bufs.output("workspace", ptrs.workspace, ptrs.workspace_bytes, 1)?;
    bufs.finish()?;
    let grads = ptrs.dgamma.is_some() || ptrs.dbeta.is_some();
    // Eval-mode dx alone is one launch that reads no workspace.
    let need = if frozen && !grads {
        0
    } else {
        workspace_bytes_checked(problem, Direction::Backward, props)? as u64
    };
    check_workspace(ptrs.workspace, ptrs.workspace_bytes, need)?;
    let mut plan = Plan::empty();
    let finalize_kernel = format!(
        "warpnorm_batch_norm_bwd_{}params_finalize",
        desc.param_dtype
    );
    let fin = WnBatchNormBwdFinalizeArgs {
        partials: partials_ptr(ptrs.workspace, g),
        coef: coef_ptr(ptrs.workspace, g),
        mean: ptrs.save_mean,
        mean_lo: ptrs.save_mean_lo.unwrap_or(0),
        invstd: ptrs.save_invstd,
        gamma: ptrs.gamma.unwrap_or(0),
        dgamma: ptrs.dgamma.unwrap_or(0),
        dbeta: ptrs.dbeta.unwrap_or(0),
        tickets: ptrs.workspace,
        count: g.count() as i64,
        c: g.c as i64,
        splits: 0,
        coef_stride: coef_stride(g.c) as i64,
        flags: if frozen { WN_BN_FROZEN } else { 0 } | params_flag(desc),
        _pad: 0,
    };
    if g.numel == 0 {
        // Empty batch: zero parameter gradients, nothing else.
        if grads {
            plan.push(finalize_launch(&finalize_kernel, g.c, &fin)?);
        }
        return Ok(plan);
    }
    // The backward sums' inputs (training, or the eval-mode parameter gradients).
    let sums_inputs = || ReduceInputs {
        x: ptrs.x,
        dy: ptrs.dy,
        mean: ptrs.save_mean,
        partials: fin.partials,
        ..ReduceInputs::default()
    };
    if !frozen {
        let acc = access(g, desc.dtype, &[ptrs.x, ptrs.dy, ptrs.dx]);
        // In place (dx == dy) the vecodd fused kernel's covering reads of dy would race with
        // the neighbouring channels' dx writes (see the forward): split kernels.
        let fused = if acc == Access::VecOdd && ptrs.dx == ptrs.dy {
            None
        } else {
            fused_geom(g, acc, desc.dtype, props, false)
        };
        if let Some(fg) = fused {
            let args = WnBatchNormFusedBwdArgs {
                x: ptrs.x,
                dy: ptrs.dy,
                dx: ptrs.dx,
                mean: ptrs.save_mean,
                mean_lo: ptrs.save_mean_lo.unwrap_or(0),
                invstd: ptrs.save_invstd,
                gamma: ptrs.gamma.unwrap_or(0),
                dgamma: ptrs.dgamma.unwrap_or(0),
                dbeta: ptrs.dbeta.unwrap_or(0),
                n: g.n as i64,
                c: g.c as i64,
                s: g.s as i64,
            };
            push_fused(&mut plan, desc, g, "bwd", acc, &fg, &args)?;
            plan.check(props)?;
            return Ok(plan);
        }
        if coop_applies(desc, g, props, &[ptrs.x, ptrs.dy, ptrs.dx]) {
            // The sums, dgamma / dbeta and dx in one cooperative launch.
            let ins = sums_inputs();
            let (out, barrier) = (ptrs.dx, ptrs.workspace);
            let finish = Finish::Bwd(fin);
            push_coop(&mut plan, desc, g, props, "coop", ins, out, barrier, finish)?;
            plan.check(props)?;
            return Ok(plan);
        }
    }
    let eval_acc = access(g, desc.dtype, &[ptrs.x, ptrs.dy, ptrs.dx]);
    if frozen && grads && !(eval_acc == Access::VecOdd && ptrs.dx == ptrs.dy) {
        // Eval-mode backward with the parameters' gradients in one sweep: the sums over x and
        // dy also write dx = dy * gamma * invstd (3 bytes per element of the activation size,
        // not 4), then the finalize writes dgamma and dbeta. (The vecodd sums read whole
        // covering sectors, the neighbouring channels' dy lanes too, and write dx by whole
        // sectors: in place, those reads would race with the neighbours' dx, so an in-place
        // vecodd call takes the sums, the finalize and the eval apply.)
        let ins = ReduceInputs {
            x: ptrs.x,
            dy: ptrs.dy,
            mean: ptrs.save_mean,
            partials: fin.partials,
            dx: ptrs.dx,
            gamma: fin.gamma,
            invstd: ptrs.save_invstd,
        };
        let reads = [ptrs.x, ptrs.dy, ptrs.dx];
        let finish = Finish::Bwd(fin);
        if g.nhwc && coop_applies(desc, g, props, &reads) {
            // Channels-last: the sums, dx and the merge writing dgamma / dbeta in one
            // cooperative launch (the reduction does not finalize itself there).
            let (stage, ws) = (eval_coop_stage(desc), ptrs.workspace);
            push_coop(&mut plan, desc, g, props, &stage, ins, 0, ws, finish)?;
        } else {
            let stage = eval_reduce_stage(desc);
            push_reduce(
                &mut plan, desc, g, props, "bwd", &stage, &reads, ins, finish,
            )?;
        }
        plan.check(props)?;
        return Ok(plan);
    }
    if grads || !frozen {
        let ins = sums_inputs();
        let reads = [ptrs.x, ptrs.dy];
        let finish = Finish::Bwd(fin);
        push_reduce(
            &mut plan, desc, g, props, "bwd", "reduce", &reads, ins, finish,
        )?;
    }
    if frozen {
        // dx = dy * gamma * invstd: the frozen-statistics pass on dy (mean 0, beta 0).
        let ins = ApplyInputs {
            x: ptrs.dy,
            dy: 0,
            out: ptrs.dx,
            source: CoefSource::Frozen(FrozenInputs {
                gamma: fin.gamma,
                invstd: ptrs.save_invstd,
                ..FrozenInputs::default()
            }),
            counter_bump: 0,
        };
        push_apply(&mut plan, desc, g, props, "fwd", &[ptrs.dy, ptrs.dx], ins)?;
    } else {
        let ins = ApplyInputs {
            x: ptrs.x,
            dy: ptrs.dy,
            out: ptrs.dx,
            source: CoefSource::Workspace(fin.coef),
            counter_bump: 0,
        };
        let reads = [ptrs.x, ptrs.dy, ptrs.dx];
        push_apply(&mut plan, desc, g, props, "bwd", &reads, ins)?;
    }
    plan.check(props)?;
    Ok(plan)
}
