//! BatchNorm on candle tensors: the custom op (training with the running statistics updated,
//! eval; forward and backward) and the module.

use std::sync::Arc;

use candle_core::{bail, CpuStorage, Device, ModuleT, Result, Shape, Tensor, Var};
use candle_nn::{BatchNormConfig, Init, VarBuilder};

use super::common::{
    apply, check_param, cpu_slice, param_dtype, stash, stashed, wn_dtype, wrap, Arg, Elem, Grads,
    NormOp, Stash,
};
use crate::batch_norm::{BatchNormDesc, Layout as BnLayout, Mode};
use crate::cpu::batch_norm as cpu_bn;
use crate::DType;

/// What a forward pass leaves: the statistics it normalized with (f32, one per channel; empty
/// for an empty batch) for the backward - the mean as `save_mean + save_mean_lo`, the f32
/// mean and its rounding error, so that the backward re-centres x on the unrounded mean - and
/// in training the updated running statistics for the caller to store.
#[derive(Clone)]
pub(crate) struct Saved {
    pub(crate) save_mean: Tensor,
    pub(crate) save_mean_lo: Tensor,
    pub(crate) save_invstd: Tensor,
    pub(crate) running: Option<(Tensor, Tensor)>,
}

/// One BatchNorm call as a candle custom op (x, or x, weight, bias).
pub(crate) struct BnOp {
    desc: BatchNormDesc,
    /// Running mean and variance (read in eval and for the training update).
    running: Option<(Tensor, Tensor)>,
    saved: Stash<Saved>,
}

impl NormOp for BnOp {
    const NAME: &'static str = "warpnorm-batch-norm";
    const OP: &'static str = "BatchNorm";
    type Saved = Saved;

    fn dtypes(&self) -> (DType, DType) {
        (self.desc.dtype, self.desc.param_dtype)
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
        cpu_forward::<T, P>(self, x, w, b)
    }

    /// dx, dweight, dbias (candle keeps the last two when the call had an affine transform).
    fn cpu_backward<T: Elem, P: Elem>(
        &self,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
        saved: &Saved,
    ) -> Result<Grads> {
        let (dx, dw, db) = cpu_backward::<T, P>(&self.desc, x, w, dy, saved)?;
        Ok((dx, Some(dw), Some(db)))
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_forward<T: super::cuda::CudaElem, P: super::cuda::CudaElem>(
        &self,
        x: Arg<candle_core::CudaStorage>,
        w: Option<Arg<candle_core::CudaStorage>>,
        b: Option<Arg<candle_core::CudaStorage>>,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let running = self.running.as_ref().map(|(m, v)| (m, v));
        super::cuda::bn_forward::<T, P>(&self.saved, &self.desc, x, w, b, running)
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda_backward<T: super::cuda::CudaElem, P: super::cuda::CudaElem>(
        &self,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
        saved: &Saved,
    ) -> Result<Grads> {
        let (dx, dw, db) = super::cuda::bn_backward::<T, P>(&self.desc, x, w, dy, saved)?;
        Ok((dx, Some(dw), Some(db)))
    }
}

fn cpu_forward<T: Elem, P: Elem>(
    op: &BnOp,
    x: Arg<CpuStorage>,
    w: Option<Arg<CpuStorage>>,
    b: Option<Arg<CpuStorage>>,
) -> Result<(CpuStorage, Shape)> {
    let desc = &op.desc;
    let xs = cpu_slice::<T>("x", x.0, x.1)?;
    let affine = match (w, b) {
        (Some((ws, wl)), Some((bs, bl))) => Some((
            cpu_slice::<P>("weight", ws, wl)?,
            cpu_slice::<P>("bias", bs, bl)?,
        )),
        _ => None,
    };
    let mut running = op
        .running
        .as_ref()
        .map(|(m, v)| Ok::<_, candle_core::Error>((m.to_vec1::<P>()?, v.to_vec1::<P>()?)))
        .transpose()?;
    let out = cpu_bn::forward::<T, P>(
        desc,
        xs,
        affine,
        running.as_mut().map(|(m, v)| cpu_bn::Running {
            mean: m,
            var: v,
            num_batches_tracked: None,
        }),
    )
    .map_err(wrap)?;
    let dev = &Device::Cpu;
    let n = out.save_mean.len();
    let updated = match running {
        Some((m, v)) if desc.mode.batch_stats => {
            let c = m.len();
            Some((Tensor::from_vec(m, c, dev)?, Tensor::from_vec(v, c, dev)?))
        }
        _ => None,
    };
    stash(
        &op.saved,
        Saved {
            save_mean: Tensor::from_vec(out.save_mean, n, dev)?,
            save_mean_lo: Tensor::from_vec(out.save_mean_lo, n, dev)?,
            save_invstd: Tensor::from_vec(out.save_invstd, n, dev)?,
            running: updated,
        },
    )?;
    Ok((T::to_cpu_storage_owned(out.y), x.1.shape().clone()))
}

fn cpu_backward<T: Elem, P: Elem>(
    desc: &BatchNormDesc,
    x: &Tensor,
    w: Option<&Tensor>,
    dy: &Tensor,
    saved: &Saved,
) -> Result<(Tensor, Tensor, Tensor)> {
    let xv = x.flatten_all()?.to_vec1::<T>()?;
    let dyv = dy.flatten_all()?.to_vec1::<T>()?;
    let wv = w.map(|w| w.to_vec1::<P>()).transpose()?;
    let mv = saved.save_mean.to_vec1::<f32>()?;
    let lv = saved.save_mean_lo.to_vec1::<f32>()?;
    let iv = saved.save_invstd.to_vec1::<f32>()?;
    let out = cpu_bn::backward::<T, P>(desc, &xv, &dyv, wv.as_deref(), &mv, Some(&lv), &iv)
        .map_err(wrap)?;
    let dev = &Device::Cpu;
    let c = out.dgamma.len();
    Ok((
        Tensor::from_vec(out.dx, x.shape(), dev)?,
        Tensor::from_vec(out.dgamma, c, dev)?,
        Tensor::from_vec(out.dbeta, c, dev)?,
    ))
}

/// The arguments of a BatchNorm call besides its input ([`batch_norm_op`]).
#[derive(Clone, Copy, Debug)]
pub struct BatchNormArgs<'a> {
    /// Scale per channel (1-D, C), given together with `bias`.
    pub weight: Option<&'a Tensor>,
    /// Shift per channel (1-D, C), given together with `weight`.
    pub bias: Option<&'a Tensor>,
    /// Running mean per channel: used in eval, updated in training.
    pub running_mean: Option<&'a Var>,
    /// Running (unbiased) variance per channel: used in eval, updated in training.
    pub running_var: Option<&'a Var>,
    /// Normalize with the batch statistics and update the running ones (true), or normalize
    /// with the running statistics (false, which needs them).
    pub training: bool,
    /// `running = (1 - momentum) * running + momentum * batch`, in [0, 1].
    pub momentum: f64,
    /// Added to the variance inside the square root.
    pub eps: f64,
}

impl Default for BatchNormArgs<'_> {
    /// Training without affine transform or running statistics, momentum 0.1, eps 1e-5.
    fn default() -> Self {
        BatchNormArgs {
            weight: None,
            bias: None,
            running_mean: None,
            running_var: None,
            training: true,
            momentum: 0.1,
            eps: 1e-5,
        }
    }
}

/// BatchNorm over dim 1 of an `(N, C)`, `(N, C, L)`, `(N, C, H, W)` or `(N, C, D, H, W)` tensor
/// (PyTorch's `F.batch_norm`), with autograd: `backward()` gives the gradients of x, weight and
/// bias (in eval, the eval-mode gradient `dy * weight * invstd` for x).
///
/// In training the batch statistics are used and the running statistics, when given, are
/// updated in place (unbiased variance, as PyTorch) after the forward succeeded; a rejected call
/// changes nothing. Weight, bias and the running statistics are 1-D of C elements, on x's
/// device, all f32 or all of x's dtype. x is made contiguous (NCHW) first when it is not.
pub fn batch_norm_op(x: &Tensor, args: &BatchNormArgs<'_>) -> Result<Tensor> {
    let dtype = wn_dtype("x", x.dtype())?;
    let running_mean = args.running_mean.map(|v| v.as_tensor());
    let running_var = args.running_var.map(|v| v.as_tensor());
    let pdtype = param_dtype(
        "BatchNorm",
        dtype,
        &[
            ("weight", args.weight),
            ("bias", args.bias),
            ("running_mean", running_mean),
            ("running_var", running_var),
        ],
    )?;
    if x.rank() < 2 {
        bail!(
            "warpnorm BatchNorm: the input has shape {:?}; expected (N, C, ...)",
            x.dims()
        );
    }
    let c = x.dim(1)?;
    for (name, t) in [
        ("weight", args.weight),
        ("bias", args.bias),
        ("running_mean", running_mean),
        ("running_var", running_var),
    ] {
        check_param("BatchNorm", name, t, c, x.device())?;
    }
    if args.weight.is_some() != args.bias.is_some() {
        bail!("warpnorm BatchNorm: weight and bias are given together or not at all");
    }
    let running = match (running_mean, running_var) {
        (Some(m), Some(v)) => Some((m.contiguous()?, v.contiguous()?)),
        (None, None) => None,
        _ => bail!("warpnorm BatchNorm: running_mean and running_var are given together"),
    };
    if !args.training && running.is_none() {
        bail!("warpnorm BatchNorm: eval needs the running statistics");
    }
    let mode = if args.training {
        Mode::train(args.momentum as f32)
    } else {
        Mode::eval()
    };
    let desc = BatchNormDesc::new(x.dims(), BnLayout::Contiguous, dtype, pdtype)
        .with_eps(args.eps as f32)
        .with_mode(mode);
    // Validate before anything runs (dims, eps, momentum, one value per channel in training).
    desc.check().map_err(wrap)?;
    let saved: Stash<Saved> = Arc::default();
    let op = BnOp {
        desc,
        running,
        saved: saved.clone(),
    };
    let y = apply(x, args.weight, args.bias, op)?;
    if args.training {
        if let (Some(rm), Some(rv)) = (args.running_mean, args.running_var) {
            let s = stashed(&saved, "BatchNorm")?;
            if let Some((m, v)) = s.running {
                rm.set(&m)?;
                rv.set(&v)?;
            }
        }
    }
    Ok(y)
}

/// BatchNorm with running statistics (held as `Var`s and updated in training) and an optional
/// affine transform: the drop-in for `candle_nn::BatchNorm` (`ModuleT::forward_t(x, train)`),
/// with the CUDA kernels, a fused backward and f32 parameters with 16-bit activations.
#[derive(Clone, Debug)]
pub struct BatchNorm {
    running_mean: Var,
    running_var: Var,
    weight_and_bias: Option<(Tensor, Tensor)>,
    eps: f64,
    momentum: f64,
}

impl BatchNorm {
    /// From its tensors (1-D of `num_features`). A running statistic that is already a `Var`
    /// is shared (updates are seen by its `VarMap`); a plain tensor is copied into a new `Var`.
    pub fn new(
        num_features: usize,
        running_mean: Tensor,
        running_var: Tensor,
        weight_and_bias: Option<(Tensor, Tensor)>,
        eps: f64,
    ) -> Result<BatchNorm> {
        for (name, t) in [
            ("running_mean", Some(&running_mean)),
            ("running_var", Some(&running_var)),
            ("weight", weight_and_bias.as_ref().map(|p| &p.0)),
            ("bias", weight_and_bias.as_ref().map(|p| &p.1)),
        ] {
            check_param("BatchNorm", name, t, num_features, running_mean.device())?;
        }
        Ok(BatchNorm {
            running_mean: Var::from_tensor(&running_mean)?,
            running_var: Var::from_tensor(&running_var)?,
            weight_and_bias,
            eps,
            momentum: 0.1,
        })
    }

    /// The same module with another momentum (PyTorch's default is 0.1).
    pub fn with_momentum(mut self, momentum: f64) -> BatchNorm {
        self.momentum = momentum;
        self
    }

    /// The running mean.
    pub fn running_mean(&self) -> &Tensor {
        self.running_mean.as_tensor()
    }

    /// The running variance.
    pub fn running_var(&self) -> &Tensor {
        self.running_var.as_tensor()
    }

    /// Weight and bias, if the module has them.
    pub fn weight_and_bias(&self) -> Option<(&Tensor, &Tensor)> {
        self.weight_and_bias.as_ref().map(|(w, b)| (w, b))
    }

    /// eps.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// momentum.
    pub fn momentum(&self) -> f64 {
        self.momentum
    }

    /// A training step: normalizes with the batch statistics and updates the running ones.
    pub fn forward_train(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_t(x, true)
    }

    /// Eval: normalizes with the running statistics.
    pub fn forward_eval(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_t(x, false)
    }
}

impl ModuleT for BatchNorm {
    fn forward_t(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let (weight, bias) = match &self.weight_and_bias {
            Some((w, b)) => (Some(w), Some(b)),
            None => (None, None),
        };
        batch_norm_op(
            x,
            &BatchNormArgs {
                weight,
                bias,
                running_mean: Some(&self.running_mean),
                running_var: Some(&self.running_var),
                training: train,
                momentum: self.momentum,
                eps: self.eps,
            },
        )
    }
}

/// Loads a [`BatchNorm`] of `num_features` channels from `vb` as `candle_nn::batch_norm` does,
/// with PyTorch's names: `running_mean` (initialized to 0), `running_var` (1) and, when
/// `config.affine`, `weight` (1) and `bias` (0), in the VarBuilder's dtype (f32 parameters
/// work with f16/bf16 activations). `num_batches_tracked` is neither read nor kept (candle_nn
/// does not either; momentum `None` is not offered).
///
/// `config.remove_mean == false` is rejected (warpnorm always subtracts the mean).
pub fn batch_norm<C: Into<BatchNormConfig>>(
    num_features: usize,
    config: C,
    vb: VarBuilder,
) -> Result<BatchNorm> {
    let config = config.into();
    if !config.remove_mean {
        bail!("warpnorm BatchNorm: remove_mean = false is not supported");
    }
    let running_mean = vb.get_with_hints(num_features, "running_mean", Init::Const(0.))?;
    let running_var = vb.get_with_hints(num_features, "running_var", Init::Const(1.))?;
    let weight_and_bias = if config.affine {
        Some((
            vb.get_with_hints(num_features, "weight", Init::Const(1.))?,
            vb.get_with_hints(num_features, "bias", Init::Const(0.))?,
        ))
    } else {
        None
    };
    Ok(BatchNorm::new(
        num_features,
        running_mean,
        running_var,
        weight_and_bias,
        config.eps,
    )?
    .with_momentum(config.momentum))
}
