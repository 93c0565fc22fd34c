//! A whole training step captured in a CUDA graph and replayed, on a GPU or the emulated
//! driver (simcuda, which models stream capture: see simcuda/src/graph.rs).
//!
//! The step is a LayerNorm followed by a BatchNorm in training, forward and backward, through
//! the functional ops on buffers (workspaces included) allocated before the capture:
//!
//! 1. LayerNorm forward: x -> h (mean, rstd saved);
//! 2. BatchNorm training forward: h -> y (batch statistics saved; running statistics updated,
//!    num_batches_tracked incremented);
//! 3. BatchNorm backward: dy -> dh (dgamma, dbeta of the BatchNorm);
//! 4. LayerNorm backward: dh -> dx (dgamma, dbeta of the LayerNorm);
//! 5. the next step's input: x <- y (a device-to-device copy), so every step depends on the
//!    one before and the order of the replayed work shows in the results.
//!
//! Replaying the graph k times must leave every buffer bitwise equal to k eager steps, the
//! running statistics and num_batches_tracked included; the capture itself must run nothing.
//! Allocating or synchronizing during the capture must be rejected as a real driver rejects it
//! (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, and the capture is invalidated).
//!
//! cudarc's event tracking is turned off for this context: with it, every use of a buffer
//! waits on an event recorded outside the capture, which a real driver rejects
//! (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`; cudarc's own capture tests turn it off too). The
//! last test shows that rejection.
//!
//! The captures are thread-local (`CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`) and the tests here take
//! one lock: the other tests of this binary run on other threads at the same time, and a global
//! capture prohibits every thread's allocations while it lasts (a real driver rejects them, and
//! so does the emulated one), and a context synchronization invalidates every capture.

use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::{
    CUgraphInstantiate_flags, CUresult, CUstreamCaptureMode, CUstreamCaptureStatus,
};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError};
use testkit::rng::Rng;
use warpnorm::batch_norm::{self, BatchNormDesc, Layout, Mode};
use warpnorm::layer_norm::{self, Affine, LayerNormDesc};
use warpnorm::{DType, Error};

/// LayerNorm over rows of `COLS`; its output, viewed as (N, C, L), is the BatchNorm's input.
const ROWS: usize = 48;
const COLS: usize = 96;
const BN_DIMS: [usize; 3] = [8, 12, 48];
const STEPS: usize = 3;

/// Serializes the tests of this file (see the module docs).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A context of its own on device 0 (cudarc's per-context flags stay out of the other tests'
/// way) with event tracking off, and a non-blocking stream of it (the legacy stream cannot be
/// captured). None when the test skips. Called holding [`serial`]: cudarc synchronizes the
/// context when its first stream is made, which would invalidate a capture under way.
fn capture_stream(test: &str) -> Option<Arc<CudaStream>> {
    testkit::gpu::gpu_stream(test)?;
    let ctx: Arc<CudaContext> = warpnorm::runtime::context(0).expect("a context");
    // SAFETY: every buffer of this context is created after this call, and all the work on
    // them is on one stream, so no cross-stream synchronization is needed.
    unsafe { ctx.disable_event_tracking() };
    Some(ctx.new_stream().expect("a stream"))
}

fn ln_desc() -> LayerNormDesc {
    LayerNormDesc::new(
        &[ROWS, COLS],
        &[COLS],
        DType::F32,
        DType::F32,
        Affine::WeightBias,
        1e-5,
    )
    .unwrap()
}

fn bn_desc() -> BatchNormDesc {
    BatchNormDesc::new(&BN_DIMS, Layout::Contiguous, DType::F32, DType::F32)
        .with_mode(Mode::train(0.25))
}

/// Every buffer of the step, allocated once.
struct Step {
    stream: Arc<CudaStream>,
    x: CudaSlice<f32>,
    dy: CudaSlice<f32>,
    ln_gamma: CudaSlice<f32>,
    ln_beta: CudaSlice<f32>,
    h: CudaSlice<f32>,
    mean: CudaSlice<f32>,
    rstd: CudaSlice<f32>,
    dh: CudaSlice<f32>,
    dx: CudaSlice<f32>,
    ln_dgamma: CudaSlice<f32>,
    ln_dbeta: CudaSlice<f32>,
    bn_gamma: CudaSlice<f32>,
    bn_beta: CudaSlice<f32>,
    y: CudaSlice<f32>,
    running_mean: CudaSlice<f32>,
    running_var: CudaSlice<f32>,
    num_batches_tracked: CudaSlice<i64>,
    save_mean: CudaSlice<f32>,
    save_mean_lo: CudaSlice<f32>,
    save_invstd: CudaSlice<f32>,
    bn_dgamma: CudaSlice<f32>,
    bn_dbeta: CudaSlice<f32>,
    ln_workspace: Option<CudaSlice<u8>>,
    bn_workspace: Option<CudaSlice<u8>>,
}

/// Host values: the step's initial state.
struct Init {
    x: Vec<f32>,
    dy: Vec<f32>,
    ln_gamma: Vec<f32>,
    ln_beta: Vec<f32>,
    bn_gamma: Vec<f32>,
    bn_beta: Vec<f32>,
}

impl Init {
    fn new() -> Init {
        let n = ROWS * COLS;
        let c = BN_DIMS[1];
        let mut rng = Rng::new(14);
        let mut v = |len: usize, lo: f64, hi: f64| -> Vec<f32> {
            (0..len).map(|_| rng.range(lo, hi) as f32).collect()
        };
        Init {
            x: v(n, -3.0, 5.0),
            dy: v(n, -1.0, 1.0),
            ln_gamma: v(COLS, 0.5, 1.5),
            ln_beta: v(COLS, -0.5, 0.5),
            bn_gamma: v(c, 0.5, 1.5),
            bn_beta: v(c, -0.5, 0.5),
        }
    }
}

impl Step {
    /// Allocates every buffer (the workspaces at the sizes both directions need) and sets the
    /// initial state.
    fn new(stream: &Arc<CudaStream>, init: &Init) -> Step {
        let s = stream;
        let (n, c) = (ROWS * COLS, BN_DIMS[1]);
        let ws = |bytes: usize| (bytes > 0).then(|| s.alloc_zeros::<u8>(bytes).unwrap());
        let ln_ws = layer_norm::forward_workspace_bytes(s, &ln_desc())
            .unwrap()
            .max(layer_norm::backward_workspace_bytes(s, &ln_desc()).unwrap());
        let bn_ws = batch_norm::forward_workspace_bytes(s, &bn_desc())
            .unwrap()
            .max(batch_norm::backward_workspace_bytes(s, &bn_desc()).unwrap());
        let zeros = |len: usize| s.alloc_zeros::<f32>(len).unwrap();
        let mut step = Step {
            stream: s.clone(),
            x: zeros(n),
            dy: zeros(n),
            ln_gamma: zeros(COLS),
            ln_beta: zeros(COLS),
            h: zeros(n),
            mean: zeros(ROWS),
            rstd: zeros(ROWS),
            dh: zeros(n),
            dx: zeros(n),
            ln_dgamma: zeros(COLS),
            ln_dbeta: zeros(COLS),
            bn_gamma: zeros(c),
            bn_beta: zeros(c),
            y: zeros(n),
            running_mean: zeros(c),
            running_var: zeros(c),
            num_batches_tracked: s.alloc_zeros::<i64>(1).unwrap(),
            save_mean: zeros(c),
            save_mean_lo: zeros(c),
            save_invstd: zeros(c),
            bn_dgamma: zeros(c),
            bn_dbeta: zeros(c),
            ln_workspace: ws(ln_ws),
            bn_workspace: ws(bn_ws),
        };
        step.reset(init);
        step
    }

    /// Back to the initial state: inputs and parameters from `init`, running statistics at
    /// PyTorch's initial values, every output zero.
    fn reset(&mut self, init: &Init) {
        let s = self.stream.clone();
        s.memcpy_htod(&init.x, &mut self.x).unwrap();
        s.memcpy_htod(&init.dy, &mut self.dy).unwrap();
        s.memcpy_htod(&init.ln_gamma, &mut self.ln_gamma).unwrap();
        s.memcpy_htod(&init.ln_beta, &mut self.ln_beta).unwrap();
        s.memcpy_htod(&init.bn_gamma, &mut self.bn_gamma).unwrap();
        s.memcpy_htod(&init.bn_beta, &mut self.bn_beta).unwrap();
        let c = BN_DIMS[1];
        s.memcpy_htod(&vec![0.0f32; c], &mut self.running_mean)
            .unwrap();
        s.memcpy_htod(&vec![1.0f32; c], &mut self.running_var)
            .unwrap();
        s.memcpy_htod(&[0i64], &mut self.num_batches_tracked)
            .unwrap();
        for b in [
            &mut self.h,
            &mut self.mean,
            &mut self.rstd,
            &mut self.dh,
            &mut self.dx,
            &mut self.ln_dgamma,
            &mut self.ln_dbeta,
            &mut self.y,
            &mut self.save_mean,
            &mut self.save_mean_lo,
            &mut self.save_invstd,
            &mut self.bn_dgamma,
            &mut self.bn_dbeta,
        ] {
            s.memset_zeros(b).unwrap();
        }
        s.synchronize().unwrap();
    }

    /// One training step: everything is enqueued on the stream (nothing allocates or
    /// synchronizes), so it runs eagerly or is captured.
    fn enqueue(&mut self) -> Result<(), Error> {
        let s = self.stream.clone();
        let (ln, bn) = (ln_desc(), bn_desc());
        layer_norm::forward(
            &s,
            &ln,
            layer_norm::ForwardBuffers {
                x: self.x.as_view(),
                y: self.h.as_view_mut(),
                gamma: Some(self.ln_gamma.as_view()),
                beta: Some(self.ln_beta.as_view()),
                mean: Some(self.mean.as_view_mut()),
                rstd: Some(self.rstd.as_view_mut()),
                mean_lo: None,
                workspace: self.ln_workspace.as_mut().map(|w| w.as_view_mut()),
            },
        )?;
        batch_norm::forward(
            &s,
            &bn,
            batch_norm::ForwardBuffers {
                x: self.h.as_view(),
                y: self.y.as_view_mut(),
                gamma: Some(self.bn_gamma.as_view()),
                beta: Some(self.bn_beta.as_view()),
                running_mean: Some(self.running_mean.as_view_mut()),
                running_var: Some(self.running_var.as_view_mut()),
                num_batches_tracked: Some(self.num_batches_tracked.as_view_mut()),
                save_mean: Some(self.save_mean.as_view_mut()),
                save_mean_lo: Some(self.save_mean_lo.as_view_mut()),
                save_invstd: Some(self.save_invstd.as_view_mut()),
                workspace: self.bn_workspace.as_mut().map(|w| w.as_view_mut()),
            },
        )?;
        batch_norm::backward(
            &s,
            &bn,
            batch_norm::BackwardBuffers {
                x: self.h.as_view(),
                dy: self.dy.as_view(),
                save_mean: self.save_mean.as_view(),
                save_mean_lo: Some(self.save_mean_lo.as_view()),
                save_invstd: self.save_invstd.as_view(),
                gamma: Some(self.bn_gamma.as_view()),
                dx: self.dh.as_view_mut(),
                dgamma: Some(self.bn_dgamma.as_view_mut()),
                dbeta: Some(self.bn_dbeta.as_view_mut()),
                workspace: self.bn_workspace.as_mut().map(|w| w.as_view_mut()),
            },
        )?;
        layer_norm::backward(
            &s,
            &ln,
            layer_norm::BackwardBuffers {
                x: self.x.as_view(),
                dy: self.dh.as_view(),
                mean: self.mean.as_view(),
                rstd: self.rstd.as_view(),
                mean_lo: None,
                gamma: Some(self.ln_gamma.as_view()),
                dx: self.dx.as_view_mut(),
                dgamma: Some(self.ln_dgamma.as_view_mut()),
                dbeta: Some(self.ln_dbeta.as_view_mut()),
                workspace: self.ln_workspace.as_mut().map(|w| w.as_view_mut()),
            },
        )?;
        s.memcpy_dtod(&self.y, &mut self.x)
            .map_err(|source| Error::Driver {
                during: "x <- y".into(),
                source,
            })
    }

    /// The bits of every buffer the step writes or reads, by name.
    fn snapshot(&self) -> Vec<(&'static str, Vec<u64>)> {
        let s = &self.stream;
        let f = |b: &CudaSlice<f32>| -> Vec<u64> {
            s.clone_dtoh(b)
                .unwrap()
                .iter()
                .map(|v| v.to_bits() as u64)
                .collect()
        };
        let nbt = s
            .clone_dtoh(&self.num_batches_tracked)
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect();
        vec![
            ("x", f(&self.x)),
            ("h", f(&self.h)),
            ("mean", f(&self.mean)),
            ("rstd", f(&self.rstd)),
            ("dh", f(&self.dh)),
            ("dx", f(&self.dx)),
            ("layer_norm dgamma", f(&self.ln_dgamma)),
            ("layer_norm dbeta", f(&self.ln_dbeta)),
            ("y", f(&self.y)),
            ("running_mean", f(&self.running_mean)),
            ("running_var", f(&self.running_var)),
            ("num_batches_tracked", nbt),
            ("save_mean", f(&self.save_mean)),
            ("save_mean_lo", f(&self.save_mean_lo)),
            ("save_invstd", f(&self.save_invstd)),
            ("batch_norm dgamma", f(&self.bn_dgamma)),
            ("batch_norm dbeta", f(&self.bn_dbeta)),
        ]
    }
}

/// Asserts two snapshots are bitwise equal, naming the first buffer that differs.
fn assert_same(got: &[(&str, Vec<u64>)], want: &[(&str, Vec<u64>)], when: &str) {
    for ((name, g), (_, w)) in got.iter().zip(want) {
        if g != w {
            let i = g.iter().zip(w).position(|(a, b)| a != b).unwrap_or(0);
            panic!(
                "{when}: {name} differs at [{i}] ({:#x} vs {:#x})",
                g[i], w[i]
            );
        }
    }
}

fn driver_code(e: &Error) -> Option<CUresult> {
    match e {
        Error::Driver { source, .. } => Some(source.0),
        _ => None,
    }
}

#[test]
fn captured_training_step_replays_bitwise_like_eager_steps() {
    let _serial = serial();
    let Some(stream) = capture_stream("captured_training_step_replays_bitwise_like_eager_steps")
    else {
        return;
    };
    let init = Init::new();
    let mut step = Step::new(&stream, &init);
    // The workspaces are part of the captured step.
    assert!(
        step.ln_workspace.is_some() && step.bn_workspace.is_some(),
        "pick sizes that need workspaces"
    );
    let initial = step.snapshot();

    // Eager: STEPS steps, a snapshot after each.
    let mut eager = Vec::new();
    for _ in 0..STEPS {
        step.enqueue().unwrap();
        stream.synchronize().unwrap();
        eager.push(step.snapshot());
    }
    // The steps differ (running statistics move, x changes): the comparison below is not
    // between equal states.
    for k in 1..STEPS {
        assert!(eager[k][0].1 != eager[k - 1][0].1, "x after step {k}");
        assert!(
            eager[k][9].1 != eager[k - 1][9].1,
            "running_mean after step {k}"
        );
        assert_eq!(eager[k][11].1, vec![k as u64 + 1], "num_batches_tracked");
    }

    // Capture one step on the same buffers, from the initial state: nothing runs.
    step.reset(&init);
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    assert_eq!(
        stream.capture_status().unwrap(),
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
    );
    step.enqueue().unwrap();
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph");
    assert_eq!(
        stream.capture_status().unwrap(),
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    );
    assert_same(
        &step.snapshot(),
        &initial,
        "after the capture (nothing ran)",
    );

    // Replays: after k launches, the state of k eager steps.
    graph.upload().unwrap();
    for (k, want) in eager.iter().enumerate() {
        graph.launch().unwrap();
        stream.synchronize().unwrap();
        assert_same(&step.snapshot(), want, &format!("after {} replays", k + 1));
    }
    drop(graph);
    // The stream is back to eager work: one more step on each side agrees.
    step.enqueue().unwrap();
    let after_eager = step.snapshot();
    assert_eq!(after_eager[11].1, vec![STEPS as u64 + 1]);
}

#[test]
fn allocating_or_synchronizing_during_capture_is_rejected() {
    let _serial = serial();
    let Some(stream) = capture_stream("allocating_or_synchronizing_during_capture_is_rejected")
    else {
        return;
    };
    let init = Init::new();
    let mut step = Step::new(&stream, &init);
    let initial = step.snapshot();
    let unsupported = CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    let invalidated = CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;

    // Each prohibited call, in global and thread-local mode, after a captured step.
    type Prohibited = fn(&Arc<CudaStream>) -> Result<(), DriverError>;
    let calls: [(&str, Prohibited); 3] = [
        ("an allocation (cuMemAlloc)", |s| {
            s.alloc_zeros::<f32>(64).map(drop)
        }),
        ("a stream synchronization", |s| s.synchronize()),
        ("a context synchronization", |s| s.context().synchronize()),
    ];
    // (Global mode, which would also prohibit the other threads' allocations, is covered by
    // simcuda's own tests.)
    {
        let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        for (what, call) in &calls {
            stream.begin_capture(mode).unwrap();
            step.enqueue().unwrap();
            assert_eq!(
                call(&stream),
                Err(DriverError(unsupported)),
                "{what}, {mode:?}"
            );
            assert_eq!(
                stream.capture_status().unwrap(),
                CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED,
                "{what}"
            );
            // Later work in the invalidated capture fails, as on a GPU.
            let e = step.enqueue().unwrap_err();
            assert_eq!(driver_code(&e), Some(invalidated), "{what}: {e}");
            assert_eq!(
                stream.end_capture(CUgraphInstantiate_flags(0)).err(),
                Some(DriverError(invalidated)),
                "{what}"
            );
            // Nothing that was captured ran, and the stream works eagerly again.
            assert_same(&step.snapshot(), &initial, what);
        }
    }
    // A synchronous host-to-device copy through the driver API during a capture.
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let host = [1.0f32; 4];
    // SAFETY: `step.mean` holds ROWS >= 4 floats; the context is current (begin_capture).
    let r = unsafe {
        cudarc::driver::result::memcpy_htod_sync(
            cudarc::driver::DevicePtr::device_ptr(&step.mean, &stream).0,
            &host,
        )
    };
    assert_eq!(r, Err(DriverError(unsupported)));
    assert_eq!(
        stream.end_capture(CUgraphInstantiate_flags(0)).err(),
        Some(DriverError(invalidated))
    );
    assert_same(&step.snapshot(), &initial, "after the synchronous copy");
    // Finally a step runs eagerly as before.
    step.enqueue().unwrap();
    assert_eq!(step.snapshot()[11].1, vec![1]);
}

/// With cudarc's event tracking on (its default), every use of a buffer made before a capture
/// waits on an event recorded outside it, which a real driver rejects
/// (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`) and the emulated one too, invalidating the capture.
/// This is why the captures above run with event tracking off.
#[test]
fn waiting_on_an_event_from_outside_the_capture_is_rejected() {
    if testkit::gpu::gpu_stream("waiting_on_an_event_from_outside_the_capture_is_rejected")
        .is_none()
    {
        return;
    }
    let _serial = serial();
    let ctx = warpnorm::runtime::context(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    assert!(ctx.is_managing_stream_synchronization());
    let init = Init::new();
    let mut step = Step::new(&stream, &init);
    let outside = stream.record_event(None).unwrap();
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    assert_eq!(
        stream.wait(&outside),
        Err(DriverError(CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION))
    );
    assert_eq!(
        stream.capture_status().unwrap(),
        CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED
    );
    // A step through cudarc's tracking fails in the invalidated capture.
    assert!(step.enqueue().is_err());
    // cudarc keeps the failures of its own tracking calls (event waits and records) for the
    // next call that checks; clear them so that ending the capture reports the driver's code.
    let _ = ctx.check_err();
    assert_eq!(
        stream.end_capture(CUgraphInstantiate_flags(0)).err(),
        Some(DriverError(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))
    );
    step.enqueue().unwrap();
    stream.synchronize().unwrap();
}
