//! LayerNorm over the trailing dims of a tensor (PyTorch's `nn.LayerNorm`).
//!
//! y = (x - mean) * rstd * gamma + beta per row of D elements (the product of
//! `normalized_shape`), with the biased variance and rstd = 1 / sqrt(var + eps). Activations
//! in f32, f16 or bf16; parameters in the activation dtype or in f32; saved statistics always
//! f32 (mean, rstd, and `mean_lo`, the mean's rounding error, on which the backward
//! re-centres x: rows with a large offset keep an accurate backward); all accumulation in f32.
//!
//! Every op in warpnorm has the same shape (see also [`crate::batch_norm`]):
//! 1. **Describe** the call: [`LayerNormDesc::new`] (PyTorch-style shapes) or
//!    [`LayerNormDesc::from_rows`].
//! 2. **Run** it: the [`LayerNorm`] module type (owns gamma/beta, allocates its outputs), or
//!    the functional [`forward`] / [`backward`] on the caller's stream, with
//!    [`ForwardBuffers`] / [`BackwardBuffers`] of cudarc views and a workspace of
//!    [`forward_workspace_bytes`] / [`backward_workspace_bytes`] bytes (no allocation, no
//!    host sync: graph-capturable).
//! 3. **Check** against [`crate::cpu::layer_norm`], the f64 reference.
//! 4. *Advanced:* [`plan`] turns a description and device addresses into the launches the GPU
//!    and the simulator tests run ([`plan_forward`] / [`plan_backward`]); it needs no GPU:
//!
//! ```
//! use warpnorm::layer_norm::{plan_forward, Affine, ForwardPtrs, LayerNormDesc};
//! use warpnorm::{DType, DeviceProps};
//! let desc = LayerNormDesc::new(&[32, 512, 4096], &[4096], DType::BF16, DType::F32,
//!                               Affine::WeightBias, 1e-5).unwrap();
//! let ptrs = ForwardPtrs { x: 0x10000000, y: 0x20000000, gamma: Some(0x30000000),
//!                          beta: Some(0x30010000), mean: Some(0x40000000),
//!                          rstd: Some(0x40100000),
//!                          ..Default::default() };
//! let plan = plan_forward(&desc, &ptrs, &DeviceProps::H200).unwrap();
//! assert_eq!(plan.launches[0].kernel, "warpnorm_layer_norm_fwd_bf16_f32_block_vec");
//! ```

mod desc;
mod module;
mod ops;
pub mod plan;

pub use desc::{Affine, LayerNormDesc, Problem, DEFAULT_EPS};
pub use module::{ForwardOutput, GradientBuffers, Gradients, LayerNorm, SavedStats};
pub use ops::{
    backward, backward_in_place, backward_residual, backward_residual_workspace_bytes,
    backward_workspace_bytes, forward, forward_in_place, forward_residual, forward_workspace_bytes,
    BackwardBuffers, BackwardInPlaceBuffers, BackwardResidualBuffers, ForwardBuffers,
    ForwardInPlaceBuffers, ForwardResidualBuffers, ResidualIo,
};
pub use plan::{
    column_sum_geometry, plan_backward, plan_backward_checked, plan_backward_residual,
    plan_backward_residual_checked, plan_forward, plan_forward_checked, plan_forward_residual,
    plan_forward_residual_checked, workspace_bytes, workspace_bytes_checked,
    workspace_bytes_residual, workspace_bytes_residual_checked, BackwardPtrs, ColumnSumGeometry,
    Direction, ForwardPtrs, ResidualGrads, ResidualPtrs, COLSUM_MIN_CHUNK_ROWS,
    SPLIT_BARRIER_BYTES,
};
