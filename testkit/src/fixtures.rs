//! Loader for the PyTorch oracle fixtures in `fixtures/` (format: `fixtures/README.md`).
//!
//! The fixtures are written by `scripts/gen_fixtures.py`: one JSON file per case, with every
//! tensor stored bit-exactly as little-endian bytes in hex. Each case holds its inputs, torch's
//! results computed in the case's dtype (`torch`) and torch's results computed in float64 from the
//! same, already rounded inputs (`f64`).
//!
//! ```ignore
//! for fx in fixtures::load_all("layer_norm") {
//!     let ln = fx.as_layer_norm().unwrap();
//!     let x = ln.inputs.x.to_f64_vec();
//!     let (m, d) = ln.config.rows_cols(&ln.inputs.x.shape).unwrap();
//! }
//! ```
//!
//! Loading panics with the file's path on malformed files: this is test support code, and a
//! broken fixture must fail the test loudly. [`try_load_all`] and [`load_file`] return errors.

use std::fmt;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use serde::Deserialize;

/// The fixture format version this loader understands.
pub const FORMAT_VERSION: u32 = 1;

/// The fixture operations (subdirectories of `fixtures/`).
pub const OPS: [&str; 5] = [
    "layer_norm",
    "rms_norm",
    "batch_norm",
    "layer_norm_residual",
    "rms_norm_residual",
];

/// `<crate root>/fixtures`.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// Element type of a stored tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum DType {
    /// IEEE binary32.
    #[serde(rename = "f32")]
    F32,
    /// IEEE binary16.
    #[serde(rename = "f16")]
    F16,
    /// bfloat16.
    #[serde(rename = "bf16")]
    Bf16,
    /// IEEE binary64.
    #[serde(rename = "f64")]
    F64,
    /// Signed 64-bit integer (`num_batches_tracked`).
    #[serde(rename = "i64")]
    I64,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F16 | DType::Bf16 => 2,
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// Machine epsilon (spacing of 1.0) of the floating-point types; 0 for `I64`.
    pub fn epsilon(self) -> f64 {
        match self {
            DType::F32 => f32::EPSILON as f64,
            DType::F16 => f16::EPSILON.to_f64(),
            DType::Bf16 => bf16::EPSILON.to_f64(),
            DType::F64 => f64::EPSILON,
            DType::I64 => 0.0,
        }
    }
}

/// Memory order of a stored tensor. `shape` is always the logical (NCHW-style) shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Layout {
    /// Row-major over the logical shape.
    #[serde(rename = "contiguous")]
    Contiguous,
    /// 4-D tensor stored as (N, H, W, C).
    #[serde(rename = "channels_last")]
    ChannelsLast,
    /// 5-D tensor stored as (N, D, H, W, C).
    #[serde(rename = "channels_last_3d")]
    ChannelsLast3d,
}

impl Layout {
    /// Physical dim order as a permutation of the logical dims, for a tensor of rank `rank`.
    /// `None` when the layout does not apply to that rank.
    pub fn permutation(self, rank: usize) -> Option<Vec<usize>> {
        match (self, rank) {
            (Layout::Contiguous, r) => Some((0..r).collect()),
            (Layout::ChannelsLast, 4) => Some(vec![0, 2, 3, 1]),
            (Layout::ChannelsLast3d, 5) => Some(vec![0, 2, 3, 4, 1]),
            _ => None,
        }
    }
}

/// A tensor decoded from a fixture: dtype, logical shape, layout and its raw bytes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawTensor")]
pub struct Tensor {
    /// Element type.
    pub dtype: DType,
    /// Logical shape (for channels-last tensors still N, C, spatial...).
    pub shape: Vec<usize>,
    /// Memory order of `raw_bytes()`.
    pub layout: Layout,
    bytes: Vec<u8>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    dtype: DType,
    shape: Vec<usize>,
    layout: Layout,
    hex: String,
}

/// Decode lowercase or uppercase hex into bytes.
pub fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    fn nibble(c: u8) -> Result<u8, String> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(format!("invalid hex digit {:?}", c as char)),
        }
    }
    let h = hex.as_bytes();
    if !h.len().is_multiple_of(2) {
        return Err(format!("hex string has odd length {}", h.len()));
    }
    h.chunks_exact(2)
        .map(|p| Ok(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

impl TryFrom<RawTensor> for Tensor {
    type Error = String;

    fn try_from(raw: RawTensor) -> Result<Self, String> {
        Tensor::from_bytes(raw.dtype, raw.shape, raw.layout, decode_hex(&raw.hex)?)
    }
}

impl Tensor {
    /// Build a tensor from raw bytes, checking the length against the shape and the layout
    /// against the rank.
    pub fn from_bytes(
        dtype: DType,
        shape: Vec<usize>,
        layout: Layout,
        bytes: Vec<u8>,
    ) -> Result<Self, String> {
        let numel = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| format!("shape {shape:?} overflows"))?;
        let want = numel * dtype.size();
        if bytes.len() != want {
            return Err(format!(
                "{dtype:?} tensor of shape {shape:?} needs {want} bytes, got {}",
                bytes.len()
            ));
        }
        if layout.permutation(shape.len()).is_none() {
            return Err(format!(
                "layout {layout:?} does not apply to rank {}",
                shape.len()
            ));
        }
        Ok(Tensor {
            dtype,
            shape,
            layout,
            bytes,
        })
    }

    /// Number of elements (product of the shape; 1 for a scalar).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The stored bytes, little-endian, in memory (`layout`) order.
    pub fn raw_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The shape in memory order (equal to `shape` for contiguous tensors).
    pub fn physical_shape(&self) -> Vec<usize> {
        self.perm().iter().map(|&p| self.shape[p]).collect()
    }

    fn perm(&self) -> Vec<usize> {
        // Checked at construction.
        self.layout
            .permutation(self.shape.len())
            .unwrap_or_else(|| (0..self.shape.len()).collect())
    }

    fn chunks<const N: usize>(&self) -> impl Iterator<Item = [u8; N]> + '_ {
        self.bytes.chunks_exact(N).map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            a
        })
    }

    /// Values widened to f64, in memory order (exact for every float dtype; i64 via `as`).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self.dtype {
            DType::F32 => self
                .chunks::<4>()
                .map(|b| f32::from_le_bytes(b) as f64)
                .collect(),
            DType::F16 => self
                .chunks::<2>()
                .map(|b| f16::from_bits(u16::from_le_bytes(b)).to_f64())
                .collect(),
            DType::Bf16 => self
                .chunks::<2>()
                .map(|b| bf16::from_bits(u16::from_le_bytes(b)).to_f64())
                .collect(),
            DType::F64 => self.chunks::<8>().map(f64::from_le_bytes).collect(),
            DType::I64 => self
                .chunks::<8>()
                .map(|b| i64::from_le_bytes(b) as f64)
                .collect(),
        }
    }

    /// Values as f32, in memory order: exact for f32/f16/bf16, rounded (`as f32`) for f64/i64.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match self.dtype {
            DType::F32 => self.chunks::<4>().map(f32::from_le_bytes).collect(),
            DType::F16 => self
                .chunks::<2>()
                .map(|b| f16::from_bits(u16::from_le_bytes(b)).to_f32())
                .collect(),
            DType::Bf16 => self
                .chunks::<2>()
                .map(|b| bf16::from_bits(u16::from_le_bytes(b)).to_f32())
                .collect(),
            DType::F64 | DType::I64 => self.to_f64_vec().into_iter().map(|v| v as f32).collect(),
        }
    }

    /// The raw 16-bit patterns of an f16/bf16 tensor, in memory order; `None` for other dtypes.
    pub fn to_u16_bits(&self) -> Option<Vec<u16>> {
        match self.dtype {
            DType::F16 | DType::Bf16 => Some(self.chunks::<2>().map(u16::from_le_bytes).collect()),
            _ => None,
        }
    }

    /// An f16 tensor's values; `None` for other dtypes.
    pub fn to_f16_vec(&self) -> Option<Vec<f16>> {
        (self.dtype == DType::F16).then(|| self.chunks::<2>().map(f16::from_le_bytes).collect())
    }

    /// A bf16 tensor's values; `None` for other dtypes.
    pub fn to_bf16_vec(&self) -> Option<Vec<bf16>> {
        (self.dtype == DType::Bf16).then(|| self.chunks::<2>().map(bf16::from_le_bytes).collect())
    }

    /// An i64 tensor's values; `None` for other dtypes.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        (self.dtype == DType::I64).then(|| self.chunks::<8>().map(i64::from_le_bytes).collect())
    }

    /// Memory index of each logical (row-major over `shape`) element.
    pub fn logical_to_memory_index(&self) -> Vec<usize> {
        let perm = self.perm();
        let pshape = self.physical_shape();
        // Stride (in the memory order) of each physical dim, then of each logical dim.
        let mut pstride = vec![1usize; pshape.len()];
        for i in (0..pshape.len().saturating_sub(1)).rev() {
            pstride[i] = pstride[i + 1] * pshape[i + 1];
        }
        let mut lstride = vec![0usize; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            lstride[p] = pstride[i];
        }
        let n = self.numel();
        let mut out = Vec::with_capacity(n);
        let mut idx = vec![0usize; self.shape.len()];
        for _ in 0..n {
            out.push(idx.iter().zip(&lstride).map(|(i, s)| i * s).sum());
            for d in (0..idx.len()).rev() {
                idx[d] += 1;
                if idx[d] < self.shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }

    /// Values widened to f64 in logical (row-major over `shape`) order, whatever the layout.
    pub fn to_f64_logical(&self) -> Vec<f64> {
        let mem = self.to_f64_vec();
        self.logical_to_memory_index()
            .into_iter()
            .map(|i| mem[i])
            .collect()
    }
}

/// One fixture file.
#[derive(Debug, Clone, Deserialize)]
pub struct Fixture {
    /// The file it was loaded from (not part of the JSON).
    #[serde(skip)]
    pub path: PathBuf,
    /// Format version (see [`FORMAT_VERSION`]).
    pub format_version: u32,
    /// Case name (the file stem).
    pub name: String,
    /// One line saying what the case exercises.
    pub description: String,
    /// `torch.__version__` of the generator.
    pub torch_version: String,
    /// The op-specific content, tagged by the `op` field.
    #[serde(flatten)]
    pub case: Case,
}

/// The op-specific part of a fixture.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op")]
pub enum Case {
    /// `op: "layer_norm"`.
    #[serde(rename = "layer_norm")]
    LayerNorm(Box<LayerNormCase>),
    /// `op: "batch_norm"`.
    #[serde(rename = "batch_norm")]
    BatchNorm(Box<BatchNormCase>),
    /// `op: "rms_norm"`.
    #[serde(rename = "rms_norm")]
    RmsNorm(Box<RmsNormCase>),
    /// `op: "layer_norm_residual"`.
    #[serde(rename = "layer_norm_residual")]
    LayerNormResidual(Box<LayerNormResidualCase>),
    /// `op: "rms_norm_residual"`.
    #[serde(rename = "rms_norm_residual")]
    RmsNormResidual(Box<RmsNormResidualCase>),
}

impl Fixture {
    /// The op name as used in the directory names.
    pub fn op(&self) -> &'static str {
        match self.case {
            Case::LayerNorm(_) => "layer_norm",
            Case::BatchNorm(_) => "batch_norm",
            Case::RmsNorm(_) => "rms_norm",
            Case::LayerNormResidual(_) => "layer_norm_residual",
            Case::RmsNormResidual(_) => "rms_norm_residual",
        }
    }

    /// The LayerNorm content, if this is a LayerNorm fixture.
    pub fn as_layer_norm(&self) -> Option<&LayerNormCase> {
        match &self.case {
            Case::LayerNorm(c) => Some(c),
            _ => None,
        }
    }

    /// The BatchNorm content, if this is a BatchNorm fixture.
    pub fn as_batch_norm(&self) -> Option<&BatchNormCase> {
        match &self.case {
            Case::BatchNorm(c) => Some(c),
            _ => None,
        }
    }

    /// The RMSNorm content, if this is an RMSNorm fixture.
    pub fn as_rms_norm(&self) -> Option<&RmsNormCase> {
        match &self.case {
            Case::RmsNorm(c) => Some(c),
            _ => None,
        }
    }

    /// The content of a LayerNorm fused residual add fixture.
    pub fn as_layer_norm_residual(&self) -> Option<&LayerNormResidualCase> {
        match &self.case {
            Case::LayerNormResidual(c) => Some(c),
            _ => None,
        }
    }

    /// The content of an RMSNorm fused residual add fixture.
    pub fn as_rms_norm_residual(&self) -> Option<&RmsNormResidualCase> {
        match &self.case {
            Case::RmsNormResidual(c) => Some(c),
            _ => None,
        }
    }
}

/// (M rows, D columns) of an input of `x_shape` normalized over its trailing
/// `normalized_shape`; `None` when the trailing dims of `x_shape` are not `normalized_shape`.
pub fn rows_cols(normalized_shape: &[usize], x_shape: &[usize]) -> Option<(usize, usize)> {
    let k = normalized_shape.len();
    if x_shape.len() < k || x_shape[x_shape.len() - k..] != *normalized_shape {
        return None;
    }
    let d = normalized_shape.iter().product();
    let m = x_shape[..x_shape.len() - k].iter().product();
    Some((m, d))
}

/// An RMSNorm case: one forward and one backward call.
#[derive(Debug, Clone, Deserialize)]
pub struct RmsNormCase {
    /// Module configuration.
    pub config: RmsNormConfig,
    /// x, the weight and the upstream gradient dy.
    pub inputs: RmsNormInputs,
    /// torch's results in the case's dtypes.
    pub torch: RmsNormResults,
    /// torch's results in float64 from the same inputs, with eps None taken as f32's
    /// epsilon (what torch uses for f32/f16/bf16 inputs).
    pub f64: RmsNormResults,
}

/// `nn.RMSNorm` configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsNormConfig {
    /// Trailing dims normalized over; their product is D.
    pub normalized_shape: Vec<usize>,
    /// Added to the mean square inside the sqrt; `None`: PyTorch's default (f32's epsilon).
    pub eps: Option<f64>,
    /// Whether the weight exists.
    pub elementwise_affine: bool,
    /// dtype of x, y, dy and dx.
    pub x_dtype: DType,
    /// dtype of the weight (and dweight); `None` without one.
    pub param_dtype: Option<DType>,
}

/// RMSNorm inputs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsNormInputs {
    /// Activations.
    pub x: Tensor,
    /// Weight, shape `normalized_shape`.
    pub weight: Option<Tensor>,
    /// Upstream gradient, shape and dtype of y.
    pub dy: Tensor,
}

/// RMSNorm outputs and gradients.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsNormResults {
    /// Forward output.
    pub y: Tensor,
    /// Per-row 1/sqrt(mean(x^2) + eps), f32, shape `x.shape[:-k] + (1,)*k`.
    pub rstd: Tensor,
    /// Gradient of x.
    pub dx: Tensor,
    /// Gradient of the weight.
    pub dweight: Option<Tensor>,
}

/// A LayerNorm case: one forward and one backward call.
#[derive(Debug, Clone, Deserialize)]
pub struct LayerNormCase {
    /// Module configuration.
    pub config: LayerNormConfig,
    /// x, gamma, beta and the upstream gradient dy.
    pub inputs: LayerNormInputs,
    /// torch's results in the case's dtypes.
    pub torch: LayerNormResults,
    /// torch's results in float64 from the same inputs (all tensors f64).
    pub f64: LayerNormResults,
}

/// `nn.LayerNorm` configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormConfig {
    /// Trailing dims normalized over; their product is D.
    pub normalized_shape: Vec<usize>,
    /// Added to the biased variance inside the sqrt.
    pub eps: f64,
    /// Whether gamma (and maybe beta) exist.
    pub elementwise_affine: bool,
    /// Whether beta exists.
    pub bias: bool,
    /// dtype of x, y, dy and dx.
    pub x_dtype: DType,
    /// dtype of gamma/beta (and dgamma/dbeta); `None` without affine.
    pub param_dtype: Option<DType>,
}

impl LayerNormConfig {
    /// (M rows, D columns) for an input of `x_shape`; `None` when the trailing dims of
    /// `x_shape` are not `normalized_shape`.
    pub fn rows_cols(&self, x_shape: &[usize]) -> Option<(usize, usize)> {
        rows_cols(&self.normalized_shape, x_shape)
    }
}

/// LayerNorm inputs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormInputs {
    /// Activations.
    pub x: Tensor,
    /// Weight, shape `normalized_shape`.
    pub gamma: Option<Tensor>,
    /// Bias, shape `normalized_shape`.
    pub beta: Option<Tensor>,
    /// Upstream gradient, shape and dtype of y.
    pub dy: Tensor,
}

/// LayerNorm outputs and gradients.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormResults {
    /// Forward output.
    pub y: Tensor,
    /// Per-row mean, shape `x.shape[:-k] + (1,)*k` (fp16/bf16 when torch keeps it so).
    pub mean: Tensor,
    /// Per-row 1/sqrt(var + eps), same shape as `mean`.
    pub rstd: Tensor,
    /// Gradient of x.
    pub dx: Tensor,
    /// Gradient of gamma.
    pub dgamma: Option<Tensor>,
    /// Gradient of beta.
    pub dbeta: Option<Tensor>,
}

/// A LayerNorm case of the fused residual add: h = x + residual (+ bias), y = LayerNorm(h),
/// then the gradients of sum(y * dy) (+ sum(h * dh)). torch runs it unfused.
#[derive(Debug, Clone, Deserialize)]
pub struct LayerNormResidualCase {
    /// Module configuration and which of the residual add's inputs exist.
    pub config: LayerNormResidualConfig,
    /// x, the residual, the bias, gamma, beta, dy and dh.
    pub inputs: LayerNormResidualInputs,
    /// (x + residual) + bias in f32 arithmetic rounded once to the activation dtype (torch's
    /// f32 adds), when torch's `h` is not that: with a bias and 16-bit activations torch
    /// rounds twice. `None` when torch's `h` is it bit for bit (no bias, or f32 activations).
    pub h_one_rounding: Option<Tensor>,
    /// How many elements of torch's `h` differ from `h_one_rounding` (0 when that is `None`).
    pub torch_h_differs: usize,
    /// torch's results in the case's dtypes.
    pub torch: LayerNormResidualResults,
    /// torch's results in float64 from the same inputs (all tensors f64; h unrounded).
    pub f64: LayerNormResidualResults,
    /// torch's float64 results downstream of torch's own (rounded) h: LayerNorm of `torch.h`
    /// widened exactly, dx the gradient of that h (dh included), dbias its column sums.
    pub f64_at_h: LayerNormResidualResults,
    /// The same at `h_one_rounding` (the h the fused op normalizes); `None` when that is
    /// `None` (then `f64_at_h` is at the one-rounding h).
    pub f64_at_h_one_rounding: Option<LayerNormResidualResults>,
}

/// Configuration of a LayerNorm fused residual add case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormResidualConfig {
    /// Trailing dims normalized over; their product is D.
    pub normalized_shape: Vec<usize>,
    /// Added to the biased variance inside the sqrt.
    pub eps: f64,
    /// Whether gamma (and maybe beta) exist.
    pub elementwise_affine: bool,
    /// Whether beta exists (`nn.LayerNorm(bias=...)`).
    pub bias: bool,
    /// Whether the residual add has a bias (added to h).
    pub residual_bias: bool,
    /// dtype of x, the residual, h, y, dy, dh and dx.
    pub x_dtype: DType,
    /// dtype of gamma, beta and the residual bias (and of their gradients); `None` when none
    /// of them exists.
    pub param_dtype: Option<DType>,
}

impl LayerNormResidualConfig {
    /// (M rows, D columns) for an input of `x_shape` (see [`rows_cols`]).
    pub fn rows_cols(&self, x_shape: &[usize]) -> Option<(usize, usize)> {
        rows_cols(&self.normalized_shape, x_shape)
    }
}

/// Inputs of a LayerNorm fused residual add case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormResidualInputs {
    /// Activations.
    pub x: Tensor,
    /// The residual, shape and dtype of x.
    pub residual: Tensor,
    /// The residual add's bias, shape `normalized_shape`.
    pub bias: Option<Tensor>,
    /// Weight, shape `normalized_shape`.
    pub gamma: Option<Tensor>,
    /// LayerNorm's bias, shape `normalized_shape`.
    pub beta: Option<Tensor>,
    /// Upstream gradient of y.
    pub dy: Tensor,
    /// Upstream gradient of h (from a later use of the residual stream), or none.
    pub dh: Option<Tensor>,
}

/// Outputs and gradients of a LayerNorm fused residual add case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNormResidualResults {
    /// x + residual (+ bias) as torch formed it (see [`LayerNormResidualCase::h_one_rounding`]).
    pub h: Tensor,
    /// LayerNorm of h.
    pub y: Tensor,
    /// Per-row mean of h (dtype as [`LayerNormResults::mean`]).
    pub mean: Tensor,
    /// Per-row 1/sqrt(var + eps) of h.
    pub rstd: Tensor,
    /// Gradient of x (equal to the residual's and h's): LayerNorm's dx plus dh.
    pub dx: Tensor,
    /// Gradient of gamma.
    pub dgamma: Option<Tensor>,
    /// Gradient of beta.
    pub dbeta: Option<Tensor>,
    /// Gradient of the residual add's bias (the column sums of dx).
    pub dbias: Option<Tensor>,
}

/// An RMSNorm case of the fused residual add: h = x + residual (+ bias), y = RMSNorm(h), then
/// the gradients of sum(y * dy) (+ sum(h * dh)). torch runs it unfused.
#[derive(Debug, Clone, Deserialize)]
pub struct RmsNormResidualCase {
    /// Module configuration and which of the residual add's inputs exist.
    pub config: RmsNormResidualConfig,
    /// x, the residual, the bias, the weight, dy and dh.
    pub inputs: RmsNormResidualInputs,
    /// As [`LayerNormResidualCase::h_one_rounding`].
    pub h_one_rounding: Option<Tensor>,
    /// As [`LayerNormResidualCase::torch_h_differs`].
    pub torch_h_differs: usize,
    /// torch's results in the case's dtypes.
    pub torch: RmsNormResidualResults,
    /// torch's results in float64 from the same inputs (eps None taken as f32's epsilon).
    pub f64: RmsNormResidualResults,
    /// As [`LayerNormResidualCase::f64_at_h`].
    pub f64_at_h: RmsNormResidualResults,
    /// As [`LayerNormResidualCase::f64_at_h_one_rounding`].
    pub f64_at_h_one_rounding: Option<RmsNormResidualResults>,
}

/// Configuration of an RMSNorm fused residual add case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsNormResidualConfig {
    /// Trailing dims normalized over; their product is D.
    pub normalized_shape: Vec<usize>,
    /// Added to the mean square inside the sqrt; `None`: PyTorch's default (f32's epsilon).
    pub eps: Option<f64>,
    /// Whether the weight exists.
    pub elementwise_affine: bool,
    /// Whether the residual add has a bias (added to h).
    pub residual_bias: bool,
    /// dtype of x, the residual, h, y, dy, dh and dx.
    pub x_dtype: DType,
    /// dtype of the weight and the residual bias (and of their gradients); `None` when
    /// neither exists.
    pub param_dtype: Option<DType>,
}

impl RmsNormResidualConfig {
    /// (M rows, D columns) for an input of `x_shape` (see [`rows_cols`]).
    pub fn rows_cols(&self, x_shape: &[usize]) -> Option<(usize, usize)> {
        rows_cols(&self.normalized_shape, x_shape)
    }
}

/// Inputs of an RMSNorm fused residual add case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsNormResidualInputs {
    /// Activations.
    pub x: Tensor,
    /// The residual, shape and dtype of x.
    pub residual: Tensor,
    /// The residual add's bias, shape `normalized_shape`.
    pub bias: Option<Tensor>,
    /// Weight, shape `normalized_shape`.
    pub weight: Option<Tensor>,
    /// Upstream gradient of y.
    pub dy: Tensor,
    /// Upstream gradient of h, or none.
    pub dh: Option<Tensor>,
}

/// Outputs and gradients of an RMSNorm fused residual add case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RmsNormResidualResults {
    /// x + residual (+ bias) as torch formed it.
    pub h: Tensor,
    /// RMSNorm of h.
    pub y: Tensor,
    /// Per-row 1/sqrt(mean(h^2) + eps), f32 (f64 in the float64 run).
    pub rstd: Tensor,
    /// Gradient of x (equal to the residual's and h's): RMSNorm's dx plus dh.
    pub dx: Tensor,
    /// Gradient of the weight.
    pub dweight: Option<Tensor>,
    /// Gradient of the residual add's bias (the column sums of dx).
    pub dbias: Option<Tensor>,
}

/// A BatchNorm case: a module stepped through a sequence of train/eval calls.
#[derive(Debug, Clone, Deserialize)]
pub struct BatchNormCase {
    /// Module configuration.
    pub config: BatchNormConfig,
    /// Parameters and running statistics before the first step.
    pub initial: BatchNormInitial,
    /// The calls, in order; each sees the running statistics left by the previous one.
    pub steps: Vec<BatchNormStep>,
}

/// `nn.BatchNorm{1,2,3}d` configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchNormConfig {
    /// `"BatchNorm1d"`, `"BatchNorm2d"` or `"BatchNorm3d"`.
    pub module: String,
    /// C.
    pub num_features: usize,
    /// Added to the biased batch variance / running variance inside the sqrt.
    pub eps: f64,
    /// Running-average factor; `None` = cumulative average (1 / num_batches_tracked).
    pub momentum: Option<f64>,
    /// Whether gamma/beta exist.
    pub affine: bool,
    /// Whether running statistics exist (if not, eval uses batch statistics).
    pub track_running_stats: bool,
    /// Memory order of x, dy, y and dx.
    pub layout: Layout,
    /// dtype of x, y, dy, dx.
    pub x_dtype: DType,
    /// dtype of gamma, beta, running stats and parameter gradients.
    pub param_dtype: DType,
}

/// Module state before the first step.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchNormInitial {
    /// Weight (C,), fixed for the whole sequence.
    pub gamma: Option<Tensor>,
    /// Bias (C,), fixed for the whole sequence.
    pub beta: Option<Tensor>,
    /// Running mean (C,).
    pub running_mean: Option<Tensor>,
    /// Running variance (C,).
    pub running_var: Option<Tensor>,
    /// Scalar i64 counter.
    pub num_batches_tracked: Option<Tensor>,
}

/// One forward + backward call of the module.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchNormStep {
    /// Training mode (batch statistics, running-stat update) or eval.
    pub training: bool,
    /// Input, in `config.layout`.
    pub x: Tensor,
    /// Upstream gradient, in `config.layout`.
    pub dy: Tensor,
    /// torch's error message when the forward raised (then y/dx/... are absent).
    pub error: Option<String>,
    /// torch's results in the case's dtypes.
    pub torch: BatchNormResults,
    /// torch's results in float64 (a float64 module run through the same steps).
    pub f64: BatchNormResults,
}

/// Results of one BatchNorm step; running statistics are the state after the step.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchNormResults {
    /// Forward output (absent on error).
    pub y: Option<Tensor>,
    /// Batch mean (C,) used for normalization; shape (0,) in eval with running stats;
    /// absent on error and for empty input (torch leaves it uninitialized).
    pub save_mean: Option<Tensor>,
    /// 1/sqrt(biased batch var + eps) (C,); same presence rules as `save_mean`.
    pub save_invstd: Option<Tensor>,
    /// Gradient of x (absent on error).
    pub dx: Option<Tensor>,
    /// Gradient of gamma (absent on error or without affine).
    pub dgamma: Option<Tensor>,
    /// Gradient of beta (absent on error or without affine).
    pub dbeta: Option<Tensor>,
    /// Running mean after the step.
    pub running_mean: Option<Tensor>,
    /// Running variance after the step.
    pub running_var: Option<Tensor>,
    /// Counter after the step.
    pub num_batches_tracked: Option<Tensor>,
}

/// Why a fixture could not be loaded.
#[derive(Debug)]
pub struct FixtureError {
    /// The offending file or directory.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for FixtureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for FixtureError {}

/// Load and parse one fixture file.
pub fn load_file(path: &Path) -> Result<Fixture, FixtureError> {
    let err = |message: String| FixtureError {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut fx: Fixture = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
    if fx.format_version != FORMAT_VERSION {
        return Err(err(format!(
            "format_version {} (this loader reads {FORMAT_VERSION})",
            fx.format_version
        )));
    }
    fx.path = path.to_path_buf();
    Ok(fx)
}

/// Load every `fixtures/<op>/*.json`, sorted by file name; checks each file's `op`.
pub fn try_load_all(op: &str) -> Result<Vec<Fixture>, FixtureError> {
    let dir = fixtures_dir().join(op);
    let derr = |message: String| FixtureError {
        path: dir.clone(),
        message,
    };
    if !OPS.contains(&op) {
        return Err(derr(format!("unknown op {op:?}, expected one of {OPS:?}")));
    }
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| derr(e.to_string()))? {
        let p = entry.map_err(|e| derr(e.to_string()))?.path();
        if p.extension().is_some_and(|e| e == "json") {
            paths.push(p);
        }
    }
    paths.sort();
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let fx = load_file(&p)?;
        if fx.op() != op {
            return Err(FixtureError {
                path: p,
                message: format!("op {:?} in the {op:?} directory", fx.op()),
            });
        }
        out.push(fx);
    }
    Ok(out)
}

/// [`try_load_all`], panicking (with the path) on any error. Never returns an empty list.
pub fn load_all(op: &str) -> Vec<Fixture> {
    let all = try_load_all(op).unwrap_or_else(|e| panic!("loading fixtures: {e}"));
    assert!(
        !all.is_empty(),
        "no fixtures in {}",
        fixtures_dir().join(op).display()
    );
    all
}

/// Every LayerNorm fixture as (fixture, its LayerNorm content).
pub fn layer_norm_cases() -> Vec<(Fixture, LayerNormCase)> {
    load_all("layer_norm")
        .into_iter()
        .filter_map(|f| f.as_layer_norm().cloned().map(|c| (f, c)))
        .collect()
}

/// Every RMSNorm fixture as (fixture, its RMSNorm content).
pub fn rms_norm_cases() -> Vec<(Fixture, RmsNormCase)> {
    load_all("rms_norm")
        .into_iter()
        .filter_map(|f| f.as_rms_norm().cloned().map(|c| (f, c)))
        .collect()
}

/// Every LayerNorm fused residual add fixture as (fixture, its content).
pub fn layer_norm_residual_cases() -> Vec<(Fixture, LayerNormResidualCase)> {
    load_all("layer_norm_residual")
        .into_iter()
        .filter_map(|f| f.as_layer_norm_residual().cloned().map(|c| (f, c)))
        .collect()
}

/// Every RMSNorm fused residual add fixture as (fixture, its content).
pub fn rms_norm_residual_cases() -> Vec<(Fixture, RmsNormResidualCase)> {
    load_all("rms_norm_residual")
        .into_iter()
        .filter_map(|f| f.as_rms_norm_residual().cloned().map(|c| (f, c)))
        .collect()
}

/// Every BatchNorm fixture as (fixture, its BatchNorm content).
pub fn batch_norm_cases() -> Vec<(Fixture, BatchNormCase)> {
    load_all("batch_norm")
        .into_iter()
        .filter_map(|f| f.as_batch_norm().cloned().map(|c| (f, c)))
        .collect()
}
