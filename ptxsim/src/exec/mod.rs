//! Execution: blocks in parallel over worker threads; within a block, warps scheduled
//! round-robin; within a warp, independent thread scheduling with groups of lanes that share a
//! program counter (the group with the lowest PC runs; groups reconverge when PCs meet).

mod block;
mod control;
pub(crate) mod events;
mod mem;
mod memops;
mod regops;
mod step;
mod sync;

use crate::error::SimError;
use crate::lower::Kernel;
use crate::memory::GlobalMem;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

pub(crate) use block::Block;

/// Everything a block needs that is shared by the whole launch.
pub(crate) struct LaunchCtx<'a> {
    pub k: &'a Kernel,
    pub g: &'a GlobalMem,
    pub params: &'a [u8],
    pub syms: &'a [u64],
    pub grid: [u32; 3],
    /// The blocks to run: a box of the grid, as (first, count) per dimension.
    pub only: [(u32, u32); 3],
    pub block: [u32; 3],
    pub dyn_shared: u32,
    pub max_steps: u64,
    /// A cooperative launch: every block on its own worker thread, all of them running
    /// together, so that blocks may wait for each other (a grid-wide barrier).
    pub cooperative: bool,
    /// Set when a block fails: the blocks of a cooperative launch waiting for it give up.
    pub failed: AtomicBool,
}

/// Totals of one launch.
#[derive(Default, Clone, Copy)]
pub(crate) struct Counts {
    pub thread_instructions: u64,
    pub warp_instructions: u64,
}

/// Runs the blocks of `cx.only` on `threads` workers (a cooperative launch: one worker per
/// block). On faults, the error of the block with the lowest linear index is returned
/// (independent of scheduling).
pub(crate) fn run(
    cx: &LaunchCtx<'_>,
    threads: usize,
    events: &events::EventsFactory<'_>,
) -> Result<Counts, SimError> {
    let [(x0, nx), (y0, ny), (z0, nz)] = cx.only.map(|(a, n)| (a as u64, n as u64));
    let nblocks = nx * ny * nz;
    let workers = if cx.cooperative {
        nblocks.max(1) as usize
    } else {
        threads.max(1).min(nblocks.max(1) as usize)
    };
    let next = AtomicU64::new(0);
    let first_err = AtomicU64::new(u64::MAX);
    let err: Mutex<Option<(u64, SimError)>> = Mutex::new(None);
    let ti = AtomicU64::new(0);
    let wi = AtomicU64::new(0);
    let active = AtomicUsize::new(0);
    let work = || {
        active.fetch_add(1, Ordering::Relaxed);
        let mut scratch = block::Scratch::default();
        let mut ev = events();
        let mut c = Counts::default();
        loop {
            let b = next.fetch_add(1, Ordering::Relaxed);
            if b >= nblocks {
                break;
            }
            // (a cooperative launch runs every block: the others may be waiting for it)
            if b > first_err.load(Ordering::Relaxed) && !cx.cooperative {
                continue;
            }
            let idx = [
                (x0 + b % nx) as u32,
                (y0 + b / nx % ny) as u32,
                (z0 + b / (nx * ny)) as u32,
            ];
            if let Some(e) = ev.as_deref_mut() {
                let [gx, gy] = [cx.grid[0] as u64, cx.grid[1] as u64];
                e.start(
                    idx[0] as u64 + gx * (idx[1] as u64 + gy * idx[2] as u64),
                    idx,
                );
            }
            let r = Block::new(
                cx,
                idx,
                &mut scratch,
                ev.as_deref_mut().map(|e| e as &mut dyn events::Events),
            )
            .run(&mut c);
            if let Some(e) = ev.as_deref_mut() {
                e.end();
            }
            match r {
                Ok(()) => {}
                Err(SimError::Abandoned) => {}
                Err(e) => {
                    cx.failed.store(true, Ordering::Relaxed);
                    first_err.fetch_min(b, Ordering::Relaxed);
                    let mut g = err.lock().unwrap_or_else(|p| p.into_inner());
                    if g.as_ref().is_none_or(|(eb, _)| b < *eb) {
                        *g = Some((b, e));
                    }
                }
            }
        }
        ti.fetch_add(c.thread_instructions, Ordering::Relaxed);
        wi.fetch_add(c.warp_instructions, Ordering::Relaxed);
    };
    if workers <= 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(work);
            }
        });
    }
    if let Some((_, e)) = err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    Ok(Counts {
        thread_instructions: ti.into_inner(),
        warp_instructions: wi.into_inner(),
    })
}

#[cfg(test)]
mod tests;
