//! How one warp-level request maps onto the memory hardware: the 32-byte sectors a global
//! request touches, the wavefronts a shared request takes (bank conflicts), and the set of
//! distinct sectors a launch touched (for unique bytes).

use super::fasthash::FastMap;
use super::LaneAccess;

/// Size of a global-memory sector in bytes.
pub(crate) const SECTOR_BYTES: u64 = 32;
/// Number of shared-memory banks; each bank is 4 bytes wide.
pub(crate) const BANKS: u64 = 32;

/// Appends the distinct 32-byte sectors touched by `lanes` (each `size` bytes).
pub(super) fn push_sectors(lanes: &[LaneAccess], size: u32, out: &mut Vec<u64>) {
    let start = out.len();
    let size = size.max(1) as u64;
    let mut sorted = true;
    let mut last = None;
    for l in lanes {
        let lo = l.addr / SECTOR_BYTES;
        let hi = l.addr.saturating_add(size - 1) / SECTOR_BYTES;
        for s in lo..=hi {
            match last {
                Some(p) if s == p => continue,
                Some(p) if s < p => sorted = false,
                _ => {}
            }
            out.push(s);
            last = Some(s);
        }
    }
    if !sorted {
        let tail = &mut out[start..];
        tail.sort_unstable();
        let mut w = 0;
        for r in 0..tail.len() {
            if w == 0 || tail[r] != tail[w - 1] {
                tail[w] = tail[r];
                w += 1;
            }
        }
        out.truncate(start + w);
    }
}

/// Wavefronts of one shared request and the conflict-free minimum.
///
/// Lanes are served in phases: 32 lanes per phase for accesses of up to 4 bytes, 16 for 8-byte
/// and 8 for 16-byte accesses. A phase takes as many wavefronts as the largest number of
/// distinct 4-byte words any one bank must deliver (lanes reading the same word share it:
/// broadcast). Phases without an active lane take none.
pub(super) fn wavefronts(lanes: &[LaneAccess], size: u32) -> (u64, u64) {
    let size = size.max(1) as u64;
    let words_per_lane = size.div_ceil(4);
    let lanes_per_phase = (32 / words_per_lane).max(1) as u8;
    let phases = 32u8.div_ceil(lanes_per_phase);
    let mut total = 0;
    let mut ideal = 0;
    for phase in 0..phases {
        // Distinct lanes give at most 32 words per phase; extra words (duplicate lane entries)
        // are ignored rather than trusted.
        let mut words = [0u64; 32];
        let mut n = 0;
        for l in lanes.iter().filter(|l| l.lane / lanes_per_phase == phase) {
            for w in l.addr / 4..=l.addr.saturating_add(size - 1) / 4 {
                if n < words.len() {
                    words[n] = w;
                    n += 1;
                }
            }
        }
        if n == 0 {
            continue;
        }
        let words = &mut words[..n];
        // Fast path: every bank asked for at most one distinct word (one wavefront).
        let mut bank_word = [u64::MAX; BANKS as usize];
        let mut conflict = false;
        for &w in words.iter() {
            let slot = &mut bank_word[(w % BANKS) as usize];
            if *slot == u64::MAX {
                *slot = w;
            } else if *slot != w {
                conflict = true;
                break;
            }
        }
        if !conflict {
            total += 1;
            ideal += 1;
            continue;
        }
        words.sort_unstable();
        let mut per_bank = [0u32; BANKS as usize];
        for (i, w) in words.iter().enumerate() {
            if i == 0 || words[i - 1] != *w {
                per_bank[(w % BANKS) as usize] += 1;
            }
        }
        total += *per_bank.iter().max().unwrap_or(&0) as u64;
        ideal += 1;
    }
    (total, ideal)
}

/// A set of 32-byte sectors (bitmap pages of 4096 sectors).
#[derive(Default)]
pub(super) struct SectorSet {
    pages: FastMap<u64, Box<[u64; 64]>>,
    count: u64,
}

impl SectorSet {
    /// Inserts sectors (duplicates allowed; sorted input takes one map lookup per page).
    pub(super) fn insert_all(&mut self, sectors: &[u64]) {
        let mut i = 0;
        while i < sectors.len() {
            let page = sectors[i] >> 12;
            let bits = self.pages.entry(page).or_insert_with(|| Box::new([0; 64]));
            while i < sectors.len() && sectors[i] >> 12 == page {
                let s = sectors[i];
                let (w, b) = (((s & 4095) >> 6) as usize, s & 63);
                if bits[w] >> b & 1 == 0 {
                    bits[w] |= 1 << b;
                    self.count += 1;
                }
                i += 1;
            }
        }
    }

    /// Adds every sector of `other`.
    pub(super) fn merge(&mut self, other: &SectorSet) {
        for (page, bits) in &other.pages {
            let mine = self.pages.entry(*page).or_insert_with(|| Box::new([0; 64]));
            for (m, o) in mine.iter_mut().zip(bits.iter()) {
                self.count += (o & !*m).count_ones() as u64;
                *m |= o;
            }
        }
    }

    /// Number of distinct sectors.
    pub(super) fn len(&self) -> u64 {
        self.count
    }

    /// Number of distinct sectors in `self` or `other`.
    pub(super) fn union_len(&self, other: &SectorSet) -> u64 {
        let mut n = self.count;
        for (page, bits) in &other.pages {
            match self.pages.get(page) {
                None => n += bits.iter().map(|w| w.count_ones() as u64).sum::<u64>(),
                Some(mine) => {
                    n += bits
                        .iter()
                        .zip(mine.iter())
                        .map(|(o, m)| (o & !m).count_ones() as u64)
                        .sum::<u64>()
                }
            }
        }
        n
    }
}
