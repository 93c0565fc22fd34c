//! # simcuda: an emulated CUDA driver on ptxsim
//!
//! A shared library (`libsimcuda.so`) that exports the part of the CUDA driver API
//! (`libcuda.so`) that cudarc 0.19 calls for what warpnorm and its GPU tests do, and runs
//! every kernel on [ptxsim](../ptxsim) with racecheck and initcheck on. Linked (or symlinked)
//! as `libcuda.so` in a folder on `LD_LIBRARY_PATH`, it lets the GPU layer (context, module
//! loading from the embedded fatbin, launches, copies, events) execute on a machine without a
//! GPU.
//!
//! **This is an emulator, not a GPU.** Results are checked, timings mean nothing.
//!
//! ## How it is used
//!
//! `scripts/test-emulated-gpu.sh` builds it (`cargo build --release -p simcuda`), links
//! `target/release/libsimcuda.so` as `libcuda.so` and `libcuda.so.1` in
//! `target/simcuda-driver/`, and runs warpnorm's GPU tests and its demo with that folder on
//! `LD_LIBRARY_PATH` (for those child processes only) and `WARPNORM_REQUIRE_GPU=1`. The
//! library is never named `libcuda.so` in `target/*/deps`, where it would shadow a real driver
//! for every `cargo test`.
//!
//! One device (ordinal 0, compute capability 12.0 and 8 SMs unless `SIMCUDA_COMPUTE_CAP` and
//! `SIMCUDA_SM_COUNT` say otherwise) with its primary context; everything runs synchronously at
//! the call under one global lock, except work on a stream being captured into a graph, which is
//! recorded and runs when the graph is launched. A kernel fault, race or uninitialized read is printed to
//! stderr and becomes the context's sticky error, as on a GPU. `SIMCUDA_TRACE=1` prints every
//! launch with its host time on ptxsim.
//!
//! Not emulated: register limits (`CU_FUNC_ATTRIBUTE_NUM_REGS` is unknown from PTX and
//! returns `CUDA_ERROR_NOT_SUPPORTED`), SASS, memory pools, managed and pinned host memory,
//! peer access, cooperative launches, and of graphs everything but stream capture on one stream
//! and its replay (see [`graph`] for what is and is not modelled). No export ever unwinds into its caller: a panic
//! is caught and returned as `CUDA_ERROR_UNKNOWN`.
//!
//! ## Where each part of the driver API is
//!
//! | driver-API area | exports | file |
//! | --- | --- | --- |
//! | initialization, the device | `cuInit`, `cuDriverGetVersion`, `cuDeviceGet*`, `cuDeviceComputeCapability`, `cuDeviceTotalMem*` | [`device`] |
//! | primary and current context | `cuDevicePrimaryCtx*`, `cuCtx*` | [`context`] |
//! | device memory | `cuMemAlloc*`, `cuMemFree*`, `cuMemGetInfo`, `cuMemcpy*`, `cuMemset*`; and, for tests, `simcuda_alloc_count` (the calling thread's allocations so far) | [`memory`] |
//! | streams | `cuStream*`, `cuLaunchHostFunc` | [`stream`] |
//! | events | `cuEvent*` | [`event`] |
//! | modules and functions | `cuModuleLoad*`, `cuModuleUnload`, `cuModuleGetFunction`, `cuFunc*` | [`module`] |
//! | launches | `cuLaunchKernel` (and running a kernel on ptxsim) | [`launch`] |
//! | stream capture and graphs | `cuStreamBeginCapture*`, `cuStreamEndCapture`, `cuStreamIsCapturing`, `cuStreamGetCaptureInfo*`, `cuThreadExchangeStreamCaptureMode`, `cuGraphInstantiate*`, `cuGraphLaunch`, `cuGraphUpload`, `cuGraphDestroy`, `cuGraphExecDestroy` | [`graph`] |
//! | errors | `cuGetErrorName`, `cuGetErrorString` | [`error`] |
//!
//! Beside them: [`ffi`] (what every export shares: C types, panic guard, argument checks,
//! out-parameters, the driver lock with the current context), [`state`] (the driver's state
//! behind that lock), [`fatbin`] (the images `cuModuleLoadData` takes and which PTX of a
//! fatbin runs) and [`consts`] (the numeric values of `cuda.h` used).

// Every export is a CUDA driver API function with NVIDIA's documented contract.
#![allow(clippy::missing_safety_doc)]
#![allow(non_snake_case)]

pub mod consts;
pub mod ffi;
pub mod state;

pub mod context;
pub mod device;
pub mod error;
pub mod event;
pub mod fatbin;
pub mod graph;
pub mod launch;
pub mod memory;
pub mod module;
pub mod stream;

#[cfg(test)]
mod tests;
