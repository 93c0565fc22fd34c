//! The table a [`Metrics`] prints (`Display`): instruction mix, global requests and sectors,
//! coalescing (with the worst PTX lines), unique bytes, shared-memory wavefronts, barriers.

use super::metrics::{ratio, InstrClass, Metrics};
use std::fmt;

/// Uncoalesced PTX lines listed in the table; the rest are counted.
const SHOWN_LINES: usize = 8;

impl fmt::Display for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        instructions(self, f)?;
        global(self, f)?;
        coalescing(self, f)?;
        writeln!(
            f,
            "{:<16} {:>10} (loaded {}, stored {}; requested {})",
            "unique bytes",
            self.unique_bytes,
            self.unique_load_bytes,
            self.unique_store_bytes,
            self.requested_bytes()
        )?;
        shared(self, f)?;
        write!(f, "{:<16} {:>10}", "barriers", self.barriers)
    }
}

/// Warp- and thread-level counts of each class that ran.
fn instructions(m: &Metrics, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "{:<16} {:>14} {:>16}", "instructions", "warp", "thread")?;
    for &c in InstrClass::ALL {
        let (w, t) = (m.instructions(c), m.thread_instructions(c));
        if w != 0 {
            writeln!(f, "  {:<14} {:>14} {:>16}", c.name(), w, t)?;
        }
    }
    Ok(())
}

/// Global requests, sectors and bytes of loads, stores and (when any) atomics.
fn global(m: &Metrics, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(
        f,
        "{:<16} {:>10} {:>10} {:>12} {:>14}",
        "global", "requests", "sectors", "sectors/req", "bytes"
    )?;
    let rows = [
        (
            "  loads",
            m.global_load_requests,
            m.global_load_sectors,
            m.global_load_bytes,
        ),
        (
            "  stores",
            m.global_store_requests,
            m.global_store_sectors,
            m.global_store_bytes,
        ),
    ];
    for (name, r, s, b) in rows {
        writeln!(
            f,
            "{name:<16} {r:>10} {s:>10} {:>12.2} {b:>14}",
            ratio(s, r)
        )?;
    }
    if m.global_atomic_requests != 0 {
        let (r, s) = (m.global_atomic_requests, m.global_atomic_sectors);
        writeln!(
            f,
            "{:<16} {r:>10} {s:>10} {:>12.2}",
            "  atomics",
            ratio(s, r)
        )?;
    }
    Ok(())
}

/// Ideal and excess sectors and uncoalesced requests, then the worst PTX lines.
fn coalescing(m: &Metrics, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(
        f,
        "{:<16} {:>10} {:>10} {:>12} {:>14}",
        "coalescing", "ideal", "excess", "uncoalesced", "of requests"
    )?;
    let rows = [
        (
            "  loads",
            m.global_load_ideal_sectors,
            m.global_load_sectors,
            m.uncoalesced_load_requests,
            m.global_load_requests,
        ),
        (
            "  stores",
            m.global_store_ideal_sectors,
            m.global_store_sectors,
            m.uncoalesced_store_requests,
            m.global_store_requests,
        ),
        (
            "  atomics",
            m.global_atomic_ideal_sectors,
            m.global_atomic_sectors,
            m.uncoalesced_atomic_requests,
            m.global_atomic_requests,
        ),
    ];
    for (name, ideal, s, u, r) in rows {
        if r != 0 || name != "  atomics" {
            writeln!(
                f,
                "{name:<16} {ideal:>10} {:>10} {u:>12} {r:>14}",
                s - ideal
            )?;
        }
    }
    for l in m.uncoalesced_lines.iter().take(SHOWN_LINES) {
        writeln!(f, "  {l}")?;
    }
    if m.uncoalesced_lines.len() > SHOWN_LINES {
        writeln!(
            f,
            "  ... {} more PTX lines with uncoalesced requests",
            m.uncoalesced_lines.len() - SHOWN_LINES
        )?;
    }
    Ok(())
}

/// Shared requests, wavefronts and bank conflicts of loads and stores; atomics when any.
fn shared(m: &Metrics, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(
        f,
        "{:<16} {:>10} {:>10} {:>12} {:>14}",
        "shared", "requests", "wavefronts", "wf/req", "conflicts"
    )?;
    let rows = [
        (
            "  loads",
            m.shared_load_requests,
            m.shared_load_wavefronts,
            m.shared_load_ideal_wavefronts,
        ),
        (
            "  stores",
            m.shared_store_requests,
            m.shared_store_wavefronts,
            m.shared_store_ideal_wavefronts,
        ),
    ];
    for (name, r, w, i) in rows {
        writeln!(
            f,
            "{name:<16} {r:>10} {w:>10} {:>12.2} {:>14}",
            ratio(w, r),
            w - i
        )?;
    }
    if m.shared_atomic_requests != 0 {
        writeln!(f, "{:<16} {:>10}", "  atomics", m.shared_atomic_requests)?;
    }
    Ok(())
}
