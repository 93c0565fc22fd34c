//! The fused residual add's functional ops (`layer_norm::forward_residual` /
//! `backward_residual`, the same for `rms_norm`) on a GPU, or here on the emulated driver
//! (skips with a reason without one; WARPNORM_REQUIRE_GPU=1 makes that a failure):
//! - h bitwise equal to the CPU reference's one-rounding h (`cpu::residual::residual_add`);
//! - y and the saved statistics bitwise equal to the plain `forward` on that h;
//! - dgamma / dbeta (dweight) bitwise equal to the plain `backward` on h (LayerNorm's dbeta
//!   with a bias gradient, from its column sum, within the f32 summation bound of the column
//!   sums of dy), and dx within one rounding of the plain dx + dh (bitwise equal to it when
//!   dh is zero);
//! - with a bias, its gradient (`dbias`) equal to the column sums of the stored dx within
//!   the f32 summation bound plus the stored dx's rounding (the kernels sum the f32 dx), the
//!   workspace sized by `backward_residual_workspace_bytes`;
//! - h over the residual and dx over dh in place give the same bits, and so does a rerun;
//! - aligned views (the `res_<tier>_vec` kernels) and x and dy one element off (the scalar
//!   kernels, which take the residual at run time);
//! - the module types' `forward_residual_into` / `backward_residual_into` give the functional
//!   ops' bits, call after call;
//! - bad buffers rejected before any launch, nothing written.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut};
use half::{bf16, f16};
use testkit::Rng;
use warpnorm::cpu::residual::residual_add;
use warpnorm::layer_norm::{self as ln, Affine, LayerNorm, LayerNormDesc, ResidualIo};
use warpnorm::rms_norm::{self as rms, RmsNorm, RmsNormDesc};
use warpnorm::{DType, Element, Error};

use crate::support::{to_f64, DTYPE_PAIRS};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Layer,
    Rms,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    op: Op,
    rows: usize,
    cols: usize,
    /// Element offset of x and dy, the other activations at 0 (1: their addresses are not
    /// congruent mod the access width, the scalar kernels).
    off: usize,
    bias: bool,
    seed: u64,
}

/// What one run of an op gives, widened to f64 (exact for every dtype).
#[derive(Clone, Debug, PartialEq)]
struct Got {
    h: Vec<f64>,
    y: Vec<f64>,
    mean: Vec<f64>,
    rstd: Vec<f64>,
    dx: Vec<f64>,
    dgamma: Vec<f64>,
    dbeta: Vec<f64>,
    dbias: Vec<f64>,
}

struct Inputs<T, P> {
    x: Vec<T>,
    res: Vec<T>,
    dy: Vec<T>,
    dh: Vec<T>,
    gamma: Vec<P>,
    beta: Vec<P>,
    bias: Option<Vec<P>>,
}

fn inputs<T: Element, P: Element>(c: &Case, zero_dh: bool) -> Inputs<T, P> {
    let n = c.rows * c.cols;
    let mut rng = Rng::new(c.seed);
    let mut inp = Inputs {
        x: rng.vec(n, -2.0, 2.0),
        res: rng.vec(n, -2.0, 2.0),
        dy: rng.vec(n, -1.0, 1.0),
        dh: rng.vec(n, -1.0, 1.0),
        gamma: rng.vec(c.cols, 0.5, 1.5),
        beta: rng.vec(c.cols, -0.5, 0.5),
        bias: c.bias.then(|| rng.vec(c.cols, -1.0, 1.0)),
    };
    if zero_dh {
        inp.dh = vec![T::from_f64(0.0); n];
    }
    inp
}

/// A device buffer holding `v` after `off` zeros, and its view of `v`'s part.
struct Buf<E> {
    slice: CudaSlice<E>,
    off: usize,
    len: usize,
}

impl<E: Element> Buf<E> {
    fn new(s: &Arc<CudaStream>, v: &[E], off: usize) -> Buf<E> {
        let mut padded = vec![E::from_f64(0.0); off];
        padded.extend_from_slice(v);
        padded.push(E::from_f64(0.0));
        Buf {
            slice: s.clone_htod(&padded).unwrap(),
            off,
            len: v.len(),
        }
    }
    /// `len` elements of a sentinel value (-7), to show what a call did not write.
    fn out(s: &Arc<CudaStream>, len: usize, off: usize) -> Buf<E> {
        Buf::new(s, &vec![E::from_f64(-7.0); len], off)
    }
    fn view(&self) -> CudaView<'_, E> {
        self.slice.slice(self.off..self.off + self.len)
    }
    fn view_mut(&mut self) -> CudaViewMut<'_, E> {
        self.slice.slice_mut(self.off..self.off + self.len)
    }
    fn get(&self, s: &Arc<CudaStream>) -> Vec<f64> {
        to_f64(&s.clone_dtoh(&self.slice).unwrap()[self.off..self.off + self.len])
    }
}

/// The fused forward and backward of `c` (h over the residual and dx over dh when
/// `in_place`), or with `plain` the plain ops on `h` (x = h, dx without dh).
fn run<T: Element, P: Element>(
    s: &Arc<CudaStream>,
    c: &Case,
    inp: &Inputs<T, P>,
    in_place: bool,
    plain: Option<&[T]>,
) -> Result<Got, String> {
    let (n, rows, cols, off) = (c.rows * c.cols, c.rows, c.cols, c.off);
    let err = |e: Error| format!("{c:?} in_place {in_place} plain {}: {e}", plain.is_some());
    let x = Buf::new(s, plain.unwrap_or(&inp.x[..]), off);
    let res = Buf::new(s, &inp.res, 0);
    let dy = Buf::new(s, &inp.dy, off);
    let gamma = Buf::new(s, &inp.gamma, 0);
    let beta = Buf::new(s, &inp.beta, 0);
    let bias = inp.bias.as_ref().map(|b| Buf::new(s, b, 0));
    let mut rh = Buf::new(s, &inp.res, 0);
    let mut h = Buf::<T>::out(s, n, 0);
    let mut y = Buf::<T>::out(s, n, 0);
    let mut mean = Buf::<f32>::out(s, rows, 0);
    let mut rstd = Buf::<f32>::out(s, rows, 0);
    let mut mean_lo = Buf::<f32>::out(s, rows, 0);
    let mut dh = Buf::new(s, &inp.dh, 0);
    let mut dx = Buf::<T>::out(s, n, 0);
    let mut dgamma = Buf::<P>::out(s, cols, 0);
    let mut dbeta = Buf::<P>::out(s, cols, 0);
    let mut dbias = Buf::<P>::out(s, cols, 0);
    let with_dbias = inp.bias.is_some();
    let (dt, pt) = (T::DTYPE, P::DTYPE);
    match c.op {
        Op::Layer => {
            let desc =
                LayerNormDesc::from_rows(rows, cols, dt, pt, Affine::WeightBias, 1e-5).unwrap();
            let fw = ln::forward_workspace_bytes(s, &desc).map_err(err)?;
            let bw = ln::backward_workspace_bytes(s, &desc).map_err(err)?;
            let bwr = ln::backward_residual_workspace_bytes(s, &desc, with_dbias).map_err(err)?;
            let mut ws = s.alloc_zeros::<u8>(fw.max(bw).max(bwr).max(1)).unwrap();
            if plain.is_some() {
                ln::forward(
                    s,
                    &desc,
                    ln::ForwardBuffers {
                        x: x.view(),
                        y: y.view_mut(),
                        gamma: Some(gamma.view()),
                        beta: Some(beta.view()),
                        mean: Some(mean.view_mut()),
                        rstd: Some(rstd.view_mut()),
                        mean_lo: Some(mean_lo.view_mut()),
                        workspace: ws_view(&mut ws, fw),
                    },
                )
                .map_err(err)?;
                ln::backward(
                    s,
                    &desc,
                    ln::BackwardBuffers {
                        x: x.view(),
                        dy: dy.view(),
                        mean: mean.view(),
                        rstd: rstd.view(),
                        mean_lo: Some(mean_lo.view()),
                        gamma: Some(gamma.view()),
                        dx: dx.view_mut(),
                        dgamma: Some(dgamma.view_mut()),
                        dbeta: Some(dbeta.view_mut()),
                        workspace: ws_view(&mut ws, bw),
                    },
                )
                .map_err(err)?;
            } else {
                let residual_h = if in_place {
                    ResidualIo::InPlace(rh.view_mut())
                } else {
                    ResidualIo::Apart(res.view(), h.view_mut())
                };
                ln::forward_residual(
                    s,
                    &desc,
                    ln::ForwardResidualBuffers {
                        x: x.view(),
                        residual_h,
                        bias: bias.as_ref().map(|b| b.view()),
                        y: y.view_mut(),
                        gamma: Some(gamma.view()),
                        beta: Some(beta.view()),
                        mean: Some(mean.view_mut()),
                        rstd: Some(rstd.view_mut()),
                        mean_lo: Some(mean_lo.view_mut()),
                        workspace: ws_view(&mut ws, fw),
                    },
                )
                .map_err(err)?;
                let hv = if in_place { rh.view() } else { h.view() };
                let dh_dx = if in_place {
                    ResidualIo::InPlace(dh.view_mut())
                } else {
                    ResidualIo::Apart(dh.view(), dx.view_mut())
                };
                ln::backward_residual(
                    s,
                    &desc,
                    ln::BackwardResidualBuffers {
                        h: hv,
                        dy: dy.view(),
                        dh_dx,
                        mean: mean.view(),
                        rstd: rstd.view(),
                        mean_lo: Some(mean_lo.view()),
                        gamma: Some(gamma.view()),
                        dgamma: Some(dgamma.view_mut()),
                        dbeta: Some(dbeta.view_mut()),
                        dbias: with_dbias.then(|| dbias.view_mut()),
                        workspace: ws_view(&mut ws, bwr),
                    },
                )
                .map_err(err)?;
            }
        }
        Op::Rms => {
            let desc = RmsNormDesc::from_rows(rows, cols, dt, pt, true, None).unwrap();
            let fw = rms::forward_workspace_bytes(s, &desc).map_err(err)?;
            let bw = rms::backward_workspace_bytes(s, &desc).map_err(err)?;
            let bwr = rms::backward_residual_workspace_bytes(s, &desc, with_dbias).map_err(err)?;
            let mut ws = s.alloc_zeros::<u8>(fw.max(bw).max(bwr).max(1)).unwrap();
            if plain.is_some() {
                rms::forward(
                    s,
                    &desc,
                    rms::ForwardBuffers {
                        x: x.view(),
                        y: y.view_mut(),
                        weight: Some(gamma.view()),
                        rstd: Some(rstd.view_mut()),
                        workspace: ws_view(&mut ws, fw),
                    },
                )
                .map_err(err)?;
                rms::backward(
                    s,
                    &desc,
                    rms::BackwardBuffers {
                        x: x.view(),
                        dy: dy.view(),
                        rstd: rstd.view(),
                        weight: Some(gamma.view()),
                        dx: dx.view_mut(),
                        dweight: Some(dgamma.view_mut()),
                        workspace: ws_view(&mut ws, bw),
                    },
                )
                .map_err(err)?;
            } else {
                let residual_h = if in_place {
                    ResidualIo::InPlace(rh.view_mut())
                } else {
                    ResidualIo::Apart(res.view(), h.view_mut())
                };
                rms::forward_residual(
                    s,
                    &desc,
                    rms::ForwardResidualBuffers {
                        x: x.view(),
                        residual_h,
                        bias: bias.as_ref().map(|b| b.view()),
                        y: y.view_mut(),
                        weight: Some(gamma.view()),
                        rstd: Some(rstd.view_mut()),
                        workspace: ws_view(&mut ws, fw),
                    },
                )
                .map_err(err)?;
                let hv = if in_place { rh.view() } else { h.view() };
                let dh_dx = if in_place {
                    ResidualIo::InPlace(dh.view_mut())
                } else {
                    ResidualIo::Apart(dh.view(), dx.view_mut())
                };
                rms::backward_residual(
                    s,
                    &desc,
                    rms::BackwardResidualBuffers {
                        h: hv,
                        dy: dy.view(),
                        dh_dx,
                        rstd: rstd.view(),
                        weight: Some(gamma.view()),
                        dweight: Some(dgamma.view_mut()),
                        dbias: with_dbias.then(|| dbias.view_mut()),
                        workspace: ws_view(&mut ws, bwr),
                    },
                )
                .map_err(err)?;
            }
        }
    }
    let fused = plain.is_none();
    Ok(Got {
        h: match (fused, in_place) {
            (false, _) => Vec::new(),
            (true, true) => rh.get(s),
            (true, false) => h.get(s),
        },
        y: y.get(s),
        mean: if c.op == Op::Layer {
            mean.get(s)
        } else {
            Vec::new()
        },
        rstd: rstd.get(s),
        dx: if fused && in_place {
            dh.get(s)
        } else {
            dx.get(s)
        },
        dgamma: dgamma.get(s),
        dbeta: if c.op == Op::Layer {
            dbeta.get(s)
        } else {
            Vec::new()
        },
        dbias: if fused && with_dbias {
            dbias.get(s)
        } else {
            Vec::new()
        },
    })
}

/// The first `len` bytes of the workspace, or `None` when the call needs none.
fn ws_view(ws: &mut CudaSlice<u8>, len: usize) -> Option<CudaViewMut<'_, u8>> {
    (len > 0).then(|| ws.slice_mut(0..len))
}

fn same(what: &str, a: &[f64], b: &[f64]) -> Result<(), String> {
    match a
        .iter()
        .zip(b)
        .position(|(p, q)| p.to_bits() != q.to_bits())
    {
        None if a.len() == b.len() => Ok(()),
        None => Err(format!("{what}: {} values against {}", a.len(), b.len())),
        Some(i) => Err(format!("{what}[{i}]: {} against {}", a[i], b[i])),
    }
}

/// Checks one case: the properties in the module docs.
fn check<T: Element, P: Element>(s: &Arc<CudaStream>, c: &Case) -> Result<(), String> {
    let ctx = |e: String| format!("{c:?}: {e}");
    let inp = inputs::<T, P>(c, false);
    let got = run(s, c, &inp, false, None).map_err(ctx)?;
    let h_ref = residual_add::<T, P>(c.rows, c.cols, &inp.x, &inp.res, inp.bias.as_deref())
        .map_err(|e| ctx(e.to_string()))?;
    same("h", &got.h, &to_f64(&h_ref)).map_err(ctx)?;
    let plain = run(s, c, &inp, false, Some(&h_ref)).map_err(ctx)?;
    same("y", &got.y, &plain.y).map_err(ctx)?;
    same("mean", &got.mean, &plain.mean).map_err(ctx)?;
    same("rstd", &got.rstd, &plain.rstd).map_err(ctx)?;
    same("dgamma", &got.dgamma, &plain.dgamma).map_err(ctx)?;
    if c.bias && !got.dbeta.is_empty() {
        // LayerNorm with the bias gradient: dbeta by the column sum of dy.
        let dy = to_f64(&inp.dy);
        crate::residual::check_column_sums(
            "dbeta",
            c.rows,
            c.cols,
            &dy,
            &got.dbeta,
            P::DTYPE,
            (0.0, 0.0),
        )
        .map_err(ctx)?;
    } else {
        same("dbeta", &got.dbeta, &plain.dbeta).map_err(ctx)?;
    }
    // dx = round(D + dh) and the plain dx = round(D), D the kernel's f32 dx: within
    // u (|D + dh| + |D|) of plain dx + dh, D = plain dx up to u |D|.
    let u = T::DTYPE.unit_roundoff();
    let dh = to_f64(&inp.dh);
    for (i, ((&g, &p), &d)) in got.dx.iter().zip(&plain.dx).zip(&dh).enumerate() {
        let want = p + d;
        let bound = u * (2.0 * p.abs() * (1.0 + u) + want.abs()) * (1.0 + 4.0 * u) + 1e-30;
        if (g - want).abs() > bound || !g.is_finite() {
            return Err(ctx(format!(
                "dx[{i}] {g}, plain dx + dh {want}, bound {bound}"
            )));
        }
    }
    // The bias gradient: the column sums of the f32 dx (the stored dx's within its rounding).
    if c.bias {
        crate::residual::check_dbias(c.rows, c.cols, &got.dx, &got.dbias, P::DTYPE, T::DTYPE)
            .map_err(ctx)?;
    }
    // In place, and a rerun: the same bits.
    let again = run(s, c, &inp, true, None).map_err(ctx)?;
    if again != got {
        return Err(ctx("in place differs from apart".into()));
    }
    if run(s, c, &inp, false, None).map_err(ctx)? != got {
        return Err(ctx("a rerun differs".into()));
    }
    // dh = 0: dx is the plain dx, bitwise.
    let zero = inputs::<T, P>(c, true);
    let z = run(s, c, &zero, false, None).map_err(ctx)?;
    same("dx with dh = 0", &z.dx, &plain.dx).map_err(ctx)
}

fn check_dyn(s: &Arc<CudaStream>, c: &Case, dtype: DType, param: DType) -> Result<(), String> {
    match (dtype, param) {
        (DType::F32, DType::F32) => check::<f32, f32>(s, c),
        (DType::F16, DType::F16) => check::<f16, f16>(s, c),
        (DType::F16, DType::F32) => check::<f16, f32>(s, c),
        (DType::BF16, DType::BF16) => check::<bf16, bf16>(s, c),
        (DType::BF16, DType::F32) => check::<bf16, f32>(s, c),
        _ => Err("unsupported".into()),
    }
}

/// Both ops, every dtype pair, a warp-tier, a block-tier and a split-tier shape (on the
/// emulated driver's H100-like properties), aligned and one element off, with and without
/// the bias.
#[test]
fn fused_residual_ops_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("fused_residual_ops_on_gpu") else {
        return;
    };
    let shapes = [(37usize, 256usize), (3, 5000), (2, 40000)];
    let mut failures = Vec::new();
    let mut k = 0u64;
    for op in [Op::Layer, Op::Rms] {
        for &(dtype, param) in &DTYPE_PAIRS {
            for &(rows, cols) in &shapes {
                k += 1;
                let c = Case {
                    op,
                    rows,
                    cols,
                    off: (k % 2) as usize,
                    bias: !k.is_multiple_of(3),
                    seed: k,
                };
                if let Err(e) = check_dyn(&s, &c, dtype, param) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Bad buffers are rejected before any launch: h too short, a bias of the wrong length, and
/// h over x given as two views of one buffer is impossible in safe Rust, so the overlap
/// checks are the planner's (tests/rms_norm/residual.rs); y keeps its sentinel.
#[test]
fn fused_residual_bad_buffers_rejected() {
    let Some(s) = testkit::gpu::gpu_stream("fused_residual_bad_buffers_rejected") else {
        return;
    };
    let (rows, cols) = (4usize, 64usize);
    let n = rows * cols;
    let x = Buf::new(&s, &vec![1.0f32; n], 0);
    let res = Buf::new(&s, &vec![2.0f32; n], 0);
    let mut h = Buf::<f32>::out(&s, n - 1, 0);
    let mut y = Buf::<f32>::out(&s, n, 0);
    let desc = RmsNormDesc::from_rows(rows, cols, DType::F32, DType::F32, false, None).unwrap();
    let e = rms::forward_residual::<f32, f32>(
        &s,
        &desc,
        rms::ForwardResidualBuffers {
            x: x.view(),
            residual_h: ResidualIo::Apart(res.view(), h.view_mut()),
            bias: None,
            y: y.view_mut(),
            weight: None,
            rstd: None,
            workspace: None,
        },
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Length { ref what, .. } if what == "h"),
        "{e}"
    );
    let mut h = Buf::<f32>::out(&s, n, 0);
    let bias = Buf::new(&s, &vec![0.5f32; cols + 1], 0);
    let ldesc =
        LayerNormDesc::from_rows(rows, cols, DType::F32, DType::F32, Affine::None, 1e-5).unwrap();
    let e = ln::forward_residual::<f32, f32>(
        &s,
        &ldesc,
        ln::ForwardResidualBuffers {
            x: x.view(),
            residual_h: ResidualIo::Apart(res.view(), h.view_mut()),
            bias: Some(bias.view()),
            y: y.view_mut(),
            gamma: None,
            beta: None,
            mean: None,
            rstd: None,
            mean_lo: None,
            workspace: None,
        },
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Length { ref what, .. } if what == "bias"),
        "{e}"
    );
    assert!(y.get(&s).iter().all(|&v| v == -7.0), "y was written");
    assert!(h.get(&s).iter().all(|&v| v == -7.0), "h was written");
}

/// The fused residual add through the module types' `_into` methods (parameters set to the
/// case's, h over the residual and dx over dh when `in_place`), twice in a row on the same
/// module (the second call reuses the cached workspace); returns the second call's outputs.
fn run_module<T: Element, P: Element>(
    s: &Arc<CudaStream>,
    c: &Case,
    inp: &Inputs<T, P>,
    in_place: bool,
) -> Result<Got, String> {
    let (n, rows, cols, off) = (c.rows * c.cols, c.rows, c.cols, c.off);
    let shape = [rows, cols];
    let err = |e: Error| format!("{c:?} module in_place {in_place}: {e}");
    let x = Buf::new(s, &inp.x, off);
    let dy = Buf::new(s, &inp.dy, off);
    let bias = inp.bias.as_ref().map(|b| Buf::new(s, b, 0));
    let mut got = None;
    match c.op {
        Op::Layer => {
            let mut m = LayerNorm::<P>::new(s, &[cols], Affine::WeightBias, 1e-5).map_err(err)?;
            let (g, b) = m.params_mut();
            s.memcpy_htod(&inp.gamma, &mut g.unwrap()).unwrap();
            s.memcpy_htod(&inp.beta, &mut b.unwrap()).unwrap();
            let mut saved = m.alloc_saved(&shape).map_err(err)?;
            for _ in 0..2 {
                let res = Buf::new(s, &inp.res, 0);
                let mut rh = Buf::new(s, &inp.res, 0);
                let mut h = Buf::<T>::out(s, n, 0);
                let mut y = Buf::<T>::out(s, n, 0);
                let mut dh = Buf::new(s, &inp.dh, 0);
                let mut dx = Buf::<T>::out(s, n, 0);
                let mut dgamma = Buf::<P>::out(s, cols, 0);
                let mut dbeta = Buf::<P>::out(s, cols, 0);
                let mut dbias = Buf::<P>::out(s, cols, 0);
                let residual_h = if in_place {
                    ResidualIo::InPlace(rh.view_mut())
                } else {
                    ResidualIo::Apart(res.view(), h.view_mut())
                };
                let bv = bias.as_ref().map(|b| b.view());
                m.forward_residual_into(
                    &x.view(),
                    residual_h,
                    bv.as_ref(),
                    &shape,
                    y.view_mut(),
                    Some(&mut saved),
                )
                .map_err(err)?;
                let hb = if in_place { &rh } else { &h };
                let dh_dx = if in_place {
                    ResidualIo::InPlace(dh.view_mut())
                } else {
                    ResidualIo::Apart(dh.view(), dx.view_mut())
                };
                m.backward_residual_into(
                    &hb.view(),
                    &dy.view(),
                    dh_dx,
                    &shape,
                    &saved,
                    Some(dgamma.view_mut()),
                    Some(dbeta.view_mut()),
                    bias.as_ref().map(|_| dbias.view_mut()),
                )
                .map_err(err)?;
                got = Some(Got {
                    h: hb.get(s),
                    y: y.get(s),
                    mean: to_f64(&s.clone_dtoh(&saved.mean).unwrap()),
                    rstd: to_f64(&s.clone_dtoh(&saved.rstd).unwrap()),
                    dx: if in_place { dh.get(s) } else { dx.get(s) },
                    dgamma: dgamma.get(s),
                    dbeta: dbeta.get(s),
                    dbias: if bias.is_some() {
                        dbias.get(s)
                    } else {
                        Vec::new()
                    },
                });
            }
        }
        Op::Rms => {
            let mut m = RmsNorm::<P>::new(s, &[cols], true, None).map_err(err)?;
            s.memcpy_htod(&inp.gamma, &mut m.params_mut().unwrap())
                .unwrap();
            let mut saved = m.alloc_saved(&shape).map_err(err)?;
            for _ in 0..2 {
                let res = Buf::new(s, &inp.res, 0);
                let mut rh = Buf::new(s, &inp.res, 0);
                let mut h = Buf::<T>::out(s, n, 0);
                let mut y = Buf::<T>::out(s, n, 0);
                let mut dh = Buf::new(s, &inp.dh, 0);
                let mut dx = Buf::<T>::out(s, n, 0);
                let mut dweight = Buf::<P>::out(s, cols, 0);
                let mut dbias = Buf::<P>::out(s, cols, 0);
                let residual_h = if in_place {
                    ResidualIo::InPlace(rh.view_mut())
                } else {
                    ResidualIo::Apart(res.view(), h.view_mut())
                };
                let bv = bias.as_ref().map(|b| b.view());
                m.forward_residual_into(
                    &x.view(),
                    residual_h,
                    bv.as_ref(),
                    &shape,
                    y.view_mut(),
                    Some(&mut saved),
                )
                .map_err(err)?;
                let hb = if in_place { &rh } else { &h };
                let dh_dx = if in_place {
                    ResidualIo::InPlace(dh.view_mut())
                } else {
                    ResidualIo::Apart(dh.view(), dx.view_mut())
                };
                m.backward_residual_into(
                    &hb.view(),
                    &dy.view(),
                    dh_dx,
                    &shape,
                    &saved,
                    Some(dweight.view_mut()),
                    bias.as_ref().map(|_| dbias.view_mut()),
                )
                .map_err(err)?;
                got = Some(Got {
                    h: hb.get(s),
                    y: y.get(s),
                    mean: Vec::new(),
                    rstd: to_f64(&s.clone_dtoh(&saved.rstd).unwrap()),
                    dx: if in_place { dh.get(s) } else { dx.get(s) },
                    dgamma: dweight.get(s),
                    dbeta: Vec::new(),
                    dbias: if bias.is_some() {
                        dbias.get(s)
                    } else {
                        Vec::new()
                    },
                });
            }
        }
    }
    Ok(got.unwrap())
}

/// The module types' fused residual methods against the functional ops, bitwise: a block-
/// tier and a split-tier shape (the split tier has a forward workspace), both ops, two dtype
/// pairs, apart and in place.
#[test]
fn fused_residual_module_methods_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("fused_residual_module_methods_on_gpu") else {
        return;
    };
    let mut failures = Vec::new();
    let mut k = 100u64;
    for op in [Op::Layer, Op::Rms] {
        for (rows, cols) in [(3usize, 5000usize), (2, 40000)] {
            for in_place in [false, true] {
                k += 1;
                let c = Case {
                    op,
                    rows,
                    cols,
                    off: (k % 2) as usize,
                    bias: k % 3 != 1,
                    seed: k,
                };
                let res = if k.is_multiple_of(2) {
                    let inp = inputs::<bf16, f32>(&c, false);
                    run(&s, &c, &inp, in_place, None)
                        .and_then(|f| Ok((f, run_module(&s, &c, &inp, in_place)?)))
                } else {
                    let inp = inputs::<f32, f32>(&c, false);
                    run(&s, &c, &inp, in_place, None)
                        .and_then(|f| Ok((f, run_module(&s, &c, &inp, in_place)?)))
                };
                match res {
                    Ok((f, m)) if f == m => {}
                    Ok(_) => failures.push(format!("{c:?} in_place {in_place}: module differs")),
                    Err(e) => failures.push(e),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
