//! racecheck and initcheck on CUDA kernels (`tests/cuda/checks_race.cu`, compiled by nvcc for
//! compute_75, compute_80 and compute_90): every planted fault is reported at the source lines
//! marked `CHECK:<name>` (PTX lines in reports are mapped back to CUDA lines through `.loc`),
//! and every correct version reports nothing. Without nvcc each test prints why and passes
//! (set PTXSIM_REQUIRE_NVCC=1 to make that a failure).

mod common;

use common::{cfg1, launch, nvcc, parse};
use ptxsim::{
    AccessKind, Arg, Device, Hazard, LaunchStats, MemSpace, Module, Options, Report, ReportKind,
};

const FILE: &str = "checks_race.cu";

/// A device with every check on (2 worker threads keep the tests light).
fn checked_device() -> Device {
    Device::with_options(Options {
        threads: 2,
        racecheck: true,
        initcheck: true,
        metrics: true,
        ..Options::default()
    })
}

/// Runs `f` for every arch's PTX; returns early (skip) without nvcc.
fn for_archs(f: impl Fn(&str, &str, &Module)) {
    let Some(all) = nvcc::compile_all(FILE) else {
        return;
    };
    for (arch, ptx) in all {
        let m = parse(&ptx, &format!("{FILE} ({arch})"));
        f(arch, &ptx, &m);
    }
}

/// The 1-based line of the CUDA source holding `CHECK:<name>`.
fn marker(name: &str) -> u32 {
    let src = std::fs::read_to_string(nvcc::cuda_dir().join(FILE)).expect("read .cu source");
    let tag = format!("CHECK:{name}");
    let hits: Vec<u32> = src
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(&tag))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    assert_eq!(hits.len(), 1, "marker {tag} in {FILE}");
    hits[0]
}

/// The CUDA source line of PTX line `line`: the last `.loc` of the `.cu` file's index at or
/// before it.
fn cuda_line(ptx: &str, line: usize) -> Option<u32> {
    let file = ptx.lines().find_map(|l| {
        let l = l.trim();
        let rest = l.strip_prefix(".file")?;
        let mut it = rest.split_whitespace();
        let idx = it.next()?;
        it.next()?.contains(FILE).then(|| idx.to_string())
    })?;
    ptx.lines()
        .take(line)
        .collect::<Vec<_>>()
        .iter()
        .rev()
        .find_map(|l| {
            let mut it = l.trim().strip_prefix(".loc")?.split_whitespace();
            if it.next()? != file {
                return None;
            }
            it.next()?.trim_end_matches(',').parse().ok()
        })
}

/// Reports described by CUDA lines: (kind, space, first line, second line or 0).
fn described(ptx: &str, stats: &LaunchStats) -> Vec<(ReportKind, MemSpace, u32, u32)> {
    stats
        .reports
        .iter()
        .map(|r| {
            let (a, b) = r.lines();
            let cl = |l: usize| {
                if l == 0 {
                    0
                } else {
                    cuda_line(ptx, l).unwrap_or(0)
                }
            };
            (r.kind, r.space, cl(a), cl(b))
        })
        .collect()
}

fn show(reports: &[Report]) -> String {
    reports.iter().map(|r| format!("  {r}\n")).collect()
}

fn upload_f32(dev: &mut Device, v: &[f32]) -> u64 {
    let p = dev.alloc(v.len() * 4).expect("alloc");
    dev.write_slice(p, v).expect("write");
    p
}

fn assert_clean(stats: &LaunchStats, what: &str) {
    assert!(
        stats.reports.is_empty(),
        "{what}: expected no reports, got:\n{}",
        show(&stats.reports)
    );
}

/// Asserts that the reports are races between lines `a` and `b` (either order) in `space`,
/// at least one of them, plus possibly uninitialized reads at `uninit_at`.
fn assert_races(
    ptx: &str,
    stats: &LaunchStats,
    space: MemSpace,
    a: u32,
    b: u32,
    uninit_at: u32,
    what: &str,
) {
    let d = described(ptx, stats);
    let msg = || format!("{what}: lines {a}/{b}; reports:\n{}", show(&stats.reports));
    assert!(
        d.iter().any(|r| matches!(r.0, ReportKind::Race(_))),
        "{}",
        msg()
    );
    for (kind, sp, x, y) in d {
        assert_eq!(sp, space, "{}", msg());
        match kind {
            ReportKind::Race(_) => {
                assert!((x, y) == (a, b) || (x, y) == (b, a), "{}", msg())
            }
            ReportKind::Uninitialized => assert_eq!((x, y), (uninit_at, 0), "{}", msg()),
        }
    }
}

#[test]
fn reduction_missing_one_syncthreads() {
    let (fill, step) = (marker("reduce_fill"), marker("reduce_step"));
    for_archs(|arch, ptx, m| {
        let input: Vec<f32> = (0..512).map(|i| (i % 7) as f32).collect();
        let expect: Vec<f32> = input.chunks(128).map(|c| c.iter().sum()).collect();
        let mut dev = checked_device();
        let pin = upload_f32(&mut dev, &input);
        let pout = dev.alloc_zeroed(16).unwrap();
        let args = [Arg::Ptr(pin), Arg::Ptr(pout)];
        let s = launch(&mut dev, m, ptx, "reduce_ok", cfg1(4, 128), &args);
        assert_clean(&s, &format!("reduce_ok ({arch})"));
        assert_eq!(dev.read_slice::<f32>(pout, 4).unwrap(), expect);
        let s = launch(&mut dev, m, ptx, "reduce_missing_sync", cfg1(4, 128), &args);
        assert_races(
            ptx,
            &s,
            MemSpace::Shared,
            fill,
            step,
            step,
            &format!("reduce_missing_sync ({arch})"),
        );
    });
}

#[test]
fn warp_exchange_missing_syncwarp() {
    let (write, read) = (marker("exchange_write"), marker("exchange_read"));
    for_archs(|arch, ptx, m| {
        let input: Vec<i32> = (0..128).map(|i| i * 3 - 50).collect();
        let mut dev = checked_device();
        let pin = dev.alloc(512).unwrap();
        dev.write_slice(pin, &input).unwrap();
        let pout = dev.alloc_zeroed(512).unwrap();
        let args = [Arg::Ptr(pin), Arg::Ptr(pout)];
        let s = launch(&mut dev, m, ptx, "exchange_ok", cfg1(2, 64), &args);
        assert_clean(&s, &format!("exchange_ok ({arch})"));
        let got: Vec<i32> = dev.read_slice(pout, 128).unwrap();
        let expect: Vec<i32> = (0..128).map(|i| input[i ^ 1]).collect();
        assert_eq!(got, expect, "exchange_ok ({arch})");
        let s = launch(
            &mut dev,
            m,
            ptx,
            "exchange_missing_syncwarp",
            cfg1(2, 64),
            &args,
        );
        assert_races(
            ptx,
            &s,
            MemSpace::Shared,
            write,
            read,
            read,
            &format!("exchange_missing_syncwarp ({arch})"),
        );
        // Every lane of both blocks reads a slot another lane wrote unordered.
        let races: u64 = s
            .reports
            .iter()
            .filter(|r| r.is_race())
            .map(|r| r.count)
            .sum();
        assert_eq!(
            races,
            128,
            "exchange_missing_syncwarp ({arch}):\n{}",
            show(&s.reports)
        );
    });
}

#[test]
fn uninitialized_shared_read() {
    let read = marker("uninit_read");
    for_archs(|arch, ptx, m| {
        let mut dev = checked_device();
        let pout = dev.alloc(3 * 64 * 4).unwrap();
        let args = [Arg::Ptr(pout)];
        let s = launch(&mut dev, m, ptx, "uninit_shared_ok", cfg1(3, 64), &args);
        assert_clean(&s, &format!("uninit_shared_ok ({arch})"));
        let s = launch(&mut dev, m, ptx, "uninit_shared_bad", cfg1(3, 64), &args);
        let d = described(ptx, &s);
        assert_eq!(
            d,
            vec![(ReportKind::Uninitialized, MemSpace::Shared, read, 0)],
            "uninit_shared_bad ({arch}):\n{}",
            show(&s.reports)
        );
        let r = &s.reports[0];
        // Threads 0..32 of each of the 3 blocks read s[32..64] (byte offsets 128..256).
        assert_eq!(r.count, 96);
        assert_eq!((r.first.block, r.first.thread), ([0, 0, 0], [0, 0, 0]));
        assert_eq!(r.first.kind, AccessKind::Load);
        assert_eq!(r.address, 128);
        assert!(r.second.is_none());
    });
}

#[test]
fn uninitialized_global_read() {
    for_archs(|arch, ptx, m| {
        let mut dev = checked_device();
        let never_written = dev.alloc(256).unwrap();
        let zeroed = dev.alloc_zeroed(256).unwrap();
        let written = upload_f32(&mut dev, &[1.5; 64]);
        let out = dev.alloc(256).unwrap();
        for (p, bad) in [(never_written, true), (zeroed, false), (written, false)] {
            let s = launch(
                &mut dev,
                m,
                ptx,
                "global_ok",
                cfg1(2, 32),
                &[Arg::Ptr(p), Arg::Ptr(out)],
            );
            if !bad {
                assert_clean(&s, &format!("global_ok ({arch})"));
                continue;
            }
            assert_eq!(
                s.reports.len(),
                1,
                "global_ok on uninitialized input ({arch}):\n{}",
                show(&s.reports)
            );
            let r = &s.reports[0];
            assert_eq!(
                (r.kind, r.space, r.count),
                (ReportKind::Uninitialized, MemSpace::Global, 64)
            );
            assert_eq!(r.address, never_written);
            assert_eq!((r.first.block, r.first.thread), ([0, 0, 0], [0, 0, 0]));
            assert!(ptx
                .lines()
                .nth(r.first.line - 1)
                .unwrap()
                .contains("ld.global"));
        }
    });
}

#[test]
fn global_write_race_between_blocks() {
    let line = marker("global_waw");
    for_archs(|arch, ptx, m| {
        let mut dev = checked_device();
        let pin = upload_f32(&mut dev, &[2.0; 128]);
        let out = dev.alloc_zeroed(512).unwrap();
        let args = [Arg::Ptr(pin), Arg::Ptr(out)];
        let s = launch(&mut dev, m, ptx, "global_ok", cfg1(4, 32), &args);
        assert_clean(&s, &format!("global_ok ({arch})"));
        let s = launch(&mut dev, m, ptx, "global_waw", cfg1(4, 32), &args);
        let d = described(ptx, &s);
        assert_eq!(
            d,
            vec![(
                ReportKind::Race(Hazard::WriteAfterWrite),
                MemSpace::Global,
                line,
                line
            )],
            "global_waw ({arch}):\n{}",
            show(&s.reports)
        );
        let r = &s.reports[0];
        // Blocks 1, 2 and 3 each overwrite block 0's 128 bytes.
        assert_eq!(r.count, 3);
        assert_eq!(r.address, out);
        assert_eq!((r.first.block, r.first.thread), ([0, 0, 0], [0, 0, 0]));
        let second = r.second.expect("race names two accesses");
        assert_eq!((second.block, second.thread), ([1, 0, 0], [0, 0, 0]));
        let text = r.to_string();
        assert!(
            text.contains("write-after-write race on global memory"),
            "{text}"
        );
    });
}

#[test]
fn atomics_do_not_race() {
    for_archs(|arch, ptx, m| {
        let mut dev = checked_device();
        let input: Vec<f32> = (0..256).map(|i| (i % 5) as f32).collect();
        let pin = upload_f32(&mut dev, &input);
        let out = dev.alloc_zeroed(4).unwrap();
        let s = launch(
            &mut dev,
            m,
            ptx,
            "global_atomic_sum",
            cfg1(4, 64),
            &[Arg::Ptr(pin), Arg::Ptr(out)],
        );
        assert_clean(&s, &format!("global_atomic_sum ({arch})"));
        // Small integers: the sum is exact in any order.
        assert_eq!(
            dev.read_slice::<f32>(out, 1).unwrap(),
            vec![input.iter().sum::<f32>()]
        );
    });
}

#[test]
fn checks_off_report_nothing() {
    for_archs(|arch, ptx, m| {
        let mut dev = Device::with_options(Options {
            threads: 2,
            racecheck: false,
            initcheck: false,
            metrics: false,
            ..Options::default()
        });
        let pin = upload_f32(&mut dev, &[1.0; 512]);
        let pout = dev.alloc(16).unwrap();
        let s = launch(
            &mut dev,
            m,
            ptx,
            "reduce_missing_sync",
            cfg1(4, 128),
            &[Arg::Ptr(pin), Arg::Ptr(pout)],
        );
        assert_clean(&s, &format!("reduce_missing_sync with checks off ({arch})"));
        assert!(s.metrics.is_none());
    });
}

#[test]
fn reports_do_not_depend_on_worker_threads() {
    for_archs(|arch, ptx, m| {
        let mut seen: Option<Vec<Report>> = None;
        for threads in [1, 2, 3] {
            let mut dev = Device::with_options(Options {
                threads,
                ..Options::default()
            });
            let pin = upload_f32(&mut dev, &[1.0; 1024]);
            let pout = dev.alloc(1024 * 4).unwrap();
            let args = [Arg::Ptr(pin), Arg::Ptr(pout)];
            let mut all = Vec::new();
            for entry in [
                "reduce_missing_sync",
                "global_waw",
                "exchange_missing_syncwarp",
            ] {
                let block = if entry == "exchange_missing_syncwarp" {
                    64
                } else {
                    128
                };
                let s = launch(&mut dev, m, ptx, entry, cfg1(8, block), &args);
                all.extend(s.reports);
            }
            assert!(!all.is_empty());
            match &seen {
                None => seen = Some(all),
                Some(first) => assert_eq!(&all, first, "{arch}: {threads} workers"),
            }
        }
    });
}
