//! Modules and functions: `cuModuleLoadData`, `cuModuleLoadFatBinary`, `cuModuleUnload`,
//! `cuModuleGetFunction`, `cuFuncSetAttribute`, `cuFuncGetAttribute`, `cuFuncSetCacheConfig`.
//!
//! A module is loaded from a fatbin (zstd-compressed entries included), a
//! `__fatBinC_Wrapper_t` or PTX text ([`crate::fatbin::load_image`]). From a fatbin it runs the
//! PTX that is the code a GPU of the emulated architecture would run: the `compute_XY` PTX
//! where the GPU would run `sm_XY` SASS (nvcc's code depends on `__CUDA_ARCH__`), the PTX it
//! would JIT otherwise (see [`crate::fatbin::select_ptx`]); plain PTX text for a newer target
//! than the device is `CUDA_ERROR_INVALID_PTX`, as the JIT would refuse it. PTX is parsed by
//! ptxsim once per text. A function has one handle per module and name, so that its
//! attributes stick; `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` is checked against the
//! device's opt-in limit, and `CU_FUNC_ATTRIBUTE_NUM_REGS` is `CUDA_ERROR_NOT_SUPPORTED`
//! (registers are ptxas's, unknown from PTX).

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::consts::*;
use crate::device::{MAX_THREADS_PER_BLOCK, SHARED_PER_BLOCK};
use crate::fatbin::{self, load_image};
use crate::ffi::*;
use crate::state::{driver, Function, LoadedModule};

// ---- modules -------------------------------------------------------------------------

/// The `sm_XX` number of a PTX `.target` (e.g. 90 for `sm_90a`).
pub(crate) fn target_arch(target: &str) -> Option<u32> {
    let digits: String = target
        .trim_start_matches("sm_")
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut Handle, image: *const c_void) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        if module.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let arch = d.spec().arch;
        let loaded = load_image(image, true, arch).and_then(|ptx| {
            let m = d.parse(&ptx.text)?;
            if ptx.arch == 0 && target_arch(m.target()).is_some_and(|a| a > arch) {
                return Err(fatbin::LoadError {
                    code: CUDA_ERROR_INVALID_PTX,
                    message: format!(
                        "PTX for {} cannot be compiled for a compute capability {}.{} device",
                        m.target(),
                        arch / 10,
                        arch % 10
                    ),
                });
            }
            Ok(m)
        });
        match loaded {
            Ok(m) => {
                let h = d.handle();
                ctx!(d).modules.insert(h, LoadedModule { module: m });
                out(module, h as Handle)
            }
            Err(e) => {
                say(format_args!("cuModuleLoadData: {}", e.message));
                e.code
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadFatBinary(
    module: *mut Handle,
    image: *const c_void,
) -> CUresult {
    cuModuleLoadData(module, image)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(module: Handle) -> CUresult {
    guard! {
        with_ctx(|c| {
            let h = module as usize;
            if c.modules.remove(&h).is_none() {
                return CUDA_ERROR_INVALID_HANDLE;
            }
            c.functions.retain(|_, f| f.module_handle != h);
            CUDA_SUCCESS
        })
    }
}

// ---- functions -----------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    func: *mut Handle,
    module: Handle,
    name: *const c_char,
) -> CUresult {
    guard! {
        let mut d = driver();
        ctx!(d);
        if func.is_null() || name.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        let Ok(name) = CStr::from_ptr(name).to_str() else {
            return CUDA_ERROR_NOT_FOUND;
        };
        let mh = module as usize;
        let c = ctx!(d);
        let Some(m) = c.modules.get(&mh) else {
            return CUDA_ERROR_INVALID_HANDLE;
        };
        let m = m.module.clone();
        // One handle per function, as the driver does, so that attributes stick.
        if let Some((&h, _)) = c.functions.iter().find(|(_, f)| f.module_handle == mh && f.name == name) {
            return out(func, h as Handle);
        }
        let Some(entry) = m.entry(name) else {
            return CUDA_ERROR_NOT_FOUND;
        };
        let static_shared = entry.static_shared_bytes as u32;
        let f = Function {
            module: m.clone(),
            module_handle: mh,
            name: name.to_string(),
            static_shared,
            max_dynamic_shared: SHARED_PER_BLOCK.saturating_sub(static_shared),
            carveout: -1,
        };
        let h = d.handle();
        ctx!(d).functions.insert(h, f);
        out(func, h as Handle)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(func: Handle, attrib: c_int, value: c_int) -> CUresult {
    guard! {
        with_spec_ctx(|spec, c| {
            let optin = spec.shared_optin();
            let Some(f) = c.functions.get_mut(&(func as usize)) else {
                return CUDA_ERROR_INVALID_HANDLE;
            };
            match attrib {
                FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                    if value < 0 || value as u32 > optin - f.static_shared.min(optin) {
                        say(format_args!(
                            "cuFuncSetAttribute({}, MAX_DYNAMIC_SHARED_SIZE_BYTES, {value}): more than the {optin} bytes the device allows",
                            f.name
                        ));
                        return CUDA_ERROR_INVALID_VALUE;
                    }
                    f.max_dynamic_shared = value as u32;
                    CUDA_SUCCESS
                }
                FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT => {
                    if !(-1..=100).contains(&value) {
                        return CUDA_ERROR_INVALID_VALUE;
                    }
                    f.carveout = value;
                    CUDA_SUCCESS
                }
                _ => CUDA_ERROR_INVALID_VALUE,
            }
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    func: Handle,
) -> CUresult {
    guard! {
        with_spec_ctx(|spec, c| {
            let arch = spec.arch;
            let Some(f) = c.functions.get(&(func as usize)) else {
                return CUDA_ERROR_INVALID_HANDLE;
            };
            let Some(entry) = f.module.entry(&f.name) else {
                return CUDA_ERROR_INVALID_HANDLE;
            };
            let (major, minor) = f.module.version();
            let v = match attrib {
                FUNC_MAX_THREADS_PER_BLOCK => MAX_THREADS_PER_BLOCK as i32,
                FUNC_SHARED_SIZE_BYTES => f.static_shared as i32,
                FUNC_CONST_SIZE_BYTES => 0,
                FUNC_LOCAL_SIZE_BYTES => entry.local_bytes as i32,
                // Registers are allocated by ptxas for SASS; PTX does not say.
                FUNC_NUM_REGS => return CUDA_ERROR_NOT_SUPPORTED,
                FUNC_PTX_VERSION => (major * 10 + minor) as i32,
                FUNC_BINARY_VERSION => arch as i32,
                FUNC_CACHE_MODE_CA => 0,
                FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES => f.max_dynamic_shared as i32,
                FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT => f.carveout,
                a if (0..FUNC_ATTR_END).contains(&a) => 0,
                _ => return CUDA_ERROR_INVALID_VALUE,
            };
            out(pi, v)
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetCacheConfig(func: Handle, config: c_int) -> CUresult {
    guard! {
        with_ctx(|c| {
            check!(found(c.functions.contains_key(&(func as usize))));
            if !valid_cache_config(config) {
                return CUDA_ERROR_INVALID_VALUE;
            }
            CUDA_SUCCESS
        })
    }
}
