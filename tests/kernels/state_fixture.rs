//! The module-state fixtures (`fixtures/state/`, written by `scripts/gen_state_fixture.py`):
//! checkpoints saved by PyTorch with `safetensors.torch.save_file(model.state_dict(), ...)`,
//! and beside each, a JSON of what the script saved (bytes and values of every key, each
//! normalization module's configuration, and a small eval case per float32 module).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use warpnorm::{Element, State};

/// One key of the checkpoint as the script recorded it.
#[derive(Debug, Deserialize)]
pub struct Entry {
    /// safetensors dtype name (`F32`, `F16`, `BF16`, `I64`).
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Little-endian bytes, row-major.
    pub hex: String,
    /// The values as torch printed them (as f64; exact for every dtype here).
    pub values: Vec<f64>,
}

impl Entry {
    pub fn bytes(&self) -> Vec<u8> {
        (0..self.hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&self.hex[i..i + 2], 16).expect("hex"))
            .collect()
    }
}

/// A normalization module of the model, with its configuration.
#[derive(Debug, Deserialize)]
pub struct Module {
    #[serde(rename = "type")]
    pub kind: String,
    pub eps: f64,
    #[serde(default)]
    pub normalized_shape: Option<Vec<usize>>,
    #[serde(default)]
    pub weight: Option<bool>,
    #[serde(default)]
    pub bias: Option<bool>,
    #[serde(default)]
    pub num_features: Option<usize>,
    /// `None`: PyTorch's `momentum=None` (cumulative average).
    #[serde(default)]
    pub momentum: Option<f64>,
    #[serde(default)]
    pub affine: Option<bool>,
    #[serde(default)]
    pub track_running_stats: Option<bool>,
    #[serde(default)]
    pub eval_x: Option<Entry>,
    #[serde(default)]
    pub eval_shape: Option<Vec<usize>>,
    #[serde(default)]
    pub eval_y: Option<Entry>,
}

impl Module {
    /// PyTorch's shape of the module's weight, bias and running statistics.
    pub fn param_shape(&self) -> Vec<usize> {
        match &self.normalized_shape {
            Some(s) => s.clone(),
            None => vec![self.num_features.expect("num_features")],
        }
    }
}

/// A fixture: the safetensors file's bytes and the script's record.
#[derive(Debug, Deserialize)]
pub struct Record {
    pub torch_version: String,
    pub file: String,
    pub keys: BTreeMap<String, Entry>,
    /// By prefix without its dot (`layer1.bn`).
    pub modules: BTreeMap<String, Module>,
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/state")
}

/// `fixtures/state/<name>.json` and the safetensors file it describes.
pub fn load(name: &str) -> Record {
    let path = dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut r: Record = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert!(r.torch_version.starts_with("2."), "{}", r.torch_version);
    let file = dir().join(&r.file);
    r.bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{file:?}: {e}"));
    r
}

/// The element of P with little-endian `bytes`.
pub fn from_le<P: Element>(bytes: &[u8]) -> Vec<P> {
    let size = std::mem::size_of::<P>();
    assert_eq!(bytes.len() % size, 0);
    bytes
        .chunks_exact(size)
        .map(|c| {
            let mut wide = [0u8; 4];
            wide[..size].copy_from_slice(c);
            // Assemble the value from its little-endian bits as f32 / f16 / bf16 do.
            match P::DTYPE {
                warpnorm::DType::F32 => P::from_f64(f32::from_le_bytes(wide) as f64),
                warpnorm::DType::F16 => {
                    P::from_f64(half::f16::from_le_bytes([c[0], c[1]]).to_f64())
                }
                warpnorm::DType::BF16 => {
                    P::from_f64(half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
                }
            }
        })
        .collect()
}

impl Record {
    /// The state of the module at `prefix` (without its dot) as the script recorded it,
    /// decoded from the recorded bytes, after checking them against the recorded values.
    pub fn state<P: Element>(&self, prefix: &str) -> State<P> {
        let get = |name: &str| -> Option<Vec<P>> {
            let e = self.keys.get(&format!("{prefix}.{name}"))?;
            let v = from_le::<P>(&e.bytes());
            // serde_json may read a decimal one f64 ulp off; rounded to P it is exact (each
            // value is a P).
            let from_values: Vec<u64> = e
                .values
                .iter()
                .map(|x| P::from_f64(*x).to_f64().to_bits())
                .collect();
            let from_bytes: Vec<u64> = v.iter().map(|x| x.to_f64().to_bits()).collect();
            assert_eq!(
                from_bytes, from_values,
                "{prefix}.{name}: bytes and values disagree"
            );
            Some(v)
        };
        let nbt = self
            .keys
            .get(&format!("{prefix}.num_batches_tracked"))
            .map(|e| {
                let b: [u8; 8] = e.bytes().try_into().expect("one i64");
                let n = i64::from_le_bytes(b);
                assert_eq!(e.values, [n as f64]);
                n
            });
        State {
            weight: get("weight"),
            bias: get("bias"),
            running_mean: get("running_mean"),
            running_var: get("running_var"),
            num_batches_tracked: nbt,
        }
    }
}
