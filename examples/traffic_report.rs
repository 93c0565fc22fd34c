//! Memory-traffic report from ptxsim's metrics: for LayerNorm and BatchNorm plans, the unique
//! global bytes touched (first touch of each 32-byte sector: a lower bound on DRAM traffic)
//! against each op's minimum. (Coalescing per request is not summarized here yet: ptxsim's
//! `Metrics` has sectors per request, but requests mix vector, scalar and broadcast accesses,
//! so a single ratio would mislead.)
//!
//! `cargo run --release --example traffic_report > reports/traffic.md` (needs the kernels built).
//!
//! Plans are made for `DeviceProps::SIM` (4 SMs) on ~1-2 M element problems: the extra traffic
//! of per-block partial results scales as blocks / rows, so a 4-SM device with a few thousand
//! rows has the same ratio as an H200 (132 SMs) with ~30x more rows, which would take too long
//! to simulate. The H200 column gives that ratio computed from the H200 plan's grid.

#[path = "../tests/common/sim.rs"]
mod sim;

use warpnorm::batch_norm::{self as bn, BatchNormDesc, ForwardMode, Layout};
use warpnorm::layer_norm::{self as ln, Affine, Direction, LayerNormDesc};
use warpnorm::{kernels, DType, DeviceProps, Element, Plan};

struct Traffic {
    unique: u64,
}

fn run(s: &mut sim::Sim, plan: &Plan) -> Traffic {
    let stats = s.run(plan).unwrap_or_else(|e| panic!("ptxsim: {e}"));
    Traffic {
        unique: stats
            .iter()
            .map(|st| st.metrics.as_ref().expect("metrics are on").unique_bytes)
            .sum(),
    }
}

fn sim() -> sim::Sim {
    let mut s = sim::Sim::new(90);
    let mut o = s.dev.options().clone();
    o.metrics = true;
    s.dev.set_options(o);
    s
}

fn fill<T: Element>(n: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f64(((i * 7919) % 1000) as f64 / 500.0 - 1.0))
        .collect()
}

fn row(op: &str, shape: &str, dt: &str, min: f64, t: &Traffic, h200: Option<f64>) {
    println!(
        "| {op} | {shape} | {dt} | {:.0} | {:.4} | {} |",
        min,
        t.unique as f64 / min,
        h200.map_or("-".into(), |r| format!("{r:.4}"))
    );
}

fn layer_norm<T: Element + Default>(cols: usize) {
    let props = DeviceProps::SIM;
    let rows = (1usize << 20) / cols;
    let s_ = T::DTYPE.size() as f64;
    let desc = LayerNormDesc::new(
        &[rows, cols],
        &[cols],
        T::DTYPE,
        DType::F32,
        Affine::WeightBias,
        1e-5,
    )
    .expect("desc");
    let mut s = sim();
    let x = s.upload(&fill::<T>(rows * cols), 0);
    let dy = s.upload(&fill::<T>(rows * cols), 0);
    let g = s.upload(&fill::<f32>(cols), 0);
    let b = s.upload(&fill::<f32>(cols), 0);
    let y = s.alloc::<T>(rows * cols, 0);
    let dx = s.alloc::<T>(rows * cols, 0);
    let m = s.alloc::<f32>(rows, 0);
    let r = s.alloc::<f32>(rows, 0);
    let dg = s.alloc::<f32>(cols, 0);
    let db = s.alloc::<f32>(cols, 0);
    let ws_bytes = ln::workspace_bytes(&desc, Direction::Backward, &props)
        .unwrap()
        .max(ln::workspace_bytes(&desc, Direction::Forward, &props).unwrap());
    let ws = s.alloc::<f32>(ws_bytes.div_ceil(4).max(1), 0);
    let fp = ln::FwdPtrs {
        x,
        y,
        gamma: Some(g),
        beta: Some(b),
        mean: m,
        rstd: r,
        workspace: ws,
        workspace_bytes: ws_bytes as u64,
    };
    let bp = ln::BwdPtrs {
        x,
        dy,
        dx,
        gamma: Some(g),
        mean: m,
        rstd: r,
        dgamma: Some(dg),
        dbeta: Some(db),
        workspace: ws,
        workspace_bytes: ws_bytes as u64,
    };
    let n = (rows * cols) as f64;
    let shape = format!("{rows} x {cols}");
    let dt = format!("{}/f32", T::DTYPE);
    let fwd = run(&mut s, &ln::plan_fwd(&desc, &fp, &props).expect("plan"));
    row("LayerNorm fwd", &shape, &dt, 2.0 * s_ * n, &fwd, None);
    let bwd = run(&mut s, &ln::plan_bwd(&desc, &bp, &props).expect("plan"));
    // On an H200 with 16384 rows: partial rows = the backward grid's blocks x cols x 2 f32,
    // written once and read once by finalize.
    let h_desc = LayerNormDesc::new(
        &[16384, cols],
        &[cols],
        T::DTYPE,
        DType::F32,
        Affine::WeightBias,
        1e-5,
    )
    .unwrap();
    let h_ws = ln::workspace_bytes(&h_desc, Direction::Backward, &DeviceProps::H200).unwrap();
    let hp = ln::BwdPtrs {
        workspace_bytes: h_ws as u64,
        ..bp
    };
    let h_plan = ln::plan_bwd(&h_desc, &hp, &DeviceProps::H200).unwrap();
    let blocks = h_plan.launches[0].blocks() as f64;
    let h_min = 3.0 * s_ * 16384.0 * cols as f64;
    let h_ratio = (h_min + 2.0 * blocks * cols as f64 * 8.0) / h_min;
    row(
        "LayerNorm bwd",
        &shape,
        &dt,
        3.0 * s_ * n,
        &bwd,
        Some(h_ratio),
    );
}

fn batch_norm<T: Element + Default>(dims: &[usize], layout: Layout) {
    let props = DeviceProps::SIM;
    let s_ = T::DTYPE.size() as f64;
    let desc = BatchNormDesc::new(dims, layout, T::DTYPE, DType::F32);
    let c = dims[1];
    let n: usize = dims.iter().product();
    let mut s = sim();
    let x = s.upload(&fill::<T>(n), 0);
    let dy = s.upload(&fill::<T>(n), 0);
    let y = s.alloc::<T>(n, 0);
    let dx = s.alloc::<T>(n, 0);
    let g = s.upload(&vec![1.0f32; c], 0);
    let b = s.upload(&vec![0.0f32; c], 0);
    let rm = s.upload(&vec![0.0f32; c], 0);
    let rv = s.upload(&vec![1.0f32; c], 0);
    let nbt = s.dev.alloc_zeroed(8).unwrap();
    let sm = s.alloc::<f32>(c, 0);
    let si = s.alloc::<f32>(c, 0);
    let dg = s.alloc::<f32>(c, 0);
    let db = s.alloc::<f32>(c, 0);
    let ws = s.alloc::<f32>(bn::workspace_len(&desc, &props).unwrap().max(1), 0);
    let fp = bn::FwdPtrs {
        x,
        y,
        gamma: Some(g),
        beta: Some(b),
        running_mean: Some(rm),
        running_var: Some(rv),
        num_batches_tracked: Some(nbt),
        save_mean: Some(sm),
        save_invstd: Some(si),
        workspace: ws,
    };
    let bp = bn::BwdPtrs {
        x,
        dy,
        dx,
        gamma: Some(g),
        save_mean: sm,
        save_invstd: si,
        dgamma: Some(dg),
        dbeta: Some(db),
        workspace: ws,
    };
    let shape = format!("{dims:?} {layout:?}");
    let dt = format!("{}/f32", T::DTYPE);
    let n = n as f64;
    let t = run(
        &mut s,
        &bn::plan_batch_norm_fwd(&desc, &ForwardMode::train(0.1), &fp, &props).unwrap(),
    );
    row("BatchNorm train fwd", &shape, &dt, 3.0 * s_ * n, &t, None);
    let t = run(
        &mut s,
        &bn::plan_batch_norm_bwd(&desc, false, &bp, &props).unwrap(),
    );
    row("BatchNorm train bwd", &shape, &dt, 5.0 * s_ * n, &t, None);
    let t = run(
        &mut s,
        &bn::plan_batch_norm_fwd(&desc, &ForwardMode::eval(), &fp, &props).unwrap(),
    );
    row("BatchNorm eval fwd", &shape, &dt, 2.0 * s_ * n, &t, None);
}

fn main() {
    if !kernels::BUILT {
        println!("kernels not built: {}", kernels::NOT_BUILT_REASON);
        return;
    }
    println!(
        "# Simulated memory traffic (ptxsim metrics, compute_90 PTX, planned for a 4-SM device)\n"
    );
    println!(
        "min = the op's minimum DRAM bytes (LayerNorm fwd 2s, bwd 3s; BatchNorm train fwd 3s, \
         train bwd 5s, eval fwd 2s per element, s = activation bytes). unique/min counts every \
         32-byte sector touched once (parameters, statistics and partial results included). \
         H200 16384 rows: the same ratio for an H200 plan with 16384 rows, from its grid.\n"
    );
    println!("| op | shape | dtype | min bytes | unique/min | H200 16384 rows |");
    println!("|---|---|---|---|---|---|");
    for cols in [768, 1024, 4096, 8192] {
        layer_norm::<f32>(cols);
        layer_norm::<half::bf16>(cols);
    }
    for (dims, layout) in [
        (vec![8usize, 64, 32, 32], Layout::Contiguous),
        (vec![8, 64, 32, 32], Layout::ChannelsLast),
        (vec![131072, 8], Layout::Contiguous),
        (vec![16, 256, 7, 7], Layout::Contiguous),
    ] {
        batch_norm::<f32>(&dims, layout);
        batch_norm::<half::bf16>(&dims, layout);
    }
}
