//! LayerNorm: every test of the op in one binary (planning, the CPU reference, the kernels on
//! ptxsim, accuracy, PyTorch fixtures, coalescing, and the GPU layer when a GPU - or the
//! emulated driver - is present).

mod accuracy;
mod coalescing;
mod cpu;
mod fixtures;
mod gpu;
mod plan;
mod sim;
mod sim_edge;
mod sim_huge;
mod sim_smoke;
mod support;
