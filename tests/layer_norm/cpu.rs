//! The CPU reference on hand-computed cases from SEMANTICS.md and its error paths.

use warpnorm::cpu::layer_norm::{backward, forward};
use warpnorm::Error;

#[test]
fn hand_computed_values() {
    // var = 1e-6, eps = 1e-5: y = +-1e-3 / sqrt(1.1e-5) = +-0.30151134.
    let x = [1.0f64 - 1e-3, 1.0 + 1e-3];
    let f = forward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(1, 2, false, false, 1e-5),
        &x.map(|v| v as f32),
        None,
        None,
    )
    .unwrap();
    assert!((f.y[1] as f64 - 0.30151134).abs() < 2e-4, "{:?}", f.y);
    assert!((f.y[0] as f64 + 0.30151134).abs() < 2e-4, "{:?}", f.y);
    // Gamma/beta apply after normalizing: [1, 2, 4] -> mean 7/3, biased var 14/9.
    let g = [2.0f32, 2.0, 2.0];
    let b = [1.0f32, 1.0, 1.0];
    let f = forward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(1, 3, true, true, 0.0),
        &[1.0, 2.0, 4.0],
        Some(&g),
        Some(&b),
    )
    .unwrap();
    let expect = [-1.0690415f32, -0.2672612, 1.3363062].map(|v| 2.0 * v + 1.0);
    for (got, e) in f.y.iter().zip(expect) {
        assert!((got - e).abs() < 1e-5, "{:?} vs {expect:?}", f.y);
    }
    assert!((f.mean[0] - 7.0 / 3.0).abs() < 1e-6);
    // The saved pair is 7/3 to f64's precision: mean_lo = 7/3 - fl32(7/3), rounded to f32.
    let lo = 7.0f64 / 3.0 - f64::from(f.mean[0]);
    assert_eq!(f.mean_lo[0], lo as f32);
    assert!(
        f.mean_lo[0] != 0.0
            && (f64::from(f.mean[0]) + f64::from(f.mean_lo[0]) - 7.0 / 3.0).abs() < 1e-14
    );
    assert!((f.rstd[0] - (9.0f32 / 14.0).sqrt()).abs() < 1e-6);
    // Backward of a single row with gamma = 1: dx sums to 0 and is orthogonal to xhat.
    let dy = [0.3f32, -1.0, 0.5];
    let r = backward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(1, 3, true, true, 1e-5),
        &[1.0, 2.0, 4.0],
        &dy,
        (&f.mean, &f.rstd, Some(&f.mean_lo)),
        Some(&[1.0; 3]),
    )
    .unwrap();
    let s: f32 = r.dx.iter().sum();
    assert!(s.abs() < 1e-6);
    assert_eq!(r.dbeta.unwrap(), vec![0.3, -1.0, 0.5]);
}

#[test]
fn pytorch_special_rows() {
    // D = 0: mean 0, rstd NaN.
    let f = forward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(2, 0, false, false, 1e-5),
        &[],
        None,
        None,
    )
    .unwrap();
    assert_eq!(f.mean, vec![0.0, 0.0]);
    assert!(f.rstd.iter().all(|r| r.is_nan()));
    // [1e30, -1e30, 0, 0]: the f32 variance overflows, rstd = 0, y = 0.
    let f = forward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(1, 4, false, false, 1e-5),
        &[1e30, -1e30, 0.0, 0.0],
        None,
        None,
    )
    .unwrap();
    assert_eq!(f.rstd, vec![0.0]);
    assert_eq!(f.y, vec![0.0; 4]);
    // An Inf makes the mean NaN (as torch) and the row NaN.
    let f = forward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(1, 3, false, false, 1e-5),
        &[1.0, f32::INFINITY, 2.0],
        None,
        None,
    )
    .unwrap();
    assert!(f.mean[0].is_nan() && f.y.iter().all(|v| v.is_nan()));
    // fp16 +-60000 computes in wider precision: +-1 (within f16 rounding).
    let x = [half::f16::from_f32(60000.0), half::f16::from_f32(-60000.0)];
    let f = forward::<half::f16, half::f16>(
        &crate::support::ln_desc::<half::f16, half::f16>(1, 2, false, false, 1e-5),
        &x,
        None,
        None,
    )
    .unwrap();
    assert_eq!(f.y[0].to_f32(), 1.0);
    // M = 0: empty outputs, zero parameter gradients.
    let r = backward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(0, 8, true, true, 1e-5),
        &[],
        &[],
        (&[], &[], Some(&[])),
        Some(&[1.0; 8]),
    )
    .unwrap();
    assert_eq!(r.dgamma.unwrap(), vec![0.0; 8]);
    assert_eq!(r.dbeta.unwrap(), vec![0.0; 8]);
}

#[test]
fn bad_lengths_are_errors() {
    let e = forward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(2, 3, false, false, 1e-5),
        &[1.0; 5],
        None,
        None,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Length {
                expected: 6,
                given: 5,
                ..
            }
        ),
        "{e}"
    );
    let e = forward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(2, 3, true, false, 1e-5),
        &[1.0; 6],
        Some(&[1.0; 2]),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Length { .. }), "{e}");
    let e = forward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(2, 3, false, true, 1e-5),
        &[1.0; 6],
        None,
        Some(&[1.0; 3]),
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = backward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(2, 3, false, false, 1e-5),
        &[1.0; 6],
        &[1.0; 6],
        (&[0.0; 1], &[1.0; 2], None),
        None,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Length { .. }), "{e}");
    let e = backward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(2, 3, false, false, 1e-5),
        &[1.0; 6],
        &[1.0; 6],
        (&[0.0; 2], &[1.0; 2], Some(&[0.0; 3])),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Length { ref what, expected: 2, given: 3 } if what == "mean_lo"),
        "{e}"
    );
    let e = forward::<f32, f32>(
        &crate::support::ln_desc::<f32, f32>(usize::MAX, 2, false, false, 1e-5),
        &[],
        None,
        None,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Overflow(_)), "{e}");
}
