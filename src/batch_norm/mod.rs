//! BatchNorm over the channels of an `(N, C, ...)` tensor (PyTorch's `BatchNorm1d/2d/3d`),
//! with running statistics, in NCHW or channels-last layout.
//!
//! Every op in warpnorm has the same shape (see also [`crate::layer_norm`]):
//! 1. **Describe** the call: a [`BatchNormDesc`] names the logical dims, the memory
//!    [`Layout`], the activation and parameter dtypes, eps, and the [`Mode`] (training with a
//!    [`Momentum`], or eval).
//! 2. **Run** it: the [`BatchNorm`] module type (owns gamma, beta, running_mean, running_var
//!    and num_batches_tracked on the device, with a train/eval switch), or the functional
//!    [`forward`] / [`backward`] on the caller's stream, with [`ForwardBuffers`] /
//!    [`BackwardBuffers`] of cudarc views and a workspace of [`forward_workspace_bytes`] /
//!    [`backward_workspace_bytes`] bytes (no allocation, no host sync: graph-capturable).
//! 3. **Check** against [`crate::cpu::batch_norm`], the f64 reference.
//! 4. *Advanced:* [`plan`] turns a description and device addresses into the launches
//!    ([`plan_forward`] / [`plan_backward`]); it needs no GPU:
//!
//! ```
//! use warpnorm::batch_norm::{plan_forward, BatchNormDesc, ForwardPtrs, Layout, Mode};
//! use warpnorm::{DType, DeviceProps};
//!
//! // BatchNorm1d with 8 channels and a batch of a million rows, f32.
//! let desc = BatchNormDesc::new(&[1 << 20, 8], Layout::Contiguous, DType::F32, DType::F32)
//!     .with_mode(Mode::train(0.1));
//! let ptrs = ForwardPtrs {
//!     x: 0x1000_0000,
//!     y: 0x2000_0000,
//!     gamma: Some(0x3000_0000),
//!     beta: Some(0x3000_1000),
//!     running_mean: Some(0x3000_2000),
//!     running_var: Some(0x3000_3000),
//!     num_batches_tracked: Some(0x3000_4000),
//!     save_mean: Some(0x3000_5000),
//!     save_mean_lo: Some(0x3000_7000),
//!     save_invstd: Some(0x3000_6000),
//!     workspace: 0x4000_0000,
//!     workspace_bytes: 1 << 20,
//! };
//! let plan = plan_forward(&desc, &ptrs, &DeviceProps::H200).unwrap();
//! // One cooperative launch: the statistics split across the GPU, the finalize and y, with
//! // grid barriers between them.
//! assert_eq!(plan.launches.len(), 1);
//! assert_eq!(plan.launches[0].kernel, "warpnorm_batch_norm_fwd_f32_coop_nhwc_vec");
//! assert!(plan.launches[0].cooperative);
//! assert!(plan.launches[0].grid[0] > 100);
//! // A device without cooperative launches: the statistics, the finalize, then y.
//! let split = DeviceProps { cooperative_launch: false, ..DeviceProps::H200 };
//! let plan = plan_forward(&desc, &ptrs, &split).unwrap();
//! assert_eq!(plan.launches.len(), 3);
//! assert_eq!(plan.launches[0].kernel, "warpnorm_batch_norm_fwd_f32_stats_nhwc_vec");
//! assert!(plan.launches[0].grid[1] > 100); // the reduction is split across the GPU
//! ```
//!
//! # Differences from PyTorch
//! - A rejected call changes nothing: PyTorch increments `num_batches_tracked` before raising
//!   the one-value-per-channel error; warpnorm validates first.
//! - Saved statistics are always f32, and an eval forward also fills them (running mean and
//!   1 / sqrt(running var + eps)) for the eval-mode backward.
//! - One more saved statistic, `save_mean_lo`: `save_mean` is the batch mean rounded to f32
//!   (PyTorch's), `save_mean_lo` its rounding error, and the backward re-centres x on the pair.
//!   At x = 3e4 + 0.01 * N(0, 1) the f32 rounding of the mean alone is a tenth of the spread,
//!   which puts PyTorch's dgamma off by percents; with the pair the gradients are as accurate
//!   as the forward. A separate optional buffer rather than a (2, C) one keeps `save_mean`
//!   exactly PyTorch's, so saved statistics move between the two unchanged.
//!
//! The kernels and how the planner chooses between them: [`plan`] and `cuda/batch_norm.cu`.

mod desc;
mod module;
mod ops;
pub mod plan;

pub use desc::{BatchNormDesc, Layout, Mode, Momentum, Ncs, Problem};
pub use module::{
    BatchNorm, BatchNormConfig, ForwardOutput, GradientBuffers, Gradients, SavedStats,
};
pub use ops::{
    backward, backward_in_place, backward_workspace_bytes, forward, forward_in_place,
    forward_workspace_bytes, BackwardBuffers, BackwardInPlaceBuffers, ForwardBuffers,
    ForwardInPlaceBuffers,
};
pub use plan::{
    plan_backward, plan_backward_checked, plan_forward, plan_forward_checked, workspace_bytes,
    workspace_bytes_checked, BackwardPtrs, Direction, ForwardPtrs,
};
