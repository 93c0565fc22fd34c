//! Declarations: variables (module-level, in function bodies and as parameters) with their
//! initializers, and parameter lists.

use super::ast::*;
use super::cursor::{P, R};
use super::instr::parse_imm;
use super::lexer::Tok;
use crate::error::SimError;
use crate::types::{Space, Ty};

/// The state space a directive such as `.shared` names.
pub(super) fn space_of(s: &str) -> Option<Space> {
    Space::parse(s.strip_prefix('.')?)
}

/// Parses `.space [.align N] [.v2] .ty name[dims] [= init]` (without the `;`).
pub(super) fn parse_var(p: &mut P<'_>, line: usize) -> R<VarDecl> {
    let sp = p.ident()?;
    let space = match space_of(sp) {
        Some(s) => s,
        None => return p.err(format!("expected a state space, found `{sp}`")),
    };
    let mut align = None;
    let mut ty = None;
    let mut vecn = 1u64;
    loop {
        match p.peek() {
            Some(Tok::Ident(".align")) => {
                p.i += 1;
                align = Some(p.uint()? as u32);
            }
            Some(Tok::Ident(".ptr")) => p.i += 1,
            Some(Tok::Ident(".v2")) => {
                p.i += 1;
                vecn = 2
            }
            Some(Tok::Ident(".v4")) => {
                p.i += 1;
                vecn = 4
            }
            Some(Tok::Ident(s)) if s.starts_with('.') => {
                if let Some(t) = Ty::parse(&s[1..]) {
                    p.i += 1;
                    ty = Some(t);
                } else if space_of(s).is_some() {
                    // `.ptr .global` attribute on params
                    p.i += 1;
                } else {
                    return Err(SimError::Unsupported {
                        line,
                        what: format!("variable attribute `{s}`"),
                    });
                }
            }
            _ => break,
        }
    }
    let ty = match ty {
        Some(t) => t,
        None => return p.err("variable declaration without a type"),
    };
    let name = p.ident()?.to_string();
    let mut array = if vecn > 1 { Some(Some(vecn)) } else { None };
    while p.eat_p('[') {
        let n = if p.is_p(']') { None } else { Some(p.uint()?) };
        p.expect_p(']')?;
        array = Some(match (array, n) {
            (Some(Some(a)), Some(b)) => Some(a * b),
            (_, n) => n,
        });
    }
    let mut init = None;
    if p.eat_p('=') {
        let mut vals = Vec::new();
        parse_init(p, &mut vals)?;
        init = Some(vals);
    }
    Ok(VarDecl {
        space,
        align,
        ty,
        name,
        array,
        is_extern: false,
        init,
        line,
    })
}

/// Parses an initializer (a value, a symbol with an optional `+offset`, or a braced list)
/// and appends its values to `out`.
pub(super) fn parse_init(p: &mut P<'_>, out: &mut Vec<InitVal>) -> R<()> {
    if p.eat_p('{') {
        loop {
            if p.eat_p('}') {
                break;
            }
            parse_init(p, out)?;
            if !p.eat_p(',') {
                p.expect_p('}')?;
                break;
            }
        }
        return Ok(());
    }
    match p.peek() {
        Some(Tok::Ident(s)) => {
            p.i += 1;
            let name = if (s == "generic" || s == "cvta") && p.eat_p('(') {
                let n = p.ident()?.to_string();
                p.expect_p(')')?;
                n
            } else {
                s.to_string()
            };
            let mut off = 0i64;
            if p.eat_p('+') {
                off = p.signed_int()? as i64;
            }
            out.push(InitVal::Sym(name, off));
        }
        _ => out.push(InitVal::Imm(parse_imm(p)?)),
    }
    Ok(())
}

/// Parses a parameter list `(decl, ...)`.
pub(super) fn parse_params(p: &mut P<'_>) -> R<Vec<VarDecl>> {
    let mut v = Vec::new();
    p.expect_p('(')?;
    if p.eat_p(')') {
        return Ok(v);
    }
    loop {
        let line = p.line();
        v.push(parse_var(p, line)?);
        if p.eat_p(')') {
            return Ok(v);
        }
        p.expect_p(',')?;
    }
}
