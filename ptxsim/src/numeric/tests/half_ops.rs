use super::super::*;
use super::{ap_round, scale, HalfTable, Rng, MODES};
use rustc_apfloat::ieee::{BFloat, Half};
use rustc_apfloat::Float;

fn same<F: Float>(got: u16, want: F, nan: u16, what: &str) {
    if want.is_nan() {
        assert_eq!(got, nan, "{what}");
    } else {
        assert_eq!(u128::from(got), want.to_bits(), "{what}: got {got:#06x}");
    }
}

/// Operand pairs that reach every class: uniform bit patterns, near-cancelling pairs and
/// nearby values (ties and exact results).
fn operands(rng: &mut Rng) -> (u16, u16, u16) {
    let a = rng.next() as u16;
    let b = match rng.below(4) {
        0 => a ^ 0x8000 ^ (rng.below(8) as u16),
        1 => a.wrapping_add(rng.below(2048) as u16),
        _ => rng.next() as u16,
    };
    (a, b, rng.next() as u16)
}

#[test]
fn f16_arithmetic_all_modes_against_apfloat() {
    let mut rng = Rng(20);
    let h = |x: u16| Half::from_bits(u128::from(x));
    for _ in 0..scale(30_000, 1_000_000) {
        let (a, b, c) = operands(&mut rng);
        for r in MODES {
            let m = ap_round(r);
            let ctx = |op: &str| format!("{op} {a:#06x} {b:#06x} {c:#06x} {r:?}");
            same(
                add_f16(a, b, r),
                h(a).add_r(h(b), m).value,
                CANONICAL_NAN_F16,
                &ctx("add"),
            );
            same(
                sub_f16(a, b, r),
                h(a).sub_r(h(b), m).value,
                CANONICAL_NAN_F16,
                &ctx("sub"),
            );
            same(
                mul_f16(a, b, r),
                h(a).mul_r(h(b), m).value,
                CANONICAL_NAN_F16,
                &ctx("mul"),
            );
            same(
                fma_f16(a, b, c, r),
                h(a).mul_add_r(h(b), h(c), m).value,
                CANONICAL_NAN_F16,
                &ctx("fma"),
            );
        }
    }
}

#[test]
fn bf16_arithmetic_all_modes_against_apfloat() {
    let mut rng = Rng(21);
    let h = |x: u16| BFloat::from_bits(u128::from(x));
    for _ in 0..scale(30_000, 1_000_000) {
        let (a, b, c) = operands(&mut rng);
        for r in MODES {
            let m = ap_round(r);
            let ctx = |op: &str| format!("{op} {a:#06x} {b:#06x} {c:#06x} {r:?}");
            same(
                add_bf16(a, b, r),
                h(a).add_r(h(b), m).value,
                CANONICAL_NAN_BF16,
                &ctx("add"),
            );
            same(
                sub_bf16(a, b, r),
                h(a).sub_r(h(b), m).value,
                CANONICAL_NAN_BF16,
                &ctx("sub"),
            );
            same(
                mul_bf16(a, b, r),
                h(a).mul_r(h(b), m).value,
                CANONICAL_NAN_BF16,
                &ctx("mul"),
            );
            same(
                fma_bf16(a, b, c, r),
                h(a).mul_add_r(h(b), h(c), m).value,
                CANONICAL_NAN_BF16,
                &ctx("fma"),
            );
        }
    }
}

/// f16 sums and products are exact in f64, so the value table rounds them independently.
#[test]
fn f16_add_mul_against_table() {
    let table = HalfTable::f16();
    let mut rng = Rng(22);
    let v = |x: u16| ::half::f16::from_bits(x).to_f64();
    for _ in 0..scale(150_000, 2_000_000) {
        let (a, b, _) = operands(&mut rng);
        let (x, y) = (v(a), v(b));
        if !x.is_finite() || !y.is_finite() {
            continue;
        }
        for r in MODES {
            let (s, p) = (x + y, x * y);
            if s != 0.0 {
                assert_eq!(
                    add_f16(a, b, r),
                    table.round(s, r),
                    "{a:#06x} + {b:#06x} {r:?}"
                );
            }
            if p != 0.0 {
                assert_eq!(
                    mul_f16(a, b, r),
                    table.round(p, r),
                    "{a:#06x} * {b:#06x} {r:?}"
                );
            }
        }
    }
}

#[test]
fn half_hand_cases() {
    // 1 + 2^-11 is the tie between 1 (0x3c00) and 1 + 2^-10 (0x3c01): even wins in .rn.
    let one = 0x3c00;
    let half_ulp = 0x1000; // 2^-11
    assert_eq!(add_f16(one, half_ulp, Rnd::Rn), 0x3c00);
    assert_eq!(add_f16(one, half_ulp, Rnd::Rp), 0x3c01);
    assert_eq!(add_f16(0x3c01, half_ulp, Rnd::Rn), 0x3c02);
    // x - x is +0, or -0 when rounding down.
    assert_eq!(sub_f16(0x4200, 0x4200, Rnd::Rn), 0x0000);
    assert_eq!(sub_f16(0x4200, 0x4200, Rnd::Rm), 0x8000);
    assert_eq!(add_f16(0x8000, 0x8000, Rnd::Rn), 0x8000);
    // 65504 + 16 overflows in .rn, saturates in .rz.
    assert_eq!(add_f16(0x7bff, 0x4c00, Rnd::Rn), 0x7c00);
    assert_eq!(add_f16(0x7bff, 0x4c00, Rnd::Rz), 0x7bff);
    assert_eq!(add_f16(0x7c00, 0xfc00, Rnd::Rn), CANONICAL_NAN_F16);
    assert_eq!(mul_f16(0x0000, 0x7c00, Rnd::Rn), CANONICAL_NAN_F16);
    assert_eq!(mul_f16(0x0001, 0x3800, Rnd::Rn), 0x0000); // 2^-25: tie to even zero
    assert_eq!(mul_f16(0x0001, 0x3800, Rnd::Rp), 0x0001);
    assert_eq!(mul_f16(0x8001, 0x3800, Rnd::Rm), 0x8001);
    // fma single rounding: (1 + 2^-10)^2 - 1 = 2^-9 + 2^-20 exactly, half an ulp above 2^-9
    // (0x1800). Rounding the product first in .rp would give 3 * 2^-10 (0x1a00) instead.
    assert_eq!(fma_f16(0x3c01, 0x3c01, 0xbc00, Rnd::Rn), 0x1800);
    assert_eq!(fma_f16(0x3c01, 0x3c01, 0xbc00, Rnd::Rp), 0x1801);
    assert_eq!(fma_f16(0x3c01, 0x3c01, 0xbc00, Rnd::Rz), 0x1800);
    assert_eq!(fma_f16(0x7e00, 0x3c00, 0x3c00, Rnd::Rn), CANONICAL_NAN_F16);
    // bf16: 1 + 2^-8 is a tie between 0x3f80 and 0x3f81.
    assert_eq!(add_bf16(0x3f80, 0x3b80, Rnd::Rn), 0x3f80);
    assert_eq!(add_bf16(0x3f80, 0x3b80, Rnd::Rp), 0x3f81);
    assert_eq!(add_bf16(0x7f7f, 0x7f7f, Rnd::Rz), 0x7f7f);
    assert_eq!(add_bf16(0x7f7f, 0x7f7f, Rnd::Rn), 0x7f80);
    // bf16 sum with a far smaller operand: only its sign matters (sticky).
    assert_eq!(add_bf16(0x3f80, 0x0001, Rnd::Rp), 0x3f81);
    assert_eq!(add_bf16(0x3f80, 0x8001, Rnd::Rz), 0x3f7f);
    assert_eq!(add_bf16(0x3f80, 0x8001, Rnd::Rn), 0x3f80);
}

#[test]
fn half_min_max_neg_abs_sat_ftz() {
    let nan = 0x7e01;
    assert_eq!(min_f16(nan, 0x3c00), 0x3c00);
    assert_eq!(max_f16(0xbc00, nan), 0xbc00);
    assert_eq!(min_f16(nan, 0xfe00), CANONICAL_NAN_F16);
    assert_eq!(min_f16(0x0000, 0x8000), 0x8000);
    assert_eq!(min_f16(0x8000, 0x0000), 0x8000);
    assert_eq!(max_f16(0x8000, 0x0000), 0x0000);
    assert_eq!(max_f16(0x0000, 0x8000), 0x0000);
    assert_eq!(min_f16(0x4000, 0x3c00), 0x3c00);
    assert_eq!(max_f16(0xc000, 0xbc00), 0xbc00);
    assert_eq!(min_nan_f16(0x3c00, nan), CANONICAL_NAN_F16);
    assert_eq!(max_nan_f16(0x3c00, 0x4000), 0x4000);
    assert_eq!(min_bf16(0x7fc1, 0x3f80), 0x3f80);
    assert_eq!(max_bf16(0x0000, 0x8000), 0x0000);
    assert_eq!(min_bf16(0x0000, 0x8000), 0x8000);
    assert_eq!(max_nan_bf16(0xffc0, 0x3f80), CANONICAL_NAN_BF16);
    assert_eq!(min_nan_bf16(0xbf80, 0x3f80), 0xbf80);
    assert_eq!(neg_f16(0x3c00), 0xbc00);
    assert_eq!(neg_f16(0x8000), 0x0000);
    assert_eq!(neg_f16(0x7e00), CANONICAL_NAN_F16);
    assert_eq!(abs_f16(0xfc00), 0x7c00);
    assert_eq!(abs_f16(0xfe00), CANONICAL_NAN_F16);
    assert_eq!(neg_bf16(0x3f80), 0xbf80);
    assert_eq!(abs_bf16(0xbf80), 0x3f80);
    assert_eq!(abs_bf16(0xff81), CANONICAL_NAN_BF16);
    for (x, want) in [
        (0x7e00u16, 0x0000u16),
        (0x8000, 0x0000),
        (0xbc00, 0x0000),
        (0x3800, 0x3800),
        (0x4000, 0x3c00),
        (0x7c00, 0x3c00),
    ] {
        assert_eq!(sat_f16(x), want, "{x:#06x}");
    }
    for (x, want) in [
        (0x7fc0u16, 0x0000u16),
        (0x8000, 0x0000),
        (0x3f00, 0x3f00),
        (0x4000, 0x3f80),
    ] {
        assert_eq!(sat_bf16(x), want, "{x:#06x}");
    }
    assert_eq!(ftz_f16(0x83ff), 0x8000);
    assert_eq!(ftz_f16(0x0400), 0x0400);
    assert_eq!(ftz_f16(0x0001), 0x0000);
    assert_eq!(ftz_bf16(0x807f), 0x8000);
    assert_eq!(ftz_bf16(0x0080), 0x0080);
}

/// Every 16-bit pattern through every unary half function (none may panic), and NaN results
/// are always the canonical NaN (`ftz`, an operand filter, passes NaNs through unchanged).
#[test]
fn unary_half_functions_take_every_pattern() {
    let is_nan16 = |h: u16| h & 0x7fff > 0x7c00;
    let is_nan_b = |h: u16| h & 0x7fff > 0x7f80;
    for h in 0..=u16::MAX {
        let f16_results = [
            neg_f16(h),
            abs_f16(h),
            sat_f16(h),
            relu_f16(h),
            satfinite_f16(h),
            round_f16(h, IRnd::Rni),
            ex2_approx_f16(h),
            tanh_approx_f16(h),
            bf16_to_f16(h, Rnd::Rz),
        ];
        for (i, v) in f16_results.into_iter().enumerate() {
            assert!(
                !is_nan16(v) || v == CANONICAL_NAN_F16,
                "f16 fn {i} of {h:#06x} gave {v:#06x}"
            );
        }
        let bf16_results = [
            neg_bf16(h),
            abs_bf16(h),
            sat_bf16(h),
            relu_bf16(h),
            satfinite_bf16(h),
            round_bf16(h, IRnd::Rpi),
            ex2_approx_bf16(h),
            tanh_approx_bf16(h),
            f16_to_bf16(h, Rnd::Rp),
        ];
        for (i, v) in bf16_results.into_iter().enumerate() {
            assert!(
                !is_nan_b(v) || v == CANONICAL_NAN_BF16,
                "bf16 fn {i} of {h:#06x} gave {v:#06x}"
            );
        }
        assert_eq!(ftz_f16(h), if h & 0x7c00 == 0 { h & 0x8000 } else { h });
        assert_eq!(ftz_bf16(h), if h & 0x7f80 == 0 { h & 0x8000 } else { h });
        let as_int = float_to_int(f16_to_f64(h), IRnd::Rni, true, 8);
        assert!(as_int as i64 >= -128 && as_int as i64 <= 127);
    }
}

/// Random bit patterns through the binary and ternary half operations: NaN results must be
/// canonical, min/max must return one of their operands (or the canonical NaN).
#[test]
fn binary_half_functions_nan_results_are_canonical() {
    let mut rng = Rng(23);
    for _ in 0..scale(60_000, 1_000_000) {
        let (a, b, c) = (rng.next() as u16, rng.next() as u16, rng.next() as u16);
        for r in MODES {
            for v in [
                add_f16(a, b, r),
                sub_f16(a, b, r),
                mul_f16(a, b, r),
                fma_f16(a, b, c, r),
            ] {
                assert!(v & 0x7fff <= 0x7c00 || v == CANONICAL_NAN_F16);
            }
            for v in [
                add_bf16(a, b, r),
                sub_bf16(a, b, r),
                mul_bf16(a, b, r),
                fma_bf16(a, b, c, r),
            ] {
                assert!(v & 0x7fff <= 0x7f80 || v == CANONICAL_NAN_BF16);
            }
        }
        for v in [
            min_f16(a, b),
            max_f16(a, b),
            min_nan_f16(a, b),
            max_nan_f16(a, b),
        ] {
            assert!(v == a || v == b || v == CANONICAL_NAN_F16);
        }
        for v in [
            min_bf16(a, b),
            max_bf16(a, b),
            min_nan_bf16(a, b),
            max_nan_bf16(a, b),
        ] {
            assert!(v == a || v == b || v == CANONICAL_NAN_BF16);
        }
    }
}
