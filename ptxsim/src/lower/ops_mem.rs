//! Lowering of memory instructions: `ld`, `st`, `atom`/`red`, `cp.async`.

use super::sfx::{need, Sfx};
use super::{unsupported, KCtx, R};
use crate::error::SimError;
use crate::ir::*;
use crate::parser::ast::{self, Operand};
use crate::types::{Space, Ty};

/// Operands without the trailing cache-policy operand of `.L2::cache_hint` forms.
pub(super) fn strip_hint<'o>(sx: &Sfx<'_>, o: &'o [Operand]) -> &'o [Operand] {
    if sx.has("L2::cache_hint") && !o.is_empty() {
        &o[..o.len() - 1]
    } else {
        o
    }
}

/// Memory-ordering qualifiers that make an access "strong" (never a data race).
pub(super) fn is_strong(sx: &Sfx<'_>) -> bool {
    ["volatile", "relaxed", "acquire", "release"]
        .iter()
        .any(|q| sx.has(q))
}

pub(super) fn ld(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = strip_hint(sx, &i.operands);
    sx.check(&[])?;
    need(o, 2, i)?;
    let ty = sx.ty()?;
    if ty == Ty::B128 || ty == Ty::Pred {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let nvec = sx.vec();
    let mut d = [NOREG; 4];
    match &o[0] {
        Operand::Vec(v) if v.len() == nvec as usize && nvec > 1 => {
            for (j, x) in v.iter().enumerate() {
                d[j] = k.dst(x, line)?;
            }
        }
        x if nvec == 1 => d[0] = k.dst(x, line)?,
        _ => {
            return Err(SimError::Parse {
                line,
                message: "vector width and destination list do not match".into(),
            })
        }
    }
    let (sp, a, off) = k.addr(&o[1], sx.space(), line)?;
    Ok(Kind::Ld {
        sp,
        sz: ty.bytes() as u8,
        sext: ty.is_signed(),
        n: nvec,
        d,
        a,
        off,
        strong: is_strong(sx),
    })
}

pub(super) fn st(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = strip_hint(sx, &i.operands);
    sx.check(&[])?;
    need(o, 2, i)?;
    let ty = sx.ty()?;
    if ty == Ty::B128 || ty == Ty::Pred {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let nvec = sx.vec();
    let mut s = [Opd::Imm(0); 4];
    match &o[1] {
        Operand::Vec(v) if v.len() == nvec as usize && nvec > 1 => {
            for (j, x) in v.iter().enumerate() {
                s[j] = k.src(x, ty, line)?;
            }
        }
        x if nvec == 1 => s[0] = k.src(x, ty, line)?,
        _ => {
            return Err(SimError::Parse {
                line,
                message: "vector width and source list do not match".into(),
            })
        }
    }
    let (sp, a, off) = k.addr(&o[0], sx.space(), line)?;
    if sp == Space::Param && !matches!(a, Opd::Imm(_)) {
        return unsupported(line, "st.param through a register");
    }
    Ok(Kind::St {
        sp,
        sz: ty.bytes() as u8,
        n: nvec,
        s,
        a,
        off,
        strong: is_strong(sx),
    })
}

pub(super) fn atom(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = strip_hint(sx, &i.operands);
    let ops = [
        "add", "min", "max", "exch", "cas", "inc", "dec", "and", "or", "xor",
    ];
    sx.check(&ops)?;
    let ty = sx.ty()?;
    let op = match sx.parts.iter().find(|p| ops.contains(p)).copied() {
        Some("add") => AtomOp::Add,
        Some("min") => AtomOp::Min,
        Some("max") => AtomOp::Max,
        Some("exch") => AtomOp::Exch,
        Some("cas") => AtomOp::Cas,
        Some("inc") => AtomOp::Inc,
        Some("dec") => AtomOp::Dec,
        Some("and") => AtomOp::And,
        Some("or") => AtomOp::Or,
        Some("xor") => AtomOp::Xor,
        _ => return unsupported(line, format!("`{}`", i.opcode)),
    };
    if sx.vec() > 1
        || ty == Ty::B128
        || (matches!(ty, Ty::F16x2 | Ty::Bf16x2 | Ty::F16 | Ty::Bf16) && op != AtomOp::Add)
    {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let is_red = sx.base == "red";
    let nops = if is_red { 2 } else { 3 } + (op == AtomOp::Cas) as usize;
    need(o, nops, i)?;
    let (d, rest) = if is_red {
        (NOREG, o)
    } else {
        (k.dst(&o[0], line)?, &o[1..])
    };
    let (sp, a, off) = k.addr(&rest[0], sx.space(), line)?;
    if !matches!(sp, Space::Global | Space::Shared | Space::Generic) {
        return unsupported(line, format!("atomic on .{} memory", sp.name()));
    }
    let b = k.src(&rest[1], ty, line)?;
    let c = match rest.get(2) {
        Some(x) => k.src(x, ty, line)?,
        None => Opd::Imm(0),
    };
    Ok(Kind::Atom {
        sp,
        op,
        ty,
        d,
        a,
        off,
        b,
        c,
    })
}

pub(super) fn cp_async(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    if !sx.has("async") || sx.has("bulk") || sx.has("mbarrier") {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    if sx.has("commit_group") || sx.has("wait_group") || sx.has("wait_all") {
        return Ok(Kind::Nop);
    }
    sx.check(&["async", "L2::64B", "L2::128B", "L2::256B", "L2::cache_hint"])?;
    let o = strip_hint(sx, &i.operands);
    if !(3..=4).contains(&o.len()) {
        return need(o, 3, i).map(|_| Kind::Nop);
    }
    let (_, dst, doff) = k.addr(&o[0], Some(Space::Shared), line)?;
    let (_, src, soff) = k.addr(&o[1], Some(Space::Global), line)?;
    let size = match &o[2] {
        Operand::Imm(ast::Imm::Int(v)) if matches!(*v, 4 | 8 | 16) => *v as u8,
        _ => return unsupported(line, "cp.async size other than 4, 8 or 16"),
    };
    let src_size = match o.get(3) {
        Some(x) => Some(k.src(x, Ty::U32, line)?),
        None => None,
    };
    Ok(Kind::CpAsync {
        dst,
        doff,
        src,
        soff,
        size,
        src_size,
    })
}
