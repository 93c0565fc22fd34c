//! RMSNorm planning without a GPU: the kernels a plan names, the tiers (LayerNorm's, the same
//! geometry), and bad inputs rejected with Errors before any launch.

use warpnorm::layer_norm::{Affine, LayerNormDesc};
use warpnorm::rms_norm::{
    plan_backward, plan_forward, workspace_bytes, BackwardPtrs, Direction, ForwardPtrs, RmsNormDesc,
};
use warpnorm::{DType, DeviceProps, Error};

const P: DeviceProps = DeviceProps::H200;

fn fwd_ptrs(weight: bool) -> ForwardPtrs {
    ForwardPtrs {
        x: 0x1000_0000,
        y: 0x2000_0000,
        weight: weight.then_some(0x3000_0000),
        rstd: Some(0x4000_0000),
        workspace: 0x5000_0000,
        workspace_bytes: 1 << 24,
    }
}

fn bwd_ptrs(weight: bool) -> BackwardPtrs {
    BackwardPtrs {
        x: 0x1000_0000,
        dy: 0x2000_0000,
        dx: 0x6000_0000,
        weight: weight.then_some(0x3000_0000),
        rstd: 0x4000_0000,
        dweight: weight.then_some(0x3100_0000),
        workspace: 0x5000_0000,
        workspace_bytes: 1 << 24,
    }
}

/// RMSNorm plans are LayerNorm's (weight, no bias) with the RMSNorm kernels: same tiers and
/// blocks on every shape, the same workspace.
#[test]
fn same_tiers_as_layer_norm() {
    for &(rows, cols) in &[
        (4096, 7),
        (4096, 1024),
        (16384, 4096),
        (8, 65536),
        (3, 100_000),
    ] {
        for (t, p) in [
            (DType::F32, DType::F32),
            (DType::BF16, DType::F32),
            (DType::F16, DType::F16),
        ] {
            let rd = RmsNormDesc::from_rows(rows, cols, t, p, true, None).unwrap();
            let ld = LayerNormDesc::from_rows(rows, cols, t, p, Affine::Weight, rd.eps).unwrap();
            let rf = plan_forward(&rd, &fwd_ptrs(true), &P).unwrap();
            let lf = warpnorm::layer_norm::plan_forward(
                &ld,
                &warpnorm::layer_norm::ForwardPtrs {
                    x: 0x1000_0000,
                    y: 0x2000_0000,
                    gamma: Some(0x3000_0000),
                    beta: None,
                    mean: None,
                    rstd: Some(0x4000_0000),
                    mean_lo: None,
                    workspace: 0x5000_0000,
                    workspace_bytes: 1 << 24,
                },
                &P,
            )
            .unwrap();
            assert_eq!(rf.launches.len(), lf.launches.len());
            for (r, l) in rf.launches.iter().zip(&lf.launches) {
                assert!(r.kernel.starts_with("warpnorm_rms_norm_"), "{}", r.kernel);
                assert_eq!(r.kernel.replace("rms_norm", "layer_norm"), l.kernel);
                // Grids may be larger: they are sized by the RMSNorm kernels' own occupancy
                // (fewer registers without the mean).
                assert_eq!((r.block, r.shared_mem_bytes), (l.block, l.shared_mem_bytes));
                assert!(
                    r.grid[0] >= l.grid[0] && r.grid[1] == l.grid[1],
                    "{} {:?} {:?}",
                    r.kernel,
                    r.grid,
                    l.grid
                );
            }
            let rb = plan_backward(&rd, &bwd_ptrs(true), &P).unwrap();
            assert!(rb
                .launches
                .iter()
                .all(|l| l.kernel.starts_with("warpnorm_rms_norm_")));
            for dir in [Direction::Forward, Direction::Backward] {
                assert_eq!(
                    workspace_bytes(&rd, dir, &P).unwrap(),
                    warpnorm::layer_norm::workspace_bytes(&ld, dir, &P).unwrap()
                );
            }
        }
    }
}

#[test]
fn rejects_bad_inputs() {
    let d = RmsNormDesc::from_rows(64, 1024, DType::F32, DType::F32, true, None).unwrap();
    let inv = |r: warpnorm::Result<warpnorm::Plan>| matches!(r, Err(Error::InvalidArgument { .. }));
    // Descriptions.
    assert!(RmsNormDesc::from_rows(4, 4, DType::F16, DType::BF16, true, None).is_err());
    assert!(RmsNormDesc::from_rows(4, 4, DType::F32, DType::F32, true, Some(-1.0)).is_err());
    assert!(RmsNormDesc::from_rows(4, 4, DType::F32, DType::F32, true, Some(f32::NAN)).is_err());
    assert!(RmsNormDesc::from_rows(usize::MAX, 4, DType::F32, DType::F32, true, None).is_err());
    assert!(RmsNormDesc::new(&[2, 3, 5], &[4], DType::F32, DType::F32, true, None).is_err());
    assert!(RmsNormDesc::new(&[2, 3, 5], &[], DType::F32, DType::F32, true, None).is_err());
    let ok = RmsNormDesc::new(&[2, 3, 4, 5], &[4, 5], DType::F32, DType::F32, true, None).unwrap();
    assert_eq!((ok.rows, ok.cols), (6, 20));
    // Weight presence.
    assert!(inv(plan_forward(&d, &fwd_ptrs(false), &P)));
    let nw = RmsNormDesc { weight: false, ..d };
    assert!(inv(plan_forward(&nw, &fwd_ptrs(true), &P)));
    assert!(inv(plan_backward(
        &d,
        &BackwardPtrs {
            dweight: None,
            ..bwd_ptrs(true)
        },
        &P
    )));
    // Null, misaligned, overlapping buffers.
    assert!(plan_forward(
        &d,
        &ForwardPtrs {
            x: 0,
            ..fwd_ptrs(true)
        },
        &P
    )
    .is_err());
    assert!(plan_forward(
        &d,
        &ForwardPtrs {
            y: 0x2000_0002,
            ..fwd_ptrs(true)
        },
        &P
    )
    .is_err());
    assert!(plan_forward(
        &d,
        &ForwardPtrs {
            y: 0x3000_0000,
            ..fwd_ptrs(true)
        },
        &P
    )
    .is_err());
    assert!(plan_backward(
        &d,
        &BackwardPtrs {
            dx: 0x3100_0000,
            ..bwd_ptrs(true)
        },
        &P
    )
    .is_err());
    assert!(plan_backward(
        &d,
        &BackwardPtrs {
            rstd: 0,
            ..bwd_ptrs(true)
        },
        &P
    )
    .is_err());
    // A workspace too small for a split-tier plan.
    let split = RmsNormDesc::from_rows(2, 1 << 16, DType::F32, DType::F32, true, None).unwrap();
    let need = workspace_bytes(&split, Direction::Forward, &P).unwrap();
    assert!(need > 0);
    let short = ForwardPtrs {
        workspace_bytes: need as u64 - 16,
        ..fwd_ptrs(true)
    };
    assert!(plan_forward(&split, &short, &P).is_err());
    // In place is fine.
    assert!(plan_forward(
        &d,
        &ForwardPtrs {
            y: 0x1000_0000,
            ..fwd_ptrs(true)
        },
        &P
    )
    .is_ok());
    assert!(plan_backward(
        &d,
        &BackwardPtrs {
            dx: 0x2000_0000,
            ..bwd_ptrs(true)
        },
        &P
    )
    .is_ok());
}
