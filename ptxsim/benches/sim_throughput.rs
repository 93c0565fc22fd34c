//! ptxsim throughput benchmark: a LayerNorm-like kernel (warp-per-row, shuffle reductions,
//! float4 loads) over `PTXSIM_BENCH_ROWS` (default 4096) rows x `PTXSIM_BENCH_D` (default 1024)
//! f32, compiled by nvcc for compute_80, run on 1 worker thread and on all cores. The output is
//! checked against an f64 host reference before anything is timed. Prints simulated
//! thread-instructions per second per core (target: >= 20 million).
//!
//! Run: `cargo bench -p ptxsim --bench sim_throughput`. Without nvcc it prints why and exits 0
//! (PTXSIM_REQUIRE_NVCC=1 makes that a failure).

#[allow(dead_code)]
#[path = "../tests/common/nvcc.rs"]
mod nvcc;

#[path = "../tests/common/layernorm_ref.rs"]
mod layernorm_ref;

use layernorm_ref::{layernorm_f64, layernorm_inputs, max_scaled_error};

use ptxsim::{Arg, Device, LaunchConfig, LaunchStats, Module, Options};
use std::path::Path;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Run {
    stats: LaunchStats,
    y: Vec<f32>,
}

fn run(
    m: &Module,
    opts: Options,
    rows: usize,
    d: usize,
    data: &(Vec<f32>, Vec<f32>, Vec<f32>),
) -> Run {
    let mut dev = Device::with_options(opts);
    let px = dev.alloc(rows * d * 4).expect("alloc x");
    dev.write_slice(px, &data.0).expect("write x");
    let pg = dev.alloc(d * 4).expect("alloc gamma");
    dev.write_slice(pg, &data.1).expect("write gamma");
    let pb = dev.alloc(d * 4).expect("alloc beta");
    dev.write_slice(pb, &data.2).expect("write beta");
    let py = dev.alloc(rows * d * 4).expect("alloc y");
    let pm = dev.alloc(rows * 4).expect("alloc mean");
    let pr = dev.alloc(rows * 4).expect("alloc rstd");
    let block = 128u32;
    let grid = (rows as u32 * 32).div_ceil(block);
    let cfg = LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        shared_mem_bytes: 0,
    };
    let args = [
        Arg::Ptr(px),
        Arg::Ptr(pg),
        Arg::Ptr(pb),
        Arg::Ptr(py),
        Arg::Ptr(pm),
        Arg::Ptr(pr),
        Arg::I32(rows as i32),
        Arg::I32(d as i32),
        Arg::F32(1e-5),
    ];
    let stats = dev
        .launch(m, "layernorm_fwd_warp", cfg, &args)
        .unwrap_or_else(|e| panic!("launch failed: {e}"));
    let y = dev.read_slice(py, rows * d).expect("read y");
    Run { stats, y }
}

fn main() {
    let rows = env_usize("PTXSIM_BENCH_ROWS", 4096);
    let d = env_usize("PTXSIM_BENCH_D", 1024);
    assert!(
        d & 127 == 0 && d <= 1024,
        "PTXSIM_BENCH_D must be a multiple of 128 up to 1024"
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/cuda/layernorm_bench.cu");
    let Some(ptx) = nvcc::compile_file(&src, "compute_80") else {
        println!("sim_throughput: skipped (no nvcc)");
        return;
    };
    let m = Module::parse(&ptx).unwrap_or_else(|e| panic!("parse: {e}"));
    let data = layernorm_inputs(rows, d);
    let reference = layernorm_f64(&data.0, &data.1, &data.2, rows, d, 1e-5);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("sim_throughput: LayerNorm fwd, {rows} rows x {d} f32, warp per row, compute_80 PTX");

    let configs: [(&str, usize, bool); 3] = [
        ("1 thread, checks on", 1, true),
        ("1 thread, checks off", 1, false),
        ("all cores, checks on", 0, true),
    ];
    for (label, threads, checks) in configs {
        let opts = Options {
            threads,
            racecheck: checks,
            initcheck: checks,
            metrics: false,
            ..Options::default()
        };
        let r = run(&m, opts, rows, d, &data);
        let worst = max_scaled_error(&r.y, &reference, 1e-4, 1e-4);
        assert!(
            worst <= 1.0,
            "{label}: output differs from the f64 reference (worst scaled error {worst:.3})"
        );
        let used = if threads == 0 { cores } else { threads };
        let secs = r.stats.wall.as_secs_f64();
        let rate = r.stats.thread_instructions as f64 / secs;
        println!(
            "  {label:<22} {:>12} thread-instr in {:>7.3} s: {:>7.2} M thread-instr/s, {:>7.2} M/s/core ({used} cores), {:.2} M warp-instr/s",
            r.stats.thread_instructions,
            secs,
            rate / 1e6,
            rate / 1e6 / used as f64,
            r.stats.warp_instructions as f64 / secs / 1e6,
        );
    }
    println!("  target: >= 20 M thread-instructions/s/core");
}
