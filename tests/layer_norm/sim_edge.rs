//! LayerNorm edge cases on ptxsim (compute_80): determinism (bitwise-equal reruns) in every
//! tier and for odd D on the vector backward, empty problems, NaN/Inf propagation across
//! the split tier's chunks, in place, and (on every arch) the forward without saved
//! statistics.

use crate::support::{cpu_fwd_bwd, sim_fwd_bwd, Outputs, Rng};
use half::bf16;
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::layer_norm::{
    plan_backward, plan_forward, Affine, BackwardPtrs, ForwardPtrs, LayerNormDesc,
};
use warpnorm::{DType, DeviceProps};

fn bits(o: &Outputs) -> Vec<Vec<u64>> {
    [&o.y, &o.mean, &o.rstd, &o.dx, &o.dgamma, &o.dbeta]
        .iter()
        .map(|v| v.iter().map(|x| x.to_bits()).collect())
        .collect()
}

/// (rows, cols) of bf16/f32 problems in every tier on the simulated GPU: subwarp, warp, block
/// (one row per block), block (4 rows per block in backward), block, split (few rows), split
/// (long rows).
const TIER_SHAPES: [(usize, usize); 6] = [
    (50, 24),
    (40, 700),
    (64, 1024),
    (9, 3000),
    (2, 9000),
    (5, 20000),
];

fn bf16_f32(rows: usize, cols: usize) -> LayerNormDesc {
    LayerNormDesc::from_rows(
        rows,
        cols,
        DType::BF16,
        DType::F32,
        Affine::WeightBias,
        1e-5,
    )
    .unwrap()
}

/// x, dy (bf16) and gamma, beta (f32) of a `rows` x `cols` problem.
fn tier_data(rows: usize, cols: usize, seed: u64) -> (Vec<bf16>, Vec<bf16>, Vec<f32>, Vec<f32>) {
    let mut rng = Rng::new(seed);
    let x = rng.vec(rows * cols, -3.0, 3.0);
    let dy = rng.vec(rows * cols, -1.0, 1.0);
    let g = rng.vec(cols, 0.5, 1.5);
    let b = rng.vec(cols, -0.5, 0.5);
    (x, dy, g, b)
}

#[test]
fn reruns_are_bitwise_identical_in_every_tier() {
    if skip_without_kernels("reruns_are_bitwise_identical_in_every_tier") {
        return;
    }
    for (rows, cols) in TIER_SHAPES {
        let d = bf16_f32(rows, cols);
        let (x, dy, g, b) = tier_data(rows, cols, 7);
        let mut sim = Sim::new(80);
        let props = DeviceProps::SIM;
        let first = sim_fwd_bwd(&mut sim, &d, &x, Some(&g), Some(&b), &dy, &props).unwrap();
        let second = sim_fwd_bwd(&mut sim, &d, &x, Some(&g), Some(&b), &dy, &props).unwrap();
        assert_eq!(bits(&first), bits(&second), "{rows}x{cols}");
        // And the result is right (tolerances as in the sweep are not needed here: compare
        // dgamma loosely to the reference to make sure the rerun is not trivially equal).
        let r = cpu_fwd_bwd(&d, &x, Some(&g), Some(&b), &dy).unwrap();
        let scale = r.dgamma.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (a, e) in first.dgamma.iter().zip(&r.dgamma) {
            assert!(
                (a - e).abs() <= 1e-4 * scale,
                "{rows}x{cols}: dgamma {a} vs {e}"
            );
        }
    }
}

#[test]
fn nan_and_inf_rows_poison_only_their_row_in_the_split_tier() {
    if skip_without_kernels("nan_and_inf_rows_poison_only_their_row_in_the_split_tier") {
        return;
    }
    let (rows, cols) = (3usize, 8192usize); // 3 rows on 4 SMs: split tier
    let d = LayerNormDesc::from_rows(rows, cols, DType::F32, DType::F32, Affine::WeightBias, 1e-5)
        .unwrap();
    let mut rng = Rng::new(3);
    let mut x: Vec<f32> = rng.vec(rows * cols, -1.0, 1.0);
    x[5000] = f32::NAN; // row 0, third chunk
    x[cols + 7] = f32::INFINITY; // row 1, first chunk
    let dy: Vec<f32> = rng.vec(rows * cols, -1.0, 1.0);
    let g = vec![1.0f32; cols];
    let b = vec![0.0f32; cols];
    let mut sim = Sim::new(80);
    let o = sim_fwd_bwd(&mut sim, &d, &x, Some(&g), Some(&b), &dy, &DeviceProps::SIM).unwrap();
    assert!(
        o.y[..2 * cols].iter().all(|v| v.is_nan()),
        "rows 0 and 1 must be all NaN"
    );
    assert!(
        o.y[2 * cols..].iter().all(|v| v.is_finite()),
        "row 2 must be finite"
    );
    assert!(o.mean[0].is_nan() && o.mean[1].is_nan() && o.mean[2].is_finite());
    assert!(o.dx[..2 * cols].iter().all(|v| v.is_nan()));
    assert!(o.dx[2 * cols..].iter().all(|v| v.is_finite()));
    assert!(o.dgamma.iter().all(|v| v.is_nan()), "dgamma sums every row");
    assert!(
        o.dbeta.iter().all(|v| v.is_finite()),
        "dbeta = sum dy is finite"
    );
}

#[test]
fn huge_values_give_zero_rstd_as_torch() {
    if skip_without_kernels("huge_values_give_zero_rstd_as_torch") {
        return;
    }
    // fp32 row [1e30, -1e30, 0, 0, ...]: the variance overflows, rstd = 0, y = beta.
    for cols in [4usize, 3000] {
        let d = LayerNormDesc::from_rows(1, cols, DType::F32, DType::F32, Affine::WeightBias, 1e-5)
            .unwrap();
        let mut x = vec![0.0f32; cols];
        x[0] = 1e30;
        x[1] = -1e30;
        let b: Vec<f32> = (0..cols).map(|i| i as f32 * 0.01).collect();
        let g = vec![2.0f32; cols];
        let dy = vec![1.0f32; cols];
        let mut sim = Sim::new(80);
        let o = sim_fwd_bwd(&mut sim, &d, &x, Some(&g), Some(&b), &dy, &DeviceProps::SIM).unwrap();
        assert_eq!(o.rstd, vec![0.0]);
        assert_eq!(o.mean, vec![0.0]);
        let expect: Vec<f64> = b.iter().map(|v| *v as f64).collect();
        assert_eq!(o.y, expect, "D = {cols}");
    }
}

#[test]
fn empty_inputs() {
    if skip_without_kernels("empty_inputs") {
        return;
    }
    let props = DeviceProps::SIM;
    // M = 0: backward writes zero dgamma/dbeta over whatever was there.
    let mut sim = Sim::new(80);
    let d =
        LayerNormDesc::from_rows(0, 8, DType::F16, DType::F32, Affine::WeightBias, 1e-5).unwrap();
    let dg = sim.upload(&[7.0f32; 8], 0);
    let db = sim.upload(&[7.0f32; 8], 0);
    let g = sim.upload(&[1.0f32; 8], 0);
    let p = BackwardPtrs {
        gamma: Some(g),
        dgamma: Some(dg),
        dbeta: Some(db),
        ..Default::default()
    };
    sim.run(&plan_backward(&d, &p, &props).unwrap()).unwrap();
    assert_eq!(sim.download::<f32>(dg, 8), vec![0.0; 8]);
    assert_eq!(sim.download::<f32>(db, 8), vec![0.0; 8]);
    // D = 0: mean 0, rstd NaN per row, as torch.
    let d = LayerNormDesc::from_rows(2, 0, DType::F32, DType::F32, Affine::None, 1e-5).unwrap();
    let mean = sim.alloc::<f32>(2, 0);
    let rstd = sim.alloc::<f32>(2, 0);
    let p = ForwardPtrs {
        mean: Some(mean),
        rstd: Some(rstd),
        ..Default::default()
    };
    sim.run(&plan_forward(&d, &p, &props).unwrap()).unwrap();
    assert_eq!(sim.download::<f32>(mean, 2), vec![0.0; 2]);
    assert!(sim.download::<f32>(rstd, 2).iter().all(|v| v.is_nan()));
}

#[test]
fn odd_d_vector_backward_is_deterministic_with_several_teams() {
    if skip_without_kernels("odd_d_vector_backward_is_deterministic_with_several_teams") {
        return;
    }
    // Odd D: rows have VEC / gcd(D, VEC) different head offsets. Each case runs the vector
    // backward on several blocks whose teams hold rows of different heads (block tier with 2
    // and 4 teams, subwarp groups, split chunks), twice, bitwise equal, and right.
    let props = DeviceProps::SIM;
    for (rows, cols, dtype) in [
        (200usize, 1001usize, DType::BF16),
        (200, 1001, DType::F32),
        (200, 33, DType::F32),
        (20, 16385, DType::BF16),
    ] {
        let d =
            LayerNormDesc::from_rows(rows, cols, dtype, dtype, Affine::WeightBias, 1e-5).unwrap();
        // The plan the simulator runs (its buffers are 256-byte aligned, as these).
        let a = 0x1_0000_0000u64;
        let p = BackwardPtrs {
            x: a,
            dy: 2 * a,
            dx: 3 * a,
            gamma: Some(4 * a),
            mean: 5 * a,
            rstd: 6 * a,
            mean_lo: Some(a / 2),
            dgamma: Some(7 * a),
            dbeta: Some(8 * a),
            workspace: 9 * a,
            workspace_bytes: u64::MAX / 2,
        };
        let plan = plan_backward(&d, &p, &props).unwrap();
        let main = plan
            .launches
            .iter()
            .find(|l| !l.kernel.contains("split_sums"))
            .unwrap();
        assert!(main.kernel.ends_with("_vec"), "{plan}");
        assert!(main.grid[0] > 1, "several blocks: {plan}");
        let mut rng = Rng::new(11);
        let check = |o: &Outputs, r: &Outputs| {
            let scale = r.dgamma.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (a, e) in o.dgamma.iter().zip(&r.dgamma) {
                assert!(
                    (a - e).abs() <= 2e-2 * scale,
                    "{rows}x{cols}: dgamma {a} vs {e}"
                );
            }
            let scale = r.dbeta.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (a, e) in o.dbeta.iter().zip(&r.dbeta) {
                assert!(
                    (a - e).abs() <= 2e-2 * scale,
                    "{rows}x{cols}: dbeta {a} vs {e}"
                );
            }
            let scale = r.dx.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (a, e) in o.dx.iter().zip(&r.dx) {
                assert!(
                    (a - e).abs() <= 2e-2 * scale,
                    "{rows}x{cols}: dx {a} vs {e}"
                );
            }
        };
        let mut sim = Sim::new(80);
        match dtype {
            DType::BF16 => {
                let x: Vec<bf16> = rng.vec(rows * cols, -3.0, 3.0);
                let dy: Vec<bf16> = rng.vec(rows * cols, -1.0, 1.0);
                let g: Vec<bf16> = rng.vec(cols, 0.5, 1.5);
                let b: Vec<bf16> = rng.vec(cols, -0.5, 0.5);
                let first = sim_fwd_bwd(&mut sim, &d, &x, Some(&g), Some(&b), &dy, &props);
                let second = sim_fwd_bwd(&mut sim, &d, &x, Some(&g), Some(&b), &dy, &props);
                let (first, second) = (first.unwrap(), second.unwrap());
                assert_eq!(bits(&first), bits(&second), "{rows}x{cols} {dtype}");
                check(
                    &first,
                    &cpu_fwd_bwd(&d, &x, Some(&g), Some(&b), &dy).unwrap(),
                );
            }
            _ => {
                let x: Vec<f32> = rng.vec(rows * cols, -3.0, 3.0);
                let dy: Vec<f32> = rng.vec(rows * cols, -1.0, 1.0);
                let g: Vec<f32> = rng.vec(cols, 0.5, 1.5);
                let b: Vec<f32> = rng.vec(cols, -0.5, 0.5);
                let first = sim_fwd_bwd(&mut sim, &d, &x, Some(&g), Some(&b), &dy, &props);
                let second = sim_fwd_bwd(&mut sim, &d, &x, Some(&g), Some(&b), &dy, &props);
                let (first, second) = (first.unwrap(), second.unwrap());
                assert_eq!(bits(&first), bits(&second), "{rows}x{cols} {dtype}");
                check(
                    &first,
                    &cpu_fwd_bwd(&d, &x, Some(&g), Some(&b), &dy).unwrap(),
                );
            }
        }
    }
}

/// In place (`y == x` forward, `dx == dy` backward, which the planner accepts) gives the same
/// bits as out of place, in every tier: each thread reads its elements before writing them.
#[test]
fn in_place_matches_out_of_place_in_every_tier() {
    if skip_without_kernels("in_place_matches_out_of_place_in_every_tier") {
        return;
    }
    use warpnorm::layer_norm::{workspace_bytes, Direction};
    for (rows, cols) in TIER_SHAPES {
        let d = bf16_f32(rows, cols);
        let (x, dy, g, b) = tier_data(rows, cols, 11);
        let mut sim = Sim::new(80);
        let props = DeviceProps::SIM;
        let apart = sim_fwd_bwd(&mut sim, &d, &x, Some(&g), Some(&b), &dy, &props).unwrap();
        let ws_bytes = workspace_bytes(&d, Direction::Forward, &props)
            .unwrap()
            .max(workspace_bytes(&d, Direction::Backward, &props).unwrap());
        let ws = testkit::backend::row_norm_workspace(&mut sim, ws_bytes);
        let (pg, pb) = (sim.upload(&g, 0), sim.upload(&b, 0));
        let (pm, pr) = (sim.alloc::<f32>(rows, 0), sim.alloc::<f32>(rows, 0));
        let plo = sim.alloc::<f32>(rows, 0);
        let px = sim.upload(&x, 0);
        let fwd = ForwardPtrs {
            x: px,
            y: px,
            gamma: Some(pg),
            beta: Some(pb),
            mean: Some(pm),
            rstd: Some(pr),
            mean_lo: Some(plo),
            workspace: ws,
            workspace_bytes: ws_bytes as u64,
        };
        sim.run(&plan_forward(&d, &fwd, &props).unwrap()).unwrap();
        let y: Vec<bf16> = sim.download(px, rows * cols);
        let ybits: Vec<u64> = y.iter().map(|v| (v.to_f64()).to_bits()).collect();
        let want: Vec<u64> = apart.y.iter().map(|v| v.to_bits()).collect();
        assert!(ybits == want, "{rows}x{cols}: y in place differs");
        // Backward in place on dy, from the statistics the forward saved.
        let px = sim.upload(&x, 0);
        let pdy = sim.upload(&dy, 0);
        let (pdg, pdb) = (sim.alloc::<f32>(cols, 0), sim.alloc::<f32>(cols, 0));
        let bwd = BackwardPtrs {
            x: px,
            dy: pdy,
            dx: pdy,
            gamma: Some(pg),
            mean: pm,
            rstd: pr,
            mean_lo: Some(plo),
            dgamma: Some(pdg),
            dbeta: Some(pdb),
            workspace: ws,
            workspace_bytes: ws_bytes as u64,
        };
        sim.run(&plan_backward(&d, &bwd, &props).unwrap()).unwrap();
        let dx: Vec<bf16> = sim.download(pdy, rows * cols);
        let dxbits: Vec<u64> = dx.iter().map(|v| (v.to_f64()).to_bits()).collect();
        let want: Vec<u64> = apart.dx.iter().map(|v| v.to_bits()).collect();
        assert!(dxbits == want, "{rows}x{cols}: dx in place differs");
    }
}

/// Forward without saved statistics (inference: `mean` / `rstd` None, the kernels' null
/// pointers) gives the same y bits as with them, in every tier on every simulated arch, stores
/// nothing for them (ptxsim's metrics: exactly 8 bytes per row fewer; memcheck would flag a
/// store through the null pointer), and each statistic can be left out on its own.
#[test]
fn forward_without_saved_statistics_in_every_tier() {
    if skip_without_kernels("forward_without_saved_statistics_in_every_tier") {
        return;
    }
    use testkit::sim::SIM_ARCHS;
    use warpnorm::layer_norm::{workspace_bytes, Direction};
    let props = DeviceProps::SIM;
    for arch in SIM_ARCHS {
        for (rows, cols) in TIER_SHAPES {
            let d = bf16_f32(rows, cols);
            let (x, _, g, b) = tier_data(rows, cols, 13);
            let mut sim = Sim::new(arch);
            let mut o = sim.dev.options().clone();
            o.metrics = true;
            sim.dev.set_options(o);
            let ws_bytes = workspace_bytes(&d, Direction::Forward, &props).unwrap();
            let ws = testkit::backend::row_norm_workspace(&mut sim, ws_bytes);
            let (px, pg, pb) = (sim.upload(&x, 0), sim.upload(&g, 0), sim.upload(&b, 0));
            let (pm, pr) = (sim.alloc::<f32>(rows, 0), sim.alloc::<f32>(rows, 0));
            let (pm2, pr2) = (sim.alloc::<f32>(rows, 0), sim.alloc::<f32>(rows, 0));
            // (y bits, mean and rstd bits where saved, global bytes stored, kernels)
            type Run = (
                Vec<u16>,
                Option<Vec<u32>>,
                Option<Vec<u32>>,
                u64,
                Vec<String>,
            );
            let mut run = |mean: Option<u64>, rstd: Option<u64>| -> Run {
                let py = sim.alloc::<bf16>(rows * cols, 0);
                let p = ForwardPtrs {
                    x: px,
                    y: py,
                    gamma: Some(pg),
                    beta: Some(pb),
                    mean,
                    rstd,
                    mean_lo: None,
                    workspace: ws,
                    workspace_bytes: ws_bytes as u64,
                };
                let plan = plan_forward(&d, &p, &props).unwrap();
                let stats = sim.run(&plan).unwrap_or_else(|e| panic!("{e}\n{plan}"));
                let stored = stats
                    .iter()
                    .map(|s| s.metrics.as_ref().unwrap().global_store_bytes)
                    .sum();
                let y = sim.download::<bf16>(py, rows * cols);
                let f = |p: Option<u64>| {
                    p.map(|p| {
                        sim.download::<f32>(p, rows)
                            .iter()
                            .map(|v| v.to_bits())
                            .collect()
                    })
                };
                let kernels = plan.launches.iter().map(|l| l.kernel.clone()).collect();
                let y = y.iter().map(|v| v.to_bits()).collect();
                (y, f(mean), f(rstd), stored, kernels)
            };
            let both = run(Some(pm), Some(pr));
            let none = run(None, None);
            let ctx = format!("compute_{arch} {rows}x{cols}");
            assert!(none.0 == both.0, "{ctx}: y without statistics differs");
            assert_eq!(none.4, both.4, "{ctx}: the same kernels");
            assert_eq!(
                both.3 - none.3,
                8 * rows as u64,
                "{ctx}: bytes stored with and without the statistics"
            );
            // One statistic alone: the other is not stored, the given one is the same.
            let mean_only = run(Some(pm2), None);
            let rstd_only = run(None, Some(pr2));
            assert!(mean_only.0 == both.0 && rstd_only.0 == both.0, "{ctx}: y");
            assert_eq!(mean_only.1, both.1, "{ctx}: mean alone");
            assert_eq!(rstd_only.2, both.2, "{ctx}: rstd alone");
            assert_eq!(
                both.3 - mean_only.3,
                4 * rows as u64,
                "{ctx}: rstd not stored"
            );
            assert_eq!(
                both.3 - rstd_only.3,
                4 * rows as u64,
                "{ctx}: mean not stored"
            );
        }
    }
}

/// The forward split tier's cooperative pass (one launch, every chunk held in shared memory
/// across the grid; bf16/f32 rows split on SIM): planned as one cooperative launch; a second
/// call on the same workspace gives the same bits, each call leaving the barrier counts zero;
/// the two-launch split tier (planned without cooperative launches) agrees with it up to the
/// merges' f32 roundings; and on a workspace whose counts were never zeroed every row comes
/// out NaN (no block finishes from partials it did not wait for), the counts zero after it.
#[test]
fn split_coop_pass_reruns_bitwise_and_a_dirty_workspace_shows_as_nan() {
    if skip_without_kernels("split_coop_pass_reruns_bitwise_and_a_dirty_workspace_shows_as_nan") {
        return;
    }
    use crate::support::plan_fwd_sim;
    use testkit::backend::barrier_is_zero;
    for (rows, cols) in [(2usize, 9000usize), (5, 20000)] {
        let n = rows * cols;
        let d = bf16_f32(rows, cols);
        let (x, _, g, b) = tier_data(rows, cols, 23);
        let mut sim = Sim::new(80);
        let props = DeviceProps::SIM;
        let (px, pg, pb) = (sim.upload(&x, 0), sim.upload(&g, 0), sim.upload(&b, 0));
        let f = plan_fwd_sim::<bf16>(&mut sim, &d, &props, px, 0, Some(pg), Some(pb)).unwrap();
        let (py, pm, pr, plo, ws) = (f.y, f.mean, f.rstd, f.mean_lo, f.workspace);
        let plan = f.plan;
        let l = &plan.launches;
        assert!(
            l.len() == 1 && l[0].cooperative && l[0].kernel.ends_with("_split_coop_vec"),
            "{rows}x{cols}:\n{plan}"
        );
        let mut runs = Vec::new();
        for _ in 0..2 {
            sim.run(&plan).unwrap();
            assert!(
                barrier_is_zero(&mut sim, ws),
                "{rows}x{cols}: counts left non-zero"
            );
            let y: Vec<u16> = sim
                .download::<bf16>(py, n)
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let stats: Vec<u32> = [pm, pr, plo]
                .iter()
                .flat_map(|&p| sim.download::<f32>(p, rows))
                .map(f32::to_bits)
                .collect();
            runs.push((y, stats));
        }
        assert!(runs[0] == runs[1], "{rows}x{cols}: the rerun differs");
        let (mean, rstd) = (sim.download::<f32>(pm, rows), sim.download::<f32>(pr, rows));
        // The two launches of the split tier: the same statistics up to the merge's roundings.
        let two = DeviceProps {
            cooperative_launch: false,
            ..props
        };
        let f2 = plan_fwd_sim::<bf16>(&mut sim, &d, &two, px, 0, Some(pg), Some(pb)).unwrap();
        let plan2 = f2.plan;
        assert!(
            plan2.launches.len() == 2 && plan2.launches.iter().all(|l| !l.cooperative),
            "{plan2}"
        );
        sim.run(&plan2).unwrap();
        let (mean2, rstd2) = (
            sim.download::<f32>(f2.mean, rows),
            sim.download::<f32>(f2.rstd, rows),
        );
        for r in 0..rows {
            assert!(
                (mean[r] - mean2[r]).abs() <= 1e-6 * rstd[r].recip()
                    && (rstd[r] - rstd2[r]).abs() <= 1e-6 * rstd[r],
                "{rows}x{cols} row {r}: ({}, {}) one launch, ({}, {}) two",
                mean[r],
                rstd[r],
                mean2[r],
                rstd2[r]
            );
        }
        // Counts never zeroed (here beyond any grid): no block waits, each finishes from NaN.
        sim.write(ws, &[f32::from_bits(1 << 30), f32::from_bits(0)]);
        sim.run(&plan).unwrap();
        let y: Vec<bf16> = sim.download(py, n);
        assert!(
            y.iter().all(|v| v.is_nan()),
            "{rows}x{cols}: a dirty workspace gave finite outputs"
        );
        assert!(
            barrier_is_zero(&mut sim, ws),
            "{rows}x{cols}: counts not reset"
        );
    }
}
