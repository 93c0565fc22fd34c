//! BatchNorm on a real GPU (skipped with the reason when none is usable; a failure when
//! WARPNORM_REQUIRE_GPU=1): the module through several training steps and eval against the
//! CPU reference, rejected calls leave the statistics untouched, reruns are bitwise equal, and
//! the simulator's cases and the PyTorch fixtures run on the GPU backend
//! (`testkit::gpu::Gpu`) through the same code as on ptxsim.

use crate::support::{check, f64s, max_abs, Rng, Tol};
use half::bf16;
use testkit::gpu::{gpu_stream, Gpu};
use warpnorm::batch_norm::{
    BatchNorm, BatchNormConfig, BatchNormDesc, ForwardOutput, Layout, Mode, Momentum,
};
use warpnorm::cpu::batch_norm as cpu;
use warpnorm::{DType, Element, Error, Executor};

/// Relative to max|ref| (as in the simulator sweep): 4 u_T + 32 u_f32 for activations, 32 u_f32
/// plus 2 u_P for the parameter-typed outputs.
fn tol(d: DType) -> Tol {
    Tol {
        atol: 0.0,
        k: 4.0 + 32.0 * DType::F32.unit_roundoff() / d.unit_roundoff(),
    }
}

/// Three training steps and one eval step of one module, step i on `shapes[i % len]` (all with
/// the same channels), each checked against the CPU reference.
fn module_steps<T: Element + Default>(shapes: &[&[usize]], layout: Layout, momentum: Momentum) {
    let Some(stream) = gpu_stream("batch_norm_gpu module_steps") else {
        return;
    };
    let c = shapes[0][1];
    let mut cfg = BatchNormConfig::new(c);
    cfg.momentum = momentum;
    let mut bn = BatchNorm::<f32>::new(&stream, cfg).unwrap();
    let mut rng = Rng::new(3);
    let gamma: Vec<f32> = (0..c).map(|_| 1.0 + 0.5 * rng.signed() as f32).collect();
    let beta: Vec<f32> = (0..c).map(|_| 0.5 * rng.signed() as f32).collect();
    bn.load_state(&warpnorm::State {
        weight: Some(gamma.clone()),
        bias: Some(beta.clone()),
        ..Default::default()
    })
    .unwrap();
    let (mut rm, mut rv, mut nbt) = (vec![0.0f32; c], vec![1.0f32; c], 0i64);
    for step in 0..4 {
        let dims = shapes[step % shapes.len()];
        let desc = BatchNormDesc::new(dims, layout, T::DTYPE, DType::F32);
        let n: usize = dims.iter().product();
        let training = step < 3;
        if training {
            bn.train()
        } else {
            bn.eval()
        }
        let hx: Vec<T> = crate::support::make_input(&desc, &mut rng);
        let hdy: Vec<T> = (0..n).map(|_| T::from_f64(rng.signed())).collect();
        let x = stream.clone_htod(&hx).unwrap();
        let dy = stream.clone_htod(&hdy).unwrap();
        let ForwardOutput { y, saved } = bn.forward(&x.as_view(), dims, layout).unwrap();
        let grads = bn
            .backward(&x.as_view(), &dy.as_view(), dims, layout, &saved)
            .unwrap();
        let mode = if training {
            Mode {
                batch_stats: true,
                momentum,
            }
        } else {
            Mode::eval()
        };
        let want = cpu::forward::<T, f32>(
            &desc.clone().with_mode(mode),
            &hx,
            Some((&gamma, &beta)),
            Some(cpu::Running {
                mean: &mut rm,
                var: &mut rv,
                num_batches_tracked: Some(&mut nbt),
            }),
        )
        .unwrap();
        let sm: Vec<f32> = stream.clone_dtoh(&saved.mean).unwrap();
        let sml: Vec<f32> = stream.clone_dtoh(&saved.mean_lo).unwrap();
        let si: Vec<f32> = stream.clone_dtoh(&saved.invstd).unwrap();
        let wb = cpu::backward::<T, f32>(
            &desc.clone().with_mode(if !training {
                Mode::eval()
            } else {
                Mode::train(0.1)
            }),
            &hx,
            &hdy,
            Some(&gamma),
            &sm,
            Some(&sml),
            &si,
        )
        .unwrap();
        let gy: Vec<T> = stream.clone_dtoh(&y).unwrap();
        let gdx: Vec<T> = stream.clone_dtoh(&grads.dx).unwrap();
        let u = T::DTYPE.unit_roundoff();
        let ctx = format!("{dims:?} {layout:?} {} step {step}", T::DTYPE);
        check(
            &format!("{ctx} y"),
            &f64s(&gy),
            &f64s(&want.y),
            tol(T::DTYPE),
            u,
            &[max_abs(&f64s(&want.y))],
        )
        .unwrap();
        let sx = crate::support::dx_scale(&desc, !training, &hx, &hdy, Some(&gamma), &sm, &si);
        check(
            &format!("{ctx} dx"),
            &f64s(&gdx),
            &f64s(&wb.dx),
            tol(T::DTYPE),
            u,
            &[max_abs(&sx)],
        )
        .unwrap();
        let grm: Vec<f32> = stream.clone_dtoh(bn.running_mean().unwrap()).unwrap();
        let grv: Vec<f32> = stream.clone_dtoh(bn.running_var().unwrap()).unwrap();
        let gn: Vec<i64> = stream
            .clone_dtoh(bn.num_batches_tracked().unwrap())
            .unwrap();
        let uf = DType::F32.unit_roundoff();
        let sc = |v: &[f32]| v.iter().map(|x| x.abs() as f64 + 2.0).collect::<Vec<_>>();
        check(
            &format!("{ctx} running_mean"),
            &f64s(&grm),
            &f64s(&rm),
            Tol { atol: 0.0, k: 64.0 },
            uf,
            &sc(&rm),
        )
        .unwrap();
        check(
            &format!("{ctx} running_var"),
            &f64s(&grv),
            &f64s(&rv),
            Tol { atol: 0.0, k: 64.0 },
            uf,
            &sc(&rv),
        )
        .unwrap();
        assert_eq!(gn[0], nbt, "{ctx}: num_batches_tracked");
    }
}

#[test]
fn module_bn1d_few_channels_large_batch() {
    module_steps::<f32>(&[&[65536, 8]], Layout::Contiguous, Momentum::Factor(0.1));
}

#[test]
fn module_bn2d_nchw_cumulative() {
    module_steps::<f32>(
        &[&[8, 32, 14, 14]],
        Layout::Contiguous,
        Momentum::Cumulative,
    );
}

#[test]
fn module_bn2d_nhwc_bf16() {
    module_steps::<bf16>(
        &[&[8, 64, 14, 14]],
        Layout::ChannelsLast,
        Momentum::Factor(0.3),
    );
}

#[test]
fn module_bn3d_odd_sizes() {
    module_steps::<half::f16>(
        &[&[3, 5, 3, 7, 5]],
        Layout::ChannelsLast,
        Momentum::Factor(0.1),
    );
}

/// A module first used on small inputs, then on larger ones: with few SMs the larger shape
/// takes the fused tier with more than 48 KiB of dynamic shared memory, which needs the
/// kernel's opt-in raised even though its first launch did not (the emulated driver has 8
/// SMs; on an H200 both shapes take the split tier and this is a plain correctness check).
#[test]
fn module_growing_shapes() {
    module_steps::<f32>(
        &[&[8, 16, 14, 14], &[8, 16, 36, 40]],
        Layout::Contiguous,
        Momentum::Factor(0.1),
    );
}

/// An empty batch through the module: empty y and dx, the batch counted, the running
/// statistics unchanged, zero dgamma / dbeta (PyTorch's semantics; CUDA cannot allocate zero
/// bytes, so this also checks how the module allocates empty outputs).
#[test]
fn module_empty_batch() {
    let Some(stream) = gpu_stream("module_empty_batch") else {
        return;
    };
    let mut bn = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(16)).unwrap();
    let backing = stream.clone_htod(&[0.0f32]).unwrap();
    let x = backing.slice(0..0);
    let dims = [0, 16, 2, 2];
    let ForwardOutput { y, saved } = bn.forward(&x, &dims, Layout::Contiguous).unwrap();
    let grads = bn
        .backward(&x, &x, &dims, Layout::Contiguous, &saved)
        .unwrap();
    assert_eq!((y.len(), grads.dx.len()), (0, 0));
    let get = |v: &cudarc::driver::CudaSlice<f32>| stream.clone_dtoh(v).unwrap();
    assert_eq!(get(grads.dgamma.as_ref().unwrap()), vec![0.0; 16]);
    assert_eq!(get(grads.dbeta.as_ref().unwrap()), vec![0.0; 16]);
    assert_eq!(get(bn.running_mean().unwrap()), vec![0.0; 16]);
    assert_eq!(get(bn.running_var().unwrap()), vec![1.0; 16]);
    let n: Vec<i64> = stream
        .clone_dtoh(bn.num_batches_tracked().unwrap())
        .unwrap();
    assert_eq!(n[0], 1, "an empty training batch still counts");
}

#[test]
fn rejected_calls_leave_statistics_untouched() {
    let Some(stream) = gpu_stream("rejected_calls_leave_statistics_untouched") else {
        return;
    };
    let mut bn = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(3)).unwrap();
    let x = stream.clone_htod(&[1.0f32, 2.0, 3.0]).unwrap();
    let e = bn
        .forward(&x.as_view(), &[1, 3], Layout::Contiguous)
        .err()
        .expect("one value per channel");
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = bn
        .forward(&x.as_view(), &[1, 4], Layout::Contiguous)
        .err()
        .expect("wrong channel count");
    assert!(matches!(e, Error::Shape { .. }), "{e}");
    let x2 = stream.clone_htod(&[1.0f32; 5]).unwrap();
    let e = bn
        .forward(&x2.as_view(), &[2, 3], Layout::Contiguous)
        .err()
        .expect("wrong length");
    assert!(matches!(e, Error::Length { .. }), "{e}");
    let n: Vec<i64> = stream
        .clone_dtoh(bn.num_batches_tracked().unwrap())
        .unwrap();
    let rm: Vec<f32> = stream.clone_dtoh(bn.running_mean().unwrap()).unwrap();
    let rv: Vec<f32> = stream.clone_dtoh(bn.running_var().unwrap()).unwrap();
    assert_eq!((n[0], rm, rv), (0, vec![0.0; 3], vec![1.0; 3]));
}

#[test]
fn reruns_are_bitwise_identical_on_the_gpu() {
    let Some(stream) = gpu_stream("reruns_are_bitwise_identical_on_the_gpu") else {
        return;
    };
    let dims = [4096usize, 3, 257];
    let n: usize = dims.iter().product();
    let mut rng = Rng::new(11);
    let hx: Vec<f32> = (0..n).map(|_| rng.signed() as f32 * 5.0 + 1000.0).collect();
    let x = stream.clone_htod(&hx).unwrap();
    let run = || {
        let mut bn = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(3)).unwrap();
        let ForwardOutput { y, saved } =
            bn.forward(&x.as_view(), &dims, Layout::Contiguous).unwrap();
        let g = bn
            .backward(
                &x.as_view(),
                &y.as_view(),
                &dims,
                Layout::Contiguous,
                &saved,
            )
            .unwrap();
        let mut bits: Vec<u32> = stream
            .clone_dtoh(&y)
            .unwrap()
            .iter()
            .map(|v: &f32| v.to_bits())
            .collect();
        bits.extend(
            stream
                .clone_dtoh(&g.dx)
                .unwrap()
                .iter()
                .map(|v: &f32| v.to_bits()),
        );
        bits.extend(
            stream
                .clone_dtoh(g.dgamma.as_ref().unwrap())
                .unwrap()
                .iter()
                .map(|v: &f32| v.to_bits()),
        );
        bits
    };
    assert!(run() == run());
}

/// The simulator's coverage set and whole sweep through the shared `run_on`, on the GPU
/// backend, planned for the real device.
#[test]
fn gpu_sweep() {
    let Some(stream) = gpu_stream("gpu_sweep") else {
        return;
    };
    let mut cases = crate::support::coverage_cases();
    cases.extend(crate::support::sweep_cases());
    for case in &cases {
        let mut gpu = Gpu::new(&stream).unwrap();
        let props = *gpu.props();
        crate::support::run_on(&mut gpu, case, &props).unwrap_or_else(|e| panic!("GPU: {e}"));
    }
}

/// The PyTorch fixtures (every step of every case, state carried across steps) on the GPU,
/// through the same device path as `fixtures::kernels_on_ptxsim_match_torch`.
#[test]
fn fixtures_match_torch_on_the_gpu() {
    let Some(stream) = gpu_stream("fixtures_match_torch_on_the_gpu") else {
        return;
    };
    let f = crate::fixtures::run_all(&mut || Gpu::new(&stream).unwrap());
    assert!(
        f.is_empty(),
        "GPU: {} fixture failures:\n{}",
        f.len(),
        f.join("\n")
    );
}

/// The adversarial accuracy cases (`crate::accuracy`: outliers first and last, a large offset,
/// a tiny mean, N(0, 1); every dtype, layout, access variant and tier the planner picks for
/// the device) on the GPU, against the f64 computation of the test.
#[test]
fn accuracy_on_the_gpu() {
    let Some(stream) = gpu_stream("accuracy_on_the_gpu") else {
        return;
    };
    let props = *Gpu::new(&stream).unwrap().props();
    let (fails, _) = crate::accuracy::run_all(&mut || Gpu::new(&stream).unwrap(), &props);
    assert!(fails.is_empty(), "GPU:\n{}", fails.join("\n"));
}
