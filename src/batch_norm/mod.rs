//! BatchNorm (PyTorch's `BatchNorm1d/2d/3d`): functional ops, the [`BatchNorm`] module type with
//! running statistics, and launch planning.
//!
//! # Layers
//! 1. **Descriptions.** A [`BatchNormDesc`] names the input's logical dims `(N, C, ...)`, its
//!    memory [`Layout`], the activation and parameter dtypes, eps and whether the op is affine.
//! 2. **Plans** ([`plan`]): [`plan_batch_norm_fwd`] and [`plan_batch_norm_bwd`] validate
//!    everything and choose kernels, grids and variants in pure Rust; [`workspace_len`] sizes
//!    the f32 workspace the functional ops need. Plans are data: the GPU and the ptxsim tests
//!    run the same ones.
//! 3. **Functional ops** ([`ops`]): [`batch_norm_forward`] / [`batch_norm_backward`] on cudarc
//!    buffers - no allocation, no host synchronization, graph-capture safe.
//! 4. **The module** ([`BatchNorm`]): owns gamma, beta, running_mean, running_var and
//!    num_batches_tracked on the device, with an explicit train/eval mode.
//! 5. The host reference is [`crate::cpu::batch_norm`].
//!
//! # Kernels
//! Training forward runs a per-channel statistics kernel on a 2-D grid (channel tiles x
//! reduction splits, so that a few channels with a large batch still fill the GPU), a finalize
//! kernel (batch statistics, running statistics, per-channel scale), and a vectorized
//! elementwise pass. Backward: per-channel sums with the same grid, a finalize kernel
//! (dgamma, dbeta, dx coefficients) and an elementwise pass. When a block's channels fit in
//! shared memory and there are at least two channel tiles per SM, forward and backward each
//! run as one fused pass instead (2s and 3s bytes per element). Statistics are accumulated
//! relative to each channel's first element, so data with a large mean keeps its precision.
//! No float atomics: bitwise reproducible. See `cuda/batch_norm.cu` and [`plan`].
//!
//! # Differences from PyTorch
//! - A rejected call changes nothing: PyTorch increments `num_batches_tracked` before raising
//!   the one-value-per-channel error; warpnorm validates first.
//! - Saved statistics are always f32, and an eval forward also fills them (running mean and
//!   1 / sqrt(running var + eps)) for the eval-mode backward.
//!
//! # Example: planning without a GPU
//! ```
//! use warpnorm::batch_norm::{plan_batch_norm_fwd, BatchNormDesc, FwdPtrs, ForwardMode, Layout};
//! use warpnorm::{DType, DeviceProps};
//!
//! // BatchNorm1d with 8 channels and a batch of a million rows, f32.
//! let desc = BatchNormDesc::new(&[1 << 20, 8], Layout::Contiguous, DType::F32, DType::F32);
//! let ptrs = FwdPtrs {
//!     x: 0x1000_0000,
//!     y: 0x2000_0000,
//!     gamma: Some(0x3000_0000),
//!     beta: Some(0x3000_1000),
//!     running_mean: Some(0x3000_2000),
//!     running_var: Some(0x3000_3000),
//!     num_batches_tracked: Some(0x3000_4000),
//!     save_mean: Some(0x3000_5000),
//!     save_invstd: Some(0x3000_6000),
//!     workspace: 0x4000_0000,
//! };
//! let plan = plan_batch_norm_fwd(&desc, &ForwardMode::train(0.1), &ptrs, &DeviceProps::H200).unwrap();
//! assert_eq!(plan.launches.len(), 3);
//! assert_eq!(plan.launches[0].kernel, "warpnorm_batch_norm_fwd_f32_stats_nhwc_vec");
//! assert!(plan.launches[0].grid[1] > 100); // the reduction is split across the GPU
//! ```

mod desc;
mod module;
pub mod ops;
pub mod plan;

pub use desc::{BatchNormDesc, ForwardMode, Geometry, Layout, Momentum};
pub use module::{BatchNorm, BatchNormConfig, Gradients, SavedStats};
pub use ops::{batch_norm_backward, batch_norm_forward, BackwardBuffers, ForwardBuffers};
pub use plan::{plan_batch_norm_bwd, plan_batch_norm_fwd, workspace_len, BwdPtrs, FwdPtrs};

use crate::abi::{
    WnBatchNormApplyArgs, WnBatchNormBwdFinalizeArgs, WnBatchNormFinalizeArgs,
    WnBatchNormFusedBwdArgs, WnBatchNormFusedFwdArgs, WnBatchNormReduceArgs,
};

crate::abi::abi_args!(
    WnBatchNormReduceArgs,
    WnBatchNormFinalizeArgs,
    WnBatchNormBwdFinalizeArgs,
    WnBatchNormApplyArgs,
    WnBatchNormFusedBwdArgs,
    WnBatchNormFusedFwdArgs
);
