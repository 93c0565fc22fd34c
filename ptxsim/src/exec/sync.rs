//! Block barriers (`bar.sync`/`barrier.sync`, `bar.arrive`, `bar.red`) and warp-synchronous
//! instructions: shfl.sync, vote.sync, bar.warp.sync, redux.sync, elect.sync, match.sync.
//!
//! A lane at a block barrier waits until the barrier's thread count has arrived. A lane at a
//! warp-synchronous instruction waits until every lane named in its member mask has arrived at
//! the same instruction; then all waiting lanes execute it together (one function per
//! instruction below, called from [`Block::sync_exec`]).

use super::block::{Block, Warp, NBAR};
use super::step::{lanes, rd, rd_pred, Flow};
use crate::error::{FaultKind, SimError};
use crate::ir::{BarOp, Opd, ReduxOp, ShflMode, SyncOp, VoteMode, NOREG};

impl Block<'_, '_> {
    /// `bar.sync`, `bar.arrive`, `bar.red`: lanes `em` arrive at barrier `id` (expecting `cnt`
    /// threads, default the whole block); `bar.red` also accumulates the predicate `src`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bar(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
        op: BarOp,
        id: &Opd,
        cnt: &Option<Opd>,
        src: &Option<(Opd, bool)>,
    ) -> Result<Flow, SimError> {
        for l in lanes(group & !em) {
            w.pc[l] = pc + 1;
        }
        if em == 0 {
            return Ok(Flow::Resched);
        }
        let (bid, expected) = self.bar_target(w, pc, em, id, cnt)?;
        if let Some((s, neg)) = src {
            let b = &mut self.bars[bid];
            if b.arrived == 0 {
                b.red = 0;
                b.red_and = true;
            }
            for l in lanes(em) {
                let v = rd_pred(&w.regs, self.cx.syms, s, *neg, l);
                b.red += v as u32;
                b.red_and &= v;
            }
        }
        let n = em.count_ones();
        let line = self.line_of(pc);
        if op == BarOp::Arrive {
            for l in lanes(em) {
                w.pc[l] = pc + 1;
            }
        } else {
            for l in lanes(em) {
                w.bar_wait |= 1 << l;
                w.bar_of[l] = bid as u8;
            }
        }
        if self.bar_arrive(bid, n, expected, line) {
            self.bar_release(bid, w);
        }
        Ok(Flow::Resched)
    }

    /// The barrier index and expected thread count of a `bar` executed by lanes `em`, checked.
    fn bar_target(
        &self,
        w: &Warp,
        pc: u32,
        em: u32,
        id: &Opd,
        cnt: &Option<Opd>,
    ) -> Result<(usize, u32), SimError> {
        let syms = self.cx.syms;
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
        if cnt.is_some() && (expected & 31 != 0 || expected == 0) && expected < self.nthreads {
            return Err(self
                .fault(
                    FaultKind::BarrierDivergence,
                    w,
                    l0,
                    pc,
                    format!("barrier thread count {expected} is not a positive multiple of 32"),
                )
                .into());
        }
        Ok((bid, expected))
    }

    /// A warp-synchronous instruction `op` with member mask `mask`: lanes `em` wait for their
    /// mask; when everyone named has arrived, all waiting lanes execute it and continue.
    pub(crate) fn warp_sync(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
        op: &SyncOp,
        mask: &Opd,
    ) -> Result<Flow, SimError> {
        let syms = self.cx.syms;
        for l in lanes(group & !em) {
            w.pc[l] = pc + 1;
        }
        for l in lanes(em) {
            let m = rd(&w.regs, syms, mask, l) as u32;
            let bad = |why: String| -> SimError {
                self.fault(
                    FaultKind::ShflMaskLane,
                    w,
                    l,
                    pc,
                    format!("member mask {m:#010x}: {why}"),
                )
                .into()
            };
            if m >> l & 1 == 0 {
                return Err(bad(format!(
                    "executing lane {l} is not in its own member mask"
                )));
            }
            if m & !w.valid != 0 {
                let j = (m & !w.valid).trailing_zeros();
                return Err(bad(format!(
                    "names lane {j}, which does not exist (the block has {} threads)",
                    self.nthreads
                )));
            }
            if m & w.exited != 0 {
                let j = (m & w.exited).trailing_zeros();
                return Err(bad(format!("names lane {j}, which has exited")));
            }
            w.sync_mask[l] = m;
            w.pc[l] = pc;
        }
        w.sync_wait |= em;
        // complete? bar.warp.sync waits for lanes at any bar.warp.sync; the others for lanes
        // at this very instruction.
        let code = &self.cx.k.code;
        let is_barwarp = |p: u32| {
            matches!(
                code.get(p as usize).map(|i| &i.kind),
                Some(crate::ir::Kind::Sync {
                    op: SyncOp::BarWarp,
                    ..
                })
            )
        };
        let bw = matches!(op, SyncOp::BarWarp);
        let mut waiting = 0u32;
        for l in lanes(w.sync_wait) {
            if w.pc[l] == pc || (bw && is_barwarp(w.pc[l])) {
                waiting |= 1 << l;
            }
        }
        for l in lanes(waiting) {
            if w.sync_mask[l] & !waiting != 0 {
                return Ok(Flow::Resched); // someone still missing
            }
        }
        self.sync_exec(w, pc, waiting, op)?;
        if let Some(e) = self.ev.as_deref_mut() {
            e.warp_sync(w.id, waiting);
        }
        w.sync_wait &= !waiting;
        for l in lanes(waiting) {
            w.pc[l] += 1;
        }
        Ok(Flow::Resched)
    }

    /// Executes a warp-synchronous instruction for participating lanes `part`.
    fn sync_exec(&mut self, w: &mut Warp, pc: u32, part: u32, op: &SyncOp) -> Result<(), SimError> {
        let syms = self.cx.syms;
        let r = &mut w.regs;
        match op {
            SyncOp::BarWarp => {}
            SyncOp::Shfl {
                mode,
                d,
                p,
                a,
                b,
                c,
            } => {
                let out = shfl(r, syms, part, *mode, [a, b, c])
                    .map_err(|(l, j)| self.shfl_fault(w, pc, l, j))?;
                for l in lanes(part) {
                    w.regs[*d as usize * 32 + l] = out[l].0;
                    if *p != NOREG {
                        w.regs[*p as usize * 32 + l] = out[l].1 as u64;
                    }
                }
            }
            SyncOp::Vote { mode, d, s, neg } => vote(r, syms, part, *mode, *d, (s, *neg)),
            SyncOp::Redux { op, signed, d, s } => redux(r, syms, part, *op, *signed, *d, s),
            SyncOp::Elect { d, p } => elect(r, part, *d, *p),
            SyncOp::Match {
                all,
                bits64,
                d,
                p,
                s,
            } => match_sync(r, syms, part, *all, *bits64, (*d, *p), s),
        }
        Ok(())
    }

    /// Lane `l`'s `shfl.sync` reads lane `j`, which is not in the member mask.
    fn shfl_fault(&self, w: &Warp, pc: u32, l: usize, j: usize) -> SimError {
        self.fault(
            FaultKind::ShflMaskLane,
            w,
            l,
            pc,
            format!(
                "shfl.sync reads lane {j}, which is not in the member mask {:#010x}",
                w.sync_mask[l]
            ),
        )
        .into()
    }
}

/// `shfl.sync` with operands `[a, b, c]`: per lane of `part`, `a` of the lane its mode selects
/// (its own when out of range) and whether that lane was in range. `Err((l, j))`: lane `l`
/// reads lane `j`, outside `part` (the lowest such `l`).
fn shfl(
    r: &[u64],
    syms: &[u64],
    part: u32,
    mode: ShflMode,
    [a, b, c]: [&Opd; 3],
) -> Result<[(u64, bool); 32], (usize, usize)> {
    let mut src = [0u64; 32];
    for l in lanes(part) {
        src[l] = rd(r, syms, a, l);
    }
    let mut out = [(0u64, false); 32];
    for l in lanes(part) {
        let bv = rd(r, syms, b, l) as u32;
        let cv = rd(r, syms, c, l) as u32;
        let (j, pval) = shfl_source(mode, l, bv, cv);
        let j = if pval { j as usize } else { l };
        if part >> j & 1 == 0 {
            return Err((l, j));
        }
        out[l] = (src[j] & 0xffff_ffff, pval);
    }
    Ok(out)
}

/// The source lane of `shfl.sync` for lane `l` with lane operand `b` and clamp/segment
/// operand `c`, and whether it is in range (PTX ISA pseudocode).
fn shfl_source(mode: ShflMode, l: usize, b: u32, c: u32) -> (i32, bool) {
    let bv = b & 31;
    let clamp = c & 31;
    let seg = (c >> 8) & 31;
    let lane = l as i32;
    let max_lane = ((l as u32 & seg) | (clamp & !seg)) as i32;
    let min_lane = (l as u32 & seg) as i32;
    match mode {
        ShflMode::Up => {
            let j = lane - bv as i32;
            (j, j >= max_lane)
        }
        ShflMode::Down => {
            let j = lane + bv as i32;
            (j, j <= max_lane)
        }
        ShflMode::Bfly => {
            let j = lane ^ bv as i32;
            (j, j <= max_lane)
        }
        ShflMode::Idx => {
            let j = min_lane | (bv & !seg) as i32;
            (j, j <= max_lane)
        }
    }
}

/// `vote.sync`: the ballot of predicate `s` (negated if `neg`) over `part`, reduced by `mode`.
fn vote(r: &mut [u64], syms: &[u64], part: u32, mode: VoteMode, d: u32, (s, neg): (&Opd, bool)) {
    let mut ballot = 0u32;
    for l in lanes(part) {
        if rd_pred(r, syms, s, neg, l) {
            ballot |= 1 << l;
        }
    }
    let v = match mode {
        VoteMode::Ballot => ballot as u64,
        VoteMode::All => (ballot == part) as u64,
        VoteMode::Any => (ballot != 0) as u64,
        VoteMode::Uni => (ballot == part || ballot == 0) as u64,
    };
    for l in lanes(part) {
        r[d as usize * 32 + l] = v;
    }
}

/// `redux.sync`: `op` over the 32-bit values `s` of `part`, to every lane of it.
fn redux(r: &mut [u64], syms: &[u64], part: u32, op: ReduxOp, signed: bool, d: u32, s: &Opd) {
    let vals: Vec<u32> = lanes(part).map(|l| rd(r, syms, s, l) as u32).collect();
    let v: u32 = match op {
        ReduxOp::Add => vals.iter().fold(0u32, |a, v| a.wrapping_add(*v)),
        ReduxOp::And => vals.iter().fold(u32::MAX, |a, v| a & v),
        ReduxOp::Or => vals.iter().fold(0, |a, v| a | v),
        ReduxOp::Xor => vals.iter().fold(0, |a, v| a ^ v),
        ReduxOp::Min if signed => vals.iter().map(|v| *v as i32).min().unwrap_or(0) as u32,
        ReduxOp::Max if signed => vals.iter().map(|v| *v as i32).max().unwrap_or(0) as u32,
        ReduxOp::Min => vals.iter().copied().min().unwrap_or(0),
        ReduxOp::Max => vals.iter().copied().max().unwrap_or(0),
    };
    let v = if signed {
        v as i32 as i64 as u64
    } else {
        v as u64
    };
    for l in lanes(part) {
        r[d as usize * 32 + l] = v;
    }
}

/// `elect.sync`: the lowest lane of `part` is the leader (`d` = its index, `p` = is it me).
fn elect(r: &mut [u64], part: u32, d: u32, p: u32) {
    let leader = part.trailing_zeros() as usize;
    for l in lanes(part) {
        if d != NOREG {
            r[d as usize * 32 + l] = leader as u64;
        }
        if p != NOREG {
            r[p as usize * 32 + l] = (l == leader) as u64;
        }
    }
}

/// `match.sync.any` (`d` = the lanes with my value) or `.all` (`d` = `part` if all values are
/// equal, else 0; `p` = whether they are).
fn match_sync(
    r: &mut [u64],
    syms: &[u64],
    part: u32,
    all: bool,
    bits64: bool,
    (d, p): (u32, u32),
    s: &Opd,
) {
    let val = |r: &[u64], l: usize| {
        let v = rd(r, syms, s, l);
        if bits64 {
            v
        } else {
            v & 0xffff_ffff
        }
    };
    let mut res = [(0u32, false); 32];
    for l in lanes(part) {
        let same = lanes(part)
            .filter(|&j| val(r, j) == val(r, l))
            .fold(0u32, |m, j| m | 1 << j);
        res[l] = if all {
            if same == part {
                (part, true)
            } else {
                (0, false)
            }
        } else {
            (same, true)
        };
    }
    for l in lanes(part) {
        r[d as usize * 32 + l] = res[l].0 as u64;
        if p != NOREG {
            r[p as usize * 32 + l] = res[l].1 as u64;
        }
    }
}
