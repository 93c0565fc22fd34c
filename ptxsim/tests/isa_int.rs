//! Integer instructions: add/sub (wrap, .sat), mul (.lo/.hi/.wide), mad, div/rem, min/max/abs/neg,
//! logic and shifts, bfe/bfi/prmt/popc/clz/brev/bfind, shf, integer setp with every comparison,
//! selp/slct. Expected values come from Rust's native integer operations and bit loops written
//! from the PTX ISA definitions.

mod common;

use common::isa::{random_rows, row, run_cases, Case, Row, W};
use W::{B32, B64};

const N: usize = 200;

/// A signed / unsigned comparison.
type CmpS = fn(i32, i32) -> bool;
type CmpU = fn(u32, u32) -> bool;

fn s32(x: u64) -> i32 {
    x as u32 as i32
}
fn u32_(x: u64) -> u32 {
    x as u32
}
fn z(x: i32) -> u64 {
    x as u32 as u64
}

/// Special 32-bit values combined pairwise with a few others.
fn edge_rows32(f: impl Fn(u64, u64, u64) -> u64) -> Vec<Row> {
    let vals: [u64; 7] = [
        0,
        1,
        0x7fff_ffff,
        0x8000_0000,
        0xffff_ffff,
        0xffff_fffe,
        12345,
    ];
    let mut v = Vec::new();
    for &a in &vals {
        for &b in &vals {
            v.push(row(a, b, 7, f(a, b, 7)));
        }
    }
    v
}

fn edge_rows64(f: impl Fn(u64, u64, u64) -> u64) -> Vec<Row> {
    let vals: [u64; 6] = [
        0,
        1,
        i64::MAX as u64,
        i64::MIN as u64,
        u64::MAX,
        0x1234_5678_9abc_def0,
    ];
    let mut v = Vec::new();
    for &a in &vals {
        for &b in &vals {
            v.push(row(a, b, 3, f(a, b, 3)));
        }
    }
    v
}

fn case32(name: &str, body: &str, f: fn(u64, u64, u64) -> u64) -> Case {
    Case::new(name, body, [B32, B32, B32, B32])
        .rows(edge_rows32(f))
        .rows(random_rows(name.len() as u64 * 7919, N, [B32, B32, B32], f))
}

fn case64(name: &str, body: &str, f: fn(u64, u64, u64) -> u64) -> Case {
    Case::new(name, body, [B64, B64, B64, B64])
        .rows(edge_rows64(f))
        .rows(random_rows(
            name.len() as u64 * 104729,
            N,
            [B64, B64, B64],
            f,
        ))
}

#[test]
fn add_sub_mul_mad() {
    let cases = vec![
        case32("add.s32", "add.s32 %d, %a, %b;", |a, b, _| {
            z(s32(a).wrapping_add(s32(b)))
        }),
        case32("add.sat.s32", "add.sat.s32 %d, %a, %b;", |a, b, _| {
            z(s32(a).saturating_add(s32(b)))
        }),
        case32("sub.s32", "sub.s32 %d, %a, %b;", |a, b, _| {
            z(s32(a).wrapping_sub(s32(b)))
        }),
        case32("sub.sat.s32", "sub.sat.s32 %d, %a, %b;", |a, b, _| {
            z(s32(a).saturating_sub(s32(b)))
        }),
        case64("add.u64", "add.u64 %d, %a, %b;", |a, b, _| {
            a.wrapping_add(b)
        }),
        case64("sub.s64", "sub.s64 %d, %a, %b;", |a, b, _| {
            a.wrapping_sub(b)
        }),
        case32("mul.lo.s32", "mul.lo.s32 %d, %a, %b;", |a, b, _| {
            z(s32(a).wrapping_mul(s32(b)))
        }),
        case32("mul.hi.s32", "mul.hi.s32 %d, %a, %b;", |a, b, _| {
            ((s32(a) as i64 * s32(b) as i64) >> 32) as u32 as u64
        }),
        case32("mul.hi.u32", "mul.hi.u32 %d, %a, %b;", |a, b, _| {
            (a * b) >> 32
        }),
        Case::new(
            "mul.wide.s32",
            "mul.wide.s32 %d, %a, %b;",
            [B32, B32, B32, B64],
        )
        .rows(edge_rows32(|a, b, _| {
            (s32(a) as i64 * s32(b) as i64) as u64
        }))
        .rows(random_rows(11, N, [B32, B32, B32], |a, b, _| {
            (s32(a) as i64 * s32(b) as i64) as u64
        })),
        Case::new(
            "mul.wide.u32",
            "mul.wide.u32 %d, %a, %b;",
            [B32, B32, B32, B64],
        )
        .rows(edge_rows32(|a, b, _| a * b))
        .rows(random_rows(12, N, [B32, B32, B32], |a, b, _| a * b)),
        Case::new(
            "mul.wide.s16",
            "cvt.u16.u32 %h1, %a;\ncvt.u16.u32 %h2, %b;\nmul.wide.s16 %d, %h1, %h2;",
            [B32, B32, B32, B32],
        )
        .rows(random_rows(13, N, [B32, B32, B32], |a, b, _| {
            z(a as u16 as i16 as i32 * b as u16 as i16 as i32)
        })),
        case64("mul.lo.u64", "mul.lo.u64 %d, %a, %b;", |a, b, _| {
            a.wrapping_mul(b)
        }),
        case64("mul.hi.u64", "mul.hi.u64 %d, %a, %b;", |a, b, _| {
            ((a as u128 * b as u128) >> 64) as u64
        }),
        case64("mul.hi.s64", "mul.hi.s64 %d, %a, %b;", |a, b, _| {
            ((a as i64 as i128 * b as i64 as i128) >> 64) as u64
        }),
        case32("mad.lo.s32", "mad.lo.s32 %d, %a, %b, %c;", |a, b, c| {
            z(s32(a).wrapping_mul(s32(b)).wrapping_add(s32(c)))
        }),
        case32("mad.hi.u32", "mad.hi.u32 %d, %a, %b, %c;", |a, b, c| {
            ((a * b) >> 32).wrapping_add(c) & 0xffff_ffff
        }),
        case32(
            "mad.hi.sat.s32",
            "mad.hi.sat.s32 %d, %a, %b, %c;",
            |a, b, c| {
                let hi = (s32(a) as i64 * s32(b) as i64) >> 32;
                z((hi + s32(c) as i64).clamp(i32::MIN as i64, i32::MAX as i64) as i32)
            },
        ),
        Case::new(
            "mad.wide.s32",
            "mad.wide.s32 %d, %a, %b, %c;",
            [B32, B32, B64, B64],
        )
        .rows(random_rows(14, N, [B32, B32, B64], |a, b, c| {
            (s32(a) as i64 * s32(b) as i64).wrapping_add(c as i64) as u64
        })),
        Case::new(
            "mad.wide.u32",
            "mad.wide.u32 %d, %a, %b, %c;",
            [B32, B32, B64, B64],
        )
        .rows(random_rows(15, N, [B32, B32, B64], |a, b, c| {
            (a * b).wrapping_add(c)
        })),
        case64("mad.lo.s64", "mad.lo.s64 %d, %a, %b, %c;", |a, b, c| {
            a.wrapping_mul(b).wrapping_add(c)
        }),
        case32("mul24.lo.u32", "mul24.lo.u32 %d, %a, %b;", |a, b, _| {
            ((a & 0xff_ffff) * (b & 0xff_ffff)) & 0xffff_ffff
        }),
        case32("sad.u32", "sad.u32 %d, %a, %b, %c;", |a, b, c| {
            (a.abs_diff(b) + c) & 0xffff_ffff
        }),
    ];
    run_cases(&cases);
}

#[test]
fn div_rem() {
    // Divisors never zero (PTX leaves x/0 unspecified) and never INT_MIN / -1.
    fn rows32(seed: u64, f: fn(i64, i64) -> i64, signed: bool) -> Vec<Row> {
        let mut rng = common::Rng(seed);
        let mut v = Vec::new();
        let specials: [(u64, u64); 8] = [
            (7, 2),
            ((-7i32) as u32 as u64, 2),
            (7, (-2i32) as u32 as u64),
            ((-7i32) as u32 as u64, (-2i32) as u32 as u64),
            (0xffff_ffff, 1),
            (0x8000_0000, 3),
            (5, 0xffff_ffff),
            (0, 9),
        ];
        let ext = |x: u64| if signed { s32(x) as i64 } else { x as i64 };
        for (a, b) in specials {
            v.push(row(a, b, 0, f(ext(a), ext(b)) as u64 & 0xffff_ffff));
        }
        for _ in 0..N {
            let a = rng.next_u32() as u64;
            let mut b = (rng.next_u32() >> rng.range(0, 31)) as u64;
            if b == 0 {
                b = 3;
            }
            v.push(row(a, b, 0, f(ext(a), ext(b)) as u64 & 0xffff_ffff));
        }
        v
    }
    fn rows64(seed: u64, f: fn(i128, i128) -> i128, signed: bool) -> Vec<Row> {
        let mut rng = common::Rng(seed);
        let ext = |x: u64| if signed { x as i64 as i128 } else { x as i128 };
        let mut v = vec![
            row(u64::MAX, 7, 0, f(ext(u64::MAX), 7) as u64),
            row((-9i64) as u64, 4, 0, f(ext((-9i64) as u64), 4) as u64),
            row(9, (-4i64) as u64, 0, f(9, ext((-4i64) as u64)) as u64),
        ];
        for _ in 0..N {
            let a = rng.next_u64();
            let mut b = rng.next_u64() >> rng.range(0, 63);
            if b == 0 {
                b = 5;
            }
            v.push(row(a, b, 0, f(ext(a), ext(b)) as u64));
        }
        v
    }
    let w32 = [B32, B32, B32, B32];
    let w64 = [B64, B64, B64, B64];
    let cases = vec![
        Case::new("div.s32", "div.s32 %d, %a, %b;", w32).rows(rows32(1, |a, b| a / b, true)),
        Case::new("rem.s32", "rem.s32 %d, %a, %b;", w32).rows(rows32(2, |a, b| a % b, true)),
        Case::new("div.u32", "div.u32 %d, %a, %b;", w32).rows(rows32(3, |a, b| a / b, false)),
        Case::new("rem.u32", "rem.u32 %d, %a, %b;", w32).rows(rows32(4, |a, b| a % b, false)),
        Case::new("div.s64", "div.s64 %d, %a, %b;", w64).rows(rows64(5, |a, b| a / b, true)),
        Case::new("rem.s64", "rem.s64 %d, %a, %b;", w64).rows(rows64(6, |a, b| a % b, true)),
        Case::new("div.u64", "div.u64 %d, %a, %b;", w64).rows(rows64(7, |a, b| a / b, false)),
        Case::new("rem.u64", "rem.u64 %d, %a, %b;", w64).rows(rows64(8, |a, b| a % b, false)),
    ];
    run_cases(&cases);
}

#[test]
fn min_max_abs_neg_logic_shift() {
    let cases = vec![
        case32("min.s32", "min.s32 %d, %a, %b;", |a, b, _| {
            z(s32(a).min(s32(b)))
        }),
        case32("max.s32", "max.s32 %d, %a, %b;", |a, b, _| {
            z(s32(a).max(s32(b)))
        }),
        case32("min.u32", "min.u32 %d, %a, %b;", |a, b, _| a.min(b)),
        case32("max.u32", "max.u32 %d, %a, %b;", |a, b, _| a.max(b)),
        case64("min.s64", "min.s64 %d, %a, %b;", |a, b, _| {
            (a as i64).min(b as i64) as u64
        }),
        case64("max.u64", "max.u64 %d, %a, %b;", |a, b, _| a.max(b)),
        case32("abs.s32", "abs.s32 %d, %a;", |a, _, _| {
            z(s32(a).wrapping_abs())
        }),
        case32("neg.s32", "neg.s32 %d, %a;", |a, _, _| {
            z(s32(a).wrapping_neg())
        }),
        case64("neg.s64", "neg.s64 %d, %a;", |a, _, _| {
            (a as i64).wrapping_neg() as u64
        }),
        case32("and.b32", "and.b32 %d, %a, %b;", |a, b, _| a & b),
        case32("or.b32", "or.b32 %d, %a, %b;", |a, b, _| a | b),
        case32("xor.b32", "xor.b32 %d, %a, %b;", |a, b, _| a ^ b),
        case32("not.b32", "not.b32 %d, %a;", |a, _, _| !a & 0xffff_ffff),
        case32("cnot.b32", "cnot.b32 %d, %a;", |a, _, _| (a == 0) as u64),
        case64("xor.b64", "xor.b64 %d, %a, %b;", |a, b, _| a ^ b),
        // Shift amounts are taken from b & 63 so both in-range and >= width counts occur;
        // PTX clamps shift amounts larger than the width.
        case32(
            "shl.b32",
            "and.b32 %r1, %b, 63;\nshl.b32 %d, %a, %r1;",
            |a, b, _| {
                let s = b & 63;
                if s >= 32 {
                    0
                } else {
                    (a << s) & 0xffff_ffff
                }
            },
        ),
        case32(
            "shr.u32",
            "and.b32 %r1, %b, 63;\nshr.u32 %d, %a, %r1;",
            |a, b, _| {
                let s = b & 63;
                if s >= 32 {
                    0
                } else {
                    a >> s
                }
            },
        ),
        case32(
            "shr.s32",
            "and.b32 %r1, %b, 63;\nshr.s32 %d, %a, %r1;",
            |a, b, _| z(s32(a) >> (b & 63).min(31)),
        ),
        Case::new(
            "shl.b64",
            "and.b32 %r1, %b, 127;\nshl.b64 %d, %a, %r1;",
            [B64, B32, B32, B64],
        )
        .rows(random_rows(21, N, [B64, B32, B32], |a, b, _| {
            let s = b & 127;
            if s >= 64 {
                0
            } else {
                a << s
            }
        })),
        Case::new(
            "shr.s64",
            "and.b32 %r1, %b, 127;\nshr.s64 %d, %a, %r1;",
            [B64, B32, B32, B64],
        )
        .rows(random_rows(22, N, [B64, B32, B32], |a, b, _| {
            ((a as i64) >> (b & 127).min(63)) as u64
        })),
        case32(
            "shf.l.wrap.b32",
            "shf.l.wrap.b32 %d, %a, %b, %c;",
            |a, b, c| {
                // d = upper 32 bits of ({b, a} << (c & 31))
                let n = c & 31;
                ((((b << 32) | a) << n) >> 32) & 0xffff_ffff
            },
        ),
        case32(
            "shf.r.wrap.b32",
            "shf.r.wrap.b32 %d, %a, %b, %c;",
            |a, b, c| {
                let n = c & 31;
                (((b << 32) | a) >> n) & 0xffff_ffff
            },
        ),
        case32(
            "shf.l.clamp.b32",
            "shf.l.clamp.b32 %d, %a, %b, %c;",
            |a, b, c| {
                let n = c.min(32);
                (((((b << 32) | a) as u128) << n) >> 32) as u64 & 0xffff_ffff
            },
        ),
        case32(
            "shf.r.clamp.b32",
            "shf.r.clamp.b32 %d, %a, %b, %c;",
            |a, b, c| {
                let n = c.min(32);
                (((b << 32) | a) >> n) & 0xffff_ffff
            },
        ),
    ];
    run_cases(&cases);
}

/// bfe from the PTX ISA definition, bit by bit.
fn bfe_ref(a: u64, pos: u64, len: u64, bits: u32, signed: bool) -> u64 {
    let (pos, len) = (pos & 0xff, len & 0xff);
    let msb = bits as u64 - 1;
    let bit = |i: u64| (a >> i) & 1;
    let sbit = if signed && len != 0 {
        bit((pos + len - 1).min(msb))
    } else {
        0
    };
    let mut d = 0u64;
    for i in 0..=msb {
        let v = if i < len && pos + i <= msb {
            bit(pos + i)
        } else {
            sbit
        };
        d |= v << i;
    }
    d
}

/// bfi from the PTX ISA definition: insert len bits of a into b at pos.
fn bfi_ref(a: u64, b: u64, pos: u64, len: u64, bits: u32) -> u64 {
    let (pos, len) = (pos & 0xff, len & 0xff);
    let msb = bits as u64 - 1;
    let mut f = b;
    let mut i = 0;
    while i < len && pos + i <= msb {
        f = (f & !(1 << (pos + i))) | (((a >> i) & 1) << (pos + i));
        i += 1;
    }
    f
}

/// prmt from the PTX ISA definition; `mode` None is the generic form.
fn prmt_ref(a: u64, b: u64, c: u64, mode: Option<&str>) -> u64 {
    let bytes = ((b & 0xffff_ffff) << 32) | (a & 0xffff_ffff);
    let byte = |i: u64| (bytes >> (8 * (i & 7))) & 0xff;
    // Sources of d.b0 .. d.b3.
    let sel: [u64; 4] = match mode {
        None => {
            let mut d = 0;
            for k in 0..4 {
                let ctl = (c >> (4 * k)) & 0xf;
                let v = byte(ctl & 7);
                let v = if ctl & 8 != 0 {
                    if v & 0x80 != 0 {
                        0xff
                    } else {
                        0
                    }
                } else {
                    v
                };
                d |= v << (8 * k);
            }
            return d;
        }
        Some(m) => {
            let s = c & 3;
            match m {
                "f4e" => [s, s + 1, s + 2, s + 3],
                "b4e" => [s, (s + 7) & 7, (s + 6) & 7, (s + 5) & 7],
                "rc8" => [s; 4],
                "ecl" => [s, s.max(1), s.max(2), 3],
                "ecr" => [0, s.min(1), s.min(2), s],
                "rc16" => {
                    let lo = (s & 1) * 2;
                    [lo, lo + 1, lo, lo + 1]
                }
                _ => unreachable!(),
            }
        }
    };
    (0..4)
        .map(|k| byte(sel[k]) << (8 * k))
        .fold(0, |x, y| x | y)
}

#[test]
fn bit_manipulation() {
    let w = [B32, B32, B32, B32];
    let mut cases = vec![
        Case::new("bfe.u32", "bfe.u32 %d, %a, %b, %c;", w)
            .rows(small_pos_len(31, |a, b, c| bfe_ref(a, b, c, 32, false))),
        Case::new("bfe.s32", "bfe.s32 %d, %a, %b, %c;", w)
            .rows(small_pos_len(32, |a, b, c| bfe_ref(a, b, c, 32, true))),
        Case::new("bfe.u64", "bfe.u64 %d, %a, %b, %c;", [B64, B32, B32, B64])
            .rows(small_pos_len(33, |a, b, c| bfe_ref(a, b, c, 64, false))),
        Case::new("bfe.s64", "bfe.s64 %d, %a, %b, %c;", [B64, B32, B32, B64])
            .rows(small_pos_len(34, |a, b, c| bfe_ref(a, b, c, 64, true))),
        // c packs pos (low 16 bits) and len (high 16 bits).
        Case::new(
            "bfi.b32",
            "and.b32 %r1, %c, 65535;\nshr.u32 %r2, %c, 16;\nbfi.b32 %d, %a, %b, %r1, %r2;",
            w,
        )
        .rows(
            random_rows(35, N, [B32, B32, B32], |_, _, _| 0)
                .into_iter()
                .map(|r| {
                    let c = (r.c & 0x3f) | ((r.c >> 16 & 0x3f) << 16);
                    row(r.a, r.b, c, bfi_ref(r.a, r.b, c & 0xffff, c >> 16, 32))
                }),
        ),
        Case::new(
            "bfi.b64",
            "and.b32 %r1, %c, 65535;\nshr.u32 %r2, %c, 16;\nbfi.b64 %d, %a, %b, %r1, %r2;",
            [B64, B64, B32, B64],
        )
        .rows(
            random_rows(36, N, [B64, B64, B32], |_, _, _| 0)
                .into_iter()
                .map(|r| {
                    let c = (r.c & 0x7f) | ((r.c >> 16 & 0x7f) << 16);
                    row(r.a, r.b, c, bfi_ref(r.a, r.b, c & 0xffff, c >> 16, 64))
                }),
        ),
        Case::new("prmt.b32", "prmt.b32 %d, %a, %b, %c;", w)
            .rows(random_rows(37, N, [B32, B32, B32], |a, b, c| {
                prmt_ref(a, b, c, None)
            }))
            .row(0x8844_2211, 0xf0e0_d0c0, 0x3210, 0x8844_2211)
            .row(0x8844_2211, 0xf0e0_d0c0, 0x7654, 0xf0e0_d0c0)
            // ctl nibbles b, 8, b, 8: sign of byte 3 (0x88 -> 0xff), sign of byte 0 (0x11 -> 0x00).
            .row(0x8844_2211, 0xf0e0_d0c0, 0x8b8b, 0x00ff_00ff),
        Case::new("popc.b32", "popc.b32 %d, %a;", w).rows(random_rows(
            38,
            N,
            [B32, B32, B32],
            |a, _, _| a.count_ones() as u64,
        )),
        Case::new("popc.b64", "popc.b64 %d, %a;", [B64, B32, B32, B32])
            .rows(random_rows(39, N, [B64, B32, B32], |a, _, _| {
                a.count_ones() as u64
            }))
            .row(u64::MAX, 0, 0, 64),
        Case::new("clz.b32", "shr.u32 %r1, %a, %b;\nclz.b32 %d, %r1;", w)
            .rows(
                random_rows(40, N, [B32, B32, B32], |_, _, _| 0)
                    .into_iter()
                    .map(|r| {
                        let b = r.b & 31;
                        row(r.a, b, r.c, ((r.a as u32) >> b).leading_zeros() as u64)
                    }),
            )
            .row(0, 0, 0, 32),
        Case::new("clz.b64", "clz.b64 %d, %a;", [B64, B32, B32, B32])
            .rows(random_rows(41, N, [B64, B32, B32], |a, _, _| {
                a.leading_zeros() as u64
            }))
            .row(0, 0, 0, 64)
            .row(1, 0, 0, 63),
        Case::new("brev.b32", "brev.b32 %d, %a;", w).rows(random_rows(
            42,
            N,
            [B32, B32, B32],
            |a, _, _| (a as u32).reverse_bits() as u64,
        )),
        Case::new("brev.b64", "brev.b64 %d, %a;", [B64, B32, B32, B64]).rows(random_rows(
            43,
            N,
            [B64, B32, B32],
            |a, _, _| a.reverse_bits(),
        )),
        // bfind: position of the most significant non-sign bit; 0xffffffff when none.
        Case::new("bfind.u32", "bfind.u32 %d, %a;", w)
            .rows(random_rows(44, N, [B32, B32, B32], |a, _, _| {
                31 - (a as u32).leading_zeros() as u64
            }))
            .row(0, 0, 0, 0xffff_ffff),
        Case::new("bfind.s32", "bfind.s32 %d, %a;", w)
            .rows(random_rows(45, N, [B32, B32, B32], |a, _, _| {
                let x = if s32(a) < 0 { !(a as u32) } else { a as u32 };
                if x == 0 {
                    0xffff_ffff
                } else {
                    31 - x.leading_zeros() as u64
                }
            }))
            .row(0xffff_ffff, 0, 0, 0xffff_ffff),
        Case::new("bfind.shiftamt.u32", "bfind.shiftamt.u32 %d, %a;", w).rows(random_rows(
            46,
            N,
            [B32, B32, B32],
            |a, _, _| (a as u32).leading_zeros() as u64,
        )),
    ];
    for m in ["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"] {
        let mut rows = Vec::new();
        for s in 0..4u64 {
            for (a, b) in [(0x3322_1100u64, 0x7766_5544u64), (0x8844_2211, 0xf0e0_d0c0)] {
                rows.push(row(a, b, s | 0x40, prmt_ref(a, b, s, Some(m))));
            }
        }
        cases.push(
            Case::new(
                format!("prmt.b32.{m}"),
                format!("prmt.b32.{m} %d, %a, %b, %c;"),
                w,
            )
            .rows(rows),
        );
    }
    run_cases(&cases);
}

/// Rows with random a and pos/len mostly in range (sometimes beyond the width).
fn small_pos_len(seed: u64, f: impl Fn(u64, u64, u64) -> u64) -> Vec<Row> {
    let mut rng = common::Rng(seed);
    let mut v = Vec::new();
    for i in 0..N {
        let a = rng.next_u64();
        let (pos, len) = if i % 8 == 7 {
            (rng.range(0, 256) as u64 | 0x100, rng.range(0, 256) as u64)
        } else {
            (rng.range(0, 70) as u64, rng.range(0, 40) as u64)
        };
        v.push(row(a, pos, len, f(a, pos, len)));
    }
    v.push(row(0xf0, 4, 0, f(0xf0, 4, 0)));
    v
}

#[test]
fn setp_integer_every_comparison() {
    let vals: [u64; 6] = [0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 5];
    let signed: [(&str, CmpS); 6] = [
        ("eq", |a, b| a == b),
        ("ne", |a, b| a != b),
        ("lt", |a, b| a < b),
        ("le", |a, b| a <= b),
        ("gt", |a, b| a > b),
        ("ge", |a, b| a >= b),
    ];
    let unsigned: [(&str, CmpU); 6] = [
        ("lo", |a, b| a < b),
        ("ls", |a, b| a <= b),
        ("hi", |a, b| a > b),
        ("hs", |a, b| a >= b),
        ("eq", |a, b| a == b),
        ("ne", |a, b| a != b),
    ];
    let mut cases = Vec::new();
    for (cmp, f) in signed {
        let rows = vals.iter().flat_map(|&a| {
            vals.iter()
                .map(move |&b| row(a, b, 0, f(s32(a), s32(b)) as u64))
        });
        cases.push(
            Case::new(
                format!("setp.{cmp}.s32"),
                format!("setp.{cmp}.s32 %p1, %a, %b;\nselp.u32 %d, 1, 0, %p1;"),
                [B32; 4],
            )
            .rows(rows.collect::<Vec<_>>()),
        );
        // 64-bit with sign-extended values.
        let rows64 = vals.iter().flat_map(|&a| {
            vals.iter().map(move |&b| {
                row(
                    s32(a) as i64 as u64,
                    s32(b) as i64 as u64,
                    0,
                    f(s32(a), s32(b)) as u64,
                )
            })
        });
        cases.push(
            Case::new(
                format!("setp.{cmp}.s64"),
                format!("setp.{cmp}.s64 %p1, %a, %b;\nselp.u32 %d, 1, 0, %p1;"),
                [B64, B64, B64, B32],
            )
            .rows(rows64.collect::<Vec<_>>()),
        );
    }
    for (cmp, f) in unsigned {
        let rows = vals.iter().flat_map(|&a| {
            vals.iter()
                .map(move |&b| row(a, b, 0, f(u32_(a), u32_(b)) as u64))
        });
        cases.push(
            Case::new(
                format!("setp.{cmp}.u32"),
                format!("setp.{cmp}.u32 %p1, %a, %b;\nselp.u32 %d, 1, 0, %p1;"),
                [B32; 4],
            )
            .rows(rows.collect::<Vec<_>>()),
        );
    }
    // Both destinations (p | !p) and a combining predicate (setp.lt.and with c != 0).
    cases.push(
        Case::new(
            "setp.lt.s32 p|q",
            "setp.lt.s32 %p1|%p2, %a, %b;\nselp.u32 %r1, 1, 0, %p1;\nselp.u32 %r2, 2, 0, %p2;\nor.b32 %d, %r1, %r2;",
            [B32; 4],
        )
        .row(1, 2, 0, 1)
        .row(2, 1, 0, 2)
        .row(0xffff_ffff, 0, 0, 1),
    );
    cases.push(
        Case::new(
            "setp.lt.and.s32",
            "setp.ne.s32 %p2, %c, 0;\nsetp.lt.and.s32 %p1, %a, %b, %p2;\nselp.u32 %d, 1, 0, %p1;",
            [B32; 4],
        )
        .row(1, 2, 1, 1)
        .row(1, 2, 0, 0)
        .row(3, 2, 1, 0),
    );
    cases.push(
        Case::new(
            "setp.ge.or.u32 !p",
            "setp.ne.s32 %p2, %c, 0;\nsetp.ge.or.u32 %p1, %a, %b, !%p2;\nselp.u32 %d, 1, 0, %p1;",
            [B32; 4],
        )
        .row(1, 2, 1, 0)
        .row(1, 2, 0, 1)
        .row(3, 2, 1, 1),
    );
    run_cases(&cases);
}

#[test]
fn select_and_predicate_logic() {
    let f32b = |x: f32| x.to_bits() as u64;
    let cases = vec![
        Case::new("selp.b32", "setp.ne.s32 %p1, %c, 0;\nselp.b32 %d, %a, %b, %p1;", [B32; 4])
            .row(10, 20, 1, 10)
            .row(10, 20, 0, 20),
        Case::new("selp.b64", "setp.ne.s32 %p1, %c, 0;\nselp.b64 %d, %a, %b, %p1;", [B64, B64, B32, B64])
            .row(u64::MAX, 5, 7, u64::MAX)
            .row(u64::MAX, 5, 0, 5),
        Case::new("slct.b32.s32", "slct.b32.s32 %d, %a, %b, %c;", [B32; 4])
            .row(10, 20, 0, 10)
            .row(10, 20, 5, 10)
            .row(10, 20, 0xffff_ffff, 20)
            .row(10, 20, 0x8000_0000, 20),
        // c >= 0 selects a; -0.0 counts as >= 0; NaN selects b.
        Case::new("slct.s32.f32", "slct.s32.f32 %d, %a, %b, %c;", [B32; 4])
            .row(10, 20, f32b(1.5), 10)
            .row(10, 20, f32b(-1.5), 20)
            .row(10, 20, f32b(-0.0), 10)
            .row(10, 20, f32b(0.0), 10)
            .row(10, 20, f32b(f32::NAN), 20)
            .row(10, 20, f32b(f32::NEG_INFINITY), 20),
        Case::new(
            "and/or/xor/not.pred",
            "setp.ne.s32 %p1, %a, 0;\nsetp.ne.s32 %p2, %b, 0;\nand.pred %p3, %p1, %p2;\nor.pred %p4, %p1, %p2;\nxor.pred %p5, %p1, %p2;\nnot.pred %p6, %p1;\n\
             selp.u32 %r1, 1, 0, %p3;\nselp.u32 %r2, 2, 0, %p4;\nselp.u32 %r3, 4, 0, %p5;\nselp.u32 %r4, 8, 0, %p6;\n\
             or.b32 %r1, %r1, %r2;\nor.b32 %r3, %r3, %r4;\nor.b32 %d, %r1, %r3;",
            [B32; 4],
        )
        .row(0, 0, 0, 8)
        .row(1, 0, 0, 2 | 4)
        .row(0, 1, 0, 2 | 4 | 8)
        .row(1, 1, 0, 1 | 2),
        Case::new(
            "predicated mov and @!p",
            "mov.u32 %d, 7;\nsetp.gt.u32 %p1, %a, %b;\n@%p1 mov.u32 %d, 100;\n@!%p1 add.u32 %d, %d, 1;",
            [B32; 4],
        )
        .row(3, 2, 0, 100)
        .row(2, 3, 0, 8),
        Case::new("mov 16-bit", "cvt.u16.u32 %h1, %a;\nmov.b16 %h2, %h1;\ncvt.u32.u16 %d, %h2;", [B32; 4])
            .row(0x1234_5678, 0, 0, 0x5678),
    ];
    run_cases(&cases);
}
