//! The model checked on kernels written for the purpose (perfmodel/cuda/probes.cu), compiled
//! with nvcc and disassembled with cuobjdump at test time: the SASS walk finds the loads in
//! flight each was built with, and the prediction follows Little's law and the issue bound.

use std::collections::BTreeMap;
use std::path::PathBuf;

use perfmodel::gpu::{H100, H200};
use perfmodel::model::{predict_launch, KernelFacts, Limit};
use perfmodel::plans::{copy_case, Traffic};
use perfmodel::sass::{walk_main_loop, Function};
use perfmodel::{tools, Sass};
use warpnorm::abi::WnCopyArgs;
use warpnorm::Launch;

/// The probes' SASS for sm_90, or None (a printed skip) when the tools are missing and
/// WARPNORM_REQUIRE_NVCC is not 1.
fn probes() -> Option<BTreeMap<String, Function>> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("cuda")
        .join("probes.cu");
    match tools::compile_and_disassemble(&src, 90) {
        Ok(fs) => Some(fs.into_iter().map(|f| (f.name.clone(), f)).collect()),
        Err(e) if tools::require() => panic!("WARPNORM_REQUIRE_NVCC=1 but {e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[test]
fn mlp_walk_finds_the_loads_in_flight() {
    let Some(p) = probes() else { return };
    for (k, bytes) in [
        ("probe_copy1", 16),
        ("probe_copy2", 32),
        ("probe_copy4", 64),
        ("probe_copy8", 128),
    ] {
        let w = walk_main_loop(&p[k]);
        assert_eq!(w.mlp_bytes, bytes, "{k}: {w:?}");
        assert_eq!(
            w.load_bytes, bytes,
            "{k}: one iteration loads its packs once: {w:?}"
        );
    }
    let chain = walk_main_loop(&p["probe_chain"]);
    assert_eq!(chain.load_bytes, 64, "{chain:?}");
    assert_eq!(
        chain.mlp_bytes, 16,
        "every load is used before the next: {chain:?}"
    );
    let compute = walk_main_loop(&p["probe_compute"]);
    assert_eq!(compute.mlp_bytes, 16, "{compute:?}");
    assert!(compute.instrs >= 512, "128 x 4 dependent FMAs: {compute:?}");
}

/// A launch of `kernel` on every SM with `threads_per_sm` resident threads (blocks of 256).
fn launch(kernel: &str, gpu_sms: u32, threads_per_sm: u32) -> Launch {
    let args = WnCopyArgs {
        src: 1 << 40,
        dst: 1 << 41,
        n_bytes: 0,
    };
    Launch::new(
        kernel,
        [gpu_sms * threads_per_sm / 256, 1, 1],
        [256, 1, 1],
        0,
        &args,
    )
}

#[test]
fn predictions_follow_littles_law_and_the_issue_bound() {
    let Some(p) = probes() else { return };
    let bytes = 1e9;
    let copy = Traffic {
        read: bytes,
        write: bytes,
        tail_trips: 0.0,
    };
    for gpu in [H100, H200] {
        let sms = gpu.props.sm_count;
        // 128 registers: 512 threads per SM (16 warps).
        let facts = |k: &str| KernelFacts {
            walk: walk_main_loop(&p[k]),
            registers: 128,
            static_smem: 0,
        };
        let mut last = f64::INFINITY;
        for k in ["probe_copy1", "probe_copy2", "probe_copy4", "probe_copy8"] {
            let f = facts(k);
            let l = predict_launch(&gpu, &launch(k, sms, 512), &f, &copy);
            assert_eq!(l.warps_per_sm, 16);
            let inflight = f.walk.mlp_bytes as f64 * 512.0;
            assert_eq!(l.inflight_per_sm, inflight);
            // Little's law: read bytes x latency / (bytes in flight per SM x SMs).
            let little = bytes * gpu.dram_latency / (inflight * sms as f64);
            assert!(
                (l.t_latency - little).abs() < 1e-12 * little.max(1.0),
                "{k} {l:?}"
            );
            assert!(l.t_latency < last, "more loads in flight, less time: {k}");
            last = l.t_latency;
            let need = gpu.littles_need_per_sm(gpu.dram_latency) / 2.0; // reads are half
            let expect = if inflight < need {
                Limit::Latency
            } else {
                Limit::Bandwidth
            };
            assert_eq!(
                l.limit,
                expect,
                "{} {k}: {:.1} KB in flight, reads need {:.1} KB",
                gpu.name,
                inflight / 1e3,
                need / 1e3
            );
        }
        // One load in flight per thread at 16 warps: latency bound; eight: eight times faster.
        let one = predict_launch(
            &gpu,
            &launch("probe_copy1", sms, 512),
            &facts("probe_copy1"),
            &copy,
        );
        let eight = predict_launch(
            &gpu,
            &launch("probe_copy8", sms, 512),
            &facts("probe_copy8"),
            &copy,
        );
        assert_eq!(one.limit, Limit::Latency, "{}: {one:?}", gpu.name);
        assert!((one.t_latency / eight.t_latency - 8.0).abs() < 1e-9);
        // The chain has the in-flight bytes of one load, whatever its unrolling.
        let chain = predict_launch(
            &gpu,
            &launch("probe_chain", sms, 512),
            &facts("probe_chain"),
            &copy,
        );
        assert!((chain.t_latency - one.t_latency).abs() < 1e-9 * one.t_latency);
        // The compute loop is issue bound: its instructions per byte over the issue rate.
        let f = facts("probe_compute");
        let c = predict_launch(
            &gpu,
            &launch("probe_compute", sms, 2048),
            &KernelFacts {
                registers: 32,
                ..f.clone()
            },
            &copy,
        );
        assert_eq!(c.limit, Limit::Issue, "{c:?}");
        let issue = f.walk.instrs as f64 / 16.0 * bytes / gpu.thread_instr_rate();
        assert!((c.t_issue - issue).abs() < 1e-9 * issue, "{c:?} vs {issue}");
        assert!(
            c.t_issue > c.t_bandwidth && c.t_issue > c.t_latency,
            "{c:?}"
        );
    }
}

#[test]
fn a_well_formed_copy_predicts_the_roofline() {
    let Some(p) = probes() else { return };
    for gpu in [H100, H200] {
        // The 4-load probe at full occupancy (32 registers): at the copy bandwidth.
        let f = KernelFacts {
            walk: walk_main_loop(&p["probe_copy4"]),
            registers: 32,
            static_smem: 0,
        };
        let l = predict_launch(
            &gpu,
            &launch("probe_copy4", gpu.props.sm_count, 2048),
            &f,
            &Traffic {
                read: 1e9,
                write: 1e9,
                tail_trips: 0.0,
            },
        );
        assert_eq!(l.limit, Limit::Bandwidth, "{l:?}");
        let pct = (2e9 / gpu.copy_bw + gpu.launch_overhead) / l.time;
        assert!((pct - 1.0).abs() < 1e-9, "{}: {pct}", gpu.name);
    }
    // warpnorm's own f32 copy (the benches' roofline), from the shipped SASS and plan.
    let sass = match Sass::load_families(&[90], Some(&["copy"])) {
        Ok(s) => s,
        Err(e) if tools::require() => panic!("WARPNORM_REQUIRE_NVCC=1 but {e}"),
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    for gpu in [H100, H200] {
        let c = copy_case(&gpu.props).unwrap();
        let pred = perfmodel::model::predict(&gpu, &c, &|k| sass.facts(90, k));
        assert!(
            pred.pct_roofline > 97.0 && pred.pct_roofline <= 100.0 + 1e-9,
            "{}: {:.2}% ({:?})",
            gpu.name,
            pred.pct_roofline,
            pred.launches
        );
    }
}
