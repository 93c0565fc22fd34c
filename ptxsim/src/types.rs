//! PTX scalar types and state spaces.

/// A PTX scalar (or packed) type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ty {
    B8,
    B16,
    B32,
    B64,
    B128,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    F16x2,
    Bf16,
    Bf16x2,
    F32,
    F64,
    Pred,
}

impl Ty {
    /// Parses a type name without the leading dot (`f32`, `u64`, `pred`).
    pub(crate) fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "b8" => Ty::B8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "b128" => Ty::B128,
            "u8" => Ty::U8,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s8" => Ty::S8,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "f16x2" => Ty::F16x2,
            "bf16" => Ty::Bf16,
            "bf16x2" => Ty::Bf16x2,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }

    /// Width in bits (1 for predicates).
    pub(crate) fn bits(self) -> u32 {
        match self {
            Ty::Pred => 1,
            Ty::B8 | Ty::U8 | Ty::S8 => 8,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 | Ty::Bf16 => 16,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::F16x2 | Ty::Bf16x2 => 32,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 64,
            Ty::B128 => 128,
        }
    }

    /// Size in bytes (predicates count as 1).
    pub(crate) fn bytes(self) -> u32 {
        self.bits().div_ceil(8)
    }

    pub(crate) fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }

    pub(crate) fn is_float(self) -> bool {
        matches!(
            self,
            Ty::F16 | Ty::F16x2 | Ty::Bf16 | Ty::Bf16x2 | Ty::F32 | Ty::F64
        )
    }

    pub(crate) fn is_int(self) -> bool {
        !self.is_float() && self != Ty::Pred
    }
}

/// A PTX state space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Space {
    Generic,
    Global,
    Shared,
    Local,
    Param,
    Const,
}

impl Space {
    pub(crate) fn parse(s: &str) -> Option<Space> {
        Some(match s {
            "global" => Space::Global,
            "shared" | "shared::cta" => Space::Shared,
            "local" => Space::Local,
            "param" | "param::entry" | "param::func" => Space::Param,
            "const" => Space::Const,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Space::Generic => "generic",
            Space::Global => "global",
            Space::Shared => "shared",
            Space::Local => "local",
            Space::Param => "param",
            Space::Const => "const",
        }
    }
}

/// Sign- or zero-extends the low `bits` of `v` to 64 bits according to `signed`.
#[inline]
pub(crate) fn extend(v: u64, bits: u32, signed: bool) -> u64 {
    if bits >= 64 {
        v
    } else if signed {
        let sh = 64 - bits;
        (((v << sh) as i64) >> sh) as u64
    } else {
        v & ((1u64 << bits) - 1)
    }
}
