//! LayerNorm on candle tensors: the custom op (forward and backward) and the module.

use std::sync::Arc;

use candle_core::{
    bail, CpuStorage, CustomOp1, CustomOp2, CustomOp3, Device, Layout, Module, Result, Shape,
    Tensor, D,
};
use candle_nn::{Init, LayerNormConfig, VarBuilder};

use super::common::{
    check_param, cpu_slice, dispatch, param_dtype, stash, stashed, wn_dtype, wrap, Elem, Stash,
};
use crate::cpu::layer_norm as cpu_ln;
use crate::layer_norm::{Affine, LayerNormDesc};
use crate::DType;

/// What a forward pass saves for its backward: mean and rstd, one f32 per row.
pub(crate) type Saved = (Tensor, Tensor);

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

    fn cpu(
        &self,
        x: (&CpuStorage, &Layout),
        w: Option<(&CpuStorage, &Layout)>,
        b: Option<(&CpuStorage, &Layout)>,
    ) -> Result<(CpuStorage, Shape)> {
        let desc = self.desc(x.1.shape())?;
        dispatch!(
            "LayerNorm",
            self.dtype,
            self.pdtype,
            cpu_forward(&self.saved, &desc, x, w, b)
        )
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda(
        &self,
        x: (&candle_core::CudaStorage, &Layout),
        w: Option<(&candle_core::CudaStorage, &Layout)>,
        b: Option<(&candle_core::CudaStorage, &Layout)>,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        use super::cuda::ln_forward;
        let desc = self.desc(x.1.shape())?;
        dispatch!(
            "LayerNorm",
            self.dtype,
            self.pdtype,
            ln_forward(&self.saved, &desc, x, w, b)
        )
    }

    /// dx, and dweight / dbias when the call had them.
    fn backward(
        &self,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
    ) -> Result<(Tensor, Option<Tensor>, Option<Tensor>)> {
        let (mean, rstd) = stashed(&self.saved, "LayerNorm")?;
        let desc = self.desc(x.shape())?;
        // Gradients arriving from candle's graph may be broadcast views (zero strides).
        let dy = dy.contiguous()?;
        let x = x.contiguous()?;
        let w = w.map(|w| w.contiguous()).transpose()?;
        let w = w.as_ref();
        match x.device() {
            Device::Cpu => dispatch!(
                "LayerNorm",
                self.dtype,
                self.pdtype,
                cpu_backward(&desc, &x, w, &dy, &mean, &rstd)
            ),
            #[cfg(feature = "candle-cuda")]
            Device::Cuda(_) => {
                use super::cuda::ln_backward;
                dispatch!(
                    "LayerNorm",
                    self.dtype,
                    self.pdtype,
                    ln_backward(&desc, &x, w, &dy, &mean, &rstd)
                )
            }
            #[allow(unreachable_patterns)]
            d => bail!(
                "warpnorm LayerNorm: no implementation on {:?}",
                d.location()
            ),
        }
    }
}

fn cpu_forward<T: Elem, P: Elem>(
    saved: &Stash<Saved>,
    desc: &LayerNormDesc,
    x: (&CpuStorage, &Layout),
    w: Option<(&CpuStorage, &Layout)>,
    b: Option<(&CpuStorage, &Layout)>,
) -> Result<(CpuStorage, Shape)> {
    let xs = cpu_slice::<T>("x", x.0, x.1)?;
    let ws = w.map(|(s, l)| cpu_slice::<P>("weight", s, l)).transpose()?;
    let bs = b.map(|(s, l)| cpu_slice::<P>("bias", s, l)).transpose()?;
    let out = cpu_ln::forward::<T, P>(desc, xs, ws, bs).map_err(wrap)?;
    let mean = Tensor::from_vec(out.mean, desc.rows, &Device::Cpu)?;
    let rstd = Tensor::from_vec(out.rstd, desc.rows, &Device::Cpu)?;
    stash(saved, (mean, rstd))?;
    Ok((T::to_cpu_storage_owned(out.y), x.1.shape().clone()))
}

fn cpu_backward<T: Elem, P: Elem>(
    desc: &LayerNormDesc,
    x: &Tensor,
    w: Option<&Tensor>,
    dy: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
) -> Result<(Tensor, Option<Tensor>, Option<Tensor>)> {
    let xv = x.flatten_all()?.to_vec1::<T>()?;
    let dyv = dy.flatten_all()?.to_vec1::<T>()?;
    let wv = w.map(|w| w.to_vec1::<P>()).transpose()?;
    let (mv, rv) = (mean.to_vec1::<f32>()?, rstd.to_vec1::<f32>()?);
    let out = cpu_ln::backward::<T, P>(desc, &xv, &dyv, &mv, &rv, wv.as_deref()).map_err(wrap)?;
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

const NAME: &str = "warpnorm-layer-norm";

impl CustomOp1 for LnOp {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        self.cpu((s, l), None, None)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.cuda((s, l), None, None)
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(self.backward(x, None, dy)?.0))
    }
}

impl CustomOp2 for LnOp {
    fn name(&self) -> &'static str {
        NAME
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu((s1, l1), Some((s2, l2)), None)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.cuda((s1, l1), Some((s2, l2)), None)
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, _) = self.backward(x, Some(w), dy)?;
        Ok((Some(dx), dw))
    }
}

impl CustomOp3 for LnOp {
    fn name(&self) -> &'static str {
        NAME
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
        self.cpu((s1, l1), Some((s2, l2)), Some((s3, l3)))
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
        self.cuda((s1, l1), Some((s2, l2)), Some((s3, l3)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dx, dw, db) = self.backward(x, Some(w), dy)?;
        Ok((Some(dx), dw, db))
    }
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
    let x = x.contiguous()?;
    match (weight, bias) {
        (None, _) => x.apply_op1(op),
        (Some(w), None) => x.apply_op2(&w.contiguous()?, op),
        (Some(w), Some(b)) => x.apply_op3(&w.contiguous()?, &b.contiguous()?, op),
    }
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
