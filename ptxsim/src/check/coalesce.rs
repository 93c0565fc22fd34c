//! Per-request coalescing of global memory requests.
//!
//! The ideal number of 32-byte sectors of a request is `ceil(distinct bytes / 32)`, where the
//! distinct bytes are the union of the bytes its active lanes access (a broadcast, where many
//! lanes read the same word, counts that word once). A request is *uncoalesced* when it touches
//! more sectors than that. Fully coalesced requests (consecutive lanes on consecutive, aligned
//! elements; any active subset of lanes on whole sectors; broadcasts) need exactly their ideal;
//! strided, scattered and misaligned requests need more. The difference is the request's
//! *excess sectors*.
//!
//! Note the definition is per request, not per span: a partial warp whose few bytes straddle a
//! sector boundary (e.g. 8 active lanes reading 32 bytes starting 16 bytes into a sector) is
//! uncoalesced by this measure, as it is on hardware (two sectors where one would do).

use super::report::AccessKind;
use super::LaneAccess;
use std::fmt;

/// Uncoalesced requests of one memory instruction (one PTX line), summed over a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UncoalescedLine {
    /// 1-based PTX line of the instruction.
    pub line: usize,
    /// Load, store or atomic.
    pub kind: AccessKind,
    /// Uncoalesced requests this instruction made.
    pub requests: u64,
    /// Sectors those requests touched (summed per request).
    pub sectors: u64,
    /// Ideal sectors of those requests (summed per request).
    pub ideal_sectors: u64,
}

impl UncoalescedLine {
    /// Sectors beyond the ideal.
    pub fn excess_sectors(&self) -> u64 {
        self.sectors - self.ideal_sectors
    }
}

impl fmt::Display for UncoalescedLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            AccessKind::Load => "load",
            AccessKind::Store => "store",
            AccessKind::Atomic => "atomic",
        };
        write!(
            f,
            "PTX line {} ({what}): {} uncoalesced requests, {} sectors for ideal {} (+{})",
            self.line,
            self.requests,
            self.sectors,
            self.ideal_sectors,
            self.excess_sectors()
        )
    }
}

/// Number of distinct bytes `lanes` access, `size` bytes each.
pub(super) fn distinct_bytes(lanes: &[LaneAccess], size: u32) -> u64 {
    let size = size.max(1) as u64;
    // Fast path: starts in non-decreasing order (every coalesced or broadcast request).
    if let Some(n) = union_sorted(lanes.iter().map(|l| l.addr), size) {
        return n;
    }
    let mut buf = [0u64; 32];
    let mut heap;
    let addrs: &mut [u64] = if lanes.len() <= buf.len() {
        let b = &mut buf[..lanes.len()];
        for (d, l) in b.iter_mut().zip(lanes) {
            *d = l.addr;
        }
        b
    } else {
        heap = lanes.iter().map(|l| l.addr).collect::<Vec<_>>();
        &mut heap
    };
    addrs.sort_unstable();
    union_sorted(addrs.iter().copied(), size).unwrap_or(0)
}

/// Size of the union of the intervals `[a, a + size)`, or `None` when the starts are not in
/// non-decreasing order.
#[inline]
fn union_sorted(starts: impl Iterator<Item = u64>, size: u64) -> Option<u64> {
    let mut total = 0;
    let mut prev = 0;
    let mut end = 0;
    for a in starts {
        if a < prev {
            return None;
        }
        prev = a;
        let e = a.saturating_add(size);
        if e > end {
            total += e - a.max(end);
            end = e;
        }
    }
    Some(total)
}

/// Adds one uncoalesced request to `lines` (kept sorted by line and kind).
pub(super) fn add_line(
    lines: &mut Vec<UncoalescedLine>,
    line: u32,
    kind: AccessKind,
    sectors: u64,
    ideal: u64,
) {
    let key = (line as usize, kind);
    match lines.binary_search_by(|l| (l.line, l.kind).cmp(&key)) {
        Ok(i) => {
            let l = &mut lines[i];
            l.requests += 1;
            l.sectors += sectors;
            l.ideal_sectors += ideal;
        }
        Err(i) => lines.insert(
            i,
            UncoalescedLine {
                line: key.0,
                kind,
                requests: 1,
                sectors,
                ideal_sectors: ideal,
            },
        ),
    }
}

/// Merges `other` into `lines` (both sorted by line and kind).
pub(super) fn merge_lines(lines: &mut Vec<UncoalescedLine>, other: &[UncoalescedLine]) {
    for o in other {
        let key = (o.line, o.kind);
        match lines.binary_search_by(|l| (l.line, l.kind).cmp(&key)) {
            Ok(i) => {
                let l = &mut lines[i];
                l.requests += o.requests;
                l.sectors += o.sectors;
                l.ideal_sectors += o.ideal_sectors;
            }
            Err(i) => lines.insert(i, *o),
        }
    }
}

/// Orders `lines` for reading: most excess sectors first, then by line and kind.
pub(super) fn sort_by_excess(lines: &mut [UncoalescedLine]) {
    lines.sort_by(|a, b| {
        b.excess_sectors()
            .cmp(&a.excess_sectors())
            .then(a.line.cmp(&b.line))
            .then(a.kind.cmp(&b.kind))
    });
}
