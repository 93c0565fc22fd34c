//! `.f32` / `.f64` arithmetic in every rounding mode, and the sign / class / clamp helpers
//! (`min`, `max`, `testp`, `copysign`, `.sat`, `.ftz`).

use super::convert::{canon_f32, canon_f64, is_nan32, is_nan64};
use super::round::{pow2, round_from_f64, tail_of, two_sum_err, zero_sum_is_negative, F32};
use super::{Rnd, TestClass, CANONICAL_NAN_F32, CANONICAL_NAN_F64};
use rustc_apfloat::ieee::Double;
use rustc_apfloat::{Float, Round};
use std::cmp::Ordering;

fn nan32() -> f32 {
    f32::from_bits(CANONICAL_NAN_F32)
}

fn nan64() -> f64 {
    f64::from_bits(CANONICAL_NAN_F64)
}

/// Rounds `s + (exact residual of sign tail)` to `f32`.
fn to_f32(s: f64, tail: Ordering, r: Rnd) -> f32 {
    f32::from_bits(round_from_f64(s, tail, r, F32) as u32)
}

fn signed_zero32(neg: bool) -> f32 {
    if neg {
        -0.0
    } else {
        0.0
    }
}

/// `add{.rnd}.f32`: correctly rounded `a + b`.
pub fn add_f32(a: f32, b: f32, r: Rnd) -> f32 {
    if r == Rnd::Rn || !a.is_finite() || !b.is_finite() {
        // Infinite and NaN results are exact; only the NaN bits need fixing.
        return canon_f32(a + b);
    }
    let (x, y) = (f64::from(a), f64::from(b));
    let s = x + y; // |a|, |b| < 2^128: no overflow in f64
    let err = two_sum_err(x, y, s);
    if s == 0.0 {
        return signed_zero32(zero_sum_is_negative(x, y, r));
    }
    to_f32(s, tail_of(s, err), r)
}

/// `sub{.rnd}.f32`: correctly rounded `a - b`.
pub fn sub_f32(a: f32, b: f32, r: Rnd) -> f32 {
    add_f32(a, -b, r)
}

/// `mul{.rnd}.f32`: correctly rounded `a * b` (the `f64` product of two `f32` is exact).
pub fn mul_f32(a: f32, b: f32, r: Rnd) -> f32 {
    if r == Rnd::Rn || !a.is_finite() || !b.is_finite() {
        return canon_f32(a * b);
    }
    to_f32(f64::from(a) * f64::from(b), Ordering::Equal, r)
}

/// `fma.rnd.f32`: `a * b + c` with a single rounding.
pub fn fma_f32(a: f32, b: f32, c: f32, r: Rnd) -> f32 {
    if r == Rnd::Rn || !a.is_finite() || !b.is_finite() || !c.is_finite() {
        return canon_f32(a.mul_add(b, c));
    }
    let p = f64::from(a) * f64::from(b); // exact
    let z = f64::from(c);
    let s = p + z; // |p| < 2^256: finite
    let err = two_sum_err(p, z, s);
    if s == 0.0 {
        return signed_zero32(zero_sum_is_negative(p, z, r));
    }
    to_f32(s, tail_of(s, err), r)
}

/// `div.rnd.f32`: correctly rounded `a / b`.
pub fn div_f32(a: f32, b: f32, r: Rnd) -> f32 {
    if r == Rnd::Rn || !a.is_finite() || !b.is_finite() || a == 0.0 || b == 0.0 {
        // Zeros, infinities and NaNs give exact results (or NaN).
        return canon_f32(a / b);
    }
    let (x, y) = (f64::from(a), f64::from(b));
    let q = x / y;
    // x - q*y is exact (q is the rounded quotient of 24-bit values, far from underflow).
    let rem = (-q).mul_add(y, x);
    // a/b - q = rem / y; it enlarges |q| when rem has the sign of x (q has the sign of x*y).
    let tail = if rem == 0.0 {
        Ordering::Equal
    } else if (rem > 0.0) == (x > 0.0) {
        Ordering::Greater
    } else {
        Ordering::Less
    };
    to_f32(q, tail, r)
}

/// `rcp.rnd.f32`: correctly rounded `1 / a`.
pub fn rcp_f32(a: f32, r: Rnd) -> f32 {
    div_f32(1.0, a, r)
}

/// `sqrt.rnd.f32`: correctly rounded square root (`sqrt(-0) = -0`, negative gives NaN).
pub fn sqrt_f32(a: f32, r: Rnd) -> f32 {
    if r == Rnd::Rn || !a.is_finite() || a <= 0.0 {
        return canon_f32(a.sqrt());
    }
    let x = f64::from(a);
    let s = x.sqrt();
    let rem = (-s).mul_add(s, x); // x - s*s, exact
    to_f32(s, rem.partial_cmp(&0.0).unwrap_or(Ordering::Equal), r)
}

fn ap(x: f64) -> Double {
    Double::from_bits(u128::from(x.to_bits()))
}

fn unap(d: Double) -> f64 {
    f64::from_bits(d.to_bits() as u64)
}

fn ap_round(r: Rnd) -> Round {
    match r {
        Rnd::Rn => Round::NearestTiesToEven,
        Rnd::Rz => Round::TowardZero,
        Rnd::Rm => Round::TowardNegative,
        Rnd::Rp => Round::TowardPositive,
    }
}

/// `add{.rnd}.f64`: correctly rounded `a + b`.
pub fn add_f64(a: f64, b: f64, r: Rnd) -> f64 {
    if r == Rnd::Rn || a.is_nan() || b.is_nan() {
        return canon_f64(a + b);
    }
    canon_f64(unap(ap(a).add_r(ap(b), ap_round(r)).value))
}

/// `sub{.rnd}.f64`: correctly rounded `a - b`.
pub fn sub_f64(a: f64, b: f64, r: Rnd) -> f64 {
    add_f64(a, -b, r)
}

/// `mul{.rnd}.f64`: correctly rounded `a * b`.
pub fn mul_f64(a: f64, b: f64, r: Rnd) -> f64 {
    if r == Rnd::Rn || a.is_nan() || b.is_nan() {
        return canon_f64(a * b);
    }
    canon_f64(unap(ap(a).mul_r(ap(b), ap_round(r)).value))
}

/// `fma.rnd.f64`: `a * b + c` with a single rounding.
pub fn fma_f64(a: f64, b: f64, c: f64, r: Rnd) -> f64 {
    if r == Rnd::Rn || a.is_nan() || b.is_nan() || c.is_nan() {
        return canon_f64(a.mul_add(b, c));
    }
    if !a.is_finite() || !b.is_finite() || !c.is_finite() {
        // Infinite (or invalid) results are exact; the host computes them.
        return canon_f64(a.mul_add(b, c));
    }
    canon_f64(unap(ap(a).mul_add_r(ap(b), ap(c), ap_round(r)).value))
}

/// `div.rnd.f64`: correctly rounded `a / b`.
pub fn div_f64(a: f64, b: f64, r: Rnd) -> f64 {
    if r == Rnd::Rn || a.is_nan() || b.is_nan() {
        return canon_f64(a / b);
    }
    canon_f64(unap(ap(a).div_r(ap(b), ap_round(r)).value))
}

/// `rcp.rnd.f64`: correctly rounded `1 / a`.
pub fn rcp_f64(a: f64, r: Rnd) -> f64 {
    div_f64(1.0, a, r)
}

/// `sqrt.rnd.f64`: correctly rounded square root.
pub fn sqrt_f64(a: f64, r: Rnd) -> f64 {
    if r == Rnd::Rn || !a.is_finite() || a <= 0.0 {
        return canon_f64(a.sqrt());
    }
    // Scale tiny inputs by an even power of two so that the residual a - s*s cannot underflow;
    // sqrt of any positive f64 is normal, so scaling back is exact.
    let (x, unscale) = if a < pow2(-900) {
        (a * pow2(600), pow2(-300))
    } else {
        (a, 1.0)
    };
    let s = x.sqrt();
    let rem = (-s).mul_add(s, x);
    let t = match rem.partial_cmp(&0.0) {
        Some(Ordering::Greater) => match r {
            Rnd::Rp => next_up(s),
            _ => s,
        },
        Some(Ordering::Less) => match r {
            Rnd::Rp => s,
            _ => next_down(s),
        },
        _ => s,
    };
    t * unscale
}

/// The next `f64` above a positive finite `x`.
fn next_up(x: f64) -> f64 {
    f64::from_bits(x.to_bits() + 1)
}

/// The next `f64` below a positive finite `x`.
fn next_down(x: f64) -> f64 {
    f64::from_bits(x.to_bits() - 1)
}

/// `.ftz` on `f32`: a subnormal becomes a zero of the same sign; everything else is unchanged.
pub fn ftz_f32(x: f32) -> f32 {
    if x.is_subnormal() {
        signed_zero32(x.is_sign_negative())
    } else {
        x
    }
}

/// `.sat` on `f32`: clamps to `[+0.0, 1.0]` (so `-0.0` gives `+0.0`); NaN gives `+0.0`.
pub fn sat_f32(x: f32) -> f32 {
    if x.is_nan() || x <= 0.0 {
        0.0
    } else if x > 1.0 {
        1.0
    } else {
        x
    }
}

/// `.sat` on `f64`: clamps to `[+0.0, 1.0]`; NaN gives `+0.0`.
pub fn sat_f64(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 {
        0.0
    } else if x > 1.0 {
        1.0
    } else {
        x
    }
}

/// `min.f32`: the smaller operand, `-0.0 < +0.0`; a single NaN operand is ignored, two NaNs give
/// the canonical NaN.
pub fn min_f32(a: f32, b: f32) -> f32 {
    match (is_nan32(a), is_nan32(b)) {
        (true, true) => nan32(),
        (true, false) => b,
        (false, true) => a,
        (false, false) => {
            if a < b || (a == b && a.is_sign_negative()) {
                a
            } else {
                b
            }
        }
    }
}

/// `max.f32`: the larger operand, `-0.0 < +0.0`; NaN rules as [`min_f32`].
pub fn max_f32(a: f32, b: f32) -> f32 {
    match (is_nan32(a), is_nan32(b)) {
        (true, true) => nan32(),
        (true, false) => b,
        (false, true) => a,
        (false, false) => {
            if a > b || (a == b && a.is_sign_positive()) {
                a
            } else {
                b
            }
        }
    }
}

/// `min.NaN.f32`: as [`min_f32`] but a NaN operand gives the canonical NaN.
pub fn min_nan_f32(a: f32, b: f32) -> f32 {
    if is_nan32(a) || is_nan32(b) {
        nan32()
    } else {
        min_f32(a, b)
    }
}

/// `max.NaN.f32`: as [`max_f32`] but a NaN operand gives the canonical NaN.
pub fn max_nan_f32(a: f32, b: f32) -> f32 {
    if is_nan32(a) || is_nan32(b) {
        nan32()
    } else {
        max_f32(a, b)
    }
}

/// `min.f64`: NaN and signed-zero rules as [`min_f32`].
pub fn min_f64(a: f64, b: f64) -> f64 {
    match (is_nan64(a), is_nan64(b)) {
        (true, true) => nan64(),
        (true, false) => b,
        (false, true) => a,
        (false, false) => {
            if a < b || (a == b && a.is_sign_negative()) {
                a
            } else {
                b
            }
        }
    }
}

/// `max.f64`: NaN and signed-zero rules as [`max_f32`].
pub fn max_f64(a: f64, b: f64) -> f64 {
    match (is_nan64(a), is_nan64(b)) {
        (true, true) => nan64(),
        (true, false) => b,
        (false, true) => a,
        (false, false) => {
            if a > b || (a == b && a.is_sign_positive()) {
                a
            } else {
                b
            }
        }
    }
}

/// `testp.class.f32`. As the PTX ISA specifies, `+0` and `-0` count as normal numbers.
pub fn testp_f32(x: f32, class: TestClass) -> bool {
    match class {
        TestClass::Finite => x.is_finite(),
        TestClass::Infinite => x.is_infinite(),
        TestClass::Number => !x.is_nan(),
        TestClass::NotANumber => x.is_nan(),
        TestClass::Normal => x.is_normal() || x == 0.0,
        TestClass::Subnormal => x.is_subnormal(),
    }
}

/// `testp.class.f64`. As the PTX ISA specifies, `+0` and `-0` count as normal numbers.
pub fn testp_f64(x: f64, class: TestClass) -> bool {
    match class {
        TestClass::Finite => x.is_finite(),
        TestClass::Infinite => x.is_infinite(),
        TestClass::Number => !x.is_nan(),
        TestClass::NotANumber => x.is_nan(),
        TestClass::Normal => x.is_normal() || x == 0.0,
        TestClass::Subnormal => x.is_subnormal(),
    }
}

/// `copysign.f32 d, a, b`: the magnitude of **b** with the sign of **a** (PTX operand order).
/// Pure bit operation, NaN payloads included.
pub fn copysign_f32(a: f32, b: f32) -> f32 {
    f32::from_bits((b.to_bits() & 0x7fff_ffff) | (a.to_bits() & 0x8000_0000))
}

/// `copysign.f64 d, a, b`: the magnitude of **b** with the sign of **a**.
pub fn copysign_f64(a: f64, b: f64) -> f64 {
    f64::from_bits((b.to_bits() & !(1 << 63)) | (a.to_bits() & (1 << 63)))
}
