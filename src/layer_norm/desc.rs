//! The description of one LayerNorm problem: shape, dtypes, affine parameters, eps.

use crate::check::{check_eps, check_param_dtype};
use crate::{DType, Error, Result};

/// Which elementwise-affine parameters a LayerNorm has (PyTorch's `elementwise_affine` and
/// `bias` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Affine {
    /// `elementwise_affine=False`: y = (x - mean) * rstd.
    None,
    /// `bias=False`: y = (x - mean) * rstd * gamma.
    Weight,
    /// The default: y = (x - mean) * rstd * gamma + beta.
    WeightBias,
}

impl Affine {
    /// True when gamma exists.
    pub const fn has_weight(self) -> bool {
        !matches!(self, Affine::None)
    }

    /// True when beta exists.
    pub const fn has_bias(self) -> bool {
        matches!(self, Affine::WeightBias)
    }
}

/// One LayerNorm problem: `rows` (M) rows of `cols` (D) contiguous elements.
///
/// Built from PyTorch-style shapes with [`LayerNormDesc::new`] (the trailing dims of the input
/// named by `normalized_shape` form a row) or directly with [`LayerNormDesc::from_rows`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormDesc {
    /// Number of rows M (the product of the leading dims).
    pub rows: usize,
    /// Elements per row D (the product of `normalized_shape`).
    pub cols: usize,
    /// Activation dtype of x, y, dy and dx.
    pub dtype: DType,
    /// Dtype of gamma, beta, dgamma and dbeta: the activation dtype or f32.
    pub param_dtype: DType,
    /// Which parameters exist.
    pub affine: Affine,
    /// Added to the variance inside the square root (PyTorch's default is 1e-5).
    pub eps: f32,
}

/// PyTorch's default eps.
pub const DEFAULT_EPS: f32 = 1e-5;

fn product(dims: &[usize], what: &str) -> Result<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| Error::Overflow(format!("{what}: product of {dims:?}")))
    })
}

impl LayerNormDesc {
    /// Describes LayerNorm over the trailing dims `normalized_shape` of an input of shape
    /// `x_shape` (at least as many dims, the last ones equal to `normalized_shape`).
    pub fn new(
        x_shape: &[usize],
        normalized_shape: &[usize],
        dtype: DType,
        param_dtype: DType,
        affine: Affine,
        eps: f32,
    ) -> Result<LayerNormDesc> {
        if normalized_shape.is_empty() {
            return Err(Error::shape(
                "normalized_shape",
                "at least one dimension",
                "[]".to_string(),
            ));
        }
        let k = normalized_shape.len();
        if x_shape.len() < k || x_shape[x_shape.len() - k..] != *normalized_shape {
            return Err(Error::shape(
                "input",
                format!("a shape ending in normalized_shape {normalized_shape:?}"),
                format!("{x_shape:?}"),
            ));
        }
        let rows = product(&x_shape[..x_shape.len() - k], "input rows")?;
        let cols = product(normalized_shape, "normalized_shape")?;
        LayerNormDesc::from_rows(rows, cols, dtype, param_dtype, affine, eps)
    }

    /// Describes LayerNorm over `rows` rows of `cols` elements.
    pub fn from_rows(
        rows: usize,
        cols: usize,
        dtype: DType,
        param_dtype: DType,
        affine: Affine,
        eps: f32,
    ) -> Result<LayerNormDesc> {
        let d = LayerNormDesc {
            rows,
            cols,
            dtype,
            param_dtype,
            affine,
            eps,
        };
        d.check()?;
        Ok(d)
    }

    /// Validates the description once (dtypes, eps, sizes): what planning takes.
    pub fn check(&self) -> Result<Problem> {
        check_param_dtype("LayerNorm", self.dtype, self.param_dtype)?;
        check_eps(self.eps)?;
        let n = self
            .rows
            .checked_mul(self.cols)
            .ok_or_else(|| Error::Overflow(format!("{} rows x {} cols", self.rows, self.cols)))?;
        n.checked_mul(self.dtype.size())
            .filter(|&b| b <= i64::MAX as usize)
            .ok_or_else(|| Error::Overflow(format!("{n} elements of {} in bytes", self.dtype)))?;
        Ok(Problem {
            desc: *self,
            elements: n as u64,
        })
    }
}

/// A [`LayerNormDesc`] that passed [`LayerNormDesc::check`]: the only input planning takes,
/// so that a call validates its description once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    desc: LayerNormDesc,
    elements: u64,
}

impl Problem {
    /// The checked description.
    pub fn desc(&self) -> &LayerNormDesc {
        &self.desc
    }

    /// rows * cols.
    pub fn elements(&self) -> u64 {
        self.elements
    }
}
