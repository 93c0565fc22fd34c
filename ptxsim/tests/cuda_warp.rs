//! Warp- and block-level CUDA kernels from `tests/cuda/warp_shuffle.cu`, `block_reduce.cu` and
//! `misc.cu`, compiled by nvcc for compute_75, compute_80 and compute_90 and checked against
//! host emulations: every shuffle mode with sub-warp widths, 64-bit shuffles, votes and partial
//! ballots, shared-memory and shuffle block reductions, barrier reductions, named barriers and
//! divergent loops followed by warp collectives. Without nvcc each test prints why and passes
//! (PTXSIM_REQUIRE_NVCC=1 makes that a failure).

mod common;

use common::cuda::{for_archs, random_f32, read, upload, zeros};
use common::{cfg1, device, launch, Rng};
use ptxsim::Arg;

fn shfl_input(n: usize) -> Vec<i32> {
    (0..n as i32).map(|g| (g * 37 + 11) % 1000 - 500).collect()
}

const WIDTHS: [i32; 5] = [32, 16, 8, 4, 2];

/// Runs one shuffle kernel (2 blocks x 64 threads) for every width; `host` maps one warp's inputs
/// (and the warp index) to its outputs.
fn check_shfl(kernel: &str, host: fn(&[i32], i32, usize) -> Vec<i32>) {
    for_archs("warp_shuffle.cu", |arch, ptx, m| {
        let n = 128;
        let input = shfl_input(n);
        for width in WIDTHS {
            let mut dev = device();
            let pin = upload(&mut dev, &input);
            let pout = zeros(&mut dev, n * 4);
            launch(
                &mut dev,
                m,
                ptx,
                kernel,
                cfg1(2, 64),
                &[Arg::Ptr(pin), Arg::Ptr(pout), Arg::I32(width)],
            );
            let got: Vec<i32> = read(&dev, pout, n);
            let expect: Vec<i32> = input
                .chunks(32)
                .enumerate()
                .flat_map(|(w, c)| host(c, width, w))
                .collect();
            assert_eq!(got, expect, "{kernel} width {width} ({arch})");
        }
    });
}

#[test]
fn shfl_bfly_allreduce() {
    check_shfl("shfl_xor_allreduce", |v, w, _| {
        let w = w as usize;
        (0..32)
            .map(|l| {
                v[l / w * w..l / w * w + w]
                    .iter()
                    .fold(0i32, |a, &b| a.wrapping_add(b))
            })
            .collect()
    });
}

#[test]
fn shfl_down_reduction() {
    check_shfl("shfl_down_reduce", |v, w, _| {
        let w = w as usize;
        let mut v = v.to_vec();
        let mut d = w / 2;
        while d > 0 {
            // A source lane past the end of the segment returns the caller's own value.
            v = (0..32)
                .map(|l| v[l].wrapping_add(if l % w + d < w { v[l + d] } else { v[l] }))
                .collect();
            d /= 2;
        }
        v
    });
}

#[test]
fn shfl_up_inclusive_scan() {
    check_shfl("shfl_up_scan", |v, w, _| {
        let w = w as usize;
        (0..32)
            .map(|l| {
                v[l / w * w..=l]
                    .iter()
                    .fold(0i32, |a, &b| a.wrapping_add(b))
            })
            .collect()
    });
}

#[test]
fn shfl_idx_broadcast_modulo_width() {
    check_shfl("shfl_idx_broadcast", |v, w, warp| {
        let w = w as usize;
        let src = (warp * 7 + 3) % w;
        (0..32).map(|l| v[l / w * w + src]).collect()
    });
}

#[test]
fn shfl_partial_mask_and_votes() {
    for_archs("warp_shuffle.cu", |arch, ptx, m| {
        let n = 128;
        let input = shfl_input(n);
        let mut dev = device();
        let pin = upload(&mut dev, &input);
        let pout = zeros(&mut dev, n * 8);
        launch(
            &mut dev,
            m,
            ptx,
            "shfl_half_warp",
            cfg1(2, 64),
            &[Arg::Ptr(pin), Arg::Ptr(pout)],
        );
        let got: Vec<i32> = read(&dev, pout, n);
        let expect: Vec<i32> = input
            .chunks(32)
            .flat_map(|c| {
                (0..32)
                    .map(|l| if l < 16 { c[..16].iter().sum() } else { c[l] })
                    .collect::<Vec<i32>>()
            })
            .collect();
        assert_eq!(got, expect, "shfl_half_warp ({arch})");

        launch(
            &mut dev,
            m,
            ptx,
            "vote_kernel",
            cfg1(2, 64),
            &[Arg::Ptr(pin), Arg::Ptr(pout)],
        );
        let got: Vec<u32> = read(&dev, pout, 2 * n);
        for (w, c) in input.chunks(32).enumerate() {
            let ballot = c
                .iter()
                .enumerate()
                .fold(0u32, |b, (l, &v)| b | (((v & 1) as u32) << l));
            let any = c.iter().any(|&v| v > 0) as u32;
            let all = c.iter().all(|&v| v > 0) as u32;
            for l in 0..32 {
                let g = w * 32 + l;
                assert_eq!(
                    [got[2 * g], got[2 * g + 1]],
                    [ballot, any | all << 1],
                    "vote lane {g} ({arch})"
                );
            }
        }
    });
}

/// The shfl_down warp sum of `block_reduce.cu`, emulated lane by lane in f32.
fn warp_sum_emulated(v: &[f32; 32]) -> f32 {
    let mut v = *v;
    let mut d = 16;
    while d > 0 {
        let old = v;
        for l in 0..32 {
            v[l] = old[l] + if l + d < 32 { old[l + d] } else { old[l] };
        }
        d /= 2;
    }
    v[0]
}

#[test]
fn block_reduction_shared_memory() {
    for_archs("block_reduce.cu", |arch, ptx, m| {
        let n = 1000;
        let x = random_f32(3, n, 10);
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let pout = zeros(&mut dev, 4 * 4);
        launch(
            &mut dev,
            m,
            ptx,
            "block_sum_tree",
            cfg1(4, 256),
            &[Arg::Ptr(px), Arg::Ptr(pout), Arg::I32(n as i32)],
        );
        let got: Vec<f32> = read(&dev, pout, 4);
        for (b, g) in got.iter().enumerate() {
            let mut s: Vec<f32> = (0..256)
                .map(|t| x.get(b * 256 + t).copied().unwrap_or(0.0))
                .collect();
            let mut k = 128;
            while k > 0 {
                for t in 0..k {
                    s[t] += s[t + k];
                }
                k /= 2;
            }
            assert_eq!(
                g.to_bits(),
                s[0].to_bits(),
                "block_sum_tree block {b} ({arch})"
            );
        }

        launch(
            &mut dev,
            m,
            ptx,
            "block_sum_warp",
            cfg1(4, 256),
            &[Arg::Ptr(px), Arg::Ptr(pout), Arg::I32(n as i32)],
        );
        let got: Vec<f32> = read(&dev, pout, 4);
        for (b, g) in got.iter().enumerate() {
            let mut partial = [0f32; 32];
            for (w, p) in partial.iter_mut().enumerate().take(8) {
                let lanes: [f32; 32] =
                    std::array::from_fn(|l| x.get(b * 256 + w * 32 + l).copied().unwrap_or(0.0));
                *p = warp_sum_emulated(&lanes);
            }
            let e = warp_sum_emulated(&partial);
            assert_eq!(
                g.to_bits(),
                e.to_bits(),
                "block_sum_warp block {b} ({arch})"
            );
        }

        // One block of 1024 threads (the last 24 past n): 32 warp partials.
        let n = x.len();
        launch(
            &mut dev,
            m,
            ptx,
            "block_sum_warp",
            cfg1(1, 1024),
            &[Arg::Ptr(px), Arg::Ptr(pout), Arg::I32(n as i32)],
        );
        let got: Vec<f32> = read(&dev, pout, 1);
        let partial: [f32; 32] = std::array::from_fn(|w| {
            let lanes: [f32; 32] =
                std::array::from_fn(|l| x.get(w * 32 + l).copied().unwrap_or(0.0));
            warp_sum_emulated(&lanes)
        });
        assert_eq!(
            got[0].to_bits(),
            warp_sum_emulated(&partial).to_bits(),
            "block_sum_warp 1024 threads ({arch})"
        );
    });
}

#[test]
fn divergent_loops_then_warp_collectives() {
    for_archs("misc.cu", |arch, ptx, m| {
        let n = 150usize;
        let trips: Vec<i32> = (0..n as i32).map(|g| (g * 13) % 40).collect();
        let mut dev = device();
        let pt = upload(&mut dev, &trips);
        let pout = upload(&mut dev, &vec![-1i32; 192]);
        let pw = upload(&mut dev, &[-1i32; 6]);
        launch(
            &mut dev,
            m,
            ptx,
            "divergent_loops",
            cfg1(3, 64),
            &[
                Arg::Ptr(pt),
                Arg::Ptr(pout),
                Arg::Ptr(pw),
                Arg::I32(n as i32),
            ],
        );
        let acc: Vec<i32> = (0..n as i32)
            .map(|g| {
                let mut acc = 0;
                for i in 0..trips[g as usize] {
                    if i % 3 == 1 {
                        continue;
                    }
                    if acc > 1000 {
                        break;
                    }
                    acc += i * (g & 7) + 1;
                }
                acc
            })
            .collect();
        let out: Vec<i32> = read(&dev, pout, 192);
        assert_eq!(&out[..n], &acc[..], "per-lane loop results ({arch})");
        assert!(
            out[n..].iter().all(|&v| v == -1),
            "lanes past n wrote ({arch})"
        );
        let ws: Vec<i32> = read(&dev, pw, 6);
        let mut e: Vec<i32> = acc.chunks(32).map(|c| c.iter().sum()).collect();
        e.push(-1); // warp 5 has no live lane and writes nothing
        assert_eq!(ws, e, "warp sums ({arch})");
    });
}

#[test]
fn barrier_reductions_and_named_barriers() {
    for_archs("block_reduce.cu", |arch, ptx, m| {
        let (blocks, threads) = (3usize, 96usize);
        let x: Vec<i32> = (0..(blocks * threads) as i32)
            .map(|i| (i * 53) % 201 - 100)
            .collect();
        // Make block 1 satisfy the "and" and block 2 fail the "or".
        let mut x = x;
        for v in &mut x[threads..2 * threads] {
            *v = v.abs() / 3;
        }
        for v in &mut x[2 * threads..] {
            *v = v.abs() % 80;
        }
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let pout = zeros(&mut dev, 4 * 3 * blocks);
        launch(
            &mut dev,
            m,
            ptx,
            "sync_reductions",
            cfg1(blocks as u32, threads as u32),
            &[Arg::Ptr(px), Arg::Ptr(pout)],
        );
        let got: Vec<i32> = read(&dev, pout, 3 * blocks);
        for b in 0..blocks {
            let c = &x[b * threads..(b + 1) * threads];
            let e = [
                c.iter().filter(|&&v| v > 0).count() as i32,
                c.iter().all(|&v| v > -50) as i32,
                c.iter().any(|&v| v > 90) as i32,
            ];
            // and/or return "non-zero" for true.
            let g = [
                got[3 * b],
                (got[3 * b + 1] != 0) as i32,
                (got[3 * b + 2] != 0) as i32,
            ];
            assert_eq!(g, e, "block {b} count/and/or ({arch})");
        }

        let pout = upload(&mut dev, &vec![-1i32; 128]);
        launch(
            &mut dev,
            m,
            ptx,
            "named_barrier_pipeline",
            cfg1(1, 128),
            &[Arg::Ptr(pout)],
        );
        let got: Vec<i32> = read(&dev, pout, 128);
        let e: Vec<i32> = (0..128)
            .map(|t| match t {
                0..=31 => (31 - t) * (31 - t),
                32..=63 => -1,
                _ => t / 32,
            })
            .collect();
        assert_eq!(got, e, "named barrier pipeline ({arch})");
    });
}

#[test]
fn shfl_64bit_values_and_partial_ballot() {
    for_archs("warp_shuffle.cu", |arch, ptx, m| {
        let mut rng = Rng(101);
        let x: Vec<f64> = (0..64).map(|_| rng.f64_exp(30)).collect();
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let pout = zeros(&mut dev, 8 * 64);
        launch(
            &mut dev,
            m,
            ptx,
            "shfl_xor_double",
            cfg1(1, 64),
            &[Arg::Ptr(px), Arg::Ptr(pout)],
        );
        let got: Vec<f64> = read(&dev, pout, 64);
        for w in 0..2 {
            let mut v: Vec<f64> = x[w * 32..w * 32 + 32].to_vec();
            let mut mm = 16;
            while mm > 0 {
                let old = v.clone();
                for l in 0..32 {
                    v[l] = old[l] + old[l ^ mm];
                }
                mm /= 2;
            }
            for l in 0..32 {
                assert_eq!(
                    got[w * 32 + l].to_bits(),
                    v[l].to_bits(),
                    "double butterfly lane {l} ({arch})"
                );
            }
        }

        let input = shfl_input(64);
        let pin = upload(&mut dev, &input);
        let pb = zeros(&mut dev, 4 * 64);
        launch(
            &mut dev,
            m,
            ptx,
            "partial_ballot",
            cfg1(1, 64),
            &[Arg::Ptr(pin), Arg::Ptr(pb)],
        );
        let got: Vec<u32> = read(&dev, pb, 64);
        for (t, &g) in got.iter().enumerate() {
            let w = t / 32 * 32;
            let e = if t % 32 < 20 {
                (0..20).fold(0u32, |b, l| b | ((input[w + l] > 0) as u32) << l)
            } else {
                0xdead_beef
            };
            assert_eq!(g, e, "partial ballot lane {t} ({arch})");
        }
    });
}
