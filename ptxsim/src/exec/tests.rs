//! Executor tests on hand-written PTX: scheduling, warp synchronization and faults.

use crate::{Arg, Device, FaultKind, LaunchConfig, Module, Options, SimError};

fn module(body: &str, regs: &str) -> Module {
    let ptx = format!(
        ".version 9.0\n.target sm_80\n.address_size 64\n\
         .visible .entry k(.param .u64 k_out)\n{{\n\
         .reg .pred %p<8>;\n.reg .b32 %r<32>;\n.reg .b64 %rd<16>;\n{regs}\n\
         ld.param.u64 %rd1, [k_out];\ncvta.to.global.u64 %rd1, %rd1;\n\
         mov.u32 %r1, %tid.x;\nmul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\n{body}\nret;\n}}\n"
    );
    match Module::parse(&ptx) {
        Ok(m) => m,
        Err(e) => panic!("{e}\n{ptx}"),
    }
}

fn run(m: &Module, threads: u32, n_out: usize) -> Result<Vec<u32>, SimError> {
    let mut d = Device::with_options(Options {
        threads: 1,
        ..Options::default()
    });
    let out = d.alloc_zeroed(n_out * 4)?;
    let cfg = LaunchConfig {
        grid: [1, 1, 1],
        block: [threads, 1, 1],
        shared_mem_bytes: 0,
    };
    d.launch(m, "k", cfg, &[Arg::Ptr(out)])?;
    d.read_slice(out, n_out)
}

fn fault(r: Result<Vec<u32>, SimError>) -> crate::Fault {
    match r {
        Err(SimError::Fault(f)) => *f,
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn divergent_branches_reconverge_for_shfl() {
    // odd lanes take a long path, even lanes a short one; both then do a full-warp shfl
    let m = module(
        "and.b32 %r2, %r1, 1;\nsetp.eq.s32 %p1, %r2, 0;\nmov.u32 %r3, 0;\n@%p1 bra EVEN;\n\
         add.s32 %r3, %r3, 100;\nadd.s32 %r3, %r3, 100;\nbra JOIN;\n\
         EVEN:\nadd.s32 %r3, %r3, 1;\n\
         JOIN:\nadd.s32 %r4, %r3, %r1;\nshfl.sync.bfly.b32 %r5, %r4, 1, 31, -1;\nst.global.u32 [%rd3], %r5;",
        "",
    );
    let got = run(&m, 32, 32).unwrap();
    for l in 0..32u32 {
        let partner = l ^ 1;
        let v = partner + if partner % 2 == 1 { 200 } else { 1 };
        assert_eq!(got[l as usize], v, "lane {l}");
    }
}

#[test]
fn shfl_with_exited_lane_in_mask_faults() {
    let m = module(
        "setp.eq.s32 %p1, %r1, 5;\n@%p1 bra OUT;\nshfl.sync.idx.b32 %r5, %r1, 0, 31, -1;\nst.global.u32 [%rd3], %r5;\nOUT:",
        "",
    );
    let f = fault(run(&m, 32, 32));
    assert_eq!(f.kind, FaultKind::ShflMaskLane, "{f}");
}

#[test]
fn partial_mask_shfl_and_vote() {
    // lanes 0..15 only, mask 0xffff
    let m = module(
        "setp.ge.u32 %p1, %r1, 16;\n@%p1 bra OUT;\n\
         shfl.sync.down.b32 %r5|%p2, %r1, 4, 0x101f, 0xffff;\n\
         setp.lt.u32 %p3, %r1, 3;\nvote.sync.ballot.b32 %r6, %p3, 0xffff;\n\
         add.s32 %r5, %r5, %r6;\nst.global.u32 [%rd3], %r5;\nOUT:",
        "",
    );
    let got = run(&m, 32, 32).unwrap();
    for l in 0..16u32 {
        // width 16: lanes 12..15 would read past the segment and keep their own value
        let src = if l + 4 <= 15 { l + 4 } else { l };
        assert_eq!(got[l as usize], src + 0b111, "lane {l}");
    }
}

#[test]
fn shfl_reading_lane_outside_mask_faults() {
    let m = module(
        "setp.ge.u32 %p1, %r1, 16;\n@%p1 bra OUT;\nshfl.sync.down.b32 %r5, %r1, 4, 31, 0xffff;\nst.global.u32 [%rd3], %r5;\nOUT:",
        "",
    );
    let f = fault(run(&m, 32, 32));
    assert_eq!(f.kind, FaultKind::ShflMaskLane, "{f}");
    assert_eq!(f.thread[0], 12, "{f}");
}

#[test]
fn barrier_after_early_exit_is_divergence() {
    let m = module(
        "setp.ge.u32 %p1, %r1, 40;\n@%p1 bra OUT;\nbar.sync 0;\nst.global.u32 [%rd3], %r1;\nOUT:",
        "",
    );
    let f = fault(run(&m, 64, 64));
    assert_eq!(f.kind, FaultKind::BarrierDivergence, "{f}");
}

#[test]
fn barrier_orders_shared_memory_between_warps() {
    let m = module(
        "mov.u32 %r2, sm;\nshl.b32 %r3, %r1, 2;\nadd.s32 %r4, %r2, %r3;\nst.shared.u32 [%r4], %r1;\nbar.sync 0;\n\
         sub.s32 %r5, 127, %r1;\nshl.b32 %r6, %r5, 2;\nadd.s32 %r7, %r2, %r6;\nld.shared.u32 %r8, [%r7];\nst.global.u32 [%rd3], %r8;",
        ".shared .align 4 .b8 sm[512];",
    );
    let got = run(&m, 128, 128).unwrap();
    for t in 0..128u32 {
        assert_eq!(got[t as usize], 127 - t);
    }
}

#[test]
fn out_of_bounds_store_names_allocation() {
    let m = module("st.global.u32 [%rd3+400], %r1;", "");
    let f = fault(run(&m, 32, 100));
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{f}");
    assert_eq!(f.thread, [0, 0, 0]);
    let (base, size) = f.allocation.expect("allocation");
    assert_eq!(size, 400);
    assert_eq!(f.address, Some(base + 400));
    let s = f.to_string();
    assert!(s.contains("0 bytes past allocation"), "{s}");
    assert!(s.contains("PTX line"), "{s}");
}

#[test]
fn misaligned_vector_load_faults() {
    let m = module("ld.global.v2.u32 {%r5, %r6}, [%rd1+4];", "");
    let f = fault(run(&m, 1, 8));
    assert_eq!(f.kind, FaultKind::Misaligned, "{f}");
}

#[test]
fn infinite_loop_hits_step_limit() {
    let m = module("LOOP:\nbra LOOP;", "");
    let mut d = Device::with_options(Options {
        threads: 1,
        max_warp_steps: 1000,
        ..Options::default()
    });
    let out = d.alloc(4).unwrap();
    let cfg = LaunchConfig {
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_mem_bytes: 0,
    };
    let r = d.launch(&m, "k", cfg, &[Arg::Ptr(out)]);
    assert!(
        matches!(r, Err(SimError::StepLimit { steps: 1000, .. })),
        "{r:?}"
    );
}

#[test]
fn syncwarp_in_divergent_branches_synchronizes() {
    let m = module(
        "setp.lt.u32 %p1, %r1, 16;\n@%p1 bra A;\nbar.warp.sync -1;\nbra J;\nA:\nbar.warp.sync -1;\nJ:\nst.global.u32 [%rd3], %r1;",
        "",
    );
    let got = run(&m, 32, 32).unwrap();
    assert_eq!(got, (0..32).collect::<Vec<u32>>());
}

#[test]
fn carry_chain_adds_64_bits() {
    let m = module(
        "mov.u32 %r2, -1;\nmov.u32 %r3, 1;\nadd.cc.u32 %r4, %r2, %r3;\naddc.u32 %r5, 0, 0;\nst.global.u32 [%rd3], %r5;",
        "",
    );
    assert_eq!(run(&m, 1, 1).unwrap(), vec![1]);
}

#[test]
fn printf_is_ignored_and_returns_zero() {
    let ptx = ".version 9.0\n.target sm_80\n.address_size 64\n\
        .extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);\n\
        .global .align 1 .b8 fmt[4] = {104, 105, 10, 0};\n\
        .visible .entry k(.param .u64 k_out)\n{\n.reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n\
        ld.param.u64 %rd1, [k_out];\nmov.u64 %rd2, fmt;\ncvta.global.u64 %rd3, %rd2;\n\
        { .param .b64 param0;\n st.param.b64 [param0+0], %rd3;\n .param .b64 param1;\n st.param.b64 [param1+0], 0;\n\
        .param .b32 retval0;\n call.uni (retval0), vprintf, (param0, param1);\n ld.param.b32 %r1, [retval0+0];\n}\n\
        add.s32 %r2, %r1, 7;\nst.global.u32 [%rd1], %r2;\nret;\n}\n";
    let m = Module::parse(ptx).unwrap();
    let mut d = Device::new();
    let out = d.alloc(4).unwrap();
    let cfg = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
    };
    d.launch(&m, "k", cfg, &[Arg::Ptr(out)]).unwrap();
    assert_eq!(d.read_slice::<u32>(out, 1).unwrap(), vec![7]);
}

#[test]
fn clock_is_monotonic() {
    let m = module(
        "mov.u32 %r2, %clock;\nadd.s32 %r9, %r1, 1;\nadd.s32 %r9, %r9, 1;\nmov.u32 %r3, %clock;\n\
         setp.gt.u32 %p1, %r3, %r2;\nselp.u32 %r4, 1, 0, %p1;\nst.global.u32 [%rd3], %r4;",
        "",
    );
    assert_eq!(run(&m, 1, 1).unwrap(), vec![1]);
}

mod events {
    use super::module;
    use crate::exec::events::{AccessEv, BlockEvents, EvKind, EvSpace, Events};
    use crate::{Arg, Device, LaunchConfig, Options};
    use std::sync::{Arc, Mutex};

    /// (space, kind, warp, size, lanes as (addr, lane, uninit))
    type Acc = (EvSpace, EvKind, u32, u32, Vec<(u64, u8, bool)>);

    #[derive(Default)]
    struct Log {
        accesses: Vec<Acc>,
        barriers: u32,
        syncs: Vec<(u32, u32)>,
        instructions: u64,
        blocks: Vec<u64>,
    }

    struct Rec(Arc<Mutex<Log>>);

    impl Events for Rec {
        fn access(&mut self, ev: &AccessEv<'_>) {
            let lanes = ev
                .lanes
                .iter()
                .map(|l| (l.addr, l.lane, l.uninit))
                .collect();
            let mut g = self.0.lock().unwrap();
            g.accesses
                .push((ev.space, ev.kind, ev.warp, ev.size, lanes));
        }
        fn barrier(&mut self) {
            self.0.lock().unwrap().barriers += 1;
        }
        fn warp_sync(&mut self, warp: u32, mask: u32) {
            self.0.lock().unwrap().syncs.push((warp, mask));
        }
        fn instruction(&mut self, _pc: u32, active: u32) {
            self.0.lock().unwrap().instructions += active as u64;
        }
    }

    impl BlockEvents for Rec {
        fn start(&mut self, linear: u64, _id: [u32; 3]) {
            self.0.lock().unwrap().blocks.push(linear);
        }
        fn end(&mut self) {}
    }

    #[test]
    fn events_describe_requests_barriers_and_syncs() {
        // each thread: shared store, barrier, shfl, then a global load of a never-written word
        let m = module(
            "mov.u32 %r2, sm;\nshl.b32 %r3, %r1, 2;\nadd.s32 %r4, %r2, %r3;\nst.shared.u32 [%r4], %r1;\n\
             bar.sync 0;\nshfl.sync.bfly.b32 %r5, %r1, 1, 31, -1;\nld.global.u32 %r6, [%rd3];\n\
             add.s32 %r6, %r6, %r5;\nst.global.u32 [%rd3], %r6;",
            ".shared .align 4 .b8 sm[256];",
        );
        let log = Arc::new(Mutex::new(Log::default()));
        let mut d = Device::with_options(Options {
            threads: 1,
            ..Options::default()
        });
        let out = d.alloc(64 * 4).unwrap();
        let cfg = LaunchConfig {
            grid: [1, 1, 1],
            block: [64, 1, 1],
            shared_mem_bytes: 0,
        };
        let l2 = log.clone();
        let factory = move || -> Option<Box<dyn BlockEvents>> { Some(Box::new(Rec(l2.clone()))) };
        let stats = d
            .launch_with(
                &m,
                "k",
                cfg,
                &[Arg::Ptr(out)],
                [0..1, 0..1, 0..1],
                false,
                &factory,
            )
            .unwrap();
        let g = log.lock().unwrap();
        assert_eq!(g.blocks, vec![0]);
        assert_eq!(g.barriers, 1);
        let mut syncs = g.syncs.clone();
        syncs.sort();
        assert_eq!(syncs, vec![(0, u32::MAX), (1, u32::MAX)]);
        assert_eq!(g.instructions, stats.thread_instructions);
        // per warp: shared store, global load, global store
        assert_eq!(
            g.accesses.len(),
            6,
            "{:?}",
            g.accesses
                .iter()
                .map(|a| (a.0, a.1, a.2))
                .collect::<Vec<_>>()
        );
        let shared: Vec<_> = g
            .accesses
            .iter()
            .filter(|a| a.0 == EvSpace::Shared)
            .collect();
        assert_eq!(shared.len(), 2);
        assert_eq!(
            shared[1].4[3],
            (4 * 35, 3, false),
            "warp 1 lane 3 writes offset 140"
        );
        let loads: Vec<_> = g.accesses.iter().filter(|a| a.1 == EvKind::Load).collect();
        assert_eq!(loads.len(), 2);
        assert!(
            loads
                .iter()
                .all(|a| a.3 == 4 && a.4.len() == 32 && a.4.iter().all(|l| l.2)),
            "never-written words are uninit"
        );
        let stores: Vec<_> = g
            .accesses
            .iter()
            .filter(|a| a.0 == EvSpace::Global && a.1 == EvKind::Store)
            .collect();
        assert_eq!(stores.len(), 2);
        let w0 = stores.iter().find(|a| a.2 == 0).expect("warp 0 store");
        assert_eq!(w0.4[0].0, out);
        assert_eq!(w0.4[31].0, out + 124);
    }
}

#[test]
fn warp_spinning_on_shared_flag_set_by_another_warp_terminates() {
    // warp 0 spins until warp 1 sets a volatile shared flag
    let m = module(
        "setp.ge.u32 %p1, %r1, 32;\n@%p1 bra PRODUCER;\n\
         SPIN:\nld.volatile.shared.u32 %r2, [flag];\nsetp.eq.s32 %p2, %r2, 0;\n@%p2 bra SPIN;\n\
         st.global.u32 [%rd3], %r2;\nbra DONE;\n\
         PRODUCER:\nmov.u32 %r3, 7;\nst.volatile.shared.u32 [flag], %r3;\nst.global.u32 [%rd3], %r3;\nDONE:",
        ".shared .align 4 .u32 flag;",
    );
    let got = run(&m, 64, 64).unwrap();
    assert!(got.iter().all(|v| *v == 7), "{got:?}");
}

#[test]
fn spin_lock_between_lanes_of_one_warp_makes_progress() {
    // every lane takes a global spin lock (atom.cas), increments a counter, releases it
    let m = module(
        "add.s64 %rd4, %rd1, 128;\n\
         LOCK:\natom.global.cas.b32 %r2, [%rd4], 0, 1;\nsetp.ne.s32 %p1, %r2, 0;\n@%p1 bra LOCK;\n\
         ld.volatile.global.u32 %r3, [%rd1];\nadd.s32 %r3, %r3, 1;\nst.volatile.global.u32 [%rd1], %r3;\n\
         atom.global.exch.b32 %r4, [%rd4], 0;",
        "",
    );
    let got = run(&m, 32, 33).unwrap();
    assert_eq!(got[0], 32);
    assert_eq!(got[32], 0);
}

#[test]
fn public_types_are_thread_safe() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<crate::Module>();
    send_sync::<crate::SimError>();
    send_sync::<crate::LaunchStats>();
    send::<crate::Device>();
}
