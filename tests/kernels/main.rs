//! The build and the smallest op: the kernels nvcc built (fatbins, PTX, ptxas figures), the
//! copy kernels on ptxsim and on the GPU, the loader of the PyTorch fixtures, and the module
//! types on the GPU (allocation, state, inference and allocation-free calls).

mod built;
mod copy_gpu;
mod copy_sim;
mod fixtures_load;
mod inference_gpu;
mod modules_gpu;
