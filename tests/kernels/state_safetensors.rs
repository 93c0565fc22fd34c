//! The safetensors side of module state, without a GPU: PyTorch's checkpoints
//! (`fixtures/state/`) decode to exactly the values the script recorded, re-encoding them gives
//! the file PyTorch wrote byte for byte, and bad checkpoints are clear errors.

use half::{bf16, f16};
use warpnorm::safetensors::{serialize, Dtype, SafeTensors, Tensor};
use warpnorm::{Element, Error, State};

use crate::state_fixture::{self, Record};

/// Decodes the module at `prefix` and checks it against the recorded bytes and values, and
/// against the raw tensors as the safetensors crate reads them.
fn decode_and_check<P: Element + PartialEq + std::fmt::Debug>(
    r: &Record,
    prefix: &str,
) -> State<P> {
    let m = &r.modules[prefix];
    let shape = m.param_shape();
    let state = State::<P>::from_safetensors(&r.bytes, &format!("{prefix}."), &shape).unwrap();
    assert_eq!(state, r.state::<P>(prefix), "{prefix}");
    // Every key under the prefix was read, and nothing else.
    let mut want: Vec<String> = r
        .keys
        .keys()
        .filter_map(|k| k.strip_prefix(&format!("{prefix}.")).map(String::from))
        .collect();
    let mut got: Vec<String> = state.names().iter().map(|s| s.to_string()).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "{prefix}");
    // The raw tensors, read by the safetensors crate itself, hold the same bytes.
    let st = SafeTensors::deserialize(&r.bytes).unwrap();
    for (name, tensor) in state.to_tensors(prefix, &shape).unwrap() {
        let raw = st.tensor(&name).unwrap();
        assert_eq!(raw.data(), tensor.data(), "{name}");
        assert_eq!(raw.shape(), tensor.shape(), "{name}");
        assert_eq!(raw.dtype(), tensor.dtype(), "{name}");
        assert_eq!(r.keys[&name].bytes(), tensor.data(), "{name}");
        assert_eq!(r.keys[&name].shape, tensor.shape(), "{name}");
        assert_eq!(
            r.keys[&name].dtype,
            format!("{:?}", tensor.dtype()),
            "{name}"
        );
    }
    state
}

#[test]
fn pytorch_checkpoints_decode_exactly_and_encode_back_to_the_same_file() {
    let r = state_fixture::load("model_f32");
    assert_eq!(r.modules.len(), 3);
    let mut tensors = Vec::new();
    for prefix in ["layer1.bn", "layer1.ln", "head.bn"] {
        let m = &r.modules[prefix];
        let s = decode_and_check::<f32>(&r, prefix);
        // Trained: no entry holds an initializer's value.
        assert!(s.num_batches_tracked.is_none_or(|n| n == 3), "{prefix}");
        for v in [&s.weight, &s.bias, &s.running_mean].into_iter().flatten() {
            assert!(v.iter().all(|x| *x != 0.0 && *x != 1.0), "{prefix}: {v:?}");
        }
        // A prefix without its dot reads the same.
        assert_eq!(
            State::<f32>::from_safetensors(&r.bytes, prefix, &m.param_shape()).unwrap(),
            s
        );
        tensors.extend(s.to_tensors(prefix, &m.param_shape()).unwrap());
    }
    assert_eq!(r.modules["head.bn"].affine, Some(false));
    assert_eq!(r.modules["head.bn"].momentum, None, "cumulative average");
    // The rest of the model (the conv), copied as is, completes the file: byte for byte what
    // PyTorch wrote.
    let st = SafeTensors::deserialize(&r.bytes).unwrap();
    for key in ["stem.weight", "stem.bias"] {
        let t = st.tensor(key).unwrap();
        tensors.push((
            key.to_string(),
            Tensor::new(t.dtype(), t.shape().to_vec(), t.data().to_vec()).unwrap(),
        ));
    }
    assert_eq!(serialize(tensors).unwrap(), r.bytes);

    let r = state_fixture::load("model_half");
    let bn = decode_and_check::<bf16>(&r, "bn");
    let ln = decode_and_check::<f16>(&r, "ln");
    assert_eq!(bn.num_batches_tracked, Some(4));
    let mut tensors = bn.to_tensors("bn.", &[3]).unwrap();
    tensors.extend(ln.to_tensors("ln", &[6]).unwrap());
    assert_eq!(serialize(tensors).unwrap(), r.bytes);
}

#[test]
fn bad_checkpoints_are_clear_errors() {
    let r = state_fixture::load("model_f32");
    let half = state_fixture::load("model_half");
    // Wrong dtype: a bf16 BatchNorm read as f32, named by its key.
    let e = State::<f32>::from_safetensors(&half.bytes, "bn.", &[3]).unwrap_err();
    match &e {
        Error::DType {
            what,
            expected,
            given,
        } => {
            assert_eq!(
                (what.as_str(), expected.as_str(), given.as_str()),
                ("bn.weight", "F32", "BF16")
            )
        }
        _ => panic!("{e}"),
    }
    // Wrong shape: the LayerNorm's [4, 5] read as [20].
    let e = State::<f32>::from_safetensors(&r.bytes, "layer1.ln.", &[20]).unwrap_err();
    assert!(
        matches!(&e, Error::Shape { what, expected, given }
            if what == "layer1.ln.weight" && expected == "[20]" && given == "[4, 5]"),
        "{e}"
    );
    // Unexpected keys: without a prefix, the whole model is under it.
    let e = State::<f32>::from_safetensors(&r.bytes, "", &[4]).unwrap_err();
    assert!(
        matches!(&e, Error::UnexpectedKey { key, .. } if key == "head.bn.num_batches_tracked"),
        "{e}"
    );
    // A prefix that matches nothing reads nothing.
    assert_eq!(
        State::<f32>::from_safetensors(&r.bytes, "layer2.bn.", &[4]).unwrap(),
        State::default()
    );
    // Malformed data.
    for bytes in [&r.bytes[..r.bytes.len() - 1], &r.bytes[..5], &[][..]] {
        let e = State::<f32>::from_safetensors(bytes, "layer1.bn.", &[4]).unwrap_err();
        assert!(matches!(e, Error::Checkpoint { .. }), "{e}");
    }
    // Encoding: lengths that disagree with the shape, tensors of the wrong size, a key twice.
    let s = State::<f32> {
        weight: Some(vec![1.0; 3]),
        ..Default::default()
    };
    assert!(matches!(s.to_tensors("", &[4]), Err(Error::Length { .. })));
    assert!(matches!(
        Tensor::new(Dtype::F32, vec![2, 2], vec![0; 15]),
        Err(Error::Length {
            expected: 16,
            given: 15,
            ..
        })
    ));
    let t = s.to_tensors("a.", &[3]).unwrap();
    let twice = t.iter().chain(&t).cloned();
    assert!(matches!(
        serialize(twice),
        Err(Error::InvalidArgument { .. })
    ));
}

/// Host values survive encoding exactly: every bit pattern of each dtype (NaN payloads, -0,
/// subnormals) and the counter's extremes.
#[test]
fn encoding_round_trips_every_bit_pattern() {
    fn round_trip<P: Element + PartialEq + std::fmt::Debug>(values: Vec<P>, shape: &[usize]) {
        let s = State {
            running_var: Some(values),
            num_batches_tracked: Some(i64::MIN),
            ..Default::default()
        };
        let bytes = serialize(s.to_tensors("m", shape).unwrap()).unwrap();
        let back = State::<P>::from_safetensors(&bytes, "m", shape).unwrap();
        let bits =
            |s: &State<P>| -> Vec<u8> { s.to_tensors("", shape).unwrap()[0].1.data().to_vec() };
        assert_eq!(bits(&back), bits(&s));
        assert_eq!(back.num_batches_tracked, Some(i64::MIN));
    }
    round_trip((0..=u16::MAX).map(f16::from_bits).collect(), &[256, 256]);
    round_trip((0..=u16::MAX).map(bf16::from_bits).collect(), &[1 << 16]);
    let f: Vec<f32> = (0..1 << 16)
        .map(|i: u32| f32::from_bits(i.wrapping_mul(0x9e37_79b9)))
        .chain([f32::NAN, -0.0, f32::MIN_POSITIVE / 2.0, f32::INFINITY])
        .collect();
    let n = f.len();
    round_trip(f, &[n]);
}
