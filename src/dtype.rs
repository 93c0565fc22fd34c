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

    /// The ABI encoding (`WnDType` in `cuda/abi.h`).
    pub const fn abi(self) -> u32 {
        match self {
            DType::F32 => crate::abi::WnDType_WN_DTYPE_F32,
            DType::F16 => crate::abi::WnDType_WN_DTYPE_F16,
            DType::BF16 => crate::abi::WnDType_WN_DTYPE_BF16,
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

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
}
