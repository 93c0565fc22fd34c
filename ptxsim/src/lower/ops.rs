//! Opcode lowering: one PTX instruction -> one [`Kind`]. [`lower_op`] only picks the family
//! function from the opcode's base name; each family lives in its own file:
//!
//! | family | file |
//! |---|---|
//! | arithmetic (`add` ... `max`, carry chain, `rcp`/`sqrt`/..., `testp`, `copysign`) | `ops_arith.rs` |
//! | bits and logic (`and` ... `bfind`, shifts, `lop3`, `bfe/bfi`, `prmt`, `dp4a`, ...) | `ops_bits.rs` |
//! | comparisons and selects (`setp`, `set`, `selp`, `slct`) | `ops_cmp.rs` |
//! | moves and conversions (`mov`, `cvt`, `cvta`, `isspacep`, ...) | `ops_move.rs` |
//! | memory (`ld`, `st`, `atom`/`red`, `cp.async`) | `ops_mem.rs` |
//! | barriers and warp-synchronous (`bar`, `shfl`, `vote`, ...) | `ops_sync.rs` |
//! | control flow (`bra`, `call`, `ret`, `exit`, `trap`) | `ops_ctrl.rs` |
//!
//! The opcode suffix helpers they share are in `sfx.rs`.

use super::sfx::Sfx;
use super::{ops_arith, ops_bits, ops_cmp, ops_ctrl, ops_mem, ops_move, ops_sync};
use super::{unsupported, KCtx, R};
use crate::ir::Kind;
use crate::parser::ast;
use crate::types::Ty;

/// Lowers one instruction of a family (`sx` is the instruction's split opcode).
type LowerFn = fn(&mut KCtx<'_>, &Sfx<'_>, &ast::Instr) -> R<Kind>;

/// The lowering function for the opcode base name `sx.base` (`None`: not an instruction).
fn family(sx: &Sfx<'_>) -> Option<LowerFn> {
    Some(match sx.base {
        "add" | "sub" | "mad" if sx.has("cc") => ops_arith::carry,
        "addc" | "subc" | "madc" => ops_arith::carry,
        "add" | "sub" | "mul" | "mad" | "fma" | "div" | "rem" | "abs" | "neg" | "min" | "max" => {
            ops_arith::arith
        }
        "rcp" | "sqrt" | "rsqrt" | "ex2" | "lg2" | "sin" | "cos" | "tanh" => ops_arith::special,
        "testp" => ops_arith::testp,
        "copysign" => ops_arith::copysign,
        "and" | "or" | "xor" | "not" | "cnot" | "popc" | "clz" | "brev" | "bfind" => {
            ops_bits::logic
        }
        "shl" | "shr" => ops_bits::shift,
        "shf" => ops_bits::shf,
        "lop3" => ops_bits::lop3,
        "bfe" | "bfi" | "sad" | "mul24" | "mad24" | "dp4a" => ops_bits::bitfield,
        "dp2a" => ops_bits::dp2a,
        "prmt" => ops_bits::prmt,
        "setp" | "set" => ops_cmp::setp,
        "selp" => ops_cmp::selp,
        "slct" => ops_cmp::slct,
        "mov" => ops_move::mov,
        "cvt" => ops_move::cvt,
        "cvta" => ops_move::cvta,
        "isspacep" => ops_move::isspacep,
        "createpolicy" => ops_move::createpolicy,
        "mapa" => ops_move::mapa,
        "getctarank" => ops_move::getctarank,
        "ld" | "ldu" => ops_mem::ld,
        "st" => ops_mem::st,
        "atom" | "red" => ops_mem::atom,
        "cp" => ops_mem::cp_async,
        "bar" | "barrier" => ops_sync::bar,
        "shfl" => ops_sync::shfl,
        "vote" => ops_sync::vote,
        "redux" => ops_sync::redux,
        "elect" => ops_sync::elect,
        "match" => ops_sync::match_any_all,
        "activemask" => ops_sync::activemask,
        "bra" | "brx" => ops_ctrl::bra,
        "call" => ops_ctrl::call,
        "ret" | "exit" | "trap" | "brkpt" => ops_ctrl::leave,
        // memory fences: a host fence between the block workers
        "membar" | "fence" => fence,
        "nanosleep" => sleep,
        // hints and scheduling: no effect in this model
        "prefetch" | "prefetchu" | "griddepcontrol" | "pmevent" | "discard" | "applypriority"
        | "setmaxnreg" => nop,
        _ => return None,
    })
}

fn nop(_: &mut KCtx<'_>, _: &Sfx<'_>, _: &ast::Instr) -> R<Kind> {
    Ok(Kind::Nop)
}

fn sleep(_: &mut KCtx<'_>, _: &Sfx<'_>, _: &ast::Instr) -> R<Kind> {
    Ok(Kind::Sleep)
}

fn fence(_: &mut KCtx<'_>, _: &Sfx<'_>, _: &ast::Instr) -> R<Kind> {
    Ok(Kind::Fence)
}

/// Lowers one instruction.
pub(super) fn lower_op(k: &mut KCtx<'_>, i: &ast::Instr) -> R<Kind> {
    let sx = Sfx::new(&i.opcode, i.line);
    if sx.types().contains(&Ty::B128) {
        return unsupported(i.line, format!("128-bit operation `{}`", i.opcode));
    }
    match family(&sx) {
        Some(lower) => lower(k, &sx, i),
        None => unsupported(i.line, format!("instruction `{}`", i.opcode)),
    }
}
