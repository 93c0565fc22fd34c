//! Launches: `cuLaunchKernel` and `cuLaunchCooperativeKernel`.
//!
//! A launch is checked like the driver checks it (block and grid limits, dynamic shared memory
//! against the function's `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` and static plus
//! dynamic against the device's opt-in limit: `CUDA_ERROR_INVALID_VALUE`, an error of this call
//! only), each parameter is copied by the entry's PTX layout (from `kernelParams` or the
//! `extra` buffer), and the kernel runs at the call on ptxsim with racecheck and initcheck
//! ([`Context::launch`]). A fault (out of bounds, misaligned, barrier divergence, ...), a data
//! race or a read of uninitialized memory is printed to stderr and returned
//! (`CUDA_ERROR_ILLEGAL_ADDRESS`, `CUDA_ERROR_MISALIGNED_ADDRESS` or
//! `CUDA_ERROR_LAUNCH_FAILED`), and becomes the context's sticky error: every later call in it
//! fails, as on a GPU. `SIMCUDA_TRACE=1` prints every launch with its host time on ptxsim.
//! On a capturing stream the checked launch is recorded (with its parameter values) instead,
//! and runs when the graph is launched ([`crate::graph`]).
//!
//! A cooperative launch must also fit on the device at once, as the driver requires
//! (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`): at most the SMs times the blocks one SM holds by
//! its block, thread and shared-memory limits (registers are not known to the emulator; the
//! caller's occupancy arithmetic covers them). Its blocks then all run at once on ptxsim
//! ([`ptxsim::Device::launch_cooperative`]), so that they may wait for each other.

use std::ffi::{c_uint, c_void};
use std::time::Instant;

use ptxsim::{Arg, FaultKind, LaunchConfig, SimError};

use crate::consts::*;
use crate::device::{MAX_GRID_X, MAX_GRID_YZ, MAX_THREADS_PER_BLOCK};
use crate::error::error_name;
use crate::ffi::*;
use crate::graph::Node;
use crate::state::Context;

/// The parameter buffer given through `cuLaunchKernel`'s `extra` (`CU_LAUNCH_PARAM_*`).
unsafe fn extra_buffer<'a>(extra: *mut *mut c_void) -> Option<&'a [u8]> {
    let (mut ptr, mut size): (*const u8, Option<usize>) = (std::ptr::null(), None);
    let mut i = 0;
    loop {
        let key = *extra.add(i) as usize;
        match key {
            LAUNCH_PARAM_END => break,
            LAUNCH_PARAM_BUFFER_POINTER => ptr = *extra.add(i + 1) as *const u8,
            LAUNCH_PARAM_BUFFER_SIZE => {
                let p = *extra.add(i + 1) as *const usize;
                if p.is_null() {
                    return None;
                }
                size = Some(p.read_unaligned());
            }
            _ => return None,
        }
        i += 2;
    }
    match (ptr.is_null(), size) {
        (false, Some(n)) => Some(std::slice::from_raw_parts(ptr, n)),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    func: Handle,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: Handle,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    launch_call(
        func,
        [grid_x, grid_y, grid_z],
        [block_x, block_y, block_z],
        shared_mem_bytes,
        stream,
        kernel_params,
        extra,
        false,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchCooperativeKernel(
    func: Handle,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: Handle,
    kernel_params: *mut *mut c_void,
) -> CUresult {
    launch_call(
        func,
        [grid_x, grid_y, grid_z],
        [block_x, block_y, block_z],
        shared_mem_bytes,
        stream,
        kernel_params,
        std::ptr::null_mut(),
        true,
    )
}

/// `cuLaunchKernel` (cooperative: `cuLaunchCooperativeKernel`).
#[allow(clippy::too_many_arguments)]
unsafe fn launch_call(
    func: Handle,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    stream: Handle,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
    cooperative: bool,
) -> CUresult {
    let api = if cooperative {
        "cuLaunchCooperativeKernel"
    } else {
        "cuLaunchKernel"
    };
    let ([grid_x, grid_y, grid_z], [block_x, block_y, block_z]) = (grid, block);
    guard! {
        with_spec_ctx(|spec, c| {
            let optin = spec.shared_optin();
            let fh = func as usize;
            let Some(f) = c.functions.get(&fh) else {
                return CUDA_ERROR_INVALID_HANDLE;
            };
            if !c.stream_ok(stream as usize) {
                return CUDA_ERROR_INVALID_HANDLE;
            }
            let reject = |why: String| {
                say(format_args!(
                    "{api}({}, grid {grid:?}, block {block:?}, {shared_mem_bytes} bytes dynamic shared memory): {why}",
                    f.name
                ));
                CUDA_ERROR_INVALID_VALUE
            };
            let threads = block.iter().map(|&b| b as u64).product::<u64>();
            if grid.contains(&0) || block.contains(&0) {
                return reject("a zero dimension".into());
            }
            if block_x > 1024 || block_y > 1024 || block_z > 64 || threads > MAX_THREADS_PER_BLOCK as u64 {
                return reject("block larger than (1024, 1024, 64) or 1024 threads".into());
            }
            if grid_x > MAX_GRID_X || grid_y > MAX_GRID_YZ || grid_z > MAX_GRID_YZ {
                return reject("grid larger than (2^31 - 1, 65535, 65535)".into());
            }
            if shared_mem_bytes > f.max_dynamic_shared {
                return reject(format!(
                    "more dynamic shared memory than the function's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ({})",
                    f.max_dynamic_shared
                ));
            }
            if f.static_shared as u64 + shared_mem_bytes as u64 > optin as u64 {
                return reject(format!(
                    "{} bytes of static plus dynamic shared memory, more than the device's {optin}",
                    f.static_shared as u64 + shared_mem_bytes as u64
                ));
            }
            let Some(entry) = f.module.entry(&f.name) else {
                return CUDA_ERROR_INVALID_HANDLE;
            };
            let mut args = Vec::with_capacity(entry.params.len());
            if !kernel_params.is_null() {
                for (i, p) in entry.params.iter().enumerate() {
                    let ptr = *kernel_params.add(i) as *const u8;
                    if ptr.is_null() {
                        return reject(format!("kernelParams[{i}] is null"));
                    }
                    args.push(Arg::Bytes(std::slice::from_raw_parts(ptr, p.size).to_vec()));
                }
            } else if !extra.is_null() {
                let Some(buf) = extra_buffer(extra) else {
                    return reject("malformed extra".into());
                };
                for p in &entry.params {
                    let Some(b) = buf.get(p.offset..p.offset + p.size) else {
                        return reject("parameter buffer too small".into());
                    };
                    args.push(Arg::Bytes(b.to_vec()));
                }
            } else if !entry.params.is_empty() {
                return reject("no kernelParams and no extra".into());
            }
            if cooperative {
                let warps = threads.div_ceil(32) as u32;
                let by_threads = spec.threads_per_sm / (32 * warps);
                let smem = f.static_shared + shared_mem_bytes;
                let by_smem = if smem == 0 {
                    u32::MAX
                } else {
                    spec.shared_per_sm / ((smem + spec.reserved_shared).div_ceil(128) * 128)
                };
                let per_sm = spec.blocks_per_sm.min(by_threads).min(by_smem) as u64;
                let blocks = grid.iter().map(|&g| g as u64).product::<u64>();
                if blocks > per_sm * spec.sm_count as u64 {
                    say(format_args!(
                        "{api}({}, grid {grid:?}, block {block:?}): {blocks} blocks do not fit on the device at once ({} SMs x {per_sm})",
                        f.name, spec.sm_count
                    ));
                    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
                }
            }
            let cfg = LaunchConfig { grid, block, shared_mem_bytes };
            let node = Node::Kernel { function: fh, cfg, args, cooperative };
            c.submit(stream as usize, node, api)
        })
    }
}

impl Context {
    /// Runs a kernel on ptxsim with racecheck and initcheck. A fault, a race or a read of
    /// uninitialized memory is printed and becomes the context's sticky error.
    pub fn launch(
        &mut self,
        f: usize,
        cfg: LaunchConfig,
        args: &[Arg],
        cooperative: bool,
    ) -> CUresult {
        let Some(func) = self.functions.get(&f) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        let (module, name) = (func.module.clone(), func.name.clone());
        let trace = std::env::var_os("SIMCUDA_TRACE").is_some();
        let start = Instant::now();
        let result = if cooperative {
            self.dev.launch_cooperative(&module, &name, cfg, args)
        } else {
            self.dev.launch(&module, &name, cfg, args)
        };
        let what = format!(
            "kernel {name} (grid {:?}, block {:?}, {} bytes dynamic shared memory)",
            cfg.grid, cfg.block, cfg.shared_mem_bytes
        );
        if trace {
            say(format_args!(
                "{what}: {:.1} ms on ptxsim",
                start.elapsed().as_secs_f64() * 1e3
            ));
        }
        let code = match result {
            Ok(stats) if stats.reports.is_empty() => return CUDA_SUCCESS,
            Ok(stats) => {
                say(format_args!(
                    "{what}: {} finding(s) of racecheck/initcheck{}:",
                    stats.reports.len() as u64 + stats.reports_omitted,
                    if stats.reports_omitted > 0 {
                        format!(" ({} not shown)", stats.reports_omitted)
                    } else {
                        String::new()
                    }
                ));
                for r in &stats.reports {
                    say(format_args!("  {r}"));
                }
                CUDA_ERROR_LAUNCH_FAILED
            }
            Err(SimError::Fault(fault)) => {
                say(format_args!("{what} faulted: {fault}"));
                match fault.kind {
                    FaultKind::OutOfBounds
                    | FaultKind::UseAfterFree
                    | FaultKind::SharedOutOfBounds
                    | FaultKind::LocalOutOfBounds
                    | FaultKind::ParamOutOfBounds => CUDA_ERROR_ILLEGAL_ADDRESS,
                    FaultKind::Misaligned => CUDA_ERROR_MISALIGNED_ADDRESS,
                    _ => CUDA_ERROR_LAUNCH_FAILED,
                }
            }
            Err(e @ SimError::StepLimit { .. }) => {
                say(format_args!("{what}: {e}"));
                CUDA_ERROR_LAUNCH_TIMEOUT
            }
            Err(SimError::InvalidArgument(m)) => {
                // A bad launch configuration: an error of this call only, as on a GPU.
                say(format_args!("{what} rejected: {m}"));
                return CUDA_ERROR_INVALID_VALUE;
            }
            Err(e) => {
                say(format_args!("{what}: the emulator failed: {e}"));
                CUDA_ERROR_LAUNCH_FAILED
            }
        };
        self.sticky = Some(code);
        say(format_args!(
            "the context is now in error ({}): every later call in it fails, as after a kernel fault on a GPU",
            error_name(code)
        ));
        code
    }
}
