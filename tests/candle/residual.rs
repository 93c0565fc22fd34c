//! The fused residual add on candle tensors (`ops::layer_norm_residual`,
//! `ops::rms_norm_residual`, the modules' `forward_residual`) on the CPU: y, h and every
//! gradient (x, residual, weight, bias, residual bias) against the same math composed from
//! candle's differentiable ops in f64, for every dtype pair, with the loss reading y and h,
//! y alone or h alone; errors.

use super::*;

/// Which of the two outputs the loss reads.
#[derive(Clone, Copy, Debug)]
enum Uses {
    Both,
    YOnly,
    HOnly,
}

/// loss = sum(y * ry) + sum(h * rh), the terms `uses` names.
fn loss(y: &Tensor, h: &Tensor, ry: &Tensor, rh: &Tensor, uses: Uses) -> Tensor {
    let ly = (y * ry).unwrap().sum_all().unwrap();
    let lh = (h * rh).unwrap().sum_all().unwrap();
    match uses {
        Uses::Both => (ly + lh).unwrap(),
        Uses::YOnly => ly,
        Uses::HOnly => lh,
    }
}

/// The f64 reference of h: x + residual (+ bias) in f64, with the value of warpnorm's h (one
/// rounding to `dtype`) and the exact gradient (the rounding is passed straight through).
fn h_reference(x: &Tensor, r: &Tensor, bias: Option<&Tensor>, dtype: DType) -> Tensor {
    let mut h = (x + r).unwrap();
    if let Some(b) = bias {
        h = h.broadcast_add(b).unwrap();
    }
    let rounded = h.to_dtype(dtype).unwrap().to_dtype(DType::F64).unwrap();
    let correction = (rounded - h.detach()).unwrap().detach();
    (h + correction).unwrap()
}

fn var64(t: &Tensor) -> Var {
    Var::from_tensor(&t.to_dtype(DType::F64).unwrap()).unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Norm {
    LayerNorm,
    Rms,
}

/// One call of the fused op against its f64 reference: checks y, h and every gradient.
fn check(norm: Norm, xt: DType, pt: DType, with_bias: bool, uses: Uses, seed: u64) {
    let (cols, eps) = (48, 1e-5f32);
    let dims = [2, 3, cols];
    // x and the residual with offsets that partly cancel in h (large |x|, |residual|).
    let x = Var::from_tensor(&tensor(&dims, seed, 6.0, xt)).unwrap();
    let r = Var::from_tensor(&tensor(&dims, seed + 1, -4.0, xt)).unwrap();
    let w = Var::from_tensor(&tensor(&[cols], seed + 2, 1.0, pt)).unwrap();
    let beta = Var::from_tensor(&tensor(&[cols], seed + 3, 0.0, pt)).unwrap();
    let bias = Var::from_tensor(&tensor(&[cols], seed + 4, 0.5, pt)).unwrap();
    let bias_arg = with_bias.then_some(bias.as_tensor());
    let ry = tensor(&dims, seed + 5, 0.0, xt);
    let rh = tensor(&dims, seed + 6, 0.0, xt);
    let (y, h) = match norm {
        Norm::LayerNorm => {
            warpnorm::candle::ops::layer_norm_residual(&x, &r, Some(&w), Some(&beta), bias_arg, eps)
        }
        Norm::Rms => {
            warpnorm::candle::ops::rms_norm_residual(&x, &r, Some(&w), bias_arg, Some(eps))
        }
    }
    .unwrap();
    assert_eq!((y.dtype(), h.dtype()), (xt, xt));
    assert_eq!((y.dims(), h.dims()), (&dims[..], &dims[..]));
    let grads = loss(&y, &h, &ry, &rh, uses).backward().unwrap();

    let (x64, r64, w64, beta64, bias64) =
        (var64(&x), var64(&r), var64(&w), var64(&beta), var64(&bias));
    let h64 = h_reference(&x64, &r64, with_bias.then_some(bias64.as_tensor()), xt);
    let y64 = match norm {
        Norm::LayerNorm => candle_nn::ops::layer_norm_slow(&h64, &w64, &beta64, eps).unwrap(),
        Norm::Rms => candle_nn::ops::rms_norm_slow(&h64, &w64, eps).unwrap(),
    };
    let (ry64, rh64) = (
        ry.to_dtype(DType::F64).unwrap(),
        rh.to_dtype(DType::F64).unwrap(),
    );
    let g64 = loss(&y64, &h64, &ry64, &rh64, uses).backward().unwrap();

    let what = format!("{norm:?} {xt:?}/{pt:?} bias={with_bias} {uses:?}");
    assert_close(&y, &y64, xt, &format!("{what} y"));
    assert_close(&h, &h64, xt, &format!("{what} h"));
    let dx = grads.get(&x).expect("dx");
    let dr = grads.get(&r).expect("dresidual");
    assert_eq!((dx.dtype(), dr.dtype()), (xt, xt));
    assert_close(dx, g64.get(&x64).unwrap(), xt, &format!("{what} dx"));
    assert_close(dr, g64.get(&r64).unwrap(), xt, &format!("{what} dresidual"));
    // The gradients of x and the residual are one tensor's values.
    assert_eq!(f64s(dx), f64s(dr), "{what}: dx and dresidual differ");
    let mut params = vec![("dweight", &w, &w64)];
    if matches!(norm, Norm::LayerNorm) {
        params.push(("dbeta", &beta, &beta64));
    }
    if with_bias {
        params.push(("dbias", &bias, &bias64));
    }
    for (name, p, p64) in params {
        let g = grads.get(p).unwrap_or_else(|| panic!("{what}: no {name}"));
        assert_eq!(g.dtype(), pt, "{what} {name}");
        match g64.get(p64) {
            Some(want) => assert_close(g, want, pt, &format!("{what} {name}")),
            // The loss does not depend on it (h alone: y's parameters): zeros.
            None => assert!(f64s(g).iter().all(|v| *v == 0.0), "{what} {name}: not zero"),
        }
    }
    if !with_bias {
        assert!(
            grads.get(&bias).is_none(),
            "{what}: a gradient for an unused bias"
        );
    }
}

#[test]
fn layer_norm_residual_forward_and_gradients_every_dtype() {
    for (i, (xt, pt)) in PAIRS.into_iter().enumerate() {
        for with_bias in [false, true] {
            for uses in [Uses::Both, Uses::YOnly, Uses::HOnly] {
                check(
                    Norm::LayerNorm,
                    xt,
                    pt,
                    with_bias,
                    uses,
                    100 + 10 * i as u64,
                );
            }
        }
    }
}

#[test]
fn rms_norm_residual_forward_and_gradients_every_dtype() {
    for (i, (xt, pt)) in PAIRS.into_iter().enumerate() {
        for with_bias in [false, true] {
            for uses in [Uses::Both, Uses::YOnly, Uses::HOnly] {
                check(Norm::Rms, xt, pt, with_bias, uses, 200 + 10 * i as u64);
            }
        }
    }
}

/// h without a bias is candle's own x + residual bit for bit (both add in f32 and round
/// once); y is then the plain op on that h, bit for bit.
#[test]
fn without_bias_h_is_candles_add_and_y_the_plain_op_on_it() {
    for (xt, pt) in PAIRS {
        let x = tensor(&[4, 33], 300, 1.0, xt);
        let r = tensor(&[4, 33], 301, -0.5, xt);
        let w = tensor(&[33], 302, 1.0, pt);
        let b = tensor(&[33], 303, 0.0, pt);
        let (y, h) =
            warpnorm::candle::ops::layer_norm_residual(&x, &r, Some(&w), Some(&b), None, 1e-5)
                .unwrap();
        let sum = (&x + &r).unwrap();
        assert_eq!(f64s(&h), f64s(&sum), "{xt:?}: h");
        let plain = warpnorm::candle::ops::layer_norm(&sum, Some(&w), Some(&b), 1e-5).unwrap();
        assert_eq!(f64s(&y), f64s(&plain), "{xt:?}: LayerNorm y");
        let (y, h) =
            warpnorm::candle::ops::rms_norm_residual(&x, &r, Some(&w), None, None).unwrap();
        assert_eq!(f64s(&h), f64s(&sum), "{xt:?}: RMSNorm h");
        let plain = warpnorm::candle::ops::rms_norm(&sum, Some(&w), None).unwrap();
        assert_eq!(f64s(&y), f64s(&plain), "{xt:?}: RMSNorm y");
    }
}

/// Without parameters (no weight, no bias: candle's two-input op), and a residual given as a
/// non-contiguous view.
#[test]
fn without_parameters_and_with_a_transposed_residual() {
    let x = Var::from_tensor(&tensor(&[6, 20], 310, 0.5, DType::F32)).unwrap();
    let rt = Var::from_tensor(&tensor(&[20, 6], 311, 0.0, DType::F32)).unwrap();
    let r = rt.t().unwrap();
    assert!(!r.is_contiguous());
    for norm in [Norm::LayerNorm, Norm::Rms] {
        let (y, h) = match norm {
            Norm::LayerNorm => {
                warpnorm::candle::ops::layer_norm_residual(&x, &r, None, None, None, 1e-5)
            }
            Norm::Rms => warpnorm::candle::ops::rms_norm_residual(&x, &r, None, None, Some(1e-5)),
        }
        .unwrap();
        let g = loss(
            &y,
            &h,
            &y.ones_like().unwrap(),
            &h.ones_like().unwrap(),
            Uses::Both,
        )
        .backward()
        .unwrap();
        let (x64, rt64) = (var64(&x), var64(&rt));
        let h64 = (x64.as_tensor() + rt64.t().unwrap()).unwrap();
        let cols = 20;
        let ones = Tensor::ones(cols, DType::F64, &CPU).unwrap();
        let zeros = Tensor::zeros(cols, DType::F64, &CPU).unwrap();
        let y64 = match norm {
            Norm::LayerNorm => candle_nn::ops::layer_norm_slow(&h64, &ones, &zeros, 1e-5).unwrap(),
            Norm::Rms => candle_nn::ops::rms_norm_slow(&h64, &ones, 1e-5).unwrap(),
        };
        let g64 = loss(
            &y64,
            &h64,
            &y64.ones_like().unwrap(),
            &h64.ones_like().unwrap(),
            Uses::Both,
        )
        .backward()
        .unwrap();
        let what = format!("{norm:?} without parameters");
        assert_close(&y, &y64, DType::F32, &format!("{what} y"));
        assert_close(
            g.get(&x).unwrap(),
            g64.get(&x64).unwrap(),
            DType::F32,
            &format!("{what} dx"),
        );
        // The transposed residual's gradient arrives transposed.
        assert_close(
            g.get(&rt).unwrap(),
            g64.get(&rt64).unwrap(),
            DType::F32,
            &format!("{what} dr"),
        );
    }
}

/// The modules' forward_residual is the op with the module's parameters.
#[test]
fn modules_forward_residual_is_the_op() {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &CPU);
    let ln = warpnorm::candle::layer_norm(24, 1e-5, vb.pp("ln")).unwrap();
    let rms = warpnorm::candle::rms_norm(24, 1e-6, vb.pp("rms")).unwrap();
    let x = tensor(&[3, 24], 320, 0.0, DType::F32);
    let r = tensor(&[3, 24], 321, 2.0, DType::F32);
    let bias = tensor(&[24], 322, 0.0, DType::F32);
    let (y, h) = ln.forward_residual(&x, &r, Some(&bias)).unwrap();
    let (y2, h2) = warpnorm::candle::ops::layer_norm_residual(
        &x,
        &r,
        Some(ln.weight()),
        ln.bias(),
        Some(&bias),
        1e-5,
    )
    .unwrap();
    assert_eq!((f64s(&y), f64s(&h)), (f64s(&y2), f64s(&h2)));
    let (y, h) = rms.forward_residual(&x, &r, None).unwrap();
    let (y2, h2) =
        warpnorm::candle::ops::rms_norm_residual(&x, &r, Some(rms.weight()), None, Some(1e-6))
            .unwrap();
    assert_eq!((f64s(&y), f64s(&h)), (f64s(&y2), f64s(&h2)));
}

#[test]
fn residual_errors() {
    let x = tensor(&[2, 8], 330, 0.0, DType::F32);
    let w = tensor(&[8], 331, 1.0, DType::F32);
    let ln =
        |x: &Tensor, r: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>, rb: Option<&Tensor>| {
            warpnorm::candle::ops::layer_norm_residual(x, r, w, b, rb, 1e-5)
                .err()
                .map(|e| e.to_string())
        };
    let msg = ln(
        &x,
        &tensor(&[2, 7], 332, 0.0, DType::F32),
        Some(&w),
        None,
        None,
    )
    .unwrap();
    assert!(msg.contains("residual has shape"), "{msg}");
    let msg = ln(
        &x,
        &tensor(&[2, 8], 332, 0.0, DType::F16),
        Some(&w),
        None,
        None,
    )
    .unwrap();
    assert!(msg.contains("share one dtype"), "{msg}");
    let bad = tensor(&[7], 333, 0.0, DType::F32);
    let msg = ln(&x, &x, Some(&w), None, Some(&bad)).unwrap();
    assert!(msg.contains("residual_bias has shape"), "{msg}");
    let msg = ln(&x, &x, None, Some(&w), None).unwrap();
    assert!(msg.contains("a bias needs a weight"), "{msg}");
    let f16 = tensor(&[8], 334, 0.0, DType::F16);
    let msg = ln(&x, &x, Some(&w), None, Some(&f16)).unwrap();
    assert!(msg.contains("parameters share one dtype"), "{msg}");
    let msg = warpnorm::candle::ops::rms_norm_residual(&x, &x, Some(&w), None, Some(-1.0))
        .err()
        .map(|e| e.to_string())
        .unwrap();
    assert!(msg.contains("eps"), "{msg}");
    let ints = Tensor::new(&[[1u32, 2], [3, 4]], &CPU).unwrap();
    assert!(ln(&ints, &ints, None, None, None).is_some());
}
