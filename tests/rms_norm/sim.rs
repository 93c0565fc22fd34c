//! RMSNorm on ptxsim, for the PTX of compute_75, compute_80 and compute_90, against the CPU
//! reference (tolerances: `crate::support`), planned for `DeviceProps::SIM` (4 SMs, so that
//! the split tier is reached with few rows), with memcheck, racecheck and initcheck on.
//!
//! Each arch runs one representative shape per tier (the LayerNorm sweep's, the tiers being
//! the same) with every buffer placement and dtype pair; compute_80 adds more row lengths
//! (odd, around every tier bound). Each arch's run must execute every RMSNorm entry point the
//! build exports (checked at the end), so no tier or variant goes untested; and congruent
//! buffers must take the vector backward whatever D is. Then the semantics PyTorch fixes
//! (eps None, overflow-safe half rows, zero, NaN, Inf and huge rows), bitwise reruns and
//! in-place runs.

use std::collections::BTreeSet;

use crate::support::{run_case_dyn, run_on, to_f64, Case, Views, DTYPE_PAIRS};
use half::f16;
use testkit::sim::{sim_rows, skip_without_kernels, Sim};
use warpnorm::cpu::rms_norm as cpu;
use warpnorm::rms_norm::{plan_forward, workspace_bytes, Direction, ForwardPtrs, RmsNormDesc};
use warpnorm::{DType, DeviceProps, Executor};

/// Representatives of every tier (`warpnorm::layer_norm::plan`'s bounds): subwarp, warp,
/// block, wide (backward: 8200 columns, 4 rows), split; (64, 257) and (768, 257) have enough rows for several backward blocks
/// (partial rows and the finalize kernel).
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
/// More row lengths for compute_80 (odd ones and tier bounds).
const MORE: [(usize, usize); 10] = [
    (1, 5),
    (3, 33),
    (33, 9),
    (255, 7),
    (1000, 5),
    (1025, 3),
    (2047, 2),
    (4096, 2),
    (8192, 2),
    (16385, 1),
];
const VIEWS: [Views; 3] = [Views::Aligned, Views::Offset1, Views::InputOffset1];
/// Largest simulated problem (elements): rows are reduced for longer rows (not below SIM's
/// 4 SMs up to 16384 columns: `testkit::sim::sim_rows`).
const MAX_ELEMS: usize = 1 << 15;

/// The sweep's cases: the tier representatives (plus [`MORE`] when `more`), every dtype pair
/// and placement, the weight present in two of three.
pub fn cases(more: bool) -> Vec<Case> {
    let mut shapes: Vec<(usize, usize)> = REPS.to_vec();
    if more {
        shapes.extend_from_slice(&MORE);
    }
    let mut out = Vec::new();
    for (pi, &(dtype, param_dtype)) in DTYPE_PAIRS.iter().enumerate() {
        for (ri, &(cols, m)) in shapes.iter().enumerate() {
            for (vi, &views) in VIEWS.iter().enumerate() {
                let idx = out.len();
                out.push(Case {
                    rows: sim_rows(m, cols, MAX_ELEMS),
                    cols,
                    dtype,
                    param_dtype,
                    weight: (ri + vi + pi) % 3 != 2,
                    views,
                    seed: idx as u64 + 1,
                    x_offset: if idx % 4 == 0 { 100.0 } else { 0.0 },
                });
            }
        }
    }
    out
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

fn sweep(arch: u32, more: bool) {
    if skip_without_kernels(&format!("rms_norm sweep compute_{arch}")) {
        return;
    }
    let mut ran = BTreeSet::new();
    let cases = cases(more);
    let t = std::time::Instant::now();
    let mut failures = Vec::new();
    for case in &cases {
        let mut sim = Sim::new(arch);
        match run_case_dyn(&mut sim, case, &sweep_props(case)) {
            Ok(r) => {
                let want = if case.views == Views::InputOffset1 {
                    "_scalar"
                } else {
                    "_vec"
                };
                let main = &r.bwd.launches[0].kernel;
                if !main.ends_with(want) {
                    failures.push(format!("{case:?} ran {main}, not {want}"));
                }
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
    let all: Vec<&str> = warpnorm::kernels::all_entries()
        // The fused residual add's entry points (`_res_`, and the block and split tiers'
        // `_block_dbias_` / `_split_dx_dbias_` with the bias gradient, and the wide tier's
        // `_wide_dbias_`):
        // tests/rms_norm/residual.rs.
        .filter(|k| {
            k.starts_with("warpnorm_rms_norm_")
                && !k.contains("_res_")
                && !k.contains("_block_dbias_")
                && !k.contains("_split_dx_dbias_")
                && !k.contains("_wide_dbias_")
        })
        .collect();
    assert!(
        all.len() > 100,
        "the build exports {} RMSNorm entry points",
        all.len()
    );
    let missing: Vec<&&str> = all.iter().filter(|k| !ran.contains(**k)).collect();
    assert!(
        missing.is_empty(),
        "compute_{arch}: entry points never run: {missing:?}"
    );
}

#[test]
fn sweep_compute_80_more_shapes() {
    sweep(80, true);
}

#[test]
fn sweep_compute_75() {
    sweep(75, false);
}

#[test]
fn sweep_compute_90() {
    sweep(90, false);
}

/// Forward of one f16 row on ptxsim (no weight, eps None): y and rstd.
fn f16_row(arch: u32, row: &[f32]) -> (Vec<f64>, f64) {
    let d = row.len();
    let desc = RmsNormDesc::from_rows(1, d, DType::F16, DType::F16, false, None).unwrap();
    let x: Vec<f16> = row.iter().map(|v| f16::from_f32(*v)).collect();
    let dy = vec![f16::from_f32(0.0); d];
    let mut sim = Sim::new(arch);
    let (o, _) = run_on::<f16, f16>(
        &mut sim,
        &desc,
        &DeviceProps::SIM,
        Views::Aligned,
        &x,
        &dy,
        None,
        None,
    )
    .unwrap();
    (o.y, o.rstd[0])
}

/// PyTorch's numbers (SEMANTICS.md, torch 2.15): eps None is 2^-23 for f16 too (a row of 0.01s
/// gives 0.99951, not 0.30), and an f16 row [60000, 60000, 1, 1] gives 1.414, not Inf.
#[test]
fn pytorch_semantics_of_half_rows() {
    if skip_without_kernels("rms_norm half rows") {
        return;
    }
    for arch in testkit::sim::SIM_ARCHS {
        let (y, _) = f16_row(arch, &[0.01; 8]);
        for v in &y {
            assert_eq!(*v, f16::from_f32(0.99951).to_f64(), "compute_{arch}: {y:?}");
        }
        let (y, rstd) = f16_row(arch, &[60000.0, 60000.0, 1.0, 1.0]);
        assert!(
            rstd.is_finite() && rstd > 0.0,
            "compute_{arch}: rstd {rstd}"
        );
        assert_eq!(y[0], f16::from_f32(1.414).to_f64(), "compute_{arch}: {y:?}");
        assert_eq!(y[1], y[0]);
        assert!((y[2] - 2.35e-5).abs() < 1e-7, "compute_{arch}: {y:?}");
        assert_eq!(y[3], y[2]);
    }
}

/// Rows PyTorch fixes the result of, f32, against the CPU reference and the literal values:
/// [3, 4, 0, 0] (rstd 0.4), a zero row (zeros), a NaN (a NaN row), an Inf (rstd 0: NaN at
/// the Inf, 0 elsewhere), a row whose sum of squares overflows f32 but whose mean square
/// does not (recomputed scaled: the f64 result), and one whose mean square is beyond f32
/// (rstd 0, y 0, as torch's f32).
#[test]
fn special_rows_f32() {
    if skip_without_kernels("rms_norm special rows") {
        return;
    }
    let d = 4096;
    let rows: Vec<Vec<f32>> = vec![
        [3.0, 4.0, 0.0, 0.0].repeat(d / 4),
        vec![0.0; d],
        [1.0, f32::NAN, 2.0, 3.0].repeat(d / 4),
        [1.0, f32::INFINITY, 2.0, 3.0].repeat(d / 4),
        [1e18, -2e18, 3e17, 0.5].repeat(d / 4),
        [1e30, -1e30, 0.0, 0.0].repeat(d / 4),
    ];
    let m = rows.len();
    let x: Vec<f32> = rows.concat();
    let dy = vec![0.5f32; m * d];
    let w: Vec<f32> = (0..d).map(|c| 0.5 + (c % 7) as f32 * 0.125).collect();
    for (cols, arch) in [(d, 80u32), (4, 75), (4, 90)] {
        // cols 4 (subwarp tier) on the first four elements of each row, 4096 (block) whole.
        let xs: Vec<f32> = (0..m)
            .flat_map(|r| x[r * d..r * d + cols].to_vec())
            .collect();
        let desc = RmsNormDesc::from_rows(m, cols, DType::F32, DType::F32, true, None).unwrap();
        let r = cpu::forward::<f32, f32>(&desc, &xs, Some(&w[..cols])).unwrap();
        let mut sim = Sim::new(arch);
        let (o, _) = run_on::<f32, f32>(
            &mut sim,
            &desc,
            &DeviceProps::SIM,
            Views::Aligned,
            &xs,
            &dy[..m * cols],
            Some(&w[..cols]),
            None,
        )
        .unwrap();
        let ry = to_f64(&r.y);
        for (i, (g, e)) in o.y.iter().zip(&ry).enumerate() {
            let ok = if e.is_nan() {
                g.is_nan()
            } else {
                (g - e).abs() <= 1e-5 * e.abs().max(1e-30)
            };
            assert!(ok, "compute_{arch} D={cols} y[{i}] = {g}, expected {e}");
        }
        for (row, (g, e)) in o.rstd.iter().zip(&r.rstd).enumerate() {
            let e = *e as f64;
            assert!(
                (e.is_nan() && g.is_nan()) || (g - e).abs() <= 1e-6 * e.abs(),
                "compute_{arch} D={cols} rstd[{row}] = {g}, expected {e}"
            );
        }
        // The literal values.
        assert!((o.rstd[0] - 0.4).abs() < 1e-7);
        assert!((o.y[0] - 1.2 * w[0] as f64).abs() < 1e-6);
        assert!(o.y[cols..2 * cols].iter().all(|v| *v == 0.0), "zero row");
        assert!(
            o.y[2 * cols..3 * cols].iter().all(|v| v.is_nan()),
            "NaN row"
        );
        assert_eq!(o.rstd[3], 0.0, "Inf row: rstd 0");
        assert!(
            o.y[3 * cols + 1].is_nan() && o.y[3 * cols] == 0.0,
            "Inf row"
        );
        assert!(o.y[4 * cols..5 * cols].iter().all(|v| v.is_finite()));
        assert_eq!(o.rstd[5], 0.0, "mean square beyond f32: rstd 0");
        assert!(o.y[5 * cols..].iter().all(|v| *v == 0.0));
        // The large finite row is not flushed: its values are those of the f64 reference.
        assert!(o.y[4 * cols + 1].abs() > 0.1);
    }
}

/// Reruns are bitwise identical (dweight included: partial rows and a fixed-order finalize),
/// and the in-place forward (y == x) and backward (dx == dy) give the bits of the
/// out-of-place ones.
#[test]
fn bitwise_reruns_and_in_place() {
    if skip_without_kernels("rms_norm reruns") {
        return;
    }
    let (m, d) = (257, 768);
    let desc = RmsNormDesc::from_rows(m, d, DType::BF16, DType::F32, true, None).unwrap();
    let case = Case {
        rows: m,
        cols: d,
        dtype: DType::BF16,
        param_dtype: DType::F32,
        weight: true,
        views: Views::Aligned,
        seed: 7,
        x_offset: 0.0,
    };
    let data = crate::support::make_data::<half::bf16, f32>(&case);
    let run = || {
        let mut sim = Sim::new(80);
        run_on::<half::bf16, f32>(
            &mut sim,
            &desc,
            &DeviceProps::SIM,
            Views::Aligned,
            &data.x,
            &data.dy,
            data.weight.as_deref(),
            None,
        )
        .unwrap()
        .0
    };
    let a = run();
    let b = run();
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a.y), bits(&b.y));
    assert_eq!(bits(&a.dx), bits(&b.dx));
    assert_eq!(bits(&a.dweight), bits(&b.dweight));
    assert!(a.dweight.iter().any(|v| *v != 0.0));

    // In place: y over x, then dx over dy.
    let mut sim = Sim::new(80);
    let props = DeviceProps::SIM;
    let xy = sim.upload(&data.x, 0);
    let w = sim.upload(data.weight.as_ref().unwrap(), 0);
    let rstd = sim.alloc::<f32>(m, 0);
    let ws = workspace_bytes(&desc, Direction::Forward, &props).unwrap();
    let wsp = testkit::backend::row_norm_workspace(&mut sim, ws);
    let plan = plan_forward(
        &desc,
        &ForwardPtrs {
            x: xy,
            y: xy,
            weight: Some(w),
            rstd: Some(rstd),
            workspace: wsp,
            workspace_bytes: ws as u64,
        },
        &props,
    )
    .unwrap();
    sim.execute(&plan).unwrap();
    let y = to_f64(&sim.download::<half::bf16>(xy, m * d));
    assert_eq!(bits(&y), bits(&a.y), "in-place forward");
    let x = sim.upload(&data.x, 0);
    let dy_dx = sim.upload(&data.dy, 0);
    let dw = sim.alloc::<f32>(d, 0);
    let ws = workspace_bytes(&desc, Direction::Backward, &props).unwrap();
    let wsp = testkit::backend::row_norm_workspace(&mut sim, ws);
    let plan = warpnorm::rms_norm::plan_backward(
        &desc,
        &warpnorm::rms_norm::BackwardPtrs {
            x,
            dy: dy_dx,
            dx: dy_dx,
            weight: Some(w),
            rstd,
            dweight: Some(dw),
            workspace: wsp,
            workspace_bytes: ws as u64,
        },
        &props,
    )
    .unwrap();
    sim.execute(&plan).unwrap();
    let dx = to_f64(&sim.download::<half::bf16>(dy_dx, m * d));
    assert_eq!(bits(&dx), bits(&a.dx), "in-place backward");
    assert_eq!(bits(&to_f64(&sim.download::<f32>(dw, d))), bits(&a.dweight));
}
