//! Less common instructions nvcc emits: carry chains (add.cc/addc/sub.cc/subc/mad.cc/madc),
//! lop3, dp4a/dp2a, 16-bit integer arithmetic, memory-ordering qualifiers and fences,
//! isspacep, packed-half and 64-bit atomics.

mod common;

use common::isa::{random_rows, run_cases, Case, W};
use common::{cfg1, ptx_module, run_buffers, simple_entry};
use W::{B16, B32, B64};

const N: usize = 200;

#[test]
fn carry_chains() {
    let cases = vec![
        Case::new(
            "add.cc/addc 64-bit add",
            "mov.b64 {%r1, %r2}, %a;\nmov.b64 {%r3, %r4}, %b;\nadd.cc.u32 %r5, %r1, %r3;\naddc.u32 %r6, %r2, %r4;\nmov.b64 %d, {%r5, %r6};",
            [B64, B64, B64, B64],
        )
        .rows(random_rows(1, N, [B64; 3], |a, b, _| a.wrapping_add(b)))
        .row(u64::MAX, 1, 0, 0)
        .row(0xffff_ffff, 1, 0, 1 << 32),
        Case::new(
            "addc.cc carry out of 64 bits",
            "mov.b64 {%r1, %r2}, %a;\nmov.b64 {%r3, %r4}, %b;\nadd.cc.u32 %r5, %r1, %r3;\naddc.cc.u32 %r6, %r2, %r4;\naddc.u32 %d, 0, 0;",
            [B64, B64, B64, B32],
        )
        .rows(random_rows(2, N, [B64; 3], |a, b, _| a.overflowing_add(b).1 as u64))
        .row(u64::MAX, 1, 0, 1),
        Case::new(
            "sub.cc/subc 64-bit subtract",
            "mov.b64 {%r1, %r2}, %a;\nmov.b64 {%r3, %r4}, %b;\nsub.cc.u32 %r5, %r1, %r3;\nsubc.u32 %r6, %r2, %r4;\nmov.b64 %d, {%r5, %r6};",
            [B64, B64, B64, B64],
        )
        .rows(random_rows(3, N, [B64; 3], |a, b, _| a.wrapping_sub(b)))
        .row(1 << 32, 1, 0, 0xffff_ffff),
        Case::new(
            "mad.lo.cc/madc.hi 32x32+64",
            "mov.b64 {%r7, %r8}, %c;\nmad.lo.cc.u32 %r5, %a, %b, %r7;\nmadc.hi.u32 %r6, %a, %b, %r8;\nmov.b64 %d, {%r5, %r6};",
            [B32, B32, B64, B64],
        )
        .rows(random_rows(4, N, [B32, B32, B64], |a, b, c| (a * b).wrapping_add(c))),
    ];
    run_cases(&cases);
}

fn lop3_ref(a: u64, b: u64, c: u64, lut: u32) -> u64 {
    (0..32).fold(0, |d, i| {
        let idx = ((a >> i & 1) << 2) | ((b >> i & 1) << 1) | (c >> i & 1);
        d | (((lut >> idx) & 1) as u64) << i
    })
}

fn dp4a_ref(a: u64, b: u64, c: u64, signed: bool) -> u64 {
    let byte = |x: u64, i: u32| -> i64 {
        let v = (x >> (8 * i)) & 0xff;
        if signed {
            v as u8 as i8 as i64
        } else {
            v as i64
        }
    };
    let s: i64 = (0..4).map(|i| byte(a, i) * byte(b, i)).sum();
    (s + if signed {
        c as u32 as i32 as i64
    } else {
        c as i64
    }) as u64
        & 0xffff_ffff
}

fn dp2a_ref(a: u64, b: u64, c: u64, hi: bool) -> u64 {
    let h = |i: u32| (a >> (16 * i)) & 0xffff;
    let base = if hi { 2 } else { 0 };
    let bb = |i: u32| (b >> (8 * (base + i))) & 0xff;
    (h(0) * bb(0) + h(1) * bb(1) + c) & 0xffff_ffff
}

#[test]
fn lop3_dp4a_dp2a() {
    let w = [B32; 4];
    let mut cases = Vec::new();
    for lut in [0x96u32, 0xe8, 0x80, 0xca, 0x01, 0xfe, 0x3c] {
        let f = move |a, b, c| lop3_ref(a, b, c, lut);
        cases.push(
            Case::new(
                format!("lop3.b32 {lut:#x}"),
                format!("lop3.b32 %d, %a, %b, %c, {lut:#x};"),
                w,
            )
            .rows(random_rows(10 + lut as u64, N, [B32; 3], f)),
        );
    }
    cases.push(
        Case::new("dp4a.u32.u32", "dp4a.u32.u32 %d, %a, %b, %c;", w).rows(random_rows(
            20,
            N,
            [B32; 3],
            |a, b, c| dp4a_ref(a, b, c, false),
        )),
    );
    cases.push(
        Case::new("dp4a.s32.s32", "dp4a.s32.s32 %d, %a, %b, %c;", w).rows(random_rows(
            21,
            N,
            [B32; 3],
            |a, b, c| dp4a_ref(a, b, c, true),
        )),
    );
    cases.push(
        Case::new("dp2a.lo.u32.u32", "dp2a.lo.u32.u32 %d, %a, %b, %c;", w).rows(random_rows(
            22,
            N,
            [B32; 3],
            |a, b, c| dp2a_ref(a, b, c, false),
        )),
    );
    cases.push(
        Case::new("dp2a.hi.u32.u32", "dp2a.hi.u32.u32 %d, %a, %b, %c;", w).rows(random_rows(
            23,
            N,
            [B32; 3],
            |a, b, c| dp2a_ref(a, b, c, true),
        )),
    );
    run_cases(&cases);
}

#[test]
fn sixteen_bit_integers() {
    let w = [B16; 4];
    let s16 = |x: u64| x as u16 as i16;
    let cases = vec![
        Case::new("add.u16", "add.u16 %d, %a, %b;", w).rows(random_rows(
            30,
            N,
            [B16; 3],
            |a, b, _| (a + b) & 0xffff,
        )),
        Case::new("mul.lo.s16", "mul.lo.s16 %d, %a, %b;", w).rows(random_rows(
            31,
            N,
            [B16; 3],
            move |a, b, _| s16(a).wrapping_mul(s16(b)) as u16 as u64,
        )),
        Case::new(
            "mul.wide.u16",
            "mul.wide.u16 %d, %a, %b;",
            [B16, B16, B16, B32],
        )
        .rows(random_rows(32, N, [B16; 3], |a, b, _| a * b)),
        Case::new("min.s16", "min.s16 %d, %a, %b;", w).rows(random_rows(
            33,
            N,
            [B16; 3],
            move |a, b, _| s16(a).min(s16(b)) as u16 as u64,
        )),
        Case::new(
            "shr.s16",
            "and.b16 %h1, %b, 15;\ncvt.u32.u16 %r1, %h1;\nshr.s16 %d, %a, %r1;",
            w,
        )
        .rows(random_rows(34, N, [B16; 3], move |a, b, _| {
            (s16(a) >> (b & 15)) as u16 as u64
        })),
        Case::new(
            "setp.lt.s16",
            "setp.lt.s16 %p1, %a, %b;\nselp.b16 %d, 1, 0, %p1;",
            w,
        )
        .rows(random_rows(35, N, [B16; 3], move |a, b, _| {
            (s16(a) < s16(b)) as u64
        })),
    ];
    run_cases(&cases);
}

#[test]
fn memory_ordering_qualifiers_fences_isspacep() {
    let cases = vec![
        Case::new(
            "ld.relaxed/acquire/volatile + fences",
            "ld.relaxed.gpu.global.u32 %r1, [%pin];\nld.acquire.gpu.global.u32 %r2, [%pin+8];\nld.volatile.global.u32 %r3, [%pin+16];\n\
             fence.acq_rel.gpu;\nfence.sc.cta;\nmembar.gl;\nmembar.cta;\nmembar.sys;\n\
             add.s32 %r1, %r1, %r2;\nadd.s32 %d, %r1, %r3;",
            [B32; 4],
        )
        .rows(random_rows(40, N, [B32; 3], |a, b, c| (a + b + c) & 0xffff_ffff)),
        Case::new(
            "st.release/relaxed then ld",
            "add.s64 %rd1, %pin, 4;\nst.release.gpu.global.u32 [%rd1], %b;\nst.relaxed.sys.global.u32 [%pin+12], %a;\nst.volatile.global.u32 [%pin+20], %c;\n\
             ld.global.u32 %r1, [%pin+4];\nld.global.u32 %r2, [%pin+12];\nld.global.u32 %r3, [%pin+20];\nxor.b32 %r1, %r1, %r2;\nxor.b32 %d, %r1, %r3;",
            [B32; 4],
        )
        .rows(random_rows(41, N, [B32; 3], |a, b, c| a ^ b ^ c)),
        Case::new(
            "isspacep",
            "isspacep.global %p1, %pin;\nisspacep.local %p2, %pin;\nisspacep.shared %p3, %pin;\n\
             selp.u32 %r1, 1, 0, %p1;\nselp.u32 %r2, 2, 0, %p2;\nselp.u32 %r3, 4, 0, %p3;\nor.b32 %r1, %r1, %r2;\nor.b32 %d, %r1, %r3;",
            [B32; 4],
        )
        .rows(random_rows(42, 4, [B32; 3], |_, _, _| 1)),
    ];
    run_cases(&cases);
}

#[test]
fn packed_half_and_64bit_atomics() {
    let body = "mov.b32 %r2, 0x38003c00;\natom.global.add.noftz.f16x2 %r1, [%a0], %r2;\n\
                mov.b32 %r3, 0x3f803f80;\natom.global.add.noftz.bf16x2 %r4, [%a0+4], %r3;\n\
                cvt.u64.u32 %rd3, %g;\natom.global.exch.b64 %rd4, [%a0+8], %rd3;\n\
                atom.global.max.u64 %rd5, [%a0+16], %rd3;\n\
                neg.s64 %rd6, %rd3;\natom.global.min.s64 %rd7, [%a0+24], %rd6;\n\
                mov.b16 %h1, 0x3c00;\nred.global.add.noftz.f16 [%a0+32], %h1;";
    let ptx = ptx_module(&simple_entry("atoms", 1, body));
    let out =
        run_buffers(&ptx, "atoms", cfg1(4, 64), &[vec![0u8; 40]]).unwrap_or_else(|e| panic!("{e}"));
    let b = &out[0];
    let u16at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let u64at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    // 256 adds of (lo 1.0, hi 0.5): every partial sum is exact in f16 and bf16.
    assert_eq!(
        (u16at(0), u16at(2)),
        (
            half::f16::from_f32(256.0).to_bits(),
            half::f16::from_f32(128.0).to_bits()
        ),
        "f16x2 atomic add"
    );
    assert_eq!(
        (u16at(4), u16at(6)),
        (
            half::bf16::from_f32(256.0).to_bits(),
            half::bf16::from_f32(256.0).to_bits()
        ),
        "bf16x2 atomic add"
    );
    assert!(u64at(8) < 256, "exch.b64 leaves one thread's value");
    assert_eq!(u64at(16), 255, "max.u64");
    assert_eq!(u64at(24) as i64, -255, "min.s64");
    assert_eq!(
        u16at(32),
        half::f16::from_f32(256.0).to_bits(),
        "red.add.f16"
    );
}

/// Each thread stages 16 bytes global -> shared (with `copy`), then writes the words reversed
/// (the last one re-read from global with cache hints); odd threads leave through `exit` before
/// even threads overwrite word 3 with word 0 + 1.
fn staged_copy(copy: &str) -> Result<(), String> {
    let body = format!(
        ".shared .align 16 .b8 stage[1024];\n\
         mul.wide.u32 %rd1, %t, 16;\n\
         add.s64 %rd2, %a0, %rd1;\n\
         mov.u32 %r1, stage;\n\
         mul.lo.u32 %r2, %t, 16;\n\
         add.u32 %r3, %r1, %r2;\n\
         {copy}\n\
         bar.sync 0;\n\
         nanosleep.u32 20;\n\
         prefetch.global.L2 [%rd2];\n\
         ld.shared.v4.u32 {{%r4, %r5, %r6, %r7}}, [%r3];\n\
         ld.global.nc.L1::no_allocate.L2::256B.u32 %r8, [%rd2];\n\
         add.s64 %rd3, %a1, %rd1;\n\
         st.global.L1::no_allocate.v4.u32 [%rd3], {{%r7, %r6, %r5, %r8}};\n\
         and.b32 %r9, %t, 1;\n\
         setp.ne.u32 %p1, %r9, 0;\n\
         @%p1 exit;\n\
         add.u32 %r4, %r4, 1;\n\
         st.global.u32 [%rd3+12], %r4;"
    );
    let ptx = ptx_module(&simple_entry("staged", 2, &body));
    let input: Vec<u8> = (0..1024u32).map(|i| (i * 13 + 1) as u8).collect();
    let out = run_buffers(&ptx, "staged", cfg1(1, 64), &[input.clone(), vec![0; 1024]])?;
    let inw = common::u32s(&input);
    let outw = common::u32s(&out[1]);
    for t in 0..64 {
        let w = &inw[4 * t..4 * t + 4];
        let last = if t % 2 == 1 {
            w[0]
        } else {
            w[0].wrapping_add(1)
        };
        let e = [w[3], w[2], w[1], last];
        if outw[4 * t..4 * t + 4] != e {
            return Err(format!(
                "thread {t}: expected {e:x?}, got {:x?}",
                &outw[4 * t..4 * t + 4]
            ));
        }
    }
    Ok(())
}

#[test]
fn cache_hints_nanosleep_prefetch_exit() {
    let copy = "ld.global.v4.u32 {%r10, %r11, %r12, %r13}, [%rd2];\nst.shared.v4.u32 [%r3], {%r10, %r11, %r12, %r13};";
    staged_copy(copy).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn cp_async_global_to_shared() {
    let copy = "cp.async.ca.shared.global [%r3], [%rd2], 16;\ncp.async.commit_group;\ncp.async.wait_group 0;";
    staged_copy(copy).unwrap_or_else(|e| panic!("{e}"));
    let copy = "cp.async.cg.shared.global [%r3], [%rd2], 16;\ncp.async.wait_all;";
    staged_copy(copy).unwrap_or_else(|e| panic!("{e}"));
}
