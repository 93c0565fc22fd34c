//! Coalescing of every global memory request of the normalization kernels on aligned shapes,
//! measured by ptxsim (`Metrics::uncoalesced_requests`: a request is uncoalesced when it
//! touches more 32-byte sectors than `ceil(distinct bytes its active lanes access / 32)`).
//!
//! # Aligned shapes (BatchNorm)
//! A BatchNorm shape is *aligned* for activation type `T` when every request a well-written kernel makes
//! can consist of whole 32-byte sectors:
//! - every buffer (activations, parameters, statistics, workspace) starts on a 32-byte
//!   boundary (the simulator allocates at 256 bytes; buffers are used without offsets);
//! - the innermost contiguous run of one channel's or one row's data is a whole number of
//!   sectors: for NCHW-style BatchNorm `S * sizeof(T)` is a multiple of 32 (S = the product of
//!   the spatial dims: S % 8 == 0 for f32, S % 16 == 0 for f16/bf16), for channels-last and
//!   `(N, C)` inputs `C * sizeof(T)` is a multiple of 32;
//! - per-channel f32 arrays (statistics, coefficients, partial results) are whole sectors: C is
//!   a multiple of 8 in both layouts.
//!
//! These imply the kernels' 16-byte vector variants. On other shapes some requests cannot be
//! coalesced (e.g. NCHW f32 with S = 4: each channel's slice is half a sector) and are not
//! checked here.
//!
//! Every plan comes from the planners (`plan_batch_norm_fwd` / `plan_batch_norm_bwd`) for
//! `DeviceProps::SIM`, as the other simulator tests make them; a failure names the kernel, the
//! PTX lines of the offending instructions (with the CUDA source line when the PTX has line
//! info) and their sector counts.
//!
//! Structure: shared helpers first, then one section per operator (a LayerNorm section can be
//! added next to the BatchNorm one).

use std::collections::BTreeSet;

use ptxsim::{LaunchStats, Metrics};
use testkit::coalescing::describe;
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::{DType, Plan};

// ------------------------------------------------------------------------ shared helpers

/// Runs `plan` on `sim`; returns the kernel name and the metrics of every launch.
fn run_plan(sim: &mut Sim, plan: &Plan) -> Vec<(String, Metrics)> {
    let stats: Vec<LaunchStats> = sim
        .run(plan)
        .unwrap_or_else(|e| panic!("compute_{}: {e}\n{plan}", sim.arch));
    plan.launches
        .iter()
        .zip(stats)
        .map(|(l, s)| (l.kernel.clone(), s.metrics.expect("metrics are on")))
        .collect()
}

/// Collects coalescing findings over many launches and fails with all of them at the end.
#[derive(Default)]
struct Findings {
    /// One description per launch with uncoalesced requests.
    bad: Vec<String>,
    /// Every kernel that ran.
    kernels: BTreeSet<String>,
    /// Launches checked.
    launches: usize,
}

impl Findings {
    /// Records the launches of one plan run on `arch` for case `what`.
    fn add(&mut self, what: &str, arch: u32, runs: Vec<(String, Metrics)>) {
        for (kernel, m) in runs {
            self.launches += 1;
            if m.uncoalesced_requests() != 0 {
                self.bad
                    .push(format!("[{what}] {}", describe(&kernel, arch, &m)));
            }
            self.kernels.insert(kernel);
        }
    }

    /// Fails listing every launch with uncoalesced requests.
    fn assert_clean(&self) {
        assert!(
            self.bad.is_empty(),
            "{} of {} launches made uncoalesced requests:\n{}",
            self.bad.len(),
            self.launches,
            self.bad.join("\n")
        );
    }
}

// ------------------------------------------------------------------------ BatchNorm

mod bn {
    use super::*;
    use crate::support::{make_input, Rng};
    use half::{bf16, f16};
    use warpnorm::batch_norm::{
        plan_backward, plan_forward, workspace_bytes, BackwardPtrs, BatchNormDesc, Direction,
        ForwardPtrs, Layout, Mode,
    };
    use warpnorm::{DeviceProps, Element};

    /// One aligned BatchNorm case.
    pub struct Case {
        pub dims: Vec<usize>,
        pub layout: Layout,
        pub dtype: DType,
        pub param_dtype: DType,
        /// Planned for a device without cooperative launches (the split tiers).
        pub split: bool,
    }

    /// True when `desc` is an aligned shape (see the file docs).
    pub fn aligned(desc: &BatchNormDesc) -> bool {
        let g = crate::support::ncs(desc).expect("valid shape");
        let t = desc.dtype.size() as u64;
        let inner = if g.nhwc { g.c } else { g.s };
        g.c.is_multiple_of(8) && (inner * t).is_multiple_of(32)
    }

    /// Runs the training forward, training backward, eval forward and eval backward plans of
    /// one case on `arch`; returns every launch's metrics.
    pub fn run_all(case: &Case, arch: u32) -> Vec<(String, Metrics)> {
        match (case.dtype, case.param_dtype) {
            (DType::F32, DType::F32) => run_typed::<f32, f32>(case, arch),
            (DType::F16, DType::F32) => run_typed::<f16, f32>(case, arch),
            (DType::BF16, DType::F32) => run_typed::<bf16, f32>(case, arch),
            (DType::F16, DType::F16) => run_typed::<f16, f16>(case, arch),
            (DType::BF16, DType::BF16) => run_typed::<bf16, bf16>(case, arch),
            (a, b) => panic!("unsupported dtype pair {a}/{b}"),
        }
    }

    fn run_typed<T: Element + Default, P: Element + Default>(
        case: &Case,
        arch: u32,
    ) -> Vec<(String, Metrics)> {
        let desc = BatchNormDesc::new(&case.dims, case.layout, case.dtype, case.param_dtype);
        assert!(aligned(&desc), "{:?} is not an aligned shape", case.dims);
        let g = crate::support::ncs(&desc).unwrap();
        let (numel, c) = (g.numel as usize, g.c as usize);
        let props = if case.split {
            crate::support::SIM_SPLIT
        } else {
            DeviceProps::SIM
        };
        let mut rng = Rng::new(11);
        let mut sim = Sim::new(arch);
        let x: Vec<T> = make_input(&desc, &mut rng);
        let dy: Vec<T> = (0..numel).map(|_| T::from_f64(rng.signed())).collect();
        let (px, pdy) = (sim.upload(&x, 0), sim.upload(&dy, 0));
        let param = |v: f64| vec![P::from_f64(v); c];
        let (gamma, beta) = (sim.upload(&param(1.5), 0), sim.upload(&param(0.25), 0));
        let (rm, rv) = (sim.upload(&param(0.0), 0), sim.upload(&param(1.0), 0));
        let cnt = sim.dev.alloc_zeroed(8).unwrap();
        let [y, dx] = [0; 2].map(|_| sim.alloc::<T>(numel, 0));
        let [sm, sml, si] = [0; 3].map(|_| sim.alloc::<f32>(c, 0));
        let [dg, db] = [0; 2].map(|_| sim.alloc::<P>(c, 0));
        let ws_bytes = workspace_bytes(&desc, Direction::Forward, &props).unwrap() as u64;
        let ws = crate::support::workspace(&mut sim, ws_bytes, c);
        let fwd = ForwardPtrs {
            x: px,
            y,
            gamma: Some(gamma),
            beta: Some(beta),
            running_mean: Some(rm),
            running_var: Some(rv),
            num_batches_tracked: Some(cnt),
            save_mean: Some(sm),
            save_mean_lo: Some(sml),
            save_invstd: Some(si),
            workspace: ws,
            workspace_bytes: ws_bytes,
        };
        let bwd = BackwardPtrs {
            x: px,
            dy: pdy,
            dx,
            gamma: Some(gamma),
            save_mean: sm,
            save_mean_lo: Some(sml),
            save_invstd: si,
            dgamma: Some(dg),
            dbeta: Some(db),
            workspace: ws,
            workspace_bytes: ws_bytes,
        };
        let mut out = Vec::new();
        for train in [true, false] {
            let mode = if train {
                Mode::train(0.1)
            } else {
                Mode::eval()
            };
            let plan = plan_forward(&desc.clone().with_mode(mode), &fwd, &props).unwrap();
            out.extend(run_plan(&mut sim, &plan));
            let plan = plan_backward(
                &desc.clone().with_mode(if !train {
                    Mode::eval()
                } else {
                    Mode::train(0.1)
                }),
                &bwd,
                &props,
            )
            .unwrap();
            out.extend(run_plan(&mut sim, &plan));
        }
        out
    }

    /// Aligned cases reaching every kernel tier on `DeviceProps::SIM` (4 SMs): split
    /// statistics and sums (few channel tiles, many rows), fused forward and backward (at least
    /// 8 channel tiles, small N * S), in NCHW, channels-last and (N, C) form.
    pub fn cases(dtype: DType, param_dtype: DType) -> Vec<Case> {
        use Layout::{ChannelsLast as Cl, Contiguous as Co};
        // Elements per sector: the unit of S (nchw) and C (nhwc) sizes.
        let e = 32 / dtype.size();
        let case = |dims: Vec<usize>, layout| Case {
            dims,
            layout,
            dtype,
            param_dtype,
            split: false,
        };
        vec![
            // nchw, cooperative: 8 channels whose x does not fit the fused tier's shared
            // memory (N * S * sizeof(T) = 64 KiB); and on a device without cooperative
            // launches, split reduction and apply.
            case(vec![64 / dtype.size(), 8, 32, 32], Co),
            Case {
                split: true,
                ..case(vec![64 / dtype.size(), 8, 32, 32], Co)
            },
            // nchw, fused: 16 channels of N * S = 2e.
            case(vec![2, 16, e], Co),
            // channels-last, cooperative: C = 2e (one tile), 512 rows; and on a device without
            // cooperative launches, split reduction, finalize and apply.
            case(vec![8, 2 * e, 8, 8], Cl),
            Case {
                split: true,
                ..case(vec![8, 2 * e, 8, 8], Cl)
            },
            // channels-last, fused: C = 8e = 16 vectors (8 tiles of 2 on SIM's 4 SMs), 64 rows.
            case(vec![4, 8 * e, 4, 4], Cl),
            // (N, C): 1024 rows of C = e.
            case(vec![1024, e.max(8)], Co),
            // (N, C) with several channel tiles: C = 32 vectors + 2e.
            case(vec![64, (32 * 16 / dtype.size()) + 2 * e], Co),
        ]
    }
}

/// Every BatchNorm launch of the training and eval forward and backward on aligned shapes, for
/// f32, bf16 and f16 activations with f32 and activation-typed parameters, on compute_90; the
/// NCHW case of each dtype pair (cooperative and split) also on compute_75 and compute_80.
#[test]
fn batch_norm_aligned_shapes_are_fully_coalesced() {
    if skip_without_kernels("batch_norm_aligned_shapes_are_fully_coalesced") {
        return;
    }
    let mut f = Findings::default();
    for (dt, pt) in [
        (DType::F32, DType::F32),
        (DType::BF16, DType::F32),
        (DType::BF16, DType::BF16),
        (DType::F16, DType::F32),
        (DType::F16, DType::F16),
    ] {
        let mut pair = Findings::default();
        for (i, case) in bn::cases(dt, pt).iter().enumerate() {
            let archs: &[u32] = if i < 2 { &[75, 80, 90] } else { &[90] };
            for &arch in archs {
                let what = format!(
                    "{dt}/{pt} {:?} {:?}{}",
                    case.dims,
                    case.layout,
                    if case.split { " split" } else { "" }
                );
                pair.add(&what, arch, bn::run_all(case, arch));
            }
        }
        // Every tier ran: the cooperative passes (and the channels-last eval-mode one), split
        // statistics and sums, both finalizes,
        // both applies, the eval
        // (frozen-statistics) apply of eval forward and eval-mode backward, the fused forward
        // and backward, in both layouts.
        let mut want = vec![
            format!("warpnorm_batch_norm_fwd_{pt}params_finalize"),
            format!("warpnorm_batch_norm_bwd_{pt}params_finalize"),
        ];
        for dir in ["fwd", "bwd"] {
            for l in ["nchw", "nhwc"] {
                want.push(format!("warpnorm_batch_norm_{dir}_{dt}_coop_{l}_vec"));
            }
        }
        want.push(format!(
            "warpnorm_batch_norm_bwd_{dt}_{pt}params_eval_coop_nhwc_vec"
        ));
        for l in ["nchw", "nhwc"] {
            want.push(format!("warpnorm_batch_norm_fwd_{dt}_stats_{l}_vec"));
            want.push(format!("warpnorm_batch_norm_bwd_{dt}_reduce_{l}_vec"));
            want.push(format!(
                "warpnorm_batch_norm_fwd_{dt}_{pt}params_eval_apply_{l}_vec"
            ));
            for dir in ["fwd", "bwd"] {
                want.push(format!("warpnorm_batch_norm_{dir}_{dt}_apply_{l}_vec"));
                want.push(format!(
                    "warpnorm_batch_norm_{dir}_{dt}_{pt}params_fused_{l}_vec"
                ));
            }
        }
        let missed: Vec<_> = want.iter().filter(|k| !pair.kernels.contains(*k)).collect();
        assert!(missed.is_empty(), "{dt}/{pt}: never ran {missed:?}");
        f.bad.extend(pair.bad);
        f.kernels.extend(pair.kernels);
        f.launches += pair.launches;
    }
    f.assert_clean();
}
