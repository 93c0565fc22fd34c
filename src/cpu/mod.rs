//! Reference implementations on the host, accumulating in f64, with exactly the semantics of
//! the GPU ops. They need no GPU and serve as the test suite's oracle.

pub mod batch_norm;
pub mod layer_norm;
pub mod residual;
pub mod rms_norm;
