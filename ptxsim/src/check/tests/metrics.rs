use super::*;
use crate::check::UncoalescedLine;
use AccessKind::Load;

fn metrics_of(block: u32, blocks: u32, body: impl FnMut(&mut BlockChecks<'_>, u32)) -> Metrics {
    let lc = launch(METRICS, blocks, block, 8192);
    run_blocks(&lc, blocks, body);
    let out = lc.finish();
    assert!(out.reports.is_empty());
    out.metrics.expect("metrics enabled")
}

#[test]
fn coalesced_fp32_is_four_sectors() {
    let m = metrics_of(32, 1, |b, _| {
        ld_g(b, 1, 0, &lanes(0..32, |l| G + 4 * l as u64));
        st_g(b, 2, 0, &lanes(0..32, |l| G + 4096 + 4 * l as u64));
    });
    assert_eq!((m.global_load_requests, m.global_load_sectors), (1, 4));
    assert_eq!((m.global_store_requests, m.global_store_sectors), (1, 4));
    assert_eq!((m.global_load_bytes, m.global_store_bytes), (128, 128));
    assert_eq!(m.sectors_per_request(), 4.0);
}

#[test]
fn sectors_for_strides_widths_and_alignment() {
    let sectors = |size: u32, addr: &dyn Fn(u32) -> u64, active: std::ops::Range<u32>| {
        let m = metrics_of(32, 1, |b, _| {
            access(
                b,
                MemSpace::Global,
                Load,
                1,
                0,
                size,
                &lanes(active.clone(), addr),
            );
        });
        m.global_load_sectors
    };
    // Stride of 32 floats: every lane in its own sector.
    assert_eq!(sectors(4, &|l| G + 128 * l as u64, 0..32), 32);
    // 8- and 16-byte vectors, coalesced: 256 and 512 bytes.
    assert_eq!(sectors(8, &|l| G + 8 * l as u64, 0..32), 8);
    assert_eq!(sectors(16, &|l| G + 16 * l as u64, 0..32), 16);
    // Shifted by one float: 128 bytes straddle 5 sectors.
    assert_eq!(sectors(4, &|l| G + 4 + 4 * l as u64, 0..32), 5);
    // Half a warp active.
    assert_eq!(sectors(4, &|l| G + 4 * l as u64, 0..16), 2);
    // All lanes read one float: one sector.
    assert_eq!(sectors(4, &|_| G + 60, 0..32), 1);
    // Reversed order and a 2-byte type: 64 bytes, 2 sectors.
    assert_eq!(sectors(2, &|l| G + 2 * (31 - l) as u64, 0..32), 2);
    // Stride 2 sectors, descending: 32 distinct sectors, unsorted input.
    assert_eq!(sectors(4, &|l| G + 64 * (31 - l) as u64, 0..32), 32);
}

fn shared_wavefronts(
    size: u32,
    addr: impl Fn(u32) -> u64,
    active: std::ops::Range<u32>,
) -> (u64, u64) {
    let m = metrics_of(32, 1, |b, _| {
        access(
            b,
            MemSpace::Shared,
            Load,
            1,
            0,
            size,
            &lanes(active.clone(), &addr),
        );
    });
    assert_eq!(m.shared_load_requests, 1);
    (m.shared_load_wavefronts, m.shared_load_ideal_wavefronts)
}

#[test]
fn bank_conflicts() {
    // Row of a 32x32 fp32 tile: conflict-free. Column: every lane in bank 0, 32 distinct words.
    assert_eq!(shared_wavefronts(4, |l| 4 * l as u64, 0..32), (1, 1));
    assert_eq!(shared_wavefronts(4, |l| 4 * 32 * l as u64, 0..32), (32, 1));
    // Column of a tile padded to 33 columns: banks l, all distinct.
    assert_eq!(shared_wavefronts(4, |l| 4 * 33 * l as u64, 0..32), (1, 1));
    // Column 5 of the unpadded tile: 32 words in bank 5.
    assert_eq!(
        shared_wavefronts(4, |l| 4 * (32 * l + 5) as u64, 0..32),
        (32, 1)
    );
    // Broadcast: all lanes read one word.
    assert_eq!(shared_wavefronts(4, |_| 12, 0..32), (1, 1));
    // Stride 2 words: banks 0,2,..,30 twice each: 2-way.
    assert_eq!(shared_wavefronts(4, |l| 8 * l as u64, 0..32), (2, 1));
    // Pairs of lanes on one word (stride 2 bytes, 2-byte type): no conflict.
    assert_eq!(shared_wavefronts(2, |l| 2 * l as u64, 0..32), (1, 1));
    // 64-bit coalesced: 2 phases of 16 lanes x 2 words = 32 banks each.
    assert_eq!(shared_wavefronts(8, |l| 8 * l as u64, 0..32), (2, 2));
    // 128-bit coalesced: 4 phases.
    assert_eq!(shared_wavefronts(16, |l| 16 * l as u64, 0..32), (4, 4));
    // 64-bit with stride 2 x 8 bytes: within a phase, 16 lanes x 2 words on 16 banks: 2-way.
    assert_eq!(shared_wavefronts(8, |l| 16 * l as u64, 0..32), (4, 2));
    // Only lanes 16..32 of a 64-bit access: one phase.
    assert_eq!(shared_wavefronts(8, |l| 8 * l as u64, 16..32), (1, 1));
}

#[test]
fn transpose_through_shared_memory() {
    // A 32x32 fp32 transpose by 32x32 threads (32 warps): each warp stores one row of the tile
    // and loads one column. Unpadded: 32 loads x 32 wavefronts; padded (33 columns): 32 x 1.
    for (cols, load_wf) in [(32u64, 32 * 32), (33, 32)] {
        let m = metrics_of(1024, 1, |b, _| {
            for w in 0..32u32 {
                st_s(b, 1, w, &lanes(0..32, |l| 4 * (w as u64 * cols + l as u64)));
            }
            b.barrier();
            for w in 0..32u32 {
                ld_s(b, 2, w, &lanes(0..32, |l| 4 * (l as u64 * cols + w as u64)));
            }
        });
        assert_eq!(m.shared_store_requests, 32);
        assert_eq!(m.shared_store_wavefronts, 32);
        assert_eq!(m.shared_load_requests, 32);
        assert_eq!(m.shared_load_wavefronts, load_wf);
        assert_eq!(m.shared_bank_conflicts(), load_wf - 32);
        assert_eq!(m.barriers, 1);
    }
}

#[test]
fn unique_bytes_of_a_copy() {
    // 8 blocks of 128 threads copy 1024 floats; every block also re-reads the first 128
    // bytes of the input (cached: no new sectors).
    let inp = G;
    let out = G + 0x10000;
    let m = metrics_of(128, 8, |b, i| {
        for w in 0..4u32 {
            let base = 4 * (i as u64 * 128 + w as u64 * 32);
            ld_g(b, 1, w, &lanes(0..32, |l| inp + base + 4 * l as u64));
            st_g(b, 2, w, &lanes(0..32, |l| out + base + 4 * l as u64));
            ld_g(b, 3, w, &lanes(0..32, |l| inp + 4 * l as u64));
        }
    });
    assert_eq!(m.unique_load_bytes, 4096);
    assert_eq!(m.unique_store_bytes, 4096);
    assert_eq!(m.unique_bytes, 8192);
    assert_eq!(m.global_load_requests, 64);
    assert_eq!(m.global_load_sectors, 256);
    assert_eq!(m.global_load_bytes, 64 * 128);
    assert_eq!(m.global_store_bytes, 32 * 128);
    // Loading what was stored adds no unique bytes; union counts each sector once.
    let m = metrics_of(32, 2, |b, i| {
        if i == 0 {
            st_g(b, 1, 0, &lanes(0..32, |l| out + 4 * l as u64));
        } else {
            ld_g(b, 2, 0, &lanes(0..32, |l| out + 64 + 4 * l as u64));
        }
    });
    assert_eq!(
        (m.unique_store_bytes, m.unique_load_bytes, m.unique_bytes),
        (128, 128, 192)
    );
}

#[test]
fn instruction_classes_and_atomics() {
    let m = metrics_of(64, 2, |b, _| {
        b.count(InstrClass::F32, 32);
        b.count(InstrClass::F32, 7);
        b.count(InstrClass::Branch, 32);
        access(
            b,
            MemSpace::Global,
            AccessKind::Atomic,
            3,
            0,
            4,
            &lanes(0..32, |_| G),
        );
        access(
            b,
            MemSpace::Shared,
            AccessKind::Atomic,
            4,
            0,
            4,
            &lanes(0..32, |_| 0),
        );
        b.barrier();
        b.barrier();
    });
    assert_eq!(m.instructions(InstrClass::F32), 4);
    assert_eq!(m.thread_instructions(InstrClass::F32), 78);
    assert_eq!(m.instructions(InstrClass::Branch), 2);
    assert_eq!(m.instructions(InstrClass::Int), 0);
    assert_eq!((m.global_atomic_requests, m.global_atomic_sectors), (2, 2));
    assert_eq!(m.shared_atomic_requests, 2);
    assert_eq!(m.barriers, 4);
    assert_eq!(m.unique_store_bytes, 32);
    assert_eq!(m.global_load_requests + m.global_store_requests, 0);
    assert_eq!(m.sectors_per_request(), 0.0);
}

#[test]
fn metrics_table() {
    let m = metrics_of(32, 1, |b, _| {
        b.count(InstrClass::GlobalLoad, 32);
        ld_g(b, 1, 0, &lanes(0..32, |l| G + 128 * l as u64));
        ld_s(b, 2, 0, &lanes(0..32, |l| 128 * l as u64));
    });
    let t = m.to_string();
    let want = [
        "instructions               warp           thread",
        "  ld.global                   1               32",
        "  loads                   1         32        32.00            128",
        "unique bytes           1024 (loaded 1024, stored 0; requested 128)",
        "  loads                   1         32        32.00             31",
        "barriers                  0",
    ];
    for w in want {
        assert!(t.lines().any(|l| l == w), "missing line {w:?} in\n{t}");
    }
}

#[test]
fn unique_bytes_merge_across_workers() {
    // Two workers load overlapping halves of 16 sectors and store disjoint ones: loads cover
    // sectors 0..12, stores 100..104 and 200..204.
    let lc = launch(METRICS, 2, 32, 0);
    std::thread::scope(|s| {
        for w in 0..2u64 {
            let lc = &lc;
            s.spawn(move || {
                let mut b = lc.block();
                b.start(w, [w as u32, 0, 0]);
                let base = G + 128 * w; // sectors 4w..4w+4 and 4w+4..4w+8
                ld_g(&mut b, 1, 0, &lanes(0..32, |l| base + 4 * l as u64));
                ld_g(&mut b, 1, 0, &lanes(0..32, |l| base + 128 + 4 * l as u64));
                st_g(
                    &mut b,
                    2,
                    0,
                    &lanes(0..32, |l| G + 3200 * (w + 1) + 4 * l as u64),
                );
                b.end();
            });
        }
    });
    let m = lc.finish().metrics.unwrap();
    assert_eq!(m.unique_load_bytes, 12 * 32);
    assert_eq!(m.unique_store_bytes, 8 * 32);
    assert_eq!(m.unique_bytes, 20 * 32);
    assert_eq!(m.global_load_requests, 4);
}

/// (sectors, ideal sectors, uncoalesced requests) of one global request of `size` bytes per
/// lane by lanes `active` at `addr(lane)`, as a load, a store and an atomic.
fn coalescing(
    size: u32,
    addr: impl Fn(u32) -> u64,
    active: impl IntoIterator<Item = u32> + Clone,
) -> (u64, u64, u64) {
    let mut per_kind = Vec::new();
    for kind in [Load, AccessKind::Store, AccessKind::Atomic] {
        let m = metrics_of(32, 1, |b, _| {
            access(
                b,
                MemSpace::Global,
                kind,
                7,
                0,
                size,
                &lanes(active.clone(), &addr),
            );
        });
        assert_eq!(m.global_requests(), 1);
        let got = (
            m.global_sectors(),
            m.global_ideal_sectors(),
            m.uncoalesced_requests(),
        );
        assert_eq!(m.excess_sectors(), got.0 - got.1);
        // The line table lists the instruction exactly when the request is uncoalesced.
        let want_lines = if got.2 == 1 {
            vec![UncoalescedLine {
                line: 7,
                kind,
                requests: 1,
                sectors: got.0,
                ideal_sectors: got.1,
            }]
        } else {
            vec![]
        };
        assert_eq!(m.uncoalesced_lines, want_lines);
        per_kind.push(got);
    }
    assert!(per_kind.iter().all(|k| *k == per_kind[0]), "{per_kind:?}");
    per_kind[0]
}

#[test]
fn coalesced_requests_need_their_ideal_sectors() {
    // 4, 8 and 16 bytes per lane on consecutive aligned elements: 128, 256, 512 bytes.
    assert_eq!(coalescing(4, |l| G + 4 * l as u64, 0..32), (4, 4, 0));
    assert_eq!(coalescing(8, |l| G + 8 * l as u64, 0..32), (8, 8, 0));
    assert_eq!(coalescing(16, |l| G + 16 * l as u64, 0..32), (16, 16, 0));
    // 2-byte elements: 64 bytes.
    assert_eq!(coalescing(2, |l| G + 2 * l as u64, 0..32), (2, 2, 0));
    // Predicated partial warp: lanes 0..20 read bytes 0..80: sectors 0, 1, 2; ceil(80/32) = 3.
    assert_eq!(coalescing(4, |l| G + 4 * l as u64, 0..20), (3, 3, 0));
    // Only lanes 8..16 of an aligned request: bytes 32..64, one sector.
    assert_eq!(coalescing(4, |l| G + 4 * l as u64, 8..16), (1, 1, 0));
    // Every other lane of a 16-byte access whose lanes cover whole sectors (lanes 2k, 2k+1
    // share a sector): even lanes only read 16 of every 32 bytes: sectors 16, ideal 8.
    assert_eq!(
        coalescing(16, |l| G + 16 * l as u64, (0..32).step_by(2)),
        (16, 8, 1)
    );
    // Broadcast: every lane reads the same float: 4 distinct bytes, one sector.
    assert_eq!(coalescing(4, |_| G + 60, 0..32), (1, 1, 0));
    // Four lanes per float (8 distinct floats = 32 bytes in one sector), unsorted.
    assert_eq!(
        coalescing(4, |l| G + 4 * (7 - l as u64 % 8), 0..32),
        (1, 1, 0)
    );
    // Reversed lane order: still 128 distinct bytes on 4 sectors.
    assert_eq!(coalescing(4, |l| G + 4 * (31 - l) as u64, 0..32), (4, 4, 0));
}

#[test]
fn uncoalesced_requests_are_counted_exactly() {
    // Stride 2 floats: bytes 0..252 in 8 sectors, 128 distinct bytes: ideal 4.
    assert_eq!(coalescing(4, |l| G + 8 * l as u64, 0..32), (8, 4, 1));
    // 128 bytes starting 16 bytes into a sector: bytes 16..144 in sectors 0..=4: 5 vs 4.
    assert_eq!(coalescing(4, |l| G + 16 + 4 * l as u64, 0..32), (5, 4, 1));
    // Same with 16-byte vectors: 512 bytes at +16 touch 17 sectors, ideal 16.
    assert_eq!(
        coalescing(16, |l| G + 16 + 16 * l as u64, 0..32),
        (17, 16, 1)
    );
    // Scattered: lane l reads float 8 * ((5 l) mod 32): one sector each, 32 vs ceil(128/32).
    assert_eq!(
        coalescing(4, |l| G + 32 * ((5 * l) % 32) as u64, 0..32),
        (32, 4, 1)
    );
    // Partial warp straddling a sector boundary: lanes 6..14 read bytes 24..56: 32 bytes
    // (ideal 1) in sectors 0 and 1.
    assert_eq!(coalescing(4, |l| G + 4 * l as u64, 6..14), (2, 1, 1));
    // Two rows of 64 bytes 128 bytes apart (16 lanes each): 4 sectors, 128 bytes: coalesced.
    assert_eq!(
        coalescing(
            4,
            |l| G + 128 * (l / 16) as u64 + 4 * (l % 16) as u64,
            0..32
        ),
        (4, 4, 0)
    );
    // Two rows of 36 bytes (9 lanes each) 64 bytes apart: 72 bytes (ideal 3) in sectors 0, 1,
    // 2 and 3.
    assert_eq!(
        coalescing(4, |l| G + 64 * (l / 9) as u64 + 4 * (l % 9) as u64, 0..18),
        (4, 3, 1)
    );
}

#[test]
fn uncoalesced_lines_sum_over_blocks_and_sort_by_excess() {
    // Per block: line 3 loads with stride 2 floats (excess 4), line 9 stores 128 bytes at +16
    // (excess 1) twice, line 5 loads coalesced, line 4 scatters (excess 28) in block 2 only.
    let run = |workers: u64| {
        let lc = launch(METRICS, 4, 64, 0);
        std::thread::scope(|s| {
            for w in 0..workers {
                let lc = &lc;
                s.spawn(move || {
                    let mut b = lc.block();
                    for i in (w..4).step_by(workers as usize) {
                        b.start(i, [i as u32, 0, 0]);
                        let base = G + 4096 * i;
                        ld_g(&mut b, 3, 0, &lanes(0..32, |l| base + 8 * l as u64));
                        ld_g(&mut b, 5, 1, &lanes(0..32, |l| base + 4 * l as u64));
                        for _ in 0..2 {
                            st_g(&mut b, 9, 1, &lanes(0..32, |l| base + 16 + 4 * l as u64));
                        }
                        if i == 2 {
                            ld_g(&mut b, 4, 0, &lanes(0..32, |l| base + 32 * l as u64));
                        }
                        b.end();
                    }
                });
            }
        });
        lc.finish().metrics.unwrap()
    };
    let m = run(1);
    assert_eq!(m, run(3), "independent of the number of workers");
    let line = |line, kind, requests, sectors, ideal_sectors| UncoalescedLine {
        line,
        kind,
        requests,
        sectors,
        ideal_sectors,
    };
    assert_eq!(
        m.uncoalesced_lines,
        vec![
            line(4, Load, 1, 32, 4),
            line(3, Load, 4, 32, 16),
            line(9, AccessKind::Store, 8, 40, 32),
        ]
    );
    assert_eq!(m.global_load_requests, 4 * 2 + 1);
    assert_eq!(m.uncoalesced_load_requests, 5);
    assert_eq!(m.uncoalesced_store_requests, 8);
    assert_eq!(m.uncoalesced_requests(), 13);
    assert_eq!(m.global_load_ideal_sectors, 4 * 4 + 4 * 4 + 4);
    assert_eq!(m.global_store_ideal_sectors, 8 * 4);
    assert_eq!(m.excess_load_sectors(), 16 + 28);
    assert_eq!(m.excess_store_sectors(), 8);
    assert_eq!(m.excess_sectors(), 16 + 28 + 8);
    assert_eq!(m.coalescing_efficiency(), 68.0 / 120.0);
    let t = m.to_string();
    for w in [
        "coalescing            ideal     excess  uncoalesced    of requests",
        "  loads                  36         44            5              9",
        "  stores                 32          8            8              8",
        "  PTX line 4 (load): 1 uncoalesced requests, 32 sectors for ideal 4 (+28)",
        "  PTX line 9 (store): 8 uncoalesced requests, 40 sectors for ideal 32 (+8)",
    ] {
        assert!(t.lines().any(|l| l == w), "missing line {w:?} in\n{t}");
    }
}
