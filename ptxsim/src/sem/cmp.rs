//! Comparisons for `setp`/`set`.

use super::float::h_to_f64;
use super::int::ival;
use crate::ir::{Cmp, Mods};
use crate::types::Ty;

/// Integer comparison (signedness from the type; `.lo/.ls/.hi/.hs` are unsigned).
pub(crate) fn icmp(m: &Mods, a: u64, b: u64) -> bool {
    let (a, b) = (ival(m.ty, a), ival(m.ty, b));
    let bits = m.ty.bits();
    let (ua, ub) = (
        (a as u128) & ((1u128 << bits) - 1),
        (b as u128) & ((1u128 << bits) - 1),
    );
    match m.cmp {
        Cmp::Eq => a == b,
        Cmp::Ne => a != b,
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
        Cmp::Lo => ua < ub,
        Cmp::Ls => ua <= ub,
        Cmp::Hi => ua > ub,
        Cmp::Hs => ua >= ub,
        _ => false,
    }
}

fn fcmp_vals(m: &Mods, a: f64, b: f64) -> bool {
    let un = a.is_nan() || b.is_nan();
    match m.cmp {
        Cmp::Eq => !un && a == b,
        Cmp::Ne => !un && a != b,
        Cmp::Lt => !un && a < b,
        Cmp::Le => !un && a <= b,
        Cmp::Gt => !un && a > b,
        Cmp::Ge => !un && a >= b,
        Cmp::Equ => un || a == b,
        Cmp::Neu => un || a != b,
        Cmp::Ltu => un || a < b,
        Cmp::Leu => un || a <= b,
        Cmp::Gtu => un || a > b,
        Cmp::Geu => un || a >= b,
        Cmp::Num => !un,
        Cmp::Nan => un,
        _ => false,
    }
}

/// Float comparison, ordered and unordered forms.
pub(crate) fn fcmp(m: &Mods, a: u64, b: u64) -> bool {
    let conv = |v: u64| -> f64 {
        match m.ty {
            Ty::F64 => f64::from_bits(v),
            Ty::F32 => {
                let x = f32::from_bits(v as u32);
                (if m.ftz { crate::num::ftz_f32(x) } else { x }) as f64
            }
            t => h_to_f64(t, v as u16),
        }
    };
    fcmp_vals(m, conv(a), conv(b))
}
