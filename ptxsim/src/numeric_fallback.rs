//! Temporary stand-in for `crate::numeric` (same names), used until that module lands.
//! Exact for `.rn` conversions; directed-rounding arithmetic is approximated via f64.
#![allow(dead_code)]

/// Rounding mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rnd {
    Rn,
    Rz,
    Rm,
    Rp,
}
/// Round-to-integer mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IRnd {
    Rni,
    Rzi,
    Rmi,
    Rpi,
}
/// testp classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestClass {
    Finite,
    Infinite,
    Number,
    NotANumber,
    Normal,
    Subnormal,
}

const NAN32: f32 = f32::from_bits(0x7fff_ffff);
const NAN64: f64 = f64::from_bits(0x7fff_ffff_ffff_ffff);

/// Rounds sign * mag * 2^e2 to a binary format with `eb` exponent and `mb` mantissa bits.
fn round_bits(neg: bool, mag: u128, e2: i32, eb: u32, mb: u32, r: Rnd) -> u64 {
    let sign = (neg as u64) << (eb + mb);
    if mag == 0 {
        return sign;
    }
    let bias = (1i32 << (eb - 1)) - 1;
    let top = 127 - mag.leading_zeros() as i32 + e2; // floor(log2)
    let et = top.max(1 - bias);
    let u = et - mb as i32;
    let shift = u - e2;
    let (mut q, rem_up) = if shift <= 0 {
        (mag << (-shift).min(127), 0u8)
    } else if shift >= 128 {
        (0, 1)
    } else {
        let q = mag >> shift;
        let rem = mag & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        let code = if rem == 0 {
            0
        } else if rem < half {
            1
        } else if rem == half {
            2
        } else {
            3
        };
        (q, code)
    };
    let up = match r {
        Rnd::Rn => rem_up == 3 || (rem_up == 2 && q & 1 == 1),
        Rnd::Rz => false,
        Rnd::Rp => rem_up != 0 && !neg,
        Rnd::Rm => rem_up != 0 && neg,
    };
    if up {
        q += 1;
    }
    let maxe = (1i64 << eb) - 1;
    let bits = ((et + bias - 1) as i64).max(0) as u128 * (1u128 << mb) + q;
    let inf = (maxe as u128) << mb;
    if bits >= inf || (shift <= 0 && top > bias) {
        let to_inf = match r {
            Rnd::Rn => true,
            Rnd::Rz => false,
            Rnd::Rp => !neg,
            Rnd::Rm => neg,
        };
        return sign | if to_inf { inf as u64 } else { inf as u64 - 1 };
    }
    sign | bits as u64
}

fn f64_parts(x: f64) -> (bool, u128, i32) {
    let b = x.to_bits();
    let neg = b >> 63 != 0;
    let e = ((b >> 52) & 0x7ff) as i32;
    let m = b & ((1 << 52) - 1);
    if e == 0 {
        (neg, m as u128, -1074)
    } else {
        (neg, (m | (1 << 52)) as u128, e - 1075)
    }
}

fn f64_to_fmt(x: f64, eb: u32, mb: u32, r: Rnd, nan: u64) -> u64 {
    if x.is_nan() {
        return nan;
    }
    if x.is_infinite() {
        return ((x.is_sign_negative() as u64) << (eb + mb)) | (((1u64 << eb) - 1) << mb);
    }
    let (n, m, e) = f64_parts(x);
    round_bits(n, m, e, eb, mb, r)
}

pub fn f64_to_f32(x: f64, r: Rnd) -> f32 {
    f32::from_bits(f64_to_fmt(x, 8, 23, r, 0x7fff_ffff) as u32)
}
pub fn f64_to_f16(x: f64, r: Rnd) -> u16 {
    f64_to_fmt(x, 5, 10, r, 0x7fff) as u16
}
pub fn f32_to_f16(x: f32, r: Rnd) -> u16 {
    f64_to_f16(x as f64, r)
}
pub fn f64_to_bf16(x: f64, r: Rnd) -> u16 {
    f64_to_fmt(x, 8, 7, r, 0x7fff) as u16
}
pub fn f32_to_bf16(x: f32, r: Rnd) -> u16 {
    f64_to_bf16(x as f64, r)
}
pub fn f16_to_f64(h: u16) -> f64 {
    let s = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as f64;
    if e == 0x1f {
        return if m == 0.0 { s * f64::INFINITY } else { NAN64 };
    }
    if e == 0 {
        s * m * 2f64.powi(-24)
    } else {
        s * (1024.0 + m) * 2f64.powi(e - 25)
    }
}
pub fn f16_to_f32(h: u16) -> f32 {
    let v = f16_to_f64(h);
    if v.is_nan() {
        NAN32
    } else {
        v as f32
    }
}
pub fn bf16_to_f32(h: u16) -> f32 {
    if h & 0x7fff > 0x7f80 {
        return NAN32;
    }
    f32::from_bits((h as u32) << 16)
}
pub fn bf16_to_f64(h: u16) -> f64 {
    bf16_to_f32(h) as f64
}

fn canon32(x: f32) -> f32 {
    if x.is_nan() {
        NAN32
    } else {
        x
    }
}
fn canon64(x: f64) -> f64 {
    if x.is_nan() {
        NAN64
    } else {
        x
    }
}
fn dir32(exact: f64, r: Rnd) -> f32 {
    if r == Rnd::Rn {
        canon32(exact as f32)
    } else {
        canon32(f64_to_f32(exact, r))
    }
}
pub fn add_f32(a: f32, b: f32, r: Rnd) -> f32 {
    if r == Rnd::Rn {
        canon32(a + b)
    } else {
        dir32(a as f64 + b as f64, r)
    }
}
pub fn sub_f32(a: f32, b: f32, r: Rnd) -> f32 {
    add_f32(a, -b, r)
}
pub fn mul_f32(a: f32, b: f32, r: Rnd) -> f32 {
    if r == Rnd::Rn {
        canon32(a * b)
    } else {
        dir32(a as f64 * b as f64, r)
    }
}
pub fn div_f32(a: f32, b: f32, r: Rnd) -> f32 {
    if r == Rnd::Rn {
        canon32(a / b)
    } else {
        dir32(a as f64 / b as f64, r)
    }
}
pub fn fma_f32(a: f32, b: f32, c: f32, r: Rnd) -> f32 {
    if r == Rnd::Rn {
        canon32(a.mul_add(b, c))
    } else {
        dir32((a as f64).mul_add(b as f64, c as f64), r)
    }
}
pub fn sqrt_f32(a: f32, _r: Rnd) -> f32 {
    canon32(a.sqrt())
}
pub fn rcp_f32(a: f32, r: Rnd) -> f32 {
    div_f32(1.0, a, r)
}
pub fn add_f64(a: f64, b: f64, _r: Rnd) -> f64 {
    canon64(a + b)
}
pub fn sub_f64(a: f64, b: f64, _r: Rnd) -> f64 {
    canon64(a - b)
}
pub fn mul_f64(a: f64, b: f64, _r: Rnd) -> f64 {
    canon64(a * b)
}
pub fn div_f64(a: f64, b: f64, _r: Rnd) -> f64 {
    canon64(a / b)
}
pub fn fma_f64(a: f64, b: f64, c: f64, _r: Rnd) -> f64 {
    canon64(a.mul_add(b, c))
}
pub fn sqrt_f64(a: f64, _r: Rnd) -> f64 {
    canon64(a.sqrt())
}
pub fn rcp_f64(a: f64, _r: Rnd) -> f64 {
    canon64(1.0 / a)
}
pub fn ftz_f32(x: f32) -> f32 {
    if x.is_subnormal() {
        f32::from_bits(x.to_bits() & 0x8000_0000)
    } else {
        x
    }
}
pub fn sat_f32(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}
pub fn sat_f64(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}
pub fn min_f32(a: f32, b: f32) -> f32 {
    if a.is_nan() && b.is_nan() {
        NAN32
    } else if a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else if a == b {
        if a.is_sign_negative() {
            a
        } else {
            b
        }
    } else if a < b {
        a
    } else {
        b
    }
}
pub fn max_f32(a: f32, b: f32) -> f32 {
    if a.is_nan() && b.is_nan() {
        NAN32
    } else if a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else if a == b {
        if a.is_sign_negative() {
            b
        } else {
            a
        }
    } else if a > b {
        a
    } else {
        b
    }
}
pub fn min_f64(a: f64, b: f64) -> f64 {
    canon64(min_f32_like(a, b, true))
}
pub fn max_f64(a: f64, b: f64) -> f64 {
    canon64(min_f32_like(a, b, false))
}
fn min_f32_like(a: f64, b: f64, min: bool) -> f64 {
    if a.is_nan() {
        return b;
    }
    if b.is_nan() {
        return a;
    }
    if min {
        if a < b || (a == b && a.is_sign_negative()) {
            a
        } else {
            b
        }
    } else if a > b || (a == b && b.is_sign_negative()) {
        a
    } else {
        b
    }
}
pub fn ex2_approx_f32(x: f32) -> f32 {
    canon32((x as f64).exp2() as f32)
}
pub fn lg2_approx_f32(x: f32) -> f32 {
    canon32((x as f64).log2() as f32)
}
pub fn sin_approx_f32(x: f32) -> f32 {
    canon32((x as f64).sin() as f32)
}
pub fn cos_approx_f32(x: f32) -> f32 {
    canon32((x as f64).cos() as f32)
}
pub fn tanh_approx_f32(x: f32) -> f32 {
    canon32((x as f64).tanh() as f32)
}
pub fn rsqrt_approx_f32(x: f32) -> f32 {
    canon32((1.0 / (x as f64).sqrt()) as f32)
}
pub fn rcp_approx_f32(x: f32) -> f32 {
    canon32((1.0 / x as f64) as f32)
}
pub fn sqrt_approx_f32(x: f32) -> f32 {
    canon32(x.sqrt())
}
pub fn rsqrt_approx_f64(x: f64) -> f64 {
    canon64(1.0 / x.sqrt())
}
pub fn rcp_approx_ftz_f64(x: f64) -> f64 {
    canon64(1.0 / x)
}
pub fn round_f64(x: f64, r: IRnd) -> f64 {
    canon64(match r {
        IRnd::Rni => x.round_ties_even(),
        IRnd::Rzi => x.trunc(),
        IRnd::Rmi => x.floor(),
        IRnd::Rpi => x.ceil(),
    })
}
pub fn round_f32(x: f32, r: IRnd) -> f32 {
    canon32(round_f64(x as f64, r) as f32)
}
pub fn float_to_int(x: f64, r: IRnd, signed: bool, bits: u32) -> u64 {
    if x.is_nan() {
        return 0;
    }
    let v = round_f64(x, r);
    let (lo, hi) = if signed {
        (-(2f64.powi(bits as i32 - 1)), 2f64.powi(bits as i32 - 1) - 1.0)
    } else {
        (0.0, 2f64.powi(bits as i32) - 1.0)
    };
    let c = if v < lo {
        lo
    } else if v > hi {
        hi
    } else {
        v
    };
    let i = if signed {
        c as i64 as u64
    } else {
        c as u64
    };
    if bits >= 64 {
        i
    } else if signed {
        crate::types::extend(i, bits, true)
    } else {
        i & ((1u64 << bits) - 1)
    }
}
pub fn int_to_f32(v: i128, r: Rnd) -> f32 {
    f32::from_bits(round_bits(v < 0, v.unsigned_abs(), 0, 8, 23, r) as u32)
}
pub fn int_to_f64(v: i128, r: Rnd) -> f64 {
    f64::from_bits(round_bits(v < 0, v.unsigned_abs(), 0, 11, 52, r))
}
pub fn int_to_f16(v: i128, r: Rnd) -> u16 {
    round_bits(v < 0, v.unsigned_abs(), 0, 5, 10, r) as u16
}
pub fn int_to_bf16(v: i128, r: Rnd) -> u16 {
    round_bits(v < 0, v.unsigned_abs(), 0, 8, 7, r) as u16
}
fn h2(a: u16, f: impl Fn(f64) -> f64) -> u16 {
    f64_to_f16(f(f16_to_f64(a)), Rnd::Rn)
}
pub fn add_f16(a: u16, b: u16, r: Rnd) -> u16 {
    f64_to_f16(f16_to_f64(a) + f16_to_f64(b), r)
}
pub fn sub_f16(a: u16, b: u16, r: Rnd) -> u16 {
    f64_to_f16(f16_to_f64(a) - f16_to_f64(b), r)
}
pub fn mul_f16(a: u16, b: u16, r: Rnd) -> u16 {
    f64_to_f16(f16_to_f64(a) * f16_to_f64(b), r)
}
pub fn fma_f16(a: u16, b: u16, c: u16, r: Rnd) -> u16 {
    f64_to_f16(f16_to_f64(a) * f16_to_f64(b) + f16_to_f64(c), r)
}
pub fn neg_f16(a: u16) -> u16 {
    h2(a, |x| -x)
}
pub fn abs_f16(a: u16) -> u16 {
    h2(a, f64::abs)
}
pub fn min_f16(a: u16, b: u16) -> u16 {
    f64_to_f16(min_f32_like(f16_to_f64(a), f16_to_f64(b), true), Rnd::Rn)
}
pub fn max_f16(a: u16, b: u16) -> u16 {
    f64_to_f16(min_f32_like(f16_to_f64(a), f16_to_f64(b), false), Rnd::Rn)
}
pub fn add_bf16(a: u16, b: u16, r: Rnd) -> u16 {
    f64_to_bf16(bf16_to_f64(a) + bf16_to_f64(b), r)
}
pub fn sub_bf16(a: u16, b: u16, r: Rnd) -> u16 {
    f64_to_bf16(bf16_to_f64(a) - bf16_to_f64(b), r)
}
pub fn mul_bf16(a: u16, b: u16, r: Rnd) -> u16 {
    f64_to_bf16(bf16_to_f64(a) * bf16_to_f64(b), r)
}
pub fn fma_bf16(a: u16, b: u16, c: u16, r: Rnd) -> u16 {
    f64_to_bf16(bf16_to_f64(a).mul_add(bf16_to_f64(b), bf16_to_f64(c)), r)
}
pub fn neg_bf16(a: u16) -> u16 {
    f64_to_bf16(-bf16_to_f64(a), Rnd::Rn)
}
pub fn abs_bf16(a: u16) -> u16 {
    f64_to_bf16(bf16_to_f64(a).abs(), Rnd::Rn)
}
pub fn min_bf16(a: u16, b: u16) -> u16 {
    f64_to_bf16(min_f32_like(bf16_to_f64(a), bf16_to_f64(b), true), Rnd::Rn)
}
pub fn max_bf16(a: u16, b: u16) -> u16 {
    f64_to_bf16(min_f32_like(bf16_to_f64(a), bf16_to_f64(b), false), Rnd::Rn)
}
pub fn sat_f16(h: u16) -> u16 {
    f64_to_f16(sat_f64(f16_to_f64(h)), Rnd::Rn)
}
pub fn sat_bf16(h: u16) -> u16 {
    f64_to_bf16(sat_f64(bf16_to_f64(h)), Rnd::Rn)
}
pub fn ftz_f16(h: u16) -> u16 {
    if h & 0x7c00 == 0 {
        h & 0x8000
    } else {
        h
    }
}
pub fn testp_f32(x: f32, c: TestClass) -> bool {
    testp_f64(x as f64, c) && !(c == TestClass::Normal && x.is_subnormal())
        || (c == TestClass::Subnormal && x.is_subnormal())
}
pub fn testp_f64(x: f64, c: TestClass) -> bool {
    match c {
        TestClass::Finite => x.is_finite(),
        TestClass::Infinite => x.is_infinite(),
        TestClass::Number => !x.is_nan(),
        TestClass::NotANumber => x.is_nan(),
        TestClass::Normal => x.is_normal(),
        TestClass::Subnormal => x.is_subnormal(),
    }
}
pub fn copysign_f32(a: f32, b: f32) -> f32 {
    b.copysign(a)
}
pub fn copysign_f64(a: f64, b: f64) -> f64 {
    b.copysign(a)
}
