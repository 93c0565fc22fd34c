//! CUDA kernels from `tests/cuda/*.cu`, compiled by nvcc for compute_75, compute_80 and
//! compute_90, run on ptxsim and checked against host computations: vectorized f16 and bf16
//! code, atomics (including a self-resetting last-block counter), `__noinline__` and recursive
//! calls, generic pointers, a predicated loop, by-value struct / small / vector parameters,
//! dynamic shared memory, local arrays, module-scope variables, launch bounds, 64-bit and 3-D
//! indexing. Without nvcc each test prints why and passes (PTXSIM_REQUIRE_NVCC=1 makes that a
//! failure).

mod common;

use common::cuda::{for_archs, random_f32, read, upload, zeros};
use common::fp::{f32_to_bf16, Mode};
use common::{cfg, cfg1, device, launch, Rng};
use half::{bf16, f16};
use ptxsim::{Arg, LaunchConfig};

fn f16_random(rng: &mut Rng) -> u16 {
    f16::from_f32(rng.f32_exp(6)).to_bits()
}

#[test]
fn half2_fma_with_by_value_half2_params() {
    for_archs("half_vec.cu", |arch, ptx, m| {
        let n2 = 100;
        let mut rng = Rng(21);
        let x: Vec<u16> = (0..2 * n2).map(|_| f16_random(&mut rng)).collect();
        let a = [f16::from_f32(1.5).to_bits(), f16::from_f32(-0.75).to_bits()];
        let b = [f16::from_f32(0.125).to_bits(), f16::from_f32(2.0).to_bits()];
        let bytes = |h: [u16; 2]| h.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let py = zeros(&mut dev, 4 * n2);
        launch(
            &mut dev,
            m,
            ptx,
            "half2_fma",
            cfg1(2, 64),
            &[
                Arg::Ptr(px),
                Arg::Ptr(py),
                Arg::Bytes(bytes(a)),
                Arg::Bytes(bytes(b)),
                Arg::I32(n2 as i32),
            ],
        );
        let got: Vec<u16> = read(&dev, py, 2 * n2);
        for i in 0..2 * n2 {
            let k = i % 2; // element 0 = .x = low half
            let f = |h: u16| f16::from_bits(h).to_f64();
            let e = f16::from_f64(f(a[k]).mul_add(f(x[i]), f(b[k]))).to_bits();
            assert_eq!(got[i], e, "half2_fma element {i} ({arch})");
        }
    });
}

#[test]
fn vectorized_half_loads_and_stores() {
    for_archs("half_vec.cu", |arch, ptx, m| {
        let n8 = 64;
        let mut rng = Rng(22);
        let x: Vec<u16> = (0..8 * n8).map(|_| f16_random(&mut rng)).collect();
        let scale = 0.3f32;
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let py = zeros(&mut dev, 16 * n8);
        launch(
            &mut dev,
            m,
            ptx,
            "half8_scale",
            cfg1(1, 64),
            &[
                Arg::Ptr(px),
                Arg::Ptr(py),
                Arg::F32(scale),
                Arg::I32(n8 as i32),
            ],
        );
        let got: Vec<u16> = read(&dev, py, 8 * n8);
        let expect: Vec<u16> = x
            .iter()
            .map(|&h| f16::from_f32(f16::from_bits(h).to_f32() * scale).to_bits())
            .collect();
        assert_eq!(got, expect, "half8_scale ({arch})");

        let n4 = 50;
        let xf = random_f32(23, 4 * n4, 10);
        let pxf = upload(&mut dev, &xf);
        let ph = zeros(&mut dev, 8 * n4);
        let psum = zeros(&mut dev, 4 * n4);
        launch(
            &mut dev,
            m,
            ptx,
            "float4_to_half",
            cfg1(1, 64),
            &[
                Arg::Ptr(pxf),
                Arg::Ptr(ph),
                Arg::Ptr(psum),
                Arg::I32(n4 as i32),
            ],
        );
        let got: Vec<u16> = read(&dev, ph, 4 * n4);
        let expect: Vec<u16> = xf.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
        assert_eq!(got, expect, "float4_to_half halves ({arch})");
        let got: Vec<f32> = read(&dev, psum, n4);
        for i in 0..n4 {
            let v = &xf[4 * i..4 * i + 4];
            assert_eq!(
                got[i].to_bits(),
                ((v[0] + v[1]) + (v[2] + v[3])).to_bits(),
                "float4 sum {i} ({arch})"
            );
        }
    });
}

#[test]
fn bf16_conversions_and_fma() {
    for_archs("bf16.cu", |arch, ptx, m| {
        let mut x = random_f32(31, 120, 30);
        x.extend_from_slice(&[
            0.0,
            -0.0,
            1.0,
            f32::MAX,
            -f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-9),
            f32::from_bits(1),
        ]);
        let n = x.len();
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let outs: Vec<u64> = (0..4).map(|_| zeros(&mut dev, 2 * n)).collect();
        let pback = zeros(&mut dev, 4 * n);
        let mut args = vec![Arg::Ptr(px)];
        args.extend(outs.iter().map(|&p| Arg::Ptr(p)));
        args.push(Arg::Ptr(pback));
        args.push(Arg::I32(n as i32));
        launch(
            &mut dev,
            m,
            ptx,
            "bf16_convert",
            cfg1((n as u32).div_ceil(64), 64),
            &args,
        );
        for (k, mode) in [Mode::Rn, Mode::Rz, Mode::Rm, Mode::Rp]
            .into_iter()
            .enumerate()
        {
            let got: Vec<u16> = read(&dev, outs[k], n);
            for i in 0..n {
                assert_eq!(
                    got[i],
                    f32_to_bf16(x[i], mode),
                    "float->bf16 {mode:?} of {:e} ({arch})",
                    x[i]
                );
            }
        }
        let back: Vec<u32> = read(&dev, pback, n);
        for i in 0..n {
            assert_eq!(
                back[i],
                (f32_to_bf16(x[i], Mode::Rn) as u32) << 16,
                "bf16->float of {:e} ({arch})",
                x[i]
            );
        }

        // Inputs with 4 random significand bits and small exponents: a * b + c is exact in f32.
        let n2 = 96;
        let mut rng = Rng(32);
        let mut r = || {
            let bits = (rng.next_u32() & 0x8000_0000)
                | ((127 + rng.range(-3, 4) as u32) << 23)
                | ((rng.next_u32() & 0xf) << 19);
            bf16::from_f32(f32::from_bits(bits)).to_bits()
        };
        let (a, b, c): (Vec<u16>, Vec<u16>, Vec<u16>) = (
            (0..2 * n2).map(|_| r()).collect(),
            (0..2 * n2).map(|_| r()).collect(),
            (0..2 * n2).map(|_| r()).collect(),
        );
        let (pa, pb, pc) = (
            upload(&mut dev, &a),
            upload(&mut dev, &b),
            upload(&mut dev, &c),
        );
        let pd = zeros(&mut dev, 4 * n2);
        launch(
            &mut dev,
            m,
            ptx,
            "bf16x2_fma",
            cfg1(2, 64),
            &[
                Arg::Ptr(pa),
                Arg::Ptr(pb),
                Arg::Ptr(pc),
                Arg::Ptr(pd),
                Arg::I32(n2 as i32),
            ],
        );
        let got: Vec<u16> = read(&dev, pd, 2 * n2);
        for i in 0..2 * n2 {
            let f = |h: u16| bf16::from_bits(h).to_f64();
            let e = bf16::from_f64(f(a[i]).mul_add(f(b[i]), f(c[i]))).to_bits();
            assert_eq!(got[i], e, "bf16x2 fma element {i} ({arch})");
        }
    });
}

#[test]
fn atomics_add_cas_max_exch_and_shared_histogram() {
    for_archs("atomics.cu", |arch, ptx, m| {
        let n = 500usize;
        let vals: Vec<i32> = (0..n as i32).map(|g| (g * 7919) % 2001 - 1000).collect();
        let mut dev = device();
        let pv = upload(&mut dev, &vals);
        let counter = zeros(&mut dev, 4);
        let fsum = zeros(&mut dev, 4);
        let imax = upload(&mut dev, &[i32::MIN]);
        let cas = zeros(&mut dev, 4);
        let exch = zeros(&mut dev, 4);
        let exch_old = zeros(&mut dev, 4 * n);
        let dsum = zeros(&mut dev, 8);
        let args = [pv, 0, counter, fsum, imax, cas, exch, exch_old, dsum];
        let args: Vec<Arg> = args
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                if i == 1 {
                    Arg::I32(n as i32)
                } else {
                    Arg::Ptr(p)
                }
            })
            .collect();
        launch(&mut dev, m, ptx, "atomics_mix", cfg1(4, 128), &args);
        assert_eq!(
            read::<i32>(&dev, counter, 1)[0],
            n as i32,
            "atomicAdd counter ({arch})"
        );
        let fs: f32 = vals.iter().map(|&v| (v & 63) as f32).sum();
        assert_eq!(
            read::<f32>(&dev, fsum, 1)[0],
            fs,
            "atomicAdd float ({arch})"
        );
        assert_eq!(
            read::<i32>(&dev, imax, 1)[0],
            *vals.iter().max().unwrap(),
            "atomicMax ({arch})"
        );
        let cs = vals.iter().fold(0u32, |a, &v| a.wrapping_add(v as u32));
        assert_eq!(
            read::<u32>(&dev, cas, 1)[0],
            cs,
            "atomicCAS loop sum ({arch})"
        );
        let mut chain: Vec<i32> = read(&dev, exch_old, n);
        chain.push(read::<i32>(&dev, exch, 1)[0]);
        chain.sort_unstable();
        assert_eq!(
            chain,
            (0..=n as i32).collect::<Vec<_>>(),
            "atomicExch chain ({arch})"
        );
        let ds: f64 = vals.iter().map(|&v| (v & 1023) as f64 * 0.25).sum();
        assert_eq!(
            read::<f64>(&dev, dsum, 1)[0],
            ds,
            "atomicAdd double ({arch})"
        );

        let hist = zeros(&mut dev, 64);
        launch(
            &mut dev,
            m,
            ptx,
            "histogram16",
            cfg1(3, 64),
            &[Arg::Ptr(pv), Arg::I32(n as i32), Arg::Ptr(hist)],
        );
        let mut e = [0u32; 16];
        for &v in &vals {
            e[(v & 15) as usize] += 1;
        }
        assert_eq!(
            read::<u32>(&dev, hist, 16),
            e.to_vec(),
            "shared histogram ({arch})"
        );
    });
}

#[test]
fn noinline_device_function_calls() {
    for_archs("device_call.cu", |arch, ptx, m| {
        assert!(
            ptx.contains(".func"),
            "expected a real .func in the PTX ({arch})"
        );
        let n = 64;
        let x = random_f32(41, n, 1);
        let coef = random_f32(42, 5, 3);
        let mut rng = Rng(43);
        let a: Vec<i32> = (0..n).map(|_| rng.next_u32() as i32).collect();
        let b: Vec<i32> = (0..n)
            .map(|_| (rng.next_u32() as i32 >> rng.range(0, 30)) | 1)
            .collect();
        let mut dev = device();
        let (px, pc, pa, pb) = (
            upload(&mut dev, &x),
            upload(&mut dev, &coef),
            upload(&mut dev, &a),
            upload(&mut dev, &b),
        );
        let py = zeros(&mut dev, 4 * n);
        let pdm = zeros(&mut dev, 8 * n);
        launch(
            &mut dev,
            m,
            ptx,
            "call_kernel",
            cfg1(1, 64),
            &[
                Arg::Ptr(px),
                Arg::Ptr(pc),
                Arg::I32(5),
                Arg::Ptr(py),
                Arg::Ptr(pa),
                Arg::Ptr(pb),
                Arg::Ptr(pdm),
                Arg::I32(n as i32),
            ],
        );
        let y: Vec<f32> = read(&dev, py, n);
        let dm: Vec<i32> = read(&dev, pdm, 2 * n);
        for i in 0..n {
            let h = coef.iter().rev().fold(0f32, |r, &c| r.mul_add(x[i], c));
            assert_eq!(y[i].to_bits(), h.to_bits(), "horner {i} ({arch})");
            assert_eq!(
                [dm[2 * i], dm[2 * i + 1]],
                [a[i] / b[i], a[i] % b[i]],
                "divmod {i} ({arch})"
            );
        }
    });
}

#[test]
fn predicated_grid_stride_loop() {
    for_archs("misc.cu", |arch, ptx, m| {
        let n = 1000;
        let x = random_f32(51, n, 8);
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let py = upload(&mut dev, &vec![f32::NAN; n + 8]);
        launch(
            &mut dev,
            m,
            ptx,
            "grid_stride",
            cfg1(3, 64),
            &[Arg::Ptr(px), Arg::Ptr(py), Arg::I32(n as i32)],
        );
        let y: Vec<f32> = read(&dev, py, n + 8);
        for i in 0..n {
            assert_eq!(
                y[i].to_bits(),
                (2.0 * x[i] + 1.0).to_bits(),
                "y[{i}] ({arch})"
            );
        }
        assert!(y[n..].iter().all(|v| v.is_nan()), "wrote past n ({arch})");
    });
}

#[test]
fn by_value_struct_parameter() {
    for_archs("misc.cu", |arch, ptx, m| {
        let p = m.entry("struct_param").expect("entry struct_param");
        assert_eq!(
            (p.params[0].size, p.params[0].align),
            (24, 8),
            "struct param layout ({arch})"
        );
        let mut bytes = vec![0u8; 24];
        bytes[0..4].copy_from_slice(&0.5f32.to_le_bytes());
        bytes[4..8].copy_from_slice(&100i32.to_le_bytes());
        bytes[8..16].copy_from_slice(&3.25f64.to_le_bytes());
        bytes[16] = 7;
        bytes[18..20].copy_from_slice(&(-2i16).to_le_bytes());
        let mut dev = device();
        let out = upload(&mut dev, &vec![-1.0f32; 128]);
        launch(
            &mut dev,
            m,
            ptx,
            "struct_param",
            cfg1(1, 128),
            &[Arg::Bytes(bytes), Arg::Ptr(out)],
        );
        let got: Vec<f32> = read(&dev, out, 128);
        for (i, &g) in got.iter().enumerate() {
            let e = if i < 100 {
                0.5 * i as f32 + 3.25 + 7.0 - 2.0
            } else {
                -1.0
            };
            assert_eq!(g, e, "out[{i}] ({arch})");
        }
    });
}

#[test]
fn dynamic_shared_memory() {
    for_archs("misc.cu", |arch, ptx, m| {
        let (blocks, threads) = (3usize, 64usize);
        let n = blocks * threads;
        let x = random_f32(61, n, 5);
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let py = zeros(&mut dev, 4 * n);
        let pidx = zeros(&mut dev, 4 * n);
        let c = LaunchConfig {
            shared_mem_bytes: (threads * 8) as u32,
            ..cfg1(blocks as u32, threads as u32)
        };
        launch(
            &mut dev,
            m,
            ptx,
            "dyn_shared_reverse",
            c,
            &[Arg::Ptr(px), Arg::Ptr(py), Arg::Ptr(pidx)],
        );
        let y: Vec<f32> = read(&dev, py, n);
        let idx: Vec<i32> = read(&dev, pidx, n);
        for g in 0..n {
            let src = g / threads * threads + (threads - 1 - g % threads);
            assert_eq!((y[g], idx[g]), (x[src], src as i32), "element {g} ({arch})");
        }
    });
}

#[test]
fn indexing_64bit_offsets() {
    for_archs("misc.cu", |arch, ptx, m| {
        let n = 100;
        let x = random_f32(71, n, 5);
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let pout = zeros(&mut dev, 4 * n);
        let offset: u64 = 3_000_000_000; // elements; 12e9 bytes
        let base = px.wrapping_sub(offset * 4);
        launch(
            &mut dev,
            m,
            ptx,
            "index64",
            cfg1(1, 128),
            &[
                Arg::Ptr(base),
                Arg::Ptr(pout),
                Arg::U64(offset),
                Arg::I32(n as i32),
            ],
        );
        let got: Vec<f32> = read(&dev, pout, n);
        let e: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
        assert_eq!(got, e, "index64 ({arch})");
    });
}

#[test]
fn indexing_3d_grid_and_block() {
    for_archs("misc.cu", |arch, ptx, m| {
        let (g, b) = ([2u32, 3, 2], [4u32, 2, 3]);
        let total = (g.iter().product::<u32>() * b.iter().product::<u32>()) as usize;
        let mut dev = device();
        let out = zeros(&mut dev, 4 * total);
        let dims = zeros(&mut dev, 24);
        launch(
            &mut dev,
            m,
            ptx,
            "index3d",
            cfg(g, b),
            &[Arg::Ptr(out), Arg::Ptr(dims)],
        );
        let got: Vec<u32> = read(&dev, out, total);
        let mut e = Vec::with_capacity(total);
        for bz in 0..g[2] {
            for by in 0..g[1] {
                for bx in 0..g[0] {
                    for tz in 0..b[2] {
                        for ty in 0..b[1] {
                            for tx in 0..b[0] {
                                e.push(bx | by << 4 | bz << 8 | tx << 12 | ty << 16 | tz << 20);
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(got, e, "index3d ({arch})");
        assert_eq!(
            read::<u32>(&dev, dims, 6),
            vec![2, 3, 2, 4, 2, 3],
            "gridDim/blockDim ({arch})"
        );
    });
}

#[test]
fn local_memory_array_with_dynamic_index() {
    for_archs("misc.cu", |arch, ptx, m| {
        assert!(
            ptx.contains("st.local") || ptx.contains("ld.local"),
            "expected local memory in local_array ({arch})"
        );
        let n = 96usize;
        let mut rng = Rng(81);
        let x: Vec<i32> = (0..n).map(|_| (rng.next_u32() >> 1) as i32).collect();
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let pout = zeros(&mut dev, 4 * n);
        launch(
            &mut dev,
            m,
            ptx,
            "local_array",
            cfg1(2, 64),
            &[Arg::Ptr(px), Arg::Ptr(pout), Arg::I32(n as i32)],
        );
        let got: Vec<i32> = read(&dev, pout, n);
        for g in 0..n {
            let mut h = [0i32; 16];
            for k in 0..16 {
                h[((x[g] >> k) & 15) as usize] += k;
            }
            let s: i32 = h.iter().enumerate().map(|(k, &v)| v * (k as i32 + 1)).sum();
            assert_eq!(got[g], s, "thread {g} ({arch})");
        }
    });
}

#[test]
fn recursive_device_function() {
    for_archs("device_call.cu", |arch, ptx, m| {
        let n = 64usize;
        let args: Vec<i32> = (0..n as i32).map(|i| i % 13).collect();
        let mut dev = device();
        let pa = upload(&mut dev, &args);
        let pout = zeros(&mut dev, 4 * n);
        launch(
            &mut dev,
            m,
            ptx,
            "recursion_kernel",
            cfg1(1, 64),
            &[Arg::Ptr(pa), Arg::Ptr(pout), Arg::I32(n as i32)],
        );
        let got: Vec<i32> = read(&dev, pout, n);
        let fib = |k: i32| (0..k).fold((0i32, 1i32), |(a, b), _| (b, a + b)).0;
        let expect: Vec<i32> = args.iter().map(|&k| fib(k)).collect();
        assert_eq!(&got[..13], &expect[..13], "fib(0..13) ({arch})");
        assert_eq!(got, expect, "fib ({arch})");
    });
}

#[test]
fn last_block_finalize_with_self_resetting_counter() {
    for_archs("atomics.cu", |arch, ptx, m| {
        let n = 3000usize;
        let blocks = n.div_ceil(256);
        let mut dev = device();
        let ticket = zeros(&mut dev, 4);
        let partials = zeros(&mut dev, 4 * blocks);
        let total = zeros(&mut dev, 4);
        for launch_no in 0..2i32 {
            let vals: Vec<i32> = (0..n as i32)
                .map(|i| (i * 31 + launch_no * 7) % 201 - 100)
                .collect();
            let pv = upload(&mut dev, &vals);
            launch(
                &mut dev,
                m,
                ptx,
                "last_block_total",
                cfg1(blocks as u32, 256),
                &[
                    Arg::Ptr(pv),
                    Arg::I32(n as i32),
                    Arg::Ptr(partials),
                    Arg::Ptr(ticket),
                    Arg::Ptr(total),
                ],
            );
            assert_eq!(
                read::<i32>(&dev, total, 1)[0],
                vals.iter().sum::<i32>(),
                "total, launch {launch_no} ({arch})"
            );
            assert_eq!(
                read::<u32>(&dev, ticket, 1)[0],
                0,
                "ticket reset, launch {launch_no} ({arch})"
            );
        }
    });
}

#[test]
fn module_scope_constant_and_global_variables() {
    for_archs("misc.cu", |arch, ptx, m| {
        let mut dev = device();
        let out = zeros(&mut dev, 64 * 4);
        let cnt = zeros(&mut dev, 4);
        launch(
            &mut dev,
            m,
            ptx,
            "module_globals",
            cfg1(1, 64),
            &[Arg::Ptr(out), Arg::Ptr(cnt)],
        );
        let coef = [0.5f32, -1.25, 2.0, 3.0];
        let e: Vec<f32> = (0..64).map(|t| coef[t & 3] * (t % 6 + 1) as f32).collect();
        assert_eq!(
            read::<f32>(&dev, out, 64),
            e,
            "initialized __constant__/__device__ tables ({arch})"
        );
        assert_eq!(
            read::<i32>(&dev, cnt, 1)[0],
            5 + 64,
            "__device__ counter ({arch})"
        );
    });
}

#[test]
fn generic_pointers_to_shared_local_and_global() {
    for_archs("device_call.cu", |arch, ptx, m| {
        let g = random_f32(91, 64, 3);
        let mut dev = device();
        let pg = upload(&mut dev, &g);
        let pout = zeros(&mut dev, 4 * 128);
        let pout2 = zeros(&mut dev, 4 * 64);
        launch(
            &mut dev,
            m,
            ptx,
            "generic_pointers",
            cfg1(1, 64),
            &[Arg::Ptr(pg), Arg::Ptr(pout), Arg::Ptr(pout2)],
        );
        let out: Vec<f32> = read(&dev, pout, 128);
        let out2: Vec<i32> = read(&dev, pout2, 64);
        for t in 0..64usize {
            let s: f32 = (0..8).fold(0.0, |a, i| a + g[t % 8 + 8 * i] * 2.0);
            let gs: f32 = (0..8).fold(0.0, |a, i| a + g[t % 8 + 8 * i]);
            assert_eq!(
                out[2 * t].to_bits(),
                s.to_bits(),
                "shared via generic, thread {t} ({arch})"
            );
            assert_eq!(
                out[2 * t + 1].to_bits(),
                gs.to_bits(),
                "global via generic, thread {t} ({arch})"
            );
            let acc: i32 = (0..8).map(|i| ((t + i) * (t + i) * (i + 1)) as i32).sum();
            assert_eq!(out2[t], acc, "local via generic, thread {t} ({arch})");
        }
    });
}

#[test]
fn launch_bounds_and_nounroll() {
    for_archs("misc.cu", |arch, ptx, m| {
        assert!(
            ptx.contains(".maxntid 256") && ptx.contains(".pragma \"nounroll\""),
            "{arch}"
        );
        let n = 300usize;
        let x: Vec<i32> = (0..n as i32).map(|i| i * 7).collect();
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let py = zeros(&mut dev, 4 * n);
        launch(
            &mut dev,
            m,
            ptx,
            "bounded",
            cfg1(2, 256),
            &[Arg::Ptr(px), Arg::Ptr(py), Arg::I32(n as i32)],
        );
        let y: Vec<i32> = read(&dev, py, n);
        let e: Vec<i32> = x.iter().map(|&v| (0..=(v & 15)).sum()).collect();
        assert_eq!(y, e, "{arch}");
        // More threads per block than .maxntid allows is a launch error, as on a GPU.
        let r = dev.launch(
            m,
            "bounded",
            cfg1(1, 512),
            &[Arg::Ptr(px), Arg::Ptr(py), Arg::I32(n as i32)],
        );
        assert!(
            matches!(r, Err(ptxsim::SimError::InvalidArgument(_))),
            "block of 512 > .maxntid 256 ({arch}): {r:?}"
        );
    });
}

#[test]
fn small_and_vector_kernel_parameters() {
    for_archs("misc.cu", |arch, ptx, m| {
        let e = m.entry("small_params").expect("small_params");
        let shape: Vec<(usize, usize)> = e.params.iter().map(|p| (p.size, p.align)).collect();
        assert_eq!(
            shape,
            vec![(1, 1), (2, 2), (1, 1), (8, 8), (16, 16), (8, 8)],
            "param sizes/aligns ({arch})"
        );
        let mut dev = device();
        let out = zeros(&mut dev, 32);
        let v: Vec<u8> = common::f32_bytes(&[1.5, -2.25, 3.0, 1e-3]);
        launch(
            &mut dev,
            m,
            ptx,
            "small_params",
            cfg1(1, 32),
            &[
                Arg::U8((-7i8) as u8),
                Arg::U16((-300i16) as u16),
                Arg::U8(200),
                Arg::F64(-0.125),
                Arg::Bytes(v),
                Arg::Ptr(out),
            ],
        );
        assert_eq!(
            read::<f32>(&dev, out, 8),
            vec![-7.0, -300.0, 200.0, -0.125, 1.5, -2.25, 3.0, 1e-3],
            "{arch}"
        );
    });
}

#[test]
fn indirect_calls_through_function_pointers() {
    for_archs("indirect_call.cu", |arch, ptx, m| {
        let n = 64usize;
        let x: Vec<i32> = (0..n as i32).map(|i| i * 5 - 100).collect();
        let mut dev = device();
        let px = upload(&mut dev, &x);
        let py = zeros(&mut dev, 4 * n);
        launch(
            &mut dev,
            m,
            ptx,
            "indirect_calls",
            cfg1(1, 64),
            &[Arg::Ptr(px), Arg::Ptr(py), Arg::I32(n as i32)],
        );
        let e: Vec<i32> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| if i & 1 == 0 { v + 1 } else { 2 * v })
            .collect();
        assert_eq!(read::<i32>(&dev, py, n), e, "{arch}");
    });
}
