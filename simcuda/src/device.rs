//! Initialization and the device: `cuInit`, `cuDriverGetVersion`, `cuDeviceGet*`
//! (count, ordinal, name, attributes, compute capability, memory, UUID).
//!
//! There is one device, ordinal 0, "ptxsim emulated CUDA device": compute capability 12.0 with
//! 8 SMs by default, with that architecture's limits ([`Spec`]); `SIMCUDA_COMPUTE_CAP` (e.g.
//! `90` or `9.0`) and `SIMCUDA_SM_COUNT` choose others, read once at the first `cuInit`. It
//! has no memory pools (so cudarc allocates with `cuMemAlloc` and frees with `cuMemFree`).

use std::ffi::{c_char, c_int, c_uint};
use std::sync::OnceLock;

use crate::consts::*;
use crate::ffi::*;
use crate::state::driver;

/// The emulated device's name.
pub const DEVICE_NAME: &str = "ptxsim emulated CUDA device";
/// Compute capability when `SIMCUDA_COMPUTE_CAP` is not set: 12.0, the architecture of the
/// PTX that warpnorm's default build puts in its fatbins (`compute_120`), so that the code
/// that runs is the code an sm_120 GPU would run (see [`crate::fatbin::select_ptx`]).
pub const DEFAULT_ARCH: u32 = 120;
/// Streaming multiprocessors when `SIMCUDA_SM_COUNT` is not set.
pub const DEFAULT_SM_COUNT: u32 = 8;
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
/// Shared memory per block without opting in (bytes).
pub const SHARED_PER_BLOCK: u32 = 48 * 1024;
pub const REGISTERS_PER_SM: i32 = 65_536;
pub const MAX_GRID_X: u32 = i32::MAX as u32;
pub const MAX_GRID_YZ: u32 = 65_535;
/// Device memory the emulated device reports (bytes); ptxsim maps host memory lazily.
pub const TOTAL_MEM: u64 = 16 << 30;
/// CUDA 13.0, as `cuDriverGetVersion` reports it.
pub const DRIVER_VERSION: i32 = 13_000;

/// The emulated device: its compute capability and the per-SM limits of that architecture
/// (as NVIDIA's CUDA C++ Core Libraries `cuda::arch_traits` list them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// `major * 10 + minor`, e.g. 120.
    pub arch: u32,
    pub sm_count: u32,
    pub threads_per_sm: u32,
    pub blocks_per_sm: u32,
    pub shared_per_sm: u32,
    /// Shared memory the driver reserves per block (bytes).
    pub reserved_shared: u32,
}

impl Spec {
    /// The limits of architecture `arch` (`major * 10 + minor`), if known.
    pub fn of(arch: u32, sm_count: u32) -> Option<Spec> {
        let (shared_kib, blocks, threads) = match arch {
            75 => (64, 16, 1024),
            80 => (164, 32, 2048),
            86 | 88 => (100, 16, 1536),
            87 => (164, 16, 1536),
            89 => (100, 24, 1536),
            90 | 100 | 103 => (228, 32, 2048),
            110 => (228, 24, 1536),
            120 | 121 => (100, 24, 1536),
            _ => return None,
        };
        Some(Spec {
            arch,
            sm_count,
            threads_per_sm: threads,
            blocks_per_sm: blocks,
            shared_per_sm: shared_kib * 1024,
            reserved_shared: if arch >= 80 { 1024 } else { 0 },
        })
    }

    /// Shared memory per block with `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
    pub fn shared_optin(&self) -> u32 {
        self.shared_per_sm - self.reserved_shared
    }

    /// The device `SIMCUDA_COMPUTE_CAP` (`120`, `12.0`, `90`, ...; default 12.0) and
    /// `SIMCUDA_SM_COUNT` (default 8) describe, or why they describe none.
    pub fn from_env() -> Result<Spec, String> {
        let arch = match std::env::var("SIMCUDA_COMPUTE_CAP") {
            Err(_) => DEFAULT_ARCH,
            Ok(v) => parse_arch(&v)
                .ok_or_else(|| format!("SIMCUDA_COMPUTE_CAP={v:?} is not a compute capability"))?,
        };
        let sm_count = match std::env::var("SIMCUDA_SM_COUNT") {
            Err(_) => DEFAULT_SM_COUNT,
            Ok(v) => v
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=1024).contains(n))
                .ok_or_else(|| format!("SIMCUDA_SM_COUNT={v:?} is not a count of 1 to 1024"))?,
        };
        Spec::of(arch, sm_count).ok_or_else(|| {
            format!(
                "compute capability {}.{} is not one simcuda knows",
                arch / 10,
                arch % 10
            )
        })
    }
}

/// `"12.0"` or `"120"` -> 120.
pub(crate) fn parse_arch(v: &str) -> Option<u32> {
    let v = v.trim();
    match v.split_once('.') {
        Some((major, minor)) => Some(major.parse::<u32>().ok()? * 10 + minor.parse::<u32>().ok()?),
        None => v.parse().ok(),
    }
}

/// The emulated device, fixed at the first `cuInit`.
pub fn spec() -> Result<Spec, String> {
    static SPEC: OnceLock<Result<Spec, String>> = OnceLock::new();
    SPEC.get_or_init(Spec::from_env).clone()
}

/// The value of device attribute `a`, or `None` for a value that is not a `CUdevice_attribute`.
pub fn device_attribute(s: &Spec, a: i32) -> Option<i32> {
    Some(match a {
        ATTR_MAX_THREADS_PER_BLOCK => MAX_THREADS_PER_BLOCK as i32,
        ATTR_MAX_BLOCK_DIM_X | ATTR_MAX_BLOCK_DIM_Y => 1024,
        ATTR_MAX_BLOCK_DIM_Z => 64,
        ATTR_MAX_GRID_DIM_X => MAX_GRID_X as i32,
        ATTR_MAX_GRID_DIM_Y | ATTR_MAX_GRID_DIM_Z => MAX_GRID_YZ as i32,
        ATTR_MAX_SHARED_MEMORY_PER_BLOCK => SHARED_PER_BLOCK as i32,
        ATTR_TOTAL_CONSTANT_MEMORY => 65_536,
        ATTR_WARP_SIZE => 32,
        ATTR_MAX_PITCH => i32::MAX,
        ATTR_MAX_REGISTERS_PER_BLOCK => 65_536,
        ATTR_CLOCK_RATE => 1_410_000,
        ATTR_TEXTURE_ALIGNMENT => 512,
        ATTR_GPU_OVERLAP => 1,
        ATTR_MULTIPROCESSOR_COUNT => s.sm_count as i32,
        ATTR_CAN_MAP_HOST_MEMORY => 0,
        ATTR_CONCURRENT_KERNELS => 1,
        ATTR_MEMORY_CLOCK_RATE => 1_215_000,
        ATTR_GLOBAL_MEMORY_BUS_WIDTH => 5120,
        ATTR_L2_CACHE_SIZE => 40 << 20,
        ATTR_MAX_THREADS_PER_MULTIPROCESSOR => s.threads_per_sm as i32,
        ATTR_ASYNC_ENGINE_COUNT => 2,
        ATTR_UNIFIED_ADDRESSING => 1,
        ATTR_COMPUTE_CAPABILITY_MAJOR => (s.arch / 10) as i32,
        ATTR_COMPUTE_CAPABILITY_MINOR => (s.arch % 10) as i32,
        ATTR_STREAM_PRIORITIES_SUPPORTED => 1,
        ATTR_GLOBAL_L1_CACHE_SUPPORTED | ATTR_LOCAL_L1_CACHE_SUPPORTED => 1,
        ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => s.shared_per_sm as i32,
        ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR => REGISTERS_PER_SM,
        ATTR_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO => 2,
        ATTR_COMPUTE_PREEMPTION_SUPPORTED => 1,
        ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => s.shared_optin() as i32,
        ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR => s.blocks_per_sm as i32,
        ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK => s.reserved_shared as i32,
        // No memory pools: cudarc then allocates with cuMemAlloc and frees with cuMemFree.
        ATTR_MEMORY_POOLS_SUPPORTED => 0,
        // Cooperative launches run every block at once (crate::launch).
        ATTR_COOPERATIVE_LAUNCH => 1,
        // Everything else (textures, surfaces, managed memory, cluster launches, IPC, ...)
        // is absent.
        a if (1..=ATTR_LAST).contains(&a) => 0,
        _ => return None,
    })
}

// ---- initialization and version -------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    guard! {
        if flags != 0 {
            return CUDA_ERROR_INVALID_VALUE;
        }
        match spec() {
            Ok(s) => {
                let mut d = driver();
                d.spec = Some(s);
                d.initialized = true;
                CUDA_SUCCESS
            }
            Err(m) => {
                say(format_args!("cuInit: {m}"));
                CUDA_ERROR_NO_DEVICE
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    guard! { out(version, DRIVER_VERSION) }
}

// ---- the device -----------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    guard! {
        check!(check_init(&driver()));
        out(count, 1)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut CUdevice, ordinal: c_int) -> CUresult {
    guard! {
        with_device(ordinal, |_| out(dev, 0))
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    guard! {
        with_device(dev, |_| {
            if name.is_null() || len <= 0 {
                return CUDA_ERROR_INVALID_VALUE;
            }
            let bytes = DEVICE_NAME.as_bytes();
            let n = bytes.len().min(len as usize - 1);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name as *mut u8, n);
            *name.add(n) = 0;
            CUDA_SUCCESS
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    dev: CUdevice,
) -> CUresult {
    guard! {
        with_device(dev, |d| match device_attribute(&d.spec(), attrib) {
            Some(v) => out(pi, v),
            None => CUDA_ERROR_INVALID_VALUE,
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    dev: CUdevice,
) -> CUresult {
    guard! {
        with_device(dev, |d| {
            let arch = d.spec().arch;
            check!(out(major, (arch / 10) as c_int));
            out(minor, (arch % 10) as c_int)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    guard! {
        with_device(dev, |_| out(bytes, TOTAL_MEM as usize))
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut usize, dev: CUdevice) -> CUresult {
    cuDeviceTotalMem_v2(bytes, dev)
}

/// The emulated device's UUID ("ptxsim-emulated\0" as bytes).
const UUID: [u8; 16] = *b"ptxsim-emulated\0";

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    guard! {
        with_device(dev, |_| out(uuid, UUID))
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult {
    cuDeviceGetUuid(uuid, dev)
}
