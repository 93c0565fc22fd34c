//! The build and the smallest op: the kernels nvcc built (fatbins, PTX, ptxas figures), the
//! copy kernels on ptxsim and on the GPU, and the loader of the PyTorch fixtures.

mod built;
mod copy_gpu;
mod copy_sim;
mod fixtures_load;
