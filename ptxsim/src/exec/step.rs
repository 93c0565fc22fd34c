//! The warp interpreter loop: picks the lowest-PC group of runnable lanes and executes it.

use super::block::{Block, Warp, NBAR};
use super::Counts;
use crate::error::{FaultKind, SimError};
use crate::ir::{BarOp, Kind, Opd, NOREG};
use crate::types::extend;

/// Divergent scheduling decisions in a row after which a warp round-robins over its groups.
const DIVERGED_LIMIT: u64 = 4096;
/// How many decisions each round-robin phase lasts.
const ROUND_ROBIN: u64 = 512;

/// Warp instructions a warp runs before the block scheduler moves on to the next warp.
const WARP_SLICE: u64 = 2048;

/// Deepest call nesting per thread before a fault.
const MAX_CALL_DEPTH: usize = 1024;

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

/// What the group does after an instruction.
enum Flow {
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
            // lowest-PC group; after a long divergent stretch, round-robin over the groups for
            // a while, so that lanes spinning on a lock held by another lane cannot starve it
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
            let alone = group == running;
            if alone {
                w.diverged = 0;
            } else {
                w.diverged += 1;
            }
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
                let em = if ins.guard == NOREG {
                    group
                } else {
                    let g = ins.guard as usize * 32;
                    let mut m = 0u32;
                    for (l, v) in w.regs[g..g + 32].iter().enumerate() {
                        m |= ((*v & 1) as u32) << l;
                    }
                    if ins.neg {
                        m = !m;
                    }
                    m & group
                };
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

    /// Executes one instruction for group `group` (guard-true lanes `em`) at `pc`.
    #[inline]
    fn exec(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
        k: &Kind,
    ) -> Result<Flow, SimError> {
        let syms = self.cx.syms;
        match k {
            Kind::Mov { d, s } => {
                let d = *d as usize * 32;
                for l in lanes(em) {
                    w.regs[d + l] = rd(&w.regs, syms, s, l);
                }
                Ok(Flow::Next)
            }
            Kind::Alu { f, m, d, s, n } => {
                let d = *d as usize * 32;
                let r = &mut w.regs;
                match n {
                    1 => {
                        for l in lanes(em) {
                            let v = [rd(r, syms, &s[0], l), 0, 0, 0];
                            r[d + l] = f(m, v);
                        }
                    }
                    2 => {
                        for l in lanes(em) {
                            let v = [rd(r, syms, &s[0], l), rd(r, syms, &s[1], l), 0, 0];
                            r[d + l] = f(m, v);
                        }
                    }
                    3 => {
                        for l in lanes(em) {
                            let v = [
                                rd(r, syms, &s[0], l),
                                rd(r, syms, &s[1], l),
                                rd(r, syms, &s[2], l),
                                0,
                            ];
                            r[d + l] = f(m, v);
                        }
                    }
                    _ => {
                        for l in lanes(em) {
                            let v = [
                                rd(r, syms, &s[0], l),
                                rd(r, syms, &s[1], l),
                                rd(r, syms, &s[2], l),
                                rd(r, syms, &s[3], l),
                            ];
                            r[d + l] = f(m, v);
                        }
                    }
                }
                Ok(Flow::Next)
            }
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
            } => {
                for l in lanes(em) {
                    let (av, bv) = (rd(&w.regs, syms, a, l), rd(&w.regs, syms, b, l));
                    let cv = c.map(|(c, neg, op)| ((rd(&w.regs, syms, &c, l) & 1 != 0) != neg, op));
                    let comb = |x: bool| match cv {
                        None => x,
                        Some((cv, crate::ir::BoolOp::And)) => x && cv,
                        Some((cv, crate::ir::BoolOp::Or)) => x || cv,
                        Some((cv, crate::ir::BoolOp::Xor)) => x ^ cv,
                    };
                    let lo = comb(f(m, av & 0xffff, bv & 0xffff));
                    let hi = comb(f(m, (av >> 16) & 0xffff, (bv >> 16) & 0xffff));
                    w.regs[*p as usize * 32 + l] = lo as u64;
                    if *q != NOREG {
                        w.regs[*q as usize * 32 + l] = hi as u64;
                    }
                }
                Ok(Flow::Next)
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
            } => {
                for l in lanes(em) {
                    let t = f(m, rd(&w.regs, syms, a, l), rd(&w.regs, syms, b, l));
                    let (r, nr) = match c {
                        None => (t, !t),
                        Some((c, neg, op)) => {
                            let cv = (rd(&w.regs, syms, c, l) & 1 != 0) != *neg;
                            let comb = |x: bool| match op {
                                crate::ir::BoolOp::And => x && cv,
                                crate::ir::BoolOp::Or => x || cv,
                                crate::ir::BoolOp::Xor => x ^ cv,
                            };
                            (comb(t), comb(!t))
                        }
                    };
                    let enc = |x: bool| -> u64 {
                        match set_ty {
                            None => x as u64,
                            Some(crate::types::Ty::F32) => {
                                if x {
                                    1.0f32.to_bits() as u64
                                } else {
                                    0
                                }
                            }
                            Some(t) => {
                                if x {
                                    extend(u64::MAX, t.bits(), t.is_signed())
                                } else {
                                    0
                                }
                            }
                        }
                    };
                    w.regs[*p as usize * 32 + l] = enc(r);
                    if *q != NOREG {
                        w.regs[*q as usize * 32 + l] = enc(nr);
                    }
                }
                Ok(Flow::Next)
            }
            Kind::Pack { d, s, n, w: wd } => {
                let fm = if *wd >= 64 {
                    u64::MAX
                } else {
                    (1u64 << wd) - 1
                };
                for l in lanes(em) {
                    let mut v = 0u64;
                    for (j, so) in s.iter().enumerate().take(*n as usize) {
                        v |= (rd(&w.regs, syms, so, l) & fm) << (j as u32 * *wd as u32);
                    }
                    w.regs[*d as usize * 32 + l] = v;
                }
                Ok(Flow::Next)
            }
            Kind::Unpack { d, n, w: wd, s } => {
                let fm = if *wd >= 64 {
                    u64::MAX
                } else {
                    (1u64 << wd) - 1
                };
                for l in lanes(em) {
                    let v = rd(&w.regs, syms, s, l);
                    for (j, dj) in d.iter().enumerate().take(*n as usize) {
                        if *dj != NOREG {
                            w.regs[*dj as usize * 32 + l] = (v >> (j as u32 * *wd as u32)) & fm;
                        }
                    }
                }
                Ok(Flow::Next)
            }
            Kind::Ld { .. } | Kind::St { .. } | Kind::Atom { .. } | Kind::CpAsync { .. } => {
                self.exec_mem(w, pc, em, k)?;
                Ok(Flow::Next)
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
                let cc = *cc as usize * 32;
                for l in lanes(em) {
                    let v = [
                        rd(&w.regs, syms, &s[0], l),
                        rd(&w.regs, syms, &s[1], l),
                        rd(&w.regs, syms, &s[2], l),
                    ];
                    let ci = if *cin { w.regs[cc + l] } else { 0 };
                    let (r, co) = crate::sem::int::carry_op(*op, *ty, v[0], v[1], v[2], ci);
                    w.regs[*d as usize * 32 + l] = crate::sem::int::norm(*ty, r);
                    if *cout {
                        w.regs[cc + l] = co;
                    }
                }
                Ok(Flow::Next)
            }
            Kind::Bra { t } => {
                if em == group {
                    return Ok(Flow::Jump(*t));
                }
                for l in lanes(group) {
                    w.pc[l] = if em >> l & 1 == 1 { *t } else { pc + 1 };
                }
                Ok(Flow::Resched)
            }
            Kind::Nop => Ok(Flow::Next),
            Kind::Exit => {
                self.exit_lanes(w, pc, group, em)?;
                Ok(Flow::Resched)
            }
            Kind::Ret => {
                let mut exiting = 0u32;
                for l in lanes(group) {
                    if em >> l & 1 == 0 {
                        w.pc[l] = pc + 1;
                        continue;
                    }
                    match w.stacks.get_mut(l).and_then(|s| s.pop()) {
                        None => exiting |= 1 << l,
                        Some(fr) => self.leave_call(w, l, fr),
                    }
                }
                if exiting != 0 {
                    self.exit_lanes(w, pc, exiting, exiting)?;
                }
                Ok(Flow::Resched)
            }
            Kind::Call { target, rets, .. } if *target == crate::ir::BUILTIN_IGNORE => {
                for l in lanes(em) {
                    for cp in rets {
                        self.local_zero(w, l, cp.to, cp.len);
                    }
                }
                Ok(Flow::Next)
            }
            Kind::Call {
                target, func, args, ..
            } => {
                for l in lanes(group) {
                    if em >> l & 1 == 0 {
                        w.pc[l] = pc + 1;
                        continue;
                    }
                    let copies: Vec<(u32, u32, u32)> =
                        args.iter().map(|c| (c.from, c.to, c.len)).collect();
                    self.enter_call(w, l, pc, *target, *func, &copies)?;
                }
                Ok(Flow::Resched)
            }
            Kind::CallInd { f, args, .. } => {
                for l in lanes(group) {
                    if em >> l & 1 == 0 {
                        w.pc[l] = pc + 1;
                        continue;
                    }
                    let addr = rd(&w.regs, syms, f, l);
                    let k = self.cx.k;
                    let id = addr
                        .checked_sub(crate::lower::FUNC_BASE)
                        .filter(|d| d % 16 == 0)
                        .and_then(|d| k.func_table.get((d / 16) as usize))
                        .copied()
                        .filter(|id| *id != u32::MAX);
                    let Some(id) = id else {
                        return Err(self
                            .fault(
                                FaultKind::InvalidControlFlow,
                                w,
                                l,
                                pc,
                                format!(
                                    "indirect call to {addr:#x}, which is not a function address"
                                ),
                            )
                            .into());
                    };
                    let fr = &k.frames[id as usize];
                    if fr.params.len() != args.len() {
                        return Err(self
                            .fault(
                                FaultKind::InvalidControlFlow,
                                w,
                                l,
                                pc,
                                format!(
                                    "indirect call with {} arguments to a function taking {}",
                                    args.len(),
                                    fr.params.len()
                                ),
                            )
                            .into());
                    }
                    let copies: Vec<(u32, u32, u32)> = args
                        .iter()
                        .zip(&fr.params)
                        .map(|(a, p)| (a.0, p.0, p.1))
                        .collect();
                    self.enter_call(w, l, pc, fr.pc, id, &copies)?;
                }
                Ok(Flow::Resched)
            }
            Kind::Trap => {
                if em != 0 {
                    let l = em.trailing_zeros() as usize;
                    return Err(self
                        .fault(
                            FaultKind::Trap,
                            w,
                            l,
                            pc,
                            "trap instruction executed".into(),
                        )
                        .into());
                }
                Ok(Flow::Next)
            }
            Kind::Clock { d, mul, bits } => {
                let mut v = self.steps.wrapping_mul(*mul);
                if *bits == 32 {
                    v &= 0xffff_ffff;
                }
                for l in lanes(em) {
                    w.regs[*d as usize * 32 + l] = v;
                }
                Ok(Flow::Next)
            }
            Kind::Activemask { d } => {
                for l in lanes(em) {
                    w.regs[*d as usize * 32 + l] = group as u64;
                }
                Ok(Flow::Next)
            }
            Kind::Bar {
                op, id, cnt, src, ..
            } => {
                for l in lanes(group & !em) {
                    w.pc[l] = pc + 1;
                }
                if em == 0 {
                    return Ok(Flow::Resched);
                }
                let l0 = em.trailing_zeros() as usize;
                let bid = rd(&w.regs, syms, id, l0) as usize;
                if bid >= NBAR {
                    return Err(self
                        .fault(
                            FaultKind::BarrierDivergence,
                            w,
                            l0,
                            pc,
                            format!("barrier id {bid} out of range (0..16)"),
                        )
                        .into());
                }
                let expected = match cnt {
                    Some(c) => rd(&w.regs, syms, c, l0) as u32,
                    None => self.nthreads,
                };
                if cnt.is_some()
                    && (expected & 31 != 0 || expected == 0)
                    && expected < self.nthreads
                {
                    return Err(self
                        .fault(
                            FaultKind::BarrierDivergence,
                            w,
                            l0,
                            pc,
                            format!(
                                "barrier thread count {expected} is not a positive multiple of 32"
                            ),
                        )
                        .into());
                }
                if let Some((s, neg)) = src {
                    let b = &mut self.bars[bid];
                    if b.arrived == 0 {
                        b.red = 0;
                        b.red_and = true;
                    }
                    for l in lanes(em) {
                        let v = (rd(&w.regs, syms, s, l) & 1 != 0) != *neg;
                        b.red += v as u32;
                        b.red_and &= v;
                    }
                }
                let n = em.count_ones();
                let line = self.line_of(pc);
                if *op == BarOp::Arrive {
                    for l in lanes(em) {
                        w.pc[l] = pc + 1;
                    }
                    if self.bar_arrive(bid, n, expected, line) {
                        self.bar_release(bid, w);
                    }
                    return Ok(Flow::Resched);
                }
                for l in lanes(em) {
                    w.bar_wait |= 1 << l;
                    w.bar_of[l] = bid as u8;
                }
                if self.bar_arrive(bid, n, expected, line) {
                    self.bar_release(bid, w);
                }
                Ok(Flow::Resched)
            }
            Kind::Sync { op, mask } => {
                self.warp_sync(w, pc, group, em, op, mask)?;
                Ok(Flow::Resched)
            }
        }
    }

    /// Enters function `func` at `target` for lane `l`, copying `(from, to, len)` argument
    /// bytes; saves the callee's state first if the call is recursive.
    fn enter_call(
        &mut self,
        w: &mut Warp,
        l: usize,
        pc: u32,
        target: u32,
        func: u32,
        copies: &[(u32, u32, u32)],
    ) -> Result<(), SimError> {
        if w.stacks[l].len() >= MAX_CALL_DEPTH {
            return Err(self
                .fault(
                    FaultKind::InvalidControlFlow,
                    w,
                    l,
                    pc,
                    format!("call depth exceeds {MAX_CALL_DEPTH} (runaway recursion?)"),
                )
                .into());
        }
        let vals: Vec<Vec<u8>> = copies
            .iter()
            .map(|c| self.local_bytes(w, l, c.0, c.2))
            .collect();
        let recursive = w.stacks[l].iter().any(|f| f.func == func);
        let saved = if recursive {
            Some(Box::new(self.save_frame(w, l, func)))
        } else {
            None
        };
        for (c, v) in copies.iter().zip(vals) {
            self.local_set(w, l, c.1, &v);
        }
        w.stacks[l].push(super::block::Frame {
            ret: pc + 1,
            func,
            saved,
        });
        w.pc[l] = target;
        Ok(())
    }

    /// Returns from the call `fr` for lane `l`: copies results, restores saved state.
    fn leave_call(&mut self, w: &mut Warp, l: usize, fr: super::block::Frame) {
        let k = self.cx.k;
        let copies: Vec<(u32, u32, u32)> = match k.code.get(fr.ret as usize - 1).map(|i| &i.kind) {
            Some(Kind::Call { rets, .. }) => rets.iter().map(|c| (c.from, c.to, c.len)).collect(),
            Some(Kind::CallInd { rets, .. }) => k.frames[fr.func as usize]
                .rets
                .iter()
                .zip(rets)
                .map(|(cr, r)| (cr.0, r.0, cr.1))
                .collect(),
            _ => Vec::new(),
        };
        let vals: Vec<Vec<u8>> = copies
            .iter()
            .map(|c| self.local_bytes(w, l, c.0, c.2))
            .collect();
        if let Some(saved) = fr.saved {
            self.restore_frame(w, l, fr.func, *saved);
        }
        for (c, v) in copies.iter().zip(vals) {
            self.local_set(w, l, c.1, &v);
        }
        w.pc[l] = fr.ret;
    }

    /// Marks lanes `em` as exited (others of `group` continue at pc+1) and checks that no
    /// lane waits on them in a warp-synchronous instruction.
    fn exit_lanes(&mut self, w: &mut Warp, pc: u32, group: u32, em: u32) -> Result<(), SimError> {
        for l in lanes(group & !em) {
            w.pc[l] = pc + 1;
        }
        w.exited |= em;
        if w.sync_wait != 0 {
            for l in lanes(w.sync_wait) {
                if w.sync_mask[l] & em != 0 {
                    let gone = w.sync_mask[l] & em;
                    return Err(self
                        .fault(
                            FaultKind::ShflMaskLane,
                            w,
                            l,
                            w.pc[l],
                            format!(
                                "member mask {:#010x} names lane {} which exited (at PTX line {}) without reaching this instruction",
                                w.sync_mask[l],
                                gone.trailing_zeros(),
                                self.line_of(pc)
                            ),
                        )
                        .into());
                }
            }
        }
        Ok(())
    }
}
