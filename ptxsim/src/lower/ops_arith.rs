//! Lowering of arithmetic: integer, f32/f64 and f16/bf16 `add/sub/mul/mad/fma/div/rem/abs/neg/
//! min/max` (one table per type class), the carry chain (`add.cc`, `addc`, `mad.cc`, ...), the
//! float special functions (`rcp`, `sqrt`, `ex2`, ...), `testp` and `copysign`.

use super::sfx::{alu, is_half, need, Sfx};
use super::{unsupported, KCtx, R};
use crate::ir::*;
use crate::parser::ast;
use crate::sem::{float as f, int as n};
use crate::types::Ty;

/// `add`, `sub`, `mul`, `mad`, `fma`, `div`, `rem`, `abs`, `neg`, `min`, `max` of every type.
pub(super) fn arith(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
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
    let fun = if is_half(ty) {
        half_arith(sx, i, &mut m)?
    } else if ty == Ty::F32 || ty == Ty::F64 {
        float_arith(sx, i, &mut m)?
    } else {
        int_arith(sx, i, &mut m)?
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

/// The f16/bf16 (scalar and x2) arithmetic table.
fn half_arith(sx: &Sfx<'_>, i: &ast::Instr, m: &mut Mods) -> R<AluFn> {
    sx.check(&["ftz", "sat", "NaN", "xorsign", "abs", "relu", "oob"])?;
    if sx.has("xorsign") || sx.has("oob") {
        return unsupported(i.line, format!("`{}`", i.opcode));
    }
    m.aux = sx.has("NaN") as u32 | (sx.has("relu") as u32) << 1;
    Ok(match sx.base {
        "add" => f::hadd,
        "sub" => f::hsub,
        "mul" => f::hmul,
        "fma" => f::hfma,
        "neg" => f::hneg,
        "abs" => f::habs,
        "min" => f::hmin,
        "max" => f::hmax,
        _ => return unsupported(i.line, format!("`{}`", i.opcode)),
    })
}

/// The f32/f64 arithmetic table.
fn float_arith(sx: &Sfx<'_>, i: &ast::Instr, m: &mut Mods) -> R<AluFn> {
    let ty = m.ty;
    sx.check(&["ftz", "sat", "approx", "full", "NaN"])?;
    if sx.has("approx") && !matches!(sx.base, "div") {
        return unsupported(i.line, format!("`{}`", i.opcode));
    }
    m.aux = sx.has("NaN") as u32;
    Ok(match sx.base {
        "add" => f::fadd,
        "sub" => f::fsub,
        "mul" => f::fmul,
        "fma" | "mad" => f::ffma,
        "div" if sx.has("approx") || sx.has("full") => {
            if ty != Ty::F32 {
                return unsupported(i.line, format!("`{}`", i.opcode));
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
        _ => return unsupported(i.line, format!("`{}`", i.opcode)),
    })
}

/// The integer arithmetic table (`.lo`/`.hi`/`.wide`, `.sat`).
fn int_arith(sx: &Sfx<'_>, i: &ast::Instr, m: &mut Mods) -> R<AluFn> {
    sx.check(&["lo", "hi", "wide", "sat"])?;
    if sx.has("cc") {
        return unsupported(i.line, "carry (.cc)");
    }
    m.aux = if sx.has("hi") {
        1
    } else if sx.has("wide") {
        2
    } else {
        0
    };
    Ok(match sx.base {
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
        _ => return unsupported(i.line, format!("`{}`", i.opcode)),
    })
}

/// `add.cc`, `sub.cc`, `mad.cc`, `addc`, `subc`, `madc`: arithmetic through the carry flag.
pub(super) fn carry(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
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

/// `rcp`, `sqrt`, `rsqrt`, `ex2`, `lg2`, `sin`, `cos`, `tanh` (exact and `.approx`).
pub(super) fn special(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
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

/// `testp.{class}.{f32,f64}`: floating-point class test.
pub(super) fn testp(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
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

/// `copysign`: the magnitude of the second source with the sign of the first.
pub(super) fn copysign(k: &mut KCtx<'_>, sx: &Sfx<'_>, i: &ast::Instr) -> R<Kind> {
    let line = i.line;
    let o = &i.operands;
    sx.check(&[])?;
    need(o, 3, i)?;
    let ty = sx.ty()?;
    let d = k.dst(&o[0], line)?;
    let a = k.src(&o[1], ty, line)?;
    let b = k.src(&o[2], ty, line)?;
    Ok(alu(f::copysign, Mods::new(ty), d, &[a, b]))
}
