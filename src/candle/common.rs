//! What the ops share: errors, dtypes, storage access, the dtype dispatch, and the custom-op
//! glue ([`NormOp`], turned into candle's `CustomOp1/2/3` by [`Norm`] and run by [`apply`]).

use std::sync::{Arc, Mutex};

use candle_core::{
    bail, CpuStorage, CustomOp1, CustomOp2, CustomOp3, Device, Layout, Result, Shape, Tensor,
    WithDType,
};

#[cfg(feature = "candle-cuda")]
use super::cuda::CudaElem;
use crate::{DType, Element};

/// A warpnorm error as a candle error (the message is warpnorm's).
pub(crate) fn wrap(e: crate::Error) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

/// warpnorm's dtype of a candle dtype: f32, f16 and bf16 are supported.
pub(crate) fn wn_dtype(what: &str, d: candle_core::DType) -> candle_core::Result<DType> {
    Ok(match d {
        candle_core::DType::F32 => DType::F32,
        candle_core::DType::F16 => DType::F16,
        candle_core::DType::BF16 => DType::BF16,
        other => bail!("warpnorm: {what} has dtype {other:?}; f32, f16 and bf16 are supported"),
    })
}

/// The parameter dtype of a call: that of the given parameter tensors (which must agree, and
/// be f32 or the activation dtype); the activation dtype when there are none.
pub(crate) fn param_dtype(
    op: &str,
    x: DType,
    params: &[(&str, Option<&Tensor>)],
) -> candle_core::Result<DType> {
    let mut found: Option<(&str, DType)> = None;
    for (name, t) in params {
        let Some(t) = t else { continue };
        let d = wn_dtype(name, t.dtype())?;
        match found {
            None => found = Some((name, d)),
            Some((first, fd)) if fd != d => {
                bail!(
                    "warpnorm {op}: {first} is {fd} but {name} is {d}; parameters share one dtype"
                )
            }
            _ => {}
        }
    }
    let p = found.map_or(x, |(_, d)| d);
    if p != x && p != DType::F32 {
        bail!("warpnorm {op}: parameters of {p} with activations of {x}: parameters are f32 or the activation dtype");
    }
    Ok(p)
}

/// A parameter must be a 1-D tensor of `len` elements on the input's device.
pub(crate) fn check_param(
    op: &str,
    name: &str,
    t: Option<&Tensor>,
    len: usize,
    device: &Device,
) -> candle_core::Result<()> {
    if let Some(t) = t {
        if t.dims() != [len] {
            bail!(
                "warpnorm {op}: {name} has shape {:?}, expected [{len}]",
                t.dims()
            );
        }
        if !t.device().same_device(device) {
            bail!(
                "warpnorm {op}: {name} is on {:?}, the input on {device:?}",
                t.device().location()
            );
        }
    }
    Ok(())
}

/// The elements of a CPU storage that a contiguous layout covers.
pub(crate) fn cpu_slice<'a, T: WithDType>(
    what: &str,
    s: &'a CpuStorage,
    l: &Layout,
) -> candle_core::Result<&'a [T]> {
    let data = s.as_slice::<T>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => bail!("warpnorm: {what} is not contiguous (call .contiguous() first)"),
    }
}

/// Values a forward pass leaves for its backward pass and for the caller (BatchNorm's
/// updated running statistics), shared between the custom op and the function that applied it.
pub(crate) type Stash<S> = Arc<Mutex<Option<S>>>;

/// Takes a copy of the stashed value (the backward may run more than once).
pub(crate) fn stashed<S: Clone>(stash: &Stash<S>, op: &str) -> candle_core::Result<S> {
    match stash.lock() {
        Ok(g) => match g.as_ref() {
            Some(s) => Ok(s.clone()),
            None => bail!("warpnorm {op}: backward before forward"),
        },
        Err(_) => bail!("warpnorm {op}: a previous call panicked"),
    }
}

/// Stores a value in the stash.
pub(crate) fn stash<S>(stash: &Stash<S>, value: S) -> candle_core::Result<()> {
    match stash.lock() {
        Ok(mut g) => {
            *g = Some(value);
            Ok(())
        }
        Err(_) => bail!("warpnorm: a previous call panicked"),
    }
}

/// An element type both warpnorm and candle know: f32, f16, bf16.
pub(crate) trait Elem: Element + WithDType {}
impl<T: Element + WithDType> Elem for T {}

/// Calls `$f::<T, P>($args)` (`$f` a function or a path such as `O::cpu_forward`) for the
/// activation dtype `$t` and parameter dtype `$p` (P is T or f32).
macro_rules! dispatch {
    ($op:expr, $t:expr, $p:expr, $($f:ident)::+ ( $($arg:expr),* $(,)? )) => {{
        use $crate::DType as D;
        match ($t, $p) {
            (D::F32, D::F32) => $($f)::+::<f32, f32>($($arg),*),
            (D::F16, D::F16) => $($f)::+::<half::f16, half::f16>($($arg),*),
            (D::F16, D::F32) => $($f)::+::<half::f16, f32>($($arg),*),
            (D::BF16, D::BF16) => $($f)::+::<half::bf16, half::bf16>($($arg),*),
            (D::BF16, D::F32) => $($f)::+::<half::bf16, f32>($($arg),*),
            (t, p) => candle_core::bail!(
                "warpnorm {}: parameters of {p} with activations of {t}: parameters are f32 or the activation dtype",
                $op
            ),
        }
    }};
}

pub(crate) use dispatch;

/// A storage and its layout, as candle hands them to a custom op.
pub(crate) type Arg<'a, S> = (&'a S, &'a Layout);

/// The gradients of x, weight and bias (the last two when the op computes them).
pub(crate) type Grads = (Tensor, Option<Tensor>, Option<Tensor>);

/// A normalization with up to three inputs (x, weight, bias), written once per op and turned
/// into candle's `CustomOp1/2/3` by [`Norm`]: the op gives its dtypes, its stash and its typed
/// forward and backward per device; [`Norm`] does the dtype dispatch, the device dispatch and
/// the plumbing of candle's traits. Run one with [`apply`].
pub(crate) trait NormOp: Send + Sync {
    /// candle's name of the op.
    const NAME: &'static str;
    /// The op's name in messages ("LayerNorm").
    const OP: &'static str;
    /// What a forward pass leaves for its backward.
    type Saved: Clone;

    /// Activation and parameter dtypes.
    fn dtypes(&self) -> (DType, DType);

    /// Where the forward pass leaves [`Self::Saved`].
    fn saved(&self) -> &Stash<Self::Saved>;

    /// The forward pass on CPU storage (`w`, `b`: the parameters the call had).
    fn cpu_forward<T: Elem, P: Elem>(
        &self,
        x: Arg<CpuStorage>,
        w: Option<Arg<CpuStorage>>,
        b: Option<Arg<CpuStorage>>,
    ) -> Result<(CpuStorage, Shape)>;

    /// The backward pass on CPU tensors (contiguous).
    fn cpu_backward<T: Elem, P: Elem>(
        &self,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
        saved: &Self::Saved,
    ) -> Result<Grads>;

    /// The forward pass on CUDA storage.
    #[cfg(feature = "candle-cuda")]
    fn cuda_forward<T: CudaElem, P: CudaElem>(
        &self,
        x: Arg<candle_core::CudaStorage>,
        w: Option<Arg<candle_core::CudaStorage>>,
        b: Option<Arg<candle_core::CudaStorage>>,
    ) -> Result<(candle_core::CudaStorage, Shape)>;

    /// The backward pass on CUDA tensors (contiguous).
    #[cfg(feature = "candle-cuda")]
    fn cuda_backward<T: CudaElem, P: CudaElem>(
        &self,
        x: &Tensor,
        w: Option<&Tensor>,
        dy: &Tensor,
        saved: &Self::Saved,
    ) -> Result<Grads>;
}

/// A [`NormOp`] as candle's `CustomOp1` (x), `CustomOp2` (x, weight) and `CustomOp3` (x,
/// weight, bias).
pub(crate) struct Norm<O>(pub(crate) O);

impl<O: NormOp> Norm<O> {
    fn cpu(
        &self,
        x: Arg<CpuStorage>,
        w: Option<Arg<CpuStorage>>,
        b: Option<Arg<CpuStorage>>,
    ) -> Result<(CpuStorage, Shape)> {
        let (t, p) = self.0.dtypes();
        let op = &self.0;
        dispatch!(O::OP, t, p, O::cpu_forward(op, x, w, b))
    }

    #[cfg(feature = "candle-cuda")]
    fn cuda(
        &self,
        x: Arg<candle_core::CudaStorage>,
        w: Option<Arg<candle_core::CudaStorage>>,
        b: Option<Arg<candle_core::CudaStorage>>,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (t, p) = self.0.dtypes();
        let op = &self.0;
        dispatch!(O::OP, t, p, O::cuda_forward(op, x, w, b))
    }

    /// dx, and dweight / dbias as the op computes them (candle keeps those of the inputs the
    /// call had).
    fn backward(&self, x: &Tensor, w: Option<&Tensor>, dy: &Tensor) -> Result<Grads> {
        let saved = stashed(self.0.saved(), O::OP)?;
        let (t, p) = self.0.dtypes();
        let op = &self.0;
        // Gradients arriving from candle's graph may be broadcast views (zero strides).
        let dy = dy.contiguous()?;
        let x = x.contiguous()?;
        let w = w.map(|w| w.contiguous()).transpose()?;
        let w = w.as_ref();
        match x.device() {
            Device::Cpu => dispatch!(O::OP, t, p, O::cpu_backward(op, &x, w, &dy, &saved)),
            #[cfg(feature = "candle-cuda")]
            Device::Cuda(_) => dispatch!(O::OP, t, p, O::cuda_backward(op, &x, w, &dy, &saved)),
            #[allow(unreachable_patterns)]
            d => bail!(
                "warpnorm {}: no implementation on {:?}",
                O::OP,
                d.location()
            ),
        }
    }
}

impl<O: NormOp> CustomOp1 for Norm<O> {
    fn name(&self) -> &'static str {
        O::NAME
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

impl<O: NormOp> CustomOp2 for Norm<O> {
    fn name(&self) -> &'static str {
        O::NAME
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

impl<O: NormOp> CustomOp3 for Norm<O> {
    fn name(&self) -> &'static str {
        O::NAME
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

/// Applies `op` to `x` and the parameters given (a bias needs a weight), each made contiguous
/// first when it is not (a copy): x alone as `CustomOp1`, with a weight as `CustomOp2`, with
/// both as `CustomOp3`.
pub(crate) fn apply<O: NormOp + 'static>(
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    op: O,
) -> Result<Tensor> {
    let x = x.contiguous()?;
    let op = Norm(op);
    match (w, b) {
        (None, None) => x.apply_op1(op),
        (Some(w), None) => x.apply_op2(&w.contiguous()?, op),
        (Some(w), Some(b)) => x.apply_op3(&w.contiguous()?, &b.contiguous()?, op),
        (None, Some(_)) => bail!("warpnorm {}: a bias needs a weight", O::OP),
    }
}
