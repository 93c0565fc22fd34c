//! Cooperative launches: every block runs at once, so blocks may wait for each other. A
//! grid-wide barrier (an arrival counter and a spin on it) completes there; the same kernel
//! launched normally on one worker never does (the first block spins on blocks that cannot
//! start). A block that faults makes the waiting blocks give up instead of hanging.

use ptxsim::{Arg, Device, LaunchConfig, Module, Options, SimError, MAX_COOPERATIVE_BLOCKS};

/// Block b: thread 0 publishes vals[b] = b + 1 (a relaxed store), fences, arrives at the
/// counter and spins (with nanosleep) until every block has arrived, then sums vals[0..n) with
/// relaxed loads into out[b]. Threads other than 0 wait at the block barrier. `poison` != 0:
/// block 0 loads from that address before arriving (a fault).
const BARRIER_PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64
.visible .entry grid_sum(.param .u64 counter, .param .u64 vals, .param .u64 out, .param .u64 poison)
{
    .reg .pred %p<4>; .reg .b32 %r<12>; .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [counter];
    ld.param.u64 %rd2, [vals];
    ld.param.u64 %rd3, [out];
    ld.param.u64 %rd10, [poison];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %nctaid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra WAIT;
    setp.eq.u32 %p3, %r2, 0;
    setp.ne.u64 %p2, %rd10, 0;
    and.pred %p2, %p2, %p3;
    @!%p2 bra PUBLISH;
    ld.global.u32 %r11, [%rd10];
PUBLISH:
    mul.wide.u32 %rd4, %r2, 4;
    add.s64 %rd5, %rd2, %rd4;
    add.u32 %r4, %r2, 1;
    st.relaxed.gpu.global.u32 [%rd5], %r4;
    fence.acq_rel.gpu;
    atom.global.add.u32 %r5, [%rd1], 1;
SPIN:
    ld.acquire.gpu.global.u32 %r6, [%rd1];
    setp.lt.u32 %p2, %r6, %r3;
    @!%p2 bra SUM;
    nanosleep.u32 100;
    bra SPIN;
SUM:
    mov.u32 %r7, 0;
    mov.u32 %r8, 0;
    mov.u64 %rd6, %rd2;
LOOP:
    ld.relaxed.gpu.global.u32 %r9, [%rd6];
    add.u32 %r7, %r7, %r9;
    add.s64 %rd6, %rd6, 4;
    add.u32 %r8, %r8, 1;
    setp.lt.u32 %p2, %r8, %r3;
    @%p2 bra LOOP;
    add.s64 %rd7, %rd3, %rd4;
    st.global.u32 [%rd7], %r7;
WAIT:
    bar.sync 0;
    ret;
}
"#;

struct Run {
    dev: Device,
    module: Module,
    counter: u64,
    vals: u64,
    out: u64,
}

fn setup(blocks: u32, opts: Options) -> Run {
    let module = Module::parse(BARRIER_PTX).expect("the barrier PTX parses");
    let mut dev = Device::with_options(opts);
    let counter = dev.alloc(4).unwrap();
    dev.write_slice(counter, &[0u32]).unwrap();
    let vals = dev.alloc(4 * blocks as usize).unwrap();
    let out = dev.alloc(4 * blocks as usize).unwrap();
    Run {
        dev,
        module,
        counter,
        vals,
        out,
    }
}

fn cfg(blocks: u32) -> LaunchConfig {
    LaunchConfig {
        grid: [blocks, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
    }
}

fn args(r: &Run, poison: u64) -> Vec<Arg> {
    vec![
        Arg::Ptr(r.counter),
        Arg::Ptr(r.vals),
        Arg::Ptr(r.out),
        Arg::U64(poison),
    ]
}

#[test]
fn a_grid_barrier_completes_in_a_cooperative_launch() {
    for blocks in [1u32, 2, 7, 33] {
        let mut r = setup(blocks, Options::default());
        let a = args(&r, 0);
        let stats = r
            .dev
            .launch_cooperative(&r.module, "grid_sum", cfg(blocks), &a)
            .unwrap_or_else(|e| panic!("{blocks} blocks: {e}"));
        // racecheck and initcheck see nothing: the shares are strong accesses
        assert!(stats.reports.is_empty(), "{:?}", stats.reports);
        let want = blocks * (blocks + 1) / 2;
        let got = r.dev.read_slice::<u32>(r.out, blocks as usize).unwrap();
        assert_eq!(got, vec![want; blocks as usize], "{blocks} blocks");
        assert_eq!(r.dev.read_slice::<u32>(r.counter, 1).unwrap(), vec![blocks]);
    }
}

#[test]
fn the_same_barrier_never_completes_in_a_normal_launch() {
    let blocks = 4;
    let opts = Options {
        threads: 1,
        max_warp_steps: 200_000,
        ..Options::default()
    };
    let mut r = setup(blocks, opts);
    let a = args(&r, 0);
    match r.dev.launch(&r.module, "grid_sum", cfg(blocks), &a) {
        Err(SimError::StepLimit { .. }) => {}
        other => panic!("expected the step limit, got {other:?}"),
    }
}

#[test]
fn a_faulting_block_ends_the_launch_instead_of_hanging_it() {
    let blocks = 6;
    let mut r = setup(blocks, Options::default());
    // block 0 reads past the end of `vals` before it arrives: the others wait for it
    let a = args(&r, r.vals + 4096);
    let start = std::time::Instant::now();
    match r
        .dev
        .launch_cooperative(&r.module, "grid_sum", cfg(blocks), &a)
    {
        Err(SimError::Fault(f)) => assert_eq!(f.block, [0, 0, 0], "{f}"),
        other => panic!("expected block 0's fault, got {other:?}"),
    }
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
}

#[test]
fn cooperative_grids_are_bounded() {
    let blocks = MAX_COOPERATIVE_BLOCKS + 1;
    let mut r = setup(blocks, Options::default());
    let a = args(&r, 0);
    match r
        .dev
        .launch_cooperative(&r.module, "grid_sum", cfg(blocks), &a)
    {
        Err(SimError::InvalidArgument(m)) => assert!(m.contains("cooperative"), "{m}"),
        other => panic!("expected an invalid argument, got {other:?}"),
    }
}
