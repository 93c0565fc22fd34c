//! Floating-point semantics: f32/f64 and f16/bf16 (scalar and x2), on raw register bits.

use crate::ir::Mods;
use crate::num::{self, Rnd};
use crate::types::Ty;

#[inline]
fn f(v: u64, m: &Mods) -> f32 {
    let x = f32::from_bits(v as u32);
    if m.ftz {
        num::ftz_f32(x)
    } else {
        x
    }
}
#[inline]
fn out32(x: f32, m: &Mods) -> u64 {
    let mut x = x;
    if m.ftz {
        x = num::ftz_f32(x);
    }
    if m.sat {
        x = num::sat_f32(x);
    }
    x.to_bits() as u64
}
#[inline]
fn d(v: u64) -> f64 {
    f64::from_bits(v)
}
#[inline]
fn out64(x: f64, m: &Mods) -> u64 {
    if m.sat {
        num::sat_f64(x).to_bits()
    } else {
        x.to_bits()
    }
}

macro_rules! f32_f64_bin {
    ($name:ident, $f32:path, $f64:path) => {
        pub(crate) fn $name(m: &Mods, s: [u64; 4]) -> u64 {
            if m.ty == Ty::F64 {
                out64($f64(d(s[0]), d(s[1]), m.rnd), m)
            } else {
                out32($f32(f(s[0], m), f(s[1], m), m.rnd), m)
            }
        }
    };
}
f32_f64_bin!(fadd, num::add_f32, num::add_f64);
f32_f64_bin!(fsub, num::sub_f32, num::sub_f64);
f32_f64_bin!(fmul, num::mul_f32, num::mul_f64);
f32_f64_bin!(fdiv, num::div_f32, num::div_f64);

pub(crate) fn ffma(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::F64 {
        out64(num::fma_f64(d(s[0]), d(s[1]), d(s[2]), m.rnd), m)
    } else {
        out32(num::fma_f32(f(s[0], m), f(s[1], m), f(s[2], m), m.rnd), m)
    }
}
/// `div.approx.f32` / `div.full.f32`: computed as correctly rounded division (documented).
pub(crate) fn fdiv_approx(m: &Mods, s: [u64; 4]) -> u64 {
    out32(num::div_f32(f(s[0], m), f(s[1], m), Rnd::Rn), m)
}
pub(crate) fn fabs(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::F64 {
        s[0] & !(1u64 << 63)
    } else {
        out32(f32::from_bits(s[0] as u32 & 0x7fff_ffff), m)
    }
}
pub(crate) fn fneg(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::F64 {
        s[0] ^ (1u64 << 63)
    } else {
        out32(f32::from_bits(s[0] as u32 ^ 0x8000_0000), m)
    }
}
/// min/max: aux bit 0 = .NaN (propagate NaN).
pub(crate) fn fmin(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::F64 {
        let (a, b) = (d(s[0]), d(s[1]));
        if m.aux & 1 != 0 && (a.is_nan() || b.is_nan()) {
            return num::CANONICAL_NAN_F64;
        }
        num::min_f64(a, b).to_bits()
    } else {
        let (a, b) = (f(s[0], m), f(s[1], m));
        if m.aux & 1 != 0 && (a.is_nan() || b.is_nan()) {
            return num::CANONICAL_NAN_F32 as u64;
        }
        out32(num::min_f32(a, b), m)
    }
}
pub(crate) fn fmax(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::F64 {
        let (a, b) = (d(s[0]), d(s[1]));
        if m.aux & 1 != 0 && (a.is_nan() || b.is_nan()) {
            return num::CANONICAL_NAN_F64;
        }
        num::max_f64(a, b).to_bits()
    } else {
        let (a, b) = (f(s[0], m), f(s[1], m));
        if m.aux & 1 != 0 && (a.is_nan() || b.is_nan()) {
            return num::CANONICAL_NAN_F32 as u64;
        }
        out32(num::max_f32(a, b), m)
    }
}
pub(crate) fn fsqrt(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::F64 {
        out64(num::sqrt_f64(d(s[0]), m.rnd), m)
    } else {
        out32(num::sqrt_f32(f(s[0], m), m.rnd), m)
    }
}
pub(crate) fn frcp(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::F64 {
        out64(num::rcp_f64(d(s[0]), m.rnd), m)
    } else {
        out32(num::rcp_f32(f(s[0], m), m.rnd), m)
    }
}
macro_rules! approx32 {
    ($name:ident, $f:path) => {
        pub(crate) fn $name(m: &Mods, s: [u64; 4]) -> u64 {
            out32($f(f(s[0], m)), m)
        }
    };
}
approx32!(sqrt_approx, num::sqrt_approx_f32);
approx32!(rcp_approx, num::rcp_approx_f32);
approx32!(rsqrt_approx, num::rsqrt_approx_f32);
approx32!(ex2_approx, num::ex2_approx_f32);
approx32!(lg2_approx, num::lg2_approx_f32);
approx32!(sin_approx, num::sin_approx_f32);
approx32!(cos_approx, num::cos_approx_f32);
approx32!(tanh_approx, num::tanh_approx_f32);
pub(crate) fn rsqrt_approx64(_m: &Mods, s: [u64; 4]) -> u64 {
    num::rsqrt_approx_f64(d(s[0])).to_bits()
}
pub(crate) fn rcp_approx64(_m: &Mods, s: [u64; 4]) -> u64 {
    num::rcp_approx_ftz_f64(d(s[0])).to_bits()
}
pub(crate) fn copysign(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::F64 {
        num::copysign_f64(d(s[0]), d(s[1])).to_bits()
    } else {
        num::copysign_f32(f32::from_bits(s[0] as u32), f32::from_bits(s[1] as u32)).to_bits() as u64
    }
}
/// testp: aux = class index (see `lower`).
pub(crate) fn testp(m: &Mods, s: [u64; 4]) -> u64 {
    let c = class(m.aux);
    (if m.ty == Ty::F64 {
        num::testp_f64(d(s[0]), c)
    } else {
        num::testp_f32(f32::from_bits(s[0] as u32), c)
    }) as u64
}
pub(crate) fn class(i: u32) -> num::TestClass {
    use num::TestClass::*;
    [Finite, Infinite, Number, NotANumber, Normal, Subnormal][i as usize % 6]
}

// ---- half precision ----

#[inline]
fn is_bf(m: &Mods) -> bool {
    matches!(m.ty, Ty::Bf16 | Ty::Bf16x2)
}
#[inline]
fn is_x2(m: &Mods) -> bool {
    matches!(m.ty, Ty::F16x2 | Ty::Bf16x2)
}
#[inline]
fn hpost(m: &Mods, h: u16) -> u16 {
    let mut h = h;
    if m.aux & 2 != 0 {
        h = if is_bf(m) {
            num::relu_bf16(h)
        } else {
            num::relu_f16(h)
        };
    }
    if m.ftz && !is_bf(m) {
        h = num::ftz_f16(h);
    }
    if m.sat {
        h = if is_bf(m) {
            num::sat_bf16(h)
        } else {
            num::sat_f16(h)
        };
    }
    h
}
#[inline]
fn hpre(m: &Mods, h: u16) -> u16 {
    if m.ftz && !is_bf(m) {
        num::ftz_f16(h)
    } else {
        h
    }
}
#[inline]
fn lanes(m: &Mods, s: [u64; 4], op: impl Fn(u16, u16, u16) -> u16) -> u64 {
    let h = |v: u64, k: u32| hpre(m, (v >> (16 * k)) as u16);
    let lo = hpost(m, op(h(s[0], 0), h(s[1], 0), h(s[2], 0)));
    if is_x2(m) {
        let hi = hpost(m, op(h(s[0], 1), h(s[1], 1), h(s[2], 1)));
        ((hi as u64) << 16) | lo as u64
    } else {
        lo as u64
    }
}
pub(crate) fn hadd(m: &Mods, s: [u64; 4]) -> u64 {
    if is_bf(m) {
        lanes(m, s, |a, b, _| num::add_bf16(a, b, m.rnd))
    } else {
        lanes(m, s, |a, b, _| num::add_f16(a, b, m.rnd))
    }
}
pub(crate) fn hsub(m: &Mods, s: [u64; 4]) -> u64 {
    if is_bf(m) {
        lanes(m, s, |a, b, _| num::sub_bf16(a, b, m.rnd))
    } else {
        lanes(m, s, |a, b, _| num::sub_f16(a, b, m.rnd))
    }
}
pub(crate) fn hmul(m: &Mods, s: [u64; 4]) -> u64 {
    if is_bf(m) {
        lanes(m, s, |a, b, _| num::mul_bf16(a, b, m.rnd))
    } else {
        lanes(m, s, |a, b, _| num::mul_f16(a, b, m.rnd))
    }
}
pub(crate) fn hfma(m: &Mods, s: [u64; 4]) -> u64 {
    if is_bf(m) {
        lanes(m, s, |a, b, c| num::fma_bf16(a, b, c, m.rnd))
    } else {
        lanes(m, s, |a, b, c| num::fma_f16(a, b, c, m.rnd))
    }
}
pub(crate) fn hneg(m: &Mods, s: [u64; 4]) -> u64 {
    if is_bf(m) {
        lanes(m, s, |a, _, _| num::neg_bf16(a))
    } else {
        lanes(m, s, |a, _, _| num::neg_f16(a))
    }
}
pub(crate) fn habs(m: &Mods, s: [u64; 4]) -> u64 {
    if is_bf(m) {
        lanes(m, s, |a, _, _| num::abs_bf16(a))
    } else {
        lanes(m, s, |a, _, _| num::abs_f16(a))
    }
}
fn hnan(m: &Mods, a: u16, b: u16) -> bool {
    let isnan = |h: u16| {
        if is_bf(m) {
            h & 0x7fff > 0x7f80
        } else {
            h & 0x7fff > 0x7c00
        }
    };
    m.aux & 1 != 0 && (isnan(a) || isnan(b))
}
pub(crate) fn hmin(m: &Mods, s: [u64; 4]) -> u64 {
    lanes(m, s, |a, b, _| {
        if hnan(m, a, b) {
            0x7fff
        } else if is_bf(m) {
            num::min_bf16(a, b)
        } else {
            num::min_f16(a, b)
        }
    })
}
pub(crate) fn hmax(m: &Mods, s: [u64; 4]) -> u64 {
    lanes(m, s, |a, b, _| {
        if hnan(m, a, b) {
            0x7fff
        } else if is_bf(m) {
            num::max_bf16(a, b)
        } else {
            num::max_f16(a, b)
        }
    })
}
/// `ex2.approx` on halves (computed accurately).
pub(crate) fn hex2(m: &Mods, s: [u64; 4]) -> u64 {
    if is_bf(m) {
        lanes(m, s, |a, _, _| num::ex2_approx_bf16(a))
    } else {
        lanes(m, s, |a, _, _| num::ex2_approx_f16(a))
    }
}
/// `tanh.approx` on halves (computed accurately).
pub(crate) fn htanh(m: &Mods, s: [u64; 4]) -> u64 {
    if is_bf(m) {
        lanes(m, s, |a, _, _| num::tanh_approx_bf16(a))
    } else {
        lanes(m, s, |a, _, _| num::tanh_approx_f16(a))
    }
}

/// Half value to f64 per the instruction type.
pub(crate) fn h_to_f64(ty: Ty, h: u16) -> f64 {
    match ty {
        Ty::Bf16 | Ty::Bf16x2 => num::bf16_to_f32(h) as f64,
        _ => num::f16_to_f32(h) as f64,
    }
}
