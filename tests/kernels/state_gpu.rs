//! Module state on a GPU (or the emulated driver): PyTorch's checkpoints load into the modules
//! exactly and save back bitwise, the loaded modules compute what PyTorch's did, rejected loads
//! change nothing, and the device views serve an optimizer step and device-to-device loads.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use half::{bf16, f16};
use warpnorm::batch_norm::{BatchNorm, BatchNormConfig, Layout, Momentum};
use warpnorm::layer_norm::{Affine, LayerNorm};
use warpnorm::safetensors::{serialize, SafeTensors, Tensor};
use warpnorm::{EntryView, Error, State, StateView};

use crate::state_fixture::{self, Module, Record};

fn batch_norm<P: warpnorm::Element>(s: &Arc<CudaStream>, m: &Module) -> BatchNorm<P> {
    assert!(m.kind.starts_with("BatchNorm"), "{}", m.kind);
    let mut c = BatchNormConfig::new(m.num_features.unwrap());
    c.eps = m.eps as f32;
    c.momentum = match m.momentum {
        Some(f) => Momentum::Factor(f as f32),
        None => Momentum::Cumulative,
    };
    c.affine = m.affine.unwrap();
    c.track_running_stats = m.track_running_stats.unwrap();
    BatchNorm::new(s, c).unwrap()
}

fn layer_norm<P: warpnorm::Element>(s: &Arc<CudaStream>, m: &Module) -> LayerNorm<P> {
    assert_eq!(m.kind, "LayerNorm");
    let affine = match (m.weight.unwrap(), m.bias.unwrap()) {
        (true, true) => Affine::WeightBias,
        (true, false) => Affine::Weight,
        (false, false) => Affine::None,
        (false, true) => panic!("a bias without a weight"),
    };
    LayerNorm::new(
        s,
        m.normalized_shape.as_ref().unwrap(),
        affine,
        m.eps as f32,
    )
    .unwrap()
}

/// The module's eval output on the recorded input, against torch's (f32; a few ulps apart).
fn check_eval(s: &Arc<CudaStream>, r: &Record, prefix: &str, y: Vec<f32>) {
    let want = r.modules[prefix].eval_y.as_ref().unwrap();
    assert_eq!(y.len(), want.values.len());
    for (i, (g, w)) in y.iter().zip(&want.values).enumerate() {
        let tol = 1e-5 * (1.0 + w.abs());
        assert!(
            (*g as f64 - w).abs() <= tol,
            "{prefix} eval y[{i}]: {g} vs torch {w}"
        );
    }
    let _ = s;
}

fn eval_input(s: &Arc<CudaStream>, m: &Module) -> (cudarc::driver::CudaSlice<f32>, Vec<usize>) {
    let x = state_fixture::from_le::<f32>(&m.eval_x.as_ref().unwrap().bytes());
    (s.clone_htod(&x).unwrap(), m.eval_shape.clone().unwrap())
}

#[test]
fn pytorch_checkpoints_load_exactly_compute_as_torch_and_save_back_bitwise() {
    let Some(s) = testkit::gpu::gpu_stream("pytorch_checkpoints_load_exactly") else {
        return;
    };
    let r = state_fixture::load("model_f32");
    let mut bn = batch_norm::<f32>(&s, &r.modules["layer1.bn"]);
    let mut ln = layer_norm::<f32>(&s, &r.modules["layer1.ln"]);
    let mut head = batch_norm::<f32>(&s, &r.modules["head.bn"]);
    bn.load_safetensors(&r.bytes, "layer1.bn.", true).unwrap();
    ln.load_safetensors_file(state_fixture::dir().join(&r.file), "layer1.ln", true)
        .unwrap();
    head.load_safetensors(&r.bytes, "head.bn.", true).unwrap();
    assert_eq!(bn.state().unwrap(), r.state::<f32>("layer1.bn"));
    assert_eq!(ln.state().unwrap(), r.state::<f32>("layer1.ln"));
    assert_eq!(head.state().unwrap(), r.state::<f32>("head.bn"));
    assert_eq!(
        head.state().unwrap().names(),
        ["running_mean", "running_var", "num_batches_tracked"]
    );

    // Saved back with the rest of the model: the file PyTorch wrote, byte for byte.
    let mut tensors = bn.state_tensors("layer1.bn.").unwrap();
    tensors.extend(ln.state_tensors("layer1.ln.").unwrap());
    tensors.extend(head.state_tensors("head.bn").unwrap());
    let st = SafeTensors::deserialize(&r.bytes).unwrap();
    for key in ["stem.weight", "stem.bias"] {
        let t = st.tensor(key).unwrap();
        let t = Tensor::new(t.dtype(), t.shape().to_vec(), t.data().to_vec()).unwrap();
        tensors.push((key.to_string(), t));
    }
    assert_eq!(serialize(tensors).unwrap(), r.bytes);
    // One module's own file holds its keys with the fixture's bytes.
    let dir = std::env::temp_dir().join(format!("warpnorm-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bn.safetensors");
    bn.save_safetensors_file(&path, "layer1.bn.").unwrap();
    let own = std::fs::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(own, bn.save_safetensors("layer1.bn").unwrap());
    let own = SafeTensors::deserialize(&own).unwrap();
    assert_eq!(own.len(), 5);
    for (name, t) in own.tensors() {
        assert_eq!(t.data(), st.tensor(&name).unwrap().data(), "{name}");
    }

    // The loaded modules compute what torch's did in eval mode (running statistics used).
    bn.eval();
    head.eval();
    let (x, dims) = eval_input(&s, &r.modules["layer1.bn"]);
    let y = bn
        .forward(&x.as_view(), &dims, Layout::Contiguous)
        .unwrap()
        .y;
    check_eval(&s, &r, "layer1.bn", s.clone_dtoh(&y).unwrap());
    let (x, dims) = eval_input(&s, &r.modules["layer1.ln"]);
    let y = ln.forward(&x.as_view(), &dims).unwrap().y;
    check_eval(&s, &r, "layer1.ln", s.clone_dtoh(&y).unwrap());
    let (x, dims) = eval_input(&s, &r.modules["head.bn"]);
    let y = head
        .forward(&x.as_view(), &dims, Layout::Contiguous)
        .unwrap()
        .y;
    check_eval(&s, &r, "head.bn", s.clone_dtoh(&y).unwrap());

    // Half precision: a bf16 BatchNorm and an f16 LayerNorm, saved back bitwise.
    let r = state_fixture::load("model_half");
    let mut bn = batch_norm::<bf16>(&s, &r.modules["bn"]);
    let mut ln = layer_norm::<f16>(&s, &r.modules["ln"]);
    bn.load_safetensors(&r.bytes, "bn", true).unwrap();
    ln.load_safetensors(&r.bytes, "ln.", true).unwrap();
    assert_eq!(bn.state().unwrap(), r.state::<bf16>("bn"));
    assert_eq!(ln.state().unwrap(), r.state::<f16>("ln"));
    let mut tensors = bn.state_tensors("bn.").unwrap();
    tensors.extend(ln.state_tensors("ln.").unwrap());
    assert_eq!(serialize(tensors).unwrap(), r.bytes);
}

#[test]
fn rejected_checkpoint_loads_change_nothing() {
    let Some(s) = testkit::gpu::gpu_stream("rejected_checkpoint_loads_change_nothing") else {
        return;
    };
    let r = state_fixture::load("model_f32");
    let half = state_fixture::load("model_half");
    let mut bn = BatchNorm::<f32>::new(&s, BatchNormConfig::new(3)).unwrap();
    let before = bn.state().unwrap();
    // Wrong dtype, wrong shape, a missing entry (strict), an entry the module lacks, a
    // malformed file, a file that is not there.
    let e = bn.load_safetensors(&half.bytes, "bn.", true).unwrap_err();
    assert!(
        matches!(&e, Error::DType { what, .. } if what == "bn.weight"),
        "{e}"
    );
    let e = bn
        .load_safetensors(&r.bytes, "layer1.bn.", false)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Shape { what, .. } if what == "layer1.bn.weight"),
        "{e}"
    );
    let e = bn.load_safetensors(&r.bytes, "head.bn.", true).unwrap_err();
    assert!(
        matches!(&e, Error::MissingKey { key } if key == "head.bn.weight"),
        "{e}"
    );
    let e = bn
        .load_safetensors(&r.bytes[..100], "head.bn.", true)
        .unwrap_err();
    assert!(matches!(e, Error::Checkpoint { .. }), "{e}");
    let e = bn
        .load_safetensors_file(state_fixture::dir().join("absent.safetensors"), "", false)
        .unwrap_err();
    assert!(matches!(e, Error::Checkpoint { .. }), "{e}");
    assert_eq!(bn.state().unwrap(), before);
    let mut ln = LayerNorm::<f32>::new(&s, &[4, 5], Affine::Weight, 1e-6).unwrap();
    let e = ln
        .load_safetensors(&r.bytes, "layer1.ln.", false)
        .unwrap_err();
    assert!(
        matches!(&e, Error::UnexpectedKey { key, .. } if key == "layer1.ln.bias"),
        "{e}"
    );
    assert_eq!(ln.state().unwrap().weight, Some(vec![1.0; 20]));
    let mut untracked = BatchNormConfig::new(4);
    untracked.track_running_stats = false;
    let mut bn4 = BatchNorm::<f32>::new(&s, untracked).unwrap();
    let e = bn4
        .load_safetensors(&r.bytes, "layer1.bn.", false)
        .unwrap_err();
    assert!(
        matches!(&e, Error::UnexpectedKey { key, reason } if key == "layer1.bn.num_batches_tracked"
            && reason.contains("track_running_stats")),
        "{e}"
    );
    assert_eq!(bn4.state().unwrap().weight, Some(vec![1.0; 4]));

    // A partial load takes what is there: head.bn's running statistics and counter, and the
    // weight and bias stay.
    bn.load_safetensors(&r.bytes, "head.bn.", false).unwrap();
    let want = r.state::<f32>("head.bn");
    let now = bn.state().unwrap();
    assert_eq!((now.weight, now.bias), (before.weight, before.bias));
    assert_eq!(
        (now.running_mean, now.num_batches_tracked),
        (want.running_mean, Some(3))
    );
    // A strict load without num_batches_tracked keeps the counter, as PyTorch does.
    let old = State {
        num_batches_tracked: None,
        ..r.state::<f32>("layer1.bn")
    };
    let bytes = serialize(old.to_tensors("", &[4]).unwrap()).unwrap();
    let mut bn = BatchNorm::<f32>::new(&s, BatchNormConfig::new(4)).unwrap();
    bn.load_state(&State {
        num_batches_tracked: Some(17),
        ..Default::default()
    })
    .unwrap();
    bn.load_safetensors(&bytes, "", true).unwrap();
    assert_eq!(
        bn.state().unwrap(),
        State {
            num_batches_tracked: Some(17),
            ..old
        }
    );
}

#[test]
fn device_views_load_in_place_and_serve_an_optimizer_step() {
    let Some(s) = testkit::gpu::gpu_stream("device_views_load_in_place") else {
        return;
    };
    let r = state_fixture::load("model_f32");
    let mut a = BatchNorm::<f32>::new(&s, BatchNormConfig::new(4)).unwrap();
    a.load_safetensors(&r.bytes, "layer1.bn.", true).unwrap();
    let want = a.state().unwrap();

    // Views by name, as a state_dict's items.
    let named: Vec<(&str, usize)> = a
        .state_views()
        .into_named()
        .into_iter()
        .map(|(n, v)| match v {
            EntryView::Values(v) => (n, v.len()),
            EntryView::Count(c) => (n, c.len()),
        })
        .collect();
    assert_eq!(
        named,
        [
            ("weight", 4),
            ("bias", 4),
            ("running_mean", 4),
            ("running_var", 4),
            ("num_batches_tracked", 1)
        ]
    );

    // Device to device, from another module.
    let mut b = BatchNorm::<f32>::new(&s, BatchNormConfig::new(4)).unwrap();
    b.load_state_device(&a.state_views()).unwrap();
    assert_eq!(b.state().unwrap(), want);

    // From the caller's buffers, partially; a rejected load (wrong length after a valid entry,
    // an entry the module lacks) changes nothing.
    let rm = s.clone_htod(&[0.5f32, -0.5, 2.0, 8.0]).unwrap();
    let short = s.clone_htod(&[1.0f32; 3]).unwrap();
    let e = b
        .load_state_device(&StateView {
            running_mean: Some(rm.as_view()),
            running_var: Some(short.as_view()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(&e, Error::Length { what, expected: 4, given: 3 } if what == "running_var"),
        "{e}"
    );
    assert_eq!(b.state().unwrap(), want);
    b.load_state_device(&StateView {
        running_mean: Some(rm.as_view()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        b.state().unwrap(),
        State {
            running_mean: Some(vec![0.5, -0.5, 2.0, 8.0]),
            ..want.clone()
        }
    );
    let mut ln = LayerNorm::<f32>::new(&s, &[4], Affine::WeightBias, 1e-5).unwrap();
    let e = ln
        .load_state_device(&StateView {
            weight: Some(rm.as_view()),
            running_mean: Some(rm.as_view()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(&e, Error::UnexpectedKey { key, .. } if key == "running_mean"),
        "{e}"
    );
    assert_eq!(ln.state().unwrap().weight, Some(vec![1.0; 4]));

    // In place through the mutable views: the next call sees the new running variance.
    {
        let v = b.state_views_mut();
        assert_eq!(v.names(), want.names());
        s.memcpy_htod(&[4.0f32; 4], &mut v.running_var.unwrap())
            .unwrap();
    }
    b.eval();
    let x = s.clone_htod(&[2.5f32, 0.5, 2.0, 8.0]).unwrap();
    let y = b
        .forward(&x.as_view(), &[1, 4], Layout::Contiguous)
        .unwrap()
        .y;
    let y = s.clone_dtoh(&y).unwrap();
    let (w, bias) = (want.weight.unwrap(), want.bias.unwrap());
    for c in 0..4 {
        let x = [2.5f64, 0.5, 2.0, 8.0][c];
        let m = [0.5f64, -0.5, 2.0, 8.0][c];
        let e = (x - m) / (4.0f64 + 1e-5).sqrt() * w[c] as f64 + bias[c] as f64;
        assert!(
            (y[c] as f64 - e).abs() < 1e-6,
            "channel {c}: {} vs {e}",
            y[c]
        );
    }

    // An optimizer step: SGD on the parameters by name, with the backward's gradients under
    // the same names (the update runs through the views; here on the host for brevity).
    let xs: Vec<f32> = (0..8).map(|i| (i as f32 * 0.7).sin() * 3.0).collect();
    let dys: Vec<f32> = (0..8).map(|i| (i as f32 * 1.3).cos()).collect();
    let (x, dy) = (s.clone_htod(&xs).unwrap(), s.clone_htod(&dys).unwrap());
    let out = ln.forward(&x.as_view(), &[2, 4]).unwrap();
    let grads = ln
        .backward(&x.as_view(), &dy.as_view(), &[2, 4], &out.saved)
        .unwrap();
    let before = ln.state().unwrap();
    let lr = 0.25f32;
    let named_grads = grads.named();
    let mut params = ln.named_parameters_mut();
    assert_eq!(params.len(), 2);
    let mut expected = Vec::new();
    for ((name, p), (g_name, g)) in params.iter_mut().zip(&named_grads) {
        assert_eq!(name, g_name);
        let pv = s.clone_dtoh(&p.as_view()).unwrap();
        let gv = s.clone_dtoh(g).unwrap();
        let new: Vec<f32> = pv.iter().zip(&gv).map(|(p, g)| p - lr * g).collect();
        s.memcpy_htod(&new, p).unwrap();
        expected.push(new);
    }
    drop(params);
    let after = ln.state().unwrap();
    assert_eq!(after.weight.as_ref(), Some(&expected[0]));
    assert_eq!(after.bias.as_ref(), Some(&expected[1]));
    assert_ne!(after.weight, before.weight, "the gradients are not zero");
    // The gradients are those of y = x_hat * w + b: dbeta = sum over rows of dy.
    let dbeta: Vec<f32> = (0..4).map(|j| dys[j] + dys[4 + j]).collect();
    let got = s.clone_dtoh(&named_grads[1].1).unwrap();
    for (g, w) in got.iter().zip(&dbeta) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {dbeta:?}");
    }
    assert_eq!(
        ln.named_parameters()
            .iter()
            .map(|(n, v)| (*n, v.len()))
            .collect::<Vec<_>>(),
        [("weight", 4), ("bias", 4)]
    );
}
