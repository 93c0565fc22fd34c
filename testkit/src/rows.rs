//! Running only the blocks of a row-norm launch (LayerNorm, RMSNorm) that own given rows, for
//! tensors too large to simulate whole (`tests/*/sim_huge.rs`): which rows a block owns, and
//! placing and reading those rows in full-size simulator buffers (mapped lazily, so only the
//! rows written use memory).

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

/// A device like the simulated one with `sm_count` SMs, so that grids grow with the rows.
pub fn props_with_sms(sm_count: u32) -> DeviceProps {
    DeviceProps {
        sm_count,
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

/// Runs `plan`'s launches (but a finalize) for the blocks with `blockIdx.x == bx`; returns the
/// number of blocks run.
pub fn run_block_column(sim: &mut Sim, plan: &Plan, bx: u32) -> Result<u64, String> {
    let mut blocks = 0;
    for l in plan
        .launches
        .iter()
        .filter(|l| !l.kernel.ends_with("_finalize"))
    {
        let s = sim
            .run_blocks(l, [bx..bx + 1, 0..l.grid[1], 0..l.grid[2]])
            .map_err(|e| format!("{}: {e}\n{plan}", l.kernel))?;
        blocks += s.blocks;
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
