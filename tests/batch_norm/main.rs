//! BatchNorm: every test of the op in one binary (planning, the kernels on ptxsim against the
//! CPU reference and in place, PyTorch fixtures, coalescing, 64-bit offsets, and the GPU layer
//! when a GPU - or the emulated driver - is present).

mod accuracy;
mod coalescing;
mod fixtures;
mod gpu;
mod plan;
mod sim;
mod sim_huge;
mod sim_in_place;
mod support;
