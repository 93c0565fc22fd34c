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
        let what = match kind {
            FaultKind::SharedOutOfBounds => "shared",
            FaultKind::LocalOutOfBounds => "local",
            _ => "parameter",
        };
        let mut f = self.fault(
            kind,
            w,
            l,
            pc,
            format!(
                "{what} {} of {sz} bytes at offset {off:#x} ({what} memory is {limit} bytes)",
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
        if a % len as u64 != 0 {
            return Err(self.misaligned(w, l, pc, name, dir, a, len).into());
        }
        match loc {
            Loc::Global(a) => self
                .cx
                .g
                .check_range(a, len)
                .map_err(|e| self.mem_fault(w, l, pc, "global", dir, a, len, e).into()),
            Loc::Shared(o) => {
                if o + len as u64 > self.shared.data.len() as u64 {
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
                if o + len as u64 > self.cx.k.local_size {
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
                    f.message = format!("write to kernel parameter memory at offset {o:#x}");
                    Err(f.into())
                } else if o + len as u64 > self.cx.params.len() as u64 {
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

    /// Loads `sz` bytes (element of an access already checked by [`check_access`]).
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
                if o + sz as u64 > self.cx.k.local_size {
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
                if o + sz as u64 > self.cx.k.local_size {
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
                if o % sz as u64 != 0 {
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

    /// Copies `len` bytes inside a thread's local memory (call parameter passing).
    pub(crate) fn local_copy(&mut self, w: &Warp, l: usize, from: u32, to: u32, len: u32) {
        let base = self.local_base(w, l) as usize;
        let (f, t, n) = (base + from as usize, base + to as usize, len as usize);
        if f + n <= self.local.data.len() && t + n <= self.local.data.len() {
            self.local.data.copy_within(f..f + n, t);
        }
    }
}
