//! BatchNorm reference (f64 accumulation): the semantics of [`crate::batch_norm`] on the host.
//!
//! Inputs and outputs are in the activation type `T` and the parameter type `P`; every value is
//! widened to f64, computed in f64 and rounded once at the end (saved statistics to f32).
//! Batch statistics are two-pass (mean, then the mean of squared deviations), so they are
//! accurate for any offset. Running statistics follow PyTorch: unbiased variance, momentum or
//! the cumulative average with the counter incremented before use, counter also incremented
//! for an empty batch and never in eval.
//!
//! ```
//! use warpnorm::batch_norm::{BatchNormDesc, Layout, Mode};
//! use warpnorm::cpu::batch_norm::{forward, Running};
//! use warpnorm::DType;
//!
//! // x = [1, 2, 4] with one channel, momentum 0.1 (PyTorch gives the same numbers).
//! let desc = BatchNormDesc::new(&[3, 1], Layout::Contiguous, DType::F32, DType::F32)
//!     .with_mode(Mode::train(0.1));
//! let (mut rm, mut rv, mut nbt) = (vec![0.0f32], vec![1.0f32], 0i64);
//! let out = forward::<f32, f32>(&desc, &[1.0, 2.0, 4.0], None,
//!     Some(Running { mean: &mut rm, var: &mut rv, num_batches_tracked: Some(&mut nbt) })).unwrap();
//! assert!((out.y[0] + 1.0690415).abs() < 1e-6);
//! assert!((rm[0] - 0.233333).abs() < 1e-6 && (rv[0] - 1.133333).abs() < 1e-6 && nbt == 1);
//! ```

use crate::batch_norm::{BatchNormDesc, Layout, Momentum, Ncs};
use crate::check::check_element_types;
use crate::{Element, Error, Result};

/// Running statistics to use (eval) or update (training).
pub struct Running<'a, P> {
    /// Running mean, C.
    pub mean: &'a mut [P],
    /// Running variance, C.
    pub var: &'a mut [P],
    /// Batch counter (incremented in training; required for [`Momentum::Cumulative`]).
    pub num_batches_tracked: Option<&'a mut i64>,
}

/// Results of [`forward`].
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardOut<T> {
    /// Output, in the input's layout.
    pub y: Vec<T>,
    /// Mean used per channel, rounded to f32 (empty for an empty batch).
    pub save_mean: Vec<f32>,
    /// The rounding error of `save_mean` (mean - save_mean, rounded to f32; 0 in eval and for
    /// a non-finite mean).
    pub save_mean_lo: Vec<f32>,
    /// 1 / sqrt(var + eps) used per channel (empty for an empty batch).
    pub save_invstd: Vec<f32>,
}

/// Results of [`backward`].
#[derive(Clone, Debug, PartialEq)]
pub struct BackwardOut<T, P> {
    /// Gradient of the input.
    pub dx: Vec<T>,
    /// Gradient of gamma.
    pub dgamma: Vec<P>,
    /// Gradient of beta.
    pub dbeta: Vec<P>,
}

/// Memory index of logical element (n, c, s).
pub fn index(g: &Ncs, layout: Layout, n: u64, c: u64, s: u64) -> usize {
    (match layout {
        Layout::Contiguous => (n * g.c + c) * g.s + s,
        Layout::ChannelsLast => (n * g.s + s) * g.c + c,
    }) as usize
}

fn check_types<T: Element, P: Element>(desc: &BatchNormDesc) -> Result<Ncs> {
    let problem = desc.check()?;
    check_element_types(desc.dtype, desc.param_dtype, T::DTYPE, P::DTYPE)?;
    Ok(*problem.ncs())
}

fn len(what: &str, got: usize, expected: u64) -> Result<()> {
    if got as u64 != expected {
        return Err(Error::Length {
            what: what.into(),
            expected: expected as usize,
            given: got,
        });
    }
    Ok(())
}

/// Per-channel values of x (as f64), in (n, s) order.
fn channel<'a, T: Element>(
    g: &Ncs,
    layout: Layout,
    v: &'a [T],
    c: u64,
) -> impl Iterator<Item = f64> + 'a {
    let g = *g;
    (0..g.n).flat_map(move |n| (0..g.s).map(move |s| v[index(&g, layout, n, c, s)].to_f64()))
}

/// BatchNorm forward. In training (`desc.mode.batch_stats`) the batch statistics are used and
/// `running` (if given) is updated; in eval `running` is required and used.
pub fn forward<T: Element, P: Element>(
    desc: &BatchNormDesc,
    x: &[T],
    affine: Option<(&[P], &[P])>,
    running: Option<Running<'_, P>>,
) -> Result<ForwardOut<T>> {
    let g = check_types::<T, P>(desc)?;
    let mode = &desc.mode;
    len("x", x.len(), g.numel)?;
    if let Some((w, b)) = affine {
        len("gamma", w.len(), g.c)?;
        len("beta", b.len(), g.c)?;
    }
    let mut running = running;
    if let Some(r) = running.as_ref() {
        len("running_mean", r.mean.len(), g.c)?;
        len("running_var", r.var.len(), g.c)?;
        if mode.batch_stats
            && mode.momentum == Momentum::Cumulative
            && r.num_batches_tracked.is_none()
        {
            return Err(Error::invalid(
                "momentum",
                "the cumulative average (momentum None) needs num_batches_tracked",
            ));
        }
    } else if !mode.batch_stats {
        return Err(Error::invalid(
            "BatchNorm eval",
            "eval needs the running statistics",
        ));
    }
    let mut factor = 0.0f64;
    if mode.batch_stats {
        if let Some(n) = running
            .as_mut()
            .and_then(|r| r.num_batches_tracked.as_deref_mut())
        {
            *n += 1;
            factor = match mode.momentum {
                Momentum::Factor(m) => m as f64,
                Momentum::Cumulative => 1.0 / *n as f64,
            };
        } else if let Momentum::Factor(m) = mode.momentum {
            factor = m as f64;
        }
    }
    let mut out = ForwardOut {
        y: vec![T::from_f64(0.0); g.numel as usize],
        save_mean: Vec::new(),
        save_mean_lo: Vec::new(),
        save_invstd: Vec::new(),
    };
    if g.numel == 0 {
        return Ok(out);
    }
    let cnt = g.count() as f64;
    let eps = desc.eps as f64;
    for c in 0..g.c {
        let ci = c as usize;
        let (mean, invstd) = if mode.batch_stats {
            let mean = channel(&g, desc.layout, x, c).sum::<f64>() / cnt;
            let m2: f64 = channel(&g, desc.layout, x, c)
                .map(|v| (v - mean) * (v - mean))
                .sum();
            if let Some(r) = running.as_mut() {
                let rm = r.mean[ci].to_f64();
                let rv = r.var[ci].to_f64();
                r.mean[ci] = P::from_f64((1.0 - factor) * rm + factor * mean);
                r.var[ci] = P::from_f64((1.0 - factor) * rv + factor * m2 / (cnt - 1.0));
            }
            (mean, 1.0 / (m2 / cnt + eps).sqrt())
        } else {
            let r = running
                .as_ref()
                .ok_or_else(|| Error::invalid("BatchNorm eval", "no running statistics"))?;
            (r.mean[ci].to_f64(), 1.0 / (r.var[ci].to_f64() + eps).sqrt())
        };
        let hi = mean as f32;
        out.save_mean.push(hi);
        out.save_mean_lo.push(if hi.is_finite() {
            (mean - hi as f64) as f32
        } else {
            0.0
        });
        out.save_invstd.push(invstd as f32);
        let (w, b) = affine.map_or((1.0, 0.0), |(w, b)| (w[ci].to_f64(), b[ci].to_f64()));
        for n in 0..g.n {
            for s in 0..g.s {
                let i = index(&g, desc.layout, n, c, s);
                out.y[i] = T::from_f64((x[i].to_f64() - mean) * invstd * w + b);
            }
        }
    }
    Ok(out)
}

/// BatchNorm backward from the forward's saved statistics, with the mean
/// `save_mean + save_mean_lo` (`None`: zeros). Of an eval-mode forward (`desc.mode`):
/// dx = dy * gamma * invstd; otherwise the training backward. dgamma = sum(dy * (x - mean))
/// * invstd, dbeta = sum(dy) (zero for an empty batch).
pub fn backward<T: Element, P: Element>(
    desc: &BatchNormDesc,
    x: &[T],
    dy: &[T],
    gamma: Option<&[P]>,
    save_mean: &[f32],
    save_mean_lo: Option<&[f32]>,
    save_invstd: &[f32],
) -> Result<BackwardOut<T, P>> {
    let g = check_types::<T, P>(desc)?;
    let frozen = !desc.mode.batch_stats;
    len("x", x.len(), g.numel)?;
    len("dy", dy.len(), g.numel)?;
    if let Some(w) = gamma {
        len("gamma", w.len(), g.c)?;
    }
    let mut out = BackwardOut {
        dx: vec![T::from_f64(0.0); g.numel as usize],
        dgamma: vec![P::from_f64(0.0); g.c as usize],
        dbeta: vec![P::from_f64(0.0); g.c as usize],
    };
    if g.numel == 0 {
        return Ok(out);
    }
    len("save_mean", save_mean.len(), g.c)?;
    if let Some(lo) = save_mean_lo {
        len("save_mean_lo", lo.len(), g.c)?;
    }
    len("save_invstd", save_invstd.len(), g.c)?;
    let cnt = g.count() as f64;
    for c in 0..g.c {
        let ci = c as usize;
        let mean = save_mean[ci] as f64 + save_mean_lo.map_or(0.0, |lo| lo[ci] as f64);
        let invstd = save_invstd[ci] as f64;
        let w = gamma.map_or(1.0, |w| w[ci].to_f64());
        let (mut sdy, mut sdx) = (0.0f64, 0.0f64);
        for n in 0..g.n {
            for s in 0..g.s {
                let i = index(&g, desc.layout, n, c, s);
                let d = dy[i].to_f64();
                sdy += d;
                sdx += d * (x[i].to_f64() - mean);
            }
        }
        out.dgamma[ci] = P::from_f64(sdx * invstd);
        out.dbeta[ci] = P::from_f64(sdy);
        for n in 0..g.n {
            for s in 0..g.s {
                let i = index(&g, desc.layout, n, c, s);
                let d = dy[i].to_f64();
                let v = if frozen {
                    d * w * invstd
                } else {
                    let xm = x[i].to_f64() - mean;
                    w * invstd * (d - sdy / cnt - xm * invstd * invstd * sdx / cnt)
                };
                out.dx[i] = T::from_f64(v);
            }
        }
    }
    Ok(out)
}
