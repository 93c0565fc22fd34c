//! `.approx` instructions, computed accurately in `f64` and rounded to nearest. The hardware's
//! exact approximation bits are not modelled (see the module docs for the documented errors).
//! `.ftz` variants: the caller applies `ftz_f32` to the input and to the result.

use super::convert::{bf16_to_f64, canon_f32, canon_f64, f16_to_f64, f64_to_bf16, f64_to_f16};
use super::Rnd;

fn via_f64(x: f32, f: impl Fn(f64) -> f64) -> f32 {
    // f64 -> f32 `as` rounds to nearest even, subnormals included.
    canon_f32(f(f64::from(x)) as f32)
}

/// `ex2.approx.f32`: `2^x` (`2^-inf = +0`, `2^+inf = +inf`).
pub fn ex2_approx_f32(x: f32) -> f32 {
    via_f64(x, f64::exp2)
}

/// `lg2.approx.f32`: `log2(x)` (`log2(+-0) = -inf`, negative gives NaN).
pub fn lg2_approx_f32(x: f32) -> f32 {
    via_f64(x, f64::log2)
}

/// `sin.approx.f32` (`sin(+-inf)` is NaN, `sin(-0) = -0`).
pub fn sin_approx_f32(x: f32) -> f32 {
    via_f64(x, f64::sin)
}

/// `cos.approx.f32` (`cos(+-inf)` is NaN).
pub fn cos_approx_f32(x: f32) -> f32 {
    via_f64(x, f64::cos)
}

/// `rsqrt.approx.f32`: `1 / sqrt(x)` (`rsqrt(+-0) = +-inf`, `rsqrt(+inf) = +0`, negative
/// gives NaN).
pub fn rsqrt_approx_f32(x: f32) -> f32 {
    via_f64(x, |v| 1.0 / v.sqrt())
}

/// `rcp.approx.f32`: `1 / x` (correctly rounded here).
pub fn rcp_approx_f32(x: f32) -> f32 {
    via_f64(x, |v| 1.0 / v)
}

/// `sqrt.approx.f32` (correctly rounded here).
pub fn sqrt_approx_f32(x: f32) -> f32 {
    via_f64(x, f64::sqrt)
}

/// `tanh.approx.f32` (`tanh(+-inf) = +-1`, `tanh(-0) = -0`).
pub fn tanh_approx_f32(x: f32) -> f32 {
    via_f64(x, f64::tanh)
}

/// `div.full.f32`: `a / b` (correctly rounded here; the hardware is within 2 ulp).
pub fn div_full_f32(a: f32, b: f32) -> f32 {
    canon_f32(a / b)
}

/// `div.approx.f32`: `a / b`, computed by the hardware as `a * (1 / b)`. For
/// `2^126 < |b| < 2^128` the ISA specifies the result: 0 (signed `a xor b`), or NaN when `a`
/// is infinite; that case is modelled. Elsewhere the result is correctly rounded here.
pub fn div_approx_f32(a: f32, b: f32) -> f32 {
    let mb = b.abs();
    if mb > 2f32.powi(126) && mb.is_finite() {
        if a.is_infinite() || a.is_nan() {
            return canon_f32(f32::NAN);
        }
        let neg = a.is_sign_negative() != b.is_sign_negative();
        return if neg { -0.0 } else { 0.0 };
    }
    via_f64(a, |v| v / f64::from(b))
}

/// `rsqrt.approx.f64`: `1 / sqrt(x)` (accurate to about 1 ulp here).
pub fn rsqrt_approx_f64(x: f64) -> f64 {
    canon_f64(1.0 / x.sqrt())
}

/// `rcp.approx.ftz.f64`: `1 / x` with subnormal inputs and results flushed to signed zero.
pub fn rcp_approx_ftz_f64(x: f64) -> f64 {
    let x = if x.is_subnormal() {
        0.0f64.copysign(x)
    } else {
        x
    };
    let r = 1.0 / x;
    canon_f64(if r.is_subnormal() {
        0.0f64.copysign(r)
    } else {
        r
    })
}

/// `ex2.approx.f16` (`ex2.approx.ftz.bf16` via [`ex2_approx_bf16`]): `2^x` on `f16` bits.
pub fn ex2_approx_f16(h: u16) -> u16 {
    f64_to_f16(f16_to_f64(h).exp2(), Rnd::Rn)
}

/// `ex2.approx.ftz.bf16`: `2^x` on `bf16` bits (the caller flushes subnormals for `.ftz`).
pub fn ex2_approx_bf16(h: u16) -> u16 {
    f64_to_bf16(bf16_to_f64(h).exp2(), Rnd::Rn)
}

/// `tanh.approx.f16`.
pub fn tanh_approx_f16(h: u16) -> u16 {
    f64_to_f16(f16_to_f64(h).tanh(), Rnd::Rn)
}

/// `tanh.approx.bf16`.
pub fn tanh_approx_bf16(h: u16) -> u16 {
    f64_to_bf16(bf16_to_f64(h).tanh(), Rnd::Rn)
}
