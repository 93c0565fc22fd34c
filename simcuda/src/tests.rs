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
use crate::graph::*;
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
    launch_scale_on(f, p, n, grid, std::ptr::null_mut())
}

/// `scale` (x2) of `n` floats at `p`, on `stream`.
unsafe fn launch_scale_on(f: Handle, p: u64, n: u32, grid: u32, stream: Handle) -> CUresult {
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
        stream,
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
fn cooperative_launches_run_when_the_grid_fits_at_once() {
    let s = setup();
    let spec = spec().unwrap();
    unsafe {
        let f = function(&s, "scale");
        let mut v = 0;
        assert_eq!(
            cuDeviceGetAttribute(&mut v, ATTR_COOPERATIVE_LAUNCH, 0),
            CUDA_SUCCESS
        );
        assert_eq!(v, 1);
        // blocks of 32 threads: min(blocks per SM, threads per SM / 32) of them per SM
        let fit = spec.sm_count * spec.blocks_per_sm.min(spec.threads_per_sm / 32);
        let n = fit * 32;
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let p = alloc_f32(&data);
        let launch = |grid: u32| {
            let (mut p, mut s, mut n) = (p, 2.0f32, n);
            let mut params = [
                &mut p as *mut u64 as *mut c_void,
                &mut s as *mut f32 as *mut c_void,
                &mut n as *mut u32 as *mut c_void,
            ];
            cuLaunchCooperativeKernel(
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
            )
        };
        assert_eq!(launch(fit + 1), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
        assert_eq!(
            download_f32(p, n as usize),
            data,
            "a rejected launch runs nothing"
        );
        assert_eq!(launch(fit), CUDA_SUCCESS);
        let want: Vec<f32> = data.iter().map(|v| v * 2.0).collect();
        assert_eq!(download_f32(p, n as usize), want);
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

// ---- stream capture and graphs ----------------------------------------------------------

/// A fresh stream (`CU_STREAM_NON_BLOCKING` unless `blocking`).
unsafe fn new_stream(blocking: bool) -> Handle {
    let mut s = std::ptr::null_mut();
    assert_eq!(
        cuStreamCreate(&mut s, if blocking { 0 } else { 1 }),
        CUDA_SUCCESS
    );
    s
}

unsafe fn capture_status(s: Handle) -> i32 {
    let mut st = -1;
    assert_eq!(cuStreamIsCapturing(s, &mut st), CUDA_SUCCESS);
    st
}

unsafe fn end_capture(s: Handle) -> (CUresult, Handle) {
    let mut g = 0x1usize as Handle;
    let r = cuStreamEndCapture(s, &mut g);
    (r, g)
}

unsafe fn instantiate(g: Handle) -> Handle {
    let mut e = std::ptr::null_mut();
    assert_eq!(cuGraphInstantiateWithFlags(&mut e, g, 0), CUDA_SUCCESS);
    e
}

unsafe extern "C" fn count_calls(data: *mut c_void) {
    *(data as *mut u32) += 1;
}

#[test]
fn captured_work_is_recorded_and_replayed_in_order() {
    let su = setup();
    unsafe {
        let f = function(&su, "scale");
        let s = new_stream(false);
        let data: Vec<f32> = (0..64).map(|i| i as f32).collect();
        let p = alloc_f32(&data);
        let q = alloc_f32(&[0.0; 64]);
        let mut host_in = vec![1.0f32; 64];
        let mut host_out = vec![0.0f32; 64];
        let mut calls = 0u32;
        assert_eq!(capture_status(s), CAPTURE_STATUS_NONE);
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_THREAD_LOCAL),
            CUDA_SUCCESS
        );
        assert_eq!(capture_status(s), CAPTURE_STATUS_ACTIVE);
        let (mut st, mut id, mut graph, mut deps, mut n) =
            (-1, 0u64, std::ptr::null_mut(), std::ptr::null(), 9usize);
        let info = |st: &mut i32,
                    id: &mut u64,
                    graph: &mut Handle,
                    deps: &mut *const Handle,
                    n: &mut usize| {
            cuStreamGetCaptureInfo_v3(s, st, id, graph, deps, std::ptr::null_mut(), n)
        };
        assert_eq!(
            info(&mut st, &mut id, &mut graph, &mut deps, &mut n),
            CUDA_SUCCESS
        );
        assert_eq!((st, n), (CAPTURE_STATUS_ACTIVE, 0));
        assert!(id != 0 && !graph.is_null());
        // p *= 2; q <- host_in; q *= 2; host_out <- q; a host function; p *= 2.
        assert_eq!(launch_scale_on(f, p, 64, 2, s), CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyHtoDAsync_v2(q, host_in.as_ptr() as *const c_void, 256, s),
            CUDA_SUCCESS
        );
        assert_eq!(launch_scale_on(f, q, 64, 2, s), CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyDtoHAsync_v2(host_out.as_mut_ptr() as *mut c_void, q, 256, s),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuLaunchHostFunc(s, Some(count_calls), &mut calls as *mut u32 as *mut c_void),
            CUDA_SUCCESS
        );
        assert_eq!(launch_scale_on(f, p, 64, 2, s), CUDA_SUCCESS);
        let mut id2 = 0;
        assert_eq!(cuStreamGetCaptureInfo(s, &mut st, &mut id2), CUDA_SUCCESS);
        assert_eq!(id2, id);
        assert_eq!(
            info(&mut st, &mut id, &mut graph, &mut deps, &mut n),
            CUDA_SUCCESS
        );
        assert!(n == 1 && !deps.is_null());
        // Nothing ran.
        assert_eq!(calls, 0);
        assert_eq!(host_out, vec![0.0; 64]);
        let (r, g) = end_capture(s);
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(g, graph);
        assert_eq!(capture_status(s), CAPTURE_STATUS_NONE);
        assert_eq!(download_f32(p, 64), data);
        assert_eq!(download_f32(q, 64), vec![0.0; 64]);

        let e = instantiate(g);
        // The executable graph keeps its nodes after the graph is destroyed.
        assert_eq!(cuGraphDestroy(g), CUDA_SUCCESS);
        assert_eq!(cuGraphDestroy(g), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuGraphUpload(e, s), CUDA_SUCCESS);
        for k in 1..=3u32 {
            // Host memory is read when the graph runs, not when it was captured.
            host_in.fill(k as f32);
            assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
            assert_eq!(calls, k);
            assert_eq!(host_out, vec![2.0 * k as f32; 64]);
            let want: Vec<f32> = data.iter().map(|v| v * 4f32.powi(k as i32)).collect();
            assert_eq!(download_f32(p, 64), want);
        }
        // A graph launch on the legacy stream, and one captured into another graph.
        assert_eq!(cuGraphLaunch(e, std::ptr::null_mut()), CUDA_SUCCESS);
        assert_eq!(calls, 4);
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_GLOBAL),
            CUDA_SUCCESS
        );
        assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
        assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
        let (r, g2) = end_capture(s);
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(calls, 4);
        let e2 = instantiate(g2);
        assert_eq!(cuGraphLaunch(e2, s), CUDA_SUCCESS);
        assert_eq!(calls, 6);
        assert_eq!(download_f32(p, 64)[1], 4f32.powi(6));
        for x in [e, e2] {
            assert_eq!(cuGraphExecDestroy(x), CUDA_SUCCESS);
        }
        assert_eq!(cuGraphExecDestroy(e), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuGraphLaunch(e, s), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuGraphDestroy(g2), CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
    }
}

#[test]
fn instantiate_flags_are_checked() {
    let su = setup();
    unsafe {
        let f = function(&su, "scale");
        let s = new_stream(false);
        let p = alloc_f32(&[1.0; 32]);
        let mut host = [0f32; 32];
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_RELAXED),
            CUDA_SUCCESS
        );
        assert_eq!(launch_scale_on(f, p, 32, 1, s), CUDA_SUCCESS);
        let (r, kernel_only) = end_capture(s);
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_RELAXED),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuMemcpyDtoHAsync_v2(host.as_mut_ptr() as *mut c_void, p, 128, s),
            CUDA_SUCCESS
        );
        let (r, with_host_copy) = end_capture(s);
        assert_eq!(r, CUDA_SUCCESS);
        let mut e = std::ptr::null_mut();
        let inst = |e: &mut Handle, g: Handle, flags: u64| cuGraphInstantiateWithFlags(e, g, flags);
        assert_eq!(inst(&mut e, kernel_only, 0x100), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(
            inst(
                &mut e,
                kernel_only,
                GRAPH_INSTANTIATE_DEVICE_LAUNCH | GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH
            ),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            inst(&mut e, with_host_copy, GRAPH_INSTANTIATE_DEVICE_LAUNCH),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            inst(&mut e, std::ptr::null_mut(), 0),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            inst(&mut e, 0x77usize as Handle, 0),
            CUDA_ERROR_INVALID_HANDLE
        );
        for flags in [
            GRAPH_INSTANTIATE_DEVICE_LAUNCH,
            GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH | GRAPH_INSTANTIATE_USE_NODE_PRIORITY,
            GRAPH_INSTANTIATE_UPLOAD,
        ] {
            assert_eq!(inst(&mut e, kernel_only, flags), CUDA_SUCCESS);
            assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
            assert_eq!(cuGraphExecDestroy(e), CUDA_SUCCESS);
        }
        assert_eq!(download_f32(p, 1), vec![8.0]);
        let (mut node, mut log) = (0x1usize as Handle, [1 as c_char; 4]);
        assert_eq!(
            cuGraphInstantiate_v2(&mut e, with_host_copy, &mut node, log.as_mut_ptr(), 4),
            CUDA_SUCCESS
        );
        assert!(node.is_null() && log[0] == 0);
        assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
        assert_eq!(host, [8.0; 32]);
    }
}

#[test]
fn capture_begins_and_ends_like_the_driver() {
    let _su = setup();
    unsafe {
        let s = new_stream(false);
        // Not on the legacy stream.
        for legacy in [std::ptr::null_mut(), STREAM_LEGACY as Handle] {
            assert_eq!(
                cuStreamBeginCapture_v2(legacy, CAPTURE_MODE_GLOBAL),
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            );
        }
        assert_eq!(cuStreamBeginCapture_v2(s, 3), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(end_capture(s).0, CUDA_ERROR_ILLEGAL_STATE);
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_THREAD_LOCAL),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_THREAD_LOCAL),
            CUDA_ERROR_ILLEGAL_STATE
        );
        // A thread-local (or global) capture ends on the thread that began it.
        let ctx = current_ctx();
        let s_addr = s as usize;
        let other = std::thread::spawn(move || {
            cuCtxSetCurrent(ctx as Handle);
            end_capture(s_addr as Handle).0
        })
        .join()
        .unwrap();
        assert_eq!(other, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
        assert_eq!(capture_status(s), CAPTURE_STATUS_ACTIVE);
        // An empty capture is an empty graph.
        let (r, g) = end_capture(s);
        assert_eq!(r, CUDA_SUCCESS);
        let e = instantiate(g);
        assert_eq!(cuGraphLaunch(e, s), CUDA_SUCCESS);
        // A relaxed capture may end on another thread.
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_RELAXED),
            CUDA_SUCCESS
        );
        let other = std::thread::spawn(move || {
            cuCtxSetCurrent(ctx as Handle);
            end_capture(s_addr as Handle).0
        })
        .join()
        .unwrap();
        assert_eq!(other, CUDA_SUCCESS);
        assert_eq!(capture_status(s), CAPTURE_STATUS_NONE);
    }
}

unsafe fn current_ctx() -> usize {
    let mut c = std::ptr::null_mut();
    assert_eq!(cuCtxGetCurrent(&mut c), CUDA_SUCCESS);
    c as usize
}

/// Runs `prohibited` during a capture of a fresh stream in `mode` and checks that it fails
/// with `code` and invalidates the capture: later work on the stream fails, the capture ends
/// with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` and no graph, and the stream then works.
unsafe fn check_invalidates(
    su: &Setup,
    mode: i32,
    code: CUresult,
    what: &str,
    prohibited: impl FnOnce(Handle) -> CUresult,
) {
    let f = function(su, "scale");
    let s = new_stream(false);
    let p = alloc_f32(&[1.0; 32]);
    assert_eq!(cuStreamBeginCapture_v2(s, mode), CUDA_SUCCESS, "{what}");
    assert_eq!(launch_scale_on(f, p, 32, 1, s), CUDA_SUCCESS, "{what}");
    assert_eq!(prohibited(s), code, "{what}");
    assert_eq!(capture_status(s), CAPTURE_STATUS_INVALIDATED, "{what}");
    assert_eq!(
        launch_scale_on(f, p, 32, 1, s),
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        "{what}"
    );
    let (r, g) = end_capture(s);
    assert_eq!(
        (r, g),
        (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, std::ptr::null_mut()),
        "{what}"
    );
    assert_eq!(capture_status(s), CAPTURE_STATUS_NONE, "{what}");
    // Nothing recorded ran; the stream works eagerly again; the context has no sticky error.
    assert_eq!(download_f32(p, 1), vec![1.0], "{what}");
    assert_eq!(launch_scale_on(f, p, 32, 1, s), CUDA_SUCCESS, "{what}");
    assert_eq!(download_f32(p, 1), vec![2.0], "{what}");
    assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

#[test]
fn prohibited_calls_invalidate_the_capture() {
    let su = setup();
    unsafe {
        let mut q = 0u64;
        let host = [0u8; 16];
        for mode in [CAPTURE_MODE_GLOBAL, CAPTURE_MODE_THREAD_LOCAL] {
            let unsupported = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            check_invalidates(&su, mode, unsupported, "cuMemAlloc", |_| {
                cuMemAlloc_v2(&mut q, 16)
            });
            let live = alloc_f32(&[0.0; 4]);
            check_invalidates(&su, mode, unsupported, "cuMemFree", |_| cuMemFree_v2(live));
            check_invalidates(&su, mode, unsupported, "cuMemcpyHtoD", |_| {
                cuMemcpyHtoD_v2(live, host.as_ptr() as *const c_void, 16)
            });
            check_invalidates(&su, mode, unsupported, "cuMemsetD32", |_| {
                cuMemsetD32_v2(live, 0, 4)
            });
            check_invalidates(&su, mode, unsupported, "cuStreamSynchronize", |s| {
                cuStreamSynchronize(s)
            });
            check_invalidates(&su, mode, unsupported, "cuStreamQuery", |s| {
                cuStreamQuery(s)
            });
            check_invalidates(&su, mode, unsupported, "cuCtxSynchronize", |_| {
                cuCtxSynchronize()
            });
            // An event recorded outside the capture; a captured event.
            let mut ev = std::ptr::null_mut();
            assert_eq!(cuEventCreate(&mut ev, 0), CUDA_SUCCESS);
            assert_eq!(cuEventRecord(ev, std::ptr::null_mut()), CUDA_SUCCESS);
            check_invalidates(
                &su,
                mode,
                CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                "cuStreamWaitEvent",
                |s| cuStreamWaitEvent(s, ev, 0),
            );
            check_invalidates(&su, mode, CUDA_ERROR_CAPTURED_EVENT, "cuEventQuery", |s| {
                assert_eq!(cuEventRecord(ev, s), CUDA_SUCCESS);
                assert_eq!(cuStreamWaitEvent(s, ev, 0), CUDA_SUCCESS);
                cuEventQuery(ev)
            });
            assert_eq!(cuEventSynchronize(ev), CUDA_ERROR_CAPTURED_EVENT);
            assert_eq!(cuEventRecord(ev, std::ptr::null_mut()), CUDA_SUCCESS);
            assert_eq!(cuEventSynchronize(ev), CUDA_SUCCESS);
            assert_eq!(cuEventDestroy_v2(ev), CUDA_SUCCESS);
            assert_eq!(cuMemFree_v2(live), CUDA_SUCCESS);
        }
    }
}

#[test]
fn capture_modes_decide_which_threads_may_allocate() {
    let su = setup();
    unsafe {
        let f = function(&su, "scale");
        let ctx = current_ctx();
        let alloc_on_other_thread = move || {
            std::thread::spawn(move || {
                cuCtxSetCurrent(ctx as Handle);
                let mut q = 0u64;
                let r = cuMemAlloc_v2(&mut q, 16);
                if r == CUDA_SUCCESS {
                    assert_eq!(cuMemFree_v2(q), CUDA_SUCCESS);
                }
                r
            })
            .join()
            .unwrap()
        };
        for (mode, here, other) in [
            (CAPTURE_MODE_GLOBAL, false, false),
            (CAPTURE_MODE_THREAD_LOCAL, false, true),
            (CAPTURE_MODE_RELAXED, true, true),
        ] {
            for (on_this_thread, allowed) in [(false, other), (true, here)] {
                let s = new_stream(false);
                let p = alloc_f32(&[1.0; 32]);
                assert_eq!(cuStreamBeginCapture_v2(s, mode), CUDA_SUCCESS);
                assert_eq!(launch_scale_on(f, p, 32, 1, s), CUDA_SUCCESS);
                let r = if on_this_thread {
                    let mut q = 0u64;
                    let r = cuMemAlloc_v2(&mut q, 16);
                    if r == CUDA_SUCCESS {
                        assert_eq!(cuMemFree_v2(q), CUDA_SUCCESS);
                    }
                    r
                } else {
                    alloc_on_other_thread()
                };
                let want = if allowed {
                    CUDA_SUCCESS
                } else {
                    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
                };
                assert_eq!(r, want, "mode {mode}, this thread {on_this_thread}");
                let (r, g) = end_capture(s);
                if allowed {
                    assert_eq!(r, CUDA_SUCCESS);
                    assert_eq!(cuGraphDestroy(g), CUDA_SUCCESS);
                } else {
                    assert_eq!(r, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
                }
                assert_eq!(cuMemFree_v2(p), CUDA_SUCCESS);
            }
        }
        // A thread in relaxed mode may allocate during another thread's global capture.
        let s = new_stream(false);
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_GLOBAL),
            CUDA_SUCCESS
        );
        let r = std::thread::spawn(move || {
            cuCtxSetCurrent(ctx as Handle);
            let mut mode = CAPTURE_MODE_RELAXED;
            assert_eq!(cuThreadExchangeStreamCaptureMode(&mut mode), CUDA_SUCCESS);
            assert_eq!(mode, CAPTURE_MODE_GLOBAL);
            let mut q = 0u64;
            let r = cuMemAlloc_v2(&mut q, 16);
            assert_eq!(cuMemFree_v2(q), CUDA_SUCCESS);
            r
        })
        .join()
        .unwrap();
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(capture_status(s), CAPTURE_STATUS_ACTIVE);
        let (r, _) = end_capture(s);
        assert_eq!(r, CUDA_SUCCESS);
    }
}

#[test]
fn the_legacy_stream_cannot_depend_on_a_capturing_blocking_stream() {
    let su = setup();
    unsafe {
        let f = function(&su, "scale");
        let p = alloc_f32(&[1.0; 32]);
        // A non-blocking stream's capture leaves the legacy stream usable (async calls).
        let s = new_stream(false);
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_GLOBAL),
            CUDA_SUCCESS
        );
        assert_eq!(launch_scale(f, p, 32, 1), CUDA_SUCCESS);
        let mut st = -1;
        assert_eq!(
            cuStreamIsCapturing(std::ptr::null_mut(), &mut st),
            CUDA_SUCCESS
        );
        assert_eq!(st, CAPTURE_STATUS_NONE);
        assert_eq!(end_capture(s).0, CUDA_SUCCESS);
        assert_eq!(download_f32(p, 1), vec![2.0]);
        // A blocking stream's capture: any use of the legacy stream is an implicit dependency.
        let b = new_stream(true);
        assert_eq!(
            cuStreamBeginCapture_v2(b, CAPTURE_MODE_RELAXED),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuStreamIsCapturing(std::ptr::null_mut(), &mut st),
            CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        );
        assert_eq!(capture_status(b), CAPTURE_STATUS_INVALIDATED);
        assert_eq!(end_capture(b).0, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        check_invalidates_blocking(&su, b, p, |_| launch_scale(f, p, 32, 1));
        check_invalidates_blocking(&su, b, p, |_| {
            cuMemsetD8Async(p, 0, 4, STREAM_LEGACY as Handle)
        });
        check_invalidates_blocking(&su, b, p, |_| cuStreamSynchronize(std::ptr::null_mut()));
        assert_eq!(download_f32(p, 1), vec![2.0]);
    }
}

/// A relaxed capture of blocking stream `b` that `prohibited` (a use of the legacy stream)
/// invalidates with `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`.
unsafe fn check_invalidates_blocking(
    su: &Setup,
    b: Handle,
    p: u64,
    prohibited: impl FnOnce(Handle) -> CUresult,
) {
    let f = function(su, "scale");
    assert_eq!(
        cuStreamBeginCapture_v2(b, CAPTURE_MODE_RELAXED),
        CUDA_SUCCESS
    );
    assert_eq!(launch_scale_on(f, p, 32, 1, b), CUDA_SUCCESS);
    assert_eq!(prohibited(b), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    assert_eq!(capture_status(b), CAPTURE_STATUS_INVALIDATED);
    assert_eq!(end_capture(b).0, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}

#[test]
fn events_and_capture() {
    let su = setup();
    unsafe {
        let f = function(&su, "scale");
        let p = alloc_f32(&[1.0; 32]);
        let (s, t) = (new_stream(false), new_stream(false));
        let mut ev = std::ptr::null_mut();
        assert_eq!(cuEventCreate(&mut ev, 0), CUDA_SUCCESS);
        // An external wait on an event recorded outside the capture is allowed; the external
        // flag outside capture is not.
        assert_eq!(cuEventRecord(ev, s), CUDA_SUCCESS);
        assert_eq!(
            cuStreamWaitEvent(s, ev, EVENT_WAIT_EXTERNAL),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuStreamWaitEvent(s, ev, 2), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_GLOBAL),
            CUDA_SUCCESS
        );
        assert_eq!(cuStreamWaitEvent(s, ev, EVENT_WAIT_EXTERNAL), CUDA_SUCCESS);
        assert_eq!(launch_scale_on(f, p, 32, 1, s), CUDA_SUCCESS);
        assert_eq!(cuEventRecord(ev, s), CUDA_SUCCESS);
        let mut ms = 0.0;
        assert_eq!(
            cuEventElapsedTime(&mut ms, ev, ev),
            CUDA_ERROR_CAPTURED_EVENT
        );
        // A stream joining the capture through the captured event is not modelled.
        assert_eq!(cuStreamWaitEvent(t, ev, 0), CUDA_ERROR_NOT_SUPPORTED);
        // Another capture waiting on it would merge two sequences.
        assert_eq!(
            cuStreamBeginCapture_v2(t, CAPTURE_MODE_RELAXED),
            CUDA_SUCCESS
        );
        assert_eq!(cuStreamWaitEvent(t, ev, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
        assert_eq!(end_capture(t).0, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_eq!(capture_status(s), CAPTURE_STATUS_ACTIVE);
        let (r, g) = end_capture(s);
        assert_eq!(r, CUDA_SUCCESS);
        assert_eq!(cuGraphLaunch(instantiate(g), t), CUDA_SUCCESS);
        assert_eq!(download_f32(p, 1), vec![2.0]);
        // The allocator's stream-ordered calls on a capturing stream are not modelled.
        assert_eq!(
            cuStreamBeginCapture_v2(s, CAPTURE_MODE_RELAXED),
            CUDA_SUCCESS
        );
        let mut q = 0;
        assert_eq!(cuMemAllocAsync(&mut q, 16, s), CUDA_ERROR_NOT_SUPPORTED);
        assert_eq!(cuMemFreeAsync(p, s), CUDA_ERROR_NOT_SUPPORTED);
        assert_eq!(end_capture(s).0, CUDA_SUCCESS);
        // Destroying a capturing stream ends its capture.
        assert_eq!(
            cuStreamBeginCapture_v2(t, CAPTURE_MODE_RELAXED),
            CUDA_SUCCESS
        );
        assert_eq!(cuStreamDestroy_v2(t), CUDA_SUCCESS);
        assert_eq!(cuCtxSynchronize(), CUDA_SUCCESS);
    }
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
