//! warpnorm's test support, shared by its test binaries (`tests/layer_norm`,
//! `tests/batch_norm`, `tests/kernels`), examples and benches:
//! - [`sim`]: runs launch plans on ptxsim (the PTX nvcc emitted, with memcheck, racecheck and
//!   initcheck), as a [`warpnorm::Executor`];
//! - [`gpu`]: a stream on a real (or emulated) GPU, or a printed reason to skip;
//! - [`rng`]: deterministic test data;
//! - [`fixtures`]: the PyTorch fixtures in `fixtures/`;
//! - [`coalescing`]: describing uncoalesced requests with their CUDA source lines.

pub mod coalescing;
pub mod fixtures;
pub mod gpu;
pub mod rng;
pub mod sim;

pub use rng::Rng;
