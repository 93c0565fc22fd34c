//! LayerNorm: functional ops, the [`LayerNorm`] module type, and launch planning.
//!
//! PyTorch's semantics: normalize over the trailing dims `normalized_shape` (D elements per
//! row, M rows), y = (x - mean) * rstd * gamma + beta with the biased variance and
//! rstd = 1 / sqrt(var + eps). Activations in f32, f16 or bf16; parameters in the activation
//! dtype or in f32; saved statistics always f32; all accumulation in f32.
//!
//! 1. Describe the problem: [`LayerNormDesc::new`] (shapes) or [`LayerNormDesc::from_rows`].
//! 2. Plan: [`plan_fwd`] / [`plan_bwd`] validate every pointer and size and return a
//!    [`crate::Plan`] (pure Rust; what the GPU executor and the simulator tests run).
//! 3. Run: the functional [`forward`] / [`backward`] (caller-provided outputs and workspace,
//!    no allocation, no host sync), or the [`LayerNorm`] module type (owns gamma/beta,
//!    allocates its outputs).
//! 4. Check: [`crate::cpu::layer_norm`] is the f64 reference.
//!
//! Planning needs no GPU:
//! ```
//! use warpnorm::layer_norm::{plan_fwd, Affine, FwdPtrs, LayerNormDesc};
//! use warpnorm::{DType, DeviceProps};
//! let desc = LayerNormDesc::new(&[32, 512, 4096], &[4096], DType::BF16, DType::F32,
//!                               Affine::WeightBias, 1e-5).unwrap();
//! let ptrs = FwdPtrs { x: 0x10000000, y: 0x20000000, gamma: Some(0x30000000),
//!                      beta: Some(0x30010000), mean: 0x40000000, rstd: 0x40100000,
//!                      ..Default::default() };
//! let plan = plan_fwd(&desc, &ptrs, &DeviceProps::H200).unwrap();
//! assert_eq!(plan.launches[0].kernel, "warpnorm_layer_norm_fwd_bf16_f32_block_vec");
//! ```

mod desc;
mod module;
mod ops;
mod plan;

pub use desc::{Affine, LayerNormDesc, DEFAULT_EPS};
pub use module::{LayerNorm, LayerNormGrads, LayerNormOutput};
pub use ops::{backward, backward_workspace_bytes, forward, forward_workspace_bytes};
pub use plan::{
    geometry, plan_bwd, plan_fwd, workspace_bytes, BwdPtrs, Direction, FwdPtrs, Geometry, Tier,
    SPLIT_MIN_CHUNK, SPLIT_MIN_COLS, WORKSPACE_ALIGN,
};
