//! LayerNorm reference (f64 accumulation), with the GPU ops' semantics.
//!
//! - mean = sum(x) / D and var = sum((x - mean)^2) / D (biased, two passes, with the
//!   corrected two-pass residual) in f64; D == 0 gives mean 0 and rstd NaN, and a row with
//!   an Inf gives a NaN mean, as PyTorch.
//! - The statistics are saved in f32: a variance beyond f32's range becomes Inf, so rstd is 0
//!   (PyTorch's f32 behaviour for rows such as [1e30, -1e30, 0, 0]); otherwise
//!   rstd = 1 / sqrt(var + eps).
//! - y = (x - mean) * rstd * gamma + beta in f64, rounded once to the activation dtype.
//! - The saved mean is the f64 mean rounded to f32 (PyTorch's), and `mean_lo` its rounding
//!   error (rounded to f32): the mean is `mean + mean_lo` to about 2^-48 of |mean|.
//! - Backward uses the saved (f32) mean, mean_lo and rstd, like the kernels:
//!   xhat = ((x - mean) - mean_lo) * rstd (mean_lo `None`: zeros, PyTorch's backward),
//!   dx = rstd * (g*dy - mean(g*dy) - xhat * mean(g*dy*xhat)), dgamma = sum dy * xhat,
//!   dbeta = sum dy, each rounded once.
//! - Fused residual add ([`forward_residual`], [`backward_residual`]; the rules are
//!   [`super::residual`]'s): h = (x + residual) + bias in f32 arithmetic, rounded once to the
//!   activation dtype, and y = LayerNorm(stored h); backward from h and the saved statistics,
//!   dx = LayerNorm's dx + dh in f64, rounded once (it is also the residual's gradient), and
//!   dbias = sum over rows of that unrounded dx.
//!
//! ```
//! use warpnorm::cpu::layer_norm::{backward, forward};
//! use warpnorm::layer_norm::{Affine, LayerNormDesc};
//! use warpnorm::DType;
//! let desc = LayerNormDesc::from_rows(1, 4, DType::F32, DType::F32, Affine::None, 1e-5).unwrap();
//! let x = [1.0f32, 2.0, 4.0, 7.0];
//! let fwd = forward::<f32, f32>(&desc, &x, None, None).unwrap();
//! assert!((fwd.mean[0] - 3.5).abs() < 1e-6);
//! let dy = [1.0f32, 0.0, 0.0, 0.0];
//! let saved = (&fwd.mean[..], &fwd.rstd[..], Some(&fwd.mean_lo[..]));
//! let bwd = backward::<f32, f32>(&desc, &x, &dy, saved, None).unwrap();
//! assert!((bwd.dx.iter().map(|v| *v as f64).sum::<f64>()).abs() < 1e-6);
//! ```

use super::residual::{add_dh, residual_add, Residual};
use crate::check::check_element_types;
use crate::layer_norm::LayerNormDesc;
use crate::{Element, Error, Result};

/// Forward results: y (activation dtype) and the saved statistics (f32, one per row).
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardOut<T> {
    /// Normalized output, rows * cols.
    pub y: Vec<T>,
    /// Row means.
    pub mean: Vec<f32>,
    /// Row 1 / sqrt(var + eps).
    pub rstd: Vec<f32>,
    /// Row mean minus `mean` (the saved mean's rounding error), rounded to f32.
    pub mean_lo: Vec<f32>,
}

/// The forward's saved statistics as the backward takes them: mean, rstd and (optionally)
/// mean_lo, one f32 per row each. `None` for mean_lo takes it as zeros.
pub type Saved<'a> = (&'a [f32], &'a [f32], Option<&'a [f32]>);

/// Backward results.
#[derive(Clone, Debug, PartialEq)]
pub struct BackwardOut<T, P> {
    /// Gradient of x, rows * cols.
    pub dx: Vec<T>,
    /// Gradient of gamma (when gamma was given).
    pub dgamma: Option<Vec<P>>,
    /// Gradient of beta (when the LayerNorm has a bias).
    pub dbeta: Option<Vec<P>>,
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

/// The description's checks and the element types; returns (rows, cols).
fn check<T: Element, P: Element>(desc: &LayerNormDesc) -> Result<(usize, usize)> {
    desc.check()?;
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    Ok((desc.rows, desc.cols))
}

/// Parameters must be given exactly when `desc.affine` has them.
fn check_presence(what: &str, given: bool, expected: bool) -> Result<()> {
    if given != expected {
        return Err(Error::invalid(
            what,
            if expected {
                "the LayerNorm has this parameter but none was given"
            } else {
                "the LayerNorm has no such parameter (see LayerNormDesc::affine) but one was given"
            },
        ));
    }
    Ok(())
}

/// Mean and rstd of one row, in f64, with the f32-saved-statistics semantics above.
pub fn row_stats(row: &[f64], eps: f32) -> (f64, f64) {
    let n = row.len();
    if n == 0 {
        return (0.0, f64::NAN);
    }
    // Corrected two-pass, as the kernels: the correction is ~0 for finite rows and makes
    // the mean NaN for rows with an Inf (Inf - Inf), as PyTorch.
    let mean0 = row.iter().sum::<f64>() / n as f64;
    let sd = row.iter().map(|v| v - mean0).sum::<f64>();
    let q = row.iter().map(|v| (v - mean0) * (v - mean0)).sum::<f64>();
    let mean = mean0 + sd / n as f64;
    let m2 = q - sd * sd / n as f64;
    // Clamp rounding below zero; a NaN stays NaN (f64::max would drop it).
    let var = if m2 < 0.0 { 0.0 } else { m2 } / n as f64;
    let rstd = if var > f32::MAX as f64 {
        0.0
    } else {
        1.0 / (var + eps as f64).sqrt()
    };
    (mean, rstd)
}

/// LayerNorm forward of `desc` (gamma and beta given exactly when `desc.affine` has them;
/// lengths checked).
pub fn forward<T: Element, P: Element>(
    desc: &LayerNormDesc,
    x: &[T],
    gamma: Option<&[P]>,
    beta: Option<&[P]>,
) -> Result<ForwardOut<T>> {
    let (rows, cols) = check::<T, P>(desc)?;
    let eps = desc.eps;
    check_len("x", x.len(), rows * cols)?;
    check_presence("gamma", gamma.is_some(), desc.affine.has_weight())?;
    check_presence("beta", beta.is_some(), desc.affine.has_bias())?;
    if let Some(g) = gamma {
        check_len("gamma", g.len(), cols)?;
    }
    if let Some(b) = beta {
        check_len("beta", b.len(), cols)?;
    }
    let mut out = ForwardOut {
        y: Vec::with_capacity(x.len()),
        mean: Vec::with_capacity(rows),
        rstd: Vec::with_capacity(rows),
        mean_lo: Vec::with_capacity(rows),
    };
    let mut row = vec![0.0f64; cols];
    for r in 0..rows {
        for (v, e) in row.iter_mut().zip(&x[r * cols..(r + 1) * cols]) {
            *v = e.to_f64();
        }
        let (mean, rstd) = row_stats(&row, eps);
        out.mean.push(mean as f32);
        out.rstd.push(rstd as f32);
        out.mean_lo.push((mean - f64::from(mean as f32)) as f32);
        for (c, v) in row.iter().enumerate() {
            let mut y = (v - mean) * rstd;
            if let Some(g) = gamma {
                y *= g[c].to_f64();
            }
            if let Some(b) = beta {
                y += b[c].to_f64();
            }
            out.y.push(T::from_f64(y));
        }
    }
    Ok(out)
}

/// Forward of the fused residual add: h = (x + residual) + bias (f32 arithmetic, one rounding
/// to T; `bias` in the parameter dtype, cols elements, optional) and the LayerNorm forward of
/// the stored h. Returns h and the forward's results.
pub fn forward_residual<T: Element, P: Element>(
    desc: &LayerNormDesc,
    x: &[T],
    residual: &[T],
    bias: Option<&[P]>,
    gamma: Option<&[P]>,
    beta: Option<&[P]>,
) -> Result<(Vec<T>, ForwardOut<T>)> {
    let (rows, cols) = check::<T, P>(desc)?;
    let h = residual_add(rows, cols, x, residual, bias)?;
    let out = forward(desc, &h, gamma, beta)?;
    Ok((h, out))
}

/// Backward of the fused residual add from h (as [`forward_residual`] returned it) and the
/// saved statistics: dx = LayerNorm's dx (before rounding) + dh, rounded once (the gradient
/// of h, x and the residual alike); dgamma / dbeta as [`backward`]; `dbias` (when
/// `has_bias`) the column sums of that dx in f64, rounded once to P.
#[allow(clippy::too_many_arguments)]
pub fn backward_residual<T: Element, P: Element>(
    desc: &LayerNormDesc,
    h: &[T],
    dy: &[T],
    dh: Option<&[T]>,
    saved: Saved<'_>,
    gamma: Option<&[P]>,
    has_bias: bool,
) -> Result<Residual<T, P>> {
    let (rows, cols) = check::<T, P>(desc)?;
    let (dx, dgamma, dbeta) = backward_f64(desc, h, dy, saved, gamma)?;
    add_dh(rows, cols, dx, dh, has_bias, dgamma, dbeta)
}

/// LayerNorm backward of `desc` from the saved statistics. Returns dx, and dgamma / dbeta
/// when `desc.affine` has them (`gamma` given exactly when it has a weight).
pub fn backward<T: Element, P: Element>(
    desc: &LayerNormDesc,
    x: &[T],
    dy: &[T],
    saved: Saved<'_>,
    gamma: Option<&[P]>,
) -> Result<BackwardOut<T, P>> {
    let (dx, dgamma, dbeta) = backward_f64(desc, x, dy, saved, gamma)?;
    Ok(BackwardOut {
        dx: dx.into_iter().map(T::from_f64).collect(),
        dgamma,
        dbeta,
    })
}

/// dx of [`backward`] before its rounding, and the rounded dgamma / dbeta.
type BackwardF64<P> = (Vec<f64>, Option<Vec<P>>, Option<Vec<P>>);

fn backward_f64<T: Element, P: Element>(
    desc: &LayerNormDesc,
    x: &[T],
    dy: &[T],
    (mean, rstd, mean_lo): Saved<'_>,
    gamma: Option<&[P]>,
) -> Result<BackwardF64<P>> {
    let (rows, cols) = check::<T, P>(desc)?;
    let has_bias = desc.affine.has_bias();
    check_presence("gamma", gamma.is_some(), desc.affine.has_weight())?;
    let n = rows * cols;
    check_len("x", x.len(), n)?;
    check_len("dy", dy.len(), n)?;
    check_len("mean", mean.len(), rows)?;
    check_len("rstd", rstd.len(), rows)?;
    if let Some(lo) = mean_lo {
        check_len("mean_lo", lo.len(), rows)?;
    }
    if let Some(g) = gamma {
        check_len("gamma", g.len(), cols)?;
    }
    let mut dx = Vec::with_capacity(n);
    let mut dg = vec![0.0f64; cols];
    let mut db = vec![0.0f64; cols];
    let g = |c: usize| gamma.map_or(1.0, |g| g[c].to_f64());
    for r in 0..rows {
        let xs = &x[r * cols..(r + 1) * cols];
        let dys = &dy[r * cols..(r + 1) * cols];
        let (m, rs) = (mean[r] as f64, rstd[r] as f64);
        let lo = mean_lo.map_or(0.0, |l| f64::from(l[r]));
        let xhat = |c: usize| ((xs[c].to_f64() - m) - lo) * rs;
        let (mut sa, mut sb) = (0.0f64, 0.0f64);
        for (c, d) in dys.iter().enumerate() {
            let gdy = d.to_f64() * g(c);
            sa += gdy;
            sb += gdy * xhat(c);
        }
        let (c1, c2) = (sa / cols as f64, sb / cols as f64);
        for (c, d) in dys.iter().enumerate() {
            let d = d.to_f64();
            let xh = xhat(c);
            dx.push((d * g(c) - c1 - xh * c2) * rs);
            dg[c] += d * xh;
            db[c] += d;
        }
    }
    Ok((
        dx,
        gamma.map(|_| dg.iter().map(|v| P::from_f64(*v)).collect()),
        has_bias.then(|| db.iter().map(|v| P::from_f64(*v)).collect()),
    ))
}
