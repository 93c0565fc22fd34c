//! Memory access from the executor: state-space dispatch, bounds checks, faults.
//!
//! Every access goes through [`Block::load`] / [`Block::store`] / [`Block::atomic`], which is
//! where shadow state (race and initialization checks, metrics) hooks in.

use super::block::{Block, Warp};
use crate::error::{Fault, FaultKind, SimError};
use crate::memory::{window, MemErr, Window};
use crate::types::Space;

/// Access direction, for messages.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Load,
    Store,
    Atomic,
}

impl Dir {
    fn name(self) -> &'static str {
        match self {
            Dir::Load => "load",
            Dir::Store => "store",
            Dir::Atomic => "atomic",
        }
    }
}

/// A resolved address.
#[derive(Clone, Copy)]
pub(crate) enum Loc {
    Global(u64),
    Shared(u64),
    Local(u64),
    Param(u64),
}

impl Block<'_, '_> {
    /// Resolves `addr` in space `sp` for lane `l` of warp `w`.
    #[inline]
    pub(crate) fn loc(&self, sp: Space, addr: u64) -> Loc {
        match sp {
            Space::Global | Space::Const => Loc::Global(addr),
            Space::Shared => Loc::Shared(addr & 0xffff_ffff),
            Space::Local => Loc::Local(addr & 0xffff_ffff),
            Space::Param => Loc::Param(addr),
            Space::Generic => match window(addr) {
                Window::Global(a) => Loc::Global(a),
                Window::Shared(o) => Loc::Shared(o),
                Window::Local(o) => Loc::Local(o),
                Window::Param(o) => Loc::Param(o),
            },
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn mem_fault(
        &self,
        w: &Warp,
        l: usize,
        pc: u32,
        sp: &str,
        dir: Dir,
        addr: u64,
        sz: usize,
        e: MemErr,
    ) -> Fault {
        let mut f = self.fault(
            e.kind,
            w,
            l,
            pc,
            format!("{sp} {} of {sz} bytes at {addr:#x}", dir.name()),
        );
        f.address = Some(addr);
        f.allocation = e.allocation;
        f
    }

    #[allow(clippy::too_many_arguments)]
    fn small_fault(
        &self,
        w: &Warp,
        l: usize,
        pc: u32,
        kind: FaultKind,
        dir: Dir,
        off: u64,
        sz: usize,
        limit: usize,
    ) -> Fault {
        // The kind already names the space ("out-of-bounds shared"), so the message does not.
        let mut f = self.fault(
            kind,
            w,
            l,
            pc,
            format!(
                "{} of {sz} bytes at offset {off:#x} (size {limit} bytes)",
                dir.name()
            ),
        );
        f.address = Some(off);
        f
    }

    #[allow(clippy::too_many_arguments)]
    fn misaligned(
        &self,
        w: &Warp,
        l: usize,
        pc: u32,
        sp: &str,
        dir: Dir,
        a: u64,
        sz: usize,
    ) -> Fault {
        let mut f = self.fault(
            FaultKind::Misaligned,
            w,
            l,
            pc,
            format!("{sp} {} of {sz} bytes at {a:#x}", dir.name()),
        );
        f.address = Some(a);
        f
    }

    fn local_base(&self, w: &Warp, l: usize) -> u64 {
        (w.id as u64 * 32 + l as u64) * self.cx.k.local_size
    }

    /// Global (vector) load of `n` elements of `sz` bytes at `a`: one bounds check for the whole
    /// access, then direct element loads.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn global_load(
        &self,
        w: &Warp,
        l: usize,
        pc: u32,
        a: u64,
        sz: usize,
        n: usize,
        out: &mut [u64; 4],
    ) -> Result<bool, SimError> {
        let len = sz * n;
        if a & (len as u64 - 1) != 0 {
            return Err(self
                .misaligned(w, l, pc, "global", Dir::Load, a, len)
                .into());
        }
        let (al, off) = self.cx.g.find(a, len).map_err(|e| -> SimError {
            self.mem_fault(w, l, pc, "global", Dir::Load, a, len, e)
                .into()
        })?;
        for (j, o) in out.iter_mut().enumerate().take(n) {
            *o = al.load(off + j * sz, sz);
        }
        Ok(self.ev.is_some() && !al.is_init(off, len))
    }

    /// Global (vector) store; see [`Block::global_load`].
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn global_store(
        &self,
        w: &Warp,
        l: usize,
        pc: u32,
        a: u64,
        sz: usize,
        n: usize,
        vals: &[u64; 4],
    ) -> Result<(), SimError> {
        let len = sz * n;
        if a & (len as u64 - 1) != 0 {
            return Err(self
                .misaligned(w, l, pc, "global", Dir::Store, a, len)
                .into());
        }
        let (al, off) = self.cx.g.find(a, len).map_err(|e| -> SimError {
            self.mem_fault(w, l, pc, "global", Dir::Store, a, len, e)
                .into()
        })?;
        for (j, v) in vals.iter().enumerate().take(n) {
            al.store(off + j * sz, sz, *v);
        }
        Ok(())
    }

    /// Checks alignment and bounds of a whole (vector) access of `len` bytes.
    pub(crate) fn check_access(
        &self,
        w: &Warp,
        l: usize,
        pc: u32,
        loc: Loc,
        len: usize,
        dir: Dir,
    ) -> Result<(), SimError> {
        let (a, name) = match loc {
            Loc::Global(a) => (a, "global"),
            Loc::Shared(o) => (o, "shared"),
            Loc::Local(o) => (o, "local"),
            Loc::Param(o) => (o, "parameter"),
        };
        if a & (len as u64 - 1) != 0 {
            return Err(self.misaligned(w, l, pc, name, dir, a, len).into());
        }
        match loc {
            Loc::Global(a) => self
                .cx
                .g
                .check_range(a, len)
                .map_err(|e| self.mem_fault(w, l, pc, "global", dir, a, len, e).into()),
            Loc::Shared(o) => {
                if o.saturating_add(len as u64) > self.shared.data.len() as u64 {
                    Err(self
                        .small_fault(
                            w,
                            l,
                            pc,
                            FaultKind::SharedOutOfBounds,
                            dir,
                            o,
                            len,
                            self.shared.data.len(),
                        )
                        .into())
                } else {
                    Ok(())
                }
            }
            Loc::Local(o) => {
                if o.saturating_add(len as u64) > self.cx.k.local_size {
                    Err(self
                        .small_fault(
                            w,
                            l,
                            pc,
                            FaultKind::LocalOutOfBounds,
                            dir,
                            o,
                            len,
                            self.cx.k.local_size as usize,
                        )
                        .into())
                } else {
                    Ok(())
                }
            }
            Loc::Param(o) => {
                if dir != Dir::Load {
                    let mut f = self.small_fault(
                        w,
                        l,
                        pc,
                        FaultKind::ParamOutOfBounds,
                        dir,
                        o,
                        len,
                        self.cx.params.len(),
                    );
                    f.message = format!(
                        "{} of {len} bytes at offset {o:#x} (kernel parameters are read-only)",
                        dir.name()
                    );
                    Err(f.into())
                } else if o.saturating_add(len as u64) > self.cx.params.len() as u64 {
                    Err(self
                        .small_fault(
                            w,
                            l,
                            pc,
                            FaultKind::ParamOutOfBounds,
                            dir,
                            o,
                            len,
                            self.cx.params.len(),
                        )
                        .into())
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Loads `sz` bytes (element of an access already checked by [`Block::check_access`]).
    #[inline]
    pub(crate) fn load(
        &self,
        w: &Warp,
        l: usize,
        pc: u32,
        loc: Loc,
        sz: usize,
    ) -> Result<u64, SimError> {
        match loc {
            Loc::Global(a) => self.cx.g.load(a, sz).map_err(|e| {
                self.mem_fault(w, l, pc, "global", Dir::Load, a, sz, e)
                    .into()
            }),
            Loc::Shared(o) => self.shared.load(o, sz).ok_or_else(|| {
                self.small_fault(
                    w,
                    l,
                    pc,
                    FaultKind::SharedOutOfBounds,
                    Dir::Load,
                    o,
                    sz,
                    self.shared.data.len(),
                )
                .into()
            }),
            Loc::Local(o) => {
                let base = self.local_base(w, l);
                if o.saturating_add(sz as u64) > self.cx.k.local_size {
                    return Err(self
                        .small_fault(
                            w,
                            l,
                            pc,
                            FaultKind::LocalOutOfBounds,
                            Dir::Load,
                            o,
                            sz,
                            self.cx.k.local_size as usize,
                        )
                        .into());
                }
                Ok(self.local.load(base + o, sz).unwrap_or(0))
            }
            Loc::Param(o) => {
                let p = self.cx.params;
                let s = usize::try_from(o)
                    .ok()
                    .and_then(|o| p.get(o..o.checked_add(sz)?));
                match s {
                    Some(s) => {
                        let mut b = [0u8; 8];
                        b[..sz].copy_from_slice(s);
                        Ok(u64::from_le_bytes(b))
                    }
                    None => Err(self
                        .small_fault(
                            w,
                            l,
                            pc,
                            FaultKind::ParamOutOfBounds,
                            Dir::Load,
                            o,
                            sz,
                            p.len(),
                        )
                        .into()),
                }
            }
        }
    }

    /// Stores `sz` bytes.
    #[inline]
    pub(crate) fn store(
        &mut self,
        w: &Warp,
        l: usize,
        pc: u32,
        loc: Loc,
        sz: usize,
        v: u64,
    ) -> Result<(), SimError> {
        match loc {
            Loc::Global(a) => self.cx.g.store(a, sz, v).map_err(|e| {
                self.mem_fault(w, l, pc, "global", Dir::Store, a, sz, e)
                    .into()
            }),
            Loc::Shared(o) => match self.shared.store(o, sz, v) {
                Some(()) => Ok(()),
                None => Err(self
                    .small_fault(
                        w,
                        l,
                        pc,
                        FaultKind::SharedOutOfBounds,
                        Dir::Store,
                        o,
                        sz,
                        self.shared.data.len(),
                    )
                    .into()),
            },
            Loc::Local(o) => {
                if o.saturating_add(sz as u64) > self.cx.k.local_size {
                    return Err(self
                        .small_fault(
                            w,
                            l,
                            pc,
                            FaultKind::LocalOutOfBounds,
                            Dir::Store,
                            o,
                            sz,
                            self.cx.k.local_size as usize,
                        )
                        .into());
                }
                let base = self.local_base(w, l);
                let _ = self.local.store(base + o, sz, v);
                Ok(())
            }
            Loc::Param(o) => Err(self
                .small_fault(
                    w,
                    l,
                    pc,
                    FaultKind::ParamOutOfBounds,
                    Dir::Store,
                    o,
                    sz,
                    self.cx.params.len(),
                )
                .into()),
        }
    }

    /// Atomic read-modify-write; returns the old value.
    pub(crate) fn atomic(
        &mut self,
        w: &Warp,
        l: usize,
        pc: u32,
        loc: Loc,
        sz: usize,
        f: &dyn Fn(u64) -> u64,
    ) -> Result<u64, SimError> {
        match loc {
            Loc::Global(a) => self.cx.g.rmw(a, sz, f).map_err(|e| {
                self.mem_fault(w, l, pc, "global", Dir::Atomic, a, sz, e)
                    .into()
            }),
            Loc::Shared(o) => {
                if o & (sz as u64 - 1) != 0 {
                    return Err(self
                        .misaligned(w, l, pc, "shared", Dir::Atomic, o, sz)
                        .into());
                }
                let old = self.shared.load(o, sz).ok_or_else(|| -> SimError {
                    self.small_fault(
                        w,
                        l,
                        pc,
                        FaultKind::SharedOutOfBounds,
                        Dir::Atomic,
                        o,
                        sz,
                        self.shared.data.len(),
                    )
                    .into()
                })?;
                let _ = self.shared.store(o, sz, f(old));
                Ok(old)
            }
            _ => {
                let mut f = self.fault(
                    FaultKind::OutOfBounds,
                    w,
                    l,
                    pc,
                    "atomic on local or parameter memory".into(),
                );
                f.address = None;
                Err(f.into())
            }
        }
    }

    /// Zeroes `len` bytes of a thread's local memory.
    pub(crate) fn local_zero(&mut self, w: &Warp, l: usize, to: u32, len: u32) {
        let t = self.local_base(w, l) as usize + to as usize;
        if let Some(s) = self.local.data.get_mut(t..t + len as usize) {
            s.fill(0);
        }
    }

    /// Reads `len` bytes of a thread's local memory (call parameter passing).
    pub(crate) fn local_bytes(&self, w: &Warp, l: usize, from: u32, len: u32) -> Vec<u8> {
        let f = self.local_base(w, l) as usize + from as usize;
        self.local
            .data
            .get(f..f + len as usize)
            .map(|s| s.to_vec())
            .unwrap_or_default()
    }

    /// Writes bytes into a thread's local memory.
    pub(crate) fn local_set(&mut self, w: &Warp, l: usize, to: u32, v: &[u8]) {
        let t = self.local_base(w, l) as usize + to as usize;
        if let Some(s) = self.local.data.get_mut(t..t + v.len()) {
            s.copy_from_slice(v);
        }
    }

    /// Snapshot of function `func`'s registers and local memory for lane `l`.
    pub(crate) fn save_frame(&self, w: &Warp, l: usize, func: u32) -> (Vec<u64>, Vec<u8>) {
        let fr = &self.cx.k.frames[func as usize];
        let regs = (fr.regs.0..fr.regs.1)
            .map(|r| w.regs[r as usize * 32 + l])
            .collect();
        let mut bytes = Vec::new();
        for (a, b) in &fr.locals {
            bytes.extend(self.local_bytes(w, l, *a, b - a));
        }
        (regs, bytes)
    }

    /// Restores a snapshot taken by [`Block::save_frame`].
    pub(crate) fn restore_frame(
        &mut self,
        w: &mut Warp,
        l: usize,
        func: u32,
        saved: (Vec<u64>, Vec<u8>),
    ) {
        let k = self.cx.k;
        let fr = &k.frames[func as usize];
        for (i, r) in (fr.regs.0..fr.regs.1).enumerate() {
            w.regs[r as usize * 32 + l] = saved.0[i];
        }
        let mut off = 0usize;
        for (a, b) in &fr.locals {
            let n = (b - a) as usize;
            if let Some(s) = saved.1.get(off..off + n) {
                self.local_set(w, l, *a, s);
            }
            off += n;
        }
    }
}
