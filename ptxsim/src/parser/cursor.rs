//! Token cursor of the parser: peeking, expecting and skipping tokens, with errors that name
//! the line.

use super::lexer::{Tok, Token};
use crate::error::SimError;

pub(super) type R<T> = Result<T, SimError>;

/// The tokens of a module and the index of the next one.
pub(super) struct P<'a> {
    pub(super) t: Vec<Token<'a>>,
    pub(super) i: usize,
}

impl<'a> P<'a> {
    pub(super) fn line(&self) -> usize {
        self.t
            .get(self.i)
            .or(self.t.last())
            .map(|t| t.line)
            .unwrap_or(1)
    }
    pub(super) fn err<T>(&self, msg: impl Into<String>) -> R<T> {
        Err(SimError::Parse {
            line: self.line(),
            message: msg.into(),
        })
    }
    pub(super) fn peek(&self) -> Option<Tok<'a>> {
        self.t.get(self.i).map(|t| t.tok)
    }
    pub(super) fn peek_at(&self, k: usize) -> Option<Tok<'a>> {
        self.t.get(self.i + k).map(|t| t.tok)
    }
    pub(super) fn next(&mut self) -> R<Tok<'a>> {
        match self.t.get(self.i) {
            Some(t) => {
                self.i += 1;
                Ok(t.tok)
            }
            None => self.err("unexpected end of input"),
        }
    }
    pub(super) fn is_p(&self, c: char) -> bool {
        self.peek() == Some(Tok::P(c))
    }
    pub(super) fn eat_p(&mut self, c: char) -> bool {
        if self.is_p(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    pub(super) fn expect_p(&mut self, c: char) -> R<()> {
        if self.eat_p(c) {
            Ok(())
        } else {
            self.err(format!("expected `{c}`, found {}", self.describe()))
        }
    }
    pub(super) fn describe(&self) -> String {
        match self.peek() {
            None => "end of input".into(),
            Some(Tok::Ident(s)) => format!("`{s}`"),
            Some(Tok::P(c)) => format!("`{c}`"),
            Some(Tok::Str(s)) => format!("\"{s}\""),
            Some(t) => format!("{t:?}"),
        }
    }
    pub(super) fn ident(&mut self) -> R<&'a str> {
        match self.peek() {
            Some(Tok::Ident(s)) => {
                self.i += 1;
                Ok(s)
            }
            _ => self.err(format!("expected a name, found {}", self.describe())),
        }
    }
    pub(super) fn is_ident(&self, s: &str) -> bool {
        self.peek() == Some(Tok::Ident(s))
    }
    pub(super) fn eat_ident(&mut self, s: &str) -> bool {
        if self.is_ident(s) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    pub(super) fn uint(&mut self) -> R<u64> {
        match self.peek() {
            Some(Tok::Int(v)) => {
                self.i += 1;
                Ok(v)
            }
            _ => self.err(format!("expected an integer, found {}", self.describe())),
        }
    }
    /// Skips tokens through the next `;` at brace depth 0.
    pub(super) fn skip_stmt(&mut self) -> R<()> {
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
    pub(super) fn skip_braces(&mut self) -> R<()> {
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
    pub(super) fn signed_int(&mut self) -> R<i128> {
        let neg = self.eat_p('-');
        let v = self.uint()? as i128;
        Ok(if neg { -v } else { v })
    }
    /// Skips a line directive (`.file`, `.loc`, `.pragma`): the tokens on the directive's line,
    /// through a `;` if there is one (`.file` and `.loc` have no `;` terminator).
    pub(super) fn skip_directive_line(&mut self) {
        let line = self.line();
        self.i += 1;
        while let Some(t) = self.peek() {
            if self.t[self.i].line != line {
                break;
            }
            self.i += 1;
            if t == Tok::P(';') {
                break;
            }
        }
    }
}
