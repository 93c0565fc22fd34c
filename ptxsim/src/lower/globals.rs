//! Module-level `.global`/`.const` variables (sizes, initializers, address relocations) and the
//! addresses that stand for functions (function pointers).

use super::operands::imm_bits;
use super::{unsupported, GlobalVar, R};
use crate::error::SimError;
use crate::parser::ast;
use crate::types::Space;
use std::collections::HashMap;

/// Lowers module-level variables into [`GlobalVar`]s (+ name -> index map).
pub(crate) fn lower_globals(m: &ast::Module) -> R<(Vec<GlobalVar>, HashMap<String, u32>)> {
    let mut vars = Vec::new();
    let mut map = HashMap::new();
    for v in m
        .vars
        .iter()
        .filter(|v| matches!(v.space, Space::Global | Space::Const))
    {
        map.insert(v.name.clone(), vars.len() as u32);
        vars.push(GlobalVar {
            size: v.size() as usize,
            init: Vec::new(),
            relocs: Vec::new(),
        });
    }
    for v in m
        .vars
        .iter()
        .filter(|v| matches!(v.space, Space::Global | Space::Const))
    {
        let idx = map[&v.name] as usize;
        let el = v.ty.bytes() as usize;
        // Only the initialized prefix is materialized here; the device zero-fills the rest,
        // so a huge uninitialized `.global` array costs nothing until it is allocated.
        let init_bytes = v.init.as_ref().map_or(0, |i| i.len().saturating_mul(el));
        if init_bytes as u64 > v.size() {
            return Err(SimError::Parse {
                line: v.line,
                message: format!("too many initializers for `{}`", v.name),
            });
        }
        let mut bytes = vec![0u8; init_bytes];
        if let Some(init) = &v.init {
            for (k, iv) in init.iter().enumerate() {
                let off = k * el;
                if off + el > bytes.len() {
                    return Err(SimError::Parse {
                        line: v.line,
                        message: format!("too many initializers for `{}`", v.name),
                    });
                }
                match iv {
                    ast::InitVal::Imm(imm) => {
                        let b = imm_bits(*imm, v.ty);
                        bytes[off..off + el].copy_from_slice(&b.to_le_bytes()[..el]);
                    }
                    ast::InitVal::Sym(name, add) => match map.get(name) {
                        Some(t) => vars[idx].relocs.push((off, *t, *add)),
                        None if func_index(m, name).is_some() => {
                            let a = func_addr(func_index(m, name).unwrap_or(0)) + *add as u64;
                            bytes[off..off + el].copy_from_slice(&a.to_le_bytes()[..el]);
                        }
                        None => {
                            return unsupported(
                                v.line,
                                format!("initializer with address of `{name}`"),
                            )
                        }
                    },
                }
            }
        }
        vars[idx].init = bytes;
    }
    Ok((vars, map))
}

/// Base of the (unmapped) address range standing for function addresses.
pub(crate) const FUNC_BASE: u64 = 0x0000_5000_0000_0000;

/// Module-wide index of the `.func` with a body named `name`.
pub(super) fn func_index(m: &ast::Module, name: &str) -> Option<usize> {
    m.funcs
        .iter()
        .position(|f| f.name == name && !f.is_entry && f.body.is_some())
}

/// The "address" of module function `i`.
pub(super) fn func_addr(i: usize) -> u64 {
    FUNC_BASE + 16 * i as u64
}
