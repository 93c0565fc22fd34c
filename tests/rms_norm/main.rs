//! RMSNorm: every test of the op in one binary (planning and bad inputs, the CPU reference,
//! the kernels on ptxsim, PyTorch fixtures, and the GPU layer when a GPU - or the emulated
//! driver - is present).

mod coalescing;
mod cpu;
mod fixtures;
mod gpu;
mod plan;
mod residual;
mod residual_gpu;
mod sim;
mod sim_huge;
mod support;
