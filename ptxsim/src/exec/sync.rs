//! Warp-synchronous instructions: shfl.sync, vote.sync, bar.warp.sync, redux.sync, elect.sync,
//! match.sync. Lanes wait at the instruction until every lane named in their member mask has
//! arrived at the same instruction; then all waiting lanes execute it together.

use super::block::{Block, Warp};
use super::step::{lanes, rd};
use crate::error::{FaultKind, SimError};
use crate::ir::{Opd, ReduxOp, ShflMode, SyncOp, VoteMode, NOREG};

impl Block<'_, '_> {
    pub(crate) fn warp_sync(
        &mut self,
        w: &mut Warp,
        pc: u32,
        group: u32,
        em: u32,
        op: &SyncOp,
        mask: &Opd,
    ) -> Result<(), SimError> {
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
                return Ok(()); // someone still missing
            }
        }
        self.sync_exec(w, pc, waiting, op)?;
        w.sync_wait &= !waiting;
        for l in lanes(waiting) {
            w.pc[l] += 1;
        }
        Ok(())
    }

    /// Executes a warp-synchronous instruction for participating lanes `part`.
    fn sync_exec(&mut self, w: &mut Warp, pc: u32, part: u32, op: &SyncOp) -> Result<(), SimError> {
        let syms = self.cx.syms;
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
                let mut src = [0u64; 32];
                for l in lanes(part) {
                    src[l] = rd(&w.regs, syms, a, l);
                }
                let mut out = [(0u64, false); 32];
                for l in lanes(part) {
                    let bv = rd(&w.regs, syms, b, l) as u32 & 31;
                    let cv = rd(&w.regs, syms, c, l) as u32;
                    let clamp = cv & 31;
                    let seg = (cv >> 8) & 31;
                    let lane = l as i32;
                    let max_lane = ((l as u32 & seg) | (clamp & !seg)) as i32;
                    let min_lane = (l as u32 & seg) as i32;
                    let (j, pval) = match mode {
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
                    };
                    let j = if pval { j as usize } else { l };
                    if part >> j & 1 == 0 {
                        return Err(self
                            .fault(
                                FaultKind::ShflMaskLane,
                                w,
                                l,
                                pc,
                                format!(
                                    "shfl.sync reads lane {j}, which is not in the member mask {:#010x}",
                                    w.sync_mask[l]
                                ),
                            )
                            .into());
                    }
                    out[l] = (src[j] & 0xffff_ffff, pval);
                }
                for l in lanes(part) {
                    w.regs[*d as usize * 32 + l] = out[l].0;
                    if *p != NOREG {
                        w.regs[*p as usize * 32 + l] = out[l].1 as u64;
                    }
                }
            }
            SyncOp::Vote { mode, d, s, neg } => {
                let mut ballot = 0u32;
                for l in lanes(part) {
                    if (rd(&w.regs, syms, s, l) & 1 != 0) != *neg {
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
                    w.regs[*d as usize * 32 + l] = v;
                }
            }
            SyncOp::Redux { op, signed, d, s } => {
                let vals: Vec<u32> = lanes(part)
                    .map(|l| rd(&w.regs, syms, s, l) as u32)
                    .collect();
                let r: u32 = match op {
                    ReduxOp::Add => vals.iter().fold(0u32, |a, v| a.wrapping_add(*v)),
                    ReduxOp::And => vals.iter().fold(u32::MAX, |a, v| a & v),
                    ReduxOp::Or => vals.iter().fold(0, |a, v| a | v),
                    ReduxOp::Xor => vals.iter().fold(0, |a, v| a ^ v),
                    ReduxOp::Min if *signed => {
                        vals.iter().map(|v| *v as i32).min().unwrap_or(0) as u32
                    }
                    ReduxOp::Max if *signed => {
                        vals.iter().map(|v| *v as i32).max().unwrap_or(0) as u32
                    }
                    ReduxOp::Min => vals.iter().copied().min().unwrap_or(0),
                    ReduxOp::Max => vals.iter().copied().max().unwrap_or(0),
                };
                let r = if *signed {
                    r as i32 as i64 as u64
                } else {
                    r as u64
                };
                for l in lanes(part) {
                    w.regs[*d as usize * 32 + l] = r;
                }
            }
            SyncOp::Elect { d, p } => {
                let leader = part.trailing_zeros() as usize;
                for l in lanes(part) {
                    if *d != NOREG {
                        w.regs[*d as usize * 32 + l] = leader as u64;
                    }
                    if *p != NOREG {
                        w.regs[*p as usize * 32 + l] = (l == leader) as u64;
                    }
                }
            }
            SyncOp::Match {
                all,
                bits64,
                d,
                p,
                s,
            } => {
                let val = |l: usize| {
                    let v = rd(&w.regs, syms, s, l);
                    if *bits64 {
                        v
                    } else {
                        v & 0xffff_ffff
                    }
                };
                let mut res = [(0u32, false); 32];
                for l in lanes(part) {
                    let same = lanes(part)
                        .filter(|&j| val(j) == val(l))
                        .fold(0u32, |m, j| m | 1 << j);
                    res[l] = if *all {
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
                    w.regs[*d as usize * 32 + l] = res[l].0 as u64;
                    if *p != NOREG {
                        w.regs[*p as usize * 32 + l] = res[l].1 as u64;
                    }
                }
            }
        }
        Ok(())
    }
}
