//! The build and the smallest op: how build.rs chooses architectures, the kernels nvcc built
//! (fatbins, PTX, ptxas figures), the copy kernels on ptxsim and on the GPU, the loader of the
//! PyTorch fixtures, the module types on the GPU (allocation, state, inference and
//! allocation-free calls), a training step captured in a CUDA graph and replayed, and module
//! state in the safetensors format (PyTorch's checkpoints in `fixtures/state/`).

mod build_archs;
mod build_cache;
mod built;
mod capture_gpu;
mod copy_gpu;
mod copy_sim;
mod fixtures_load;
mod inference_gpu;
mod modules_gpu;
mod state_fixture;
mod state_gpu;
mod state_safetensors;
