//! The fused residual add's rules, shared by the LayerNorm and RMSNorm references
//! ([`super::layer_norm::forward_residual`], [`super::rms_norm::forward_residual`] and their
//! backwards), exactly as the kernels apply them:
//!
//! - h = (x + residual) + bias, evaluated in f32 arithmetic (x, residual and bias widen to
//!   f32 exactly; two f32 additions, left to right, the second only with a bias) and rounded
//!   **once** to the activation dtype. For 16-bit activations without a bias this is
//!   PyTorch's `x + residual` (which adds in f32 and rounds once) bit for bit; with a bias
//!   PyTorch's unfused `x + residual + bias` rounds twice, this once. For f32 activations it
//!   is PyTorch's f32 add.
//! - y and the saved statistics normalize the **stored (rounded) h**: the fused op equals the
//!   unfused `h = x + residual; y = norm(h)` whenever the add is exact.
//! - Backward re-reads h: dx = norm's dx (before its rounding) + dh, in f64, rounded once to
//!   the activation dtype. dx is the gradient of h, of x and of the residual alike; dbias
//!   (with a bias) is the column sum over rows of that unrounded dx, rounded once.
//!
//! ```
//! use warpnorm::cpu::residual::residual_add;
//! use half::f16;
//! // 2048 + 1 is not an f16 (spacing 2 there): one rounding to even gives 2048.
//! let x = [f16::from_f32(2048.0), f16::from_f32(1.0)];
//! let r = [f16::from_f32(1.0), f16::from_f32(0.5)];
//! let h = residual_add::<f16, f32>(1, 2, &x, &r, Some(&[0.0f32, 0.25])).unwrap();
//! assert_eq!(h, [f16::from_f32(2048.0), f16::from_f32(1.75)]);
//! ```

use crate::{Element, Error, Result};

/// Backward results of the fused residual add.
#[derive(Clone, Debug, PartialEq)]
pub struct Residual<T, P> {
    /// Gradient of h (and of x and the residual), rows * cols.
    pub dx: Vec<T>,
    /// Gradient of gamma / RMSNorm's weight (when there is one).
    pub dgamma: Option<Vec<P>>,
    /// Gradient of LayerNorm's beta (when it has one; always `None` for RMSNorm).
    pub dbeta: Option<Vec<P>>,
    /// Gradient of the residual add's bias (when it has one).
    pub dbias: Option<Vec<P>>,
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

/// h = (x + residual) + bias in f32 arithmetic, rounded once to T (see the module's rules);
/// lengths checked (x and residual rows * cols, bias cols).
pub fn residual_add<T: Element, P: Element>(
    rows: usize,
    cols: usize,
    x: &[T],
    residual: &[T],
    bias: Option<&[P]>,
) -> Result<Vec<T>> {
    let n = rows * cols;
    check_len("x", x.len(), n)?;
    check_len("residual", residual.len(), n)?;
    if let Some(b) = bias {
        check_len("bias", b.len(), cols)?;
    }
    // Every element type widens to f32 exactly; f32 + f32 is one IEEE rounding, as on the GPU.
    let f = |v: f64| v as f32;
    Ok(x.iter()
        .zip(residual)
        .enumerate()
        .map(|(i, (a, r))| {
            let mut h = f(a.to_f64()) + f(r.to_f64());
            if let Some(b) = bias {
                h += f(b[i % cols].to_f64());
            }
            T::from_f64(h as f64)
        })
        .collect())
}

/// Adds dh to the unrounded dx, rounds it once, and sums dbias; the parameter gradients
/// are passed through.
pub(super) fn add_dh<T: Element, P: Element>(
    rows: usize,
    cols: usize,
    mut dx: Vec<f64>,
    dh: Option<&[T]>,
    has_bias: bool,
    dgamma: Option<Vec<P>>,
    dbeta: Option<Vec<P>>,
) -> Result<Residual<T, P>> {
    if let Some(dh) = dh {
        check_len("dh", dh.len(), rows * cols)?;
        for (d, e) in dx.iter_mut().zip(dh) {
            *d += e.to_f64();
        }
    }
    let dbias = has_bias.then(|| {
        let mut s = vec![0.0f64; cols];
        for (i, d) in dx.iter().enumerate() {
            s[i % cols] += d;
        }
        s.into_iter().map(P::from_f64).collect()
    });
    Ok(Residual {
        dx: dx.into_iter().map(T::from_f64).collect(),
        dgamma,
        dbeta,
        dbias,
    })
}
