//! The exports called as cudarc calls them. The driver state is global, so the tests take a
//! lock and each one retains and releases the primary context (the last release destroys it,
//! sticky error included).

use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

use crate::consts::*;
use crate::context::*;
use crate::device::*;
use crate::error::*;
use crate::event::*;
use crate::ffi::Handle;
use crate::launch::*;
use crate::memory::*;
use crate::module::*;
use crate::stream::*;

static SERIAL: Mutex<()> = Mutex::new(());

const SCALE: &str = r#"
.version 9.0
.target sm_80
.address_size 64
.visible .entry scale(.param .u64 p, .param .f32 s, .param .u32 n)
{
    .reg .pred %p<2>; .reg .b32 %r<6>; .reg .f32 %f<3>; .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p];
    ld.param.f32 %f1, [s];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f2, [%rd4];
    mul.rn.f32 %f2, %f2, %f1;
    st.global.f32 [%rd4], %f2;
DONE:
    ret;
}
.extern .shared .align 4 .b8 buf[];
.visible .entry smem(.param .u32 n)
{
    .reg .b32 %r<4>; .reg .b64 %rd<3>;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd1, %r1, 4;
    mov.u64 %rd2, buf;
    add.s64 %rd2, %rd2, %rd1;
    st.shared.u32 [%rd2], %r1;
    ret;
}
"#;

struct Setup {
    _lock: std::sync::MutexGuard<'static, ()>,
    module: Handle,
}

impl Drop for Setup {
    fn drop(&mut self) {
        unsafe {
            cuDevicePrimaryCtxRelease_v2(0);
            cuCtxSetCurrent(std::ptr::null_mut());
        }
    }
}

fn setup() -> Setup {
    let lock = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 0), CUDA_SUCCESS);
        assert_eq!(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        let src = std::ffi::CString::new(SCALE).unwrap();
        let mut module = std::ptr::null_mut();
        assert_eq!(
            cuModuleLoadData(&mut module, src.as_ptr() as *const c_void),
            CUDA_SUCCESS
        );
        Setup {
            _lock: lock,
            module,
        }
    }
}

unsafe fn function(s: &Setup, name: &str) -> Handle {
    let name = std::ffi::CString::new(name).unwrap();
    let mut f = std::ptr::null_mut();
    assert_eq!(
        cuModuleGetFunction(&mut f, s.module, name.as_ptr()),
        CUDA_SUCCESS
    );
    f
}

unsafe fn alloc_f32(data: &[f32]) -> u64 {
    let mut p = 0;
    assert_eq!(cuMemAlloc_v2(&mut p, data.len() * 4), CUDA_SUCCESS);
    assert_eq!(
        cuMemcpyHtoD_v2(p, data.as_ptr() as *const c_void, data.len() * 4),
        CUDA_SUCCESS
    );
    p
}

unsafe fn download_f32(p: u64, n: usize) -> Vec<f32> {
    let mut v = vec![0f32; n];
    assert_eq!(
        cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, p, n * 4),
        CUDA_SUCCESS
    );
    v
}

unsafe fn launch_scale(f: Handle, p: u64, n: u32, grid: u32) -> CUresult {
    let (mut p, mut s, mut n) = (p, 2.0f32, n);
    let mut params = [
        &mut p as *mut u64 as *mut c_void,
        &mut s as *mut f32 as *mut c_void,
        &mut n as *mut u32 as *mut c_void,
    ];
    cuLaunchKernel(
        f,
        grid,
        1,
        1,
        32,
        1,
        1,
        0,
        std::ptr::null_mut(),
        params.as_mut_ptr(),
        std::ptr::null_mut(),
    )
}

#[test]
fn device_queries() {
    let _s = setup();
    unsafe {
        let mut n = 0;
        assert_eq!(cuDeviceGetCount(&mut n), CUDA_SUCCESS);
        assert_eq!(n, 1);
        let mut dev = -1;
        assert_eq!(cuDeviceGet(&mut dev, 1), CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(cuDeviceGet(&mut dev, 0), CUDA_SUCCESS);
        let mut name = [0 as c_char; 64];
        assert_eq!(cuDeviceGetName(name.as_mut_ptr(), 64, 0), CUDA_SUCCESS);
        assert_eq!(CStr::from_ptr(name.as_ptr()).to_str().unwrap(), DEVICE_NAME);
        let attr = |a| {
            let mut v = -1;
            assert_eq!(cuDeviceGetAttribute(&mut v, a, 0), CUDA_SUCCESS);
            v
        };
        // The defaults (SIMCUDA_COMPUTE_CAP and SIMCUDA_SM_COUNT unset): an sm_120 device.
        let spec = spec().unwrap();
        assert_eq!(
            (attr(75), attr(76)),
            ((spec.arch / 10) as i32, (spec.arch % 10) as i32)
        );
        assert_eq!(attr(ATTR_MULTIPROCESSOR_COUNT), spec.sm_count as i32);
        assert_eq!(
            attr(ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
            spec.shared_optin() as i32
        );
        if std::env::var_os("SIMCUDA_COMPUTE_CAP").is_none() {
            assert_eq!((attr(75), attr(76)), (12, 0));
            assert_eq!(attr(ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), 101_376);
            assert_eq!(attr(ATTR_MAX_THREADS_PER_MULTIPROCESSOR), 1536);
        }
        assert_eq!(attr(ATTR_MEMORY_POOLS_SUPPORTED), 0);
        let mut v = 0;
        assert_eq!(
            cuDeviceGetAttribute(&mut v, 10_000, 0),
            CUDA_ERROR_INVALID_VALUE
        );
        let mut s = std::ptr::null();
        assert_eq!(
            cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &mut s),
            CUDA_SUCCESS
        );
        assert_eq!(
            CStr::from_ptr(s).to_str().unwrap(),
            "CUDA_ERROR_ILLEGAL_ADDRESS"
        );
        assert_eq!(
            cuGetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &mut s),
            CUDA_SUCCESS
        );
        assert_eq!(
            CStr::from_ptr(s).to_str().unwrap(),
            "an illegal memory access was encountered"
        );
        assert_eq!(cuGetErrorString(12345, &mut s), CUDA_ERROR_INVALID_VALUE);
        assert!(s.is_null());
        assert_eq!(
            error_name(CUDA_ERROR_LAUNCH_FAILED),
            "CUDA_ERROR_LAUNCH_FAILED"
        );
        assert_eq!(error_name(12345), "?");
    }
}

#[test]
fn memory_round_trips_and_is_bounds_checked() {
    let _s = setup();
    unsafe {
        let data: Vec<f32> = (0..100).map(|i| i as f32).collect();
        let p = alloc_f32(&data);
        assert_eq!(download_f32(p, 100), data);
        assert_eq!(cuMemsetD8_v2(p, 0, 8), CUDA_SUCCESS);
        assert_eq!(download_f32(p, 3), vec![0.0, 0.0, 2.0]);
        let mut q = 0;
        assert_eq!(cuMemAlloc_v2(&mut q, 400), CUDA_SUCCESS);
        assert_eq!(cuMemcpyDtoD_v2(q, p, 400), CUDA_SUCCESS);
        assert_eq!(download_f32(q, 100)[99], 99.0);
        // Past the end of the allocation.
        assert_eq!(cuMemcpyDtoD_v2(q, p, 404), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemAlloc_v2(&mut q, 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
        // Not sticky.
        assert_eq!(cuCtxSynchronize(), CUDA_SUCCESS);
    }
}

#[test]
fn events_time_on_the_host_unless_timing_is_disabled() {
    let _s = setup();
    unsafe {
        let (mut a, mut b, mut c) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(cuEventCreate(&mut a, 0), CUDA_SUCCESS);
        assert_eq!(cuEventCreate(&mut b, 0), CUDA_SUCCESS);
        assert_eq!(cuEventCreate(&mut c, EVENT_DISABLE_TIMING), CUDA_SUCCESS);
        let mut ms = -1.0;
        assert_eq!(
            cuEventElapsedTime_v2(&mut ms, a, b),
            CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(cuEventRecord(a, std::ptr::null_mut()), CUDA_SUCCESS);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(cuEventRecord(b, std::ptr::null_mut()), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(c, std::ptr::null_mut()), CUDA_SUCCESS);
        assert_eq!(cuEventSynchronize(b), CUDA_SUCCESS);
        assert_eq!(cuEventElapsedTime_v2(&mut ms, a, b), CUDA_SUCCESS);
        assert!((15.0..2000.0).contains(&ms), "{ms}");
        assert_eq!(cuEventElapsedTime(&mut ms, a, c), CUDA_ERROR_INVALID_HANDLE);
        let mut s = std::ptr::null_mut();
        assert_eq!(cuStreamCreate(&mut s, 1), CUDA_SUCCESS);
        assert_eq!(cuStreamWaitEvent(s, a, 0), CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
        assert_eq!(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
        for e in [a, b, c] {
            assert_eq!(cuEventDestroy_v2(e), CUDA_SUCCESS);
        }
        assert_eq!(cuEventQuery(a), CUDA_ERROR_INVALID_HANDLE);
    }
}

#[test]
fn launches_run_on_ptxsim() {
    let s = setup();
    unsafe {
        let f = function(&s, "scale");
        let data: Vec<f32> = (0..100).map(|i| i as f32).collect();
        let p = alloc_f32(&data);
        assert_eq!(launch_scale(f, p, 100, 4), CUDA_SUCCESS);
        let want: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
        assert_eq!(download_f32(p, 100), want);
        let mut g = std::ptr::null_mut();
        let bad = std::ffi::CString::new("nope").unwrap();
        assert_eq!(
            cuModuleGetFunction(&mut g, s.module, bad.as_ptr()),
            CUDA_ERROR_NOT_FOUND
        );
    }
}

#[test]
fn launch_limits_are_checked_like_the_driver() {
    let s = setup();
    unsafe {
        let f = function(&s, "smem");
        let mut n = 1u32;
        let mut params = [&mut n as *mut u32 as *mut c_void];
        let launch = |threads: u32, shared: u32, params: &mut [*mut c_void; 1]| {
            cuLaunchKernel(
                f,
                1,
                1,
                1,
                threads,
                1,
                1,
                shared,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(launch(2048, 0, &mut params), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(launch(256, 1024, &mut params), CUDA_SUCCESS);
        // More than 48 KiB needs the attribute, up to the opt-in limit.
        assert_eq!(
            launch(256, 64 * 1024, &mut params),
            CUDA_ERROR_INVALID_VALUE
        );
        let optin = spec().unwrap().shared_optin() as i32;
        assert_eq!(
            cuFuncSetAttribute(f, FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin + 1),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuFuncSetAttribute(f, FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin),
            CUDA_SUCCESS
        );
        let mut v = 0;
        assert_eq!(
            cuFuncGetAttribute(
                &mut v,
                FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                function(&s, "smem")
            ),
            CUDA_SUCCESS
        );
        assert_eq!(v, optin);
        assert_eq!(launch(256, 64 * 1024, &mut params), CUDA_SUCCESS);
        // Too little dynamic shared memory for 256 threads: an out-of-bounds shared store,
        // which is a sticky error.
        assert_eq!(launch(256, 16, &mut params), CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    }
}

#[test]
fn faults_and_findings_are_sticky_errors() {
    let s = setup();
    unsafe {
        let f = function(&s, "scale");
        // Never-written device memory: initcheck.
        let mut p = 0;
        assert_eq!(cuMemAlloc_v2(&mut p, 400), CUDA_SUCCESS);
        assert_eq!(launch_scale(f, p, 100, 4), CUDA_ERROR_LAUNCH_FAILED);
        let mut q = 0;
        assert_eq!(cuMemAlloc_v2(&mut q, 4), CUDA_ERROR_LAUNCH_FAILED);
    }
    drop(s);
    let s = setup();
    unsafe {
        // A fresh context after the last release: out of bounds is an illegal address.
        let f = function(&s, "scale");
        let p = alloc_f32(&[1.0; 10]);
        assert_eq!(launch_scale(f, p, 100, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
        let mut v = vec![0f32; 10];
        assert_eq!(
            cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, p, 40),
            CUDA_ERROR_ILLEGAL_ADDRESS
        );
    }
}

#[test]
fn calls_need_a_current_context() {
    let _lock = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    unsafe {
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        cuCtxSetCurrent(std::ptr::null_mut());
        let mut p = 0;
        assert_eq!(cuMemAlloc_v2(&mut p, 4), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(
            cuCtxSetCurrent(0xdead_0000usize as Handle),
            CUDA_ERROR_INVALID_CONTEXT
        );
        let mut cur = 1usize as Handle;
        assert_eq!(cuCtxGetCurrent(&mut cur), CUDA_SUCCESS);
        assert!(cur.is_null());
    }
}

#[test]
fn architectures() {
    assert_eq!(Spec::of(120, 8).unwrap().shared_optin(), 101_376);
    assert_eq!(Spec::of(80, 8).unwrap().shared_optin(), 166_912);
    assert_eq!(Spec::of(90, 8).unwrap().shared_optin(), 232_448);
    assert!(Spec::of(61, 8).is_none());
    assert_eq!(parse_arch("12.0"), Some(120));
    assert_eq!(parse_arch(" 90 "), Some(90));
    assert_eq!(parse_arch("8.6"), Some(86));
    assert_eq!(parse_arch("x"), None);
}

#[test]
fn target_arch_parses_ptx_targets() {
    assert_eq!(target_arch("sm_90a"), Some(90));
    assert_eq!(target_arch("sm_120"), Some(120));
    assert_eq!(target_arch("bogus"), None);
}

#[test]
fn alloc_count_counts_successful_allocations_only() {
    let _s = setup();
    unsafe {
        let before = simcuda_alloc_count();
        let mut p = 0;
        assert_eq!(cuMemAlloc_v2(&mut p, 64), CUDA_SUCCESS);
        assert_eq!(simcuda_alloc_count(), before + 1);
        // Failures are not allocations; frees do not count down.
        assert_eq!(cuMemAlloc_v2(&mut p, 0), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuMemAlloc_v2(&mut p, usize::MAX), CUDA_ERROR_OUT_OF_MEMORY);
        let mut q = 0;
        assert_eq!(
            cuMemAllocAsync(&mut q, 16, std::ptr::null_mut()),
            CUDA_SUCCESS
        );
        assert_eq!(simcuda_alloc_count(), before + 2);
        assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(q), CUDA_SUCCESS);
        assert_eq!(simcuda_alloc_count(), before + 2);
    }
}
