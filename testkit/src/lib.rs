//! warpnorm's test support, shared by its test binaries (`tests/layer_norm`,
//! `tests/batch_norm`, `tests/kernels`), examples and benches:
//! - [`backend`]: the device interface every kernel test runs a case through (a
//!   [`warpnorm::Executor`] with memory), implemented by the simulator and the GPU;
//! - [`sim`]: runs launch plans on ptxsim (the PTX nvcc emitted, with memcheck, racecheck and
//!   initcheck), as a [`backend::Backend`];
//! - [`gpu`]: a stream on a real (or emulated) GPU, or a printed reason to skip; and the GPU
//!   as a [`backend::Backend`];
//! - [`rng`]: deterministic test data;
//! - [`fixtures`]: the PyTorch fixtures in `fixtures/`; [`oracle`]: measuring results against
//!   their float64 oracle;
//! - [`coalescing`]: describing uncoalesced requests with their CUDA source lines;
//! - [`rows`]: running only the blocks of a row-norm launch that own given rows (huge tensors).

pub mod backend;
pub mod coalescing;
pub mod fixtures;
pub mod gpu;
pub mod oracle;
pub mod rng;
pub mod rows;
pub mod sim;

pub use rng::Rng;
