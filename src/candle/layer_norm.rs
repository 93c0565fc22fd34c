//! LayerNorm on candle tensors: the custom op (forward and backward) and the module.

use std::sync::Arc;

use candle_core::{bail, CpuStorage, Device, Module, Result, Shape, Tensor, D};
use candle_nn::{Init, LayerNormConfig, VarBuilder};

use super::common::{
    apply, check_param, cpu_slice, param_dtype, stash, wn_dtype, wrap, Arg, Elem, Grads, NormOp,
    Stash,
};
use crate::cpu::layer_norm as cpu_ln;
use crate::layer_norm::{Affine, LayerNormDesc};
use crate::DType;

/// What a forward pass saves for its backward: mean, rstd and mean_lo (the mean's rounding
/// error, so that the backward re-centres x on the exact mean), one f32 per row each.
pub(crate) type Saved = (Tensor, Tensor, Tensor);

/// One LayerNorm call over the last dim, as a candle custom op (1, 2 or 3 inputs: x, weight,
/// bias).
pub(crate) struct LnOp {
    affine: Affine,
    eps: f32,
    dtype: DType,
    pdtype: DType,
    saved: Stash<Saved>,
}

impl LnOp {
    fn desc(&self, shape: &Shape) -> Result<LayerNormDesc> {
        let dims = shape.dims();
        let Some(&cols) = dims.last() else {
            bail!("warpnorm LayerNorm: the input needs at least one dim");
        };
        LayerNormDesc::new(
            dims,
            &[cols],
            self.dtype,
            self.pdtype,
            self.affine,
            self.eps,
        )
        .map_err(wrap)
    }
}

impl NormOp for LnOp {
    const NAME: &'static str = "warpnorm-layer-norm";
    const OP: &'static str = "LayerNorm";
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
        b: Option<Arg<CpuStorage>>,
    ) -> Result<(CpuStorage, Shape)> {
        let desc = self.desc(x.1.shape())?;
        cpu_forward::<T, P>(&self.saved, &desc, x, w, b)
    }

    fn cpu_backward<T: Elem, P: Elem>(
        &self,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
        saved: &Saved,
    ) -> Result<Grads> {
        let desc = self.desc(x.shape())?;
        cpu_backward::<T, P>(&desc, x, w, dy, saved)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_forward<T: super::cuda::CudaElem, P: super::cuda::CudaElem>(
        &self,
        x: Arg<candle_core::CudaStorage>,
        w: Option<Arg<candle_core::CudaStorage>>,
        b: Option<Arg<candle_core::CudaStorage>>,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let desc = self.desc(x.1.shape())?;
        super::cuda::ln_forward::<T, P>(&self.saved, &desc, x, w, b)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_backward<T: super::cuda::CudaElem, P: super::cuda::CudaElem>(
        &self,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
        saved: &Saved,
    ) -> Result<Grads> {
        let desc = self.desc(x.shape())?;
        super::cuda::ln_backward::<T, P>(&desc, x, w, dy, saved)
    }
}

fn cpu_forward<T: Elem, P: Elem>(
    saved: &Stash<Saved>,
    desc: &LayerNormDesc,
    x: Arg<CpuStorage>,
    w: Option<Arg<CpuStorage>>,
    b: Option<Arg<CpuStorage>>,
) -> Result<(CpuStorage, Shape)> {
    let xs = cpu_slice::<T>("x", x.0, x.1)?;
    let ws = w.map(|(s, l)| cpu_slice::<P>("weight", s, l)).transpose()?;
    let bs = b.map(|(s, l)| cpu_slice::<P>("bias", s, l)).transpose()?;
    let out = cpu_ln::forward::<T, P>(desc, xs, ws, bs).map_err(wrap)?;
    let mean = Tensor::from_vec(out.mean, desc.rows, &Device::Cpu)?;
    let rstd = Tensor::from_vec(out.rstd, desc.rows, &Device::Cpu)?;
    let mean_lo = Tensor::from_vec(out.mean_lo, desc.rows, &Device::Cpu)?;
    stash(saved, (mean, rstd, mean_lo))?;
    Ok((T::to_cpu_storage_owned(out.y), x.1.shape().clone()))
}

fn cpu_backward<T: Elem, P: Elem>(
    desc: &LayerNormDesc,
    x: &Tensor,
    w: Option<&Tensor>,
    dy: &Tensor,
    (mean, rstd, mean_lo): &Saved,
) -> Result<Grads> {
    let xv = x.flatten_all()?.to_vec1::<T>()?;
    let dyv = dy.flatten_all()?.to_vec1::<T>()?;
    let wv = w.map(|w| w.to_vec1::<P>()).transpose()?;
    let (mv, rv) = (mean.to_vec1::<f32>()?, rstd.to_vec1::<f32>()?);
    let lv = mean_lo.to_vec1::<f32>()?;
    let saved = (&mv[..], &rv[..], Some(&lv[..]));
    let out = cpu_ln::backward::<T, P>(desc, &xv, &dyv, saved, wv.as_deref()).map_err(wrap)?;
    let dev = &Device::Cpu;
    let dx = Tensor::from_vec(out.dx, x.shape(), dev)?;
    let dw = out
        .dgamma
        .map(|v| Tensor::from_vec(v, desc.cols, dev))
        .transpose()?;
    let db = out
        .dbeta
        .map(|v| Tensor::from_vec(v, desc.cols, dev))
        .transpose()?;
    Ok((dx, dw, db))
}

/// LayerNorm over the last dim of `x` (PyTorch's `F.layer_norm(x, [D], weight, bias, eps)`),
/// with autograd: `backward()` gives the gradients of x, weight and bias.
///
/// `weight` and `bias` are 1-D of the last dim's size, on x's device, both f32 or both of x's
/// dtype; `bias` needs `weight`. Saved statistics are f32. x is made contiguous first when it
/// is not (a copy).
pub fn layer_norm_op(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f32,
) -> Result<Tensor> {
    let dtype = wn_dtype("x", x.dtype())?;
    let pdtype = param_dtype("LayerNorm", dtype, &[("weight", weight), ("bias", bias)])?;
    if x.rank() == 0 {
        bail!("warpnorm LayerNorm: the input needs at least one dim");
    }
    let cols = x.dim(D::Minus1)?;
    check_param("LayerNorm", "weight", weight, cols, x.device())?;
    check_param("LayerNorm", "bias", bias, cols, x.device())?;
    let affine = match (weight, bias) {
        (None, None) => Affine::None,
        (Some(_), None) => Affine::Weight,
        (Some(_), Some(_)) => Affine::WeightBias,
        (None, Some(_)) => bail!("warpnorm LayerNorm: a bias needs a weight"),
    };
    let op = LnOp {
        affine,
        eps,
        dtype,
        pdtype,
        saved: Arc::default(),
    };
    // Validate before anything runs (shape, dtypes, eps).
    op.desc(x.shape())?;
    apply(x, weight, bias, op)
}

/// LayerNorm over the last dim with learned weight and (optional) bias: the drop-in for
/// `candle_nn::LayerNorm`, with a backward (candle_nn's fused op has none) and f32 parameters
/// with 16-bit activations.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Option<Tensor>,
    eps: f64,
}

impl LayerNorm {
    /// With weight and bias (1-D, the normalized dim's size).
    pub fn new(weight: Tensor, bias: Tensor, eps: f64) -> LayerNorm {
        LayerNorm {
            weight,
            bias: Some(bias),
            eps,
        }
    }

    /// With a weight only (PyTorch's `bias=False`).
    pub fn new_no_bias(weight: Tensor, eps: f64) -> LayerNorm {
        LayerNorm {
            weight,
            bias: None,
            eps,
        }
    }

    /// The weight (gamma).
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The bias (beta), if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// eps, added to the variance inside the square root.
    pub fn eps(&self) -> f64 {
        self.eps
    }
}

impl LayerNorm {
    /// The fused residual add of a transformer block: h = x + residual (+ `residual_bias`),
    /// y = this LayerNorm of h; returns `(y, h)` (see [`super::ops::layer_norm_residual`]).
    pub fn forward_residual(
        &self,
        x: &Tensor,
        residual: &Tensor,
        residual_bias: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        super::residual::layer_norm_residual_op(
            x,
            residual,
            Some(&self.weight),
            self.bias.as_ref(),
            residual_bias,
            self.eps as f32,
        )
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        layer_norm_op(x, Some(&self.weight), self.bias.as_ref(), self.eps as f32)
    }
}

/// Loads a [`LayerNorm`] of `size` from `vb` as `candle_nn::layer_norm` does: `weight` (or
/// `gamma`) initialized to 1 and, when `config.affine`, `bias` (or `beta`) initialized to 0, in
/// the VarBuilder's dtype (f32 parameters work with f16/bf16 activations).
///
/// `config.remove_mean == false` (candle's RMSNorm form) is rejected: warpnorm has no RMSNorm
/// yet.
pub fn layer_norm<C: Into<LayerNormConfig>>(
    size: usize,
    config: C,
    vb: VarBuilder,
) -> Result<LayerNorm> {
    let config = config.into();
    if !config.remove_mean {
        bail!(
            "warpnorm LayerNorm: remove_mean = false is RMSNorm, which warpnorm does not have yet"
        );
    }
    let weight_name = ["weight", "gamma"]
        .into_iter()
        .find(|n| vb.contains_tensor(n))
        .unwrap_or("weight");
    let weight = vb.get_with_hints(size, weight_name, Init::Const(1.))?;
    let bias = if config.affine {
        let bias_name = ["bias", "beta"]
            .into_iter()
            .find(|n| vb.contains_tensor(n))
            .unwrap_or("bias");
        Some(vb.get_with_hints(size, bias_name, Init::Const(0.))?)
    } else {
        None
    };
    Ok(LayerNorm {
        weight,
        bias,
        eps: config.eps,
    })
}
