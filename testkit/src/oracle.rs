//! Measuring results against the PyTorch fixtures' float64 oracle (see [`crate::fixtures`]),
//! shared by the fixture tests of LayerNorm and RMSNorm, plain and with the fused residual add:
//! the error measure ([`max_err`]), the size of one rounding ([`max_finite`]), and the slack for
//! gradients computed from statistics saved in f32 ([`stats_sensitivity`] with the exact
//! backwards [`layer_norm_backward_f64`] and [`rms_norm_backward_f64`]).

/// Largest |got - ref| over finite references; a NaN/Inf reference must be matched exactly
/// (NaN for NaN, the same infinity), else the error is infinite. Length mismatch: infinite.
pub fn max_err(got: &[f64], reference: &[f64]) -> f64 {
    if got.len() != reference.len() {
        return f64::INFINITY;
    }
    got.iter().zip(reference).fold(0.0f64, |m, (&g, &r)| {
        let e = if r.is_nan() {
            if g.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else if r.is_infinite() {
            if g == r {
                0.0
            } else {
                f64::INFINITY
            }
        } else if g.is_finite() {
            (g - r).abs()
        } else {
            f64::INFINITY
        };
        m.max(e)
    })
}

/// Largest finite |v| (0 when there is none).
pub fn max_finite(v: &[f64]) -> f64 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(0.0, |m, x| m.max(x.abs()))
}

/// One f32 ulp up or down from `v` (finite v; from 0 the smallest subnormal of that sign).
pub fn nudge_f32(v: f32, up: bool) -> f32 {
    if v == 0.0 {
        return if up {
            f32::from_bits(1)
        } else {
            -f32::from_bits(1)
        };
    }
    let b = v.to_bits();
    f32::from_bits(if (v > 0.0) == up { b + 1 } else { b - 1 })
}

/// Exact (f64, unrounded) LayerNorm backward of rows of `d` values from given statistics
/// (one mean and rstd per row): `[dx, dgamma, dbeta]` (without `g`, gamma is 1).
pub fn layer_norm_backward_f64(
    x: &[f64],
    dy: &[f64],
    g: Option<&[f64]>,
    mean: &[f64],
    rstd: &[f64],
    d: usize,
) -> [Vec<f64>; 3] {
    let m = mean.len();
    let (mut dx, mut dg, mut db) = (vec![0.0; m * d], vec![0.0; d], vec![0.0; d]);
    for r in 0..m {
        let xh = |c: usize| (x[r * d + c] - mean[r]) * rstd[r];
        let gm = |c: usize| g.map_or(1.0, |g| g[c]);
        let (mut sa, mut sb) = (0.0, 0.0);
        for c in 0..d {
            sa += dy[r * d + c] * gm(c);
            sb += dy[r * d + c] * gm(c) * xh(c);
        }
        for c in 0..d {
            let e = dy[r * d + c];
            dx[r * d + c] = (e * gm(c) - sa / d as f64 - xh(c) * sb / d as f64) * rstd[r];
            dg[c] += e * xh(c);
            db[c] += e;
        }
    }
    [dx, dg, db]
}

/// Exact (f64, unrounded) RMSNorm backward of rows of `d` values from a given rstd per row:
/// `[dx, dweight]` (without `w`, the weight is 1).
pub fn rms_norm_backward_f64(
    x: &[f64],
    dy: &[f64],
    w: Option<&[f64]>,
    rstd: &[f64],
    d: usize,
) -> [Vec<f64>; 2] {
    let m = rstd.len();
    let (mut dx, mut dw) = (vec![0.0; m * d], vec![0.0; d]);
    for r in 0..m {
        let xh = |c: usize| x[r * d + c] * rstd[r];
        let wm = |c: usize| w.map_or(1.0, |w| w[c]);
        let sb: f64 = (0..d).map(|c| dy[r * d + c] * wm(c) * xh(c)).sum();
        for c in 0..d {
            let e = dy[r * d + c];
            dx[r * d + c] = (e * wm(c) - xh(c) * sb / d as f64) * rstd[r];
            dw[c] += e * xh(c);
        }
    }
    [dx, dw]
}

/// How far gradients computed from statistics saved in f32 may move because of that storage:
/// the largest change of each output of `backward` (evaluated at `stats`, the float64
/// statistics, e.g. `[mean, rstd]`) when every value of one statistic moves by one f32 ulp
/// (all up, or all down), over every statistic and both directions. Non-finite statistics stay
/// as they are; only pairs of finite outputs count.
pub fn stats_sensitivity<const K: usize>(
    stats: &[&[f64]],
    backward: impl Fn(&[Vec<f64>]) -> [Vec<f64>; K],
) -> [f64; K] {
    let exact: Vec<Vec<f64>> = stats.iter().map(|s| s.to_vec()).collect();
    let base = backward(&exact);
    let mut out = [0.0f64; K];
    for which in 0..stats.len() {
        for up in [true, false] {
            let mut moved = exact.clone();
            for s in &mut moved[which] {
                if s.is_finite() {
                    *s = nudge_f32(*s as f32, up) as f64;
                }
            }
            let got = backward(&moved);
            for k in 0..K {
                let e = got[k]
                    .iter()
                    .zip(&base[k])
                    .filter(|(a, b)| a.is_finite() && b.is_finite())
                    .fold(0.0f64, |acc, (a, b)| acc.max((a - b).abs()));
                out[k] = out[k].max(e);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_and_nudges() {
        assert_eq!(max_err(&[1.0, 2.5], &[1.0, 2.0]), 0.5);
        assert_eq!(max_err(&[f64::NAN], &[f64::NAN]), 0.0);
        assert_eq!(max_err(&[1.0], &[f64::NAN]), f64::INFINITY);
        assert_eq!(max_err(&[f64::INFINITY], &[1.0]), f64::INFINITY);
        assert_eq!(max_err(&[1.0], &[1.0, 2.0]), f64::INFINITY);
        assert_eq!(max_finite(&[-3.0, f64::INFINITY, 2.0]), 3.0);
        assert_eq!(nudge_f32(1.0, true), 1.0 + f32::EPSILON);
        assert_eq!(nudge_f32(-1.0, true), -1.0 + f32::EPSILON / 2.0);
        assert_eq!(nudge_f32(0.0, false), -f32::from_bits(1));
    }

    #[test]
    fn sensitivity_of_a_linear_function() {
        // f(s) = 3 s: moving s = 1 by one f32 ulp up (2^-23) or down (2^-24) moves f by 3x that.
        let s = [1.0f64];
        let out = stats_sensitivity(&[&s], |v| [vec![3.0 * v[0][0]]]);
        assert_eq!(out, [3.0 * f32::EPSILON as f64]);
    }
}
