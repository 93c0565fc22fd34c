//! cvt between widths and formats: float<->float with every rounding mode, float->int with the
//! integer rounding modes (saturating, NaN -> 0), int->float with every rounding mode, int<->int
//! (sign/zero extension, truncation, .sat), round-to-integral, f16/bf16 (scalar and x2 packs).
//! References: Rust casts (saturating, ties-to-even), the `half` crate, `common::fp`.

mod common;

use common::fp::{f32_to_bf16, f32_to_f16, f64_to_f32, int_to_f32, int_to_f64, Mode, MODES};
use common::isa::{row, run_cases, Case, Row, W};
use common::Rng;
use W::{B16, B32, B64};

const N: usize = 256;

/// A round-to-integral function.
type Round = fn(f32) -> f32;

fn b32(x: f32) -> u64 {
    x.to_bits() as u64
}
fn b64(x: f64) -> u64 {
    x.to_bits()
}

fn f32_inputs(seed: u64, exp: i32) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut v: Vec<f32> = (0..N).map(|_| rng.f32_exp(exp)).collect();
    v.extend_from_slice(&[
        0.0,
        -0.0,
        0.5,
        1.5,
        2.5,
        -2.5,
        -0.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        3e9,
        -3e9,
        1e20,
        65519.0,
        65520.0,
        -65520.0,
        2f32.powi(-24),
        2f32.powi(-25),
        3.0 * 2f32.powi(-26),
    ]);
    v
}

#[test]
fn float_to_float() {
    let mut cases = Vec::new();
    let mut rng = Rng(5);
    let mut xs: Vec<f64> = (0..N).map(|_| rng.f64_exp(140)).collect();
    xs.extend_from_slice(&[
        1e39,
        -1e39,
        1e-46,
        -1e-46,
        1.0 + f64::EPSILON,
        f64::INFINITY,
        f64::NAN,
        -0.0,
    ]);
    for mode in MODES {
        let rows: Vec<Row> = xs
            .iter()
            .map(|&x| row(b64(x), 0, 0, f64_to_f32(x, mode) as u64))
            .collect();
        cases.push(
            Case::new(
                format!("cvt{}.f32.f64", mode.ptx()),
                format!("cvt{}.f32.f64 %d, %a;", mode.ptx()),
                [B64, B64, B64, B32],
            )
            .rows(rows),
        );
    }
    let f32s = f32_inputs(6, 100);
    cases.push(
        Case::new("cvt.f64.f32", "cvt.f64.f32 %d, %a;", [B32, B32, B32, B64]).rows(
            f32s.iter()
                .filter(|x| !x.is_nan())
                .map(|&x| row(b32(x), 0, 0, b64(x as f64)))
                .collect::<Vec<_>>(),
        ),
    );
    // Round to integral in the same format.
    let ri: [(&str, Round); 4] = [
        ("rni", f32::round_ties_even),
        ("rzi", f32::trunc),
        ("rmi", f32::floor),
        ("rpi", f32::ceil),
    ];
    for (m, f) in ri {
        let rows: Vec<Row> = f32_inputs(7, 26)
            .iter()
            .map(|&x| {
                row(
                    b32(x),
                    0,
                    0,
                    if x.is_nan() { 0x7fff_ffff } else { b32(f(x)) },
                )
            })
            .collect();
        cases.push(
            Case::new(
                format!("cvt.{m}.f32.f32"),
                format!("cvt.{m}.f32.f32 %d, %a;"),
                [B32; 4],
            )
            .rows(rows),
        );
    }
    let rows: Vec<Row> = [2.5f64, -2.5, 3.5, 1e300, -0.4, 0.6]
        .iter()
        .map(|&x| row(b64(x), 0, 0, b64(x.round_ties_even())))
        .collect();
    cases.push(Case::new("cvt.rni.f64.f64", "cvt.rni.f64.f64 %d, %a;", [B64; 4]).rows(rows));
    cases.push(
        Case::new("cvt.sat.f32.f32", "cvt.sat.f32.f32 %d, %a;", [B32; 4])
            .row(b32(1.5), 0, 0, b32(1.0))
            .row(b32(-1.5), 0, 0, 0)
            .row(b32(0.25), 0, 0, b32(0.25))
            .row(b32(f32::NAN), 0, 0, 0),
    );
    // .sat on narrowing float conversions: clamp to [0, 1], NaN -> +0.
    cases.push(
        Case::new(
            "cvt.rn.sat.f16.f32",
            "cvt.rn.sat.f16.f32 %d, %a;",
            [B32, B32, B32, B16],
        )
        .row(b32(1.5), 0, 0, 0x3c00)
        .row(b32(-2.0), 0, 0, 0)
        .row(b32(f32::NAN), 0, 0, 0)
        .row(b32(0.3), 0, 0, f32_to_f16(0.3, Mode::Rn) as u64)
        .row(b32(1e9), 0, 0, 0x3c00),
    );
    cases.push(
        Case::new(
            "cvt.rz.sat.f32.f64",
            "cvt.rz.sat.f32.f64 %d, %a;",
            [B64, B64, B64, B32],
        )
        .row(b64(1.0 + 1e-12), 0, 0, b32(1.0))
        .row(b64(-1e-300), 0, 0, 0)
        .row(b64(0.1), 0, 0, f64_to_f32(0.1, Mode::Rz) as u64),
    );
    run_cases(&cases);
}

#[test]
fn float_to_int_saturating() {
    let xs = f32_inputs(8, 34);
    let mut cases = Vec::new();
    let modes: [(&str, Round); 4] = [
        ("rni", f32::round_ties_even),
        ("rzi", f32::trunc),
        ("rmi", f32::floor),
        ("rpi", f32::ceil),
    ];
    for (m, f) in modes {
        // Rust float->int `as` saturates and maps NaN to 0, as PTX cvt does.
        let s32: Vec<Row> = xs
            .iter()
            .map(|&x| row(b32(x), 0, 0, f(x) as i32 as u32 as u64))
            .collect();
        let u32_: Vec<Row> = xs
            .iter()
            .map(|&x| row(b32(x), 0, 0, f(x) as u32 as u64))
            .collect();
        let s64: Vec<Row> = xs
            .iter()
            .map(|&x| row(b64(x as f64), 0, 0, f(x) as i64 as u64))
            .collect();
        let s16: Vec<Row> = xs
            .iter()
            .map(|&x| row(b32(x), 0, 0, f(x) as i16 as u16 as u64))
            .collect();
        cases.push(
            Case::new(
                format!("cvt.{m}.s32.f32"),
                format!("cvt.{m}.s32.f32 %d, %a;"),
                [B32; 4],
            )
            .rows(s32),
        );
        cases.push(
            Case::new(
                format!("cvt.{m}.u32.f32"),
                format!("cvt.{m}.u32.f32 %d, %a;"),
                [B32; 4],
            )
            .rows(u32_),
        );
        cases.push(
            Case::new(
                format!("cvt.{m}.s64.f64"),
                format!("cvt.{m}.s64.f64 %d, %a;"),
                [B64; 4],
            )
            .rows(s64),
        );
        cases.push(
            Case::new(
                format!("cvt.{m}.s16.f32"),
                format!("cvt.{m}.s16.f32 %d, %a;"),
                [B32, B32, B32, B16],
            )
            .rows(s16),
        );
    }
    let u64s: Vec<Row> = [1.8e19f64, 2e19, -1.0, 12345.9, f64::NAN]
        .iter()
        .map(|&x| row(b64(x), 0, 0, x as u64))
        .collect();
    cases.push(Case::new("cvt.rzi.u64.f64", "cvt.rzi.u64.f64 %d, %a;", [B64; 4]).rows(u64s));
    run_cases(&cases);
}

#[test]
fn int_to_float_every_rounding_mode() {
    let mut rng = Rng(9);
    let i32s: Vec<i32> = (0..N)
        .map(|_| (rng.next_u32() as i32) >> rng.range(0, 8))
        .chain([
            0,
            1,
            -1,
            16_777_217,
            -16_777_217,
            16_777_219,
            i32::MAX,
            i32::MIN,
        ])
        .collect();
    let u32s: Vec<u32> = (0..N)
        .map(|_| rng.next_u32())
        .chain([u32::MAX, 16_777_217, 0])
        .collect();
    let i64s: Vec<i64> = (0..N)
        .map(|_| (rng.next_u64() as i64) >> rng.range(0, 40))
        .chain([i64::MAX, i64::MIN, (1 << 53) + 1, -(1 << 53) - 1, 0])
        .collect();
    let u64s: Vec<u64> = (0..N)
        .map(|_| rng.next_u64())
        .chain([u64::MAX, (1 << 53) + 1])
        .collect();
    let mut cases = Vec::new();
    for mode in MODES {
        let r = mode.ptx();
        let w32 = [B32; 4];
        cases.push(
            Case::new(
                format!("cvt{r}.f32.s32"),
                format!("cvt{r}.f32.s32 %d, %a;"),
                w32,
            )
            .rows(
                i32s.iter()
                    .map(|&v| row(v as u32 as u64, 0, 0, int_to_f32(v as i128, mode) as u64))
                    .collect::<Vec<_>>(),
            ),
        );
        cases.push(
            Case::new(
                format!("cvt{r}.f32.u32"),
                format!("cvt{r}.f32.u32 %d, %a;"),
                w32,
            )
            .rows(
                u32s.iter()
                    .map(|&v| row(v as u64, 0, 0, int_to_f32(v as i128, mode) as u64))
                    .collect::<Vec<_>>(),
            ),
        );
        cases.push(
            Case::new(
                format!("cvt{r}.f32.s64"),
                format!("cvt{r}.f32.s64 %d, %a;"),
                [B64, B64, B64, B32],
            )
            .rows(
                i64s.iter()
                    .map(|&v| row(v as u64, 0, 0, int_to_f32(v as i128, mode) as u64))
                    .collect::<Vec<_>>(),
            ),
        );
        cases.push(
            Case::new(
                format!("cvt{r}.f64.s64"),
                format!("cvt{r}.f64.s64 %d, %a;"),
                [B64; 4],
            )
            .rows(
                i64s.iter()
                    .map(|&v| row(v as u64, 0, 0, int_to_f64(v as i128, mode)))
                    .collect::<Vec<_>>(),
            ),
        );
        cases.push(
            Case::new(
                format!("cvt{r}.f64.u64"),
                format!("cvt{r}.f64.u64 %d, %a;"),
                [B64; 4],
            )
            .rows(
                u64s.iter()
                    .map(|&v| row(v, 0, 0, int_to_f64(v as i128, mode)))
                    .collect::<Vec<_>>(),
            ),
        );
    }
    run_cases(&cases);
}

#[test]
fn int_to_int() {
    let mut rng = Rng(10);
    let r32: Vec<u64> = (0..N)
        .map(|_| rng.next_u32() as u64)
        .chain([0, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff_ffff])
        .collect();
    let r64: Vec<u64> = (0..N)
        .map(|_| rng.next_u64())
        .chain([0, u64::MAX, 0x8000_0000, 0x1_0000_0000])
        .collect();
    let w32 = [B32; 4];
    let mk =
        |v: &[u64], f: fn(u64) -> u64| v.iter().map(|&a| row(a, 0, 0, f(a))).collect::<Vec<_>>();
    let cases = vec![
        Case::new("cvt.s64.s32", "cvt.s64.s32 %d, %a;", [B32, B32, B32, B64])
            .rows(mk(&r32, |a| a as u32 as i32 as i64 as u64)),
        Case::new("cvt.u64.u32", "cvt.u64.u32 %d, %a;", [B32, B32, B32, B64]).rows(mk(&r32, |a| a)),
        Case::new("cvt.u32.u64", "cvt.u32.u64 %d, %a;", [B64, B64, B64, B32])
            .rows(mk(&r64, |a| a & 0xffff_ffff)),
        Case::new("cvt.s32.s64", "cvt.s32.s64 %d, %a;", [B64, B64, B64, B32])
            .rows(mk(&r64, |a| a & 0xffff_ffff)),
        Case::new(
            "cvt.sat.s32.s64",
            "cvt.sat.s32.s64 %d, %a;",
            [B64, B64, B64, B32],
        )
        .rows(mk(&r64, |a| {
            (a as i64).clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32 as u64
        })),
        Case::new(
            "cvt.sat.u32.s64",
            "cvt.sat.u32.s64 %d, %a;",
            [B64, B64, B64, B32],
        )
        .rows(mk(&r64, |a| (a as i64).clamp(0, u32::MAX as i64) as u64)),
        // Source register wider than the type: the value is chopped to the type, then extended.
        Case::new("cvt.s32.s8", "cvt.s32.s8 %d, %a;", w32)
            .rows(mk(&r32, |a| a as u8 as i8 as i32 as u32 as u64)),
        Case::new("cvt.u32.u8", "cvt.u32.u8 %d, %a;", w32).rows(mk(&r32, |a| a & 0xff)),
        Case::new(
            "cvt.s32.s16",
            "cvt.u16.u32 %h1, %a;\ncvt.s32.s16 %d, %h1;",
            w32,
        )
        .rows(mk(&r32, |a| a as u16 as i16 as i32 as u32 as u64)),
        Case::new("cvt.u16.u32", "cvt.u16.u32 %d, %a;", [B32, B32, B32, B16])
            .rows(mk(&r32, |a| a & 0xffff)),
        Case::new(
            "cvt.sat.s16.s32",
            "cvt.sat.s16.s32 %d, %a;",
            [B32, B32, B32, B16],
        )
        .rows(mk(&r32, |a| {
            (a as u32 as i32).clamp(-32768, 32767) as i16 as u16 as u64
        })),
        Case::new(
            "cvt.sat.u16.s32",
            "cvt.sat.u16.s32 %d, %a;",
            [B32, B32, B32, B16],
        )
        .rows(mk(&r32, |a| (a as u32 as i32).clamp(0, 65535) as u64)),
        Case::new(
            "cvt.sat.u8.u32 -> u16 reg",
            "cvt.sat.u8.u32 %h1, %a;\ncvt.u32.u16 %d, %h1;",
            w32,
        )
        .rows(mk(&r32, |a| a.min(255))),
        Case::new(
            "cvt.s16.s8 (b16 regs)",
            "cvt.u16.u32 %h1, %a;\ncvt.s16.s8 %h2, %h1;\ncvt.u32.u16 %d, %h2;",
            w32,
        )
        .rows(mk(&r32, |a| a as u8 as i8 as i16 as u16 as u64)),
    ];
    run_cases(&cases);
}

#[test]
fn f16_and_bf16_conversions() {
    let xs = f32_inputs(11, 17);
    let tiny: Vec<f32> = {
        let mut rng = Rng(12);
        (0..32).map(|_| rng.f32_exp(26) * 2f32.powi(-14)).collect()
    };
    let all: Vec<f32> = xs.iter().chain(tiny.iter()).copied().collect();
    let mut cases = Vec::new();
    for mode in MODES {
        let r = mode.ptx();
        cases.push(
            Case::new(
                format!("cvt{r}.f16.f32"),
                format!("cvt{r}.f16.f32 %d, %a;"),
                [B32, B32, B32, B16],
            )
            .rows(
                all.iter()
                    .map(|&x| row(b32(x), 0, 0, f32_to_f16(x, mode) as u64))
                    .collect::<Vec<_>>(),
            ),
        );
    }
    for mode in MODES {
        let r = mode.ptx();
        cases.push(
            Case::new(
                format!("cvt{r}.bf16.f32"),
                format!("cvt{r}.bf16.f32 %d, %a;"),
                [B32, B32, B32, B16],
            )
            .rows(
                all.iter()
                    .map(|&x| row(b32(x), 0, 0, f32_to_bf16(x, mode) as u64))
                    .collect::<Vec<_>>(),
            ),
        );
    }
    let mut rng = Rng(13);
    let halves: Vec<u16> = (0..N as u32)
        .map(|_| rng.next_u32() as u16)
        .filter(|h| (h & 0x7c00) != 0x7c00)
        .chain([0x7c00, 0xfc00, 0x0001, 0x8000, 0x3c00])
        .collect();
    cases.push(
        Case::new("cvt.f32.f16", "cvt.f32.f16 %d, %a;", [B16, B16, B16, B32]).rows(
            halves
                .iter()
                .map(|&h| row(h as u64, 0, 0, b32(half::f16::from_bits(h).to_f32())))
                .collect::<Vec<_>>(),
        ),
    );
    cases.push(
        Case::new("cvt.f64.f16", "cvt.f64.f16 %d, %a;", [B16, B16, B16, B64]).rows(
            halves
                .iter()
                .map(|&h| row(h as u64, 0, 0, b64(half::f16::from_bits(h).to_f64())))
                .collect::<Vec<_>>(),
        ),
    );
    let bhalves: Vec<u16> = (0..N as u32)
        .map(|_| rng.next_u32() as u16)
        .filter(|h| (h & 0x7f80) != 0x7f80)
        .chain([0x7f80, 0x0001, 0x3f80])
        .collect();
    cases.push(
        Case::new("cvt.f32.bf16", "cvt.f32.bf16 %d, %a;", [B16, B16, B16, B32]).rows(
            bhalves
                .iter()
                .map(|&h| row(h as u64, 0, 0, (h as u64) << 16))
                .collect::<Vec<_>>(),
        ),
    );
    // x2 packs: d = { cvt(a) in the upper half, cvt(b) in the lower half }.
    let pairs: Vec<(f32, f32)> = all
        .iter()
        .zip(all.iter().rev())
        .map(|(&a, &b)| (a, b))
        .collect();
    cases.push(
        Case::new("cvt.rn.f16x2.f32", "cvt.rn.f16x2.f32 %d, %a, %b;", [B32; 4]).rows(
            pairs
                .iter()
                .map(|&(a, b)| {
                    row(
                        b32(a),
                        b32(b),
                        0,
                        ((f32_to_f16(a, Mode::Rn) as u64) << 16) | f32_to_f16(b, Mode::Rn) as u64,
                    )
                })
                .collect::<Vec<_>>(),
        ),
    );
    cases.push(
        Case::new(
            "cvt.rn.bf16x2.f32",
            "cvt.rn.bf16x2.f32 %d, %a, %b;",
            [B32; 4],
        )
        .rows(
            pairs
                .iter()
                .map(|&(a, b)| {
                    row(
                        b32(a),
                        b32(b),
                        0,
                        ((f32_to_bf16(a, Mode::Rn) as u64) << 16) | f32_to_bf16(b, Mode::Rn) as u64,
                    )
                })
                .collect::<Vec<_>>(),
        ),
    );
    // .relu clamps negative results to +0.
    cases.push(
        Case::new(
            "cvt.rn.relu.f16x2.f32",
            "cvt.rn.relu.f16x2.f32 %d, %a, %b;",
            [B32; 4],
        )
        .row(b32(-1.5), b32(2.0), 0, 0x4000)
        .row(b32(3.0), b32(-0.25), 0, 0x4200 << 16)
        .row(b32(-7.0), b32(-3.0), 0, 0),
    );
    run_cases(&cases);
}
