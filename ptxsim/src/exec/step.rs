//! The warp interpreter loop: picks the lowest-PC group of runnable lanes and executes it.
//!
//! [`Block::exec`] is the instruction table of the executor: one line per instruction kind.
//! Register instructions run here as per-lane loops ([`set_lanes`], [`set_lanes2`]) around the
//! pure functions of `sem/` (the [`Kind::Alu`] function pointer chosen by the lowering, or a
//! named `sem` function); memory instructions are in `memops.rs`, control flow in `control.rs`,
//! barriers and warp-synchronous instructions in `sync.rs`.

use super::block::{Block, Warp};
use super::{regops, Counts};
use crate::error::{FaultKind, SimError};
use crate::ir::{Instr, Kind, Opd, NOREG};
use crate::sem::{cmp as scmp, int as sint};

/// Divergent scheduling decisions in a row after which a warp round-robins over its groups.
const DIVERGED_LIMIT: u64 = 4096;
/// How many decisions each round-robin phase lasts.
const ROUND_ROBIN: u64 = 512;

/// Warp instructions a warp runs before the block scheduler moves on to the next warp.
const WARP_SLICE: u64 = 2048;
/// Microseconds a worker sleeps at a `nanosleep` of a cooperative launch.
const COOPERATIVE_NAP_US: u64 = 20;

/// Reads operand `o` for lane `l`.
#[inline(always)]
pub(crate) fn rd(regs: &[u64], syms: &[u64], o: &Opd, l: usize) -> u64 {
    match *o {
        Opd::Reg(r) => regs[r as usize * 32 + l],
        Opd::Imm(v) => v,
        Opd::Sym(i, off) => syms
            .get(i as usize)
            .copied()
            .unwrap_or(0)
            .wrapping_add(off as u64),
    }
}

/// Reads predicate operand `o` for lane `l`, negated if `neg`.
#[inline(always)]
pub(crate) fn rd_pred(regs: &[u64], syms: &[u64], o: &Opd, neg: bool, l: usize) -> bool {
    (rd(regs, syms, o, l) & 1 != 0) != neg
}

/// Iterates the set bits of a lane mask.
#[inline(always)]
pub(crate) fn lanes(mut m: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let l = m.trailing_zeros() as usize;
            m &= m - 1;
            Some(l)
        }
    })
}

/// For every lane `l` of `em`, lane by lane: `regs[d][l] = f(regs, l)`.
#[inline(always)]
pub(crate) fn set_lanes(regs: &mut [u64], em: u32, d: u32, f: impl Fn(&[u64], usize) -> u64) {
    let d = d as usize * 32;
    for l in lanes(em) {
        let v = f(regs, l);
        regs[d + l] = v;
    }
}

/// For every lane `l` of `em`, lane by lane: `(regs[p][l], regs[q][l]) = f(regs, l)`; no second
/// write when `q` is `NOREG`.
#[inline(always)]
pub(crate) fn set_lanes2(
    regs: &mut [u64],
    em: u32,
    p: u32,
    q: u32,
    f: impl Fn(&[u64], usize) -> (u64, u64),
) {
    let p = p as usize * 32;
    let q = (q != NOREG).then_some(q as usize * 32);
    for l in lanes(em) {
        let (a, b) = f(regs, l);
        regs[p + l] = a;
        if let Some(q) = q {
            regs[q + l] = b;
        }
    }
}

/// What the group does after an instruction.
pub(crate) enum Flow {
    /// All lanes of the group continue at pc+1.
    Next,
    /// Lanes' PCs were set individually (branch, exit, wait); reschedule.
    Resched,
    /// Uniform jump of the whole group.
    Jump(u32),
}

impl Block<'_, '_> {
    /// Runs warp `w` until none of its lanes can run.
    pub(crate) fn run_warp(&mut self, w: &mut Warp, c: &mut Counts) -> Result<(), SimError> {
        let code = &self.cx.k.code;
        let max = self.cx.max_steps;
        // time slice: let the other warps of the block run now and then, so that a warp
        // spinning on a flag another warp sets does not starve it
        let slice_end = self.steps + WARP_SLICE;
        loop {
            let running = w.running();
            if running == 0 {
                return Ok(());
            }
            let (mut pc, group) = pick_group(w, running);
            let alone = group == running;
            // run the group while it stays the whole set of runnable lanes
            loop {
                self.steps += 1;
                if self.steps > max {
                    return Err(SimError::StepLimit {
                        kernel: self.cx.k.name.clone(),
                        steps: max,
                    });
                }
                c.warp_instructions += 1;
                c.thread_instructions += group.count_ones() as u64;
                let Some(ins) = code.get(pc as usize) else {
                    let l = group.trailing_zeros() as usize;
                    return Err(self
                        .fault(
                            FaultKind::InvalidControlFlow,
                            w,
                            l,
                            pc.saturating_sub(1),
                            "execution ran past the end of the code".into(),
                        )
                        .into());
                };
                let em = guard_mask(w, ins, group);
                if let Some(e) = self.ev.as_deref_mut() {
                    e.instruction(pc, em.count_ones());
                }
                if !ins.kind.is_simple() {
                    for l in lanes(group) {
                        w.pc[l] = pc;
                    }
                }
                match self.exec(w, pc, group, em, &ins.kind)? {
                    Flow::Next => pc += 1,
                    Flow::Jump(t) => pc = t,
                    Flow::Resched => break,
                }
                if !alone || self.steps >= slice_end {
                    for l in lanes(group) {
                        w.pc[l] = pc;
                    }
                    if self.steps >= slice_end {
                        return Ok(());
                    }
                    break;
                }
            }
        }
    }

    /// Executes one instruction for group `group` (guard-true lanes `em`) at `pc`: the
    /// instructions that change control flow or wait here, all others in [`Block::exec_simple`].
    #[inline]
    fn exec(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
        k: &Kind,
    ) -> Result<Flow, SimError> {
        match k {
            Kind::Bra { t } => Ok(self.bra(w, pc, group, em, *t)),
            Kind::Exit => self.exit(w, pc, group, em),
            Kind::Ret => self.ret(w, pc, group, em),
            Kind::Call { target, rets, .. } if *target == crate::ir::BUILTIN_IGNORE => {
                self.call_ignored(w, em, rets)
            }
            Kind::Call {
                target, func, args, ..
            } => self.call(w, pc, group, em, *target, *func, args),
            Kind::CallInd { f, args, .. } => self.call_ind(w, pc, group, em, f, args),
            Kind::Trap => self.trap(w, pc, em),
            Kind::Bar {
                op, id, cnt, src, ..
            } => self.bar(w, pc, group, em, *op, id, cnt, src),
            Kind::Sync { op, mask } => self.warp_sync(w, pc, group, em, op, mask),
            _ => {
                self.exec_simple(w, pc, group, em, k)?;
                Ok(Flow::Next)
            }
        }
    }

    /// Executes an instruction after which every lane of the group continues at pc+1
    /// ([`Kind::is_simple`]).
    #[inline(always)]
    fn exec_simple(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
        k: &Kind,
    ) -> Result<(), SimError> {
        let syms = self.cx.syms;
        let regs = &mut w.regs[..];
        match k {
            Kind::Mov { d, s } => set_lanes(regs, em, *d, |r, l| rd(r, syms, s, l)),
            Kind::Alu { f, m, d, s, n } => {
                regops::alu(regs, syms, em, (*f, m), *d, &s[..*n as usize])
            }
            Kind::Setp {
                f,
                m,
                p,
                q,
                a,
                b,
                c,
                set_ty,
                packed: false,
            } => set_lanes2(regs, em, *p, *q, |r, l| {
                let c = c.map(|(c, neg, op)| (rd_pred(r, syms, &c, neg, l), op));
                scmp::setp(*f, m, rd(r, syms, a, l), rd(r, syms, b, l), c, *set_ty)
            }),
            Kind::Setp {
                f,
                m,
                p,
                q,
                a,
                b,
                c,
                packed: true,
                ..
            } => set_lanes2(regs, em, *p, *q, |r, l| {
                let c = c.map(|(c, neg, op)| (rd_pred(r, syms, &c, neg, l), op));
                scmp::setp_x2(*f, m, rd(r, syms, a, l), rd(r, syms, b, l), c)
            }),
            Kind::Pack { d, s, n, w: wd } => set_lanes(regs, em, *d, |r, l| {
                let fields = s[..*n as usize].iter().map(|o| rd(r, syms, o, l));
                sint::pack(fields, *wd)
            }),
            Kind::Unpack { d, n, w: wd, s } => {
                regops::unpack(regs, syms, em, &d[..*n as usize], *wd, s)
            }
            Kind::Carry {
                op,
                ty,
                d,
                s,
                cc,
                cin,
                cout,
            } => {
                let q = if *cout { *cc } else { NOREG };
                set_lanes2(regs, em, *d, q, |r, l| {
                    let ci = if *cin { r[*cc as usize * 32 + l] } else { 0 };
                    let [a, b, c] = s.map(|o| rd(r, syms, &o, l));
                    let (v, co) = sint::carry_op(*op, *ty, a, b, c, ci);
                    (sint::norm(*ty, v), co)
                })
            }
            Kind::Clock { d, mul, bits } => {
                let v = sint::clock(self.steps, *mul, *bits);
                set_lanes(regs, em, *d, |_, _| v)
            }
            Kind::Activemask { d } => set_lanes(regs, em, *d, |_, _| group as u64),
            Kind::Ld { .. } | Kind::St { .. } | Kind::Atom { .. } | Kind::CpAsync { .. } => {
                self.exec_mem(w, pc, em, k)?
            }
            Kind::Nop => {}
            Kind::Fence => std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst),
            Kind::Sleep => {
                if self.cx.cooperative {
                    if self.cx.failed.load(std::sync::atomic::Ordering::Relaxed) {
                        return Err(SimError::Abandoned);
                    }
                    std::thread::sleep(std::time::Duration::from_micros(COOPERATIVE_NAP_US));
                }
            }
            // not simple: executed by `exec`
            Kind::Bra { .. }
            | Kind::Exit
            | Kind::Ret
            | Kind::Call { .. }
            | Kind::CallInd { .. }
            | Kind::Trap
            | Kind::Bar { .. }
            | Kind::Sync { .. } => {}
        }
        Ok(())
    }
}

/// The group to run next: the lanes at the lowest PC; after a long divergent stretch,
/// round-robin over the groups for a while, so that lanes spinning on a lock held by another
/// lane cannot starve it. Updates the warp's divergence bookkeeping.
#[inline]
fn pick_group(w: &mut Warp, running: u32) -> (u32, u32) {
    let mut pc = u32::MAX;
    for l in lanes(running) {
        pc = pc.min(w.pc[l]);
    }
    if w.diverged > DIVERGED_LIMIT && w.diverged % DIVERGED_LIMIT < ROUND_ROBIN {
        let mut next = u32::MAX;
        for l in lanes(running) {
            if w.pc[l] > w.last_pc {
                next = next.min(w.pc[l]);
            }
        }
        if next != u32::MAX {
            pc = next;
        }
    }
    w.last_pc = pc;
    let mut group = 0u32;
    for l in lanes(running) {
        if w.pc[l] == pc {
            group |= 1 << l;
        }
    }
    if group == running {
        w.diverged = 0;
    } else {
        w.diverged += 1;
    }
    (pc, group)
}

/// The lanes of `group` whose guard predicate is true.
#[inline(always)]
fn guard_mask(w: &Warp, ins: &Instr, group: u32) -> u32 {
    if ins.guard == NOREG {
        return group;
    }
    let g = ins.guard as usize * 32;
    let mut m = 0u32;
    for (l, v) in w.regs[g..g + 32].iter().enumerate() {
        m |= ((*v & 1) as u32) << l;
    }
    if ins.neg {
        m = !m;
    }
    m & group
}
