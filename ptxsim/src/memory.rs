//! Simulated memory: checked global allocations (shared by block workers, race-safe in Rust
//! terms), the generic-address windows, and small per-block / per-thread byte arrays.

use crate::error::FaultKind;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Unit of the generic-address window bases (`aux` of cvta instructions).
pub(crate) const WINDOW_UNIT: u64 = 1 << 40;
/// `aux` value of the shared window.
pub(crate) const SHARED_AUX: u32 = 16;
/// `aux` value of the local window.
pub(crate) const LOCAL_AUX: u32 = 32;
/// `aux` value of the kernel-parameter window.
pub(crate) const PARAM_AUX: u32 = 48;
/// Generic base of shared memory.
pub(crate) const SHARED_BASE: u64 = SHARED_AUX as u64 * WINDOW_UNIT;
/// Generic base of local memory.
pub(crate) const LOCAL_BASE: u64 = LOCAL_AUX as u64 * WINDOW_UNIT;
/// Generic base of the kernel parameter buffer.
pub(crate) const PARAM_BASE: u64 = PARAM_AUX as u64 * WINDOW_UNIT;
const WINDOW_SIZE: u64 = 1 << 32;
/// First global allocation address.
pub(crate) const GLOBAL_START: u64 = 0x7f00_0000_0000;
const GAP: u64 = 4096;
/// End of the global address range.
const GLOBAL_END: u64 = 0x7fff_0000_0000_0000;
/// Largest single allocation (64 GiB).
const MAX_ALLOC: u64 = 64 << 30;

/// Where a generic address points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Window {
    Global(u64),
    Shared(u64),
    Local(u64),
    Param(u64),
}

/// Classifies a generic address.
#[inline]
pub(crate) fn window(addr: u64) -> Window {
    if (SHARED_BASE..SHARED_BASE + WINDOW_SIZE).contains(&addr) {
        Window::Shared(addr - SHARED_BASE)
    } else if (LOCAL_BASE..LOCAL_BASE + WINDOW_SIZE).contains(&addr) {
        Window::Local(addr - LOCAL_BASE)
    } else if (PARAM_BASE..PARAM_BASE + WINDOW_SIZE).contains(&addr) {
        Window::Param(addr - PARAM_BASE)
    } else {
        Window::Global(addr)
    }
}

/// A memory error before the executor adds kernel/thread context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemErr {
    pub kind: FaultKind,
    pub allocation: Option<(u64, usize)>,
}

/// One live global allocation.
pub(crate) struct Alloc {
    pub base: u64,
    pub size: usize,
    words: Box<[AtomicU64]>,
    /// Initialization shadow: one bit per byte.
    init: Box<[AtomicU64]>,
}

/// `n` zeroed atomics from the allocator's zeroed memory (pages the host maps lazily), or
/// `None` when the host cannot provide them - never an abort, whatever `n` is.
fn zeroed_atomics(n: usize) -> Option<Box<[AtomicU64]>> {
    if n == 0 {
        return Some(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<AtomicU64>(n).ok()?;
    // SAFETY: `layout` has a non-zero size; all-zero bytes are a valid `AtomicU64` (0); the
    // pointer comes from the global allocator with exactly the layout `Box<[AtomicU64]>` of
    // length `n` frees it with.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut AtomicU64;
        if p.is_null() {
            return None;
        }
        Some(Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)))
    }
}

impl Alloc {
    /// A new allocation, or `None` if the host cannot provide the memory.
    fn new(base: u64, size: usize, init: bool) -> Option<Alloc> {
        let nw = size.div_ceil(8);
        let ni = size.div_ceil(64);
        let words = zeroed_atomics(nw)?;
        let bits = zeroed_atomics(ni)?;
        if init {
            for b in bits.iter() {
                b.store(u64::MAX, Relaxed);
            }
        }
        Some(Alloc {
            base,
            size,
            words,
            init: bits,
        })
    }

    #[inline]
    fn mark_init(&self, off: usize, len: usize) {
        let mut b = off;
        let end = off + len;
        while b < end {
            let n = (64 - b % 64).min(end - b);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << (b % 64)
            };
            let cell = &self.init[b / 64];
            if cell.load(Relaxed) & mask != mask {
                cell.fetch_or(mask, Relaxed);
            }
            b += n;
        }
    }

    /// Whether every byte of `off..off+len` has been written (for initcheck).
    #[inline]
    pub(crate) fn is_init(&self, off: usize, len: usize) -> bool {
        let b = off % 64;
        if len > 0 && b + len <= 64 {
            // Inside one shadow word (every aligned access of up to 16 bytes).
            let m = if len == 64 {
                u64::MAX
            } else {
                ((1u64 << len) - 1) << b
            };
            return self.init[off / 64].load(Relaxed) & m == m;
        }
        (off..off + len).all(|b| self.init[b / 64].load(Relaxed) >> (b % 64) & 1 == 1)
    }

    /// Loads `sz` (1,2,4,8) bytes at aligned offset `off`.
    #[inline]
    pub(crate) fn load(&self, off: usize, sz: usize) -> u64 {
        let w = self.words[off / 8].load(Relaxed);
        let sh = (off % 8) * 8;
        if sz == 8 {
            w
        } else {
            (w >> sh) & ((1u64 << (sz * 8)) - 1)
        }
    }

    /// Stores `sz` (1,2,4,8) bytes at aligned offset `off`.
    #[inline]
    pub(crate) fn store(&self, off: usize, sz: usize, v: u64) {
        let cell = &self.words[off / 8];
        if sz == 8 {
            cell.store(v, Relaxed);
        } else {
            let sh = (off % 8) * 8;
            let mask = ((1u64 << (sz * 8)) - 1) << sh;
            let _ = cell.fetch_update(Relaxed, Relaxed, |w| Some((w & !mask) | ((v << sh) & mask)));
        }
        self.mark_init(off, sz);
    }

    /// Atomic read-modify-write; returns the old value.
    #[inline]
    fn rmw(&self, off: usize, sz: usize, f: &dyn Fn(u64) -> u64) -> u64 {
        let cell = &self.words[off / 8];
        let sh = (off % 8) * 8;
        let vm = if sz == 8 {
            u64::MAX
        } else {
            (1u64 << (sz * 8)) - 1
        };
        let mut old = 0;
        let _ = cell.fetch_update(Relaxed, Relaxed, |w| {
            old = (w >> sh) & vm;
            let new = f(old) & vm;
            Some((w & !(vm << sh)) | (new << sh))
        });
        self.mark_init(off, sz);
        old
    }
}

/// Global memory: live allocations sorted by base, plus the ranges already freed.
#[derive(Default)]
pub(crate) struct GlobalMem {
    live: Vec<Alloc>,
    freed: Vec<(u64, usize)>,
    next: u64,
}

impl GlobalMem {
    pub(crate) fn new() -> GlobalMem {
        GlobalMem {
            live: Vec::new(),
            freed: Vec::new(),
            next: GLOBAL_START,
        }
    }

    /// Allocates `size` bytes, 256-byte aligned, separated from neighbours by an unmapped gap.
    pub(crate) fn alloc(&mut self, size: usize, zeroed: bool) -> Option<u64> {
        if size as u64 > MAX_ALLOC {
            return None;
        }
        let base = self.next;
        let span = (size as u64).checked_add(255)? / 256 * 256;
        let next = base.checked_add(span)?.checked_add(GAP)?;
        if next >= GLOBAL_END {
            return None;
        }
        let a = Alloc::new(base, size, zeroed)?;
        self.next = next;
        self.live.push(a);
        Some(base)
    }

    /// Frees the allocation starting at `base`; false if there is none.
    pub(crate) fn free(&mut self, base: u64) -> bool {
        match self.live.binary_search_by_key(&base, |a| a.base) {
            Ok(i) => {
                let a = self.live.remove(i);
                let pos = self.freed.partition_point(|f| f.0 < base);
                self.freed.insert(pos, (a.base, a.size));
                true
            }
            Err(_) => false,
        }
    }

    /// The allocation containing `[addr, addr+len)`, with the offset of `addr`.
    #[inline]
    pub(crate) fn find(&self, addr: u64, len: usize) -> Result<(&Alloc, usize), MemErr> {
        let i = self.live.partition_point(|a| a.base <= addr);
        if i > 0 {
            let a = &self.live[i - 1];
            let off = addr - a.base;
            if off
                .checked_add(len as u64)
                .is_some_and(|end| end <= a.size as u64)
            {
                return Ok((a, off as usize));
            }
        }
        // freed?
        let j = self.freed.partition_point(|f| f.0 <= addr);
        if j > 0 {
            let (b, s) = self.freed[j - 1];
            if addr < b + s.max(1) as u64 {
                return Err(MemErr {
                    kind: FaultKind::UseAfterFree,
                    allocation: Some((b, s)),
                });
            }
        }
        // nearest live allocation
        let near = |k: usize| self.live.get(k).map(|a| (a.base, a.size));
        let before = if i > 0 { near(i - 1) } else { None };
        let after = near(i);
        let nearest = match (before, after) {
            (Some(b), Some(a)) => {
                if addr.saturating_sub(b.0 + b.1 as u64) <= a.0.saturating_sub(addr) {
                    Some(b)
                } else {
                    Some(a)
                }
            }
            (b, a) => b.or(a),
        };
        Err(MemErr {
            kind: FaultKind::OutOfBounds,
            allocation: nearest,
        })
    }

    fn check_align(addr: u64, align: usize) -> Result<(), MemErr> {
        if addr & (align as u64 - 1) != 0 {
            return Err(MemErr {
                kind: FaultKind::Misaligned,
                allocation: None,
            });
        }
        Ok(())
    }

    /// Checked aligned load of `sz` bytes.
    #[inline]
    pub(crate) fn load(&self, addr: u64, sz: usize) -> Result<u64, MemErr> {
        Self::check_align(addr, sz)?;
        let (a, off) = self.find(addr, sz)?;
        Ok(a.load(off, sz))
    }

    /// Checked aligned store of `sz` bytes.
    #[inline]
    pub(crate) fn store(&self, addr: u64, sz: usize, v: u64) -> Result<(), MemErr> {
        Self::check_align(addr, sz)?;
        let (a, off) = self.find(addr, sz)?;
        a.store(off, sz, v);
        Ok(())
    }

    /// Checked atomic read-modify-write; returns the old value.
    pub(crate) fn rmw(&self, addr: u64, sz: usize, f: &dyn Fn(u64) -> u64) -> Result<u64, MemErr> {
        Self::check_align(addr, sz)?;
        let (a, off) = self.find(addr, sz)?;
        Ok(a.rmw(off, sz, f))
    }

    /// Whether every byte of `[addr, addr+len)` was written (host write, zeroing allocation or
    /// kernel store); false outside live allocations.
    pub(crate) fn is_init(&self, addr: u64, len: usize) -> bool {
        match self.find(addr, len) {
            Ok((a, off)) => a.is_init(off, len),
            Err(_) => false,
        }
    }

    /// Checks that `[addr, addr+len)` is inside a live allocation (for vector access bounds).
    pub(crate) fn check_range(&self, addr: u64, len: usize) -> Result<(), MemErr> {
        self.find(addr, len).map(|_| ())
    }

    /// Host write of bytes (marks them initialized).
    pub(crate) fn write_bytes(&self, addr: u64, bytes: &[u8]) -> Result<(), MemErr> {
        let (a, off) = self.find(addr, bytes.len())?;
        let mut i = 0;
        while i < bytes.len() {
            let o = off + i;
            if o % 8 == 0 && i + 8 <= bytes.len() {
                let mut w = [0u8; 8];
                w.copy_from_slice(&bytes[i..i + 8]);
                a.words[o / 8].store(u64::from_le_bytes(w), Relaxed);
                i += 8;
            } else {
                a.store(o, 1, bytes[i] as u64);
                i += 1;
            }
        }
        a.mark_init(off, bytes.len());
        Ok(())
    }

    /// Host read of bytes.
    pub(crate) fn read_bytes(&self, addr: u64, len: usize) -> Result<Vec<u8>, MemErr> {
        let (a, off) = self.find(addr, len)?;
        let mut out = Vec::with_capacity(len);
        let mut i = 0;
        while i < len {
            let o = off + i;
            if o % 8 == 0 && i + 8 <= len {
                out.extend_from_slice(&a.words[o / 8].load(Relaxed).to_le_bytes());
                i += 8;
            } else {
                out.push(a.load(o, 1) as u8);
                i += 1;
            }
        }
        Ok(out)
    }
}

/// A plain little-endian byte array with checked access (shared, local, param memory).
pub(crate) struct Bytes {
    pub data: Vec<u8>,
}

impl Bytes {
    /// Loads `sz` bytes at `off`; `None` if out of bounds.
    #[inline]
    pub(crate) fn load(&self, off: u64, sz: usize) -> Option<u64> {
        let o = usize::try_from(off).ok()?;
        let s = self.data.get(o..o.checked_add(sz)?)?;
        let mut b = [0u8; 8];
        b[..sz].copy_from_slice(s);
        Some(u64::from_le_bytes(b))
    }
    #[inline]
    pub(crate) fn store(&mut self, off: u64, sz: usize, v: u64) -> Option<()> {
        let o = usize::try_from(off).ok()?;
        let s = self.data.get_mut(o..o.checked_add(sz)?)?;
        s.copy_from_slice(&v.to_le_bytes()[..sz]);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_bounds_free() {
        let mut g = GlobalMem::new();
        let a = g.alloc(100, true).unwrap();
        let b = g.alloc(8, false).unwrap();
        assert_eq!(a % 256, 0);
        assert!(b >= a + 256 + GAP);
        g.store(a + 96, 4, 0xdead_beef).unwrap();
        assert_eq!(g.load(a + 96, 4).unwrap(), 0xdead_beef);
        assert_eq!(g.load(a + 98, 2).unwrap(), 0xdead);
        assert_eq!(g.load(a + 100, 4).unwrap_err().kind, FaultKind::OutOfBounds);
        assert_eq!(g.load(a + 2, 4).unwrap_err().kind, FaultKind::Misaligned);
        assert!(g.free(a));
        assert_eq!(g.load(a, 4).unwrap_err().kind, FaultKind::UseAfterFree);
        let old = g.rmw(b, 4, &|x| x + 5).unwrap();
        assert_eq!(old, 0);
        assert_eq!(g.load(b, 4).unwrap(), 5);
    }

    #[test]
    fn windows() {
        assert_eq!(window(SHARED_BASE + 12), Window::Shared(12));
        assert_eq!(window(GLOBAL_START), Window::Global(GLOBAL_START));
    }
}
