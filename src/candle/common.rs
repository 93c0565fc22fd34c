//! What both ops share: errors, dtypes, storage access, the dtype dispatch.

use std::sync::{Arc, Mutex};

use candle_core::{bail, CpuStorage, Device, Layout, Tensor, WithDType};

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

/// Calls `$f::<T, P>($args)` for the activation dtype `$t` and parameter dtype `$p`
/// (P is T or f32).
macro_rules! dispatch {
    ($op:expr, $t:expr, $p:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        use $crate::DType as D;
        match ($t, $p) {
            (D::F32, D::F32) => $f::<f32, f32>($($arg),*),
            (D::F16, D::F16) => $f::<half::f16, half::f16>($($arg),*),
            (D::F16, D::F32) => $f::<half::f16, f32>($($arg),*),
            (D::BF16, D::BF16) => $f::<half::bf16, half::bf16>($($arg),*),
            (D::BF16, D::F32) => $f::<half::bf16, f32>($($arg),*),
            (t, p) => candle_core::bail!(
                "warpnorm {}: parameters of {p} with activations of {t}: parameters are f32 or the activation dtype",
                $op
            ),
        }
    }};
}
pub(crate) use dispatch;
