use super::*;
use AccessKind::{Load, Store};

fn race(
    h: Hazard,
    space: MemSpace,
    address: u64,
    first: AccessSite,
    second: AccessSite,
    count: u64,
) -> Report {
    Report {
        kind: ReportKind::Race(h),
        space,
        address,
        first,
        second: Some(second),
        count,
    }
}

#[test]
fn shared_raw_between_warps_without_barrier() {
    let lc = launch(RACE, 1, 64, 256);
    run_blocks(&lc, 1, |b, _| {
        st_s(b, 10, 1, &one(0, 8)); // thread 32 writes s[8..12]
        ld_s(b, 20, 0, &one(3, 8)); // thread 3 reads it
    });
    let out = lc.finish();
    assert_eq!(
        out.reports,
        vec![race(
            Hazard::ReadAfterWrite,
            MemSpace::Shared,
            8,
            site(10, 0, 32, Store),
            site(20, 0, 3, Load),
            1
        )]
    );
    assert!(out.metrics.is_none());
}

#[test]
fn barrier_orders_the_block() {
    let lc = launch(RACE, 1, 64, 256);
    run_blocks(&lc, 1, |b, _| {
        st_s(b, 10, 1, &one(0, 8));
        b.barrier();
        ld_s(b, 20, 0, &one(3, 8));
        b.barrier();
        st_s(b, 30, 0, &one(5, 8)); // after the read, ordered by the second barrier
    });
    assert_eq!(lc.finish().reports, vec![]);
}

#[test]
fn war_and_waw_between_warps() {
    let lc = launch(RACE, 1, 96, 256);
    run_blocks(&lc, 1, |b, _| {
        ld_s(b, 10, 0, &one(1, 16)); // thread 1 reads s[16]
        st_s(b, 11, 2, &one(2, 16)); // thread 66 writes it: WAR
        st_s(b, 12, 1, &one(0, 16)); // thread 32 writes it: WAW (checked before the reads)
    });
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![
            race(
                Hazard::WriteAfterRead,
                MemSpace::Shared,
                16,
                site(10, 0, 1, Load),
                site(11, 0, 66, Store),
                1
            ),
            race(
                Hazard::WriteAfterWrite,
                MemSpace::Shared,
                16,
                site(11, 0, 66, Store),
                site(12, 0, 32, Store),
                1
            ),
        ]
    );
}

#[test]
fn same_thread_and_disjoint_bytes_are_not_races() {
    let lc = launch(RACE, 1, 64, 256);
    run_blocks(&lc, 1, |b, _| {
        // Each thread writes then reads its own word; 2-byte halves of one word by two threads.
        st_s(b, 10, 0, &lanes(0..32, |l| 4 * l as u64));
        ld_s(b, 11, 0, &lanes(0..32, |l| 4 * l as u64));
        access(b, MemSpace::Shared, Store, 12, 1, 2, &one(0, 200));
        access(b, MemSpace::Shared, Store, 13, 0, 2, &one(0, 202));
        // Many readers of one word (broadcast) are fine.
        ld_s(b, 14, 0, &lanes(0..32, |_| 128));
        ld_s(b, 14, 1, &lanes(0..32, |_| 128));
    });
    assert_eq!(lc.finish().reports, vec![]);
}

#[test]
fn warp_exchange_needs_syncwarp() {
    for sync in [false, true] {
        let lc = launch(RACE, 1, 32, 128);
        run_blocks(&lc, 1, |b, _| {
            st_s(b, 10, 0, &lanes(0..32, |l| 4 * l as u64));
            if sync {
                b.warp_sync(0, u32::MAX);
            }
            ld_s(b, 12, 0, &lanes(0..32, |l| 4 * (l ^ 1) as u64));
        });
        let r = lc.finish().reports;
        if sync {
            assert_eq!(r, vec![]);
        } else {
            // Lane 0 reads word 1, written by lane 1 at line 10; all 32 lanes race.
            assert_eq!(
                r,
                vec![race(
                    Hazard::ReadAfterWrite,
                    MemSpace::Shared,
                    4,
                    site(10, 0, 1, Store),
                    site(12, 0, 0, Load),
                    32
                )]
            );
        }
    }
}

#[test]
fn partial_warp_sync_orders_only_members() {
    let lc = launch(RACE, 1, 32, 128);
    run_blocks(&lc, 1, |b, _| {
        st_s(b, 10, 0, &lanes(0..32, |l| 4 * l as u64));
        b.warp_sync(0, 0x0000_ffff);
        // Lanes 0..16 read words 8..24: words 8..16 were written by synced lanes, 16..24 not.
        ld_s(b, 12, 0, &lanes(0..16, |l| 4 * (l + 8) as u64));
    });
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![race(
            Hazard::ReadAfterWrite,
            MemSpace::Shared,
            64,
            site(10, 0, 16, Store),
            site(12, 0, 8, Load),
            8
        )]
    );
}

#[test]
fn warp_sync_is_transitive() {
    let lc = launch(RACE, 1, 32, 128);
    run_blocks(&lc, 1, |b, _| {
        st_s(b, 10, 0, &one(0, 0)); // lane 0 writes
        b.warp_sync(0, 0b011); // lanes 0, 1
        b.warp_sync(0, 0b110); // lanes 1, 2: lane 2 now knows lane 0's write
        ld_s(b, 12, 0, &one(2, 0)); // ordered
        ld_s(b, 13, 0, &one(3, 0)); // lane 3 never synced: race
    });
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![race(
            Hazard::ReadAfterWrite,
            MemSpace::Shared,
            0,
            site(10, 0, 0, Store),
            site(13, 0, 3, Load),
            1
        )]
    );
}

#[test]
fn write_after_sync_races_with_reads_after_it() {
    let lc = launch(RACE, 1, 32, 128);
    run_blocks(&lc, 1, |b, _| {
        st_s(b, 10, 0, &one(0, 0));
        b.warp_sync(0, u32::MAX);
        ld_s(b, 11, 0, &one(1, 0)); // ordered after the write
        st_s(b, 12, 0, &one(0, 0)); // lane 1's read is not ordered before this write
    });
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![race(
            Hazard::WriteAfterRead,
            MemSpace::Shared,
            0,
            site(11, 0, 1, Load),
            site(12, 0, 0, Store),
            1
        )]
    );
}

#[test]
fn write_checks_two_earlier_readers() {
    // Threads 0, 32, 64 read s[0]; thread 0 then writes it: its own read does not count, the
    // latest other reader (64) does.
    let lc = launch(RACE, 1, 96, 64);
    run_blocks(&lc, 1, |b, _| {
        ld_s(b, 10, 0, &one(0, 0));
        ld_s(b, 11, 1, &one(0, 0));
        ld_s(b, 12, 2, &one(0, 0));
        st_s(b, 13, 0, &one(0, 0));
    });
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![race(
            Hazard::WriteAfterRead,
            MemSpace::Shared,
            0,
            site(12, 0, 64, Load),
            site(13, 0, 0, Store),
            1
        )]
    );
}

/// A tree reduction over 64 threads, as `s[t] += s[t + stride]` for stride 32, 16, .., 1, with
/// the barrier after iteration `skip` left out (None: all barriers present).
fn reduction(b: &mut BlockChecks<'_>, skip: Option<u32>) {
    st_s(b, 100, 0, &lanes(0..32, |l| 4 * l as u64));
    st_s(b, 100, 1, &lanes(0..32, |l| 4 * (l + 32) as u64));
    b.barrier();
    let mut stride = 32;
    let mut it = 0;
    while stride > 0 {
        let active: Vec<u32> = (0..32).filter(|&t| t < stride).collect();
        ld_s(b, 110, 0, &lanes(active.iter().copied(), |l| 4 * l as u64));
        ld_s(
            b,
            111,
            0,
            &lanes(active.iter().copied(), |l| 4 * (l + stride) as u64),
        );
        st_s(b, 112, 0, &lanes(active.iter().copied(), |l| 4 * l as u64));
        if skip != Some(it) {
            b.barrier();
        }
        stride /= 2;
        it += 1;
    }
}

#[test]
fn reduction_missing_one_barrier() {
    let lc = launch(RACE, 1, 64, 256);
    run_blocks(&lc, 1, |b, _| reduction(b, None));
    assert_eq!(lc.finish().reports, vec![]);

    // Without the barrier after stride 8 (iteration 2), stride 4 reads s[4..8] that lanes 4..8
    // wrote at line 112 in the same interval: lane 0 reads s[4] written by lane 4.
    let lc = launch(RACE, 1, 64, 256);
    run_blocks(&lc, 1, |b, _| reduction(b, Some(2)));
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![race(
            Hazard::ReadAfterWrite,
            MemSpace::Shared,
            16,
            site(112, 0, 4, Store),
            site(111, 0, 0, Load),
            4
        )]
    );
}

#[test]
fn half_words_are_tracked_per_byte() {
    // Threads 0 and 33 write the two halves of word 0 (2-byte stores, no overlap); thread 64
    // reads the low half: a race with thread 0 only.
    let lc = launch(RACE, 1, 96, 64);
    run_blocks(&lc, 1, |b, _| {
        access(b, MemSpace::Shared, Store, 10, 0, 2, &one(0, 0));
        access(b, MemSpace::Shared, Store, 11, 1, 2, &one(1, 2));
        access(b, MemSpace::Shared, Load, 12, 2, 2, &one(0, 0));
        b.barrier();
        // After the barrier: full-word store by thread 5 and a 2-byte read of the high half
        // by thread 40 (another warp): race on byte 2 with the word store.
        st_s(b, 13, 0, &one(5, 0));
        access(b, MemSpace::Shared, Load, 14, 1, 2, &one(8, 2));
    });
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![
            race(
                Hazard::ReadAfterWrite,
                MemSpace::Shared,
                0,
                site(10, 0, 0, Store),
                site(12, 0, 64, Load),
                1
            ),
            race(
                Hazard::ReadAfterWrite,
                MemSpace::Shared,
                2,
                site(13, 0, 5, Store),
                site(14, 0, 40, Load),
                1
            ),
        ]
    );
}

#[test]
fn blocks_do_not_share_shared_memory() {
    let lc = launch(RACE, 2, 64, 64);
    run_blocks(&lc, 2, |b, i| {
        if i == 0 {
            st_s(b, 10, 0, &one(0, 0));
        } else {
            ld_s(b, 11, 1, &one(0, 0));
        }
    });
    assert_eq!(lc.finish().reports, vec![]);
}

#[test]
fn global_race_within_block() {
    let lc = launch(RACE, 1, 64, 0);
    run_blocks(&lc, 1, |b, _| {
        st_g(b, 10, 0, &one(5, G + 4));
        ld_g(b, 11, 1, &one(7, G + 4));
    });
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![race(
            Hazard::ReadAfterWrite,
            MemSpace::Global,
            G + 4,
            site(10, 0, 5, Store),
            site(11, 0, 39, Load),
            1
        )]
    );
}

#[test]
fn global_races_across_blocks() {
    // Block 0 writes out[0..32]; block 1 reads out[31] and writes out[40]; block 2 writes
    // out[40] too; block 3 writes the neighbouring 2-byte half of out[63] (no overlap).
    let lc = launch(RACE, 4, 32, 0);
    run_blocks(&lc, 4, |b, i| match i {
        0 => st_g(b, 10, 0, &lanes(0..32, |l| G + 4 * l as u64)),
        1 => {
            ld_g(b, 20, 0, &one(3, G + 4 * 31));
            st_g(b, 21, 0, &one(4, G + 4 * 40));
            access(b, MemSpace::Global, Store, 22, 0, 2, &one(0, G + 4 * 63));
        }
        2 => st_g(b, 30, 0, &one(6, G + 4 * 40)),
        _ => access(
            b,
            MemSpace::Global,
            Store,
            40,
            0,
            2,
            &one(1, G + 4 * 63 + 2),
        ),
    });
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![
            race(
                Hazard::ReadWrite,
                MemSpace::Global,
                G + 124,
                site(10, 0, 31, Store),
                site(20, 1, 3, Load),
                1
            ),
            race(
                Hazard::WriteAfterWrite,
                MemSpace::Global,
                G + 160,
                site(21, 1, 4, Store),
                site(30, 2, 6, Store),
                1
            ),
        ]
    );
}

#[test]
fn cross_block_report_names_the_thread_of_a_strided_write() {
    // Block 0 (256 threads): thread 32w + l writes word 8l + w, so each run of 8 words is
    // written by threads l, l+32, .., l+224. Block 1's thread 5 reads word 26 = 8*3 + 2,
    // written by thread 32*2 + 3 = 67.
    let lc = launch(RACE, 2, 256, 0);
    run_blocks(&lc, 2, |b, i| {
        if i == 0 {
            for w in 0..8u32 {
                st_g(b, 10, w, &lanes(0..32, |l| G + 4 * (8 * l + w) as u64));
            }
        } else {
            ld_g(b, 20, 0, &one(5, G + 4 * 26));
        }
    });
    let r = lc.finish().reports;
    assert_eq!(
        r,
        vec![race(
            Hazard::ReadWrite,
            MemSpace::Global,
            G + 104,
            site(10, 0, 67, Store),
            site(20, 1, 5, Load),
            1
        )]
    );
}

#[test]
fn atomics_and_strong_accesses_are_not_races() {
    let lc = launch(RACE, 2, 32, 64);
    run_blocks(&lc, 2, |b, _| {
        access(
            b,
            MemSpace::Global,
            AccessKind::Atomic,
            10,
            0,
            4,
            &lanes(0..32, |_| G),
        );
        access(
            b,
            MemSpace::Shared,
            AccessKind::Atomic,
            11,
            0,
            4,
            &lanes(0..32, |_| 0),
        );
        b.access(&WarpAccess {
            space: MemSpace::Global,
            kind: Store,
            strong: true,
            line: 12,
            warp: 0,
            size: 4,
            lanes: &lanes(0..32, |_| G + 64),
        });
    });
    assert_eq!(lc.finish().reports, vec![]);
}

/// A racy launch of 8 blocks: each block's thread 0 writes a flag word every block reads and
/// its warp exchanges shared words without a sync.
fn racy_block(b: &mut BlockChecks<'_>, i: u32) {
    st_s(b, 5, 0, &lanes(0..32, |l| 4 * l as u64));
    ld_s(b, 6, 0, &lanes(0..32, |l| 4 * (31 - l) as u64));
    ld_g(b, 7, 0, &lanes(0..32, |_| G));
    st_g(b, 8, 0, &one(0, G + 4 * (i % 3) as u64));
}

#[test]
fn reports_do_not_depend_on_block_order_or_workers() {
    let reference = {
        let lc = launch(RACE, 8, 32, 128);
        run_blocks(&lc, 8, racy_block);
        lc.finish().reports
    };
    assert!(!reference.is_empty());
    // Reversed order on one worker.
    let lc = launch(RACE, 8, 32, 128);
    let mut b = lc.block();
    for i in (0..8).rev() {
        b.start(i as u64, [i, 0, 0]);
        racy_block(&mut b, i);
        b.end();
    }
    drop(b);
    assert_eq!(lc.finish().reports, reference);
    // Two workers in parallel, odd and even blocks.
    let lc = launch(RACE, 8, 32, 128);
    std::thread::scope(|s| {
        for w in 0..2 {
            let lc = &lc;
            s.spawn(move || {
                let mut b = lc.block();
                for i in (w..8).step_by(2) {
                    b.start(i as u64, [i, 0, 0]);
                    racy_block(&mut b, i);
                    b.end();
                }
            });
        }
    });
    assert_eq!(lc.finish().reports, reference);
}

#[test]
fn racy_launch_reports_expected_pairs() {
    let lc = launch(RACE, 8, 32, 128);
    run_blocks(&lc, 8, racy_block);
    let r = lc.finish().reports;
    let kinds: Vec<(ReportKind, MemSpace, (usize, usize))> =
        r.iter().map(|r| (r.kind, r.space, r.lines())).collect();
    assert_eq!(
        kinds,
        vec![
            // Shared exchange without __syncwarp: lane l reads word 31-l, written by lane 31-l.
            (
                ReportKind::Race(Hazard::ReadAfterWrite),
                MemSpace::Shared,
                (5, 6)
            ),
            // Blocks 0, 3, 6: thread 0 writes G, which lanes 1..32 of its warp read unordered.
            (
                ReportKind::Race(Hazard::WriteAfterRead),
                MemSpace::Global,
                (7, 8)
            ),
            // G written by blocks 0, 3, 6 and read by every block.
            (
                ReportKind::Race(Hazard::ReadWrite),
                MemSpace::Global,
                (8, 7)
            ),
            // Words 0, 1, 2 written by blocks {0,3,6}, {1,4,7}, {2,5}.
            (
                ReportKind::Race(Hazard::WriteAfterWrite),
                MemSpace::Global,
                (8, 8)
            ),
        ]
    );
    // 32 lanes x 8 blocks; one store in each of 3 blocks; the reads of blocks 1..8 (block 0
    // read before any other block's write in address order); blocks 3, 6, 4, 7, 5.
    let counts: Vec<u64> = r.iter().map(|r| r.count).collect();
    assert_eq!(counts, vec![256, 3, 7, 5]);
    assert_eq!(r[0].first, site(5, 0, 31, Store));
    assert_eq!(r[0].second, Some(site(6, 0, 0, Load)));
    assert_eq!(r[0].address, 124);
    assert_eq!(r[1].first, site(7, 0, 31, Load));
    assert_eq!(r[1].second, Some(site(8, 0, 0, Store)));
    assert_eq!(r[2].first, site(8, 0, 0, Store));
    assert_eq!(r[2].second, Some(site(7, 1, 0, Load)));
    assert_eq!(r[2].address, G);
    assert_eq!(r[3].first, site(8, 0, 0, Store));
    assert_eq!(r[3].second, Some(site(8, 3, 0, Store)));
}

#[test]
fn report_cap_counts_the_rest() {
    let lc = launch(RACE, 1, 64, 4096);
    run_blocks(&lc, 1, |b, _| {
        for i in 0..150u32 {
            st_s(b, 1000 + i, 0, &one(0, 4 * i as u64));
            ld_s(b, 2000 + i, 1, &one(0, 4 * i as u64));
        }
    });
    let out = lc.finish();
    assert_eq!(out.reports.len(), MAX_REPORTS);
    assert_eq!(out.reports_omitted, 50);
    assert_eq!(out.reports[0].lines(), (1000, 2000));
    assert_eq!(out.reports[99].lines(), (1099, 2099));
}

#[test]
fn display_names_both_accesses() {
    let r = race(
        Hazard::ReadAfterWrite,
        MemSpace::Shared,
        8,
        site(10, 0, 32, Store),
        site(20, 0, 3, Load),
        5,
    );
    assert_eq!(
        r.to_string(),
        "read-after-write race on shared memory at offset 0x8: write by block (0,0,0) thread \
         (32,0,0) at PTX line 10, then read by block (0,0,0) thread (3,0,0) at PTX line 20 \
         (5 occurrences)"
    );
}
