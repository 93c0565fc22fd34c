//! Floating-point semantics of PTX instructions, as pure functions.
//!
//! Every function here is total: any bit pattern is a valid input, nothing panics, and no state
//! is kept. Half-precision values (`.f16`, `.bf16`) travel as raw `u16` bits. The executor
//! applies these functions per lane (and per half for `.f16x2` / `.bf16x2`).
//!
//! # Rounding
//!
//! [`Rnd`] selects the IEEE 754 rounding-direction attribute of `.rn` / `.rz` / `.rm` / `.rp`;
//! [`IRnd`] the round-to-integer modifiers `.rni` / `.rzi` / `.rmi` / `.rpi` of `cvt`.
//!
//! * `.f32` / `.f64` `add`, `sub`, `mul`, `fma`, `div`, `sqrt`, `rcp` are correctly rounded in
//!   every mode. `.rn` uses the host's IEEE operations. Directed `.f32` modes compute the
//!   result in `f64` together with the sign of its exact error (error-free transformations)
//!   and round once; directed `.f64` modes use `rustc_apfloat` (a port of LLVM's APFloat),
//!   except `sqrt`, which uses the exact residual `a - s*s` (scaled away from underflow).
//! * `.f16` / `.bf16` arithmetic is computed exactly in `f64` (or as an `f64` plus the sign of
//!   its exact error) and rounded once to the half format, so `fma` has a single rounding.
//! * Conversions round exactly, including subnormals, ties and overflow: `.rn` overflows to
//!   infinity, `.rz` to the largest finite value, `.rm` / `.rp` to infinity on the side they
//!   round towards and to the largest finite value on the other.
//!
//! # NaN
//!
//! Arithmetic that produces a NaN returns the canonical NaN of its format, as NVIDIA hardware
//! does: `f32` `0x7fffffff`, `f64` `0x7fffffffffffffff`, `f16` / `bf16` `0x7fff`. The PTX ISA
//! leaves the NaN payload of `cvt` unspecified; GPUs emit the canonical NaN, and so do all
//! conversions here (a NaN `f32` converted to `.f16` gives `0x7fff`, to `.bf16` gives `0x7fff`,
//! a NaN `f16` converted to `.f32` gives `0x7fffffff`). Float-to-integer conversion of a NaN
//! gives 0. `min` / `max` return the non-NaN operand when exactly one is NaN, the canonical NaN
//! when both are, and order `-0.0 < +0.0`; the `.NaN` variants return the canonical NaN if
//! either operand is NaN. `neg` / `abs` on halves flip / clear the sign bit of numbers and
//! return the canonical NaN for NaN inputs (the ISA says "unspecified NaN").
//!
//! # Subnormals
//!
//! Everything supports subnormal inputs and outputs. `.ftz` is applied by the caller with
//! [`ftz_f32`] / [`ftz_f16`] / [`ftz_bf16`] on the inputs and on the result (NaNs pass
//! through unchanged).
//!
//! # Approximate instructions
//!
//! `ex2`, `lg2`, `sin`, `cos`, `rsqrt`, `rcp`, `sqrt`, `tanh` `.approx` and `div.approx` /
//! `div.full` are computed accurately in `f64` and rounded to nearest; the exact bits of the
//! hardware approximations are **not** modelled. Real GPUs may differ from ptxsim by up to the
//! error bounds the PTX ISA documents. Approximate figures (check the ISA version you target):
//! `ex2.approx.f32` max 2 ulp; `lg2.approx.f32` about 2^-22 absolute error near 1 and a few ulp
//! elsewhere; `sin` / `cos.approx.f32` about 2^-20.5 absolute error in `[-100*pi, 100*pi]` and
//! worse outside; `rcp.approx.f32` 1 ulp; `sqrt.approx.f32` / `rsqrt.approx.f32` about 2^-23
//! relative; `tanh.approx.f32` about 2^-11 relative; `div.full.f32` 2 ulp; `div.approx.f32`
//! 2 ulp for `|b|` in `[2^-126, 2^126]` (for `2^126 < |b| < 2^128` it returns 0, or NaN for an
//! infinite dividend: that case *is* modelled). `rcp.approx.ftz.f64` is described by the ISA
//! as a gross approximation computed from the upper 32 bits of the operand with the low 32
//! bits of the result zeroed, and `rsqrt.approx.f64` as a coarse approximation; ptxsim returns
//! accurate values for both (code that refines them with Newton steps, as libdevice does,
//! converges to the same final result). Tests comparing simulated kernels with a reference
//! must therefore allow a few ulps wherever such instructions are used.
//!
//! # Tests
//!
//! `cargo test -p ptxsim numeric` runs moderate sweeps against independent references (the
//! `half` crate, `rustc_apfloat` soft-float, exact `f64` / binary128 arithmetic, tables of all
//! half values). `PTXSIM_LONG_TESTS=1 cargo test --release -p ptxsim numeric` runs larger ones;
//! `PTXSIM_FULL_SWEEP=1` checks all 2^32 `f32` patterns against `half`'s `f16` / `bf16`
//! conversions (about 3 minutes in release).

mod approx;
mod arith;
mod convert;
mod half;
mod round;

pub use approx::*;
pub use arith::*;
pub use convert::*;
pub use half::*;

/// Floating-point rounding mode of an instruction (`.rn`, `.rz`, `.rm`, `.rp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rnd {
    /// `.rn`: to nearest, ties to even.
    Rn,
    /// `.rz`: towards zero.
    Rz,
    /// `.rm`: towards minus infinity.
    Rm,
    /// `.rp`: towards plus infinity.
    Rp,
}

/// Round-to-integer mode of `cvt` (`.rni`, `.rzi`, `.rmi`, `.rpi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IRnd {
    /// `.rni`: to the nearest integer, ties to even.
    Rni,
    /// `.rzi`: towards zero.
    Rzi,
    /// `.rmi`: towards minus infinity.
    Rmi,
    /// `.rpi`: towards plus infinity.
    Rpi,
}

/// Class tested by `testp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestClass {
    /// `.finite`: neither infinite nor NaN.
    Finite,
    /// `.infinite`: plus or minus infinity.
    Infinite,
    /// `.number`: not NaN.
    Number,
    /// `.notanumber`: NaN.
    NotANumber,
    /// `.normal`: a normal number or zero (not subnormal, infinite or NaN); the PTX ISA counts
    /// `+0` and `-0` as normal.
    Normal,
    /// `.subnormal`: a subnormal number (not zero).
    Subnormal,
}

/// Canonical NaN produced by `.f32` arithmetic.
pub const CANONICAL_NAN_F32: u32 = 0x7fff_ffff;
/// Canonical NaN produced by `.f64` arithmetic.
pub const CANONICAL_NAN_F64: u64 = 0x7fff_ffff_ffff_ffff;
/// Canonical NaN produced by `.f16` arithmetic.
pub const CANONICAL_NAN_F16: u16 = 0x7fff;
/// Canonical NaN produced by `.bf16` arithmetic.
pub const CANONICAL_NAN_BF16: u16 = 0x7fff;

#[cfg(test)]
mod tests;
