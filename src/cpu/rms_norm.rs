//! RMSNorm reference (f64 accumulation), with the GPU ops' semantics (PyTorch's
//! `F.rms_norm`).
//!
//! - ms = sum(x^2) / D in f64; D == 0 gives rstd NaN (the mean of nothing), as PyTorch.
//! - rstd is saved in f32: a mean square beyond f32's range gives rstd 0 (PyTorch's f32
//!   arithmetic: x^2 overflows, rsqrt(Inf) = 0), so y = 0 for such finite rows and NaN for an
//!   Inf element; otherwise rstd = 1 / sqrt(ms + eps). A NaN in a row gives a NaN row.
//! - y = x * rstd * weight in f64, rounded once to the activation dtype.
//! - Backward uses the saved (f32) rstd, like the kernels and PyTorch: with g = dy * weight
//!   and xhat = x * rstd, dx = rstd * (g - xhat * mean(g * xhat)) and
//!   dweight = sum over rows of dy * xhat, each rounded once.
//! - Fused residual add ([`forward_residual`], [`backward_residual`]; the rules are
//!   [`super::residual`]'s): h = (x + residual) + bias in f32 arithmetic, rounded once to the
//!   activation dtype, and y = RMSNorm(stored h); backward from h and the saved rstd,
//!   dx = RMSNorm's dx + dh in f64, rounded once (also the residual's gradient), and
//!   dbias = sum over rows of that unrounded dx.
//!
//! ```
//! use warpnorm::cpu::rms_norm::{backward, forward};
//! use warpnorm::rms_norm::RmsNormDesc;
//! use warpnorm::DType;
//! let desc = RmsNormDesc::from_rows(1, 4, DType::F32, DType::F32, false, Some(0.0)).unwrap();
//! let fwd = forward::<f32, f32>(&desc, &[3.0, 4.0, 0.0, 0.0], None).unwrap();
//! assert!((fwd.rstd[0] - 0.4).abs() < 1e-7);
//! assert_eq!(fwd.y, [1.2f32, 1.6, 0.0, 0.0]);
//! let bwd = backward::<f32, f32>(&desc, &[3.0, 4.0, 0.0, 0.0], &[0.0, 0.0, 1.0, 0.0],
//!                                &fwd.rstd, None).unwrap();
//! assert!((bwd.dx[2] - 0.4).abs() < 1e-7);
//! ```

use super::residual::{add_dh, residual_add, Residual};
use crate::check::check_element_types;
use crate::rms_norm::RmsNormDesc;
use crate::{Element, Error, Result};

/// Forward results: y (activation dtype) and the saved rstd (f32, one per row).
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardOut<T> {
    /// Normalized output, rows * cols.
    pub y: Vec<T>,
    /// Row 1 / sqrt(mean(x^2) + eps).
    pub rstd: Vec<f32>,
}

/// Backward results.
#[derive(Clone, Debug, PartialEq)]
pub struct BackwardOut<T, P> {
    /// Gradient of x, rows * cols.
    pub dx: Vec<T>,
    /// Gradient of the weight (when there is one).
    pub dweight: Option<Vec<P>>,
}

fn check_len(what: &str, got: usize, expected: usize) -> Result<()> {
    if got != expected {
        return Err(Error::Length {
            what: what.into(),
            expected,
            given: got,
        });
    }
    Ok(())
}

/// The description's checks, the element types and the weight's presence and length;
/// returns (rows, cols).
fn check<T: Element, P: Element>(
    desc: &RmsNormDesc,
    weight: Option<&[P]>,
) -> Result<(usize, usize)> {
    desc.check()?;
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    if weight.is_some() != desc.weight {
        return Err(Error::invalid(
            "weight",
            if desc.weight {
                "the RMSNorm has a weight but none was given"
            } else {
                "the RMSNorm has no weight (RmsNormDesc::weight is false) but one was given"
            },
        ));
    }
    if let Some(w) = weight {
        check_len("weight", w.len(), desc.cols)?;
    }
    Ok((desc.rows, desc.cols))
}

/// rstd of one row, in f64, with the f32-saved-statistic semantics above.
pub fn row_rstd(row: &[f64], eps: f32) -> f64 {
    let n = row.len();
    if n == 0 {
        return f64::NAN;
    }
    let ms = row.iter().map(|v| v * v).sum::<f64>() / n as f64;
    if ms > f32::MAX as f64 {
        0.0
    } else {
        1.0 / (ms + eps as f64).sqrt()
    }
}

/// RMSNorm forward of `desc` (`weight` given exactly when `desc.weight`; lengths checked).
pub fn forward<T: Element, P: Element>(
    desc: &RmsNormDesc,
    x: &[T],
    weight: Option<&[P]>,
) -> Result<ForwardOut<T>> {
    let (rows, cols) = check::<T, P>(desc, weight)?;
    check_len("x", x.len(), rows * cols)?;
    let mut out = ForwardOut {
        y: Vec::with_capacity(x.len()),
        rstd: Vec::with_capacity(rows),
    };
    let mut row = vec![0.0f64; cols];
    for r in 0..rows {
        for (v, e) in row.iter_mut().zip(&x[r * cols..(r + 1) * cols]) {
            *v = e.to_f64();
        }
        let rstd = row_rstd(&row, desc.eps);
        out.rstd.push(rstd as f32);
        for (c, v) in row.iter().enumerate() {
            let w = weight.map_or(1.0, |w| w[c].to_f64());
            out.y.push(T::from_f64(v * rstd * w));
        }
    }
    Ok(out)
}

/// Forward of the fused residual add: h = (x + residual) + bias (f32 arithmetic, one rounding
/// to T; `bias` in the parameter dtype, cols elements, optional) and the RMSNorm forward of
/// the stored h. Returns h and the forward's results.
pub fn forward_residual<T: Element, P: Element>(
    desc: &RmsNormDesc,
    x: &[T],
    residual: &[T],
    bias: Option<&[P]>,
    weight: Option<&[P]>,
) -> Result<(Vec<T>, ForwardOut<T>)> {
    let (rows, cols) = check::<T, P>(desc, weight)?;
    let h = residual_add(rows, cols, x, residual, bias)?;
    let out = forward(desc, &h, weight)?;
    Ok((h, out))
}

/// Backward of the fused residual add from h (as [`forward_residual`] returned it) and the
/// saved rstd: dx = RMSNorm's dx (before rounding) + dh, rounded once (the gradient of h, x
/// and the residual alike); dweight as [`backward`] (in `dgamma`); `dbias` (when `has_bias`)
/// the column sums of that dx in f64, rounded once to P.
pub fn backward_residual<T: Element, P: Element>(
    desc: &RmsNormDesc,
    h: &[T],
    dy: &[T],
    dh: Option<&[T]>,
    rstd: &[f32],
    weight: Option<&[P]>,
    has_bias: bool,
) -> Result<Residual<T, P>> {
    let (rows, cols) = check::<T, P>(desc, weight)?;
    let (dx, dweight) = backward_f64(desc, h, dy, rstd, weight)?;
    add_dh(rows, cols, dx, dh, has_bias, dweight, None)
}

/// RMSNorm backward of `desc` from the saved rstd. Returns dx, and dweight when `desc.weight`
/// (`weight` given exactly then).
pub fn backward<T: Element, P: Element>(
    desc: &RmsNormDesc,
    x: &[T],
    dy: &[T],
    rstd: &[f32],
    weight: Option<&[P]>,
) -> Result<BackwardOut<T, P>> {
    let (dx, dweight) = backward_f64(desc, x, dy, rstd, weight)?;
    Ok(BackwardOut {
        dx: dx.into_iter().map(T::from_f64).collect(),
        dweight,
    })
}

/// dx of [`backward`] before its rounding, and the rounded dweight.
type BackwardF64<P> = (Vec<f64>, Option<Vec<P>>);

fn backward_f64<T: Element, P: Element>(
    desc: &RmsNormDesc,
    x: &[T],
    dy: &[T],
    rstd: &[f32],
    weight: Option<&[P]>,
) -> Result<BackwardF64<P>> {
    let (rows, cols) = check::<T, P>(desc, weight)?;
    let n = rows * cols;
    check_len("x", x.len(), n)?;
    check_len("dy", dy.len(), n)?;
    check_len("rstd", rstd.len(), rows)?;
    let mut dx = Vec::with_capacity(n);
    let mut dw = vec![0.0f64; cols];
    let w = |c: usize| weight.map_or(1.0, |w| w[c].to_f64());
    for r in 0..rows {
        let xs = &x[r * cols..(r + 1) * cols];
        let dys = &dy[r * cols..(r + 1) * cols];
        let rs = rstd[r] as f64;
        let xhat = |c: usize| xs[c].to_f64() * rs;
        let sb: f64 = dys
            .iter()
            .enumerate()
            .map(|(c, d)| d.to_f64() * w(c) * xhat(c))
            .sum();
        let c2 = sb / cols as f64;
        for (c, d) in dys.iter().enumerate() {
            let d = d.to_f64();
            let xh = xhat(c);
            dx.push((d * w(c) - xh * c2) * rs);
            dw[c] += d * xh;
        }
    }
    Ok((
        dx,
        weight.map(|_| dw.iter().map(|v| P::from_f64(*v)).collect()),
    ))
}
