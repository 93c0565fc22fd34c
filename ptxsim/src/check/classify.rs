//! Instruction classes of lowered instructions, for [`super::Metrics::instructions_by_class`].

use super::InstrClass;
use crate::ir::{AluFn, Instr, Kind};
use crate::sem;
use crate::types::{Space, Ty};

fn is(f: AluFn, g: AluFn) -> bool {
    std::ptr::fn_addr_eq(f, g)
}

fn by_type(ty: Ty) -> InstrClass {
    match ty {
        Ty::F16 | Ty::F16x2 | Ty::Bf16 | Ty::Bf16x2 => InstrClass::F16,
        Ty::F32 => InstrClass::F32,
        Ty::F64 => InstrClass::F64,
        _ => InstrClass::Int,
    }
}

/// The class of instruction `k`. Loads and stores through generic addresses are classed as
/// generic (the window is only known per lane at run time).
pub(crate) fn class_of(k: &Kind) -> InstrClass {
    match k {
        Kind::Alu { f, m, .. } => {
            if is(*f, sem::int::mov) || is(*f, sem::int::selp) {
                InstrClass::Move
            } else if is(*f, sem::cvt::cvt)
                || (m.sty != m.ty && (m.sty.is_float() || m.ty.is_float()))
            {
                InstrClass::Convert
            } else {
                by_type(m.ty)
            }
        }
        Kind::Setp { .. } => InstrClass::Compare,
        Kind::Pack { .. } | Kind::Unpack { .. } | Kind::Activemask { .. } => InstrClass::Move,
        Kind::Ld { sp, .. } => match sp {
            Space::Global => InstrClass::GlobalLoad,
            Space::Shared => InstrClass::SharedLoad,
            Space::Local => InstrClass::LocalLoad,
            Space::Param | Space::Const => InstrClass::ParamLoad,
            Space::Generic => InstrClass::GenericLoad,
        },
        Kind::St { sp, .. } => match sp {
            Space::Global => InstrClass::GlobalStore,
            Space::Shared => InstrClass::SharedStore,
            Space::Local => InstrClass::LocalStore,
            _ => InstrClass::GenericStore,
        },
        Kind::Atom { .. } => InstrClass::Atomic,
        Kind::Bra { .. } => InstrClass::Branch,
        Kind::Bar { .. } => InstrClass::Barrier,
        Kind::Sync { .. } => InstrClass::WarpSync,
        Kind::Call { .. } | Kind::Ret | Kind::Exit | Kind::Trap => InstrClass::Control,
        Kind::Nop => InstrClass::Other,
    }
}

/// The class of every instruction of `code`, indexed by program counter.
pub(crate) fn classes(code: &[Instr]) -> Vec<InstrClass> {
    code.iter().map(|i| class_of(&i.kind)).collect()
}
