//! Running only the blocks of a row-norm launch (LayerNorm, RMSNorm) that own given rows, for
//! tensors too large to simulate whole (`tests/*/sim_huge.rs`): which rows a block owns, and
//! placing and reading those rows in full-size simulator buffers (mapped lazily, so only the
//! rows written use memory).

use std::collections::BTreeSet;

use crate::sim::Sim;
use warpnorm::{DeviceProps, Element, Launch, Plan};

/// Rows owned by block `b` of a launch of `grid_x` blocks with `unit` rows per block and
/// step: b * unit + i + k * grid_x * unit, for i < unit, below `rows`.
pub fn block_rows(b: u64, unit: u64, grid_x: u64, rows: u64) -> Vec<usize> {
    let step = grid_x * unit;
    let mut out = Vec::new();
    let mut base = b * unit;
    while base < rows {
        out.extend((base..(base + unit).min(rows)).map(|r| r as usize));
        base += step;
    }
    out
}

/// Rows per block per grid-stride step of a row-norm launch: lanes per block / lanes per row
/// in the warp tiers (`group` > 0, the ABI's field), else the block's row teams (block.y).
pub fn rows_per_step(l: &Launch, group: u32) -> u64 {
    if group > 0 {
        (l.block[0] as u64 * l.block[1] as u64) / group as u64
    } else {
        l.block[1] as u64
    }
}

/// The block owning the last of `rows` rows, and the rows it owns.
pub fn last_block(l: &Launch, rows: u64, group: u32) -> (u32, Vec<usize>) {
    let unit = rows_per_step(l, group);
    let gx = l.grid[0] as u64;
    let b = ((rows - 1) % (gx * unit)) / unit;
    (b as u32, block_rows(b, unit, gx, rows))
}

/// A device like the simulated one with `sm_count` SMs, so that grids grow with the rows, and
/// without cooperative launches: the huge shapes run some of a launch's blocks
/// ([`run_row_blocks`]), which a cooperative launch (its blocks wait for each other) cannot.
/// The cooperative passes' 64-bit offsets are those of the kernels they share their bodies
/// with (LayerNorm's split tier), which run here.
pub fn props_with_sms(sm_count: u32) -> DeviceProps {
    DeviceProps {
        sm_count,
        cooperative_launch: false,
        ..DeviceProps::SIM
    }
}

/// Writes row k of `src` (rows of `cols`) at row `rows[k]` of the buffer at `base`.
pub fn scatter_rows<E: Element>(sim: &mut Sim, base: u64, cols: usize, rows: &[usize], src: &[E]) {
    let size = std::mem::size_of::<E>();
    for (k, &r) in rows.iter().enumerate() {
        sim.write(
            base + (r * cols * size) as u64,
            &src[k * cols..(k + 1) * cols],
        );
    }
}

/// Reads rows `rows` (of `cols` elements) of the buffer at `base`, widened to f64.
pub fn gather_rows<E: Element + Default>(
    sim: &Sim,
    base: u64,
    cols: usize,
    rows: &[usize],
) -> Vec<f64> {
    let size = std::mem::size_of::<E>();
    rows.iter()
        .flat_map(|&r| {
            sim.download::<E>(base + (r * cols * size) as u64, cols)
                .into_iter()
                .map(|e| e.to_f64())
        })
        .collect()
}

/// The launch whose blocks own the rows a test runs: the plan's last launch but a finalize
/// (the split tier's second pass, whose blocks write the backward's partial rows; the only
/// data launch of the other tiers).
pub fn owner_launch(plan: &Plan) -> &Launch {
    plan.launches
        .iter()
        .rfind(|l| !l.kernel.ends_with("_finalize"))
        .expect("a plan with a data launch")
}

/// Runs `plan`'s launches (but a finalize) for the blocks that own `rows` (of `total`) in
/// each launch's own grid, every blockIdx.y and z of them (the split tier's first pass may
/// have more blocks in x than its second). Fails when those blocks own another row too: they
/// would read rows that nothing wrote (the planner nests the grids so that they do not).
/// Returns the number of blocks run.
pub fn run_row_blocks(
    sim: &mut Sim,
    plan: &Plan,
    group: u32,
    total: u64,
    rows: &[usize],
) -> Result<u64, String> {
    let want: BTreeSet<usize> = rows.iter().copied().collect();
    let mut blocks = 0;
    for l in plan
        .launches
        .iter()
        .filter(|l| !l.kernel.ends_with("_finalize"))
    {
        let unit = rows_per_step(l, group);
        let gx = l.grid[0] as u64;
        let owners: BTreeSet<u64> = rows
            .iter()
            .map(|&r| (r as u64 % (gx * unit)) / unit)
            .collect();
        let covered: BTreeSet<usize> = owners
            .iter()
            .flat_map(|&b| block_rows(b, unit, gx, total))
            .collect();
        if covered != want {
            return Err(format!(
                "{}: the blocks owning rows {} also own rows {}\n{plan}",
                l.kernel,
                show_rows(rows),
                show_rows(&covered.difference(&want).copied().collect::<Vec<_>>())
            ));
        }
        for b in owners {
            let bx = b as u32;
            let s = sim
                .run_blocks(l, [bx..bx + 1, 0..l.grid[1], 0..l.grid[2]])
                .map_err(|e| format!("{}: {e}\n{plan}", l.kernel))?;
            blocks += s.blocks;
        }
    }
    Ok(blocks)
}

/// A short description of a row list: "N rows a..=z" or the rows themselves.
pub fn show_rows(r: &[usize]) -> String {
    match r {
        [a, .., z] if r.len() > 4 => format!("{} rows {a}..={z}", r.len()),
        _ => format!("rows {r:?}"),
    }
}

/// The vector kernels of every tier of a row norm, forward and backward, with `{}` standing for
/// the dtype pair (`warpnorm_<op>_` before): what the coalescing tests must see run.
pub const VEC_TIERS: [&str; 11] = [
    "fwd_{}_subwarp_vec",
    "fwd_{}_warp_vec",
    "fwd_{}_block_vec",
    "fwd_{}_split_stats_vec",
    "fwd_{}_split_norm_vec",
    "fwd_{}_split_coop_vec",
    "bwd_{}_subwarp_vec",
    "bwd_{}_warp_vec",
    "bwd_{}_block_vec",
    "bwd_{}_split_sums_vec",
    "bwd_{}_split_dx_vec",
];

/// A row-norm problem past 2^31 elements, for the `sim_huge` tests.
#[derive(Clone, Copy, Debug)]
pub struct HugeShape {
    /// M.
    pub rows: usize,
    /// D.
    pub cols: usize,
    /// Activation dtype.
    pub dtype: warpnorm::DType,
    /// Parameter dtype.
    pub param_dtype: warpnorm::DType,
    /// The op's lighter parameter set (LayerNorm: weight without bias; RMSNorm: no weight)
    /// rather than its full one.
    pub fewer_params: bool,
    /// SMs of the planned device (the grid's size).
    pub sms: u32,
    /// Expected tier name of the main kernels (fwd, bwd).
    pub tiers: (&'static str, &'static str),
    /// Elements x and dy sit past an aligned address (1: the scalar variants).
    pub offset: usize,
}

/// One shape per tier, each with its last rows past element 2^31 (3 * 2^30 elements; the
/// sub-warp case past 2^32, the f32 case past byte 2^33).
pub fn huge_shapes() -> Vec<HugeShape> {
    use warpnorm::DType::*;
    let c = |rows: usize, cols: usize, dtype, param_dtype, sms, tiers| HugeShape {
        rows,
        cols,
        dtype,
        param_dtype,
        fewer_params: false,
        sms,
        tiers,
        offset: 0,
    };
    let past = |cols: usize| (3usize << 30) / cols + 1;
    vec![
        // Sub-warp groups: 2^26 + 1 rows of 64, 2^32 + 64 elements.
        c(
            (1 << 26) + 1,
            64,
            BF16,
            BF16,
            1 << 20,
            ("_subwarp_", "_subwarp_"),
        ),
        // A warp per row (forward), mixed precision, odd D (per-row heads), fewer parameters.
        HugeShape {
            fewer_params: true,
            ..c(past(1000), 1000, F16, F32, 1 << 18, ("_warp_", "_block_"))
        },
        // f32, warp tier: 2^22 + 1 rows of 512, the last one at byte 2^33.
        c((1 << 22) + 1, 512, F32, F32, 1 << 18, ("_warp_", "_warp_")),
        // A row per block (forward) / team (backward), odd D.
        c(
            past(4099),
            4099,
            BF16,
            F32,
            1 << 17,
            ("_block_vec", "_block_vec"),
        ),
        // Inputs one element off: the scalar variants (8 elements per thread, so D <= 4096
        // stays in the block tier).
        HugeShape {
            offset: 1,
            ..c(
                past(3001),
                3001,
                BF16,
                F32,
                1 << 17,
                ("_block_scalar", "_block_scalar"),
            )
        },
        // Split rows: 2049 rows of 2^20, the last one at element 2^31.
        c(2049, 1 << 20, BF16, BF16, 1 << 17, ("_split_", "_split_")),
    ]
}

/// Runs `run` on every huge shape for compute_80, 75 and 90 (75 and 90 skip the split shape,
/// the slowest), logging what passed; returns the failures.
pub fn run_huge_shapes(run: impl Fn(u32, &HugeShape) -> Result<String, String>) -> Vec<String> {
    let mut failures = Vec::new();
    for arch in [80, 75, 90] {
        for h in huge_shapes() {
            if arch != 80 && h.cols > 1 << 16 {
                continue;
            }
            let t = std::time::Instant::now();
            match run(arch, &h) {
                Ok(s) => eprintln!("compute_{arch}: {s} in {:?}", t.elapsed()),
                Err(e) => failures.push(format!("compute_{arch}: {h:?}: {e}")),
            }
        }
    }
    failures
}
