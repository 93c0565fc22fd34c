//! `cvt`: conversions between floating-point formats, to and from integers, and rounding to
//! integral values.

use super::round::{pow2, round_from_f64, round_int, BF16, F16, F32, F64};
use super::{IRnd, Rnd, CANONICAL_NAN_F32, CANONICAL_NAN_F64};
use std::cmp::Ordering;

/// `cvt.frnd.f16.f32`: rounds an `f32` to `f16` bits. NaN gives `0x7fff`; overflow gives
/// infinity or the largest finite value depending on the mode (see the module docs).
pub fn f32_to_f16(x: f32, r: Rnd) -> u16 {
    let bits = x.to_bits();
    let exp = (bits >> 23) & 0xff;
    if r == Rnd::Rn && (113..=142).contains(&exp) {
        // Fast path: x is in the f16 normal range (2^-14 ..< 2^16). Keep the top 10 fraction
        // bits, round the other 13 to nearest even; a carry moves into the exponent field
        // (and from 0x7bff to 0x7c00, infinity, exactly when x >= 65520).
        let sign = (bits >> 16) & 0x8000;
        let base = ((exp - 112) << 10) | ((bits & 0x007f_ffff) >> 13);
        let rem = bits & 0x1fff;
        let up = rem > 0x1000 || (rem == 0x1000 && base & 1 == 1);
        return (sign | (base + u32::from(up))) as u16;
    }
    round_from_f64(f64::from(x), Ordering::Equal, r, F16) as u16
}

/// `cvt.frnd.f16.f64`: rounds an `f64` to `f16` bits (one rounding, no double rounding).
pub fn f64_to_f16(x: f64, r: Rnd) -> u16 {
    round_from_f64(x, Ordering::Equal, r, F16) as u16
}

/// `cvt.f32.f16`: exact. NaN gives the canonical `f32` NaN.
pub fn f16_to_f32(h: u16) -> f32 {
    canon_f32(F16.to_f64(u64::from(h)) as f32)
}

/// `cvt.f64.f16`: exact. NaN gives the canonical `f64` NaN.
pub fn f16_to_f64(h: u16) -> f64 {
    canon_f64(F16.to_f64(u64::from(h)))
}

/// `cvt.frnd.bf16.f32`: rounds an `f32` to `bf16` bits. NaN gives `0x7fff`.
pub fn f32_to_bf16(x: f32, r: Rnd) -> u16 {
    let bits = x.to_bits();
    if r == Rnd::Rn && bits & 0x7fff_ffff <= 0x7f80_0000 {
        // Fast path for every non-NaN: same exponent range, so rounding the low 16 bits to
        // nearest even (carrying into the exponent, up to infinity) is the whole conversion.
        let up = 0x7fff + ((bits >> 16) & 1);
        return ((bits + up) >> 16) as u16;
    }
    round_from_f64(f64::from(x), Ordering::Equal, r, BF16) as u16
}

/// `cvt.frnd.bf16.f64`: rounds an `f64` to `bf16` bits (one rounding).
pub fn f64_to_bf16(x: f64, r: Rnd) -> u16 {
    round_from_f64(x, Ordering::Equal, r, BF16) as u16
}

/// `cvt.f32.bf16`: exact. NaN gives the canonical `f32` NaN.
pub fn bf16_to_f32(h: u16) -> f32 {
    canon_f32(f32::from_bits(u32::from(h) << 16))
}

/// `cvt.f64.bf16`: exact. NaN gives the canonical `f64` NaN.
pub fn bf16_to_f64(h: u16) -> f64 {
    canon_f64(f64::from(f32::from_bits(u32::from(h) << 16)))
}

/// `cvt.frnd.f32.f64`: rounds an `f64` to `f32`. NaN gives the canonical `f32` NaN.
pub fn f64_to_f32(x: f64, r: Rnd) -> f32 {
    f32::from_bits(round_from_f64(x, Ordering::Equal, r, F32) as u32)
}

/// `cvt.f64.f32`: exact. NaN gives the canonical `f64` NaN.
pub fn f32_to_f64(x: f32) -> f64 {
    canon_f64(f64::from(x))
}

/// `cvt.frnd.f16.bf16` and friends: rounds one half format to the other via the exact `f64`.
pub fn bf16_to_f16(h: u16, r: Rnd) -> u16 {
    f64_to_f16(bf16_to_f64(h), r)
}

/// `cvt.frnd.bf16.f16`: rounds `f16` bits to `bf16` bits.
pub fn f16_to_bf16(h: u16, r: Rnd) -> u16 {
    f64_to_bf16(f16_to_f64(h), r)
}

/// `cvt.irnd.{s,u}{8,16,32,64}.{f16,bf16,f32,f64}`: rounds `x` to an integer and saturates it
/// to the destination range (PTX float-to-integer conversions always saturate, `.sat` is
/// redundant); NaN gives 0. The caller passes `f16` / `bf16` / `f32` sources exactly widened to
/// `f64`.
///
/// `bits` is the destination width (8, 16, 32 or 64; other values are clamped to `1..=64`).
/// The result is the destination value extended to 64 bits: sign-extended for `signed`,
/// zero-extended otherwise, so the caller truncates it to the register width it writes.
pub fn float_to_int(x: f64, r: IRnd, signed: bool, bits: u32) -> u64 {
    let bits = bits.clamp(1, 64);
    if x.is_nan() {
        return 0;
    }
    let y = round_to_int_f64(x, r);
    if signed {
        let max = i64::MAX >> (64 - bits);
        let min = -max - 1;
        // min is -2^(bits-1) and max + 1 is 2^(bits-1): both exact in f64.
        let v = if y <= min as f64 {
            min
        } else if y >= pow2(bits as i32 - 1) {
            max
        } else {
            y as i64
        };
        v as u64
    } else {
        let max = u64::MAX >> (64 - bits);
        // max + 1 is 2^bits, exact in f64.
        if y <= 0.0 {
            0
        } else if y >= pow2(bits as i32) {
            max
        } else {
            y as u64
        }
    }
}

/// `cvt.frnd.{f16,bf16,f32,f64}.{s,u}*`: rounds an integer to `f32`. The `i128` argument holds
/// any 64-bit source, signed or unsigned.
pub fn int_to_f32(v: i128, r: Rnd) -> f32 {
    f32::from_bits(round_int(v, r, F32) as u32)
}

/// Rounds an integer to `f64`.
pub fn int_to_f64(v: i128, r: Rnd) -> f64 {
    f64::from_bits(round_int(v, r, F64))
}

/// Rounds an integer to `f16` bits (overflow per mode, e.g. 65520 rounds to infinity in `.rn`).
pub fn int_to_f16(v: i128, r: Rnd) -> u16 {
    round_int(v, r, F16) as u16
}

/// Rounds an integer to `bf16` bits.
pub fn int_to_bf16(v: i128, r: Rnd) -> u16 {
    round_int(v, r, BF16) as u16
}

/// `cvt.irnd.f32.f32`: rounds to an integral value, keeping the sign of zero. NaN gives the
/// canonical NaN.
pub fn round_f32(x: f32, r: IRnd) -> f32 {
    canon_f32(match r {
        IRnd::Rni => x.round_ties_even(),
        IRnd::Rzi => x.trunc(),
        IRnd::Rmi => x.floor(),
        IRnd::Rpi => x.ceil(),
    })
}

/// `cvt.irnd.f64.f64`: rounds to an integral value, keeping the sign of zero.
pub fn round_f64(x: f64, r: IRnd) -> f64 {
    canon_f64(round_to_int_f64(x, r))
}

/// `cvt.irnd.f16.f16`: rounds `f16` bits to an integral value (exact, so no `Rnd` needed).
pub fn round_f16(h: u16, r: IRnd) -> u16 {
    f64_to_f16(round_f64(f16_to_f64(h), r), Rnd::Rn)
}

/// `cvt.irnd.bf16.bf16`: rounds `bf16` bits to an integral value.
pub fn round_bf16(h: u16, r: IRnd) -> u16 {
    f64_to_bf16(round_f64(bf16_to_f64(h), r), Rnd::Rn)
}

/// `.satfinite` on an `f16` result: infinities become the largest finite value of the same
/// sign; NaN stays the canonical NaN.
pub fn satfinite_f16(h: u16) -> u16 {
    if h & 0x7fff == 0x7c00 {
        (h & 0x8000) | 0x7bff
    } else {
        canon_half(h, F16)
    }
}

/// `.satfinite` on a `bf16` result: infinities become the largest finite value of the same
/// sign; NaN stays the canonical NaN.
pub fn satfinite_bf16(h: u16) -> u16 {
    if h & 0x7fff == 0x7f80 {
        (h & 0x8000) | 0x7f7f
    } else {
        canon_half(h, BF16)
    }
}

/// `.relu` on an `f16` result (`cvt.relu`, `fma.relu`, `min.relu`): negative values (and
/// `-0.0`) become `+0.0`, NaN becomes the canonical NaN.
pub fn relu_f16(h: u16) -> u16 {
    relu_half(h, F16)
}

/// `.relu` on a `bf16` result.
pub fn relu_bf16(h: u16) -> u16 {
    relu_half(h, BF16)
}

fn relu_half(h: u16, fmt: super::round::Format) -> u16 {
    if fmt.is_nan(u64::from(h)) {
        fmt.nan() as u16
    } else if h & 0x8000 != 0 {
        0
    } else {
        h
    }
}

pub(crate) fn canon_half(h: u16, fmt: super::round::Format) -> u16 {
    if fmt.is_nan(u64::from(h)) {
        fmt.nan() as u16
    } else {
        h
    }
}

// NaN tests that choose the result are done on the bits: LLVM may fold a float-domain
// `if x.is_nan() { CANONICAL } else { x }` into `x` (it treats NaN payloads as unspecified),
// which would leak the host's NaN (0xffc00000 on x86) into simulated registers.

pub(crate) fn is_nan32(x: f32) -> bool {
    x.to_bits() & 0x7fff_ffff > 0x7f80_0000
}

pub(crate) fn is_nan64(x: f64) -> bool {
    x.to_bits() & !(1 << 63) > 0x7ff0_0000_0000_0000
}

pub(crate) fn canon_f32(x: f32) -> f32 {
    let bits = x.to_bits();
    f32::from_bits(if bits & 0x7fff_ffff > 0x7f80_0000 {
        CANONICAL_NAN_F32
    } else {
        bits
    })
}

pub(crate) fn canon_f64(x: f64) -> f64 {
    let bits = x.to_bits();
    f64::from_bits(if bits & !(1 << 63) > 0x7ff0_0000_0000_0000 {
        CANONICAL_NAN_F64
    } else {
        bits
    })
}

fn round_to_int_f64(x: f64, r: IRnd) -> f64 {
    match r {
        IRnd::Rni => x.round_ties_even(),
        IRnd::Rzi => x.trunc(),
        IRnd::Rmi => x.floor(),
        IRnd::Rpi => x.ceil(),
    }
}
