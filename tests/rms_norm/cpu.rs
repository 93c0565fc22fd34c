//! The CPU reference (`warpnorm::cpu::rms_norm`) against values worked out by hand and
//! PyTorch's (SEMANTICS.md), its backward against finite differences of its forward, and its
//! checks.

use warpnorm::cpu::rms_norm::{backward, forward, row_rstd};
use warpnorm::rms_norm::{RmsNormDesc, DEFAULT_EPS};
use warpnorm::{DType, Error};

fn desc(rows: usize, cols: usize, weight: bool, eps: Option<f32>) -> RmsNormDesc {
    RmsNormDesc::from_rows(rows, cols, DType::F32, DType::F32, weight, eps).unwrap()
}

#[test]
fn hand_values() {
    // [3, 4, 0, 0]: mean square 6.25, rstd 0.4 (eps 0).
    let f =
        forward::<f32, f32>(&desc(1, 4, false, Some(0.0)), &[3.0, 4.0, 0.0, 0.0], None).unwrap();
    assert_eq!(f.rstd, [0.4]);
    assert_eq!(f.y, [1.2, 1.6, 0.0, 0.0]);
    // With a weight.
    let w = [2.0f32, 0.5, 1.0, 1.0];
    let f = forward::<f32, f32>(
        &desc(1, 4, true, Some(0.0)),
        &[3.0, 4.0, 0.0, 0.0],
        Some(&w),
    )
    .unwrap();
    assert_eq!(f.y, [2.4, 0.8, 0.0, 0.0]);
    // eps None is 2^-23 for every dtype.
    assert_eq!(DEFAULT_EPS, 2f32.powi(-23));
    assert_eq!(desc(1, 4, false, None).eps, DEFAULT_EPS);
    let d16 = RmsNormDesc::from_rows(1, 4, DType::F16, DType::F16, false, None).unwrap();
    assert_eq!(d16.eps, DEFAULT_EPS);
    // A zero row gives zeros (rstd 1 / sqrt(eps)); an empty row rstd NaN.
    let f = forward::<f32, f32>(&desc(1, 3, false, None), &[0.0; 3], None).unwrap();
    assert_eq!(f.y, [0.0; 3]);
    assert_eq!(f.rstd[0], (1.0 / (DEFAULT_EPS as f64).sqrt()) as f32);
    assert!(row_rstd(&[], 1e-5).is_nan());
    // NaN anywhere: a NaN row. A mean square beyond f32: rstd 0, y 0.
    let f = forward::<f32, f32>(&desc(1, 3, false, None), &[1.0, f32::NAN, 2.0], None).unwrap();
    assert!(f.y.iter().all(|v| v.is_nan()));
    let f = forward::<f32, f32>(&desc(1, 2, false, None), &[1e30, -1e30], None).unwrap();
    assert_eq!((f.rstd[0], f.y.clone()), (0.0, vec![0.0, 0.0]));
}

/// PyTorch's f16 results (SEMANTICS.md): a row of 0.01s gives 0.99951, and
/// [60000, 60000, 1, 1] gives [1.414, 1.414, 2.35e-5, 2.35e-5].
#[test]
fn half_rows_as_pytorch() {
    use half::f16;
    let d = RmsNormDesc::from_rows(1, 4, DType::F16, DType::F16, false, None).unwrap();
    let x = [f16::from_f32(0.01); 4];
    let f = forward::<f16, f16>(&d, &x, None).unwrap();
    assert!(
        f.y.iter().all(|v| *v == f16::from_f32(0.99951)),
        "{:?}",
        f.y
    );
    let x = [60000.0f32, 60000.0, 1.0, 1.0].map(f16::from_f32);
    let f = forward::<f16, f16>(&d, &x, None).unwrap();
    assert_eq!(f.y[0], f16::from_f32(1.414));
    assert!((f.y[2].to_f64() - 2.35e-5).abs() < 1e-7);
}

/// dx and dweight against central differences of the f64 loss sum(dy * y).
#[test]
fn backward_matches_finite_differences() {
    let (m, d) = (3, 5);
    let x: Vec<f64> = (0..m * d)
        .map(|i| ((i * 7919) % 13) as f64 * 0.3 - 1.7)
        .collect();
    let dy: Vec<f64> = (0..m * d)
        .map(|i| ((i * 104729) % 11) as f64 * 0.2 - 1.0)
        .collect();
    let w: Vec<f64> = (0..d).map(|c| 0.5 + c as f64 * 0.25).collect();
    let eps = 1e-3f32;
    let loss = |x: &[f64], w: &[f64]| -> f64 {
        (0..m)
            .map(|r| {
                let row = &x[r * d..(r + 1) * d];
                let rs = row_rstd(row, eps);
                (0..d)
                    .map(|c| dy[r * d + c] * row[c] * rs * w[c])
                    .sum::<f64>()
            })
            .sum()
    };
    let desc = RmsNormDesc::from_rows(m, d, DType::F32, DType::F32, true, Some(eps)).unwrap();
    let (xf, dyf, wf): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        x.iter().map(|v| *v as f32).collect(),
        dy.iter().map(|v| *v as f32).collect(),
        w.iter().map(|v| *v as f32).collect(),
    );
    let f = forward::<f32, f32>(&desc, &xf, Some(&wf)).unwrap();
    let b = backward::<f32, f32>(&desc, &xf, &dyf, &f.rstd, Some(&wf)).unwrap();
    let h = 1e-6;
    for i in 0..m * d {
        let (mut xp, mut xm) = (x.clone(), x.clone());
        xp[i] += h;
        xm[i] -= h;
        let num = (loss(&xp, &w) - loss(&xm, &w)) / (2.0 * h);
        assert!(
            (b.dx[i] as f64 - num).abs() < 1e-4,
            "dx[{i}] {} vs {num}",
            b.dx[i]
        );
    }
    let dw = b.dweight.unwrap();
    for c in 0..d {
        let (mut wp, mut wm) = (w.clone(), w.clone());
        wp[c] += h;
        wm[c] -= h;
        let num = (loss(&x, &wp) - loss(&x, &wm)) / (2.0 * h);
        assert!(
            (dw[c] as f64 - num).abs() < 1e-4,
            "dweight[{c}] {} vs {num}",
            dw[c]
        );
    }
}

#[test]
fn rejects_bad_inputs() {
    let d = desc(2, 3, true, None);
    assert!(matches!(
        forward::<f32, f32>(&d, &[0.0; 6], None),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        forward::<f32, f32>(&d, &[0.0; 5], Some(&[1.0; 3])),
        Err(Error::Length { .. })
    ));
    assert!(matches!(
        forward::<f32, f32>(&d, &[0.0; 6], Some(&[1.0; 2])),
        Err(Error::Length { .. })
    ));
    assert!(matches!(
        backward::<f32, f32>(&d, &[0.0; 6], &[0.0; 6], &[1.0], Some(&[1.0; 3])),
        Err(Error::Length { .. })
    ));
    assert!(matches!(
        forward::<half::f16, f32>(&d, &[half::f16::ZERO; 6], Some(&[1.0; 3])),
        Err(Error::DType { .. })
    ));
    let nw = desc(2, 3, false, None);
    assert!(forward::<f32, f32>(&nw, &[0.0; 6], Some(&[1.0; 3])).is_err());
}
