//! # warpnorm
//!
//! LayerNorm and BatchNorm for CUDA - forward and backward, in f32, f16 and bf16 - as CUDA C++
//! kernels built on warp-shuffle reductions, compiled by nvcc when this crate builds, and
//! wrapped by safe Rust types over [cudarc](https://docs.rs/cudarc).
//!
//! ## 1. Layers
//! - **Functional ops** take the caller's `Arc<CudaStream>` and cudarc buffers and write into
//!   caller-provided outputs: no allocation, no host synchronization, so they can be captured
//!   in a CUDA graph. [`copy::copy`] is the simplest one.
//! - **Module types** own their parameters (and BatchNorm's running statistics) on the device.
//! - **Plans.** Every op first validates its arguments and plans its launches in pure Rust
//!   ([`plan::Plan`]): kernel names, grid, block, shared memory, and the argument structs
//!   defined once in `cuda/abi.h` ([`abi`]). The GPU executor ([`runtime::GpuExecutor`]) and
//!   the test suite's simulator (ptxsim) run the same plans.
//! - [`cpu`] holds f64-accumulating reference implementations with identical semantics.
//!
//! ## 2. Without a GPU, or without nvcc
//! The crate always builds. Without nvcc, [`kernels::BUILT`] is false and every GPU call
//! returns [`Error::KernelsNotBuilt`]; without a driver or device, [`runtime::device_count`]
//! returns [`Error::NoDevice`] - never a panic. Planning needs neither:
//!
//! ```
//! use warpnorm::{copy::plan_copy, device::DeviceProps};
//! let plan = plan_copy(0x1000, 0x9000, 4096, &DeviceProps::H200).unwrap();
//! assert_eq!(plan.launches[0].kernel, "warpnorm_copy_fwd_u8_vec16");
//! ```
//!
//! ## 3. On a GPU
//! ```no_run
//! # fn main() -> Result<(), warpnorm::Error> {
//! let ctx = warpnorm::runtime::context(0)?;
//! let stream = ctx.default_stream();
//! let src = stream.clone_htod(&[1.0f32, 2.0, 3.0]).map_err(|e| warpnorm::Error::Driver {
//!     during: "upload".into(),
//!     source: e,
//! })?;
//! let mut dst = stream.alloc_zeros::<f32>(3).unwrap();
//! warpnorm::copy::copy(&stream, src.as_view(), dst.as_view_mut())?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod abi;
pub mod batch_norm;
mod buffers;
mod check;
pub mod copy;
pub mod cpu;
pub mod device;
pub mod dtype;
mod error;
pub mod kernels;
pub mod layer_norm;
pub mod occupancy;
pub mod plan;
pub mod runtime;

pub use check::check_alignment;
pub use device::DeviceProps;
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use plan::{Executor, Launch, Plan};

/// The README's code blocks, compiled as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
