//! `.f16` / `.bf16` arithmetic on raw `u16` bits. Every operation is computed exactly (an `f64`,
//! or an `f64` plus the sign of its exact error) and rounded once to the half format.

use super::convert::canon_half;
use super::round::{round_from_f64, round_sum, Format, BF16, F16};
use super::Rnd;
use std::cmp::Ordering;

fn add_h(a: u16, b: u16, r: Rnd, fmt: Format) -> u16 {
    let (x, y) = (fmt.to_f64(u64::from(a)), fmt.to_f64(u64::from(b)));
    if !x.is_finite() || !y.is_finite() {
        // NaN operands or inf - inf give NaN (canonicalised); other infinite sums are exact.
        return round_from_f64(x + y, Ordering::Equal, r, fmt) as u16;
    }
    round_sum(x, y, r, fmt) as u16
}

fn mul_h(a: u16, b: u16, r: Rnd, fmt: Format) -> u16 {
    let (x, y) = (fmt.to_f64(u64::from(a)), fmt.to_f64(u64::from(b)));
    // The product of two 11-bit (or 8-bit) significands is exact in f64, as is its exponent.
    round_from_f64(x * y, Ordering::Equal, r, fmt) as u16
}

fn fma_h(a: u16, b: u16, c: u16, r: Rnd, fmt: Format) -> u16 {
    let x = fmt.to_f64(u64::from(a));
    let y = fmt.to_f64(u64::from(b));
    let z = fmt.to_f64(u64::from(c));
    let p = x * y; // exact
    if !p.is_finite() || !z.is_finite() {
        return round_from_f64(p + z, Ordering::Equal, r, fmt) as u16;
    }
    round_sum(p, z, r, fmt) as u16
}

fn min_h(a: u16, b: u16, fmt: Format, want_max: bool) -> u16 {
    let (an, bn) = (fmt.is_nan(u64::from(a)), fmt.is_nan(u64::from(b)));
    match (an, bn) {
        (true, true) => fmt.nan() as u16,
        (true, false) => b,
        (false, true) => a,
        (false, false) => {
            let (x, y) = (fmt.to_f64(u64::from(a)), fmt.to_f64(u64::from(b)));
            // -0.0 < +0.0: break equal-value ties on the sign bit.
            let a_first = if x == y {
                (a & 0x8000 != 0) != want_max
            } else {
                (x < y) != want_max
            };
            if a_first {
                a
            } else {
                b
            }
        }
    }
}

fn min_nan_h(a: u16, b: u16, fmt: Format, want_max: bool) -> u16 {
    if fmt.is_nan(u64::from(a)) || fmt.is_nan(u64::from(b)) {
        fmt.nan() as u16
    } else {
        min_h(a, b, fmt, want_max)
    }
}

fn sat_h(h: u16, fmt: Format) -> u16 {
    let x = fmt.to_f64(u64::from(h));
    if x.is_nan() || x <= 0.0 {
        0
    } else if x > 1.0 {
        round_from_f64(1.0, Ordering::Equal, Rnd::Rn, fmt) as u16
    } else {
        h
    }
}

fn ftz_h(h: u16, fmt: Format) -> u16 {
    let exp_mask = fmt.inf() as u16;
    if h & exp_mask == 0 {
        h & 0x8000
    } else {
        h
    }
}

/// `add{.rnd}.f16`: correctly rounded sum of two `f16`.
pub fn add_f16(a: u16, b: u16, r: Rnd) -> u16 {
    add_h(a, b, r, F16)
}

/// `sub{.rnd}.f16`.
pub fn sub_f16(a: u16, b: u16, r: Rnd) -> u16 {
    add_h(a, b ^ 0x8000, r, F16)
}

/// `mul{.rnd}.f16`.
pub fn mul_f16(a: u16, b: u16, r: Rnd) -> u16 {
    mul_h(a, b, r, F16)
}

/// `fma.rnd.f16`: `a * b + c` with a single rounding.
pub fn fma_f16(a: u16, b: u16, c: u16, r: Rnd) -> u16 {
    fma_h(a, b, c, r, F16)
}

/// `neg.f16`: flips the sign; NaN gives the canonical NaN.
pub fn neg_f16(a: u16) -> u16 {
    canon_half(a ^ 0x8000, F16)
}

/// `abs.f16`: clears the sign; NaN gives the canonical NaN.
pub fn abs_f16(a: u16) -> u16 {
    canon_half(a & 0x7fff, F16)
}

/// `min.f16`: NaN and signed-zero rules as `min.f32` (see the module docs).
pub fn min_f16(a: u16, b: u16) -> u16 {
    min_h(a, b, F16, false)
}

/// `max.f16`.
pub fn max_f16(a: u16, b: u16) -> u16 {
    min_h(a, b, F16, true)
}

/// `min.NaN.f16`: a NaN operand gives the canonical NaN.
pub fn min_nan_f16(a: u16, b: u16) -> u16 {
    min_nan_h(a, b, F16, false)
}

/// `max.NaN.f16`.
pub fn max_nan_f16(a: u16, b: u16) -> u16 {
    min_nan_h(a, b, F16, true)
}

/// `.sat` on `f16`: clamps to `[+0.0, 1.0]`; NaN gives `+0.0`.
pub fn sat_f16(h: u16) -> u16 {
    sat_h(h, F16)
}

/// `.ftz` on `f16`: a subnormal becomes a zero of the same sign.
pub fn ftz_f16(h: u16) -> u16 {
    ftz_h(h, F16)
}

/// `add{.rnd}.bf16`: correctly rounded sum of two `bf16`.
pub fn add_bf16(a: u16, b: u16, r: Rnd) -> u16 {
    add_h(a, b, r, BF16)
}

/// `sub{.rnd}.bf16`.
pub fn sub_bf16(a: u16, b: u16, r: Rnd) -> u16 {
    add_h(a, b ^ 0x8000, r, BF16)
}

/// `mul{.rnd}.bf16`.
pub fn mul_bf16(a: u16, b: u16, r: Rnd) -> u16 {
    mul_h(a, b, r, BF16)
}

/// `fma.rnd.bf16`: `a * b + c` with a single rounding.
pub fn fma_bf16(a: u16, b: u16, c: u16, r: Rnd) -> u16 {
    fma_h(a, b, c, r, BF16)
}

/// `neg.bf16`: flips the sign; NaN gives the canonical NaN.
pub fn neg_bf16(a: u16) -> u16 {
    canon_half(a ^ 0x8000, BF16)
}

/// `abs.bf16`: clears the sign; NaN gives the canonical NaN.
pub fn abs_bf16(a: u16) -> u16 {
    canon_half(a & 0x7fff, BF16)
}

/// `min.bf16`.
pub fn min_bf16(a: u16, b: u16) -> u16 {
    min_h(a, b, BF16, false)
}

/// `max.bf16`.
pub fn max_bf16(a: u16, b: u16) -> u16 {
    min_h(a, b, BF16, true)
}

/// `min.NaN.bf16`.
pub fn min_nan_bf16(a: u16, b: u16) -> u16 {
    min_nan_h(a, b, BF16, false)
}

/// `max.NaN.bf16`.
pub fn max_nan_bf16(a: u16, b: u16) -> u16 {
    min_nan_h(a, b, BF16, true)
}

/// `.sat` on `bf16`: clamps to `[+0.0, 1.0]`; NaN gives `+0.0`.
pub fn sat_bf16(h: u16) -> u16 {
    sat_h(h, BF16)
}

/// `.ftz` on `bf16`: a subnormal becomes a zero of the same sign.
pub fn ftz_bf16(h: u16) -> u16 {
    ftz_h(h, BF16)
}
