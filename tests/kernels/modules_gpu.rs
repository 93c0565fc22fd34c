//! The module types on a GPU (or the emulated driver): sizes that cannot be allocated are
//! errors, never an abort (initial values are written on the device, so no host buffer grows
//! with a parameter's size).

use warpnorm::batch_norm::{BatchNorm, BatchNormConfig, Layout, Momentum};
use warpnorm::layer_norm::{Affine, LayerNorm};
use warpnorm::{Error, State};

#[test]
fn impossible_parameter_sizes_are_errors_not_aborts() {
    let Some(stream) = testkit::gpu::gpu_stream("impossible_parameter_sizes_are_errors_not_aborts")
    else {
        return;
    };
    // 2^33 f32 parameters (32 GiB each for gamma and beta) once aborted the process building a
    // host vector of initial values.
    let e = LayerNorm::<f32>::new(&stream, &[1 << 33], Affine::WeightBias, 1e-5)
        .err()
        .expect("32 GiB of gamma cannot be allocated");
    assert!(matches!(e, Error::Driver { .. }), "{e}");
    // Byte sizes beyond i64 are an overflow before anything is allocated.
    let e = LayerNorm::<f32>::new(&stream, &[1 << 62], Affine::WeightBias, 1e-5)
        .err()
        .expect("2^64 bytes");
    assert!(matches!(e, Error::Overflow(_)), "{e}");
    let e = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(1 << 40))
        .err()
        .expect("4 TiB of running statistics cannot be allocated");
    assert!(matches!(e, Error::Driver { .. }), "{e}");
    // The stream is still usable afterwards, and fresh modules hold PyTorch's initial values.
    let ln = LayerNorm::<half::bf16>::new(&stream, &[3], Affine::WeightBias, 1e-5).unwrap();
    let g = stream.clone_dtoh(ln.gamma().unwrap()).unwrap();
    let b = stream.clone_dtoh(ln.beta().unwrap()).unwrap();
    assert_eq!(
        (g, b),
        (vec![half::bf16::ONE; 3], vec![half::bf16::ZERO; 3])
    );
    let bn = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(5)).unwrap();
    let rv = stream.clone_dtoh(bn.running_var().unwrap()).unwrap();
    let g = stream.clone_dtoh(bn.gamma().unwrap()).unwrap();
    assert_eq!((rv, g), (vec![1.0f32; 5], vec![1.0f32; 5]));
}

/// An optimizer can update the parameters in place through `params_mut`, and eps / momentum
/// can change between calls, as in PyTorch; bad values are rejected and change nothing.
#[test]
fn params_mut_and_setters_take_effect() {
    let Some(stream) = testkit::gpu::gpu_stream("params_mut_and_setters_take_effect") else {
        return;
    };
    let mut ln = LayerNorm::<f32>::new(&stream, &[4], Affine::WeightBias, 1e-5).unwrap();
    {
        let (g, b) = ln.params_mut();
        let (mut g, mut b) = (g.unwrap(), b.unwrap());
        stream.memcpy_htod(&[2.0f32; 4], &mut g).unwrap();
        stream.memcpy_htod(&[0.5f32; 4], &mut b).unwrap();
    }
    assert!(matches!(
        ln.set_eps(-1.0),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(ln.eps(), 1e-5);
    ln.set_eps(0.75).unwrap();
    let x = stream.clone_htod(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let out = ln.forward(&x.as_view(), &[1, 4]).unwrap();
    let y = stream.clone_dtoh(&out.y).unwrap();
    // mean 2.5, biased variance 1.25: y = (x - 2.5) / sqrt(1.25 + 0.75) * 2 + 0.5.
    for (got, xv) in y.iter().zip([1.0f64, 2.0, 3.0, 4.0]) {
        let want = (xv - 2.5) / 2f64.sqrt() * 2.0 + 0.5;
        assert!((*got as f64 - want).abs() < 1e-6, "{y:?}");
    }

    let mut bn = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(1)).unwrap();
    {
        let (g, _) = bn.params_mut();
        stream.memcpy_htod(&[3.0f32], &mut g.unwrap()).unwrap();
    }
    assert!(bn.set_momentum(Momentum::Factor(1.5)).is_err());
    bn.set_momentum(Momentum::Factor(0.5)).unwrap();
    bn.set_eps(0.0).unwrap();
    let x = stream.clone_htod(&[1.0f32, 3.0]).unwrap();
    let out = bn
        .forward(&x.as_view(), &[2, 1], Layout::Contiguous)
        .unwrap();
    let y = stream.clone_dtoh(&out.y).unwrap();
    assert_eq!(y, vec![-3.0, 3.0], "(x - 2) / 1 * 3");
    // running_mean = 0.5 * 0 + 0.5 * 2; running_var = 0.5 * 1 + 0.5 * 2 (unbiased).
    let rm = stream.clone_dtoh(bn.running_mean().unwrap()).unwrap();
    let rv = stream.clone_dtoh(bn.running_var().unwrap()).unwrap();
    assert_eq!((rm, rv), (vec![1.0], vec![1.5]));
}

/// State in and out by PyTorch's names: a round trip is exact, partial loads keep the other
/// entries, and a rejected load (wrong length, an entry the module lacks) changes nothing.
#[test]
fn state_round_trips_by_pytorch_names() {
    let Some(stream) = testkit::gpu::gpu_stream("state_round_trips_by_pytorch_names") else {
        return;
    };
    let mut bn = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(3)).unwrap();
    let fresh = bn.state().unwrap();
    assert_eq!(
        fresh.names(),
        [
            "weight",
            "bias",
            "running_mean",
            "running_var",
            "num_batches_tracked"
        ]
    );
    assert_eq!(fresh.running_var, Some(vec![1.0; 3]));
    assert_eq!(fresh.num_batches_tracked, Some(0));
    let saved = State {
        weight: Some(vec![0.5, 1.5, 2.5]),
        bias: Some(vec![-1.0, 0.0, 1.0]),
        running_mean: Some(vec![0.25, -0.25, 3.0]),
        running_var: Some(vec![2.0, 4.0, 8.0]),
        num_batches_tracked: Some(41),
    };
    bn.load_state(&saved).unwrap();
    assert_eq!(bn.state().unwrap(), saved);
    // Partial: an old checkpoint without num_batches_tracked, and running stats only.
    let partial = State {
        running_mean: Some(vec![7.0; 3]),
        ..Default::default()
    };
    bn.load_state(&partial).unwrap();
    let now = bn.state().unwrap();
    assert_eq!(now.running_mean, Some(vec![7.0; 3]));
    assert_eq!(
        (now.weight, now.num_batches_tracked),
        (saved.weight.clone(), Some(41))
    );
    // Rejected loads change nothing: a wrong length after a valid entry, an unexpected key.
    let bad = State {
        weight: Some(vec![9.0; 3]),
        bias: Some(vec![9.0; 2]),
        ..Default::default()
    };
    assert!(matches!(bn.load_state(&bad), Err(Error::Length { .. })));
    let mut untracked = BatchNormConfig::new(3);
    untracked.track_running_stats = false;
    let mut bn2 = BatchNorm::<f32>::new(&stream, untracked).unwrap();
    assert_eq!(bn2.state().unwrap().names(), ["weight", "bias"]);
    assert!(matches!(
        bn2.load_state(&saved),
        Err(Error::UnexpectedKey { .. })
    ));
    assert_eq!(bn.state().unwrap().weight, saved.weight);

    let mut ln = LayerNorm::<half::bf16>::new(&stream, &[2, 2], Affine::Weight, 1e-5).unwrap();
    assert_eq!(ln.state().unwrap().names(), ["weight"]);
    let w: Vec<half::bf16> = [1.5f32, -2.0, 0.25, 8.0].map(half::bf16::from_f32).to_vec();
    ln.load_state(&State {
        weight: Some(w.clone()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(ln.state().unwrap().weight, Some(w));
    let e = ln
        .load_state(&State {
            bias: Some(vec![half::bf16::ZERO; 4]),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(e, Error::UnexpectedKey { .. }), "{e}");
}
