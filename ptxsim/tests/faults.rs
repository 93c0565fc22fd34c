//! Negative tests: kernels from `tests/cuda/faults.cu` that fault on purpose in one chosen block
//! and thread. Each must come back as `SimError::Fault` of the right `FaultKind`, naming the PTX
//! line of the faulting instruction (found by searching the generated PTX text), the block and
//! the thread. Also: a step-limit overrun is an error, not a hang.

mod common;

use common::{cfg1, device, expect_fault, lines_in_entry, parse, ptx_module, simple_entry};
use ptxsim::{Arg, Device, Fault, FaultKind, LaunchConfig, Module, Options, SimError};

/// Runs `f` with the faults module for every arch (skip without nvcc).
fn for_archs(f: impl Fn(&str, &str, &Module)) {
    common::cuda::for_archs("faults.cu", f);
}

/// The single line of `entry` with a CTA barrier (`bar.sync` or, in newer PTX, `barrier.sync`).
fn barrier_line(ptx: &str, entry: &str) -> usize {
    let mut v = lines_in_entry(ptx, entry, "bar.sync");
    v.extend(lines_in_entry(ptx, entry, "barrier.sync"));
    v.retain(|&l| !ptx.lines().nth(l - 1).unwrap_or("").contains("warp"));
    v.sort_unstable();
    v.dedup();
    assert_eq!(v.len(), 1, "barrier lines in {entry}: {v:?}");
    v[0]
}

/// The single line of `entry` containing `needle`.
fn one_line(ptx: &str, entry: &str, needle: &str) -> usize {
    let v = lines_in_entry(ptx, entry, needle);
    assert_eq!(v.len(), 1, "lines with {needle:?} in {entry}: {v:?}");
    v[0]
}

fn check(
    f: &Fault,
    kind: FaultKind,
    kernel: &str,
    line: usize,
    block: [u32; 3],
    thread: Option<[u32; 3]>,
    arch: &str,
) {
    let ctx = format!("{kernel} ({arch}): {f:?}");
    assert_eq!(f.kind, kind, "kind; {ctx}");
    assert_eq!(f.kernel, kernel, "kernel; {ctx}");
    assert_eq!(f.line, line, "PTX line; {ctx}");
    assert_eq!(f.block, block, "block; {ctx}");
    if let Some(t) = thread {
        assert_eq!(f.thread, t, "thread; {ctx}");
    }
    let shown = SimError::Fault(Box::new(f.clone())).to_string();
    assert!(
        shown.contains(kernel) && shown.contains(&line.to_string()),
        "Display should name kernel and line: {shown}"
    );
}

#[test]
fn out_of_bounds_global_write() {
    for_archs(|arch, ptx, m| {
        let n = 256usize;
        let mut dev = device();
        let p = dev.alloc(n * 4).unwrap();
        let r = dev.launch(
            m,
            "oob_write",
            cfg1(4, 64),
            &[Arg::Ptr(p), Arg::I32(n as i32), Arg::I32(2), Arg::I32(5)],
        );
        let f = expect_fault(r, "oob_write");
        check(
            &f,
            FaultKind::OutOfBounds,
            "oob_write",
            one_line(ptx, "oob_write", "st.global"),
            [2, 0, 0],
            Some([5, 0, 0]),
            arch,
        );
        assert_eq!(f.address, Some(p + (n as u64 + 3) * 4), "address ({arch})");
        assert_eq!(
            f.allocation,
            Some((p, n * 4)),
            "nearest allocation ({arch})"
        );
        let shown = f.to_string();
        for part in [
            "out-of-bounds global store of 4 bytes",
            "in kernel oob_write",
            "block (2,0,0) thread (5,0,0)",
            "12 bytes past allocation",
        ] {
            assert!(
                shown.contains(part),
                "message should contain {part:?}: {shown}"
            );
        }
    });
}

#[test]
fn out_of_bounds_inside_a_device_function() {
    for_archs(|arch, ptx, m| {
        let n = 32usize;
        let mut dev = device();
        let p = dev.alloc(n * 4).unwrap();
        let r = dev.launch(
            m,
            "oob_in_callee",
            cfg1(1, 32),
            &[Arg::Ptr(p), Arg::I32(n as i32), Arg::I32(17)],
        );
        let f = expect_fault(r, "oob_in_callee");
        let lines = common::lines_in_func(ptx, "store_at", "st.global");
        assert_eq!(
            lines.len(),
            1,
            "st.global lines in store_at: {lines:?} ({arch})"
        );
        check(
            &f,
            FaultKind::OutOfBounds,
            "oob_in_callee",
            lines[0],
            [0, 0, 0],
            Some([17, 0, 0]),
            arch,
        );
        assert_eq!(f.address, Some(p + (n as u64 + 1) * 4), "address ({arch})");
    });
}

#[test]
fn misaligned_global_load() {
    for_archs(|arch, ptx, m| {
        let mut dev = device();
        let p = dev.alloc_zeroed(64 * 4 + 16).unwrap();
        let out = dev.alloc_zeroed(128 * 4).unwrap();
        let r = dev.launch(
            m,
            "misaligned_load",
            cfg1(2, 64),
            &[Arg::Ptr(p), Arg::Ptr(out), Arg::I32(1), Arg::I32(9)],
        );
        let f = expect_fault(r, "misaligned_load");
        check(
            &f,
            FaultKind::Misaligned,
            "misaligned_load",
            one_line(ptx, "misaligned_load", "ld.global"),
            [1, 0, 0],
            Some([9, 0, 0]),
            arch,
        );
        assert_eq!(f.address, Some(p + 9 * 4 + 2), "address ({arch})");
    });
}

#[test]
fn use_after_free() {
    for_archs(|arch, ptx, m| {
        let mut dev = device();
        let keep = dev.alloc(256).unwrap();
        let p = dev.alloc(256).unwrap();
        dev.free(p).unwrap();
        let r = dev.launch(
            m,
            "write_one",
            cfg1(2, 32),
            &[Arg::Ptr(p), Arg::I32(1), Arg::I32(3)],
        );
        let f = expect_fault(r, "write_one");
        check(
            &f,
            FaultKind::UseAfterFree,
            "write_one",
            one_line(ptx, "write_one", "st.global"),
            [1, 0, 0],
            Some([3, 0, 0]),
            arch,
        );
        assert_eq!(f.address, Some(p + 12), "address ({arch})");
        // The live allocation is untouched and still usable.
        dev.launch(
            m,
            "write_one",
            cfg1(2, 32),
            &[Arg::Ptr(keep), Arg::I32(1), Arg::I32(3)],
        )
        .expect("write to a live allocation");
        assert_eq!(dev.read_slice::<i32>(keep + 12, 1).unwrap(), vec![42]);
    });
}

#[test]
fn shfl_mask_names_a_lane_that_never_arrives() {
    for_archs(|arch, ptx, m| {
        let mut dev = device();
        let out = dev.alloc_zeroed(64 * 4).unwrap();
        let r = dev.launch(
            m,
            "shfl_missing_lane",
            cfg1(2, 32),
            &[Arg::Ptr(out), Arg::I32(1)],
        );
        let f = expect_fault(r, "shfl_missing_lane");
        // Which lane is named (the one executing or the missing lane 31) is the simulator's choice.
        check(
            &f,
            FaultKind::ShflMaskLane,
            "shfl_missing_lane",
            one_line(ptx, "shfl_missing_lane", "shfl.sync"),
            [1, 0, 0],
            None,
            arch,
        );
        assert!(
            f.thread[0] < 32 && f.thread[1..] == [0, 0],
            "thread in warp 0 ({arch}): {f:?}"
        );
    });
}

#[test]
fn barrier_in_divergent_code() {
    for_archs(|arch, ptx, m| {
        let mut dev = device();
        let out = dev.alloc_zeroed(64 * 4).unwrap();
        let r = dev.launch(m, "divergent_barrier", cfg1(1, 64), &[Arg::Ptr(out)]);
        let f = expect_fault(r, "divergent_barrier");
        check(
            &f,
            FaultKind::BarrierDivergence,
            "divergent_barrier",
            barrier_line(ptx, "divergent_barrier"),
            [0, 0, 0],
            None,
            arch,
        );
        assert!(f.thread[0] < 64, "{f:?}");
    });
}

#[test]
fn deadlock_warp_sync_against_block_barrier() {
    for_archs(|arch, ptx, m| {
        let mut dev = device();
        let out = dev.alloc_zeroed(32 * 4).unwrap();
        let r = dev.launch(m, "deadlock", cfg1(1, 32), &[Arg::Ptr(out)]);
        let f = expect_fault(r, "deadlock");
        let lines = [
            one_line(ptx, "deadlock", "bar.warp.sync"),
            barrier_line(ptx, "deadlock"),
        ];
        assert_eq!(f.kind, FaultKind::Deadlock, "kind ({arch}): {f:?}");
        assert!(
            lines.contains(&f.line),
            "line {} should be one of the waits {lines:?} ({arch})",
            f.line
        );
        assert_eq!(f.block, [0, 0, 0], "{f:?}");
        assert!(f.thread[0] < 32, "{f:?}");
    });
}

#[test]
fn named_barriers_waiting_on_each_other() {
    // Both warps wait forever at different named barriers. The simulator may call this a
    // deadlock or a barrier that part of the block never reaches; either way it must be a fault
    // at one of the two barriers, not a hang or success.
    for_archs(|arch, ptx, m| {
        let mut dev = device();
        let out = dev.alloc_zeroed(64 * 4).unwrap();
        let r = dev.launch(m, "named_barrier_mismatch", cfg1(1, 64), &[Arg::Ptr(out)]);
        let f = expect_fault(r, "named_barrier_mismatch");
        let lines = [
            one_line(ptx, "named_barrier_mismatch", "bar.sync 1, 64"),
            one_line(ptx, "named_barrier_mismatch", "bar.sync 2, 64"),
        ];
        assert!(
            matches!(f.kind, FaultKind::Deadlock | FaultKind::BarrierDivergence),
            "kind ({arch}): {f:?}"
        );
        assert!(
            lines.contains(&f.line),
            "line {} not in {lines:?} ({arch})",
            f.line
        );
    });
}

#[test]
fn syncwarp_at_two_program_points_is_not_a_fault() {
    for_archs(|arch, ptx, m| {
        let mut dev = device();
        let out = dev.alloc_zeroed(64 * 4).unwrap();
        if let Err(e) = dev.launch(m, "syncwarp_two_sites", cfg1(1, 32), &[Arg::Ptr(out)]) {
            panic!(
                "syncwarp_two_sites ({arch}): {e}\n{}",
                common::numbered(ptx, common::error_line(&e))
            );
        }
        let got = dev.read_slice::<i32>(out, 64).unwrap();
        let first: Vec<i32> = (0..32).map(|t| if t < 16 { t } else { 2 * t }).collect();
        let second: Vec<i32> = (0..32).map(|t| first[31 - t as usize]).collect();
        assert_eq!(&got[..32], &first[..], "{arch}");
        assert_eq!(&got[32..], &second[..], "{arch}");
    });
}

#[test]
fn shared_memory_out_of_bounds() {
    for_archs(|arch, ptx, m| {
        let mut dev = device();
        let out = dev.alloc_zeroed(32 * 4).unwrap();
        let c = LaunchConfig {
            shared_mem_bytes: 128,
            ..cfg1(1, 32)
        };
        let r = dev.launch(m, "shared_oob", c, &[Arg::Ptr(out), Arg::I32(4)]);
        let f = expect_fault(r, "shared_oob");
        check(
            &f,
            FaultKind::SharedOutOfBounds,
            "shared_oob",
            one_line(ptx, "shared_oob", "st.shared"),
            [0, 0, 0],
            Some([4, 0, 0]),
            arch,
        );
    });
}

#[test]
fn trap_instruction() {
    for_archs(|arch, ptx, m| {
        let mut dev = device();
        let out = dev.alloc_zeroed(32 * 4).unwrap();
        let r = dev.launch(m, "trap_kernel", cfg1(1, 32), &[Arg::Ptr(out), Arg::I32(6)]);
        let f = expect_fault(r, "trap_kernel");
        check(
            &f,
            FaultKind::Trap,
            "trap_kernel",
            one_line(ptx, "trap_kernel", "trap;"),
            [0, 0, 0],
            Some([6, 0, 0]),
            arch,
        );
    });
}

#[test]
fn infinite_loop_hits_the_step_limit() {
    let ptx = ptx_module(&simple_entry(
        "spin",
        1,
        "$Lspin:\nadd.s32 %r1, %r1, 1;\nbra $Lspin;",
    ));
    let m = parse(&ptx, "spin");
    let mut dev = Device::with_options(Options {
        max_warp_steps: 10_000,
        threads: 1,
        ..Options::default()
    });
    let out = dev.alloc_zeroed(4).unwrap();
    match dev.launch(&m, "spin", cfg1(1, 32), &[Arg::Ptr(out)]) {
        Err(SimError::StepLimit { kernel, .. }) => assert_eq!(kernel, "spin"),
        other => panic!("expected StepLimit, got {other:?}"),
    }
}

/// Hand-written PTX faults (these run without nvcc): builds a one-pointer kernel from `body`,
/// launches it on 2 blocks x 64 threads with a fresh 256-byte allocation and returns the fault
/// together with the PTX and the allocation's address.
fn hand_fault(body: &str) -> (Fault, String, u64) {
    let ptx = ptx_module(&simple_entry("hand", 1, body));
    let m = parse(&ptx, "hand fault");
    let mut dev = device();
    let _before = dev.alloc(256).unwrap();
    let p = dev.alloc_zeroed(256).unwrap();
    let _after = dev.alloc(256).unwrap();
    let f = expect_fault(
        dev.launch(&m, "hand", cfg1(2, 64), &[Arg::Ptr(p)]),
        "hand fault",
    );
    (f, ptx, p)
}

/// Only block 1, thread 37 runs `op`; everybody else exits first.
fn only_thread(op: &str) -> String {
    format!("setp.ne.u32 %p1, %bid, 1;\n@%p1 ret;\nsetp.ne.u32 %p2, %t, 37;\n@%p2 ret;\n{op}")
}

#[test]
fn hand_out_of_bounds_read_past_the_end() {
    let (f, ptx, p) = hand_fault(&only_thread(
        "ld.global.u32 %r1, [%a0+256];\nst.global.u32 [%a0], %r1;",
    ));
    check(
        &f,
        FaultKind::OutOfBounds,
        "hand",
        one_line(&ptx, "hand", "ld.global.u32"),
        [1, 0, 0],
        Some([37, 0, 0]),
        "hand",
    );
    assert_eq!(f.address, Some(p + 256));
    assert_eq!(f.allocation, Some((p, 256)));
}

#[test]
fn hand_out_of_bounds_before_the_start() {
    let (f, ptx, p) = hand_fault(&only_thread(
        "mov.u32 %r1, 7;\nst.global.u32 [%a0+-4], %r1;",
    ));
    check(
        &f,
        FaultKind::OutOfBounds,
        "hand",
        one_line(&ptx, "hand", "st.global.u32"),
        [1, 0, 0],
        Some([37, 0, 0]),
        "hand",
    );
    assert_eq!(f.address, Some(p - 4));
}

#[test]
fn hand_vector_access_misaligned_for_its_width() {
    // 8-byte aligned but a v4.u32 access needs 16.
    let (f, ptx, p) = hand_fault(&only_thread(
        "ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%a0+8];\nst.global.u32 [%a0], %r1;",
    ));
    check(
        &f,
        FaultKind::Misaligned,
        "hand",
        one_line(&ptx, "hand", "ld.global.v4.u32"),
        [1, 0, 0],
        Some([37, 0, 0]),
        "hand",
    );
    assert_eq!(f.address, Some(p + 8));
}

#[test]
fn hand_local_out_of_bounds() {
    let body = format!(
        ".local .align 4 .b8 frame[16];\n{}",
        only_thread("mov.u64 %rd1, frame;\nmov.u32 %r1, 1;\nst.local.u32 [%rd1+16], %r1;")
    );
    let (f, ptx, _) = hand_fault(&body);
    check(
        &f,
        FaultKind::LocalOutOfBounds,
        "hand",
        one_line(&ptx, "hand", "st.local.u32"),
        [1, 0, 0],
        Some([37, 0, 0]),
        "hand",
    );
    // The kind names the space; the message does not repeat it.
    assert_eq!(f.message, "store of 4 bytes at offset 0x10 (size 16 bytes)");
    let shown = f.to_string();
    assert!(
        shown.starts_with(
            "out-of-bounds local store of 4 bytes at offset 0x10 (size 16 bytes) in kernel hand"
        ),
        "{shown}"
    );
    assert_eq!(shown.matches("local").count(), 1, "{shown}");
}

#[test]
fn hand_kernel_parameter_write() {
    let (f, ptx, _) = hand_fault(&only_thread(
        "mov.u64 %rd1, 7;\nst.param.u64 [hand_p0], %rd1;",
    ));
    check(
        &f,
        FaultKind::ParamOutOfBounds,
        "hand",
        one_line(&ptx, "hand", "st.param.u64"),
        [1, 0, 0],
        Some([37, 0, 0]),
        "hand",
    );
    let shown = f.to_string();
    assert!(
        shown.starts_with(
            "out-of-bounds parameter store of 8 bytes at offset 0x0 (kernel parameters are read-only) in kernel hand"
        ),
        "{shown}"
    );
}

#[test]
fn hand_shared_out_of_bounds_static() {
    let body = format!(
        ".shared .align 4 .b8 sbuf[128];\n{}",
        only_thread("mov.u32 %r1, sbuf;\nmov.u32 %r2, 1;\nst.shared.u32 [%r1+128], %r2;")
    );
    let (f, ptx, _) = hand_fault(&body);
    check(
        &f,
        FaultKind::SharedOutOfBounds,
        "hand",
        one_line(&ptx, "hand", "st.shared.u32"),
        [1, 0, 0],
        Some([37, 0, 0]),
        "hand",
    );
    // The kind names the space; the message does not repeat it.
    assert_eq!(
        f.message,
        "store of 4 bytes at offset 0x80 (size 128 bytes)"
    );
    let shown = f.to_string();
    assert!(
        shown.starts_with(
            "out-of-bounds shared store of 4 bytes at offset 0x80 (size 128 bytes) in kernel hand"
        ),
        "{shown}"
    );
    assert_eq!(shown.matches("shared").count(), 1, "{shown}");
}

#[test]
fn hand_executing_lane_not_in_its_own_mask() {
    // Block 1's warp 1 (threads 32..63) executes a shuffle whose mask names only lanes 0-15.
    let (f, ptx, _) = hand_fault(
        "setp.ne.u32 %p1, %bid, 1;\n@%p1 ret;\nsetp.lt.u32 %p2, %t, 32;\n@%p2 ret;\n\
         shfl.sync.idx.b32 %r1, %t, 0, 31, 0xffff;\nst.global.u32 [%a0], %r1;",
    );
    check(
        &f,
        FaultKind::ShflMaskLane,
        "hand",
        one_line(&ptx, "hand", "shfl.sync"),
        [1, 0, 0],
        None,
        "hand",
    );
    assert!((32..64).contains(&f.thread[0]), "{f:?}");
}

#[test]
fn hand_vote_mask_names_exited_lanes() {
    let (f, ptx, _) = hand_fault(
        "setp.ne.u32 %p1, %bid, 1;\n@%p1 ret;\nand.b32 %r2, %t, 31;\nsetp.ge.u32 %p2, %r2, 16;\n@%p2 ret;\n\
         setp.ne.u32 %p3, %r2, 3;\nvote.sync.ballot.b32 %r1, %p3, -1;\nst.global.u32 [%a0], %r1;",
    );
    check(
        &f,
        FaultKind::ShflMaskLane,
        "hand",
        one_line(&ptx, "hand", "vote.sync"),
        [1, 0, 0],
        None,
        "hand",
    );
}

#[test]
fn fault_report_is_deterministic_across_worker_threads() {
    // Every thread of blocks 3..16 writes out of bounds: whatever the worker count, the same
    // (first) block and thread must be reported, every time.
    let body = "setp.lt.u32 %p1, %bid, 3;\n@%p1 ret;\nmul.wide.u32 %rd1, %g, 4;\nadd.s64 %rd2, %a0, %rd1;\n\
                mov.u32 %r1, 1;\nst.global.u32 [%rd2+4096], %r1;";
    let ptx = ptx_module(&simple_entry("many", 1, body));
    let m = parse(&ptx, "many");
    let mut seen = std::collections::BTreeSet::new();
    for threads in [1, 2, 4, 8] {
        for _ in 0..5 {
            let mut dev = Device::with_options(Options {
                threads,
                ..Options::default()
            });
            let p = dev.alloc_zeroed(64 * 16 * 4).unwrap();
            let f = expect_fault(dev.launch(&m, "many", cfg1(16, 64), &[Arg::Ptr(p)]), "many");
            assert_eq!(f.kind, FaultKind::OutOfBounds);
            seen.insert((f.block, f.thread, f.line));
        }
    }
    assert_eq!(seen.len(), 1, "different reports: {seen:?}");
    let (block, _, _) = seen.into_iter().next().unwrap();
    assert!(block[0] >= 3, "a faulting block is reported: {block:?}");
}
