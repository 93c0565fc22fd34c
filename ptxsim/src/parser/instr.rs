//! Instructions: guard, opcode and operands (registers, immediates, addresses, vectors,
//! lists).

use super::ast::*;
use super::cursor::{P, R};
use super::lexer::Tok;

/// Parses `[@[!]guard] opcode operand, ...;`.
pub(super) fn parse_instr(p: &mut P<'_>) -> R<Instr> {
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

/// Parses one operand: a name (`!p`, `a|b`, `sym+off`), an address `[base+off]`, a vector
/// `{..}`, a list `(..)` or an immediate.
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

/// Parses an integer or floating-point immediate with an optional `-`.
pub(super) fn parse_imm(p: &mut P<'_>) -> R<Imm> {
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
