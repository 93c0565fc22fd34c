//! Loads every PyTorch fixture, decodes every tensor and checks that the shapes, dtypes and
//! layouts inside each case agree with each other and with the case's configuration; plus unit
//! tests of the loader's decoding (hex, f16/bf16, channels-last order).

use testkit::fixtures::{self, DType, Layout, Tensor};

/// Decode a tensor every way the loader offers and check the element counts.
fn check_decodes(t: &Tensor, what: &str) {
    let n = t.numel();
    assert_eq!(
        t.raw_bytes().len(),
        n * t.dtype.size(),
        "{what}: byte length"
    );
    assert_eq!(t.to_f64_vec().len(), n, "{what}: to_f64_vec length");
    assert_eq!(t.to_f32_vec().len(), n, "{what}: to_f32_vec length");
    assert_eq!(t.to_f64_logical().len(), n, "{what}: to_f64_logical length");
    let mut idx = t.logical_to_memory_index();
    idx.sort_unstable();
    assert!(
        idx.iter().copied().eq(0..n),
        "{what}: logical order is not a permutation"
    );
    match t.dtype {
        DType::F16 | DType::Bf16 => assert_eq!(t.to_u16_bits().map(|v| v.len()), Some(n)),
        DType::I64 => assert_eq!(t.to_i64_vec().map(|v| v.len()), Some(n)),
        DType::F32 | DType::F64 => assert!(t.to_u16_bits().is_none()),
    }
}

/// Check an optional tensor's presence, dtype and shape.
fn expect(t: Option<&Tensor>, dtype: DType, shape: &[usize], what: &str) {
    let t = t.unwrap_or_else(|| panic!("{what}: missing"));
    assert_eq!(t.dtype, dtype, "{what}: dtype");
    assert_eq!(t.shape, shape, "{what}: shape");
    check_decodes(t, what);
}

fn scalar_i64(t: Option<&Tensor>, what: &str) -> i64 {
    expect(t, DType::I64, &[], what);
    t.and_then(|t| t.to_i64_vec()).map(|v| v[0]).unwrap()
}

#[test]
fn every_layer_norm_fixture_is_consistent() {
    let cases = fixtures::layer_norm_cases();
    assert!(cases.len() >= 40, "only {} LayerNorm fixtures", cases.len());
    for (fx, c) in &cases {
        let name = &fx.name;
        assert_eq!(fx.path.file_stem().unwrap(), name.as_str());
        let cfg = &c.config;
        let x = &c.inputs.x;
        assert_eq!(x.dtype, cfg.x_dtype, "{name}: x dtype");
        assert_eq!(x.layout, Layout::Contiguous, "{name}: x layout");
        check_decodes(x, name);
        let (m, d) = cfg
            .rows_cols(&x.shape)
            .unwrap_or_else(|| panic!("{name}: x shape vs normalized_shape"));
        assert_eq!(m * d, x.numel(), "{name}: M*D");
        expect(Some(&c.inputs.dy), cfg.x_dtype, &x.shape, name);
        assert!(cfg.eps > 0.0, "{name}: eps");
        assert_eq!(cfg.param_dtype.is_some(), cfg.elementwise_affine, "{name}");
        let k = cfg.normalized_shape.len();
        let mut stats_shape = x.shape[..x.shape.len() - k].to_vec();
        stats_shape.extend(std::iter::repeat_n(1, k));
        let ns = &cfg.normalized_shape;
        let has_beta = cfg.elementwise_affine && cfg.bias;
        assert_eq!(c.inputs.gamma.is_some(), cfg.elementwise_affine, "{name}");
        assert_eq!(c.inputs.beta.is_some(), has_beta, "{name}");
        if let Some(p) = cfg.param_dtype {
            expect(c.inputs.gamma.as_ref(), p, ns, name);
            if has_beta {
                expect(c.inputs.beta.as_ref(), p, ns, name);
            }
        }
        for (side, r) in [("torch", &c.torch), ("f64", &c.f64)] {
            let what = format!("{name}/{side}");
            let (xd, pd) = match side {
                "torch" => (cfg.x_dtype, cfg.param_dtype),
                _ => (DType::F64, cfg.param_dtype.map(|_| DType::F64)),
            };
            expect(Some(&r.y), xd, &x.shape, &what);
            expect(Some(&r.dx), xd, &x.shape, &what);
            let sd = ln_stats_dtype(side, cfg.x_dtype, cfg.param_dtype);
            expect(Some(&r.mean), sd, &stats_shape, &what);
            expect(Some(&r.rstd), sd, &stats_shape, &what);
            assert_eq!(r.dgamma.is_some(), cfg.elementwise_affine, "{what}");
            assert_eq!(r.dbeta.is_some(), has_beta, "{what}");
            if let Some(p) = pd {
                expect(r.dgamma.as_ref(), p, ns, &what);
                if has_beta {
                    expect(r.dbeta.as_ref(), p, ns, &what);
                }
            }
        }
    }
}

/// The dtype torch keeps LayerNorm's saved statistics in: the half dtype when the input is
/// half and gamma is absent or of the same dtype, else f32 (f64 for the float64 runs: every
/// side but "torch").
fn ln_stats_dtype(side: &str, x: DType, gamma: Option<DType>) -> DType {
    match (side, x, gamma) {
        (s, _, _) if s != "torch" => DType::F64,
        (_, DType::F16, Some(DType::F16)) => DType::F16,
        (_, DType::Bf16, Some(DType::Bf16)) => DType::Bf16,
        (_, DType::F16 | DType::Bf16, None) => x,
        _ => DType::F32,
    }
}

/// The checks the fused residual add cases of both ops share: x, the residual, dy and dh of
/// one shape and dtype, the bias and the parameters in `param_dtype`, and each result's h, y,
/// dx and dbias; `h_one_rounding` exactly where torch rounds h twice (a bias with 16-bit
/// activations).
#[allow(clippy::too_many_arguments)]
fn check_residual_common(
    name: &str,
    x: &Tensor,
    residual: &Tensor,
    bias: Option<&Tensor>,
    dy: &Tensor,
    dh: Option<&Tensor>,
    rows_cols: Option<(usize, usize)>,
    x_dtype: DType,
    param_dtype: Option<DType>,
    residual_bias: bool,
    h_one_rounding: Option<&Tensor>,
    torch_h_differs: usize,
    results: &[(&str, [&Tensor; 3], Option<&Tensor>)],
) {
    assert_eq!(x.dtype, x_dtype, "{name}: x dtype");
    assert_eq!(x.layout, Layout::Contiguous, "{name}: x layout");
    check_decodes(x, name);
    let (m, d) = rows_cols.unwrap_or_else(|| panic!("{name}: x shape vs normalized_shape"));
    assert_eq!(m * d, x.numel(), "{name}: M*D");
    assert!(m > 0 && d > 0, "{name}: empty");
    for t in [Some(residual), Some(dy), dh].into_iter().flatten() {
        expect(Some(t), x_dtype, &x.shape, name);
    }
    assert_eq!(bias.is_some(), residual_bias, "{name}: bias");
    if let Some(b) = bias {
        let p = param_dtype.unwrap_or_else(|| panic!("{name}: a bias without param_dtype"));
        assert_eq!(b.shape.iter().product::<usize>(), d, "{name}: bias shape");
        expect(Some(b), p, &b.shape, name);
    }
    let twice = residual_bias && x_dtype != DType::F32;
    assert_eq!(h_one_rounding.is_some(), twice, "{name}: h_one_rounding");
    if let Some(h) = h_one_rounding {
        expect(Some(h), x_dtype, &x.shape, name);
        assert!(torch_h_differs <= x.numel(), "{name}: torch_h_differs");
    } else {
        assert_eq!(torch_h_differs, 0, "{name}: torch_h_differs");
    }
    for &(side, [h, y, dx], dbias) in results {
        let what = format!("{name}/{side}");
        let (xd, pd) = match side {
            "torch" => (x_dtype, param_dtype),
            _ => (DType::F64, param_dtype.map(|_| DType::F64)),
        };
        for t in [h, y, dx] {
            expect(Some(t), xd, &x.shape, &what);
        }
        assert_eq!(dbias.is_some(), residual_bias, "{what}: dbias");
        if let (Some(db), Some(b)) = (dbias, bias) {
            expect(Some(db), pd.unwrap(), &b.shape, &what);
        }
    }
}

#[test]
fn every_layer_norm_residual_fixture_is_consistent() {
    let cases = fixtures::layer_norm_residual_cases();
    assert!(cases.len() >= 25, "only {} fixtures", cases.len());
    for (fx, c) in &cases {
        let name = &fx.name;
        assert_eq!(fx.path.file_stem().unwrap(), name.as_str());
        let cfg = &c.config;
        let i = &c.inputs;
        assert_eq!(
            c.f64_at_h_one_rounding.is_some(),
            c.h_one_rounding.is_some(),
            "{name}: f64_at_h_one_rounding"
        );
        let mut sides = vec![
            ("torch", &c.torch),
            ("f64", &c.f64),
            ("f64_at_h", &c.f64_at_h),
        ];
        sides.extend(
            c.f64_at_h_one_rounding
                .as_ref()
                .map(|r| ("f64_at_h_one_rounding", r)),
        );
        assert_eq!(
            c.f64_at_h.h.to_f64_vec(),
            c.torch.h.to_f64_vec(),
            "{name}: f64_at_h is not at torch's h"
        );
        if let (Some(r), Some(h)) = (&c.f64_at_h_one_rounding, &c.h_one_rounding) {
            assert_eq!(
                r.h.to_f64_vec(),
                h.to_f64_vec(),
                "{name}: f64_at_h_one_rounding"
            );
        }
        check_residual_common(
            name,
            &i.x,
            &i.residual,
            i.bias.as_ref(),
            &i.dy,
            i.dh.as_ref(),
            cfg.rows_cols(&i.x.shape),
            cfg.x_dtype,
            cfg.param_dtype,
            cfg.residual_bias,
            c.h_one_rounding.as_ref(),
            c.torch_h_differs,
            &sides
                .iter()
                .map(|(side, r)| (*side, [&r.h, &r.y, &r.dx], r.dbias.as_ref()))
                .collect::<Vec<_>>(),
        );
        assert!(cfg.eps > 0.0, "{name}: eps");
        let ns = &cfg.normalized_shape;
        let has_beta = cfg.elementwise_affine && cfg.bias;
        assert_eq!(i.gamma.is_some(), cfg.elementwise_affine, "{name}");
        assert_eq!(i.beta.is_some(), has_beta, "{name}");
        let any_param = cfg.elementwise_affine || cfg.residual_bias;
        assert_eq!(cfg.param_dtype.is_some(), any_param, "{name}: param_dtype");
        if let Some(p) = cfg.param_dtype {
            for t in [&i.gamma, &i.beta].into_iter().flatten() {
                expect(Some(t), p, ns, name);
            }
        }
        let k = ns.len();
        let mut stats_shape = i.x.shape[..i.x.shape.len() - k].to_vec();
        stats_shape.extend(std::iter::repeat_n(1, k));
        let gamma_dtype = i.gamma.as_ref().map(|g| g.dtype);
        for &(side, r) in &sides {
            let what = format!("{name}/{side}");
            let sd = ln_stats_dtype(side, cfg.x_dtype, gamma_dtype);
            expect(Some(&r.mean), sd, &stats_shape, &what);
            expect(Some(&r.rstd), sd, &stats_shape, &what);
            assert_eq!(r.dgamma.is_some(), cfg.elementwise_affine, "{what}");
            assert_eq!(r.dbeta.is_some(), has_beta, "{what}");
            let pd = match side {
                "torch" => cfg.param_dtype,
                _ => Some(DType::F64),
            };
            for t in [&r.dgamma, &r.dbeta].into_iter().flatten() {
                expect(Some(t), pd.unwrap(), ns, &what);
            }
        }
    }
}

#[test]
fn every_rms_norm_residual_fixture_is_consistent() {
    let cases = fixtures::rms_norm_residual_cases();
    assert!(cases.len() >= 25, "only {} fixtures", cases.len());
    for (fx, c) in &cases {
        let name = &fx.name;
        assert_eq!(fx.path.file_stem().unwrap(), name.as_str());
        let cfg = &c.config;
        let i = &c.inputs;
        assert_eq!(
            c.f64_at_h_one_rounding.is_some(),
            c.h_one_rounding.is_some(),
            "{name}: f64_at_h_one_rounding"
        );
        let mut sides = vec![
            ("torch", &c.torch),
            ("f64", &c.f64),
            ("f64_at_h", &c.f64_at_h),
        ];
        sides.extend(
            c.f64_at_h_one_rounding
                .as_ref()
                .map(|r| ("f64_at_h_one_rounding", r)),
        );
        assert_eq!(
            c.f64_at_h.h.to_f64_vec(),
            c.torch.h.to_f64_vec(),
            "{name}: f64_at_h is not at torch's h"
        );
        if let (Some(r), Some(h)) = (&c.f64_at_h_one_rounding, &c.h_one_rounding) {
            assert_eq!(
                r.h.to_f64_vec(),
                h.to_f64_vec(),
                "{name}: f64_at_h_one_rounding"
            );
        }
        check_residual_common(
            name,
            &i.x,
            &i.residual,
            i.bias.as_ref(),
            &i.dy,
            i.dh.as_ref(),
            cfg.rows_cols(&i.x.shape),
            cfg.x_dtype,
            cfg.param_dtype,
            cfg.residual_bias,
            c.h_one_rounding.as_ref(),
            c.torch_h_differs,
            &sides
                .iter()
                .map(|(side, r)| (*side, [&r.h, &r.y, &r.dx], r.dbias.as_ref()))
                .collect::<Vec<_>>(),
        );
        assert!(cfg.eps.is_none_or(|e| e > 0.0), "{name}: eps");
        let ns = &cfg.normalized_shape;
        assert_eq!(i.weight.is_some(), cfg.elementwise_affine, "{name}");
        let any_param = cfg.elementwise_affine || cfg.residual_bias;
        assert_eq!(cfg.param_dtype.is_some(), any_param, "{name}: param_dtype");
        if let (Some(w), Some(p)) = (&i.weight, cfg.param_dtype) {
            expect(Some(w), p, ns, name);
        }
        let k = ns.len();
        let mut stats_shape = i.x.shape[..i.x.shape.len() - k].to_vec();
        stats_shape.extend(std::iter::repeat_n(1, k));
        for &(side, r) in &sides {
            let what = format!("{name}/{side}");
            // torch's RMSNorm keeps rstd in f32 for every input dtype.
            let (sd, pd) = match side {
                "torch" => (DType::F32, cfg.param_dtype),
                _ => (DType::F64, Some(DType::F64)),
            };
            expect(Some(&r.rstd), sd, &stats_shape, &what);
            assert_eq!(r.dweight.is_some(), cfg.elementwise_affine, "{what}");
            if let Some(dw) = &r.dweight {
                expect(Some(dw), pd.unwrap(), ns, &what);
            }
        }
    }
}

fn module_for_rank(rank: usize) -> &'static str {
    match rank {
        2 | 3 => "BatchNorm1d",
        4 => "BatchNorm2d",
        5 => "BatchNorm3d",
        _ => panic!("rank {rank}"),
    }
}

#[test]
fn every_batch_norm_fixture_is_consistent() {
    let cases = fixtures::batch_norm_cases();
    assert!(cases.len() >= 25, "only {} BatchNorm fixtures", cases.len());
    for (fx, c) in &cases {
        let name = &fx.name;
        assert_eq!(fx.path.file_stem().unwrap(), name.as_str());
        let cfg = &c.config;
        let ch = [cfg.num_features];
        let pd = cfg.param_dtype;
        assert!(!c.steps.is_empty(), "{name}: no steps");
        assert_eq!(c.initial.gamma.is_some(), cfg.affine, "{name}");
        assert_eq!(c.initial.beta.is_some(), cfg.affine, "{name}");
        if cfg.affine {
            expect(c.initial.gamma.as_ref(), pd, &ch, name);
            expect(c.initial.beta.as_ref(), pd, &ch, name);
        }
        assert_eq!(c.initial.running_mean.is_some(), cfg.track_running_stats);
        let mut count = if cfg.track_running_stats {
            expect(c.initial.running_mean.as_ref(), pd, &ch, name);
            expect(c.initial.running_var.as_ref(), pd, &ch, name);
            scalar_i64(c.initial.num_batches_tracked.as_ref(), name)
        } else {
            0
        };
        for (i, s) in c.steps.iter().enumerate() {
            let what = format!("{name}/step {i}");
            let x = &s.x;
            assert_eq!(module_for_rank(x.shape.len()), cfg.module, "{what}");
            assert_eq!(x.shape[1], cfg.num_features, "{what}: C");
            assert_eq!(x.dtype, cfg.x_dtype, "{what}: x dtype");
            assert_eq!(x.layout, cfg.layout, "{what}: x layout");
            check_decodes(x, &what);
            assert_eq!(s.dy.layout, cfg.layout, "{what}: dy layout");
            expect(Some(&s.dy), cfg.x_dtype, &x.shape, &what);
            if s.training && cfg.track_running_stats {
                count += 1;
            }
            for (side, r) in [("torch", &s.torch), ("f64", &s.f64)] {
                let what = format!("{what}/{side}");
                let (xd, pd) = match side {
                    "torch" => (cfg.x_dtype, pd),
                    _ => (DType::F64, DType::F64),
                };
                if cfg.track_running_stats {
                    expect(r.running_mean.as_ref(), pd, &ch, &what);
                    expect(r.running_var.as_ref(), pd, &ch, &what);
                    let n = scalar_i64(r.num_batches_tracked.as_ref(), &what);
                    assert_eq!(n, count, "{what}: num_batches_tracked");
                } else {
                    assert!(r.running_mean.is_none() && r.num_batches_tracked.is_none());
                }
                if s.error.is_some() {
                    assert!(
                        r.y.is_none() && r.dx.is_none() && r.dgamma.is_none(),
                        "{what}"
                    );
                    continue;
                }
                expect(r.y.as_ref(), xd, &x.shape, &what);
                expect(r.dx.as_ref(), xd, &x.shape, &what);
                for t in [&r.y, &r.dx].into_iter().flatten() {
                    assert_eq!(t.layout, cfg.layout, "{what}: output layout");
                }
                if cfg.affine {
                    expect(r.dgamma.as_ref(), pd, &ch, &what);
                    expect(r.dbeta.as_ref(), pd, &ch, &what);
                } else {
                    assert!(r.dgamma.is_none() && r.dbeta.is_none(), "{what}");
                }
                let batch_stats = s.training || !cfg.track_running_stats;
                match (&r.save_mean, x.numel()) {
                    (None, 0) => assert!(r.save_invstd.is_none()),
                    (Some(_), n) if n > 0 => {
                        // Saved stats are in the accumulation type: the param dtype for
                        // same-dtype half modules, else fp32 (fp64 for the f64 run).
                        let sd = match (side, cfg.x_dtype) {
                            ("f64", _) => DType::F64,
                            (_, DType::F16 | DType::Bf16) if pd == cfg.x_dtype => pd,
                            _ => DType::F32,
                        };
                        let len = if batch_stats { cfg.num_features } else { 0 };
                        expect(r.save_mean.as_ref(), sd, &[len], &what);
                        expect(r.save_invstd.as_ref(), sd, &[len], &what);
                    }
                    _ => panic!("{what}: save_mean present iff the input is not empty"),
                }
            }
        }
    }
}

#[test]
fn manifest_lists_exactly_the_fixture_files() {
    let path = fixtures::fixtures_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path).expect("fixtures/manifest.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("manifest is JSON");
    for op in fixtures::OPS {
        let listed: Vec<&str> = v["cases"][op]
            .as_array()
            .unwrap_or_else(|| panic!("manifest has no {op} list"))
            .iter()
            .map(|n| n.as_str().expect("case names are strings"))
            .collect();
        let mut listed_sorted = listed.clone();
        listed_sorted.sort_unstable();
        let loaded: Vec<String> = fixtures::load_all(op).into_iter().map(|f| f.name).collect();
        let mut loaded_sorted: Vec<&str> = loaded.iter().map(String::as_str).collect();
        loaded_sorted.sort_unstable();
        assert_eq!(listed_sorted, loaded_sorted, "{op}");
        for fx in fixtures::load_all(op) {
            assert_eq!(fx.torch_version, v["torch_version"], "{}", fx.name);
        }
    }
}

#[test]
fn load_all_rejects_unknown_ops() {
    let err = fixtures::try_load_all("group_norm").unwrap_err();
    assert!(err.message.contains("unknown op"), "{err}");
}

/// Find a fixture by name.
fn find(op: &str, name: &str) -> fixtures::Fixture {
    fixtures::load_all(op)
        .into_iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("fixture {op}/{name} not found"))
}

#[test]
fn decoded_values_match_the_numbers_in_semantics_md() {
    // var = 1e-6 with eps = 1e-5 inside the sqrt: y = +-1e-3 / sqrt(1.1e-5) = +-0.3015113.
    let fx = find("layer_norm", "f32_small_var");
    let c = fx.as_layer_norm().unwrap();
    assert_eq!(c.inputs.x.to_f32_vec(), [1e-3, -1e-3, 1e-3, -1e-3]);
    let y = c.torch.y.to_f64_vec();
    for (v, s) in y.iter().zip([1.0, -1.0, 1.0, -1.0]) {
        assert!((v - s * 0.3015113).abs() < 1e-6, "{y:?}");
    }
    // fp32 row [1e30, -1e30, 0, 0]: torch's fp32 variance overflows and y is exactly 0.
    let fx = find("layer_norm", "f32_huge_1e30");
    let c = fx.as_layer_norm().unwrap();
    assert_eq!(c.torch.y.to_f32_vec()[..4], [0.0; 4]);
    assert_eq!(c.torch.rstd.to_f32_vec()[0], 0.0);
    // Eval: x = 3, running mean 1, running var 4 -> 0.99999875.
    let fx = find("batch_norm", "example_eval");
    let s = &fx.as_batch_norm().unwrap().steps[0];
    let y = s.torch.y.as_ref().unwrap().to_f64_vec();
    assert!((y[0] - 0.99999875).abs() < 1e-7, "{y:?}");
    // Cumulative average: rm 7/3, 19/6, 64/9; rv 7/3, 13/6, 57.
    let fx = find("batch_norm", "example_cumulative");
    let steps = &fx.as_batch_norm().unwrap().steps;
    let rm: Vec<f64> = steps
        .iter()
        .map(|s| s.f64.running_mean.as_ref().unwrap().to_f64_vec()[0])
        .collect();
    let rv: Vec<f64> = steps
        .iter()
        .map(|s| s.f64.running_var.as_ref().unwrap().to_f64_vec()[0])
        .collect();
    for (got, want) in rm.iter().zip([7.0 / 3.0, 19.0 / 6.0, 64.0 / 9.0]) {
        assert!((got - want).abs() < 1e-12, "{rm:?}");
    }
    for (got, want) in rv.iter().zip([7.0 / 3.0, 13.0 / 6.0, 57.0]) {
        assert!((got - want).abs() < 1e-12, "{rv:?}");
    }
    // One value per channel in training: torch's message, and the batch is still counted.
    let fx = find("batch_norm", "bn1d_one_value_error");
    let s = &fx.as_batch_norm().unwrap().steps[0];
    assert_eq!(
        s.error.as_deref(),
        Some(
            "Expected more than 1 value per channel when training, got input size \
             torch.Size([1, 3])"
        )
    );
}

#[test]
fn hex_decoding() {
    assert_eq!(
        fixtures::decode_hex("00ff7fA0").unwrap(),
        [0, 255, 127, 160]
    );
    assert_eq!(fixtures::decode_hex("").unwrap(), Vec::<u8>::new());
    assert!(fixtures::decode_hex("abc")
        .unwrap_err()
        .contains("odd length"));
    assert!(fixtures::decode_hex("0g")
        .unwrap_err()
        .contains("invalid hex digit"));
}

#[test]
fn tensor_construction_checks_length_and_layout() {
    let e = Tensor::from_bytes(DType::F32, vec![2, 3], Layout::Contiguous, vec![0; 23]);
    assert!(e.unwrap_err().contains("needs 24 bytes, got 23"));
    let e = Tensor::from_bytes(DType::F32, vec![2, 3], Layout::ChannelsLast, vec![0; 24]);
    assert!(e.unwrap_err().contains("does not apply to rank 2"));
    let e = Tensor::from_bytes(
        DType::F16,
        vec![1, 2, 1, 1],
        Layout::ChannelsLast3d,
        vec![0; 4],
    );
    assert!(e.is_err());
    let t = Tensor::from_bytes(
        DType::I64,
        vec![],
        Layout::Contiguous,
        7i64.to_le_bytes().into(),
    );
    assert_eq!(t.unwrap().to_i64_vec(), Some(vec![7]));
}

#[test]
fn tensor_json_rejects_bad_lengths_and_fields() {
    let ok = r#"{"dtype": "bf16", "shape": [2], "layout": "contiguous", "hex": "803f00c0"}"#;
    let t: Tensor = serde_json::from_str(ok).unwrap();
    assert_eq!(t.to_f64_vec(), [1.0, -2.0]);
    let short = r#"{"dtype": "bf16", "shape": [3], "layout": "contiguous", "hex": "803f00c0"}"#;
    assert!(serde_json::from_str::<Tensor>(short).is_err());
    let extra =
        r#"{"dtype": "f32", "shape": [], "layout": "contiguous", "hex": "00000000", "x": 1}"#;
    assert!(serde_json::from_str::<Tensor>(extra).is_err());
    let bad_dtype = r#"{"dtype": "f8", "shape": [], "layout": "contiguous", "hex": "00"}"#;
    assert!(serde_json::from_str::<Tensor>(bad_dtype).is_err());
}

#[test]
fn half_decoding_is_bit_exact() {
    // f16: 1.0, -2.0, -0.0, 65504, +Inf, NaN with payload; little-endian bytes.
    let bits: [u16; 6] = [0x3c00, 0xc000, 0x8000, 0x7bff, 0x7c00, 0x7e01];
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let t = Tensor::from_bytes(DType::F16, vec![6], Layout::Contiguous, bytes.clone()).unwrap();
    let v = t.to_f64_vec();
    assert_eq!(v[..2], [1.0, -2.0]);
    assert!(v[2] == 0.0 && v[2].is_sign_negative());
    assert_eq!(v[3], 65504.0);
    assert_eq!(v[4], f64::INFINITY);
    assert!(v[5].is_nan());
    assert_eq!(t.to_u16_bits().unwrap(), bits);
    assert_eq!(t.raw_bytes(), &bytes[..]);
    assert!(t.to_f32_vec()[2].is_sign_negative());
    // The same bits read as bf16: 0x3c00 = 2^-7, 0xc000 = -2.
    let t = Tensor::from_bytes(DType::Bf16, vec![6], Layout::Contiguous, bytes).unwrap();
    let v = t.to_f32_vec();
    assert_eq!(v[..2], [0.0078125, -2.0]);
    assert!(t.to_f16_vec().is_none() && t.to_bf16_vec().is_some());
}

#[test]
fn channels_last_logical_order() {
    // Logical (N, C, H, W) = (2, 3, 2, 2), stored as (N, H, W, C); value = memory index.
    let (n, c, h, w) = (2usize, 3usize, 2usize, 2usize);
    let bytes: Vec<u8> = (0..n * c * h * w)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    let t = Tensor::from_bytes(DType::F32, vec![n, c, h, w], Layout::ChannelsLast, bytes).unwrap();
    assert_eq!(t.physical_shape(), [n, h, w, c]);
    let logical = t.to_f64_logical();
    for ni in 0..n {
        for ci in 0..c {
            for hi in 0..h {
                for wi in 0..w {
                    let l = ((ni * c + ci) * h + hi) * w + wi;
                    let m = ((ni * h + hi) * w + wi) * c + ci;
                    assert_eq!(logical[l], m as f64, "n{ni} c{ci} h{hi} w{wi}");
                }
            }
        }
    }
    // 3-D: (N, C, D, H, W) = (1, 2, 2, 1, 3), stored as (N, D, H, W, C).
    let bytes: Vec<u8> = (0..12).flat_map(|i| (i as f64).to_le_bytes()).collect();
    let t = Tensor::from_bytes(
        DType::F64,
        vec![1, 2, 2, 1, 3],
        Layout::ChannelsLast3d,
        bytes,
    )
    .unwrap();
    assert_eq!(t.physical_shape(), [1, 2, 1, 3, 2]);
    let logical = t.to_f64_logical();
    for ci in 0..2 {
        for di in 0..2 {
            for wi in 0..3 {
                let l = (ci * 2 + di) * 3 + wi;
                let m = (di * 3 + wi) * 2 + ci;
                assert_eq!(logical[l], m as f64);
            }
        }
    }
}
