//! Numeric values of the CUDA driver API (`cuda.h`) that the emulated driver uses: result
//! codes, device and function attributes, flags. Enums cross the C ABI as 32-bit integers.
//! The result codes' names and descriptions are in [`crate::error::ERRORS`].

/// `CUresult`.
pub type CUresult = i32;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_IMAGE: CUresult = 200;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_NO_BINARY_FOR_GPU: CUresult = 209;
pub const CUDA_ERROR_INVALID_PTX: CUresult = 218;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
pub const CUDA_ERROR_LAUNCH_TIMEOUT: CUresult = 702;
pub const CUDA_ERROR_ASSERT: CUresult = 710;
pub const CUDA_ERROR_MISALIGNED_ADDRESS: CUresult = 716;
pub const CUDA_ERROR_LAUNCH_FAILED: CUresult = 719;
pub const CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: CUresult = 720;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;
pub const CUDA_ERROR_STREAM_CAPTURE_MERGE: CUresult = 902;
pub const CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: CUresult = 903;
pub const CUDA_ERROR_STREAM_CAPTURE_UNJOINED: CUresult = 904;
pub const CUDA_ERROR_STREAM_CAPTURE_ISOLATION: CUresult = 905;
pub const CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CUresult = 906;
pub const CUDA_ERROR_CAPTURED_EVENT: CUresult = 907;
pub const CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: CUresult = 908;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

// Device attributes (`CUdevice_attribute`) with non-zero values on the emulated device.
pub const ATTR_MAX_THREADS_PER_BLOCK: i32 = 1;
pub const ATTR_MAX_BLOCK_DIM_X: i32 = 2;
pub const ATTR_MAX_BLOCK_DIM_Y: i32 = 3;
pub const ATTR_MAX_BLOCK_DIM_Z: i32 = 4;
pub const ATTR_MAX_GRID_DIM_X: i32 = 5;
pub const ATTR_MAX_GRID_DIM_Y: i32 = 6;
pub const ATTR_MAX_GRID_DIM_Z: i32 = 7;
pub const ATTR_MAX_SHARED_MEMORY_PER_BLOCK: i32 = 8;
pub const ATTR_TOTAL_CONSTANT_MEMORY: i32 = 9;
pub const ATTR_WARP_SIZE: i32 = 10;
pub const ATTR_MAX_PITCH: i32 = 11;
pub const ATTR_MAX_REGISTERS_PER_BLOCK: i32 = 12;
pub const ATTR_CLOCK_RATE: i32 = 13;
pub const ATTR_TEXTURE_ALIGNMENT: i32 = 14;
pub const ATTR_GPU_OVERLAP: i32 = 15;
pub const ATTR_MULTIPROCESSOR_COUNT: i32 = 16;
pub const ATTR_CAN_MAP_HOST_MEMORY: i32 = 19;
pub const ATTR_CONCURRENT_KERNELS: i32 = 31;
pub const ATTR_MEMORY_CLOCK_RATE: i32 = 36;
pub const ATTR_GLOBAL_MEMORY_BUS_WIDTH: i32 = 37;
pub const ATTR_L2_CACHE_SIZE: i32 = 38;
pub const ATTR_MAX_THREADS_PER_MULTIPROCESSOR: i32 = 39;
pub const ATTR_ASYNC_ENGINE_COUNT: i32 = 40;
pub const ATTR_UNIFIED_ADDRESSING: i32 = 41;
pub const ATTR_COMPUTE_CAPABILITY_MAJOR: i32 = 75;
pub const ATTR_COMPUTE_CAPABILITY_MINOR: i32 = 76;
pub const ATTR_STREAM_PRIORITIES_SUPPORTED: i32 = 78;
pub const ATTR_GLOBAL_L1_CACHE_SUPPORTED: i32 = 79;
pub const ATTR_LOCAL_L1_CACHE_SUPPORTED: i32 = 80;
pub const ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: i32 = 81;
pub const ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR: i32 = 82;
pub const ATTR_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: i32 = 87;
pub const ATTR_COMPUTE_PREEMPTION_SUPPORTED: i32 = 90;
pub const ATTR_COOPERATIVE_LAUNCH: i32 = 95;
pub const ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
pub const ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR: i32 = 106;
pub const ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK: i32 = 111;
pub const ATTR_MEMORY_POOLS_SUPPORTED: i32 = 115;
/// Largest `CUdevice_attribute` value known (CUDA 13.x headers); larger ones are invalid.
pub const ATTR_LAST: i32 = 156;

// Function attributes (`CUfunction_attribute`).
pub const FUNC_MAX_THREADS_PER_BLOCK: i32 = 0;
pub const FUNC_SHARED_SIZE_BYTES: i32 = 1;
pub const FUNC_CONST_SIZE_BYTES: i32 = 2;
pub const FUNC_LOCAL_SIZE_BYTES: i32 = 3;
pub const FUNC_NUM_REGS: i32 = 4;
pub const FUNC_PTX_VERSION: i32 = 5;
pub const FUNC_BINARY_VERSION: i32 = 6;
pub const FUNC_CACHE_MODE_CA: i32 = 7;
pub const FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
pub const FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT: i32 = 9;
/// Largest `CUfunction_attribute` value known (exclusive `CU_FUNC_ATTRIBUTE_MAX`).
pub const FUNC_ATTR_END: i32 = 18;

/// `CU_EVENT_DISABLE_TIMING`.
pub const EVENT_DISABLE_TIMING: u32 = 0x2;

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: stream handles that always exist.
pub const STREAM_LEGACY: usize = 0x1;
pub const STREAM_PER_THREAD: usize = 0x2;

/// `CUlimit` values.
pub const LIMIT_STACK_SIZE: i32 = 0;
pub const LIMIT_PRINTF_FIFO_SIZE: i32 = 1;
pub const LIMIT_MALLOC_HEAP_SIZE: i32 = 2;

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`
/// (the `extra` argument of `cuLaunchKernel`).
pub const LAUNCH_PARAM_END: usize = 0x00;
pub const LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
pub const LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;

/// `CU_STREAM_NON_BLOCKING` (`cuStreamCreate` flags): the stream does not synchronize with the
/// legacy stream.
pub const STREAM_NON_BLOCKING: u32 = 0x1;

/// `CUstreamCaptureMode`.
pub const CAPTURE_MODE_GLOBAL: i32 = 0;
pub const CAPTURE_MODE_THREAD_LOCAL: i32 = 1;
pub const CAPTURE_MODE_RELAXED: i32 = 2;

/// `CUstreamCaptureStatus`.
pub const CAPTURE_STATUS_NONE: i32 = 0;
pub const CAPTURE_STATUS_ACTIVE: i32 = 1;
pub const CAPTURE_STATUS_INVALIDATED: i32 = 2;

/// `CU_EVENT_WAIT_EXTERNAL` (`cuStreamWaitEvent` flags).
pub const EVENT_WAIT_EXTERNAL: u32 = 0x1;

/// `CUgraphInstantiate_flags`.
pub const GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH: u64 = 0x1;
pub const GRAPH_INSTANTIATE_UPLOAD: u64 = 0x2;
pub const GRAPH_INSTANTIATE_DEVICE_LAUNCH: u64 = 0x4;
pub const GRAPH_INSTANTIATE_USE_NODE_PRIORITY: u64 = 0x8;
