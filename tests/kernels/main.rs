//! The build and the smallest op: the kernels nvcc built (fatbins, PTX, ptxas figures), the
//! copy kernels on ptxsim and on the GPU, the loader of the PyTorch fixtures, the module
//! types' allocation on the GPU, and a training step captured in a CUDA graph and replayed.

mod built;
mod capture_gpu;
mod copy_gpu;
mod copy_sim;
mod fixtures_load;
mod modules_gpu;
