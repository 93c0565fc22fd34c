//! Lowering of comparisons and selects: `setp`/`set` (every comparison, `.and/.or/.xor`
//! combiners, packed `.f16x2`/`.bf16x2`), `selp`, `slct`.

use super::sfx::{alu, need, Sfx};
use super::{unsupported, KCtx, R};
use crate::error::SimError;
use crate::ir::*;
use crate::parser::ast::{self, Operand};
use crate::sem::{cmp as scmp, int as n};
use crate::types::Ty;

/// `selp`: `d = c ? a : b`.
pub(super) fn selp(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&[])?;
    need(o, 4, i)?;
    let ty = sx.ty()?;
    let d = k.dst(&o[0], line)?;
    let a = k.src(&o[1], ty, line)?;
    let b = k.src(&o[2], ty, line)?;
    let (c, neg) = k.pred_src(&o[3], line)?;
    if neg {
        return unsupported(line, "negated predicate in selp");
    }
    Ok(alu(n::selp, Mods::new(ty), d, &[a, b, c]))
}

/// `slct`: `d = c >= 0 ? a : b` on a signed or float `c`.
pub(super) fn slct(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["ftz"])?;
    need(o, 4, i)?;
    let ts = sx.types();
    if ts.len() != 2 {
        return unsupported(line, "slct needs two types");
    }
    let mut m = Mods::new(ts[0]);
    m.sty = ts[1];
    m.ftz = sx.has("ftz");
    let d = k.dst(&o[0], line)?;
    let a = k.src(&o[1], ts[0], line)?;
    let b = k.src(&o[2], ts[0], line)?;
    let c = k.src(&o[3], ts[1], line)?;
    Ok(alu(n::slct, m, d, &[a, b, c]))
}

/// `setp` and `set`: `p = cmp(a, b) bop c`, `q = !cmp(a, b) bop c`.
pub(super) fn setp(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(CMPS)?;
    let ts = sx.types();
    let (set_ty, ty) = if sx.base == "set" {
        if ts.len() != 2 {
            return unsupported(line, "set needs a destination and a source type");
        }
        (Some(ts[0]), ts[1])
    } else {
        (None, sx.ty()?)
    };
    let packed = matches!(ty, Ty::F16x2 | Ty::Bf16x2);
    if packed && set_ty.is_some() {
        return unsupported(line, format!("`{}` (packed set)", i.opcode));
    }
    let cmp = sx
        .parts
        .iter()
        .find_map(|p| cmp_of(p))
        .ok_or_else(|| SimError::Parse {
            line,
            message: format!("`{}` without a comparison", i.opcode),
        })?;
    let bop = sx.parts.iter().find_map(|p| match *p {
        "and" => Some(BoolOp::And),
        "or" => Some(BoolOp::Or),
        "xor" => Some(BoolOp::Xor),
        _ => None,
    });
    let mut m = Mods::new(ty);
    m.cmp = cmp;
    m.ftz = sx.has("ftz");
    if !(3..=4).contains(&o.len()) {
        return need(o, 3, i).map(|_| Kind::Nop);
    }
    let (p, q) = match &o[0] {
        Operand::Pair(a, b) => (k.reg(a, line)?, k.reg(b, line)?),
        x => (k.dst(x, line)?, NOREG),
    };
    let a = k.src(&o[1], ty, line)?;
    let b = k.src(&o[2], ty, line)?;
    let c = match (o.get(3), bop) {
        (Some(x), Some(bop)) => {
            let (c, neg) = k.pred_src(x, line)?;
            Some((c, neg, bop))
        }
        (None, None) => None,
        _ => {
            return Err(SimError::Parse {
                line,
                message: "boolean operator and third operand must come together".into(),
            })
        }
    };
    let fun: CmpFn = if ty.is_float() {
        scmp::fcmp
    } else {
        scmp::icmp
    };
    if packed {
        m.ty = if ty == Ty::F16x2 { Ty::F16 } else { Ty::Bf16 };
    }
    Ok(Kind::Setp {
        packed,
        f: fun,
        m,
        p,
        q,
        a,
        b,
        c,
        set_ty,
    })
}

fn cmp_of(s: &str) -> Option<Cmp> {
    Some(match s {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        "lt" => Cmp::Lt,
        "le" => Cmp::Le,
        "gt" => Cmp::Gt,
        "ge" => Cmp::Ge,
        "lo" => Cmp::Lo,
        "ls" => Cmp::Ls,
        "hi" => Cmp::Hi,
        "hs" => Cmp::Hs,
        "equ" => Cmp::Equ,
        "neu" => Cmp::Neu,
        "ltu" => Cmp::Ltu,
        "leu" => Cmp::Leu,
        "gtu" => Cmp::Gtu,
        "geu" => Cmp::Geu,
        "num" => Cmp::Num,
        "nan" => Cmp::Nan,
        _ => return None,
    })
}

const CMPS: &[&str] = &[
    "eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu", "gtu",
    "geu", "num", "nan", "and", "or", "xor", "ftz",
];
