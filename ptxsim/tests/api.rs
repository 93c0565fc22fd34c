//! The public API around launches: module introspection, parse errors with line numbers,
//! argument checking, device memory management, launch statistics and determinism across
//! worker-thread counts.

mod common;

use common::{cfg, cfg1, parse, ptx_module, simple_entry};
use ptxsim::{Arg, Device, LaunchConfig, Module, Options, SimError};

fn copy_kernel() -> String {
    // out[g] = in[g] + 1 for 32-bit words.
    ptx_module(&simple_entry(
        "copy_plus_one",
        2,
        "mul.wide.u32 %rd1, %g, 4;\nadd.s64 %rd2, %a0, %rd1;\nadd.s64 %rd3, %a1, %rd1;\nld.global.u32 %r1, [%rd2];\nadd.s32 %r1, %r1, 1;\nst.global.u32 [%rd3], %r1;",
    ))
}

#[test]
fn module_introspection() {
    let ptx = copy_kernel() + &simple_entry("second", 1, "");
    let m = parse(&ptx, "two entries");
    let mut names = m.entry_names();
    names.sort_unstable();
    assert_eq!(names, vec!["copy_plus_one", "second"]);
    assert_eq!(m.version(), (8, 0));
    assert_eq!(m.target(), "sm_90");
    let e = m.entry("copy_plus_one").expect("entry");
    assert_eq!(e.name, "copy_plus_one");
    assert_eq!(e.params.len(), 2);
    assert_eq!(
        (
            e.params[0].name.as_str(),
            e.params[0].size,
            e.params[0].align
        ),
        ("copy_plus_one_p0", 8, 8)
    );
    assert!(m.entry("missing").is_none());
}

#[test]
fn parse_errors_carry_the_line() {
    let good = copy_kernel();
    let bad_line = good
        .lines()
        .position(|l| l.contains("add.s32 %r1, %r1, 1;"))
        .unwrap()
        + 1;
    let bad = good.replace("add.s32 %r1, %r1, 1;", "add.s32 %r1, %r1,, 1;");
    match Module::parse(&bad) {
        Err(SimError::Parse { line, .. }) => assert_eq!(line, bad_line),
        other => panic!(
            "expected a parse error at line {bad_line}, got {other:?}",
            other = other.err()
        ),
    }
    let unknown = good.replace("add.s32 %r1, %r1, 1;", "frobnicate.u32 %r1, %r1;");
    match Module::parse(&unknown) {
        Err(SimError::Parse { line, .. }) | Err(SimError::Unsupported { line, .. }) => {
            assert_eq!(line, bad_line)
        }
        other => panic!(
            "expected an error at line {bad_line}, got {other:?}",
            other = other.err()
        ),
    }
    let undeclared = good.replace("add.s32 %r1, %r1, 1;", "add.s32 %r1, %nosuchreg, 1;");
    assert!(
        Module::parse(&undeclared).is_err(),
        "an undeclared register must be rejected"
    );
}

#[test]
fn launch_argument_checks() {
    let ptx = copy_kernel();
    let m = parse(&ptx, "copy");
    let mut dev = Device::new();
    let a = dev.alloc(128).unwrap();
    let b = dev.alloc(128).unwrap();
    let c = cfg1(1, 32);
    assert!(matches!(
        dev.launch(&m, "nope", c, &[Arg::Ptr(a), Arg::Ptr(b)]),
        Err(SimError::UnknownEntry(_))
    ));
    assert!(matches!(
        dev.launch(&m, "copy_plus_one", c, &[Arg::Ptr(a)]),
        Err(SimError::InvalidArgument(_))
    ));
    match dev.launch(&m, "copy_plus_one", c, &[Arg::Ptr(a), Arg::U32(5)]) {
        Err(SimError::InvalidArgument(msg)) => assert!(
            msg.contains("copy_plus_one_p1"),
            "should name the param: {msg}"
        ),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert!(matches!(
        dev.launch(
            &m,
            "copy_plus_one",
            c,
            &[Arg::Ptr(a), Arg::Bytes(vec![0; 4])]
        ),
        Err(SimError::InvalidArgument(_))
    ));
    let zero = LaunchConfig {
        grid: [0, 1, 1],
        block: [32, 1, 1],
        shared_mem_bytes: 0,
    };
    assert!(matches!(
        dev.launch(&m, "copy_plus_one", zero, &[Arg::Ptr(a), Arg::Ptr(b)]),
        Err(SimError::InvalidArgument(_))
    ));
    // CUDA limits: gridDim.y/z <= 65535, blockDim.z <= 64, at most 1024 threads per block,
    // dynamic shared memory far beyond any GPU's (1 MiB).
    for (grid, block, smem) in [
        ([1, 65536, 1], [32, 1, 1], 0),
        ([1, 1, 65536], [32, 1, 1], 0),
        ([1, 1, 1], [1, 1, 65], 0),
        ([1, 1, 1], [32, 33, 1], 0),
        ([1, 1, 1], [32, 1, 1], 1 << 20),
    ] {
        let c = LaunchConfig {
            grid,
            block,
            shared_mem_bytes: smem,
        };
        let r = dev.launch(&m, "copy_plus_one", c, &[Arg::Ptr(a), Arg::Ptr(b)]);
        assert!(
            matches!(r, Err(SimError::InvalidArgument(_))),
            "grid {grid:?} block {block:?} smem {smem}: {r:?}"
        );
    }
    let huge = LaunchConfig {
        grid: [1, 1, 1],
        block: [2048, 1, 1],
        shared_mem_bytes: 0,
    };
    assert!(matches!(
        dev.launch(&m, "copy_plus_one", huge, &[Arg::Ptr(a), Arg::Ptr(b)]),
        Err(SimError::InvalidArgument(_))
    ));
}

#[test]
fn device_memory_management() {
    let mut dev = Device::new();
    let a = dev.alloc(100).unwrap();
    let b = dev.alloc_zeroed(1000).unwrap();
    assert!(a != 0 && b != 0 && a & 0xff == 0 && b & 0xff == 0 && a != b);
    assert!(a + 100 <= b || b + 1000 <= a, "allocations overlap");
    assert_eq!(dev.read(b, 1000).unwrap(), vec![0u8; 1000]);
    dev.write(b + 10, &[1, 2, 3]).unwrap();
    assert_eq!(dev.read(b + 9, 5).unwrap(), vec![0, 1, 2, 3, 0]);
    dev.write_slice(a, &[1.5f32, -2.0]).unwrap();
    assert_eq!(dev.read_slice::<f32>(a, 2).unwrap(), vec![1.5, -2.0]);
    dev.write_slice(a + 8, &[u64::MAX - 1]).unwrap();
    assert_eq!(dev.read_slice::<u64>(a + 8, 1).unwrap(), vec![u64::MAX - 1]);
    assert!(dev.read(a, 101).is_err(), "host read past the end");
    assert!(
        dev.write(a + 99, &[0, 0]).is_err(),
        "host write past the end"
    );
    assert!(dev.read(12345, 4).is_err(), "unmapped address");
    assert!(dev.free(a + 4).is_err(), "free of an interior pointer");
    dev.free(a).unwrap();
    assert!(dev.free(a).is_err(), "double free");
    assert!(dev.read(a, 4).is_err(), "read after free");
}

#[test]
fn launch_stats_and_results() {
    let ptx = copy_kernel();
    let m = parse(&ptx, "copy");
    let n = 300usize;
    let mut dev = Device::new();
    let a = dev.alloc(n * 4).unwrap();
    let b = dev.alloc_zeroed(n * 4).unwrap();
    let input: Vec<u32> = (0..n as u32).map(|i| i * 3).collect();
    dev.write_slice(a, &input).unwrap();
    // 3 blocks of 100 threads: the last warp of each block is partial.
    let s = dev
        .launch(
            &m,
            "copy_plus_one",
            cfg1(3, 100),
            &[Arg::Ptr(a), Arg::Ptr(b)],
        )
        .unwrap();
    assert_eq!(
        dev.read_slice::<u32>(b, n).unwrap(),
        input.iter().map(|x| x + 1).collect::<Vec<_>>()
    );
    assert_eq!((s.blocks, s.threads), (3, 300));
    let body_len = ptx
        .lines()
        .skip_while(|l| !l.contains("ld.param"))
        .filter(|l| l.trim_end().ends_with(';'))
        .count() as u64;
    // Every thread runs every instruction once (no branches): between body_len - 1 and body_len
    // per thread, depending on whether `ret` is counted.
    assert!(
        (300 * (body_len - 1)..=300 * body_len).contains(&s.thread_instructions),
        "thread_instructions {} for {body_len} instructions x 300 threads",
        s.thread_instructions
    );
    assert!(
        s.warp_instructions * 32 >= s.thread_instructions
            && s.warp_instructions < s.thread_instructions
    );
}

#[test]
fn results_do_not_depend_on_worker_threads() {
    // Each thread atomically adds to one of 7 counters and records the old value's parity;
    // counters must match whatever the worker-thread count.
    let ptx = ptx_module(&simple_entry(
        "count",
        1,
        "rem.u32 %r1, %g, 7;\nmul.wide.u32 %rd1, %r1, 4;\nadd.s64 %rd2, %a0, %rd1;\nred.global.add.u32 [%rd2], %g;",
    ));
    let m = parse(&ptx, "count");
    let mut results = Vec::new();
    for threads in [1, 2, 4] {
        let mut dev = Device::with_options(Options {
            threads,
            ..Options::default()
        });
        let p = dev.alloc_zeroed(28).unwrap();
        dev.launch(&m, "count", cfg1(16, 64), &[Arg::Ptr(p)])
            .unwrap();
        results.push(dev.read_slice::<u32>(p, 7).unwrap());
    }
    let e: Vec<u32> = (0..7)
        .map(|k| (0..1024u32).filter(|g| g % 7 == k).sum())
        .collect();
    for r in results {
        assert_eq!(r, e);
    }
}

#[test]
fn many_blocks_and_max_block_size() {
    // 2000 blocks of 32 threads each add their global index; then one block of 1024 threads.
    let ptx = ptx_module(&simple_entry(
        "sum_g",
        1,
        "cvt.u64.u32 %rd1, %g;\nred.global.add.u64 [%a0], %rd1;\natom.global.add.u32 %r1, [%a0+8], 1;",
    ));
    let m = parse(&ptx, "sum_g");
    let mut dev = Device::new();
    let p = dev.alloc_zeroed(16).unwrap();
    let s = dev
        .launch(&m, "sum_g", cfg1(2000, 32), &[Arg::Ptr(p)])
        .unwrap();
    assert_eq!(s.blocks, 2000);
    let n = 2000u64 * 32;
    assert_eq!(dev.read_slice::<u64>(p, 1).unwrap()[0], n * (n - 1) / 2);
    assert_eq!(dev.read_slice::<u32>(p + 8, 1).unwrap()[0], n as u32);
    let q = dev.alloc_zeroed(16).unwrap();
    dev.launch(&m, "sum_g", cfg1(1, 1024), &[Arg::Ptr(q)])
        .unwrap();
    assert_eq!(dev.read_slice::<u64>(q, 1).unwrap()[0], 1024 * 1023 / 2);
}

#[test]
fn a_box_of_the_grid_runs_alone() {
    // Each block writes 100 * gridDim.x + gridDim.y + 1 to out[ctaid.y * gridDim.x + ctaid.x]
    // and its thread count to out[12 + linear]; on a 4 x 3 grid, only the box x in 1..3,
    // y in 2..3 runs.
    let ptx = ptx_module(&simple_entry(
        "mark",
        1,
        "mov.u32 %r1, %ctaid.y;\nmov.u32 %r2, %nctaid.x;\nmad.lo.s32 %r3, %r1, %r2, %bid;\nmul.wide.u32 %rd1, %r3, 4;\nadd.s64 %rd2, %a0, %rd1;\nmov.u32 %r4, %nctaid.y;\nmad.lo.s32 %r5, %r2, 100, %r4;\nadd.s32 %r5, %r5, 1;\nsetp.eq.u32 %p1, %t, 0;\n@%p1 st.global.u32 [%rd2], %r5;\nred.global.add.u32 [%rd2+48], 1;",
    ));
    let m = parse(&ptx, "mark");
    for threads in [1, 2, 3] {
        let mut dev = Device::with_options(Options {
            threads,
            ..Options::default()
        });
        let p = dev.alloc_zeroed(24 * 4).unwrap();
        let c = cfg([4, 3, 1], [32, 1, 1]);
        let s = dev
            .launch_blocks(&m, "mark", c, &[Arg::Ptr(p)], [1..3, 2..3, 0..1])
            .unwrap();
        assert_eq!((s.blocks, s.threads), (2, 64));
        assert!(s.reports.is_empty(), "{:?}", s.reports);
        let out = dev.read_slice::<u32>(p, 24).unwrap();
        let mut want = vec![0u32; 24];
        for linear in [2 * 4 + 1, 2 * 4 + 2] {
            want[linear] = 100 * 4 + 3 + 1;
            want[12 + linear] = 32;
        }
        assert_eq!(out, want, "{threads} workers");
        // The whole grid is the full launch; an empty box runs nothing.
        let e = dev
            .launch_blocks(&m, "mark", c, &[Arg::Ptr(p)], [0..4, 1..1, 0..1])
            .unwrap();
        assert_eq!(e.blocks, 0);
        assert_eq!(dev.read_slice::<u32>(p, 24).unwrap(), want);
        // A box reaching past the grid is an argument error, not a fault or a panic.
        for bad in [[0..5, 0..1, 0..1], [0..1, 3..4, 0..1], [0..1, 0..1, 0..2]] {
            match dev.launch_blocks(&m, "mark", c, &[Arg::Ptr(p)], bad.clone()) {
                Err(SimError::InvalidArgument(msg)) => assert!(msg.contains("box"), "{msg}"),
                other => panic!("box {bad:?}: expected InvalidArgument, got {other:?}"),
            }
        }
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = [2..1, 0..1, 0..1];
        assert!(matches!(
            dev.launch_blocks(&m, "mark", c, &[Arg::Ptr(p)], reversed),
            Err(SimError::InvalidArgument(_))
        ));
    }
}

#[test]
fn huge_allocations_are_errors_not_panics() {
    // A failed allocation must leave the device usable.
    let mut dev = Device::new();
    assert!(dev.alloc(usize::MAX).is_err(), "alloc(usize::MAX)");
    let p = dev
        .alloc(16)
        .expect("alloc(16) after a failed alloc(usize::MAX)");
    assert!(dev.read(p, usize::MAX).is_err());
    // Lengths whose end address wraps around must be errors too (not a huge allocation).
    assert!(
        dev.read(p + 8, usize::MAX - 7).is_err(),
        "read(p + 8, usize::MAX - 7)"
    );
    assert!(
        dev.read_slice::<u64>(p, usize::MAX / 4).is_err(),
        "read_slice::<u64>(p, usize::MAX / 4)"
    );
    let mut dev = Device::new();
    assert!(
        dev.alloc_zeroed(usize::MAX / 2).is_err(),
        "alloc_zeroed(usize::MAX / 2)"
    );
    dev.alloc(16)
        .expect("alloc(16) after a failed alloc_zeroed(usize::MAX / 2)");
    let mut dev = Device::new();
    assert!(dev.alloc(1 << 62).is_err(), "alloc(2^62)");
    dev.alloc(16).expect("alloc(16) after a failed alloc(2^62)");
}

/// Small mutations of a valid kernel (deleted spans, duplicated or swapped lines, replaced
/// tokens): parsing and launching must return errors, never panic.
#[test]
fn mutated_ptx_never_panics() {
    let base = copy_kernel() + &simple_entry("second", 1, "ld.global.v2.u32 {%r1, %r2}, [%a0];\nshfl.sync.bfly.b32 %r3, %r1, 1, 31, -1;\nst.global.u32 [%a0], %r3;");
    let lines: Vec<&str> = base.lines().collect();
    let tokens = [
        "",
        "%r1",
        "%rd99",
        "[",
        "]",
        "{",
        "}",
        ";",
        ",",
        "0x",
        "-1",
        "99999999999999999999",
        ".u32",
        ".v4",
        "@%p1",
        "0f7FC00000",
        "bra $L",
        "\"",
        ".reg .b32 %r<0>;",
    ];
    let mut rng = common::Rng(2024);
    let mut panics = Vec::new();
    for i in 0..400 {
        let text = match i % 4 {
            0 => {
                let a = rng.range(0, base.len() as i64) as usize;
                let b = (a + rng.range(1, 12) as usize).min(base.len());
                if !base.is_char_boundary(a) || !base.is_char_boundary(b) {
                    continue;
                }
                format!("{}{}", &base[..a], &base[b..])
            }
            1 => {
                let k = rng.range(0, lines.len() as i64) as usize;
                let mut l = lines.clone();
                l.insert(k, lines[k]);
                l.join("\n")
            }
            2 => {
                let (x, y) = (
                    rng.range(0, lines.len() as i64) as usize,
                    rng.range(0, lines.len() as i64) as usize,
                );
                let mut l = lines.clone();
                l.swap(x, y);
                l.join("\n")
            }
            _ => {
                let a = rng.range(0, base.len() as i64) as usize;
                if !base.is_char_boundary(a) {
                    continue;
                }
                let t = tokens[rng.range(0, tokens.len() as i64) as usize];
                format!("{}{}{}", &base[..a], t, &base[a..])
            }
        };
        let r = std::panic::catch_unwind(|| {
            if let Ok(m) = Module::parse(&text) {
                let mut dev = Device::with_options(Options {
                    threads: 1,
                    max_warp_steps: 100_000,
                    ..Options::default()
                });
                let a = dev.alloc_zeroed(4096).unwrap();
                let b = dev.alloc_zeroed(4096).unwrap();
                for e in m.entry_names() {
                    let args: Vec<Arg> = m
                        .entry(e)
                        .unwrap()
                        .params
                        .iter()
                        .enumerate()
                        .map(|(k, _)| Arg::Ptr(if k == 0 { a } else { b }))
                        .collect();
                    let _ = dev.launch(&m, e, cfg1(2, 64), &args);
                }
            }
        });
        if r.is_err() {
            panics.push(text);
        }
    }
    assert!(
        panics.is_empty(),
        "{} mutated inputs panicked; first:\n{}",
        panics.len(),
        panics.first().map(String::as_str).unwrap_or("")
    );
}

#[test]
fn module_is_shared_across_host_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Module>();
    fn send<T: Send>() {}
    send::<Device>();
    let ptx = copy_kernel();
    let m = std::sync::Arc::new(parse(&ptx, "copy"));
    let handles: Vec<_> = (0..4u32)
        .map(|k| {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut dev = Device::with_options(Options {
                    threads: 1,
                    ..Options::default()
                });
                let n = 256usize;
                let a = dev.alloc(n * 4).unwrap();
                let b = dev.alloc_zeroed(n * 4).unwrap();
                let input: Vec<u32> = (0..n as u32).map(|i| i * k).collect();
                dev.write_slice(a, &input).unwrap();
                dev.launch(
                    &m,
                    "copy_plus_one",
                    cfg1(4, 64),
                    &[Arg::Ptr(a), Arg::Ptr(b)],
                )
                .unwrap();
                let got: Vec<u32> = dev.read_slice(b, n).unwrap();
                got == input.iter().map(|x| x + 1).collect::<Vec<_>>()
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap());
    }
}

/// Random launch configurations, argument lists and pointers (including null, unmapped and
/// interior ones): launches and host copies return errors or faults, never panic.
#[test]
fn random_api_misuse_never_panics() {
    let ptx = copy_kernel();
    let m = parse(&ptx, "copy");
    let mut rng = common::Rng(99);
    let mut panics = Vec::new();
    for i in 0..300 {
        let pick = |rng: &mut common::Rng, v: &[u32]| v[rng.range(0, v.len() as i64) as usize];
        let dims = [
            0u32,
            1,
            2,
            3,
            31,
            32,
            33,
            1024,
            1025,
            65535,
            65536,
            u32::MAX,
        ];
        let c = LaunchConfig {
            grid: [
                pick(&mut rng, &dims[..10]),
                pick(&mut rng, &[1, 1, 2, 0, 70000]),
                1,
            ],
            block: [
                pick(&mut rng, &dims),
                pick(&mut rng, &[1, 1, 2, 0]),
                pick(&mut rng, &[1, 1, 65]),
            ],
            shared_mem_bytes: pick(&mut rng, &[0, 0, 1, 49152, 1 << 30, u32::MAX]),
        };
        let nargs = rng.range(0, 4) as usize;
        let r = std::panic::catch_unwind(|| {
            let mut rng = common::Rng(i);
            let mut dev = Device::with_options(Options {
                threads: 1,
                max_warp_steps: 10_000,
                ..Options::default()
            });
            let a = dev.alloc(64).unwrap();
            let ptrs = [
                0u64,
                1,
                a,
                a + 3,
                a + 60,
                a + 64,
                u64::MAX,
                u64::MAX - 3,
                0x7f00_0000_0000,
            ];
            let args: Vec<Arg> = (0..nargs)
                .map(|_| match rng.range(0, 6) {
                    0 => Arg::U32(rng.next_u32()),
                    1 => Arg::I64(rng.next_u64() as i64),
                    2 => Arg::Bytes(vec![0; rng.range(0, 20) as usize]),
                    3 => Arg::F64(f64::NAN),
                    _ => Arg::Ptr(ptrs[rng.range(0, ptrs.len() as i64) as usize]),
                })
                .collect();
            let _ = dev.launch(&m, "copy_plus_one", c, &args);
            let p = ptrs[rng.range(0, ptrs.len() as i64) as usize];
            let _ = dev.read(p, rng.range(0, 100) as usize);
            let _ = dev.write(p, &[1, 2, 3]);
            let _ = dev.free(p);
            let _ = dev.read_slice::<u64>(p, usize::MAX / 4);
        });
        if r.is_err() {
            panics.push(format!("{c:?} with {nargs} args (iteration {i})"));
        }
    }
    assert!(
        panics.is_empty(),
        "{} panics, first: {}",
        panics.len(),
        panics[0]
    );
}

/// Declarations beyond what any GPU accepts (ptxas rejects them): 1 MiB of local memory per
/// thread (the CUDA limit is 512 KiB) and a 64 KiB kernel parameter (limit 32764 bytes) must be
/// errors at parse or launch time, not run.
#[test]
fn declarations_beyond_hardware_limits_are_errors() {
    let local = ptx_module(".visible .entry k(.param .u64 p)\n{\n.local .align 8 .b8 big[1048576];\n.reg .b64 %rd<2>;\nmov.u64 %rd1, big;\nret;\n}\n");
    let param = ptx_module(".visible .entry k(.param .align 8 .b8 p[65536])\n{\nret;\n}\n");
    for (what, ptx, arg) in [
        ("1 MiB .local", local, Arg::Ptr(0)),
        ("64 KiB param", param, Arg::Bytes(vec![0; 65536])),
    ] {
        let r =
            Module::parse(&ptx).and_then(|m| Device::new().launch(&m, "k", cfg1(1, 32), &[arg]));
        assert!(r.is_err(), "{what}: expected an error, got {r:?}");
    }
}

#[test]
fn absurd_declarations_are_errors_not_aborts() {
    let regs = ".version 9.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n.reg .b32 %r<100000000>;\nret;\n}\n";
    match ptxsim::Module::parse(regs) {
        Err(ptxsim::SimError::Unsupported { line, .. }) => assert_eq!(line, 6),
        other => panic!("expected Unsupported at line 6, got {other:?}"),
    }
    let global = ".version 9.0\n.target sm_80\n.address_size 64\n.global .align 8 .b8 g[40000000000];\n.visible .entry k()\n{\nret;\n}\n";
    if let Ok(m) = ptxsim::Module::parse(global) {
        let mut dev = ptxsim::Device::new();
        let cfg = ptxsim::LaunchConfig {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_mem_bytes: 0,
        };
        assert!(
            dev.launch(&m, "k", cfg, &[]).is_err(),
            "a 40 GB module variable must be an error"
        );
    }
}
