//! Lowering of control flow: `bra`, `call` (direct, indirect through a function pointer, and
//! the ignored `vprintf`), `ret`, `exit`, `trap`/`brkpt`.

use super::sfx::{need, Sfx};
use super::{unsupported, KCtx, Name, R};
use crate::error::SimError;
use crate::ir::*;
use crate::parser::ast::{self, Operand};

/// `bra` to a label (`brx.idx` is not modelled).
pub(super) fn bra(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    if sx.base == "brx" {
        return unsupported(line, "brx.idx");
    }
    sx.check(&[])?;
    need(o, 1, i)?;
    let Operand::Name { name, .. } = &o[0] else {
        return unsupported(line, "branch target");
    };
    Ok(Kind::Bra {
        t: k.label(name, line)?,
    })
}

/// `ret`, `exit`, `trap`, `brkpt` (no operands).
pub(super) fn leave(_: &mut KCtx<'_>, sx: &Sfx<'_>, _: &ast::Instr) -> R<Kind> {
    Ok(match sx.base {
        "ret" => Kind::Ret,
        "exit" => Kind::Exit,
        _ => Kind::Trap,
    })
}

/// `call` (operands: optional `(rets)`, callee, optional `(args)`, optional prototype).
pub(super) fn call(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    sx.check(&[])?;
    let line = i.line;
    let mut rets: &[Operand] = &[];
    let mut args: &[Operand] = &[];
    let mut callee = None;
    for o in &i.operands {
        match o {
            Operand::List(l) if callee.is_none() => rets = l,
            Operand::List(l) => args = l,
            Operand::Name { name, .. } if callee.is_none() => callee = Some(name.as_str()),
            Operand::Name { .. } => {} // call prototype of an indirect call
            _ => return unsupported(line, format!("call operand {o:?}")),
        }
    }
    let Some(callee) = callee else {
        return Err(SimError::Parse {
            line,
            message: "call without a target".into(),
        });
    };
    if let Some(Name::Reg(freg)) = k.lookup(callee) {
        return call_indirect(k, line, freg, args, rets);
    }
    if callee == "vprintf"
        && !k
            .ast
            .funcs
            .iter()
            .any(|f| f.name == callee && f.body.is_some())
    {
        return Ok(call_ignored(k, rets));
    }
    call_direct(k, line, callee, args, rets)
}

/// The local-memory offset of call argument `o`, which must be a `.param` variable.
fn param_slot(k: &mut KCtx<'_>, line: usize, o: &Operand) -> R<u64> {
    match o {
        Operand::Name { name, .. } => match k.lookup(name) {
            Some(Name::FParam(off)) => Ok(off),
            _ => unsupported(
                line,
                format!("call argument `{name}` is not a .param variable"),
            ),
        },
        _ => unsupported(line, format!("call argument {o:?}")),
    }
}

/// `call (rets), %fptr, (args), proto`: the callee is found at run time.
fn call_indirect(
    k: &mut KCtx<'_>,
    line: usize,
    freg: u32,
    args: &[Operand],
    rets: &[Operand],
) -> R<Kind> {
    k.indirect = true;
    let mut slot = |o: &Operand| -> R<(u32, u32)> { Ok((param_slot(k, line, o)? as u32, 0)) };
    let a = args.iter().map(&mut slot).collect::<R<Vec<_>>>()?;
    let r = rets.iter().map(&mut slot).collect::<R<Vec<_>>>()?;
    Ok(Kind::CallInd {
        f: Opd::Reg(freg),
        args: a,
        rets: r,
    })
}

/// Device `printf` (`vprintf` without a body): accepted and ignored; returns 0.
fn call_ignored(k: &mut KCtx<'_>, rets: &[Operand]) -> Kind {
    let mut r = Vec::new();
    for o in rets {
        if let Operand::Name { name, .. } = o {
            if let Some(Name::FParam(off)) = k.lookup(name) {
                r.push(Copy3 {
                    from: 0,
                    to: off as u32,
                    len: 4,
                });
            }
        }
    }
    Kind::Call {
        target: BUILTIN_IGNORE,
        func: 0,
        args: Vec::new(),
        rets: r,
    }
}

/// A call of a `.func` of the module: argument and result copies between `.param` slots; the
/// target pc is patched once the callee is lowered.
fn call_direct(
    k: &mut KCtx<'_>,
    line: usize,
    callee: &str,
    args: &[Operand],
    rets: &[Operand],
) -> R<Kind> {
    let fi = k.func_info(callee, line)?;
    if fi.params.len() != args.len() || fi.rets.len() != rets.len() {
        return Err(SimError::Parse {
            line,
            message: format!(
                "call of `{callee}` with {} arguments and {} results, declared {} and {}",
                args.len(),
                rets.len(),
                fi.params.len(),
                fi.rets.len()
            ),
        });
    }
    let mut a = Vec::new();
    for (o, (to, len)) in args.iter().zip(&fi.params) {
        a.push(Copy3 {
            from: param_slot(k, line, o)? as u32,
            to: *to as u32,
            len: *len as u32,
        });
    }
    let mut r = Vec::new();
    for (o, (from, len)) in rets.iter().zip(&fi.rets) {
        r.push(Copy3 {
            from: *from as u32,
            to: param_slot(k, line, o)? as u32,
            len: *len as u32,
        });
    }
    k.patches.push((k.code.len(), callee.to_string()));
    Ok(Kind::Call {
        target: 0,
        func: fi.id,
        args: a,
        rets: r,
    })
}
