//! warpnorm's main job, end to end: LayerNorm forward + backward and a BatchNorm training step.
//!
//! - With a usable GPU: runs the module types on the GPU, checks them against the f64 CPU
//!   reference, and times them with CUDA events (GB/s against the op's minimum traffic).
//! - Without one: says why, then runs the *same launch plans* on ptxsim (the PTX nvcc emitted
//!   for compute_90, planned for an H200), checks them against the CPU reference, and reports the
//!   simulated memory traffic (unique 32-byte sectors touched, against the minimum).
//!
//! Run with `bash scripts/demo.sh` (installs nvcc if missing).

use half::bf16;
use testkit::sim;
use warpnorm::batch_norm::{self as bn, BatchNormDesc, Layout, Mode};
use warpnorm::layer_norm::{self as ln, Affine, Direction, LayerNormDesc};
use warpnorm::{cpu, kernels, DType, DeviceProps, Element, Plan};

/// Deterministic pseudo-random values in [-1, 1) (a 64-bit LCG; no dependency needed).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn cast<T: Element>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x)).collect()
}

/// Largest |a - b| relative to max |b|, over elements (NaN counts as infinitely far).
fn max_rel_err<T: Element>(got: &[T], want: &[T]) -> f64 {
    let scale = want
        .iter()
        .map(|w| w.to_f64().abs())
        .fold(0.0, f64::max)
        .max(1e-30);
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            let d = (g.to_f64() - w.to_f64()).abs();
            if d.is_nan() {
                f64::INFINITY
            } else {
                d / scale
            }
        })
        .fold(0.0, f64::max)
}

fn main() {
    println!("warpnorm demo");
    if !kernels::BUILT {
        println!(
            "The CUDA kernels were not built ({}), so there is nothing to run on a GPU or on \
             the simulator. Run `bash scripts/demo.sh`, which installs nvcc first.",
            kernels::NOT_BUILT_REASON
        );
        return;
    }
    println!(
        "kernels: nvcc {}, SASS for {:?} + PTX compute_{}, {} entry points",
        kernels::NVCC_VERSION,
        kernels::SASS_ARCHS,
        kernels::FATBIN_PTX_ARCH,
        kernels::all_entries().count()
    );
    match warpnorm::runtime::context(0) {
        Ok(ctx) => gpu::run(ctx),
        Err(e) => {
            println!("No GPU: {e}.");
            println!(
                "Running the same launch plans (planned for an H200) on ptxsim, the PTX \
                 simulator, on the compute_90 PTX instead; no timings, but correctness and \
                 simulated memory traffic."
            );
            sim_layer_norm();
            sim_batch_norm();
        }
    }
}

/// Runs a plan on the simulator with metrics on; returns unique bytes touched.
fn run_sim(s: &mut sim::Sim, plan: &Plan) -> u64 {
    let stats = s.run(plan).unwrap_or_else(|e| panic!("ptxsim: {e}"));
    stats
        .iter()
        .map(|st| st.metrics.as_ref().map_or(0, |m| m.unique_bytes))
        .sum()
}

fn sim_with_metrics() -> sim::Sim {
    let mut s = sim::Sim::new(90);
    let mut opts = s.dev.options().clone();
    opts.metrics = true;
    s.dev.set_options(opts);
    s
}

fn sim_layer_norm() {
    let (rows, cols) = (128usize, 1024usize);
    let props = DeviceProps::H200;
    println!("\nLayerNorm, x {rows} x {cols} bf16, gamma/beta f32 (mixed precision):");
    let desc = LayerNormDesc::new(
        &[rows, cols],
        &[cols],
        DType::BF16,
        DType::F32,
        Affine::WeightBias,
        1e-5,
    )
    .expect("valid LayerNorm");
    let x: Vec<bf16> = cast(
        &values(rows * cols, 1)
            .iter()
            .map(|v| 3.0 * v + 0.5)
            .collect::<Vec<_>>(),
    );
    let dy: Vec<bf16> = cast(&values(rows * cols, 2));
    let gamma: Vec<f32> = cast(
        &values(cols, 3)
            .iter()
            .map(|v| 1.0 + 0.1 * v)
            .collect::<Vec<_>>(),
    );
    let beta: Vec<f32> = cast(&values(cols, 4));

    let mut s = sim_with_metrics();
    let px = s.upload(&x, 0);
    let pdy = s.upload(&dy, 0);
    let pg = s.upload(&gamma, 0);
    let pb = s.upload(&beta, 0);
    let py = s.alloc::<bf16>(rows * cols, 0);
    let pdx = s.alloc::<bf16>(rows * cols, 0);
    let pm = s.alloc::<f32>(rows, 0);
    let pr = s.alloc::<f32>(rows, 0);
    let plo = s.alloc::<f32>(rows, 0);
    let pdg = s.alloc::<f32>(cols, 0);
    let pdb = s.alloc::<f32>(cols, 0);
    let ws_bytes = ln::workspace_bytes(&desc, Direction::Backward, &props)
        .expect("workspace")
        .max(ln::workspace_bytes(&desc, Direction::Forward, &props).expect("workspace"));
    let pws = testkit::backend::row_norm_workspace(&mut s, ws_bytes);

    let fwd = ln::plan_forward(
        &desc,
        &ln::ForwardPtrs {
            x: px,
            y: py,
            gamma: Some(pg),
            beta: Some(pb),
            mean: Some(pm),
            rstd: Some(pr),
            mean_lo: Some(plo),
            workspace: pws,
            workspace_bytes: ws_bytes as u64,
        },
        &props,
    )
    .expect("forward plan");
    print!("  forward plan: {fwd}");
    let fwd_bytes = run_sim(&mut s, &fwd);
    let bwd = ln::plan_backward(
        &desc,
        &ln::BackwardPtrs {
            x: px,
            dy: pdy,
            dx: pdx,
            gamma: Some(pg),
            mean: pm,
            rstd: pr,
            mean_lo: Some(plo),
            dgamma: Some(pdg),
            dbeta: Some(pdb),
            workspace: pws,
            workspace_bytes: ws_bytes as u64,
        },
        &props,
    )
    .expect("backward plan");
    print!("  backward plan: {bwd}");
    let bwd_bytes = run_sim(&mut s, &bwd);

    let want =
        cpu::layer_norm::forward(&desc, &x, Some(&gamma), Some(&beta)).expect("reference forward");
    let saved = (&want.mean[..], &want.rstd[..], Some(&want.mean_lo[..]));
    let grads =
        cpu::layer_norm::backward(&desc, &x, &dy, saved, Some(&gamma)).expect("reference backward");
    let y: Vec<bf16> = s.download(py, rows * cols);
    let dx: Vec<bf16> = s.download(pdx, rows * cols);
    let dg: Vec<f32> = s.download(pdg, cols);
    println!(
        "  max error vs the f64 reference, relative to max|ref|: y {:.2e}, dx {:.2e}, dgamma {:.2e} \
         (bf16 unit roundoff 3.9e-3)",
        max_rel_err(&y, &want.y),
        max_rel_err(&dx, &grads.dx),
        max_rel_err(&dg, grads.dgamma.as_deref().unwrap_or(&[]))
    );
    let n = (rows * cols) as f64;
    println!(
        "  simulated unique DRAM bytes: forward {:.3}x, backward {:.3}x the minimum \
         (read x, write y = {} B; read x, dy, write dx = {} B)",
        fwd_bytes as f64 / (n * 4.0),
        bwd_bytes as f64 / (n * 6.0),
        n * 4.0,
        n * 6.0
    );
}

fn sim_batch_norm() {
    let dims = [8usize, 32, 16, 16];
    let props = DeviceProps::H200;
    println!("\nBatchNorm2d training step, x {dims:?} f32 NCHW, momentum 0.1:");
    let desc = BatchNormDesc::new(&dims, Layout::Contiguous, DType::F32, DType::F32)
        .with_mode(Mode::train(0.1));
    let c = dims[1];
    let n: usize = dims.iter().product();
    let x: Vec<f32> = cast(
        &values(n, 5)
            .iter()
            .map(|v| 2.0 * v + 10.0)
            .collect::<Vec<_>>(),
    );
    let gamma = vec![1.0f32; c];
    let beta = vec![0.0f32; c];
    let mut s = sim_with_metrics();
    let px = s.upload(&x, 0);
    let py = s.alloc::<f32>(n, 0);
    let pg = s.upload(&gamma, 0);
    let pb = s.upload(&beta, 0);
    let prm = s.upload(&vec![0.0f32; c], 0);
    let prv = s.upload(&vec![1.0f32; c], 0);
    let pnbt = s.dev.alloc_zeroed(8).expect("alloc");
    let psm = s.alloc::<f32>(c, 0);
    let psi = s.alloc::<f32>(c, 0);
    let ws_bytes = bn::workspace_bytes(&desc, bn::Direction::Forward, &props).expect("workspace");
    // Zeroed: BatchNorm's reductions keep their arrival counters at the workspace's start.
    let pws = s.upload(&vec![0.0f32; ws_bytes.div_ceil(4)], 0);
    let plan = bn::plan_forward(
        &desc,
        &bn::ForwardPtrs {
            x: px,
            y: py,
            gamma: Some(pg),
            beta: Some(pb),
            running_mean: Some(prm),
            running_var: Some(prv),
            num_batches_tracked: Some(pnbt),
            save_mean: Some(psm),
            save_mean_lo: None,
            save_invstd: Some(psi),
            workspace: pws,
            workspace_bytes: ws_bytes as u64,
        },
        &props,
    )
    .expect("BatchNorm plan");
    print!("  plan: {plan}");
    let bytes = run_sim(&mut s, &plan);
    let mut rm = vec![0.0f32; c];
    let mut rv = vec![1.0f32; c];
    let mut nbt = 0i64;
    let want = cpu::batch_norm::forward(
        &desc,
        &x,
        Some((&gamma, &beta)),
        Some(cpu::batch_norm::Running {
            mean: &mut rm,
            var: &mut rv,
            num_batches_tracked: Some(&mut nbt),
        }),
    )
    .expect("reference");
    let y: Vec<f32> = s.download(py, n);
    let got_rm: Vec<f32> = s.download(prm, c);
    let got_rv: Vec<f32> = s.download(prv, c);
    println!(
        "  max error vs the f64 reference, relative to max|ref|: y {:.2e}, running_mean {:.2e}, \
         running_var {:.2e} (f32 unit roundoff 6.0e-8)",
        max_rel_err(&y, &want.y),
        max_rel_err(&got_rm, &rm),
        max_rel_err(&got_rv, &rv)
    );
    println!(
        "  simulated unique DRAM bytes: {:.3}x the two-sweep minimum (3 x 4 B x {n} = {} B)",
        bytes as f64 / (12.0 * n as f64),
        12 * n
    );
}

mod gpu {
    use std::sync::Arc;

    use cudarc::driver::{sys::CUevent_flags, CudaContext, CudaStream};
    use half::bf16;
    use warpnorm::batch_norm::{BatchNorm, BatchNormConfig, Layout};
    use warpnorm::layer_norm::{Affine, LayerNorm};
    use warpnorm::{cpu, Error};

    use super::{cast, max_rel_err, values};

    fn drv(e: cudarc::driver::DriverError) -> Error {
        Error::Driver {
            during: "the demo".into(),
            source: e,
        }
    }

    /// Milliseconds per call of `f`, averaged over `reps`, timed with CUDA events.
    fn time_ms(stream: &Arc<CudaStream>, reps: usize, mut f: impl FnMut()) -> Result<f64, Error> {
        f();
        let ctx = stream.context();
        let start = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv)?;
        let end = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv)?;
        start.record(stream).map_err(drv)?;
        for _ in 0..reps {
            f();
        }
        end.record(stream).map_err(drv)?;
        end.synchronize().map_err(drv)?;
        Ok(start.elapsed_ms(&end).map_err(drv)? as f64 / reps as f64)
    }

    pub fn run(ctx: Arc<CudaContext>) {
        if let Err(e) = run_inner(ctx) {
            println!("GPU demo failed: {e}");
            std::process::exit(1);
        }
    }

    fn run_inner(ctx: Arc<CudaContext>) -> Result<(), Error> {
        println!("GPU: {}", ctx.name().map_err(drv)?);
        let stream = ctx.default_stream();

        let (rows, cols) = (16384usize, 4096usize);
        println!("\nLayerNorm {rows} x {cols}, bf16 activations, f32 gamma/beta:");
        let x: Vec<bf16> = cast(&values(rows * cols, 1));
        let dy: Vec<bf16> = cast(&values(rows * cols, 2));
        let mut m = LayerNorm::<f32>::new(&stream, &[cols], Affine::WeightBias, 1e-5)?;
        let gamma: Vec<f32> = cast(
            &values(cols, 3)
                .iter()
                .map(|v| 1.0 + 0.1 * v)
                .collect::<Vec<_>>(),
        );
        let beta: Vec<f32> = cast(&values(cols, 4));
        m.load_state(&warpnorm::State {
            weight: Some(gamma.clone()),
            bias: Some(beta.clone()),
            ..Default::default()
        })?;
        let dx_ = stream.clone_htod(&x).map_err(drv)?;
        let ddy = stream.clone_htod(&dy).map_err(drv)?;
        let out = m.forward(&dx_.as_view(), &[rows, cols])?;
        let grads = m.backward(&dx_.as_view(), &ddy.as_view(), &[rows, cols], &out.saved)?;
        let y = stream.clone_dtoh(&out.y).map_err(drv)?;
        let dx = stream.clone_dtoh(&grads.dx).map_err(drv)?;
        let desc = m.desc::<bf16>(&[rows, cols])?;
        let want = cpu::layer_norm::forward(&desc, &x, Some(&gamma), Some(&beta))?;
        let saved = (&want.mean[..], &want.rstd[..], Some(&want.mean_lo[..]));
        let wg = cpu::layer_norm::backward(&desc, &x, &dy, saved, Some(&gamma))?;
        println!(
            "  max error vs f64 reference (relative to max|ref|): y {:.2e}, dx {:.2e}",
            max_rel_err(&y, &want.y),
            max_rel_err(&dx, &wg.dx)
        );
        let n = (rows * cols) as f64;
        let mut fwd_err = None;
        let fwd = time_ms(&stream, 20, || {
            if let Err(e) = m.forward(&dx_.as_view(), &[rows, cols]) {
                fwd_err = Some(e);
            }
        })?;
        let mut bwd_err = None;
        let bwd = time_ms(&stream, 20, || {
            if let Err(e) = m.backward(&dx_.as_view(), &ddy.as_view(), &[rows, cols], &out.saved) {
                bwd_err = Some(e);
            }
        })?;
        if let Some(e) = fwd_err.or(bwd_err) {
            return Err(e);
        }
        println!(
            "  forward {fwd:.3} ms ({:.0} GB/s of x + y), backward {bwd:.3} ms ({:.0} GB/s of x + dy + dx); \
             module calls include their allocations",
            n * 4.0 / fwd / 1e6,
            n * 6.0 / bwd / 1e6
        );

        let dims = [32usize, 256, 56, 56];
        println!("\nBatchNorm2d training step, x {dims:?} f32 NCHW:");
        let n: usize = dims.iter().product();
        let xb: Vec<f32> = cast(&values(n, 5));
        let dxb = stream.clone_htod(&xb).map_err(drv)?;
        let mut b = BatchNorm::<f32>::new(&stream, BatchNormConfig::new(dims[1]))?;
        let out = b.forward(&dxb.as_view(), &dims, Layout::Contiguous)?;
        let got = stream.clone_dtoh(&out.y).map_err(drv)?;
        let desc = warpnorm::batch_norm::BatchNormDesc::new(
            &dims,
            Layout::Contiguous,
            warpnorm::DType::F32,
            warpnorm::DType::F32,
        )
        .with_mode(warpnorm::batch_norm::Mode::train(0.1));
        let want = cpu::batch_norm::forward::<f32, f32>(&desc, &xb, None, None)?;
        println!(
            "  max error of y vs f64 reference: {:.2e}",
            max_rel_err(&got, &want.y)
        );
        let mut err = None;
        let t = time_ms(&stream, 20, || {
            if let Err(e) = b.forward(&dxb.as_view(), &dims, Layout::Contiguous) {
                err = Some(e);
            }
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        println!(
            "  train forward {t:.3} ms ({:.0} GB/s of the 3 x 4 B/element two-sweep minimum)",
            12.0 * n as f64 / t / 1e6
        );
        Ok(())
    }
}
