//! Integer and bit-manipulation semantics (pure functions on raw register bits).

use crate::ir::Mods;
use crate::types::{extend, Ty};

/// Normalizes `v` to the destination type: sign-extended for signed types, zero-extended otherwise.
#[inline]
pub(crate) fn norm(ty: Ty, v: u64) -> u64 {
    extend(v, ty.bits(), ty.is_signed())
}
#[inline]
fn sv(ty: Ty, v: u64) -> i64 {
    extend(v, ty.bits(), true) as i64
}
#[inline]
fn uv(ty: Ty, v: u64) -> u64 {
    extend(v, ty.bits(), false)
}
/// The value as a mathematical integer according to the type's signedness.
#[inline]
pub(crate) fn ival(ty: Ty, v: u64) -> i128 {
    if ty.is_signed() {
        sv(ty, v) as i128
    } else {
        uv(ty, v) as i128
    }
}
fn range(ty: Ty) -> (i128, i128) {
    let b = ty.bits();
    if ty.is_signed() {
        (-(1i128 << (b - 1)), (1i128 << (b - 1)) - 1)
    } else {
        (0, (1i128 << b) - 1)
    }
}
/// Clamps to the range of `ty`.
pub(crate) fn clamp_to(ty: Ty, v: i128) -> u64 {
    let (lo, hi) = range(ty);
    norm(ty, v.clamp(lo, hi) as u64)
}

pub(crate) fn mov(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::Pred {
        (s[0] & 1 != 0) as u64
    } else {
        norm(m.ty, s[0])
    }
}
pub(crate) fn add(m: &Mods, s: [u64; 4]) -> u64 {
    if m.sat {
        return clamp_to(m.ty, ival(m.ty, s[0]) + ival(m.ty, s[1]));
    }
    norm(m.ty, s[0].wrapping_add(s[1]))
}
pub(crate) fn sub(m: &Mods, s: [u64; 4]) -> u64 {
    if m.sat {
        return clamp_to(m.ty, ival(m.ty, s[0]) - ival(m.ty, s[1]));
    }
    norm(m.ty, s[0].wrapping_sub(s[1]))
}
/// Double-width type of a mul.wide source type.
pub(crate) fn wide(ty: Ty) -> Ty {
    match ty {
        Ty::S16 => Ty::S32,
        Ty::U16 | Ty::B16 => Ty::U32,
        Ty::S32 => Ty::S64,
        _ => Ty::U64,
    }
}
/// aux: 0 = .lo, 1 = .hi, 2 = .wide
fn mul_core(m: &Mods, a: u64, b: u64) -> u64 {
    let p = ival(m.ty, a).wrapping_mul(ival(m.ty, b));
    match m.aux {
        1 => norm(m.ty, (p >> m.ty.bits()) as u64),
        2 => norm(wide(m.ty), p as u64),
        _ => norm(m.ty, p as u64),
    }
}
pub(crate) fn mul(m: &Mods, s: [u64; 4]) -> u64 {
    mul_core(m, s[0], s[1])
}
pub(crate) fn mad(m: &Mods, s: [u64; 4]) -> u64 {
    let p = mul_core(m, s[0], s[1]);
    let t = if m.aux == 2 { wide(m.ty) } else { m.ty };
    if m.sat {
        return clamp_to(t, ival(t, p) + ival(t, s[2]));
    }
    norm(t, p.wrapping_add(s[2]))
}
/// mul24/mad24 (.lo/.hi of the 48-bit product of 24-bit operands).
pub(crate) fn mul24(m: &Mods, s: [u64; 4]) -> u64 {
    let t24 = |v: u64| {
        if m.ty.is_signed() {
            extend(v, 24, true) as i64 as i128
        } else {
            (v & 0xff_ffff) as i128
        }
    };
    let p = t24(s[0]) * t24(s[1]);
    let r = if m.aux == 1 {
        (p >> 16) as u64
    } else {
        p as u64
    };
    norm(m.ty, r.wrapping_add(s[2]))
}
pub(crate) fn div(m: &Mods, s: [u64; 4]) -> u64 {
    let (a, b) = (ival(m.ty, s[0]), ival(m.ty, s[1]));
    if b == 0 {
        return norm(m.ty, u64::MAX);
    }
    norm(m.ty, (a / b) as u64)
}
pub(crate) fn rem(m: &Mods, s: [u64; 4]) -> u64 {
    let (a, b) = (ival(m.ty, s[0]), ival(m.ty, s[1]));
    if b == 0 {
        return norm(m.ty, a as u64);
    }
    norm(m.ty, (a % b) as u64)
}
pub(crate) fn abs(m: &Mods, s: [u64; 4]) -> u64 {
    norm(m.ty, ival(m.ty, s[0]).unsigned_abs() as u64)
}
pub(crate) fn neg(m: &Mods, s: [u64; 4]) -> u64 {
    norm(m.ty, (s[0] as i64).wrapping_neg() as u64)
}
pub(crate) fn min(m: &Mods, s: [u64; 4]) -> u64 {
    norm(m.ty, ival(m.ty, s[0]).min(ival(m.ty, s[1])) as u64)
}
pub(crate) fn max(m: &Mods, s: [u64; 4]) -> u64 {
    norm(m.ty, ival(m.ty, s[0]).max(ival(m.ty, s[1])) as u64)
}
pub(crate) fn and(m: &Mods, s: [u64; 4]) -> u64 {
    norm(m.ty, s[0] & s[1])
}
pub(crate) fn or(m: &Mods, s: [u64; 4]) -> u64 {
    norm(m.ty, s[0] | s[1])
}
pub(crate) fn xor(m: &Mods, s: [u64; 4]) -> u64 {
    norm(m.ty, s[0] ^ s[1])
}
pub(crate) fn not(m: &Mods, s: [u64; 4]) -> u64 {
    if m.ty == Ty::Pred {
        (s[0] & 1) ^ 1
    } else {
        norm(m.ty, !s[0])
    }
}
pub(crate) fn cnot(m: &Mods, s: [u64; 4]) -> u64 {
    norm(m.ty, (uv(m.ty, s[0]) == 0) as u64)
}
pub(crate) fn shl(m: &Mods, s: [u64; 4]) -> u64 {
    let n = s[1] as u32;
    if n >= m.ty.bits() {
        0
    } else {
        norm(m.ty, s[0] << n)
    }
}
pub(crate) fn shr(m: &Mods, s: [u64; 4]) -> u64 {
    let n = (s[1] as u32).min(m.ty.bits().max(1) - 1 + (!m.ty.is_signed()) as u32);
    if m.ty.is_signed() {
        norm(m.ty, (sv(m.ty, s[0]) >> n.min(63)) as u64)
    } else if n >= m.ty.bits() {
        0
    } else {
        uv(m.ty, s[0]) >> n
    }
}
pub(crate) fn bfe(m: &Mods, s: [u64; 4]) -> u64 {
    let bits = m.ty.bits();
    let pos = (s[1] & 0xff) as u32;
    let len = (s[2] & 0xff) as u32;
    let a = uv(m.ty, s[0]);
    let sbit = if m.ty.is_signed() && len != 0 {
        let i = (pos + len - 1).min(bits - 1);
        (a >> i) & 1
    } else {
        0
    };
    let mut d = 0u64;
    for i in 0..bits {
        let bit = if i < len && pos + i < bits {
            (a >> (pos + i)) & 1
        } else {
            sbit
        };
        d |= bit << i;
    }
    norm(m.ty, d)
}
pub(crate) fn bfi(m: &Mods, s: [u64; 4]) -> u64 {
    let bits = m.ty.bits();
    let (a, b) = (s[0], s[1]);
    let pos = (s[2] & 0xff) as u32;
    let len = (s[3] & 0xff) as u32;
    let mut f = b;
    for i in 0..len {
        if pos + i >= bits {
            break;
        }
        f = (f & !(1u64 << (pos + i))) | (((a >> i) & 1) << (pos + i));
    }
    norm(m.ty, f)
}
/// prmt: aux = mode (0 default, 1 f4e, 2 b4e, 3 rc8, 4 ecl, 5 ecr, 6 rc16).
pub(crate) fn prmt(m: &Mods, s: [u64; 4]) -> u64 {
    let x = ((s[1] as u32 as u64) << 32) | s[0] as u32 as u64;
    let byte = |i: u32| ((x >> (8 * (i & 7))) & 0xff) as u32;
    let c = s[2] as u32;
    let mut d = 0u32;
    match m.aux {
        0 => {
            for k in 0..4 {
                let sel = (c >> (4 * k)) & 0xf;
                let mut v = byte(sel & 7);
                if sel & 8 != 0 {
                    v = if v & 0x80 != 0 { 0xff } else { 0 };
                }
                d |= v << (8 * k);
            }
        }
        mode => {
            let n = c & 3;
            let sel: [u32; 4] = match mode {
                1 => [n, (n + 1) & 7, (n + 2) & 7, (n + 3) & 7],
                2 => [
                    n,
                    n.wrapping_sub(1) & 7,
                    n.wrapping_sub(2) & 7,
                    n.wrapping_sub(3) & 7,
                ],
                3 => [n; 4],
                4 => [n, n.max(1), n.max(2), 3],
                5 => [0, n.min(1), n.min(2), n],
                _ => [2 * (n & 1), 2 * (n & 1) + 1, 2 * (n & 1), 2 * (n & 1) + 1],
            };
            for (k, sl) in sel.iter().enumerate() {
                d |= byte(*sl) << (8 * k);
            }
        }
    }
    d as u64
}
pub(crate) fn popc(m: &Mods, s: [u64; 4]) -> u64 {
    uv(m.ty, s[0]).count_ones() as u64
}
pub(crate) fn clz(m: &Mods, s: [u64; 4]) -> u64 {
    let b = m.ty.bits();
    (uv(m.ty, s[0]).leading_zeros() - (64 - b)) as u64
}
pub(crate) fn brev(m: &Mods, s: [u64; 4]) -> u64 {
    let b = m.ty.bits();
    uv(m.ty, s[0]).reverse_bits() >> (64 - b)
}
/// bfind: aux bit 0 = .shiftamt
pub(crate) fn bfind(m: &Mods, s: [u64; 4]) -> u64 {
    let b = m.ty.bits();
    let mut a = uv(m.ty, s[0]);
    if m.ty.is_signed() && (a >> (b - 1)) & 1 == 1 {
        a = !a & if b == 64 { u64::MAX } else { (1u64 << b) - 1 };
    }
    if a == 0 {
        return 0xffff_ffff;
    }
    let pos = 63 - a.leading_zeros();
    (if m.aux & 1 != 0 { b - 1 - pos } else { pos }) as u64
}
/// selp: `s[2]` is the predicate.
pub(crate) fn selp(m: &Mods, s: [u64; 4]) -> u64 {
    let v = if s[2] & 1 != 0 { s[0] } else { s[1] };
    if m.ty.is_float() {
        v
    } else {
        norm(m.ty, v)
    }
}
/// slct: d = c >= 0 ? a : b; c of type m.sty (s32 or f32).
pub(crate) fn slct(m: &Mods, s: [u64; 4]) -> u64 {
    let ge = if m.sty == Ty::F32 {
        let mut c = f32::from_bits(s[2] as u32);
        if m.ftz && c.is_subnormal() {
            c = 0.0;
        }
        c >= 0.0
    } else {
        (s[2] as u32 as i32) >= 0
    };
    let v = if ge { s[0] } else { s[1] };
    norm(m.ty, v)
}
/// sad: d = c + |a - b|
pub(crate) fn sad(m: &Mods, s: [u64; 4]) -> u64 {
    let d = (ival(m.ty, s[0]) - ival(m.ty, s[1])).unsigned_abs() as u64;
    norm(m.ty, s[2].wrapping_add(d))
}
/// dp4a.u32/s32 with aux bit0 = a signed, bit1 = b signed.
pub(crate) fn dp4a(m: &Mods, s: [u64; 4]) -> u64 {
    let mut acc = s[2] as u32 as i32 as i64;
    for i in 0..4 {
        let ab = (s[0] >> (8 * i)) & 0xff;
        let bb = (s[1] >> (8 * i)) & 0xff;
        let av = if m.aux & 1 != 0 {
            ab as u8 as i8 as i64
        } else {
            ab as i64
        };
        let bv = if m.aux & 2 != 0 {
            bb as u8 as i8 as i64
        } else {
            bb as i64
        };
        acc = acc.wrapping_add(av * bv);
    }
    norm(m.ty, acc as u64)
}
/// cvta between generic and a window: aux = window base; sat/ftz unused; sty flag in rnd unused.
pub(crate) fn add_base(m: &Mods, s: [u64; 4]) -> u64 {
    norm(
        m.ty,
        s[0].wrapping_add(m.aux as u64 * crate::memory::WINDOW_UNIT),
    )
}
pub(crate) fn sub_base(m: &Mods, s: [u64; 4]) -> u64 {
    norm(
        m.ty,
        s[0].wrapping_sub(m.aux as u64 * crate::memory::WINDOW_UNIT),
    )
}

/// Mask of a field of `w` bits (`mov` pack/unpack).
#[inline]
fn field_mask(w: u8) -> u64 {
    if w >= 64 {
        u64::MAX
    } else {
        (1u64 << w) - 1
    }
}

/// `mov.bN d, {f0, f1, ..}`: field `j` (its low `w` bits) at bit `j * w`.
#[inline]
pub(crate) fn pack(fields: impl Iterator<Item = u64>, w: u8) -> u64 {
    let fm = field_mask(w);
    let mut v = 0u64;
    for (j, f) in fields.enumerate() {
        v |= (f & fm) << (j as u32 * w as u32);
    }
    v
}

/// `mov.bN {f0, f1, ..}, v`: field `j` of `w` bits.
#[inline]
pub(crate) fn unpack_field(v: u64, j: usize, w: u8) -> u64 {
    (v >> (j as u32 * w as u32)) & field_mask(w)
}

/// `%clock`, `%clock64`, `%globaltimer`: the block's warp-instruction count `steps` times `mul`,
/// truncated to `bits`.
#[inline]
pub(crate) fn clock(steps: u64, mul: u64, bits: u8) -> u64 {
    let v = steps.wrapping_mul(mul);
    if bits == 32 {
        v & 0xffff_ffff
    } else {
        v
    }
}

/// isspacep: whether generic address `s[0]` is in the space `aux` (0 global or const,
/// 1 shared, 2 local, 3 param).
pub(crate) fn isspacep(m: &Mods, s: [u64; 4]) -> u64 {
    use crate::memory::{window, Window};
    matches!(
        (window(s[0]), m.aux),
        (Window::Global(_), 0)
            | (Window::Shared(_), 1)
            | (Window::Local(_), 2)
            | (Window::Param(_), 3)
    ) as u64
}

/// shf.{l,r}.{wrap,clamp}.b32 d, a, b, c: aux bit0 = right, bit1 = clamp.
pub(crate) fn shf(m: &Mods, s: [u64; 4]) -> u64 {
    let c = s[2] as u32;
    let n = if m.aux & 2 != 0 { c.min(32) } else { c & 31 };
    let x = ((s[1] as u32 as u64) << 32) | s[0] as u32 as u64;
    if m.aux & 1 != 0 {
        (x >> n) & 0xffff_ffff
    } else {
        ((x << n) >> 32) & 0xffff_ffff
    }
}
/// lop3.b32 d, a, b, c, lut
pub(crate) fn lop3(m: &Mods, s: [u64; 4]) -> u64 {
    let lut = s[3] as u8;
    let (a, b, c) = (s[0], s[1], s[2]);
    let mut d = 0u64;
    for i in 0..m.ty.bits() {
        let idx = ((a >> i) & 1) << 2 | ((b >> i) & 1) << 1 | ((c >> i) & 1);
        d |= (((lut >> idx) & 1) as u64) << i;
    }
    d
}
/// dp2a.{lo,hi}: aux bit0 = a signed, bit1 = b signed, bit2 = hi.
pub(crate) fn dp2a(m: &Mods, s: [u64; 4]) -> u64 {
    let mut acc = s[2] as u32 as i32 as i64;
    let k = if m.aux & 4 != 0 { 2 } else { 0 };
    for i in 0..2 {
        let ah = (s[0] >> (16 * i)) & 0xffff;
        let bb = (s[1] >> (8 * (k + i))) & 0xff;
        let av = if m.aux & 1 != 0 {
            ah as u16 as i16 as i64
        } else {
            ah as i64
        };
        let bv = if m.aux & 2 != 0 {
            bb as u8 as i8 as i64
        } else {
            bb as i64
        };
        acc = acc.wrapping_add(av * bv);
    }
    norm(m.ty, acc as u64)
}

/// Extended-precision add/sub/mad with the carry flag: returns (d, carry out).
/// `op`: 0 add, 1 sub, 2 mad.lo, 3 mad.hi. `cin` is the incoming carry (0 when not `...c`).
pub(crate) fn carry_op(
    op: u8,
    ty: crate::types::Ty,
    a: u64,
    b: u64,
    c: u64,
    cin: u64,
) -> (u64, u64) {
    let bits = ty.bits();
    let mask: u128 = if bits >= 64 {
        u64::MAX as u128
    } else {
        (1u128 << bits) - 1
    };
    let (a, b, c) = (a as u128 & mask, b as u128 & mask, c as u128 & mask);
    let cin = cin as u128 & 1;
    match op {
        0 => {
            let r = a + b + cin;
            ((r & mask) as u64, (r > mask) as u64)
        }
        1 => {
            let sub = b + cin;
            let r = a.wrapping_sub(sub) & mask;
            (r as u64, (a < sub) as u64)
        }
        _ => {
            let (ai, bi) = if ty.is_signed() {
                (
                    extend(a as u64, bits, true) as i64 as i128,
                    extend(b as u64, bits, true) as i64 as i128,
                )
            } else {
                (a as i128, b as i128)
            };
            let p = (ai.wrapping_mul(bi)) as u128;
            let part = if op == 3 {
                (p >> bits) & mask
            } else {
                p & mask
            };
            let r = part + c + cin;
            ((r & mask) as u64, (r > mask) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(ty: Ty) -> Mods {
        Mods::new(ty)
    }

    #[test]
    fn funnel_lop3_carry() {
        let mut m = Mods::new(Ty::B32);
        assert_eq!(shf(&m, [0x8000_0000, 0x1, 1, 0]), 0x3);
        m.aux = 1;
        assert_eq!(shf(&m, [0x2, 0x1, 1, 0]), 0x8000_0001);
        assert_eq!(
            lop3(&Mods::new(Ty::B32), [0xf0, 0xcc, 0xaa, 0x96]),
            0xf0 ^ 0xcc ^ 0xaa
        );
        assert_eq!(carry_op(0, Ty::U32, 0xffff_ffff, 1, 0, 0), (0, 1));
        assert_eq!(carry_op(1, Ty::U32, 0, 1, 0, 0), (0xffff_ffff, 1));
        assert_eq!(carry_op(3, Ty::U32, 0x8000_0000, 4, 5, 1), (8, 0));
    }

    #[test]
    fn basic_int() {
        assert_eq!(
            add(&m(Ty::S32), [0x7fff_ffff, 1, 0, 0]),
            (-2147483648i64) as u64
        );
        let mut ms = m(Ty::S32);
        ms.sat = true;
        assert_eq!(add(&ms, [0x7fff_ffff, 1, 0, 0]), 0x7fff_ffff);
        let mut w = m(Ty::S32);
        w.aux = 2;
        assert_eq!(mul(&w, [(-3i64) as u64, 5, 0, 0]), (-15i64) as u64);
        let mut h = m(Ty::U32);
        h.aux = 1;
        assert_eq!(mul(&h, [0x8000_0000, 4, 0, 0]), 2);
        assert_eq!(shr(&m(Ty::S32), [0x8000_0000, 40, 0, 0]), u64::MAX);
        assert_eq!(shr(&m(Ty::U32), [0x8000_0000, 40, 0, 0]), 0);
        assert_eq!(shl(&m(Ty::B32), [1, 31, 0, 0]), 0x8000_0000);
        assert_eq!(bfe(&m(Ty::U32), [0xabcd_1234, 8, 8, 0]), 0x12);
        assert_eq!(bfe(&m(Ty::S32), [0x0000_8000, 8, 8, 0]), (-128i64) as u64);
        assert_eq!(bfi(&m(Ty::B32), [0xf, 0, 4, 4]), 0xf0);
        assert_eq!(
            prmt(&m(Ty::B32), [0x0403_0201, 0x0807_0605, 0x7654, 0]),
            0x0807_0605
        );
        assert_eq!(clz(&m(Ty::B32), [1, 0, 0, 0]), 31);
        assert_eq!(brev(&m(Ty::B32), [1, 0, 0, 0]), 0x8000_0000);
        assert_eq!(popc(&m(Ty::B64), [u64::MAX, 0, 0, 0]), 64);
        assert_eq!(div(&m(Ty::U32), [7, 0, 0, 0]), 0xffff_ffff);
        assert_eq!(div(&m(Ty::S32), [(-7i64) as u64, 2, 0, 0]), (-3i64) as u64);
        assert_eq!(rem(&m(Ty::S32), [(-7i64) as u64, 2, 0, 0]), (-1i64) as u64);
        assert_eq!(not(&m(Ty::Pred), [1, 0, 0, 0]), 0);
        assert_eq!(bfind(&m(Ty::U32), [0x10, 0, 0, 0]), 4);
    }

    #[test]
    fn pack_unpack_clock() {
        // mov.b32 d, {a, b, c, e} of 8-bit fields: only the low 8 bits of each field count.
        assert_eq!(pack([0x1ff, 0x02, 0x03, 0x04].into_iter(), 8), 0x0403_02ff);
        assert_eq!(pack([0xdead_beef, 0x1].into_iter(), 32), 0x1_dead_beef);
        assert_eq!(pack([u64::MAX].into_iter(), 64), u64::MAX);
        for j in 0..4 {
            assert_eq!(unpack_field(0x0403_02ff, j, 8), [0xff, 2, 3, 4][j]);
        }
        assert_eq!(unpack_field(0x1_dead_beef, 1, 32), 1);
        assert_eq!(unpack_field(u64::MAX, 0, 64), u64::MAX);
        assert_eq!(clock(0x1_0000_0005, 1, 32), 5);
        assert_eq!(clock(0x1_0000_0005, 1, 64), 0x1_0000_0005);
        assert_eq!(clock(3, 32, 64), 96);
    }

    #[test]
    fn isspacep_windows() {
        use crate::memory::{LOCAL_AUX, SHARED_AUX, WINDOW_UNIT};
        let space = |aux: u32| {
            let mut m = m(Ty::Pred);
            m.aux = aux;
            m
        };
        let shared = SHARED_AUX as u64 * WINDOW_UNIT + 16;
        let local = LOCAL_AUX as u64 * WINDOW_UNIT + 16;
        assert_eq!(isspacep(&space(1), [shared, 0, 0, 0]), 1);
        assert_eq!(isspacep(&space(0), [shared, 0, 0, 0]), 0);
        assert_eq!(isspacep(&space(2), [local, 0, 0, 0]), 1);
        assert_eq!(isspacep(&space(1), [local, 0, 0, 0]), 0);
    }
}
