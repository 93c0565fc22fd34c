//! One thread block: warps, shared/local memory, barriers, scheduling and deadlock detection.

use super::{Counts, LaunchCtx};
use crate::error::{Fault, FaultKind, SimError};
use crate::lower::Special;
use crate::memory::Bytes;

/// Number of named barriers per block.
pub(crate) const NBAR: usize = 16;

/// One warp's state. Registers are laid out `[register][lane]`.
#[derive(Default)]
pub(crate) struct Warp {
    pub id: u32,
    pub regs: Vec<u64>,
    pub pc: [u32; 32],
    /// Lanes that exist (the last warp of a block may be partial).
    pub valid: u32,
    pub exited: u32,
    /// Lanes blocked at a block barrier.
    pub bar_wait: u32,
    pub bar_of: [u8; 32],
    /// Lanes blocked at a warp-synchronous instruction.
    pub sync_wait: u32,
    pub sync_mask: [u32; 32],
    /// Per-lane call stacks (only used by kernels with calls).
    pub stacks: Vec<Vec<Frame>>,
}

impl Warp {
    /// Lanes that can run now.
    #[inline]
    pub(crate) fn running(&self) -> u32 {
        self.valid & !self.exited & !self.bar_wait & !self.sync_wait
    }
}

/// One active call of a lane.
pub(crate) struct Frame {
    /// Return address.
    pub ret: u32,
    /// Callee id.
    pub func: u32,
    /// Callee state saved because the call was recursive (restored at return).
    pub saved: Option<Box<(Vec<u64>, Vec<u8>)>>,
}

/// Block barrier state.
#[derive(Clone, Copy, Default)]
pub(crate) struct BarState {
    pub arrived: u32,
    pub expected: u32,
    pub line: u32,
    /// bar.red accumulator: popc count / and / or.
    pub red: u32,
    pub red_and: bool,
}

/// Reusable allocations of a worker thread.
#[derive(Default)]
pub(crate) struct Scratch {
    warps: Vec<Warp>,
    shared: Vec<u8>,
    local: Vec<u8>,
}

/// A running block.
pub(crate) struct Block<'a, 's> {
    pub cx: &'a LaunchCtx<'a>,
    pub idx: [u32; 3],
    pub nthreads: u32,
    pub warps: Vec<Warp>,
    pub shared: Bytes,
    pub local: Bytes,
    pub bars: [BarState; NBAR],
    pub steps: u64,
    scratch: &'s mut Scratch,
}

impl<'a, 's> Block<'a, 's> {
    pub(crate) fn new(cx: &'a LaunchCtx<'a>, idx: [u32; 3], scratch: &'s mut Scratch) -> Self {
        let nthreads = cx.block[0] * cx.block[1] * cx.block[2];
        let nwarps = nthreads.div_ceil(32);
        let nregs = cx.k.nregs as usize;
        let mut warps = std::mem::take(&mut scratch.warps);
        warps.truncate(nwarps as usize);
        while warps.len() < nwarps as usize {
            warps.push(Warp::default());
        }
        for (wi, w) in warps.iter_mut().enumerate() {
            w.id = wi as u32;
            w.regs.clear();
            w.regs.resize(nregs * 32, 0);
            w.pc = [0; 32];
            let nl = (nthreads - wi as u32 * 32).min(32);
            w.valid = if nl == 32 { u32::MAX } else { (1u32 << nl) - 1 };
            w.exited = 0;
            w.bar_wait = 0;
            w.sync_wait = 0;
            if cx.k.has_calls {
                w.stacks.resize_with(32, Vec::new);
                w.stacks.iter_mut().for_each(|s| s.clear());
            }
            init_specials(cx, idx, nthreads, w);
        }
        let shared_len = (cx.k.dyn_shared_offset + cx.dyn_shared as u64) as usize;
        let mut shared = std::mem::take(&mut scratch.shared);
        shared.clear();
        shared.resize(shared_len.max(cx.k.static_shared as usize), 0);
        let mut local = std::mem::take(&mut scratch.local);
        local.clear();
        local.resize(cx.k.local_size as usize * nthreads as usize, 0);
        Block {
            cx,
            idx,
            nthreads,
            warps,
            shared: Bytes { data: shared },
            local: Bytes { data: local },
            bars: [BarState::default(); NBAR],
            steps: 0,
            scratch,
        }
    }

    /// Runs the block to completion.
    pub(crate) fn run(mut self, c: &mut Counts) -> Result<(), SimError> {
        let r = self.run_inner(c);
        self.scratch.warps = std::mem::take(&mut self.warps);
        self.scratch.shared = std::mem::take(&mut self.shared.data);
        self.scratch.local = std::mem::take(&mut self.local.data);
        r
    }

    fn run_inner(&mut self, c: &mut Counts) -> Result<(), SimError> {
        loop {
            let mut progress = false;
            for wi in 0..self.warps.len() {
                if self.warps[wi].running() != 0 {
                    progress = true;
                    let mut w = std::mem::take(&mut self.warps[wi]);
                    let r = self.run_warp(&mut w, c);
                    self.warps[wi] = w;
                    r?;
                }
            }
            if !progress {
                break;
            }
        }
        if self.warps.iter().all(|w| w.valid & !w.exited == 0) {
            return Ok(());
        }
        Err(self.stuck())
    }

    /// Builds the fault for a block where no thread can make progress.
    fn stuck(&self) -> SimError {
        let exited: u32 = self
            .warps
            .iter()
            .map(|w| (w.exited & w.valid).count_ones())
            .sum();
        // warp-synchronous waiters first
        for w in &self.warps {
            if w.sync_wait != 0 {
                let l = w.sync_wait.trailing_zeros() as usize;
                let pc = w.pc[l];
                let mask = w.sync_mask[l];
                let waiting: u32 = (0..32)
                    .filter(|&j| w.sync_wait >> j & 1 == 1 && w.pc[j] == pc)
                    .fold(0, |m, j| m | 1 << j);
                let missing = mask & !waiting;
                let mut why = Vec::new();
                for j in 0..32 {
                    if missing >> j & 1 == 1 {
                        let s = if w.bar_wait >> j & 1 == 1 {
                            format!("lane {j} is blocked at a bar.sync")
                        } else if w.sync_wait >> j & 1 == 1 {
                            format!("lane {j} waits at another warp-synchronous instruction (PTX line {})", self.line_of(w.pc[j]))
                        } else {
                            format!("lane {j} is at PTX line {}", self.line_of(w.pc[j]))
                        };
                        why.push(s);
                        if why.len() >= 4 {
                            break;
                        }
                    }
                }
                return self
                    .fault(
                        FaultKind::Deadlock,
                        w,
                        l,
                        pc,
                        format!(
                            "warp-synchronous instruction with member mask {mask:#010x} can never complete: {}",
                            why.join("; ")
                        ),
                    )
                    .into();
            }
        }
        for w in &self.warps {
            if w.bar_wait != 0 {
                let l = w.bar_wait.trailing_zeros() as usize;
                let id = w.bar_of[l] as usize;
                let b = self.bars[id];
                let other = self.warps.iter().any(|v| {
                    (0..32).any(|j| v.bar_wait >> j & 1 == 1 && v.bar_of[j] as usize != id)
                });
                if exited == 0 && other {
                    let ids: Vec<String> = (0..NBAR)
                        .filter(|&i| self.bars[i].arrived > 0)
                        .map(|i| {
                            format!(
                                "barrier {i}: {} of {}",
                                self.bars[i].arrived, self.bars[i].expected
                            )
                        })
                        .collect();
                    return self
                        .fault(
                            FaultKind::Deadlock,
                            w,
                            l,
                            w.pc[l],
                            format!(
                                "every thread of the block waits at a barrier, none can complete ({})",
                                ids.join(", ")
                            ),
                        )
                        .into();
                }
                return self
                    .fault(
                        FaultKind::BarrierDivergence,
                        w,
                        l,
                        w.pc[l],
                        format!(
                            "barrier {id} reached by only {} of the {} threads it waits for ({exited} threads of the block have exited)",
                            b.arrived, b.expected
                        ),
                    )
                    .into();
            }
        }
        SimError::InvalidArgument("internal: block stuck without waiters".into())
    }

    pub(crate) fn line_of(&self, pc: u32) -> u32 {
        self.cx.k.code.get(pc as usize).map(|i| i.line).unwrap_or(0)
    }

    /// Builds a fault for lane `l` of warp `w` at instruction `pc`.
    pub(crate) fn fault(
        &self,
        kind: FaultKind,
        w: &Warp,
        l: usize,
        pc: u32,
        message: String,
    ) -> Fault {
        let t = w.id * 32 + l as u32;
        let b = self.cx.block;
        Fault {
            kind,
            kernel: self.cx.k.name.clone(),
            line: self.line_of(pc) as usize,
            block: self.idx,
            thread: [t % b[0], (t / b[0]) % b[1], t / (b[0] * b[1])],
            address: None,
            allocation: None,
            message,
        }
    }

    /// Records a barrier arrival of `n` threads; returns true when the barrier completes.
    pub(crate) fn bar_arrive(&mut self, id: usize, n: u32, expected: u32, line: u32) -> bool {
        let b = &mut self.bars[id];
        if b.arrived == 0 {
            b.expected = expected;
            b.line = line;
        }
        b.arrived += n;
        b.arrived >= b.expected
    }

    /// Releases every lane waiting at barrier `id` (including those of `cur`).
    pub(crate) fn bar_release(&mut self, id: usize, cur: &mut Warp) {
        let st = self.bars[id];
        self.bars[id] = BarState::default();
        let release = |w: &mut Warp, k: &crate::lower::Kernel| {
            for l in 0..32 {
                if w.bar_wait >> l & 1 == 1 && w.bar_of[l] as usize == id {
                    w.bar_wait &= !(1 << l);
                    let pc = w.pc[l] as usize;
                    if let crate::ir::Kind::Bar { d, op, .. } = &k.code[pc].kind {
                        if *d != crate::ir::NOREG {
                            let v = match op {
                                crate::ir::BarOp::RedPopc => st.red as u64,
                                crate::ir::BarOp::RedAnd => st.red_and as u64,
                                _ => (st.red != 0) as u64,
                            };
                            w.regs[*d as usize * 32 + l] = v;
                        }
                    }
                    w.pc[l] += 1;
                }
            }
        };
        release(cur, self.cx.k);
        for w in self.warps.iter_mut() {
            release(w, self.cx.k);
        }
    }
}

fn init_specials(cx: &LaunchCtx<'_>, idx: [u32; 3], nthreads: u32, w: &mut Warp) {
    let b = cx.block;
    for &(r, sp) in &cx.k.specials {
        for l in 0..32u32 {
            let t = w.id * 32 + l;
            let tid = [t % b[0], (t / b[0]) % b[1], t / (b[0] * b[1])];
            let v: u64 = match sp {
                Special::Tid(d) => tid[d as usize] as u64,
                Special::Ntid(d) => b[d as usize] as u64,
                Special::Ctaid(d) => idx[d as usize] as u64,
                Special::Nctaid(d) => cx.grid[d as usize] as u64,
                Special::Laneid => l as u64,
                Special::Warpid => w.id as u64,
                Special::Nwarpid => nthreads.div_ceil(32) as u64,
                Special::LanemaskEq => 1u64 << l,
                Special::LanemaskLe => ((2u64 << l) - 1) & 0xffff_ffff,
                Special::LanemaskLt => (1u64 << l) - 1,
                Special::LanemaskGe => (0xffff_ffffu64 << l) & 0xffff_ffff,
                Special::LanemaskGt => (0xffff_fffeu64 << l) & 0xffff_ffff,
                Special::Zero => 0,
                Special::One => 1,
                Special::DynSmem => cx.dyn_shared as u64,
                Special::TotalSmem => cx.k.dyn_shared_offset + cx.dyn_shared as u64,
                Special::ClusterNctaid(_) => 1,
            };
            w.regs[r as usize * 32 + l as usize] = v;
        }
    }
}
