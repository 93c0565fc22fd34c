//! Device properties the launch planners depend on.

use cudarc::driver::{sys::CUdevice_attribute as Attr, CudaContext};

use crate::{Error, Result};

/// The few properties of a GPU that launch planning needs. Plans are a pure function of the
/// problem and these figures, so tests can plan for any GPU without having one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Maximum threads per block.
    pub max_threads_per_block: u32,
    /// Maximum resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Shared memory per block without opting in (bytes; 48 KiB on every current GPU).
    pub max_shared_per_block: u32,
    /// Shared memory per block with `cudaFuncAttributeMaxDynamicSharedMemorySize` (bytes).
    pub max_shared_per_block_optin: u32,
    /// Maximum grid size in y and z (x is 2^31 - 1).
    pub max_grid_yz: u32,
    /// Maximum resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// 32-bit registers per SM.
    pub registers_per_sm: u32,
    /// Shared memory per SM (bytes), shared by its resident blocks.
    pub shared_per_sm: u32,
    /// Shared memory the system reserves per resident block (bytes; 1 KiB from sm_80 on).
    pub reserved_shared_per_block: u32,
    /// Cooperative launches (`CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH`): grids whose blocks
    /// wait for each other. Without them the planner takes the multi-launch tiers.
    pub cooperative_launch: bool,
}

impl DeviceProps {
    /// An NVIDIA H200 (SXM): sm_90, 132 SMs, 227 KiB opt-in shared memory per block, 228 KiB
    /// per SM.
    pub const H200: DeviceProps = DeviceProps {
        compute_capability: (9, 0),
        sm_count: 132,
        max_threads_per_block: 1024,
        max_threads_per_sm: 2048,
        max_shared_per_block: 48 * 1024,
        max_shared_per_block_optin: 232_448,
        max_grid_yz: 65_535,
        max_blocks_per_sm: 32,
        registers_per_sm: 65_536,
        shared_per_sm: 233_472,
        reserved_shared_per_block: 1024,
        cooperative_launch: true,
    };

    /// An NVIDIA H100 SXM: sm_90, 132 SMs, the same SM limits as the H200 (227 KiB opt-in
    /// shared memory per block, 228 KiB per SM); 3.35 TB/s of HBM3 instead of 4.8 TB/s of HBM3e.
    pub const H100: DeviceProps = DeviceProps {
        compute_capability: (9, 0),
        sm_count: 132,
        max_threads_per_block: 1024,
        max_threads_per_sm: 2048,
        max_shared_per_block: 48 * 1024,
        max_shared_per_block_optin: 232_448,
        max_grid_yz: 65_535,
        max_blocks_per_sm: 32,
        registers_per_sm: 65_536,
        shared_per_sm: 233_472,
        reserved_shared_per_block: 1024,
        cooperative_launch: true,
    };

    /// An NVIDIA A100: sm_80, 108 SMs, 163 KiB opt-in shared memory per block, 164 KiB per SM.
    pub const A100: DeviceProps = DeviceProps {
        compute_capability: (8, 0),
        sm_count: 108,
        max_threads_per_block: 1024,
        max_threads_per_sm: 2048,
        max_shared_per_block: 48 * 1024,
        max_shared_per_block_optin: 166_912,
        max_grid_yz: 65_535,
        max_blocks_per_sm: 32,
        registers_per_sm: 65_536,
        shared_per_sm: 167_936,
        reserved_shared_per_block: 1024,
        cooperative_launch: true,
    };

    /// An NVIDIA T4: sm_75, 40 SMs, 64 KiB opt-in shared memory per block and per SM.
    pub const T4: DeviceProps = DeviceProps {
        compute_capability: (7, 5),
        sm_count: 40,
        max_threads_per_block: 1024,
        max_threads_per_sm: 1024,
        max_shared_per_block: 48 * 1024,
        max_shared_per_block_optin: 65_536,
        max_grid_yz: 65_535,
        max_blocks_per_sm: 16,
        registers_per_sm: 65_536,
        shared_per_sm: 65_536,
        reserved_shared_per_block: 0,
        cooperative_launch: true,
    };

    /// A small GPU for simulator tests: few SMs keep simulated grids small, so that every
    /// tier (including the ones chosen when there are too few rows to fill the GPU) is reached
    /// with small shapes.
    pub const SIM: DeviceProps = DeviceProps {
        compute_capability: (8, 0),
        sm_count: 4,
        max_threads_per_block: 1024,
        max_threads_per_sm: 2048,
        max_shared_per_block: 48 * 1024,
        max_shared_per_block_optin: 166_912,
        max_grid_yz: 65_535,
        max_blocks_per_sm: 32,
        registers_per_sm: 65_536,
        shared_per_sm: 167_936,
        reserved_shared_per_block: 1024,
        cooperative_launch: true,
    };

    /// Maximum grid size in x.
    pub const MAX_GRID_X: u32 = i32::MAX as u32;

    /// Reads the properties of the context's device.
    pub fn query(ctx: &CudaContext) -> Result<DeviceProps> {
        let get = |a: Attr| -> Result<u32> {
            ctx.attribute(a)
                .map(|v| v.max(0) as u32)
                .map_err(Error::driver("reading a device attribute"))
        };
        Ok(DeviceProps {
            compute_capability: (
                get(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                get(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            ),
            sm_count: get(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            max_threads_per_block: get(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            max_threads_per_sm: get(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
            max_shared_per_block: get(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            max_shared_per_block_optin: get(
                Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )?,
            max_grid_yz: get(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            max_blocks_per_sm: get(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)?,
            registers_per_sm: get(Attr::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
            shared_per_sm: get(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            reserved_shared_per_block: get(
                Attr::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
            )?,
            cooperative_launch: get(Attr::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? != 0,
        })
    }
}
