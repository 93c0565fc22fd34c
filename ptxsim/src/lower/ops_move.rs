//! Lowering of moves and conversions: `mov` (also vector pack/unpack and the clock
//! registers), `cvt`, `cvta`, `isspacep`, and the cluster/policy instructions that reduce to a
//! move (`createpolicy`, `mapa`, `getctarank`).

use super::sfx::{alu, need, Sfx};
use super::{unsupported, KCtx, R};
use crate::ir::*;
use crate::parser::ast::{self, Operand};
use crate::sem::{cvt as scvt, int as n};
use crate::types::{Space, Ty};

/// `mov`: register copy, vector pack/unpack, `%clock`/`%globaltimer` reads.
pub(super) fn mov(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&[])?;
    need(o, 2, i)?;
    let ty = sx.ty()?;
    match (&o[0], &o[1]) {
        (Operand::Vec(ds), src) => {
            let nn = ds.len();
            if !(2..=4).contains(&nn) || ty.bits() % nn as u32 != 0 {
                return unsupported(line, "vector unpack shape");
            }
            let mut d = [NOREG; 4];
            for (j, x) in ds.iter().enumerate() {
                d[j] = k.dst(x, line)?;
            }
            let s = k.src(src, ty, line)?;
            Ok(Kind::Unpack {
                d,
                n: nn as u8,
                w: (ty.bits() / nn as u32) as u8,
                s,
            })
        }
        (dst, Operand::Vec(ss)) => {
            let nn = ss.len();
            if !(2..=4).contains(&nn) || ty.bits() % nn as u32 != 0 {
                return unsupported(line, "vector pack shape");
            }
            let w = ty.bits() / nn as u32;
            let et = match w {
                8 => Ty::B8,
                16 => Ty::B16,
                32 => Ty::B32,
                _ => Ty::B64,
            };
            let mut s = [Opd::Imm(0); 4];
            for (j, x) in ss.iter().enumerate() {
                s[j] = k.src(x, et, line)?;
            }
            let d = k.dst(dst, line)?;
            Ok(Kind::Pack {
                d,
                s,
                n: nn as u8,
                w: w as u8,
            })
        }
        (
            dst,
            Operand::Name {
                name: clk,
                neg: false,
            },
        ) if matches!(
            clk.as_str(),
            "%clock" | "%clock64" | "%globaltimer" | "%globaltimer_lo"
        ) =>
        {
            let d = k.dst(dst, line)?;
            let (mul, bits) = match clk.as_str() {
                "%clock" => (1, 32),
                "%clock64" => (1, 64),
                "%globaltimer" => (32, 64),
                _ => (32, 32),
            };
            Ok(Kind::Clock { d, mul, bits })
        }
        (dst, src) => {
            let d = k.dst(dst, line)?;
            let (s, neg) = if ty == Ty::Pred {
                k.pred_src(src, line)?
            } else {
                (k.src(src, ty, line)?, false)
            };
            if ty != Ty::Pred && !matches!(s, Opd::Sym(..)) {
                // registers and immediates already hold normalized values of this width
                return Ok(Kind::Mov { d, s });
            }
            let f: AluFn = if neg { n::not } else { n::mov };
            Ok(alu(f, Mods::new(ty), d, &[s]))
        }
    }
}

/// `cvt` between every integer and float type, and the packing `cvt.{f16x2,bf16x2}.f32`.
pub(super) fn cvt(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["ftz", "sat", "relu", "satfinite"])?;
    let ts = sx.types();
    if ts.len() != 2 {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let (dt, st) = (ts[0], ts[1]);
    let mut m = sx.mods(dt);
    m.sty = st;
    m.aux = sx.has("relu") as u32 | (sx.has("satfinite") as u32) << 2;
    if sx.has("satfinite") && !matches!(dt, Ty::F16 | Ty::Bf16 | Ty::F16x2 | Ty::Bf16x2) {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    if matches!(dt, Ty::F16x2 | Ty::Bf16x2) && st == Ty::F32 {
        need(o, 3, i)?;
        let d = k.dst(&o[0], line)?;
        let a = k.src(&o[1], st, line)?;
        let b = k.src(&o[2], st, line)?;
        return Ok(alu(scvt::cvt_x2, m, d, &[a, b]));
    }
    if matches!(dt, Ty::F16x2 | Ty::Bf16x2 | Ty::B128 | Ty::Pred)
        || matches!(st, Ty::F16x2 | Ty::Bf16x2 | Ty::B128 | Ty::Pred)
    {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    // float -> int needs an integer rounding mode (default .rzi would hide bugs: require one)
    if dt.is_int() && st.is_float() && m.irnd.is_none() {
        return unsupported(
            line,
            format!("`{}` without an integer rounding mode", i.opcode),
        );
    }
    need(o, 2, i)?;
    let d = k.dst(&o[0], line)?;
    let a = k.src(&o[1], st, line)?;
    Ok(alu(scvt::cvt, m, d, &[a]))
}

/// `cvta` and `cvta.to`: between generic and state-space addresses.
pub(super) fn cvta(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["to"])?;
    need(o, 2, i)?;
    let ty = sx.ty()?;
    let d = k.dst(&o[0], line)?;
    let a = k.src(&o[1], ty, line)?;
    let mut m = Mods::new(ty);
    let to = sx.has("to");
    let (fun, aux): (AluFn, u32) = match sx.space() {
        Some(Space::Global) | Some(Space::Const) => (n::mov, 0),
        Some(Space::Shared) => (
            if to { n::sub_base } else { n::add_base },
            crate::memory::SHARED_AUX,
        ),
        Some(Space::Local) => (
            if to { n::sub_base } else { n::add_base },
            crate::memory::LOCAL_AUX,
        ),
        Some(Space::Param) => (
            if to { n::sub_base } else { n::add_base },
            crate::memory::PARAM_AUX,
        ),
        _ => return unsupported(line, format!("`{}`", i.opcode)),
    };
    m.aux = aux;
    Ok(alu(fun, m, d, &[a]))
}

/// `isspacep`: whether a generic address lies in a state space.
pub(super) fn isspacep(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&[])?;
    need(o, 2, i)?;
    let d = k.dst(&o[0], line)?;
    let a = k.src(&o[1], Ty::U64, line)?;
    let mut m = Mods::new(Ty::Pred);
    m.aux = match sx.space() {
        Some(Space::Global) | Some(Space::Const) => 0,
        Some(Space::Shared) => 1,
        Some(Space::Local) => 2,
        Some(Space::Param) => 3,
        _ => return unsupported(line, format!("`{}`", i.opcode)),
    };
    Ok(alu(n::isspacep, m, d, &[a]))
}

/// `createpolicy`: a cache policy (always 0 here).
pub(super) fn createpolicy(k: &mut KCtx<'_>, _: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    if o.is_empty() {
        return need(o, 1, i).map(|_| Kind::Nop);
    }
    let d = k.dst(&o[0], line)?;
    Ok(alu(n::mov, Mods::new(Ty::B64), d, &[Opd::Imm(0)]))
}

/// `mapa`: the identity (a cluster is one block).
pub(super) fn mapa(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    need(o, 3, i)?;
    let ty = sx.ty()?;
    let d = k.dst(&o[0], line)?;
    let a = k.src(&o[1], ty, line)?;
    Ok(alu(n::mov, Mods::new(ty), d, &[a]))
}

/// `getctarank`: always rank 0 (a cluster is one block).
pub(super) fn getctarank(k: &mut KCtx<'_>, _: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    need(o, 2, i)?;
    let d = k.dst(&o[0], line)?;
    Ok(alu(n::mov, Mods::new(Ty::U32), d, &[Opd::Imm(0)]))
}
