//! Syntax tree of a PTX module, as parsed (names still strings).

use crate::types::{Space, Ty};

/// An immediate value as written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Imm {
    /// Integer (sign applied), wide enough for both `-1` and `0xffffffffffffffff`.
    Int(i128),
    /// `0f` literal bits.
    F32(u32),
    /// `0d` literal bits.
    F64(u64),
    /// Decimal float.
    Float(f64),
}

/// An instruction operand as written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Operand {
    /// Register, symbol or label name; `neg` for `!%p`.
    Name { name: String, neg: bool },
    /// Immediate.
    Imm(Imm),
    /// `[base+off]`, `[base]`, `[imm]`.
    Addr { base: Option<String>, off: i64 },
    /// `{a, b, ...}` (`_` entries are sinks, written as name "_").
    Vec(Vec<Operand>),
    /// `a|b` (destination pair of setp/shfl).
    Pair(String, String),
    /// `(a, b, ...)` in `call`.
    List(Vec<Operand>),
    /// `name + off` used as a value (e.g. `mov.u64 %rd, sym+8`).
    SymOff(String, i64),
}

/// One instruction.
#[derive(Clone, Debug)]
pub(crate) struct Instr {
    pub guard: Option<(String, bool)>,
    pub opcode: String,
    pub operands: Vec<Operand>,
    pub line: usize,
}

/// A variable declaration (`.shared`, `.global`, `.const`, `.local`, `.param`).
#[derive(Clone, Debug)]
pub(crate) struct VarDecl {
    pub space: Space,
    pub align: Option<u32>,
    pub ty: Ty,
    pub name: String,
    /// Array length in elements (`Some(None)` = `[]`, unsized extern).
    pub array: Option<Option<u64>>,
    pub is_extern: bool,
    pub init: Option<Vec<InitVal>>,
    pub line: usize,
}

impl VarDecl {
    /// Size in bytes (0 for unsized arrays).
    pub(crate) fn size(&self) -> u64 {
        let el = self.ty.bytes() as u64;
        match self.array {
            None => el,
            Some(Some(n)) => el * n,
            Some(None) => 0,
        }
    }

    /// Alignment in bytes.
    pub(crate) fn alignment(&self) -> u64 {
        self.align
            .map(u64::from)
            .unwrap_or(self.ty.bytes() as u64)
            .max(1)
    }
}

/// An initializer element.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum InitVal {
    Imm(Imm),
    /// Address of a symbol plus offset (`generic(sym)+4`, `sym`).
    Sym(String, i64),
}

/// A statement in a function body.
#[derive(Clone, Debug)]
pub(crate) enum Stmt {
    /// `.reg .ty names;` each name with an optional `<N>` count.
    Reg {
        names: Vec<(String, Option<u32>)>,
    },
    Var(VarDecl),
    Label(String, usize),
    Instr(Instr),
    Open,
    Close,
}

/// A function or kernel.
#[derive(Clone, Debug)]
pub(crate) struct Func {
    pub name: String,
    pub is_entry: bool,
    pub params: Vec<VarDecl>,
    pub rets: Vec<VarDecl>,
    pub body: Option<Vec<Stmt>>,
    pub line: usize,
    /// `.maxntid x[, y[, z]]`
    pub maxntid: Option<[u32; 3]>,
    /// `.reqntid x[, y[, z]]`
    pub reqntid: Option<[u32; 3]>,
}

/// A parsed module.
#[derive(Clone, Debug, Default)]
pub(crate) struct Module {
    pub version: (u32, u32),
    pub target: String,
    pub address_size: u32,
    pub funcs: Vec<Func>,
    pub vars: Vec<VarDecl>,
}
