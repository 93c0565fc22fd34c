//! LayerNorm launch planning: validation of every pointer and size, tier choice, and the
//! launches (kernel, grid, block, shared memory, argument struct) as data. A plan is a pure
//! function of the shapes, dtypes, pointer residues mod 16, [`DeviceProps`] and the build's
//! `ptxas` figures ([`crate::kernels::RESOURCES`], through [`crate::occupancy`]).
//!
//! **Packs.** The vector kernels move a row in packs of VEC = 16 / max(activation size,
//! parameter size) elements ([`pack_width`]; 1 for the scalar variant): 16-byte activation
//! and parameter accesses when both types have the same size (f32/f32, f16/f16, bf16/bf16) and
//! for f32 activations, and for f16/bf16 activations with f32 parameters 8-byte activation
//! accesses with 16-byte parameter ones. Either way each lane's gamma/beta of a pack is one
//! aligned load of at most 16 bytes and a warp's requests are contiguous, so every request of
//! an aligned shape is coalesced (a 16-byte f16 pack would need 32 bytes of f32 gamma per
//! lane: two loads whose lanes sit 32 bytes apart, twice the ideal sectors). The activation
//! access width A = VEC x activation size ([`access_bytes`]: 16 or 8 bytes) sets the alignment
//! rules below.
//!
//! Tiers, for a row of D elements and `packs` = ceil(D / VEC) (+1 when rows do not start
//! A-byte aligned):
//!
//! | tier | when | layout |
//! |---|---|---|
//! | `subwarp` | packs <= 32 | 1..32 lanes per row, one pack per lane, 128 (fwd) / 512 (bwd) threads |
//! | `warp` | packs <= 32 * elems / VEC | a warp per row, up to `elems` elements per lane |
//! | `block` | packs <= 512 * elems / VEC | a row per team of 128..512 threads, in registers (backward: 512 / team rows per block) |
//! | `wide` | backward, vector: packs <= 512 * 2 elems / VEC | a row per 512-thread block, dgamma/dbeta sums in shared memory |
//! | `split` | longer rows, or fewer rows than SMs with D >= 4096 | chunks of a row on grid.y; forward: one cooperative launch where the chunks fit on chip ([`coop_split`]) |
//!
//! `elems` (elements per thread) is 32 forward and 16 backward (8 for the scalar variants,
//! and 8 backward on compute capability >= 12.0, where ptxas needs more registers), so in f32
//! the warp tier covers D <= 1024 (fwd) / 512 (bwd) and the block tier D <= 16384 / 8192.
//!
//! **Wide backward.** The block tier's backward holds x, dy and its dgamma/dbeta sums in
//! registers; the `wide` tier ([`wide_elems`]: twice the elements per thread, D <= 16384 on
//! sm_80/sm_90) keeps those sums in thread-private shared-memory slots
//! ([`wide_shared_bytes`]: 64 KiB per array at 32 elements; LayerNorm 2 arrays, 3 with the
//! bias gradient; RMSNorm 1, 2) and holds 16-bit x and dy packed until each use, so a row
//! still fits one block and is read once, where the split tier reads x and dy twice. It is
//! chosen when the block tier does not fit, there are at least as many rows as SMs, and the
//! device's opt-in shared memory holds the slots (an H100/H200's 227 KiB every kernel; an
//! A100's 163 KiB all but LayerNorm's bias gradient; a T4's 64 KiB none: split there).
//!
//! **Vector variants, any D.** Forward needs x and y congruent mod A bytes, backward x, dy
//! and dx; per-row heads are predicated, so odd D never falls to the scalar variant (which
//! stays for pointers not congruent mod A). Backward accumulates dgamma/dbeta per column in
//! registers, so each team (the rows one group/team of threads visits) must see a single head
//! offset: a row's head repeats with period V' = VEC / gcd(D, VEC) rows ([`head_period`]), and
//! [`bwd_grid_for_heads`] makes every team's grid-stride step (grid.x x rows per block per
//! step) a multiple of V', or gives every team at most one row. The warp tiers' step
//! (512 / group rows per block) is always a multiple of 8, so only the `block` (1..4 teams)
//! and `split` tiers are ever adjusted.
//!
//! **Grids.** Persistent, one wave: grid.x x grid.y <= SMs x the resident blocks per SM of the
//! tier's kernels ([`crate::occupancy::resident_blocks_of`]: registers, shared memory,
//! threads; one block per SM when the build has no figures for the device's SASS). On an
//! H200 the backward vector kernels use 112-128 registers, so one 512-thread block per SM:
//! 132 blocks, not the 264 of a fixed 1024-threads-per-SM cap. The split tier's first pass
//! (split_stats / split_sums: per-row chunk sums, no partial rows) gets a grid of its own
//! kernel's wave ([`Geometry::first_grid_x`]): the backward's split_sums (64 registers on
//! sm_90) runs two blocks per SM where split_dx runs one, twice the loads in flight.
//!
//! **Backward partial rows.** Each block writes one f32 partial row of dgamma and of dbeta
//! (stride [`part_stride`] = D rounded up to 8 floats, so rows start on a 32-byte sector and
//! the vector stores and the finalize's reads are coalesced); the finalize sums them in a fixed
//! order. The planner adds a block only for every [`bwd_min_rows_per_block`] rows, which caps
//! the partial rows at 1/8 of the op's minimum traffic for any number of rows; one block writes
//! dgamma/dbeta itself (no partial rows, no finalize). What this costs on particular devices and
//! shapes: `reports/planning.md`.

use crate::abi::{
    WN_LN_BWD_THREAD_ELEMS, WN_LN_BWD_THREAD_ELEMS_CC12, WN_LN_BWD_THREAD_ELEMS_SCALAR,
    WN_LN_BWD_WARP_BLOCK, WN_LN_BWD_WIDE_FACTOR, WN_LN_FWD_THREAD_ELEMS,
    WN_LN_FWD_THREAD_ELEMS_SCALAR, WN_LN_MAX_BLOCK, WN_LN_SPLIT_BARRIER_BYTES, WN_LN_WARP_BLOCK,
};
use crate::device::DeviceProps;
use crate::occupancy;
use crate::plan::Direction;
use crate::{DType, Error, Result};

use super::super::desc::LayerNormDesc;
use super::WORKSPACE_ALIGN;

/// Rows shorter than this are never split across blocks to fill the GPU.
pub const SPLIT_MIN_COLS: usize = 4096;
/// Smallest chunk (elements) when splitting rows only to fill the GPU.
pub const SPLIT_MIN_CHUNK: usize = 2048;

/// The kernel tier a plan uses (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// `group` lanes per row, one pack each.
    Subwarp {
        /// Lanes per row (power of two, 1..=32).
        group: u32,
    },
    /// One warp per row, several packs per lane.
    Warp,
    /// One row per block of `threads` threads.
    Block {
        /// Threads per block.
        threads: u32,
    },
    /// Backward only: one row per block of `threads` threads, [`wide_elems`] per thread, the
    /// dgamma/dbeta sums in shared memory (see the module docs).
    Wide {
        /// Threads per block.
        threads: u32,
    },
    /// Rows split into `splits` chunks of `chunk` columns, blocks of `threads`.
    Split {
        /// Threads per block.
        threads: u32,
        /// Columns per chunk (a multiple of the vector width).
        chunk: u64,
        /// Chunks per row.
        splits: u64,
    },
}

impl Tier {
    /// The tier's name in kernel names (`split` tiers have two kernels, see the plan).
    pub fn name(&self) -> &'static str {
        match self {
            Tier::Subwarp { .. } => "subwarp",
            Tier::Warp => "warp",
            Tier::Block { .. } => "block",
            Tier::Wide { .. } => "wide",
            Tier::Split { .. } => "split",
        }
    }
}

/// A tier choice plus the derived launch geometry, before any pointer is involved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The tier.
    pub tier: Tier,
    /// True for the vector kernels (`pack_width` elements per pack), false for the scalar
    /// variant.
    pub vec: bool,
    /// Threads per block in x (per row team).
    pub threads: u32,
    /// Rows processed at once per block (block.y; backward `block` tier only, else 1).
    pub rows_per_block: u32,
    /// Blocks in grid.x (rows are grid-strided over them); the backward partial rows.
    pub grid_x: u64,
    /// Blocks in grid.x of the split tier's first pass (`split_stats` / `split_sums`), which
    /// writes per-row chunk sums and no partial rows: sized by that kernel's own occupancy
    /// (the backward's split_sums keeps two 512-thread blocks per SM resident on sm_90, where
    /// split_dx keeps one), so that it runs a full wave, as a multiple of `grid_x` or every
    /// row ([`nested_first_grid`]). `grid_x` in the other tiers.
    pub first_grid_x: u64,
    /// Blocks in grid.y (chunks per row in the split tier, else 1).
    pub grid_y: u64,
    /// Dynamic shared memory (bytes) of the main kernel (backward: the team reduction of
    /// dgamma/dbeta; split tier: of `split_dx`); 0 forward.
    pub shared_mem_bytes: u32,
    /// Workspace bytes this geometry needs.
    pub workspace_bytes: u64,
    /// The forward split tier's cooperative pass, where it applies ([`coop_split`]); the
    /// two launches `split_stats` / `split_norm` otherwise.
    pub coop: Option<CoopSplit>,
}

/// The forward split tier as one cooperative launch (`..._split_coop_vec`): every chunk of
/// every row held on chip across one wave, x read once (see [`coop_split`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoopSplit {
    /// Blocks (one wave at most: all resident at once).
    pub grid: u64,
    /// Chunks per block (the last block may have fewer).
    pub per_block: u64,
    /// Dynamic shared memory: the held chunks (T), then the row's chunk partials (float4 each).
    pub shared_mem_bytes: u32,
}

/// Bytes at the start of every non-empty workspace, forward and backward alike (one buffer
/// may serve both), kept for the forward split tier's cooperative pass: its grid barrier's
/// two u32 counts, zero before the first call and left zero by every call, padded to a 32-byte
/// sector so that what follows (the chunk partials, the backward's partial rows) starts on
/// one. [`Geometry::workspace_bytes`] does not count them; the planners' workspace sizes do.
pub const SPLIT_BARRIER_BYTES: u64 = WN_LN_SPLIT_BARRIER_BYTES as u64;

/// `bytes` of workspace contents plus the [`SPLIT_BARRIER_BYTES`] before them (nothing for an
/// empty workspace).
pub(crate) fn with_barrier(bytes: u64) -> u64 {
    if bytes == 0 {
        0
    } else {
        bytes + SPLIT_BARRIER_BYTES
    }
}

/// The cooperative pass of the forward split tier for `rows` rows of `splits` chunks, blocks
/// of `threads` threads holding `npack` packs of `v` elements each: the fewest chunks per
/// block whose shared memory (`per * threads * npack * v` activation elements, then `splits`
/// float4 partials) fits the device's opt-in limit beside the kernel's static shared memory
/// and whose resident blocks (registers, shared memory: the build's figures) hold every chunk
/// in one wave. None where nothing fits, where the device has no cooperative launches, or
/// where the build has no figures for the device's SASS (co-residency cannot be shown).
#[allow(clippy::too_many_arguments)]
pub fn coop_split(
    kernel: &str,
    dtype: DType,
    rows: u64,
    splits: u64,
    threads: u64,
    npack: u64,
    v: u64,
    props: &DeviceProps,
) -> Option<CoopSplit> {
    if !props.cooperative_launch {
        return None;
    }
    let res = occupancy::kernel_resources(kernel, props)?;
    let items = rows.checked_mul(splits)?;
    let item_bytes = threads * npack * v * dtype.size() as u64;
    let parts = splits * 16;
    let limit = u64::from(
        props
            .max_shared_per_block_optin
            .saturating_sub(res.shared_bytes),
    );
    let sms = u64::from(props.sm_count.max(1));
    (1u64..)
        .map_while(|per| {
            let smem = per.checked_mul(item_bytes)?.checked_add(parts)?;
            (smem <= limit).then_some((per, smem))
        })
        .find_map(|(per, smem)| {
            let smem = u32::try_from(smem).ok()?;
            let k = occupancy::resident_blocks(Some(res), threads as u32, smem, props);
            (sms * u64::from(k) * per >= items).then(|| CoopSplit {
                grid: items.div_ceil(per),
                per_block: per,
                shared_mem_bytes: smem,
            })
        })
}

fn next_pow2(v: u64) -> u64 {
    v.max(1).next_power_of_two()
}

pub(super) fn round_up(v: u64, m: u64) -> u64 {
    v.div_ceil(m) * m
}

/// Elements per pack of the vector kernels of activation type `dtype` with parameter type
/// `param_dtype`: 16 / max of the two sizes, so that a pack's parameters are one load of at
/// most 16 bytes per lane (`kPairVec` in cuda/layer_norm.cu). See the module docs.
pub fn pack_width(dtype: DType, param_dtype: DType) -> u64 {
    16 / dtype.size().max(param_dtype.size()) as u64
}

/// Bytes of one activation access of the vector kernels (the alignment unit of x, y, dy and
/// dx): 16, or 8 for f16/bf16 activations with f32 parameters.
pub fn access_bytes(dtype: DType, param_dtype: DType) -> u64 {
    pack_width(dtype, param_dtype) * dtype.size() as u64
}

/// Elements per pack of a kernel variant (1 for the scalar variant).
fn vec_width(desc: &LayerNormDesc, vec: bool) -> u64 {
    if vec {
        pack_width(desc.dtype, desc.param_dtype)
    } else {
        1
    }
}

/// Elements per thread of a kernel variant, as cuda/layer_norm.cu instantiates it for the
/// device's architecture.
fn thread_elems(dir: Direction, vec: bool, props: &DeviceProps) -> u64 {
    (match (dir, vec) {
        (Direction::Forward, true) => WN_LN_FWD_THREAD_ELEMS,
        (Direction::Forward, false) => WN_LN_FWD_THREAD_ELEMS_SCALAR,
        (Direction::Backward, true) if props.compute_capability.0 >= 12 => {
            WN_LN_BWD_THREAD_ELEMS_CC12
        }
        (Direction::Backward, true) => WN_LN_BWD_THREAD_ELEMS,
        (Direction::Backward, false) => WN_LN_BWD_THREAD_ELEMS_SCALAR,
    }) as u64
}

/// Elements per thread of the backward's wide tier for activations `dtype` on `props`
/// (`kWideElems` in cuda/layer_norm.cu): `WN_LN_BWD_WIDE_FACTOR` times the block tier's, but
/// the block tier's own for f32 on compute capability 10.x (there twice spilled at the
/// 128-register bound), where the wide tier then covers nothing the block tier does not.
pub fn wide_elems(dtype: DType, props: &DeviceProps) -> u64 {
    let block = thread_elems(Direction::Backward, true, props);
    let cc = props.compute_capability.0;
    if dtype == DType::F32 && (10..12).contains(&cc) {
        block
    } else {
        block * u64::from(WN_LN_BWD_WIDE_FACTOR)
    }
}

/// Dynamic shared memory (bytes) of a wide-tier backward kernel (`bwd_wide`): one array of
/// 16-byte slots of [`wide_elems`] floats for each of `WN_LN_MAX_BLOCK` threads per sum it
/// keeps there: dgamma, LayerNorm's dbeta or (`residual`, with the bias gradient) dbias, and
/// LayerNorm's dy sums beside dbias. (The partial rows' column slice, D floats, reuses the
/// first array.)
pub(crate) fn wide_shared_bytes(
    op: RowNorm,
    dtype: DType,
    residual: bool,
    props: &DeviceProps,
) -> u64 {
    let arrays = 1
        + u64::from(op == RowNorm::Layer || residual)
        + u64::from(op == RowNorm::Layer && residual);
    arrays * u64::from(WN_LN_MAX_BLOCK) * wide_elems(dtype, props) * 4
}

/// Dynamic shared memory (bytes) LayerNorm's bias-gradient block and split_dx kernels need for
/// their dy sums: 16-byte slots of `elems` floats for each of `WN_LN_MAX_BLOCK` threads (`add_dy_sums`
/// in cuda/layer_norm.cu), `elems` the kernel variant's elements per thread on `props`.
pub(super) fn dy_sum_shared_bytes(dir: Direction, vec: bool, props: &DeviceProps) -> u32 {
    WN_LN_MAX_BLOCK * thread_elems(dir, vec, props) as u32 * 4
}

/// Whether the block backward kernel a plan launches sums its second accumulators in the dy
/// sums' shared-memory slots ([`dy_sum_shared_bytes`]) rather than in registers: the vector
/// variant of 16-bit activations with f32 parameters (`kDbInSlots` in cuda/layer_norm.cu;
/// those kernels hold a row's x and dy packs raw before converting them, 64 bytes in flight
/// per thread, and with those sums in registers they spilled at their 128-register bound):
/// LayerNorm's plain kernel (dbeta; with or without a bias: the kernel sums dy either way) and
/// RMSNorm's bias-gradient kernel (`residual`: dbias).
pub(crate) fn db_in_shared(
    op: RowNorm,
    desc: &LayerNormDesc,
    dir: Direction,
    vec: bool,
    residual: bool,
) -> bool {
    dir == Direction::Backward
        && vec
        && desc.param_dtype.size() > desc.dtype.size()
        && match op {
            RowNorm::Layer => !residual,
            RowNorm::Rms => residual,
        }
}

/// Fewest rows a backward block handles before the planner adds another block: every block
/// writes one f32 partial row of dgamma and one of dbeta (8 bytes per column) while its rows
/// move 3 * s bytes per column each (read x, dy; write dx), so with at least
/// `ceil(64 / (3 s))` rows per block (6 for f32, 11 for f16/bf16) the partial rows stay
/// within 1/8 of the op's minimum traffic whatever M; with many rows the grid is capped by
/// the GPU's size instead and the share falls (1.07 % for bf16 at M = 16384 on an H200).
/// See the module docs.
pub fn bwd_min_rows_per_block(dtype: DType) -> u64 {
    64u64.div_ceil(3 * dtype.size() as u64)
}

/// Rows mod which the head offset of a row (elements between the previous access-width
/// boundary, [`access_bytes`], and the row start) repeats: VEC / gcd(D, VEC) for the vector
/// variants ([`pack_width`]), 1 when every row has the same head (D a multiple of VEC) or for
/// the scalar variant.
pub fn head_period(dtype: DType, param_dtype: DType, cols: u64, vec: bool) -> u64 {
    if !vec {
        return 1;
    }
    let v = pack_width(dtype, param_dtype);
    v / gcd(cols, v)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Adjusts a backward grid of `g` blocks, each covering `unit` rows per grid-stride step, so
/// that every team sees a single head offset (cuda/layer_norm.cu, backward): either every team
/// has at most one row (g * unit >= rows), or the step g * unit is a multiple of the head
/// `period` (g rounded down to a multiple of period / gcd(unit, period); up when smaller).
pub fn bwd_grid_for_heads(g: u64, unit: u64, rows: u64, period: u64) -> u64 {
    let q = period / gcd(unit, period);
    let one_row_each = rows.div_ceil(unit).max(1);
    if g * unit >= rows || q == 1 {
        g
    } else if g >= q {
        g / q * q
    } else {
        q.min(one_row_each)
    }
}

/// The split tier's first-pass grid.x from that kernel's wave `wave` (blocks in x) and the
/// second pass's `grid_x`: every row (one block each) when the wave holds them, else the
/// largest multiple of grid_x in the wave, never below grid_x (0 = not the split tier:
/// grid_x). Either way each first-pass block's rows are among one second-pass block's (row r
/// is in block r mod grid), which lets a test run only the blocks that own given rows.
pub fn nested_first_grid(wave: u64, grid_x: u64, rows: u64) -> u64 {
    if wave == 0 {
        grid_x
    } else if wave >= rows {
        rows.max(grid_x)
    } else {
        (wave / grid_x.max(1)).max(1) * grid_x
    }
}

/// Floats between two dgamma/dbeta partial rows: D rounded up to 8 floats (32 bytes), so
/// that every partial row starts on a sector and its stores and reads are fully coalesced.
pub fn part_stride(cols: u64) -> u64 {
    round_up(cols, 8)
}

/// Chooses the tier and launch geometry for `desc` in direction `dir`.
///
/// `vec` selects the vector variant; `rows_aligned` says every row starts aligned to the
/// access width `access_bytes` (x aligned and D a multiple of the pack width), which saves
/// the head pack. Grid sizes come
/// from [`crate::occupancy`] (the build's `ptxas` figures for the SASS `props` runs).
pub fn geometry(
    desc: &LayerNormDesc,
    dir: Direction,
    vec: bool,
    rows_aligned: bool,
    props: &DeviceProps,
) -> Result<Geometry> {
    geometry_of(RowNorm::Layer, desc, dir, vec, rows_aligned, props)
}

/// The op whose kernels a plan launches: LayerNorm's, or RMSNorm's (cuda/rms_norm.cu, the
/// same bodies without the mean; `crate::rms_norm` plans through this module with an
/// equivalent LayerNorm description: weight and no bias, or no parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RowNorm {
    /// `warpnorm_layer_norm_*`.
    Layer,
    /// `warpnorm_rms_norm_*`: no saved mean, no bias.
    Rms,
}

impl RowNorm {
    /// The op's part of its kernel names.
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            RowNorm::Layer => "layer_norm",
            RowNorm::Rms => "rms_norm",
        }
    }
}

/// [`geometry`] for the kernels of `op` (their occupancy sizes the grids).
pub(crate) fn geometry_of(
    op: RowNorm,
    desc: &LayerNormDesc,
    dir: Direction,
    vec: bool,
    rows_aligned: bool,
    props: &DeviceProps,
) -> Result<Geometry> {
    geometry_with(op, desc, dir, vec, rows_aligned, false, props)
}

/// The fused residual add's forward kernel of a tier's pass: `res_<pass>` for the vector
/// variant's subwarp, warp, block and split_stats and the scalar variant's split_stats (the
/// plain scalar subwarp, warp and block kernels take the residual at run time); else `pass`.
pub(crate) fn residual_pass(pass: &str, vec: bool) -> String {
    if vec || pass == "split_stats" {
        format!("res_{pass}")
    } else {
        pass.to_string()
    }
}

/// The pass the plan launches for a tier's `pass`: with `fused`, the fused residual add's
/// forward kernels ([`residual_pass`]; split_norm stays plain) and, backward, the bias
/// gradient's `block_dbias` / `split_dx_dbias`.
pub(crate) fn launched_pass(pass: &str, fwd: bool, fused: bool, vec: bool) -> String {
    match (fused, fwd, pass) {
        (true, true, p) if p != "split_norm" => residual_pass(p, vec),
        (true, false, "block" | "split_dx" | "wide") => format!("{pass}_dbias"),
        _ => pass.to_string(),
    }
}

/// [`geometry_of`] for the fused residual add's kernels when `residual` (forward: `res_<tier>`;
/// backward: with the bias gradient, [`launched_pass`]): the persistent grids are sized by the
/// occupancy of the kernels that plan launches (`res_<tier>` holds more registers than the
/// plain kernels: sized by the plain warp kernel, the bf16 fused forward's grid was 1.33 waves
/// of its own on an H200), and LayerNorm's bias-gradient block and split kernels, which sum
/// dy (dbeta) in shared memory, get [`dy_sum_shared_bytes`] of it, with or without a bias to
/// write it to (without one they had only the team reduction's: up to 16 KiB short, which
/// ptxsim's memcheck reports as an out-of-bounds shared store), as do the mixed pairs'
/// LayerNorm plain and RMSNorm bias-gradient block backward kernels ([`db_in_shared`]).
pub(crate) fn geometry_with(
    op: RowNorm,
    desc: &LayerNormDesc,
    dir: Direction,
    vec: bool,
    rows_aligned: bool,
    residual: bool,
    props: &DeviceProps,
) -> Result<Geometry> {
    let rows = desc.rows as u64;
    let cols = desc.cols as u64;
    let v = vec_width(desc, vec);
    let extra = u64::from(vec && !rows_aligned);
    let packs_of = |n: u64| n.div_ceil(v) + if n > 0 { extra } else { 0 };
    let npack = thread_elems(dir, vec, props) / v;
    let max_block = WN_LN_MAX_BLOCK as u64;
    let sms = props.sm_count.max(1) as u64;
    let packs = packs_of(cols);
    let fwd = dir == Direction::Forward;
    let dir_name = if fwd { "fwd" } else { "bwd" };
    let has_params = desc.affine.has_weight() || desc.affine.has_bias();
    let warp_block = if fwd {
        WN_LN_WARP_BLOCK
    } else {
        WN_LN_BWD_WARP_BLOCK
    } as u64;
    // The kernel a pass launches (the residual add's and bias gradient's own entry points).
    let launched = |pass: &str| {
        kernel(
            op,
            dir_name,
            desc,
            &launched_pass(pass, fwd, residual, vec),
            vec,
        )
    };
    // Persistent grids of one wave: as many blocks as are resident at once (occupancy from
    // the kernels' registers and shared memory), fewest over the kernels of the tier.
    let cap = |passes: &[&str], threads: u64, smem: &[u64]| -> u64 {
        passes
            .iter()
            .zip(smem)
            .map(|(pass, &sm)| {
                let name = launched(pass);
                let b = occupancy::resident_blocks_of(
                    &name,
                    threads as u32,
                    u32::try_from(sm).unwrap_or(u32::MAX),
                    props,
                );
                sms * b as u64
            })
            .min()
            .unwrap_or(sms)
    };
    // Backward: dynamic shared memory of the team reduction (teams * segment floats).
    // LayerNorm's bias-gradient block / split_dx kernels: the dy sums' shared memory (dbeta;
    // summed with or without a bias to write it to), and the mixed pairs' block kernels that
    // keep their second sums there ([`db_in_shared`]).
    let slots = || u64::from(dy_sum_shared_bytes(dir, vec, props));
    let dy_smem = if !fwd && residual && op == RowNorm::Layer {
        slots()
    } else {
        0
    };
    let block_dy_smem = if db_in_shared(op, desc, dir, vec, residual) {
        dy_smem.max(slots())
    } else {
        dy_smem
    };
    let red_smem = |teams: u64, seg: u64| {
        if fwd || !has_params {
            0
        } else {
            teams * seg * 4
        }
    };
    // Backward: blocks wanted by the partial-traffic rule (module docs).
    let want = (rows / bwd_min_rows_per_block(desc.dtype)).max(1);
    let block_threads = |p: u64| {
        let t = if fwd { p.div_ceil(npack) } else { p };
        next_pow2(t).clamp(128, max_block)
    };
    let few_rows = rows < sms && cols as usize >= SPLIT_MIN_COLS;
    // The wide tier's grid cap when its kernel fits the row (vector backward, beyond the block
    // tier) and its shared memory fits the device (at least one block resident per SM).
    let wide_npack = wide_elems(desc.dtype, props) / v;
    let wide_smem = wide_shared_bytes(op, desc.dtype, residual, props);
    let wide_fits = || {
        let name = launched("wide");
        let static_smem = occupancy::kernel_resources(&name, props).map_or(0, |r| r.shared_bytes);
        wide_smem + u64::from(static_smem) <= u64::from(props.max_shared_per_block_optin)
    };
    let wide_cap =
        (!fwd && vec && wide_npack > npack && packs <= max_block * wide_npack && wide_fits())
            .then(|| cap(&["wide"], max_block, &[wide_smem]));
    let mut rows_per_block = 1u64;
    let fits_block = packs <= max_block * npack;
    let mut coop = None;
    // (tier, threads, grid_x, grid_y, rows per block per grid-stride step, dynamic smem,
    // the split tier's first pass's grid_x: 0 elsewhere)
    let (tier, threads, grid_x, grid_y, unit, smem, first) = if packs <= 32 * npack {
        let (tier, group) = if packs <= 32 {
            let group = next_pow2(packs);
            (
                Tier::Subwarp {
                    group: group as u32,
                },
                group,
            )
        } else {
            (Tier::Warp, 32)
        };
        let per_block = warp_block / group;
        let smem = red_smem(per_block, cols);
        let c = cap(&[tier.name()], warp_block, &[smem]);
        let mut g = rows.div_ceil(per_block).min(c);
        if !fwd {
            g = g.min(want);
        }
        (tier, warp_block, g, 1, per_block, smem, 0)
    } else if fits_block && !few_rows {
        let t = block_threads(packs);
        // Backward: several rows per 512-thread block when rows are short (one team of t
        // threads per row), so that one block per SM covers 512 threads.
        let r = if fwd { 1 } else { max_block / t };
        let smem = red_smem(r, cols).max(block_dy_smem);
        let c = cap(&["block"], t * r, &[smem]);
        let mut g = rows.div_ceil(r).min(c);
        if !fwd {
            g = g.min(want);
        }
        rows_per_block = r;
        (Tier::Block { threads: t as u32 }, t, g, 1, r, smem, 0)
    } else if let Some(c) = wide_cap.filter(|_| !few_rows) {
        // Wide (backward): one row per 512-thread block, read once.
        let g = rows.min(c).min(want);
        (
            Tier::Wide {
                threads: max_block as u32,
            },
            max_block,
            g,
            1,
            1,
            wide_smem,
            0,
        )
    } else {
        // Split: enough chunks that each fits a block, and (for few rows) enough blocks to
        // fill the GPU, but chunks of at least SPLIT_MIN_CHUNK elements.
        let max_chunk = (max_block * npack - extra) * v;
        let s_min = cols.div_ceil(max_chunk);
        let row_blocks = if fwd { rows } else { rows.min(want) };
        let s_fill = (2 * sms)
            .div_ceil(row_blocks.max(1))
            .min(cols / SPLIT_MIN_CHUNK as u64);
        let s = s_min.max(s_fill).max(1);
        let chunk = round_up(cols.div_ceil(s), v).min(max_chunk);
        let splits = cols.div_ceil(chunk);
        if splits > props.max_grid_yz as u64 {
            return Err(Error::Overflow(format!(
                "a row of {cols} elements needs {splits} chunks, more than the grid's {} in y",
                props.max_grid_yz
            )));
        }
        let t = block_threads(packs_of(chunk));
        if fwd && vec {
            let name = launched("split_coop");
            coop = coop_split(&name, desc.dtype, rows, splits, t, npack, v, props);
        }
        let (passes, smem) = if fwd {
            (["split_stats", "split_norm"], [0, 0])
        } else {
            (
                ["split_sums", "split_dx"],
                [0, red_smem(1, chunk).max(dy_smem)],
            )
        };
        let c = cap(&passes, t, &smem);
        let g = row_blocks.min((c / splits).max(1));
        // The first pass writes no partial rows (any grid covers the rows, each row with its
        // own head): one wave of its own kernel, nested below (Geometry::first_grid_x).
        let first = (cap(&passes[..1], t, &smem[..1]) / splits).max(1);
        (
            Tier::Split {
                threads: t as u32,
                chunk,
                splits,
            },
            t,
            g,
            splits,
            1,
            smem[1],
            first,
        )
    };
    let mut grid_x = grid_x.max(1);
    if !fwd {
        grid_x = bwd_grid_for_heads(
            grid_x,
            unit,
            rows,
            head_period(desc.dtype, desc.param_dtype, cols, vec),
        );
    }
    let f32b = 4u64;
    let mut ws = 0u64;
    if let Tier::Split { splits, .. } = tier {
        // Per chunk: forward (mean hi, mean lo, m2 / D, its lo part), backward two row sums.
        let per_chunk = if fwd { 4 } else { 2 };
        ws += round_up(rows * splits * per_chunk * f32b, WORKSPACE_ALIGN);
    }
    if !fwd && grid_x > 1 {
        // (A single block writes dgamma/dbeta directly: no partial rows.)
        let part = round_up(grid_x * part_stride(cols) * f32b, WORKSPACE_ALIGN);
        ws += part * (u64::from(desc.affine.has_weight()) + u64::from(desc.affine.has_bias()));
    }
    let shared_mem_bytes = u32::try_from(smem)
        .map_err(|_| Error::Overflow(format!("{smem} bytes of shared memory")))?;
    Ok(Geometry {
        tier,
        vec,
        threads: threads as u32,
        rows_per_block: rows_per_block as u32,
        grid_x,
        first_grid_x: nested_first_grid(first, grid_x, rows),
        grid_y,
        shared_mem_bytes,
        workspace_bytes: ws,
        coop,
    })
}

/// The kernel of one pass: `warpnorm_<op>_<dir>_<T>_<P>_<tier or pass>_<vec|scalar>`.
pub(super) fn kernel(
    op: RowNorm,
    dir: &str,
    desc: &LayerNormDesc,
    tier: &str,
    vec: bool,
) -> String {
    format!(
        "warpnorm_{}_{dir}_{}_{}_{tier}_{}",
        op.prefix(),
        desc.dtype.name(),
        desc.param_dtype.name(),
        if vec { "vec" } else { "scalar" }
    )
}
