//! Unit tests of the checks on synthetic event streams (no executor involved). Expected values
//! are worked out by hand from the access patterns written in each test.

mod init;
mod metrics;
mod race;

use super::*;

const ALL: CheckConfig = CheckConfig {
    racecheck: true,
    initcheck: true,
    metrics: true,
};
const RACE: CheckConfig = CheckConfig {
    racecheck: true,
    initcheck: false,
    metrics: false,
};
const INIT: CheckConfig = CheckConfig {
    racecheck: false,
    initcheck: true,
    metrics: false,
};
const METRICS: CheckConfig = CheckConfig {
    racecheck: false,
    initcheck: false,
    metrics: true,
};

/// Base of a pretend global allocation (256-byte aligned like the simulator's).
const G: u64 = 0x7f00_0000_0000;

fn launch(cfg: CheckConfig, grid: u32, block: u32, shared: usize) -> LaunchChecks {
    LaunchChecks::new(
        cfg,
        Geometry {
            grid: [grid, 1, 1],
            block: [block, 1, 1],
            shared_bytes: shared,
        },
    )
}

/// Lanes `active` accessing `addr(lane)`.
fn lanes(active: impl IntoIterator<Item = u32>, addr: impl Fn(u32) -> u64) -> Vec<LaneAccess> {
    active
        .into_iter()
        .map(|l| LaneAccess {
            addr: addr(l),
            lane: l as u8,
            uninit: false,
        })
        .collect()
}

/// One lane accessing one address.
fn one(lane: u32, addr: u64) -> Vec<LaneAccess> {
    lanes([lane], |_| addr)
}

#[allow(clippy::too_many_arguments)]
fn access(
    b: &mut BlockChecks<'_>,
    space: MemSpace,
    kind: AccessKind,
    line: u32,
    warp: u32,
    size: u32,
    l: &[LaneAccess],
) {
    b.access(&WarpAccess {
        space,
        kind,
        strong: false,
        line,
        warp,
        size,
        lanes: l,
    });
}

fn st_s(b: &mut BlockChecks<'_>, line: u32, warp: u32, l: &[LaneAccess]) {
    access(b, MemSpace::Shared, AccessKind::Store, line, warp, 4, l);
}

fn ld_s(b: &mut BlockChecks<'_>, line: u32, warp: u32, l: &[LaneAccess]) {
    access(b, MemSpace::Shared, AccessKind::Load, line, warp, 4, l);
}

fn st_g(b: &mut BlockChecks<'_>, line: u32, warp: u32, l: &[LaneAccess]) {
    access(b, MemSpace::Global, AccessKind::Store, line, warp, 4, l);
}

fn ld_g(b: &mut BlockChecks<'_>, line: u32, warp: u32, l: &[LaneAccess]) {
    access(b, MemSpace::Global, AccessKind::Load, line, warp, 4, l);
}

/// Runs `body` for blocks `0..n` on one worker, in order.
fn run_blocks(lc: &LaunchChecks, n: u32, mut body: impl FnMut(&mut BlockChecks<'_>, u32)) {
    let mut b = lc.block();
    for i in 0..n {
        b.start(i as u64, [i, 0, 0]);
        body(&mut b, i);
        b.end();
    }
}

fn site(line: usize, block: u32, thread: u32, kind: AccessKind) -> AccessSite {
    AccessSite {
        line,
        block: [block, 0, 0],
        thread: [thread, 0, 0],
        kind,
    }
}
