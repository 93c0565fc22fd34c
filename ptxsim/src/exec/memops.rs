//! Memory instructions (`ld`, `st`, `atom`/`red`, `cp.async`): per-lane execution through the
//! checked accessors of `mem.rs`, plus the warp-level access events of `events.rs`.

use super::block::{Block, Warp};
use super::events::{AccessEv, EvKind, EvSpace, LaneAcc};
use super::mem::{Dir, Loc};
use super::step::{lanes, rd};
use crate::error::SimError;
use crate::ir::{AtomOp, Kind, Opd, NOREG};
use crate::sem::atom::atom_new;
use crate::types::{extend, Space, Ty};

#[inline]
pub(crate) fn offset_loc(l: Loc, d: u64) -> Loc {
    match l {
        Loc::Global(a) => Loc::Global(a.wrapping_add(d)),
        Loc::Shared(a) => Loc::Shared(a.wrapping_add(d)),
        Loc::Local(a) => Loc::Local(a.wrapping_add(d)),
        Loc::Param(a) => Loc::Param(a.wrapping_add(d)),
    }
}

impl Block<'_, '_> {
    /// Records lane `l`'s access at `loc` (when events are on).
    #[inline]
    fn note(&mut self, loc: Loc, l: usize, uninit: bool) {
        let b = &mut self.scratch.ev;
        match loc {
            Loc::Global(a) => b.global.push(LaneAcc {
                addr: a,
                lane: l as u8,
                uninit,
            }),
            Loc::Shared(o) => b.shared.push(LaneAcc {
                addr: o,
                lane: l as u8,
                uninit,
            }),
            _ => {}
        }
    }

    /// Sends the gathered lanes as events and clears the buffers.
    fn flush(&mut self, w: &Warp, pc: u32, kind: EvKind, strong: bool, size: u32) {
        let line = self.line_of(pc);
        let Some(ev) = self.ev.as_deref_mut() else {
            return;
        };
        let bufs = &mut self.scratch.ev;
        for (space, lanes) in [
            (EvSpace::Global, &mut bufs.global),
            (EvSpace::Shared, &mut bufs.shared),
        ] {
            if !lanes.is_empty() {
                ev.access(&AccessEv {
                    space,
                    kind,
                    strong,
                    line,
                    warp: w.id,
                    size,
                    lanes,
                });
                lanes.clear();
            }
        }
    }

    /// Whether some byte of a global access was never written (for initcheck).
    #[inline]
    fn uninit(&self, loc: Loc, len: usize) -> bool {
        match loc {
            Loc::Global(a) => !self.cx.g.is_init(a, len),
            _ => false,
        }
    }

    /// Executes a memory instruction for lanes `em`.
    pub(crate) fn exec_mem(
        &mut self,
        w: &mut Warp,
        pc: u32,
        em: u32,
        k: &Kind,
    ) -> Result<(), SimError> {
        match k {
            Kind::Ld {
                sp,
                sz,
                sext,
                n,
                d,
                a,
                off,
                strong,
            } => self.ld(w, pc, em, access(*sp, a, *off, *sz, *n, *strong), *sext, d),
            Kind::St {
                sp,
                sz,
                n,
                s,
                a,
                off,
                strong,
            } => self.st(w, pc, em, access(*sp, a, *off, *sz, *n, *strong), s),
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
                let acc = access(*sp, a, *off, ty.bytes() as u8, 1, false);
                self.atom(w, pc, em, acc, (*op, *ty), *d, [b, c])
            }
            Kind::CpAsync {
                dst,
                doff,
                src,
                soff,
                size,
                src_size,
            } => self.cp_async(w, pc, em, (src, *soff), (dst, *doff), *size, src_size),
            _ => Ok(()),
        }
    }

    /// Lane `l`'s location of access `acc`.
    #[inline(always)]
    fn lane_loc(&self, w: &Warp, acc: &Access<'_>, l: usize) -> Loc {
        let addr = rd(&w.regs, self.cx.syms, acc.a, l).wrapping_add(acc.off as u64);
        self.loc(acc.sp, addr)
    }

    /// `ld`: `n` elements of `sz` bytes per lane to registers `d` (sign-extended if `sext`).
    fn ld(
        &mut self,
        w: &mut Warp,
        pc: u32,
        em: u32,
        acc: Access<'_>,
        sext: bool,
        d: &[u32; 4],
    ) -> Result<(), SimError> {
        let (sz, n) = (acc.sz, acc.n);
        // Constant-bank loads are neither checked nor counted as global traffic.
        let rec = self.ev.is_some() && acc.sp != Space::Const;
        for l in lanes(em) {
            let loc = self.lane_loc(w, &acc, l);
            let mut vals = [0u64; 4];
            let uninit = if let Loc::Global(ga) = loc {
                self.global_load(w, l, pc, ga, sz, n, &mut vals)?
            } else {
                self.check_access(w, l, pc, loc, sz * n, Dir::Load)?;
                for (j, v) in vals.iter_mut().enumerate().take(n) {
                    *v = self.load(w, l, pc, offset_loc(loc, (j * sz) as u64), sz)?;
                }
                false
            };
            if rec {
                self.note(loc, l, uninit);
            }
            if sext {
                for v in vals.iter_mut().take(n) {
                    *v = extend(*v, sz as u32 * 8, true);
                }
            }
            for (j, dj) in d.iter().enumerate().take(n) {
                if *dj != NOREG {
                    w.regs[*dj as usize * 32 + l] = vals[j];
                }
            }
        }
        if rec {
            self.flush(w, pc, EvKind::Load, acc.strong, (sz * n) as u32);
        }
        Ok(())
    }

    /// `st`: `n` elements of `sz` bytes per lane from operands `s`.
    fn st(
        &mut self,
        w: &mut Warp,
        pc: u32,
        em: u32,
        acc: Access<'_>,
        s: &[Opd; 4],
    ) -> Result<(), SimError> {
        let (sz, n) = (acc.sz, acc.n);
        let rec = self.ev.is_some();
        for l in lanes(em) {
            let loc = self.lane_loc(w, &acc, l);
            let mut vals = [0u64; 4];
            for (v, so) in vals.iter_mut().zip(s.iter()).take(n) {
                *v = rd(&w.regs, self.cx.syms, so, l);
            }
            if let Loc::Global(ga) = loc {
                self.global_store(w, l, pc, ga, sz, n, &vals)?;
            } else {
                self.check_access(w, l, pc, loc, sz * n, Dir::Store)?;
                for (j, v) in vals.iter().enumerate().take(n) {
                    self.store(w, l, pc, offset_loc(loc, (j * sz) as u64), sz, *v)?;
                }
            }
            if rec {
                self.note(loc, l, false);
            }
        }
        if rec {
            self.flush(w, pc, EvKind::Store, acc.strong, (sz * n) as u32);
        }
        Ok(())
    }

    /// `atom`/`red`: per lane, `old = [a]; [a] = op(old, b, c)`; `d = old` unless `NOREG`.
    #[allow(clippy::too_many_arguments)]
    fn atom(
        &mut self,
        w: &mut Warp,
        pc: u32,
        em: u32,
        acc: Access<'_>,
        (op, ty): (AtomOp, Ty),
        d: u32,
        [b, c]: [&Opd; 2],
    ) -> Result<(), SimError> {
        let sz = acc.sz;
        let rec = self.ev.is_some();
        let syms = self.cx.syms;
        for l in lanes(em) {
            let loc = self.lane_loc(w, &acc, l);
            let bv = rd(&w.regs, syms, b, l);
            let cv = rd(&w.regs, syms, c, l);
            let u = rec && self.uninit(loc, sz);
            let old = self.atomic(w, l, pc, loc, sz, &|old| atom_new(op, ty, old, bv, cv))?;
            if rec {
                self.note(loc, l, u);
            }
            if d != NOREG {
                w.regs[d as usize * 32 + l] = extend(old, ty.bits(), ty.is_signed());
            }
        }
        if rec {
            self.flush(w, pc, EvKind::Atomic, false, sz as u32);
        }
        Ok(())
    }

    /// `cp.async` of `size` bytes per lane from global `src+soff` to shared `dst+doff`,
    /// executed synchronously; only the first `src_size` bytes are read, the rest zero-filled.
    #[allow(clippy::too_many_arguments)]
    fn cp_async(
        &mut self,
        w: &mut Warp,
        pc: u32,
        em: u32,
        (src, soff): (&Opd, i64),
        (dst, doff): (&Opd, i64),
        size: u8,
        src_size: &Option<Opd>,
    ) -> Result<(), SimError> {
        let syms = self.cx.syms;
        let rec = self.ev.is_some();
        let size = size as usize;
        for l in lanes(em) {
            let s = rd(&w.regs, syms, src, l).wrapping_add(soff as u64);
            let d = rd(&w.regs, syms, dst, l).wrapping_add(doff as u64);
            let n = match src_size {
                Some(o) => (rd(&w.regs, syms, o, l) as usize).min(size),
                None => size,
            };
            let mut bytes = [0u8; 16];
            let sloc = self.loc(Space::Global, s);
            if n == size {
                let mut v = [0u64; 4];
                let _ = self.global_load(w, l, pc, s, 4, size / 4, &mut v)?;
                for (j, x) in v.iter().enumerate().take(size / 4) {
                    bytes[4 * j..4 * j + 4].copy_from_slice(&(*x as u32).to_le_bytes());
                }
            } else {
                for (j, b) in bytes.iter_mut().enumerate().take(n) {
                    *b = self.load(w, l, pc, offset_loc(sloc, j as u64), 1)? as u8;
                }
            }
            if rec && n > 0 {
                let u = self.uninit(sloc, n);
                self.note(sloc, l, u);
            }
            let dloc = self.loc(Space::Shared, d);
            self.check_access(w, l, pc, dloc, size, Dir::Store)?;
            for j in 0..size / 4 {
                let mut q = [0u8; 4];
                q.copy_from_slice(&bytes[4 * j..4 * j + 4]);
                let v = u32::from_le_bytes(q);
                self.store(w, l, pc, offset_loc(dloc, 4 * j as u64), 4, v as u64)?;
            }
        }
        if rec {
            // the global reads, then the shared writes
            self.flush(w, pc, EvKind::Load, false, size as u32);
            for l in lanes(em) {
                let d = rd(&w.regs, syms, dst, l).wrapping_add(doff as u64);
                let dl = self.loc(Space::Shared, d);
                self.note(dl, l, false);
            }
            self.flush(w, pc, EvKind::Store, false, size as u32);
        }
        Ok(())
    }
}

/// The shape of one warp-level memory access: state space, address operand plus offset,
/// element size and count, and whether it is a strong (never racing) access.
#[derive(Clone, Copy)]
struct Access<'a> {
    sp: Space,
    a: &'a Opd,
    off: i64,
    sz: usize,
    n: usize,
    strong: bool,
}

#[inline(always)]
fn access(sp: Space, a: &Opd, off: i64, sz: u8, n: u8, strong: bool) -> Access<'_> {
    Access {
        sp,
        a,
        off,
        sz: sz as usize,
        n: n as usize,
        strong,
    }
}
