//! f32/f64 arithmetic with every rounding modifier, .ftz/.sat, min/max, abs/neg, setp with every
//! comparison (ordered and unordered, on NaN), testp, copysign, and the .approx instructions.
//!
//! Correctly rounded references come from `common::fp` (Rust's native round-to-nearest result
//! plus the exactly computed sign of the rounding error); nothing here calls ptxsim's numeric code.

mod common;

use common::fp::{f32_ref, f64_ref, Mode, Op, MODES};
use common::isa::{row, run_cases, Case, Row, W};
use common::Rng;
use W::{B32, B64};

const N: usize = 256;
const QNAN32: u64 = 0x7fff_ffff;
const QNAN64: u64 = 0x7fff_ffff_ffff_ffff;

fn b32(x: f32) -> u64 {
    x.to_bits() as u64
}
fn b64(x: f64) -> u64 {
    x.to_bits()
}

fn f32_rows(op: Op, mode: Mode, seed: u64) -> Vec<Row> {
    let mut rng = Rng(seed);
    let mut inputs: Vec<[f32; 3]> = (0..N)
        .map(|_| [rng.f32_exp(20), rng.f32_exp(20), rng.f32_exp(20)])
        .collect();
    if matches!(op, Op::Sqrt) {
        for i in &mut inputs {
            i[0] = i[0].abs();
        }
    }
    // Hand-picked: overflow, exact cancellation (signed zero), tiny addends, 1/3, NaN, inf.
    let m = f32::MAX;
    inputs.extend_from_slice(&[
        [m, m, m],
        [-m, -m, -m],
        [1.0, -1.0, -1.0],
        [1.0, 2f32.powi(-30), 1.0],
        [-1.0, 2f32.powi(-30), -1.0],
        [1.0, 3.0, 2f32.powi(-40)],
        [2.0, 3.0, -6.0],
        [-0.0, -0.0, -0.0],
        [f32::INFINITY, 1.0, 1.0],
        [f32::INFINITY, f32::NEG_INFINITY, 0.0],
        [f32::from_bits(0x7fc1_2345), 1.0, 1.0],
        [0.0, 0.0, 0.0],
        // Subnormal inputs and results.
        [1.5 * f32::MIN_POSITIVE, 0.7, 1e-39],
        [1e-41, -3.3, 2e-41],
        [f32::MIN_POSITIVE, -0.5, f32::MIN_POSITIVE],
        [3e-39, 3e-39, -1e-45],
    ]);
    inputs
        .into_iter()
        .map(|[a, b, c]| row(b32(a), b32(b), b32(c), f32_ref(op, a, b, c, mode) as u64))
        .collect()
}

fn f64_rows(op: Op, mode: Mode, seed: u64) -> Vec<Row> {
    let mut rng = Rng(seed);
    let mut inputs: Vec<[f64; 3]> = (0..N)
        .map(|_| [rng.f64_exp(200), rng.f64_exp(200), rng.f64_exp(200)])
        .collect();
    if matches!(op, Op::Sqrt) {
        for i in &mut inputs {
            i[0] = i[0].abs();
        }
    }
    let m = f64::MAX;
    let e = f64::EPSILON;
    inputs.extend_from_slice(&[
        [m, m, m],
        [-m, -m, -m],
        [1.0, -1.0, -1.0],
        [1.0, 2f64.powi(-60), 1.0],
        [1.0 + e, 1.0 + e, 0.0],
        [1.0 + e, 1.0 + e, -1.0],
        [1.0, 3.0, 2f64.powi(-80)],
        [2.0, 3.0, -6.0],
        [-0.0, -0.0, -0.0],
        [f64::INFINITY, f64::NEG_INFINITY, 0.0],
        [f64::from_bits(0x7ff8_0000_1234_5678), 1.0, 1.0],
    ]);
    inputs
        .into_iter()
        .map(|[a, b, c]| row(b64(a), b64(b), b64(c), f64_ref(op, a, b, c, mode)))
        .collect()
}

fn body(op: Op, mode: Mode, ty: &str) -> String {
    let operands = match op.arity() {
        1 => "%d, %a",
        2 => "%d, %a, %b",
        _ => "%d, %a, %b, %c",
    };
    format!("{}{}.{ty} {operands};", op.ptx(), mode.ptx())
}

#[test]
fn reference_sanity() {
    // Hand-worked: 1/3 = 0.0101..., f32 significand 0x2aaaaa + round bit 1 -> rn rounds up.
    assert_eq!(f32_ref(Op::Div, 1.0, 3.0, 0.0, Mode::Rn), 0x3eaa_aaab);
    assert_eq!(f32_ref(Op::Div, 1.0, 3.0, 0.0, Mode::Rz), 0x3eaa_aaaa);
    assert_eq!(f32_ref(Op::Div, 1.0, 3.0, 0.0, Mode::Rm), 0x3eaa_aaaa);
    assert_eq!(f32_ref(Op::Div, 1.0, 3.0, 0.0, Mode::Rp), 0x3eaa_aaab);
    assert_eq!(f32_ref(Op::Div, -1.0, 3.0, 0.0, Mode::Rm), 0xbeaa_aaab);
    // f64 1/3: significand 0x5555555555555, next bit 0 -> rn truncates.
    assert_eq!(
        f64_ref(Op::Div, 1.0, 3.0, 0.0, Mode::Rn),
        0x3fd5_5555_5555_5555
    );
    assert_eq!(
        f64_ref(Op::Div, 1.0, 3.0, 0.0, Mode::Rp),
        0x3fd5_5555_5555_5556
    );
    // 1 + 2^-60 rounds to 1 except upward.
    assert_eq!(
        f64_ref(Op::Add, 1.0, 2f64.powi(-60), 0.0, Mode::Rp),
        0x3ff0_0000_0000_0001
    );
    assert_eq!(
        f64_ref(Op::Add, 1.0, 2f64.powi(-60), 0.0, Mode::Rz),
        0x3ff0_0000_0000_0000
    );
    // Overflow: toward zero gives MAX, to nearest gives inf.
    assert_eq!(
        f32_ref(Op::Add, f32::MAX, f32::MAX, 0.0, Mode::Rz),
        0x7f7f_ffff
    );
    assert_eq!(
        f32_ref(Op::Add, f32::MAX, f32::MAX, 0.0, Mode::Rn),
        0x7f80_0000
    );
    assert_eq!(
        f32_ref(Op::Add, -f32::MAX, -f32::MAX, 0.0, Mode::Rp),
        0xff7f_ffff
    );
    // Exact cancellation: -0 only when rounding toward minus infinity.
    assert_eq!(f32_ref(Op::Add, 1.0, -1.0, 0.0, Mode::Rm), 0x8000_0000);
    assert_eq!(f32_ref(Op::Add, 1.0, -1.0, 0.0, Mode::Rz), 0);
    // (1+e)^2 = 1 + 2e + e^2: the e^2 tail decides rp.
    let e = f64::EPSILON;
    assert_eq!(
        f64_ref(Op::Fma, 1.0 + e, 1.0 + e, 0.0, Mode::Rn),
        b64(1.0 + 2.0 * e)
    );
    assert_eq!(
        f64_ref(Op::Fma, 1.0 + e, 1.0 + e, 0.0, Mode::Rp),
        b64(1.0 + 3.0 * e)
    );
    // sqrt(2) f32 = 0x3fb504f3 (rn, rounded up from ...f3.33); rz = 0x3fb504f3.
    assert_eq!(f32_ref(Op::Sqrt, 2.0, 0.0, 0.0, Mode::Rn), 0x3fb5_04f3);
    assert_eq!(f32_ref(Op::Sqrt, 2.0, 0.0, 0.0, Mode::Rz), 0x3fb5_04f3);
    assert_eq!(f32_ref(Op::Sqrt, 2.0, 0.0, 0.0, Mode::Rp), 0x3fb5_04f4);
}

#[test]
fn f32_arith_every_rounding_mode() {
    let mut cases = Vec::new();
    for (k, op) in [
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Fma,
        Op::Sqrt,
        Op::Rcp,
    ]
    .into_iter()
    .enumerate()
    {
        for (j, mode) in MODES.into_iter().enumerate() {
            let b = body(op, mode, "f32");
            cases.push(Case::new(b.clone(), b, [B32; 4]).rows(f32_rows(
                op,
                mode,
                (k * 4 + j) as u64,
            )));
        }
    }
    run_cases(&cases);
}

#[test]
fn f64_arith_every_rounding_mode() {
    let mut cases = Vec::new();
    for (k, op) in [
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Fma,
        Op::Sqrt,
        Op::Rcp,
    ]
    .into_iter()
    .enumerate()
    {
        for (j, mode) in MODES.into_iter().enumerate() {
            let b = body(op, mode, "f64");
            cases.push(Case::new(b.clone(), b, [B64; 4]).rows(f64_rows(
                op,
                mode,
                100 + (k * 4 + j) as u64,
            )));
        }
    }
    run_cases(&cases);
}

#[test]
fn ftz_sat_min_max_abs_neg() {
    let sub = f32::from_bits(0x0000_1000); // subnormal
    let t130 = 2f32.powi(-130); // subnormal power of two
    let w = [B32; 4];
    let nan_in = f32::from_bits(0x7fc0_0001);
    let cases = vec![
        Case::new("add.f32 (subnormals kept)", "add.f32 %d, %a, %b;", w)
            .row(b32(sub), b32(0.0), 0, b32(sub))
            .row(b32(sub), b32(sub), 0, b32(sub + sub)),
        Case::new("add.ftz.f32", "add.ftz.f32 %d, %a, %b;", w)
            .row(b32(sub), b32(0.0), 0, 0)
            .row(b32(-sub), b32(-0.0), 0, 0x8000_0000)
            .row(b32(1.0), b32(sub), 0, b32(1.0)),
        Case::new(
            "mul.ftz.f32 (subnormal result)",
            "mul.ftz.f32 %d, %a, %b;",
            w,
        )
        .row(b32(2f32.powi(-100)), b32(2f32.powi(-30)), 0, 0)
        .row(b32(-(2f32.powi(-100))), b32(2f32.powi(-30)), 0, 0x8000_0000),
        Case::new("mul.rn.f32 (subnormal result)", "mul.rn.f32 %d, %a, %b;", w).row(
            b32(2f32.powi(-100)),
            b32(2f32.powi(-30)),
            0,
            b32(t130),
        ),
        Case::new("fma.rn.ftz.f32", "fma.rn.ftz.f32 %d, %a, %b, %c;", w)
            .row(b32(sub), b32(1.0), b32(0.0), 0)
            .row(b32(2f32.powi(-70)), b32(2f32.powi(-70)), b32(0.0), 0)
            .row(b32(1.0), b32(1.0), b32(sub), b32(1.0)),
        Case::new(
            "setp.ftz.f32 (subnormal == 0)",
            "setp.eq.ftz.f32 %p1, %a, %b;\nsetp.lt.ftz.f32 %p2, %b, %a;\nsetp.eq.f32 %p3, %a, %b;\n\
             selp.u32 %r1, 1, 0, %p1;\nselp.u32 %r2, 2, 0, %p2;\nselp.u32 %r3, 4, 0, %p3;\nor.b32 %r1, %r1, %r2;\nor.b32 %d, %r1, %r3;",
            w,
        )
        .row(b32(sub), 0, 0, 1)
        .row(b32(-sub), 0, 0, 1)
        .row(b32(f32::MIN_POSITIVE), 0, 0, 2),
        Case::new("add.sat.f32", "add.sat.f32 %d, %a, %b;", w)
            .row(b32(0.7), b32(0.7), 0, b32(1.0))
            .row(b32(-3.0), b32(1.0), 0, 0)
            .row(b32(0.25), b32(0.5), 0, b32(0.75))
            .row(b32(f32::NAN), b32(1.0), 0, 0)
            .row(b32(-0.0), b32(-0.0), 0, 0),
        Case::new("fma.rn.sat.f32", "fma.rn.sat.f32 %d, %a, %b, %c;", w)
            .row(b32(2.0), b32(2.0), b32(-3.5), b32(0.5))
            .row(b32(2.0), b32(2.0), b32(1.0), b32(1.0)),
        Case::new("min.f32", "min.f32 %d, %a, %b;", w)
            .row(b32(1.0), b32(2.0), 0, b32(1.0))
            .row(b32(nan_in), b32(2.0), 0, b32(2.0))
            .row(b32(2.0), b32(nan_in), 0, b32(2.0))
            .row(b32(nan_in), b32(nan_in), 0, QNAN32)
            .row(b32(-0.0), b32(0.0), 0, 0x8000_0000)
            .row(b32(0.0), b32(-0.0), 0, 0x8000_0000)
            .row(
                b32(f32::NEG_INFINITY),
                b32(-f32::MAX),
                0,
                b32(f32::NEG_INFINITY),
            ),
        Case::new("max.f32", "max.f32 %d, %a, %b;", w)
            .row(b32(1.0), b32(2.0), 0, b32(2.0))
            .row(b32(nan_in), b32(-2.0), 0, b32(-2.0))
            .row(b32(-2.0), b32(nan_in), 0, b32(-2.0))
            .row(b32(-0.0), b32(0.0), 0, 0)
            .row(b32(0.0), b32(-0.0), 0, 0),
        Case::new("min.NaN.f32", "min.NaN.f32 %d, %a, %b;", w)
            .row(b32(nan_in), b32(2.0), 0, QNAN32)
            .row(b32(1.0), b32(2.0), 0, b32(1.0)),
        Case::new("max.f64", "max.f64 %d, %a, %b;", [B64; 4])
            .row(b64(f64::NAN), b64(3.0), 0, b64(3.0))
            .row(b64(-0.0), b64(0.0), 0, 0)
            .row(b64(1e300), b64(-1e300), 0, b64(1e300))
            .row(b64(f64::NAN), b64(f64::NAN), 0, QNAN64),
        Case::new("min.f64", "min.f64 %d, %a, %b;", [B64; 4])
            .row(b64(3.0), b64(f64::NAN), 0, b64(3.0))
            .row(b64(0.0), b64(-0.0), 0, 1 << 63),
        Case::new("abs.f32", "abs.f32 %d, %a;", w)
            .row(b32(-1.5), 0, 0, b32(1.5))
            .row(b32(-0.0), 0, 0, 0)
            .row(b32(f32::NEG_INFINITY), 0, 0, b32(f32::INFINITY)),
        Case::new("neg.f32", "neg.f32 %d, %a;", w)
            .row(b32(1.5), 0, 0, b32(-1.5))
            .row(0, 0, 0, 0x8000_0000),
        Case::new(
            "abs.f64 / neg.f64",
            "abs.f64 %fd1, %a;\nneg.f64 %d, %fd1;",
            [B64; 4],
        )
        .row(b64(2.5), 0, 0, b64(-2.5))
        .row(b64(-2.5), 0, 0, b64(-2.5)),
    ];
    run_cases(&cases);
}

type Cmp32 = fn(f32, f32) -> bool;

fn comparisons() -> Vec<(&'static str, Cmp32)> {
    vec![
        ("eq", |a, b| a == b),
        ("ne", |a, b| a != b && !a.is_nan() && !b.is_nan()),
        ("lt", |a, b| a < b),
        ("le", |a, b| a <= b),
        ("gt", |a, b| a > b),
        ("ge", |a, b| a >= b),
        ("equ", |a, b| a == b || a.is_nan() || b.is_nan()),
        ("neu", |a, b| a != b),
        ("ltu", |a, b| a < b || a.is_nan() || b.is_nan()),
        ("leu", |a, b| a <= b || a.is_nan() || b.is_nan()),
        ("gtu", |a, b| a > b || a.is_nan() || b.is_nan()),
        ("geu", |a, b| a >= b || a.is_nan() || b.is_nan()),
        ("num", |a, b| !a.is_nan() && !b.is_nan()),
        ("nan", |a, b| a.is_nan() || b.is_nan()),
    ]
}

#[test]
fn setp_float_every_comparison_with_nan() {
    let vals: [f32; 8] = [
        -1.0,
        0.0,
        -0.0,
        1.0,
        2.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut cases = Vec::new();
    for (cmp, f) in comparisons() {
        let mut r32 = Vec::new();
        let mut r64 = Vec::new();
        for &a in &vals {
            for &b in &vals {
                r32.push(row(b32(a), b32(b), 0, f(a, b) as u64));
                r64.push(row(b64(a as f64), b64(b as f64), 0, f(a, b) as u64));
            }
        }
        cases.push(
            Case::new(
                format!("setp.{cmp}.f32"),
                format!("setp.{cmp}.f32 %p1, %a, %b;\nselp.u32 %d, 1, 0, %p1;"),
                [B32; 4],
            )
            .rows(r32),
        );
        cases.push(
            Case::new(
                format!("setp.{cmp}.f64"),
                format!("setp.{cmp}.f64 %p1, %a, %b;\nselp.u32 %d, 1, 0, %p1;"),
                [B64, B64, B64, B32],
            )
            .rows(r64),
        );
    }
    // Compare-and-set forms: set.<cmp>.u32.f32 writes 0xffffffff / 0; set.<cmp>.f32.f32 writes 1.0 / 0.0.
    let mut r = Vec::new();
    let mut rf = Vec::new();
    for &a in &vals {
        for &b in &vals {
            r.push(row(
                b32(a),
                b32(b),
                0,
                if a < b || a.is_nan() || b.is_nan() {
                    0xffff_ffff
                } else {
                    0
                },
            ));
            rf.push(row(b32(a), b32(b), 0, if a < b { b32(1.0) } else { 0 }));
        }
    }
    cases.push(Case::new("set.ltu.u32.f32", "set.ltu.u32.f32 %d, %a, %b;", [B32; 4]).rows(r));
    cases.push(Case::new("set.lt.f32.f32", "set.lt.f32.f32 %d, %a, %b;", [B32; 4]).rows(rf));
    run_cases(&cases);
}

#[test]
fn testp_copysign_selp() {
    let vals32: [f32; 10] = [
        0.0,
        -0.0,
        1.0,
        -3.5,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x807f_ffff),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    type Class = (&'static str, fn(f64) -> bool);
    // IEEE classes, except that the PTX ISA counts +0 and -0 as normal numbers.
    let classes: [Class; 6] = [
        ("finite", |x| x.is_finite()),
        ("infinite", |x| x.is_infinite()),
        ("number", |x| !x.is_nan()),
        ("notanumber", |x| x.is_nan()),
        ("normal", |x| x.is_normal() || x == 0.0),
        ("subnormal", |x| x.is_subnormal()),
    ];
    let mut cases = Vec::new();
    for (cls, f) in classes {
        let rows32: Vec<Row> = vals32
            .iter()
            .map(|&x| {
                // f32 subnormals are normal as f64: classify in f32.
                let v = match cls {
                    "normal" => x.is_normal() || x == 0.0,
                    "subnormal" => x.is_subnormal(),
                    _ => f(x as f64),
                };
                row(b32(x), 0, 0, v as u64)
            })
            .collect();
        cases.push(
            Case::new(
                format!("testp.{cls}.f32"),
                format!("testp.{cls}.f32 %p1, %a;\nselp.u32 %d, 1, 0, %p1;"),
                [B32; 4],
            )
            .rows(rows32),
        );
        let vals64 = [
            0.0,
            -0.0,
            1.0,
            f64::MIN_POSITIVE,
            f64::from_bits(3),
            f64::INFINITY,
            f64::NAN,
            -1e300,
        ];
        cases.push(
            Case::new(
                format!("testp.{cls}.f64"),
                format!("testp.{cls}.f64 %p1, %a;\nselp.u32 %d, 1, 0, %p1;"),
                [B64, B64, B64, B32],
            )
            .rows(
                vals64
                    .iter()
                    .map(|&x| row(b64(x), 0, 0, f(x) as u64))
                    .collect::<Vec<_>>(),
            ),
        );
    }
    // copysign d, a, b: magnitude of b, sign of a (bit formula, first principles).
    let cs32 = |a: u64, b: u64| (b & 0x7fff_ffff) | (a & 0x8000_0000);
    let pairs32 = [
        (b32(-1.0), b32(2.5)),
        (b32(1.0), b32(-2.5)),
        (b32(-0.0), b32(0.0)),
        (b32(-1.0), 0x7fc0_0000),
        (b32(1.0), b32(-7.0)),
    ];
    cases.push(
        Case::new("copysign.f32", "copysign.f32 %d, %a, %b;", [B32; 4]).rows(
            pairs32
                .iter()
                .map(|&(a, b)| row(a, b, 0, cs32(a, b)))
                .collect::<Vec<_>>(),
        ),
    );
    let cs64 = |a: u64, b: u64| (b & !(1 << 63)) | (a & (1 << 63));
    let pairs64 = [
        (b64(-1.0), b64(2.5)),
        (b64(3.0), b64(-2.5)),
        (b64(-0.0), b64(1e-300)),
    ];
    cases.push(
        Case::new("copysign.f64", "copysign.f64 %d, %a, %b;", [B64; 4]).rows(
            pairs64
                .iter()
                .map(|&(a, b)| row(a, b, 0, cs64(a, b)))
                .collect::<Vec<_>>(),
        ),
    );
    cases.push(
        Case::new(
            "selp.f32",
            "setp.lt.f32 %p1, %a, %b;\nselp.f32 %d, %a, %b, %p1;",
            [B32; 4],
        )
        .row(b32(1.0), b32(2.0), 0, b32(1.0))
        .row(b32(3.0), b32(2.0), 0, b32(2.0))
        .row(b32(f32::NAN), b32(2.0), 0, b32(2.0)),
    );
    run_cases(&cases);
}

/// `testp.normal` and `testp.subnormal` on hand-classified values: the PTX ISA counts +0 and -0
/// as normal numbers; subnormals, infinities and NaN are not normal.
#[test]
fn testp_normal_zero_is_normal() {
    // (bits, normal, subnormal)
    let f32_cases: [(u32, bool, bool); 8] = [
        (0x0000_0000, true, false),  // +0
        (0x8000_0000, true, false),  // -0
        (0x0000_0001, false, true),  // smallest subnormal
        (0x807f_ffff, false, true),  // largest negative subnormal
        (0x3f80_0000, true, false),  // 1.0
        (0x0080_0000, true, false),  // smallest normal
        (0x7f80_0000, false, false), // +inf
        (0x7fc0_0000, false, false), // NaN
    ];
    let f64_cases: [(u64, bool, bool); 8] = [
        (0x0000_0000_0000_0000, true, false),  // +0
        (0x8000_0000_0000_0000, true, false),  // -0
        (0x0000_0000_0000_0001, false, true),  // smallest subnormal
        (0x800f_ffff_ffff_ffff, false, true),  // largest negative subnormal
        (0xc008_0000_0000_0000, true, false),  // -3.0
        (0x0010_0000_0000_0000, true, false),  // smallest normal
        (0xfff0_0000_0000_0000, false, false), // -inf
        (0x7ff8_0000_0000_0000, false, false), // NaN
    ];
    let mut cases = Vec::new();
    for (cls, pick) in [("normal", 0), ("subnormal", 1)] {
        let want = |n: bool, s: bool| [n, s][pick] as u64;
        cases.push(
            Case::new(
                format!("testp.{cls}.f32 (zero, subnormal, normal, inf, NaN)"),
                format!("testp.{cls}.f32 %p1, %a;\nselp.u32 %d, 1, 0, %p1;"),
                [B32; 4],
            )
            .rows(
                f32_cases
                    .iter()
                    .map(|&(x, n, s)| row(x as u64, 0, 0, want(n, s)))
                    .collect::<Vec<_>>(),
            ),
        );
        cases.push(
            Case::new(
                format!("testp.{cls}.f64 (zero, subnormal, normal, inf, NaN)"),
                format!("testp.{cls}.f64 %p1, %a;\nselp.u32 %d, 1, 0, %p1;"),
                [B64, B64, B64, B32],
            )
            .rows(
                f64_cases
                    .iter()
                    .map(|&(x, n, s)| row(x, 0, 0, want(n, s)))
                    .collect::<Vec<_>>(),
            ),
        );
    }
    run_cases(&cases);
}

/// |got - exact| <= ulps * ulp(exact) for f32 results (both finite), or identical bits.
fn within_ulps(expected: u64, got: u64, ulps: f64) -> bool {
    if expected == got {
        return true;
    }
    let (e, g) = (f32::from_bits(expected as u32), f32::from_bits(got as u32));
    if !e.is_finite() || !g.is_finite() {
        return false;
    }
    let ulp = (f32::from_bits((e.abs().to_bits() & 0x7f80_0000).max(0x0080_0000)) as f64)
        * 2f64.powi(-23);
    ((g as f64) - (e as f64)).abs() <= ulps * ulp
}

#[test]
fn approx_instructions_within_documented_error() {
    let w = [B32; 4];
    let mut rng = Rng(77);
    let xs: Vec<f32> = (0..32).map(|_| rng.f32_exp(6)).collect();
    let pos: Vec<f32> = xs.iter().map(|x| x.abs()).collect();
    let small: Vec<f32> = (0..32).map(|i| -3.1 + i as f32 * 0.2).collect();
    let mk = |xs: &[f32], f: fn(f64) -> f64| -> Vec<Row> {
        xs.iter()
            .map(|&x| row(b32(x), 0, 0, b32(f(x as f64) as f32)))
            .collect()
    };
    // Documented maximum errors (PTX ISA): ex2 2 ulp, rcp/sqrt/rsqrt approx 1-2 ulp, lg2 2^-22
    // absolute near 1 (relative elsewhere), sin/cos 2^-20.9 absolute in [-pi, pi], tanh 2^-10.987
    // relative. The checks below use those bounds.
    let cases = vec![
        Case::new("ex2.approx.f32", "ex2.approx.f32 %d, %a;", w)
            .rows(mk(&xs, f64::exp2))
            .check(|e, g| within_ulps(e, g, 2.0)),
        Case::new("ex2.approx.ftz.f32", "ex2.approx.ftz.f32 %d, %a;", w)
            .rows(mk(&xs, f64::exp2))
            .check(|e, g| within_ulps(e, g, 2.0)),
        Case::new("rcp.approx.f32", "rcp.approx.f32 %d, %a;", w)
            .rows(mk(&xs, |x| 1.0 / x))
            .check(|e, g| within_ulps(e, g, 1.0)),
        Case::new("sqrt.approx.f32", "sqrt.approx.f32 %d, %a;", w)
            .rows(mk(&pos, f64::sqrt))
            .check(|e, g| within_ulps(e, g, 1.0)),
        Case::new("rsqrt.approx.f32", "rsqrt.approx.f32 %d, %a;", w)
            .rows(mk(&pos, |x| 1.0 / x.sqrt()))
            .check(|e, g| within_ulps(e, g, 2.0)),
        Case::new("lg2.approx.f32", "lg2.approx.f32 %d, %a;", w)
            .rows(mk(&pos, f64::log2))
            .check(|e, g| {
                let (e, g) = (
                    f32::from_bits(e as u32) as f64,
                    f32::from_bits(g as u32) as f64,
                );
                (g - e).abs() <= 2f64.powi(-22) * e.abs().max(1.0)
            }),
        Case::new("sin.approx.f32", "sin.approx.f32 %d, %a;", w)
            .rows(mk(&small, f64::sin))
            .check(|e, g| {
                (f32::from_bits(g as u32) as f64 - f32::from_bits(e as u32) as f64).abs()
                    <= 2f64.powi(-20)
            }),
        Case::new("cos.approx.f32", "cos.approx.f32 %d, %a;", w)
            .rows(mk(&small, f64::cos))
            .check(|e, g| {
                (f32::from_bits(g as u32) as f64 - f32::from_bits(e as u32) as f64).abs()
                    <= 2f64.powi(-20)
            }),
        Case::new("tanh.approx.f32", "tanh.approx.f32 %d, %a;", w)
            .rows(mk(&small, f64::tanh))
            .check(|e, g| {
                let (e, g) = (
                    f32::from_bits(e as u32) as f64,
                    f32::from_bits(g as u32) as f64,
                );
                (g - e).abs() <= 2f64.powi(-10) * e.abs().max(2f64.powi(-10))
            }),
        Case::new("div.approx.f32", "div.approx.f32 %d, %a, %b;", w)
            .rows(
                xs.iter()
                    .zip(pos.iter().rev())
                    .map(|(&a, &b)| row(b32(a), b32(b), 0, b32(((a as f64) / (b as f64)) as f32)))
                    .collect::<Vec<_>>(),
            )
            .check(|e, g| within_ulps(e, g, 2.0)),
        Case::new("div.full.f32", "div.full.f32 %d, %a, %b;", w)
            .rows(
                xs.iter()
                    .zip(pos.iter().rev())
                    .map(|(&a, &b)| row(b32(a), b32(b), 0, b32(((a as f64) / (b as f64)) as f32)))
                    .collect::<Vec<_>>(),
            )
            .check(|e, g| within_ulps(e, g, 2.0)),
        Case::new("rsqrt.approx.f64", "rsqrt.approx.f64 %d, %a;", [B64; 4])
            .rows(
                pos.iter()
                    .map(|&x| row(b64(x as f64), 0, 0, b64(1.0 / (x as f64).sqrt())))
                    .collect::<Vec<_>>(),
            )
            .check(|e, g| {
                let (e, g) = (f64::from_bits(e), f64::from_bits(g));
                (g - e).abs() <= e.abs() * 2f64.powi(-40)
            }),
        // Special values of the approximate instructions are exact.
        Case::new("ex2.approx.f32 specials", "ex2.approx.f32 %d, %a;", w)
            .row(b32(f32::NEG_INFINITY), 0, 0, 0)
            .row(b32(f32::INFINITY), 0, 0, b32(f32::INFINITY))
            .row(b32(0.0), 0, 0, b32(1.0))
            .row(b32(3.0), 0, 0, b32(8.0)),
        Case::new(
            "rsqrt/rcp.approx.f32 specials",
            "rcp.approx.f32 %f1, %a;\nrsqrt.approx.f32 %f2, %f1;\nmov.b32 %d, %f2;",
            w,
        )
        .row(b32(0.0), 0, 0, 0)
        .row(b32(f32::INFINITY), 0, 0, b32(f32::INFINITY)),
    ];
    run_cases(&cases);
}

#[test]
fn div_approx_huge_divisor_semantics() {
    let w = [B32; 4];
    let cases = vec![
        // PTX: for 2^126 < |b| < 2^128, div.approx.f32 returns 0, or NaN when a is infinite.
        Case::new(
            "div.approx.f32 huge divisor",
            "div.approx.f32 %d, %a, %b;",
            w,
        )
        .row(b32(1.0), b32(2f32.powi(127)), 0, 0)
        .row(b32(-3.0), b32(1.5 * 2f32.powi(126)), 0, 0x8000_0000)
        .row(b32(f32::INFINITY), b32(2f32.powi(127)), 0, QNAN32),
    ];
    run_cases(&cases);
}

#[test]
fn approx_instruction_special_values() {
    // IEEE-style special cases from the PTX ISA tables of each .approx instruction.
    let w = [B32; 4];
    let (inf, ninf, nan) = (b32(f32::INFINITY), b32(f32::NEG_INFINITY), b32(f32::NAN));
    let (z, nz, one) = (0u64, 0x8000_0000u64, b32(1.0));
    let un = |name: &str, op: &str, rows: &[(u64, u64)]| {
        Case::new(name, format!("{op} %d, %a;"), w).rows(
            rows.iter()
                .map(|&(a, d)| row(a, 0, 0, d))
                .collect::<Vec<_>>(),
        )
    };
    let cases = vec![
        un(
            "rsqrt.approx specials",
            "rsqrt.approx.f32",
            &[
                (nz, ninf),
                (z, inf),
                (inf, z),
                (b32(-1.0), QNAN32),
                (ninf, QNAN32),
                (nan, QNAN32),
            ],
        ),
        un(
            "rcp.approx specials",
            "rcp.approx.f32",
            &[(nz, ninf), (z, inf), (inf, z), (ninf, nz), (nan, QNAN32)],
        ),
        un(
            "sqrt.approx specials",
            "sqrt.approx.f32",
            &[
                (nz, nz),
                (z, z),
                (inf, inf),
                (b32(-1.0), QNAN32),
                (ninf, QNAN32),
            ],
        ),
        un(
            "lg2.approx specials",
            "lg2.approx.f32",
            &[
                (z, ninf),
                (nz, ninf),
                (inf, inf),
                (b32(-2.0), QNAN32),
                (ninf, QNAN32),
                (one, z),
            ],
        ),
        un(
            "ex2.approx specials",
            "ex2.approx.f32",
            &[(ninf, z), (z, one), (nz, one), (inf, inf), (nan, QNAN32)],
        ),
        un(
            "sin.approx specials",
            "sin.approx.f32",
            &[
                (z, z),
                (nz, nz),
                (inf, QNAN32),
                (ninf, QNAN32),
                (nan, QNAN32),
            ],
        ),
        un(
            "cos.approx specials",
            "cos.approx.f32",
            &[(z, one), (nz, one), (inf, QNAN32), (nan, QNAN32)],
        ),
        un(
            "tanh.approx specials",
            "tanh.approx.f32",
            &[
                (z, z),
                (nz, nz),
                (inf, one),
                (ninf, b32(-1.0)),
                (nan, QNAN32),
            ],
        ),
    ];
    run_cases(&cases);
}
