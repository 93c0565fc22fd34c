//! LayerNorm planning, pure Rust (no GPU, no simulator): tier choice and launch geometry for
//! the H200 and the simulator's GPU, workspace sizes, and every bad-input path (each returns
//! the right `Error` variant; a rejected call plans nothing, so nothing can be launched).

use warpnorm::layer_norm::{
    geometry, plan_bwd, plan_fwd, workspace_bytes, Affine, BwdPtrs, Direction, FwdPtrs,
    LayerNormDesc, Tier,
};
use warpnorm::{DType, DeviceProps, Error, Plan};

const X: u64 = 0x1_0000_0000;
const Y: u64 = 0x2_0000_0000;
const DY: u64 = 0x3_0000_0000;
const G: u64 = 0x4_0000_0000;
const B: u64 = 0x4_1000_0000;
const MEAN: u64 = 0x5_0000_0000;
const RSTD: u64 = 0x5_1000_0000;
const DG: u64 = 0x6_0000_0000;
const DB: u64 = 0x6_1000_0000;
const WS: u64 = 0x7_0000_0000;

fn desc(rows: usize, cols: usize, t: DType, p: DType, affine: Affine) -> LayerNormDesc {
    LayerNormDesc::from_rows(rows, cols, t, p, affine, 1e-5).unwrap()
}

fn fwd_ptrs(d: &LayerNormDesc, props: &DeviceProps) -> FwdPtrs {
    FwdPtrs {
        x: X,
        y: Y,
        gamma: d.affine.has_weight().then_some(G),
        beta: d.affine.has_bias().then_some(B),
        mean: MEAN,
        rstd: RSTD,
        workspace: WS,
        workspace_bytes: workspace_bytes(d, Direction::Forward, props).unwrap() as u64,
    }
}

fn bwd_ptrs(d: &LayerNormDesc, props: &DeviceProps) -> BwdPtrs {
    BwdPtrs {
        x: X,
        dy: DY,
        dx: Y,
        gamma: d.affine.has_weight().then_some(G),
        mean: MEAN,
        rstd: RSTD,
        dgamma: d.affine.has_weight().then_some(DG),
        dbeta: d.affine.has_bias().then_some(DB),
        workspace: WS,
        workspace_bytes: workspace_bytes(d, Direction::Backward, props).unwrap() as u64,
    }
}

fn names(p: &Plan) -> Vec<&str> {
    p.launches.iter().map(|l| l.kernel.as_str()).collect()
}

#[test]
fn h200_plans_for_transformer_shapes() {
    let h = DeviceProps::H200;
    let rows = 32 * 512;
    // (D, forward tier, backward tier) for bf16 activations with f32 parameters.
    for (cols, fwd_tier, bwd_tier) in [
        (768, "warp", "block"),
        (1024, "warp", "block"),
        (2048, "block", "block"),
        (4096, "block", "block"),
        (8192, "block", "block"),
        (65536, "split_stats", "split_sums"),
    ] {
        let d = desc(rows, cols, DType::BF16, DType::F32, Affine::WeightBias);
        let f = plan_fwd(&d, &fwd_ptrs(&d, &h), &h).unwrap();
        let b = plan_bwd(&d, &bwd_ptrs(&d, &h), &h).unwrap();
        println!("H200 bf16/f32 {rows}x{cols}:\n{f}{b}");
        assert_eq!(
            f.launches[0].kernel,
            format!("warpnorm_layer_norm_fwd_bf16_f32_{fwd_tier}_vec")
        );
        assert_eq!(
            b.launches[0].kernel,
            format!("warpnorm_layer_norm_bwd_bf16_f32_{bwd_tier}_vec")
        );
        assert_eq!(
            b.launches.last().unwrap().kernel,
            "warpnorm_layer_norm_bwd_f32_finalize"
        );
        // Persistent grids: never more resident threads than the GPU holds.
        for l in &f.launches {
            assert!(
                l.blocks() * l.threads_per_block() <= (h.sm_count * h.max_threads_per_sm) as u64
            );
        }
    }
    // Exact launch geometry of the most common case, D = 768 bf16 forward: one warp per row,
    // 4 rows per 128-thread block, 132 SMs x 16 blocks.
    let d = desc(rows, 768, DType::BF16, DType::BF16, Affine::WeightBias);
    let f = plan_fwd(&d, &fwd_ptrs(&d, &h), &h).unwrap();
    assert_eq!(f.launches.len(), 1);
    assert_eq!(f.launches[0].block, [128, 1, 1]);
    assert_eq!(f.launches[0].grid, [132 * 16, 1, 1]);
    // Backward D = 768: four rows at a time per 512-thread block (a 128-thread team each),
    // two blocks per SM: 264 dgamma/dbeta partial rows, summed by the finalize kernel.
    let b = plan_bwd(&d, &bwd_ptrs(&d, &h), &h).unwrap();
    assert_eq!(b.launches[0].block, [128, 4, 1]);
    assert_eq!(b.launches[0].grid, [132 * 2, 1, 1]);
    assert_eq!(b.launches[0].shared_mem_bytes, 2 * 768 * 4);
    assert_eq!(b.launches[1].grid, [768 / 32, 1, 1]);
}

#[test]
fn tier_boundaries_f32() {
    let h = DeviceProps::H200;
    let t = |dir, cols: usize, rows: usize| {
        geometry(
            &desc(rows, cols, DType::F32, DType::F32, Affine::WeightBias),
            dir,
            true,
            true,
            &h,
        )
        .unwrap()
        .tier
    };
    use Direction::{Backward, Forward};
    assert_eq!(t(Forward, 1, 1000), Tier::Subwarp { group: 1 });
    assert_eq!(t(Forward, 33, 1000), Tier::Subwarp { group: 16 });
    assert_eq!(t(Forward, 128, 1000), Tier::Subwarp { group: 32 });
    assert_eq!(t(Forward, 132, 1000), Tier::Warp);
    assert_eq!(t(Forward, 1024, 1000), Tier::Warp);
    assert_eq!(t(Forward, 1028, 1000), Tier::Block { threads: 128 });
    assert_eq!(t(Forward, 16384, 1000), Tier::Block { threads: 512 });
    assert!(matches!(t(Forward, 16388, 1000), Tier::Split { .. }));
    assert_eq!(t(Backward, 512, 1000), Tier::Warp);
    assert_eq!(t(Backward, 516, 1000), Tier::Block { threads: 256 });
    assert_eq!(t(Backward, 8192, 1000), Tier::Block { threads: 512 });
    assert!(matches!(t(Backward, 8196, 1000), Tier::Split { .. }));
    // Few rows: a long row is split to fill the GPU; a short one is not.
    assert!(matches!(t(Forward, 8192, 4), Tier::Split { .. }));
    assert_eq!(t(Forward, 2048, 4), Tier::Block { threads: 128 });
    // D = 2^20 in f32: split into chunks that each fit one block.
    match t(Forward, 1 << 20, 16) {
        Tier::Split {
            chunk,
            splits,
            threads,
        } => {
            assert!(chunk * splits >= 1 << 20 && chunk <= 16384 && threads <= 512);
        }
        other => panic!("expected split, got {other:?}"),
    }
}

#[test]
fn sim_props_reach_the_split_tier_with_few_rows() {
    let s = DeviceProps::SIM;
    let d = desc(3, 4096, DType::F16, DType::F32, Affine::Weight);
    let f = plan_fwd(&d, &fwd_ptrs(&d, &s), &s).unwrap();
    assert_eq!(
        names(&f),
        [
            "warpnorm_layer_norm_fwd_f16_f32_split_stats_vec",
            "warpnorm_layer_norm_fwd_f16_f32_split_norm_vec"
        ]
    );
    assert_eq!(f.launches[0].grid[1], 2, "4096 columns in 2 chunks of 2048");
}

#[test]
fn alignment_selects_the_variant() {
    let h = DeviceProps::H200;
    let d = desc(64, 1000, DType::F32, DType::F32, Affine::WeightBias);
    let mut p = fwd_ptrs(&d, &h);
    p.x += 4;
    p.y += 4; // both one element off: still vector (congruent mod 16)
    assert!(plan_fwd(&d, &p, &h).unwrap().launches[0]
        .kernel
        .ends_with("_vec"));
    p.y -= 4; // x off, y aligned: scalar
    assert!(plan_fwd(&d, &p, &h).unwrap().launches[0]
        .kernel
        .ends_with("_scalar"));
    // Backward needs every row aligned: D = 1001 f32 rows are not.
    let d = desc(64, 1001, DType::F32, DType::F32, Affine::WeightBias);
    assert!(plan_bwd(&d, &bwd_ptrs(&d, &h), &h).unwrap().launches[0]
        .kernel
        .ends_with("_scalar"));
}

#[test]
fn over_two_to_the_31_elements_plans_with_64_bit_sizes() {
    let h = DeviceProps::H200;
    let d = desc(1 << 20, 4096, DType::BF16, DType::BF16, Affine::WeightBias); // 2^32 elements
    let f = plan_fwd(&d, &fwd_ptrs(&d, &h), &h).unwrap();
    let args = f.launches[0]
        .args
        .get::<warpnorm::abi::WnLayerNormFwdArgs>()
        .unwrap();
    assert_eq!(args.rows, 1 << 20);
    assert_eq!(args.cols, 4096);
    let b = plan_bwd(&d, &bwd_ptrs(&d, &h), &h).unwrap();
    assert_eq!(
        b.launches[0]
            .args
            .get::<warpnorm::abi::WnLayerNormBwdArgs>()
            .unwrap()
            .rows,
        1 << 20
    );
}

#[test]
fn empty_problems() {
    let h = DeviceProps::H200;
    // M = 0: nothing forward; backward only writes zero dgamma/dbeta.
    let d = desc(0, 8, DType::F32, DType::F32, Affine::WeightBias);
    assert!(plan_fwd(&d, &fwd_ptrs(&d, &h), &h)
        .unwrap()
        .launches
        .is_empty());
    let b = plan_bwd(&d, &bwd_ptrs(&d, &h), &h).unwrap();
    assert_eq!(names(&b), ["warpnorm_layer_norm_bwd_f32_finalize"]);
    // M = 0 without affine: nothing at all.
    let d = desc(0, 8, DType::F32, DType::F32, Affine::None);
    assert!(plan_bwd(&d, &bwd_ptrs(&d, &h), &h)
        .unwrap()
        .launches
        .is_empty());
    // D = 0: forward still writes mean/rstd; backward has nothing to write.
    let d = desc(2, 0, DType::F32, DType::F32, Affine::WeightBias);
    assert_eq!(
        plan_fwd(&d, &fwd_ptrs(&d, &h), &h).unwrap().launches.len(),
        1
    );
    assert!(plan_bwd(&d, &bwd_ptrs(&d, &h), &h)
        .unwrap()
        .launches
        .is_empty());
}

#[test]
fn workspace_covers_every_variant() {
    for props in [DeviceProps::H200, DeviceProps::SIM, DeviceProps::T4] {
        for cols in [1usize, 100, 1000, 5000, 20000, 1 << 20] {
            for rows in [1usize, 3, 1000] {
                let d = desc(rows, cols, DType::F16, DType::F32, Affine::WeightBias);
                for dir in [Direction::Forward, Direction::Backward] {
                    let ws = workspace_bytes(&d, dir, &props).unwrap() as u64;
                    for (vec, aligned) in [(true, true), (true, false), (false, true)] {
                        let g = geometry(&d, dir, vec, aligned, &props).unwrap();
                        assert!(g.workspace_bytes <= ws, "{cols}x{rows} {dir:?}");
                    }
                }
            }
        }
    }
}

fn fwd_err(d: &LayerNormDesc, edit: impl FnOnce(&mut FwdPtrs)) -> Error {
    let h = DeviceProps::H200;
    let mut p = fwd_ptrs(d, &h);
    edit(&mut p);
    plan_fwd(d, &p, &h).unwrap_err()
}

fn bwd_err(d: &LayerNormDesc, edit: impl FnOnce(&mut BwdPtrs)) -> Error {
    let h = DeviceProps::H200;
    let mut p = bwd_ptrs(d, &h);
    edit(&mut p);
    plan_bwd(d, &p, &h).unwrap_err()
}

#[test]
fn bad_inputs_return_the_right_error() {
    let d = desc(4, 5000, DType::F16, DType::F32, Affine::WeightBias);
    let few = desc(1, 8192, DType::F32, DType::F32, Affine::WeightBias); // split: needs workspace
    assert!(matches!(
        fwd_err(&d, |p| p.x += 1),
        Error::Alignment { required: 2, .. }
    ));
    assert!(matches!(fwd_err(&d, |p| p.y += 1), Error::Alignment { .. }));
    assert!(matches!(
        fwd_err(&d, |p| p.gamma = Some(G + 2)),
        Error::Alignment { required: 4, .. }
    ));
    assert!(matches!(
        fwd_err(&d, |p| p.mean += 2),
        Error::Alignment { required: 4, .. }
    ));
    assert!(matches!(
        fwd_err(&d, |p| p.x = 0),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        fwd_err(&d, |p| p.gamma = None),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        fwd_err(&d, |p| p.beta = None),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        fwd_err(&d, |p| p.x = u64::MAX - 15),
        Error::Overflow(_)
    ));
    let nb = desc(4, 5000, DType::F16, DType::F32, Affine::Weight);
    assert!(matches!(
        fwd_err(&nb, |p| p.beta = Some(B)),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        fwd_err(&few, |p| p.workspace_bytes -= 1),
        Error::Length { .. }
    ));
    assert!(matches!(
        fwd_err(&few, |p| p.workspace += 8),
        Error::Alignment { required: 16, .. }
    ));
    assert!(matches!(
        bwd_err(&d, |p| p.workspace_bytes = 0),
        Error::Length { .. }
    ));
    assert!(matches!(
        bwd_err(&d, |p| p.dy += 1),
        Error::Alignment { .. }
    ));
    assert!(matches!(
        bwd_err(&d, |p| p.dgamma = None),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        bwd_err(&d, |p| p.dbeta = None),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        bwd_err(&d, |p| p.gamma = None),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        bwd_err(&d, |p| p.rstd = 0),
        Error::InvalidArgument { .. }
    ));
    // Descriptions.
    let e = LayerNormDesc::from_rows(4, 8, DType::BF16, DType::F16, Affine::WeightBias, 1e-5);
    assert!(matches!(e, Err(Error::DType { .. })));
    for eps in [-1.0f32, f32::NAN, f32::INFINITY] {
        let e = LayerNormDesc::from_rows(4, 8, DType::F32, DType::F32, Affine::None, eps);
        assert!(matches!(e, Err(Error::InvalidArgument { .. })), "eps {eps}");
    }
    let e = LayerNormDesc::new(&[4, 8], &[7], DType::F32, DType::F32, Affine::None, 1e-5);
    assert!(matches!(e, Err(Error::Shape { .. })));
    let e = LayerNormDesc::new(&[8], &[2, 8], DType::F32, DType::F32, Affine::None, 1e-5);
    assert!(matches!(e, Err(Error::Shape { .. })));
    let e = LayerNormDesc::new(&[4, 8], &[], DType::F32, DType::F32, Affine::None, 1e-5);
    assert!(matches!(e, Err(Error::Shape { .. })));
    let e = LayerNormDesc::new(
        &[usize::MAX, 2, 8],
        &[8],
        DType::F32,
        DType::F32,
        Affine::None,
        1e-5,
    );
    assert!(matches!(e, Err(Error::Overflow(_))));
    // A desc edited into an invalid state after construction is caught by the planner.
    let mut bad = d;
    bad.eps = -1.0;
    assert!(matches!(
        plan_fwd(&bad, &fwd_ptrs(&d, &DeviceProps::H200), &DeviceProps::H200),
        Err(Error::InvalidArgument { .. })
    ));
    // Error messages say what was expected and what was given.
    let msg = fwd_err(&few, |p| p.workspace_bytes = 10).to_string();
    assert!(msg.contains("expected") && msg.contains("got 10"), "{msg}");
}

#[test]
fn shapes_follow_normalized_shape() {
    let d = LayerNormDesc::new(
        &[2, 3, 4, 5],
        &[4, 5],
        DType::F32,
        DType::F32,
        Affine::None,
        1e-5,
    )
    .unwrap();
    assert_eq!((d.rows, d.cols), (6, 20));
}

#[test]
fn every_planned_kernel_is_exported() {
    if !warpnorm::kernels::BUILT {
        eprintln!("SKIP every_planned_kernel_is_exported: kernels not built");
        return;
    }
    let entries: Vec<&str> = warpnorm::kernels::all_entries().collect();
    for (t, p) in [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::F16, DType::F32),
        (DType::BF16, DType::BF16),
        (DType::BF16, DType::F32),
    ] {
        for cols in [3usize, 300, 3000, 30000] {
            for off in [0u64, t.size() as u64] {
                let d = desc(8, cols, t, p, Affine::WeightBias);
                let h = DeviceProps::H200;
                let mut fp = fwd_ptrs(&d, &h);
                fp.x += off;
                let mut bp = bwd_ptrs(&d, &h);
                bp.x += off;
                for plan in [
                    plan_fwd(&d, &fp, &h).unwrap(),
                    plan_bwd(&d, &bp, &h).unwrap(),
                ] {
                    for k in names(&plan) {
                        assert!(entries.contains(&k), "{k} is not exported");
                    }
                }
            }
        }
    }
}

#[test]
fn compute_capability_12_uses_the_smaller_backward_tiles() {
    // cuda/layer_norm.cu instantiates the backward vector kernels with 8 elements per thread
    // for sm_120+ (16 elsewhere); the planner must size rows to match.
    let cc12 = DeviceProps {
        compute_capability: (12, 0),
        ..DeviceProps::H200
    };
    let d = desc(1000, 8192, DType::F32, DType::F32, Affine::WeightBias);
    let on = |p: &DeviceProps| {
        geometry(&d, Direction::Backward, true, true, p)
            .unwrap()
            .tier
    };
    assert_eq!(on(&DeviceProps::H200), Tier::Block { threads: 512 });
    assert!(matches!(on(&cc12), Tier::Split { .. }));
    let d = desc(1000, 4096, DType::F32, DType::F32, Affine::WeightBias);
    let g = geometry(&d, Direction::Backward, true, true, &cc12).unwrap();
    assert_eq!(g.tier, Tier::Block { threads: 512 });
}
