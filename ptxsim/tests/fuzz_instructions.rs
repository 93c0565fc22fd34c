//! Robustness fuzzing: random sequences of well-formed instructions over every register class
//! (including division by zero, huge shift counts, NaN/inf conversions, out-of-range shuffle
//! lanes, odd memory offsets) must parse and either run or return an error/fault: never panic.

mod common;

use common::{cfg1, ptx_module, simple_entry, Rng};
use ptxsim::{Arg, Device, Module, Options};

/// Templates: #r b32 register, #d b64, #h b16, #f f32, #g f64, #p predicate, #i small
/// immediate, #k any 32-bit immediate.
const TEMPLATES: &[&str] = &[
    "add.s32 #r, #r, #r;",
    "sub.u32 #r, #r, #k;",
    "mul.lo.u32 #r, #r, #r;",
    "mul.hi.s32 #r, #r, #r;",
    "mul.wide.s32 #d, #r, #r;",
    "mad.lo.s32 #r, #r, #r, #r;",
    "div.s32 #r, #r, #r;",
    "div.u32 #r, #r, #r;",
    "rem.s32 #r, #r, #r;",
    "div.s64 #d, #d, #d;",
    "rem.u64 #d, #d, #d;",
    "shl.b32 #r, #r, #r;",
    "shr.s32 #r, #r, #r;",
    "shr.u64 #d, #d, #r;",
    "shf.l.wrap.b32 #r, #r, #r, #r;",
    "shf.r.clamp.b32 #r, #r, #r, #r;",
    "bfe.u32 #r, #r, #r, #r;",
    "bfe.s64 #d, #d, #r, #r;",
    "bfi.b32 #r, #r, #r, #r, #r;",
    "prmt.b32 #r, #r, #r, #r;",
    "popc.b64 #r, #d;",
    "clz.b32 #r, #r;",
    "brev.b64 #d, #d;",
    "bfind.s32 #r, #r;",
    "lop3.b32 #r, #r, #r, #r, #i;",
    "abs.s32 #r, #r;",
    "neg.s64 #d, #d;",
    "min.s32 #r, #r, #r;",
    "max.u64 #d, #d, #d;",
    "add.f32 #f, #f, #f;",
    "mul.rz.f32 #f, #f, #f;",
    "div.rn.f32 #f, #f, #f;",
    "div.approx.f32 #f, #f, #f;",
    "fma.rm.f32 #f, #f, #f, #f;",
    "sqrt.rp.f32 #f, #f;",
    "rcp.rn.f64 #g, #g;",
    "div.rz.f64 #g, #g, #g;",
    "fma.rn.f64 #g, #g, #g, #g;",
    "ex2.approx.f32 #f, #f;",
    "lg2.approx.f32 #f, #f;",
    "sin.approx.f32 #f, #f;",
    "rsqrt.approx.f32 #f, #f;",
    "tanh.approx.f32 #f, #f;",
    "min.f32 #f, #f, #f;",
    "max.NaN.f32 #f, #f, #f;",
    "copysign.f64 #g, #g, #g;",
    "testp.notanumber.f32 #p, #f;",
    "setp.ltu.f32 #p, #f, #f;",
    "setp.ge.s64 #p, #d, #d;",
    "selp.b32 #r, #r, #r, #p;",
    "slct.s32.f32 #r, #r, #r, #f;",
    "and.pred #p, #p, #p;",
    "cvt.rni.s32.f32 #r, #f;",
    "cvt.rzi.u64.f64 #d, #g;",
    "cvt.rn.f32.s64 #f, #d;",
    "cvt.rn.f16.f32 #h, #f;",
    "cvt.f32.f16 #f, #h;",
    "cvt.rn.bf16.f32 #h, #f;",
    "cvt.rn.f32.f64 #f, #g;",
    "cvt.f64.f32 #g, #f;",
    "cvt.sat.s8.s32 #r, #r;",
    "cvt.u16.u32 #h, #r;",
    "cvt.s64.s16 #d, #h;",
    "mov.b32 #f, #r;",
    "mov.b64 #g, #d;",
    "mov.b32 #r, {#h, #h};",
    "mov.b64 {#r, #r}, #d;",
    "add.rn.f16x2 #r, #r, #r;",
    "fma.rn.bf16x2 #r, #r, #r, #r;",
    "add.f16 #h, #h, #h;",
    "cvt.rn.f16x2.f32 #r, #f, #f;",
    "shfl.sync.bfly.b32 #r, #r, #r, 31, -1;",
    "shfl.sync.idx.b32 #r|#p, #r, #r, #r, -1;",
    "vote.sync.ballot.b32 #r, #p, -1;",
    "redux.sync.add.u32 #r, #r, -1;",
    "match.any.sync.b32 #r, #r, -1;",
    "add.cc.u32 #r, #r, #r;\naddc.u32 #r, #r, #r;",
    "dp4a.s32.s32 #r, #r, #r, #r;",
    "and.b32 %r30, #r, 252;\ncvt.u64.u32 %rd30, %r30;\nadd.s64 %rd31, %a0, %rd30;\nld.global.u32 #r, [%rd31];",
    "and.b32 %r30, #r, 248;\ncvt.u64.u32 %rd30, %r30;\nadd.s64 %rd31, %a0, %rd30;\nst.global.u64 [%rd31], #d;",
    "and.b32 %r30, #r, 255;\ncvt.u64.u32 %rd30, %r30;\nadd.s64 %rd31, %a0, %rd30;\natom.global.add.u32 #r, [%rd31], #r;",
    "@#p bra $Lend;",
];

fn instantiate(t: &str, rng: &mut Rng) -> String {
    let mut out = String::new();
    let mut chars = t.chars();
    while let Some(c) = chars.next() {
        if c != '#' {
            out.push(c);
            continue;
        }
        let reg = |p: &str, rng: &mut Rng| format!("%{p}{}", rng.range(1, 8));
        out.push_str(&match chars.next() {
            Some('r') => reg("r", rng),
            Some('d') => reg("rd", rng),
            Some('h') => reg("h", rng),
            Some('f') => reg("f", rng),
            Some('g') => reg("fd", rng),
            Some('p') => reg("p", rng),
            Some('i') => rng.range(0, 256).to_string(),
            _ => (rng.next_u32() as i32).to_string(),
        });
    }
    out
}

fn program(seed: u64) -> String {
    let mut rng = Rng(seed);
    // Initialise every register from the thread index and a few constants.
    let mut body = String::new();
    for k in 1..8 {
        body += &format!(
            "mad.lo.u32 %r{k}, %t, {}, {};\ncvt.u64.u32 %rd{k}, %r{k};\nmul.lo.u64 %rd{k}, %rd{k}, {};\n\
             cvt.rn.f32.s32 %f{k}, %r{k};\ncvt.rn.f64.u32 %fd{k}, %r{k};\ncvt.u16.u32 %h{k}, %r{k};\nsetp.lt.u32 %p{k}, %r{k}, {};\n",
            rng.next_u32() % 1000,
            rng.next_u32() as i32,
            rng.next_u64() >> rng.range(0, 64),
            rng.next_u32(),
        );
    }
    body += "mov.f32 %f7, 0f7FC00000;\nmov.f64 %fd6, 0d7FF0000000000000;\nmov.u32 %r7, 0;\n";
    for _ in 0..30 {
        let t = TEMPLATES[rng.range(0, TEMPLATES.len() as i64) as usize];
        body += &instantiate(t, &mut rng);
        body.push('\n');
    }
    body += "$Lend:\nmul.wide.u32 %rd30, %t, 4;\nadd.s64 %rd31, %a0, %rd30;\nst.global.u32 [%rd31+256], %r1;";
    ptx_module(&simple_entry("soup", 1, &body))
}

#[test]
fn random_instruction_soup_never_panics() {
    let mut problems = Vec::new();
    for seed in 0..300u64 {
        let ptx = program(seed);
        let m = match Module::parse(&ptx) {
            Ok(m) => m,
            Err(e) => {
                // Every template is valid PTX: a parse error is a bug too (but not a panic).
                problems.push(format!(
                    "seed {seed}: {e}\n{}",
                    common::numbered(&ptx, common::error_line(&e))
                ));
                continue;
            }
        };
        let r = std::panic::catch_unwind(|| {
            let mut dev = Device::with_options(Options {
                threads: 1,
                max_warp_steps: 100_000,
                ..Options::default()
            });
            let p = dev.alloc_zeroed(256 + 64 * 4).unwrap();
            let _ = dev.launch(&m, "soup", cfg1(2, 32), &[Arg::Ptr(p)]);
        });
        if r.is_err() {
            problems.push(format!("seed {seed}: panicked\n{ptx}"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems; first:\n{}",
        problems.len(),
        problems[0]
    );
}
