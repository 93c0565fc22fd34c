//! Differential test of SIMT control flow: random structured programs (nested if/else, loops
//! with lane-dependent trip counts, break and continue, predicated instructions) are emitted as
//! PTX and also interpreted per thread on the host. Every thread's final registers must match.
//! At top-level statement boundaries the programs also run warp collectives (shfl.sync,
//! vote.sync) whose results are checked against the other lanes' host values.

mod common;

use common::{cfg1, ptx_module, run_buffers, simple_entry, u32_bytes, u32s, Rng};

const VARS: usize = 4;
const THREADS: usize = 128;

#[derive(Clone, Debug)]
enum Expr {
    Var(usize),
    Tid,
    Const(u32),
    Add(Box<Expr>, Box<Expr>),
    Xor(Box<Expr>, Box<Expr>),
    MulC(Box<Expr>, u32),
    ShrC(Box<Expr>, u32),
}

#[derive(Clone, Debug)]
enum Cond {
    /// (e & mask) == value
    MaskEq(Expr, u32, u32),
    /// a < b (unsigned)
    Lt(Expr, Expr),
}

#[derive(Clone, Debug)]
enum Stmt {
    Assign(usize, Expr),
    /// `@p` assignment: var = expr only where cond holds.
    Predicated(Cond, usize, Expr),
    If(Cond, Vec<Stmt>, Vec<Stmt>),
    /// for (k = 0; k < (bound & 7); k++) body
    Loop(Expr, Vec<Stmt>),
    Break(Cond),
    Continue(Cond),
    /// Top level only: var = shfl.bfly(var_src, lane ^ 1) (or idx from lane 0 when `idx`).
    Shfl(usize, usize, bool),
    /// Top level only: var = ballot(cond).
    Ballot(usize, Cond),
}

struct Gen {
    rng: Rng,
}

impl Gen {
    fn pick(&mut self, n: usize) -> usize {
        self.rng.range(0, n as i64) as usize
    }
    fn expr(&mut self, depth: usize) -> Expr {
        if depth == 0 || self.pick(3) == 0 {
            return match self.pick(4) {
                0 => Expr::Tid,
                1 => Expr::Const(self.rng.next_u32() % 1000),
                _ => Expr::Var(self.pick(VARS)),
            };
        }
        match self.pick(4) {
            0 => Expr::Add(
                Box::new(self.expr(depth - 1)),
                Box::new(self.expr(depth - 1)),
            ),
            1 => Expr::Xor(
                Box::new(self.expr(depth - 1)),
                Box::new(self.expr(depth - 1)),
            ),
            2 => Expr::MulC(Box::new(self.expr(depth - 1)), self.rng.next_u32() % 97 + 1),
            _ => Expr::ShrC(Box::new(self.expr(depth - 1)), self.rng.next_u32() % 9),
        }
    }
    fn cond(&mut self) -> Cond {
        if self.pick(2) == 0 {
            let mask = [1, 3, 7, 15][self.pick(4)];
            Cond::MaskEq(self.expr(2), mask, self.rng.next_u32() & mask)
        } else {
            Cond::Lt(self.expr(2), self.expr(2))
        }
    }
    fn block(&mut self, depth: usize, in_loop: bool, top: bool) -> Vec<Stmt> {
        let n = 1 + self.pick(if depth == 0 { 3 } else { 5 });
        (0..n).map(|_| self.stmt(depth, in_loop, top)).collect()
    }
    fn stmt(&mut self, depth: usize, in_loop: bool, top: bool) -> Stmt {
        let k = self.pick(10);
        match k {
            0..=2 => Stmt::Assign(self.pick(VARS), self.expr(3)),
            3 => Stmt::Predicated(self.cond(), self.pick(VARS), self.expr(2)),
            4 | 5 if depth > 0 => Stmt::If(
                self.cond(),
                self.block(depth - 1, in_loop, false),
                self.block(depth - 1, in_loop, false),
            ),
            6 if depth > 0 => Stmt::Loop(self.expr(2), self.block(depth - 1, true, false)),
            7 if in_loop => Stmt::Break(self.cond()),
            8 if in_loop => Stmt::Continue(self.cond()),
            9 if top => {
                if self.pick(2) == 0 {
                    Stmt::Shfl(self.pick(VARS), self.pick(VARS), self.pick(2) == 0)
                } else {
                    Stmt::Ballot(self.pick(VARS), self.cond())
                }
            }
            _ => Stmt::Assign(self.pick(VARS), self.expr(2)),
        }
    }
}

/// PTX emission. Registers: %v0..%v3 variables, %t tid, %e<N> expression temporaries,
/// %k<N> loop counters / bounds, %q<N> predicates.
struct Emit {
    out: String,
    tmp: usize,
    pred: usize,
    label: usize,
}

impl Emit {
    fn expr(&mut self, e: &Expr) -> String {
        let r = format!("%e{}", self.tmp);
        self.tmp += 1;
        match e {
            Expr::Var(v) => return format!("%v{v}"),
            Expr::Tid => return "%t".into(),
            Expr::Const(c) => self.out += &format!("mov.u32 {r}, {c};\n"),
            Expr::Add(a, b) => {
                let (a, b) = (self.expr(a), self.expr(b));
                self.out += &format!("add.u32 {r}, {a}, {b};\n");
            }
            Expr::Xor(a, b) => {
                let (a, b) = (self.expr(a), self.expr(b));
                self.out += &format!("xor.b32 {r}, {a}, {b};\n");
            }
            Expr::MulC(a, c) => {
                let a = self.expr(a);
                self.out += &format!("mul.lo.u32 {r}, {a}, {c};\n");
            }
            Expr::ShrC(a, c) => {
                let a = self.expr(a);
                self.out += &format!("shr.u32 {r}, {a}, {c};\n");
            }
        }
        r
    }
    fn cond(&mut self, c: &Cond) -> String {
        let p = format!("%q{}", self.pred);
        self.pred += 1;
        match c {
            Cond::MaskEq(e, m, v) => {
                let e = self.expr(e);
                let r = format!("%e{}", self.tmp);
                self.tmp += 1;
                self.out += &format!("and.b32 {r}, {e}, {m};\nsetp.eq.u32 {p}, {r}, {v};\n");
            }
            Cond::Lt(a, b) => {
                let (a, b) = (self.expr(a), self.expr(b));
                self.out += &format!("setp.lt.u32 {p}, {a}, {b};\n");
            }
        }
        p
    }
    fn label(&mut self, what: &str) -> String {
        self.label += 1;
        format!("$L_{what}_{}", self.label)
    }
    fn block(&mut self, b: &[Stmt], lp: Option<(&str, &str)>) {
        for s in b {
            self.stmt(s, lp);
        }
    }
    fn stmt(&mut self, s: &Stmt, lp: Option<(&str, &str)>) {
        match s {
            Stmt::Assign(v, e) => {
                let r = self.expr(e);
                self.out += &format!("mov.u32 %v{v}, {r};\n");
            }
            Stmt::Predicated(c, v, e) => {
                let r = self.expr(e);
                let p = self.cond(c);
                self.out += &format!("@{p} mov.u32 %v{v}, {r};\n");
            }
            Stmt::If(c, t, e) => {
                let p = self.cond(c);
                let (le, lend) = (self.label("else"), self.label("endif"));
                self.out += &format!("@!{p} bra {le};\n");
                self.block(t, lp);
                self.out += &format!("bra {lend};\n{le}:\n");
                self.block(e, lp);
                self.out += &format!("{lend}:\n");
            }
            Stmt::Loop(bound, body) => {
                let b = self.expr(bound);
                let k = self.tmp;
                self.tmp += 2;
                let (ltop, lcont, lexit) =
                    (self.label("loop"), self.label("cont"), self.label("exit"));
                self.out += &format!("and.b32 %e{}, {b}, 7;\nmov.u32 %e{k}, 0;\n{ltop}:\n", k + 1);
                let p = format!("%q{}", self.pred);
                self.pred += 1;
                self.out += &format!("setp.ge.u32 {p}, %e{k}, %e{};\n@{p} bra {lexit};\n", k + 1);
                self.block(body, Some((&lcont, &lexit)));
                self.out += &format!("{lcont}:\nadd.u32 %e{k}, %e{k}, 1;\nbra {ltop};\n{lexit}:\n");
            }
            Stmt::Break(c) => {
                let p = self.cond(c);
                self.out += &format!("@{p} bra {};\n", lp.expect("break inside a loop").1);
            }
            Stmt::Continue(c) => {
                let p = self.cond(c);
                self.out += &format!("@{p} bra {};\n", lp.expect("continue inside a loop").0);
            }
            Stmt::Shfl(dst, src, idx) => {
                let mode = if *idx {
                    "idx.b32 {d}, {s}, 0, 31"
                } else {
                    "bfly.b32 {d}, {s}, 1, 31"
                };
                let ins = mode
                    .replace("{d}", &format!("%v{dst}"))
                    .replace("{s}", &format!("%v{src}"));
                self.out += &format!("shfl.sync.{ins}, -1;\n");
            }
            Stmt::Ballot(dst, c) => {
                let p = self.cond(c);
                self.out += &format!("vote.sync.ballot.b32 %v{dst}, {p}, -1;\n");
            }
        }
    }
}

/// Host interpretation of all threads in lockstep per top-level statement (warp collectives
/// need every lane's values); nested statements are per thread.
fn eval_expr(e: &Expr, v: &[u32; VARS], tid: u32) -> u32 {
    match e {
        Expr::Var(i) => v[*i],
        Expr::Tid => tid,
        Expr::Const(c) => *c,
        Expr::Add(a, b) => eval_expr(a, v, tid).wrapping_add(eval_expr(b, v, tid)),
        Expr::Xor(a, b) => eval_expr(a, v, tid) ^ eval_expr(b, v, tid),
        Expr::MulC(a, c) => eval_expr(a, v, tid).wrapping_mul(*c),
        Expr::ShrC(a, c) => eval_expr(a, v, tid) >> c,
    }
}

fn eval_cond(c: &Cond, v: &[u32; VARS], tid: u32) -> bool {
    match c {
        Cond::MaskEq(e, m, x) => eval_expr(e, v, tid) & m == *x,
        Cond::Lt(a, b) => eval_expr(a, v, tid) < eval_expr(b, v, tid),
    }
}

enum Flow {
    Normal,
    Break,
    Continue,
}

fn run_thread(b: &[Stmt], v: &mut [u32; VARS], tid: u32) -> Flow {
    for s in b {
        match s {
            Stmt::Assign(i, e) => v[*i] = eval_expr(e, v, tid),
            Stmt::Predicated(c, i, e) => {
                let r = eval_expr(e, v, tid);
                if eval_cond(c, v, tid) {
                    v[*i] = r;
                }
            }
            Stmt::If(c, t, e) => {
                let f = if eval_cond(c, v, tid) {
                    run_thread(t, v, tid)
                } else {
                    run_thread(e, v, tid)
                };
                if !matches!(f, Flow::Normal) {
                    return f;
                }
            }
            Stmt::Loop(bound, body) => {
                let n = eval_expr(bound, v, tid) & 7;
                let mut k = 0;
                while k < n {
                    match run_thread(body, v, tid) {
                        Flow::Break => break,
                        Flow::Continue | Flow::Normal => {}
                    }
                    k += 1;
                }
            }
            Stmt::Break(c) => {
                if eval_cond(c, v, tid) {
                    return Flow::Break;
                }
            }
            Stmt::Continue(c) => {
                if eval_cond(c, v, tid) {
                    return Flow::Continue;
                }
            }
            Stmt::Shfl(..) | Stmt::Ballot(..) => unreachable!("warp collectives only at top level"),
        }
    }
    Flow::Normal
}

fn host_run(prog: &[Stmt], input: &[u32]) -> Vec<[u32; VARS]> {
    let mut regs: Vec<[u32; VARS]> = (0..THREADS)
        .map(|t| {
            let tid = (t % 64) as u32; // %tid.x in blocks of 64
            [tid, tid.wrapping_mul(7) + 3, input[t], 0]
        })
        .collect();
    for s in prog {
        match s {
            Stmt::Shfl(dst, src, idx) => {
                let old = regs.clone();
                for (t, r) in regs.iter_mut().enumerate() {
                    let from = if *idx { t / 32 * 32 } else { t ^ 1 };
                    r[*dst] = old[from][*src];
                }
            }
            Stmt::Ballot(dst, c) => {
                let preds: Vec<bool> = regs
                    .iter()
                    .enumerate()
                    .map(|(t, r)| eval_cond(c, r, t as u32 % 64))
                    .collect();
                for (t, r) in regs.iter_mut().enumerate() {
                    let w = t / 32 * 32;
                    r[*dst] = (0..32).fold(0, |m, l| m | (preds[w + l] as u32) << l);
                }
            }
            _ => {
                for (t, r) in regs.iter_mut().enumerate() {
                    run_thread(std::slice::from_ref(s), r, t as u32 % 64);
                }
            }
        }
    }
    regs
}

fn ptx_for(prog: &[Stmt]) -> String {
    let mut e = Emit {
        out: String::new(),
        tmp: 0,
        pred: 0,
        label: 0,
    };
    e.block(prog, None);
    let decls = format!(
        ".reg .b32 %v<{VARS}>;\n.reg .b32 %e<{}>;\n.reg .pred %q<{}>;\n",
        e.tmp.max(1),
        e.pred.max(1)
    );
    let body = format!(
        "{decls}mul.wide.u32 %rd1, %g, 4;\nadd.s64 %rd2, %a0, %rd1;\nld.global.u32 %v2, [%rd2];\nmov.u32 %v0, %t;\nmad.lo.u32 %v1, %t, 7, 3;\nmov.u32 %v3, 0;\n{}\
         mul.wide.u32 %rd3, %g, 16;\nadd.s64 %rd4, %a1, %rd3;\nst.global.v4.u32 [%rd4], {{%v0, %v1, %v2, %v3}};",
        e.out
    );
    ptx_module(&simple_entry("fuzz", 2, &body))
}

#[test]
fn random_structured_control_flow_matches_host() {
    let mut failures = Vec::new();
    let programs = 400;
    for seed in 0..programs {
        let mut g = Gen {
            rng: Rng(0xf00d + seed),
        };
        let prog = g.block(4, false, true);
        let ptx = ptx_for(&prog);
        let input: Vec<u32> = (0..THREADS as u32)
            .map(|i| i.wrapping_mul(2654435761) >> 8)
            .collect();
        let expect = host_run(&prog, &input);
        match run_buffers(
            &ptx,
            "fuzz",
            cfg1(2, 64),
            &[u32_bytes(&input), vec![0; THREADS * 16]],
        ) {
            Ok(out) => {
                let got = u32s(&out[1]);
                if let Some(t) = (0..THREADS).find(|&t| got[4 * t..4 * t + 4] != expect[t]) {
                    failures.push(format!(
                        "seed {seed}: thread {t}: expected {:?}, got {:?}\n{prog:#?}\n{ptx}",
                        expect[t],
                        &got[4 * t..4 * t + 4]
                    ));
                }
            }
            Err(e) => failures.push(format!("seed {seed}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {programs} programs differ; first:\n{}",
        failures.len(),
        failures[0]
    );
}
