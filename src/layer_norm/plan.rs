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
//! | `split` | longer rows, or fewer rows than SMs with D >= 4096 | chunks of a row on grid.y |
//!
//! `elems` (elements per thread) is 32 forward and 16 backward (8 for the scalar variants,
//! and 8 backward on compute capability >= 12.0, where ptxas needs more registers), so in f32
//! the warp tier covers D <= 1024 (fwd) / 512 (bwd) and the block tier D <= 16384 / 8192.
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
//! 132 blocks, not the 264 of a fixed 1024-threads-per-SM cap.
//!
//! **Backward partial rows.** Each block writes one f32 partial row of dgamma and of dbeta
//! (8 bytes per column; stride [`part_stride`] = D rounded up to 8 floats, so rows start on a
//! 32-byte sector and the 16-byte vector stores and the finalize's reads are coalesced); the
//! finalize sums them in a fixed order. Against the op's minimum of 3s bytes per element
//! (s = activation bytes) that is 8 G / (3 s M) for G blocks and M rows. With one wave of
//! blocks filling the GPU, that is 1.07 % for bf16 and 0.54 % for f32 at M = 16384 on an
//! H200 (G = 132), within the 2 % traffic budget from M = 8 G / (0.02 x 3 s) rows on (8800
//! bf16 / 4400 f32 rows on an H200; 512 rows on the 4-SM simulated device, where
//! reports/traffic.md measures it). Fewer rows trade partial traffic for parallelism: the
//! kernels keep one row per team in flight (no overlap of a row's loads with the previous
//! row's reductions), so a block's bandwidth is limited by latency and idle SMs cost far
//! more time than the partial rows, which are small and stay in L2 until the finalize reads
//! them. The planner still adds a block only for every [`bwd_min_rows_per_block`] =
//! ceil(64 / 3s) rows (6 for f32, 11 for f16/bf16), which caps the partial rows at 1/8 of
//! the minimum for any M: H200, bf16, M = 2000: G = 132, 8.8 %; M = 500: G = 45, 12 %;
//! M < 11: one block, which writes dgamma/dbeta itself (no partial rows, no finalize). Only
//! the head rule above can raise G beyond that (odd D, < 8 blocks: e.g. M = 3 rows of
//! D = 16385 bf16 get 3 blocks). The cap is a guess until `cargo bench --bench layer_norm`
//! runs on a GPU.
use crate::abi::{
    WnLayerNormBwdArgs, WnLayerNormFinalizeArgs, WnLayerNormFwdArgs, WN_LN_BWD_THREAD_ELEMS,
    WN_LN_BWD_THREAD_ELEMS_CC12, WN_LN_BWD_THREAD_ELEMS_SCALAR, WN_LN_BWD_WARP_BLOCK,
    WN_LN_FINALIZE_COLS, WN_LN_FINALIZE_LANES, WN_LN_FWD_THREAD_ELEMS,
    WN_LN_FWD_THREAD_ELEMS_SCALAR, WN_LN_MAX_BLOCK, WN_LN_WARP_BLOCK,
};
use crate::buffers::check_alignment;
use crate::device::DeviceProps;
use crate::occupancy;
use crate::plan::{grid_dim, Launch, Plan};
use crate::{DType, Error, Result};

use super::desc::LayerNormDesc;

crate::abi::abi_args!(
    WnLayerNormFwdArgs,
    WnLayerNormBwdArgs,
    WnLayerNormFinalizeArgs
);

/// Rows shorter than this are never split across blocks to fill the GPU.
pub const SPLIT_MIN_COLS: usize = 4096;
/// Smallest chunk (elements) when splitting rows only to fill the GPU.
pub const SPLIT_MIN_CHUNK: usize = 2048;
/// Alignment (bytes) the planner requires of the workspace.
pub const WORKSPACE_ALIGN: u64 = 16;

/// Direction of a LayerNorm pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Forward: y, mean, rstd from x.
    Forward,
    /// Backward: dx (and dgamma/dbeta) from x, dy, mean, rstd.
    Backward,
}

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
    /// Blocks in grid.y (chunks per row in the split tier, else 1).
    pub grid_y: u64,
    /// Dynamic shared memory (bytes) of the main kernel (backward: the team reduction of
    /// dgamma/dbeta; split tier: of `split_dx`); 0 forward.
    pub shared_mem_bytes: u32,
    /// Workspace bytes this geometry needs.
    pub workspace_bytes: u64,
}

fn next_pow2(v: u64) -> u64 {
    v.max(1).next_power_of_two()
}

fn round_up(v: u64, m: u64) -> u64 {
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
    // Persistent grids of one wave: as many blocks as are resident at once (occupancy from
    // the kernels' registers and shared memory), fewest over the kernels of the tier.
    let cap = |passes: &[&str], threads: u64, smem: &[u64]| -> u64 {
        passes
            .iter()
            .zip(smem)
            .map(|(pass, &sm)| {
                let name = kernel(dir_name, desc, pass, vec);
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
    let mut rows_per_block = 1u64;
    let fits_block = packs <= max_block * npack;
    // (tier, threads, grid_x, grid_y, rows per block per grid-stride step, dynamic smem)
    let (tier, threads, grid_x, grid_y, unit, smem) = if packs <= 32 * npack {
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
        (tier, warp_block, g, 1, per_block, smem)
    } else if fits_block && !few_rows {
        let t = block_threads(packs);
        // Backward: several rows per 512-thread block when rows are short (one team of t
        // threads per row), so that one block per SM covers 512 threads.
        let r = if fwd { 1 } else { max_block / t };
        let smem = red_smem(r, cols);
        let c = cap(&["block"], t * r, &[smem]);
        let mut g = rows.div_ceil(r).min(c);
        if !fwd {
            g = g.min(want);
        }
        rows_per_block = r;
        (Tier::Block { threads: t as u32 }, t, g, 1, r, smem)
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
        let (passes, smem) = if fwd {
            (["split_stats", "split_norm"], [0, 0])
        } else {
            (["split_sums", "split_dx"], [0, red_smem(1, chunk)])
        };
        let c = cap(&passes, t, &smem);
        let g = row_blocks.min((c / splits).max(1));
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
        // Per chunk: forward (mean hi, mean lo, m2 / D, pad), backward two row sums.
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
        grid_y,
        shared_mem_bytes,
        workspace_bytes: ws,
    })
}

/// Workspace bytes a plan for `desc` may need on `props` (the maximum over the aligned and
/// misaligned variants, so that it does not depend on the buffers' addresses). 0 when none.
pub fn workspace_bytes(desc: &LayerNormDesc, dir: Direction, props: &DeviceProps) -> Result<usize> {
    desc.validate()?;
    if desc.rows == 0 || desc.cols == 0 {
        return Ok(0);
    }
    let mut max = 0u64;
    for (vec, aligned) in [(true, true), (true, false), (false, true)] {
        max = max.max(geometry(desc, dir, vec, aligned, props)?.workspace_bytes);
    }
    usize::try_from(max).map_err(|_| Error::Overflow(format!("workspace of {max} bytes")))
}

/// Device addresses of a forward call (0 allowed only for empty buffers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FwdPtrs {
    /// Input, rows * cols activation elements.
    pub x: u64,
    /// Output, rows * cols activation elements.
    pub y: u64,
    /// Scale, cols parameter elements (Some exactly when the desc has a weight).
    pub gamma: Option<u64>,
    /// Shift, cols parameter elements (Some exactly when the desc has a bias).
    pub beta: Option<u64>,
    /// Saved mean, rows f32.
    pub mean: u64,
    /// Saved rstd, rows f32.
    pub rstd: u64,
    /// Workspace (16-byte aligned).
    pub workspace: u64,
    /// Workspace size in bytes.
    pub workspace_bytes: u64,
}

/// Device addresses of a backward call (0 allowed only for empty buffers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BwdPtrs {
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
    /// Gradient of gamma (written), cols (Some exactly when the desc has a weight).
    pub dgamma: Option<u64>,
    /// Gradient of beta (written), cols (Some exactly when the desc has a bias).
    pub dbeta: Option<u64>,
    /// Workspace (16-byte aligned).
    pub workspace: u64,
    /// Workspace size in bytes.
    pub workspace_bytes: u64,
}

fn check_ptr(what: &str, ptr: u64, elems: u64, elem_size: u64) -> Result<()> {
    let bytes = elems
        .checked_mul(elem_size)
        .ok_or_else(|| Error::Overflow(format!("{what}: {elems} elements in bytes")))?;
    if bytes == 0 {
        return Ok(());
    }
    if ptr == 0 {
        return Err(Error::invalid(
            what,
            "null device address for a non-empty buffer",
        ));
    }
    check_alignment(what, ptr, elem_size)?;
    ptr.checked_add(bytes)
        .ok_or_else(|| Error::Overflow(format!("{what}: address {ptr:#x} + {bytes} bytes")))?;
    Ok(())
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

fn check_workspace(ptr: u64, given: u64, needed: u64) -> Result<()> {
    if given < needed {
        return Err(Error::Length {
            what: "workspace (bytes)".into(),
            expected: needed as usize,
            given: given as usize,
        });
    }
    if needed > 0 {
        check_ptr("workspace", ptr, needed, 1)?;
        check_alignment("workspace", ptr, WORKSPACE_ALIGN)?;
    }
    Ok(())
}

fn kernel(dir: &str, desc: &LayerNormDesc, tier: &str, vec: bool) -> String {
    format!(
        "warpnorm_layer_norm_{dir}_{}_{}_{tier}_{}",
        desc.dtype.name(),
        desc.param_dtype.name(),
        if vec { "vec" } else { "scalar" }
    )
}

/// Validates a forward call and plans its launches.
///
/// Checks the desc, every pointer (non-null when non-empty, aligned to its element size, no
/// address overflow), parameter presence against `desc.affine`, and the workspace (size and
/// 16-byte alignment). An empty input (rows == 0) gives an empty plan; cols == 0 writes
/// mean = 0 and rstd = NaN per row, as PyTorch.
pub fn plan_fwd(desc: &LayerNormDesc, p: &FwdPtrs, props: &DeviceProps) -> Result<Plan> {
    desc.validate()?;
    let n = desc.elements()? as u64;
    let (rows, cols) = (desc.rows as u64, desc.cols as u64);
    let (s, ps) = (desc.dtype.size() as u64, desc.param_dtype.size() as u64);
    check_ptr("x", p.x, n, s)?;
    check_ptr("y", p.y, n, s)?;
    check_presence("gamma", p.gamma.is_some(), desc.affine.has_weight())?;
    check_presence("beta", p.beta.is_some(), desc.affine.has_bias())?;
    if let Some(g) = p.gamma {
        check_ptr("gamma", g, cols, ps)?;
    }
    if let Some(b) = p.beta {
        check_ptr("beta", b, cols, ps)?;
    }
    check_ptr("mean", p.mean, rows, 4)?;
    check_ptr("rstd", p.rstd, rows, 4)?;
    if rows == 0 {
        check_workspace(p.workspace, p.workspace_bytes, 0)?;
        return Ok(Plan::empty());
    }
    // Vector variant: x and y congruent mod the access width (heads are predicated).
    let a = access_bytes(desc.dtype, desc.param_dtype);
    let vec = p.x % a == p.y % a;
    let rows_aligned = p.x.is_multiple_of(a) && (cols * s).is_multiple_of(a);
    let geo = geometry(desc, Direction::Forward, vec, rows_aligned, props)?;
    check_workspace(p.workspace, p.workspace_bytes, geo.workspace_bytes)?;
    let mut args = WnLayerNormFwdArgs {
        x: p.x,
        y: p.y,
        gamma: p.gamma.unwrap_or(0),
        beta: p.beta.unwrap_or(0),
        mean: p.mean,
        rstd: p.rstd,
        partials: 0,
        rows: rows as i64,
        cols: cols as i64,
        chunk: cols as i64,
        splits: 1,
        eps: desc.eps,
        group: 0,
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
            let name = kernel("fwd", desc, geo.tier.name(), vec);
            let grid = [grid_dim(geo.grid_x, &name)?, 1, 1];
            plan.push(Launch::new(name, grid, block, 0, &args));
        }
        Tier::Split { chunk, splits, .. } => {
            args.partials = p.workspace;
            args.chunk = chunk as i64;
            args.splits = splits as i64;
            for pass in ["split_stats", "split_norm"] {
                let name = kernel("fwd", desc, pass, vec);
                let grid = [
                    grid_dim(geo.grid_x, &name)?,
                    grid_dim(geo.grid_y, &name)?,
                    1,
                ];
                plan.push(Launch::new(name, grid, block, 0, &args));
            }
        }
    }
    plan.check(props)?;
    Ok(plan)
}

/// Validates a backward call and plans its launches (dx, then the dgamma/dbeta finalize).
///
/// Same checks as [`plan_fwd`], plus dgamma/dbeta presence against `desc.affine`. rows == 0
/// writes zero dgamma/dbeta; cols == 0 gives an empty plan.
pub fn plan_bwd(desc: &LayerNormDesc, p: &BwdPtrs, props: &DeviceProps) -> Result<Plan> {
    desc.validate()?;
    let n = desc.elements()? as u64;
    let (rows, cols) = (desc.rows as u64, desc.cols as u64);
    let (s, ps) = (desc.dtype.size() as u64, desc.param_dtype.size() as u64);
    check_ptr("x", p.x, n, s)?;
    check_ptr("dy", p.dy, n, s)?;
    check_ptr("dx", p.dx, n, s)?;
    check_presence("gamma", p.gamma.is_some(), desc.affine.has_weight())?;
    check_presence("dgamma", p.dgamma.is_some(), desc.affine.has_weight())?;
    check_presence("dbeta", p.dbeta.is_some(), desc.affine.has_bias())?;
    for (what, ptr) in [("gamma", p.gamma), ("dgamma", p.dgamma), ("dbeta", p.dbeta)] {
        if let Some(ptr) = ptr {
            check_ptr(what, ptr, cols, ps)?;
        }
    }
    check_ptr("mean", p.mean, rows, 4)?;
    check_ptr("rstd", p.rstd, rows, 4)?;
    let mut plan = Plan::empty();
    if cols == 0 {
        check_workspace(p.workspace, p.workspace_bytes, 0)?;
        return Ok(plan);
    }
    let finalize = |plan: &mut Plan, part_rows: u64, dg: u64, db: u64| -> Result<()> {
        if !desc.affine.has_weight() {
            return Ok(());
        }
        let name = format!(
            "warpnorm_layer_norm_bwd_{}_finalize",
            desc.param_dtype.name()
        );
        let args = WnLayerNormFinalizeArgs {
            dgamma_part: dg,
            dbeta_part: db,
            dgamma: p.dgamma.unwrap_or(0),
            dbeta: p.dbeta.unwrap_or(0),
            part_rows: part_rows as i64,
            cols: cols as i64,
            part_stride: part_stride(cols) as i64,
        };
        let grid = [
            grid_dim(cols.div_ceil(WN_LN_FINALIZE_COLS as u64), &name)?,
            1,
            1,
        ];
        let block = [WN_LN_FINALIZE_COLS, WN_LN_FINALIZE_LANES, 1];
        plan.push(Launch::new(name, grid, block, 0, &args));
        Ok(())
    };
    if rows == 0 {
        check_workspace(p.workspace, p.workspace_bytes, 0)?;
        // No rows: the finalize kernel writes zeros (dgamma_part/dbeta_part are only
        // non-null to say which outputs to write; nothing is read with 0 partial rows).
        let dg = u64::from(desc.affine.has_weight());
        let db = u64::from(desc.affine.has_bias());
        finalize(&mut plan, 0, dg, db)?;
        plan.check(props)?;
        return Ok(plan);
    }
    // Vector variant: x, dy, dx congruent mod the access width (heads are predicated).
    let a = access_bytes(desc.dtype, desc.param_dtype);
    let vec = p.x % a == p.dy % a && p.x % a == p.dx % a;
    let rows_aligned = p.x.is_multiple_of(a) && (cols * s).is_multiple_of(a);
    let geo = geometry(desc, Direction::Backward, vec, rows_aligned, props)?;
    check_workspace(p.workspace, p.workspace_bytes, geo.workspace_bytes)?;
    let stride = part_stride(cols);
    let part = round_up(geo.grid_x * stride * 4, WORKSPACE_ALIGN);
    let mut next = p.workspace;
    let mut take = |bytes: u64| {
        let at = next;
        next += bytes;
        at
    };
    // One block: it writes dgamma/dbeta itself, without partial rows or finalize.
    let direct = geo.grid_x == 1;
    let dgamma_part = if desc.affine.has_weight() && !direct {
        take(part)
    } else {
        0
    };
    let dbeta_part = if desc.affine.has_bias() && !direct {
        take(part)
    } else {
        0
    };
    let row_sums = match geo.tier {
        Tier::Split { splits, .. } => take(round_up(rows * splits * 8, WORKSPACE_ALIGN)),
        _ => 0,
    };
    let mut args = WnLayerNormBwdArgs {
        x: p.x,
        dy: p.dy,
        dx: p.dx,
        gamma: p.gamma.unwrap_or(0),
        mean: p.mean,
        rstd: p.rstd,
        dgamma_part,
        dbeta_part,
        row_sums,
        dgamma: if direct { p.dgamma.unwrap_or(0) } else { 0 },
        dbeta: if direct { p.dbeta.unwrap_or(0) } else { 0 },
        rows: rows as i64,
        cols: cols as i64,
        chunk: cols as i64,
        splits: 1,
        part_stride: stride as i64,
        group: 0,
        _pad: 0,
    };
    let block = [geo.threads, 1, 1];
    match geo.tier {
        Tier::Subwarp { group } => {
            args.group = group;
            push_bwd_warp(&mut plan, desc, "subwarp", vec, &geo, &args)?;
        }
        Tier::Warp => {
            args.group = 32;
            push_bwd_warp(&mut plan, desc, "warp", vec, &geo, &args)?;
        }
        Tier::Block { .. } => {
            let name = kernel("bwd", desc, "block", vec);
            let grid = [grid_dim(geo.grid_x, &name)?, 1, 1];
            // The row teams sum their dgamma/dbeta in shared memory (teams * cols floats).
            let block = [geo.threads, geo.rows_per_block, 1];
            plan.push(Launch::new(name, grid, block, geo.shared_mem_bytes, &args));
        }
        Tier::Split { chunk, splits, .. } => {
            args.chunk = chunk as i64;
            args.splits = splits as i64;
            // split_dx stages its chunk of dgamma/dbeta in shared memory (chunk floats).
            for (pass, smem) in [("split_sums", 0), ("split_dx", geo.shared_mem_bytes)] {
                let name = kernel("bwd", desc, pass, vec);
                let grid = [
                    grid_dim(geo.grid_x, &name)?,
                    grid_dim(geo.grid_y, &name)?,
                    1,
                ];
                plan.push(Launch::new(name, grid, block, smem, &args));
            }
        }
    }
    if !direct {
        finalize(&mut plan, geo.grid_x, dgamma_part, dbeta_part)?;
    }
    plan.check(props)?;
    Ok(plan)
}

fn push_bwd_warp(
    plan: &mut Plan,
    desc: &LayerNormDesc,
    tier: &str,
    vec: bool,
    geo: &Geometry,
    args: &WnLayerNormBwdArgs,
) -> Result<()> {
    let name = kernel("bwd", desc, tier, vec);
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
