//! f16/bf16 arithmetic, scalar and packed x2 (add/sub/mul/fma, .sat, neg/abs, min/max, setp),
//! and mov pack/unpack of halves and words. References: the `half` crate conversions; arithmetic
//! of two halves is done in f32 (exact enough: f32 has >= 2p+2 bits for p = 11 and p = 8, so
//! rounding twice gives the correctly rounded result), fma in f64 on inputs whose exact result
//! fits f64.

mod common;

use common::isa::{row, run_cases, Case, Row, W};
use common::Rng;
use half::{bf16, f16};
use W::{B16, B32, B64};

const N: usize = 256;

#[derive(Clone, Copy)]
enum Fmt {
    F16,
    Bf16,
}

impl Fmt {
    fn to_f32(self, h: u16) -> f32 {
        match self {
            Fmt::F16 => f16::from_bits(h).to_f32(),
            Fmt::Bf16 => bf16::from_bits(h).to_f32(),
        }
    }
    fn round_f64(self, x: f64) -> u16 {
        if x.is_nan() {
            return 0x7fff;
        }
        match self {
            Fmt::F16 => f16::from_f64(x).to_bits(),
            Fmt::Bf16 => bf16::from_f64(x).to_bits(),
        }
    }
    fn round_f32(self, x: f32) -> u16 {
        if x.is_nan() {
            return 0x7fff;
        }
        match self {
            Fmt::F16 => f16::from_f32(x).to_bits(),
            Fmt::Bf16 => bf16::from_f32(x).to_bits(),
        }
    }
    /// A random value with a moderate exponent (so fma is exact in f64).
    fn random(self, rng: &mut Rng) -> u16 {
        let x = rng.f32_exp(6);
        self.round_f32(x)
    }
    fn name(self) -> &'static str {
        match self {
            Fmt::F16 => "f16",
            Fmt::Bf16 => "bf16",
        }
    }
}

type Op3 = fn(f32, f32, f32) -> f64;

/// Applies `op` per half: element 0 is bits 0..16, element 1 bits 16..32.
fn per_half(fmt: Fmt, a: u64, b: u64, c: u64, op: Op3, sat: bool) -> u64 {
    let mut d = 0u64;
    for k in 0..2 {
        let g = |x: u64| fmt.to_f32((x >> (16 * k)) as u16);
        let mut r = op(g(a), g(b), g(c));
        if sat {
            r = if r.is_nan() { 0.0 } else { r.clamp(0.0, 1.0) };
        }
        d |= (fmt.round_f64(r) as u64) << (16 * k);
    }
    d
}

fn x2_rows(fmt: Fmt, seed: u64, op: Op3, sat: bool) -> Vec<Row> {
    let mut rng = Rng(seed);
    let mut v = Vec::new();
    let nan = 0x7e00u64;
    let specials = [(
        0x3c00u64 | nan << 16,
        0x4000 | 0x3c00 << 16,
        0x3800 | 0x3800 << 16,
    )];
    for _ in 0..N {
        let mut w = || fmt.random(&mut rng) as u64 | (fmt.random(&mut rng) as u64) << 16;
        let (a, b, c) = (w(), w(), w());
        v.push(row(a, b, c, per_half(fmt, a, b, c, op, sat)));
    }
    if let Fmt::F16 = fmt {
        for (a, b, c) in specials {
            v.push(row(a, b, c, per_half(fmt, a, b, c, op, sat)));
        }
    }
    v
}

#[test]
fn f16x2_and_bf16x2_arithmetic() {
    let w = [B32; 4];
    let add: Op3 = |a, b, _| (a + b) as f64;
    let sub: Op3 = |a, b, _| (a - b) as f64;
    let mul: Op3 = |a, b, _| (a * b) as f64;
    let fma: Op3 = |a, b, c| (a as f64).mul_add(b as f64, c as f64);
    let mut cases = Vec::new();
    for (i, (name, op)) in [("add", add), ("sub", sub), ("mul", mul), ("fma", fma)]
        .into_iter()
        .enumerate()
    {
        let operands = if name == "fma" {
            "%d, %a, %b, %c"
        } else {
            "%d, %a, %b"
        };
        let s = i as u64;
        cases.push(
            Case::new(
                format!("{name}.rn.f16x2"),
                format!("{name}.rn.f16x2 {operands};"),
                w,
            )
            .rows(x2_rows(Fmt::F16, s, op, false)),
        );
        cases.push(
            Case::new(
                format!("{name}.rn.sat.f16x2"),
                format!("{name}.rn.sat.f16x2 {operands};"),
                w,
            )
            .rows(x2_rows(Fmt::F16, s + 10, op, true)),
        );
        cases.push(
            Case::new(
                format!("{name}.rn.bf16x2"),
                format!("{name}.rn.bf16x2 {operands};"),
                w,
            )
            .rows(x2_rows(Fmt::Bf16, s + 20, op, false)),
        );
    }
    // Default rounding (no modifier) is .rn.
    cases.push(
        Case::new("add.f16x2", "add.f16x2 %d, %a, %b;", w).rows(x2_rows(Fmt::F16, 40, add, false)),
    );
    cases.push(
        Case::new("mul.f16x2", "mul.f16x2 %d, %a, %b;", w).rows(x2_rows(Fmt::F16, 41, mul, false)),
    );
    run_cases(&cases);
}

#[test]
fn scalar_half_arithmetic() {
    let w = [B16; 4];
    let mut cases = Vec::new();
    for fmt in [Fmt::F16, Fmt::Bf16] {
        let mut rng = Rng(50);
        let mut rows = |op: Op3| -> Vec<Row> {
            (0..N)
                .map(|_| {
                    let (a, b, c) = (
                        fmt.random(&mut rng),
                        fmt.random(&mut rng),
                        fmt.random(&mut rng),
                    );
                    let d = fmt.round_f64(op(fmt.to_f32(a), fmt.to_f32(b), fmt.to_f32(c)));
                    row(a as u64, b as u64, c as u64, d as u64)
                })
                .collect()
        };
        let n = fmt.name();
        cases.push(
            Case::new(format!("add.rn.{n}"), format!("add.rn.{n} %d, %a, %b;"), w)
                .rows(rows(|a, b, _| (a + b) as f64)),
        );
        cases.push(
            Case::new(format!("mul.rn.{n}"), format!("mul.rn.{n} %d, %a, %b;"), w)
                .rows(rows(|a, b, _| (a * b) as f64)),
        );
        cases.push(
            Case::new(
                format!("fma.rn.{n}"),
                format!("fma.rn.{n} %d, %a, %b, %c;"),
                w,
            )
            .rows(rows(|a, b, c| (a as f64).mul_add(b as f64, c as f64))),
        );
    }
    // Overflow to infinity and NaN handling, hand-worked f16 bit patterns.
    cases.push(
        Case::new("add.f16 specials", "add.f16 %d, %a, %b;", w)
            .row(0x7bff, 0x7bff, 0, 0x7c00) // 65504 + 65504 -> +inf
            .row(0x3c00, 0xbc00, 0, 0x0000) // 1 - 1 -> +0
            .row(0x7c00, 0xfc00, 0, 0x7fff) // inf - inf -> canonical NaN
            .row(0x0001, 0x0001, 0, 0x0002), // subnormals are kept without .ftz
    );
    cases.push(
        Case::new("add.ftz.f16", "add.ftz.f16 %d, %a, %b;", w).row(0x0001, 0x0001, 0, 0x0000),
    );
    run_cases(&cases);
}

#[test]
fn half_min_max_neg_abs_setp() {
    let w = [B32; 4];
    // Element 0 low half, element 1 high half.
    let p = |lo: u16, hi: u16| lo as u64 | (hi as u64) << 16;
    let one = 0x3c00u16;
    let two = 0x4000u16;
    let mone = 0xbc00u16;
    let nan = 0x7e00u16;
    let b_one = 0x3f80u16;
    let b_two = 0x4000u16;
    let cases = vec![
        Case::new("min.f16x2", "min.f16x2 %d, %a, %b;", w)
            .row(p(one, two), p(two, one), 0, p(one, one))
            .row(p(nan, mone), p(two, nan), 0, p(two, mone))
            .row(p(nan, 0), p(nan, 0), 0, p(0x7fff, 0)),
        Case::new("max.f16x2", "max.f16x2 %d, %a, %b;", w)
            .row(p(one, two), p(two, one), 0, p(two, two))
            .row(p(nan, mone), p(two, nan), 0, p(two, mone)),
        Case::new("min.NaN.f16x2", "min.NaN.f16x2 %d, %a, %b;", w).row(p(nan, one), p(two, two), 0, p(0x7fff, one)),
        Case::new("max.bf16x2", "max.bf16x2 %d, %a, %b;", w).row(p(b_one, b_two), p(b_two, b_one), 0, p(b_two, b_two)),
        Case::new("min.bf16x2", "min.bf16x2 %d, %a, %b;", w).row(p(b_one, 0x7fc0), p(b_two, b_one), 0, p(b_one, b_one)),
        Case::new("neg.f16x2", "neg.f16x2 %d, %a;", w).row(p(one, mone), 0, 0, p(mone, one)),
        Case::new("abs.f16x2", "abs.f16x2 %d, %a;", w).row(p(mone, 0x8000), 0, 0, p(one, 0)),
        Case::new("neg.bf16x2", "neg.bf16x2 %d, %a;", w).row(p(b_one, 0xc000), 0, 0, p(0xbf80, b_two)),
        Case::new("abs.bf16x2", "abs.bf16x2 %d, %a;", w).row(p(0xbf80, b_two), 0, 0, p(b_one, b_two)),
        // setp on x2: p = element 0 (low half), q = element 1 (high half).
        Case::new(
            "setp.lt.f16x2 p|q",
            "setp.lt.f16x2 %p1|%p2, %a, %b;\nselp.u32 %r1, 1, 0, %p1;\nselp.u32 %r2, 2, 0, %p2;\nor.b32 %d, %r1, %r2;",
            w,
        )
        .row(p(one, two), p(two, one), 0, 1)
        .row(p(two, one), p(one, two), 0, 2)
        .row(p(nan, one), p(one, nan), 0, 0),
        Case::new(
            "setp.ltu.f16x2 p|q",
            "setp.ltu.f16x2 %p1|%p2, %a, %b;\nselp.u32 %r1, 1, 0, %p1;\nselp.u32 %r2, 2, 0, %p2;\nor.b32 %d, %r1, %r2;",
            w,
        )
        .row(p(nan, one), p(one, nan), 0, 3)
        .row(p(two, two), p(one, one), 0, 0),
        Case::new("setp.lt.f16", "setp.lt.f16 %p1, %a, %b;\nselp.u32 %d, 1, 0, %p1;", [B16, B16, B16, B32])
            .row(one as u64, two as u64, 0, 1)
            .row(two as u64, one as u64, 0, 0)
            .row(nan as u64, one as u64, 0, 0),
    ];
    run_cases(&cases);
}

#[test]
fn mov_pack_unpack() {
    let cases = vec![
        Case::new(
            "mov.b32 unpack/pack halves (swap)",
            "mov.b32 {%h1, %h2}, %a;\nmov.b32 %d, {%h2, %h1};",
            [B32; 4],
        )
        .row(0x1111_2222, 0, 0, 0x2222_1111)
        .row(0xdead_beef, 0, 0, 0xbeef_dead),
        Case::new(
            "mov.b64 unpack/pack words (swap)",
            "mov.b64 {%r1, %r2}, %a;\nmov.b64 %d, {%r2, %r1};",
            [B64; 4],
        )
        .row(0x0123_4567_89ab_cdef, 0, 0, 0x89ab_cdef_0123_4567),
        Case::new(
            "mov.b64 from four halves",
            "mov.b32 {%h1, %h2}, %a;\nmov.b32 {%h3, %h4}, %b;\nmov.b64 %d, {%h4, %h3, %h2, %h1};",
            [B32, B32, B32, B64],
        )
        .row(0x2222_1111, 0x4444_3333, 0, 0x1111_2222_3333_4444),
        Case::new(
            "mov.b32 unpack low half",
            "mov.b32 {%h1, _}, %a;\ncvt.u32.u16 %d, %h1;",
            [B32; 4],
        )
        .row(0xaaaa_5555, 0, 0, 0x5555),
        Case::new(
            "cvt.f32.f16 of the high half",
            "mov.b32 {%h1, %h2}, %a;\ncvt.f32.f16 %d, %h2;",
            [B32; 4],
        )
        .row(0x4000_3c00, 0, 0, 2.0f32.to_bits() as u64),
    ];
    run_cases(&cases);
}
