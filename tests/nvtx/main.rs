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
        let Some(_stream) = testkit::gpu::gpu_stream("nvtx_ranges_of_every_op_and_module_call")
        else {
            return;
        };
        let recorder = build_recorder();
        let out = Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("NVTX_INJECTION64_PATH", &recorder)
            .env("SIMCUDA_TRACE", "1")
            .output()
            .expect("running the test binary again");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the child run failed ({}):\n{}\n{stderr}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        check(&stderr);
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

    /// Marks the start of a step in the child's stderr (the parent splits the record there).
    fn step(name: &str) {
        eprintln!("step: {name}");
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
                mean: mean.as_view_mut(),
                rstd: rstd.as_view_mut(),
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
                mean: mean.as_view_mut(),
                rstd: rstd.as_view_mut(),
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
                mean: mean.as_view_mut(),
                rstd: rstd.as_view_mut(),
                workspace: Some(ws.as_view_mut()),
            },
        );
        assert!(e.is_err(), "a negative eps is rejected");

        // LayerNorm, module: x of shape (2, 2, 256).
        let ln = LayerNorm::<f32>::new(&s, &[cols], Affine::WeightBias, 1e-5).unwrap();
        step("LayerNorm forward");
        let out = ln.forward(&x.as_view(), &[2, 2, cols]).unwrap();
        step("LayerNorm backward");
        ln.backward(&x.as_view(), &dy.as_view(), &[2, 2, cols], &out.saved)
            .unwrap();
        step("LayerNorm forward, x too short (error inside the op's range)");
        let e = ln.forward(&x.slice(1..), &[2, 2, cols]);
        assert!(e.is_err(), "a short x is rejected");

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
        bn.eval();
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
    fn check(stderr: &str) {
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
                } else {
                    panic!("a kernel directly inside the module range {inner:?}: {line}")
                };
                let direction = if inner.contains(".forward ") {
                    "_fwd_"
                } else {
                    "_bwd_"
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

        use Event::{Kernel as K, Pop as P};
        let push = |s: &str| Event::Push(s.to_string());
        let ln = "4x256 bf16/f32";
        let expected: Vec<(&str, Vec<Event>)> = vec![
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
            ("end", vec![]),
        ];
        assert_eq!(steps.len(), expected.len(), "steps: {steps:#?}");
        for ((name, got), (want_name, want)) in steps.iter().zip(&expected) {
            assert_eq!(name, want_name);
            assert_eq!(got, want, "step {name:?}");
        }
    }
}
