//! PTX parser: text -> [`ast::Module`].

pub(crate) mod ast;
mod cursor;
mod decl;
mod func;
mod instr;
pub(crate) mod lexer;

use ast::*;
use cursor::{P, R};
use decl::{parse_var, space_of};
use lexer::Tok;

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
            // .file N "name" [, ts, size]  (no `;` terminator for .file/.loc)
            Tok::Ident(".file") | Tok::Ident(".loc") | Tok::Ident(".pragma") => {
                p.skip_directive_line()
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

/// Parses a module-level function or variable, with its linkage.
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
            let f = func::parse_func(p)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SimError;

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
