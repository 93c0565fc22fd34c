//! The warp interpreter loop: picks the lowest-PC group of runnable lanes and executes it.

use super::block::{Block, Warp, NBAR};
use super::mem::{Dir, Loc};
use super::Counts;
use crate::error::{FaultKind, SimError};
use crate::ir::{BarOp, Kind, Opd, NOREG};
use crate::sem::atom::atom_new;
use crate::types::extend;

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
        loop {
            let running = w.running();
            if running == 0 {
                return Ok(());
            }
            // lowest-PC group
            let mut pc = u32::MAX;
            for l in lanes(running) {
                pc = pc.min(w.pc[l]);
            }
            let mut group = 0u32;
            for l in lanes(running) {
                if w.pc[l] == pc {
                    group |= 1 << l;
                }
            }
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
                let em = if ins.guard == NOREG {
                    group
                } else {
                    let g = ins.guard as usize * 32;
                    let mut m = 0u32;
                    for l in lanes(group) {
                        if (w.regs[g + l] & 1 != 0) != ins.neg {
                            m |= 1 << l;
                        }
                    }
                    m
                };
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
                if !alone {
                    for l in lanes(group) {
                        w.pc[l] = pc;
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
            Kind::Alu { f, m, d, s } => {
                let d = *d as usize * 32;
                for l in lanes(em) {
                    let v = [
                        rd(&w.regs, syms, &s[0], l),
                        rd(&w.regs, syms, &s[1], l),
                        rd(&w.regs, syms, &s[2], l),
                        rd(&w.regs, syms, &s[3], l),
                    ];
                    w.regs[d + l] = f(m, v);
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
            Kind::Ld {
                sp,
                sz,
                sext,
                n,
                d,
                a,
                off,
            } => {
                let (sz, n) = (*sz as usize, *n as usize);
                for l in lanes(em) {
                    let addr = rd(&w.regs, syms, a, l).wrapping_add(*off as u64);
                    let loc = self.loc(*sp, addr);
                    let mut vals = [0u64; 4];
                    if let Loc::Global(ga) = loc {
                        self.global_load(w, l, pc, ga, sz, n, &mut vals)?;
                    } else {
                        self.check_access(w, l, pc, loc, sz * n, Dir::Load)?;
                        for (j, v) in vals.iter_mut().enumerate().take(n) {
                            *v = self.load(w, l, pc, offset_loc(loc, (j * sz) as u64), sz)?;
                        }
                    }
                    if *sext {
                        for v in vals.iter_mut().take(n) {
                            *v = extend(*v, sz as u32 * 8, true);
                        }
                    }
                    for j in 0..n {
                        if d[j] != NOREG {
                            w.regs[d[j] as usize * 32 + l] = vals[j];
                        }
                    }
                }
                Ok(Flow::Next)
            }
            Kind::St {
                sp,
                sz,
                n,
                s,
                a,
                off,
            } => {
                let (sz, n) = (*sz as usize, *n as usize);
                for l in lanes(em) {
                    let addr = rd(&w.regs, syms, a, l).wrapping_add(*off as u64);
                    let loc = self.loc(*sp, addr);
                    let mut vals = [0u64; 4];
                    for (v, so) in vals.iter_mut().zip(s.iter()).take(n) {
                        *v = rd(&w.regs, syms, so, l);
                    }
                    if let Loc::Global(ga) = loc {
                        self.global_store(w, l, pc, ga, sz, n, &vals)?;
                    } else {
                        self.check_access(w, l, pc, loc, sz * n, Dir::Store)?;
                        for (j, v) in vals.iter().enumerate().take(n) {
                            self.store(w, l, pc, offset_loc(loc, (j * sz) as u64), sz, *v)?;
                        }
                    }
                }
                Ok(Flow::Next)
            }
            Kind::Atom {
                sp,
                op,
                ty,
                d,
                a,
                off,
                b,
                c,
            } => {
                let sz = ty.bytes() as usize;
                for l in lanes(em) {
                    let addr = rd(&w.regs, syms, a, l).wrapping_add(*off as u64);
                    let loc = self.loc(*sp, addr);
                    let bv = rd(&w.regs, syms, b, l);
                    let cv = rd(&w.regs, syms, c, l);
                    let (op, ty) = (*op, *ty);
                    let old =
                        self.atomic(w, l, pc, loc, sz, &|old| atom_new(op, ty, old, bv, cv))?;
                    if *d != NOREG {
                        w.regs[*d as usize * 32 + l] = extend(old, ty.bits(), ty.is_signed());
                    }
                }
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
            Kind::CpAsync {
                dst,
                doff,
                src,
                soff,
                size,
                src_size,
            } => {
                let size = *size as usize;
                for l in lanes(em) {
                    let s = rd(&w.regs, syms, src, l).wrapping_add(*soff as u64);
                    let d = rd(&w.regs, syms, dst, l).wrapping_add(*doff as u64);
                    let n = match src_size {
                        Some(o) => (rd(&w.regs, syms, o, l) as usize).min(size),
                        None => size,
                    };
                    let mut bytes = [0u8; 16];
                    let sloc = self.loc(crate::types::Space::Global, s);
                    if n == size {
                        let mut v = [0u64; 4];
                        self.global_load(w, l, pc, s, 4, size / 4, &mut v)?;
                        for (j, x) in v.iter().enumerate().take(size / 4) {
                            bytes[4 * j..4 * j + 4].copy_from_slice(&(*x as u32).to_le_bytes());
                        }
                    } else {
                        for (j, b) in bytes.iter_mut().enumerate().take(n) {
                            *b = self.load(w, l, pc, offset_loc(sloc, j as u64), 1)? as u8;
                        }
                    }
                    let dloc = self.loc(crate::types::Space::Shared, d);
                    self.check_access(w, l, pc, dloc, size, Dir::Store)?;
                    for j in 0..size / 4 {
                        let v = u32::from_le_bytes(
                            bytes[4 * j..4 * j + 4].try_into().unwrap_or([0; 4]),
                        );
                        self.store(w, l, pc, offset_loc(dloc, 4 * j as u64), 4, v as u64)?;
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

#[inline]
fn offset_loc(l: super::mem::Loc, d: u64) -> super::mem::Loc {
    use super::mem::Loc;
    match l {
        Loc::Global(a) => Loc::Global(a + d),
        Loc::Shared(a) => Loc::Shared(a + d),
        Loc::Local(a) => Loc::Local(a + d),
        Loc::Param(a) => Loc::Param(a + d),
    }
}
