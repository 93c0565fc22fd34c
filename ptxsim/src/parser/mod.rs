//! PTX parser: text -> [`ast::Module`].

pub(crate) mod ast;
pub(crate) mod lexer;

use crate::error::SimError;
use crate::types::{Space, Ty};
use ast::*;
use lexer::{Tok, Token};

/// Largest register count one `.reg` declaration may give (`%r<N>`).
const MAX_REGS_PER_DECL: u64 = 1 << 16;

struct P<'a> {
    t: Vec<Token<'a>>,
    i: usize,
}

type R<T> = Result<T, SimError>;

impl<'a> P<'a> {
    fn line(&self) -> usize {
        self.t
            .get(self.i)
            .or(self.t.last())
            .map(|t| t.line)
            .unwrap_or(1)
    }
    fn err<T>(&self, msg: impl Into<String>) -> R<T> {
        Err(SimError::Parse {
            line: self.line(),
            message: msg.into(),
        })
    }
    fn peek(&self) -> Option<Tok<'a>> {
        self.t.get(self.i).map(|t| t.tok)
    }
    fn peek_at(&self, k: usize) -> Option<Tok<'a>> {
        self.t.get(self.i + k).map(|t| t.tok)
    }
    fn next(&mut self) -> R<Tok<'a>> {
        match self.t.get(self.i) {
            Some(t) => {
                self.i += 1;
                Ok(t.tok)
            }
            None => self.err("unexpected end of input"),
        }
    }
    fn is_p(&self, c: char) -> bool {
        self.peek() == Some(Tok::P(c))
    }
    fn eat_p(&mut self, c: char) -> bool {
        if self.is_p(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect_p(&mut self, c: char) -> R<()> {
        if self.eat_p(c) {
            Ok(())
        } else {
            self.err(format!("expected `{c}`, found {}", self.describe()))
        }
    }
    fn describe(&self) -> String {
        match self.peek() {
            None => "end of input".into(),
            Some(Tok::Ident(s)) => format!("`{s}`"),
            Some(Tok::P(c)) => format!("`{c}`"),
            Some(Tok::Str(s)) => format!("\"{s}\""),
            Some(t) => format!("{t:?}"),
        }
    }
    fn ident(&mut self) -> R<&'a str> {
        match self.peek() {
            Some(Tok::Ident(s)) => {
                self.i += 1;
                Ok(s)
            }
            _ => self.err(format!("expected a name, found {}", self.describe())),
        }
    }
    fn is_ident(&self, s: &str) -> bool {
        self.peek() == Some(Tok::Ident(s))
    }
    fn eat_ident(&mut self, s: &str) -> bool {
        if self.is_ident(s) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn uint(&mut self) -> R<u64> {
        match self.peek() {
            Some(Tok::Int(v)) => {
                self.i += 1;
                Ok(v)
            }
            _ => self.err(format!("expected an integer, found {}", self.describe())),
        }
    }
    /// Skips tokens through the next `;` at brace depth 0.
    fn skip_stmt(&mut self) -> R<()> {
        let mut depth = 0i32;
        loop {
            match self.next()? {
                Tok::P('{') => depth += 1,
                Tok::P('}') => depth -= 1,
                Tok::P(';') if depth <= 0 => return Ok(()),
                _ => {}
            }
        }
    }
    fn skip_braces(&mut self) -> R<()> {
        self.expect_p('{')?;
        let mut depth = 1;
        while depth > 0 {
            match self.next()? {
                Tok::P('{') => depth += 1,
                Tok::P('}') => depth -= 1,
                _ => {}
            }
        }
        Ok(())
    }
    fn signed_int(&mut self) -> R<i128> {
        let neg = self.eat_p('-');
        let v = self.uint()? as i128;
        Ok(if neg { -v } else { v })
    }
}

/// Parses PTX text into a syntax tree.
pub(crate) fn parse(src: &str) -> R<Module> {
    let mut p = P {
        t: lexer::lex(src)?,
        i: 0,
    };
    let mut m = Module {
        address_size: 64,
        ..Default::default()
    };
    while let Some(tok) = p.peek() {
        let line = p.line();
        match tok {
            Tok::Ident(".version") => {
                p.i += 1;
                match p.next()? {
                    Tok::Float(f) => {
                        let s = format!("{f}");
                        let mut it = s.split('.');
                        let maj = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                        let min = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                        m.version = (maj, min);
                    }
                    Tok::Int(maj) => m.version = (maj as u32, 0),
                    _ => return p.err("expected version number"),
                }
            }
            Tok::Ident(".target") => {
                p.i += 1;
                let mut tgt = String::new();
                loop {
                    let s = p.ident()?;
                    if !tgt.is_empty() {
                        tgt.push_str(", ");
                    }
                    tgt.push_str(s);
                    if !p.eat_p(',') {
                        break;
                    }
                }
                m.target = tgt;
            }
            Tok::Ident(".address_size") => {
                p.i += 1;
                m.address_size = p.uint()? as u32;
            }
            Tok::Ident(".file") | Tok::Ident(".loc") | Tok::Ident(".pragma") => {
                // .file N "name" [, ts, size]  (no `;` terminator for .file/.loc)
                p.i += 1;
                while let Some(t) = p.peek() {
                    if p.t[p.i].line != line {
                        break;
                    }
                    if t == Tok::P(';') {
                        p.i += 1;
                        break;
                    }
                    p.i += 1;
                }
            }
            Tok::Ident(".section") => {
                p.i += 1;
                p.ident()?;
                p.skip_braces()?;
            }
            Tok::Ident(_) => parse_top_decl(&mut p, &mut m)?,
            _ => return p.err(format!("unexpected {} at module level", p.describe())),
        }
    }
    Ok(m)
}

fn parse_top_decl(p: &mut P<'_>, m: &mut Module) -> R<()> {
    let line = p.line();
    let mut is_extern = false;
    // linkage / attributes
    loop {
        match p.peek() {
            Some(Tok::Ident(".visible" | ".weak" | ".common")) => p.i += 1,
            Some(Tok::Ident(".extern")) => {
                is_extern = true;
                p.i += 1
            }
            _ => break,
        }
    }
    match p.peek() {
        Some(Tok::Ident(".entry")) | Some(Tok::Ident(".func")) => {
            let f = parse_func(p)?;
            m.funcs.push(f);
            Ok(())
        }
        Some(Tok::Ident(s)) if s.starts_with('.') && space_of(s).is_some() => {
            let mut v = parse_var(p, line)?;
            v.is_extern |= is_extern;
            p.expect_p(';')?;
            m.vars.push(v);
            Ok(())
        }
        _ => p.err(format!("unexpected {} at module level", p.describe())),
    }
}

fn space_of(s: &str) -> Option<Space> {
    Space::parse(s.strip_prefix('.')?)
}

/// Parses `.space [.align N] [.v2] .ty name[dims] [= init]` (without the `;`).
fn parse_var(p: &mut P<'_>, line: usize) -> R<VarDecl> {
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

fn parse_init(p: &mut P<'_>, out: &mut Vec<InitVal>) -> R<()> {
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

fn parse_imm(p: &mut P<'_>) -> R<Imm> {
    let neg = p.eat_p('-');
    let v = match p.next()? {
        Tok::Int(v) => Imm::Int(if neg { -(v as i128) } else { v as i128 }),
        Tok::F32(b) => Imm::F32(if neg { b ^ 0x8000_0000 } else { b }),
        Tok::F64(b) => Imm::F64(if neg { b ^ (1 << 63) } else { b }),
        Tok::Float(f) => Imm::Float(if neg { -f } else { f }),
        _ => {
            p.i -= 1;
            return p.err(format!("expected an immediate, found {}", p.describe()));
        }
    };
    Ok(v)
}

fn parse_params(p: &mut P<'_>) -> R<Vec<VarDecl>> {
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

fn parse_func(p: &mut P<'_>) -> R<Func> {
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
    // performance directives
    let mut maxntid = None;
    let mut reqntid = None;
    loop {
        match p.peek() {
            Some(Tok::Ident(d @ (".maxntid" | ".reqntid"))) => {
                p.i += 1;
                let mut v = [1u32; 3];
                for (k, slot) in v.iter_mut().enumerate() {
                    if k > 0 && !p.eat_p(',') {
                        break;
                    }
                    *slot = p.uint()?.min(u32::MAX as u64) as u32;
                }
                if d == ".maxntid" {
                    maxntid = Some(v);
                } else {
                    reqntid = Some(v);
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
            _ => break,
        }
    }
    if p.eat_p(';') {
        return Ok(Func {
            name,
            is_entry,
            params,
            rets,
            body: None,
            line,
            maxntid,
            reqntid,
        });
    }
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
            Some(Tok::Ident(".reg")) => {
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
                let Some(ty) = ty else {
                    return p.err(".reg without a type");
                };
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
                let _ = ty;
                body.push(Stmt::Reg { names });
            }
            Some(Tok::Ident(".pragma" | ".loc" | ".file")) => {
                let l = p.line();
                p.i += 1;
                while let Some(t) = p.peek() {
                    if p.t[p.i].line != l {
                        break;
                    }
                    p.i += 1;
                    if t == Tok::P(';') {
                        break;
                    }
                }
            }
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
    Ok(Func {
        name,
        is_entry,
        params,
        rets,
        body: Some(body),
        line,
        maxntid,
        reqntid,
    })
}

fn parse_instr(p: &mut P<'_>) -> R<Instr> {
    let line = p.line();
    let mut guard = None;
    if p.eat_p('@') {
        let neg = p.eat_p('!');
        guard = Some((p.ident()?.to_string(), neg));
    }
    let opcode = p.ident()?.to_string();
    let mut operands = Vec::new();
    if !p.eat_p(';') {
        loop {
            operands.push(parse_operand(p)?);
            if p.eat_p(';') {
                break;
            }
            if !p.eat_p(',') {
                // `call (r), f, (a)` and friends are comma separated; anything else is an error
                return p.err(format!(
                    "expected `,` or `;` after operand of `{opcode}`, found {}",
                    p.describe()
                ));
            }
        }
    }
    Ok(Instr {
        guard,
        opcode,
        operands,
        line,
    })
}

fn parse_operand(p: &mut P<'_>) -> R<Operand> {
    match p.peek() {
        Some(Tok::P('[')) => {
            p.i += 1;
            let mut base = None;
            let mut off = 0i64;
            match p.peek() {
                Some(Tok::Ident(s)) => {
                    p.i += 1;
                    base = Some(s.to_string());
                    if p.eat_p('+') || p.is_p('-') {
                        off = p.signed_int()? as i64;
                    }
                }
                _ => off = p.signed_int()? as i64,
            }
            p.expect_p(']')?;
            Ok(Operand::Addr { base, off })
        }
        Some(Tok::P('{')) => {
            p.i += 1;
            let mut v = Vec::new();
            loop {
                v.push(parse_operand(p)?);
                if p.eat_p('}') {
                    break;
                }
                p.expect_p(',')?;
            }
            Ok(Operand::Vec(v))
        }
        Some(Tok::P('(')) => {
            p.i += 1;
            let mut v = Vec::new();
            if p.eat_p(')') {
                return Ok(Operand::List(v));
            }
            loop {
                v.push(parse_operand(p)?);
                if p.eat_p(')') {
                    break;
                }
                p.expect_p(',')?;
            }
            Ok(Operand::List(v))
        }
        Some(Tok::P('!')) => {
            p.i += 1;
            let n = p.ident()?.to_string();
            Ok(Operand::Name { name: n, neg: true })
        }
        Some(Tok::Ident(s)) => {
            p.i += 1;
            if p.eat_p('|') {
                let b = p.ident()?.to_string();
                return Ok(Operand::Pair(s.to_string(), b));
            }
            if p.is_p('+') && matches!(p.peek_at(1), Some(Tok::Int(_)) | Some(Tok::P('-'))) {
                p.i += 1;
                let off = p.signed_int()? as i64;
                return Ok(Operand::SymOff(s.to_string(), off));
            }
            Ok(Operand::Name {
                name: s.to_string(),
                neg: false,
            })
        }
        _ => Ok(Operand::Imm(parse_imm(p)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header_and_entry() {
        let src = ".version 9.0\n.target sm_80\n.address_size 64\n\
            .visible .entry k(\n .param .u64 k_param_0,\n .param .align 8 .b8 k_param_1[16]\n)\n{\n\
            .reg .pred %p<3>;\n .reg .b32 %r<5>;\n\
            ld.param.u64 %rd1, [k_param_0+8];\n @!%p1 bra $L__BB0_1;\n\
            shfl.sync.bfly.b32 %r1|%p2, %r2, 16, 31, -1;\n\
            $L__BB0_1:\n { .reg .f16 low;\n mov.b32 %r1, {low,low}; }\n ret;\n}\n";
        let m = parse(src).unwrap();
        assert_eq!(m.version, (9, 0));
        assert_eq!(m.target, "sm_80");
        let f = &m.funcs[0];
        assert!(f.is_entry);
        assert_eq!(f.params.len(), 2);
        assert_eq!(f.params[1].size(), 16);
        assert_eq!(f.params[1].alignment(), 8);
        let body = f.body.as_ref().unwrap();
        assert!(
            matches!(&body[2], Stmt::Instr(i) if i.operands[1] == Operand::Addr { base: Some("k_param_0".into()), off: 8 })
        );
        assert!(matches!(&body[3], Stmt::Instr(i) if i.guard == Some(("%p1".into(), true))));
        assert!(matches!(&body[5], Stmt::Label(l, 14) if l == "$L__BB0_1"));
    }

    #[test]
    fn error_names_line() {
        let e = parse(".version 9.0\n.entry k()\n{\n mov.u32 %r1 %r2;\n}\n").unwrap_err();
        assert!(matches!(e, SimError::Parse { line: 4, .. }), "{e:?}");
    }
}
