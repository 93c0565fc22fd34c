//! Per-request coalescing metrics (`Metrics::global_ideal_sectors`, `uncoalesced_requests`,
//! `excess_sectors`, `uncoalesced_lines`) on hand-written PTX: a load and a store whose byte
//! offset per lane and start offset are kernel parameters, in 4-, 8- and 16-byte widths, and a
//! gather through an index array. Expected sector counts are worked out by hand in each test.

mod common;

use common::{cfg1, parse};
use ptxsim::{AccessKind, Arg, Device, Metrics, Module, Options, UncoalescedLine};

/// A kernel `access_{bytes}`: thread `t < active` loads `bytes` from
/// `src + ld_off + t * ld_stride` and stores them to `dst + st_off + t * st_stride`.
fn access_entry(bytes: u32) -> String {
    let (ty, regs, ops) = match bytes {
        4 => ("f32", 2, "%f1".to_string()),
        8 => ("v2.f32", 3, "{%f1, %f2}".to_string()),
        16 => ("v4.f32", 5, "{%f1, %f2, %f3, %f4}".to_string()),
        _ => unreachable!("widths 4, 8, 16"),
    };
    format!(
        r#"
.visible .entry access_{bytes}(.param .u64 src, .param .u64 dst, .param .u32 ld_off,
    .param .u32 ld_stride, .param .u32 st_off, .param .u32 st_stride, .param .u32 active)
{{
    .reg .pred %p<2>; .reg .b32 %r<9>; .reg .f32 %f<{regs}>; .reg .b64 %rd<7>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [dst];
    ld.param.u32 %r1, [ld_off];
    ld.param.u32 %r2, [ld_stride];
    ld.param.u32 %r3, [st_off];
    ld.param.u32 %r4, [st_stride];
    ld.param.u32 %r5, [active];
    mov.u32 %r6, %tid.x;
    setp.ge.u32 %p1, %r6, %r5;
    @%p1 bra DONE;
    mad.lo.u32 %r7, %r6, %r2, %r1;
    cvt.u64.u32 %rd3, %r7;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.{ty} {ops}, [%rd4]; // LOAD
    mad.lo.u32 %r8, %r6, %r4, %r3;
    cvt.u64.u32 %rd5, %r8;
    add.s64 %rd6, %rd2, %rd5;
    st.global.{ty} [%rd6], {ops}; // STORE
DONE:
    ret;
}}
"#
    )
}

/// `gather`: thread `t` stores `src[idx[t]]` (f32) to `dst[t]`.
const GATHER: &str = r#"
.visible .entry gather(.param .u64 src, .param .u64 idx, .param .u64 dst)
{
    .reg .b32 %r<3>; .reg .f32 %f<2>; .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [src];
    ld.param.u64 %rd2, [idx];
    ld.param.u64 %rd3, [dst];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd4, %r1, 4;
    add.s64 %rd5, %rd2, %rd4;
    ld.global.u32 %r2, [%rd5]; // INDEX
    mul.wide.u32 %rd6, %r2, 4;
    add.s64 %rd7, %rd1, %rd6;
    ld.global.f32 %f1, [%rd7]; // GATHER
    add.s64 %rd8, %rd3, %rd4;
    st.global.f32 [%rd8], %f1;
    ret;
}
"#;

fn ptx() -> String {
    let mut s = String::from(".version 7.0\n.target sm_80\n.address_size 64\n");
    for w in [4, 8, 16] {
        s += &access_entry(w);
    }
    s + GATHER
}

/// 1-based line of the PTX text that ends with `// {tag}` inside `entry`.
fn line_of(ptx: &str, entry: &str, tag: &str) -> usize {
    let start = ptx
        .lines()
        .position(|l| l.contains(&format!(".entry {entry}(")))
        .expect("entry");
    let off = ptx
        .lines()
        .skip(start)
        .position(|l| l.ends_with(&format!("// {tag}")))
        .expect("tagged line");
    start + off + 1
}

fn module() -> (String, Module) {
    let p = ptx();
    let m = parse(&p, "coalescing kernels");
    (p, m)
}

fn device(threads: usize) -> Device {
    Device::with_options(Options {
        threads,
        metrics: true,
        ..Options::default()
    })
}

/// Pattern of one `access_{bytes}` launch of one block of `block` threads.
#[derive(Clone, Copy)]
struct Pattern {
    bytes: u32,
    ld_off: u32,
    ld_stride: u32,
    st_off: u32,
    st_stride: u32,
    active: u32,
    block: u32,
}

/// A coalesced pattern of `bytes` per lane for a full warp.
fn coalesced(bytes: u32) -> Pattern {
    Pattern {
        bytes,
        ld_off: 0,
        ld_stride: bytes,
        st_off: 0,
        st_stride: bytes,
        active: 32,
        block: 32,
    }
}

fn run(m: &Module, p: Pattern) -> Metrics {
    let mut dev = device(2);
    let len = 64 * 1024;
    let src = dev.alloc(len).unwrap();
    dev.write(src, &vec![1u8; len]).unwrap();
    let dst = dev.alloc(len).unwrap();
    let args = [
        Arg::Ptr(src),
        Arg::Ptr(dst),
        Arg::U32(p.ld_off),
        Arg::U32(p.ld_stride),
        Arg::U32(p.st_off),
        Arg::U32(p.st_stride),
        Arg::U32(p.active),
    ];
    let entry = format!("access_{}", p.bytes);
    let s = dev.launch(m, &entry, cfg1(1, p.block), &args).unwrap();
    s.metrics.expect("metrics on")
}

/// (load sectors, load ideal, uncoalesced loads, store sectors, store ideal, uncoalesced stores)
fn summary(m: &Metrics) -> (u64, u64, u64, u64, u64, u64) {
    (
        m.global_load_sectors,
        m.global_load_ideal_sectors,
        m.uncoalesced_load_requests,
        m.global_store_sectors,
        m.global_store_ideal_sectors,
        m.uncoalesced_store_requests,
    )
}

#[test]
fn coalesced_accesses_count_zero() {
    let (_, m) = module();
    // A warp on 4, 8 and 16 bytes per lane: 128, 256 and 512 bytes = 4, 8, 16 sectors.
    for (bytes, sectors) in [(4, 4), (8, 8), (16, 16)] {
        let mt = run(&m, coalesced(bytes));
        assert_eq!(
            summary(&mt),
            (sectors, sectors, 0, sectors, sectors, 0),
            "{bytes} bytes\n{mt}"
        );
        assert_eq!(mt.excess_sectors(), 0);
        assert!(mt.uncoalesced_lines.is_empty());
        assert_eq!(mt.coalescing_efficiency(), 1.0);
    }
    // Two warps, the second predicated off after lane 12 (44 active threads): warp 0 as
    // above; warp 1 reads bytes 128..176 (sectors 4, 5): 48 bytes, ideal 2.
    let mt = run(
        &m,
        Pattern {
            active: 44,
            block: 64,
            ..coalesced(4)
        },
    );
    assert_eq!(summary(&mt), (6, 6, 0, 6, 6, 0), "{mt}");
    assert_eq!(mt.global_load_requests, 2);
    // Broadcast: every lane loads the same 4 or 16 bytes at byte 48 (one sector).
    for bytes in [4, 16] {
        let mt = run(
            &m,
            Pattern {
                ld_off: 48,
                ld_stride: 0,
                ..coalesced(bytes)
            },
        );
        assert_eq!(
            (mt.global_load_sectors, mt.global_load_ideal_sectors),
            (1, 1)
        );
        assert_eq!(mt.uncoalesced_requests(), 0, "{mt}");
    }
}

#[test]
fn strided_misaligned_and_scattered_accesses_are_counted() {
    let (ptx, m) = module();
    let load4 = line_of(&ptx, "access_4", "LOAD");
    let store4 = line_of(&ptx, "access_4", "STORE");
    // Stride 2 floats: bytes 0..252 = 8 sectors for 128 distinct bytes (ideal 4).
    let mt = run(
        &m,
        Pattern {
            ld_stride: 8,
            ..coalesced(4)
        },
    );
    assert_eq!(summary(&mt), (8, 4, 1, 4, 4, 0), "{mt}");
    assert_eq!(
        mt.uncoalesced_lines,
        vec![UncoalescedLine {
            line: load4,
            kind: AccessKind::Load,
            requests: 1,
            sectors: 8,
            ideal_sectors: 4
        }]
    );
    // 128 bytes starting 16 bytes into a sector: sectors 0..=4 (5) for ideal 4, on two warps;
    // the stores of the same launch go with a stride of 3 floats: bytes 0..376 = 12 sectors
    // per warp for ideal 4.
    let mt = run(
        &m,
        Pattern {
            ld_off: 16,
            st_stride: 12,
            block: 64,
            active: 64,
            ..coalesced(4)
        },
    );
    // Warp 1 loads bytes 144..272: sectors 4..=8 (5); stores bytes 384..756: sectors
    // 12..=23 (12).
    assert_eq!(summary(&mt), (10, 8, 2, 24, 8, 2), "{mt}");
    assert_eq!(mt.excess_sectors(), 2 + 16);
    let lines: Vec<_> = mt
        .uncoalesced_lines
        .iter()
        .map(|l| (l.line, l.kind, l.requests, l.excess_sectors()))
        .collect();
    assert_eq!(
        lines,
        vec![
            (store4, AccessKind::Store, 2, 16),
            (load4, AccessKind::Load, 2, 2)
        ],
        "sorted by excess"
    );
    let text = mt.to_string();
    let want = format!(
        "  PTX line {store4} (store): 2 uncoalesced requests, 24 sectors for ideal 8 (+16)"
    );
    assert!(text.lines().any(|l| l == want), "{want:?} in\n{text}");
    // 16-byte vectors at +16: 512 bytes over 17 sectors (ideal 16).
    let mt = run(
        &m,
        Pattern {
            ld_off: 16,
            ..coalesced(16)
        },
    );
    assert_eq!(summary(&mt), (17, 16, 1, 16, 16, 0), "{mt}");
    assert_eq!(
        mt.uncoalesced_lines[0].line,
        line_of(&ptx, "access_16", "LOAD")
    );
    // 8-byte vectors with a stride of 32 bytes: 32 sectors for 256 bytes (ideal 8).
    let mt = run(
        &m,
        Pattern {
            ld_stride: 32,
            ..coalesced(8)
        },
    );
    assert_eq!(summary(&mt), (32, 8, 1, 8, 8, 0), "{mt}");
}

#[test]
fn scattered_gather() {
    let (ptx, m) = module();
    for threads in [1, 3] {
        let mut dev = device(threads);
        let src = dev.alloc(4096).unwrap();
        let vals: Vec<f32> = (0..1024).map(|i| i as f32).collect();
        dev.write_slice(src, &vals).unwrap();
        // Lane l of warp w reads float 8 * ((5 l + w) mod 32) + w: one sector per lane, in a
        // scrambled order.
        let idx: Vec<u32> = (0..64u32)
            .map(|t| 8 * ((5 * (t % 32) + t / 32) % 32) + t / 32)
            .collect();
        let pidx = dev.alloc(256).unwrap();
        dev.write_slice(pidx, &idx).unwrap();
        let dst = dev.alloc(256).unwrap();
        let s = dev
            .launch(
                &m,
                "gather",
                cfg1(1, 64),
                &[Arg::Ptr(src), Arg::Ptr(pidx), Arg::Ptr(dst)],
            )
            .unwrap();
        let out: Vec<f32> = dev.read_slice(dst, 64).unwrap();
        let want: Vec<f32> = idx.iter().map(|&i| i as f32).collect();
        assert_eq!(out, want);
        let mt = s.metrics.unwrap();
        // Per warp: index load 4/4, gather 32 sectors for ideal 4, store 4/4.
        assert_eq!(summary(&mt), (72, 16, 2, 8, 8, 0), "{mt}");
        assert_eq!(
            mt.uncoalesced_lines,
            vec![UncoalescedLine {
                line: line_of(&ptx, "gather", "GATHER"),
                kind: AccessKind::Load,
                requests: 2,
                sectors: 64,
                ideal_sectors: 8
            }]
        );
    }
}

#[test]
fn deterministic_for_any_worker_count() {
    let (_, m) = module();
    let launch = |threads| {
        let mut dev = device(threads);
        let src = dev.alloc(1 << 20).unwrap();
        dev.write(src, &vec![0u8; 1 << 20]).unwrap();
        let dst = dev.alloc(1 << 20).unwrap();
        let args = [
            Arg::Ptr(src),
            Arg::Ptr(dst),
            Arg::U32(16),
            Arg::U32(8),
            Arg::U32(4),
            Arg::U32(4),
            Arg::U32(200),
        ];
        dev.launch(&m, "access_4", cfg1(64, 256), &args)
            .unwrap()
            .metrics
            .unwrap()
    };
    let one = launch(1);
    assert!(one.uncoalesced_requests() > 0);
    assert_eq!(one, launch(4));
}
