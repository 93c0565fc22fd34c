//! The description of one RMSNorm problem: shape, dtypes, weight, eps.

use crate::check::{check_eps, check_param_dtype};
use crate::layer_norm::{Affine, LayerNormDesc, Problem as LayerNormProblem};
use crate::{DType, Error, Result};

/// eps when none is given (PyTorch's `eps=None`): the f32 machine epsilon, 2^-23, for f32,
/// f16 and bf16 inputs alike, since the arithmetic is f32 (torch 2.15 takes the epsilon of
/// the type it computes in, not `finfo(x.dtype).eps`).
pub const DEFAULT_EPS: f32 = f32::EPSILON;

/// One RMSNorm problem: `rows` (M) rows of `cols` (D) contiguous elements,
/// y = x / sqrt(mean(x^2) + eps) [* weight].
///
/// Built from PyTorch-style shapes with [`RmsNormDesc::new`] (the trailing dims of the input
/// named by `normalized_shape` form a row) or directly with [`RmsNormDesc::from_rows`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNormDesc {
    /// Number of rows M (the product of the leading dims).
    pub rows: usize,
    /// Elements per row D (the product of `normalized_shape`).
    pub cols: usize,
    /// Activation dtype of x, y, dy and dx.
    pub dtype: DType,
    /// Dtype of weight and dweight: the activation dtype or f32.
    pub param_dtype: DType,
    /// True when there is a weight (PyTorch's `elementwise_affine`, default true). There is
    /// never a bias.
    pub weight: bool,
    /// Added to the mean square inside the square root ([`DEFAULT_EPS`] for PyTorch's
    /// `eps=None`).
    pub eps: f32,
}

impl RmsNormDesc {
    /// Describes RMSNorm over the trailing dims `normalized_shape` of an input of shape
    /// `x_shape` (at least as many dims, the last ones equal to `normalized_shape`).
    /// `eps` `None` is [`DEFAULT_EPS`], as PyTorch's `eps=None`.
    pub fn new(
        x_shape: &[usize],
        normalized_shape: &[usize],
        dtype: DType,
        param_dtype: DType,
        weight: bool,
        eps: Option<f32>,
    ) -> Result<RmsNormDesc> {
        let eps = eps.unwrap_or(DEFAULT_EPS);
        check_param_dtype("RMSNorm", dtype, param_dtype)?;
        check_eps(eps)?;
        let ln = LayerNormDesc::new(
            x_shape,
            normalized_shape,
            dtype,
            param_dtype,
            affine_of(weight),
            eps,
        )?;
        RmsNormDesc::from_rows(ln.rows, ln.cols, dtype, param_dtype, weight, Some(eps))
    }

    /// Describes RMSNorm over `rows` rows of `cols` elements (`eps` `None`: [`DEFAULT_EPS`]).
    pub fn from_rows(
        rows: usize,
        cols: usize,
        dtype: DType,
        param_dtype: DType,
        weight: bool,
        eps: Option<f32>,
    ) -> Result<RmsNormDesc> {
        let d = RmsNormDesc {
            rows,
            cols,
            dtype,
            param_dtype,
            weight,
            eps: eps.unwrap_or(DEFAULT_EPS),
        };
        d.check()?;
        Ok(d)
    }

    /// Validates the description once (dtypes, eps, sizes): what planning takes.
    pub fn check(&self) -> Result<Problem> {
        check_param_dtype("RMSNorm", self.dtype, self.param_dtype)?;
        check_eps(self.eps)?;
        let ln = LayerNormDesc {
            rows: self.rows,
            cols: self.cols,
            dtype: self.dtype,
            param_dtype: self.param_dtype,
            affine: affine_of(self.weight),
            eps: self.eps,
        }
        .check()
        .map_err(|e| match e {
            Error::DType {
                expected, given, ..
            } => Error::DType {
                what: "RMSNorm parameters".into(),
                expected,
                given,
            },
            e => e,
        })?;
        Ok(Problem { desc: *self, ln })
    }
}

/// LayerNorm's parameters of an RMSNorm: its weight as gamma, never a bias.
fn affine_of(weight: bool) -> Affine {
    if weight {
        Affine::Weight
    } else {
        Affine::None
    }
}

/// An [`RmsNormDesc`] that passed [`RmsNormDesc::check`]: the only input planning takes, so
/// that a call validates its description once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Problem {
    desc: RmsNormDesc,
    /// The LayerNorm problem whose tiers and planner RMSNorm shares (weight as gamma, no
    /// bias; planned with the RMSNorm kernels).
    ln: LayerNormProblem,
}

impl Problem {
    /// The checked description.
    pub fn desc(&self) -> &RmsNormDesc {
        &self.desc
    }

    /// rows * cols.
    pub fn elements(&self) -> u64 {
        self.ln.elements()
    }

    /// The equivalent LayerNorm problem that the shared planner takes.
    pub(crate) fn layer_norm(&self) -> &LayerNormProblem {
        &self.ln
    }
}
