//! LayerNorm GPU benchmark (plain `main`, `harness = false`): `cargo bench --bench layer_norm`.
//!
//! For each shape and dtype pair it first checks forward and backward against the CPU
//! reference (on the first rows of the same D), then times both with CUDA events, flushing L2
//! between repeats, and prints GB/s of the minimum traffic (forward: read x + write y;
//! backward: read x, dy + write dx) and the percentage of the device-to-device copy
//! bandwidth measured in the same run (warpnorm::copy). Then RMSNorm and the fused residual
//! add of both ops (benches/layer_norm/fused.rs). Without a GPU it says why and exits 0.
//! Each result is also printed as one `RESULT {json}` line (read by `scripts/gpu-report.py`;
//! `scripts/torch_compare.py` times PyTorch on the same shapes).

use std::sync::Arc;

use cudarc::driver::{sys::CUevent_flags, CudaSlice, CudaStream};
use half::bf16;
use warpnorm::cpu::layer_norm as cpu;
use warpnorm::layer_norm::{
    backward, backward_workspace_bytes, forward, forward_workspace_bytes, Affine, BackwardBuffers,
    ForwardBuffers, LayerNormDesc,
};
use warpnorm::Element;

#[path = "layer_norm/fused.rs"]
mod fused;
use fused::Norm;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const REPEATS: usize = 20;
const FLUSH_BYTES: usize = 256 << 20;

struct Timer {
    stream: Arc<CudaStream>,
    flush: CudaSlice<u8>,
}

impl Timer {
    /// Median milliseconds of `f` over REPEATS runs, L2 flushed before each.
    fn time(&mut self, mut f: impl FnMut() -> Res<()>) -> Res<f64> {
        f()?; // warm-up (module load, first-touch)
        let mut ms = Vec::with_capacity(REPEATS);
        for _ in 0..REPEATS {
            self.stream.memset_zeros(&mut self.flush)?;
            let start = self
                .stream
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            f()?;
            let end = self
                .stream
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            ms.push(start.elapsed_ms(&end)? as f64);
        }
        ms.sort_by(|a, b| a.total_cmp(b));
        Ok(ms[REPEATS / 2])
    }
}

fn rand_vec<E: Element>(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<E> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let u = (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
            E::from_f64(lo + (hi - lo) * u)
        })
        .collect()
}

struct Bufs<T, P> {
    desc: LayerNormDesc,
    x: CudaSlice<T>,
    dy: CudaSlice<T>,
    y: CudaSlice<T>,
    dx: CudaSlice<T>,
    g: CudaSlice<P>,
    b: CudaSlice<P>,
    dg: CudaSlice<P>,
    db: CudaSlice<P>,
    mean: CudaSlice<f32>,
    rstd: CudaSlice<f32>,
    mean_lo: CudaSlice<f32>,
    ws: CudaSlice<u8>,
}

/// Device buffers plus the host x, dy, gamma, beta they were filled from.
type Setup<T, P> = (Bufs<T, P>, Vec<T>, Vec<T>, Vec<P>, Vec<P>);

fn setup<T: Element, P: Element>(
    s: &Arc<CudaStream>,
    rows: usize,
    cols: usize,
) -> Res<Setup<T, P>> {
    let desc = LayerNormDesc::from_rows(rows, cols, T::DTYPE, P::DTYPE, Affine::WeightBias, 1e-5)?;
    let n = rows * cols;
    let (hx, hdy) = (
        rand_vec::<T>(n, 1, -3.0, 3.0),
        rand_vec::<T>(n, 2, -1.0, 1.0),
    );
    let (hg, hb) = (
        rand_vec::<P>(cols, 3, 0.5, 1.5),
        rand_vec::<P>(cols, 4, -0.5, 0.5),
    );
    let ws = forward_workspace_bytes(s, &desc)?
        .max(backward_workspace_bytes(s, &desc)?)
        .max(16);
    let bufs = Bufs {
        desc,
        x: s.clone_htod(&hx)?,
        dy: s.clone_htod(&hdy)?,
        y: s.clone_htod(&hx)?,
        dx: s.clone_htod(&hx)?,
        g: s.clone_htod(&hg)?,
        b: s.clone_htod(&hb)?,
        dg: s.clone_htod(&hg)?,
        db: s.clone_htod(&hb)?,
        mean: s.clone_htod(&vec![0.0f32; rows])?,
        rstd: s.clone_htod(&vec![0.0f32; rows])?,
        mean_lo: s.clone_htod(&vec![0.0f32; rows])?,
        ws: s.clone_htod(&vec![0u8; ws])?,
    };
    Ok((bufs, hx, hdy, hg, hb))
}

fn run_fwd<T: Element, P: Element>(s: &Arc<CudaStream>, b: &mut Bufs<T, P>) -> Res<()> {
    forward(
        s,
        &b.desc,
        ForwardBuffers {
            x: b.x.as_view(),
            y: b.y.as_view_mut(),
            gamma: Some(b.g.as_view()),
            beta: Some(b.b.as_view()),
            mean: Some(b.mean.as_view_mut()),
            rstd: Some(b.rstd.as_view_mut()),
            mean_lo: Some(b.mean_lo.as_view_mut()),
            workspace: Some(b.ws.as_view_mut()),
        },
    )?;
    Ok(())
}

fn run_bwd<T: Element, P: Element>(s: &Arc<CudaStream>, b: &mut Bufs<T, P>) -> Res<()> {
    backward(
        s,
        &b.desc,
        BackwardBuffers {
            x: b.x.as_view(),
            dy: b.dy.as_view(),
            mean: b.mean.as_view(),
            rstd: b.rstd.as_view(),
            mean_lo: Some(b.mean_lo.as_view()),
            gamma: Some(b.g.as_view()),
            dx: b.dx.as_view_mut(),
            dgamma: Some(b.dg.as_view_mut()),
            dbeta: Some(b.db.as_view_mut()),
            workspace: Some(b.ws.as_view_mut()),
        },
    )?;
    Ok(())
}

/// Forward + backward on `rows` rows against the CPU reference (max error within one
/// rounding of the output dtype plus the f32 arithmetic, relative to the output's scale).
fn check<T: Element, P: Element>(s: &Arc<CudaStream>, rows: usize, cols: usize) -> Res<()> {
    let (mut b, hx, hdy, hg, hb) = setup::<T, P>(s, rows, cols)?;
    run_fwd(s, &mut b)?;
    run_bwd(s, &mut b)?;
    let r = cpu::forward::<T, P>(&b.desc, &hx, Some(&hg), Some(&hb))?;
    let mean = s.clone_dtoh(&b.mean)?;
    let rstd = s.clone_dtoh(&b.rstd)?;
    let mean_lo = s.clone_dtoh(&b.mean_lo)?;
    let saved = (&mean[..], &rstd[..], Some(&mean_lo[..]));
    let rb = cpu::backward::<T, P>(&b.desc, &hx, &hdy, saved, Some(&hg))?;
    let tol = |u: f64, scale: f64| (2.0 * u + 64.0 * 6e-8 * (cols as f64).log2()) * scale;
    let err = |a: &[f64], r: &[f64]| {
        a.iter()
            .zip(r)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    };
    let scale = |r: &[f64]| r.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    let f = |v: Vec<T>| v.iter().map(|e| e.to_f64()).collect::<Vec<_>>();
    let p = |v: Vec<P>| v.iter().map(|e| e.to_f64()).collect::<Vec<_>>();
    let checks = [
        (
            "y",
            f(s.clone_dtoh(&b.y)?),
            f(r.y),
            T::DTYPE.unit_roundoff(),
        ),
        (
            "dx",
            f(s.clone_dtoh(&b.dx)?),
            f(rb.dx),
            T::DTYPE.unit_roundoff(),
        ),
        (
            "dgamma",
            p(s.clone_dtoh(&b.dg)?),
            p(rb.dgamma.unwrap_or_default()),
            P::DTYPE.unit_roundoff() + rows as f64 * 6e-8,
        ),
        (
            "dbeta",
            p(s.clone_dtoh(&b.db)?),
            p(rb.dbeta.unwrap_or_default()),
            P::DTYPE.unit_roundoff() + rows as f64 * 6e-8,
        ),
    ];
    for (what, got, reference, u) in checks {
        let (e, t) = (err(&got, &reference), tol(u, scale(&reference)));
        let ok = e <= t; // false for NaN
        if !ok {
            return Err(format!(
                "{what} of {rows}x{cols} {}/{}: max error {e:e} > {t:e}",
                T::DTYPE,
                P::DTYPE
            )
            .into());
        }
    }
    Ok(())
}

/// One machine-readable line per result, for scripts/gpu-report.py: `RESULT ` + one JSON object
/// (the printed fields plus "bench"; times in us, bytes = the minimum traffic counted for GB/s).
fn result(mut v: serde_json::Value) {
    v["bench"] = "layer_norm".into();
    println!("RESULT {v}");
}

fn bench<T: Element, P: Element>(
    s: &Arc<CudaStream>,
    timer: &mut Timer,
    rows: usize,
    cols: usize,
    copy_gbs: f64,
) -> Res<()> {
    check::<T, P>(s, 256, cols)?;
    let (mut b, ..) = setup::<T, P>(s, rows, cols)?;
    let elem = T::DTYPE.size() as f64 * (rows * cols) as f64;
    let t_f = timer.time(|| run_fwd(s, &mut b))?;
    let t_b = timer.time(|| run_bwd(s, &mut b))?;
    let (gf, gb) = (2.0 * elem / t_f / 1e6, 3.0 * elem / t_b / 1e6);
    println!(
        "{:>5} x {:>5} {:>4}/{:<4}  fwd {:8.1} us {:7.1} GB/s {:5.1}%   bwd {:8.1} us {:7.1} GB/s {:5.1}%",
        rows, cols, T::DTYPE, P::DTYPE, t_f * 1e3, gf, 100.0 * gf / copy_gbs, t_b * 1e3, gb, 100.0 * gb / copy_gbs
    );
    for (op, ms, bytes) in [("fwd", t_f, 2.0 * elem), ("bwd", t_b, 3.0 * elem)] {
        timed_result::<T, P>(op, rows, cols, ms, bytes, copy_gbs);
    }
    Ok(())
}

/// The `RESULT` line of one timed op of `rows` x `cols` (`ms` milliseconds, `bytes` of minimum
/// traffic); returns its GB/s.
fn timed_result<T: Element, P: Element>(
    op: &str,
    rows: usize,
    cols: usize,
    ms: f64,
    bytes: f64,
    copy_gbs: f64,
) -> f64 {
    let gbs = bytes / ms / 1e6;
    result(serde_json::json!({
        "op": op,
        "shape": [rows, cols],
        "dtype": T::DTYPE.name(),
        "param_dtype": P::DTYPE.name(),
        "us": ms * 1e3,
        "bytes": bytes,
        "gbs": gbs,
        "pct_copy": 100.0 * gbs / copy_gbs,
        "copy_gbs": copy_gbs,
    }));
    gbs
}

fn main() -> Res<()> {
    if !warpnorm::kernels::BUILT {
        println!(
            "layer_norm bench skipped: kernels not built ({})",
            warpnorm::kernels::NOT_BUILT_REASON
        );
        return Ok(());
    }
    let ctx = match warpnorm::runtime::context(0) {
        Ok(c) => c,
        Err(e) => {
            println!("layer_norm bench skipped: {e}");
            return Ok(());
        }
    };
    let s = ctx.default_stream();
    let mut timer = Timer {
        stream: s.clone(),
        flush: s.alloc_zeros::<u8>(FLUSH_BYTES)?,
    };
    // Copy roofline: 1 GiB read + 1 GiB written.
    let n = 1usize << 28;
    let src = s.alloc_zeros::<f32>(n)?;
    let mut dst = s.alloc_zeros::<f32>(n)?;
    let t = timer.time(|| Ok(warpnorm::copy::copy(&s, src.as_view(), dst.as_view_mut())?))?;
    let copy_gbs = 2.0 * (n * 4) as f64 / t / 1e6;
    println!(
        "copy roofline: {copy_gbs:.1} GB/s ({:.1} us for 2 x {} MiB)",
        t * 1e3,
        (n * 4) >> 20
    );
    result(serde_json::json!({
        "op": "copy",
        "shape": [n],
        "dtype": "f32",
        "us": t * 1e3,
        "bytes": 2.0 * (n * 4) as f64,
        "gbs": copy_gbs,
    }));
    drop((src, dst));
    let rows = 32 * 512;
    for cols in [768usize, 1024, 2048, 4096, 8192] {
        bench::<f32, f32>(&s, &mut timer, rows, cols, copy_gbs)?;
        bench::<bf16, bf16>(&s, &mut timer, rows, cols, copy_gbs)?;
        bench::<bf16, f32>(&s, &mut timer, rows, cols, copy_gbs)?;
    }
    // Few rows with long rows (split tier) and an odd D (no D % 4 cliff).
    bench::<bf16, f32>(&s, &mut timer, 4, 1 << 20, copy_gbs)?;
    bench::<f32, f32>(&s, &mut timer, 4096, 2041, copy_gbs)?;
    bench::<f32, f32>(&s, &mut timer, 4096, 2040, copy_gbs)?;
    // Rows of 12288 and 16384: the backward's wide tier (each row read once, the dgamma/dbeta
    // sums in shared memory; the split tier before).
    bench::<bf16, bf16>(&s, &mut timer, rows, 12288, copy_gbs)?;
    bench::<bf16, f32>(&s, &mut timer, rows, 16384, copy_gbs)?;
    // RMSNorm, and the fused residual add of both ops (benches/layer_norm/fused.rs): two
    // widths, so that the bench stays within gpu-run.sh's 300 s for this step.
    for cols in [1024usize, 4096] {
        for norm in [Norm::Layer, Norm::Rms] {
            fused::bench::<bf16, bf16>(&s, &mut timer, norm, rows, cols, copy_gbs)?;
            fused::bench::<bf16, f32>(&s, &mut timer, norm, rows, cols, copy_gbs)?;
        }
    }
    Ok(())
}
