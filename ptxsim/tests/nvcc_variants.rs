//! nvcc output variants: the LayerNorm-like benchmark kernel and a few test kernels compiled
//! with default flags, `-use_fast_math` (approximate / flush-to-zero instructions) and `-G`
//! (debug code: locals in memory, no inlining), for every arch, run and checked on the host.

mod common;

use common::layernorm_ref::{layernorm_f64, layernorm_inputs, max_scaled_error};
use common::{cfg1, device, launch, nvcc, parse};
use ptxsim::Arg;
use std::path::Path;

const VARIANTS: [&[&str]; 3] = [&[], &["-use_fast_math"], &["-G"]];

#[test]
fn layernorm_like_kernel_all_variants() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/cuda/layernorm_bench.cu");
    for arch in nvcc::ARCHS {
        for flags in VARIANTS {
            let Some(ptx) = nvcc::compile_file_with(&src, arch, flags) else {
                return;
            };
            let what = format!("layernorm_bench {arch} {flags:?}");
            let m = parse(&ptx, &what);
            // d = 384 leaves lanes with fewer float4 than others; 9 rows leave a partial block.
            let (rows, d) = (9usize, 384usize);
            let (x, g, b) = layernorm_inputs(rows, d);
            let mut dev = device();
            let mut up = |v: &[f32]| {
                let p = dev.alloc(v.len() * 4).unwrap();
                dev.write_slice(p, v).unwrap();
                p
            };
            let (px, pg, pb) = (up(&x), up(&g), up(&b));
            let py = dev.alloc_zeroed(rows * d * 4).unwrap();
            let pm = dev.alloc_zeroed(rows * 4).unwrap();
            let pr = dev.alloc_zeroed(rows * 4).unwrap();
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
            let blocks = (rows as u32 * 32).div_ceil(128);
            launch(
                &mut dev,
                &m,
                &ptx,
                "layernorm_fwd_warp",
                cfg1(blocks, 128),
                &args,
            );
            let y: Vec<f32> = dev.read_slice(py, rows * d).unwrap();
            let reference = layernorm_f64(&x, &g, &b, rows, d, 1e-5);
            let worst = max_scaled_error(&y, &reference, 1e-4, 1e-4);
            assert!(worst <= 1.0, "{what}: worst scaled error {worst}");
            let mean: Vec<f32> = dev.read_slice(pm, rows).unwrap();
            for r in 0..rows {
                let e = x[r * d..(r + 1) * d].iter().map(|&v| v as f64).sum::<f64>() / d as f64;
                assert!(
                    (mean[r] as f64 - e).abs() <= 1e-5 * (1.0 + e.abs()),
                    "{what}: mean row {r}"
                );
            }
        }
    }
}

#[test]
fn debug_builds_of_test_kernels() {
    let dir = nvcc::cuda_dir();
    for arch in nvcc::ARCHS {
        let Some(ptx) = nvcc::compile_file_with(&dir.join("warp_shuffle.cu"), arch, &["-G"]) else {
            return;
        };
        let m = parse(&ptx, "warp_shuffle.cu -G");
        let mut dev = device();
        let input: Vec<i32> = (0..64).map(|i| i * 3 - 50).collect();
        let pin = dev.alloc(256).unwrap();
        dev.write_slice(pin, &input).unwrap();
        let pout = dev.alloc_zeroed(256).unwrap();
        launch(
            &mut dev,
            &m,
            &ptx,
            "shfl_xor_allreduce",
            cfg1(1, 64),
            &[Arg::Ptr(pin), Arg::Ptr(pout), Arg::I32(32)],
        );
        let got: Vec<i32> = dev.read_slice(pout, 64).unwrap();
        for (t, &g) in got.iter().enumerate() {
            assert_eq!(
                g,
                input[t / 32 * 32..t / 32 * 32 + 32].iter().sum::<i32>(),
                "-G allreduce lane {t} ({arch})"
            );
        }

        let ptx = nvcc::compile_file_with(&dir.join("device_call.cu"), arch, &["-G"]).unwrap();
        let m = parse(&ptx, "device_call.cu -G");
        let n = 32usize;
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 3.0).collect();
        let coef = [1.0f32, -0.5, 0.25];
        let a: Vec<i32> = (0..n as i32).map(|i| i * 97 - 1000).collect();
        let b: Vec<i32> = (0..n as i32)
            .map(|i| (i % 7) - 3)
            .map(|v| if v == 0 { 5 } else { v })
            .collect();
        let mut up_f = |v: &[f32]| {
            let p = dev.alloc(v.len() * 4).unwrap();
            dev.write_slice(p, v).unwrap();
            p
        };
        let (px, pc) = (up_f(&x), up_f(&coef));
        let pa = dev.alloc(n * 4).unwrap();
        dev.write_slice(pa, &a).unwrap();
        let pb = dev.alloc(n * 4).unwrap();
        dev.write_slice(pb, &b).unwrap();
        let py = dev.alloc_zeroed(n * 4).unwrap();
        let pdm = dev.alloc_zeroed(n * 8).unwrap();
        launch(
            &mut dev,
            &m,
            &ptx,
            "call_kernel",
            cfg1(1, 32),
            &[
                Arg::Ptr(px),
                Arg::Ptr(pc),
                Arg::I32(3),
                Arg::Ptr(py),
                Arg::Ptr(pa),
                Arg::Ptr(pb),
                Arg::Ptr(pdm),
                Arg::I32(n as i32),
            ],
        );
        let y: Vec<f32> = dev.read_slice(py, n).unwrap();
        let dm: Vec<i32> = dev.read_slice(pdm, 2 * n).unwrap();
        for i in 0..n {
            let h = coef.iter().rev().fold(0f32, |r, &c| r.mul_add(x[i], c));
            assert_eq!(y[i].to_bits(), h.to_bits(), "-G horner {i} ({arch})");
            assert_eq!(
                [dm[2 * i], dm[2 * i + 1]],
                [a[i] / b[i], a[i] % b[i]],
                "-G divmod {i} ({arch})"
            );
        }
    }
}
