//! LayerNorm planning, pure Rust (no GPU, no simulator): tier choice and launch geometry for
//! the H200 and the simulator's GPU, workspace sizes, and every bad-input path (each returns
//! the right `Error` variant; a rejected call plans nothing, so nothing can be launched).

use crate::support::DTYPE_PAIRS;
use warpnorm::abi::WnLayerNormFwdArgs;
use warpnorm::layer_norm::plan::{geometry, nested_first_grid, wide_elems, Tier};
use warpnorm::layer_norm::{
    plan_backward, plan_forward, workspace_bytes, Affine, BackwardPtrs, Direction, ForwardPtrs,
    LayerNormDesc,
};
use warpnorm::occupancy::resident_blocks_of;
use warpnorm::{DType, DeviceProps, Error, Plan};

// Buffers 64 GiB apart: no tensor planned here overlaps the next one.
const X: u64 = 0x10_0000_0000;
const Y: u64 = 0x20_0000_0000;
const DY: u64 = 0x30_0000_0000;
const G: u64 = 0x40_0000_0000;
const B: u64 = 0x40_1000_0000;
const MEAN: u64 = 0x50_0000_0000;
const RSTD: u64 = 0x50_1000_0000;
const MEAN_LO: u64 = 0x50_2000_0000;
const DG: u64 = 0x60_0000_0000;
const DB: u64 = 0x60_1000_0000;
const WS: u64 = 0x70_0000_0000;

fn desc(rows: usize, cols: usize, t: DType, p: DType, affine: Affine) -> LayerNormDesc {
    LayerNormDesc::from_rows(rows, cols, t, p, affine, 1e-5).unwrap()
}

fn fwd_ptrs(d: &LayerNormDesc, props: &DeviceProps) -> ForwardPtrs {
    ForwardPtrs {
        x: X,
        y: Y,
        gamma: d.affine.has_weight().then_some(G),
        beta: d.affine.has_bias().then_some(B),
        mean: Some(MEAN),
        rstd: Some(RSTD),
        mean_lo: Some(MEAN_LO),
        workspace: WS,
        workspace_bytes: workspace_bytes(d, Direction::Forward, props).unwrap() as u64,
    }
}

fn bwd_ptrs(d: &LayerNormDesc, props: &DeviceProps) -> BackwardPtrs {
    BackwardPtrs {
        x: X,
        dy: DY,
        dx: Y,
        gamma: d.affine.has_weight().then_some(G),
        mean: MEAN,
        rstd: RSTD,
        mean_lo: Some(MEAN_LO),
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
        let f = plan_forward(&d, &fwd_ptrs(&d, &h), &h).unwrap();
        let b = plan_backward(&d, &bwd_ptrs(&d, &h), &h).unwrap();
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
        // Persistent grids of one wave: never more blocks than are resident at once.
        for l in f.launches.iter().chain(&b.launches) {
            if l.kernel.ends_with("finalize") {
                continue;
            }
            let occ = resident_blocks_of(
                &l.kernel,
                l.threads_per_block() as u32,
                l.shared_mem_bytes,
                &h,
            );
            assert!(l.blocks() <= (h.sm_count * occ) as u64, "{}", l.kernel);
        }
    }
    // Exact launch geometry of the most common case, D = 768 bf16 forward: one warp per row,
    // 4 rows per 128-thread block, one wave of blocks (132 SMs x the kernel's occupancy).
    let d = desc(rows, 768, DType::BF16, DType::BF16, Affine::WeightBias);
    let f = plan_forward(&d, &fwd_ptrs(&d, &h), &h).unwrap();
    assert_eq!(f.launches.len(), 1);
    assert_eq!(f.launches[0].block, [128, 1, 1]);
    let fwd_occ = resident_blocks_of("warpnorm_layer_norm_fwd_bf16_bf16_warp_vec", 128, 0, &h);
    assert_eq!(f.launches[0].grid, [132 * fwd_occ, 1, 1]);
    // Backward D = 768: four rows at a time per 512-thread block (a 128-thread team each),
    // teams summed in shared memory (4 x 768 floats); one wave of blocks: 132 x occupancy,
    // unless the partial-traffic rule (>= ceil(64 / 6) = 11 rows per bf16 block) asks for fewer.
    let b = plan_backward(&d, &bwd_ptrs(&d, &h), &h).unwrap();
    assert_eq!(b.launches[0].block, [128, 4, 1]);
    assert_eq!(b.launches[0].shared_mem_bytes, 4 * 768 * 4);
    let occ = resident_blocks_of(
        "warpnorm_layer_norm_bwd_bf16_bf16_block_vec",
        512,
        4 * 768 * 4,
        &h,
    );
    let expect = (132 * occ).min(rows as u32 / 11);
    assert_eq!(b.launches[0].grid, [expect, 1, 1]);
    assert_eq!(b.launches[1].grid, [768 / 32, 1, 1]);
    let fin = b.launches[1]
        .args
        .get::<warpnorm::abi::WnLayerNormFinalizeArgs>()
        .unwrap();
    assert_eq!(fin.part_rows, expect as i64);
    assert_eq!(fin.part_stride, 768);
    // The partial rows: 8 bytes per column per block, one wave of blocks at 16384 rows,
    // within 1/64 of the minimum 6 bytes per element (bf16) - inside the 2 % traffic target.
    assert!(8.0 * expect as f64 <= 6.0 * rows as f64 / 64.0);
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
    // Beyond the block tier, the wide tier up to 2 x 16 elements per thread.
    assert_eq!(t(Backward, 8196, 1000), Tier::Wide { threads: 512 });
    assert_eq!(t(Backward, 16384, 1000), Tier::Wide { threads: 512 });
    assert!(matches!(t(Backward, 16388, 1000), Tier::Split { .. }));
    assert!(matches!(t(Backward, 12288, 100), Tier::Split { .. }));
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
    let s = DeviceProps {
        cooperative_launch: false,
        ..DeviceProps::SIM
    };
    let d = desc(3, 4096, DType::F16, DType::F32, Affine::Weight);
    let f = plan_forward(&d, &fwd_ptrs(&d, &s), &s).unwrap();
    assert_eq!(
        names(&f),
        [
            "warpnorm_layer_norm_fwd_f16_f32_split_stats_vec",
            "warpnorm_layer_norm_fwd_f16_f32_split_norm_vec"
        ]
    );
    assert_eq!(f.launches[0].grid[1], 2, "4096 columns in 2 chunks of 2048");
    // With cooperative launches (SIM has them), the same chunks in one launch - where the
    // build has SIM's sm_80 figures (nvcc present; without them co-residency cannot be shown
    // and the two launches stay).
    let s = DeviceProps::SIM;
    let f = plan_forward(&d, &fwd_ptrs(&d, &s), &s).unwrap();
    if !warpnorm::kernels::RESOURCES.iter().any(|r| r.arch == 80) {
        assert_eq!(f.launches.len(), 2, "{f}");
        return;
    }
    assert_eq!(
        names(&f),
        ["warpnorm_layer_norm_fwd_f16_f32_split_coop_vec"]
    );
    let l = &f.launches[0];
    assert!(l.cooperative);
    assert_eq!(l.args.get::<WnLayerNormFwdArgs>().unwrap().splits, 2);
}

/// The forward split tier's cooperative pass: chosen where every chunk of every row fits in
/// the shared memory of one wave - on an H100 and an H200, 4 rows of 2^20 in every dtype pair,
/// plain and with the residual add (one launch, a grid no larger than the kernel's wave at its
/// dynamic shared memory, the fewest chunks per block, the partials after the barrier counts
/// in the workspace) - and not where they do not fit (4 rows of 2^22 f32: 64 MiB) or the device
/// has no cooperative launches (the two launches then).
#[test]
fn split_coop_pass_where_the_chunks_fit_on_chip() {
    use warpnorm::layer_norm::{plan_forward_residual, ResidualPtrs, SPLIT_BARRIER_BYTES};
    let have_figures = warpnorm::kernels::RESOURCES.iter().any(|r| r.arch == 90);
    for props in [DeviceProps::H100, DeviceProps::H200] {
        for (t, p) in DTYPE_PAIRS {
            let d = desc(4, 1 << 20, t, p, Affine::WeightBias);
            let fp = fwd_ptrs(&d, &props);
            let r = ResidualPtrs {
                residual: DY,
                bias: Some(DB),
                h: DG,
            };
            for (plan, res) in [
                (plan_forward(&d, &fp, &props).unwrap(), ""),
                (plan_forward_residual(&d, &fp, &r, &props).unwrap(), "res_"),
            ] {
                let ctx = format!("{t}/{p} {res}\n{plan}");
                if !have_figures {
                    // Without the build's figures co-residency cannot be shown: two launches.
                    assert_eq!(plan.launches.len(), 2, "{ctx}");
                    continue;
                }
                assert_eq!(plan.launches.len(), 1, "{ctx}");
                let l = &plan.launches[0];
                assert_eq!(
                    l.kernel,
                    format!("warpnorm_layer_norm_fwd_{t}_{p}_{res}split_coop_vec"),
                    "{ctx}"
                );
                assert!(l.cooperative, "{ctx}");
                let a = l.args.get::<WnLayerNormFwdArgs>().unwrap();
                assert_eq!(a.partials, WS + SPLIT_BARRIER_BYTES, "{ctx}");
                let items = (a.rows * a.splits) as u64;
                let per = items.div_ceil(l.blocks());
                let threads = l.block[0] as u64;
                let elems = (a.chunk as u64).div_ceil(threads);
                let k = resident_blocks_of(&l.kernel, l.block[0], l.shared_mem_bytes, &props);
                assert!(l.blocks() <= props.sm_count as u64 * k as u64, "{ctx}");
                assert!(
                    l.shared_mem_bytes <= props.max_shared_per_block_optin,
                    "{ctx}"
                );
                // Room for `per` chunks of the block's held elements and the row's partials.
                assert!(
                    u64::from(l.shared_mem_bytes) >= per * threads * elems * t.size() as u64,
                    "{ctx}"
                );
                // The fewest chunks per block: one fewer would not fit the wave.
                if per > 1 {
                    let smaller = l.shared_mem_bytes as u64
                        - (l.shared_mem_bytes as u64 - a.splits as u64 * 16) / per;
                    let k1 = resident_blocks_of(&l.kernel, l.block[0], smaller as u32, &props);
                    assert!(
                        props.sm_count as u64 * k1 as u64 * (per - 1) < items,
                        "{ctx}"
                    );
                }
                // The workspace holds the barrier counts and every chunk's partial.
                assert!(
                    fp.workspace_bytes >= SPLIT_BARRIER_BYTES + items * 16,
                    "{ctx}"
                );
            }
            // Without cooperative launches: the two launches.
            let two = DeviceProps {
                cooperative_launch: false,
                ..props
            };
            let plan = plan_forward(&d, &fwd_ptrs(&d, &two), &two).unwrap();
            assert_eq!(plan.launches.len(), 2, "{plan}");
            assert!(
                plan.launches[0].kernel.ends_with("_split_stats_vec"),
                "{plan}"
            );
        }
        // 64 MiB of f32 rows: beyond any GPU's shared memory, two launches.
        let d = desc(4, 1 << 22, DType::F32, DType::F32, Affine::WeightBias);
        let plan = plan_forward(&d, &fwd_ptrs(&d, &props), &props).unwrap();
        assert_eq!(plan.launches.len(), 2, "{plan}");
    }
}

#[test]
fn alignment_selects_the_variant() {
    let h = DeviceProps::H200;
    let d = desc(64, 1000, DType::F32, DType::F32, Affine::WeightBias);
    let mut p = fwd_ptrs(&d, &h);
    p.x += 4;
    p.y += 4; // both one element off: still vector (congruent mod 16)
    assert!(plan_forward(&d, &p, &h).unwrap().launches[0]
        .kernel
        .ends_with("_vec"));
    p.y -= 4; // x off, y aligned: scalar
    assert!(plan_forward(&d, &p, &h).unwrap().launches[0]
        .kernel
        .ends_with("_scalar"));
    // Backward: x, dy, dx congruent mod 16 bytes take the vector variant for any D (rows of
    // D = 1001 f32 have four different heads), also all one element off; else scalar.
    let d = desc(64, 1001, DType::F32, DType::F32, Affine::WeightBias);
    let mut p = bwd_ptrs(&d, &h);
    assert!(plan_backward(&d, &p, &h).unwrap().launches[0]
        .kernel
        .ends_with("_vec"));
    p.x += 4;
    p.dy += 4;
    p.dx += 4;
    assert!(plan_backward(&d, &p, &h).unwrap().launches[0]
        .kernel
        .ends_with("_vec"));
    p.dx -= 4;
    assert!(plan_backward(&d, &p, &h).unwrap().launches[0]
        .kernel
        .ends_with("_scalar"));
}

#[test]
fn mixed_pairs_align_to_their_8_byte_activation_access() {
    // f16/bf16 activations with f32 parameters move 4-element packs (8-byte activation and
    // 16-byte parameter accesses): pointers congruent mod 8 bytes take the vector variant.
    let h = DeviceProps::H200;
    let kernel = |t: DType, p: DType, dx: u64, dy: u64| {
        let d = desc(64, 1000, t, p, Affine::WeightBias);
        let mut ptrs = fwd_ptrs(&d, &h);
        ptrs.x += dx;
        ptrs.y += dy;
        let f = plan_forward(&d, &ptrs, &h).unwrap();
        let d = desc(64, 1001, t, p, Affine::WeightBias);
        let mut ptrs = bwd_ptrs(&d, &h);
        ptrs.x += dx;
        ptrs.dy += dx;
        ptrs.dx += dy;
        let b = plan_backward(&d, &ptrs, &h).unwrap();
        let variant = |k: &str| k.rsplit('_').next().unwrap().to_string();
        (
            variant(&f.launches[0].kernel),
            variant(&b.launches[0].kernel),
        )
    };
    let vec = ("vec".to_string(), "vec".to_string());
    let scalar = ("scalar".to_string(), "scalar".to_string());
    for t in [DType::F16, DType::BF16] {
        // 8 bytes apart: congruent mod 8, not mod 16.
        assert_eq!(kernel(t, DType::F32, 8, 0), vec, "{t}/f32");
        assert_eq!(kernel(t, t, 8, 0), scalar, "{t}/{t}");
        // One element off, both: vector for either pair; x alone: scalar.
        assert_eq!(kernel(t, DType::F32, 2, 2), vec, "{t}/f32");
        assert_eq!(kernel(t, DType::F32, 2, 0), scalar, "{t}/f32");
    }
    // Tiers cover the same elements per thread, in 4-element packs: forward subwarp up to
    // D = 32 x 4, warp up to 1024; backward warp up to 512.
    let t = |dir, cols: usize| {
        geometry(
            &desc(1000, cols, DType::BF16, DType::F32, Affine::WeightBias),
            dir,
            true,
            true,
            &h,
        )
        .unwrap()
        .tier
    };
    use Direction::{Backward, Forward};
    assert_eq!(t(Forward, 128), Tier::Subwarp { group: 32 });
    assert_eq!(t(Forward, 132), Tier::Warp);
    assert_eq!(t(Forward, 1024), Tier::Warp);
    assert_eq!(t(Forward, 1028), Tier::Block { threads: 128 });
    assert_eq!(t(Backward, 512), Tier::Warp);
    assert!(matches!(t(Backward, 516), Tier::Block { .. }));
    assert_eq!(t(Backward, 8192), Tier::Block { threads: 512 });
    assert_eq!(t(Backward, 8196), Tier::Wide { threads: 512 });
    assert_eq!(t(Backward, 16384), Tier::Wide { threads: 512 });
    assert!(matches!(t(Backward, 16388), Tier::Split { .. }));
}

#[test]
fn over_two_to_the_31_elements_plans_with_64_bit_sizes() {
    let h = DeviceProps::H200;
    let d = desc(1 << 20, 4096, DType::BF16, DType::BF16, Affine::WeightBias); // 2^32 elements
    let f = plan_forward(&d, &fwd_ptrs(&d, &h), &h).unwrap();
    let args = f.launches[0]
        .args
        .get::<warpnorm::abi::WnLayerNormFwdArgs>()
        .unwrap();
    assert_eq!(args.rows, 1 << 20);
    assert_eq!(args.cols, 4096);
    let b = plan_backward(&d, &bwd_ptrs(&d, &h), &h).unwrap();
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
    assert!(plan_forward(&d, &fwd_ptrs(&d, &h), &h)
        .unwrap()
        .launches
        .is_empty());
    let b = plan_backward(&d, &bwd_ptrs(&d, &h), &h).unwrap();
    assert_eq!(names(&b), ["warpnorm_layer_norm_bwd_f32_finalize"]);
    // M = 0 without affine: nothing at all.
    let d = desc(0, 8, DType::F32, DType::F32, Affine::None);
    assert!(plan_backward(&d, &bwd_ptrs(&d, &h), &h)
        .unwrap()
        .launches
        .is_empty());
    // D = 0: forward still writes mean/rstd; backward has nothing to write.
    let d = desc(2, 0, DType::F32, DType::F32, Affine::WeightBias);
    assert_eq!(
        plan_forward(&d, &fwd_ptrs(&d, &h), &h)
            .unwrap()
            .launches
            .len(),
        1
    );
    assert!(plan_backward(&d, &bwd_ptrs(&d, &h), &h)
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

fn fwd_err(d: &LayerNormDesc, edit: impl FnOnce(&mut ForwardPtrs)) -> Error {
    let h = DeviceProps::H200;
    let mut p = fwd_ptrs(d, &h);
    edit(&mut p);
    plan_forward(d, &p, &h).unwrap_err()
}

fn bwd_err(d: &LayerNormDesc, edit: impl FnOnce(&mut BackwardPtrs)) -> Error {
    let h = DeviceProps::H200;
    let mut p = bwd_ptrs(d, &h);
    edit(&mut p);
    plan_backward(d, &p, &h).unwrap_err()
}

/// A short workspace is reported in bytes, with the number `workspace_bytes` returns (the one
/// callers size it by); outputs overlapping other buffers are rejected, except in place.
#[test]
fn workspace_errors_name_the_queried_bytes_and_overlaps_are_rejected() {
    let h = DeviceProps::H200;
    for (d, dir) in [
        (
            desc(4, 65536, DType::F32, DType::F32, Affine::WeightBias),
            Direction::Forward,
        ),
        (
            desc(64, 768, DType::BF16, DType::F32, Affine::WeightBias),
            Direction::Backward,
        ),
    ] {
        let need = workspace_bytes(&d, dir, &h).unwrap();
        assert!(need > 0, "{d:?}");
        let e = match dir {
            Direction::Forward => fwd_err(&d, |p| p.workspace_bytes = 0),
            Direction::Backward => bwd_err(&d, |p| p.workspace_bytes = 0),
        };
        assert!(
            matches!(e, Error::Workspace { needed, given: 0 } if needed == need),
            "{e} (the query says {need} bytes)"
        );
        assert_eq!(
            e.to_string(),
            format!("workspace too small: the call needs at least {need} bytes, got 0")
        );
    }
    let d = desc(64, 768, DType::F32, DType::F32, Affine::WeightBias);
    let overlap = |e: Error| matches!(e, Error::Overlap { .. });
    assert!(overlap(fwd_err(&d, |p| p.rstd = p.mean)));
    assert!(overlap(fwd_err(&d, |p| p.rstd = p.mean.map(|m| m + 4))));
    assert!(overlap(fwd_err(&d, |p| p.y = p.x + 4)));
    assert!(overlap(fwd_err(&d, |p| p.mean = Some(p.x))));
    assert!(overlap(fwd_err(&d, |p| p.mean_lo = p.rstd.map(|r| r + 8))));
    assert!(overlap(bwd_err(&d, |p| p.mean_lo = Some(p.dx))));
    assert!(overlap(fwd_err(&d, |p| p.y = p.gamma.unwrap())));
    assert!(overlap(bwd_err(&d, |p| p.dx = p.x)));
    assert!(overlap(bwd_err(&d, |p| p.dgamma = p.dbeta)));
    assert!(overlap(bwd_err(&d, |p| p.dbeta = Some(p.workspace))));
    // In place: y == x forward, dx == dy backward (the same range exactly).
    let mut p = fwd_ptrs(&d, &h);
    p.y = p.x;
    plan_forward(&d, &p, &h).unwrap();
    let mut p = bwd_ptrs(&d, &h);
    p.dx = p.dy;
    plan_backward(&d, &p, &h).unwrap();
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
        fwd_err(&d, |p| p.mean = p.mean.map(|m| m + 2)),
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
        Error::Workspace { .. }
    ));
    assert!(matches!(
        fwd_err(&few, |p| p.workspace += 8),
        Error::Alignment { required: 16, .. }
    ));
    assert!(matches!(
        bwd_err(&d, |p| p.workspace_bytes = 0),
        Error::Workspace { .. }
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
    // mean_lo: optional both ways, checked like mean when given.
    assert!(matches!(
        fwd_err(&d, |p| p.mean_lo = Some(MEAN_LO + 2)),
        Error::Alignment { required: 4, .. }
    ));
    assert!(matches!(
        bwd_err(&d, |p| p.mean_lo = Some(MEAN_LO + 2)),
        Error::Alignment { required: 4, .. }
    ));
    assert!(matches!(
        bwd_err(&d, |p| p.mean_lo = Some(0)),
        Error::InvalidArgument { .. }
    ));
    let h = DeviceProps::H200;
    let mut p = fwd_ptrs(&d, &h);
    p.mean_lo = None;
    let a: warpnorm::abi::WnLayerNormFwdArgs = plan_forward(&d, &p, &h).unwrap().launches[0]
        .args
        .get()
        .unwrap();
    assert_eq!((a.mean, a.mean_lo), (MEAN, 0));
    let mut p = bwd_ptrs(&d, &h);
    let a: warpnorm::abi::WnLayerNormBwdArgs = plan_backward(&d, &p, &h).unwrap().launches[0]
        .args
        .get()
        .unwrap();
    assert_eq!((a.mean, a.mean_lo), (MEAN, MEAN_LO));
    p.mean_lo = None;
    let a: warpnorm::abi::WnLayerNormBwdArgs = plan_backward(&d, &p, &h).unwrap().launches[0]
        .args
        .get()
        .unwrap();
    assert_eq!(a.mean_lo, 0);
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
        plan_forward(&bad, &fwd_ptrs(&d, &DeviceProps::H200), &DeviceProps::H200),
        Err(Error::InvalidArgument { .. })
    ));
    // Error messages say what was expected and what was given.
    let msg = fwd_err(&few, |p| p.workspace_bytes = 10).to_string();
    assert!(
        msg.contains("needs at least") && msg.contains("got 10"),
        "{msg}"
    );
    let msg = fwd_err(&few, |p| p.x += 2).to_string();
    assert!(msg.contains("not a multiple of 4 bytes"), "{msg}");
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
    for (t, p) in DTYPE_PAIRS {
        for cols in [3usize, 300, 3000, 30000] {
            for off in [0u64, t.size() as u64] {
                let d = desc(8, cols, t, p, Affine::WeightBias);
                let h = DeviceProps::H200;
                let mut fp = fwd_ptrs(&d, &h);
                fp.x += off;
                let mut bp = bwd_ptrs(&d, &h);
                bp.x += off;
                for plan in [
                    plan_forward(&d, &fp, &h).unwrap(),
                    plan_backward(&d, &bp, &h).unwrap(),
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
    // (cc 12: the wide tier's 2 x 8 elements per thread cover 8192 columns, not 8196.)
    assert_eq!(on(&cc12), Tier::Wide { threads: 512 });
    let d = desc(1000, 8196, DType::F32, DType::F32, Affine::WeightBias);
    let g = geometry(&d, Direction::Backward, true, true, &cc12).unwrap();
    assert!(matches!(g.tier, Tier::Split { .. }));
    let d = desc(1000, 4096, DType::F32, DType::F32, Affine::WeightBias);
    let g = geometry(&d, Direction::Backward, true, true, &cc12).unwrap();
    assert_eq!(g.tier, Tier::Block { threads: 512 });
}

/// Rows per grid-stride step of one block of a backward launch (module docs of the planner).
fn bwd_unit(l: &warpnorm::Launch) -> u64 {
    let a = l.args.get::<warpnorm::abi::WnLayerNormBwdArgs>().unwrap();
    if l.kernel.contains("_subwarp_") || l.kernel.contains("_warp_") {
        (l.block[0] / a.group) as u64
    } else {
        l.block[1] as u64
    }
}

#[test]
fn backward_grids_follow_the_rules() {
    // For every device preset, dtype, odd and even D, and M: the grid is one wave
    // (occupancy), has >= ceil(64 / 3s) rows per block (partial traffic <= 1/8 of the
    // minimum) unless one block, and gives every team a single head offset.
    for props in [
        DeviceProps::H200,
        DeviceProps::A100,
        DeviceProps::T4,
        DeviceProps::SIM,
    ] {
        for (t, p) in [(DType::F32, DType::F32), (DType::BF16, DType::BF16)] {
            let s = t.size() as u64;
            let v = 16 / s;
            let r_min = 64u64.div_ceil(3 * s);
            for cols in [7usize, 33, 768, 1000, 1025, 4096, 5000, 8192, 16385] {
                for rows in [1usize, 5, 50, 1000, 16384] {
                    for off in [0u64, s] {
                        let d = desc(rows, cols, t, p, Affine::WeightBias);
                        let mut ptrs = bwd_ptrs(&d, &props);
                        ptrs.x += off;
                        ptrs.dy += off;
                        ptrs.dx += off;
                        let plan = plan_backward(&d, &ptrs, &props).unwrap();
                        let ctx = format!("{props:?} {t} {rows}x{cols} +{off}\n{plan}");
                        let main = plan
                            .launches
                            .iter()
                            .find(|l| !l.kernel.contains("split_sums"));
                        let l = main.unwrap();
                        assert!(l.kernel.ends_with("_vec"), "{ctx}");
                        let g = l.grid[0] as u64;
                        let unit = bwd_unit(l);
                        let (rows, cols) = (rows as u64, cols as u64);
                        // Shared memory: the teams' dgamma/dbeta (teams * segment floats); the
                        // wide tier's slots (dgamma, dbeta: 2 arrays of its elements per thread
                        // for 512 threads).
                        let a = l.args.get::<warpnorm::abi::WnLayerNormBwdArgs>().unwrap();
                        let seg = if l.kernel.contains("split") {
                            a.chunk as u64
                        } else {
                            cols
                        };
                        let want = if l.kernel.contains("_wide_") {
                            2 * 512 * wide_elems(t, &props) * 4
                        } else {
                            unit * seg * 4
                        };
                        assert_eq!(l.shared_mem_bytes as u64, want, "{ctx}");
                        // Head offsets: rows r and r + k have the same head iff k is a multiple
                        // of the period; each team's rows are r0 + j * g * unit.
                        let period = if (cols * s).is_multiple_of(16) {
                            1
                        } else {
                            v / gcd(cols, v)
                        };
                        assert!(
                            g * unit >= rows || (g * unit).is_multiple_of(period),
                            "{ctx}"
                        );
                        // One wave, unless the head rule needs a few more blocks.
                        let occ = plan
                            .launches
                            .iter()
                            .filter(|k| !k.kernel.ends_with("finalize"))
                            .map(|k| {
                                resident_blocks_of(
                                    &k.kernel,
                                    k.threads_per_block() as u32,
                                    k.shared_mem_bytes,
                                    &props,
                                ) as u64
                            })
                            .min()
                            .unwrap();
                        let one_wave = props.sm_count as u64 * occ;
                        let q = period / gcd(unit, period);
                        assert!(l.blocks() <= one_wave.max(q * l.grid[1] as u64), "{ctx}");
                        // Partial rows: at least r_min rows per block (so 8 bytes per column
                        // per block stay within 1/8 of the 3s per element), unless one block,
                        // or the head rule's smallest grid.
                        let head_min = q.min(rows.div_ceil(unit));
                        assert!(g == 1 || rows / g >= r_min || g == head_min, "{ctx}");
                        if g > 1 && rows / g >= r_min {
                            assert!(8 * 8 * g <= 3 * s * rows, "{ctx}");
                        }
                        // One block writes dgamma/dbeta itself.
                        let fin = plan.launches.last().unwrap().kernel.ends_with("finalize");
                        assert_eq!(fin, g > 1, "{ctx}");
                        assert_eq!(a.dgamma, if g == 1 { DG } else { 0 }, "{ctx}");
                        if fin {
                            let f = plan.launches.last().unwrap();
                            let fa = f
                                .args
                                .get::<warpnorm::abi::WnLayerNormFinalizeArgs>()
                                .unwrap();
                            assert_eq!(fa.part_rows as u64, g, "{ctx}");
                            assert!((fa.part_stride as u64).is_multiple_of(8), "{ctx}");
                            assert!(fa.part_stride as u64 >= cols, "{ctx}");
                        }
                    }
                }
            }
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// LayerNorm's plain block backward of the mixed pairs (16-bit activations, f32 parameters;
/// vector variant) sums dbeta in the dy sums' shared-memory slots (`kDbInSlots` in
/// cuda/layer_norm.cu): its launches get 16 floats of each of 512 threads (8 on compute
/// capability 12), or the team reduction's shared memory where that is more, with or without
/// parameters. The other pairs, the scalar variant, the warp tier and RMSNorm keep the team
/// reduction's alone.
#[test]
fn mixed_pair_block_backward_gets_the_dbeta_slots() {
    use warpnorm::abi::{WN_LN_BWD_THREAD_ELEMS, WN_LN_BWD_THREAD_ELEMS_CC12, WN_LN_MAX_BLOCK};
    let cc12 = DeviceProps {
        compute_capability: (12, 0),
        ..DeviceProps::H200
    };
    let mut checked = 0;
    for (props, elems) in [
        (DeviceProps::H200, WN_LN_BWD_THREAD_ELEMS),
        (DeviceProps::H100, WN_LN_BWD_THREAD_ELEMS),
        (cc12, WN_LN_BWD_THREAD_ELEMS_CC12),
    ] {
        let slots = WN_LN_MAX_BLOCK * elems * 4;
        for (t, p) in [
            (DType::BF16, DType::F32),
            (DType::F16, DType::F32),
            (DType::BF16, DType::BF16),
            (DType::F16, DType::F16),
            (DType::F32, DType::F32),
        ] {
            let mixed = p.size() > t.size();
            for affine in [Affine::None, Affine::Weight, Affine::WeightBias] {
                for cols in [640usize, 1000, 1024, 4096] {
                    for misaligned in [false, true] {
                        let d = desc(4096, cols, t, p, affine);
                        let mut ptrs = bwd_ptrs(&d, &props);
                        if misaligned {
                            ptrs.x += t.size() as u64; // x one element off dy and dx: scalar
                        }
                        let b = plan_backward(&d, &ptrs, &props).unwrap();
                        let l = &b.launches[0];
                        let tier = if misaligned {
                            "_block_scalar"
                        } else {
                            "_block_vec"
                        };
                        assert!(l.kernel.ends_with(tier), "{}", l.kernel);
                        let team = if affine == Affine::None {
                            0
                        } else {
                            l.block[1] * cols as u32 * 4
                        };
                        let want = if mixed && !misaligned {
                            team.max(slots)
                        } else {
                            team
                        };
                        assert_eq!(
                            l.shared_mem_bytes, want,
                            "{} {cols} {affine:?} cc {:?}",
                            l.kernel, props.compute_capability
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 3 * 5 * 3 * 4 * 2);
    // The warp tier (rows of at most 512) is not affected: its rows' team reduction alone
    // (16 rows of 256 per 512-thread block: 16 KiB, half the slots').
    let d = desc(4096, 256, DType::BF16, DType::F32, Affine::WeightBias);
    let h = DeviceProps::H200;
    let l = &plan_backward(&d, &bwd_ptrs(&d, &h), &h).unwrap().launches[0];
    assert!(l.kernel.ends_with("_warp_vec"), "{}", l.kernel);
    assert_eq!(l.shared_mem_bytes, l.block[0] / 32 * 256 * 4);
    assert!(l.shared_mem_bytes < WN_LN_MAX_BLOCK * WN_LN_BWD_THREAD_ELEMS * 4);
}

/// The split tier's first pass (backward split_sums, forward split_stats) writes per-row chunk
/// sums and no partial rows, so its grid is one full wave of its own kernel (every row when
/// there are fewer): on sm_90 the vector split_sums keeps two 512-thread blocks per SM where
/// split_dx keeps one, and runs twice split_dx's blocks (before, it ran on split_dx's grid:
/// half a wave, half the loads in flight). The second pass keeps the partial-row rules.
#[test]
fn split_first_pass_runs_a_wave_of_its_own() {
    let mut doubled = 0;
    for props in [DeviceProps::H200, DeviceProps::H100, DeviceProps::A100] {
        let sms = props.sm_count as u64;
        for (t, p) in [
            (DType::F32, DType::F32),
            (DType::BF16, DType::BF16),
            (DType::F16, DType::F32),
        ] {
            // (Rows of 8193 to 16384 columns with at least as many rows as SMs take the wide
            // tier on these GPUs: wide_tier_where_its_shared_memory_fits.)
            for (rows, cols) in [(16384usize, 20000usize), (16384, 32768), (100, 16384)] {
                let d = desc(rows, cols, t, p, Affine::WeightBias);
                let plan = plan_backward(&d, &bwd_ptrs(&d, &props), &props).unwrap();
                let ctx = format!("{props:?} {t}/{p} {rows}x{cols}\n{plan}");
                let (sums, dx) = (&plan.launches[0], &plan.launches[1]);
                assert!(sums.kernel.ends_with("_split_sums_vec"), "{ctx}");
                assert!(dx.kernel.ends_with("_split_dx_vec"), "{ctx}");
                let splits = sums.grid[1] as u64;
                assert_eq!(splits, dx.grid[1] as u64, "{ctx}");
                let res = resident_blocks_of(&sums.kernel, sums.block[0], 0, &props) as u64;
                let wave = (res * sms / splits).max(1);
                let (gs, gd) = (sums.grid[0] as u64, dx.grid[0] as u64);
                // One wave of split_sums (or every row), nested in split_dx's grid: every
                // split_sums block's rows (r mod gs) are among one split_dx block's (r mod gd).
                assert!(gs >= gd, "{ctx}");
                if wave >= rows as u64 {
                    assert_eq!(gs, rows as u64, "{ctx}");
                } else {
                    assert!(gs <= wave.max(gd) && gs % gd == 0, "{ctx}");
                    assert!(gs + gd > wave, "a wave holds another multiple: {ctx}");
                }
                if props == DeviceProps::H200 && sums.grid[0] == 2 * dx.grid[0] {
                    doubled += 1;
                }
            }
        }
        // Forward: split_stats on a wave of its own too (the split tier with few rows, in its
        // two launches: without cooperative launches).
        let d = desc(4, 1 << 20, DType::BF16, DType::BF16, Affine::WeightBias);
        let props = DeviceProps {
            cooperative_launch: false,
            ..props
        };
        let plan = plan_forward(&d, &fwd_ptrs(&d, &props), &props).unwrap();
        let stats = &plan.launches[0];
        assert!(stats.kernel.ends_with("_split_stats_vec"), "{plan}");
        let res = resident_blocks_of(&stats.kernel, stats.block[0], 0, &props) as u64;
        let wave = (res * sms / stats.grid[1] as u64).max(1);
        let (gs, gn) = (stats.grid[0] as u64, plan.launches[1].grid[0] as u64);
        assert!(gs >= gn, "{plan}");
        if wave >= 4 {
            assert_eq!(gs, 4, "{plan}");
        } else {
            assert!(gs <= wave.max(gn) && gs % gn == 0, "{plan}");
        }
    }
    // Where the build has sm_90 figures (nvcc present), split_sums doubles on the H200.
    if warpnorm::kernels::RESOURCES.iter().any(|r| r.arch == 90) {
        assert!(doubled > 0, "split_sums never ran on twice split_dx's grid");
    }
}

/// nested_first_grid by hand: the H200's split_sums wave (2 blocks x 132 SMs / 2 chunks) over
/// split_dx's 66 blocks; waves that are not a multiple; one that holds every row; a wave
/// smaller than the second pass's grid; not the split tier (0).
#[test]
fn nested_first_grid_values() {
    assert_eq!(nested_first_grid(132, 66, 16384), 132);
    assert_eq!(nested_first_grid(150, 66, 16384), 132);
    assert_eq!(nested_first_grid(3072, 2048, 2049), 2049);
    assert_eq!(nested_first_grid(2500, 2048, 3000), 2048);
    assert_eq!(nested_first_grid(3072, 2048, 3000), 3000);
    assert_eq!(nested_first_grid(40, 66, 16384), 66);
    assert_eq!(nested_first_grid(0, 66, 16384), 66);
}

/// The wide backward tier (rows beyond the block tier's 8192 columns at 16 elements per thread)
/// keeps its dgamma/dbeta sums in 2 x 64 KiB of shared memory at 32 elements per thread: it
/// is planned where the device's opt-in shared memory holds them (H200, A100), with its
/// `wide` kernel, one 512-thread block per row, its slots' dynamic shared memory and at most
/// one block per SM, and reads x and dy once (one kernel and the finalize, where the split
/// tier has two kernels); not on a T4 (64 KiB), not for the scalar variant, not for f32 on
/// compute capability 10.x (whose wide kernels hold the block tier's 16 elements).
#[test]
fn wide_tier_where_its_shared_memory_fits() {
    let cc10 = DeviceProps {
        compute_capability: (10, 0),
        ..DeviceProps::H200
    };
    for (dtype, param_dtype) in [
        (DType::F32, DType::F32),
        (DType::BF16, DType::BF16),
        (DType::F16, DType::F32),
    ] {
        let d = desc(16384, 12288, dtype, param_dtype, Affine::WeightBias);
        for (props, wide) in [
            (DeviceProps::H200, true),
            (DeviceProps::A100, true),
            (DeviceProps::T4, false),
            (cc10, dtype != DType::F32),
        ] {
            let p = plan_backward(&d, &bwd_ptrs(&d, &props), &props).unwrap();
            let k = names(&p);
            let main = format!(
                "warpnorm_layer_norm_bwd_{}_{}_wide_vec",
                dtype.name(),
                param_dtype.name()
            );
            assert_eq!(k[0] == main, wide, "{props:?}: {k:?}");
            if wide {
                assert_eq!(k.len(), 2, "{k:?}");
                let l = &p.launches[0];
                assert_eq!(l.block, [512, 1, 1]);
                assert_eq!(l.shared_mem_bytes, 2 * 512 * 32 * 4, "two arrays of slots");
                assert!(u64::from(l.grid[0]) <= u64::from(props.sm_count));
            } else {
                assert!(k[0].contains("_split_sums_"), "{k:?}");
            }
        }
        // The scalar variant (dx one element off) has no wide kernels.
        let h = DeviceProps::H200;
        let mut p = bwd_ptrs(&d, &h);
        p.dx += dtype.size() as u64;
        let k = plan_backward(&d, &p, &h).unwrap();
        assert!(names(&k)[0].ends_with("_split_sums_scalar"), "{k}");
    }
}
