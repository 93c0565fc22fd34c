//! BatchNorm in place on ptxsim: `y == x` forward (training, fused or not, and eval) and
//! `dx == dy` backward (training and eval-mode) give the same bits as out of place on every
//! simulated arch, for every case of the coverage set (every activation dtype, layout, access
//! variant and the fused tiers), with racecheck and initcheck on: every kernel reads an
//! element before the element is written. A forward without saved statistics (`save_mean` /
//! `save_invstd` None, training or eval) gives the same y and running statistics. Eval's
//! forward and eval-mode dx alone run without a workspace (0 bytes at address 0).

use std::collections::BTreeSet;

use crate::support::{coverage_cases, make_input, ncs, plans_cooperative, Case, Rng, SIM_SPLIT};
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::batch_norm::{
    plan_backward, plan_forward, workspace_bytes, BackwardPtrs, Direction, ForwardPtrs, Mode,
};
use warpnorm::{kernels, DType, DeviceProps, Element};

/// The bits of a download (through f64, which holds every f32, f16 and bf16 exactly).
fn bits<T: Element + Default>(sim: &Sim, p: u64, n: usize) -> Vec<u64> {
    sim.download::<T>(p, n)
        .iter()
        .map(|v| v.to_f64().to_bits())
        .collect()
}

/// One case, apart and in place, in training and in eval; returns the kernels run.
fn case_in_place<T: Element + Default, P: Element + Default>(
    sim: &mut Sim,
    case: &Case,
    props: &DeviceProps,
) -> Vec<String> {
    let props = *props;
    let desc = case.desc();
    let g = ncs(&desc).unwrap();
    let (n, c) = (g.numel as usize, g.c as usize);
    let mut rng = Rng::new(case.seed + 40);
    let x: Vec<T> = make_input(&desc, &mut rng);
    let dy: Vec<T> = (0..n).map(|_| T::from_f64(rng.signed())).collect();
    let gamma: Vec<P> = (0..c)
        .map(|_| P::from_f64(1.0 + 0.5 * rng.signed()))
        .collect();
    let beta: Vec<P> = (0..c).map(|_| P::from_f64(0.5 * rng.signed())).collect();
    let rm0: Vec<P> = (0..c).map(|_| P::from_f64(rng.signed())).collect();
    let rv0: Vec<P> = (0..c).map(|_| P::from_f64(1.0 + rng.unit())).collect();
    let ws_bytes = workspace_bytes(&desc, Direction::Forward, &props)
        .unwrap()
        .max(workspace_bytes(&desc, Direction::Backward, &props).unwrap());
    let ws = crate::support::workspace(sim, ws_bytes as u64, c);
    let (pg, pb) = (sim.upload(&gamma, 0), sim.upload(&beta, 0));
    let affine = case.affine;
    let mut kernels = Vec::new();
    let off = case.offset;
    for training in [true, false] {
        let mode = if training {
            Mode {
                batch_stats: true,
                momentum: case.momentum,
            }
        } else {
            Mode::eval()
        };
        let d = desc.clone().with_mode(mode);
        let ctx = format!("compute_{} {case:?} training {training}", sim.arch);
        // Forward: every output's bits, with fresh running statistics and counter each run.
        let mut forward =
            |sim: &mut Sim, in_place: bool, save: bool| -> (Vec<Vec<u64>>, u64, u64, u64) {
                let px = sim.upload(&x, off);
                let py = if in_place { px } else { sim.alloc::<T>(n, off) };
                let (rm, rv) = (sim.upload(&rm0, 0), sim.upload(&rv0, 0));
                let cnt = sim.dev.alloc_zeroed(8).unwrap();
                let (sm, sl, si) = (
                    sim.alloc::<f32>(c, 0),
                    sim.alloc::<f32>(c, 0),
                    sim.alloc::<f32>(c, 0),
                );
                let p = ForwardPtrs {
                    x: px,
                    y: py,
                    gamma: affine.then_some(pg),
                    beta: affine.then_some(pb),
                    running_mean: Some(rm),
                    running_var: Some(rv),
                    num_batches_tracked: Some(cnt),
                    save_mean: save.then_some(sm),
                    save_mean_lo: save.then_some(sl),
                    save_invstd: save.then_some(si),
                    // Eval runs without a workspace (its one launch reads none: memcheck
                    // would report a read of address 0).
                    workspace: if training { ws } else { 0 },
                    workspace_bytes: if training { ws_bytes as u64 } else { 0 },
                };
                let plan = plan_forward(&d, &p, &props).unwrap();
                sim.run(&plan)
                    .unwrap_or_else(|e| panic!("{ctx} in place {in_place}: {e}\n{plan}"));
                kernels.extend(plan.launches.iter().map(|l| l.kernel.clone()));
                let counter = sim.dev.read_slice::<i64>(cnt, 1).unwrap()[0] as u64;
                let out = vec![
                    bits::<T>(sim, py, n),
                    bits::<f32>(sim, sm, c),
                    bits::<f32>(sim, si, c),
                    bits::<P>(sim, rm, c),
                    bits::<P>(sim, rv, c),
                    vec![counter],
                    bits::<f32>(sim, sl, c),
                ];
                (out, sm, sl, si)
            };
        let (apart, sm, sl, si) = forward(sim, false, true);
        let (inplace, _, _, _) = forward(sim, true, true);
        // Without saved statistics (training or eval): the same y and running statistics.
        let (unsaved, _, _, _) = forward(sim, false, false);
        for k in [0, 3, 4, 5] {
            assert!(
                apart[k] == unsaved[k],
                "{ctx}: output {k} without saved statistics"
            );
        }
        for (k, what) in [
            "y",
            "save_mean",
            "save_invstd",
            "running_mean",
            "running_var",
            "num_batches_tracked",
            "save_mean_lo",
        ]
        .iter()
        .enumerate()
        {
            assert!(
                apart[k] == inplace[k],
                "{ctx}: forward {what} in place differs"
            );
        }
        // Backward (eval-mode after an eval forward) from the saved statistics, dx == dy; with
        // and (eval) without the parameters' gradients.
        let mut backward = |sim: &mut Sim, in_place: bool, grads: bool| -> Vec<Vec<u64>> {
            let px = sim.upload(&x, off);
            let pdy = sim.upload(&dy, off);
            let pdx = if in_place {
                pdy
            } else {
                sim.alloc::<T>(n, off)
            };
            let (dg, db) = (sim.alloc::<P>(c, 0), sim.alloc::<P>(c, 0));
            let p = BackwardPtrs {
                x: px,
                dy: pdy,
                dx: pdx,
                gamma: affine.then_some(pg),
                save_mean: sm,
                save_mean_lo: Some(sl),
                save_invstd: si,
                dgamma: grads.then_some(dg),
                dbeta: grads.then_some(db),
                // Eval-mode dx alone runs without a workspace.
                workspace: if training || grads { ws } else { 0 },
                workspace_bytes: if training || grads {
                    ws_bytes as u64
                } else {
                    0
                },
            };
            let plan = plan_backward(&d, &p, &props).unwrap();
            sim.run(&plan)
                .unwrap_or_else(|e| panic!("{ctx} in place {in_place}: {e}\n{plan}"));
            kernels.extend(plan.launches.iter().map(|l| l.kernel.clone()));
            vec![
                bits::<T>(sim, pdx, n),
                bits::<P>(sim, dg, c),
                bits::<P>(sim, db, c),
            ]
        };
        let apart = backward(sim, false, true);
        let inplace = backward(sim, true, true);
        for (k, what) in ["dx", "dgamma", "dbeta"].iter().enumerate() {
            assert!(
                apart[k] == inplace[k],
                "{ctx}: backward {what} in place differs"
            );
        }
        if !training {
            // Eval-mode dx without the gradients (the eval apply over dy) has the bits of the
            // one-sweep dx the sums write with them, apart and in place.
            for in_place in [false, true] {
                let dx = &backward(sim, in_place, false)[0];
                assert!(
                    *dx == apart[0],
                    "{ctx}: eval dx without gradients (in place {in_place}) differs"
                );
            }
        }
    }
    kernels
}

fn run_arch(arch: u32) {
    if skip_without_kernels(&format!("in_place_compute_{arch}")) {
        return;
    }
    use half::{bf16, f16};
    let mut hit = BTreeSet::new();
    let cases = coverage_cases();
    let nonempty = cases
        .iter()
        .filter(|c| c.dims.iter().product::<usize>() > 0);
    // The cases that take the cooperative passes once more without them (the split tiers).
    let split = nonempty
        .clone()
        .filter(|c| plans_cooperative(c, &DeviceProps::SIM))
        .map(|c| (c, SIM_SPLIT));
    for (case, props) in nonempty.map(|c| (c, DeviceProps::SIM)).chain(split) {
        let mut sim = Sim::new(arch);
        let sim = &mut sim;
        let k = match (case.dtype, case.param_dtype) {
            (DType::F32, DType::F32) => case_in_place::<f32, f32>(sim, case, &props),
            (DType::F16, DType::F32) => case_in_place::<f16, f32>(sim, case, &props),
            (DType::BF16, DType::F32) => case_in_place::<bf16, f32>(sim, case, &props),
            (DType::F16, DType::F16) => case_in_place::<f16, f16>(sim, case, &props),
            (DType::BF16, DType::BF16) => case_in_place::<bf16, bf16>(sim, case, &props),
            (a, b) => panic!("unsupported dtype pair {a}/{b}"),
        };
        hit.extend(k);
    }
    // Every kernel that reads or writes activations ran in place.
    let missed: Vec<_> = kernels::all_entries()
        .filter(|k| k.starts_with("warpnorm_batch_norm_") && !k.contains("params_finalize"))
        .filter(|k| !hit.contains(*k))
        .collect();
    assert!(
        missed.is_empty(),
        "compute_{arch}: never run in place: {missed:?}"
    );
}

#[test]
fn in_place_matches_out_of_place_compute_80() {
    run_arch(80);
}

#[test]
fn in_place_matches_out_of_place_compute_75() {
    run_arch(75);
}

#[test]
fn in_place_matches_out_of_place_compute_90() {
    run_arch(90);
}
