//! Operands: register, immediate, predicate, symbol and address operands resolved against the
//! lowering scopes, and the placeholders for addresses in dynamic shared memory.

use super::{func_addr, func_index, unsupported, KCtx, Name, R};
use crate::error::SimError;
use crate::ir::{Instr, Opd};
use crate::parser::ast::{Imm, Operand};
use crate::types::{Space, Ty};

/// Encodes an immediate for an instruction of type `ty`.
pub(crate) fn imm_bits(imm: Imm, ty: Ty) -> u64 {
    match (imm, ty) {
        (Imm::F32(b), Ty::F64) => (f32::from_bits(b) as f64).to_bits(),
        (Imm::F32(b), _) => b as u64,
        (Imm::F64(b), Ty::F32) => (f64::from_bits(b) as f32).to_bits() as u64,
        (Imm::F64(b), _) => b,
        (Imm::Float(f), Ty::F64) => f.to_bits(),
        (Imm::Float(f), _) => (f as f32).to_bits() as u64,
        (Imm::Int(i), Ty::F32) => (i as f32).to_bits() as u64,
        (Imm::Int(i), Ty::F64) => (i as f64).to_bits(),
        (Imm::Int(i), t) => {
            let v = i as u64;
            if t == Ty::Pred {
                (v != 0) as u64
            } else {
                crate::types::extend(v, t.bits().min(64), t.is_signed())
            }
        }
    }
}

impl KCtx<'_> {
    /// A destination register.
    pub(crate) fn reg(&mut self, name: &str, line: usize) -> R<u32> {
        match self.lookup(name) {
            Some(Name::Reg(r)) => Ok(r),
            Some(_) => Err(SimError::Parse {
                line,
                message: format!("`{name}` is not a register"),
            }),
            None => Err(SimError::Parse {
                line,
                message: format!("undeclared register `{name}`"),
            }),
        }
    }

    /// A destination operand (register name; `_` sink gets a scratch register).
    pub(crate) fn dst(&mut self, o: &Operand, line: usize) -> R<u32> {
        match o {
            Operand::Name { name, neg: false } if name == "_" => Ok(self.alloc_regs(1)),
            Operand::Name { name, neg: false } => self.reg(name, line),
            _ => Err(SimError::Parse {
                line,
                message: format!("expected a destination register, found {o:?}"),
            }),
        }
    }

    /// A source operand of type `ty`.
    pub(crate) fn src(&mut self, o: &Operand, ty: Ty, line: usize) -> R<Opd> {
        match o {
            Operand::Imm(imm) => Ok(Opd::Imm(imm_bits(*imm, ty))),
            Operand::Name { name, neg: false } => self.name_opd(name, 0, line),
            Operand::SymOff(name, off) => self.name_opd(name, *off, line),
            _ => Err(SimError::Parse {
                line,
                message: format!("unexpected operand {o:?}"),
            }),
        }
    }

    /// A predicate source, possibly negated (`!%p`).
    pub(crate) fn pred_src(&mut self, o: &Operand, line: usize) -> R<(Opd, bool)> {
        match o {
            Operand::Name { name, neg } => Ok((self.name_opd(name, 0, line)?, *neg)),
            Operand::Imm(imm) => Ok((Opd::Imm(imm_bits(*imm, Ty::Pred)), false)),
            _ => Err(SimError::Parse {
                line,
                message: format!("expected a predicate, found {o:?}"),
            }),
        }
    }

    fn name_opd(&mut self, name: &str, off: i64, line: usize) -> R<Opd> {
        let add = |b: u64| Opd::Imm(b.wrapping_add(off as u64));
        match self.lookup(name) {
            Some(Name::Reg(r)) if off == 0 => Ok(Opd::Reg(r)),
            Some(Name::Reg(_)) => unsupported(line, "register plus offset as a value"),
            Some(Name::Shared(o)) => Ok(shared_opd(o, off, false)),
            Some(Name::Local(o)) | Some(Name::FParam(o)) | Some(Name::KParam(o)) => Ok(add(o)),
            Some(Name::Global(g)) => Ok(Opd::Sym(g, off)),
            None if func_index(self.ast, name).is_some() => {
                self.func_info(name, line)?;
                let i = func_index(self.ast, name).unwrap_or(0);
                Ok(Opd::Imm(func_addr(i).wrapping_add(off as u64)))
            }
            None => Err(SimError::Parse {
                line,
                message: format!("undeclared name `{name}`"),
            }),
        }
    }

    /// An address operand `[base+off]` with its inferred state space.
    pub(crate) fn addr(
        &mut self,
        o: &Operand,
        sp: Option<Space>,
        line: usize,
    ) -> R<(Space, Opd, i64)> {
        let Operand::Addr { base, off } = o else {
            return Err(SimError::Parse {
                line,
                message: format!("expected an address `[..]`, found {o:?}"),
            });
        };
        let Some(b) = base else {
            return Ok((sp.unwrap_or(Space::Generic), Opd::Imm(0), *off));
        };
        let n = self.lookup(b);
        Ok(match (n, sp) {
            (Some(Name::Reg(r)), sp) => (sp.unwrap_or(Space::Generic), Opd::Reg(r), *off),
            (Some(Name::KParam(o)), Some(Space::Param)) => (Space::Param, Opd::Imm(o), *off),
            (Some(Name::FParam(o)), Some(Space::Param) | Some(Space::Local)) => {
                (Space::Local, Opd::Imm(o), *off)
            }
            (Some(Name::Local(o)), Some(Space::Local)) => (Space::Local, Opd::Imm(o), *off),
            (Some(Name::Shared(o)), Some(Space::Shared)) => {
                (Space::Shared, shared_opd(o, 0, false), *off)
            }
            (Some(Name::Global(g)), Some(Space::Global) | Some(Space::Const) | None) => {
                (Space::Global, Opd::Sym(g, 0), *off)
            }
            (Some(Name::Shared(o)), None) => (Space::Generic, shared_opd(o, 0, true), *off),
            (Some(n), sp) => {
                return unsupported(
                    line,
                    format!("address of `{b}` ({n:?}) used with state space {sp:?}"),
                )
            }
            (None, _) => {
                return Err(SimError::Parse {
                    line,
                    message: format!("undeclared name `{b}` in address"),
                })
            }
        })
    }

    pub(crate) fn label(&self, name: &str, line: usize) -> R<u32> {
        self.labels
            .get(name)
            .copied()
            .ok_or_else(|| SimError::Parse {
                line,
                message: format!("undefined label `{name}`"),
            })
    }
}

/// Symbol index standing for the start of dynamic shared memory (shared-space address),
/// replaced by an immediate once the kernel's static shared size is known.
const DYN_SYM: u32 = u32::MAX - 1;
/// The same as a generic address.
const DYN_SYM_GENERIC: u32 = u32::MAX;

/// Operand for the address of a shared variable at offset `o` (`u64::MAX` = dynamic shared).
fn shared_opd(o: u64, off: i64, generic: bool) -> Opd {
    let base = if generic {
        crate::memory::SHARED_BASE
    } else {
        0
    };
    if o == u64::MAX {
        Opd::Sym(if generic { DYN_SYM_GENERIC } else { DYN_SYM }, off)
    } else {
        Opd::Imm(base.wrapping_add(o).wrapping_add(off as u64))
    }
}

/// Replaces the dynamic-shared placeholder symbols by immediates.
pub(super) fn patch_dyn_shared(code: &mut [Instr], dyn_off: u64) {
    for ins in code {
        ins.kind.for_each_opd_mut(&mut |o: &mut Opd| {
            if let Opd::Sym(s, off) = *o {
                if s == DYN_SYM {
                    *o = Opd::Imm(dyn_off.wrapping_add(off as u64));
                } else if s == DYN_SYM_GENERIC {
                    *o = Opd::Imm((crate::memory::SHARED_BASE + dyn_off).wrapping_add(off as u64));
                }
            }
        });
    }
}
