//! RMSNorm memory access quality on ptxsim (compute_80 PTX, plans for `DeviceProps::SIM`), as
//! `tests/layer_norm/coalescing.rs` checks LayerNorm's (the kernels share their bodies, but
//! RMSNorm's loads, stores and saved statistics are its own instantiations):
//!
//! - coalescing: on aligned shapes every global request of every launch - forward, backward
//!   and the finalize, in every tier (the forward's split tier both as the cooperative pass
//!   and as the two launches a device without cooperative launches gets), for every dtype
//!   pair - touches exactly its ideal number of 32-byte sectors (ptxsim's per-request metric:
//!   0 uncoalesced requests), and every tier's vector kernel and each parameter dtype's
//!   finalize ran;
//! - traffic: the backward's unique global bytes stay within 1.02 x the minimum (read x and
//!   dy, write dx) for 512 rows of D up to 8192.

use crate::support::{make_data, run_on, Case, Data, Views, DTYPE_PAIRS};
use half::{bf16, f16};
use ptxsim::LaunchStats;
use std::collections::{BTreeMap, BTreeSet};
use testkit::backend::Backend;
use testkit::coalescing::describe;
use testkit::rows::VEC_TIERS;
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::abi::WnLayerNormFinalizeArgs;
use warpnorm::{DType, DeviceProps, Element, Executor, Plan};

const ARCH: u32 = 80;

/// The simulated device without cooperative launches: its plans take the two-launch split
/// tier (split_stats, split_norm) where SIM's take the cooperative pass.
const NO_COOP: DeviceProps = DeviceProps {
    cooperative_launch: false,
    ..DeviceProps::SIM
};

/// The simulator, keeping every launch's statistics (kernel name, stats) in run order.
struct Recording {
    sim: Sim,
    runs: Vec<(String, LaunchStats)>,
}

impl Executor for Recording {
    fn props(&self) -> &DeviceProps {
        &self.sim.props
    }

    fn execute(&mut self, plan: &Plan) -> warpnorm::Result<()> {
        let stats = self
            .sim
            .run(plan)
            .map_err(|e| warpnorm::Error::InvalidArgument {
                what: "ptxsim launch".into(),
                message: format!("{e}\n{plan}"),
            })?;
        let names = plan.launches.iter().map(|l| l.kernel.clone());
        self.runs.extend(names.zip(stats));
        Ok(())
    }
}

impl Backend for Recording {
    fn alloc<T: Element>(&mut self, n: usize, offset: usize) -> u64 {
        self.sim.alloc::<T>(n, offset)
    }

    fn upload<T: Element>(&mut self, data: &[T], offset: usize) -> u64 {
        self.sim.upload(data, offset)
    }

    fn write<T: Element>(&mut self, ptr: u64, data: &[T]) {
        self.sim.write(ptr, data)
    }

    fn download<T: Element + Default>(&mut self, ptr: u64, n: usize) -> Vec<T> {
        self.sim.download(ptr, n)
    }

    fn upload_i64(&mut self, v: i64) -> u64 {
        Backend::upload_i64(&mut self.sim, v)
    }

    fn download_i64(&mut self, ptr: u64) -> i64 {
        Backend::download_i64(&mut self.sim, ptr)
    }
}

/// What one case's forward and backward did.
struct Traced {
    /// Every launch of the forward, then of the backward.
    runs: Vec<(String, LaunchStats)>,
    /// Both plans, for failure messages.
    plans: String,
    /// The backward finalize's (partial rows, stride in floats), if it ran.
    fin: Option<(u64, u64)>,
}

fn run<T: Element + Default, P: Element + Default>(case: &Case, props: &DeviceProps) -> Traced {
    let data: Data<T, P> = make_data(case);
    let mut be = Recording {
        sim: Sim::new(ARCH),
        runs: Vec::new(),
    };
    let (_, ran) = run_on::<T, P>(
        &mut be,
        &case.desc(),
        props,
        Views::Aligned,
        &data.x,
        &data.dy,
        data.weight.as_deref(),
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let fin = ran.bwd.launches.last().and_then(|l| {
        let a = l.args.get::<WnLayerNormFinalizeArgs>()?;
        Some((a.part_rows as u64, a.part_stride as u64))
    });
    Traced {
        runs: be.runs,
        plans: format!("{}{}", ran.fwd, ran.bwd),
        fin,
    }
}

fn run_dyn(case: &Case, props: &DeviceProps) -> Traced {
    match (case.dtype, case.param_dtype) {
        (DType::F32, DType::F32) => run::<f32, f32>(case, props),
        (DType::F16, DType::F16) => run::<f16, f16>(case, props),
        (DType::F16, DType::F32) => run::<f16, f32>(case, props),
        (DType::BF16, DType::BF16) => run::<bf16, bf16>(case, props),
        (DType::BF16, DType::F32) => run::<bf16, f32>(case, props),
        (t, p) => panic!("no coalescing case for {t}/{p}"),
    }
}

fn case(rows: usize, cols: usize, dtype: DType, param_dtype: DType) -> Case {
    Case {
        rows,
        cols,
        dtype,
        param_dtype,
        weight: true,
        views: Views::Aligned,
        seed: 7,
        x_offset: 0.0,
    }
}

#[test]
fn aligned_rms_norm_requests_are_all_coalesced() {
    if skip_without_kernels("aligned_rms_norm_requests_are_all_coalesced") {
        return;
    }
    let mut ran = BTreeSet::new();
    let mut failures = Vec::new();
    // Per kernel: (uncoalesced requests, requests, sectors, ideal sectors), for the log.
    let mut totals = BTreeMap::<String, [u64; 4]>::new();
    for (dtype, param_dtype) in DTYPE_PAIRS {
        // (rows, cols) reaching each tier on SIM in both directions, with several backward
        // blocks so that the finalize runs (the shapes of the LayerNorm test, whose tiers
        // RMSNorm's plans share): subwarp, warp, block (teams of 128), block (one 512-thread
        // team), split (few long rows), split (rows longer than a block).
        let r = 2 * 512u64.div_ceil(3 * dtype.size() as u64) as usize + 3;
        for (rows, cols) in [
            (r, 64),
            (r, 512),
            (r, 1024),
            (r / 2, 8192),
            (2, 8192),
            (r / 8, 16384),
        ] {
            let c = case(rows, cols, dtype, param_dtype);
            let mut traces = vec![run_dyn(&c, &DeviceProps::SIM)];
            if traces[0]
                .runs
                .iter()
                .any(|(k, _)| k.contains("_split_coop_"))
            {
                // The two-launch split tier too: what a device without cooperative launches
                // runs for the same shape.
                traces.push(run_dyn(&c, &NO_COOP));
            }
            for (kernel, stats) in traces.iter().flat_map(|t| &t.runs) {
                ran.insert(kernel.clone());
                let m = stats.metrics.as_ref().expect("metrics are on");
                let e = totals.entry(kernel.clone()).or_default();
                e[0] += m.uncoalesced_requests();
                e[1] += m.global_requests();
                e[2] += m.global_sectors();
                e[3] += m.global_ideal_sectors();
                if m.uncoalesced_requests() > 0 {
                    failures.push(format!(
                        "{dtype}/{param_dtype} {rows}x{cols}: {}",
                        describe(kernel, ARCH, m)
                    ));
                }
            }
        }
    }
    for (kernel, [bad, requests, sectors, ideal]) in &totals {
        eprintln!("{kernel}: {bad} / {requests} uncoalesced requests, {sectors} / {ideal} sectors");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for (t, p) in DTYPE_PAIRS {
        let pair = format!("{}_{}", t.name(), p.name());
        for tier in VEC_TIERS {
            let name = format!("warpnorm_rms_norm_{}", tier.replace("{}", &pair));
            assert!(ran.contains(&name), "{name} was not measured: {ran:?}");
        }
        let name = format!("warpnorm_rms_norm_bwd_{}_finalize", p.name());
        assert!(ran.contains(&name), "{name} was not measured");
    }
}

#[test]
fn rms_norm_backward_unique_bytes_within_two_percent_of_the_minimum() {
    if skip_without_kernels("rms_norm_backward_unique_bytes_within_two_percent_of_the_minimum") {
        return;
    }
    // The backward's launches only: the forward ran first in the same trace. The partial
    // dweight rows are written by the main kernel and read by the finalize, so the per-launch
    // sum counts them twice; the plan's unique bytes subtract that overlap (part_rows *
    // part_stride floats).
    let mut report = Vec::new();
    for dtype in [DType::F32, DType::BF16] {
        for cols in [768usize, 1024, 4096, 8192] {
            let rows = 512;
            let t = run_dyn(&case(rows, cols, dtype, dtype), &DeviceProps::SIM);
            let fwd_launches = t.runs.iter().filter(|(k, _)| k.contains("_fwd_")).count();
            let sum: u64 = t.runs[fwd_launches..]
                .iter()
                .map(|(_, s)| s.metrics.as_ref().expect("metrics are on").unique_bytes)
                .sum();
            let overlap = t
                .fin
                .map_or(0, |(part_rows, stride)| part_rows * stride * 4);
            let min = 3 * dtype.size() as u64 * (rows * cols) as u64;
            let ratio = (sum - overlap) as f64 / min as f64;
            report.push(format!(
                "{dtype} {rows}x{cols}: unique/min = {ratio:.4}\n{}",
                t.plans
            ));
            assert!((1.0..=1.02).contains(&ratio), "{}", report.join("\n"));
        }
    }
    eprintln!("{}", report.join("\n"));
}
