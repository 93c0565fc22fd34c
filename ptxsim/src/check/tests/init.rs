use super::*;
use AccessKind::{Atomic, Load, Store};

fn uninit(space: MemSpace, address: u64, first: AccessSite, count: u64) -> Report {
    Report {
        kind: ReportKind::Uninitialized,
        space,
        address,
        first,
        second: None,
        count,
    }
}

#[test]
fn shared_read_before_any_write() {
    let lc = launch(INIT, 2, 64, 256);
    run_blocks(&lc, 2, |b, _| {
        st_s(b, 10, 0, &lanes(0..32, |l| 4 * l as u64)); // words 0..32 written
        ld_s(b, 11, 0, &lanes(0..32, |l| 4 * l as u64)); // fine
        ld_s(b, 12, 1, &lanes(0..32, |l| 4 * (l + 16) as u64)); // words 32..48 never written
    });
    let out = lc.finish();
    // Per block, lanes 16..32 of warp 1 (threads 48..64) read unwritten words; both blocks.
    assert_eq!(
        out.reports,
        vec![uninit(MemSpace::Shared, 128, site(12, 0, 48, Load), 32)]
    );
}

#[test]
fn shared_init_is_per_block_and_per_byte() {
    let lc = launch(INIT, 2, 32, 64);
    run_blocks(&lc, 2, |b, i| {
        if i == 0 {
            // Block 0 writes all of shared memory; block 1 only reads.
            st_s(b, 10, 0, &lanes(0..16, |l| 4 * l as u64));
        } else {
            // Two bytes written, then a 4-byte read of the word: reported at the third byte.
            access(b, MemSpace::Shared, Store, 20, 0, 2, &one(0, 40));
            ld_s(b, 21, 0, &one(0, 40));
        }
    });
    assert_eq!(
        lc.finish().reports,
        vec![uninit(MemSpace::Shared, 42, site(21, 1, 0, Load), 1)]
    );
}

#[test]
fn shared_atomic_reads_and_writes() {
    let lc = launch(INIT, 1, 32, 64);
    run_blocks(&lc, 1, |b, _| {
        access(b, MemSpace::Shared, Atomic, 10, 0, 4, &one(0, 0)); // reads garbage
        ld_s(b, 11, 0, &one(1, 0)); // written by the atomic
    });
    assert_eq!(
        lc.finish().reports,
        vec![uninit(MemSpace::Shared, 0, site(10, 0, 0, Atomic), 1)]
    );
}

#[test]
fn global_uninit_comes_from_the_lane_flag() {
    let lc = launch(INIT, 1, 64, 0);
    run_blocks(&lc, 1, |b, _| {
        let mut l = lanes(0..32, |l| G + 4 * l as u64);
        for x in &mut l[8..10] {
            x.uninit = true;
        }
        ld_g(b, 10, 1, &l);
        // A store never reports, whatever the flag says.
        st_g(b, 11, 0, &l);
    });
    assert_eq!(
        lc.finish().reports,
        vec![uninit(MemSpace::Global, G + 32, site(10, 0, 40, Load), 2)]
    );
}

#[test]
fn thread_and_block_indices_are_three_dimensional() {
    let lc = LaunchChecks::new(
        INIT,
        Geometry {
            grid: [2, 3, 1],
            block: [8, 4, 2],
            shared_bytes: 16,
        },
    );
    let mut b = lc.block();
    // Block (1,2,0) is linear 1 + 2*2 = 5; warp 1 lane 9 is thread 41 = (1, 1, 1).
    b.start(5, [1, 2, 0]);
    ld_s(&mut b, 7, 1, &one(9, 4));
    b.end();
    drop(b);
    let r = lc.finish().reports;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].first.block, [1, 2, 0]);
    assert_eq!(r[0].first.thread, [1, 1, 1]);
    assert_eq!(
        r[0].to_string(),
        "uninitialized read of shared memory at offset 0x4: read by block (1,2,0) \
         thread (1,1,1) at PTX line 7"
    );
}

#[test]
fn disabled_checks_report_nothing() {
    let lc = launch(METRICS, 1, 64, 64);
    run_blocks(&lc, 1, |b, _| {
        ld_s(b, 10, 0, &one(0, 0));
        st_s(b, 11, 1, &one(0, 0));
        ld_s(b, 12, 0, &one(1, 0));
    });
    let out = lc.finish();
    assert_eq!(out.reports, vec![]);
    assert!(out.metrics.is_some());
    // The same stream with everything on: an uninitialized read and two races.
    let lc = launch(ALL, 1, 64, 64);
    run_blocks(&lc, 1, |b, _| {
        ld_s(b, 10, 0, &one(0, 0));
        st_s(b, 11, 1, &one(0, 0));
        ld_s(b, 12, 0, &one(1, 0));
    });
    let kinds: Vec<ReportKind> = lc.finish().reports.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        vec![
            ReportKind::Uninitialized,
            ReportKind::Race(Hazard::WriteAfterRead),
            ReportKind::Race(Hazard::ReadAfterWrite),
        ]
    );
}
