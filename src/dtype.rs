//! Element types of activations and parameters.

use std::fmt;

/// The element types warpnorm kernels read and write. All accumulation is in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16 (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    BF16,
}

impl DType {
    /// Every dtype, in a fixed order.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// The short name used in kernel names (`f32`, `f16`, `bf16`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// Unit roundoff (half an ulp of 1.0): 2^-24, 2^-11, 2^-8.
    pub const fn unit_roundoff(self) -> f64 {
        match self {
            DType::F32 => 5.960464477539063e-8,
            DType::F16 => 4.8828125e-4,
            DType::BF16 => 3.90625e-3,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A host element type with a matching [`DType`]: `f32`, `half::f16`, `half::bf16`.
pub trait Element: Copy + Send + Sync + 'static + cudarc::driver::DeviceRepr {
    /// The matching dtype.
    const DTYPE: DType;
    /// Widen to f64 (exact).
    fn to_f64(self) -> f64;
    /// Round from f64 (to nearest even).
    fn from_f64(v: f64) -> Self;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

/// Rounds f64 to f32 with round-to-odd: exact values stay, inexact ones become the neighbour
/// toward zero with its lowest significand bit set. A second rounding of the result to any
/// format with at least 2 fewer significand bits (f16, bf16) then equals a single correct
/// round-to-nearest-even of `v`, which `half`'s own `from_f64` does not guarantee (it truncates
/// before rounding, so values just above a tie round down).
fn f64_to_f32_round_odd(v: f64) -> f32 {
    let f = v as f32;
    if f.is_nan() || f as f64 == v {
        return f;
    }
    // The neighbour toward zero: step back if round-to-nearest went away from zero.
    let mut t = f;
    if (t as f64).abs() > v.abs() {
        t = f32::from_bits(t.to_bits() - 1);
    }
    f32::from_bits(t.to_bits() | 1)
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::f16::from_f32(f64_to_f32_round_odd(v))
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f32(f64_to_f32_round_odd(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    /// Round-to-nearest-even of `v` between the two neighbours `lo < hi`, decided exactly in
    /// f64 (the midpoint of two adjacent halves is exactly representable).
    fn rne(v: f64, lo: f64, hi: f64, lo_even: bool) -> f64 {
        let mid = (lo + hi) / 2.0;
        if v < mid || (v == mid && lo_even) {
            lo
        } else {
            hi
        }
    }

    #[test]
    fn values_just_above_a_tie_round_up() {
        let v = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(<f16 as Element>::from_f64(v).to_bits(), 0x3c01);
        let v = 1.0 + 2f64.powi(-8) + 2f64.powi(-45);
        assert_eq!(<bf16 as Element>::from_f64(v).to_bits(), 0x3f81);
        // Exact ties still go to even.
        assert_eq!(
            <f16 as Element>::from_f64(1.0 + 2f64.powi(-11)).to_bits(),
            0x3c00
        );
        assert_eq!(
            <f16 as Element>::from_f64(1.0 + 3.0 * 2f64.powi(-11)).to_bits(),
            0x3c02
        );
    }

    #[test]
    fn from_f64_is_correctly_rounded_between_every_pair_of_f16_neighbours() {
        // For every positive finite f16 h and its successor, probe values around the midpoint.
        for bits in 0u16..0x7bff {
            let (lo, hi) = (
                f16::from_bits(bits).to_f64(),
                f16::from_bits(bits + 1).to_f64(),
            );
            let mid = (lo + hi) / 2.0;
            let ulp = (hi - lo) * 2f64.powi(-30);
            for v in [mid - ulp, mid, mid + ulp, lo + ulp, hi - ulp] {
                let want = rne(v, lo, hi, bits.is_multiple_of(2));
                let got = <f16 as Element>::from_f64(v).to_f64();
                assert_eq!(got, want, "f16 bits {bits:#x} v {v:e}");
                let got = <f16 as Element>::from_f64(-v).to_f64();
                assert_eq!(got, -want, "f16 bits {bits:#x} v -{v:e}");
            }
        }
    }

    #[test]
    fn from_f64_is_correctly_rounded_between_bf16_neighbours() {
        for bits in (0u16..0x7f7f).step_by(7) {
            let (lo, hi) = (
                bf16::from_bits(bits).to_f64(),
                bf16::from_bits(bits + 1).to_f64(),
            );
            let mid = (lo + hi) / 2.0;
            let ulp = (hi - lo) * 2f64.powi(-30);
            for v in [mid - ulp, mid, mid + ulp] {
                let want = rne(v, lo, hi, bits.is_multiple_of(2));
                assert_eq!(
                    <bf16 as Element>::from_f64(v).to_f64(),
                    want,
                    "bf16 {bits:#x} {v:e}"
                );
            }
        }
    }

    #[test]
    fn overflow_and_specials() {
        assert!(<f16 as Element>::from_f64(1e300).is_infinite());
        assert!(<bf16 as Element>::from_f64(-1e300).is_infinite());
        assert!(<f16 as Element>::from_f64(f64::NAN).is_nan());
        assert_eq!(<f16 as Element>::from_f64(65519.9).to_f64(), 65504.0);
        assert!(<f16 as Element>::from_f64(65520.0).is_infinite());
        assert_eq!(<f32 as Element>::from_f64(0.1), 0.1f32);
    }
}
