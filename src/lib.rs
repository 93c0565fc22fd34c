//! # warpnorm
//!
//! LayerNorm and BatchNorm for CUDA - forward and backward, in f32, f16 and bf16 - as CUDA C++
//! kernels built on warp-shuffle reductions, compiled by nvcc when this crate builds, and
//! wrapped by safe Rust types over [cudarc](https://docs.rs/cudarc).
//!
//! ## 1. The user API
//! Every op has the same shape ([`layer_norm`], [`batch_norm`]):
//! - a **description** (`LayerNormDesc`, `BatchNormDesc`: shapes, dtypes, eps, mode);
//! - **module types** (`LayerNorm`, `BatchNorm`) that own their parameters (and BatchNorm's
//!   running statistics) on the device and allocate their outputs;
//! - **functional ops** (`forward` / `backward`) on the caller's `Arc<CudaStream>`, taking
//!   `ForwardBuffers` / `BackwardBuffers` of cudarc views and writing caller-provided outputs:
//!   no allocation, no host synchronization, so they can be captured in a CUDA graph; a
//!   workspace of `forward_workspace_bytes` / `backward_workspace_bytes` bytes;
//! - f64 **CPU references** with identical semantics ([`cpu`]).
//!
//! [`copy::copy`] is the smallest op; [`runtime::context`] opens a device; every failure is an
//! [`Error`], and every check runs before the first launch, so a rejected call changes nothing.
//!
//! *Advanced* (for tests, tools and new ops): [`plan`] (launch plans as data, the [`Executor`]
//! trait), each op's `plan` module (`plan_forward` / `plan_backward`: pure Rust, no GPU),
//! [`abi`] (the kernel argument structs of `cuda/abi.h`), [`kernels`] (what the build produced),
//! [`occupancy`] and [`device`] (what plans depend on). `ARCHITECTURE.md` maps every concept
//! to its file.
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
//!
//! ## 4. Profiling
//! Every op and module call is an NVTX range in the domain `warpnorm` (feature `nvtx`, on by
//! default), e.g. `layer_norm.forward 16384x4096 bf16/f32`, with its kernels inside: run the
//! program under `nsys profile --trace=cuda,nvtx` (or `scripts/profile.sh`). Without a
//! profiler a range costs about 20 ns. The feature `tracing` adds `tracing` spans of the
//! same names. The README's "Profiling with Nsight Systems" section has the details.

#![warn(missing_docs)]

pub mod abi;
pub mod batch_norm;
mod buffers;
#[cfg(feature = "candle")]
pub mod candle;
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
mod profile;
pub mod rms_norm;
pub mod runtime;
#[cfg(feature = "safetensors")]
pub mod safetensors;
pub mod state;

pub use check::check_alignment;
pub use device::DeviceProps;
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use plan::{Executor, Launch, Plan};
pub use state::{EntryView, EntryViewMut, State, StateView, StateViewMut};

/// The README's code blocks, compiled as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
