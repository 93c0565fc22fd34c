//! Module state in the [safetensors](https://docs.rs/safetensors) format (feature
//! `safetensors`): checkpoints by PyTorch's names, dtypes and shapes, as
//! `safetensors.torch.save_file(model.state_dict(), path)` writes them and
//! `model.load_state_dict(safetensors.torch.load_file(path))` reads them.
//!
//! A key is `prefix + name`: `name` is one of `weight`, `bias`, `running_mean`, `running_var`,
//! `num_batches_tracked`, and `prefix` is the module's path in the model as PyTorch writes it
//! (`layer1.bn.`; the trailing dot may be left out; empty for a file of one module). The
//! entries are stored as the module keeps them: `weight` and `bias` with the shape of
//! `normalized_shape` (LayerNorm) or `[C]` (BatchNorm), the running statistics `[C]`, all in the
//! module's parameter dtype (`F32`, `F16` or `BF16`), and `num_batches_tracked` as an `I64`
//! scalar (shape `[]`).
//!
//! On both module types:
//! - `save_safetensors(prefix)` / `save_safetensors_file(path, prefix)`: a file of the module's
//!   state; `state_tensors(prefix)` gives the tensors to combine with others in one file
//!   ([`serialize`], [`serialize_to_file`]), as a whole model's checkpoint.
//! - `load_safetensors(bytes, prefix, strict)` / `load_safetensors_file(path, prefix,
//!   strict)`: reads the keys under `prefix` and ignores the others (the rest of the model).
//!   Every key under `prefix` must be an entry the module has ([`Error::UnexpectedKey`]), of
//!   the module's dtype ([`Error::DType`]) and shape ([`Error::Shape`]); with `strict`, every
//!   entry the module has must be there ([`Error::MissingKey`]), except `num_batches_tracked`,
//!   which PyTorch also fills in for checkpoints without it (the module keeps its value).
//!   Malformed data or an unreadable file is an [`Error::Checkpoint`]. Everything is checked
//!   before anything is copied: a rejected load changes nothing. There is no dtype
//!   conversion: a bf16 checkpoint loads into a bf16 module (PyTorch would convert).
//!
//! For a whole model, read the file once and load each module from the same bytes:
//!
//! ```no_run
//! # fn main() -> Result<(), warpnorm::Error> {
//! use warpnorm::batch_norm::{BatchNorm, BatchNormConfig};
//! use warpnorm::layer_norm::{Affine, LayerNorm};
//! let stream = warpnorm::runtime::context(0)?.default_stream();
//! let mut bn = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(64))?;
//! let mut ln = LayerNorm::<f32>::new(&stream, &[768], Affine::WeightBias, 1e-5)?;
//! let bytes = std::fs::read("model.safetensors").unwrap();
//! bn.load_safetensors(&bytes, "layer1.bn.", true)?;
//! ln.load_safetensors(&bytes, "encoder.norm.", true)?;
//! // ... train ...
//! let mut tensors = bn.state_tensors("layer1.bn.")?;
//! tensors.extend(ln.state_tensors("encoder.norm.")?);
//! warpnorm::safetensors::serialize_to_file(tensors, "model.safetensors")?;
//! # Ok(()) }
//! ```
//!
//! Without a module, [`State::to_tensors`] and [`State::from_safetensors`] convert host
//! values (no GPU needed).

use std::borrow::Cow;
use std::path::Path;

pub use ::safetensors::{Dtype, SafeTensors};
use ::safetensors::{SafeTensorError, View};

use crate::batch_norm::BatchNorm;
use crate::layer_norm::LayerNorm;
use crate::rms_norm::RmsNorm;
use crate::state::{ModuleKind, COUNT_NAME, VALUE_NAMES};
use crate::{DType, Element, Error, Result, State};

/// One tensor of a safetensors file, owned: dtype, shape and little-endian bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl Tensor {
    /// A tensor of `dtype` and `shape` over `data` (little-endian, row-major), which must hold
    /// exactly the tensor's bytes. For the other tensors of a model's checkpoint (e.g. copied
    /// from a [`SafeTensors`] view, or written by the caller).
    pub fn new(dtype: Dtype, shape: Vec<usize>, data: Vec<u8>) -> Result<Tensor> {
        let bits = shape
            .iter()
            .try_fold(dtype.bitsize(), |n, &d| n.checked_mul(d))
            .ok_or_else(|| Error::Overflow(format!("tensor of shape {shape:?}")))?;
        if bits % 8 != 0 || bits / 8 != data.len() {
            return Err(Error::Length {
                what: format!("bytes of a {dtype:?} tensor of shape {shape:?}"),
                expected: bits.div_ceil(8),
                given: data.len(),
            });
        }
        Ok(Tensor { dtype, shape, data })
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The shape (`[]` for a scalar).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The little-endian bytes, row-major.
    pub fn data(&self) -> &[u8] {
        &self.data
    }
}

impl View for &Tensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// The safetensors dtype of a parameter type.
pub fn dtype_of(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
    }
}

fn format_error(what: &str) -> impl FnOnce(SafeTensorError) -> Error + '_ {
    move |e| Error::Checkpoint {
        what: what.into(),
        message: e.to_string(),
    }
}

/// A safetensors file of `tensors` (named as given; no metadata), as bytes. The layout is the
/// safetensors crate's (tensors sorted by dtype alignment, then name), which PyTorch's
/// `save_file` also uses: the same tensors give the same bytes.
pub fn serialize<N: AsRef<str>>(tensors: impl IntoIterator<Item = (N, Tensor)>) -> Result<Vec<u8>> {
    let tensors = named(tensors)?;
    ::safetensors::serialize(tensors.iter().map(|(n, t)| (n.as_str(), t)), None)
        .map_err(format_error("serialization"))
}

/// [`serialize`] into a file at `path` (written beside it, then renamed over it).
pub fn serialize_to_file<N: AsRef<str>>(
    tensors: impl IntoIterator<Item = (N, Tensor)>,
    path: impl AsRef<Path>,
) -> Result<()> {
    let path = path.as_ref();
    let tensors = named(tensors)?;
    ::safetensors::serialize_to_file(tensors.iter().map(|(n, t)| (n.as_str(), t)), None, path)
        .map_err(format_error(&path.display().to_string()))
}

/// The tensors by name; a name given twice is an error (a file holds each key once).
fn named<N: AsRef<str>>(
    tensors: impl IntoIterator<Item = (N, Tensor)>,
) -> Result<Vec<(String, Tensor)>> {
    let mut v: Vec<(String, Tensor)> = tensors
        .into_iter()
        .map(|(n, t)| (n.as_ref().to_string(), t))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = v.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Error::invalid(
            format!("tensor `{}`", w[0].0),
            "given twice (a safetensors file holds each key once)",
        ));
    }
    Ok(v)
}

/// `prefix` as PyTorch writes it: empty, or ending with a dot.
fn normalize(prefix: &str) -> String {
    if prefix.is_empty() || prefix.ends_with('.') {
        prefix.to_string()
    } else {
        format!("{prefix}.")
    }
}

/// The little-endian bytes of `values`.
fn le_bytes<P: Element>(values: &[P]) -> Vec<u8> {
    let size = std::mem::size_of::<P>();
    let mut out = Vec::with_capacity(std::mem::size_of_val(values));
    for v in values {
        // SAFETY: Element types (f32, f16, bf16) are plain data of `size` (4 or 2) bytes; the
        // copy reads exactly the bytes of `v` as the unsigned integer of that size.
        match size {
            4 => out.extend(unsafe { std::mem::transmute_copy::<P, u32>(v) }.to_le_bytes()),
            _ => out.extend(unsafe { std::mem::transmute_copy::<P, u16>(v) }.to_le_bytes()),
        }
    }
    out
}

/// The values of little-endian `bytes` (a whole number of elements: safetensors checks it).
fn from_le_bytes<P: Element>(bytes: &[u8]) -> Vec<P> {
    let size = std::mem::size_of::<P>();
    bytes
        .chunks_exact(size)
        .map(|c| match size {
            // SAFETY: as in `le_bytes`: every bit pattern of the integer of P's size is a
            // valid P (an IEEE or bfloat16 value, NaNs included).
            4 => {
                let bits = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                unsafe { std::mem::transmute_copy::<u32, P>(&bits) }
            }
            _ => {
                let bits = u16::from_le_bytes([c[0], c[1]]);
                unsafe { std::mem::transmute_copy::<u16, P>(&bits) }
            }
        })
        .collect()
}

/// What a decode may find: the module's kind and entries, or any of the five names.
struct Expect<'a> {
    kind: Option<ModuleKind>,
    shape: &'a [usize],
    values: [bool; 4],
    count: bool,
    strict: bool,
}

fn decode<P: Element>(bytes: &[u8], prefix: &str, expect: &Expect<'_>) -> Result<State<P>> {
    let prefix = normalize(prefix);
    let st = SafeTensors::deserialize(bytes).map_err(format_error("safetensors data"))?;
    let mut keys: Vec<&str> = st.names();
    keys.sort_unstable();
    // Unexpected keys first: a wrong prefix or module shows as such, not as a dtype error.
    for key in &keys {
        let Some(name) = key.strip_prefix(prefix.as_str()) else {
            continue;
        };
        let has = match VALUE_NAMES.iter().position(|n| *n == name) {
            Some(i) => Some(expect.values[i]),
            None => (name == COUNT_NAME).then_some(expect.count),
        };
        let reason = match (has, expect.kind) {
            (Some(true), _) => continue,
            (Some(false), Some(kind)) => kind.lacks(name),
            _ => format!(
                "not a normalization module's state entry (under the prefix `{prefix}`, a key \
                 is one of {}, {COUNT_NAME})",
                VALUE_NAMES.join(", ")
            ),
        };
        return Err(Error::UnexpectedKey {
            key: key.to_string(),
            reason,
        });
    }
    let tensor = |name: &str, dtype: Dtype, shape: &[usize]| -> Result<Option<&[u8]>> {
        let key = format!("{prefix}{name}");
        let t = match st.tensor(&key) {
            Ok(t) => t,
            Err(SafeTensorError::TensorNotFound(_)) => return Ok(None),
            Err(e) => return Err(format_error(&key)(e)),
        };
        if t.dtype() != dtype {
            return Err(Error::DType {
                what: key,
                expected: format!("{dtype:?}"),
                given: format!("{:?}", t.dtype()),
            });
        }
        if t.shape() != shape {
            return Err(Error::shape(
                key,
                format!("{shape:?}"),
                format!("{:?}", t.shape()),
            ));
        }
        Ok(Some(t.data()))
    };
    let dtype = dtype_of(P::DTYPE);
    let mut values: [Option<Vec<P>>; 4] = Default::default();
    for (i, name) in VALUE_NAMES.iter().enumerate() {
        match tensor(name, dtype, expect.shape)? {
            Some(data) => values[i] = Some(from_le_bytes(data)),
            None if expect.strict && expect.values[i] => {
                return Err(Error::MissingKey {
                    key: format!("{prefix}{name}"),
                })
            }
            None => {}
        }
    }
    let count = match tensor(COUNT_NAME, Dtype::I64, &[])? {
        // safetensors checked that the data is one I64 (8 bytes).
        Some(d) => Some(i64::from_le_bytes(<[u8; 8]>::try_from(d).map_err(
            |_| Error::Checkpoint {
                what: format!("{prefix}{COUNT_NAME}"),
                message: format!("{} bytes for one I64", d.len()),
            },
        )?)),
        None => None,
    };
    let [weight, bias, running_mean, running_var] = values;
    Ok(State {
        weight,
        bias,
        running_mean,
        running_var,
        num_batches_tracked: count,
    })
}

impl<P: Element> State<P> {
    /// The entries that are present as safetensors tensors named `prefix + name` (see the
    /// module docs for `prefix`): those of type `P` with `shape` (PyTorch's: the
    /// `normalized_shape`, or `[C]`), in P's dtype, and `num_batches_tracked` as an I64 scalar.
    /// An entry whose length is not the product of `shape` is an [`Error::Length`].
    pub fn to_tensors(&self, prefix: &str, shape: &[usize]) -> Result<Vec<(String, Tensor)>> {
        let prefix = normalize(prefix);
        let numel: usize = shape.iter().product();
        let dtype = dtype_of(P::DTYPE);
        let mut out = Vec::with_capacity(5);
        for (name, v) in VALUE_NAMES.iter().zip(self.values()) {
            let Some(v) = v else { continue };
            if v.len() != numel {
                return Err(Error::Length {
                    what: (*name).into(),
                    expected: numel,
                    given: v.len(),
                });
            }
            let t = Tensor::new(dtype, shape.to_vec(), le_bytes(v))?;
            out.push((format!("{prefix}{name}"), t));
        }
        if let Some(n) = self.num_batches_tracked {
            let t = Tensor::new(Dtype::I64, Vec::new(), n.to_le_bytes().to_vec())?;
            out.push((format!("{prefix}{COUNT_NAME}"), t));
        }
        Ok(out)
    }

    /// The entries under `prefix` in safetensors `bytes` (keys outside it are ignored), each
    /// of P's dtype with `shape` (`num_batches_tracked`: an I64 scalar); entries absent from
    /// the file are `None`. A key under `prefix` that is not a state entry is an
    /// [`Error::UnexpectedKey`]; a wrong dtype or shape is an [`Error::DType`] /
    /// [`Error::Shape`] naming the key.
    pub fn from_safetensors(bytes: &[u8], prefix: &str, shape: &[usize]) -> Result<State<P>> {
        decode(
            bytes,
            prefix,
            &Expect {
                kind: None,
                shape,
                values: [true; 4],
                count: true,
                strict: false,
            },
        )
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Checkpoint {
        what: path.display().to_string(),
        message: e.to_string(),
    })
}

/// The safetensors methods, the same on both module types.
macro_rules! safetensors_methods {
    ($module:ident) => {
        impl<P: Element> $module<P> {
            /// The state as safetensors tensors named `prefix + name`, with PyTorch's dtypes
            /// and shapes (copied to the host: this waits for the module's stream), to write
            /// with others into one file ([`serialize`]).
            pub fn state_tensors(&self, prefix: &str) -> Result<Vec<(String, Tensor)>> {
                let shape = self.state_parts().shape;
                self.state()?.to_tensors(prefix, &shape)
            }

            /// A safetensors file (bytes) of the module's state, keys `prefix + name`.
            pub fn save_safetensors(&self, prefix: &str) -> Result<Vec<u8>> {
                serialize(self.state_tensors(prefix)?)
            }

            /// [`Self::save_safetensors`] into a file at `path`.
            pub fn save_safetensors_file(
                &self,
                path: impl AsRef<Path>,
                prefix: &str,
            ) -> Result<()> {
                serialize_to_file(self.state_tensors(prefix)?, path)
            }

            /// Loads the entries under `prefix` from safetensors `bytes` (the other keys are
            /// ignored), checked as the module docs say; `strict` requires every entry the
            /// module has but `num_batches_tracked` (PyTorch's `strict=True`). Nothing is
            /// copied unless every check passes.
            pub fn load_safetensors(
                &mut self,
                bytes: &[u8],
                prefix: &str,
                strict: bool,
            ) -> Result<()> {
                let parts = self.state_parts();
                let (values, count) = parts.has();
                let expect = Expect {
                    kind: Some(parts.kind),
                    shape: &parts.shape,
                    values,
                    count,
                    strict,
                };
                let state = decode::<P>(bytes, prefix, &expect)?;
                self.load_state(&state)
            }

            /// [`Self::load_safetensors`] from the file at `path` (read whole; for a model's
            /// checkpoint read it once and load each module from the bytes).
            pub fn load_safetensors_file(
                &mut self,
                path: impl AsRef<Path>,
                prefix: &str,
                strict: bool,
            ) -> Result<()> {
                let bytes = read_file(path.as_ref())?;
                self.load_safetensors(&bytes, prefix, strict)
            }
        }
    };
}

safetensors_methods!(LayerNorm);
safetensors_methods!(RmsNorm);
safetensors_methods!(BatchNorm);
