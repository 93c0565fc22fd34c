//! Lowering of block barriers and warp-synchronous instructions.

use super::sfx::{need, Sfx};
use super::{unsupported, KCtx, R};
use crate::error::SimError;
use crate::ir::*;
use crate::parser::ast::{self, Operand};
use crate::types::Ty;

pub(super) fn bar(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    if sx.has("warp") {
        sx.check(&["warp"])?;
        need(o, 1, i)?;
        let mask = k.src(&o[0], Ty::U32, line)?;
        return Ok(Kind::Sync {
            op: SyncOp::BarWarp,
            mask,
        });
    }
    if sx.has("cluster") {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    sx.check(&["arrive", "red", "popc", "and", "or"])?;
    let op = if sx.has("red") {
        if sx.has("popc") {
            BarOp::RedPopc
        } else if sx.has("and") {
            BarOp::RedAnd
        } else {
            BarOp::RedOr
        }
    } else if sx.has("arrive") {
        BarOp::Arrive
    } else if sx.has("sync") || sx.parts.is_empty() || sx.parts == ["cta"] {
        BarOp::Sync
    } else {
        return unsupported(line, format!("`{}`", i.opcode));
    };
    let mut rest = &o[..];
    let mut d = NOREG;
    let mut src = None;
    if matches!(op, BarOp::RedPopc | BarOp::RedAnd | BarOp::RedOr) {
        if o.len() < 3 {
            return need(o, 3, i).map(|_| Kind::Nop);
        }
        d = k.dst(&o[0], line)?;
        src = Some(k.pred_src(&o[o.len() - 1], line)?);
        rest = &o[1..o.len() - 1];
    }
    if rest.is_empty() || rest.len() > 2 {
        return Err(SimError::Parse {
            line,
            message: format!(
                "`{}` takes a barrier id and an optional thread count",
                i.opcode
            ),
        });
    }
    let id = k.src(&rest[0], Ty::U32, line)?;
    let cnt = match rest.get(1) {
        Some(x) => Some(k.src(x, Ty::U32, line)?),
        None => None,
    };
    if op == BarOp::Arrive && cnt.is_none() {
        return Err(SimError::Parse {
            line,
            message: "bar.arrive needs a thread count".into(),
        });
    }
    Ok(Kind::Bar {
        op,
        id,
        cnt,
        d,
        src,
    })
}

/// Warp-synchronous instructions must be the `.sync` forms.
fn need_sync(sx: &Sfx<'_>, i: &ast::Instr) -> R<()> {
    if !sx.has("sync") {
        return unsupported(i.line, format!("`{}` (non-.sync warp operation)", i.opcode));
    }
    Ok(())
}

/// A destination that may be a `d|p` pair (`_` for an unused `d`); `p` is `NOREG` if absent.
fn pair(k: &mut KCtx<'_>, line: usize, x: &Operand) -> R<(u32, u32)> {
    match x {
        Operand::Pair(a, b) => {
            let a = if a == "_" {
                k.dst(x, line).unwrap_or(NOREG)
            } else {
                k.reg(a, line)?
            };
            Ok((a, k.reg(b, line)?))
        }
        x => Ok((k.dst(x, line)?, NOREG)),
    }
}

/// `activemask`: the mask of the lanes executing it.
pub(super) fn activemask(k: &mut KCtx<'_>, _: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    need(o, 1, i)?;
    Ok(Kind::Activemask {
        d: k.dst(&o[0], line)?,
    })
}

/// `shfl.sync.{up,down,bfly,idx}`.
pub(super) fn shfl(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    need_sync(sx, i)?;
    sx.check(&["up", "down", "bfly", "idx"])?;
    need(o, 5, i)?;
    let mode = if sx.has("up") {
        ShflMode::Up
    } else if sx.has("down") {
        ShflMode::Down
    } else if sx.has("bfly") {
        ShflMode::Bfly
    } else if sx.has("idx") {
        ShflMode::Idx
    } else {
        return unsupported(line, format!("`{}`", i.opcode));
    };
    let (d, p) = pair(k, line, &o[0])?;
    let a = k.src(&o[1], Ty::B32, line)?;
    let b = k.src(&o[2], Ty::U32, line)?;
    let c = k.src(&o[3], Ty::U32, line)?;
    let mask = k.src(&o[4], Ty::U32, line)?;
    Ok(Kind::Sync {
        op: SyncOp::Shfl {
            mode,
            d,
            p,
            a,
            b,
            c,
        },
        mask,
    })
}

/// `vote.sync.{all,any,uni,ballot}`.
pub(super) fn vote(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    need_sync(sx, i)?;
    sx.check(&["all", "any", "uni", "ballot"])?;
    need(o, 3, i)?;
    let mode = if sx.has("all") {
        VoteMode::All
    } else if sx.has("any") {
        VoteMode::Any
    } else if sx.has("uni") {
        VoteMode::Uni
    } else {
        VoteMode::Ballot
    };
    let d = k.dst(&o[0], line)?;
    let (s, neg) = k.pred_src(&o[1], line)?;
    let mask = k.src(&o[2], Ty::U32, line)?;
    Ok(Kind::Sync {
        op: SyncOp::Vote { mode, d, s, neg },
        mask,
    })
}

/// `redux.sync` on 32-bit integers.
pub(super) fn redux(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    need_sync(sx, i)?;
    sx.check(&["add", "min", "max", "and", "or", "xor"])?;
    need(o, 3, i)?;
    let ty = sx.ty()?;
    if !matches!(ty, Ty::U32 | Ty::S32 | Ty::B32) {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let op = if sx.has("add") {
        ReduxOp::Add
    } else if sx.has("min") {
        ReduxOp::Min
    } else if sx.has("max") {
        ReduxOp::Max
    } else if sx.has("and") {
        ReduxOp::And
    } else if sx.has("or") {
        ReduxOp::Or
    } else {
        ReduxOp::Xor
    };
    let d = k.dst(&o[0], line)?;
    let s = k.src(&o[1], ty, line)?;
    let mask = k.src(&o[2], Ty::U32, line)?;
    Ok(Kind::Sync {
        op: SyncOp::Redux {
            op,
            signed: ty == Ty::S32,
            d,
            s,
        },
        mask,
    })
}

/// `elect.sync`: the lowest lane of the mask is the leader.
pub(super) fn elect(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    need_sync(sx, i)?;
    sx.check(&[])?;
    need(o, 2, i)?;
    let (d, p) = pair(k, line, &o[0])?;
    let mask = k.src(&o[1], Ty::U32, line)?;
    Ok(Kind::Sync {
        op: SyncOp::Elect { d, p },
        mask,
    })
}

/// `match.sync.{any,all}` on 32- or 64-bit values.
pub(super) fn match_any_all(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    need_sync(sx, i)?;
    sx.check(&["any", "all"])?;
    need(o, 3, i)?;
    let ty = sx.ty()?;
    let (d, p) = pair(k, line, &o[0])?;
    let s = k.src(&o[1], ty, line)?;
    let mask = k.src(&o[2], Ty::U32, line)?;
    Ok(Kind::Sync {
        op: SyncOp::Match {
            all: sx.has("all"),
            bits64: ty.bits() == 64,
            d,
            p,
            s,
        },
        mask,
    })
}
