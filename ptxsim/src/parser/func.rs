//! Functions: the header (`.entry`/`.func`, return and parameter lists), performance
//! directives, and the body as a flat list of statements (scopes, declarations, labels,
//! instructions).

use super::ast::*;
use super::cursor::{P, R};
use super::decl::{parse_params, parse_var, space_of};
use super::instr::parse_instr;
use super::lexer::Tok;
use crate::error::SimError;
use crate::types::Ty;

/// Largest register count one `.reg` declaration may give (`%r<N>`).
const MAX_REGS_PER_DECL: u64 = 1 << 16;

/// `.maxntid` and `.reqntid` of a function, when given.
#[derive(Default)]
struct PerfDirectives {
    maxntid: Option<[u32; 3]>,
    reqntid: Option<[u32; 3]>,
}

/// Parses `.entry`/`.func` through its body, or through the `;` of a declaration without one.
pub(super) fn parse_func(p: &mut P<'_>) -> R<Func> {
    let line = p.line();
    let is_entry = p.ident()? == ".entry";
    let mut rets = Vec::new();
    if !is_entry && p.is_p('(') {
        rets = parse_params(p)?;
    }
    let name = p.ident()?.to_string();
    let params = if p.is_p('(') {
        parse_params(p)?
    } else {
        Vec::new()
    };
    let PerfDirectives { maxntid, reqntid } = parse_perf_directives(p)?;
    let body = if p.eat_p(';') {
        None
    } else {
        Some(parse_body(p)?)
    };
    Ok(Func {
        name,
        is_entry,
        params,
        rets,
        body,
        line,
        maxntid,
        reqntid,
    })
}

/// Parses the performance directives between the parameters and the body; keeps
/// `.maxntid`/`.reqntid` and skips the others.
fn parse_perf_directives(p: &mut P<'_>) -> R<PerfDirectives> {
    let mut d = PerfDirectives::default();
    loop {
        match p.peek() {
            Some(Tok::Ident(name @ (".maxntid" | ".reqntid"))) => {
                p.i += 1;
                let mut v = [1u32; 3];
                for (k, slot) in v.iter_mut().enumerate() {
                    if k > 0 && !p.eat_p(',') {
                        break;
                    }
                    *slot = p.uint()?.min(u32::MAX as u64) as u32;
                }
                if name == ".maxntid" {
                    d.maxntid = Some(v);
                } else {
                    d.reqntid = Some(v);
                }
            }
            Some(Tok::Ident(
                ".minnctapersm" | ".maxnctapersm" | ".maxnreg" | ".reqnctapercluster"
                | ".maxclusterrank" | ".explicitcluster" | ".noreturn" | ".blocksareclusters",
            )) => {
                p.i += 1;
                while matches!(p.peek(), Some(Tok::Int(_)) | Some(Tok::P(','))) {
                    p.i += 1;
                }
            }
            Some(Tok::Ident(".pragma")) => {
                p.i += 1;
                p.skip_stmt()?;
            }
            _ => return Ok(d),
        }
    }
}

/// Parses a function body from its `{` through the matching `}`; nested scopes become
/// [`Stmt::Open`]/[`Stmt::Close`].
fn parse_body(p: &mut P<'_>) -> R<Vec<Stmt>> {
    p.expect_p('{')?;
    let mut body = Vec::new();
    let mut depth = 1;
    while depth > 0 {
        let line = p.line();
        match p.peek() {
            None => return p.err("unterminated function body"),
            Some(Tok::P('{')) => {
                p.i += 1;
                depth += 1;
                body.push(Stmt::Open);
            }
            Some(Tok::P('}')) => {
                p.i += 1;
                depth -= 1;
                if depth > 0 {
                    body.push(Stmt::Close);
                }
            }
            Some(Tok::Ident(".reg")) => body.push(parse_reg(p, line)?),
            Some(Tok::Ident(".pragma" | ".loc" | ".file")) => p.skip_directive_line(),
            Some(Tok::Ident(s))
                if s.starts_with('.')
                    && (space_of(s).is_some() || s == ".extern" || s == ".align") =>
            {
                let is_extern = p.eat_ident(".extern");
                let mut v = parse_var(p, line)?;
                v.is_extern = is_extern;
                p.expect_p(';')?;
                body.push(Stmt::Var(v));
            }
            Some(Tok::Ident(s)) if p.peek_at(1) == Some(Tok::P(':')) && !s.starts_with('.') => {
                p.i += 2;
                // `proto: .callprototype ...`
                if p.is_ident(".callprototype") {
                    // call prototype of an indirect call: the callee's own layout is used
                    p.skip_stmt()?;
                    continue;
                }
                body.push(Stmt::Label(s.to_string(), line));
            }
            Some(Tok::Ident(s)) if s.starts_with('.') => {
                return Err(SimError::Unsupported {
                    line,
                    what: format!("directive `{s}` in a function body"),
                })
            }
            _ => body.push(Stmt::Instr(parse_instr(p)?)),
        }
    }
    Ok(body)
}

/// Parses `.reg .ty name[<N>], ...;` (the type is required but not kept: registers are typed
/// by the instructions that use them).
fn parse_reg(p: &mut P<'_>, line: usize) -> R<Stmt> {
    p.i += 1;
    let mut ty = None;
    while let Some(Tok::Ident(s)) = p.peek() {
        if let Some(t) = s.strip_prefix('.').and_then(Ty::parse) {
            ty = Some(t);
            p.i += 1;
        } else if s == ".v2" || s == ".v4" {
            return Err(SimError::Unsupported {
                line,
                what: "vector registers".into(),
            });
        } else {
            break;
        }
    }
    if ty.is_none() {
        return p.err(".reg without a type");
    }
    let mut names = Vec::new();
    loop {
        let n = p.ident()?.to_string();
        let mut cnt = None;
        if p.eat_p('<') {
            let c = p.uint()?;
            // Real kernels declare at most a few thousand virtual registers; a huge
            // count would make the per-warp register file unallocatable.
            if c > MAX_REGS_PER_DECL {
                return Err(SimError::Unsupported {
                    line,
                    what: format!(
                        ".reg declaration of {c} registers (ptxsim allows at most \
                         {MAX_REGS_PER_DECL} per declaration)"
                    ),
                });
            }
            cnt = Some(c as u32);
            p.expect_p('>')?;
        }
        names.push((n, cnt));
        if !p.eat_p(',') {
            break;
        }
    }
    p.expect_p(';')?;
    Ok(Stmt::Reg { names })
}
