//! Tokenizer for PTX text.

use crate::error::SimError;

/// One token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Tok<'a> {
    /// Identifier, register, directive (`.reg`), opcode (`ld.global.f32`), label.
    Ident(&'a str),
    /// Unsigned integer literal (sign is a separate `-` token).
    Int(u64),
    /// `0fXXXXXXXX` literal: f32 bits.
    F32(u32),
    /// `0dXXXXXXXXXXXXXXXX` literal: f64 bits.
    F64(u64),
    /// Decimal floating-point literal.
    Float(f64),
    /// String literal (without quotes).
    Str(&'a str),
    /// Punctuation.
    P(char),
}

/// A token with its 1-based line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token<'a> {
    pub tok: Tok<'a>,
    pub line: usize,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c == b'%' || c == b'.'
}

fn is_ident_cont(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c == b'.'
}

/// Splits PTX text into tokens, dropping comments.
pub(crate) fn lex(src: &str) -> Result<Vec<Token<'_>>, SimError> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut line = 1;
    let mut out = Vec::with_capacity(src.len() / 4);
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
                i += 2;
            }
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
                if i >= b.len() {
                    return Err(SimError::Parse {
                        line,
                        message: "unterminated string literal".into(),
                    });
                }
                out.push(Token {
                    tok: Tok::Str(&src[start..i]),
                    line,
                });
                i += 1;
            }
            c if c.is_ascii_digit() => {
                let (tok, n) = lex_number(&src[i..]).ok_or_else(|| SimError::Parse {
                    line,
                    message: format!(
                        "malformed number `{}`",
                        &src[i..(i + 20).min(src.len())]
                            .split(|c: char| c.is_whitespace() || c == ';' || c == ',')
                            .next()
                            .unwrap_or("")
                    ),
                })?;
                out.push(Token { tok, line });
                i += n;
            }
            c if is_ident_start(c) => {
                let start = i;
                i += 1;
                loop {
                    if i < b.len() && is_ident_cont(b[i]) {
                        i += 1;
                    } else if i + 2 < b.len()
                        && b[i] == b':'
                        && b[i + 1] == b':'
                        && is_ident_cont(b[i + 2])
                    {
                        i += 2;
                    } else {
                        break;
                    }
                }
                let word = &src[start..i];
                if word.starts_with('.') && word[1..].contains('.') {
                    // `.reg.b16`: directives written without spaces
                    let mut s = 0;
                    for (k, ch) in word.char_indices().skip(1) {
                        if ch == '.' {
                            out.push(Token {
                                tok: Tok::Ident(&word[s..k]),
                                line,
                            });
                            s = k;
                        }
                    }
                    out.push(Token {
                        tok: Tok::Ident(&word[s..]),
                        line,
                    });
                } else {
                    out.push(Token {
                        tok: Tok::Ident(word),
                        line,
                    });
                }
            }
            b',' | b';' | b'{' | b'}' | b'[' | b']' | b'(' | b')' | b'<' | b'>' | b'+' | b'-'
            | b'@' | b'!' | b'|' | b':' | b'=' | b'*' => {
                out.push(Token {
                    tok: Tok::P(c as char),
                    line,
                });
                i += 1;
            }
            _ => {
                return Err(SimError::Parse {
                    line,
                    message: format!(
                        "unexpected character `{}`",
                        src[i..].chars().next().unwrap_or('?')
                    ),
                })
            }
        }
    }
    Ok(out)
}

/// Lexes a number at the start of `s`; returns the token and its length.
fn lex_number(s: &str) -> Option<(Tok<'_>, usize)> {
    let b = s.as_bytes();
    let hexlen = |from: usize| {
        b[from..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit())
            .count()
    };
    if b.len() > 2 && b[0] == b'0' && (b[1] == b'f' || b[1] == b'F') {
        let n = hexlen(2);
        if n == 8 {
            let v = u32::from_str_radix(&s[2..10], 16).ok()?;
            return Some((Tok::F32(v), 10));
        }
    }
    if b.len() > 2 && b[0] == b'0' && (b[1] == b'd' || b[1] == b'D') {
        let n = hexlen(2);
        if n == 16 {
            let v = u64::from_str_radix(&s[2..18], 16).ok()?;
            return Some((Tok::F64(v), 18));
        }
    }
    let (val, mut n) = if b.len() > 2 && b[0] == b'0' && (b[1] == b'x' || b[1] == b'X') {
        let n = hexlen(2);
        (u64::from_str_radix(&s[2..2 + n], 16).ok()?, 2 + n)
    } else if b.len() > 2 && b[0] == b'0' && (b[1] == b'b' || b[1] == b'B') {
        let n = b[2..]
            .iter()
            .take_while(|c| **c == b'0' || **c == b'1')
            .count();
        (u64::from_str_radix(&s[2..2 + n], 2).ok()?, 2 + n)
    } else {
        let n = b.iter().take_while(|c| c.is_ascii_digit()).count();
        // decimal float?
        if n < b.len() && (b[n] == b'.' || b[n] == b'e' || b[n] == b'E') {
            let mut m = n;
            if b[m] == b'.' {
                m += 1;
                m += b[m..].iter().take_while(|c| c.is_ascii_digit()).count();
            }
            if m < b.len() && (b[m] == b'e' || b[m] == b'E') {
                m += 1;
                if m < b.len() && (b[m] == b'+' || b[m] == b'-') {
                    m += 1;
                }
                m += b[m..].iter().take_while(|c| c.is_ascii_digit()).count();
            }
            let v: f64 = s[..m].parse().ok()?;
            return Some((Tok::Float(v), m));
        }
        if n > 1 && b[0] == b'0' {
            // octal
            (u64::from_str_radix(&s[1..n], 8).ok()?, n)
        } else {
            (s[..n].parse().ok()?, n)
        }
    };
    if n < b.len() && (b[n] == b'U' || b[n] == b'u') {
        n += 1;
    }
    if n < b.len() && (b[n].is_ascii_alphanumeric() || b[n] == b'_') {
        return None;
    }
    Some((Tok::Int(val), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_idents() {
        let t = lex("mov.b32 c, 0x80008000U; 0f3F800000 0d3FF0000000000000 -12 1.5 [%rd1+-8] L1::no_allocate $L__BB0_3:").unwrap();
        let toks: Vec<Tok> = t.iter().map(|t| t.tok).collect();
        assert_eq!(toks[0], Tok::Ident("mov.b32"));
        assert_eq!(toks[3], Tok::Int(0x8000_8000));
        assert_eq!(toks[5], Tok::F32(0x3f80_0000));
        assert_eq!(toks[6], Tok::F64(0x3ff0_0000_0000_0000));
        assert_eq!(toks[7], Tok::P('-'));
        assert_eq!(toks[8], Tok::Int(12));
        assert_eq!(toks[9], Tok::Float(1.5));
        assert_eq!(toks[13], Tok::P('-'));
        assert_eq!(toks[16], Tok::Ident("L1::no_allocate"));
        assert_eq!(toks[17], Tok::Ident("$L__BB0_3"));
        assert_eq!(toks[18], Tok::P(':'));
    }

    #[test]
    fn directives_without_spaces_split() {
        let t = lex(".reg.b16 h;").unwrap();
        let toks: Vec<Tok> = t.iter().map(|t| t.tok).collect();
        assert_eq!(toks[..2], [Tok::Ident(".reg"), Tok::Ident(".b16")]);
    }

    #[test]
    fn bad_char_is_error() {
        assert!(matches!(lex("mov #"), Err(SimError::Parse { line: 1, .. })));
    }
}
