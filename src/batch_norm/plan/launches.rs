//! The geometry and launches of the BatchNorm kernels: vector or scalar variant, the reduction
//! grid (channel tiles x splits), the fused (on-chip) tier's fit, and the launch of each pass.

use crate::abi::{
    WnBatchNormApplyArgs, WnBatchNormBwdFinalizeArgs, WnBatchNormCoopBwdArgs,
    WnBatchNormCoopFwdArgs, WnBatchNormFinalizeArgs, WnBatchNormReduceArgs, WnBatchNormStatsArgs,
    WnBatchNormSumsArgs, WN_BN_CHANNEL_MAJOR, WN_BN_FOLD, WN_BN_ODD_APPLY_PACKS,
};
use crate::device::DeviceProps;
use crate::occupancy;
use crate::plan::{grid_dim, AbiArgs, Launch, Plan};
use crate::{DType, Result};

use super::super::desc::{BatchNormDesc, Ncs};
use super::{BLOCK, FINALIZE_BLOCK, FUSED_MAX_SHARED, SPLIT_CAP_BYTES, UNITS_PER_THREAD};

/// Elements of `T` in one 16-byte vector.
pub(super) fn vec_width(dtype: DType) -> u64 {
    16 / dtype.size() as u64
}

pub(super) fn layout_name(g: &Ncs) -> &'static str {
    if g.nhwc {
        "nhwc"
    } else {
        "nchw"
    }
}

/// The memory access of a kernel family's variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// `vec`: 16-byte packs, the packed dimension (S for nchw, C for nhwc) divisible by the
    /// vector width, 16-byte aligned pointers.
    Vec,
    /// `vecodd` (nchw only): 16-byte packs for a slice length S >= the vector width that it
    /// does not divide, 16-byte aligned pointers: the reductions read the whole sectors that
    /// cover each slice (other channels' lanes masked; the eval-mode backward's sums write dx
    /// by whole sectors), the elementwise passes stream the flat tensor with a per-lane
    /// channel, the fused tier stores each slice's lanes.
    VecOdd,
    /// `scalar`: single elements, any size and alignment.
    Scalar,
}

impl Access {
    pub(super) fn name(self) -> &'static str {
        match self {
            Access::Vec => "vec",
            Access::VecOdd => "vecodd",
            Access::Scalar => "scalar",
        }
    }
    /// Elements per unit of access.
    pub(super) fn width(self, dtype: DType) -> u64 {
        match self {
            Access::Vec | Access::VecOdd => vec_width(dtype),
            Access::Scalar => 1,
        }
    }
}

/// The variant a kernel family runs with for `ptrs` (all 16-byte aligned for either vector
/// variant; `&[]` asks what the shape alone allows).
pub(super) fn access(g: &Ncs, dtype: DType, ptrs: &[u64]) -> Access {
    let v = vec_width(dtype);
    let packed = if g.nhwc { g.c } else { g.s };
    if !ptrs.iter().all(|p| p.is_multiple_of(16)) {
        Access::Scalar
    } else if packed.is_multiple_of(v) {
        Access::Vec
    } else if !g.nhwc && g.s >= v {
        Access::VecOdd
    } else {
        Access::Scalar
    }
}

/// Covering packs of one nchw slice in the `vecodd` reductions: the 16-byte packs of the most
/// 32-byte sectors a slice of S elements can touch (see reduce_nchw_odd in
/// cuda/batch_norm.cu).
pub(super) fn odd_units_per_slice(s: u64, v: u64) -> u64 {
    let e = 2 * v;
    2 * ((s + e - 2) / e + 1)
}

/// Channel coefficient arrays are `coef_stride` floats apart: C rounded up to 8, so that every
/// array starts on a 32-byte sector (fully coalesced per-channel requests).
pub(super) fn coef_stride(c: u64) -> u64 {
    c.div_ceil(8) * 8
}

/// The most splits [`reduce_geom`] gives a reduction with a wave or more of channel tiles,
/// to end its grid near a whole number of waves.
const MAX_WAVE_SPLITS: u64 = 8;

/// Grid, block and split of one reduction launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReduceGeom {
    pub(super) grid: [u64; 2],
    pub(super) block: [u32; 2],
    pub(super) chunk: u64,
    pub(super) splits: u64,
}

pub(super) fn target_blocks(props: &DeviceProps) -> u64 {
    (props.sm_count as u64 * (props.max_threads_per_sm / BLOCK).max(1) as u64).max(1)
}

/// Blocks of `threads` threads of `kernel` (with `shared` bytes of dynamic shared memory) the
/// whole GPU holds at once (one wave): the build's register and shared-memory figures for the
/// device's SASS ([`occupancy::resident_blocks`]); where the build has none (built without
/// nvcc, or a device that JIT-compiles the PTX), [`target_blocks`].
fn wave_blocks(kernel: &str, threads: u32, shared: u32, props: &DeviceProps) -> u64 {
    match occupancy::kernel_resources(kernel, props) {
        Some(res) => {
            props.sm_count as u64
                * occupancy::resident_blocks(Some(res), threads, shared, props) as u64
        }
        None => target_blocks(props),
    }
    .max(1)
}

/// Blocks of `threads` threads of `kernel` certain to be resident at once (the most a
/// cooperative grid may have): one wave by the build's figures ([`wave_blocks`] without
/// dynamic shared memory), or one block per SM where the build has none (every kernel
/// declares `__launch_bounds__(256)`, so one block of 256 threads always fits an SM).
pub(super) fn coop_wave(kernel: &str, threads: u32, props: &DeviceProps) -> u64 {
    match occupancy::kernel_resources(kernel, props) {
        Some(res) => {
            props.sm_count as u64 * occupancy::resident_blocks(Some(res), threads, 0, props) as u64
        }
        None => props.sm_count as u64,
    }
    .max(1)
}

/// `blocks` of a grid-stride pass, cut to whole waves of `wave` blocks when there is more than
/// one: a last, partial wave would take as long as a full one (the bf16 kernels, at 32 warps
/// per SM after they stopped splitting packs at the load, made a 2112-block grid 5.33 waves).
/// Grid-stride loops give the remaining work to the blocks that stay.
fn whole_waves(blocks: u64, wave: u64) -> u64 {
    if blocks > wave {
        blocks / wave * wave
    } else {
        blocks
    }
}

/// The reduction kernel `warpnorm_batch_norm_<dir>_<T>_<stage>_<layout>_<access>` (`fwd` /
/// `stats` or `bwd` / `reduce`).
pub(super) fn reduce_kernel(
    desc: &BatchNormDesc,
    g: &Ncs,
    dir: &str,
    stage: &str,
    acc: Access,
) -> String {
    format!(
        "warpnorm_batch_norm_{dir}_{}_{stage}_{}_{}",
        desc.dtype,
        layout_name(g),
        acc.name()
    )
}

/// Grid, block and split of the reduction `kernel`: channel tiles x splits, the splits filling
/// at most one wave of the kernel's resident blocks ([`wave_blocks`]; at least one split per
/// tile) when the tiles are fewer than a wave, else ending the grid near whole waves (at most
/// [`MAX_WAVE_SPLITS`]), each split at least UNITS_PER_THREAD units per thread, and the
/// partials' traffic capped (below).
pub(super) fn reduce_geom(
    g: &Ncs,
    acc: Access,
    dtype: DType,
    props: &DeviceProps,
    kernel: &str,
) -> ReduceGeom {
    reduce_geom_in(g, acc, dtype, props, |threads| {
        wave_blocks(kernel, threads, 0, props)
    })
}

/// [`reduce_geom`] of the cooperative pass `kernel`: its splits within a wave of
/// [`coop_wave`] blocks.
pub(super) fn coop_geom(
    g: &Ncs,
    acc: Access,
    dtype: DType,
    props: &DeviceProps,
    kernel: &str,
) -> ReduceGeom {
    reduce_geom_in(g, acc, dtype, props, |threads| {
        coop_wave(kernel, threads, props)
    })
}

/// [`reduce_geom`] with `wave(threads per block)` blocks in a wave.
fn reduce_geom_in(
    g: &Ncs,
    acc: Access,
    dtype: DType,
    props: &DeviceProps,
    wave: impl Fn(u32) -> u64,
) -> ReduceGeom {
    let v = acc.width(dtype);
    let (tiles, units, bx) = if g.nhwc {
        let cp = g.c / v;
        let bx = cp.next_power_of_two().min(32);
        (cp.div_ceil(bx), g.count(), bx)
    } else if acc == Access::VecOdd {
        (g.c, g.n * odd_units_per_slice(g.s, v), 1)
    } else {
        (g.c, g.n * (g.s / v), 1)
    };
    let max_by = BLOCK as u64 / bx;
    let min_by = (32 / bx).max(1);
    let by = units.max(1).next_power_of_two().clamp(min_by, max_by);
    let per_split = by * UNITS_PER_THREAD;
    let wave = wave((bx * by) as u32);
    // Each split writes (and the finalize reads) 16 bytes of partials per channel: at most one
    // split per SPLIT_CAP_BYTES = 256 activation bytes of the channel keeps that within 1/16
    // of them (a wave of splits costs less than an under-filled, latency-bound grid).
    let traffic_cap = (g.count() * dtype.size() as u64 / SPLIT_CAP_BYTES).max(1);
    let most = units
        .div_ceil(per_split)
        .min(traffic_cap)
        .clamp(1, props.max_grid_yz.max(1) as u64);
    // NCHW reductions (one channel per block) always finalize in their last block: at most
    // FOLD_MAX_ROUNDS rounds of `by` splits (512 at 256 rows, 0.97 waves of a one-channel grid
    // at 4 blocks per SM on 132 SMs).
    let most = if g.nhwc {
        most
    } else {
        most.min(FOLD_MAX_ROUNDS * by)
    };
    let splits = if tiles < wave {
        // Whole splits per tile within one wave: a grid a little over a wave would take two
        // (1088 blocks of the bf16 backward sums at 528 resident were 2.06 waves).
        (wave / tiles.max(1)).clamp(1, most)
    } else {
        // A wave or more of tiles: the splits (at most MAX_WAVE_SPLITS) whose grid's waves
        // take the least time, ceil(tiles * splits / wave) waves of 1 / splits of a tile's
        // work each, the fewest of equals (512 channels of the bf16 eval-mode sums at 396
        // resident blocks: 1.29 waves of work in 2, 64% of the roofline; 3 splits, 3.88 in
        // 4).
        (1..=most.min(MAX_WAVE_SPLITS))
            .min_by(|&a, &b| {
                let t = |s: u64| (tiles * s).div_ceil(wave) as f64 / s as f64;
                t(a).total_cmp(&t(b))
            })
            .unwrap_or(1)
    };
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

/// Grid, block and dynamic shared memory of the fused backward, when it applies: every
/// block's channels fit in [`FUSED_MAX_SHARED`] and there are at least two channel tiles per SM
/// (so the single, unsplit pass still fills the GPU). [`Access::VecOdd`]: a block holds the
/// whole covering packs of its channel's slices (loads of whole sectors; the stores of a
/// slice's first and last packs are element-wise).
pub(super) fn fused_geom(
    g: &Ncs,
    acc: Access,
    dtype: DType,
    props: &DeviceProps,
    forward: bool,
) -> Option<ReduceGeom> {
    let v = acc.width(dtype);
    let want = 2 * props.sm_count as u64;
    let (tiles, units, bx) = if g.nhwc {
        let cp = g.c / v;
        let mut bx = 32u64;
        while bx > 1 && cp.div_ceil(bx) < want {
            bx /= 2;
        }
        (cp.div_ceil(bx), g.count(), bx)
    } else if acc == Access::VecOdd {
        (g.c, g.n * odd_units_per_slice(g.s, v), 1)
    } else {
        (g.c, g.n * (g.s / v), 1)
    };
    if tiles < want || units == 0 {
        return None;
    }
    // The x packs (forward) or x and dy packs (backward), rounded up to 16 bytes, then the
    // merge scratch and coefficients (see fused_fwd / fused_bwd in cuda/batch_norm.cu):
    // 1024 + 3584 bytes per channel a thread owns (forward), 2560 per channel (backward).
    let arrays = if forward { 1 } else { 2 };
    let data = units
        .checked_mul(bx)?
        .checked_mul(v * dtype.size() as u64 * arrays)?
        .div_ceil(16)
        * 16;
    let cv = if g.nhwc { v } else { 1 };
    let bytes = data + if forward { 1024 + 3584 * cv } else { 2560 * cv };
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

pub(super) fn reduce_launch<T: AbiArgs>(
    kernel: String,
    rg: &ReduceGeom,
    args: &T,
) -> Result<Launch> {
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
pub(super) fn finalize_block(c: u64) -> [u32; 3] {
    let bx = c.max(1).next_power_of_two().min(8) as u32;
    [bx, FINALIZE_BLOCK / bx, 1]
}

/// A finalize launch over C channels.
pub(super) fn finalize_launch<T: AbiArgs>(kernel: &str, c: u64, args: &T) -> Result<Launch> {
    let block = finalize_block(c);
    Ok(Launch::new(
        kernel.to_string(),
        [grid_dim(c.div_ceil(block[0] as u64), kernel)?, 1, 1],
        block,
        0,
        args,
    ))
}

pub(super) fn apply_launch(
    kernel: String,
    g: &Ncs,
    acc: Access,
    dtype: DType,
    props: &DeviceProps,
    args: &WnBatchNormApplyArgs,
) -> Result<Launch> {
    let v = acc.width(dtype);
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
        let wave = wave_blocks(&kernel, (bx * by) as u32, 0, props);
        let groups = (whole_waves(tiles * groups, wave) / tiles).clamp(1, groups);
        ([tiles, groups], [bx, by])
    } else {
        // vecodd: the flat tensor's packs, the last one partial when numel % v != 0.
        let packs = g.numel.div_ceil(v);
        let threads = packs.next_power_of_two().clamp(32, BLOCK as u64);
        let mut blocks = packs.div_ceil(threads * UNITS_PER_THREAD).clamp(1, cap);
        if acc == Access::VecOdd {
            // At least one full wave while there is a pack per thread (16-byte packs leave
            // small tensors with a fraction of the GPU at UNITS_PER_THREAD packs per thread).
            blocks = blocks.max(target_blocks(props).min(packs.div_ceil(threads)));
        }
        let blocks = whole_waves(
            blocks,
            wave_blocks(
                &kernel,
                threads as u32,
                odd_apply_shared(g, acc, v, threads),
                props,
            ),
        );
        ([blocks, 1], [threads, 1])
    };
    let shared = if g.nhwc {
        0
    } else {
        odd_apply_shared(g, acc, v, block[0])
    };
    Ok(Launch::new(
        kernel.clone(),
        [grid_dim(grid[0], &kernel)?, grid_dim(grid[1], &kernel)?, 1],
        [block[0] as u32, block[1] as u32, 1],
        shared,
        args,
    ))
}

/// Dynamic shared memory of an NCHW elementwise pass of `threads`-thread blocks: the vecodd
/// variant's coefficient tables (see `WnBatchNormApplyArgs`: two buffers of
/// WN_BN_ODD_APPLY_PACKS groups of min(C, threads * V / S + 3) channels x 4 floats), none for
/// the others.
pub(super) fn odd_apply_shared(g: &Ncs, acc: Access, v: u64, threads: u64) -> u32 {
    if acc != Access::VecOdd {
        return 0;
    }
    let channels = g.c.min(threads * v / g.s + 3);
    (2 * WN_BN_ODD_APPLY_PACKS as u64 * channels * 16) as u32
}

/// Pointers of a reduction launch (see `WnBatchNormReduceArgs`; `dx`, `gamma` and `invstd`
/// are the eval-mode backward sums' and 0 elsewhere).
#[derive(Default)]
pub(super) struct ReduceInputs {
    pub(super) x: u64,
    pub(super) dy: u64,
    pub(super) mean: u64,
    pub(super) partials: u64,
    pub(super) dx: u64,
    pub(super) gamma: u64,
    pub(super) invstd: u64,
}

/// The finalize of a reduction: the arguments of the forward or backward finalize kernel
/// (`partials`, `tickets`, `coef` and the outputs set; `splits` and the fold flag are the
/// reduction's to set).
pub(super) enum Finish {
    Fwd(WnBatchNormFinalizeArgs),
    Bwd(WnBatchNormBwdFinalizeArgs),
}

impl Finish {
    /// The finish for a reduction of `splits` splits, with its layout / fold `flags` added.
    fn with_splits(self, splits: u64, flags: u32) -> Finish {
        match self {
            Finish::Fwd(mut f) => {
                (f.splits, f.flags) = (splits as i64, f.flags | flags);
                Finish::Fwd(f)
            }
            Finish::Bwd(mut f) => {
                (f.splits, f.flags) = (splits as i64, f.flags | flags);
                Finish::Bwd(f)
            }
        }
    }

    /// `fwd` or `bwd`, the direction in the kernel names.
    fn dir(&self) -> &'static str {
        match self {
            Finish::Fwd(_) => "fwd",
            Finish::Bwd(_) => "bwd",
        }
    }
}

/// Most rounds of partial loads (ceil(splits / block rows)) the last block of an NCHW
/// reduction makes to finalize its channel itself: each round is an L2 round trip after the
/// reduction's streaming ends, so the planner caps an NCHW reduction's splits at this many
/// rounds of its block's rows (512 splits at 256 rows).
pub const FOLD_MAX_ROUNDS: u64 = 2;

/// Whether a reduction of geometry `rg` finalizes in its last blocks (WN_BN_FOLD): the NCHW
/// reductions (one channel per block; [`reduce_geom`] keeps their splits within
/// [`FOLD_MAX_ROUNDS`] rounds). Channels-last reductions keep the finalize kernel: their
/// kernels do not carry the folded merge (8 channels per thread took the 16-bit statistics
/// past 128 registers on sm_100 and sm_120, which spilled), and their tiles' many splits merge
/// faster over the finalize kernel's blocks on many SMs than in one last block.
pub(super) fn folds(g: &Ncs, rg: &ReduceGeom) -> bool {
    !g.nhwc && rg.splits.div_ceil(rg.block[1].max(1) as u64) <= FOLD_MAX_ROUNDS
}

/// Pushes the per-channel reduction `warpnorm_batch_norm_<dir>_<T>_<stage>_<layout>_<access>`
/// (vector access when `reads` - every activation buffer it touches - allow it) and its
/// finalize: folded into the reduction's last block of each channel tile when [`folds`], else
/// the `warpnorm_batch_norm_<dir>_<P>params_finalize` launch after it.
#[allow(clippy::too_many_arguments)]
pub(super) fn push_reduce(
    plan: &mut Plan,
    desc: &BatchNormDesc,
    g: &Ncs,
    props: &DeviceProps,
    dir: &str,
    stage: &str,
    reads: &[u64],
    p: ReduceInputs,
    finish: Finish,
) -> Result<()> {
    let acc = access(g, desc.dtype, reads);
    let kernel = reduce_kernel(desc, g, dir, stage, acc);
    let rg = reduce_geom(g, acc, desc.dtype, props, &kernel);
    let fold = folds(g, &rg);
    // The NCHW reductions write their partials channel-major (see the ABI header).
    let flag = if fold { WN_BN_FOLD } else { 0 } | if g.nhwc { 0 } else { WN_BN_CHANNEL_MAJOR };
    let r = WnBatchNormReduceArgs {
        x: p.x,
        dy: p.dy,
        mean: p.mean,
        partials: p.partials,
        dx: p.dx,
        gamma: p.gamma,
        invstd: p.invstd,
        n: g.n as i64,
        c: g.c as i64,
        s: g.s as i64,
        chunk: rg.chunk as i64,
    };
    let finalize = format!(
        "warpnorm_batch_norm_{dir}_{}params_finalize",
        desc.param_dtype
    );
    match finish.with_splits(rg.splits, flag) {
        Finish::Fwd(f) => {
            plan.push(reduce_launch(kernel, &rg, &WnBatchNormStatsArgs { r, f })?);
            if !fold {
                plan.push(finalize_launch(&finalize, g.c, &f)?);
            }
        }
        Finish::Bwd(f) => {
            plan.push(reduce_launch(kernel, &rg, &WnBatchNormSumsArgs { r, f })?);
            if !fold {
                plan.push(finalize_launch(&finalize, g.c, &f)?);
            }
        }
    }
    Ok(())
}

/// Whether the cooperative training pass applies: a device with cooperative launches and
/// vector access over every activation buffer (`reads`), either layout.
pub(super) fn coop_applies(
    desc: &BatchNormDesc,
    g: &Ncs,
    props: &DeviceProps,
    reads: &[u64],
) -> bool {
    props.cooperative_launch && access(g, desc.dtype, reads) == Access::Vec
}

/// Pushes the cooperative training pass `warpnorm_batch_norm_<dir>_<T>_coop_<layout>_vec`
/// (see `WnBatchNormCoopFwdArgs`; [`coop_applies`] must hold): the reduction's items
/// ([`coop_geom`]), the finalize (NCHW: per item; channels-last: spread over the grid, then a
/// second barrier) and the elementwise pass writing `out`, in one cooperative launch of at
/// most a wave ([`coop_wave`]) with the grid barriers' counters at `barrier` (channels-last:
/// two u32, `barrier` and `barrier + 4`).
///
/// `stage` is `coop`, or `<P>params_eval_coop` for the channels-last eval-mode backward with
/// dgamma / dbeta (`p` with its dx, gamma and invstd; `out` 0): the sums writing dx, then the
/// merge writing the parameters' gradients, one barrier.
#[allow(clippy::too_many_arguments)]
pub(super) fn push_coop(
    plan: &mut Plan,
    desc: &BatchNormDesc,
    g: &Ncs,
    props: &DeviceProps,
    stage: &str,
    p: ReduceInputs,
    out: u64,
    barrier: u64,
    finish: Finish,
) -> Result<()> {
    let kernel = reduce_kernel(desc, g, finish.dir(), stage, Access::Vec);
    let rg = coop_geom(g, Access::Vec, desc.dtype, props, &kernel);
    let wave = coop_wave(&kernel, rg.block[0] * rg.block[1], props);
    let grid = grid_dim((rg.grid[0] * rg.splits).min(wave), &kernel)?;
    let r = WnBatchNormReduceArgs {
        x: p.x,
        dy: p.dy,
        mean: p.mean,
        partials: p.partials,
        dx: p.dx,
        gamma: p.gamma,
        invstd: p.invstd,
        n: g.n as i64,
        c: g.c as i64,
        s: g.s as i64,
        chunk: rg.chunk as i64,
    };
    let (grid, block) = ([grid, 1, 1], [rg.block[0], rg.block[1], 1]);
    // NCHW partials are channel-major (see the ABI header), channels-last ones split-major.
    let flags = if g.nhwc { 0 } else { WN_BN_CHANNEL_MAJOR };
    let l = match finish.with_splits(rg.splits, flags) {
        Finish::Fwd(f) => {
            let s = WnBatchNormStatsArgs { r, f };
            let args = WnBatchNormCoopFwdArgs { s, out, barrier };
            Launch::new(kernel, grid, block, 0, &args)
        }
        Finish::Bwd(f) => {
            let s = WnBatchNormSumsArgs { r, f };
            let args = WnBatchNormCoopBwdArgs { s, out, barrier };
            Launch::new(kernel, grid, block, 0, &args)
        }
    };
    plan.push(l.into_cooperative());
    Ok(())
}

/// Pushes the fused kernel `warpnorm_batch_norm_<dir>_<T>_<P>params_fused_<layout>_<access>`
/// with the grid, block and dynamic shared memory of `fg` (see [`fused_geom`]).
pub(super) fn push_fused<T: AbiArgs>(
    plan: &mut Plan,
    desc: &BatchNormDesc,
    g: &Ncs,
    dir: &str,
    acc: Access,
    fg: &ReduceGeom,
    args: &T,
) -> Result<()> {
    let kernel = format!(
        "warpnorm_batch_norm_{dir}_{}_{}params_fused_{}_{}",
        desc.dtype,
        desc.param_dtype,
        layout_name(g),
        acc.name()
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

/// Where an elementwise pass takes each channel's coefficients from.
pub(super) enum CoefSource {
    /// The workspace arrays at this address, written by a finalize kernel; the kernel
    /// `warpnorm_batch_norm_<dir>_<T>_apply_<layout>_<access>`.
    Workspace(u64),
    /// Frozen statistics and parameters (eval; see `WnBatchNormApplyArgs`): the kernel
    /// `warpnorm_batch_norm_fwd_<T>_<P>params_eval_apply_<layout>_<access>`, which also
    /// writes the saved statistics.
    Frozen(FrozenInputs),
}

/// The frozen-statistics fields of `WnBatchNormApplyArgs` (0 = not given).
#[derive(Default)]
pub(super) struct FrozenInputs {
    pub(super) gamma: u64,
    pub(super) beta: u64,
    pub(super) running_mean: u64,
    pub(super) running_var: u64,
    pub(super) invstd: u64,
    pub(super) save_mean: u64,
    pub(super) save_mean_lo: u64,
    pub(super) save_invstd: u64,
    pub(super) eps: f32,
}

/// Pointers of an elementwise launch (see `WnBatchNormApplyArgs`).
pub(super) struct ApplyInputs {
    pub(super) x: u64,
    pub(super) dy: u64,
    pub(super) out: u64,
    pub(super) source: CoefSource,
    pub(super) counter_bump: u64,
}

/// Pushes the elementwise pass `dir` (`fwd`, or `bwd` with workspace coefficients) with the
/// kernel of its coefficient source (vector access when `reads` allow it).
pub(super) fn push_apply(
    plan: &mut Plan,
    desc: &BatchNormDesc,
    g: &Ncs,
    props: &DeviceProps,
    dir: &str,
    reads: &[u64],
    p: ApplyInputs,
) -> Result<()> {
    let acc = access(g, desc.dtype, reads);
    let (coef, f, stage) = match p.source {
        CoefSource::Workspace(coef) => (coef, FrozenInputs::default(), "apply".to_string()),
        CoefSource::Frozen(f) => (0, f, format!("{}params_eval_apply", desc.param_dtype)),
    };
    let args = WnBatchNormApplyArgs {
        x: p.x,
        dy: p.dy,
        out: p.out,
        coef,
        counter_bump: p.counter_bump,
        gamma: f.gamma,
        beta: f.beta,
        running_mean: f.running_mean,
        running_var: f.running_var,
        invstd: f.invstd,
        save_mean: f.save_mean,
        save_mean_lo: f.save_mean_lo,
        save_invstd: f.save_invstd,
        n: g.n as i64,
        c: g.c as i64,
        s: g.s as i64,
        coef_stride: if coef != 0 {
            coef_stride(g.c) as i64
        } else {
            0
        },
        eps: f.eps,
        _pad: 0,
    };
    let kernel = format!(
        "warpnorm_batch_norm_{dir}_{}_{stage}_{}_{}",
        desc.dtype,
        layout_name(g),
        acc.name()
    );
    plan.push(apply_launch(kernel, g, acc, desc.dtype, props, &args)?);
    Ok(())
}
