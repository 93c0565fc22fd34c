//! RMSNorm on candle tensors: the custom op (forward and backward, CPU and, with
//! `candle-cuda`, CUDA) and the module, as `candle_nn::RmsNorm` / `candle_nn::rms_norm`.

use std::sync::Arc;

use candle_core::{bail, CpuStorage, Device, Module, Result, Shape, Tensor, D};
use candle_nn::{Init, VarBuilder};

use super::common::{
    apply, check_param, cpu_slice, param_dtype, stash, wn_dtype, wrap, Arg, Elem, Grads, NormOp,
    Stash,
};
use crate::cpu::rms_norm as cpu_rms;
use crate::rms_norm::RmsNormDesc;
use crate::DType;

/// What a forward pass saves for its backward: rstd, one f32 per row.
pub(crate) type Saved = Tensor;

/// One RMSNorm call over the last dim, as a candle custom op (1 or 2 inputs: x, weight).
pub(crate) struct RmsOp {
    eps: f32,
    dtype: DType,
    pdtype: DType,
    weight: bool,
    saved: Stash<Saved>,
}

impl RmsOp {
    fn desc(&self, shape: &Shape) -> Result<RmsNormDesc> {
        let dims = shape.dims();
        let Some(&cols) = dims.last() else {
            bail!("warpnorm RMSNorm: the input needs at least one dim");
        };
        RmsNormDesc::new(
            dims,
            &[cols],
            self.dtype,
            self.pdtype,
            self.weight,
            Some(self.eps),
        )
        .map_err(wrap)
    }
}

impl NormOp for RmsOp {
    const NAME: &'static str = "warpnorm-rms-norm";
    const OP: &'static str = "RMSNorm";
    type Saved = Saved;

    fn dtypes(&self) -> (DType, DType) {
        (self.dtype, self.pdtype)
    }

    fn saved(&self) -> &Stash<Saved> {
        &self.saved
    }

    fn cpu_forward<T: Elem, P: Elem>(
        &self,
        x: Arg<CpuStorage>,
        w: Option<Arg<CpuStorage>>,
        _b: Option<Arg<CpuStorage>>,
    ) -> Result<(CpuStorage, Shape)> {
        let desc = self.desc(x.1.shape())?;
        cpu_forward::<T, P>(&self.saved, &desc, x, w)
    }

    fn cpu_backward<T: Elem, P: Elem>(
        &self,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
        rstd: &Saved,
    ) -> Result<Grads> {
        let desc = self.desc(x.shape())?;
        cpu_backward::<T, P>(&desc, x, w, dy, rstd)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_forward<T: super::cuda::CudaElem, P: super::cuda::CudaElem>(
        &self,
        x: Arg<candle_core::CudaStorage>,
        w: Option<Arg<candle_core::CudaStorage>>,
        _b: Option<Arg<candle_core::CudaStorage>>,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let desc = self.desc(x.1.shape())?;
        cuda::rms_forward::<T, P>(&self.saved, &desc, x, w)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_backward<T: super::cuda::CudaElem, P: super::cuda::CudaElem>(
        &self,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
        rstd: &Saved,
    ) -> Result<Grads> {
        let desc = self.desc(x.shape())?;
        cuda::rms_backward::<T, P>(&desc, x, w, dy, rstd)
    }
}

fn cpu_forward<T: Elem, P: Elem>(
    saved: &Stash<Saved>,
    desc: &RmsNormDesc,
    x: Arg<CpuStorage>,
    w: Option<Arg<CpuStorage>>,
) -> Result<(CpuStorage, Shape)> {
    let xs = cpu_slice::<T>("x", x.0, x.1)?;
    let ws = w.map(|(s, l)| cpu_slice::<P>("weight", s, l)).transpose()?;
    let out = cpu_rms::forward::<T, P>(desc, xs, ws).map_err(wrap)?;
    stash(saved, Tensor::from_vec(out.rstd, desc.rows, &Device::Cpu)?)?;
    Ok((T::to_cpu_storage_owned(out.y), x.1.shape().clone()))
}

fn cpu_backward<T: Elem, P: Elem>(
    desc: &RmsNormDesc,
    x: &Tensor,
    w: Option<&Tensor>,
    dy: &Tensor,
    rstd: &Tensor,
) -> Result<Grads> {
    let xv = x.flatten_all()?.to_vec1::<T>()?;
    let dyv = dy.flatten_all()?.to_vec1::<T>()?;
    let wv = w.map(|w| w.to_vec1::<P>()).transpose()?;
    let rv = rstd.to_vec1::<f32>()?;
    let out = cpu_rms::backward::<T, P>(desc, &xv, &dyv, &rv, wv.as_deref()).map_err(wrap)?;
    let dev = &Device::Cpu;
    let dx = Tensor::from_vec(out.dx, x.shape(), dev)?;
    let dw = out
        .dweight
        .map(|v| Tensor::from_vec(v, desc.cols, dev))
        .transpose()?;
    Ok((dx, dw, None))
}

/// RMSNorm over the last dim of `x` (PyTorch's `F.rms_norm(x, [D], weight, eps)`; `eps`
/// `None` is f32's epsilon, as PyTorch), with autograd: `backward()` gives the gradients of x
/// and the weight.
///
/// `weight` is 1-D of the last dim's size, on x's device, f32 or x's dtype. The saved rstd is
/// f32. x is made contiguous first when it is not (a copy).
pub fn rms_norm_op(x: &Tensor, weight: Option<&Tensor>, eps: Option<f32>) -> Result<Tensor> {
    let dtype = wn_dtype("x", x.dtype())?;
    let pdtype = param_dtype("RMSNorm", dtype, &[("weight", weight)])?;
    if x.rank() == 0 {
        bail!("warpnorm RMSNorm: the input needs at least one dim");
    }
    let cols = x.dim(D::Minus1)?;
    check_param("RMSNorm", "weight", weight, cols, x.device())?;
    let op = RmsOp {
        eps: eps.unwrap_or(crate::rms_norm::DEFAULT_EPS),
        dtype,
        pdtype,
        weight: weight.is_some(),
        saved: Arc::default(),
    };
    // Validate before anything runs (shape, dtypes, eps).
    op.desc(x.shape())?;
    apply(x, weight, None, op)
}

/// RMSNorm over the last dim with a learned weight: the drop-in for `candle_nn::RmsNorm`, with
/// a backward and f32 weights with 16-bit activations.
#[derive(Clone, Debug)]
pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    /// With a weight (1-D, the normalized dim's size).
    pub fn new(weight: Tensor, eps: f64) -> RmsNorm {
        RmsNorm { weight, eps }
    }

    /// The weight.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// eps, added to the mean square inside the square root.
    pub fn eps(&self) -> f64 {
        self.eps
    }
}

impl RmsNorm {
    /// The fused residual add of a transformer block: h = x + residual (+ `residual_bias`),
    /// y = this RMSNorm of h; returns `(y, h)` (see [`super::ops::rms_norm_residual`]).
    pub fn forward_residual(
        &self,
        x: &Tensor,
        residual: &Tensor,
        residual_bias: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        super::residual::rms_norm_residual_op(
            x,
            residual,
            Some(&self.weight),
            residual_bias,
            Some(self.eps as f32),
        )
    }
}

impl Module for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        rms_norm_op(x, Some(&self.weight), Some(self.eps as f32))
    }
}

/// Loads an [`RmsNorm`] of `size` from `vb` as `candle_nn::rms_norm` does: `weight`
/// initialized to 1, in the VarBuilder's dtype (f32 weights work with f16/bf16 activations).
pub fn rms_norm(size: usize, eps: f64, vb: VarBuilder) -> Result<RmsNorm> {
    let weight = vb.get_with_hints(size, "weight", Init::Const(1.))?;
    Ok(RmsNorm { weight, eps })
}

/// The CUDA path: warpnorm's functional RMSNorm ops on candle's stream (as `super::cuda` does
/// for LayerNorm and BatchNorm, with its helpers).
#[cfg(feature = "candle-cuda")]
mod cuda {
    use candle_core::backend::BackendStorage;
    use candle_core::{bail, CudaStorage, Result, Shape, Storage, Tensor};

    use super::super::common::{stash, wrap, Arg, Grads, Stash};
    use super::super::cuda::{alloc, tensor, view, with_cuda, workspace, CudaElem};
    use crate::rms_norm::{self as rms, RmsNormDesc};

    pub(super) fn rms_forward<T: CudaElem, P: CudaElem>(
        saved: &Stash<super::Saved>,
        desc: &RmsNormDesc,
        x: Arg<CudaStorage>,
        w: Option<Arg<CudaStorage>>,
    ) -> Result<(CudaStorage, Shape)> {
        let dev = x.0.device();
        let stream = dev.cuda_stream();
        let mut y = alloc::<T>(&stream, desc.rows * desc.cols)?;
        let mut rstd = alloc::<f32>(&stream, desc.rows)?;
        let mut ws = workspace(
            &stream,
            rms::forward_workspace_bytes(&stream, desc).map_err(wrap)?,
        )?;
        rms::forward::<T, P>(
            &stream,
            desc,
            rms::ForwardBuffers {
                x: view::<T>("x", x.0, x.1)?,
                y: y.as_view_mut(),
                weight: w.map(|(s, l)| view::<P>("weight", s, l)).transpose()?,
                rstd: Some(rstd.as_view_mut()),
                workspace: ws.as_mut().map(|w| w.as_view_mut()),
            },
        )
        .map_err(wrap)?;
        stash(saved, tensor(rstd, desc.rows, dev))?;
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev.clone()),
            x.1.shape().clone(),
        ))
    }

    pub(super) fn rms_backward<T: CudaElem, P: CudaElem>(
        desc: &RmsNormDesc,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
        rstd: &Tensor,
    ) -> Result<Grads> {
        let (xg, xl) = x.storage_and_layout();
        let Storage::Cuda(xs) = &*xg else {
            bail!("warpnorm RMSNorm: x is not on a CUDA device")
        };
        let dev = xs.device().clone();
        let stream = dev.cuda_stream();
        let mut dx = alloc::<T>(&stream, desc.rows * desc.cols)?;
        let mut dweight = match w {
            Some(_) => Some(alloc::<P>(&stream, desc.cols)?),
            None => None,
        };
        let mut ws = workspace(
            &stream,
            rms::backward_workspace_bytes(&stream, desc).map_err(wrap)?,
        )?;
        let wg = w.map(|w| w.storage_and_layout());
        let weight = match &wg {
            Some((g, l)) => match &**g {
                Storage::Cuda(s) => Some(view::<P>("weight", s, l)?),
                _ => bail!("warpnorm RMSNorm: the weight is not on a CUDA device"),
            },
            None => None,
        };
        with_cuda(dy, "dy", |dys, dyl| {
            with_cuda(rstd, "rstd", |rs, rl| {
                rms::backward::<T, P>(
                    &stream,
                    desc,
                    rms::BackwardBuffers {
                        x: view::<T>("x", xs, xl)?,
                        dy: view::<T>("dy", dys, dyl)?,
                        rstd: view::<f32>("rstd", rs, rl)?,
                        weight,
                        dx: dx.as_view_mut(),
                        dweight: dweight.as_mut().map(|d| d.as_view_mut()),
                        workspace: ws.as_mut().map(|w| w.as_view_mut()),
                    },
                )
                .map_err(wrap)
            })
        })?;
        let cols = desc.cols;
        Ok((
            tensor(dx, x.shape(), &dev),
            dweight.map(|d| tensor(d, cols, &dev)),
            None,
        ))
    }
}
