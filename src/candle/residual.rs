//! The fused residual add on candle tensors: h = x + residual (+ a bias), y = LayerNorm(h) or
//! RMSNorm(h), as one custom op with a backward (CPU: [`crate::cpu`]; with `candle-cuda`, CUDA
//! tensors run the fused kernels of [`crate::layer_norm::forward_residual`] and
//! [`crate::rms_norm::forward_residual`] on candle's stream).
//!
//! candle's custom ops take at most three tensors and return one. The op takes x, the residual
//! and, when the call has any, its parameters stacked into one `[k, cols]` tensor (in the order
//! weight, LayerNorm's bias, the residual bias; `Tensor::stack` carries their gradients back to
//! each), and returns h and y stacked as `[2, ...x's shape]`. The public functions hand back
//! the two halves (`Tensor::get`, views with autograd): whatever the graph does with h (the
//! residual stream of the next block) and y flows back as the gradient of that output, so the
//! backward receives dy and the gradient arriving on h together and forms dx (x's and the
//! residual's gradient, one tensor), the parameters' gradients and the bias gradient in one
//! fused backward.

use std::sync::Arc;

use candle_core::{
    bail, CpuStorage, CustomOp2, CustomOp3, Device, Layout, Result, Shape, Tensor, D,
};

use super::common::{
    check_param, cpu_slice, dispatch, param_dtype, stash, stashed, wn_dtype, wrap, Arg, Elem, Stash,
};
use crate::cpu::{layer_norm as cpu_ln, rms_norm as cpu_rms};
use crate::layer_norm::{Affine, LayerNormDesc};
use crate::rms_norm::RmsNormDesc;
use crate::DType;

/// The norm after the add.
#[derive(Clone, Copy)]
enum Kind {
    LayerNorm(Affine),
    Rms { weight: bool },
}

/// Which parameters the call has; they are the rows of the stacked parameter tensor, in the
/// order weight, beta (LayerNorm's bias), bias (the residual bias).
#[derive(Clone, Copy)]
struct Params {
    weight: bool,
    beta: bool,
    bias: bool,
}

impl Params {
    fn count(self) -> usize {
        usize::from(self.weight) + usize::from(self.beta) + usize::from(self.bias)
    }

    /// Row of the weight, beta and bias in the stacked tensor (None when absent).
    fn rows(self) -> [Option<usize>; 3] {
        let mut next = 0;
        [self.weight, self.beta, self.bias].map(|present| {
            present.then(|| {
                next += 1;
                next - 1
            })
        })
    }
}

/// What the forward saves for the backward: the mean (LayerNorm: 2 * rows f32, the saved
/// mean and then its rounding error mean_lo) and rstd, f32 per row.
#[derive(Clone)]
struct Saved {
    mean: Option<Tensor>,
    rstd: Tensor,
}

enum Desc {
    Ln(LayerNormDesc),
    Rms(RmsNormDesc),
}

impl Desc {
    fn rows(&self) -> usize {
        match self {
            Desc::Ln(d) => d.rows,
            Desc::Rms(d) => d.rows,
        }
    }

    fn cols(&self) -> usize {
        match self {
            Desc::Ln(d) => d.cols,
            Desc::Rms(d) => d.cols,
        }
    }
}

/// One fused residual add and norm over the last dim, as candle's `CustomOp2` (x, residual)
/// or `CustomOp3` (x, residual, stacked parameters).
struct ResOp {
    kind: Kind,
    params: Params,
    eps: f32,
    dtype: DType,
    pdtype: DType,
    saved: Stash<Saved>,
}

impl ResOp {
    fn op(&self) -> &'static str {
        match self.kind {
            Kind::LayerNorm(_) => "LayerNorm",
            Kind::Rms { .. } => "RMSNorm",
        }
    }

    /// The description of a call on x of `dims`.
    fn desc(&self, dims: &[usize]) -> Result<Desc> {
        let Some(&cols) = dims.last() else {
            bail!("warpnorm {}: the input needs at least one dim", self.op());
        };
        Ok(match self.kind {
            Kind::LayerNorm(affine) => Desc::Ln(
                LayerNormDesc::new(dims, &[cols], self.dtype, self.pdtype, affine, self.eps)
                    .map_err(wrap)?,
            ),
            Kind::Rms { weight } => Desc::Rms(
                RmsNormDesc::new(
                    dims,
                    &[cols],
                    self.dtype,
                    self.pdtype,
                    weight,
                    Some(self.eps),
                )
                .map_err(wrap)?,
            ),
        })
    }

    fn forward_cpu(
        &self,
        x: Arg<CpuStorage>,
        r: Arg<CpuStorage>,
        p: Option<Arg<CpuStorage>>,
    ) -> Result<(CpuStorage, Shape)> {
        let (t, pd) = (self.dtype, self.pdtype);
        dispatch!(self.op(), t, pd, cpu_forward(self, x, r, p))
    }

    #[cfg(feature = "candle-cuda")]
    fn forward_cuda(
        &self,
        x: Arg<candle_core::CudaStorage>,
        r: Arg<candle_core::CudaStorage>,
        p: Option<Arg<candle_core::CudaStorage>>,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (t, pd) = (self.dtype, self.pdtype);
        dispatch!(self.op(), t, pd, cuda::forward(self, x, r, p))
    }

    /// dx (x's and the residual's gradient) and the stacked parameters' gradient.
    fn backward(
        &self,
        params: Option<&Tensor>,
        out: &Tensor,
        grad: &Tensor,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let saved = stashed(&self.saved, self.op())?;
        // The gradient may arrive as a broadcast view (zero strides); its halves are the
        // gradient arriving on h and dy.
        let grad = grad.contiguous()?;
        let (h, dh, dy) = (out.get(0)?, grad.get(0)?, grad.get(1)?);
        let params = params.map(|p| p.contiguous()).transpose()?;
        let p = params.as_ref();
        let (t, pd) = (self.dtype, self.pdtype);
        match h.device() {
            Device::Cpu => dispatch!(
                self.op(),
                t,
                pd,
                cpu_backward(self, &h, &dh, &dy, p, &saved)
            ),
            #[cfg(feature = "candle-cuda")]
            Device::Cuda(_) => dispatch!(
                self.op(),
                t,
                pd,
                cuda::backward(self, &h, &dh, &dy, p, &saved)
            ),
            #[allow(unreachable_patterns)]
            d => bail!(
                "warpnorm {}: no implementation on {:?}",
                self.op(),
                d.location()
            ),
        }
    }
}

/// `[2, ...dims]`: h, then y.
fn stacked_shape(dims: &[usize]) -> Shape {
    let mut d = vec![2];
    d.extend_from_slice(dims);
    Shape::from(d)
}

/// One row (`cols` elements) of the stacked parameters, when the call has it.
fn row<P>(all: Option<&[P]>, index: Option<usize>, cols: usize) -> Option<&[P]> {
    Some(&all?[index? * cols..][..cols])
}

fn cpu_forward<T: Elem, P: Elem>(
    op: &ResOp,
    x: Arg<CpuStorage>,
    r: Arg<CpuStorage>,
    p: Option<Arg<CpuStorage>>,
) -> Result<(CpuStorage, Shape)> {
    let dims = x.1.shape().dims();
    let desc = op.desc(dims)?;
    let (rows, cols) = (desc.rows(), desc.cols());
    let xs = cpu_slice::<T>("x", x.0, x.1)?;
    let rs = cpu_slice::<T>("residual", r.0, r.1)?;
    let ps = p
        .map(|(s, l)| cpu_slice::<P>("the parameters", s, l))
        .transpose()?;
    let [w, beta, bias] = op.params.rows().map(|i| row(ps, i, cols));
    let (mut h, y, mean, rstd) = match desc {
        Desc::Ln(d) => {
            let (h, out) =
                cpu_ln::forward_residual::<T, P>(&d, xs, rs, bias, w, beta).map_err(wrap)?;
            let mut mean = out.mean;
            mean.extend(out.mean_lo);
            (h, out.y, Some(mean), out.rstd)
        }
        Desc::Rms(d) => {
            let (h, out) = cpu_rms::forward_residual::<T, P>(&d, xs, rs, bias, w).map_err(wrap)?;
            (h, out.y, None, out.rstd)
        }
    };
    let dev = &Device::Cpu;
    stash(
        &op.saved,
        Saved {
            mean: mean
                .map(|m| Tensor::from_vec(m, 2 * rows, dev))
                .transpose()?,
            rstd: Tensor::from_vec(rstd, rows, dev)?,
        },
    )?;
    h.extend(y);
    Ok((T::to_cpu_storage_owned(h), stacked_shape(dims)))
}

fn cpu_backward<T: Elem, P: Elem>(
    op: &ResOp,
    h: &Tensor,
    dh: &Tensor,
    dy: &Tensor,
    params: Option<&Tensor>,
    saved: &Saved,
) -> Result<(Tensor, Option<Tensor>)> {
    let hv = h.flatten_all()?.to_vec1::<T>()?;
    let dhv = dh.flatten_all()?.to_vec1::<T>()?;
    let dyv = dy.flatten_all()?.to_vec1::<T>()?;
    let pv = params
        .map(|p| p.flatten_all()?.to_vec1::<P>())
        .transpose()?;
    let rstd = saved.rstd.to_vec1::<f32>()?;
    let desc = op.desc(h.dims())?;
    let cols = desc.cols();
    let w = row(pv.as_deref(), op.params.rows()[0], cols);
    let out = match desc {
        Desc::Ln(d) => {
            let Some(mean) = &saved.mean else {
                bail!("warpnorm LayerNorm: no saved mean");
            };
            let mean = mean.to_vec1::<f32>()?;
            let (mean, mean_lo) = mean.split_at(d.rows);
            cpu_ln::backward_residual::<T, P>(
                &d,
                &hv,
                &dyv,
                Some(&dhv),
                (mean, &rstd, Some(mean_lo)),
                w,
                op.params.bias,
            )
        }
        Desc::Rms(d) => {
            cpu_rms::backward_residual::<T, P>(&d, &hv, &dyv, Some(&dhv), &rstd, w, op.params.bias)
        }
    }
    .map_err(wrap)?;
    let dev = &Device::Cpu;
    let dx = Tensor::from_vec(out.dx, h.shape(), dev)?;
    let grads: Vec<P> = [out.dgamma, out.dbeta, out.dbias]
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    let dparams = match op.params.count() {
        0 => None,
        k => Some(Tensor::from_vec(grads, (k, cols), dev)?),
    };
    Ok((dx, dparams))
}

impl CustomOp2 for ResOp {
    fn name(&self) -> &'static str {
        "warpnorm-norm-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.forward_cpu((s1, l1), (s2, l2), None)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.forward_cuda((s1, l1), (s2, l2), None)
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _residual: &Tensor,
        out: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, _) = self.backward(None, out, grad)?;
        Ok((Some(dx.clone()), Some(dx)))
    }
}

impl CustomOp3 for ResOp {
    fn name(&self) -> &'static str {
        "warpnorm-norm-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.forward_cpu((s1, l1), (s2, l2), Some((s3, l3)))
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.forward_cuda((s1, l1), (s2, l2), Some((s3, l3)))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _residual: &Tensor,
        params: &Tensor,
        out: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dparams) = self.backward(Some(params), out, grad)?;
        Ok((Some(dx.clone()), Some(dx), dparams))
    }
}

/// Checks the call (every check before anything runs) and applies the op; returns (y, h).
fn apply(
    kind: Kind,
    x: &Tensor,
    residual: &Tensor,
    [weight, beta, bias]: [Option<&Tensor>; 3],
    eps: f32,
) -> Result<(Tensor, Tensor)> {
    let name = match kind {
        Kind::LayerNorm(_) => "LayerNorm",
        Kind::Rms { .. } => "RMSNorm",
    };
    let dtype = wn_dtype("x", x.dtype())?;
    if residual.dtype() != x.dtype() {
        bail!(
            "warpnorm {name}: the residual is {:?} but x is {:?}; they share one dtype",
            residual.dtype(),
            x.dtype()
        );
    }
    if residual.dims() != x.dims() {
        bail!(
            "warpnorm {name}: the residual has shape {:?}, x {:?}; they must be equal",
            residual.dims(),
            x.dims()
        );
    }
    if !residual.device().same_device(x.device()) {
        bail!(
            "warpnorm {name}: the residual is on {:?}, x on {:?}",
            residual.device().location(),
            x.device().location()
        );
    }
    let named = [("weight", weight), ("bias", beta), ("residual_bias", bias)];
    let pdtype = param_dtype(name, dtype, &named)?;
    if x.rank() == 0 {
        bail!("warpnorm {name}: the input needs at least one dim");
    }
    let cols = x.dim(D::Minus1)?;
    for (what, t) in named {
        check_param(name, what, t, cols, x.device())?;
    }
    let op = ResOp {
        kind,
        params: Params {
            weight: weight.is_some(),
            beta: beta.is_some(),
            bias: bias.is_some(),
        },
        eps,
        dtype,
        pdtype,
        saved: Arc::default(),
    };
    // Validate before anything runs (shape, dtypes, eps).
    op.desc(x.dims())?;
    let x = x.contiguous()?;
    let residual = residual.contiguous()?;
    let present: Vec<Tensor> = [weight, beta, bias]
        .into_iter()
        .flatten()
        .map(|t| t.contiguous())
        .collect::<Result<_>>()?;
    let out = if present.is_empty() {
        x.apply_op2(&residual, op)?
    } else {
        x.apply_op3(&residual, &Tensor::stack(&present, 0)?, op)?
    };
    Ok((out.get(1)?, out.get(0)?))
}

/// LayerNorm with the residual add fused in: h = x + residual (+ `residual_bias`), formed in
/// f32 and rounded once to x's dtype, and y = LayerNorm(h) over the last dim (`weight`, `bias`
/// and `eps` as [`super::ops::layer_norm`]). Returns `(y, h)`: y for the sublayer, h for the
/// residual stream of the next block.
///
/// With autograd: `backward()` gives the gradients of x and the residual (equal), weight, bias
/// and `residual_bias`, from whatever reaches y and h, in one fused backward. x and the
/// residual share shape, dtype and device; the parameters are 1-D of the last dim's size, all
/// f32 or all of x's dtype; `bias` needs `weight`. Inputs that are not contiguous are copied
/// first.
pub fn layer_norm_residual_op(
    x: &Tensor,
    residual: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    residual_bias: Option<&Tensor>,
    eps: f32,
) -> Result<(Tensor, Tensor)> {
    let affine = match (weight, bias) {
        (None, None) => Affine::None,
        (Some(_), None) => Affine::Weight,
        (Some(_), Some(_)) => Affine::WeightBias,
        (None, Some(_)) => bail!("warpnorm LayerNorm: a bias needs a weight"),
    };
    apply(
        Kind::LayerNorm(affine),
        x,
        residual,
        [weight, bias, residual_bias],
        eps,
    )
}

/// RMSNorm with the residual add fused in: h = x + residual (+ `residual_bias`), formed in
/// f32 and rounded once to x's dtype, and y = RMSNorm(h) over the last dim (`weight` and `eps`
/// as [`super::ops::rms_norm`]: `None` is f32's epsilon). Returns `(y, h)`.
///
/// With autograd, as [`layer_norm_residual_op`]: the gradients of x and the residual (equal),
/// the weight and `residual_bias`.
pub fn rms_norm_residual_op(
    x: &Tensor,
    residual: &Tensor,
    weight: Option<&Tensor>,
    residual_bias: Option<&Tensor>,
    eps: Option<f32>,
) -> Result<(Tensor, Tensor)> {
    apply(
        Kind::Rms {
            weight: weight.is_some(),
        },
        x,
        residual,
        [weight, None, residual_bias],
        eps.unwrap_or(crate::rms_norm::DEFAULT_EPS),
    )
}

/// The CUDA path: the fused functional ops on candle's stream.
#[cfg(feature = "candle-cuda")]
mod cuda {
    use candle_core::backend::BackendStorage;
    use candle_core::{bail, CudaStorage, Result, Shape, Storage, Tensor};
    use cudarc::driver::{CudaSlice, CudaView};

    use super::super::common::{stash, wrap, Arg};
    use super::super::cuda::{alloc, tensor, view, with_cuda, workspace, CudaElem};
    use super::{stacked_shape, Desc, ResOp, Saved};
    use crate::layer_norm::{self as ln, ResidualIo};
    use crate::rms_norm as rms;

    /// One row of the stacked parameters' view, when the call has it.
    fn row<'a, P>(
        all: Option<&CudaView<'a, P>>,
        index: Option<usize>,
        cols: usize,
    ) -> Option<CudaView<'a, P>> {
        let i = index?;
        Some(all?.slice(i * cols..(i + 1) * cols))
    }

    pub(super) fn forward<T: CudaElem, P: CudaElem>(
        op: &ResOp,
        x: Arg<CudaStorage>,
        r: Arg<CudaStorage>,
        p: Option<Arg<CudaStorage>>,
    ) -> Result<(CudaStorage, Shape)> {
        let dims = x.1.shape().dims();
        let desc = op.desc(dims)?;
        let dev = x.0.device();
        let stream = dev.cuda_stream();
        let (rows, cols) = (desc.rows(), desc.cols());
        let n = rows * cols;
        let mut out = alloc::<T>(&stream, 2 * n)?;
        let mut rstd = alloc::<f32>(&stream, rows)?;
        let mut mean = match desc {
            Desc::Ln(_) => Some(alloc::<f32>(&stream, 2 * rows)?),
            Desc::Rms(_) => None,
        };
        let params = p
            .map(|(s, l)| view::<P>("the parameters", s, l))
            .transpose()?;
        let [w, beta, bias] = op.params.rows().map(|i| row(params.as_ref(), i, cols));
        let (h, y) = out.split_at_mut(n);
        let residual_h = ResidualIo::Apart(view::<T>("residual", r.0, r.1)?, h);
        let xv = view::<T>("x", x.0, x.1)?;
        match &desc {
            Desc::Ln(d) => {
                let mut ws = workspace(
                    &stream,
                    ln::forward_workspace_bytes(&stream, d).map_err(wrap)?,
                )?;
                let (mean, mean_lo) = match mean.as_mut() {
                    Some(m) => {
                        let (a, b) = m.split_at_mut(rows);
                        (Some(a), Some(b))
                    }
                    None => (None, None),
                };
                ln::forward_residual::<T, P>(
                    &stream,
                    d,
                    ln::ForwardResidualBuffers {
                        x: xv,
                        residual_h,
                        bias,
                        y,
                        gamma: w,
                        beta,
                        mean,
                        rstd: Some(rstd.as_view_mut()),
                        mean_lo,
                        workspace: ws.as_mut().map(|w| w.as_view_mut()),
                    },
                )
            }
            Desc::Rms(d) => {
                let mut ws = workspace(
                    &stream,
                    rms::forward_workspace_bytes(&stream, d).map_err(wrap)?,
                )?;
                rms::forward_residual::<T, P>(
                    &stream,
                    d,
                    rms::ForwardResidualBuffers {
                        x: xv,
                        residual_h,
                        bias,
                        y,
                        weight: w,
                        rstd: Some(rstd.as_view_mut()),
                        workspace: ws.as_mut().map(|w| w.as_view_mut()),
                    },
                )
            }
        }
        .map_err(wrap)?;
        stash(
            &op.saved,
            Saved {
                mean: mean.map(|m| tensor(m, 2 * rows, dev)),
                rstd: tensor(rstd, rows, dev),
            },
        )?;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev.clone()),
            stacked_shape(dims),
        ))
    }

    pub(super) fn backward<T: CudaElem, P: CudaElem>(
        op: &ResOp,
        h: &Tensor,
        dh: &Tensor,
        dy: &Tensor,
        params: Option<&Tensor>,
        saved: &Saved,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let desc = op.desc(h.dims())?;
        let cols = desc.cols();
        let (hg, hl) = h.storage_and_layout();
        let Storage::Cuda(hs) = &*hg else {
            bail!("warpnorm {}: h is not on a CUDA device", op.op())
        };
        let dev = hs.device().clone();
        let stream = dev.cuda_stream();
        let mut dx = alloc::<T>(&stream, h.elem_count())?;
        let grad = |present: bool| -> Result<Option<CudaSlice<P>>> {
            present.then(|| alloc::<P>(&stream, cols)).transpose()
        };
        let mut dw = grad(op.params.weight)?;
        let mut dbeta = grad(op.params.beta)?;
        let mut dbias = grad(op.params.bias)?;
        let pg = params.map(|p| p.storage_and_layout());
        let pview = match &pg {
            Some((g, l)) => match &**g {
                Storage::Cuda(s) => Some(view::<P>("the parameters", s, l)?),
                _ => bail!(
                    "warpnorm {}: the parameters are not on a CUDA device",
                    op.op()
                ),
            },
            None => None,
        };
        let w = row(pview.as_ref(), op.params.rows()[0], cols);
        let has_bias = op.params.bias;
        with_cuda(dy, "dy", |dys, dyl| {
            with_cuda(dh, "dh", |dhs, dhl| {
                with_cuda(&saved.rstd, "rstd", |rs, rl| {
                    let hv = view::<T>("h", hs, hl)?;
                    let dyv = view::<T>("dy", dys, dyl)?;
                    let dh_dx = ResidualIo::Apart(view::<T>("dh", dhs, dhl)?, dx.as_view_mut());
                    let rstd = view::<f32>("rstd", rs, rl)?;
                    match &desc {
                        Desc::Ln(d) => {
                            let Some(mean) = &saved.mean else {
                                bail!("warpnorm LayerNorm: no saved mean");
                            };
                            let mut ws = workspace(
                                &stream,
                                ln::backward_residual_workspace_bytes(&stream, d, has_bias)
                                    .map_err(wrap)?,
                            )?;
                            with_cuda(mean, "mean", |ms, ml| {
                                let pair = view::<f32>("mean", ms, ml)?;
                                ln::backward_residual::<T, P>(
                                    &stream,
                                    d,
                                    ln::BackwardResidualBuffers {
                                        h: hv,
                                        dy: dyv,
                                        dh_dx,
                                        mean: pair.slice(..d.rows),
                                        rstd,
                                        mean_lo: Some(pair.slice(d.rows..)),
                                        gamma: w,
                                        dgamma: dw.as_mut().map(|g| g.as_view_mut()),
                                        dbeta: dbeta.as_mut().map(|g| g.as_view_mut()),
                                        dbias: dbias.as_mut().map(|g| g.as_view_mut()),
                                        workspace: ws.as_mut().map(|w| w.as_view_mut()),
                                    },
                                )
                                .map_err(wrap)
                            })
                        }
                        Desc::Rms(d) => {
                            let mut ws = workspace(
                                &stream,
                                rms::backward_residual_workspace_bytes(&stream, d, has_bias)
                                    .map_err(wrap)?,
                            )?;
                            rms::backward_residual::<T, P>(
                                &stream,
                                d,
                                rms::BackwardResidualBuffers {
                                    h: hv,
                                    dy: dyv,
                                    dh_dx,
                                    rstd,
                                    weight: w,
                                    dweight: dw.as_mut().map(|g| g.as_view_mut()),
                                    dbias: dbias.as_mut().map(|g| g.as_view_mut()),
                                    workspace: ws.as_mut().map(|w| w.as_view_mut()),
                                },
                            )
                            .map_err(wrap)
                        }
                    }
                })
            })
        })?;
        drop(pg);
        let present: Vec<Tensor> = [dw, dbeta, dbias]
            .into_iter()
            .flatten()
            .map(|g| tensor(g, cols, &dev))
            .collect();
        let dparams = match present.len() {
            0 => None,
            _ => Some(Tensor::stack(&present, 0)?),
        };
        Ok((tensor(dx, h.shape(), &dev), dparams))
    }
}
