//! LayerNorm memory access quality on ptxsim (compute_80 PTX, planned for `DeviceProps::SIM`):
//!
//! - coalescing: for aligned shapes (buffers 256-byte aligned, D a multiple of the vector
//!   width) every global request of every launch - forward, backward and the finalize, in
//!   every tier (subwarp, warp, block, split: the forward's cooperative pass, and its
//!   two-launch form planned for a device without cooperative launches), f32/f32, bf16/bf16
//!   and the mixed pairs
//!   f16/f32 and bf16/f32 (f16/bf16 activations with f32 gamma/beta: 8-byte activation and
//!   16-byte parameter accesses) - touches exactly its ideal number of 32-byte sectors
//!   (ptxsim's per-request metric: 0 uncoalesced requests);
//! - traffic: the backward's unique global bytes stay within 1.02 x the minimum (read x, dy;
//!   write dx) for 512 rows of D up to 8192.

use crate::support::{make_data, Case, Data, Views};
use ptxsim::LaunchStats;
use testkit::rows::VEC_TIERS;
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::abi::WnLayerNormFinalizeArgs;
use warpnorm::cpu::layer_norm::forward as cpu_forward;
use warpnorm::layer_norm::{
    plan_backward, plan_forward, workspace_bytes, Affine, BackwardPtrs, Direction, ForwardPtrs,
};
use warpnorm::{kernels, DType, DeviceProps, Element, Plan};

const ARCH: u32 = 80;

/// The simulated device without cooperative launches: its plans take the two-launch split
/// tier (split_stats, split_norm) where SIM's take the cooperative pass.
const NO_COOP: DeviceProps = DeviceProps {
    cooperative_launch: false,
    ..DeviceProps::SIM
};

/// Forward and backward plans of a case on aligned buffers, with each launch's statistics.
struct Traced {
    runs: Vec<(String, LaunchStats)>,
    plans: String,
    /// The backward finalize's (partial rows, stride in floats, partial arrays), if it ran.
    fin: Option<(u64, u64, u64)>,
}

fn run<T: Element + Default, P: Element + Default>(
    case: &Case,
    forward: bool,
    props: &DeviceProps,
) -> Traced {
    let desc = case.desc();
    let (m, d) = (case.rows, case.cols);
    let data: Data<T, P> = make_data(case);
    let mut sim = Sim::new(ARCH);
    let px = sim.upload(&data.x, 0);
    let pg = data.gamma.as_ref().map(|g| sim.upload(g, 0));
    let pb = data.beta.as_ref().map(|b| sim.upload(b, 0));
    let mut runs = Vec::new();
    let mut plans = String::new();
    let mut exec = |sim: &mut Sim, plan: &Plan| {
        let stats = sim.run(plan).unwrap_or_else(|e| panic!("{e}\n{plan}"));
        plans += &plan.to_string();
        for (l, s) in plan.launches.iter().zip(stats) {
            runs.push((l.kernel.clone(), s));
        }
    };
    if forward {
        let py = sim.alloc::<T>(m * d, 0);
        let pmean = sim.alloc::<f32>(m, 0);
        let prstd = sim.alloc::<f32>(m, 0);
        let plo = sim.alloc::<f32>(m, 0);
        let ws = workspace_bytes(&desc, Direction::Forward, props).unwrap();
        let pw = testkit::backend::row_norm_workspace(&mut sim, ws);
        let p = ForwardPtrs {
            x: px,
            y: py,
            gamma: pg,
            beta: pb,
            mean: Some(pmean),
            rstd: Some(prstd),
            mean_lo: Some(plo),
            workspace: pw,
            workspace_bytes: ws as u64,
        };
        exec(&mut sim, &plan_forward(&desc, &p, props).unwrap());
    }
    let r =
        cpu_forward::<T, P>(&desc, &data.x, data.gamma.as_deref(), data.beta.as_deref()).unwrap();
    let pdy = sim.upload(&data.dy, 0);
    let pdx = sim.alloc::<T>(m * d, 0);
    let pmean = sim.upload(&r.mean, 0);
    let prstd = sim.upload(&r.rstd, 0);
    let plo = sim.upload(&r.mean_lo, 0);
    let pdg = data.gamma.as_ref().map(|_| sim.alloc::<P>(d, 0));
    let pdb = data.beta.as_ref().map(|_| sim.alloc::<P>(d, 0));
    let ws = workspace_bytes(&desc, Direction::Backward, props).unwrap();
    let pw = testkit::backend::row_norm_workspace(&mut sim, ws);
    let p = BackwardPtrs {
        x: px,
        dy: pdy,
        dx: pdx,
        gamma: pg,
        mean: pmean,
        rstd: prstd,
        mean_lo: Some(plo),
        dgamma: pdg,
        dbeta: pdb,
        workspace: pw,
        workspace_bytes: ws as u64,
    };
    let bwd = plan_backward(&desc, &p, props).unwrap();
    exec(&mut sim, &bwd);
    let fin = bwd.launches.last().and_then(|l| {
        let a = l.args.get::<WnLayerNormFinalizeArgs>()?;
        let arrays = u64::from(a.dgamma_part != 0) + u64::from(a.dbeta_part != 0);
        Some((a.part_rows as u64, a.part_stride as u64, arrays))
    });
    Traced { runs, plans, fin }
}

fn run_dyn(case: &Case, forward: bool, props: &DeviceProps) -> Traced {
    use half::{bf16, f16};
    match (case.dtype, case.param_dtype) {
        (DType::F32, DType::F32) => run::<f32, f32>(case, forward, props),
        (DType::BF16, DType::BF16) => run::<bf16, bf16>(case, forward, props),
        (DType::F16, DType::F32) => run::<f16, f32>(case, forward, props),
        (DType::BF16, DType::F32) => run::<bf16, f32>(case, forward, props),
        (t, p) => panic!("no coalescing case for {t}/{p}"),
    }
}

fn case(rows: usize, cols: usize, dtype: DType) -> Case {
    case_pair(rows, cols, dtype, dtype)
}

fn case_pair(rows: usize, cols: usize, dtype: DType, param_dtype: DType) -> Case {
    Case {
        rows,
        cols,
        dtype,
        param_dtype,
        affine: Affine::WeightBias,
        views: Views::Aligned,
        seed: 5,
        x_offset: 0.0,
    }
}

/// The PTX text of a line of the LayerNorm module, for failure messages.
fn ptx_line(line: usize) -> String {
    kernels::ptx("layer_norm", ARCH)
        .and_then(|t| t.lines().nth(line.saturating_sub(1)))
        .unwrap_or("?")
        .trim()
        .to_string()
}

/// Runs every tier of each (activation, parameter) pair of `pairs`, forward and backward, on
/// aligned shapes; fails listing every launch with an uncoalesced request, and unless every
/// tier's vector kernel and the finalize of each pair ran.
fn assert_all_coalesced(pairs: &[(DType, DType)]) {
    let mut tiers = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    // Per kernel: (uncoalesced requests, requests, sectors, ideal sectors), for the report.
    let mut totals = std::collections::BTreeMap::<String, [u64; 4]>::new();
    // (rows, cols) reaching each tier on SIM in both directions (bwd with several blocks, so
    // that the finalize runs): subwarp, warp, block (teams of 128), block (one 512-thread
    // team), split (few long rows), split (rows longer than a block).
    for &(dtype, param_dtype) in pairs {
        let r = 2 * 512u64.div_ceil(3 * dtype.size() as u64) as usize + 3;
        for (rows, cols) in [
            (r, 64),
            (r, 512),
            (r, 1024),
            (r / 2, 8192),
            (2, 8192),
            (r / 8, 16384),
        ] {
            let c = case_pair(rows, cols, dtype, param_dtype);
            let mut traces = vec![run_dyn(&c, true, &DeviceProps::SIM)];
            if traces[0]
                .runs
                .iter()
                .any(|(k, _)| k.contains("_split_coop_"))
            {
                // The two-launch split tier too: what a device without cooperative launches
                // runs for the same shape.
                traces.push(run_dyn(&c, true, &NO_COOP));
            }
            for (kernel, stats) in traces.iter().flat_map(|t| &t.runs) {
                tiers.insert(kernel.clone());
                let m = stats.metrics.as_ref().expect("metrics are on");
                let e = totals.entry(kernel.clone()).or_default();
                e[0] += m.uncoalesced_requests();
                e[1] += m.global_load_requests + m.global_store_requests;
                e[2] += m.global_load_sectors + m.global_store_sectors;
                e[3] += m.global_load_ideal_sectors + m.global_store_ideal_sectors;
                if m.uncoalesced_requests() > 0 {
                    let lines: Vec<String> = m
                        .uncoalesced_lines
                        .iter()
                        .take(6)
                        .map(|l| format!("  {l}: {}", ptx_line(l.line)))
                        .collect();
                    failures.push(format!(
                        "{kernel} ({dtype}/{param_dtype} {rows}x{cols}): {} uncoalesced \
                         requests, {} excess sectors\n{}",
                        m.uncoalesced_requests(),
                        m.excess_sectors(),
                        lines.join("\n")
                    ));
                }
            }
            if failures.len() > 12 {
                break;
            }
        }
    }
    for (kernel, [bad, requests, sectors, ideal]) in &totals {
        eprintln!("{kernel}: {bad} / {requests} uncoalesced requests, {sectors} / {ideal} sectors");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every tier and the finalize were measured, for every pair.
    for &(t, p) in pairs {
        let dtype = format!("{}_{}", t.name(), p.name());
        for k in VEC_TIERS {
            let name = format!("warpnorm_layer_norm_{}", k.replace("{}", &dtype));
            assert!(tiers.contains(&name), "{name} was not measured: {tiers:?}");
        }
        let name = format!("warpnorm_layer_norm_bwd_{}_finalize", p.name());
        assert!(tiers.contains(&name), "{name} was not measured");
    }
}

#[test]
fn aligned_layer_norm_requests_are_all_coalesced() {
    if skip_without_kernels("aligned_layer_norm_requests_are_all_coalesced") {
        return;
    }
    assert_all_coalesced(&[(DType::F32, DType::F32), (DType::BF16, DType::BF16)]);
}

/// f16/bf16 activations with f32 gamma/beta: 4-element packs (8-byte activation accesses,
/// 16-byte parameter accesses), so that no parameter request spans twice its sectors.
#[test]
fn aligned_mixed_precision_requests_are_all_coalesced() {
    if skip_without_kernels("aligned_mixed_precision_requests_are_all_coalesced") {
        return;
    }
    assert_all_coalesced(&[(DType::F16, DType::F32), (DType::BF16, DType::F32)]);
}

#[test]
fn backward_unique_bytes_within_two_percent_of_the_minimum() {
    if skip_without_kernels("backward_unique_bytes_within_two_percent_of_the_minimum") {
        return;
    }
    // ptxsim counts unique sectors per launch. The partial rows are written by the main
    // kernel and read by the finalize, so the per-launch sum counts them twice; the plan's
    // unique bytes (every sector once, the target's measure) subtract that overlap, which is
    // exactly the partial rows: part_rows * part_stride floats per array, 32-byte aligned.
    let mut report = Vec::new();
    for dtype in [DType::F32, DType::BF16] {
        for cols in [768usize, 1024, 4096, 8192] {
            let rows = 512;
            let c = case(rows, cols, dtype);
            let t = run_dyn(&c, false, &DeviceProps::SIM);
            let sum: u64 = t
                .runs
                .iter()
                .map(|(_, s)| s.metrics.as_ref().expect("metrics are on").unique_bytes)
                .sum();
            let overlap: u64 = t.fin.map_or(0, |(part_rows, stride, arrays)| {
                part_rows * stride * 4 * arrays
            });
            let min = 3 * dtype.size() as u64 * (rows * cols) as u64;
            let (ratio, twice) = ((sum - overlap) as f64 / min as f64, sum as f64 / min as f64);
            report.push(format!(
                "{dtype} {rows}x{cols}: unique/min = {ratio:.4} (partial rows counted at write \
                 and read: {twice:.4})\n{}",
                t.plans
            ));
            assert!((1.0..=1.02).contains(&ratio), "{}", report.join("\n"));
        }
    }
    eprintln!("{}", report.join("\n"));
}
