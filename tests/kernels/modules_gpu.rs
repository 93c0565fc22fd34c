//! The module types on a GPU (or the emulated driver): sizes that cannot be allocated are
//! errors, never an abort (initial values are written on the device, so no host buffer grows
//! with a parameter's size).

use warpnorm::batch_norm::{BatchNorm, BatchNormConfig};
use warpnorm::layer_norm::{Affine, LayerNorm};
use warpnorm::Error;

#[test]
fn impossible_parameter_sizes_are_errors_not_aborts() {
    let Some(stream) = testkit::gpu::gpu_stream("impossible_parameter_sizes_are_errors_not_aborts")
    else {
        return;
    };
    // 2^33 f32 parameters (32 GiB each for gamma and beta) once aborted the process building a
    // host vector of initial values.
    let e = LayerNorm::<f32>::new(&stream, &[1 << 33], Affine::WeightBias, 1e-5)
        .err()
        .expect("32 GiB of gamma cannot be allocated");
    assert!(matches!(e, Error::Driver { .. }), "{e}");
    // Byte sizes beyond i64 are an overflow before anything is allocated.
    let e = LayerNorm::<f32>::new(&stream, &[1 << 62], Affine::WeightBias, 1e-5)
        .err()
        .expect("2^64 bytes");
    assert!(matches!(e, Error::Overflow(_)), "{e}");
    let e = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(1 << 40))
        .err()
        .expect("4 TiB of running statistics cannot be allocated");
    assert!(matches!(e, Error::Driver { .. }), "{e}");
    // The stream is still usable afterwards, and fresh modules hold PyTorch's initial values.
    let ln = LayerNorm::<half::bf16>::new(&stream, &[3], Affine::WeightBias, 1e-5).unwrap();
    let g = stream.clone_dtoh(ln.gamma().unwrap()).unwrap();
    let b = stream.clone_dtoh(ln.beta().unwrap()).unwrap();
    assert_eq!(
        (g, b),
        (vec![half::bf16::ONE; 3], vec![half::bf16::ZERO; 3])
    );
    let bn = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(5)).unwrap();
    let rv = stream.clone_dtoh(bn.running_var().unwrap()).unwrap();
    let g = stream.clone_dtoh(bn.gamma().unwrap()).unwrap();
    assert_eq!((rv, g), (vec![1.0f32; 5], vec![1.0f32; 5]));
}
