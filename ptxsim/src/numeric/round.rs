//! The one rounding primitive every conversion and every directed-mode operation goes through:
//! round an exact value `m * 2^e`, optionally nudged by a tiny residual of known sign, to a
//! binary interchange format in a given mode.

use super::Rnd;
use std::cmp::Ordering;

/// A binary floating-point format: precision (with the hidden bit), exponent range, width.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Format {
    /// Significand bits including the hidden bit.
    prec: u32,
    /// Exponent of the smallest normal number.
    emin: i32,
    /// Exponent of the largest finite number.
    emax: i32,
    /// Width of the exponent field.
    exp_bits: u32,
}

pub(crate) const F16: Format = Format {
    prec: 11,
    emin: -14,
    emax: 15,
    exp_bits: 5,
};
pub(crate) const BF16: Format = Format {
    prec: 8,
    emin: -126,
    emax: 127,
    exp_bits: 8,
};
pub(crate) const F32: Format = Format {
    prec: 24,
    emin: -126,
    emax: 127,
    exp_bits: 8,
};
pub(crate) const F64: Format = Format {
    prec: 53,
    emin: -1022,
    emax: 1023,
    exp_bits: 11,
};

impl Format {
    pub(crate) const fn sign_bit(self) -> u64 {
        1 << (self.exp_bits + self.prec - 1)
    }
    pub(crate) const fn inf(self) -> u64 {
        ((1 << self.exp_bits) - 1) << (self.prec - 1)
    }
    /// The largest finite magnitude.
    pub(crate) const fn max_finite(self) -> u64 {
        self.inf() - 1
    }
    /// The canonical NaN: every bit but the sign set.
    pub(crate) const fn nan(self) -> u64 {
        self.sign_bit() - 1
    }
    pub(crate) const fn is_nan(self, bits: u64) -> bool {
        bits & (self.sign_bit() - 1) > self.inf()
    }
    /// Decodes the bits of a format narrower than `f64` into the (exactly equal) `f64`.
    /// NaNs decode to a NaN (payload not kept).
    pub(crate) fn to_f64(self, bits: u64) -> f64 {
        let frac_bits = self.prec - 1;
        let sign = (bits & self.sign_bit()) << (63 - (self.exp_bits + frac_bits));
        let mag = bits & (self.sign_bit() - 1);
        let exp_field = mag >> frac_bits;
        let frac = mag & ((1 << frac_bits) - 1);
        let out = if exp_field == (1 << self.exp_bits) - 1 {
            if frac == 0 {
                f64::INFINITY.to_bits()
            } else {
                f64::NAN.to_bits()
            }
        } else if exp_field == 0 {
            // frac * 2^(emin - frac_bits); frac < 2^52 so the product is exact.
            (frac as f64 * pow2(self.emin - frac_bits as i32)).to_bits()
        } else {
            // Value 1.frac * 2^(exp_field - 1 + emin): rebias the exponent, widen the fraction.
            let biased = (exp_field as i64 - 1 + i64::from(self.emin) + 1023) as u64;
            (biased << 52) | (frac << (52 - frac_bits))
        };
        f64::from_bits(sign | out)
    }
}

/// `2^k` for `k` in the normal `f64` range.
pub(crate) fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// Where the discarded part of a significand lies relative to half a unit in the last place.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Frac {
    Zero,
    Below,
    Half,
    Above,
}

/// Rounds `(-1)^neg * (m * 2^e + tail)` to `fmt` and returns its bits.
///
/// `tail` is the sign of a residual (relative to the magnitude) that is strictly smaller than
/// half of `2^e` (e.g. the exact error of an `f64` sum or quotient): `Greater` means the exact
/// magnitude is a little larger than `m * 2^e`. `m == 0` with a nonzero tail means a nonzero
/// value below every representable magnitude.
pub(crate) fn round_parts(
    neg: bool,
    m: u128,
    e: i32,
    tail: Ordering,
    mode: Rnd,
    fmt: Format,
) -> u64 {
    let sign = if neg { fmt.sign_bit() } else { 0 };
    let away = matches!((mode, neg), (Rnd::Rp, false) | (Rnd::Rm, true));
    if m == 0 {
        // Only a positive tail is meaningful: the smallest subnormal or zero.
        return sign | u64::from(tail == Ordering::Greater && away);
    }
    // Normalise to a 63-bit significand (msb at bit 62) plus a sticky bit for what lies below.
    let (mut sig, e, mut sticky) = if let Ok(m) = u64::try_from(m) {
        let shift = m.leading_zeros() as i32 - 1;
        if shift >= 0 {
            (m << shift, e - shift, false)
        } else {
            (m >> 1, e + 1, m & 1 != 0)
        }
    } else {
        let shift = 65 - m.leading_zeros() as i32; // > 0: msb lands on bit 62
        let lost = m & ((1u128 << shift) - 1);
        ((m >> shift) as u64, e + shift, lost != 0)
    };
    match tail {
        Ordering::Greater => sticky = true,
        // The exact value is just below sig * 2^e; the grid of bit 0 is far finer than the
        // target's half-ulp, so (sig - 1) plus a sticky bit places it correctly.
        Ordering::Less if !sticky => {
            sig -= 1;
            sticky = true;
        }
        _ => {}
    }
    let p = fmt.prec as i32;
    let top = e + (63 - sig.leading_zeros() as i32);
    let q = top.max(fmt.emin) - (p - 1); // exponent of the result's last place
    let d = (q - e) as u32; // >= 61 - 52 > 0
    let (mut n, frac) = if d >= 64 {
        (0u64, Frac::Below) // sig < 2^63 <= half a unit
    } else {
        let n = sig >> d;
        let rem = sig & ((1u64 << d) - 1);
        let half = 1u64 << (d - 1);
        let frac = match rem.cmp(&half) {
            Ordering::Less if rem == 0 && !sticky => Frac::Zero,
            Ordering::Less => Frac::Below,
            Ordering::Equal if sticky => Frac::Above,
            Ordering::Equal => Frac::Half,
            Ordering::Greater => Frac::Above,
        };
        (n, frac)
    };
    let up = match mode {
        Rnd::Rn => frac == Frac::Above || (frac == Frac::Half && n & 1 == 1),
        Rnd::Rz => false,
        Rnd::Rm | Rnd::Rp => away && frac != Frac::Zero,
    };
    n += u64::from(up);
    let mut q = q;
    if n == 1 << p {
        n >>= 1;
        q += 1;
    }
    if n < 1 << (p - 1) {
        // Subnormal or zero: q is the subnormal quantum, the exponent field is 0.
        return sign | n;
    }
    let exp = q + p - 1;
    if exp > fmt.emax {
        let toward_inf = match mode {
            Rnd::Rn => true,
            Rnd::Rz => false,
            Rnd::Rm | Rnd::Rp => away,
        };
        return sign
            | if toward_inf {
                fmt.inf()
            } else {
                fmt.max_finite()
            };
    }
    let biased = (exp - fmt.emin + 1) as u64;
    sign | (biased << (p - 1)) | (n - (1 << (p - 1)))
}

/// Rounds `x + tail` (see [`round_parts`]) to `fmt`. NaN gives the canonical NaN of `fmt`,
/// infinities stay infinite.
pub(crate) fn round_from_f64(x: f64, tail: Ordering, mode: Rnd, fmt: Format) -> u64 {
    let bits = x.to_bits();
    let neg = bits >> 63 != 0;
    let exp_field = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1 << 52) - 1);
    if exp_field == 0x7ff {
        return if frac != 0 {
            fmt.nan()
        } else {
            (if neg { fmt.sign_bit() } else { 0 }) | fmt.inf()
        };
    }
    let (m, e) = if exp_field == 0 {
        (frac, -1074)
    } else {
        (frac | (1 << 52), exp_field - 1075)
    };
    round_parts(neg, u128::from(m), e, tail, mode, fmt)
}

/// Rounds the integer `v` to `fmt`.
pub(crate) fn round_int(v: i128, mode: Rnd, fmt: Format) -> u64 {
    round_parts(v < 0, v.unsigned_abs(), 0, Ordering::Equal, mode, fmt)
}

/// Error-free transformation: the exact error of `s = a + b` (rounded to nearest), i.e.
/// `a + b == s + err` exactly, provided `s` is finite.
pub(crate) fn two_sum_err(a: f64, b: f64, s: f64) -> f64 {
    let bb = s - a;
    let aa = s - bb;
    (a - aa) + (b - bb)
}

/// The sign of `err` relative to the magnitude of `s` (`s != 0`).
pub(crate) fn tail_of(s: f64, err: f64) -> Ordering {
    if err == 0.0 {
        Ordering::Equal
    } else if (err > 0.0) == (s > 0.0) {
        Ordering::Greater
    } else {
        Ordering::Less
    }
}

/// The sign of an exactly zero sum `x + y` (IEEE 754 6.3): the common sign when both operands
/// are zeros of the same sign, otherwise `+0`, except `-0` when rounding towards minus infinity.
pub(crate) fn zero_sum_is_negative(x: f64, y: f64, mode: Rnd) -> bool {
    if x == 0.0 && y == 0.0 && x.is_sign_negative() == y.is_sign_negative() {
        x.is_sign_negative()
    } else {
        mode == Rnd::Rm
    }
}

/// Rounds the exact sum `x + y` of two finite `f64` values to `fmt` (one rounding).
pub(crate) fn round_sum(x: f64, y: f64, mode: Rnd, fmt: Format) -> u64 {
    let s = x + y;
    if s.is_infinite() {
        // Only possible for operands beyond the half formats' range: not reached from them.
        return round_from_f64(s, Ordering::Equal, mode, fmt);
    }
    let err = two_sum_err(x, y, s);
    if s == 0.0 {
        // two_sum is exact, so the exact sum is zero too.
        let neg = zero_sum_is_negative(x, y, mode);
        return if neg { fmt.sign_bit() } else { 0 };
    }
    round_from_f64(s, tail_of(s, err), mode, fmt)
}
