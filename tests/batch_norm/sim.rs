//! BatchNorm kernels on ptxsim (compute_75/80/90) against the CPU reference.
//!
//! Plans are made for `DeviceProps::SIM` (a 4-SM GPU), so the split reductions are reached with
//! small shapes. Every arch runs a coverage set (every activation dtype x layout x access
//! variant, both parameter dtypes, misaligned views) and then a sample of the sweep
//! C in {1, 3, 64, 1000} x N * spatial in {2, 7, 64, 1000, 65539}: compute_80 runs every sweep
//! case up to about a million elements, compute_75 and compute_90 every other one; the
//! coverage cases that take the cooperative passes run again on a device without cooperative
//! launches (the split tiers). Each test asserts that every BatchNorm kernel entry point ran
//! on its arch.

use std::collections::BTreeSet;

use crate::support::{coverage_cases, plans_cooperative, run_on, sweep_cases, Case, SIM_SPLIT};
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::batch_norm::Layout;
use warpnorm::{kernels, DType, DeviceProps};

fn run_arch(arch: u32) {
    let name = format!("sweep_compute_{arch}");
    if skip_without_kernels(&name) {
        return;
    }
    let mut hit = BTreeSet::new();
    let mut cases = coverage_cases();
    let sweep = sweep_cases();
    let big = |c: &Case| c.dims.iter().product::<usize>() > 300_000;
    cases.extend(
        sweep
            .into_iter()
            .enumerate()
            .filter(|(i, c)| arch == 80 || (i % 2 == (arch == 90) as usize && !big(c)))
            .map(|(_, c)| c),
    );
    for case in &cases {
        let mut sim = Sim::new(arch);
        let k = run_on(&mut sim, case, &DeviceProps::SIM)
            .unwrap_or_else(|e| panic!("compute_{arch}: {e}"));
        hit.extend(k);
    }
    // A device without cooperative launches takes the split tiers where SIM takes the
    // cooperative passes: those coverage cases once more on such a device.
    for case in coverage_cases()
        .iter()
        .filter(|c| plans_cooperative(c, &DeviceProps::SIM))
    {
        let mut sim = Sim::new(arch);
        let k = run_on(&mut sim, case, &SIM_SPLIT)
            .unwrap_or_else(|e| panic!("compute_{arch}, no cooperative launches: {e}"));
        hit.extend(k);
    }
    let all: BTreeSet<String> = kernels::all_entries()
        .filter(|k| k.starts_with("warpnorm_batch_norm_"))
        .map(String::from)
        .collect();
    let missed: Vec<_> = all.difference(&hit).collect();
    assert!(
        missed.is_empty(),
        "compute_{arch}: kernels never run: {missed:?}"
    );
    assert!(
        hit.is_subset(&all),
        "planned kernels missing from the build: {:?}",
        hit.difference(&all)
    );
}

#[test]
fn sweep_compute_75() {
    run_arch(75);
}

#[test]
fn sweep_compute_80() {
    run_arch(80);
}

#[test]
fn sweep_compute_90() {
    run_arch(90);
}

/// Runs a training forward + backward of one f32 case and returns every output's bits.
fn outputs_bits(arch: u32, dims: &[usize], layout: Layout, threads: usize) -> Vec<u32> {
    use warpnorm::batch_norm::{plan_backward, plan_forward, workspace_bytes, Direction};
    use warpnorm::batch_norm::{BackwardPtrs, BatchNormDesc, ForwardPtrs, Mode};
    let desc = BatchNormDesc::new(dims, layout, DType::F32, DType::F32);
    let g = crate::support::ncs(&desc).unwrap();
    let (n, c) = (g.numel as usize, g.c as usize);
    let mut rng = crate::support::Rng::new(7);
    let x: Vec<f32> = (0..n)
        .map(|_| (3.0 * rng.signed() + 100.0) as f32)
        .collect();
    let dy: Vec<f32> = (0..n).map(|_| rng.signed() as f32).collect();
    let mut sim = Sim::new(arch);
    let mut o = sim.dev.options().clone();
    o.threads = threads;
    sim.dev.set_options(o);
    let props = DeviceProps::SIM;
    let (dx_, dy_) = (sim.upload(&x, 0), sim.upload(&dy, 0));
    let rm = sim.upload(&vec![0.0f32; c], 0);
    let rv = sim.upload(&vec![1.0f32; c], 0);
    let cnt = sim.dev.alloc_zeroed(8).unwrap();
    let [y, dxo] = [sim.alloc::<f32>(n, 0), sim.alloc::<f32>(n, 0)];
    let [sm, sml, si, dg, db] = [0; 5].map(|_| sim.alloc::<f32>(c, 0));
    let ws_bytes = workspace_bytes(&desc, Direction::Forward, &props).unwrap() as u64;
    let ws = crate::support::workspace(&mut sim, ws_bytes, c);
    let fp = ForwardPtrs {
        x: dx_,
        y,
        gamma: None,
        beta: None,
        running_mean: Some(rm),
        running_var: Some(rv),
        num_batches_tracked: Some(cnt),
        save_mean: Some(sm),
        save_mean_lo: Some(sml),
        save_invstd: Some(si),
        workspace: ws,
        workspace_bytes: ws_bytes,
    };
    sim.run(
        &plan_forward(
            &desc.clone().with_mode(Mode::train_cumulative()),
            &fp,
            &props,
        )
        .unwrap(),
    )
    .unwrap();
    let bp = BackwardPtrs {
        x: dx_,
        dy: dy_,
        dx: dxo,
        gamma: None,
        save_mean: sm,
        save_mean_lo: Some(sml),
        save_invstd: si,
        dgamma: Some(dg),
        dbeta: Some(db),
        workspace: ws,
        workspace_bytes: ws_bytes,
    };
    sim.run(&plan_backward(&desc, &bp, &props).unwrap())
        .unwrap();
    let mut bits = Vec::new();
    for (p, len) in [
        (y, n),
        (dxo, n),
        (sm, c),
        (si, c),
        (rm, c),
        (rv, c),
        (dg, c),
        (db, c),
    ] {
        bits.extend(sim.download::<f32>(p, len).iter().map(|v| v.to_bits()));
    }
    bits
}

#[test]
fn reruns_are_bitwise_identical() {
    if skip_without_kernels("reruns_are_bitwise_identical") {
        return;
    }
    // Split reductions in both layouts (SIM plans > 1 split for these).
    for (dims, layout) in [
        (vec![3usize, 2, 2000], Layout::Contiguous),
        (vec![2, 12, 25, 40], Layout::ChannelsLast),
    ] {
        let a = outputs_bits(80, &dims, layout, 1);
        let b = outputs_bits(80, &dims, layout, 0);
        let c = outputs_bits(80, &dims, layout, 3);
        assert!(a == b && b == c, "{dims:?}: results differ between runs");
    }
}

#[test]
fn empty_batch_counts_and_keeps_statistics_on_ptxsim() {
    use warpnorm::batch_norm::{plan_backward, plan_forward, workspace_bytes, Direction};
    use warpnorm::batch_norm::{BackwardPtrs, BatchNormDesc, ForwardPtrs, Mode};
    if skip_without_kernels("empty_batch_counts_and_keeps_statistics_on_ptxsim") {
        return;
    }
    for arch in testkit::sim::SIM_ARCHS {
        let desc = BatchNormDesc::new(&[0, 3, 2, 2], Layout::Contiguous, DType::F32, DType::F32);
        let props = DeviceProps::SIM;
        let mut sim = Sim::new(arch);
        let rm = sim.upload(&[0.5f32, 0.25, -1.0], 0);
        let rv = sim.upload(&[2.0f32, 3.0, 4.0], 0);
        let cnt = sim.dev.alloc(8).unwrap();
        sim.dev.write_slice(cnt, &[5i64]).unwrap();
        let [sm, si, dg, db] = [0; 4].map(|_| sim.alloc::<f32>(3, 0));
        let ws_bytes = workspace_bytes(&desc, Direction::Forward, &props).unwrap() as u64;
        let ws = crate::support::workspace(&mut sim, ws_bytes, 3);
        let x = sim.alloc::<f32>(0, 0);
        let fp = ForwardPtrs {
            x,
            y: x,
            gamma: None,
            beta: None,
            running_mean: Some(rm),
            running_var: Some(rv),
            num_batches_tracked: Some(cnt),
            save_mean: Some(sm),
            save_mean_lo: None,
            save_invstd: Some(si),
            workspace: ws,
            workspace_bytes: ws_bytes,
        };
        sim.run(
            &plan_forward(
                &desc.clone().with_mode(Mode::train_cumulative()),
                &fp,
                &props,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(sim.dev.read_slice::<i64>(cnt, 1).unwrap(), [6]);
        assert_eq!(sim.download::<f32>(rm, 3), [0.5, 0.25, -1.0]);
        assert_eq!(sim.download::<f32>(rv, 3), [2.0, 3.0, 4.0]);
        sim.run(&plan_forward(&desc.clone().with_mode(Mode::eval()), &fp, &props).unwrap())
            .unwrap();
        assert_eq!(sim.dev.read_slice::<i64>(cnt, 1).unwrap(), [6]);
        let bp = BackwardPtrs {
            x,
            dy: x,
            dx: x,
            gamma: None,
            save_mean: sm,
            save_mean_lo: None,
            save_invstd: si,
            dgamma: Some(dg),
            dbeta: Some(db),
            workspace: ws,
            workspace_bytes: ws_bytes,
        };
        sim.run(&plan_backward(&desc, &bp, &props).unwrap())
            .unwrap();
        assert_eq!(sim.download::<f32>(dg, 3), [0.0; 3]);
        assert_eq!(sim.download::<f32>(db, 3), [0.0; 3]);
    }
}

/// An f32 training forward's buffers on `sim`: random x (seed `seed`), y, the saved
/// statistics and a zeroed workspace for `props`, no parameters or running statistics.
fn stats_forward(
    sim: &mut Sim,
    desc: &warpnorm::batch_norm::BatchNormDesc,
    props: &DeviceProps,
    seed: u64,
) -> (Vec<f32>, warpnorm::batch_norm::ForwardPtrs) {
    use warpnorm::batch_norm::{workspace_bytes, Direction, ForwardPtrs};
    let g = crate::support::ncs(desc).unwrap();
    let (n, c) = (g.numel as usize, g.c as usize);
    let mut rng = crate::support::Rng::new(seed);
    let x: Vec<f32> = (0..n).map(|_| rng.signed() as f32).collect();
    let px = sim.upload(&x, 0);
    let y = sim.alloc::<f32>(n, 0);
    let [sm, sml, si] = [0; 3].map(|_| sim.alloc::<f32>(c, 0));
    let ws_bytes = workspace_bytes(desc, Direction::Forward, props).unwrap() as u64;
    let ws = crate::support::workspace(sim, ws_bytes, c);
    let fp = ForwardPtrs {
        x: px,
        y,
        save_mean: Some(sm),
        save_mean_lo: Some(sml),
        save_invstd: Some(si),
        workspace: ws,
        workspace_bytes: ws_bytes,
        ..ForwardPtrs::default()
    };
    (x, fp)
}

/// The reductions that finalize in their last block, and the cooperative passes' grid barrier,
/// count arrivals in the workspace, which must be zeroed before its first use. One that never
/// was (a counter at or past the split count, or the grid's block count) does not finish from
/// partials that are not all there, and no block waits forever: the call writes NaN
/// statistics and outputs for the channels concerned, the mistake shows, and a zeroed
/// workspace recovers.
#[test]
fn a_workspace_never_zeroed_shows_as_nan() {
    use warpnorm::abi::{WnBatchNormStatsArgs, WN_BN_FOLD};
    use warpnorm::batch_norm::{plan_forward, BatchNormDesc, Mode};
    if skip_without_kernels("a_workspace_never_zeroed_shows_as_nan") {
        return;
    }
    let desc = BatchNormDesc::new(&[3, 2, 2000], Layout::Contiguous, DType::F32, DType::F32)
        .with_mode(Mode::train(0.1));
    let (n, c) = (12000usize, 2usize);
    for props in [crate::support::SIM_SPLIT, DeviceProps::SIM] {
        let mut sim = Sim::new(80);
        let (x, fp) = stats_forward(&mut sim, &desc, &props, 3);
        let (y, sm, ws) = (fp.y, fp.save_mean.unwrap(), fp.workspace);
        let plan = plan_forward(&desc, &fp, &props).unwrap();
        if props.cooperative_launch {
            assert!(plan.launches[0].cooperative, "{plan}");
        } else {
            let a: WnBatchNormStatsArgs = plan.launches[0].args.get().unwrap();
            assert!(plan.launches[0].grid[1] > 1, "one split needs no counter");
            assert_eq!(a.f.flags & WN_BN_FOLD, WN_BN_FOLD);
        }
        // Counters left at a large value, as garbage would be.
        sim.write(ws, &[f32::from_bits(0xffff_fff0); 8]);
        sim.run(&plan).unwrap();
        let mean = sim.download::<f32>(sm, c);
        let out = sim.download::<f32>(y, n);
        assert!(mean.iter().all(|v| v.is_nan()), "save_mean {mean:?}");
        assert!(out.iter().all(|v| v.is_nan()), "y not NaN");
        // Again: still garbage (never reset), still NaN.
        sim.run(&plan).unwrap();
        assert!(sim.download::<f32>(sm, c).iter().all(|v| v.is_nan()));
        // Zeroed: the statistics of x, and the counters back at zero after the call.
        sim.write(ws, &[0.0f32; 8]);
        sim.run(&plan).unwrap();
        let mean = sim.download::<f32>(sm, c);
        for (ch, m) in mean.iter().enumerate() {
            let want: f64 = (0..3)
                .flat_map(|b| &x[(b * 2 + ch) * 2000..(b * 2 + ch + 1) * 2000])
                .map(|&v| v as f64)
                .sum::<f64>()
                / 6000.0;
            assert!(
                (*m as f64 - want).abs() < 1e-6,
                "channel {ch}: {m} vs {want}"
            );
        }
        assert!(crate::support::tickets_are_zero(&mut sim, ws, c));
    }
}

/// The channels-last cooperative pass's two grid barriers on a workspace that was never
/// zeroed: a garbage first count gives NaN statistics and outputs, a garbage second count
/// (the statistics already finished) NaN outputs; no block waits forever, and a zeroed
/// workspace recovers, its counters back at zero after the call.
#[test]
fn a_channels_last_cooperative_pass_on_a_workspace_never_zeroed_shows_as_nan() {
    use warpnorm::batch_norm::{plan_forward, BatchNormDesc, Mode};
    if skip_without_kernels("a_channels_last_cooperative_pass_on_a_workspace_never_zeroed") {
        return;
    }
    // (N, C) = (3000, 4): one channel tile of f32 vectors, split over the grid.
    let (rows, c) = (3000usize, 4usize);
    let desc = BatchNormDesc::new(&[rows, c], Layout::Contiguous, DType::F32, DType::F32)
        .with_mode(Mode::train(0.1));
    let props = DeviceProps::SIM;
    let n = rows * c;
    let mut sim = Sim::new(90);
    let (x, fp) = stats_forward(&mut sim, &desc, &props, 5);
    let (y, sm, ws) = (fp.y, fp.save_mean.unwrap(), fp.workspace);
    let plan = plan_forward(&desc, &fp, &props).unwrap();
    assert_eq!(plan.launches.len(), 1, "{plan}");
    assert!(plan.launches[0].cooperative, "{plan}");
    assert!(plan.launches[0].grid[0] > 1, "{plan}");
    let want: Vec<f64> = (0..c)
        .map(|ch| (0..rows).map(|r| x[r * c + ch] as f64).sum::<f64>() / rows as f64)
        .collect();
    let garbage = f32::from_bits(0xffff_fff0);
    // Each barrier has two counters (arrivals, departures). Both barriers' garbage: NaN
    // statistics and outputs.
    sim.write(ws, &[garbage; 4]);
    sim.run(&plan).unwrap();
    assert!(sim.download::<f32>(sm, c).iter().all(|v| v.is_nan()));
    assert!(
        sim.download::<f32>(y, n).iter().all(|v| v.is_nan()),
        "y not NaN"
    );
    // The second alone: the statistics are right, the outputs NaN.
    sim.write(ws, &[0.0f32, 0.0, garbage, garbage]);
    sim.write(y, &vec![0.0f32; n]);
    sim.run(&plan).unwrap();
    let mean = sim.download::<f32>(sm, c);
    for (m, w) in mean.iter().zip(&want) {
        assert!((*m as f64 - w).abs() < 1e-6, "{m} vs {w}");
    }
    assert!(
        sim.download::<f32>(y, n).iter().all(|v| v.is_nan()),
        "y not NaN"
    );
    // Zeroed: the statistics and y of x, the counters back at zero.
    sim.write(ws, &[0.0f32; 4]);
    sim.run(&plan).unwrap();
    assert!(sim.download::<f32>(y, n).iter().all(|v| v.is_finite()));
    let mean = sim.download::<f32>(sm, c);
    for (m, w) in mean.iter().zip(&want) {
        assert!((*m as f64 - w).abs() < 1e-6, "{m} vs {w}");
    }
    assert!(crate::support::tickets_are_zero(&mut sim, ws, c));
}
