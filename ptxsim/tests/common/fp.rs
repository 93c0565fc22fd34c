//! First-principles floating-point references for the instruction tests.
//!
//! Directed rounding (`.rz .rm .rp`) is derived from Rust's native round-to-nearest result and the
//! *sign of the rounding error* (exact - rounded), computed exactly: error-free transformations
//! (TwoSum, FMA residuals) summed with Shewchuk's Grow-Expansion. Knowing that sign, the
//! directed result is either the nearest result or its neighbour one ulp away. None of this
//! uses ptxsim's own numeric code.

use std::cmp::Ordering;

/// An IEEE rounding direction, as in PTX `.rn .rz .rm .rp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// To nearest, ties to even.
    Rn,
    /// Toward zero.
    Rz,
    /// Toward minus infinity.
    Rm,
    /// Toward plus infinity.
    Rp,
}

/// All four modes.
pub const MODES: [Mode; 4] = [Mode::Rn, Mode::Rz, Mode::Rm, Mode::Rp];

impl Mode {
    /// The PTX modifier, e.g. `.rz`.
    pub fn ptx(self) -> &'static str {
        match self {
            Mode::Rn => ".rn",
            Mode::Rz => ".rz",
            Mode::Rm => ".rm",
            Mode::Rp => ".rp",
        }
    }
}

/// (s, e) with s = fl(a + b) and a + b = s + e exactly (Knuth's TwoSum).
pub fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// The sign of the exact sum of `terms` (finite, no overflow), via Grow-Expansion.
pub fn exact_sign(terms: &[f64]) -> Ordering {
    let mut e: Vec<f64> = Vec::new();
    for &t in terms {
        let mut q = t;
        let mut next = Vec::with_capacity(e.len() + 1);
        for &x in &e {
            let (s, err) = two_sum(q, x);
            if err != 0.0 {
                next.push(err);
            }
            q = s;
        }
        if q != 0.0 {
            next.push(q);
        }
        e = next;
    }
    match e.last() {
        Some(x) if *x > 0.0 => Ordering::Greater,
        Some(_) => Ordering::Less,
        None => Ordering::Equal,
    }
}

/// The next representable value above `bits` in a `width`-bit IEEE format (16, 32 or 64;
/// bf16 works as 16 too since only the sign position matters). +inf stays +inf.
pub fn next_up(bits: u64, width: u32) -> u64 {
    let sign = 1u64 << (width - 1);
    let mag = bits & (sign - 1);
    if bits & sign == 0 {
        bits + 1
    } else if mag == 0 {
        1
    } else {
        bits - 1
    }
}

/// The next representable value below `bits` (see [`next_up`]).
pub fn next_down(bits: u64, width: u32) -> u64 {
    let sign = 1u64 << (width - 1);
    let mag = bits & (sign - 1);
    if bits & sign != 0 {
        bits + 1
    } else if mag == 0 {
        sign | 1
    } else {
        bits - 1
    }
}

/// The result under `mode`, given the round-to-nearest result `rn` (raw bits of a `width`-bit
/// format) and the sign of (exact - rn).
pub fn directed(rn: u64, width: u32, err: Ordering, mode: Mode) -> u64 {
    let negative = rn >> (width - 1) & 1 == 1;
    match (mode, err) {
        (_, Ordering::Equal) | (Mode::Rn, _) => rn,
        (Mode::Rm, Ordering::Less) => next_down(rn, width),
        (Mode::Rp, Ordering::Greater) => next_up(rn, width),
        (Mode::Rz, Ordering::Less) if !negative => next_down(rn, width),
        (Mode::Rz, Ordering::Greater) if negative => next_up(rn, width),
        _ => rn,
    }
}

/// Arithmetic operations with a rounding modifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// a + b
    Add,
    /// a - b
    Sub,
    /// a * b
    Mul,
    /// a / b
    Div,
    /// a * b + c
    Fma,
    /// sqrt(a)
    Sqrt,
    /// 1 / a
    Rcp,
}

impl Op {
    /// The PTX opcode.
    pub fn ptx(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Sub => "sub",
            Op::Mul => "mul",
            Op::Div => "div",
            Op::Fma => "fma",
            Op::Sqrt => "sqrt",
            Op::Rcp => "rcp",
        }
    }
    /// Number of source operands.
    pub fn arity(self) -> usize {
        match self {
            Op::Sqrt | Op::Rcp => 1,
            Op::Fma => 3,
            _ => 2,
        }
    }
}

/// Sign of zero of an exact-zero sum under IEEE 754: -0 only in round-toward-minus, or when
/// both addends are -0.
fn zero_sum(rn: u64, width: u32, x_neg: bool, y_neg: bool, mode: Mode) -> u64 {
    let sign = 1u64 << (width - 1);
    if rn & !sign != 0 {
        return rn;
    }
    if (x_neg && y_neg) || (x_neg != y_neg && mode == Mode::Rm) {
        sign
    } else {
        0
    }
}

/// The f32 result bits of `op` under `mode`; NaN results are the canonical 0x7fffffff.
/// Inputs are expected finite or the result is the native one (infinities, NaN, x/0 are exact).
pub fn f32_ref(op: Op, a: f32, b: f32, c: f32, mode: Mode) -> u32 {
    let rn = match op {
        Op::Add => a + b,
        Op::Sub => a - b,
        Op::Mul => a * b,
        Op::Div => a / b,
        Op::Fma => a.mul_add(b, c),
        Op::Sqrt => a.sqrt(),
        Op::Rcp => 1.0 / a,
    };
    if rn.is_nan() {
        return 0x7fff_ffff;
    }
    let used = [a, b, c];
    if used[..op.arity()].iter().any(|x| !x.is_finite())
        || (matches!(op, Op::Div) && b == 0.0)
        || (op == Op::Rcp && a == 0.0)
    {
        return rn.to_bits();
    }
    let (a, b, c, r) = (a as f64, b as f64, c as f64, rn as f64);
    let err = if rn.is_infinite() {
        if rn > 0.0 {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    } else {
        match op {
            Op::Add => exact_sign(&[a, b, -r]),
            Op::Sub => exact_sign(&[a, -b, -r]),
            Op::Mul => exact_sign(&[a * b, -r]),
            Op::Fma => exact_sign(&[a * b, c, -r]),
            Op::Div => sign_times(exact_sign(&[a, -(r * b)]), b),
            Op::Rcp => sign_times(exact_sign(&[1.0, -(r * a)]), a),
            Op::Sqrt => exact_sign(&[a, -(r * r)]),
        }
    };
    let bits = directed(rn.to_bits() as u64, 32, err, mode);
    let bits = match op {
        Op::Add => zero_sum(bits, 32, a.is_sign_negative(), b.is_sign_negative(), mode),
        Op::Sub => zero_sum(bits, 32, a.is_sign_negative(), !b.is_sign_negative(), mode),
        Op::Fma if err == Ordering::Equal => zero_sum(
            bits,
            32,
            (a * b).is_sign_negative(),
            c.is_sign_negative(),
            mode,
        ),
        _ => bits,
    };
    bits as u32
}

/// The f64 result bits of `op` under `mode` (see [`f32_ref`]); avoid subnormal results.
pub fn f64_ref(op: Op, a: f64, b: f64, c: f64, mode: Mode) -> u64 {
    let rn = match op {
        Op::Add => a + b,
        Op::Sub => a - b,
        Op::Mul => a * b,
        Op::Div => a / b,
        Op::Fma => a.mul_add(b, c),
        Op::Sqrt => a.sqrt(),
        Op::Rcp => 1.0 / a,
    };
    if rn.is_nan() {
        return 0x7fff_ffff_ffff_ffff;
    }
    let used = [a, b, c];
    if used[..op.arity()].iter().any(|x| !x.is_finite())
        || (matches!(op, Op::Div) && b == 0.0)
        || (op == Op::Rcp && a == 0.0)
    {
        return rn.to_bits();
    }
    let err = if rn.is_infinite() {
        if rn > 0.0 {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    } else {
        match op {
            Op::Add => exact_sign(&[a, b, -rn]),
            Op::Sub => exact_sign(&[a, -b, -rn]),
            Op::Mul => {
                let p = a * b;
                exact_sign(&[p, a.mul_add(b, -p), -rn])
            }
            Op::Fma => {
                let p = a * b;
                exact_sign(&[p, a.mul_add(b, -p), c, -rn])
            }
            Op::Div => sign_times(exact_sign(&[(-rn).mul_add(b, a)]), b),
            Op::Rcp => sign_times(exact_sign(&[(-rn).mul_add(a, 1.0)]), a),
            Op::Sqrt => exact_sign(&[(-rn).mul_add(rn, a)]),
        }
    };
    let bits = directed(rn.to_bits(), 64, err, mode);
    match op {
        Op::Add => zero_sum(bits, 64, a.is_sign_negative(), b.is_sign_negative(), mode),
        Op::Sub => zero_sum(bits, 64, a.is_sign_negative(), !b.is_sign_negative(), mode),
        Op::Fma if err == Ordering::Equal => zero_sum(
            bits,
            64,
            (a * b).is_sign_negative(),
            c.is_sign_negative(),
            mode,
        ),
        _ => bits,
    }
}

fn sign_times(o: Ordering, by: f64) -> Ordering {
    if by < 0.0 {
        o.reverse()
    } else {
        o
    }
}

/// f64 -> f32 conversion under `mode` (cvt.{rn,rz,rm,rp}.f32.f64).
pub fn f64_to_f32(x: f64, mode: Mode) -> u32 {
    if x.is_nan() {
        return 0x7fff_ffff;
    }
    let rn = x as f32;
    let err = if rn.is_infinite() && x.is_finite() {
        if rn > 0.0 {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    } else if x.is_infinite() {
        Ordering::Equal
    } else {
        exact_sign(&[x, -(rn as f64)])
    };
    directed(rn.to_bits() as u64, 32, err, mode) as u32
}

/// f32 -> f16 conversion under `mode` (cvt.{rn,rz,rm,rp}.f16.f32), via the `half` crate's
/// round-to-nearest conversion and the exact error sign. NaN -> canonical 0x7fff.
pub fn f32_to_f16(x: f32, mode: Mode) -> u16 {
    if x.is_nan() {
        return 0x7fff;
    }
    let h = half::f16::from_f32(x);
    let err = if h.is_infinite() && x.is_finite() {
        if x > 0.0 {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    } else if x.is_infinite() {
        Ordering::Equal
    } else {
        exact_sign(&[x as f64, -h.to_f64()])
    };
    directed(h.to_bits() as u64, 16, err, mode) as u16
}

/// f32 -> bf16 conversion under `mode` (cvt.{rn,rz}.bf16.f32). NaN -> canonical 0x7fff.
pub fn f32_to_bf16(x: f32, mode: Mode) -> u16 {
    if x.is_nan() {
        return 0x7fff;
    }
    let h = half::bf16::from_f32(x);
    let err = if h.is_infinite() && x.is_finite() {
        if x > 0.0 {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    } else if x.is_infinite() {
        Ordering::Equal
    } else {
        exact_sign(&[x as f64, -h.to_f64()])
    };
    directed(h.to_bits() as u64, 16, err, mode) as u16
}

/// Integer -> f32 conversion under `mode` (cvt.{rn,rz,rm,rp}.f32.{s,u}{32,64}).
pub fn int_to_f32(v: i128, mode: Mode) -> u32 {
    let rn = v as f32;
    let err = (v).cmp(&(rn as i128));
    directed(rn.to_bits() as u64, 32, err, mode) as u32
}

/// Integer -> f64 conversion under `mode`.
pub fn int_to_f64(v: i128, mode: Mode) -> u64 {
    let rn = v as f64;
    let err = (v).cmp(&(rn as i128));
    directed(rn.to_bits(), 64, err, mode)
}
