use super::*;
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
