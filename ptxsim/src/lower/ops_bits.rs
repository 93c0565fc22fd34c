//! Lowering of integer bit and logic instructions: `and/or/xor/not/cnot` (also on predicates),
//! `popc/clz/brev/bfind`, `shl/shr/shf`, `lop3`, `bfe/bfi`, `prmt`, `sad`, `mul24/mad24`,
//! `dp4a/dp2a`.

use super::sfx::{alu, need, Sfx};
use super::{unsupported, KCtx, R};
use crate::ir::*;
use crate::parser::ast;
use crate::sem::int as n;
use crate::types::Ty;

/// `and`, `or`, `xor`, `not`, `cnot`, `popc`, `clz`, `brev`, `bfind`.
pub(super) fn logic(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["shiftamt"])?;
    let ty = sx.ty()?;
    let f: AluFn = match sx.base {
        "and" => n::and,
        "or" => n::or,
        "xor" => n::xor,
        "not" => n::not,
        "cnot" => n::cnot,
        "popc" => n::popc,
        "clz" => n::clz,
        "brev" => n::brev,
        _ => n::bfind,
    };
    let mut m = Mods::new(ty);
    m.aux = sx.has("shiftamt") as u32;
    let nsrc = if matches!(sx.base, "and" | "or" | "xor") {
        2
    } else {
        1
    };
    need(o, nsrc + 1, i)?;
    let d = k.dst(&o[0], line)?;
    let mut s = Vec::new();
    for x in &o[1..] {
        if ty == Ty::Pred {
            let (p, neg) = k.pred_src(x, line)?;
            if neg {
                return unsupported(line, "negated predicate operand");
            }
            s.push(p);
        } else {
            s.push(k.src(x, ty, line)?);
        }
    }
    Ok(alu(f, m, d, &s))
}

/// `shl`, `shr` (the shift amount is always `.u32`).
pub(super) fn shift(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&[])?;
    need(o, 3, i)?;
    let ty = sx.ty()?;
    let d = k.dst(&o[0], line)?;
    let a = k.src(&o[1], ty, line)?;
    let b = k.src(&o[2], Ty::U32, line)?;
    let f: AluFn = if sx.base == "shl" { n::shl } else { n::shr };
    Ok(alu(f, Mods::new(ty), d, &[a, b]))
}

/// `shf.{l,r}.{wrap,clamp}`: funnel shift.
pub(super) fn shf(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["l", "r", "wrap", "clamp"])?;
    need(o, 4, i)?;
    let mut m = Mods::new(Ty::B32);
    m.aux = sx.has("r") as u32 | (sx.has("clamp") as u32) << 1;
    let d = k.dst(&o[0], line)?;
    let s: Vec<Opd> = o[1..]
        .iter()
        .map(|x| k.src(x, Ty::B32, line))
        .collect::<R<_>>()?;
    Ok(alu(n::shf, m, d, &s))
}

/// `lop3`: arbitrary three-input logic.
pub(super) fn lop3(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&[])?;
    need(o, 5, i)?;
    let ty = sx.ty()?;
    let d = k.dst(&o[0], line)?;
    let s: Vec<Opd> = o[1..]
        .iter()
        .map(|x| k.src(x, ty, line))
        .collect::<R<_>>()?;
    Ok(alu(n::lop3, Mods::new(ty), d, &s))
}

/// `bfe`, `bfi`, `sad`, `mul24`, `mad24`, `dp4a`.
pub(super) fn bitfield(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["lo", "hi"])?;
    let ty = sx.ty()?;
    let mut m = Mods::new(ty);
    let (f, nsrc): (AluFn, usize) = match sx.base {
        "bfe" => (n::bfe, 3),
        "bfi" => (n::bfi, 4),
        "sad" => (n::sad, 3),
        "mul24" => (n::mul24, 2),
        "mad24" => (n::mul24, 3),
        _ => (n::dp4a, 3),
    };
    if sx.base == "dp4a" {
        let ts = sx.types();
        m.aux = ts.first().map(|t| t.is_signed() as u32).unwrap_or(0)
            | (ts.get(1).map(|t| t.is_signed() as u32).unwrap_or(0) << 1);
        m.ty = if m.aux != 0 { Ty::S32 } else { Ty::U32 };
    }
    m.aux |= (sx.has("hi") && sx.base.ends_with("24")) as u32;
    need(o, nsrc + 1, i)?;
    let d = k.dst(&o[0], line)?;
    let mut s = Vec::new();
    for (j, x) in o[1..].iter().enumerate() {
        let t = match (sx.base, j) {
            ("bfe", 1 | 2) | ("bfi", 2 | 3) => Ty::U32,
            ("dp4a", _) => Ty::U32,
            _ => ty,
        };
        s.push(k.src(x, t, line)?);
    }
    Ok(alu(f, m, d, &s))
}

/// `dp2a.{lo,hi}`: two-way 16-bit by 8-bit dot product.
pub(super) fn dp2a(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["lo", "hi"])?;
    need(o, 4, i)?;
    let ts = sx.types();
    let mut m = Mods::new(Ty::U32);
    m.aux = ts.first().map(|t| t.is_signed() as u32).unwrap_or(0)
        | (ts.get(1).map(|t| t.is_signed() as u32).unwrap_or(0) << 1)
        | (sx.has("hi") as u32) << 2;
    if m.aux & 3 != 0 {
        m.ty = Ty::S32;
    }
    let d = k.dst(&o[0], line)?;
    let s: Vec<Opd> = o[1..]
        .iter()
        .map(|x| k.src(x, Ty::U32, line))
        .collect::<R<_>>()?;
    Ok(alu(n::dp2a, m, d, &s))
}

/// `prmt` with every mode.
pub(super) fn prmt(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])?;
    need(o, 4, i)?;
    let mut m = Mods::new(Ty::B32);
    m.aux = ["", "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"]
        .iter()
        .position(|x| sx.has(x))
        .unwrap_or(0) as u32;
    let d = k.dst(&o[0], line)?;
    let s: Vec<Opd> = o[1..]
        .iter()
        .map(|x| k.src(x, Ty::B32, line))
        .collect::<R<_>>()?;
    Ok(alu(n::prmt, m, d, &s))
}
