//! The NVTX ranges of every op and module call, checked without Nsight Systems: a recording
//! injection library (recorder.c, compiled here with the system C compiler) stands in for the
//! profiler. NVTX3 reads NVTX_INJECTION64_PATH once per process, at its first call, so the test
//! runs the ops in a child process (this same test binary, re-run with the variable set and
//! with SIMCUDA_TRACE=1, which makes the emulated driver print every kernel it runs); the
//! recorder prints every NVTX call to the same stderr, in order, and the parent checks names,
//! domain, colours, thread, nesting, balance (error paths included) and that every kernel
//! runs inside an op's range.
//!
//! A GPU test (module `gpu`): it needs a device, which the emulated driver provides
//! (scripts/test-emulated-gpu.sh); it skips without one, as the other GPU tests do.

mod gpu {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::Arc;

    use cudarc::driver::{CudaSlice, CudaStream};
    use half::{bf16, f16};
    use warpnorm::batch_norm::{self, BatchNorm, BatchNormConfig, BatchNormDesc, Layout, Mode};
    use warpnorm::layer_norm::{self, Affine, LayerNorm, LayerNormDesc};
    use warpnorm::rms_norm::{self, RmsNorm, RmsNormDesc};
    use warpnorm::{DType, Element};

    /// Set in the child: run the ops instead of checking them.
    const CHILD: &str = "WARPNORM_NVTX_TEST_CHILD";
    const TEST: &str = "gpu::nvtx_ranges_of_every_op_and_module_call";

    #[test]
    fn nvtx_ranges_of_every_op_and_module_call() {
        if std::env::var_os(CHILD).is_some() {
            run_ops();
            return;
        }
        let Some(stream) = testkit::gpu::gpu_stream("nvtx_ranges_of_every_op_and_module_call")
        else {
            return;
        };
        // The emulated driver prints the kernels it runs (SIMCUDA_TRACE=1); a real one does
        // not, and there only the ranges are checked.
        let emulated = stream
            .context()
            .name()
            .is_ok_and(|n| n == "ptxsim emulated CUDA device");
        let recorder = build_recorder();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("NVTX_INJECTION64_PATH", &recorder)
            .env("SIMCUDA_TRACE", "1")
            .output()
            .expect("running the test binary again");
        let _ = std::fs::remove_dir_all(recorder.parent().unwrap());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the child run failed ({}):\n{}\n{stderr}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        check(&stderr, emulated);
    }

    /// Compiles recorder.c into a shared library in a fresh folder of the target directory.
    fn build_recorder() -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvtx/recorder.c");
        let dir = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .join(format!("nvtx-recorder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libnvtx_recorder.so");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(&cc)
            .args([
                "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-o",
            ])
            .arg(&lib)
            .arg(&src)
            .arg("-lpthread")
            .output()
            .unwrap_or_else(|e| panic!("running the C compiler `{cc}` (set CC): {e}"));
        assert!(
            out.status.success(),
            "compiling {}:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        lib
    }

    fn up<E: Element>(s: &Arc<CudaStream>, n: usize) -> CudaSlice<E> {
        let v: Vec<E> = (0..n)
            .map(|i| E::from_f64(((i * 37 % 17) as f64 - 8.0) / 8.0))
            .collect();
        s.clone_htod(&v).unwrap()
    }

    fn zeros<E: Element>(s: &Arc<CudaStream>, n: usize) -> CudaSlice<E> {
        s.clone_htod(&vec![E::from_f64(0.0); n]).unwrap()
    }

    /// Marks the start of a step: on stderr for the NVTX test (the parent splits the record
    /// there), as a tracing event for the tracing test.
    fn step(name: &str) {
        eprintln!("step: {name}");
        tracing::info!(target: "nvtx_test", step = name);
    }

    /// The `tracing` spans (feature `tracing`) mirror the NVTX ranges: one span per range,
    /// same names (span name: the op; field `range`: the whole NVTX name), same nesting (the
    /// op's span a child of the module's), entered and exited like the ranges are pushed and
    /// popped, on error paths too. Recorded by a hand-written subscriber, in this thread only.
    #[test]
    fn tracing_spans_mirror_the_ranges() {
        if std::env::var_os(CHILD).is_some() {
            return;
        }
        let Some(_stream) = testkit::gpu::gpu_stream("tracing_spans_mirror_the_ranges") else {
            return;
        };
        let recorder = spans::Recorder::default();
        let log = recorder.log.clone();
        tracing::subscriber::with_default(recorder, run_ops);
        let log = std::mem::take(&mut *log.lock().unwrap());
        compare(&log, &expected(false));
    }

    /// The child: every op and module call, forward and backward, and error paths.
    fn run_ops() {
        let ctx = warpnorm::runtime::context(0).expect("a device (the parent found one)");
        let s = ctx.default_stream();

        // LayerNorm, functional: 4 x 256, bf16 activations, f32 parameters.
        let (rows, cols) = (4, 256);
        let n = rows * cols;
        let desc = LayerNormDesc::new(
            &[rows, cols],
            &[cols],
            DType::BF16,
            DType::F32,
            Affine::WeightBias,
            1e-5,
        )
        .unwrap();
        let ws = layer_norm::forward_workspace_bytes(&s, &desc)
            .unwrap()
            .max(layer_norm::backward_workspace_bytes(&s, &desc).unwrap())
            .max(16);
        let mut ws = s.clone_htod(&vec![0u8; ws]).unwrap();
        let x = up::<bf16>(&s, n);
        let dy = up::<bf16>(&s, n);
        let gamma = up::<f32>(&s, cols);
        let beta = up::<f32>(&s, cols);
        let mut y = zeros::<bf16>(&s, n);
        let mut dx = zeros::<bf16>(&s, n);
        let mut mean = zeros::<f32>(&s, rows);
        let mut rstd = zeros::<f32>(&s, rows);
        let mut mean_lo = zeros::<f32>(&s, rows);
        let mut dgamma = zeros::<f32>(&s, cols);
        let mut dbeta = zeros::<f32>(&s, cols);
        step("layer_norm forward");
        layer_norm::forward(
            &s,
            &desc,
            layer_norm::ForwardBuffers {
                x: x.as_view(),
                y: y.as_view_mut(),
                gamma: Some(gamma.as_view()),
                beta: Some(beta.as_view()),
                mean: Some(mean.as_view_mut()),
                rstd: Some(rstd.as_view_mut()),
                mean_lo: Some(mean_lo.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        step("layer_norm backward");
        layer_norm::backward(
            &s,
            &desc,
            layer_norm::BackwardBuffers {
                x: x.as_view(),
                dy: dy.as_view(),
                mean: mean.as_view(),
                rstd: rstd.as_view(),
                mean_lo: Some(mean_lo.as_view()),
                gamma: Some(gamma.as_view()),
                dx: dx.as_view_mut(),
                dgamma: Some(dgamma.as_view_mut()),
                dbeta: Some(dbeta.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        step("layer_norm forward, y too short (error after the range opened)");
        let e = layer_norm::forward(
            &s,
            &desc,
            layer_norm::ForwardBuffers {
                x: x.as_view(),
                y: y.slice_mut(1..),
                gamma: Some(gamma.as_view()),
                beta: Some(beta.as_view()),
                mean: Some(mean.as_view_mut()),
                rstd: Some(rstd.as_view_mut()),
                mean_lo: Some(mean_lo.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        );
        assert!(e.is_err(), "a short y is rejected");
        step("layer_norm forward, invalid description (rejected before any range)");
        let mut bad = desc;
        bad.eps = -1.0;
        let e = layer_norm::forward(
            &s,
            &bad,
            layer_norm::ForwardBuffers {
                x: x.as_view(),
                y: y.as_view_mut(),
                gamma: Some(gamma.as_view()),
                beta: Some(beta.as_view()),
                mean: Some(mean.as_view_mut()),
                rstd: Some(rstd.as_view_mut()),
                mean_lo: Some(mean_lo.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        );
        assert!(e.is_err(), "a negative eps is rejected");

        // LayerNorm, module: x of shape (2, 2, 256).
        let mut ln = LayerNorm::<f32>::new(&s, &[cols], Affine::WeightBias, 1e-5).unwrap();
        step("LayerNorm forward");
        let out = ln.forward(&x.as_view(), &[2, 2, cols]).unwrap();
        step("LayerNorm backward");
        ln.backward(&x.as_view(), &dy.as_view(), &[2, 2, cols], &out.saved)
            .unwrap();
        step("LayerNorm forward, x too short (error inside the op's range)");
        let e = ln.forward(&x.slice(1..), &[2, 2, cols]);
        assert!(e.is_err(), "a short x is rejected");
        step("layer_norm forward in place");
        let mut xy = up::<bf16>(&s, n);
        layer_norm::forward_in_place(
            &s,
            &desc,
            layer_norm::ForwardInPlaceBuffers {
                xy: xy.as_view_mut(),
                gamma: Some(gamma.as_view()),
                beta: Some(beta.as_view()),
                mean: None,
                rstd: None,
                mean_lo: None,
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        step("LayerNorm forward_into");
        let mut saved = ln.alloc_saved(&[2, 2, cols]).unwrap();
        ln.forward_into(
            &x.as_view(),
            &[2, 2, cols],
            y.as_view_mut(),
            Some(&mut saved),
        )
        .unwrap();
        step("LayerNorm infer");
        ln.infer(&x.as_view(), &[2, 2, cols]).unwrap();
        step("LayerNorm backward_into");
        let (mut dg, mut db) = (zeros::<f32>(&s, cols), zeros::<f32>(&s, cols));
        ln.backward_into(
            &x.as_view(),
            &dy.as_view(),
            &[2, 2, cols],
            &saved,
            warpnorm::layer_norm::GradientBuffers {
                dx: dx.as_view_mut(),
                dgamma: Some(dg.as_view_mut()),
                dbeta: Some(db.as_view_mut()),
            },
        )
        .unwrap();
        step("LayerNorm forward_in_place");
        ln.forward_in_place(xy.as_view_mut(), &[2, 2, cols], None)
            .unwrap();

        // BatchNorm, functional: training, channels_last, f16 activations, f32 parameters.
        let dims = [2, 8, 3, 3];
        let (n, c) = (2 * 8 * 3 * 3, 8);
        let desc = BatchNormDesc::new(&dims, Layout::ChannelsLast, DType::F16, DType::F32);
        let ws = batch_norm::forward_workspace_bytes(&s, &desc)
            .unwrap()
            .max(batch_norm::backward_workspace_bytes(&s, &desc).unwrap())
            .max(16);
        let mut ws = s.clone_htod(&vec![0u8; ws]).unwrap();
        let x = up::<f16>(&s, n);
        let dy = up::<f16>(&s, n);
        let gamma = up::<f32>(&s, c);
        let beta = up::<f32>(&s, c);
        let mut y = zeros::<f16>(&s, n);
        let mut dx = zeros::<f16>(&s, n);
        let mut save_mean = zeros::<f32>(&s, c);
        let mut save_mean_lo = zeros::<f32>(&s, c);
        let mut save_invstd = zeros::<f32>(&s, c);
        let mut dgamma = zeros::<f32>(&s, c);
        let mut dbeta = zeros::<f32>(&s, c);
        step("batch_norm forward");
        batch_norm::forward(
            &s,
            &desc,
            batch_norm::ForwardBuffers {
                x: x.as_view(),
                y: y.as_view_mut(),
                gamma: Some(gamma.as_view()),
                beta: Some(beta.as_view()),
                running_mean: None,
                running_var: None,
                num_batches_tracked: None,
                save_mean: Some(save_mean.as_view_mut()),
                save_mean_lo: Some(save_mean_lo.as_view_mut()),
                save_invstd: Some(save_invstd.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        step("batch_norm backward");
        batch_norm::backward(
            &s,
            &desc,
            batch_norm::BackwardBuffers {
                x: x.as_view(),
                dy: dy.as_view(),
                save_mean: save_mean.as_view(),
                save_mean_lo: Some(save_mean_lo.as_view()),
                save_invstd: save_invstd.as_view(),
                gamma: Some(gamma.as_view()),
                dx: dx.as_view_mut(),
                dgamma: Some(dgamma.as_view_mut()),
                dbeta: Some(dbeta.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        step("batch_norm forward, eval without running statistics (error inside the range)");
        let e = batch_norm::forward(
            &s,
            &desc.clone().with_mode(Mode::eval()),
            batch_norm::ForwardBuffers {
                x: x.as_view(),
                y: y.as_view_mut(),
                gamma: Some(gamma.as_view()),
                beta: Some(beta.as_view()),
                running_mean: None,
                running_var: None,
                num_batches_tracked: None,
                save_mean: None,
                save_mean_lo: None,
                save_invstd: None,
                workspace: Some(ws.as_view_mut()),
            },
        );
        assert!(e.is_err(), "eval needs the running statistics");

        // BatchNorm, module (f32), contiguous (4, 8, 5): training, then eval.
        let mut bn = BatchNorm::<f32>::new(&s, BatchNormConfig::new(8)).unwrap();
        let x = up::<f32>(&s, 4 * 8 * 5);
        let dy = up::<f32>(&s, 4 * 8 * 5);
        step("BatchNorm forward");
        let out = bn
            .forward(&x.as_view(), &[4, 8, 5], Layout::Contiguous)
            .unwrap();
        step("BatchNorm backward");
        bn.backward(
            &x.as_view(),
            &dy.as_view(),
            &[4, 8, 5],
            Layout::Contiguous,
            &out.saved,
        )
        .unwrap();
        let mut y = zeros::<f32>(&s, 4 * 8 * 5);
        let mut dx = zeros::<f32>(&s, 4 * 8 * 5);
        let (mut dg, mut db) = (zeros::<f32>(&s, 8), zeros::<f32>(&s, 8));
        let mut saved = bn.alloc_saved().unwrap();
        step("BatchNorm forward_into");
        bn.forward_into(
            &x.as_view(),
            &[4, 8, 5],
            Layout::Contiguous,
            y.as_view_mut(),
            Some(&mut saved),
        )
        .unwrap();
        step("BatchNorm backward_into");
        bn.backward_into(
            &x.as_view(),
            &dy.as_view(),
            &[4, 8, 5],
            Layout::Contiguous,
            &saved,
            batch_norm::GradientBuffers {
                dx: dx.as_view_mut(),
                dgamma: Some(dg.as_view_mut()),
                dbeta: Some(db.as_view_mut()),
            },
        )
        .unwrap();
        step("BatchNorm infer, in training mode (eval's range)");
        bn.infer(&x.as_view(), &[4, 8, 5], Layout::Contiguous)
            .unwrap();
        step("BatchNorm forward_into, x too short (error inside the op's range)");
        let e = bn.forward_into(
            &x.slice(1..),
            &[4, 8, 5],
            Layout::Contiguous,
            y.as_view_mut(),
            Some(&mut saved),
        );
        assert!(e.is_err(), "a short x is rejected");
        bn.eval();
        step("BatchNorm forward_in_place, eval");
        let mut xy = up::<f32>(&s, 4 * 8 * 5);
        bn.forward_in_place(
            xy.as_view_mut(),
            &[4, 8, 5],
            Layout::Contiguous,
            Some(&mut saved),
        )
        .unwrap();
        step("BatchNorm backward_into, eval");
        bn.backward_into(
            &x.as_view(),
            &dy.as_view(),
            &[4, 8, 5],
            Layout::Contiguous,
            &saved,
            batch_norm::GradientBuffers {
                dx: dx.as_view_mut(),
                dgamma: Some(dg.as_view_mut()),
                dbeta: Some(db.as_view_mut()),
            },
        )
        .unwrap();
        step("BatchNorm forward, eval");
        let out = bn
            .forward(&x.as_view(), &[4, 8, 5], Layout::Contiguous)
            .unwrap();
        step("BatchNorm backward, eval");
        bn.backward(
            &x.as_view(),
            &dy.as_view(),
            &[4, 8, 5],
            Layout::Contiguous,
            &out.saved,
        )
        .unwrap();
        // RMSNorm, functional: 4 x 256, f16 activations, f32 weight; then the module.
        let (rows, cols) = (4, 256);
        let n = rows * cols;
        let desc =
            RmsNormDesc::new(&[rows, cols], &[cols], DType::F16, DType::F32, true, None).unwrap();
        let ws = rms_norm::forward_workspace_bytes(&s, &desc)
            .unwrap()
            .max(rms_norm::backward_workspace_bytes(&s, &desc).unwrap())
            .max(16);
        let mut ws = s.clone_htod(&vec![0u8; ws]).unwrap();
        let x = up::<f16>(&s, n);
        let dy = up::<f16>(&s, n);
        let weight = up::<f32>(&s, cols);
        let mut y = zeros::<f16>(&s, n);
        let mut dx = zeros::<f16>(&s, n);
        let mut rstd = zeros::<f32>(&s, rows);
        let mut dweight = zeros::<f32>(&s, cols);
        step("rms_norm forward");
        rms_norm::forward(
            &s,
            &desc,
            rms_norm::ForwardBuffers {
                x: x.as_view(),
                y: y.as_view_mut(),
                weight: Some(weight.as_view()),
                rstd: Some(rstd.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        step("rms_norm backward");
        rms_norm::backward(
            &s,
            &desc,
            rms_norm::BackwardBuffers {
                x: x.as_view(),
                dy: dy.as_view(),
                rstd: rstd.as_view(),
                weight: Some(weight.as_view()),
                dx: dx.as_view_mut(),
                dweight: Some(dweight.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        let residual = up::<f16>(&s, n);
        let mut h = zeros::<f16>(&s, n);
        step("rms_norm forward_residual");
        rms_norm::forward_residual(
            &s,
            &desc,
            rms_norm::ForwardResidualBuffers {
                x: x.as_view(),
                residual_h: rms_norm::ResidualIo::Apart(residual.as_view(), h.as_view_mut()),
                bias: None,
                y: y.as_view_mut(),
                weight: Some(weight.as_view()),
                rstd: Some(rstd.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        step("rms_norm backward_residual");
        rms_norm::backward_residual(
            &s,
            &desc,
            rms_norm::BackwardResidualBuffers {
                h: h.as_view(),
                dy: dy.as_view(),
                dh_dx: rms_norm::ResidualIo::InPlace(dx.as_view_mut()),
                rstd: rstd.as_view(),
                weight: Some(weight.as_view()),
                dweight: Some(dweight.as_view_mut()),
                dbias: None,
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        let x = up::<f32>(&s, n);
        let dy = up::<f32>(&s, n);
        let mut rms = RmsNorm::<f32>::new(&s, &[cols], true, None).unwrap();
        step("RmsNorm forward");
        let out = rms.forward(&x.as_view(), &[2, 2, cols]).unwrap();
        step("RmsNorm backward");
        rms.backward(&x.as_view(), &dy.as_view(), &[2, 2, cols], &out.saved)
            .unwrap();
        step("RmsNorm infer");
        rms.infer(&x.as_view(), &[2, 2, cols]).unwrap();

        s.synchronize().unwrap();
        step("end");
    }

    /// One thing the child did, in order.
    #[derive(Debug, PartialEq)]
    enum Event {
        Push(String),
        Pop,
        Kernel,
    }

    /// Parses the child's stderr, checks what holds for every event, and compares each step's
    /// events with what it must be.
    fn check(stderr: &str, emulated: bool) {
        let mut steps: Vec<(String, Vec<Event>)> = Vec::new();
        let mut before: Vec<String> = Vec::new();
        let mut open: Vec<String> = Vec::new();
        let mut thread = None;
        for line in stderr.lines() {
            if let Some(name) = line.strip_prefix("step: ") {
                steps.push((name.to_string(), Vec::new()));
                continue;
            }
            let event = if let Some(rest) = line.strip_prefix("nvtx: push ") {
                // push <domain> <tid> <depth> <colour> <message>
                let f: Vec<&str> = rest.splitn(5, ' ').collect();
                assert_eq!(f.len(), 5, "{line}");
                assert_eq!(f[0], "warpnorm", "domain: {line}");
                assert_eq!(
                    *thread.get_or_insert(f[1].to_string()),
                    f[1],
                    "thread: {line}"
                );
                assert_eq!(f[2], open.len().to_string(), "depth: {line}");
                let colour = match f[4].split(' ').next().unwrap() {
                    "layer_norm.forward" => "ff4a90d9",
                    "layer_norm.backward" => "ff1f5f9f",
                    "batch_norm.forward" => "ff5cb85c",
                    "batch_norm.backward" => "ff2e7d32",
                    "rms_norm.forward" | "rms_norm.forward_residual" => "ffe69a28",
                    "rms_norm.backward" | "rms_norm.backward_residual" => "ffa86400",
                    "layer_norm.forward_residual" => "ff4a90d9",
                    "layer_norm.backward_residual" => "ff1f5f9f",
                    _ => "ff9e9e9e",
                };
                assert_eq!(f[3], format!("argb:{colour}"), "colour: {line}");
                open.push(f[4].to_string());
                Event::Push(f[4].to_string())
            } else if let Some(rest) = line.strip_prefix("nvtx: pop ") {
                // pop <domain> <tid> <depth after>
                let f: Vec<&str> = rest.split(' ').collect();
                assert_eq!(f[0], "warpnorm", "domain: {line}");
                assert_eq!(thread.as_deref(), Some(f[1]), "thread: {line}");
                assert!(open.pop().is_some(), "a pop without a push: {line}");
                assert_eq!(f[2], open.len().to_string(), "depth: {line}");
                Event::Pop
            } else if line.starts_with("simcuda: kernel ") {
                // Every kernel runs inside an op's range (innermost), of the same family.
                let inner = open
                    .last()
                    .unwrap_or_else(|| panic!("a kernel outside any range: {line}"));
                let family = if inner.starts_with("layer_norm.") {
                    "warpnorm_layer_norm_"
                } else if inner.starts_with("batch_norm.") {
                    "warpnorm_batch_norm_"
                } else if inner.starts_with("rms_norm.") {
                    "warpnorm_rms_norm_"
                } else {
                    panic!("a kernel directly inside the module range {inner:?}: {line}")
                };
                // (The backward of an eval-mode BatchNorm is an affine map: the forward's
                // apply kernel.)
                let direction = match () {
                    _ if inner.contains(".forward ") || inner.contains(".forward_residual ") => {
                        "_fwd_"
                    }
                    _ if inner.starts_with("batch_norm.backward eval ") => "_",
                    _ => "_bwd_",
                };
                assert!(
                    line.contains(family) && line.contains(direction),
                    "a kernel of another op inside {inner:?}: {line}"
                );
                Event::Kernel
            } else if line.starts_with("nvtx: ") {
                before.push(line.to_string());
                continue;
            } else if line.starts_with("simcuda: ") {
                panic!("the emulated driver reported an error: {line}");
            } else {
                continue;
            };
            let (_, events) = steps
                .last_mut()
                .unwrap_or_else(|| panic!("{line} before any step"));
            // Several kernels in a row are one event: how many an op launches is the plan's
            // business.
            if !(event == Event::Kernel && events.last() == Some(&Event::Kernel)) {
                events.push(event);
            }
        }
        assert!(open.is_empty(), "ranges left open: {open:?}");
        // The recorder was loaded, and the domain created once, before anything else.
        assert_eq!(before, ["nvtx: init ok", "nvtx: domain_create warpnorm"]);

        let expected = expected(emulated);
        assert_eq!(steps.len(), expected.len(), "steps: {steps:#?}");
        compare(&steps, &expected);
    }

    fn compare(got: &[(String, Vec<Event>)], expected: &[(&str, Vec<Event>)]) {
        assert_eq!(got.len(), expected.len(), "steps: {got:#?}");
        for ((name, got), (want_name, want)) in got.iter().zip(expected) {
            assert_eq!(name, want_name);
            assert_eq!(got, want, "step {name:?}");
        }
    }

    /// What each step of `run_ops` must record, written out by hand; `kernels`: with the
    /// kernel launches (NVTX test), or without (tracing spans).
    fn expected(kernels: bool) -> Vec<(&'static str, Vec<Event>)> {
        use Event::{Kernel as K, Pop as P};
        let push = |s: &str| Event::Push(s.to_string());
        let ln = "4x256 bf16/f32";
        vec![
            (
                "layer_norm forward",
                vec![push(&format!("layer_norm.forward {ln}")), K, P],
            ),
            (
                "layer_norm backward",
                vec![push(&format!("layer_norm.backward {ln}")), K, P],
            ),
            (
                "layer_norm forward, y too short (error after the range opened)",
                vec![push(&format!("layer_norm.forward {ln}")), P],
            ),
            (
                "layer_norm forward, invalid description (rejected before any range)",
                vec![],
            ),
            (
                "LayerNorm forward",
                vec![
                    push(&format!("LayerNorm.forward {ln}")),
                    push(&format!("layer_norm.forward {ln}")),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "LayerNorm backward",
                vec![
                    push(&format!("LayerNorm.backward {ln}")),
                    push(&format!("layer_norm.backward {ln}")),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "LayerNorm forward, x too short (error inside the op's range)",
                vec![
                    push(&format!("LayerNorm.forward {ln}")),
                    push(&format!("layer_norm.forward {ln}")),
                    P,
                    P,
                ],
            ),
            (
                "layer_norm forward in place",
                vec![push(&format!("layer_norm.forward {ln}")), K, P],
            ),
            (
                "LayerNorm forward_into",
                vec![
                    push(&format!("LayerNorm.forward {ln}")),
                    push(&format!("layer_norm.forward {ln}")),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "LayerNorm infer",
                vec![
                    push(&format!("LayerNorm.forward {ln}")),
                    push(&format!("layer_norm.forward {ln}")),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "LayerNorm backward_into",
                vec![
                    push(&format!("LayerNorm.backward {ln}")),
                    push(&format!("layer_norm.backward {ln}")),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "LayerNorm forward_in_place",
                vec![
                    push(&format!("LayerNorm.forward {ln}")),
                    push(&format!("layer_norm.forward {ln}")),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "batch_norm forward",
                vec![
                    push("batch_norm.forward train [2, 8, 3, 3] channels_last f16/f32"),
                    K,
                    P,
                ],
            ),
            (
                "batch_norm backward",
                vec![
                    push("batch_norm.backward train [2, 8, 3, 3] channels_last f16/f32"),
                    K,
                    P,
                ],
            ),
            (
                "batch_norm forward, eval without running statistics (error inside the range)",
                vec![
                    push("batch_norm.forward eval [2, 8, 3, 3] channels_last f16/f32"),
                    P,
                ],
            ),
            (
                "BatchNorm forward",
                vec![
                    push("BatchNorm.forward train [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.forward train [4, 8, 5] contiguous f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "BatchNorm backward",
                vec![
                    push("BatchNorm.backward train [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.backward train [4, 8, 5] contiguous f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "BatchNorm forward_into",
                vec![
                    push("BatchNorm.forward train [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.forward train [4, 8, 5] contiguous f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "BatchNorm backward_into",
                vec![
                    push("BatchNorm.backward train [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.backward train [4, 8, 5] contiguous f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "BatchNorm infer, in training mode (eval's range)",
                vec![
                    push("BatchNorm.forward eval [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.forward eval [4, 8, 5] contiguous f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "BatchNorm forward_into, x too short (error inside the op's range)",
                vec![
                    push("BatchNorm.forward train [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.forward train [4, 8, 5] contiguous f32/f32"),
                    P,
                    P,
                ],
            ),
            (
                "BatchNorm forward_in_place, eval",
                vec![
                    push("BatchNorm.forward eval [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.forward eval [4, 8, 5] contiguous f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "BatchNorm backward_into, eval",
                vec![
                    push("BatchNorm.backward eval [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.backward eval [4, 8, 5] contiguous f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "BatchNorm forward, eval",
                vec![
                    push("BatchNorm.forward eval [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.forward eval [4, 8, 5] contiguous f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "BatchNorm backward, eval",
                vec![
                    push("BatchNorm.backward eval [4, 8, 5] contiguous f32/f32"),
                    push("batch_norm.backward eval [4, 8, 5] contiguous f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "rms_norm forward",
                vec![push("rms_norm.forward 4x256 f16/f32"), K, P],
            ),
            (
                "rms_norm backward",
                vec![push("rms_norm.backward 4x256 f16/f32"), K, P],
            ),
            (
                "rms_norm forward_residual",
                vec![push("rms_norm.forward_residual 4x256 f16/f32"), K, P],
            ),
            (
                "rms_norm backward_residual",
                vec![push("rms_norm.backward_residual 4x256 f16/f32"), K, P],
            ),
            (
                "RmsNorm forward",
                vec![
                    push("RmsNorm.forward 4x256 f32/f32"),
                    push("rms_norm.forward 4x256 f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "RmsNorm backward",
                vec![
                    push("RmsNorm.backward 4x256 f32/f32"),
                    push("rms_norm.backward 4x256 f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            (
                "RmsNorm infer",
                vec![
                    push("RmsNorm.forward 4x256 f32/f32"),
                    push("rms_norm.forward 4x256 f32/f32"),
                    K,
                    P,
                    P,
                ],
            ),
            ("end", vec![]),
        ]
        .into_iter()
        .map(|(step, events)| {
            let events = events
                .into_iter()
                .filter(|e| kernels || *e != Event::Kernel);
            (step, events.collect())
        })
        .collect()
    }

    mod spans {
        //! A subscriber that records, per step, the spans entered and exited.

        use std::sync::{Arc, Mutex};

        use tracing::field::{Field, Visit};
        use tracing::span::{Attributes, Id, Record};
        use tracing::{Event, Level, Metadata, Subscriber};

        type Log = Vec<(String, Vec<super::Event>)>;

        #[derive(Default)]
        pub struct Recorder {
            pub log: Arc<Mutex<Log>>,
            /// Per span id (index + 1): its name, its `range` field, its parent's id.
            spans: Mutex<Vec<(String, String, Option<u64>)>>,
            /// The ids of the spans entered, innermost last.
            stack: Mutex<Vec<u64>>,
        }

        #[derive(Default)]
        struct Fields {
            range: Option<String>,
            step: Option<String>,
        }

        impl Visit for Fields {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "step" {
                    self.step = Some(value.to_string());
                }
            }

            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "range" => self.range = Some(format!("{value:?}")),
                    "step" => self.step = Some(format!("{value:?}")),
                    _ => {}
                }
            }
        }

        impl Subscriber for Recorder {
            fn enabled(&self, _: &Metadata<'_>) -> bool {
                true
            }

            fn new_span(&self, span: &Attributes<'_>) -> Id {
                let m = span.metadata();
                assert_eq!(m.target(), "warpnorm", "{m:?}");
                assert_eq!(*m.level(), Level::DEBUG, "{m:?}");
                let mut fields = Fields::default();
                span.record(&mut fields);
                let range = fields.range.expect("a `range` field");
                assert_eq!(
                    range.split(' ').next(),
                    Some(m.name()),
                    "the span's name is the range's first word"
                );
                assert!(span.is_contextual(), "{m:?}");
                let parent = self.stack.lock().unwrap().last().copied();
                let mut spans = self.spans.lock().unwrap();
                spans.push((m.name().to_string(), range, parent));
                Id::from_u64(spans.len() as u64)
            }

            fn record(&self, _: &Id, _: &Record<'_>) {}

            fn record_follows_from(&self, _: &Id, _: &Id) {}

            fn event(&self, event: &Event<'_>) {
                let mut fields = Fields::default();
                event.record(&mut fields);
                if let Some(step) = fields.step {
                    self.log.lock().unwrap().push((step, Vec::new()));
                }
            }

            fn enter(&self, id: &Id) {
                let spans = self.spans.lock().unwrap();
                let (_, range, parent) = &spans[id.into_u64() as usize - 1];
                let mut stack = self.stack.lock().unwrap();
                // Entered where it was created: a module's op span is its child.
                assert_eq!(stack.last().copied(), *parent, "{range}");
                stack.push(id.into_u64());
                let mut log = self.log.lock().unwrap();
                let (_, events) = log.last_mut().expect("a span before any step");
                events.push(super::Event::Push(range.clone()));
            }

            fn exit(&self, id: &Id) {
                let mut stack = self.stack.lock().unwrap();
                assert_eq!(
                    stack.pop(),
                    Some(id.into_u64()),
                    "spans exit innermost first"
                );
                let mut log = self.log.lock().unwrap();
                let (_, events) = log.last_mut().expect("a span before any step");
                events.push(super::Event::Pop);
            }
        }
    }
}
