//! LayerNorm and BatchNorm on [candle](https://docs.rs/candle-core) tensors (feature `candle`).
//!
//! - **Ops** on `candle_core::Tensor` ([`ops`], as `candle_nn::ops`): [`ops::layer_norm`] and
//!   [`ops::batch_norm`] (training, updating the running statistics held in `candle_core::Var`s,
//!   and eval). They are candle custom ops (`CustomOp1/2/3`) with a backward, so
//!   `Tensor::backward()` returns the gradients of x, weight and bias.
//! - **Modules**: [`LayerNorm`] (`candle_nn::Module`) and [`BatchNorm`] (`candle_nn::ModuleT`:
//!   `forward_t(x, train)`, as candle_nn's), loaded from a `candle_nn::VarBuilder` with
//!   PyTorch's names (`weight`, `bias`, `running_mean`, `running_var`) by [`layer_norm`] and
//!   [`batch_norm`], which take the same arguments as `candle_nn::layer_norm` and
//!   `candle_nn::batch_norm`: replacing one is a one-line change.
//!
//! On the CPU the ops run [`crate::cpu`] (f64 accumulation, rounded once). With the
//! `candle-cuda` feature (candle's `cuda` backend), CUDA tensors run warpnorm's kernels (the
//! functional ops of [`crate::layer_norm`] and [`crate::batch_norm`]) on candle's own stream,
//! reading candle's `CudaStorage` slices at their layout's offset. A non-contiguous input is
//! made contiguous first (`Tensor::contiguous`, a copy); BatchNorm runs on NCHW-contiguous
//! memory.
//!
//! Element types: activations f32, f16 or bf16; parameters (and BatchNorm's running
//! statistics) of the activation type or f32 (f32 parameters with 16-bit activations).
//! Saved statistics are f32, as everywhere in warpnorm.
//!
//! The fused residual add (h = x + residual (+ a bias), then the norm of h; one pass reads x
//! and the residual and writes h and y): [`ops::layer_norm_residual`] and
//! [`ops::rms_norm_residual`] return `(y, h)` with autograd through both (the gradients of x
//! and the residual, equal; the parameters; the residual bias), and the modules'
//! `forward_residual` ([`LayerNorm::forward_residual`], [`RmsNorm::forward_residual`]).
//!
//! RMSNorm has the same three pieces: [`ops::rms_norm`] (x, optional weight, eps `None` as
//! PyTorch's), [`RmsNorm`] (`candle_nn::Module`) and [`rms_norm`] (`weight` from a
//! `VarBuilder`, the arguments of `candle_nn::rms_norm`). A [`LayerNormConfig`] with
//! `remove_mean: false` (candle's RMSNorm form) is still rejected by [`layer_norm`]: load it
//! with [`rms_norm`].
//!
//! ```
//! use candle_core::{DType, Device, Module, Tensor};
//! use candle_nn::{VarBuilder, VarMap};
//!
//! # fn main() -> candle_core::Result<()> {
//! let varmap = VarMap::new();
//! let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
//! // Was: let ln = candle_nn::layer_norm(64, 1e-5, vb.pp("ln"))?;
//! let ln = warpnorm::candle::layer_norm(64, 1e-5, vb.pp("ln"))?;
//! let x = Tensor::randn(0f32, 1.0, (8, 64), &Device::Cpu)?;
//! let y = ln.forward(&x)?;
//! let grads = y.sqr()?.sum_all()?.backward()?;
//! assert!(grads.get(&x).is_some());
//! # Ok(()) }
//! ```

mod batch_norm;
mod common;
#[cfg(feature = "candle-cuda")]
mod cuda;
mod layer_norm;
mod residual;
mod rms_norm;

pub use batch_norm::{batch_norm, BatchNorm};
pub use candle_nn::{BatchNormConfig, LayerNormConfig};
pub use layer_norm::{layer_norm, LayerNorm};
pub use rms_norm::{rms_norm, RmsNorm};

/// The ops on tensors, with autograd (as `candle_nn::ops`).
pub mod ops {
    pub use super::batch_norm::{batch_norm_op as batch_norm, BatchNormArgs};
    pub use super::layer_norm::layer_norm_op as layer_norm;
    pub use super::residual::{
        layer_norm_residual_op as layer_norm_residual, rms_norm_residual_op as rms_norm_residual,
    };
    pub use super::rms_norm::rms_norm_op as rms_norm;
}
