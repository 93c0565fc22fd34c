//! BatchNorm kernels on ptxsim (compute_75/80/90) against the CPU reference.
//!
//! Plans are made for `DeviceProps::SIM` (a 4-SM GPU), so the split reductions are reached with
//! small shapes. Every arch runs a coverage set (every activation dtype x layout x access
//! variant, both parameter dtypes, misaligned views) and then a sample of the sweep
//! C in {1, 3, 64, 1000} x N * spatial in {2, 7, 64, 1000, 65539}: compute_80 runs every sweep
//! case up to about a million elements, compute_75 and compute_90 every other one. Each test
//! asserts that every BatchNorm kernel entry point ran on its arch.

use std::collections::BTreeSet;

use crate::support::{coverage_cases, run_on, sweep_cases, Case};
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
    let ws = sim.alloc::<f32>(ws_bytes as usize / 4, 0);
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
        let ws = sim.alloc::<f32>(ws_bytes as usize / 4, 0);
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
