//! Memory-traffic metrics on CUDA kernels (`tests/cuda/checks_metrics.cu`, compiled by nvcc for
//! compute_75, compute_80 and compute_90), checked against values worked out by hand from each
//! kernel's access pattern: sectors per request of coalesced, strided and vector copies, bank
//! conflicts of a shared-memory transpose with and without padding, unique bytes, instruction
//! counts and barriers. Without nvcc each test prints why and passes (set PTXSIM_REQUIRE_NVCC=1
//! to make that a failure).
//!
//! `overhead` (ignored by default) measures the cost of checks and metrics per launch:
//! `cargo test --release -p ptxsim --test checks_metrics -- --ignored --nocapture`.

mod common;

use common::{cfg, cfg1, launch, nvcc, parse};
use ptxsim::{Arg, Device, InstrClass, LaunchConfig, Metrics, Module, Options};

const FILE: &str = "checks_metrics.cu";

fn device(checks: bool, metrics: bool) -> Device {
    Device::with_options(Options {
        threads: 2,
        racecheck: checks,
        initcheck: checks,
        metrics,
        ..Options::default()
    })
}

fn for_archs(f: impl Fn(&str, &str, &Module)) {
    let Some(all) = nvcc::compile_all(FILE) else {
        return;
    };
    for (arch, ptx) in all {
        let m = parse(&ptx, &format!("{FILE} ({arch})"));
        f(arch, &ptx, &m);
    }
}

/// Runs `entry` on a fresh device with every check on; returns the metrics and the output.
fn run(
    ptx: &str,
    m: &Module,
    entry: &str,
    c: LaunchConfig,
    input: &[f32],
    n_arg: i32,
) -> (Metrics, Vec<f32>) {
    let mut dev = device(true, true);
    let pin = dev.alloc(input.len() * 4).unwrap();
    dev.write_slice(pin, input).unwrap();
    let pout = dev.alloc(input.len() * 4).unwrap();
    let s = launch(
        &mut dev,
        m,
        ptx,
        entry,
        c,
        &[Arg::Ptr(pin), Arg::Ptr(pout), Arg::I32(n_arg)],
    );
    assert!(
        s.reports.is_empty(),
        "{entry}: unexpected reports: {:?}",
        s.reports.iter().map(|r| r.to_string()).collect::<Vec<_>>()
    );
    let out = dev.read_slice(pout, input.len()).unwrap();
    (s.metrics.expect("metrics on"), out)
}

fn input(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.5 - 7.0).collect()
}

#[test]
fn coalesced_copy_is_four_sectors_per_request() {
    for_archs(|arch, ptx, m| {
        let n = 4096;
        let x = input(n);
        let (mt, out) = run(ptx, m, "copy_f32", cfg1(32, 128), &x, n as i32);
        assert_eq!(out, x, "copy_f32 ({arch})");
        // 32 blocks x 4 warps, one load and one store request each, 128 bytes = 4 sectors.
        assert_eq!(mt.global_load_requests, 128, "{arch}\n{mt}");
        assert_eq!(mt.global_store_requests, 128, "{arch}\n{mt}");
        assert_eq!(
            (mt.global_load_sectors, mt.global_store_sectors),
            (512, 512),
            "{arch}\n{mt}"
        );
        assert_eq!(mt.load_sectors_per_request(), 4.0);
        assert_eq!(mt.sectors_per_request(), 4.0);
        assert_eq!(
            (mt.global_load_bytes, mt.global_store_bytes),
            (16384, 16384)
        );
        // Unique bytes: input plus output.
        assert_eq!(mt.unique_bytes, 2 * 4 * n as u64, "{arch}\n{mt}");
        assert_eq!(
            (mt.unique_load_bytes, mt.unique_store_bytes),
            (16384, 16384)
        );
        assert_eq!(mt.shared_load_requests + mt.shared_store_requests, 0);
        assert_eq!(mt.barriers, 0);
        assert_eq!(mt.instructions(InstrClass::GlobalLoad), 128, "{arch}\n{mt}");
        assert_eq!(
            mt.instructions(InstrClass::GlobalStore),
            128,
            "{arch}\n{mt}"
        );
        assert_eq!(mt.thread_instructions(InstrClass::GlobalLoad), 4096);
        // Every request needs exactly its ideal sectors.
        assert_eq!(mt.global_ideal_sectors(), 1024, "{arch}\n{mt}");
        assert_eq!(mt.uncoalesced_requests(), 0, "{arch}\n{mt}");
        assert!(mt.uncoalesced_lines.is_empty());
    });
}

#[test]
fn stride_32_copy_is_32_sectors_per_request() {
    for_archs(|arch, ptx, m| {
        let n = 4096;
        let x = input(n);
        let (mt, out) = run(ptx, m, "copy_stride32", cfg1(16, 256), &x, n as i32);
        assert_eq!(out, x, "copy_stride32 ({arch})");
        // 16 blocks x 8 warps; the 32 lanes of a warp are 128 bytes apart.
        assert_eq!(
            (mt.global_load_requests, mt.global_store_requests),
            (128, 128),
            "{arch}\n{mt}"
        );
        assert_eq!(
            (mt.global_load_sectors, mt.global_store_sectors),
            (4096, 4096),
            "{arch}\n{mt}"
        );
        assert_eq!(mt.sectors_per_request(), 32.0);
        // Ideal: 128 bytes = 4 sectors per request; every request is uncoalesced, on one load
        // and one store instruction.
        assert_eq!(
            (mt.global_load_ideal_sectors, mt.global_store_ideal_sectors),
            (512, 512),
            "{arch}\n{mt}"
        );
        assert_eq!(
            (mt.uncoalesced_load_requests, mt.uncoalesced_store_requests),
            (128, 128)
        );
        assert_eq!(mt.excess_sectors(), 2 * (4096 - 512));
        let lines: Vec<_> = mt
            .uncoalesced_lines
            .iter()
            .map(|l| (l.kind, l.requests, l.excess_sectors()))
            .collect();
        assert_eq!(lines.len(), 2, "{arch}\n{mt}");
        assert!(lines.contains(&(ptxsim::AccessKind::Load, 128, 3584)));
        assert!(lines.contains(&(ptxsim::AccessKind::Store, 128, 3584)));
        // Same footprint as the coalesced copy: every sector is touched, just in 8x the requests.
        assert_eq!(mt.unique_bytes, 2 * 4 * n as u64, "{arch}\n{mt}");
    });
}

#[test]
fn vector_copy_is_sixteen_sectors_per_request() {
    for_archs(|arch, ptx, m| {
        let n = 4096;
        let x = input(n);
        let (mt, out) = run(ptx, m, "copy_f32x4", cfg1(8, 128), &x, (n / 4) as i32);
        assert_eq!(out, x, "copy_f32x4 ({arch})");
        // 8 blocks x 4 warps; 32 lanes x 16 bytes = 512 bytes = 16 sectors.
        assert_eq!(
            (mt.global_load_requests, mt.global_load_sectors),
            (32, 512),
            "{arch}\n{mt}"
        );
        assert_eq!(
            (mt.global_store_requests, mt.global_store_sectors),
            (32, 512),
            "{arch}\n{mt}"
        );
        assert_eq!(mt.unique_bytes, 2 * 4 * n as u64);
        assert_eq!(mt.global_ideal_sectors(), 1024, "{arch}\n{mt}");
        assert_eq!(mt.uncoalesced_requests(), 0, "{arch}\n{mt}");
    });
}

#[test]
fn transpose_bank_conflicts() {
    for_archs(|arch, ptx, m| {
        let n = 64usize;
        let x = input(n * n);
        let expect: Vec<f32> = (0..n * n).map(|i| x[(i % n) * n + i / n]).collect();
        let c = cfg([2, 2, 1], [32, 32, 1]);
        for (entry, load_wavefronts) in [("transpose32", 32 * 128), ("transpose32_padded", 128)] {
            let (mt, out) = run(ptx, m, entry, c, &x, n as i32);
            assert_eq!(out, expect, "{entry} ({arch})");
            // 4 blocks x 32 warps: each warp stores one tile row (conflict-free) and loads one
            // tile column: 32 lanes in one bank unpadded (32 wavefronts), 32 banks padded (1).
            assert_eq!(mt.shared_store_requests, 128, "{entry} ({arch})\n{mt}");
            assert_eq!(mt.shared_store_wavefronts, 128, "{entry} ({arch})\n{mt}");
            assert_eq!(mt.shared_load_requests, 128, "{entry} ({arch})\n{mt}");
            assert_eq!(
                mt.shared_load_wavefronts, load_wavefronts,
                "{entry} ({arch})\n{mt}"
            );
            assert_eq!(mt.shared_bank_conflicts(), load_wavefronts - 128);
            // Global side: coalesced rows, 4 sectors per request.
            assert_eq!(
                (mt.global_load_requests, mt.global_load_sectors),
                (128, 512),
                "{entry} ({arch})\n{mt}"
            );
            assert_eq!(
                (mt.global_store_requests, mt.global_store_sectors),
                (128, 512),
                "{entry} ({arch})\n{mt}"
            );
            assert_eq!(mt.unique_bytes, 2 * 4 * (n * n) as u64);
            // One barrier per block; every warp executes one bar.sync.
            assert_eq!(mt.barriers, 4, "{entry} ({arch})\n{mt}");
            assert_eq!(
                mt.instructions(InstrClass::Barrier),
                128,
                "{entry} ({arch})\n{mt}"
            );
            assert_eq!(mt.instructions(InstrClass::SharedLoad), 128);
            assert_eq!(mt.instructions(InstrClass::SharedStore), 128);
        }
    });
}

#[test]
fn constant_loads_are_not_global_traffic() {
    for_archs(|arch, ptx, m| {
        let x = input(1024);
        let (mt, out) = run(ptx, m, "const_read", cfg1(8, 128), &x, 1024);
        assert_eq!(out, vec![1.0f32; 1024], "const_read ({arch})");
        // 8 blocks x 4 warps store 128 bytes each; the table reads are not requests.
        assert_eq!(mt.global_load_requests, 0, "{arch}\n{mt}");
        assert_eq!(
            (mt.global_store_requests, mt.global_store_sectors),
            (32, 128)
        );
        assert_eq!(mt.unique_bytes, 4096, "{arch}\n{mt}");
        assert!(mt.instructions(InstrClass::ParamLoad) >= 32, "{arch}\n{mt}");
    });
}

#[test]
fn metrics_table_and_switch() {
    for_archs(|arch, ptx, m| {
        let x = input(1024);
        let (mt, _) = run(ptx, m, "copy_f32", cfg1(8, 128), &x, 1024);
        let table = mt.to_string();
        for want in [
            "ld.global",
            "sectors/req",
            "unique bytes",
            "wavefronts",
            "barriers",
        ] {
            assert!(
                table.contains(want),
                "{arch}: {want:?} missing from\n{table}"
            );
        }
        let mut dev = device(true, false);
        let pin = dev.alloc(4096).unwrap();
        dev.write_slice(pin, &x).unwrap();
        let pout = dev.alloc(4096).unwrap();
        let s = launch(
            &mut dev,
            m,
            ptx,
            "copy_f32",
            cfg1(8, 128),
            &[Arg::Ptr(pin), Arg::Ptr(pout), Arg::I32(1024)],
        );
        assert!(s.metrics.is_none(), "{arch}: metrics off");
    });
}

/// CPU seconds used by this process (user + system) from `/proc/self/stat`, when available:
/// unlike wall time it hardly depends on what else the machine is running.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the file (utime, stime), counted after the command name.
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Time per launch of 1M-element copies and a 1024 x 1024 transpose with checks and metrics
/// off and on (one worker thread; CPU time over 5 launches where `/proc` is available, else
/// the best wall time). Prints the figures; asserts only that the results agree.
#[test]
#[ignore = "timing; run with --release --ignored --nocapture"]
fn overhead() {
    let Some(ptx) = nvcc::compile(FILE, "compute_80") else {
        return;
    };
    let m = parse(&ptx, FILE);
    let n = 1 << 20;
    let side = 1024usize;
    let x = input(n);
    let cases: [(&str, LaunchConfig, i32); 3] = [
        ("copy_f32", cfg1((n / 256) as u32, 256), n as i32),
        ("copy_stride32", cfg1((n / 256) as u32, 256), n as i32),
        (
            "transpose32_padded",
            cfg([32, 32, 1], [32, 32, 1]),
            side as i32,
        ),
    ];
    let reps = 5;
    let configs = [(false, false), (false, true), (true, false), (true, true)];
    for (entry, c, arg) in cases {
        // One device per configuration; launches interleaved so that load changes on the
        // machine affect every configuration alike.
        let mut devs: Vec<(Device, [Arg; 3], u64)> = configs
            .iter()
            .map(|&(checks, metrics)| {
                let mut dev = device(checks, metrics);
                dev.set_options(Options {
                    threads: 1,
                    ..dev.options().clone()
                });
                let pin = dev.alloc(n * 4).unwrap();
                dev.write_slice(pin, &x).unwrap();
                let pout = dev.alloc(n * 4).unwrap();
                (dev, [Arg::Ptr(pin), Arg::Ptr(pout), Arg::I32(arg)], pout)
            })
            .collect();
        let mut cpu = [0.0f64; 4];
        let mut best = [f64::MAX; 4];
        let mut have_cpu = true;
        for _ in 0..reps {
            for (i, (dev, args, _)) in devs.iter_mut().enumerate() {
                let t0 = cpu_seconds();
                let s = launch(dev, &m, &ptx, entry, c, args);
                match (t0, cpu_seconds()) {
                    (Some(a), Some(b)) => cpu[i] += b - a,
                    _ => have_cpu = false,
                }
                assert!(s.reports.is_empty());
                best[i] = best[i].min(s.wall.as_secs_f64());
            }
        }
        let times: Vec<f64> = if have_cpu {
            cpu.iter().map(|t| t / reps as f64).collect()
        } else {
            best.to_vec()
        };
        let outs: Vec<Vec<f32>> = devs
            .iter()
            .map(|(dev, _, pout)| dev.read_slice::<f32>(*pout, n).unwrap())
            .collect();
        assert!(outs.windows(2).all(|w| w[0] == w[1]));
        let pct = |t: f64| (t / times[0] - 1.0) * 100.0;
        println!(
            "{entry:20} off {:7.1} ms | metrics {:7.1} ms ({:+5.1}%) | checks {:7.1} ms ({:+5.1}%) | both {:7.1} ms ({:+5.1}%)",
            times[0] * 1e3,
            times[1] * 1e3,
            pct(times[1]),
            times[2] * 1e3,
            pct(times[2]),
            times[3] * 1e3,
            pct(times[3]),
        );
    }
}
