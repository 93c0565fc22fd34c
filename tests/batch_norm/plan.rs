//! Pure planner tests (no GPU, no simulator): tiers, variants, grids for H200 and SIM, the
//! workspace, empty batches, and every rejected input with its error variant.

use warpnorm::abi::{
    WnBatchNormApplyArgs, WnBatchNormCoopBwdArgs, WnBatchNormCoopFwdArgs, WnBatchNormFinalizeArgs,
    WnBatchNormFusedFwdArgs, WnBatchNormStatsArgs, WnBatchNormSumsArgs, WN_BN_CHANNEL_MAJOR,
    WN_BN_FOLD, WN_BN_FROZEN, WN_BN_ODD_APPLY_PACKS, WN_BN_PARAMS_F32,
};
use warpnorm::batch_norm::{
    plan_backward, plan_forward, workspace_bytes, BackwardPtrs, BatchNormDesc, Direction,
    ForwardPtrs, Layout, Mode, Momentum,
};
use warpnorm::cpu::batch_norm as cpu;
use warpnorm::{kernels, occupancy, DType, DeviceProps, Error, Plan};

const A: u64 = 0x7000_0000_0000; // 256-byte aligned base addresses
/// Distance between two buffers: 64 GiB, more than any tensor planned here.
const G: u64 = 0x10_0000_0000;

fn fwd_ptrs() -> ForwardPtrs {
    ForwardPtrs {
        x: A,
        y: A + G,
        gamma: Some(A + 3 * G),
        beta: Some(A + 4 * G),
        running_mean: Some(A + 5 * G),
        running_var: Some(A + 6 * G),
        num_batches_tracked: Some(A + 7 * G),
        save_mean: Some(A + 8 * G),
        save_mean_lo: Some(A - G),
        save_invstd: Some(A + 9 * G),
        workspace: A + 12 * G,
        workspace_bytes: 1 << 44,
    }
}

fn bwd_ptrs() -> BackwardPtrs {
    BackwardPtrs {
        x: A,
        dy: A + G,
        dx: A + 2 * G,
        gamma: Some(A + 3 * G),
        save_mean: A + 8 * G,
        save_mean_lo: Some(A - G),
        save_invstd: A + 9 * G,
        dgamma: Some(A + 10 * G),
        dbeta: Some(A + 11 * G),
        workspace: A + 12 * G,
        workspace_bytes: 1 << 44,
    }
}

fn desc(dims: &[usize], layout: Layout, dt: DType) -> BatchNormDesc {
    BatchNormDesc::new(dims, layout, dt, DType::F32)
}

fn names(p: &Plan) -> Vec<&str> {
    p.launches.iter().map(|l| l.kernel.as_str()).collect()
}

/// `props` without cooperative launches: the planner's split tiers (a reduction, then an
/// elementwise pass) where `props` would take the cooperative passes.
fn split(props: DeviceProps) -> DeviceProps {
    DeviceProps {
        cooperative_launch: false,
        ..props
    }
}

fn train() -> Mode {
    Mode::train(0.1)
}

/// Resident blocks per SM of `kernel` at `threads` threads by the build's ptxas figures for the
/// device's SASS, `None` when the build has none (built without nvcc).
fn resident_per_sm(kernel: &str, threads: u32, props: &DeviceProps) -> Option<u32> {
    occupancy::kernel_resources(kernel, props)
        .map(|res| occupancy::resident_blocks(Some(res), threads, 0, props))
}

/// Every planned kernel exists in the build and the plan fits the device.
fn sane(p: &Plan, props: &DeviceProps) {
    p.check(props).expect("plan within device limits");
    if kernels::BUILT {
        for l in &p.launches {
            assert!(
                kernels::all_entries().any(|k| k == l.kernel),
                "{} not built",
                l.kernel
            );
        }
    }
}

/// Training passes with vector access take one cooperative launch where the device has them:
/// the reduction's items (channels or channel tiles x splits, at most one wave of the kernel's
/// resident blocks) and the elementwise pass, the barrier's counter at the workspace's start,
/// the partials not folded (NCHW channel-major, channels-last split-major); block 0 bumps the
/// counter with a momentum factor (a bump launch follows with cumulative momentum). Odd
/// spatial sizes, misaligned views and channel counts without vector access, and devices
/// without cooperative launches, take the split tiers.
#[test]
fn cooperative_passes_plan() {
    use Layout::{ChannelsLast as Nhwc, Contiguous as Nchw};
    let gpu: &[(&[usize], Layout, DType)] = &[
        (&[32, 64, 56, 56], Nchw, DType::BF16),
        (&[32, 256, 28, 28], Nchw, DType::F16),
        (&[64, 3, 224, 224], Nchw, DType::F32),
        (&[256, 1024, 16, 16], Nchw, DType::BF16),
        (&[32, 64, 56, 56], Nhwc, DType::BF16),
        (&[128, 256, 14, 14], Nhwc, DType::F16),
        (&[32, 1024, 14, 14], Nhwc, DType::F32),
        (&[1048576, 8], Nchw, DType::BF16),
        (&[4096, 4096], Nchw, DType::BF16),
    ];
    // (SIM's 4 SMs fuse 8 or more channels; channels-last tiles of 8 vectors or fewer.)
    let sim: &[(&[usize], Layout, DType)] = &[
        (&[9, 2, 4, 256], Nchw, DType::F16),
        (&[64, 3, 32, 32], Nchw, DType::F32),
        (&[64, 8, 32, 32], Nhwc, DType::F32),
        (&[4096, 16], Nchw, DType::BF16),
    ];
    for (props, shapes) in [
        (DeviceProps::H200, gpu),
        (DeviceProps::H100, gpu),
        (DeviceProps::SIM, sim),
    ] {
        for &(dims, layout, dt) in shapes {
            let d = desc(dims, layout, dt);
            let nhwc = layout == Nhwc || dims.len() == 2;
            let lay = if nhwc { "nhwc" } else { "nchw" };
            let ctx = format!("{dims:?} {layout:?} {dt} on {} SMs", props.sm_count);
            let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
            sane(&p, &props);
            assert_eq!(
                names(&p),
                [format!("warpnorm_batch_norm_fwd_{dt}_coop_{lay}_vec")],
                "{ctx}"
            );
            let l = &p.launches[0];
            assert!(l.cooperative, "{ctx}");
            let a: WnBatchNormCoopFwdArgs = l.args.get().unwrap();
            let (r, f) = (a.s.r, a.s.f);
            assert_eq!(
                (a.out, a.barrier),
                (fwd_ptrs().y, fwd_ptrs().workspace),
                "{ctx}"
            );
            let c = dims[1] as u64;
            let spatial: usize = dims[2..].iter().product();
            let v = (16 / dt.size()) as u64;
            // NCHW: one channel per block, units are packs; channels-last: tiles of bx
            // vectors of channels (bx a power of two, at most 32), units are rows.
            let (tiles, units) = if nhwc {
                let bx = (c / v).next_power_of_two().min(32);
                assert_eq!(l.block[0] as u64, bx, "{ctx}");
                ((c / v).div_ceil(bx), (dims[0] * spatial) as i64)
            } else {
                assert_eq!(l.block[0], 1, "{ctx}");
                (c, (dims[0] * spatial) as i64 / v as i64)
            };
            let threads = l.block[0] * l.block[1];
            let wave = props.sm_count as u64
                * resident_per_sm(&l.kernel, threads, &props).unwrap_or(1) as u64;
            let items = tiles * f.splits as u64;
            assert_eq!(l.grid, [items.min(wave) as u32, 1, 1], "{ctx}");
            // Fewer tiles than a wave: whole splits per tile within it (one item per block);
            // else at most 8 splits, the blocks striding over the items.
            if tiles < wave {
                assert!(items <= wave, "{ctx}: {items} items of {wave}");
            } else {
                assert!((1..=8).contains(&f.splits), "{ctx}: {} splits", f.splits);
            }
            assert!(
                r.chunk * (f.splits - 1) < units && r.chunk * f.splits >= units,
                "{ctx}"
            );
            let major = if nhwc { 0 } else { WN_BN_CHANNEL_MAJOR };
            assert_eq!(f.flags & (WN_BN_FOLD | WN_BN_CHANNEL_MAJOR), major, "{ctx}");
            assert_eq!(
                f.counter_bump,
                fwd_ptrs().num_batches_tracked.unwrap(),
                "{ctx}"
            );
            // The workspace holds the barriers' counters (two u32 per barrier, two barriers
            // channels-last) before the coefficients, and every partial.
            let barriers = if nhwc { 2 } else { 1 };
            assert!(f.coef >= a.barrier + 8 * barriers, "{ctx}");
            let ws = workspace_bytes(&d, Direction::Forward, &props).unwrap() as u64;
            let end = f.partials + 16 * f.splits as u64 * c;
            assert!(end <= fwd_ptrs().workspace + ws, "{ctx}: workspace {ws}");
            // Cumulative momentum: every block reads the counter; a bump launch follows.
            let cum = Mode {
                batch_stats: true,
                momentum: Momentum::Cumulative,
            };
            let p = plan_forward(&d.clone().with_mode(cum), &fwd_ptrs(), &props).unwrap();
            assert_eq!(p.launches.len(), 2, "{ctx}");
            let a: WnBatchNormCoopFwdArgs = p.launches[0].args.get().unwrap();
            assert_eq!(a.s.f.counter_bump, 0, "{ctx}");
            let b: WnBatchNormFinalizeArgs = p.launches[1].args.get().unwrap();
            assert_eq!(b.counter_bump, fwd_ptrs().num_batches_tracked.unwrap());
            // Backward: one launch writing dx.
            let p = plan_backward(&d, &bwd_ptrs(), &props).unwrap();
            sane(&p, &props);
            assert_eq!(
                names(&p),
                [format!("warpnorm_batch_norm_bwd_{dt}_coop_{lay}_vec")],
                "{ctx}"
            );
            assert!(p.launches[0].cooperative);
            let a: WnBatchNormCoopBwdArgs = p.launches[0].args.get().unwrap();
            assert_eq!(
                (a.out, a.barrier),
                (bwd_ptrs().dx, bwd_ptrs().workspace),
                "{ctx}"
            );
            assert_eq!(
                a.s.f.flags & (WN_BN_FOLD | WN_BN_CHANNEL_MAJOR),
                major,
                "{ctx}"
            );
            let ws = workspace_bytes(&d, Direction::Backward, &props).unwrap() as u64;
            let end = a.s.f.partials + 8 * a.s.f.splits as u64 * c;
            assert!(end <= bwd_ptrs().workspace + ws, "{ctx}: workspace {ws}");
            // Without cooperative launches: the split tiers.
            let p =
                plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &split(props)).unwrap();
            assert!(p.launches.iter().all(|l| !l.cooperative), "{ctx}");
            assert_eq!(
                p.launches[0].kernel,
                format!("warpnorm_batch_norm_fwd_{dt}_stats_{lay}_vec")
            );
        }
    }
    // Odd spatial sizes (vecodd), misaligned views and channels-last channel counts that
    // vectors do not divide: never cooperative.
    let props = DeviceProps::H200;
    let mis = ForwardPtrs {
        x: A + 2,
        ..fwd_ptrs()
    };
    for (dims, layout, ptrs) in [
        (vec![32usize, 250, 28, 28], Nhwc, fwd_ptrs()),
        (vec![32, 256, 7, 7], Nchw, fwd_ptrs()),
        (vec![32, 256, 28, 28], Nchw, mis),
        (vec![32, 256, 28, 28], Nhwc, mis),
    ] {
        let d = desc(&dims, layout, DType::BF16).with_mode(train());
        let p = plan_forward(&d, &ptrs, &props).unwrap();
        assert!(
            p.launches.iter().all(|l| !l.cooperative),
            "{dims:?} {layout:?}: {p}"
        );
    }
}

#[test]
fn h200_batchnorm1d_few_channels_large_batch_is_split_across_the_gpu() {
    // (The split tiers: with cooperative launches, the cooperative pass.)
    let props = split(DeviceProps::H200);
    let d = desc(&[65536 * 16, 8], Layout::Contiguous, DType::F32);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        [
            "warpnorm_batch_norm_fwd_f32_stats_nhwc_vec",
            "warpnorm_batch_norm_fwd_f32params_finalize",
            "warpnorm_batch_norm_fwd_f32_apply_nhwc_vec"
        ]
    );
    let s = &p.launches[0];
    // 8 channels = 2 vectors of 4: block (2, 128); one wave of the kernel's resident
    // 256-thread blocks on 132 SMs: 4 per SM at the 60 registers ptxas gives it on sm_90
    // (a build with nvcc), 8 (2048 threads) when the build has no figures.
    assert_eq!(s.block, [2, 128, 1]);
    let (splits, chunk) = match resident_per_sm(&s.kernel, 256, &props) {
        // chunk = ceil(2^20 / 528) = 1986 rows; the last split is shorter.
        Some(4) => (528, 1986),
        // chunk = ceil(2^20 / 1056) = 993 rows.
        None => (1056, 993),
        Some(r) => panic!("{}: {r} resident blocks per SM, expected 4", s.kernel),
    };
    assert_eq!(s.grid, [1, splits, 1]);
    let a: WnBatchNormStatsArgs = s.args.get().unwrap();
    assert_eq!(a.r.chunk, chunk);
    // Hundreds of splits over 128 rows of threads: a last block would load the partials in 5
    // or more dependent rounds (more than FOLD_MAX_ROUNDS), so the finalize kernel follows.
    assert_eq!(a.f.flags & WN_BN_FOLD, 0);
    // Finalize: one block of 8 channels x 16 rows of splits.
    assert_eq!(p.launches[1].grid, [1, 1, 1]);
    assert_eq!(p.launches[1].block, [8, 16, 1]);
    let f: WnBatchNormFinalizeArgs = p.launches[1].args.get().unwrap();
    assert_eq!(f.splits, splits as i64);
    assert_eq!(f.count, 65536 * 16);
}

#[test]
fn h200_resnet_shapes_nchw_and_nhwc() {
    // (NCHW takes the cooperative pass where the device has cooperative launches: see
    // cooperative_passes_plan.)
    let props = split(DeviceProps::H200);
    let d = desc(&[32, 256, 56, 56], Layout::Contiguous, DType::F32);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        p.launches[0].kernel,
        "warpnorm_batch_norm_fwd_f32_stats_nchw_vec"
    );
    assert_eq!(p.launches[0].block, [1, 256, 1]);
    // 256 channels, splits filling one wave of resident blocks: 132 SMs x 4 (63 registers on
    // sm_90) = 528 -> 2 splits per channel; 132 x 8 = 1056 -> 4 without the build's figures.
    let splits = match resident_per_sm(&p.launches[0].kernel, 256, &props) {
        Some(4) => 2,
        None => 4,
        Some(r) => panic!("{r} resident blocks per SM, expected 4"),
    };
    assert_eq!(p.launches[0].grid, [256, splits, 1]);
    let d = desc(&[32, 256, 56, 56], Layout::ChannelsLast, DType::F16);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        p.launches[0].kernel,
        "warpnorm_batch_norm_fwd_f16_stats_nhwc_vec"
    );
    // 256 f16 channels = 32 vectors of 8: block (32, 8), one channel tile.
    assert_eq!(p.launches[0].block, [32, 8, 1]);
    // 100352 rows of 2-byte values in splits filling one wave of resident blocks (132 SMs x
    // 2 blocks of 256 threads from the build's sm_90 figures: 264; x 8 without them), at most
    // one split per 256 of the channel's 200704 bytes (the 16-byte partials within 1/16 of
    // them: 784), at least 4 rows per thread (3136): 264 splits of 381 rows (a whole wave;
    // the rule of one split per 1200 bytes gave 167, 0.63 waves), or 784 of 128.
    let (splits, chunk) = match resident_per_sm(&p.launches[0].kernel, 256, &props) {
        Some(2) => (264, 381),
        None => (784, 128),
        Some(r) => panic!("{r} resident blocks per SM, expected 2"),
    };
    assert_eq!(p.launches[0].grid, [1, splits, 1]);
    let r = p.launches[0].args.get::<WnBatchNormStatsArgs>().unwrap().r;
    assert_eq!(r.chunk, chunk);
    let b = plan_backward(&d, &bwd_ptrs(), &props).unwrap();
    sane(&b, &props);
    assert_eq!(
        names(&b),
        [
            "warpnorm_batch_norm_bwd_f16_reduce_nhwc_vec",
            "warpnorm_batch_norm_bwd_f32params_finalize",
            "warpnorm_batch_norm_bwd_f16_apply_nhwc_vec"
        ]
    );
}

/// The channels-last reductions of ResNet's [256, 256, 14, 14] (issue 13: 0.31 waves in bf16
/// when the partials were capped at 1.33% of the activation bytes) fill one wave of resident
/// blocks, no more, on an H100 and an H200, forward statistics and backward sums, every dtype:
/// the partials' cap (1/16 of the bytes) is above a wave there.
#[test]
fn channels_last_reductions_fill_one_wave() {
    // (The split tiers; the cooperative passes' grids: cooperative_passes_plan.)
    for props in [split(DeviceProps::H100), split(DeviceProps::H200)] {
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let d = desc(&[256, 256, 14, 14], Layout::ChannelsLast, dt);
            let f = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
            let b = plan_backward(&d, &bwd_ptrs(), &props).unwrap();
            for l in [&f.launches[0], &b.launches[0]] {
                assert!(l.kernel.ends_with("_nhwc_vec"), "{}", l.kernel);
                let threads = l.block[0] * l.block[1];
                let Some(r) = resident_per_sm(&l.kernel, threads, &props) else {
                    // Only a build without kernels lacks the ptxas figures.
                    if kernels::BUILT {
                        panic!("{}: no ptxas figures", l.kernel);
                    }
                    continue;
                };
                let wave = props.sm_count as f64 * r as f64;
                let blocks = (l.grid[0] * l.grid[1]) as f64;
                assert!(
                    blocks <= wave && blocks >= 0.99 * wave,
                    "{} {dt} on {} SMs: {blocks} blocks, {wave} resident",
                    l.kernel,
                    props.sm_count
                );
            }
        }
    }
}

/// With a wave or more of channels, the splits end the grid near whole waves: 512 channels of
/// the eval-mode sums (bf16, 784-element slices) in 1 split took 2 waves for 1.29 waves of
/// work at 3 resident blocks per SM (64% of the roofline in the model).
#[test]
fn many_channel_reductions_end_near_whole_waves() {
    let props = DeviceProps::H200;
    let d = desc(&[128, 512, 28, 28], Layout::Contiguous, DType::BF16).with_mode(Mode::eval());
    let p = plan_backward(&d, &bwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    let l = &p.launches[0];
    assert_eq!(
        l.kernel,
        "warpnorm_batch_norm_bwd_bf16_f32params_eval_reduce_nchw_vec"
    );
    // Waves of work in the grid, and the time of its whole waves per split: the chosen split
    // count's against 1 split's.
    let Some(r) = resident_per_sm(&l.kernel, l.block[0] * l.block[1], &props) else {
        // Only a build without kernels lacks the ptxas figures.
        if kernels::BUILT {
            panic!("{}: no ptxas figures", l.kernel);
        }
        return;
    };
    let wave = props.sm_count * r;
    let (tiles, splits) = (l.grid[0], l.grid[1]);
    assert_eq!(tiles, 512);
    let time = |s: u32| (tiles * s).div_ceil(wave) as f64 / s as f64;
    let expect = match r {
        // 396 resident: 3 splits, 1536 blocks = 3.88 waves in 4 (1.33 per split, not 2).
        3 => 3,
        // 528 resident: one wave.
        4 => 1,
        _ => splits,
    };
    assert_eq!(splits, expect, "{r} resident blocks per SM");
    assert!(time(splits) <= time(1));
    assert!((1..=8).all(|s| time(splits) <= time(s)));
}

#[test]
fn variants_follow_divisibility_and_alignment() {
    let props = DeviceProps::H200;
    // Odd spatial size (S >= V): 16-byte vecodd nchw kernels, no fused tier.
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for dims in [[4usize, 3, 7, 7], [4, 3, 14, 14], [2, 64, 13, 13]] {
            if dims[2] * dims[3] * dt.size() % 16 == 0 {
                continue; // 14 x 14 f32: divisible, vec
            }
            // (The reductions finalize in their last blocks: no finalize launch between.)
            let d = desc(&dims, Layout::Contiguous, dt);
            let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
            assert_eq!(
                names(&p),
                [
                    format!("warpnorm_batch_norm_fwd_{dt}_stats_nchw_vecodd"),
                    format!("warpnorm_batch_norm_fwd_{dt}_apply_nchw_vecodd"),
                ],
                "{dims:?} {dt}"
            );
            let p = plan_backward(&d, &bwd_ptrs(), &props).unwrap();
            assert_eq!(
                names(&p),
                [
                    format!("warpnorm_batch_norm_bwd_{dt}_reduce_nchw_vecodd"),
                    format!("warpnorm_batch_norm_bwd_{dt}_apply_nchw_vecodd"),
                ],
                "{dims:?} {dt}"
            );
        }
    }
    // Odd spatial size below the vector width (3 x 3 halves), or misaligned views: scalar.
    let d = desc(&[4, 3, 2, 2], Layout::Contiguous, DType::BF16);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    assert_eq!(
        p.launches[0].kernel,
        "warpnorm_batch_norm_fwd_bf16_stats_nchw_scalar"
    );
    let d = desc(&[4, 3, 7, 7], Layout::Contiguous, DType::F32);
    let mut ptrs = fwd_ptrs();
    ptrs.x += 8;
    let p = plan_forward(&d.clone().with_mode(train()), &ptrs, &props).unwrap();
    assert_eq!(
        p.launches[0].kernel,
        "warpnorm_batch_norm_fwd_f32_stats_nchw_scalar"
    );
    // Channel count not a multiple of 8 halves: scalar nhwc.
    let d = desc(&[4, 12, 8, 8], Layout::ChannelsLast, DType::BF16);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    assert_eq!(
        p.launches[0].kernel,
        "warpnorm_batch_norm_fwd_bf16_stats_nhwc_scalar"
    );
    // Misaligned view of y only: statistics stay vectorized, the elementwise pass does not.
    let d = desc(&[4, 16, 8, 8], Layout::Contiguous, DType::F16);
    let mut ptrs = fwd_ptrs();
    ptrs.y += 2;
    let p = plan_forward(&d.clone().with_mode(train()), &ptrs, &props).unwrap();
    assert_eq!(
        p.launches[0].kernel,
        "warpnorm_batch_norm_fwd_f16_stats_nchw_vec"
    );
    assert_eq!(
        p.launches.last().unwrap().kernel,
        "warpnorm_batch_norm_fwd_f16_apply_nchw_scalar"
    );
    // (N, C, 1) and (N, C) use the channels-innermost kernels whatever the layout says.
    let d = desc(&[64, 32, 1], Layout::Contiguous, DType::F32);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    assert_eq!(
        p.launches[0].kernel,
        "warpnorm_batch_norm_fwd_f32_coop_nhwc_vec"
    );
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &split(props)).unwrap();
    assert_eq!(
        p.launches[0].kernel,
        "warpnorm_batch_norm_fwd_f32_stats_nhwc_vec"
    );
}

#[test]
fn sim_device_reaches_split_reductions_with_small_shapes() {
    let props = split(DeviceProps::SIM);
    for (dims, layout) in [
        (vec![9usize, 2, 4, 256], Layout::Contiguous),
        (vec![4, 16, 20, 20], Layout::ChannelsLast),
        (vec![65539, 3], Layout::Contiguous),
    ] {
        let d = desc(&dims, layout, DType::F16);
        let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
        sane(&p, &props);
        assert!(p.launches[0].grid[1] > 1, "{dims:?}: {p}");
        let ws = workspace_bytes(&d, Direction::Forward, &props).unwrap() as u64 / 4;
        let f = p.launches[0].args.get::<WnBatchNormStatsArgs>().unwrap().f;
        let c = dims[1] as u64;
        let need = (f.partials - fwd_ptrs().workspace) / 4 + f.splits as u64 * c * 3;
        assert!(need <= ws, "{dims:?}: workspace {ws} < {need}");
    }
    // A single split when the reduction is short.
    let d = desc(&[2, 64, 3, 3], Layout::Contiguous, DType::F32);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    assert_eq!(p.launches[0].grid, [64, 1, 1]);
    assert_eq!(p.launches[0].block, [1, 32, 1]);
}

#[test]
fn eval_and_backward_plans() {
    let props = DeviceProps::H200;
    let d = desc(&[8, 64, 14, 14], Layout::Contiguous, DType::F32);
    // Eval forward: one launch, the coefficients from the running statistics; it also saves
    // the statistics, and does not count the batch.
    let f = fwd_ptrs();
    let p = plan_forward(&d.clone().with_mode(Mode::eval()), &f, &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_fwd_f32_f32params_eval_apply_nchw_vec"]
    );
    let a: WnBatchNormApplyArgs = p.launches[0].args.get().unwrap();
    assert_eq!(
        (a.x, a.out, a.gamma, a.beta, a.running_mean, a.running_var),
        (
            f.x,
            f.y,
            f.gamma.unwrap(),
            f.beta.unwrap(),
            f.running_mean.unwrap(),
            f.running_var.unwrap()
        )
    );
    assert_eq!(
        (a.save_mean, a.save_mean_lo, a.save_invstd),
        (
            f.save_mean.unwrap(),
            f.save_mean_lo.unwrap(),
            f.save_invstd.unwrap()
        )
    );
    assert_eq!((a.invstd, a.coef, a.counter_bump), (0, 0, 0));
    assert_eq!(a.eps, d.eps);
    // 16-bit parameters name their own kernel; channels-last too.
    let h = BatchNormDesc::new(
        &[8, 64, 14, 14],
        Layout::ChannelsLast,
        DType::BF16,
        DType::BF16,
    );
    let p = plan_forward(&h.with_mode(Mode::eval()), &f, &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_fwd_bf16_bf16params_eval_apply_nhwc_vec"]
    );
    // Frozen backward without parameter gradients: one launch, dx = dy * gamma * invstd by
    // the frozen-statistics pass over dy (mean and beta 0, the saved invstd).
    let mut b = bwd_ptrs();
    b.dgamma = None;
    b.dbeta = None;
    let p = plan_backward(&d.clone().with_mode(Mode::eval()), &b, &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_fwd_f32_f32params_eval_apply_nchw_vec"]
    );
    let a: WnBatchNormApplyArgs = p.launches[0].args.get().unwrap();
    assert_eq!(
        (a.x, a.out, a.gamma, a.invstd),
        (b.dy, b.dx, b.gamma.unwrap(), b.save_invstd)
    );
    assert_eq!(
        (
            a.beta,
            a.running_mean,
            a.running_var,
            a.save_mean,
            a.save_mean_lo,
            a.save_invstd
        ),
        (0, 0, 0, 0, 0, 0)
    );
    // With parameter gradients: one sweep, the sums writing dx too, whose last block per
    // channel finalizes (dgamma, dbeta; no coefficients): one launch.
    let b = bwd_ptrs();
    let p = plan_backward(&d.clone().with_mode(Mode::eval()), &b, &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_bwd_f32_f32params_eval_reduce_nchw_vec"]
    );
    let WnBatchNormSumsArgs { r, f } = p.launches[0].args.get().unwrap();
    assert_eq!(
        (r.x, r.dy, r.dx, r.mean, r.gamma, r.invstd),
        (
            b.x,
            b.dy,
            b.dx,
            b.save_mean,
            b.gamma.unwrap(),
            b.save_invstd
        )
    );
    assert_eq!(
        (f.splits, f.partials, f.tickets),
        (p.launches[0].grid[1] as i64, r.partials, b.workspace)
    );
    assert_eq!(
        f.flags & (WN_BN_FOLD | WN_BN_PARAMS_F32),
        WN_BN_FOLD | WN_BN_PARAMS_F32
    );
    // The training sums never write dx (a shape that takes the split tier, not the fused one).
    let t = desc(&[32, 256, 14, 14], Layout::Contiguous, DType::F32);
    let p = plan_backward(&t, &b, &split(props)).unwrap();
    assert_eq!(
        p.launches[0].kernel,
        "warpnorm_batch_norm_bwd_f32_reduce_nchw_vec"
    );
    let r = p.launches[0].args.get::<WnBatchNormSumsArgs>().unwrap().r;
    assert_eq!((r.dx, r.gamma, r.invstd), (0, 0, 0));
    // 7 x 7 bf16 (vecodd: the sums read covering sectors of other channels and write dx by
    // whole sectors): one sweep, as the vec shapes.
    let o = desc(&[8, 64, 7, 7], Layout::Contiguous, DType::BF16).with_mode(Mode::eval());
    let p = plan_backward(&o, &b, &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_bwd_bf16_f32params_eval_reduce_nchw_vecodd"]
    );
    let r = p.launches[0].args.get::<WnBatchNormSumsArgs>().unwrap().r;
    assert_eq!(
        (r.dx, r.gamma, r.invstd),
        (b.dx, b.gamma.unwrap(), b.save_invstd)
    );
    // In place (dx == dy), those covering reads would race with the neighbouring channels'
    // dx: the sums (finalizing themselves), then the eval apply for dx.
    let in_place = BackwardPtrs { dx: b.dy, ..b };
    let p = plan_backward(&o, &in_place, &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        [
            "warpnorm_batch_norm_bwd_bf16_reduce_nchw_vecodd",
            "warpnorm_batch_norm_fwd_bf16_f32params_eval_apply_nchw_vecodd"
        ]
    );
    let r = p.launches[0].args.get::<WnBatchNormSumsArgs>().unwrap().r;
    assert_eq!((r.dx, r.gamma, r.invstd), (0, 0, 0));
    // The vecodd elementwise pass stages its coefficient tables in dynamic shared memory:
    // 2 buffers x WN_BN_ODD_APPLY_PACKS groups x min(C, 256 * 8 / 49 + 3 = 44) channels x 16
    // bytes; the reductions and the vec pass use none.
    let apply = &p.launches[1];
    assert_eq!(apply.block, [256, 1, 1]);
    assert_eq!(apply.shared_mem_bytes, 2 * WN_BN_ODD_APPLY_PACKS * 44 * 16);
    assert_eq!(p.launches[0].shared_mem_bytes, 0);
    let few = desc(&[8, 5, 7, 7], Layout::Contiguous, DType::BF16).with_mode(Mode::eval());
    let p = plan_backward(&few, &in_place, &props).unwrap();
    assert_eq!(
        p.launches[1].shared_mem_bytes,
        2 * WN_BN_ODD_APPLY_PACKS * 5 * 16
    );
}

#[test]
fn empty_batch_counts_in_training_only() {
    let props = DeviceProps::H200;
    let d = desc(&[0, 3, 4, 4], Layout::Contiguous, DType::F32);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    assert_eq!(names(&p), ["warpnorm_batch_norm_fwd_f32params_finalize"]);
    let f: WnBatchNormFinalizeArgs = p.launches[0].args.get().unwrap();
    assert_eq!(
        (f.count, f.counter_bump),
        (0, fwd_ptrs().num_batches_tracked.unwrap())
    );
    assert!(
        plan_forward(&d.clone().with_mode(Mode::eval()), &fwd_ptrs(), &props)
            .unwrap()
            .launches
            .is_empty()
    );
    let mut no_counter = fwd_ptrs();
    no_counter.num_batches_tracked = None;
    assert!(
        plan_forward(&d.clone().with_mode(train()), &no_counter, &props)
            .unwrap()
            .launches
            .is_empty()
    );
    // Backward: zero dgamma/dbeta only.
    let p = plan_backward(
        &desc(&[2, 3, 0], Layout::Contiguous, DType::F32),
        &bwd_ptrs(),
        &props,
    )
    .unwrap();
    assert_eq!(names(&p), ["warpnorm_batch_norm_bwd_f32params_finalize"]);
    // N * S = 1 is fine in eval.
    let d = desc(&[1, 3], Layout::Contiguous, DType::F32);
    assert!(plan_forward(&d.clone().with_mode(Mode::eval()), &fwd_ptrs(), &props).is_ok());
}

#[test]
fn plans_are_pure() {
    let d = desc(&[7, 1000, 9], Layout::ChannelsLast, DType::BF16);
    let a = plan_forward(
        &d.clone().with_mode(train()),
        &fwd_ptrs(),
        &DeviceProps::A100,
    )
    .unwrap();
    let b = plan_forward(
        &d.clone().with_mode(train()),
        &fwd_ptrs(),
        &DeviceProps::A100,
    )
    .unwrap();
    assert_eq!(a, b);
}

fn fwd_err(d: &BatchNormDesc, mode: &Mode, ptrs: &ForwardPtrs) -> Error {
    plan_forward(&d.clone().with_mode(*mode), ptrs, &DeviceProps::H200)
        .expect_err("must be rejected")
}

#[test]
fn every_bad_input_is_an_error_before_any_launch() {
    let ok = desc(&[4, 3, 5], Layout::Contiguous, DType::F32);
    let p = fwd_ptrs();
    let t = train();
    let shape = |e: Error| assert!(matches!(e, Error::Shape { .. }), "{e}");
    let dtype = |e: Error| assert!(matches!(e, Error::DType { .. }), "{e}");
    let invalid = |e: Error| assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let align = |e: Error| assert!(matches!(e, Error::Alignment { .. }), "{e}");
    shape(fwd_err(&desc(&[4], Layout::Contiguous, DType::F32), &t, &p));
    shape(fwd_err(
        &desc(&[1, 2, 3, 4, 5, 6], Layout::Contiguous, DType::F32),
        &t,
        &p,
    ));
    shape(fwd_err(
        &desc(&[4, 0, 5], Layout::Contiguous, DType::F32),
        &t,
        &p,
    ));
    let e = fwd_err(
        &desc(&[usize::MAX / 2, 4, 4], Layout::Contiguous, DType::F32),
        &t,
        &p,
    );
    assert!(matches!(e, Error::Overflow(_)), "{e}");
    dtype(fwd_err(
        &BatchNormDesc::new(&[4, 3], Layout::Contiguous, DType::BF16, DType::F16),
        &t,
        &p,
    ));
    dtype(fwd_err(
        &BatchNormDesc::new(&[4, 3], Layout::Contiguous, DType::F32, DType::F16),
        &t,
        &p,
    ));
    invalid(fwd_err(&ok.clone().with_eps(-1.0), &t, &p));
    invalid(fwd_err(&ok.clone().with_eps(f32::NAN), &t, &p));
    invalid(fwd_err(&ok, &Mode::train(1.5), &p));
    invalid(fwd_err(&ok, &Mode::train(f32::NAN), &p));
    let mut q = p;
    q.beta = None;
    invalid(fwd_err(&ok, &t, &q));
    let mut q = p;
    q.running_var = None;
    invalid(fwd_err(&ok, &t, &q));
    let mut q = p;
    q.running_mean = None;
    q.running_var = None;
    invalid(fwd_err(&ok, &Mode::eval(), &q));
    let mut q = p;
    q.num_batches_tracked = None;
    invalid(fwd_err(&ok, &Mode::train_cumulative(), &q));
    // One value per channel in training, with PyTorch's message.
    for dims in [[1usize, 3].as_slice(), &[1, 3, 1, 1]] {
        let e = fwd_err(&desc(dims, Layout::Contiguous, DType::F32), &t, &p);
        assert!(
            e.to_string()
                .contains("Expected more than 1 value per channel when training"),
            "{e}"
        );
        invalid(e);
    }
    // Misaligned pointers.
    for f in [
        |q: &mut ForwardPtrs| q.x += 2,
        |q: &mut ForwardPtrs| q.y += 1,
        |q: &mut ForwardPtrs| q.gamma = Some(A + 2),
        |q: &mut ForwardPtrs| q.running_var = Some(A + 6),
        |q: &mut ForwardPtrs| q.num_batches_tracked = Some(A + 4),
        |q: &mut ForwardPtrs| q.save_invstd = Some(A + 1),
        |q: &mut ForwardPtrs| q.workspace += 8,
    ] {
        let mut q = p;
        f(&mut q);
        align(fwd_err(&ok, &t, &q));
    }
    let h = desc(&[4, 3, 5], Layout::Contiguous, DType::F16);
    let mut q = p;
    q.x += 2; // aligned for f16: accepted (scalar variant)
    assert!(plan_forward(&h.clone().with_mode(t), &q, &DeviceProps::H200).is_ok());
    // Backward.
    let b = bwd_ptrs();
    for f in [
        |q: &mut BackwardPtrs| q.dy += 2,
        |q: &mut BackwardPtrs| q.dx += 2,
        |q: &mut BackwardPtrs| q.save_mean += 2,
        |q: &mut BackwardPtrs| q.save_mean_lo = Some(A - G + 2),
        |q: &mut BackwardPtrs| q.dgamma = Some(A + 2),
        |q: &mut BackwardPtrs| q.workspace += 4,
    ] {
        let mut q = b;
        f(&mut q);
        align(plan_backward(&ok, &q, &DeviceProps::H200).expect_err("misaligned"));
    }
    shape(
        plan_backward(
            &desc(&[4], Layout::Contiguous, DType::F32),
            &b,
            &DeviceProps::H200,
        )
        .unwrap_err(),
    );
}

#[test]
fn cpu_reference_rejects_the_same_inputs_and_keeps_its_statistics() {
    let d = desc(&[1, 3, 1, 1], Layout::Contiguous, DType::F32);
    let (mut rm, mut rv, mut n) = (vec![0.5f32; 3], vec![2.0f32; 3], 7i64);
    let r = cpu::forward::<f32, f32>(
        &d.clone().with_mode(Mode::train(0.1)),
        &[1.0, 2.0, 3.0],
        None,
        Some(cpu::Running {
            mean: &mut rm,
            var: &mut rv,
            num_batches_tracked: Some(&mut n),
        }),
    );
    assert!(matches!(r, Err(Error::InvalidArgument { .. })));
    assert_eq!((rm, rv, n), (vec![0.5f32; 3], vec![2.0f32; 3], 7));
    // Cumulative momentum without a counter.
    let d = desc(&[2, 1], Layout::Contiguous, DType::F32);
    let (mut rm, mut rv) = (vec![0.0f32], vec![1.0f32]);
    let r = cpu::forward::<f32, f32>(
        &d.clone().with_mode(Mode {
            batch_stats: true,
            momentum: Momentum::Cumulative,
        }),
        &[1.0, 2.0],
        None,
        Some(cpu::Running {
            mean: &mut rm,
            var: &mut rv,
            num_batches_tracked: None,
        }),
    );
    assert!(matches!(r, Err(Error::InvalidArgument { .. })));
    assert_eq!((rm, rv), (vec![0.0f32], vec![1.0f32]));
    // Wrong lengths.
    let r = cpu::forward::<f32, f32>(&d.clone().with_mode(Mode::train(0.1)), &[1.0], None, None);
    assert!(matches!(r, Err(Error::Length { .. })));
}

#[test]
fn cpu_reference_semantics_examples() {
    // SEMANTICS.md: momentum None over [1,2,4], [3,5], [0,10,20,30].
    let (mut rm, mut rv, mut n) = (vec![0.0f32], vec![1.0f32], 0i64);
    let want = [
        (2.3333333, 2.3333333),
        (3.1666667, 2.1666667),
        (7.111111, 57.0),
    ];
    for (x, w) in [
        vec![1.0f32, 2.0, 4.0],
        vec![3.0, 5.0],
        vec![0.0, 10.0, 20.0, 30.0],
    ]
    .iter()
    .zip(want)
    {
        let d = desc(&[x.len(), 1], Layout::Contiguous, DType::F32);
        cpu::forward::<f32, f32>(
            &d.clone().with_mode(Mode::train_cumulative()),
            x,
            None,
            Some(cpu::Running {
                mean: &mut rm,
                var: &mut rv,
                num_batches_tracked: Some(&mut n),
            }),
        )
        .unwrap();
        assert!(
            (rm[0] as f64 - w.0).abs() < 1e-5 && (rv[0] as f64 - w.1).abs() < 1e-4,
            "{rm:?} {rv:?}"
        );
    }
    assert_eq!(n, 3);
    // Eval: x = 3, rm = 1, rv = 4 -> 0.99999875.
    let d = desc(&[1, 1], Layout::Contiguous, DType::F32);
    let (mut rm, mut rv) = (vec![1.0f32], vec![4.0f32]);
    let out = cpu::forward::<f32, f32>(
        &d.clone().with_mode(Mode::eval()),
        &[3.0],
        None,
        Some(cpu::Running {
            mean: &mut rm,
            var: &mut rv,
            num_batches_tracked: None,
        }),
    )
    .unwrap();
    assert!((out.y[0] - 0.99999875).abs() < 1e-7);
}

#[test]
fn h200_fused_backward_tier() {
    let props = DeviceProps::H200;
    // BatchNorm1d over 4096 features, batch 256: 1024 channel vectors, bx = 2 gives 512 tiles
    // (>= 2 per SM); x and dy of a tile: 256 rows * 2 * 16 bytes * 2 = 16 KiB, plus 2560
    // bytes of merge scratch and coefficients per channel a thread owns (4).
    let d = desc(&[256, 4096], Layout::Contiguous, DType::F32);
    let p = plan_backward(&d, &bwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_bwd_f32_f32params_fused_nhwc_vec"]
    );
    assert_eq!(p.launches[0].grid, [512, 1, 1]);
    assert_eq!(p.launches[0].block, [2, 128, 1]);
    assert_eq!(p.launches[0].shared_mem_bytes, 16 * 1024 + 4 * 2560);
    // (32, 512, 2, 2) NCHW bf16 (S below the vector width: scalar): one block per channel,
    // 32 * 4 elements of x and dy.
    let d = BatchNormDesc::new(
        &[32, 512, 2, 2],
        Layout::Contiguous,
        DType::BF16,
        DType::BF16,
    );
    let p = plan_backward(&d, &bwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_bwd_bf16_bf16params_fused_nchw_scalar"]
    );
    assert_eq!(p.launches[0].shared_mem_bytes, 32 * 4 * 2 * 2 + 2560);
    // (32, 512, 7, 7) NCHW bf16 (49 % 8 != 0: vecodd): one block per channel holding the
    // covering packs of its 32 slices, 8 per slice (4 sectors), of x and dy.
    let d = BatchNormDesc::new(
        &[32, 512, 7, 7],
        Layout::Contiguous,
        DType::BF16,
        DType::BF16,
    );
    let p = plan_backward(&d, &bwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_bwd_bf16_bf16params_fused_nchw_vecodd"]
    );
    assert_eq!(p.launches[0].shared_mem_bytes, 32 * 8 * 16 * 2 + 2560);
    // Too few channels to fill the GPU unsplit, or too much data per channel: the split tier,
    // sums (finalizing in their last blocks) and the apply.
    // (Without cooperative launches: with them, the cooperative pass.)
    for dims in [[32usize, 256, 14, 14], [32, 512, 56, 56]] {
        let d = desc(&dims, Layout::Contiguous, DType::F32);
        assert_eq!(
            names(&plan_backward(&d, &bwd_ptrs(), &split(props)).unwrap()),
            [
                "warpnorm_batch_norm_bwd_f32_reduce_nchw_vec",
                "warpnorm_batch_norm_bwd_f32_apply_nchw_vec"
            ]
        );
    }
    // The forward fuses under the same conditions: x only (8 KiB) plus 1024 + 4 * 3584 bytes.
    // With a momentum factor no block reads num_batches_tracked: the fused kernel bumps it,
    // one launch.
    let d = desc(&[256, 4096], Layout::Contiguous, DType::F32);
    let p = plan_forward(&d, &fwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_fwd_f32_f32params_fused_nhwc_vec"]
    );
    let f: WnBatchNormFusedFwdArgs = p.launches[0].args.get().unwrap();
    assert_eq!(
        (f.counter, f.counter_bump),
        (
            fwd_ptrs().num_batches_tracked.unwrap(),
            fwd_ptrs().num_batches_tracked.unwrap()
        )
    );
    // Cumulative momentum: every block reads the counter, then the finalize kernel bumps it.
    let p = plan_forward(
        &d.clone().with_mode(Mode::train_cumulative()),
        &fwd_ptrs(),
        &props,
    )
    .unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        [
            "warpnorm_batch_norm_fwd_f32_f32params_fused_nhwc_vec",
            "warpnorm_batch_norm_fwd_f32params_finalize"
        ]
    );
    assert_eq!(p.launches[0].shared_mem_bytes, 8 * 1024 + 1024 + 4 * 3584);
    let a: WnBatchNormFusedFwdArgs = p.launches[0].args.get().unwrap();
    assert_eq!(
        (a.counter, a.counter_bump),
        (fwd_ptrs().num_batches_tracked.unwrap(), 0)
    );
    let f: WnBatchNormFinalizeArgs = p.launches[1].args.get().unwrap();
    assert_eq!(
        (f.count, f.counter_bump),
        (0, fwd_ptrs().num_batches_tracked.unwrap())
    );
    assert_eq!(p.launches[1].grid, [1, 1, 1]);
    // Eval forward and eval-mode backward never fuse (no reduction is needed for y or dx).
    assert_eq!(
        plan_forward(&d.clone().with_mode(Mode::eval()), &fwd_ptrs(), &props)
            .unwrap()
            .launches
            .len(),
        1
    );
    // (With dgamma / dbeta, the eval-mode sums write dx, then the finalize: channels-last
    // reductions keep the finalize kernel; with cooperative launches, one cooperative pass
    // does both.)
    let d = desc(&[256, 4096], Layout::Contiguous, DType::F32);
    let eval = d.clone().with_mode(Mode::eval());
    assert_eq!(
        names(&plan_backward(&eval, &bwd_ptrs(), &split(props)).unwrap()),
        [
            "warpnorm_batch_norm_bwd_f32_f32params_eval_reduce_nhwc_vec",
            "warpnorm_batch_norm_bwd_f32params_finalize"
        ]
    );
    let p = plan_backward(&eval, &bwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    assert_eq!(
        names(&p),
        ["warpnorm_batch_norm_bwd_f32_f32params_eval_coop_nhwc_vec"]
    );
    let l = &p.launches[0];
    assert!(l.cooperative);
    let a: WnBatchNormCoopBwdArgs = l.args.get().unwrap();
    let b = bwd_ptrs();
    assert_eq!(
        (a.s.r.dx, a.s.r.gamma, a.s.r.invstd, a.out, a.barrier),
        (b.dx, b.gamma.unwrap(), b.save_invstd, 0, b.workspace)
    );
    assert_eq!(a.s.f.flags & WN_BN_FROZEN, WN_BN_FROZEN);
    assert_eq!(
        (a.s.f.dgamma, a.s.f.dbeta),
        (b.dgamma.unwrap(), b.dbeta.unwrap())
    );
    let ws = workspace_bytes(&eval, Direction::Backward, &props).unwrap() as u64;
    assert!(a.s.f.partials + 8 * a.s.f.splits as u64 * 4096 <= b.workspace + ws);
}

#[test]
fn tensors_over_2_pow_31_elements_plan_with_64_bit_sizes() {
    use warpnorm::abi::WnBatchNormApplyArgs;
    let props = DeviceProps::H200;
    for layout in [Layout::Contiguous, Layout::ChannelsLast] {
        // 3 * 2^31 elements of f16 (12 GiB).
        let d = desc(&[1 << 21, 3, 32, 32], layout, DType::F16);
        let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &split(props)).unwrap();
        sane(&p, &props);
        let WnBatchNormStatsArgs { r, f } = p.launches[0].args.get().unwrap();
        assert_eq!((r.n, r.c, r.s), (1 << 21, 3, 1024));
        assert_eq!(f.count, (1i64 << 21) * 1024);
        let a: WnBatchNormApplyArgs = p.launches.last().unwrap().args.get().unwrap();
        assert!(a.n * a.c * a.s > i32::MAX as i64);
        let b = plan_backward(&d, &bwd_ptrs(), &props).unwrap();
        sane(&b, &props);
        if layout == Layout::Contiguous {
            // The cooperative pass: 64-bit sizes and chunks of 2^31 / splits packs.
            let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
            sane(&p, &props);
            let a: WnBatchNormCoopFwdArgs = p.launches[0].args.get().unwrap();
            assert_eq!((a.s.r.n, a.s.r.c, a.s.r.s), (1 << 21, 3, 1024));
            assert_eq!(a.s.f.count, (1i64 << 21) * 1024);
            assert!(a.s.r.chunk * a.s.f.splits >= (1i64 << 21) * 1024 / 8);
        }
    }
    // The channels-last cooperative passes: 2^31 elements of f16 as (2^28, 8), chunks of
    // 2^28 / splits rows.
    let d = desc(&[1 << 28, 8], Layout::Contiguous, DType::F16);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    assert_eq!(names(&p), ["warpnorm_batch_norm_fwd_f16_coop_nhwc_vec"]);
    let a: WnBatchNormCoopFwdArgs = p.launches[0].args.get().unwrap();
    assert_eq!((a.s.r.n, a.s.r.c, a.s.r.s), (1 << 28, 8, 1));
    assert_eq!(a.s.f.count, 1i64 << 28);
    assert!(a.s.r.chunk * a.s.f.splits >= 1i64 << 28);
    for mode in [Mode::train(0.1), Mode::eval()] {
        let p = plan_backward(&d.clone().with_mode(mode), &bwd_ptrs(), &props).unwrap();
        sane(&p, &props);
        assert!(p.launches[0].cooperative, "{p}");
        let a: WnBatchNormCoopBwdArgs = p.launches[0].args.get().unwrap();
        assert_eq!(a.s.f.count, 1i64 << 28);
        assert!(a.s.r.chunk * a.s.f.splits >= 1i64 << 28);
    }
    // A channel count beyond the grid's x limit is an error, not a panic.
    let d = desc(&[2, 1 << 31, 3], Layout::Contiguous, DType::F32);
    let e = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap_err();
    assert!(
        matches!(e, Error::Overflow(_) | Error::InvalidArgument { .. }),
        "{e}"
    );
}

/// The layout choices that keep aligned shapes coalesced (tests/batch_norm/coalescing.rs measures the
/// requests): nchw splits start on a 32-byte sector of each channel slice (chunk = a whole
/// number of 32-byte pieces), the finalize blocks (where the reduction does not finalize
/// itself) take up to 8 consecutive channels (one f32 sector per split) and spend the rest of
/// their 128 threads on splits, and the coefficients and partials start on sectors after the
/// arrival counters and coefficient arrays, each C rounded up to 8 words.
#[test]
fn splits_and_finalize_blocks_keep_requests_on_sectors() {
    // (The split tiers: NCHW takes the cooperative pass where the device has cooperative
    // launches, with the same chunk rules.)
    let props = split(DeviceProps::H200);
    // Expected chunks worked out from the planner's rules (splits per channel: one wave of
    // resident blocks / C, at most one per 4 units per thread and one per 256 bytes of the
    // channel; chunks of whole 32-byte sectors). The wave: 132 SMs x 4 blocks of 256 threads
    // at the 62-63 registers ptxas gives these kernels on sm_90 (528), or x 8 (1056) when the
    // build has no figures. 25088 f32 packs in 8 splits: 3136; in 16: 1568. 12544 bf16 packs in
    // 8 splits: 1568; in 13 (ceil(12544 / 1024)): 965, odd, rounded up to 966. 7800 packs in 8
    // splits 975, rounded up; 2800 in 3: 934 (both waves).
    for (dims, dt, chunk_by_figures, chunk_without) in [
        (vec![32usize, 64, 56, 56], DType::F32, 3136, 1568),
        (vec![32, 64, 56, 56], DType::BF16, 1568, 966),
        (vec![3, 2, 100, 104], DType::F32, 976, 976),
        (vec![7, 3, 40, 40], DType::F32, 934, 934),
    ] {
        let d = desc(&dims, Layout::Contiguous, dt);
        let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
        sane(&p, &props);
        let r = p.launches[0].args.get::<WnBatchNormStatsArgs>().unwrap().r;
        assert!(
            p.launches[0].kernel.ends_with("_stats_nchw_vec"),
            "{dims:?}: {}",
            p.launches[0].kernel
        );
        let chunk = match resident_per_sm(&p.launches[0].kernel, 256, &props) {
            Some(4) => chunk_by_figures,
            None => chunk_without,
            Some(r) => panic!("{dims:?} {dt}: {r} resident blocks per SM, expected 4"),
        };
        // Units are 16-byte packs: 2 per sector.
        let units = (dims[0] * dims[2] * dims[3]) as i64 * dt.size() as i64 / 16;
        assert_eq!(r.chunk, chunk, "{dims:?} {dt}");
        let splits = p.launches[0].grid[1] as i64;
        assert!(splits > 1, "{dims:?} {dt}: split");
        assert!(r.chunk * (splits - 1) < units && r.chunk * splits >= units);
        // At most 16 splits over 256 rows of threads: the last block of each channel
        // finalizes it (one round of partial loads); no finalize launch.
        let f = p.launches[0].args.get::<WnBatchNormStatsArgs>().unwrap().f;
        assert_eq!((f.splits, f.flags & WN_BN_FOLD), (splits, WN_BN_FOLD));
        assert_eq!(p.launches.len(), 2, "{dims:?}");
        assert_eq!(f.coef_stride, (dims[1] as i64 + 7) / 8 * 8);
        assert_eq!(f.coef - f.tickets, 4 * f.coef_stride as u64);
        assert_eq!(f.partials - f.coef, 16 * f.coef_stride as u64);
    }
    // NCHW reductions always finalize themselves: one channel's splits stop at FOLD_MAX_ROUNDS
    // rounds of 256 (784 would fill the wave; 512 are 0.97 of it), written channel-major.
    let d = desc(&[64, 1, 224, 224], Layout::Contiguous, DType::F32);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    sane(&p, &props);
    let f = p.launches[0].args.get::<WnBatchNormStatsArgs>().unwrap().f;
    assert_eq!(p.launches[0].grid, [1, 512, 1]);
    assert_eq!(
        f.flags & (WN_BN_FOLD | WN_BN_CHANNEL_MAJOR),
        WN_BN_FOLD | WN_BN_CHANNEL_MAJOR
    );
    assert_eq!(p.launches.len(), 2);
    // A channels-last reduction over hundreds of splits keeps its finalize launch: blocks of 8
    // consecutive channels x 16 rows of splits.
    let d = desc(&[32, 256, 56, 56], Layout::ChannelsLast, DType::F16);
    let p = plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap();
    let f: WnBatchNormFinalizeArgs = p.launches[1].args.get().unwrap();
    assert_eq!(f.splits, p.launches[0].grid[1] as i64);
    assert_eq!(p.launches[1].block, [8, 16, 1]);
    assert_eq!(p.launches[1].grid, [32, 1, 1]);
}

/// Every buffer is checked by the same helper as LayerNorm's: a short workspace is reported in
/// the bytes `workspace_bytes` returns; outputs overlapping other buffers are rejected, except
/// `y == x` and `dx == dy` in place.
#[test]
fn workspace_and_overlap_checks() {
    let props = DeviceProps::H200;
    let d = desc(&[32, 64, 14, 14], Layout::Contiguous, DType::BF16);
    let need = workspace_bytes(&d, Direction::Forward, &props).unwrap();
    let mut p = fwd_ptrs();
    p.workspace_bytes = need as u64 - 4;
    let e = plan_forward(&d, &p, &props).unwrap_err();
    assert!(
        matches!(e, Error::Workspace { needed, .. } if needed == need),
        "{e} (the query says {need} bytes)"
    );
    let mut b = bwd_ptrs();
    b.workspace_bytes = 0;
    assert!(matches!(
        plan_backward(&d, &b, &props).unwrap_err(),
        Error::Workspace { .. }
    ));
    let overlap = |e: Error| matches!(e, Error::Overlap { .. });
    let fwd = |edit: &dyn Fn(&mut ForwardPtrs)| {
        let mut p = fwd_ptrs();
        edit(&mut p);
        plan_forward(&d, &p, &props)
    };
    let bwd = |edit: &dyn Fn(&mut BackwardPtrs)| {
        let mut p = bwd_ptrs();
        edit(&mut p);
        plan_backward(&d, &p, &props)
    };
    assert!(overlap(fwd(&|p| p.save_invstd = p.save_mean).unwrap_err()));
    assert!(overlap(fwd(&|p| p.save_mean_lo = p.save_mean).unwrap_err()));
    assert!(overlap(
        bwd(&|p| p.save_mean_lo = p.dgamma.map(|a| a + 4)).unwrap_err()
    ));
    assert!(overlap(
        fwd(&|p| p.running_var = p.running_mean).unwrap_err()
    ));
    assert!(overlap(fwd(&|p| p.y = p.x + 2).unwrap_err()));
    assert!(overlap(
        fwd(&|p| p.save_mean = Some(p.workspace)).unwrap_err()
    ));
    assert!(overlap(bwd(&|p| p.dx = p.x).unwrap_err()));
    assert!(overlap(bwd(&|p| p.dgamma = p.dbeta).unwrap_err()));
    fwd(&|p| p.y = p.x).unwrap();
    bwd(&|p| p.dx = p.dy).unwrap();
    // Null and overflowing addresses are errors too (BatchNorm once checked alignment only).
    assert!(matches!(
        fwd(&|p| p.x = 0).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        bwd(&|p| p.dy = u64::MAX - 15).unwrap_err(),
        Error::Overflow(_)
    ));
}

/// Eval needs no workspace for its forward nor for an eval-mode dx alone (one launch each,
/// reading none); an eval-mode backward with dgamma/dbeta needs what training's does.
#[test]
fn eval_needs_no_workspace_except_for_parameter_gradients() {
    let props = DeviceProps::H200;
    for (dims, layout, dt) in [
        (&[32usize, 64, 14, 14][..], Layout::Contiguous, DType::BF16),
        (&[16, 256, 7, 7][..], Layout::Contiguous, DType::BF16),
        (&[8, 64, 14, 14][..], Layout::ChannelsLast, DType::F32),
        (&[4096, 8][..], Layout::Contiguous, DType::F32),
    ] {
        let train = desc(dims, layout, dt);
        let eval = train.clone().with_mode(Mode::eval());
        let need = workspace_bytes(&train, Direction::Backward, &props).unwrap();
        assert!(need > 0, "{dims:?}");
        assert_eq!(
            workspace_bytes(&eval, Direction::Forward, &props).unwrap(),
            0
        );
        assert_eq!(
            workspace_bytes(&eval, Direction::Backward, &props).unwrap(),
            need
        );
        let mut f = fwd_ptrs();
        (f.workspace, f.workspace_bytes) = (0, 0);
        let p = plan_forward(&eval, &f, &props).unwrap();
        assert_eq!(p.launches.len(), 1, "{p}");
        // Training still needs it, and says how much.
        let e = plan_forward(&train, &f, &props).unwrap_err();
        assert!(
            matches!(e, Error::Workspace { needed, given: 0 } if needed == need),
            "{e}"
        );
        let mut b = bwd_ptrs();
        (b.workspace, b.workspace_bytes) = (0, 0);
        let e = plan_backward(&eval, &b, &props).unwrap_err();
        assert!(
            matches!(e, Error::Workspace { needed, given: 0 } if needed == need),
            "{e}"
        );
        (b.dgamma, b.dbeta) = (None, None);
        let p = plan_backward(&eval, &b, &props).unwrap();
        assert_eq!(p.launches.len(), 1, "{p}");
        assert!(plan_backward(&train, &b, &props).is_err());
    }
}

/// Grids follow the kernels' own occupancy (the build's ptxas figures for the device's SASS;
/// `max_threads_per_sm / 256` blocks per SM where the build has none): a reduction's grid fits
/// in one wave of its resident blocks unless its channel tiles alone exceed one, and an
/// elementwise pass of more than one wave is a whole number of waves, up to less than one row
/// of channel tiles (a partial last wave would take as long as a full one). (The split tiers:
/// the cooperative passes' grids are cooperative_passes_plan's.)
#[test]
fn grids_fill_whole_waves_of_resident_blocks() {
    let mut checked = 0;
    for props in [split(DeviceProps::H100), split(DeviceProps::H200)] {
        for (dims, layout) in [
            (vec![32usize, 256, 56, 56], Layout::Contiguous),
            (vec![32, 256, 56, 56], Layout::ChannelsLast),
            (vec![256, 64, 4096], Layout::Contiguous),
            (vec![64, 3, 224, 224], Layout::Contiguous),
            (vec![128, 2048, 7, 7], Layout::Contiguous),
            (vec![256, 256, 14, 14], Layout::ChannelsLast),
            (vec![1 << 20, 8], Layout::Contiguous),
        ] {
            for dt in [DType::F32, DType::F16, DType::BF16] {
                let d = desc(&dims, layout, dt);
                let eval = d.clone().with_mode(Mode::eval());
                let plans = [
                    plan_forward(&d.clone().with_mode(train()), &fwd_ptrs(), &props).unwrap(),
                    plan_forward(&eval, &fwd_ptrs(), &props).unwrap(),
                    plan_backward(&d, &bwd_ptrs(), &props).unwrap(),
                    plan_backward(&eval, &bwd_ptrs(), &props).unwrap(),
                ];
                for l in plans.iter().flat_map(|p| &p.launches) {
                    let reduce = l.kernel.contains("_stats_") || l.kernel.contains("_reduce_");
                    if !reduce && !l.kernel.contains("_apply_") {
                        continue; // finalize and fused kernels: one block per channel tile
                    }
                    let threads = l.block[0] * l.block[1];
                    let per_sm = resident_per_sm(&l.kernel, threads, &props)
                        .unwrap_or(props.max_threads_per_sm / 256);
                    let wave = u64::from(props.sm_count) * u64::from(per_sm);
                    let (tiles, blocks) = (
                        u64::from(l.grid[0]),
                        u64::from(l.grid[0]) * u64::from(l.grid[1]),
                    );
                    let what = format!("{dims:?} {layout:?} {dt} {}: grid {:?}", l.kernel, l.grid);
                    if reduce {
                        assert!(blocks <= wave || l.grid[1] == 1, "{what}, wave {wave}");
                    } else if blocks > wave {
                        // nchw passes are one tile row (grid.y 1); nhwc rows are channel tiles.
                        let row = if l.grid[1] == 1 { 1 } else { tiles };
                        assert!(blocks % wave < row, "{what}, wave {wave}");
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 100, "{checked} launches checked");
}
