//! Control-flow instructions: `bra`, `exit`, `ret`, `call` (direct, indirect, ignored
//! `vprintf`) and `trap`, plus the call stack (argument and result copies, saving a recursive
//! callee's registers and local memory).

use super::block::{Block, Frame, Warp};
use super::step::{lanes, rd, Flow};
use crate::error::{FaultKind, SimError};
use crate::ir::{Copy3, Kind};

/// Deepest call nesting per thread before a fault.
const MAX_CALL_DEPTH: usize = 1024;

impl Block<'_, '_> {
    /// `bra t`: a uniform jump when every lane of the group takes it, else the group splits.
    pub(crate) fn bra(&mut self, w: &mut Warp, pc: u32, group: u32, em: u32, t: u32) -> Flow {
        if em == group {
            return Flow::Jump(t);
        }
        for l in lanes(group) {
            w.pc[l] = if em >> l & 1 == 1 { t } else { pc + 1 };
        }
        Flow::Resched
    }

    /// `exit`: lanes `em` end.
    pub(crate) fn exit(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
    ) -> Result<Flow, SimError> {
        self.exit_lanes(w, pc, group, em)?;
        Ok(Flow::Resched)
    }

    /// `ret`: lanes `em` return from their call, or end if they are in the entry.
    pub(crate) fn ret(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
    ) -> Result<Flow, SimError> {
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

    /// A call of an ignored external function (`vprintf`): its results are zero.
    pub(crate) fn call_ignored(
        &mut self,
        w: &mut Warp,
        em: u32,
        rets: &[Copy3],
    ) -> Result<Flow, SimError> {
        for l in lanes(em) {
            for cp in rets {
                self.local_zero(w, l, cp.to, cp.len);
            }
        }
        Ok(Flow::Next)
    }

    /// A direct call of function `func` at `target`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn call(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
        target: u32,
        func: u32,
        args: &[Copy3],
    ) -> Result<Flow, SimError> {
        for l in lanes(group) {
            if em >> l & 1 == 0 {
                w.pc[l] = pc + 1;
                continue;
            }
            let copies: Vec<(u32, u32, u32)> = args.iter().map(|c| (c.from, c.to, c.len)).collect();
            self.enter_call(w, l, pc, target, func, &copies)?;
        }
        Ok(Flow::Resched)
    }

    /// An indirect call through the function address in operand `f`; `args` are the caller's
    /// (offset, size) argument slots.
    pub(crate) fn call_ind(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
        f: &crate::ir::Opd,
        args: &[(u32, u32)],
    ) -> Result<Flow, SimError> {
        for l in lanes(group) {
            if em >> l & 1 == 0 {
                w.pc[l] = pc + 1;
                continue;
            }
            let addr = rd(&w.regs, self.cx.syms, f, l);
            let id = self.callee_of(w, l, pc, addr)?;
            let k = self.cx.k;
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

    /// The function (frame id) whose address is `addr`, or a fault for lane `l`.
    fn callee_of(&self, w: &Warp, l: usize, pc: u32, addr: u64) -> Result<u32, SimError> {
        let k = self.cx.k;
        addr.checked_sub(crate::lower::FUNC_BASE)
            .filter(|d| d % 16 == 0)
            .and_then(|d| k.func_table.get((d / 16) as usize))
            .copied()
            .filter(|id| *id != u32::MAX)
            .ok_or_else(|| {
                self.fault(
                    FaultKind::InvalidControlFlow,
                    w,
                    l,
                    pc,
                    format!("indirect call to {addr:#x}, which is not a function address"),
                )
                .into()
            })
    }

    /// `trap`/`brkpt`: a fault if any lane executes it.
    pub(crate) fn trap(&mut self, w: &mut Warp, pc: u32, em: u32) -> Result<Flow, SimError> {
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
        w.stacks[l].push(Frame {
            ret: pc + 1,
            func,
            saved,
        });
        w.pc[l] = target;
        Ok(())
    }

    /// Returns from the call `fr` for lane `l`: copies results, restores saved state.
    fn leave_call(&mut self, w: &mut Warp, l: usize, fr: Frame) {
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
