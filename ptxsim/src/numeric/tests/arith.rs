use super::super::*;
use super::{ap_round, scale, Rng, MODES};
use rustc_apfloat::ieee::{Quad, Single};
use rustc_apfloat::{Float, FloatConvert};
use std::cmp::Ordering;

fn ap32(x: f32) -> Single {
    Single::from_bits(u128::from(x.to_bits()))
}

/// `got` must equal the reference bit for bit, or be the canonical NaN where it is a NaN.
fn same32(got: f32, want: Single, what: &str) {
    if want.is_nan() {
        assert_eq!(got.to_bits(), CANONICAL_NAN_F32, "{what}");
    } else {
        assert_eq!(
            u128::from(got.to_bits()),
            want.to_bits(),
            "{what}: got {got:e}"
        );
    }
}

/// The f32 directed paths (f64 + exact-error sign) against rustc_apfloat's soft-float.
#[test]
fn f32_arithmetic_all_modes_against_apfloat() {
    let mut rng = Rng(10);
    for _ in 0..scale(30_000, 200_000) {
        let (a, b, c) = (rng.f32(), rng.f32(), rng.f32());
        // Cancellation: b close to -a.
        let b = if rng.below(4) == 0 {
            -f32::from_bits(a.to_bits() ^ (rng.below(16) as u32))
        } else {
            b
        };
        for r in MODES {
            let m = ap_round(r);
            let ctx = |op: &str| {
                format!(
                    "{op} {a:e} ({:#x}) {b:e} ({:#x}) {c:e} {r:?}",
                    a.to_bits(),
                    b.to_bits()
                )
            };
            same32(
                add_f32(a, b, r),
                ap32(a).add_r(ap32(b), m).value,
                &ctx("add"),
            );
            same32(
                sub_f32(a, b, r),
                ap32(a).sub_r(ap32(b), m).value,
                &ctx("sub"),
            );
            same32(
                mul_f32(a, b, r),
                ap32(a).mul_r(ap32(b), m).value,
                &ctx("mul"),
            );
            same32(
                div_f32(a, b, r),
                ap32(a).div_r(ap32(b), m).value,
                &ctx("div"),
            );
            same32(
                rcp_f32(b, r),
                ap32(1.0).div_r(ap32(b), m).value,
                &ctx("rcp"),
            );
            same32(
                fma_f32(a, b, c, r),
                ap32(a).mul_add_r(ap32(b), ap32(c), m).value,
                &ctx("fma"),
            );
            // fma with c = -(a*b rounded): the exact residual decides everything.
            let c2 = -(a * b);
            same32(
                fma_f32(a, b, c2, r),
                ap32(a).mul_add_r(ap32(b), ap32(c2), m).value,
                &ctx("fma-res"),
            );
        }
    }
}

fn next_up32(x: f32) -> f32 {
    if x == 0.0 {
        f32::from_bits(1)
    } else if x > 0.0 {
        f32::from_bits(x.to_bits() + 1)
    } else {
        f32::from_bits(x.to_bits() - 1)
    }
}

/// Directed square roots checked through exact squares: `s*s` of an f32 is exact in f64.
#[test]
fn f32_sqrt_all_modes_by_exact_squares() {
    let mut rng = Rng(11);
    for i in 0..scale(300_000, 4_000_000) {
        let x = if i % 2 == 0 {
            rng.f32().abs()
        } else {
            f32::from_bits(rng.next() as u32 & 0x7fff_ffff)
        };
        if !x.is_finite() || x == 0.0 {
            continue;
        }
        let xd = f64::from(x);
        assert_eq!(sqrt_f32(x, Rnd::Rn), x.sqrt(), "{x:e}");
        let down = sqrt_f32(x, Rnd::Rm);
        assert_eq!(sqrt_f32(x, Rnd::Rz), down, "{x:e}");
        let up = sqrt_f32(x, Rnd::Rp);
        let sq = |s: f32| f64::from(s) * f64::from(s);
        assert!(
            sq(down) <= xd && sq(next_up32(down)) > xd,
            "rm {x:e} -> {down:e}"
        );
        if sq(down) == xd {
            assert_eq!(up, down, "exact {x:e}");
        } else {
            assert_eq!(up, next_up32(down), "rp {x:e}");
        }
    }
    for r in MODES {
        assert_eq!(sqrt_f32(-0.0, r).to_bits(), 0x8000_0000);
        assert_eq!(sqrt_f32(-1.0, r).to_bits(), CANONICAL_NAN_F32);
        assert_eq!(sqrt_f32(f32::INFINITY, r), f32::INFINITY);
        assert_eq!(
            sqrt_f32(f32::from_bits(0x7f80_0001), r).to_bits(),
            CANONICAL_NAN_F32
        );
    }
    // sqrt(2) = 1.41421354 (0x3fb504f3, rounded up in RN) -> rz 0x3fb504f3 - 1.
    assert_eq!(sqrt_f32(2.0, Rnd::Rn).to_bits(), 0x3fb5_04f3);
    assert_eq!(sqrt_f32(2.0, Rnd::Rz).to_bits(), 0x3fb5_04f3);
    assert_eq!(sqrt_f32(2.0, Rnd::Rp).to_bits(), 0x3fb5_04f4);
}

fn next_up64(x: f64) -> f64 {
    if x == 0.0 {
        f64::from_bits(1)
    } else if x > 0.0 {
        f64::from_bits(x.to_bits() + 1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}

fn next_down64(x: f64) -> f64 {
    -next_up64(-x)
}

/// The directed result from the round-to-nearest result `n` and the sign of the exact error
/// `exact - n`.
fn directed(n: f64, err: Ordering, r: Rnd) -> f64 {
    match (err, r) {
        (Ordering::Equal, _) | (_, Rnd::Rn) => n,
        (Ordering::Greater, Rnd::Rp) => next_up64(n),
        (Ordering::Less, Rnd::Rm) => next_down64(n),
        (Ordering::Greater, Rnd::Rz) if n < 0.0 => next_up64(n),
        (Ordering::Less, Rnd::Rz) if n > 0.0 => next_down64(n),
        _ => n,
    }
}

fn sign_of(x: f64) -> Ordering {
    x.partial_cmp(&0.0).unwrap()
}

fn two_sum_err(a: f64, b: f64, s: f64) -> f64 {
    let bb = s - a;
    (a - (s - bb)) + (b - bb)
}

/// f64 directed arithmetic against error-free transformations (away from overflow/underflow).
#[test]
fn f64_arithmetic_directed_against_error_free_transformations() {
    let mut rng = Rng(12);
    let normal = |x: f64| {
        x.is_finite() && (x == 0.0 || (x.abs() > 2f64.powi(-950) && x.abs() < 2f64.powi(1000)))
    };
    let mut checked = 0;
    for _ in 0..scale(90_000, 1_000_000) {
        let (a, b) = (rng.f64(), rng.f64());
        let b = if rng.below(4) == 0 {
            -f64::from_bits(a.to_bits() ^ rng.below(64))
        } else {
            b
        };
        if !normal(a) || !normal(b) {
            continue;
        }
        checked += 1;
        let s = a + b;
        let p = a * b;
        for r in MODES {
            if s.is_finite() && s != 0.0 {
                let e = sign_of(two_sum_err(a, b, s));
                assert_eq!(add_f64(a, b, r), directed(s, e, r), "add {a:e} {b:e} {r:?}");
                assert_eq!(
                    sub_f64(a, -b, r),
                    directed(s, e, r),
                    "sub {a:e} {b:e} {r:?}"
                );
            }
            if normal(p) && p != 0.0 {
                let e = sign_of(a.mul_add(b, -p));
                assert_eq!(mul_f64(a, b, r), directed(p, e, r), "mul {a:e} {b:e} {r:?}");
            }
            if b != 0.0 && a != 0.0 {
                let q = a / b;
                if normal(q) {
                    let rem = (-q).mul_add(b, a); // exact
                    let e = if sign_of(b) == Ordering::Greater {
                        sign_of(rem)
                    } else {
                        sign_of(rem).reverse()
                    };
                    assert_eq!(div_f64(a, b, r), directed(q, e, r), "div {a:e} {b:e} {r:?}");
                    if a == 1.0 {
                        assert_eq!(rcp_f64(b, r), directed(q, e, r));
                    }
                }
            }
        }
    }
    assert!(checked > 1000);
    // fma on f32-valued operands: the product is exact, so two_sum gives the exact error.
    for _ in 0..scale(90_000, 1_000_000) {
        let (a, b, c) = (
            f64::from(rng.f32()),
            f64::from(rng.f32()),
            f64::from(rng.f32()),
        );
        let c = if rng.below(3) == 0 {
            -(a * b) * (1.0 + f64::from(rng.below(5) as u32) * 2f64.powi(-60))
        } else {
            c
        };
        let (p, s) = (a * b, a * b + c);
        if !s.is_finite() || s == 0.0 {
            continue;
        }
        let e = sign_of(two_sum_err(p, c, s));
        for r in MODES {
            assert_eq!(
                fma_f64(a, b, c, r),
                directed(s, e, r),
                "fma {a:e} {b:e} {c:e} {r:?}"
            );
        }
    }
}

#[test]
fn f64_directed_hand_cases() {
    let tiny = f64::from_bits(1); // 2^-1074
    let third_rn = f64::from_bits(0x3fd5_5555_5555_5555); // below 1/3
    let cases: [(&str, f64, [u64; 4]); 9] = [
        ("1/3", div_f64(1.0, 3.0, Rnd::Rn), [third_rn.to_bits(); 4]),
        (
            "1+2^-60",
            0.0,
            [
                0x3ff0_0000_0000_0000,
                0x3ff0_0000_0000_0000,
                0x3ff0_0000_0000_0000,
                0x3ff0_0000_0000_0001,
            ],
        ),
        (
            "-1-2^-60",
            0.0,
            [
                0xbff0_0000_0000_0000,
                0xbff0_0000_0000_0000,
                0xbff0_0000_0000_0001,
                0xbff0_0000_0000_0000,
            ],
        ),
        (
            "max+max",
            0.0,
            [
                0x7ff0_0000_0000_0000,
                0x7fef_ffff_ffff_ffff,
                0x7fef_ffff_ffff_ffff,
                0x7ff0_0000_0000_0000,
            ],
        ),
        (
            "-max-max",
            0.0,
            [
                0xfff0_0000_0000_0000,
                0xffef_ffff_ffff_ffff,
                0xfff0_0000_0000_0000,
                0xffef_ffff_ffff_ffff,
            ],
        ),
        ("tiny*0.5", 0.0, [0, 0, 0, 1]),
        ("x-x", 0.0, [0, 0, 1 << 63, 0]),
        ("-0+-0", 0.0, [1 << 63; 4]),
        ("fma 0", 0.0, [0, 0, 1 << 63, 0]),
    ];
    for (name, _, want) in cases {
        for (r, w) in MODES.into_iter().zip(want) {
            let got = match name {
                "1/3" => {
                    // 1/3 = 0x3fd5555555555555.5...: rz/rm keep it, rp rounds up.
                    let w = if r == Rnd::Rp { w + 1 } else { w };
                    assert_eq!(div_f64(1.0, 3.0, r).to_bits(), w, "{name} {r:?}");
                    continue;
                }
                "1+2^-60" => add_f64(1.0, 2f64.powi(-60), r),
                "-1-2^-60" => sub_f64(-1.0, 2f64.powi(-60), r),
                "max+max" => add_f64(f64::MAX, f64::MAX, r),
                "-max-max" => sub_f64(-f64::MAX, f64::MAX, r),
                "tiny*0.5" => mul_f64(tiny, 0.5, r),
                "x-x" => sub_f64(1.5, 1.5, r),
                "-0+-0" => add_f64(-0.0, -0.0, r),
                _ => fma_f64(2.0, 3.0, -6.0, r),
            };
            assert_eq!(got.to_bits(), w, "{name} {r:?}");
        }
    }
    for r in MODES {
        assert_eq!(
            add_f64(f64::INFINITY, f64::NEG_INFINITY, r).to_bits(),
            CANONICAL_NAN_F64
        );
        assert_eq!(mul_f64(0.0, f64::INFINITY, r).to_bits(), CANONICAL_NAN_F64);
        assert_eq!(
            fma_f64(0.0, f64::INFINITY, 1.0, r).to_bits(),
            CANONICAL_NAN_F64
        );
        assert_eq!(div_f64(0.0, 0.0, r).to_bits(), CANONICAL_NAN_F64);
        assert_eq!(div_f64(1.0, -0.0, r), f64::NEG_INFINITY);
        assert_eq!(sqrt_f64(-2.0, r).to_bits(), CANONICAL_NAN_F64);
        assert_eq!(sqrt_f64(-0.0, r).to_bits(), 1 << 63);
        assert_eq!(
            fma_f64(f64::MAX, 2.0, f64::NEG_INFINITY, r),
            f64::NEG_INFINITY
        );
        assert_eq!(
            add_f64(f64::from_bits(0x7ff0_0000_0000_0001), 1.0, r).to_bits(),
            CANONICAL_NAN_F64
        );
    }
    // Subnormal results of fma: 2^-1074 * 0.75 + 0 lies between 0 and the smallest subnormal.
    assert_eq!(fma_f64(tiny, 0.75, 0.0, Rnd::Rn).to_bits(), 1);
    assert_eq!(fma_f64(tiny, 0.75, 0.0, Rnd::Rz).to_bits(), 0);
    assert_eq!(fma_f64(-tiny, 0.75, -0.0, Rnd::Rp).to_bits(), 1 << 63);
    assert_eq!(fma_f64(-tiny, 0.75, -0.0, Rnd::Rm).to_bits(), (1 << 63) | 1);
}

/// General f64 fma in directed modes: when the exact `a*b + c` fits in binary128 (the addend
/// within a few dozen binades of the product), binary128 arithmetic gives it exactly and a
/// conversion rounds it once; both are independent of apfloat's fused multiply-add.
#[test]
fn f64_fma_directed_against_exact_binary128() {
    use rustc_apfloat::Status;
    let mut rng = Rng(14);
    let mut checked = 0;
    for _ in 0..scale(60_000, 500_000) {
        let a =
            f64::from_bits((rng.next() & !(0x7ff << 52)) | ((1023 - 200 + rng.below(400)) << 52));
        let b =
            f64::from_bits((rng.next() & !(0x7ff << 52)) | ((1023 - 200 + rng.below(400)) << 52));
        let p = a * b;
        let c = match rng.below(3) {
            0 => -p, // cancellation down to the product's rounding error
            1 => -p * (1.0 + rng.below(1 << 20) as f64 * 2f64.powi(-52)),
            _ => p * (rng.below(1 << 30) as f64 * 2f64.powi(-40 - rng.below(20) as i32)),
        };
        let c = if rng.below(2) == 0 { c } else { -c };
        let prod = (quad(a) * quad(b)).value; // 106 bits: exact
        let sum = prod.add_r(quad(c), rustc_apfloat::Round::NearestTiesToEven);
        if sum.status != Status::OK || sum.value.is_zero() {
            continue; // not exact in binary128, or an exact zero (sign rules tested by hand)
        }
        checked += 1;
        for r in MODES {
            let mut lost = false;
            let want: rustc_apfloat::ieee::Double =
                sum.value.convert_r(ap_round(r), &mut lost).value;
            let got = fma_f64(a, b, c, r);
            assert_eq!(
                u128::from(got.to_bits()),
                want.to_bits(),
                "fma {a:e} {b:e} {c:e} {r:?}"
            );
        }
    }
    assert!(checked > scale(30_000, 250_000));
}

/// f64 add / mul in every mode, subnormal and overflowing results included: whenever the
/// exact result fits in binary128 (every product does), a conversion rounds it once.
#[test]
fn f64_add_mul_all_modes_against_exact_binary128() {
    use rustc_apfloat::Status;
    let mut rng = Rng(16);
    let mut checked = 0;
    for i in 0..scale(90_000, 1_000_000) {
        let (a, b) = (rng.f64(), rng.f64());
        // Push some products into the subnormal range and some sums to overflow.
        let (a, b) = match i % 4 {
            0 => (a, b * 2f64.powi(-600)),
            1 => (a, -f64::from_bits(a.to_bits() ^ rng.below(1 << 12))),
            _ => (a, b),
        };
        if !a.is_finite() || !b.is_finite() {
            continue;
        }
        let ne = rustc_apfloat::Round::NearestTiesToEven;
        let sum = quad(a).add_r(quad(b), ne);
        let prod = quad(a).mul_r(quad(b), ne);
        for r in MODES {
            let mut lost = false;
            if sum.status == Status::OK && !sum.value.is_zero() {
                let want: rustc_apfloat::ieee::Double =
                    sum.value.convert_r(ap_round(r), &mut lost).value;
                let got = add_f64(a, b, r);
                assert_eq!(
                    u128::from(got.to_bits()),
                    want.to_bits(),
                    "{a:e} + {b:e} {r:?}"
                );
                checked += 1;
            }
            if prod.status == Status::OK && !prod.value.is_zero() {
                let want: rustc_apfloat::ieee::Double =
                    prod.value.convert_r(ap_round(r), &mut lost).value;
                let got = mul_f64(a, b, r);
                assert_eq!(
                    u128::from(got.to_bits()),
                    want.to_bits(),
                    "{a:e} * {b:e} {r:?}"
                );
            }
        }
    }
    assert!(checked > scale(20_000, 200_000));
}

/// f64 division in every mode, any range: `q` is the right neighbour pair around `a / b`
/// exactly when `q*b` and `next(q)*b` (exact in binary128) bracket `a`.
#[test]
fn f64_div_all_modes_by_exact_products() {
    let mut rng = Rng(17);
    for i in 0..scale(60_000, 1_000_000) {
        let (a, b) = (rng.f64(), rng.f64());
        let b = if i % 3 == 0 { b * 2f64.powi(600) } else { b };
        if !a.is_finite() || !b.is_finite() || a == 0.0 || b == 0.0 {
            continue;
        }
        // Work with |a| / |b| > 0 and compare magnitudes; signs are checked separately.
        let (ma, mb) = (quad(a.abs()), quad(b.abs()));
        let times_b = |q: f64| (quad(q.abs()) * mb).value;
        let neg = (a < 0.0) != (b < 0.0);
        let down = div_f64(a, b, Rnd::Rz); // magnitude rounded down
        assert_eq!(down.is_sign_negative(), neg, "{a:e} / {b:e}");
        let next = f64::from_bits(down.abs().to_bits() + 1);
        if down.abs() == f64::MAX {
            assert!(times_b(down) <= ma, "{a:e} / {b:e} -> {down:e}");
        } else {
            assert!(
                times_b(down) <= ma && times_b(next) > ma,
                "{a:e} / {b:e} -> {down:e}"
            );
        }
        let exact = times_b(down) == ma;
        let up = if exact { down.abs() } else { next };
        let (toward_minus, toward_plus) = if neg {
            (up, down.abs())
        } else {
            (down.abs(), up)
        };
        let sign = |m: f64| if neg { -m } else { m };
        assert_eq!(
            div_f64(a, b, Rnd::Rm),
            sign(toward_minus),
            "{a:e} / {b:e} rm"
        );
        assert_eq!(
            div_f64(a, b, Rnd::Rp),
            sign(toward_plus),
            "{a:e} / {b:e} rp"
        );
    }
}

fn quad(x: f64) -> Quad {
    let mut lost = false;
    rustc_apfloat::ieee::Double::from_bits(u128::from(x.to_bits()))
        .convert_r(rustc_apfloat::Round::NearestTiesToEven, &mut lost)
        .value
}

/// Directed f64 square roots checked through exact squares in binary128.
#[test]
fn f64_sqrt_all_modes_by_exact_squares() {
    let mut rng = Rng(13);
    for _ in 0..scale(90_000, 500_000) {
        let x = rng.f64().abs();
        if !x.is_finite() || x == 0.0 {
            continue;
        }
        let sq = |s: f64| (quad(s) * quad(s)).value; // 106 bits: exact in binary128
        let xq = quad(x);
        assert_eq!(sqrt_f64(x, Rnd::Rn), x.sqrt(), "{x:e}");
        let down = sqrt_f64(x, Rnd::Rm);
        assert_eq!(sqrt_f64(x, Rnd::Rz), down, "{x:e}");
        let up = sqrt_f64(x, Rnd::Rp);
        assert!(
            sq(down) <= xq && sq(next_up64(down)) > xq,
            "rm {x:e} -> {down:e}"
        );
        let want_up = if sq(down) == xq {
            down
        } else {
            next_up64(down)
        };
        assert_eq!(up, want_up, "rp {x:e}");
    }
}

#[test]
fn min_max_nan_and_signed_zero() {
    let nan = f32::from_bits(0x7fc0_0001);
    let bits = |x: f32| x.to_bits();
    assert_eq!(bits(min_f32(nan, 1.0)), bits(1.0));
    assert_eq!(bits(min_f32(-2.0, nan)), bits(-2.0));
    assert_eq!(bits(max_f32(nan, -0.0)), 0x8000_0000);
    assert_eq!(bits(min_f32(nan, nan)), CANONICAL_NAN_F32);
    assert_eq!(
        bits(max_f32(nan, f32::from_bits(0xffc0_0000))),
        CANONICAL_NAN_F32
    );
    assert_eq!(bits(min_f32(0.0, -0.0)), 0x8000_0000);
    assert_eq!(bits(min_f32(-0.0, 0.0)), 0x8000_0000);
    assert_eq!(bits(max_f32(-0.0, 0.0)), 0);
    assert_eq!(bits(max_f32(0.0, -0.0)), 0);
    assert_eq!(
        bits(min_f32(f32::NEG_INFINITY, 3.0)),
        bits(f32::NEG_INFINITY)
    );
    assert_eq!(bits(max_f32(1.0, 2.0)), bits(2.0));
    assert_eq!(bits(min_nan_f32(1.0, nan)), CANONICAL_NAN_F32);
    assert_eq!(bits(max_nan_f32(nan, 1.0)), CANONICAL_NAN_F32);
    assert_eq!(bits(min_nan_f32(0.0, -0.0)), 0x8000_0000);
    assert_eq!(bits(max_nan_f32(2.0, 1.0)), bits(2.0));
    let nan64 = f64::from_bits(0xfff0_0000_0000_0001);
    assert_eq!(min_f64(nan64, 1.0), 1.0);
    assert_eq!(max_f64(1.0, nan64), 1.0);
    assert_eq!(min_f64(nan64, nan64).to_bits(), CANONICAL_NAN_F64);
    assert_eq!(min_f64(0.0, -0.0).to_bits(), 1 << 63);
    assert_eq!(max_f64(-0.0, 0.0).to_bits(), 0);
    assert_eq!(max_f64(-3.0, -4.0), -3.0);
}

#[test]
fn ftz_sat_testp_copysign() {
    assert_eq!(ftz_f32(f32::from_bits(0x8000_0001)).to_bits(), 0x8000_0000);
    assert_eq!(ftz_f32(f32::from_bits(0x007f_ffff)).to_bits(), 0);
    assert_eq!(ftz_f32(f32::from_bits(0x0080_0000)).to_bits(), 0x0080_0000);
    assert_eq!(ftz_f32(f32::from_bits(0x7fc0_0001)).to_bits(), 0x7fc0_0001);
    for (x, want) in [
        (f32::NAN, 0.0f32),
        (-0.0, 0.0),
        (-1e-30, 0.0),
        (0.25, 0.25),
        (1.5, 1.0),
        (f32::INFINITY, 1.0),
    ] {
        assert_eq!(sat_f32(x).to_bits(), want.to_bits(), "{x}");
        assert_eq!(
            sat_f64(f64::from(x)).to_bits(),
            f64::from(want).to_bits(),
            "{x}"
        );
    }
    use TestClass::*;
    let classes = [Finite, Infinite, Number, NotANumber, Normal, Subnormal];
    // The PTX ISA counts +0 and -0 as normal numbers.
    let table: [(f32, [bool; 6]); 7] = [
        (0.0, [true, false, true, false, true, false]),
        (-0.0, [true, false, true, false, true, false]),
        (-1.0, [true, false, true, false, true, false]),
        (f32::from_bits(1), [true, false, true, false, false, true]),
        (f32::NEG_INFINITY, [false, true, true, false, false, false]),
        (f32::NAN, [false, false, false, true, false, false]),
        (f32::MAX, [true, false, true, false, true, false]),
    ];
    for (x, want) in table {
        for (c, w) in classes.into_iter().zip(want) {
            assert_eq!(testp_f32(x, c), w, "{x:e} {c:?}");
            // Widened to f64, the f32 subnormal is normal.
            let w64 = match c {
                Normal | Subnormal if x.is_subnormal() => c == Normal,
                _ => w,
            };
            assert_eq!(testp_f64(f64::from(x), c), w64, "{x:e} {c:?}");
        }
    }
    assert!(testp_f64(f64::from_bits(1), Subnormal));
    // copysign d, a, b: magnitude of b, sign of a.
    assert_eq!(copysign_f32(-1.0, 2.0), -2.0);
    assert_eq!(copysign_f32(1.0, -2.0), 2.0);
    assert_eq!(
        copysign_f32(-0.0, f32::from_bits(0x7fc0_0001)).to_bits(),
        0xffc0_0001
    );
    assert_eq!(copysign_f64(-3.0, 0.5), -0.5);
    assert_eq!(copysign_f64(3.0, -0.5), 0.5);
}

#[test]
fn approx_functions_special_values_and_accuracy() {
    let bits = |x: f32| x.to_bits();
    assert_eq!(ex2_approx_f32(f32::NEG_INFINITY), 0.0);
    assert_eq!(ex2_approx_f32(f32::INFINITY), f32::INFINITY);
    assert_eq!(ex2_approx_f32(10.0), 1024.0);
    assert_eq!(ex2_approx_f32(-149.0).to_bits(), 1);
    assert_eq!(lg2_approx_f32(0.0), f32::NEG_INFINITY);
    assert_eq!(lg2_approx_f32(-0.0), f32::NEG_INFINITY);
    assert_eq!(bits(lg2_approx_f32(-1.0)), CANONICAL_NAN_F32);
    assert_eq!(lg2_approx_f32(f32::from_bits(1)), -149.0);
    assert_eq!(bits(sin_approx_f32(-0.0)), 0x8000_0000);
    assert_eq!(bits(sin_approx_f32(f32::INFINITY)), CANONICAL_NAN_F32);
    assert_eq!(bits(cos_approx_f32(f32::NEG_INFINITY)), CANONICAL_NAN_F32);
    assert_eq!(cos_approx_f32(0.0), 1.0);
    assert_eq!(rsqrt_approx_f32(-0.0), f32::NEG_INFINITY);
    assert_eq!(bits(rsqrt_approx_f32(f32::INFINITY)), 0);
    assert_eq!(rsqrt_approx_f32(0.25), 2.0);
    assert_eq!(bits(rsqrt_approx_f32(-4.0)), CANONICAL_NAN_F32);
    assert_eq!(rcp_approx_f32(-0.0), f32::NEG_INFINITY);
    assert_eq!(sqrt_approx_f32(16.0), 4.0);
    assert_eq!(tanh_approx_f32(f32::NEG_INFINITY), -1.0);
    assert_eq!(bits(tanh_approx_f32(-0.0)), 0x8000_0000);
    assert_eq!(div_full_f32(1.0, 4.0), 0.25);
    assert_eq!(div_approx_f32(1.0, 2f32.powi(127)), 0.0);
    assert_eq!(bits(div_approx_f32(-1.0, 2f32.powi(127))), 0x8000_0000);
    assert_eq!(
        bits(div_approx_f32(f32::INFINITY, 2f32.powi(127))),
        CANONICAL_NAN_F32
    );
    assert_eq!(div_approx_f32(3.0, 2f32.powi(126)), 3.0 * 2f32.powi(-126));
    assert_eq!(rsqrt_approx_f64(4.0), 0.5);
    assert_eq!(rcp_approx_ftz_f64(f64::from_bits(1)), f64::INFINITY);
    assert_eq!(rcp_approx_ftz_f64(-f64::MAX).to_bits(), 1 << 63);
    assert_eq!(ex2_approx_f16(0x4000), 0x4400); // 2^2 = 4
    assert_eq!(ex2_approx_bf16(0xc000), 0x3e80); // 2^-2 = 0.25
    assert_eq!(tanh_approx_f16(0xfc00), 0xbc00); // tanh(-inf) = -1
    assert_eq!(tanh_approx_bf16(0x7fc0), 0x7fff);
    // Within 1 ulp of values computed independently (decimal constants).
    let close =
        |got: f32, want: f64| (f64::from(got) - want).abs() <= f64::from(f32::EPSILON) * want.abs();
    assert!(close(ex2_approx_f32(0.5), std::f64::consts::SQRT_2));
    assert!(close(lg2_approx_f32(10.0), std::f64::consts::LOG2_10));
    assert!(close(sin_approx_f32(1.0), 0.841_470_984_807_896_5));
    assert!(close(cos_approx_f32(1.0), 0.540_302_305_868_139_8));
    assert!(close(tanh_approx_f32(0.5), 0.462_117_157_260_009_76));
    assert!(close(
        rsqrt_approx_f32(2.0),
        std::f64::consts::FRAC_1_SQRT_2
    ));
}

/// Random bit patterns (every class) through every f32/f64 function in every mode: nothing
/// panics and every NaN result is the canonical NaN.
#[test]
fn f32_f64_nan_results_are_canonical() {
    let mut rng = Rng(15);
    let c32 = |x: f32| !x.is_nan() || x.to_bits() == CANONICAL_NAN_F32;
    let c64 = |x: f64| !x.is_nan() || x.to_bits() == CANONICAL_NAN_F64;
    for _ in 0..scale(15_000, 200_000) {
        let (a, b, c) = (rng.f32(), rng.f32(), rng.f32());
        let (x, y, z) = (rng.f64(), rng.f64(), rng.f64());
        for r in MODES {
            let r32 = [
                add_f32(a, b, r),
                sub_f32(a, b, r),
                mul_f32(a, b, r),
                div_f32(a, b, r),
                fma_f32(a, b, c, r),
                sqrt_f32(a, r),
                rcp_f32(a, r),
                f64_to_f32(x, r),
                int_to_f32(x.to_bits() as i64 as i128, r),
            ];
            for (i, v) in r32.into_iter().enumerate() {
                assert!(
                    c32(v),
                    "fn {i}: {a:e} {b:e} {c:e} {x:e} {r:?} -> {:#x}",
                    v.to_bits()
                );
            }
            let r64 = [
                add_f64(x, y, r),
                sub_f64(x, y, r),
                mul_f64(x, y, r),
                div_f64(x, y, r),
                fma_f64(x, y, z, r),
                sqrt_f64(x, r),
                rcp_f64(x, r),
            ];
            assert!(r64.into_iter().all(c64), "{x:e} {y:e} {z:e} {r:?}");
        }
        let approx = [
            ex2_approx_f32(a),
            lg2_approx_f32(a),
            sin_approx_f32(a),
            cos_approx_f32(a),
            rsqrt_approx_f32(a),
            rcp_approx_f32(a),
            sqrt_approx_f32(a),
            tanh_approx_f32(a),
            div_full_f32(a, b),
            div_approx_f32(a, b),
            min_f32(a, b),
            max_nan_f32(a, b),
            round_f32(a, IRnd::Rni),
            f16_to_f32(a.to_bits() as u16),
            bf16_to_f32(a.to_bits() as u16),
        ];
        assert!(approx.into_iter().all(c32), "{a:e} {b:e}");
        let approx64 = [
            rsqrt_approx_f64(x),
            rcp_approx_ftz_f64(x),
            min_f64(x, y),
            round_f64(x, IRnd::Rmi),
            f32_to_f64(a),
        ];
        assert!(approx64.into_iter().all(c64), "{x:e} {y:e}");
        let _ = float_to_int(x, IRnd::Rpi, rng.below(2) == 0, 1 + rng.below(64) as u32);
    }
}
