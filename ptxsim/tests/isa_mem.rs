//! Memory instructions: ld/st of every vector width and element size (global, shared, local,
//! generic addressing), sign/zero-extending narrow loads, and atomics (global and shared:
//! add u32/u64/f32/f64, cas, exch, min/max, and/or/xor, inc/dec, red) with host-side expectations.

mod common;

use common::{cfg1, ptx_module, run_buffers, simple_entry, u32_bytes, u32s};

/// Expected result of reversing the element order inside each vector of `count` elements of
/// `eb` bytes.
fn reversed(input: &[u8], eb: usize, count: usize) -> Vec<u8> {
    let mut out = vec![0u8; input.len()];
    let vb = eb * count;
    for (v, chunk) in input.chunks(vb).enumerate() {
        for e in 0..count {
            let src = &chunk[e * eb..(e + 1) * eb];
            let dst = v * vb + (count - 1 - e) * eb;
            out[dst..dst + eb].copy_from_slice(src);
        }
    }
    out
}

#[test]
fn ld_st_vector_widths() {
    // (ptx type, element bytes, count, register prefix, qualifier on ld)
    let variants: [(&str, usize, usize, &str, &str); 12] = [
        ("u32", 4, 2, "%r", ""),
        ("u32", 4, 4, "%r", ""),
        ("f32", 4, 4, "%f", ".nc"),
        ("u64", 8, 2, "%rd1", ""),
        ("f64", 8, 2, "%fd", ""),
        ("u16", 2, 2, "%h", ""),
        ("b16", 2, 4, "%h", ""),
        ("u8", 1, 2, "%h", ""),
        ("u8", 1, 4, "%h", ".ca"),
        ("b32", 4, 1, "%r", ".cg"),
        ("b64", 8, 1, "%rd1", ""),
        ("f32", 4, 2, "%f", ".L1::no_allocate"),
    ];
    let threads = 32usize;
    let mut failures = Vec::new();
    for (i, (ty, eb, count, reg, qual)) in variants.into_iter().enumerate() {
        let vb = eb * count;
        let regs: Vec<String> = (1..=count).map(|k| format!("{reg}{k}")).collect();
        let vec = if count == 1 {
            String::new()
        } else {
            format!(".v{count}")
        };
        let (ld_regs, st_regs) = if count == 1 {
            (regs[0].clone(), regs[0].clone())
        } else {
            let rev: Vec<String> = regs.iter().rev().cloned().collect();
            (
                format!("{{{}}}", regs.join(", ")),
                format!("{{{}}}", rev.join(", ")),
            )
        };
        let body = format!(
            "mul.wide.u32 %rd1, %t, {vb};\nadd.s64 %rd2, %a0, %rd1;\nadd.s64 %rd3, %a1, %rd1;\n\
             ld.global{qual}{vec}.{ty} {ld_regs}, [%rd2];\nst.global{vec}.{ty} [%rd3], {st_regs};"
        );
        let ptx = ptx_module(&simple_entry("vec", 2, &body));
        let input: Vec<u8> = (0..threads * vb).map(|k| (k * 7 + 3 + i) as u8).collect();
        let expect = reversed(&input, eb, count);
        match run_buffers(
            &ptx,
            "vec",
            cfg1(1, threads as u32),
            &[input, vec![0; threads * vb]],
        ) {
            Ok(out) if out[1] == expect => {}
            Ok(out) => failures.push(format!(
                "ld/st{vec}.{ty}: expected {:?}..., got {:?}...",
                &expect[..16],
                &out[1][..16]
            )),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn narrow_loads_extend() {
    let body = "mul.wide.u32 %rd1, %t, 2;\nadd.s64 %rd2, %a0, %rd1;\nmul.wide.u32 %rd1, %t, 16;\nadd.s64 %rd3, %a1, %rd1;\n\
                ld.global.s8 %r1, [%rd2];\nld.global.u8 %r2, [%rd2];\nld.global.s16 %r3, [%rd2];\nld.global.u16 %r4, [%rd2];\n\
                st.global.v4.u32 [%rd3], {%r1, %r2, %r3, %r4};";
    let ptx = ptx_module(&simple_entry("narrow", 2, body));
    let vals: [u16; 4] = [0x0080, 0x7f7f, 0x8001, 0xffff];
    let input: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = run_buffers(&ptx, "narrow", cfg1(1, 4), &[input, vec![0; 64]])
        .unwrap_or_else(|e| panic!("{e}"));
    let got = u32s(&out[1]);
    for (t, &v) in vals.iter().enumerate() {
        let exp = [
            v as u8 as i8 as i32 as u32,
            v as u8 as u32,
            v as i16 as i32 as u32,
            v as u32,
        ];
        assert_eq!(
            &got[4 * t..4 * t + 4],
            &exp,
            "value {v:#06x}: s8, u8, s16, u16 loads"
        );
    }
}

#[test]
fn shared_local_and_generic_addressing() {
    // Each thread writes 4 words to shared memory as a v4.u32, the block syncs, then each thread
    // reads its neighbour's 16 bytes as v2.u64 and one byte, and round-trips a value through
    // local memory with both .local and generic addressing.
    let body = "\
        .shared .align 16 .b8 smem[512];\n\
        .local .align 16 .b8 lbuf[32];\n\
        mov.u64 %rd5, smem;\n\
        mul.wide.u32 %rd1, %t, 16;\n\
        add.s64 %rd6, %rd5, %rd1;\n\
        shl.b32 %r1, %t, 8;\n\
        add.s32 %r2, %r1, 1;\n\
        add.s32 %r3, %r1, 2;\n\
        add.s32 %r4, %r1, 3;\n\
        st.shared.v4.u32 [%rd6], {%r1, %r2, %r3, %r4};\n\
        bar.sync 0;\n\
        add.s32 %r5, %t, 1;\n\
        and.b32 %r5, %r5, 31;\n\
        mul.wide.u32 %rd1, %r5, 16;\n\
        add.s64 %rd7, %rd5, %rd1;\n\
        ld.shared.v2.u64 {%rd10, %rd11}, [%rd7];\n\
        ld.shared.u8 %r6, [%rd7+4];\n\
        mov.u64 %rd12, lbuf;\n\
        st.local.v2.u64 [%rd12], {%rd11, %rd10};\n\
        ld.local.u64 %rd13, [%rd12+8];\n\
        cvta.local.u64 %rd14, %rd12;\n\
        ld.u64 %rd15, [%rd14];\n\
        cvta.shared.u64 %rd16, %rd7;\n\
        ld.u32 %r7, [%rd16+12];\n\
        mul.wide.u32 %rd1, %t, 32;\n\
        add.s64 %rd2, %a0, %rd1;\n\
        st.global.v2.u64 [%rd2], {%rd13, %rd15};\n\
        st.global.v2.u32 [%rd2+16], {%r6, %r7};";
    let ptx = ptx_module(&simple_entry("mem_spaces", 1, body));
    let out = run_buffers(&ptx, "mem_spaces", cfg1(1, 32), &[vec![0xcc; 32 * 32]])
        .unwrap_or_else(|e| panic!("{e}"));
    for t in 0..32u32 {
        let n = (t + 1) % 32;
        let w = |k: u32| (n << 8) + k;
        let lo = w(0) as u64 | (w(1) as u64) << 32;
        let hi = w(2) as u64 | (w(3) as u64) << 32;
        let rec = &out[0][t as usize * 32..t as usize * 32 + 32];
        let q = |i: usize| u64::from_le_bytes(rec[i..i + 8].try_into().unwrap());
        assert_eq!(q(0), lo, "thread {t}: ld.local of the value stored second");
        assert_eq!(q(8), hi, "thread {t}: generic ld of local memory");
        assert_eq!(
            u32s(&rec[16..24]),
            vec![w(1) & 0xff, w(3)],
            "thread {t}: ld.shared.u8 / generic shared ld"
        );
    }
}

/// One atomic test: a kernel over `blocks` x `threads` and a host check of the buffers.
struct AtomCase {
    name: &'static str,
    body: &'static str,
    init: Vec<u8>,
    check: fn(&[u8], &[u8]) -> Result<(), String>,
}

const BLOCKS: u32 = 4;
const THREADS: u32 = 64;
const N: u32 = BLOCKS * THREADS;

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap())
}

fn is_permutation(mut v: Vec<u32>, expect: impl Iterator<Item = u32>) -> bool {
    let mut e: Vec<u32> = expect.collect();
    v.sort_unstable();
    e.sort_unstable();
    v == e
}

#[test]
fn atomics_global_and_shared() {
    // a0: the atomic target(s); a1: per-thread returned old values (N words).
    let cases = vec![
        AtomCase {
            name: "atom.global.add.u32",
            body: "atom.global.add.u32 %r1, [%a0], 1;\nmul.wide.u32 %rd1, %g, 4;\nadd.s64 %rd2, %a1, %rd1;\nst.global.u32 [%rd2], %r1;",
            init: vec![0; 4],
            check: |t, o| {
                if word(t, 0) != N {
                    return Err(format!("final {} != {N}", word(t, 0)));
                }
                if !is_permutation(u32s(o), 0..N) {
                    return Err("returned old values are not a permutation of 0..N".into());
                }
                Ok(())
            },
        },
        AtomCase {
            name: "atom.relaxed.gpu.global.add.u32 (scoped)",
            body: "atom.relaxed.gpu.global.add.u32 %r1, [%a0], %g;",
            init: vec![0; 4],
            check: |t, _| (word(t, 0) == (0..N).sum::<u32>()).then_some(()).ok_or(format!("sum {}", word(t, 0))),
        },
        AtomCase {
            name: "red.global.add.u64",
            body: "cvt.u64.u32 %rd3, %g;\nshl.b64 %rd3, %rd3, 32;\nred.global.add.u64 [%a0], %rd3;",
            init: vec![0; 8],
            check: |t, _| {
                let v = u64::from_le_bytes(t[..8].try_into().unwrap());
                let e = (0..N as u64).map(|g| g << 32).fold(0u64, u64::wrapping_add);
                (v == e).then_some(()).ok_or(format!("got {v:#x}, expected {e:#x}"))
            },
        },
        AtomCase {
            name: "atom.global.add.f32",
            body: "atom.global.add.f32 %f1, [%a0], 0f3F000000;",
            init: vec![0; 4],
            check: |t, _| {
                let v = f32::from_bits(word(t, 0));
                (v == N as f32 * 0.5).then_some(()).ok_or(format!("got {v}"))
            },
        },
        AtomCase {
            name: "red.global.add.f32",
            body: "cvt.rn.f32.u32 %f1, %g;\nred.global.add.f32 [%a0], %f1;",
            init: vec![0; 4],
            check: |t, _| {
                let v = f32::from_bits(word(t, 0));
                let e = (0..N).sum::<u32>() as f32; // every partial sum is an integer < 2^24: exact
                (v == e).then_some(()).ok_or(format!("got {v}, expected {e}"))
            },
        },
        AtomCase {
            name: "atom.global.add.f64",
            body: "cvt.rn.f64.u32 %fd1, %g;\natom.global.add.f64 %fd2, [%a0], %fd1;",
            init: vec![0; 8],
            check: |t, _| {
                let v = f64::from_le_bytes(t[..8].try_into().unwrap());
                let e = (0..N).sum::<u32>() as f64;
                (v == e).then_some(()).ok_or(format!("got {v}, expected {e}"))
            },
        },
        AtomCase {
            name: "atom.global.cas.b32 loop",
            body: "ld.global.u32 %r1, [%a0];\n\
                   $Lcas:\n\
                   add.s32 %r2, %r1, %g;\n\
                   add.s32 %r2, %r2, 1;\n\
                   atom.global.cas.b32 %r3, [%a0], %r1, %r2;\n\
                   setp.ne.s32 %p1, %r3, %r1;\n\
                   mov.u32 %r1, %r3;\n\
                   @%p1 bra $Lcas;",
            init: vec![0; 4],
            check: |t, _| {
                let e: u32 = (1..=N).sum();
                (word(t, 0) == e).then_some(()).ok_or(format!("got {}, expected {e}", word(t, 0)))
            },
        },
        AtomCase {
            name: "atom.global.cas.b64",
            body: "cvt.u64.u32 %rd3, %g;\nmov.u64 %rd5, 77;\natom.global.cas.b64 %rd4, [%a0], %rd3, %rd5;",
            init: vec![0; 8],
            // Only the thread whose g equals the current value (0) succeeds; then 77 stays.
            check: |t, _| {
                let v = u64::from_le_bytes(t[..8].try_into().unwrap());
                (v == 77).then_some(()).ok_or(format!("got {v}"))
            },
        },
        AtomCase {
            name: "atom.global.exch.b32",
            body: "add.s32 %r2, %g, 1;\natom.global.exch.b32 %r1, [%a0], %r2;\nmul.wide.u32 %rd1, %g, 4;\nadd.s64 %rd2, %a1, %rd1;\nst.global.u32 [%rd2], %r1;",
            init: vec![0; 4],
            check: |t, o| {
                let mut all = u32s(o);
                all.push(word(t, 0));
                is_permutation(all, 0..=N).then_some(()).ok_or("old values + final value are not {0..=N}".into())
            },
        },
        AtomCase {
            name: "atom.global.max.s32 / min.u32 / min.s32",
            body: "mul.lo.s32 %r1, %g, 37;\nrem.u32 %r1, %r1, 101;\nsub.s32 %r1, %r1, 50;\n\
                   atom.global.max.s32 %r2, [%a0], %r1;\natom.global.min.u32 %r3, [%a0+4], %r1;\natom.global.min.s32 %r4, [%a0+8], %r1;",
            init: u32_bytes(&[i32::MIN as u32, u32::MAX, i32::MAX as u32]),
            check: |t, _| {
                let vals: Vec<i32> = (0..N).map(|g| ((g * 37) % 101) as i32 - 50).collect();
                let e = [
                    *vals.iter().max().unwrap() as u32,
                    vals.iter().map(|&v| v as u32).min().unwrap(),
                    *vals.iter().min().unwrap() as u32,
                ];
                let got = [word(t, 0), word(t, 1), word(t, 2)];
                (got == e).then_some(()).ok_or(format!("got {got:?}, expected {e:?}"))
            },
        },
        AtomCase {
            name: "atom.global.and/or/xor.b32",
            body: "and.b32 %r1, %g, 31;\nshl.b32 %r2, 1, %r1;\nnot.b32 %r3, %r2;\n\
                   atom.global.and.b32 %r4, [%a0], %r3;\natom.global.or.b32 %r4, [%a0+4], %r2;\natom.global.xor.b32 %r4, [%a0+8], %g;",
            init: u32_bytes(&[u32::MAX, 0, 0x5a5a_5a5a]),
            check: |t, _| {
                let x = (0..N).fold(0x5a5a_5a5au32, |a, g| a ^ g);
                let got = [word(t, 0), word(t, 1), word(t, 2)];
                (got == [0, u32::MAX, x]).then_some(()).ok_or(format!("got {got:x?}"))
            },
        },
        AtomCase {
            name: "atom.global.inc/dec.u32",
            body: "mov.u32 %r3, 99;\natom.global.inc.u32 %r1, [%a0], %r3;\natom.global.dec.u32 %r2, [%a0+4], 99;",
            init: u32_bytes(&[0, 10]),
            // inc: old >= 99 ? 0 : old + 1, so N incs from 0 give N mod 100;
            // dec: (old == 0 || old > 99) ? 99 : old - 1, so N decs from 10 give (10 - N) mod 100.
            check: |t, _| {
                let e = [N % 100, (10 + 100 * N - N) % 100];
                let got = [word(t, 0), word(t, 1)];
                (got == e).then_some(()).ok_or(format!("got {got:?}, expected {e:?}"))
            },
        },
        AtomCase {
            name: "atom.shared.add.u32 + bar.sync",
            body: ".shared .align 4 .u32 scount;\n\
                   setp.eq.s32 %p1, %t, 0;\n\
                   mov.u32 %r9, 0;\n\
                   @%p1 st.shared.u32 [scount], %r9;\n\
                   bar.sync 0;\n\
                   atom.shared.add.u32 %r1, [scount], 2;\n\
                   bar.sync 0;\n\
                   ld.shared.u32 %r2, [scount];\n\
                   @%p1 red.global.add.u32 [%a0], %r2;",
            init: vec![0; 4],
            check: |t, _| (word(t, 0) == 2 * N).then_some(()).ok_or(format!("got {}", word(t, 0))),
        },
    ];
    let mut failures = Vec::new();
    for c in cases {
        let ptx = ptx_module(&simple_entry("atom", 2, c.body));
        match run_buffers(
            &ptx,
            "atom",
            cfg1(BLOCKS, THREADS),
            &[c.init.clone(), vec![0; 4 * N as usize]],
        ) {
            Ok(out) => {
                if let Err(e) = (c.check)(&out[0], &out[1]) {
                    failures.push(format!("{}: {e}", c.name));
                }
            }
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
