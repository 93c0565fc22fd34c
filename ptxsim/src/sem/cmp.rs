//! Comparisons for `setp`/`set`.

use super::float::h_to_f64;
use super::int::ival;
use crate::ir::{BoolOp, Cmp, CmpFn, Mods};
use crate::types::{extend, Ty};

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

/// The `.and`/`.or`/`.xor` combiner of `setp`/`set` with the value of the third predicate
/// operand (`None`: no third operand).
#[inline]
pub(crate) fn combine(x: bool, c: Option<(bool, BoolOp)>) -> bool {
    match c {
        None => x,
        Some((c, BoolOp::And)) => x && c,
        Some((c, BoolOp::Or)) => x || c,
        Some((c, BoolOp::Xor)) => x ^ c,
    }
}

/// How `set.{type}` writes a boolean: `.f32` 1.0 or 0.0, an integer type all ones or 0;
/// `None` (`setp`): the predicate 1 or 0.
#[inline]
pub(crate) fn set_value(x: bool, set_ty: Option<Ty>) -> u64 {
    match (x, set_ty) {
        (_, None) => x as u64,
        (false, Some(_)) => 0,
        (true, Some(Ty::F32)) => 1.0f32.to_bits() as u64,
        (true, Some(t)) => extend(u64::MAX, t.bits(), t.is_signed()),
    }
}

/// `setp`/`set`: `(p, q) = (cmp(a, b) bop c, !cmp(a, b) bop c)`, each written by [`set_value`].
#[inline]
pub(crate) fn setp(
    f: CmpFn,
    m: &Mods,
    a: u64,
    b: u64,
    c: Option<(bool, BoolOp)>,
    set_ty: Option<Ty>,
) -> (u64, u64) {
    let t = f(m, a, b);
    (
        set_value(combine(t, c), set_ty),
        set_value(combine(!t, c), set_ty),
    )
}

/// Packed `setp.{f16x2,bf16x2}`: `(p, q)` compare the low halves and the high halves.
#[inline]
pub(crate) fn setp_x2(f: CmpFn, m: &Mods, a: u64, b: u64, c: Option<(bool, BoolOp)>) -> (u64, u64) {
    let lo = combine(f(m, a & 0xffff, b & 0xffff), c);
    let hi = combine(f(m, (a >> 16) & 0xffff, (b >> 16) & 0xffff), c);
    (lo as u64, hi as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lt(ty: Ty) -> Mods {
        let mut m = Mods::new(ty);
        m.cmp = Cmp::Lt;
        m
    }

    #[test]
    fn setp_combiners_and_set_encodings() {
        for x in [false, true] {
            for c in [false, true] {
                assert_eq!(combine(x, None), x);
                assert_eq!(combine(x, Some((c, BoolOp::And))), x && c);
                assert_eq!(combine(x, Some((c, BoolOp::Or))), x || c);
                assert_eq!(combine(x, Some((c, BoolOp::Xor))), x != c);
            }
        }
        assert_eq!(set_value(true, None), 1);
        assert_eq!(set_value(true, Some(Ty::F32)), 0x3f80_0000);
        assert_eq!(set_value(true, Some(Ty::U32)), 0xffff_ffff);
        assert_eq!(set_value(true, Some(Ty::S32)), u64::MAX);
        assert_eq!(set_value(false, Some(Ty::F32)), 0);
        // setp.lt.s32 p|q, -1, 0 (and with c = false): p = false, q = false
        let m = lt(Ty::S32);
        assert_eq!(setp(icmp, &m, u64::MAX, 0, None, None), (1, 0));
        let and_false = Some((false, BoolOp::And));
        assert_eq!(setp(icmp, &m, u64::MAX, 0, and_false, None), (0, 0));
        assert_eq!(
            setp(icmp, &m, 0, u64::MAX, None, Some(Ty::U32)),
            (0, 0xffff_ffff)
        );
    }

    #[test]
    fn setp_packed_halves() {
        // f16: 1.0 = 0x3c00, 2.0 = 0x4000. Low: 1 < 2; high: 2 < 1 is false.
        let m = lt(Ty::F16);
        assert_eq!(setp_x2(fcmp, &m, 0x4000_3c00, 0x3c00_4000, None), (1, 0));
        let or_true = Some((true, BoolOp::Or));
        assert_eq!(setp_x2(fcmp, &m, 0x4000_3c00, 0x3c00_4000, or_true), (1, 1));
    }
}
