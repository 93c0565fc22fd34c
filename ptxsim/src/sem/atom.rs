//! Atomic operation semantics: the new memory value from the old one.

use crate::ir::AtomOp;
use crate::num::{self, Rnd};
use crate::types::{extend, Ty};

/// New value stored by `atom.op.ty` given the old value and operands `b`, `c` (raw bits).
pub(crate) fn atom_new(op: AtomOp, ty: Ty, old: u64, b: u64, c: u64) -> u64 {
    let bits = ty.bits();
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let sv = |v: u64| extend(v, bits, true) as i64;
    let uv = |v: u64| v & mask;
    let r = match (op, ty) {
        (AtomOp::Add, Ty::F32) => num::add_f32(
            f32::from_bits(old as u32),
            f32::from_bits(b as u32),
            Rnd::Rn,
        )
        .to_bits() as u64,
        (AtomOp::Add, Ty::F64) => {
            num::add_f64(f64::from_bits(old), f64::from_bits(b), Rnd::Rn).to_bits()
        }
        (AtomOp::Add, Ty::F16) => num::add_f16(old as u16, b as u16, Rnd::Rn) as u64,
        (AtomOp::Add, Ty::Bf16) => num::add_bf16(old as u16, b as u16, Rnd::Rn) as u64,
        (AtomOp::Add, Ty::F16x2) => {
            let lo = num::add_f16(old as u16, b as u16, Rnd::Rn) as u64;
            let hi = num::add_f16((old >> 16) as u16, (b >> 16) as u16, Rnd::Rn) as u64;
            hi << 16 | lo
        }
        (AtomOp::Add, Ty::Bf16x2) => {
            let lo = num::add_bf16(old as u16, b as u16, Rnd::Rn) as u64;
            let hi = num::add_bf16((old >> 16) as u16, (b >> 16) as u16, Rnd::Rn) as u64;
            hi << 16 | lo
        }
        (AtomOp::Add, _) => old.wrapping_add(b),
        (AtomOp::Min, Ty::F32) => {
            num::min_f32(f32::from_bits(old as u32), f32::from_bits(b as u32)).to_bits() as u64
        }
        (AtomOp::Max, Ty::F32) => {
            num::max_f32(f32::from_bits(old as u32), f32::from_bits(b as u32)).to_bits() as u64
        }
        (AtomOp::Min, Ty::F64) => num::min_f64(f64::from_bits(old), f64::from_bits(b)).to_bits(),
        (AtomOp::Max, Ty::F64) => num::max_f64(f64::from_bits(old), f64::from_bits(b)).to_bits(),
        (AtomOp::Min, t) if t.is_signed() => sv(old).min(sv(b)) as u64,
        (AtomOp::Max, t) if t.is_signed() => sv(old).max(sv(b)) as u64,
        (AtomOp::Min, _) => uv(old).min(uv(b)),
        (AtomOp::Max, _) => uv(old).max(uv(b)),
        (AtomOp::Exch, _) => b,
        (AtomOp::Cas, _) => {
            if uv(old) == uv(b) {
                c
            } else {
                old
            }
        }
        (AtomOp::Inc, _) => {
            if uv(old) >= uv(b) {
                0
            } else {
                old.wrapping_add(1)
            }
        }
        (AtomOp::Dec, _) => {
            if uv(old) == 0 || uv(old) > uv(b) {
                b
            } else {
                old.wrapping_sub(1)
            }
        }
        (AtomOp::And, _) => old & b,
        (AtomOp::Or, _) => old | b,
        (AtomOp::Xor, _) => old ^ b,
    };
    r & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomics() {
        assert_eq!(atom_new(AtomOp::Inc, Ty::U32, 5, 5, 0), 0);
        assert_eq!(atom_new(AtomOp::Inc, Ty::U32, 4, 5, 0), 5);
        assert_eq!(atom_new(AtomOp::Dec, Ty::U32, 0, 7, 0), 7);
        assert_eq!(atom_new(AtomOp::Cas, Ty::U32, 3, 3, 9), 9);
        assert_eq!(atom_new(AtomOp::Cas, Ty::U32, 4, 3, 9), 4);
        assert_eq!(atom_new(AtomOp::Max, Ty::S32, 0xffff_ffff, 1, 0), 1);
        assert_eq!(
            atom_new(AtomOp::Max, Ty::U32, 0xffff_ffff, 1, 0),
            0xffff_ffff
        );
        assert_eq!(
            atom_new(
                AtomOp::Add,
                Ty::F32,
                1.5f32.to_bits() as u64,
                2.0f32.to_bits() as u64,
                0
            ),
            3.5f32.to_bits() as u64
        );
    }
}
