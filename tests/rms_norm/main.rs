//! RMSNorm: every test of the op in one binary (planning and bad inputs, the CPU reference,
//! the kernels on ptxsim, PyTorch fixtures, and the GPU layer when a GPU - or the emulated
//! driver - is present); also the fused residual add of both LayerNorm and RMSNorm, with its
//! PyTorch fixtures.

mod coalescing;
mod cpu;
mod fixtures;
mod gpu;
mod plan;
mod residual;
mod residual_fixtures;
mod residual_gpu;
mod sim;
mod sim_huge;
mod support;
