//! LayerNorm on ptxsim, for the PTX of compute_75, compute_80 and compute_90, against the CPU
//! reference (tolerances: `crate::support::K_ROUND` / `K_F32`), planned for
//! `DeviceProps::SIM` (4 SMs, so that the split tier is reached with few rows).
//!
//! Sampling keeps the run short without dropping tiers: compute_80 runs every D x M x dtype
//! pair (affine variant and buffer placement rotate with the case), with fewer rows for long
//! rows (at most 2^15 elements per case); compute_75 and compute_90 run one representative
//! shape per tier with every placement. Each arch's run must execute every LayerNorm
//! entry point the build exports (checked at the end), so no tier/variant goes untested, and
//! every case whose x, dy, dx are congruent mod the vector access width (16 bytes; 8 for
//! f16/bf16 activations with f32 parameters; aligned, or all one element off) must run the
//! vector backward whatever D is (odd D included: no scalar cliff).

use std::collections::BTreeSet;

use crate::support::{run_case_dyn, Case, Ran, Views, DTYPE_PAIRS};
use testkit::backend::Backend;
use testkit::sim::{sim_rows, skip_without_kernels, Sim};
use warpnorm::layer_norm::Affine;
use warpnorm::DeviceProps;

/// The D values of the issue, plus 512 (the only way to reach the 16-bit backward `warp`
/// tier with aligned rows: 256 < D <= 512 with D % 8 == 0).
const DS: [usize; 27] = [
    1, 2, 3, 7, 31, 32, 33, 127, 128, 129, 255, 256, 257, 511, 512, 768, 1000, 1024, 1025, 2047,
    2048, 4096, 5000, 8192, 12288, 16385, 65537,
];
const MS: [usize; 4] = [1, 3, 64, 257];
/// Representatives of every tier for the sampled archs (see the module docs of
/// `warpnorm::layer_norm::plan` for the bounds), each run with all three placements; (64, 257)
/// has enough rows for several backward blocks (partial rows and the finalize kernel).
const REPS: [(usize, usize); 9] = [
    (7, 64),
    (64, 257),
    (128, 3),
    (512, 64),
    (768, 257),
    (2048, 16),
    (8200, 4),
    (12288, 3),
    (65537, 1),
];
const AFFINES: [Affine; 3] = [Affine::WeightBias, Affine::Weight, Affine::None];
const VIEWS: [Views; 3] = [Views::Aligned, Views::Offset1, Views::InputOffset1];
/// Largest simulated problem (elements): rows are reduced for longer rows, but not below
/// SIM's 4 SMs up to 16384 columns (`testkit::sim::sim_rows`: the wide backward tier, 8200
/// and 12288 columns with 4 rows; with 3 rows the split tier).
const MAX_ELEMS: usize = 1 << 15;

/// The sweep's cases: every D x M x dtype pair (`full`), or the tier representatives with
/// every placement. Also run on the GPU (`crate::gpu`).
pub fn cases(full: bool) -> Vec<Case> {
    let mut shapes = Vec::new();
    for pi in 0..DTYPE_PAIRS.len() {
        if full {
            for (di, &cols) in DS.iter().enumerate() {
                for (mi, &m) in MS.iter().enumerate() {
                    shapes.push((pi, cols, m, (di + mi + pi) % 3, (di + 2 * mi + pi) % 3));
                }
            }
        } else {
            for (ri, &(cols, m)) in REPS.iter().enumerate() {
                for vi in 0..3 {
                    shapes.push((pi, cols, m, vi, (ri + vi + pi) % 3));
                }
            }
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (idx, (pi, cols, m, vi, ai)) in shapes.into_iter().enumerate() {
        let rows = sim_rows(m, cols, MAX_ELEMS);
        if !seen.insert((pi, cols, rows, vi, ai)) {
            continue;
        }
        let (dtype, param_dtype) = DTYPE_PAIRS[pi];
        out.push(Case {
            rows,
            cols,
            dtype,
            param_dtype,
            affine: AFFINES[ai],
            views: VIEWS[vi],
            seed: idx as u64 + 1,
            x_offset: if idx % 4 == 0 { 100.0 } else { 0.0 },
        });
    }
    out
}

/// Runs one sweep case on `be`, planned for `props`, and checks that congruent buffers took
/// the vector backward (no scalar cliff, whatever D is).
pub fn run_sweep_case(
    be: &mut impl Backend,
    case: &Case,
    props: &DeviceProps,
) -> Result<Ran, String> {
    let r = run_case_dyn(be, case, props)?;
    let want = if case.views == Views::InputOffset1 {
        "_scalar"
    } else {
        "_vec"
    };
    let main = &r.bwd.launches[0].kernel;
    if !main.ends_with(want) {
        return Err(format!("{case:?} ran {main}, not {want}"));
    }
    Ok(r)
}

/// `DeviceProps::SIM`, without cooperative launches for the cases whose buffers are all one
/// element off: the forward split tier's two launches run for them (vector kernels), its
/// one-launch cooperative pass for the aligned ones.
fn sweep_props(case: &Case) -> DeviceProps {
    DeviceProps {
        cooperative_launch: case.views != Views::Offset1,
        ..DeviceProps::SIM
    }
}

fn sweep(arch: u32, full: bool) {
    if skip_without_kernels(&format!("layer_norm sweep compute_{arch}")) {
        return;
    }
    let mut ran = BTreeSet::new();
    let cases = cases(full);
    let t = std::time::Instant::now();
    let mut failures = Vec::new();
    for case in &cases {
        let mut sim = Sim::new(arch);
        match run_sweep_case(&mut sim, case, &sweep_props(case)) {
            Ok(r) => {
                for l in r.fwd.launches.iter().chain(&r.bwd.launches) {
                    ran.insert(l.kernel.clone());
                }
            }
            Err(e) => failures.push(format!("compute_{arch}: {e}")),
        }
    }
    eprintln!("compute_{arch}: {} cases in {:?}", cases.len(), t.elapsed());
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    let missing: Vec<&str> = warpnorm::kernels::all_entries()
        // The fused residual add's entry points (`_res_`, and with the bias gradient the block,
        // wide and split tiers' `_block_dbias_` / `_wide_dbias_` / `_split_dx_dbias_` and
        // dbeta's column sum `_colsum`): tests/rms_norm/residual.rs.
        .filter(|k| {
            k.starts_with("warpnorm_layer_norm_")
                && !k.contains("_res_")
                && !k.ends_with("_colsum")
                && !k.contains("_block_dbias_")
                && !k.contains("_split_dx_dbias_")
                && !k.contains("_wide_dbias_")
                && !ran.contains(*k)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "compute_{arch}: entry points never run: {missing:?}"
    );
}

#[test]
fn sweep_compute_80_all_shapes() {
    sweep(80, true);
}

#[test]
fn sweep_compute_75_sampled() {
    sweep(75, false);
}

#[test]
fn sweep_compute_90_sampled() {
    sweep(90, false);
}
