//! Helpers shared by every instruction family's lowering: the opcode split into base name and
//! modifiers ([`Sfx`]), the operand-count check ([`need`]) and the [`Kind::Alu`] builder.

use super::{unsupported, R};
use crate::error::SimError;
use crate::ir::{AluFn, Kind, Mods, Opd};
use crate::num::{IRnd, Rnd};
use crate::parser::ast::{self, Operand};
use crate::types::{Space, Ty};

/// Opcode split into its base name and modifier parts.
pub(super) struct Sfx<'a> {
    pub(super) base: &'a str,
    pub(super) parts: Vec<&'a str>,
    pub(super) line: usize,
    op: &'a str,
}

/// Modifiers that never change results in this simulator (memory ordering, scopes, cache hints).
const IGNORABLE: &[&str] = &[
    "sync",
    "aligned",
    "uni",
    "nc",
    "volatile",
    "relaxed",
    "acquire",
    "release",
    "acq_rel",
    "weak",
    "mmio",
    "cta",
    "gpu",
    "sys",
    "cluster",
    "ca",
    "cg",
    "cs",
    "lu",
    "cv",
    "wb",
    "wt",
    "sc",
    "noftz",
    "cta::sync",
];

impl<'a> Sfx<'a> {
    pub(super) fn new(op: &'a str, line: usize) -> Sfx<'a> {
        let mut it = op.split('.');
        let base = it.next().unwrap_or("");
        Sfx {
            base,
            parts: it.collect(),
            line,
            op,
        }
    }
    pub(super) fn has(&self, s: &str) -> bool {
        self.parts.contains(&s)
    }
    pub(super) fn types(&self) -> Vec<Ty> {
        self.parts.iter().filter_map(|p| Ty::parse(p)).collect()
    }
    pub(super) fn ty(&self) -> R<Ty> {
        match self.types().last() {
            Some(t) => Ok(*t),
            None => unsupported(self.line, format!("`{}` without a type", self.op)),
        }
    }
    pub(super) fn rnd(&self) -> Option<Rnd> {
        self.parts.iter().find_map(|p| match *p {
            "rn" => Some(Rnd::Rn),
            "rz" => Some(Rnd::Rz),
            "rm" => Some(Rnd::Rm),
            "rp" => Some(Rnd::Rp),
            _ => None,
        })
    }
    pub(super) fn irnd(&self) -> Option<IRnd> {
        self.parts.iter().find_map(|p| match *p {
            "rni" => Some(IRnd::Rni),
            "rzi" => Some(IRnd::Rzi),
            "rmi" => Some(IRnd::Rmi),
            "rpi" => Some(IRnd::Rpi),
            _ => None,
        })
    }
    pub(super) fn space(&self) -> Option<Space> {
        self.parts.iter().find_map(|p| Space::parse(p))
    }
    pub(super) fn vec(&self) -> u8 {
        if self.has("v4") {
            4
        } else if self.has("v2") {
            2
        } else {
            1
        }
    }
    /// Errors on any modifier that is not a type, rounding mode, space, vector width,
    /// ignorable hint, or in `allowed`.
    pub(super) fn check(&self, allowed: &[&str]) -> R<()> {
        for p in &self.parts {
            let known = Ty::parse(p).is_some()
                || matches!(
                    *p,
                    "rn" | "rz" | "rm" | "rp" | "rni" | "rzi" | "rmi" | "rpi" | "v2" | "v4"
                )
                || Space::parse(p).is_some()
                || IGNORABLE.contains(p)
                || (p.contains("::") && (p.starts_with("L1") || p.starts_with("L2")))
                || allowed.contains(p);
            if !known {
                return unsupported(self.line, format!("modifier `.{p}` in `{}`", self.op));
            }
        }
        Ok(())
    }
    pub(super) fn mods(&self, ty: Ty) -> Mods {
        let mut m = Mods::new(ty);
        m.rnd = self.rnd().unwrap_or(Rnd::Rn);
        m.irnd = self.irnd();
        m.ftz = self.has("ftz");
        m.sat = self.has("sat");
        m
    }
}

/// Checks that the instruction has exactly `n` operands.
pub(super) fn need(ops: &[Operand], n: usize, i: &ast::Instr) -> R<()> {
    if ops.len() != n {
        return Err(SimError::Parse {
            line: i.line,
            message: format!("`{}` takes {n} operands, found {}", i.opcode, ops.len()),
        });
    }
    Ok(())
}

/// An [`Kind::Alu`] instruction: `d = f(m, src)` per lane (up to four sources).
pub(super) fn alu(f: AluFn, m: Mods, d: u32, src: &[Opd]) -> Kind {
    let mut s = [Opd::Imm(0); 4];
    s[..src.len()].copy_from_slice(src);
    Kind::Alu {
        f,
        m,
        d,
        s,
        n: src.len() as u8,
    }
}

/// f16/bf16 scalar or packed pair.
pub(super) fn is_half(t: Ty) -> bool {
    matches!(t, Ty::F16 | Ty::F16x2 | Ty::Bf16 | Ty::Bf16x2)
}
