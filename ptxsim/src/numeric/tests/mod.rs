//! Tests of the numeric module. References are independent of the implementation: the `half`
//! crate, `rustc_apfloat` (for everything except the `f64` directed operations, which use it),
//! exact `f64` / `Quad` arithmetic, tables of every representable half value, and hand-written
//! bit patterns.

mod arith;
mod convert;
mod half_ops;

use super::Rnd;
use rustc_apfloat::Round;

pub(super) const MODES: [Rnd; 4] = [Rnd::Rn, Rnd::Rz, Rnd::Rm, Rnd::Rp];

/// Sweep sizes: `normal` by default, `long` when `PTXSIM_LONG_TESTS` is set (meant for
/// `cargo test --release`; the dev profile builds the reference crates unoptimised).
pub(super) fn scale(normal: usize, long: usize) -> usize {
    if long_tests() {
        long
    } else {
        normal
    }
}

pub(super) fn long_tests() -> bool {
    std::env::var_os("PTXSIM_LONG_TESTS").is_some()
}

pub(super) fn ap_round(r: Rnd) -> Round {
    match r {
        Rnd::Rn => Round::NearestTiesToEven,
        Rnd::Rz => Round::TowardZero,
        Rnd::Rm => Round::TowardNegative,
        Rnd::Rp => Round::TowardPositive,
    }
}

/// splitmix64: a small deterministic generator.
pub(super) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An `f32` drawn to hit special values, subnormals, ties and cancellations often.
    pub fn f32(&mut self) -> f32 {
        const SPECIAL: [u32; 14] = [
            0x0000_0000,
            0x8000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0xffc0_0001,
            0x7f80_0001,
            0x0000_0001,
            0x8000_0001,
            0x007f_ffff,
            0x0080_0000,
            0x7f7f_ffff,
            0xff7f_ffff,
            0x3f80_0000,
        ];
        let sign = (self.next() as u32) & 0x8000_0000;
        let mant = self.next() as u32 & 0x007f_ffff;
        match self.below(8) {
            0 => f32::from_bits(SPECIAL[self.below(SPECIAL.len() as u64) as usize]),
            1 | 2 => f32::from_bits(self.next() as u32),
            3 | 4 => f32::from_bits(sign | ((100 + self.below(60) as u32) << 23) | mant),
            5 => f32::from_bits(sign | ((self.below(3) as u32) << 23) | mant),
            6 => {
                f32::from_bits(sign | ((120 + self.below(16) as u32) << 23) | (mant & 0x007f_f000))
            }
            _ => f32::from_bits(sign | ((230 + self.below(25) as u32) << 23) | mant),
        }
    }

    /// An `f64` drawn like [`Rng::f32`], over the `f64` range.
    pub fn f64(&mut self) -> f64 {
        const SPECIAL: [u64; 10] = [
            0,
            1 << 63,
            0x7ff0_0000_0000_0000,
            0xfff0_0000_0000_0000,
            0x7ff8_0000_0000_0000,
            1,
            0x000f_ffff_ffff_ffff,
            0x0010_0000_0000_0000,
            0x7fef_ffff_ffff_ffff,
            0x3ff0_0000_0000_0000,
        ];
        let sign = self.next() & (1 << 63);
        let mant = self.next() & ((1 << 52) - 1);
        match self.below(8) {
            0 => f64::from_bits(SPECIAL[self.below(SPECIAL.len() as u64) as usize]),
            1 | 2 => f64::from_bits(self.next()),
            3 | 4 => f64::from_bits(sign | ((990 + self.below(60)) << 52) | mant),
            5 => f64::from_bits(sign | (self.below(3) << 52) | mant),
            6 => f64::from_bits(sign | ((1015 + self.below(16)) << 52) | (mant & !0xfff_ffff)),
            _ => f64::from_bits(sign | ((2000 + self.below(47)) << 52) | mant),
        }
    }
}

/// Every finite non-negative value of a 16-bit format, sorted, with its bits: a reference for
/// rounding any real (given exactly as an `f64`) to that format, written without bit tricks.
pub(super) struct HalfTable {
    vals: Vec<(f64, u16)>,
    /// 2^(emax+1): where the next binade would start.
    limit: f64,
}

impl HalfTable {
    pub fn new(decode: impl Fn(u16) -> f64, limit: f64) -> HalfTable {
        let mut vals: Vec<(f64, u16)> = (0u16..0x8000)
            .map(|b| (decode(b), b))
            .filter(|(v, _)| v.is_finite())
            .collect();
        vals.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        HalfTable { vals, limit }
    }

    pub fn f16() -> HalfTable {
        HalfTable::new(|b| ::half::f16::from_bits(b).to_f64(), 65536.0)
    }

    pub fn bf16() -> HalfTable {
        HalfTable::new(|b| ::half::bf16::from_bits(b).to_f64(), 2f64.powi(128))
    }

    /// The bits `x` rounds to in mode `r` (x exact, not NaN).
    pub fn round(&self, x: f64, r: Rnd) -> u16 {
        let neg = x.is_sign_negative();
        let m = x.abs();
        // Rounding the magnitude: towards +inf for a positive x is "up", for a negative "down".
        let up_mode = match r {
            Rnd::Rn => None,
            Rnd::Rz => Some(false),
            Rnd::Rp => Some(!neg),
            Rnd::Rm => Some(neg),
        };
        let inf = self.inf_bits();
        let idx = self.vals.partition_point(|(v, _)| *v <= m); // first value > m
        let (lo_v, lo_b) = self.vals[idx - 1];
        let mag = if m.is_infinite() {
            inf
        } else if lo_v == m {
            lo_b
        } else {
            let (hi_v, hi_b) = if idx < self.vals.len() {
                self.vals[idx]
            } else {
                (self.limit, inf)
            };
            match up_mode {
                Some(true) => hi_b,
                Some(false) => lo_b,
                None => match (2.0 * m).partial_cmp(&(lo_v + hi_v)).unwrap() {
                    std::cmp::Ordering::Less => lo_b,
                    std::cmp::Ordering::Greater => hi_b,
                    std::cmp::Ordering::Equal => {
                        if lo_b & 1 == 0 {
                            lo_b
                        } else {
                            hi_b
                        }
                    }
                },
            }
        };
        if neg {
            mag | 0x8000
        } else {
            mag
        }
    }

    fn inf_bits(&self) -> u16 {
        self.vals.last().unwrap().1 + 1
    }
}
