//! Opcode lowering: one PTX instruction -> one [`Kind`].

use super::{unsupported, KCtx, R};
use crate::error::SimError;
use crate::ir::*;
use crate::num::{IRnd, Rnd};
use crate::parser::ast::{self, Operand};
use crate::sem::{cmp as scmp, cvt as scvt, float as f, int as n};
use crate::types::{Space, Ty};

/// Opcode split into its base name and modifier parts.
struct Sfx<'a> {
    base: &'a str,
    parts: Vec<&'a str>,
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
    fn new(op: &'a str, line: usize) -> Sfx<'a> {
        let mut it = op.split('.');
        let base = it.next().unwrap_or("");
        Sfx {
            base,
            parts: it.collect(),
            line,
            op,
        }
    }
    fn has(&self, s: &str) -> bool {
        self.parts.contains(&s)
    }
    fn types(&self) -> Vec<Ty> {
        self.parts.iter().filter_map(|p| Ty::parse(p)).collect()
    }
    fn ty(&self) -> R<Ty> {
        match self.types().last() {
            Some(t) => Ok(*t),
            None => unsupported(self.line, format!("`{}` without a type", self.op)),
        }
    }
    fn rnd(&self) -> Option<Rnd> {
        self.parts.iter().find_map(|p| match *p {
            "rn" => Some(Rnd::Rn),
            "rz" => Some(Rnd::Rz),
            "rm" => Some(Rnd::Rm),
            "rp" => Some(Rnd::Rp),
            _ => None,
        })
    }
    fn irnd(&self) -> Option<IRnd> {
        self.parts.iter().find_map(|p| match *p {
            "rni" => Some(IRnd::Rni),
            "rzi" => Some(IRnd::Rzi),
            "rmi" => Some(IRnd::Rmi),
            "rpi" => Some(IRnd::Rpi),
            _ => None,
        })
    }
    fn space(&self) -> Option<Space> {
        self.parts.iter().find_map(|p| Space::parse(p))
    }
    fn vec(&self) -> u8 {
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
    fn check(&self, allowed: &[&str]) -> R<()> {
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
    fn mods(&self, ty: Ty) -> Mods {
        let mut m = Mods::new(ty);
        m.rnd = self.rnd().unwrap_or(Rnd::Rn);
        m.irnd = self.irnd();
        m.ftz = self.has("ftz");
        m.sat = self.has("sat");
        m
    }
}

fn need(ops: &[Operand], n: usize, i: &ast::Instr) -> R<()> {
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
    Kind::Alu { f, m, d, s }
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
        "ld" | "ldu" => ld(k, &sx, i),
        "st" => st(k, &sx, i),
        "atom" | "red" => atom(k, &sx, i),
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
        "bar" | "barrier" => bar(k, &sx, i),
        "shfl" | "vote" | "redux" | "elect" | "match" | "activemask" => warp(k, &sx, i),
        "cp" => cp_async(k, &sx, i),
        "membar" | "fence" | "nanosleep" | "prefetch" | "prefetchu" | "griddepcontrol"
        | "pmevent" => Ok(Kind::Nop),
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

fn cp_async(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    if !sx.has("async") || sx.has("bulk") || sx.has("mbarrier") {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    if sx.has("commit_group") || sx.has("wait_group") || sx.has("wait_all") {
        return Ok(Kind::Nop);
    }
    sx.check(&["async", "L2::64B", "L2::128B", "L2::256B", "L2::cache_hint"])?;
    let o = strip_hint(sx, &i.operands);
    if !(3..=4).contains(&o.len()) {
        return need(o, 3, i).map(|_| Kind::Nop);
    }
    let (_, dst, doff) = k.addr(&o[0], Some(Space::Shared), line)?;
    let (_, src, soff) = k.addr(&o[1], Some(Space::Global), line)?;
    let size = match &o[2] {
        Operand::Imm(ast::Imm::Int(v)) if matches!(*v, 4 | 8 | 16) => *v as u8,
        _ => return unsupported(line, "cp.async size other than 4, 8 or 16"),
    };
    let src_size = match o.get(3) {
        Some(x) => Some(k.src(x, Ty::U32, line)?),
        None => None,
    };
    Ok(Kind::CpAsync {
        dst,
        doff,
        src,
        soff,
        size,
        src_size,
    })
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
                f::fdiv_approx
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
        (dst, src) => {
            let d = k.dst(dst, line)?;
            let (s, neg) = if ty == Ty::Pred {
                k.pred_src(src, line)?
            } else {
                (k.src(src, ty, line)?, false)
            };
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

/// Operands without the trailing cache-policy operand of `.L2::cache_hint` forms.
fn strip_hint<'o>(sx: &Sfx<'_>, o: &'o [Operand]) -> &'o [Operand] {
    if sx.has("L2::cache_hint") && !o.is_empty() {
        &o[..o.len() - 1]
    } else {
        o
    }
}

fn ld(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = strip_hint(sx, &i.operands);
    sx.check(&[])?;
    need(o, 2, i)?;
    let ty = sx.ty()?;
    if ty == Ty::B128 || ty == Ty::Pred {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let nvec = sx.vec();
    let mut d = [NOREG; 4];
    match &o[0] {
        Operand::Vec(v) if v.len() == nvec as usize && nvec > 1 => {
            for (j, x) in v.iter().enumerate() {
                d[j] = k.dst(x, line)?;
            }
        }
        x if nvec == 1 => d[0] = k.dst(x, line)?,
        _ => {
            return Err(SimError::Parse {
                line,
                message: "vector width and destination list do not match".into(),
            })
        }
    }
    let (sp, a, off) = k.addr(&o[1], sx.space(), line)?;
    Ok(Kind::Ld {
        sp,
        sz: ty.bytes() as u8,
        sext: ty.is_signed(),
        n: nvec,
        d,
        a,
        off,
    })
}

fn st(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = strip_hint(sx, &i.operands);
    sx.check(&[])?;
    need(o, 2, i)?;
    let ty = sx.ty()?;
    if ty == Ty::B128 || ty == Ty::Pred {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let nvec = sx.vec();
    let mut s = [Opd::Imm(0); 4];
    match &o[1] {
        Operand::Vec(v) if v.len() == nvec as usize && nvec > 1 => {
            for (j, x) in v.iter().enumerate() {
                s[j] = k.src(x, ty, line)?;
            }
        }
        x if nvec == 1 => s[0] = k.src(x, ty, line)?,
        _ => {
            return Err(SimError::Parse {
                line,
                message: "vector width and source list do not match".into(),
            })
        }
    }
    let (sp, a, off) = k.addr(&o[0], sx.space(), line)?;
    if sp == Space::Param && !matches!(a, Opd::Imm(_)) {
        return unsupported(line, "st.param through a register");
    }
    Ok(Kind::St {
        sp,
        sz: ty.bytes() as u8,
        n: nvec,
        s,
        a,
        off,
    })
}

fn atom(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = strip_hint(sx, &i.operands);
    let ops = [
        "add", "min", "max", "exch", "cas", "inc", "dec", "and", "or", "xor",
    ];
    sx.check(&ops)?;
    let ty = sx.ty()?;
    let op = match sx.parts.iter().find(|p| ops.contains(p)).copied() {
        Some("add") => AtomOp::Add,
        Some("min") => AtomOp::Min,
        Some("max") => AtomOp::Max,
        Some("exch") => AtomOp::Exch,
        Some("cas") => AtomOp::Cas,
        Some("inc") => AtomOp::Inc,
        Some("dec") => AtomOp::Dec,
        Some("and") => AtomOp::And,
        Some("or") => AtomOp::Or,
        Some("xor") => AtomOp::Xor,
        _ => return unsupported(line, format!("`{}`", i.opcode)),
    };
    if sx.vec() > 1
        || ty == Ty::B128
        || (matches!(ty, Ty::F16x2 | Ty::Bf16x2 | Ty::F16 | Ty::Bf16) && op != AtomOp::Add)
    {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    let is_red = sx.base == "red";
    let nops = if is_red { 2 } else { 3 } + (op == AtomOp::Cas) as usize;
    need(o, nops, i)?;
    let (d, rest) = if is_red {
        (NOREG, o)
    } else {
        (k.dst(&o[0], line)?, &o[1..])
    };
    let (sp, a, off) = k.addr(&rest[0], sx.space(), line)?;
    if !matches!(sp, Space::Global | Space::Shared | Space::Generic) {
        return unsupported(line, format!("atomic on .{} memory", sp.name()));
    }
    let b = k.src(&rest[1], ty, line)?;
    let c = match rest.get(2) {
        Some(x) => k.src(x, ty, line)?,
        None => Opd::Imm(0),
    };
    Ok(Kind::Atom {
        sp,
        op,
        ty,
        d,
        a,
        off,
        b,
        c,
    })
}

fn bar(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    if sx.has("warp") {
        sx.check(&["warp"])?;
        need(o, 1, i)?;
        let mask = k.src(&o[0], Ty::U32, line)?;
        return Ok(Kind::Sync {
            op: SyncOp::BarWarp,
            mask,
        });
    }
    if sx.has("cluster") {
        return unsupported(line, format!("`{}`", i.opcode));
    }
    sx.check(&["arrive", "red", "popc", "and", "or"])?;
    let op = if sx.has("red") {
        if sx.has("popc") {
            BarOp::RedPopc
        } else if sx.has("and") {
            BarOp::RedAnd
        } else {
            BarOp::RedOr
        }
    } else if sx.has("arrive") {
        BarOp::Arrive
    } else if sx.has("sync") || sx.parts.is_empty() || sx.parts == ["cta"] {
        BarOp::Sync
    } else {
        return unsupported(line, format!("`{}`", i.opcode));
    };
    let mut rest = &o[..];
    let mut d = NOREG;
    let mut src = None;
    if matches!(op, BarOp::RedPopc | BarOp::RedAnd | BarOp::RedOr) {
        if o.len() < 3 {
            return need(o, 3, i).map(|_| Kind::Nop);
        }
        d = k.dst(&o[0], line)?;
        src = Some(k.pred_src(&o[o.len() - 1], line)?);
        rest = &o[1..o.len() - 1];
    }
    if rest.is_empty() || rest.len() > 2 {
        return Err(SimError::Parse {
            line,
            message: format!(
                "`{}` takes a barrier id and an optional thread count",
                i.opcode
            ),
        });
    }
    let id = k.src(&rest[0], Ty::U32, line)?;
    let cnt = match rest.get(1) {
        Some(x) => Some(k.src(x, Ty::U32, line)?),
        None => None,
    };
    if op == BarOp::Arrive && cnt.is_none() {
        return Err(SimError::Parse {
            line,
            message: "bar.arrive needs a thread count".into(),
        });
    }
    Ok(Kind::Bar {
        op,
        id,
        cnt,
        d,
        src,
    })
}

fn warp(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    if sx.base != "activemask" && !sx.has("sync") {
        return unsupported(line, format!("`{}` (non-.sync warp operation)", i.opcode));
    }
    let pair = |k: &mut KCtx<'_>, x: &Operand| -> R<(u32, u32)> {
        match x {
            Operand::Pair(a, b) => {
                let a = if a == "_" {
                    k.dst(x, line).unwrap_or(NOREG)
                } else {
                    k.reg(a, line)?
                };
                Ok((a, k.reg(b, line)?))
            }
            x => Ok((k.dst(x, line)?, NOREG)),
        }
    };
    match sx.base {
        "activemask" => {
            need(o, 1, i)?;
            Ok(Kind::Activemask {
                d: k.dst(&o[0], line)?,
            })
        }
        "shfl" => {
            sx.check(&["up", "down", "bfly", "idx"])?;
            need(o, 5, i)?;
            let mode = if sx.has("up") {
                ShflMode::Up
            } else if sx.has("down") {
                ShflMode::Down
            } else if sx.has("bfly") {
                ShflMode::Bfly
            } else if sx.has("idx") {
                ShflMode::Idx
            } else {
                return unsupported(line, format!("`{}`", i.opcode));
            };
            let (d, p) = pair(k, &o[0])?;
            let a = k.src(&o[1], Ty::B32, line)?;
            let b = k.src(&o[2], Ty::U32, line)?;
            let c = k.src(&o[3], Ty::U32, line)?;
            let mask = k.src(&o[4], Ty::U32, line)?;
            Ok(Kind::Sync {
                op: SyncOp::Shfl {
                    mode,
                    d,
                    p,
                    a,
                    b,
                    c,
                },
                mask,
            })
        }
        "vote" => {
            sx.check(&["all", "any", "uni", "ballot"])?;
            need(o, 3, i)?;
            let mode = if sx.has("all") {
                VoteMode::All
            } else if sx.has("any") {
                VoteMode::Any
            } else if sx.has("uni") {
                VoteMode::Uni
            } else {
                VoteMode::Ballot
            };
            let d = k.dst(&o[0], line)?;
            let (s, neg) = k.pred_src(&o[1], line)?;
            let mask = k.src(&o[2], Ty::U32, line)?;
            Ok(Kind::Sync {
                op: SyncOp::Vote { mode, d, s, neg },
                mask,
            })
        }
        "redux" => {
            sx.check(&["add", "min", "max", "and", "or", "xor"])?;
            need(o, 3, i)?;
            let ty = sx.ty()?;
            if !matches!(ty, Ty::U32 | Ty::S32 | Ty::B32) {
                return unsupported(line, format!("`{}`", i.opcode));
            }
            let op = if sx.has("add") {
                ReduxOp::Add
            } else if sx.has("min") {
                ReduxOp::Min
            } else if sx.has("max") {
                ReduxOp::Max
            } else if sx.has("and") {
                ReduxOp::And
            } else if sx.has("or") {
                ReduxOp::Or
            } else {
                ReduxOp::Xor
            };
            let d = k.dst(&o[0], line)?;
            let s = k.src(&o[1], ty, line)?;
            let mask = k.src(&o[2], Ty::U32, line)?;
            Ok(Kind::Sync {
                op: SyncOp::Redux {
                    op,
                    signed: ty == Ty::S32,
                    d,
                    s,
                },
                mask,
            })
        }
        "elect" => {
            sx.check(&[])?;
            need(o, 2, i)?;
            let (d, p) = pair(k, &o[0])?;
            let mask = k.src(&o[1], Ty::U32, line)?;
            Ok(Kind::Sync {
                op: SyncOp::Elect { d, p },
                mask,
            })
        }
        _ => {
            sx.check(&["any", "all"])?;
            need(o, 3, i)?;
            let ty = sx.ty()?;
            let (d, p) = pair(k, &o[0])?;
            let s = k.src(&o[1], ty, line)?;
            let mask = k.src(&o[2], Ty::U32, line)?;
            Ok(Kind::Sync {
                op: SyncOp::Match {
                    all: sx.has("all"),
                    bits64: ty.bits() == 64,
                    d,
                    p,
                    s,
                },
                mask,
            })
        }
    }
}
