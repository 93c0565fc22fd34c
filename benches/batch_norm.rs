//! BatchNorm on the GPU: correctness against the CPU reference first, then timing of
//! training forward and backward, eval forward, and eval-mode backward without and with the
//! parameters' gradients, with CUDA events (L2 flushed before every repeat), printed as GB/s of
//! the minimum DRAM traffic (train forward 3s, backward 5s, eval forward 2s, eval backward 2s,
//! with gradients 3s bytes per element, s = element size) and as % of the device-to-device copy bandwidth
//! measured in the same run (`warpnorm::copy`). Without a GPU it says why and exits 0.
//! Each result is also printed as one `RESULT {json}` line (read by `scripts/gpu-report.py`;
//! `scripts/torch_compare.py` times PyTorch on the same shapes).
//!
//! Run: `cargo bench --bench batch_norm`.

use std::sync::Arc;

use cudarc::driver::{sys::CUevent_flags, CudaSlice, CudaStream};
use half::bf16;
use warpnorm::batch_norm::{
    backward, backward_workspace_bytes, forward, forward_workspace_bytes, BackwardBuffers,
    BatchNormDesc, ForwardBuffers, Layout, Mode,
};
use warpnorm::cpu::batch_norm as cpu;
use warpnorm::{runtime, DType, Element, Error, Result};

const REPEATS: usize = 20;
const FLUSH_BYTES: usize = 512 << 20;

fn drv(e: cudarc::driver::DriverError) -> Error {
    Error::Driver {
        during: "benchmark".into(),
        source: e,
    }
}

struct Timer {
    stream: Arc<CudaStream>,
    flush: CudaSlice<u8>,
}

impl Timer {
    /// Median milliseconds of `f` over REPEATS runs, L2 flushed before each.
    fn time(&mut self, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
        let ctx = self.stream.context().clone();
        let mut ms = Vec::with_capacity(REPEATS);
        f()?; // warm-up (module load, first-touch)
        for _ in 0..REPEATS {
            self.stream.memset_zeros(&mut self.flush).map_err(drv)?;
            let a = ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(drv)?;
            let b = ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(drv)?;
            a.record(&self.stream).map_err(drv)?;
            f()?;
            b.record(&self.stream).map_err(drv)?;
            b.synchronize().map_err(drv)?;
            ms.push(a.elapsed_ms(&b).map_err(drv)? as f64);
        }
        ms.sort_by(|x, y| x.total_cmp(y));
        Ok(ms[REPEATS / 2])
    }
}

fn max_err(got: &[f64], want: &[f64]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max)
}

/// One machine-readable line per result, for scripts/gpu-report.py: `RESULT ` + one JSON object
/// (the printed fields plus "bench"; times in us, bytes = the minimum traffic counted for GB/s).
fn result(mut v: serde_json::Value) {
    v["bench"] = "batch_norm".into();
    println!("RESULT {v}");
}

fn bench<T: Element + Default>(
    timer: &mut Timer,
    dims: &[usize],
    layout: Layout,
    copy_gbs: f64,
) -> Result<()> {
    let s = timer.stream.clone();
    let desc = BatchNormDesc::new(dims, layout, T::DTYPE, DType::F32).with_mode(Mode::train(0.1));
    let eval_desc = desc.clone().with_mode(Mode::eval());
    let g = *desc.check()?.ncs();
    let (n, c) = (g.numel as usize, g.c as usize);
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    };
    let hx: Vec<T> = (0..n)
        .map(|i| T::from_f64(2.0 * rnd() + (i % 7) as f64 * 0.1))
        .collect();
    let hdy: Vec<T> = (0..n).map(|_| T::from_f64(rnd())).collect();
    let gamma: Vec<f32> = (0..c).map(|_| 1.0 + 0.5 * rnd() as f32).collect();
    let beta: Vec<f32> = (0..c).map(|_| 0.5 * rnd() as f32).collect();
    let x = s.clone_htod(&hx).map_err(drv)?;
    let dy = s.clone_htod(&hdy).map_err(drv)?;
    let dg = s.clone_htod(&gamma).map_err(drv)?;
    let db = s.clone_htod(&beta).map_err(drv)?;
    let mut rm = s.clone_htod(&vec![0.0f32; c]).map_err(drv)?;
    let mut rv = s.clone_htod(&vec![1.0f32; c]).map_err(drv)?;
    let mut nbt = s.clone_htod(&[0i64]).map_err(drv)?;
    let mut y = s.clone_htod(&hdy).map_err(drv)?;
    let mut dx = s.clone_htod(&hdy).map_err(drv)?;
    let mut sm = s.alloc_zeros::<f32>(c).map_err(drv)?;
    let mut sml = s.alloc_zeros::<f32>(c).map_err(drv)?;
    let mut si = s.alloc_zeros::<f32>(c).map_err(drv)?;
    let mut dgo = s.alloc_zeros::<f32>(c).map_err(drv)?;
    let mut dbo = s.alloc_zeros::<f32>(c).map_err(drv)?;
    let ws_bytes = forward_workspace_bytes(&s, &desc)?.max(backward_workspace_bytes(&s, &desc)?);
    let mut ws = s.alloc_zeros::<u8>(ws_bytes).map_err(drv)?;

    macro_rules! fwd {
        ($desc:expr) => {
            forward::<T, f32>(
                &s,
                $desc,
                ForwardBuffers {
                    x: x.as_view(),
                    y: y.as_view_mut(),
                    gamma: Some(dg.as_view()),
                    beta: Some(db.as_view()),
                    running_mean: Some(rm.as_view_mut()),
                    running_var: Some(rv.as_view_mut()),
                    num_batches_tracked: Some(nbt.as_view_mut()),
                    save_mean: Some(sm.as_view_mut()),
                    save_mean_lo: Some(sml.as_view_mut()),
                    save_invstd: Some(si.as_view_mut()),
                    workspace: Some(ws.as_view_mut()),
                },
            )
        };
    }
    macro_rules! bwd {
        ($desc:expr, $grads:expr) => {
            backward::<T, f32>(
                &s,
                $desc,
                BackwardBuffers {
                    x: x.as_view(),
                    dy: dy.as_view(),
                    save_mean: sm.as_view(),
                    save_mean_lo: Some(sml.as_view()),
                    save_invstd: si.as_view(),
                    gamma: Some(dg.as_view()),
                    dx: dx.as_view_mut(),
                    dgamma: if $grads {
                        Some(dgo.as_view_mut())
                    } else {
                        None
                    },
                    dbeta: if $grads {
                        Some(dbo.as_view_mut())
                    } else {
                        None
                    },
                    workspace: Some(ws.as_view_mut()),
                },
            )
        };
    }

    // Correctness first: one training step against the CPU reference.
    fwd!(&desc)?;
    bwd!(&desc, true)?;
    let gy: Vec<T> = s.clone_dtoh(&y).map_err(drv)?;
    let gdx: Vec<T> = s.clone_dtoh(&dx).map_err(drv)?;
    let (mut crm, mut crv, mut cn) = (vec![0.0f32; c], vec![1.0f32; c], 0i64);
    let want = cpu::forward::<T, f32>(
        &desc,
        &hx,
        Some((&gamma, &beta)),
        Some(cpu::Running {
            mean: &mut crm,
            var: &mut crv,
            num_batches_tracked: Some(&mut cn),
        }),
    )?;
    let wb = cpu::backward::<T, f32>(
        &desc,
        &hx,
        &hdy,
        Some(&gamma),
        &want.save_mean,
        Some(&want.save_mean_lo),
        &want.save_invstd,
    )?;
    let f = |v: &[T]| v.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
    let rel = |g: &[T], w: &[T]| {
        max_err(&f(g), &f(w)) / f(w).iter().fold(1e-30f64, |a, b| a.max(b.abs()))
    };
    let (ey, edx) = (rel(&gy, &want.y), rel(&gdx, &wb.dx));
    // Relative to max|ref|: one rounding to T on each side plus the f32 error of the statistics
    // (same budget as the simulator tests).
    let tol = 4.0 * T::DTYPE.unit_roundoff() + 64.0 * DType::F32.unit_roundoff();
    let ok = ey <= tol && edx <= tol;
    let sz = T::DTYPE.size() as f64;
    let ms_f = timer.time(|| fwd!(&desc))?;
    let ms_b = timer.time(|| bwd!(&desc, true))?;
    let ms_e = timer.time(|| fwd!(&eval_desc))?;
    // Eval-mode backward from the eval forward's saved statistics: dx alone (an elementwise
    // pass over dy), and with dgamma / dbeta (one sweep over x and dy that writes dx).
    let ms_eb = timer.time(|| bwd!(&eval_desc, false))?;
    let ms_ebg = timer.time(|| bwd!(&eval_desc, true))?;
    let gbs = |bytes: f64, ms: f64| bytes / (ms * 1e-3) / 1e9;
    let lname = match layout {
        Layout::Contiguous => "contig",
        Layout::ChannelsLast => "chlast",
    };
    for (what, k, ms) in [
        ("train fwd", 3.0, ms_f),
        ("train bwd", 5.0, ms_b),
        ("eval fwd", 2.0, ms_e),
        ("eval bwd", 2.0, ms_eb),
        ("eval bwd grads", 3.0, ms_ebg),
    ] {
        let r = gbs(k * sz * n as f64, ms);
        println!(
            "{:<22} {:<6} {:<5} {:<10} {:>9.1} us {:>8.1} GB/s {:>5.1}% of copy   check: {} (rel err y {ey:.2e}, dx {edx:.2e})",
            format!("{dims:?}"),
            lname,
            T::DTYPE.name(),
            what,
            ms * 1e3,
            r,
            100.0 * r / copy_gbs,
            if ok { "ok" } else { "FAILED" },
        );
        result(serde_json::json!({
            "op": what.replace(' ', "_"),
            "shape": dims,
            "layout": lname,
            "dtype": T::DTYPE.name(),
            "param_dtype": "f32",
            "us": ms * 1e3,
            "bytes": k * sz * n as f64,
            "gbs": r,
            "pct_copy": 100.0 * r / copy_gbs,
            "copy_gbs": copy_gbs,
            "check": if ok { "ok" } else { "FAILED" },
            "rel_err_y": ey,
            "rel_err_dx": edx,
        }));
    }
    if !ok {
        return Err(Error::InvalidArgument {
            what: "benchmark check".into(),
            message: format!(
                "{dims:?}: y error {ey:.3e}, dx error {edx:.3e} > {tol:.3e} x max|ref|"
            ),
        });
    }
    Ok(())
}

fn main() {
    let ctx = match runtime::context(0) {
        Ok(c) => c,
        Err(e) => {
            println!("batch_norm bench: no GPU, nothing to time ({e})");
            return;
        }
    };
    if let Err(e) = warpnorm::kernels::ensure_built() {
        println!("batch_norm bench: {e}");
        return;
    }
    if let Err(e) = run(ctx.default_stream()) {
        eprintln!("batch_norm bench failed: {e}");
        std::process::exit(1);
    }
}

fn run(stream: Arc<CudaStream>) -> Result<()> {
    let flush = stream.alloc_zeros::<u8>(FLUSH_BYTES).map_err(drv)?;
    let mut timer = Timer {
        stream: stream.clone(),
        flush,
    };
    // Copy roofline: 256 MiB device to device (read + write).
    let n = 64usize << 20;
    let src = stream.alloc_zeros::<f32>(n).map_err(drv)?;
    let mut dst = stream.alloc_zeros::<f32>(n).map_err(drv)?;
    let ms = timer.time(|| warpnorm::copy::copy(&stream, src.as_view(), dst.as_view_mut()))?;
    let copy_gbs = 2.0 * 4.0 * n as f64 / (ms * 1e-3) / 1e9;
    println!("copy roofline: {copy_gbs:.1} GB/s ({ms:.3} ms for 2 x 256 MiB)");
    result(serde_json::json!({
        "op": "copy",
        "shape": [n],
        "dtype": "f32",
        "us": ms * 1e3,
        "bytes": 2.0 * 4.0 * n as f64,
        "gbs": copy_gbs,
    }));
    bench::<f32>(&mut timer, &[65536 * 16, 8], Layout::Contiguous, copy_gbs)?;
    bench::<bf16>(&mut timer, &[65536 * 16, 8], Layout::Contiguous, copy_gbs)?;
    bench::<f32>(&mut timer, &[32, 256, 56, 56], Layout::Contiguous, copy_gbs)?;
    bench::<f32>(
        &mut timer,
        &[32, 256, 56, 56],
        Layout::ChannelsLast,
        copy_gbs,
    )?;
    bench::<bf16>(
        &mut timer,
        &[32, 256, 56, 56],
        Layout::ChannelsLast,
        copy_gbs,
    )?;
    bench::<bf16>(&mut timer, &[32, 256, 56, 56], Layout::Contiguous, copy_gbs)?;
    bench::<f32>(&mut timer, &[256, 64, 4096], Layout::Contiguous, copy_gbs)?;
    bench::<f32>(&mut timer, &[64, 3, 224, 224], Layout::Contiguous, copy_gbs)?;
    bench::<f32>(&mut timer, &[128, 2048, 7, 7], Layout::Contiguous, copy_gbs)?;
    // Shapes of the fused single-pass tiers on H200 (many channels, channel tile on chip).
    bench::<f32>(&mut timer, &[256, 4096], Layout::Contiguous, copy_gbs)?;
    bench::<bf16>(&mut timer, &[32, 512, 7, 7], Layout::Contiguous, copy_gbs)?;
    Ok(())
}
