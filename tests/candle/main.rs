//! `warpnorm::candle` on the CPU (feature `candle`): outputs and gradients (through
//! `Tensor::backward`) against candle_nn's own ops and against the same math composed from
//! candle's differentiable ops in f64, for f32, f16, bf16 and f32 parameters with 16-bit
//! activations; the modules' loading from a VarBuilder by PyTorch's names; errors.

use candle_core::{DType, Device, Module, ModuleT, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use warpnorm::candle::ops::BatchNormArgs;

const CPU: Device = Device::Cpu;

/// Deterministic values in about [-2, 2] plus `offset` (a small LCG).
fn values(n: usize, seed: u64, offset: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            offset + ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn tensor(dims: &[usize], seed: u64, offset: f32, dtype: DType) -> Tensor {
    let n = dims.iter().product();
    Tensor::from_vec(values(n, seed, offset), dims, &CPU)
        .unwrap()
        .to_dtype(dtype)
        .unwrap()
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// Tolerance of a result rounded once to `dtype` against an f64 reference.
fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => unreachable!(),
    }
}

#[track_caller]
fn assert_close(got: &Tensor, want: &Tensor, dtype: DType, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    let (g, w) = (f64s(got), f64s(want));
    let t = tol(dtype);
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= t * (b.abs() + 1.0).min(scale),
            "{what} [{i}]: {a} vs {b} (tolerance {t}, {dtype:?})"
        );
    }
}

/// The dtype pairs (activations, parameters) every op supports.
const PAIRS: [(DType, DType); 5] = [
    (DType::F32, DType::F32),
    (DType::F16, DType::F16),
    (DType::BF16, DType::BF16),
    (DType::F16, DType::F32),
    (DType::BF16, DType::F32),
];

/// LayerNorm composed from candle's differentiable ops (candle_nn::ops::layer_norm_slow) in f64.
fn layer_norm_f64(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Tensor {
    candle_nn::ops::layer_norm_slow(x, w, b, eps).unwrap()
}

#[test]
fn layer_norm_forward_and_gradients_every_dtype() {
    let (cols, eps) = (40, 1e-5f32);
    for (xt, pt) in PAIRS {
        // Rows with a common offset (the statistics must not cancel).
        let x = Var::from_tensor(&tensor(&[2, 3, cols], 1, 3.0, xt)).unwrap();
        let w = Var::from_tensor(&tensor(&[cols], 2, 1.0, pt)).unwrap();
        let b = Var::from_tensor(&tensor(&[cols], 3, 0.0, pt)).unwrap();
        let r = tensor(&[2, 3, cols], 4, 0.0, xt);
        let y = warpnorm::candle::ops::layer_norm(&x, Some(&w), Some(&b), eps).unwrap();
        assert_eq!(y.dtype(), xt);
        let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();

        // The reference: the same (rounded) inputs, in f64, through candle's autograd.
        let x64 = Var::from_tensor(&x.to_dtype(DType::F64).unwrap()).unwrap();
        let w64 = Var::from_tensor(&w.to_dtype(DType::F64).unwrap()).unwrap();
        let b64 = Var::from_tensor(&b.to_dtype(DType::F64).unwrap()).unwrap();
        let y64 = layer_norm_f64(&x64, &w64, &b64, eps);
        let g64 = (&y64 * r.to_dtype(DType::F64).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let what = format!("LayerNorm {xt:?}/{pt:?}");
        assert_close(&y, &y64, xt, &format!("{what} y"));
        let dx = grads.get(&x).expect("dx");
        let dw = grads.get(&w).expect("dweight");
        let db = grads.get(&b).expect("dbias");
        assert_eq!((dx.dtype(), dw.dtype(), db.dtype()), (xt, pt, pt));
        assert_close(dx, g64.get(&x64).unwrap(), xt, &format!("{what} dx"));
        // dweight sums over rows * (normalized values of ~1): scale the tolerance.
        let tw = if pt == DType::F32 { DType::F32 } else { pt };
        assert_close(dw, g64.get(&w64).unwrap(), tw, &format!("{what} dweight"));
        assert_close(db, g64.get(&b64).unwrap(), tw, &format!("{what} dbias"));
    }
}

#[test]
fn rms_norm_forward_and_gradients_every_dtype() {
    let (cols, eps) = (40, 1e-5f32);
    for (xt, pt) in PAIRS {
        let x = Var::from_tensor(&tensor(&[2, 3, cols], 11, 1.0, xt)).unwrap();
        let w = Var::from_tensor(&tensor(&[cols], 12, 1.0, pt)).unwrap();
        let r = tensor(&[2, 3, cols], 13, 0.0, xt);
        let y = warpnorm::candle::ops::rms_norm(&x, Some(&w), Some(eps)).unwrap();
        assert_eq!(y.dtype(), xt);
        let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        // The reference: candle_nn's RMSNorm composed from differentiable ops, in f64.
        let x64 = Var::from_tensor(&x.to_dtype(DType::F64).unwrap()).unwrap();
        let w64 = Var::from_tensor(&w.to_dtype(DType::F64).unwrap()).unwrap();
        let y64 = candle_nn::ops::rms_norm_slow(&x64, &w64, eps).unwrap();
        let g64 = (&y64 * r.to_dtype(DType::F64).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let what = format!("RMSNorm {xt:?}/{pt:?}");
        assert_close(&y, &y64, xt, &format!("{what} y"));
        let dx = grads.get(&x).expect("dx");
        let dw = grads.get(&w).expect("dweight");
        assert_eq!((dx.dtype(), dw.dtype()), (xt, pt));
        assert_close(dx, g64.get(&x64).unwrap(), xt, &format!("{what} dx"));
        assert_close(dw, g64.get(&w64).unwrap(), pt, &format!("{what} dweight"));
    }
    // Without a weight, eps None (PyTorch's default: f32's epsilon).
    let x = Var::from_tensor(&tensor(&[5, 16], 14, 0.0, DType::F32)).unwrap();
    let y = warpnorm::candle::ops::rms_norm(&x, None, None).unwrap();
    let ones = Tensor::ones(16, DType::F64, &CPU).unwrap();
    let y64 = candle_nn::ops::rms_norm_slow(&x.to_dtype(DType::F64).unwrap(), &ones, f32::EPSILON)
        .unwrap();
    assert_close(&y, &y64, DType::F32, "RMSNorm without weight");
    let g = y.sum_all().unwrap().backward().unwrap();
    assert!(g.get(&x).is_some());
}

#[test]
fn rms_norm_module_loads_like_candle_nn_and_matches_it() {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &CPU);
    let ours = warpnorm::candle::rms_norm(64, 1e-6, vb.pp("norm")).unwrap();
    assert_eq!(ours.weight().to_vec1::<f32>().unwrap(), vec![1.0f32; 64]);
    assert!(varmap.data().lock().unwrap().contains_key("norm.weight"));
    let w = tensor(&[64], 15, 1.0, DType::F32);
    let x = tensor(&[3, 5, 64], 16, 0.5, DType::F32);
    let theirs = candle_nn::RmsNorm::new(w.clone(), 1e-6);
    let ours = warpnorm::candle::RmsNorm::new(w, 1e-6);
    assert_close(
        &ours.forward(&x).unwrap(),
        &theirs.forward(&x).unwrap(),
        DType::F32,
        "module vs candle_nn::RmsNorm",
    );
    // Errors: a weight of the wrong size, bad dtype pairs, negative eps.
    let bad = tensor(&[63], 17, 1.0, DType::F32);
    assert!(warpnorm::candle::ops::rms_norm(&x, Some(&bad), None).is_err());
    let xh = x.to_dtype(DType::F16).unwrap();
    let wb = tensor(&[64], 18, 1.0, DType::BF16);
    assert!(warpnorm::candle::ops::rms_norm(&xh, Some(&wb), None).is_err());
    assert!(warpnorm::candle::ops::rms_norm(&x, None, Some(-1.0)).is_err());
}

#[test]
fn layer_norm_matches_candle_nn_fused_op_and_module() {
    let eps = 1e-5f32;
    let x = tensor(&[4, 7, 64], 5, -1.5, DType::F32);
    let w = tensor(&[64], 6, 1.0, DType::F32);
    let b = tensor(&[64], 7, 0.0, DType::F32);
    let ours = warpnorm::candle::ops::layer_norm(&x, Some(&w), Some(&b), eps).unwrap();
    let fused = candle_nn::ops::layer_norm(&x, &w, &b, eps).unwrap();
    assert_close(&ours, &fused, DType::F32, "vs candle_nn::ops::layer_norm");
    let m = candle_nn::LayerNorm::new(w.clone(), b.clone(), eps as f64);
    let wm = warpnorm::candle::LayerNorm::new(w, b, eps as f64);
    assert_close(
        &wm.forward(&x).unwrap(),
        &m.forward(&x).unwrap(),
        DType::F32,
        "module vs candle_nn::LayerNorm",
    );
}

#[test]
fn layer_norm_cpu_path_is_the_f64_reference() {
    use warpnorm::layer_norm::{Affine, LayerNormDesc};
    let (rows, cols) = (5, 33);
    let x = tensor(&[rows, cols], 8, 100.0, DType::BF16);
    let w = tensor(&[cols], 9, 1.0, DType::F32);
    let b = tensor(&[cols], 10, 0.5, DType::F32);
    let y = warpnorm::candle::ops::layer_norm(&x, Some(&w), Some(&b), 1e-5).unwrap();
    let desc = LayerNormDesc::from_rows(
        rows,
        cols,
        warpnorm::DType::BF16,
        warpnorm::DType::F32,
        Affine::WeightBias,
        1e-5,
    )
    .unwrap();
    let xv: Vec<half::bf16> = x.flatten_all().unwrap().to_vec1().unwrap();
    let (wv, bv): (Vec<f32>, Vec<f32>) = (w.to_vec1().unwrap(), b.to_vec1().unwrap());
    let r = warpnorm::cpu::layer_norm::forward(&desc, &xv, Some(&wv[..]), Some(&bv[..])).unwrap();
    let yv: Vec<half::bf16> = y.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(yv, r.y);
}

#[test]
fn layer_norm_without_bias_or_affine_and_non_contiguous_input() {
    let x = tensor(&[16, 12], 11, 0.0, DType::F32);
    let xt = x.t().unwrap(); // (12, 16), not contiguous
    assert!(!xt.is_contiguous());
    let w = Var::from_tensor(&tensor(&[16], 12, 1.0, DType::F32)).unwrap();
    let a = warpnorm::candle::ops::layer_norm(&xt, Some(&w), None, 1e-5).unwrap();
    let c =
        warpnorm::candle::ops::layer_norm(&xt.contiguous().unwrap(), Some(&w), None, 1e-5).unwrap();
    assert_eq!(f64s(&a), f64s(&c));
    let zeros = Tensor::zeros(16, DType::F32, &CPU).unwrap();
    let slow = layer_norm_f64(&xt.contiguous().unwrap(), &w, &zeros, 1e-5);
    assert_close(&a, &slow, DType::F32, "weight only");
    let g = a.sum_all().unwrap().backward().unwrap();
    assert!(g.get(&w).is_some());
    let plain = warpnorm::candle::ops::layer_norm(&xt, None, None, 1e-5).unwrap();
    let ones = Tensor::ones(16, DType::F32, &CPU).unwrap();
    let slow = layer_norm_f64(&xt.contiguous().unwrap(), &ones, &zeros, 1e-5);
    assert_close(&plain, &slow, DType::F32, "no affine");
}

#[test]
fn layer_norm_errors() {
    let x = tensor(&[4, 8], 13, 0.0, DType::BF16);
    let w16 = tensor(&[8], 14, 1.0, DType::F16);
    let w = tensor(&[8], 14, 1.0, DType::F32);
    let w7 = tensor(&[7], 14, 1.0, DType::F32);
    let ln = warpnorm::candle::ops::layer_norm;
    assert!(
        ln(&x, Some(&w16), None, 1e-5).is_err(),
        "f16 parameters with bf16 x"
    );
    assert!(
        ln(&x, Some(&w7), None, 1e-5).is_err(),
        "wrong weight length"
    );
    assert!(ln(&x, None, Some(&w), 1e-5).is_err(), "bias without weight");
    assert!(ln(&x, Some(&w), None, -1.0).is_err(), "negative eps");
    let xi = Tensor::zeros((4, 8), DType::U32, &CPU).unwrap();
    assert!(ln(&xi, None, None, 1e-5).is_err(), "integer input");
    let vm = VarMap::new();
    let vb = VarBuilder::from_varmap(&vm, DType::F32, &CPU);
    let rms = candle_nn::LayerNormConfig {
        eps: 1e-5,
        remove_mean: false,
        affine: false,
    };
    let err = warpnorm::candle::layer_norm(8, rms, vb).unwrap_err();
    assert!(err.to_string().contains("RMSNorm"), "{err}");
}

/// BatchNorm in training through candle_nn's own (composed, differentiable) BatchNorm in f64.
fn candle_nn_batch_norm(
    c: usize,
    rm: &Tensor,
    rv: &Tensor,
    w: &Tensor,
    b: &Tensor,
    momentum: f64,
) -> candle_nn::BatchNorm {
    candle_nn::BatchNorm::new_with_momentum(
        c,
        rm.clone(),
        rv.clone(),
        w.clone(),
        b.clone(),
        1e-5,
        momentum,
    )
    .unwrap()
}

#[test]
fn batch_norm_train_and_eval_forward_gradients_and_running_stats_every_dtype() {
    let (n, c, h, wd) = (3, 4, 5, 2);
    for (xt, pt) in PAIRS {
        for train in [true, false] {
            let x = Var::from_tensor(&tensor(&[n, c, h, wd], 20, 2.0, xt)).unwrap();
            let w = Var::from_tensor(&tensor(&[c], 21, 1.0, pt)).unwrap();
            let b = Var::from_tensor(&tensor(&[c], 22, 0.0, pt)).unwrap();
            let rm = Var::from_tensor(&tensor(&[c], 23, 1.0, pt)).unwrap();
            let rv = Var::from_tensor(&tensor(&[c], 24, 3.0, pt)).unwrap();
            let r = tensor(&[n, c, h, wd], 25, 0.0, xt);
            let (rm0, rv0) = (
                rm.to_dtype(DType::F64).unwrap(),
                rv.to_dtype(DType::F64).unwrap(),
            );
            let y = warpnorm::candle::ops::batch_norm(
                &x,
                &BatchNormArgs {
                    weight: Some(&w),
                    bias: Some(&b),
                    running_mean: Some(&rm),
                    running_var: Some(&rv),
                    training: train,
                    momentum: 0.25,
                    eps: 1e-5,
                },
            )
            .unwrap();
            assert_eq!(y.dtype(), xt);
            let grads = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();

            let f = |t: &Tensor| Var::from_tensor(&t.to_dtype(DType::F64).unwrap()).unwrap();
            let (x64, w64, b64) = (f(&x), f(&w), f(&b));
            let bn = candle_nn_batch_norm(c, &rm0, &rv0, &w64, &b64, 0.25);
            let y64 = bn.forward_t(&x64, train).unwrap();
            let g64 = (&y64 * r.to_dtype(DType::F64).unwrap())
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let what = format!("BatchNorm train={train} {xt:?}/{pt:?}");
            assert_close(&y, &y64, xt, &format!("{what} y"));
            let dx = grads.get(&x).expect("dx");
            let dw = grads.get(&w).expect("dweight");
            let db = grads.get(&b).expect("dbias");
            assert_eq!((dx.dtype(), dw.dtype(), db.dtype()), (xt, pt, pt));
            assert_close(dx, g64.get(&x64).unwrap(), xt, &format!("{what} dx"));
            assert_close(dw, g64.get(&w64).unwrap(), pt, &format!("{what} dweight"));
            assert_close(db, g64.get(&b64).unwrap(), pt, &format!("{what} dbias"));
            // Running statistics: updated as candle_nn does (unbiased variance) in training,
            // untouched in eval.
            assert_close(
                rm.as_tensor(),
                bn.running_mean(),
                pt,
                &format!("{what} running_mean"),
            );
            assert_close(
                rv.as_tensor(),
                bn.running_var(),
                pt,
                &format!("{what} running_var"),
            );
            if !train {
                assert_eq!(f64s(rm.as_tensor()), f64s(&rm0));
                assert_eq!(f64s(rv.as_tensor()), f64s(&rv0));
            }
        }
    }
}

#[test]
fn batch_norm_matches_candle_nn_in_f32_and_without_affine() {
    let (n, c, l) = (8, 3, 6);
    let x = tensor(&[n, c, l], 30, -4.0, DType::F32);
    let vm = VarMap::new();
    let vb = VarBuilder::from_varmap(&vm, DType::F32, &CPU);
    let cfg = candle_nn::BatchNormConfig {
        eps: 1e-3,
        remove_mean: true,
        affine: false,
        momentum: 0.3,
    };
    let ours = warpnorm::candle::batch_norm(c, cfg, vb.pp("ours")).unwrap();
    let theirs = candle_nn::batch_norm(c, cfg, vb.pp("theirs")).unwrap();
    for step in 0..3 {
        let xs = (&x + step as f64).unwrap();
        let a = ours.forward_t(&xs, true).unwrap();
        let b = theirs.forward_t(&xs, true).unwrap();
        assert_close(&a, &b, DType::F32, "train, no affine");
    }
    assert_close(
        ours.running_mean(),
        theirs.running_mean(),
        DType::F32,
        "running_mean",
    );
    assert_close(
        ours.running_var(),
        theirs.running_var(),
        DType::F32,
        "running_var",
    );
    let a = ours.forward_t(&x, false).unwrap();
    let b = theirs.forward_t(&x, false).unwrap();
    assert_close(&a, &b, DType::F32, "eval");
    // (N, C) input: one value per channel per sample.
    let x2 = tensor(&[5, c], 31, 0.0, DType::F32);
    let a = ours.forward_t(&x2, true).unwrap();
    let b = theirs.forward_t(&x2, true).unwrap();
    assert_close(&a, &b, DType::F32, "(N, C)");
}

#[test]
fn batch_norm_loads_pytorch_names_and_shares_the_running_statistics_with_the_varmap() {
    let c = 3;
    let vm = VarMap::new();
    let vb = VarBuilder::from_varmap(&vm, DType::F32, &CPU);
    let bn = warpnorm::candle::batch_norm(c, 1e-5, vb.pp("bn")).unwrap();
    let names: std::collections::BTreeSet<String> =
        vm.data().lock().unwrap().keys().cloned().collect();
    let want = ["bn.bias", "bn.running_mean", "bn.running_var", "bn.weight"];
    assert_eq!(names.iter().map(String::as_str).collect::<Vec<_>>(), want);
    let x = tensor(&[4, c, 3], 40, 5.0, DType::F32);
    bn.forward_t(&x, true).unwrap();
    let stored = vm.data().lock().unwrap()["bn.running_mean"]
        .as_tensor()
        .clone();
    assert_eq!(f64s(&stored), f64s(bn.running_mean()));
    assert!(f64s(&stored).iter().all(|v| *v > 0.1), "updated: {stored}");

    // From given tensors (as a PyTorch state dict in safetensors gives them): eval uses them.
    let mut ts = std::collections::HashMap::new();
    let put = |v: Vec<f32>| Tensor::from_vec(v, c, &CPU).unwrap();
    ts.insert("m.running_mean".to_string(), put(vec![1.0, 2.0, 3.0]));
    ts.insert("m.running_var".to_string(), put(vec![4.0, 1.0, 0.25]));
    ts.insert("m.weight".to_string(), put(vec![2.0, 1.0, 1.0]));
    ts.insert("m.bias".to_string(), put(vec![0.0, 1.0, -1.0]));
    let vb = VarBuilder::from_tensors(ts, DType::F32, &CPU);
    let bn = warpnorm::candle::batch_norm(c, 0.0, vb.pp("m")).unwrap();
    let x = Tensor::from_vec(vec![3.0f32, 2.0, 3.5], (1, c), &CPU).unwrap();
    let y: Vec<f32> = bn
        .forward_t(&x, false)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    // (3-1)/2*2+0, (2-2)/1*1+1, (3.5-3)/0.5*1-1
    assert_eq!(y, vec![2.0, 1.0, 0.0]);
}

#[test]
fn layer_norm_loads_like_candle_nn() {
    let mut ts = std::collections::HashMap::new();
    ts.insert(
        "ln.weight".to_string(),
        Tensor::new(&[2.0f32, 2.0], &CPU).unwrap(),
    );
    ts.insert(
        "ln.bias".to_string(),
        Tensor::new(&[1.0f32, 0.0], &CPU).unwrap(),
    );
    let vb = VarBuilder::from_tensors(ts, DType::F32, &CPU);
    let ln = warpnorm::candle::layer_norm(2, 0.0, vb.pp("ln")).unwrap();
    let x = Tensor::new(&[[1.0f32, 3.0]], &CPU).unwrap();
    let y: Vec<f32> = ln
        .forward(&x)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(y, vec![-1.0, 2.0]);
    // f32 parameters, bf16 activations.
    let xb = x.to_dtype(DType::BF16).unwrap();
    let yb = ln.forward(&xb).unwrap();
    assert_eq!(yb.dtype(), DType::BF16);
    assert_eq!(f64s(&yb), vec![-1.0, 2.0]);
}

#[test]
fn batch_norm_errors_change_nothing() {
    let c = 2;
    let rm = Var::from_tensor(&Tensor::new(&[0.5f32, 0.5], &CPU).unwrap()).unwrap();
    let rv = Var::from_tensor(&Tensor::new(&[2.0f32, 2.0], &CPU).unwrap()).unwrap();
    let args = BatchNormArgs {
        running_mean: Some(&rm),
        running_var: Some(&rv),
        ..BatchNormArgs::default()
    };
    let bn = warpnorm::candle::ops::batch_norm;
    // One value per channel in training: PyTorch's error; nothing updated.
    let x1 = Tensor::new(&[[1.0f32, 2.0]], &CPU).unwrap();
    assert!(bn(&x1, &args).is_err());
    assert_eq!(rm.to_vec1::<f32>().unwrap(), vec![0.5, 0.5]);
    assert_eq!(rv.to_vec1::<f32>().unwrap(), vec![2.0, 2.0]);
    let x = tensor(&[4, c], 50, 0.0, DType::F32);
    assert!(
        bn(
            &x,
            &BatchNormArgs {
                momentum: 1.5,
                ..args
            }
        )
        .is_err(),
        "momentum > 1"
    );
    assert!(
        bn(
            &x,
            &BatchNormArgs {
                training: false,
                ..BatchNormArgs::default()
            }
        )
        .is_err(),
        "eval without running statistics"
    );
    let x3 = tensor(&[4, 3], 51, 0.0, DType::F32);
    assert!(bn(&x3, &args).is_err(), "3 channels, statistics of 2");
    let x16 = x.to_dtype(DType::F16).unwrap();
    let rmb = Var::from_tensor(&rm.to_dtype(DType::BF16).unwrap()).unwrap();
    let rvb = Var::from_tensor(&rv.to_dtype(DType::BF16).unwrap()).unwrap();
    let mixed = BatchNormArgs {
        running_mean: Some(&rmb),
        running_var: Some(&rvb),
        ..args
    };
    assert!(bn(&x16, &mixed).is_err(), "bf16 statistics with f16 input");
    assert_eq!(rm.to_vec1::<f32>().unwrap(), vec![0.5, 0.5]);
    let x1d = Tensor::new(&[1.0f32, 2.0], &CPU).unwrap();
    assert!(bn(&x1d, &args).is_err(), "1-D input");
    // Training without running statistics works (track_running_stats=False).
    let y = bn(&x, &BatchNormArgs::default()).unwrap();
    let m: Vec<f32> = y.mean(0).unwrap().to_vec1().unwrap();
    assert!(m.iter().all(|v| v.abs() < 1e-6), "{m:?}");
}

mod residual;

/// The CUDA path (feature `candle-cuda`) against the CPU path, when candle can open a CUDA
/// device (never on the emulated driver: see the README); `WARPNORM_REQUIRE_GPU=1` makes a
/// skip a failure.
#[cfg(feature = "candle-cuda")]
mod gpu {
    use super::*;

    fn device() -> Option<Device> {
        match Device::new_cuda(0) {
            Ok(d) => Some(d),
            Err(e) => {
                if std::env::var("WARPNORM_REQUIRE_GPU").as_deref() == Ok("1") {
                    panic!("WARPNORM_REQUIRE_GPU=1 but candle has no CUDA device: {e}");
                }
                eprintln!("skipped: candle has no CUDA device ({e})");
                None
            }
        }
    }

    /// LayerNorm and BatchNorm (training, then eval) forward and backward on `dev`: the
    /// outputs, gradients and running statistics, on the host.
    fn run(dev: &Device, xt: DType, pt: DType) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        let put = |t: Tensor| Var::from_tensor(&t.to_device(dev).unwrap()).unwrap();
        // x as a view at a nonzero offset of a larger device tensor (candle's layout offset).
        let big = tensor(&[3, 6, 40], 60, 2.0, xt).to_device(dev).unwrap();
        let x = Var::from_tensor(&big.narrow(0, 1, 2).unwrap().contiguous().unwrap()).unwrap();
        let xv = big.narrow(0, 1, 2).unwrap();
        let w = put(tensor(&[40], 61, 1.0, pt));
        let b = put(tensor(&[40], 62, 0.0, pt));
        let r = tensor(&[2, 6, 40], 63, 0.0, xt).to_device(dev).unwrap();
        let y = warpnorm::candle::ops::layer_norm(&xv, Some(&w), Some(&b), 1e-5).unwrap();
        let y2 = warpnorm::candle::ops::layer_norm(&x, Some(&w), Some(&b), 1e-5).unwrap();
        let g = (&y2 * &r).unwrap().sum_all().unwrap().backward().unwrap();
        out.push(("ln y (offset view)".into(), y));
        out.push(("ln dx".into(), g.get(&x).unwrap().clone()));
        out.push(("ln dweight".into(), g.get(&w).unwrap().clone()));
        out.push(("ln dbias".into(), g.get(&b).unwrap().clone()));
        // The fused residual add, LayerNorm and RMSNorm, with a residual bias; the loss reads
        // y and h.
        let xr = put(tensor(&[2, 6, 40], 70, 1.0, xt));
        let res = put(tensor(&[2, 6, 40], 71, -1.0, xt));
        let rb = put(tensor(&[40], 72, 0.5, pt));
        let rh = tensor(&[2, 6, 40], 73, 0.0, xt).to_device(dev).unwrap();
        for rms in [false, true] {
            let (y, h) = if rms {
                warpnorm::candle::ops::rms_norm_residual(&xr, &res, Some(&w), Some(&rb), None)
            } else {
                warpnorm::candle::ops::layer_norm_residual(
                    &xr,
                    &res,
                    Some(&w),
                    Some(&b),
                    Some(&rb),
                    1e-5,
                )
            }
            .unwrap();
            let ly = (&y * &r).unwrap().sum_all().unwrap();
            let lh = (&h * &rh).unwrap().sum_all().unwrap();
            let g = (ly + lh).unwrap().backward().unwrap();
            let mut named = vec![
                ("y", y.clone()),
                ("h", h.clone()),
                ("dx", g.get(&xr).unwrap().clone()),
                ("dresidual", g.get(&res).unwrap().clone()),
                ("dweight", g.get(&w).unwrap().clone()),
                ("dresidual_bias", g.get(&rb).unwrap().clone()),
            ];
            if !rms {
                named.push(("dbias", g.get(&b).unwrap().clone()));
            }
            for (name, t) in named {
                out.push((format!("residual rms={rms} {name}"), t));
            }
        }
        for train in [true, false] {
            let x = put(tensor(&[4, 3, 5, 3], 64, 1.0, xt));
            let w = put(tensor(&[3], 65, 1.0, pt));
            let b = put(tensor(&[3], 66, 0.0, pt));
            let rm = put(tensor(&[3], 67, 0.0, pt));
            let rv = put(tensor(&[3], 68, 2.0, pt));
            let r = tensor(&[4, 3, 5, 3], 69, 0.0, xt).to_device(dev).unwrap();
            let y = warpnorm::candle::ops::batch_norm(
                &x,
                &BatchNormArgs {
                    weight: Some(&w),
                    bias: Some(&b),
                    running_mean: Some(&rm),
                    running_var: Some(&rv),
                    training: train,
                    ..BatchNormArgs::default()
                },
            )
            .unwrap();
            let g = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
            for (name, t) in [
                ("y", y.clone()),
                ("dx", g.get(&x).unwrap().clone()),
                ("dweight", g.get(&w).unwrap().clone()),
                ("dbias", g.get(&b).unwrap().clone()),
                ("running_mean", rm.as_tensor().clone()),
                ("running_var", rv.as_tensor().clone()),
            ] {
                out.push((format!("bn train={train} {name}"), t));
            }
        }
        out.into_iter()
            .map(|(n, t)| (n, t.to_device(&CPU).unwrap()))
            .collect()
    }

    #[test]
    fn cuda_path_matches_the_cpu_path_every_dtype() {
        let Some(dev) = device() else { return };
        for (xt, pt) in PAIRS {
            let (gpu, cpu) = (run(&dev, xt, pt), run(&CPU, xt, pt));
            for ((name, g), (_, c)) in gpu.iter().zip(&cpu) {
                assert_eq!(g.dtype(), c.dtype(), "{name}");
                // Both are rounded once; the kernels accumulate in f32.
                assert_close(g, c, g.dtype(), &format!("{name} {xt:?}/{pt:?}"));
            }
        }
    }
}
