//! RMSNorm and the fused residual add (LayerNorm and RMSNorm), for `benches/layer_norm.rs`:
//! RMSNorm forward and backward, and each op's fused forward (read x and the residual, write h
//! and y: 4 activation bytes per element of the minimum) and fused backward with dh and the
//! bias gradient (read h, dy and dh, write dx: 4). Each case is first checked against the CPU
//! reference on 256 rows of the same D, then timed like the plain LayerNorm; one `RESULT` line
//! per op (`rms_fwd`, `rms_bwd`, `res_fwd`, `res_bwd_dbias`, `rms_res_fwd`,
//! `rms_res_bwd_dbias`), which scripts/perf-model-vs-measured.py maps to the model's ops.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use warpnorm::cpu::{layer_norm as cpu_ln, rms_norm as cpu_rms};
use warpnorm::layer_norm::{self as ln, Affine, LayerNormDesc, ResidualIo};
use warpnorm::rms_norm::{self as rms, RmsNormDesc};
use warpnorm::Element;

use crate::{rand_vec, timed_result, Res, Timer};

/// Which normalization a case runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Norm {
    Layer,
    Rms,
}

/// Device buffers of every op of one case (x doubles as h's input of the plain RMSNorm ops).
struct Bufs<T, P> {
    rows: usize,
    cols: usize,
    x: CudaSlice<T>,
    res: CudaSlice<T>,
    h: CudaSlice<T>,
    y: CudaSlice<T>,
    dy: CudaSlice<T>,
    dh: CudaSlice<T>,
    dx: CudaSlice<T>,
    g: CudaSlice<P>,
    beta: CudaSlice<P>,
    bias: CudaSlice<P>,
    dg: CudaSlice<P>,
    db: CudaSlice<P>,
    dbias: CudaSlice<P>,
    mean: CudaSlice<f32>,
    rstd: CudaSlice<f32>,
    mean_lo: CudaSlice<f32>,
    ws: CudaSlice<u8>,
}

/// Host copies of the inputs.
struct Host<T, P> {
    x: Vec<T>,
    res: Vec<T>,
    dy: Vec<T>,
    dh: Vec<T>,
    g: Vec<P>,
    beta: Vec<P>,
    bias: Vec<P>,
}

fn ln_desc<T: Element, P: Element>(rows: usize, cols: usize) -> Res<LayerNormDesc> {
    Ok(LayerNormDesc::from_rows(
        rows,
        cols,
        T::DTYPE,
        P::DTYPE,
        Affine::WeightBias,
        1e-5,
    )?)
}

fn rms_desc<T: Element, P: Element>(rows: usize, cols: usize) -> Res<RmsNormDesc> {
    Ok(RmsNormDesc::from_rows(
        rows,
        cols,
        T::DTYPE,
        P::DTYPE,
        true,
        None,
    )?)
}

fn setup<T: Element, P: Element>(
    s: &Arc<CudaStream>,
    rows: usize,
    cols: usize,
) -> Res<(Bufs<T, P>, Host<T, P>)> {
    let n = rows * cols;
    let host = Host {
        x: rand_vec::<T>(n, 11, -2.0, 2.0),
        res: rand_vec::<T>(n, 12, -2.0, 2.0),
        dy: rand_vec::<T>(n, 13, -1.0, 1.0),
        dh: rand_vec::<T>(n, 14, -1.0, 1.0),
        g: rand_vec::<P>(cols, 15, 0.5, 1.5),
        beta: rand_vec::<P>(cols, 16, -0.5, 0.5),
        bias: rand_vec::<P>(cols, 17, -0.5, 0.5),
    };
    let (ld, rd) = (ln_desc::<T, P>(rows, cols)?, rms_desc::<T, P>(rows, cols)?);
    let ws = [
        ln::forward_workspace_bytes(s, &ld)?,
        ln::backward_residual_workspace_bytes(s, &ld, true)?,
        rms::forward_workspace_bytes(s, &rd)?,
        rms::backward_workspace_bytes(s, &rd)?,
        rms::backward_residual_workspace_bytes(s, &rd, true)?,
    ]
    .into_iter()
    .max()
    .unwrap_or(0)
    .max(16);
    let b = Bufs {
        rows,
        cols,
        x: s.clone_htod(&host.x)?,
        res: s.clone_htod(&host.res)?,
        h: s.clone_htod(&host.x)?,
        y: s.clone_htod(&host.x)?,
        dy: s.clone_htod(&host.dy)?,
        dh: s.clone_htod(&host.dh)?,
        dx: s.clone_htod(&host.x)?,
        g: s.clone_htod(&host.g)?,
        beta: s.clone_htod(&host.beta)?,
        bias: s.clone_htod(&host.bias)?,
        dg: s.clone_htod(&host.g)?,
        db: s.clone_htod(&host.g)?,
        dbias: s.clone_htod(&host.g)?,
        mean: s.clone_htod(&vec![0.0f32; rows])?,
        rstd: s.clone_htod(&vec![0.0f32; rows])?,
        mean_lo: s.clone_htod(&vec![0.0f32; rows])?,
        ws: s.clone_htod(&vec![0u8; ws])?,
    };
    Ok((b, host))
}

fn rms_fwd<T: Element, P: Element>(s: &Arc<CudaStream>, b: &mut Bufs<T, P>) -> Res<()> {
    rms::forward(
        s,
        &rms_desc::<T, P>(b.rows, b.cols)?,
        rms::ForwardBuffers {
            x: b.x.as_view(),
            y: b.y.as_view_mut(),
            weight: Some(b.g.as_view()),
            rstd: Some(b.rstd.as_view_mut()),
            workspace: Some(b.ws.as_view_mut()),
        },
    )?;
    Ok(())
}

fn rms_bwd<T: Element, P: Element>(s: &Arc<CudaStream>, b: &mut Bufs<T, P>) -> Res<()> {
    rms::backward(
        s,
        &rms_desc::<T, P>(b.rows, b.cols)?,
        rms::BackwardBuffers {
            x: b.x.as_view(),
            dy: b.dy.as_view(),
            rstd: b.rstd.as_view(),
            weight: Some(b.g.as_view()),
            dx: b.dx.as_view_mut(),
            dweight: Some(b.dg.as_view_mut()),
            workspace: Some(b.ws.as_view_mut()),
        },
    )?;
    Ok(())
}

/// The fused forward: h = x + residual + bias (into `h`), y = norm(h).
fn res_fwd<T: Element, P: Element>(s: &Arc<CudaStream>, norm: Norm, b: &mut Bufs<T, P>) -> Res<()> {
    let residual_h = ResidualIo::Apart(b.res.as_view(), b.h.as_view_mut());
    match norm {
        Norm::Layer => ln::forward_residual(
            s,
            &ln_desc::<T, P>(b.rows, b.cols)?,
            ln::ForwardResidualBuffers {
                x: b.x.as_view(),
                residual_h,
                bias: Some(b.bias.as_view()),
                y: b.y.as_view_mut(),
                gamma: Some(b.g.as_view()),
                beta: Some(b.beta.as_view()),
                mean: Some(b.mean.as_view_mut()),
                rstd: Some(b.rstd.as_view_mut()),
                mean_lo: Some(b.mean_lo.as_view_mut()),
                workspace: Some(b.ws.as_view_mut()),
            },
        )?,
        Norm::Rms => rms::forward_residual(
            s,
            &rms_desc::<T, P>(b.rows, b.cols)?,
            rms::ForwardResidualBuffers {
                x: b.x.as_view(),
                residual_h,
                bias: Some(b.bias.as_view()),
                y: b.y.as_view_mut(),
                weight: Some(b.g.as_view()),
                rstd: Some(b.rstd.as_view_mut()),
                workspace: Some(b.ws.as_view_mut()),
            },
        )?,
    }
    Ok(())
}

/// The fused backward with dh and the bias gradient (dx apart from dh).
fn res_bwd<T: Element, P: Element>(s: &Arc<CudaStream>, norm: Norm, b: &mut Bufs<T, P>) -> Res<()> {
    let dh_dx = ResidualIo::Apart(b.dh.as_view(), b.dx.as_view_mut());
    match norm {
        Norm::Layer => ln::backward_residual(
            s,
            &ln_desc::<T, P>(b.rows, b.cols)?,
            ln::BackwardResidualBuffers {
                h: b.h.as_view(),
                dy: b.dy.as_view(),
                dh_dx,
                mean: b.mean.as_view(),
                rstd: b.rstd.as_view(),
                mean_lo: Some(b.mean_lo.as_view()),
                gamma: Some(b.g.as_view()),
                dgamma: Some(b.dg.as_view_mut()),
                dbeta: Some(b.db.as_view_mut()),
                dbias: Some(b.dbias.as_view_mut()),
                workspace: Some(b.ws.as_view_mut()),
            },
        )?,
        Norm::Rms => rms::backward_residual(
            s,
            &rms_desc::<T, P>(b.rows, b.cols)?,
            rms::BackwardResidualBuffers {
                h: b.h.as_view(),
                dy: b.dy.as_view(),
                dh_dx,
                rstd: b.rstd.as_view(),
                weight: Some(b.g.as_view()),
                dweight: Some(b.dg.as_view_mut()),
                dbias: Some(b.dbias.as_view_mut()),
                workspace: Some(b.ws.as_view_mut()),
            },
        )?,
    }
    Ok(())
}

/// Max |got - reference| within one rounding of the dtype plus the f32 arithmetic (relative to
/// the reference's scale), as the plain LayerNorm's check; `exact` asks for equal values.
fn close(what: &str, got: &[f64], reference: &[f64], u: f64, cols: usize, exact: bool) -> Res<()> {
    if got.len() != reference.len() {
        return Err(format!("{what}: {} values, expected {}", got.len(), reference.len()).into());
    }
    let scale = reference.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    let tol = if exact {
        0.0
    } else {
        (2.0 * u + 64.0 * 6e-8 * (cols as f64).log2()) * scale
    };
    let err = got
        .iter()
        .zip(reference)
        .map(|(a, r)| (a - r).abs())
        .fold(0.0, f64::max);
    if err <= tol {
        Ok(())
    } else {
        Err(format!("{what}: max error {err:e} > {tol:e}").into())
    }
}

fn f64s<E: Element>(v: &[E]) -> Vec<f64> {
    v.iter().map(|e| e.to_f64()).collect()
}

/// Every op of `norm` on 256 rows against the CPU reference (the backward from the GPU's saved
/// statistics).
fn check<T: Element, P: Element>(s: &Arc<CudaStream>, norm: Norm, cols: usize) -> Res<()> {
    let rows = 256;
    let (mut b, hst) = setup::<T, P>(s, rows, cols)?;
    let (ut, up) = (T::DTYPE.unit_roundoff(), P::DTYPE.unit_roundoff());
    let up_sum = up + rows as f64 * 6e-8;
    let ctx = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!(
            "{} {rows}x{cols} {}/{}: {e}",
            if norm == Norm::Layer {
                "LayerNorm"
            } else {
                "RMSNorm"
            },
            T::DTYPE,
            P::DTYPE
        )
        .into()
    };
    if norm == Norm::Rms {
        rms_fwd(s, &mut b)?;
        rms_bwd(s, &mut b)?;
        let d = rms_desc::<T, P>(rows, cols)?;
        let r = cpu_rms::forward::<T, P>(&d, &hst.x, Some(&hst.g))?;
        let rstd = s.clone_dtoh(&b.rstd)?;
        let rb = cpu_rms::backward::<T, P>(&d, &hst.x, &hst.dy, &rstd, Some(&hst.g))?;
        close(
            "rms y",
            &f64s(&s.clone_dtoh(&b.y)?),
            &f64s(&r.y),
            ut,
            cols,
            false,
        )
        .map_err(ctx)?;
        close(
            "rms dx",
            &f64s(&s.clone_dtoh(&b.dx)?),
            &f64s(&rb.dx),
            ut,
            cols,
            false,
        )
        .map_err(ctx)?;
        let dw = rb.dweight.unwrap_or_default();
        close(
            "rms dweight",
            &f64s(&s.clone_dtoh(&b.dg)?),
            &f64s(&dw),
            up_sum,
            cols,
            false,
        )
        .map_err(ctx)?;
    }
    res_fwd(s, norm, &mut b)?;
    res_bwd(s, norm, &mut b)?;
    let h = s.clone_dtoh(&b.h)?;
    let rstd = s.clone_dtoh(&b.rstd)?;
    let (h_ref, y_ref, grads) = match norm {
        Norm::Layer => {
            let d = ln_desc::<T, P>(rows, cols)?;
            let (h_ref, r) = cpu_ln::forward_residual::<T, P>(
                &d,
                &hst.x,
                &hst.res,
                Some(&hst.bias),
                Some(&hst.g),
                Some(&hst.beta),
            )?;
            let mean = s.clone_dtoh(&b.mean)?;
            let mean_lo = s.clone_dtoh(&b.mean_lo)?;
            let saved = (&mean[..], &rstd[..], Some(&mean_lo[..]));
            let g = cpu_ln::backward_residual::<T, P>(
                &d,
                &h,
                &hst.dy,
                Some(&hst.dh),
                saved,
                Some(&hst.g),
                true,
            )?;
            (h_ref, r.y, g)
        }
        Norm::Rms => {
            let d = rms_desc::<T, P>(rows, cols)?;
            let (h_ref, r) = cpu_rms::forward_residual::<T, P>(
                &d,
                &hst.x,
                &hst.res,
                Some(&hst.bias),
                Some(&hst.g),
            )?;
            let g = cpu_rms::backward_residual::<T, P>(
                &d,
                &h,
                &hst.dy,
                Some(&hst.dh),
                &rstd,
                Some(&hst.g),
                true,
            )?;
            (h_ref, r.y, g)
        }
    };
    close("h", &f64s(&h), &f64s(&h_ref), ut, cols, true).map_err(ctx)?;
    close(
        "y",
        &f64s(&s.clone_dtoh(&b.y)?),
        &f64s(&y_ref),
        ut,
        cols,
        false,
    )
    .map_err(ctx)?;
    close(
        "dx",
        &f64s(&s.clone_dtoh(&b.dx)?),
        &f64s(&grads.dx),
        ut,
        cols,
        false,
    )
    .map_err(ctx)?;
    let dg = grads.dgamma.unwrap_or_default();
    close(
        "dgamma",
        &f64s(&s.clone_dtoh(&b.dg)?),
        &f64s(&dg),
        up_sum,
        cols,
        false,
    )
    .map_err(ctx)?;
    let dbias = grads.dbias.unwrap_or_default();
    // dbias sums the f32 dx before its rounding: a rounding of the activation dtype per term.
    close(
        "dbias",
        &f64s(&s.clone_dtoh(&b.dbias)?),
        &f64s(&dbias),
        up_sum + ut,
        cols,
        false,
    )
    .map_err(ctx)?;
    if norm == Norm::Layer {
        let db = grads.dbeta.unwrap_or_default();
        close(
            "dbeta",
            &f64s(&s.clone_dtoh(&b.db)?),
            &f64s(&db),
            up_sum,
            cols,
            false,
        )
        .map_err(ctx)?;
    }
    Ok(())
}

/// Checks, then times, every op of `norm` at `rows` x `cols`.
pub fn bench<T: Element, P: Element>(
    s: &Arc<CudaStream>,
    timer: &mut Timer,
    norm: Norm,
    rows: usize,
    cols: usize,
    copy_gbs: f64,
) -> Res<()> {
    check::<T, P>(s, norm, cols)?;
    let (mut b, _) = setup::<T, P>(s, rows, cols)?;
    let elem = T::DTYPE.size() as f64 * (rows * cols) as f64;
    let mut runs: Vec<(&str, f64, f64)> = Vec::new();
    if norm == Norm::Rms {
        runs.push(("rms_fwd", timer.time(|| rms_fwd(s, &mut b))?, 2.0 * elem));
        runs.push(("rms_bwd", timer.time(|| rms_bwd(s, &mut b))?, 3.0 * elem));
    }
    let prefix = if norm == Norm::Layer { "" } else { "rms_" };
    let t_f = timer.time(|| res_fwd(s, norm, &mut b))?;
    let t_b = timer.time(|| res_bwd(s, norm, &mut b))?;
    let (fwd, bwd) = (format!("{prefix}res_fwd"), format!("{prefix}res_bwd_dbias"));
    runs.push((&fwd, t_f, 4.0 * elem));
    runs.push((&bwd, t_b, 4.0 * elem));
    for (op, ms, bytes) in runs {
        let gbs = timed_result::<T, P>(op, rows, cols, ms, bytes, copy_gbs);
        println!(
            "{rows:>5} x {cols:>5} {:>4}/{:<4}  {op:<18} {:8.1} us {gbs:7.1} GB/s {:5.1}%",
            T::DTYPE,
            P::DTYPE,
            ms * 1e3,
            100.0 * gbs / copy_gbs
        );
    }
    Ok(())
}
