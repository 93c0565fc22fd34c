//! RMSNorm over the trailing dims of a tensor (PyTorch's `nn.RMSNorm` / `F.rms_norm`).
//!
//! y = x / sqrt(mean(x^2) + eps) * weight per row of D elements (the product of
//! `normalized_shape`); weight optional, never a bias; eps `None` is the f32 machine epsilon
//! ([`DEFAULT_EPS`], 2^-23) for every input dtype, as PyTorch. Activations in f32, f16 or
//! bf16; the weight in the activation dtype or in f32; the saved rstd always f32; all
//! arithmetic in f32 (an f16 row [60000, 60000, 1, 1] gives 1.414, not Inf). Backward:
//! dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * weight and xhat = x * rstd,
//! dweight = sum over rows of dy * xhat, deterministic.
//!
//! The same shape as [`crate::layer_norm`], whose tiers and planner it shares (RMSNorm is
//! LayerNorm without the mean; kernels in `cuda/rms_norm.cu`):
//! 1. **Describe** the call: [`RmsNormDesc::new`] (PyTorch-style shapes) or
//!    [`RmsNormDesc::from_rows`].
//! 2. **Run** it: the [`RmsNorm`] module type (owns the weight, allocates its outputs), or the
//!    functional [`forward`] / [`backward`] (and their in-place forms) on the caller's stream,
//!    with [`ForwardBuffers`] / [`BackwardBuffers`] of cudarc views and a workspace of
//!    [`forward_workspace_bytes`] / [`backward_workspace_bytes`] bytes (no allocation, no host
//!    sync: graph-capturable).
//! 3. **Check** against [`crate::cpu::rms_norm`], the f64 reference.
//! 4. *Advanced:* [`plan`] turns a description and device addresses into launches, no GPU
//!    needed:
//!
//! ```
//! use warpnorm::rms_norm::{plan_forward, ForwardPtrs, RmsNormDesc};
//! use warpnorm::{DType, DeviceProps};
//! let desc = RmsNormDesc::new(&[32, 512, 4096], &[4096], DType::BF16, DType::F32, true, None)
//!     .unwrap();
//! assert_eq!(desc.eps, f32::EPSILON);
//! let ptrs = ForwardPtrs { x: 0x10000000, y: 0x20000000, weight: Some(0x30000000),
//!                          rstd: Some(0x40000000), ..Default::default() };
//! let plan = plan_forward(&desc, &ptrs, &DeviceProps::H200).unwrap();
//! assert_eq!(plan.launches[0].kernel, "warpnorm_rms_norm_fwd_bf16_f32_block_vec");
//! ```

mod desc;
mod module;
mod ops;
pub mod plan;

pub use desc::{Problem, RmsNormDesc, DEFAULT_EPS};
pub use module::{ForwardOutput, GradientBuffers, Gradients, RmsNorm, SavedStats};
pub use ops::{
    backward, backward_in_place, backward_residual, backward_residual_workspace_bytes,
    backward_workspace_bytes, forward, forward_in_place, forward_residual, forward_workspace_bytes,
    BackwardBuffers, BackwardInPlaceBuffers, BackwardResidualBuffers, ForwardBuffers,
    ForwardInPlaceBuffers, ForwardResidualBuffers, ResidualIo,
};
pub use plan::{
    plan_backward, plan_backward_checked, plan_backward_residual, plan_backward_residual_checked,
    plan_forward, plan_forward_checked, plan_forward_residual, plan_forward_residual_checked,
    workspace_bytes, workspace_bytes_checked, workspace_bytes_residual,
    workspace_bytes_residual_checked, BackwardPtrs, Direction, ForwardPtrs, ResidualGrads,
    ResidualPtrs,
};
