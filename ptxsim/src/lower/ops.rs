//! Opcode lowering: one PTX instruction -> one [`Kind`].

use super::{ops_mem, ops_sync, unsupported, KCtx, R};
use crate::error::SimError;
use crate::ir::*;
use crate::num::{IRnd, Rnd};
use crate::parser::ast::{self, Operand};
use crate::sem::{cmp as scmp, cvt as scvt, float as f, int as n};
use crate::types::{Space, Ty};

/// Opcode split into its base name and modifier parts.
pub(super) struct Sfx<'a> {
    pub(super) base: &'a str,
    pub(super) parts: Vec<&'a str>,
    line: usize,
    op: &'a str,
}

/// Modifiers that never change results in this simulator (memory ordering, scopes, cache hints).
const IGNORABLE: &[&str] = &[
    "sync",
    "aligned",
    "uni",
    "nc",
    "volatile",
    "relaxed",
    "acquire",
    "release",
    "acq_rel",
    "weak",
    "mmio",
    "cta",
    "gpu",
    "sys",
    "cluster",
    "ca",
    "cg",
    "cs",
    "lu",
    "cv",
    "wb",
    "wt",
    "sc",
    "noftz",
    "cta::sync",
];

impl<'a> Sfx<'a> {
    pub(super) fn new(op: &'a str, line: usize) -> Sfx<'a> {
        let mut it = op.split('.');
        let base = it.next().unwrap_or("");
        Sfx {
            base,
            parts: it.collect(),
            line,
            op,
        }
    }
    pub(super) fn has(&self, s: &str) -> bool {
        self.parts.contains(&s)
    }
    pub(super) fn types(&self) -> Vec<Ty> {
        self.parts.iter().filter_map(|p| Ty::parse(p)).collect()
    }
    pub(super) fn ty(&self) -> R<Ty> {
        match self.types().last() {
            Some(t) => Ok(*t),
            None => unsupported(self.line, format!("`{}` without a type", self.op)),
        }
    }
    pub(super) fn rnd(&self) -> Option<Rnd> {
        self.parts.iter().find_map(|p| match *p {
            "rn" => Some(Rnd::Rn),
            "rz" => Some(Rnd::Rz),
            "rm" => Some(Rnd::Rm),
            "rp" => Some(Rnd::Rp),
            _ => None,
        })
    }
    pub(super) fn irnd(&self) -> Option<IRnd> {
        self.parts.iter().find_map(|p| match *p {
            "rni" => Some(IRnd::Rni),
            "rzi" => Some(IRnd::Rzi),
            "rmi" => Some(IRnd::Rmi),
            "rpi" => Some(IRnd::Rpi),
            _ => None,
        })
    }
    pub(super) fn space(&self) -> Option<Space> {
        self.parts.iter().find_map(|p| Space::parse(p))
    }
    pub(super) fn vec(&self) -> u8 {
        if self.has("v4") {
            4
        } else if self.has("v2") {
            2
        } else {
            1
        }
    }
    /// Errors on any modifier that is not a type, rounding mode, space, vector width,
    /// ignorable hint, or in `allowed`.
    pub(super) fn check(&self, allowed: &[&str]) -> R<()> {
        for p in &self.parts {
            let known = Ty::parse(p).is_some()
                || matches!(
                    *p,
                    "rn" | "rz" | "rm" | "rp" | "rni" | "rzi" | "rmi" | "rpi" | "v2" | "v4"
                )
                || Space::parse(p).is_some()
                || IGNORABLE.contains(p)
                || (p.contains("::") && (p.starts_with("L1") || p.starts_with("L2")))
                || allowed.contains(p);
            if !known {
                return unsupported(self.line, format!("modifier `.{p}` in `{}`", self.op));
            }
        }
        Ok(())
    }
    pub(super) fn mods(&self, ty: Ty) -> Mods {
        let mut m = Mods::new(ty);
        m.rnd = self.rnd().unwrap_or(Rnd::Rn);
        m.irnd = self.irnd();
        m.ftz = self.has("ftz");
        m.sat = self.has("sat");
        m
    }
}

pub(super) fn need(ops: &[Operand], n: usize, i: &ast::Instr) -> R<()> {
    if ops.len() != n {
        return Err(SimError::Parse {
            line: i.line,
            message: format!("`{}` takes {n} operands, found {}", i.opcode, ops.len()),
        });
    }
    Ok(())
}

fn alu(f: AluFn, m: Mods, d: u32, src: &[Opd]) -> Kind {
    let mut s = [Opd::Imm(0); 4];
    s[..src.len()].copy_from_slice(src);
    Kind::Alu {
        f,
        m,
        d,
        s,
        n: src.len() as u8,
    }
}

fn is_half(t: Ty) -> bool {
    matches!(t, Ty::F16 | Ty::F16x2 | Ty::Bf16 | Ty::Bf16x2)
}

fn cmp_of(s: &str) -> Option<Cmp> {
    Some(match s {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        "lt" => Cmp::Lt,
        "le" => Cmp::Le,
        "gt" => Cmp::Gt,
        "ge" => Cmp::Ge,
        "lo" => Cmp::Lo,
        "ls" => Cmp::Ls,
        "hi" => Cmp::Hi,
        "hs" => Cmp::Hs,
        "equ" => Cmp::Equ,
        "neu" => Cmp::Neu,
        "ltu" => Cmp::Ltu,
        "leu" => Cmp::Leu,
        "gtu" => Cmp::Gtu,
        "geu" => Cmp::Geu,
        "num" => Cmp::Num,
        "nan" => Cmp::Nan,
        _ => return None,
    })
}

const CMPS: &[&str] = &[
    "eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu", "gtu",
    "geu", "num", "nan", "and", "or", "xor", "ftz",
];

/// Lowers one instruction.
pub(super) fn lower_op(k: &mut KCtx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let sx = Sfx::new(&i.opcode, line);
    let o = &i.operands;
    if sx.types().contains(&Ty::B128) {
        return unsupported(line, format!("128-bit operation `{}`", i.opcode));
    }
    match sx.base {
        "add" | "sub" | "mad" if sx.has("cc") => carry(k, &sx, i),
        "addc" | "subc" | "madc" => carry(k, &sx, i),
        "shf" => {
            sx.check(&["l", "r", "wrap", "clamp"])?;
            need(o, 4, i)?;
            let mut m = Mods::new(Ty::B32);
            m.aux = sx.has("r") as u32 | (sx.has("clamp") as u32) << 1;
            let d = k.dst(&o[0], line)?;
            let s: Vec<Opd> = o[1..]
                .iter()
                .map(|x| k.src(x, Ty::B32, line))
                .collect::<R<_>>()?;
            Ok(alu(n::shf, m, d, &s))
        }
        "lop3" => {
            sx.check(&[])?;
            need(o, 5, i)?;
            let ty = sx.ty()?;
            let d = k.dst(&o[0], line)?;
            let s: Vec<Opd> = o[1..]
                .iter()
                .map(|x| k.src(x, ty, line))
                .collect::<R<_>>()?;
            Ok(alu(n::lop3, Mods::new(ty), d, &s))
        }
        "dp2a" => {
            sx.check(&["lo", "hi"])?;
            need(o, 4, i)?;
            let ts = sx.types();
            let mut m = Mods::new(Ty::U32);
            m.aux = ts.first().map(|t| t.is_signed() as u32).unwrap_or(0)
                | (ts.get(1).map(|t| t.is_signed() as u32).unwrap_or(0) << 1)
                | (sx.has("hi") as u32) << 2;
            if m.aux & 3 != 0 {
                m.ty = Ty::S32;
            }
            let d = k.dst(&o[0], line)?;
            let s: Vec<Opd> = o[1..]
                .iter()
                .map(|x| k.src(x, Ty::U32, line))
                .collect::<R<_>>()?;
            Ok(alu(n::dp2a, m, d, &s))
        }
        "add" | "sub" | "mul" | "mad" | "fma" | "div" | "rem" | "abs" | "neg" | "min" | "max" => {
            arith(k, &sx, i)
        }
        "and" | "or" | "xor" | "not" | "cnot" | "popc" | "clz" | "brev" | "bfind" => {
            sx.check(&["shiftamt"])?;
            let ty = sx.ty()?;
            let f: AluFn = match sx.base {
                "and" => n::and,
                "or" => n::or,
                "xor" => n::xor,
                "not" => n::not,
                "cnot" => n::cnot,
                "popc" => n::popc,
                "clz" => n::clz,
                "brev" => n::brev,
                _ => n::bfind,
            };
            let mut m = Mods::new(ty);
            m.aux = sx.has("shiftamt") as u32;
            let nsrc = if matches!(sx.base, "and" | "or" | "xor") {
                2
            } else {
                1
            };
            need(o, nsrc + 1, i)?;
            let d = k.dst(&o[0], line)?;
            let mut s = Vec::new();
            for x in &o[1..] {
                if ty == Ty::Pred {
                    let (p, neg) = k.pred_src(x, line)?;
                    if neg {
                        return unsupported(line, "negated predicate operand");
                    }
                    s.push(p);
                } else {
                    s.push(k.src(x, ty, line)?);
                }
            }
            Ok(alu(f, m, d, &s))
        }
        "shl" | "shr" => {
            sx.check(&[])?;
            need(o, 3, i)?;
            let ty = sx.ty()?;
            let d = k.dst(&o[0], line)?;
            let a = k.src(&o[1], ty, line)?;
            let b = k.src(&o[2], Ty::U32, line)?;
            let f: AluFn = if sx.base == "shl" { n::shl } else { n::shr };
            Ok(alu(f, Mods::new(ty), d, &[a, b]))
        }
        "bfe" | "bfi" | "sad" | "mul24" | "mad24" | "dp4a" => {
            sx.check(&["lo", "hi"])?;
            let ty = sx.ty()?;
            let mut m = Mods::new(ty);
            let (f, nsrc): (AluFn, usize) = match sx.base {
                "bfe" => (n::bfe, 3),
                "bfi" => (n::bfi, 4),
                "sad" => (n::sad, 3),
                "mul24" => (n::mul24, 2),
                "mad24" => (n::mul24, 3),
                _ => (n::dp4a, 3),
            };
            if sx.base == "dp4a" {
                let ts = sx.types();
                m.aux = ts.first().map(|t| t.is_signed() as u32).unwrap_or(0)
                    | (ts.get(1).map(|t| t.is_signed() as u32).unwrap_or(0) << 1);
                m.ty = if m.aux != 0 { Ty::S32 } else { Ty::U32 };
            }
            m.aux |= (sx.has("hi") && sx.base.ends_with("24")) as u32;
            need(o, nsrc + 1, i)?;
            let d = k.dst(&o[0], line)?;
            let mut s = Vec::new();
            for (j, x) in o[1..].iter().enumerate() {
                let t = match (sx.base, j) {
                    ("bfe", 1 | 2) | ("bfi", 2 | 3) => Ty::U32,
                    ("dp4a", _) => Ty::U32,
                    _ => ty,
                };
                s.push(k.src(x, t, line)?);
            }
            Ok(alu(f, m, d, &s))
        }
        "prmt" => {
            sx.check(&["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])?;
            need(o, 4, i)?;
            let mut m = Mods::new(Ty::B32);
            m.aux = ["", "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"]
                .iter()
                .position(|x| sx.has(x))
                .unwrap_or(0) as u32;
            let d = k.dst(&o[0], line)?;
            let s: Vec<Opd> = o[1..]
                .iter()
                .map(|x| k.src(x, Ty::B32, line))
                .collect::<R<_>>()?;
            Ok(alu(n::prmt, m, d, &s))
        }
        "selp" => {
            sx.check(&[])?;
            need(o, 4, i)?;
            let ty = sx.ty()?;
            let d = k.dst(&o[0], line)?;
            let a = k.src(&o[1], ty, line)?;
            let b = k.src(&o[2], ty, line)?;
            let (c, neg) = k.pred_src(&o[3], line)?;
            if neg {
                return unsupported(line, "negated predicate in selp");
            }
            Ok(alu(n::selp, Mods::new(ty), d, &[a, b, c]))
        }
        "slct" => {
            sx.check(&["ftz"])?;
            need(o, 4, i)?;
            let ts = sx.types();
            if ts.len() != 2 {
                return unsupported(line, "slct needs two types");
            }
            let mut m = Mods::new(ts[0]);
            m.sty = ts[1];
            m.ftz = sx.has("ftz");
            let d = k.dst(&o[0], line)?;
            let a = k.src(&o[1], ts[0], line)?;
            let b = k.src(&o[2], ts[0], line)?;
            let c = k.src(&o[3], ts[1], line)?;
            Ok(alu(n::slct, m, d, &[a, b, c]))
        }
        "setp" | "set" => setp(k, &sx, i),
        "testp" => {
            let classes = [
                "finite",
                "infinite",
                "number",
                "notanumber",
                "normal",
                "subnormal",
            ];
            sx.check(&classes)?;
            need(o, 2, i)?;
            let ty = sx.ty()?;
            let mut m = Mods::new(ty);
            m.aux = classes.iter().position(|c| sx.has(c)).unwrap_or(0) as u32;
            let d = k.dst(&o[0], line)?;
            let a = k.src(&o[1], ty, line)?;
            Ok(alu(f::testp, m, d, &[a]))
        }
        "copysign" => {
            sx.check(&[])?;
            need(o, 3, i)?;
            let ty = sx.ty()?;
            let d = k.dst(&o[0], line)?;
            let a = k.src(&o[1], ty, line)?;
            let b = k.src(&o[2], ty, line)?;
            Ok(alu(f::copysign, Mods::new(ty), d, &[a, b]))
        }
        "rcp" | "sqrt" | "rsqrt" | "ex2" | "lg2" | "sin" | "cos" | "tanh" => {
            sx.check(&["approx", "ftz", "full"])?;
            need(o, 2, i)?;
            let ty = sx.ty()?;
            let approx = sx.has("approx");
            let fun: AluFn = match (sx.base, ty, approx) {
                ("rcp", Ty::F32, true) => f::rcp_approx,
                ("rcp", Ty::F64, true) => f::rcp_approx64,
                ("rcp", Ty::F32 | Ty::F64, false) => f::frcp,
                ("sqrt", Ty::F32, true) => f::sqrt_approx,
                ("sqrt", Ty::F32 | Ty::F64, false) => f::fsqrt,
                ("rsqrt", Ty::F32, _) => f::rsqrt_approx,
                ("rsqrt", Ty::F64, _) => f::rsqrt_approx64,
                ("ex2", Ty::F32, _) => f::ex2_approx,
                ("lg2", Ty::F32, _) => f::lg2_approx,
                ("sin", Ty::F32, _) => f::sin_approx,
                ("cos", Ty::F32, _) => f::cos_approx,
                ("tanh", Ty::F32, _) => f::tanh_approx,
                ("ex2", t, true) if is_half(t) => f::hex2,
                ("tanh", t, true) if is_half(t) => f::htanh,
                _ => return unsupported(line, format!("`{}`", i.opcode)),
            };
            let m = sx.mods(ty);
            let d = k.dst(&o[0], line)?;
            let a = k.src(&o[1], ty, line)?;
            Ok(alu(fun, m, d, &[a]))
        }
        "mov" => mov(k, &sx, i),
        "cvt" => cvt(k, &sx, i),
        "cvta" => {
            sx.check(&["to"])?;
            need(o, 2, i)?;
            let ty = sx.ty()?;
            let d = k.dst(&o[0], line)?;
            let a = k.src(&o[1], ty, line)?;
            let mut m = Mods::new(ty);
            let to = sx.has("to");
            let (fun, aux): (AluFn, u32) = match sx.space() {
                Some(Space::Global) | Some(Space::Const) => (n::mov, 0),
                Some(Space::Shared) => (
                    if to { n::sub_base } else { n::add_base },
                    crate::memory::SHARED_AUX,
                ),
                Some(Space::Local) => (
                    if to { n::sub_base } else { n::add_base },
                    crate::memory::LOCAL_AUX,
                ),
                Some(Space::Param) => (
                    if to { n::sub_base } else { n::add_base },
                    crate::memory::PARAM_AUX,
                ),
                _ => return unsupported(line, format!("`{}`", i.opcode)),
            };
            m.aux = aux;
            Ok(alu(fun, m, d, &[a]))
        }
        "isspacep" => {
            sx.check(&[])?;
            need(o, 2, i)?;
            let d = k.dst(&o[0], line)?;
            let a = k.src(&o[1], Ty::U64, line)?;
            let mut m = Mods::new(Ty::Pred);
            m.aux = match sx.space() {
                Some(Space::Global) | Some(Space::Const) => 0,
                Some(Space::Shared) => 1,
                Some(Space::Local) => 2,
                Some(Space::Param) => 3,
                _ => return unsupported(line, format!("`{}`", i.opcode)),
            };
            Ok(alu(isspacep, m, d, &[a]))
        }
        "ld" | "ldu" => ops_mem::ld(k, &sx, i),
        "st" => ops_mem::st(k, &sx, i),
        "atom" | "red" => ops_mem::atom(k, &sx, i),
        "bra" | "brx" => {
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
        "ret" => Ok(Kind::Ret),
        "exit" => Ok(Kind::Exit),
        "trap" | "brkpt" => Ok(Kind::Trap),
        "call" => {
            sx.check(&[])?;
            k.call(i)
        }
        "bar" | "barrier" => ops_sync::bar(k, &sx, i),
        "shfl" | "vote" | "redux" | "elect" | "match" | "activemask" => ops_sync::warp(k, &sx, i),
        "cp" => ops_mem::cp_async(k, &sx, i),
        "membar" | "fence" | "nanosleep" | "prefetch" | "prefetchu" | "griddepcontrol"
        | "pmevent" | "discard" | "applypriority" | "setmaxnreg" => Ok(Kind::Nop),
        "createpolicy" => {
            if o.is_empty() {
                return need(o, 1, i).map(|_| Kind::Nop);
            }
            let d = k.dst(&o[0], line)?;
            Ok(alu(n::mov, Mods::new(Ty::B64), d, &[Opd::Imm(0)]))
        }
        "mapa" => {
            need(o, 3, i)?;
            let ty = sx.ty()?;
            let d = k.dst(&o[0], line)?;
            let a = k.src(&o[1], ty, line)?;
            Ok(alu(n::mov, Mods::new(ty), d, &[a]))
        }
        "getctarank" => {
            need(o, 2, i)?;
            let d = k.dst(&o[0], line)?;
            Ok(alu(n::mov, Mods::new(Ty::U32), d, &[Opd::Imm(0)]))
        }
        _ => unsupported(line, format!("instruction `{}`", i.opcode)),
    }
}

fn isspacep(m: &Mods, s: [u64; 4]) -> u64 {
    use crate::memory::{window, Window};
    matches!(
        (window(s[0]), m.aux),
        (Window::Global(_), 0)
            | (Window::Shared(_), 1)
            | (Window::Local(_), 2)
            | (Window::Param(_), 3)
    ) as u64
}

fn carry(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["cc", "lo", "hi"])?;
    let ty = sx.ty()?;
    if !matches!(ty.bits(), 32 | 64) || !ty.is_int() {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let op = match sx.base {
        "add" | "addc" => 0,
        "sub" | "subc" => 1,
        _ if sx.has("hi") => 3,
        _ => 2,
    };
    need(o, if op >= 2 { 4 } else { 3 }, i)?;
    let d = k.dst(&o[0], line)?;
    let mut s = [Opd::Imm(0); 3];
    for (j, x) in o[1..].iter().enumerate() {
        s[j] = k.src(x, ty, line)?;
    }
    let cc = k.cc_reg();
    Ok(Kind::Carry {
        op,
        ty,
        d,
        s,
        cc,
        cin: sx.base.ends_with('c'),
        cout: sx.has("cc"),
    })
}

fn arith(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    let ty = sx.ty()?;
    let mut m = sx.mods(ty);
    let nsrc = match sx.base {
        "abs" | "neg" => 1,
        "mad" | "fma" => 3,
        _ => 2,
    };
    need(o, nsrc + 1, i)?;
    let fun: AluFn = if is_half(ty) {
        sx.check(&["ftz", "sat", "NaN", "xorsign", "abs", "relu", "oob"])?;
        if sx.has("xorsign") || sx.has("oob") {
            return unsupported(line, format!("`{}`", i.opcode));
        }
        m.aux = sx.has("NaN") as u32 | (sx.has("relu") as u32) << 1;
        match sx.base {
            "add" => f::hadd,
            "sub" => f::hsub,
            "mul" => f::hmul,
            "fma" => f::hfma,
            "neg" => f::hneg,
            "abs" => f::habs,
            "min" => f::hmin,
            "max" => f::hmax,
            _ => return unsupported(line, format!("`{}`", i.opcode)),
        }
    } else if ty == Ty::F32 || ty == Ty::F64 {
        sx.check(&["ftz", "sat", "approx", "full", "NaN"])?;
        if sx.has("approx") && !matches!(sx.base, "div") {
            return unsupported(line, format!("`{}`", i.opcode));
        }
        m.aux = sx.has("NaN") as u32;
        match sx.base {
            "add" => f::fadd,
            "sub" => f::fsub,
            "mul" => f::fmul,
            "fma" | "mad" => f::ffma,
            "div" if sx.has("approx") || sx.has("full") => {
                if ty != Ty::F32 {
                    return unsupported(line, format!("`{}`", i.opcode));
                }
                if sx.has("full") {
                    f::fdiv_full
                } else {
                    f::fdiv_approx
                }
            }
            "div" => f::fdiv,
            "abs" => f::fabs,
            "neg" => f::fneg,
            "min" => f::fmin,
            "max" => f::fmax,
            _ => return unsupported(line, format!("`{}`", i.opcode)),
        }
    } else {
        sx.check(&["lo", "hi", "wide", "sat"])?;
        if sx.has("cc") {
            return unsupported(line, "carry (.cc)");
        }
        m.aux = if sx.has("hi") {
            1
        } else if sx.has("wide") {
            2
        } else {
            0
        };
        match sx.base {
            "add" => n::add,
            "sub" => n::sub,
            "mul" => n::mul,
            "mad" => n::mad,
            "div" => n::div,
            "rem" => n::rem,
            "abs" => n::abs,
            "neg" => n::neg,
            "min" => n::min,
            "max" => n::max,
            _ => return unsupported(line, format!("`{}`", i.opcode)),
        }
    };
    let d = k.dst(&o[0], line)?;
    let mut s = Vec::new();
    for (j, x) in o[1..].iter().enumerate() {
        // mad.wide: the addend has the double width
        let t = if j == 2 && m.aux == 2 && ty.is_int() {
            n::wide(ty)
        } else {
            ty
        };
        s.push(k.src(x, t, line)?);
    }
    Ok(alu(fun, m, d, &s))
}

fn setp(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(CMPS)?;
    let ts = sx.types();
    let (set_ty, ty) = if sx.base == "set" {
        if ts.len() != 2 {
            return unsupported(line, "set needs a destination and a source type");
        }
        (Some(ts[0]), ts[1])
    } else {
        (None, sx.ty()?)
    };
    let packed = matches!(ty, Ty::F16x2 | Ty::Bf16x2);
    if packed && set_ty.is_some() {
        return unsupported(line, format!("`{}` (packed set)", i.opcode));
    }
    let cmp = sx
        .parts
        .iter()
        .find_map(|p| cmp_of(p))
        .ok_or_else(|| SimError::Parse {
            line,
            message: format!("`{}` without a comparison", i.opcode),
        })?;
    let bop = sx.parts.iter().find_map(|p| match *p {
        "and" => Some(BoolOp::And),
        "or" => Some(BoolOp::Or),
        "xor" => Some(BoolOp::Xor),
        _ => None,
    });
    let mut m = Mods::new(ty);
    m.cmp = cmp;
    m.ftz = sx.has("ftz");
    if !(3..=4).contains(&o.len()) {
        return need(o, 3, i).map(|_| Kind::Nop);
    }
    let (p, q) = match &o[0] {
        Operand::Pair(a, b) => (k.reg(a, line)?, k.reg(b, line)?),
        x => (k.dst(x, line)?, NOREG),
    };
    let a = k.src(&o[1], ty, line)?;
    let b = k.src(&o[2], ty, line)?;
    let c = match (o.get(3), bop) {
        (Some(x), Some(bop)) => {
            let (c, neg) = k.pred_src(x, line)?;
            Some((c, neg, bop))
        }
        (None, None) => None,
        _ => {
            return Err(SimError::Parse {
                line,
                message: "boolean operator and third operand must come together".into(),
            })
        }
    };
    let fun: CmpFn = if ty.is_float() {
        scmp::fcmp
    } else {
        scmp::icmp
    };
    if packed {
        m.ty = if ty == Ty::F16x2 { Ty::F16 } else { Ty::Bf16 };
    }
    Ok(Kind::Setp {
        packed,
        f: fun,
        m,
        p,
        q,
        a,
        b,
        c,
        set_ty,
    })
}

fn mov(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&[])?;
    need(o, 2, i)?;
    let ty = sx.ty()?;
    match (&o[0], &o[1]) {
        (Operand::Vec(ds), src) => {
            let nn = ds.len();
            if !(2..=4).contains(&nn) || ty.bits() % nn as u32 != 0 {
                return unsupported(line, "vector unpack shape");
            }
            let mut d = [NOREG; 4];
            for (j, x) in ds.iter().enumerate() {
                d[j] = k.dst(x, line)?;
            }
            let s = k.src(src, ty, line)?;
            Ok(Kind::Unpack {
                d,
                n: nn as u8,
                w: (ty.bits() / nn as u32) as u8,
                s,
            })
        }
        (dst, Operand::Vec(ss)) => {
            let nn = ss.len();
            if !(2..=4).contains(&nn) || ty.bits() % nn as u32 != 0 {
                return unsupported(line, "vector pack shape");
            }
            let w = ty.bits() / nn as u32;
            let et = match w {
                8 => Ty::B8,
                16 => Ty::B16,
                32 => Ty::B32,
                _ => Ty::B64,
            };
            let mut s = [Opd::Imm(0); 4];
            for (j, x) in ss.iter().enumerate() {
                s[j] = k.src(x, et, line)?;
            }
            let d = k.dst(dst, line)?;
            Ok(Kind::Pack {
                d,
                s,
                n: nn as u8,
                w: w as u8,
            })
        }
        (
            dst,
            Operand::Name {
                name: clk,
                neg: false,
            },
        ) if matches!(
            clk.as_str(),
            "%clock" | "%clock64" | "%globaltimer" | "%globaltimer_lo"
        ) =>
        {
            let d = k.dst(dst, line)?;
            let (mul, bits) = match clk.as_str() {
                "%clock" => (1, 32),
                "%clock64" => (1, 64),
                "%globaltimer" => (32, 64),
                _ => (32, 32),
            };
            Ok(Kind::Clock { d, mul, bits })
        }
        (dst, src) => {
            let d = k.dst(dst, line)?;
            let (s, neg) = if ty == Ty::Pred {
                k.pred_src(src, line)?
            } else {
                (k.src(src, ty, line)?, false)
            };
            if ty != Ty::Pred && !matches!(s, Opd::Sym(..)) {
                // registers and immediates already hold normalized values of this width
                return Ok(Kind::Mov { d, s });
            }
            let f: AluFn = if neg { n::not } else { n::mov };
            Ok(alu(f, Mods::new(ty), d, &[s]))
        }
    }
}

fn cvt(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&["ftz", "sat", "relu", "satfinite"])?;
    let ts = sx.types();
    if ts.len() != 2 {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let (dt, st) = (ts[0], ts[1]);
    let mut m = sx.mods(dt);
    m.sty = st;
    m.aux = sx.has("relu") as u32 | (sx.has("satfinite") as u32) << 2;
    if sx.has("satfinite") && !matches!(dt, Ty::F16 | Ty::Bf16 | Ty::F16x2 | Ty::Bf16x2) {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    if matches!(dt, Ty::F16x2 | Ty::Bf16x2) && st == Ty::F32 {
        need(o, 3, i)?;
        let d = k.dst(&o[0], line)?;
        let a = k.src(&o[1], st, line)?;
        let b = k.src(&o[2], st, line)?;
        return Ok(alu(scvt::cvt_x2, m, d, &[a, b]));
    }
    if matches!(dt, Ty::F16x2 | Ty::Bf16x2 | Ty::B128 | Ty::Pred)
        || matches!(st, Ty::F16x2 | Ty::Bf16x2 | Ty::B128 | Ty::Pred)
    {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    // float -> int needs an integer rounding mode (default .rzi would hide bugs: require one)
    if dt.is_int() && st.is_float() && m.irnd.is_none() {
        return unsupported(
            line,
            format!("`{}` without an integer rounding mode", i.opcode),
        );
    }
    need(o, 2, i)?;
    let d = k.dst(&o[0], line)?;
    let a = k.src(&o[1], st, line)?;
    Ok(alu(scvt::cvt, m, d, &[a]))
}
