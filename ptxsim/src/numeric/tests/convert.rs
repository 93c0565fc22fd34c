use super::super::*;
use super::{ap_round, scale, HalfTable, Rng, MODES};
use rustc_apfloat::ieee::{BFloat, Double, Half, Single};
use rustc_apfloat::{Float, FloatConvert};

fn f16_ref(h: u16) -> f32 {
    ::half::f16::from_bits(h).to_f32()
}

#[test]
fn f16_to_f32_and_f64_every_pattern() {
    for h in 0..=u16::MAX {
        let want = f16_ref(h);
        let got = f16_to_f32(h);
        let got64 = f16_to_f64(h);
        if want.is_nan() {
            assert_eq!(got.to_bits(), CANONICAL_NAN_F32, "f16 {h:#06x}");
            assert_eq!(got64.to_bits(), CANONICAL_NAN_F64, "f16 {h:#06x}");
        } else {
            assert_eq!(got.to_bits(), want.to_bits(), "f16 {h:#06x}");
            let want64 = ::half::f16::from_bits(h).to_f64();
            assert_eq!(got64.to_bits(), want64.to_bits(), "f16 {h:#06x}");
        }
    }
}

#[test]
fn bf16_to_f32_and_f64_every_pattern() {
    for h in 0..=u16::MAX {
        let want = ::half::bf16::from_bits(h).to_f32();
        let got = bf16_to_f32(h);
        let got64 = bf16_to_f64(h);
        if want.is_nan() {
            assert_eq!(got.to_bits(), CANONICAL_NAN_F32, "bf16 {h:#06x}");
            assert_eq!(got64.to_bits(), CANONICAL_NAN_F64, "bf16 {h:#06x}");
        } else {
            assert_eq!(got.to_bits(), want.to_bits(), "bf16 {h:#06x}");
            assert_eq!(got64, f64::from(want), "bf16 {h:#06x}");
        }
    }
}

#[test]
fn half_round_trips_are_exact_in_every_mode() {
    for h in 0..=u16::MAX {
        for r in MODES {
            let f16_nan = f16_ref(h).is_nan();
            let want = if f16_nan { CANONICAL_NAN_F16 } else { h };
            assert_eq!(f32_to_f16(f16_to_f32(h), r), want, "f16 {h:#06x} {r:?}");
            assert_eq!(f64_to_f16(f16_to_f64(h), r), want, "f16 {h:#06x} {r:?}");
            let bf_nan = ::half::bf16::from_bits(h).is_nan();
            let want = if bf_nan { CANONICAL_NAN_BF16 } else { h };
            assert_eq!(f32_to_bf16(bf16_to_f32(h), r), want, "bf16 {h:#06x} {r:?}");
            assert_eq!(f64_to_bf16(bf16_to_f64(h), r), want, "bf16 {h:#06x} {r:?}");
        }
    }
}

/// A non-negative `x` and its `f32` neighbours (no NaN from wrapping below zero).
fn f32_neighbours(x: f32) -> [f32; 3] {
    let b = x.to_bits();
    [
        x,
        f32::from_bits(b + 1),
        f32::from_bits(b.saturating_sub(1)),
    ]
}

/// Every f16 value, every midpoint between neighbours, and the f32 values either side of them,
/// in all four modes, against the value table (and the `half` crate for `.rn`).
#[test]
fn f32_to_f16_at_every_boundary_and_midpoint() {
    let table = HalfTable::f16();
    for h in 0u16..0x7c00 {
        let v = f16_ref(h);
        let next = f16_ref(h + 1); // 0x7bff + 1 is +inf
        let mid = if next.is_finite() {
            (v + next) / 2.0
        } else {
            65520.0
        };
        for x in f32_neighbours(v).into_iter().chain(f32_neighbours(mid)) {
            for x in [x, -x] {
                for r in MODES {
                    let got = f32_to_f16(x, r);
                    assert_eq!(
                        got,
                        table.round(f64::from(x), r),
                        "{x:e} ({:#x}) {r:?}",
                        x.to_bits()
                    );
                }
                assert_eq!(
                    f32_to_f16(x, Rnd::Rn),
                    ::half::f16::from_f32(x).to_bits(),
                    "{x:e}"
                );
            }
        }
    }
}

#[test]
fn f32_to_bf16_at_every_boundary_and_midpoint() {
    let table = HalfTable::bf16();
    for h in 0u16..0x7f80 {
        let v = bf16_to_f32(h);
        let next = bf16_to_f32(h + 1);
        // The midpoint above the largest finite bf16 is 2^128 - 2^119, which f32 cannot hold:
        // check its two f32 neighbours instead.
        let mid = if next.is_finite() {
            ((f64::from(v) + f64::from(next)) / 2.0) as f32 // 9 bits: exact
        } else {
            f32::MAX
        };
        for x in f32_neighbours(v).into_iter().chain(f32_neighbours(mid)) {
            for x in [x, -x] {
                for r in MODES {
                    let got = f32_to_bf16(x, r);
                    assert_eq!(
                        got,
                        table.round(f64::from(x), r),
                        "{x:e} ({:#x}) {r:?}",
                        x.to_bits()
                    );
                }
                assert_eq!(
                    f32_to_bf16(x, Rnd::Rn),
                    ::half::bf16::from_f32(x).to_bits(),
                    "{x:e}"
                );
            }
        }
    }
}

/// A strided sweep over all 2^32 `f32` patterns (every pattern when `PTXSIM_FULL_SWEEP` is
/// set: about 3 minutes in release), `.rn` against the `half` crate, directed modes against
/// `rustc_apfloat`'s conversion on a subset.
#[test]
fn f32_to_half_strided_sweep() {
    let full = std::env::var_os("PTXSIM_FULL_SWEEP").is_some();
    let stride: u64 = if full { 1 } else { scale(2047, 61) as u64 };
    let subset = if full { 4096 } else { 64 };
    let mut bits = 0u64;
    let mut n = 0u64;
    while bits <= u64::from(u32::MAX) {
        let x = f32::from_bits(bits as u32);
        let h = f32_to_f16(x, Rnd::Rn);
        let b = f32_to_bf16(x, Rnd::Rn);
        if x.is_nan() {
            assert_eq!((h, b), (CANONICAL_NAN_F16, CANONICAL_NAN_BF16), "{bits:#x}");
        } else {
            assert_eq!(h, ::half::f16::from_f32(x).to_bits(), "{bits:#x}");
            assert_eq!(b, ::half::bf16::from_f32(x).to_bits(), "{bits:#x}");
            if n & (subset - 1) == 0 {
                for r in MODES {
                    let mut lost = false;
                    let hr: Half = Single::from_bits(u128::from(bits))
                        .convert_r(ap_round(r), &mut lost)
                        .value;
                    let br: BFloat = Single::from_bits(u128::from(bits))
                        .convert_r(ap_round(r), &mut lost)
                        .value;
                    assert_eq!(
                        u128::from(f32_to_f16(x, r)),
                        hr.to_bits(),
                        "{bits:#x} {r:?}"
                    );
                    assert_eq!(
                        u128::from(f32_to_bf16(x, r)),
                        br.to_bits(),
                        "{bits:#x} {r:?}"
                    );
                }
            }
        }
        n += 1;
        bits += stride;
    }
    assert!(n > 1_000_000);
}

/// `f64` sources: one rounding straight to the half format (no double rounding through f32).
#[test]
fn f64_to_half_directed_against_table() {
    let (t16, tb16) = (HalfTable::f16(), HalfTable::bf16());
    let mut rng = Rng(1);
    for i in 0..scale(300_000, 2_000_000) {
        // Values around f16 midpoints, nudged by a few f64 ulps, and random values in range.
        let x = if i % 2 == 0 {
            let h = rng.below(0x7c00) as u16;
            let mid = (f16_ref(h) as f64 + f16_ref(h + 1).min(65536.0) as f64) / 2.0;
            let nudge = rng.below(7) as i64 - 3;
            let x = f64::from_bits((mid.to_bits() as i64 + nudge) as u64);
            if rng.below(2) == 0 {
                -x
            } else {
                x
            }
        } else {
            let e = 1023 - 30 + rng.below(48);
            f64::from_bits((rng.next() & (1 << 63)) | (e << 52) | (rng.next() >> 12))
        };
        for r in MODES {
            assert_eq!(f64_to_f16(x, r), t16.round(x, r), "{x:e} {r:?}");
        }
        let xb = f64::from_bits(x.to_bits().wrapping_add(rng.below(1 << 40) << 20));
        let xb = if xb.is_finite() { xb } else { x };
        for r in MODES {
            assert_eq!(f64_to_bf16(xb, r), tb16.round(xb, r), "{xb:e} {r:?}");
        }
    }
    // A value a hair above an f16 tie: through f32 it would round to the tie and then to even.
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    assert_eq!(f64_to_f16(x, Rnd::Rn), 0x3c01);
    assert_eq!(f32_to_f16(x as f32, Rnd::Rn), 0x3c00);
}

#[test]
fn f64_to_f32_all_modes_against_apfloat() {
    let mut rng = Rng(2);
    for _ in 0..scale(300_000, 3_000_000) {
        let x = rng.f64();
        let x = if rng.below(2) == 0 {
            x
        } else {
            x * 2f64.powi(-970)
        }; // reach f32 range
        for r in MODES {
            let got = f64_to_f32(x, r);
            let mut lost = false;
            let want: Single = Double::from_bits(u128::from(x.to_bits()))
                .convert_r(ap_round(r), &mut lost)
                .value;
            if x.is_nan() {
                assert_eq!(got.to_bits(), CANONICAL_NAN_F32);
            } else {
                assert_eq!(u128::from(got.to_bits()), want.to_bits(), "{x:e} {r:?}");
            }
        }
        if !x.is_nan() {
            assert_eq!(
                f64_to_f32(x, Rnd::Rn).to_bits(),
                (x as f32).to_bits(),
                "{x:e}"
            );
        }
    }
}

/// Overflow and underflow by mode, bit patterns written out.
#[test]
fn half_overflow_and_underflow_by_mode() {
    // f16: max 65504 = 0x7bff, inf 0x7c00; the RN overflow threshold is 65520.
    let cases: [(f32, [u16; 4]); 8] = [
        (65519.0, [0x7bff, 0x7bff, 0x7bff, 0x7c00]),
        (65520.0, [0x7c00, 0x7bff, 0x7bff, 0x7c00]),
        (1e6, [0x7c00, 0x7bff, 0x7bff, 0x7c00]),
        (-1e6, [0xfc00, 0xfbff, 0xfc00, 0xfbff]),
        (f32::INFINITY, [0x7c00; 4]),
        // 2^-25 is half the smallest subnormal 2^-24: a tie that goes to even (zero).
        (2f32.powi(-25), [0x0000, 0x0000, 0x0000, 0x0001]),
        (-2f32.powi(-25) * 1.5, [0x8001, 0x8000, 0x8001, 0x8000]),
        (-1e-30, [0x8000, 0x8000, 0x8001, 0x8000]),
    ];
    for (x, want) in cases {
        for (r, w) in MODES.into_iter().zip(want) {
            assert_eq!(f32_to_f16(x, r), w, "{x:e} {r:?}");
        }
    }
    // bf16: max 0x7f7f, inf 0x7f80, smallest subnormal 0x0001 = 2^-133.
    let cases: [(f32, [u16; 4]); 5] = [
        (f32::MAX, [0x7f80, 0x7f7f, 0x7f7f, 0x7f80]),
        (-f32::MAX, [0xff80, 0xff7f, 0xff80, 0xff7f]),
        (
            f32::from_bits(0x3f80_8000),
            [0x3f80, 0x3f80, 0x3f80, 0x3f81],
        ), // tie, even below
        (
            f32::from_bits(0x3f81_8000),
            [0x3f82, 0x3f81, 0x3f81, 0x3f82],
        ), // tie, even above
        (
            f32::from_bits(0x0000_0001),
            [0x0000, 0x0000, 0x0000, 0x0001],
        ),
    ];
    for (x, want) in cases {
        for (r, w) in MODES.into_iter().zip(want) {
            assert_eq!(f32_to_bf16(x, r), w, "{x:e} {r:?}");
        }
    }
    // f64 -> f32: f32::MAX + half an ulp is the RN overflow threshold.
    let thr = f64::from(f32::MAX) + 2f64.powi(103);
    assert_eq!(f64_to_f32(thr, Rnd::Rn), f32::INFINITY);
    assert_eq!(f64_to_f32(thr, Rnd::Rz), f32::MAX);
    assert_eq!(f64_to_f32(-thr, Rnd::Rp), -f32::MAX);
    assert_eq!(f64_to_f32(-thr, Rnd::Rm), f32::NEG_INFINITY);
    assert_eq!(f64_to_f32(f64::from_bits(1), Rnd::Rp).to_bits(), 1);
    assert_eq!(
        f64_to_f32(-f64::from_bits(1), Rnd::Rp).to_bits(),
        0x8000_0000
    );
    assert_eq!(f64_to_f32(f64::NAN, Rnd::Rz).to_bits(), CANONICAL_NAN_F32);
    assert_eq!(f32_to_f16(f32::from_bits(0xffc0_1234), Rnd::Rn), 0x7fff);
    assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001), Rnd::Rn), 0x7fff);
}

#[test]
fn int_to_float_against_apfloat() {
    let mut rng = Rng(3);
    let edges = [
        0i128,
        1,
        -1,
        2047,
        2049,
        65504,
        65519,
        65520,
        65536,
        -65520,
        16_777_217,
        -16_777_217,
        i128::from(i64::MAX),
        i128::from(i64::MIN),
        i128::from(u64::MAX),
        (1 << 53) + 1,
        i128::MAX,
        i128::MIN,
        i128::MIN + 1,
    ];
    let randoms = (0..scale(300_000, 1_000_000)).map(|i| {
        let v = rng.next();
        match i % 3 {
            0 => i128::from(v),
            1 => i128::from(v as i64),
            _ => i128::from((v >> rng.below(64)) as i64),
        }
    });
    for v in edges.into_iter().chain(randoms) {
        for r in MODES {
            let w32 = Single::from_i128_r(v, ap_round(r)).value.to_bits();
            let w64 = Double::from_i128_r(v, ap_round(r)).value.to_bits();
            let w16 = Half::from_i128_r(v, ap_round(r)).value.to_bits();
            let wb16 = BFloat::from_i128_r(v, ap_round(r)).value.to_bits();
            assert_eq!(u128::from(int_to_f32(v, r).to_bits()), w32, "{v} {r:?}");
            assert_eq!(u128::from(int_to_f64(v, r).to_bits()), w64, "{v} {r:?}");
            assert_eq!(u128::from(int_to_f16(v, r)), w16, "{v} {r:?}");
            assert_eq!(u128::from(int_to_bf16(v, r)), wb16, "{v} {r:?}");
        }
        assert_eq!(int_to_f32(v, Rnd::Rn), v as f32, "{v}");
        assert_eq!(int_to_f64(v, Rnd::Rn), v as f64, "{v}");
    }
    assert_eq!(int_to_f16(65520, Rnd::Rn), 0x7c00);
    assert_eq!(int_to_f16(65520, Rnd::Rz), 0x7bff);
    assert_eq!(int_to_f16(-65519, Rnd::Rn), 0xfbff);
    assert_eq!(int_to_f32(16_777_217, Rnd::Rp).to_bits(), 0x4b80_0001);
}

#[test]
fn float_to_int_edge_cases() {
    use IRnd::*;
    let modes = [Rni, Rzi, Rmi, Rpi];
    // (x, s32 results per mode [rni, rzi, rmi, rpi], u32 results per mode).
    let cases: [(f64, [i64; 4], [u64; 4]); 12] = [
        (0.5, [0, 0, 0, 1], [0, 0, 0, 1]),
        (-0.5, [0, 0, -1, 0], [0, 0, 0, 0]),
        (1.5, [2, 1, 1, 2], [2, 1, 1, 2]),
        (2.5, [2, 2, 2, 3], [2, 2, 2, 3]),
        (-1.5, [-2, -1, -2, -1], [0; 4]),
        (-2.5, [-2, -2, -3, -2], [0; 4]),
        (-0.0, [0; 4], [0; 4]),
        (f64::NAN, [0; 4], [0; 4]),
        (f64::INFINITY, [2_147_483_647; 4], [4_294_967_295; 4]),
        (f64::NEG_INFINITY, [-2_147_483_648; 4], [0; 4]),
        (
            2_147_483_647.5,
            [2_147_483_647; 4],
            [2_147_483_648, 2_147_483_647, 2_147_483_647, 2_147_483_648],
        ),
        (-2_147_483_648.5, [-2_147_483_648; 4], [0; 4]),
    ];
    for (x, want_s, want_u) in cases {
        for ((m, ws), wu) in modes.into_iter().zip(want_s).zip(want_u) {
            assert_eq!(float_to_int(x, m, true, 32), ws as u64, "s32 {x} {m:?}");
            assert_eq!(float_to_int(x, m, false, 32), wu, "u32 {x} {m:?}");
        }
    }
    // Saturation at each width; signed results are sign-extended, unsigned zero-extended.
    let sat: [(f64, u32, bool, u64); 18] = [
        (127.5, 8, true, 127),
        (-128.5, 8, true, (-128i64) as u64),
        (-129.0, 8, true, (-128i64) as u64),
        (-1.0, 8, true, u64::MAX),
        (255.5, 8, false, 255),
        (256.0, 8, false, 255),
        (-1.0, 8, false, 0),
        (200.0, 8, false, 200),
        (-300.0, 16, true, (-300i64) as u64),
        (70000.0, 16, false, 65535),
        (4_294_967_295.4, 32, false, 4_294_967_295),
        (4_294_967_296.0, 32, false, 4_294_967_295),
        (9.3e18, 64, true, i64::MAX as u64),
        (-9.3e18, 64, true, i64::MIN as u64),
        (9_223_372_036_854_775_808.0, 64, true, i64::MAX as u64),
        (-9_223_372_036_854_775_808.0, 64, true, i64::MIN as u64),
        (18_446_744_073_709_551_616.0, 64, false, u64::MAX),
        (
            18_000_000_000_000_000_000.0,
            64,
            false,
            18_000_000_000_000_000_000,
        ),
    ];
    for (x, bits, signed, want) in sat {
        assert_eq!(
            float_to_int(x, Rni, signed, bits),
            want,
            "{x} {bits} {signed}"
        );
    }
    // Out-of-range widths do not panic.
    assert_eq!(float_to_int(3.0, Rzi, true, 0), 0); // clamped to 1-bit signed: -1..=0
    assert_eq!(float_to_int(-3.0, Rzi, true, 0), u64::MAX);
    assert_eq!(float_to_int(3.0, Rzi, false, 99), 3);
}

#[test]
fn round_to_integral_values() {
    use IRnd::*;
    let cases: [(f32, [f32; 4]); 7] = [
        (0.5, [0.0, 0.0, 0.0, 1.0]),
        (-0.5, [-0.0, -0.0, -1.0, -0.0]),
        (1.5, [2.0, 1.0, 1.0, 2.0]),
        (2.5, [2.0, 2.0, 2.0, 3.0]),
        (-2.5, [-2.0, -2.0, -3.0, -2.0]),
        (f32::INFINITY, [f32::INFINITY; 4]),
        (8_388_609.0, [8_388_609.0; 4]),
    ];
    for (x, want) in cases {
        for (m, w) in [Rni, Rzi, Rmi, Rpi].into_iter().zip(want) {
            assert_eq!(round_f32(x, m).to_bits(), w.to_bits(), "{x} {m:?}");
            assert_eq!(
                round_f64(f64::from(x), m).to_bits(),
                f64::from(w).to_bits(),
                "{x} {m:?}"
            );
        }
    }
    assert_eq!(round_f32(f32::NAN, Rni).to_bits(), CANONICAL_NAN_F32);
    assert_eq!(round_f64(f64::NAN, Rzi).to_bits(), CANONICAL_NAN_F64);
    // f16 2.5 = 0x4100 -> 2.0 = 0x4000 (rni), 3.0 = 0x4200 (rpi); -0.5 = 0xb800 -> -0.0 (rni).
    assert_eq!(round_f16(0x4100, Rni), 0x4000);
    assert_eq!(round_f16(0x4100, Rpi), 0x4200);
    assert_eq!(round_f16(0xb800, Rni), 0x8000);
    assert_eq!(round_bf16(0xc020, Rmi), 0xc040); // -2.5 -> -3
}

#[test]
fn satfinite_and_relu() {
    assert_eq!(satfinite_f16(0x7c00), 0x7bff);
    assert_eq!(satfinite_f16(0xfc00), 0xfbff);
    assert_eq!(satfinite_f16(0x7e01), 0x7fff);
    assert_eq!(satfinite_f16(0x3c00), 0x3c00);
    assert_eq!(satfinite_bf16(0xff80), 0xff7f);
    assert_eq!(satfinite_bf16(0x7fc1), 0x7fff);
    assert_eq!(relu_f16(0xbc00), 0x0000);
    assert_eq!(relu_f16(0x8000), 0x0000);
    assert_eq!(relu_f16(0x3c00), 0x3c00);
    assert_eq!(relu_f16(0xfe00), 0x7fff);
    assert_eq!(relu_bf16(0xbf80), 0x0000);
    assert_eq!(relu_bf16(0xffc0), 0x7fff);
    assert_eq!(f16_to_bf16(0x3c00, Rnd::Rn), 0x3f80);
    assert_eq!(bf16_to_f16(0x4780, Rnd::Rn), 0x7c00); // 65536 overflows f16
    assert_eq!(bf16_to_f16(0x4780, Rnd::Rz), 0x7bff);
    assert_eq!(
        f32_to_f64(f32::from_bits(0x7f80_0001)).to_bits(),
        CANONICAL_NAN_F64
    );
}
