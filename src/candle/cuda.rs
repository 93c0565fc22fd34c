//! The CUDA path (feature `candle-cuda`): warpnorm's functional ops on candle's stream, reading
//! and writing candle's `CudaStorage` slices.
//!
//! Inputs are views of candle's slices at their layout's offset (the ops make them contiguous
//! first); outputs and saved statistics are new slices on candle's stream, wrapped as candle
//! storage. Everything runs on candle's stream, in order with candle's own kernels, with no
//! host synchronization.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::cuda::CudaDType;
use candle_core::op::BackpropOp;
use candle_core::{bail, CudaDevice, CudaStorage, Layout, Result, Shape, Storage, Tensor};
use cudarc::driver::{CudaSlice, CudaStream, CudaView, DeviceRepr, ValidAsZeroBits};

use super::common::{stash, wrap, Elem, Stash};
use crate::batch_norm::{self as bn, BatchNormDesc};
use crate::layer_norm::{self as ln, LayerNormDesc};

/// An element type of both libraries that candle's CUDA storage holds.
pub(crate) trait CudaElem: Elem + CudaDType + DeviceRepr + ValidAsZeroBits {}
impl<T: Elem + CudaDType + DeviceRepr + ValidAsZeroBits> CudaElem for T {}

fn driver(during: &str) -> impl FnOnce(cudarc::driver::DriverError) -> candle_core::Error + '_ {
    move |e| {
        wrap(crate::Error::Driver {
            during: during.into(),
            source: e,
        })
    }
}

/// The elements of candle's slice that a contiguous layout covers.
pub(super) fn view<'a, T: CudaElem>(
    what: &str,
    s: &'a CudaStorage,
    l: &Layout,
) -> Result<CudaView<'a, T>> {
    let slice = s.as_cuda_slice::<T>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(slice.slice(a..b)),
        None => bail!("warpnorm: {what} is not contiguous (call .contiguous() first)"),
    }
}

/// A zeroed slice of `n` elements on candle's stream.
pub(super) fn alloc<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    n: usize,
) -> Result<CudaSlice<T>> {
    stream
        .alloc_zeros::<T>(n)
        .map_err(driver("allocating an output"))
}

/// A workspace of `bytes` (None when 0).
pub(super) fn workspace(stream: &Arc<CudaStream>, bytes: usize) -> Result<Option<CudaSlice<u8>>> {
    Ok(if bytes == 0 {
        None
    } else {
        Some(alloc::<u8>(stream, bytes)?)
    })
}

/// A candle tensor (no autograd history) owning a slice.
pub(super) fn tensor<T: CudaElem>(
    slice: CudaSlice<T>,
    shape: impl Into<Shape>,
    dev: &CudaDevice,
) -> Tensor {
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone()));
    Tensor::from_storage(storage, shape, BackpropOp::none(), false)
}

/// Runs `f` with the CUDA storage and layout of `t`.
pub(super) fn with_cuda<R>(
    t: &Tensor,
    what: &str,
    f: impl FnOnce(&CudaStorage, &Layout) -> Result<R>,
) -> Result<R> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        Storage::Cuda(c) => f(c, l),
        _ => bail!("warpnorm: {what} is not on a CUDA device"),
    }
}

pub(crate) fn ln_forward<T: CudaElem, P: CudaElem>(
    saved: &Stash<super::layer_norm::Saved>,
    desc: &LayerNormDesc,
    x: (&CudaStorage, &Layout),
    w: Option<(&CudaStorage, &Layout)>,
    b: Option<(&CudaStorage, &Layout)>,
) -> Result<(CudaStorage, Shape)> {
    let dev = x.0.device();
    let stream = dev.cuda_stream();
    let n = desc.rows * desc.cols;
    let mut y = alloc::<T>(&stream, n)?;
    let mut mean = alloc::<f32>(&stream, desc.rows)?;
    let mut rstd = alloc::<f32>(&stream, desc.rows)?;
    let mut mean_lo = alloc::<f32>(&stream, desc.rows)?;
    let mut ws = workspace(
        &stream,
        ln::forward_workspace_bytes(&stream, desc).map_err(wrap)?,
    )?;
    ln::forward::<T, P>(
        &stream,
        desc,
        ln::ForwardBuffers {
            x: view::<T>("x", x.0, x.1)?,
            y: y.as_view_mut(),
            gamma: w.map(|(s, l)| view::<P>("weight", s, l)).transpose()?,
            beta: b.map(|(s, l)| view::<P>("bias", s, l)).transpose()?,
            mean: Some(mean.as_view_mut()),
            rstd: Some(rstd.as_view_mut()),
            mean_lo: Some(mean_lo.as_view_mut()),
            workspace: ws.as_mut().map(|w| w.as_view_mut()),
        },
    )
    .map_err(wrap)?;
    stash(
        saved,
        (
            tensor(mean, desc.rows, dev),
            tensor(rstd, desc.rows, dev),
            tensor(mean_lo, desc.rows, dev),
        ),
    )?;
    Ok((
        CudaStorage::wrap_cuda_slice(y, dev.clone()),
        x.1.shape().clone(),
    ))
}

pub(crate) fn ln_backward<T: CudaElem, P: CudaElem>(
    desc: &LayerNormDesc,
    x: &Tensor,
    w: Option<&Tensor>,
    dy: &Tensor,
    (mean, rstd, mean_lo): &super::layer_norm::Saved,
) -> Result<(Tensor, Option<Tensor>, Option<Tensor>)> {
    let (xg, xl) = x.storage_and_layout();
    let Storage::Cuda(xs) = &*xg else {
        bail!("warpnorm LayerNorm: x is not on a CUDA device")
    };
    let dev = xs.device().clone();
    let stream = dev.cuda_stream();
    let n = desc.rows * desc.cols;
    let mut dx = alloc::<T>(&stream, n)?;
    let mut dgamma = match w {
        Some(_) => Some(alloc::<P>(&stream, desc.cols)?),
        None => None,
    };
    let mut dbeta = match desc.affine.has_bias() {
        true => Some(alloc::<P>(&stream, desc.cols)?),
        false => None,
    };
    let mut ws = workspace(
        &stream,
        ln::backward_workspace_bytes(&stream, desc).map_err(wrap)?,
    )?;
    let wg = w.map(|w| w.storage_and_layout());
    let gamma = match &wg {
        Some((g, l)) => match &**g {
            Storage::Cuda(s) => Some(view::<P>("weight", s, l)?),
            _ => bail!("warpnorm LayerNorm: the weight is not on a CUDA device"),
        },
        None => None,
    };
    with_cuda(dy, "dy", |dys, dyl| {
        with_cuda(mean, "mean", |ms, ml| {
            with_cuda(rstd, "rstd", |rs, rl| {
                with_cuda(mean_lo, "mean_lo", |los, lol| {
                    ln::backward::<T, P>(
                        &stream,
                        desc,
                        ln::BackwardBuffers {
                            x: view::<T>("x", xs, xl)?,
                            dy: view::<T>("dy", dys, dyl)?,
                            mean: view::<f32>("mean", ms, ml)?,
                            rstd: view::<f32>("rstd", rs, rl)?,
                            mean_lo: Some(view::<f32>("mean_lo", los, lol)?),
                            gamma,
                            dx: dx.as_view_mut(),
                            dgamma: dgamma.as_mut().map(|d| d.as_view_mut()),
                            dbeta: dbeta.as_mut().map(|d| d.as_view_mut()),
                            workspace: ws.as_mut().map(|w| w.as_view_mut()),
                        },
                    )
                    .map_err(wrap)
                })
            })
        })
    })?;
    let cols = desc.cols;
    Ok((
        tensor(dx, x.shape(), &dev),
        dgamma.map(|d| tensor(d, cols, &dev)),
        dbeta.map(|d| tensor(d, cols, &dev)),
    ))
}

pub(crate) fn bn_forward<T: CudaElem, P: CudaElem>(
    saved: &Stash<super::batch_norm::Saved>,
    desc: &BatchNormDesc,
    x: (&CudaStorage, &Layout),
    w: Option<(&CudaStorage, &Layout)>,
    b: Option<(&CudaStorage, &Layout)>,
    running: Option<(&Tensor, &Tensor)>,
) -> Result<(CudaStorage, Shape)> {
    let dev = x.0.device();
    let stream = dev.cuda_stream();
    let numel = x.1.shape().elem_count();
    let c = desc.dims[1];
    let mut y = alloc::<T>(&stream, numel)?;
    let mut save_mean = alloc::<f32>(&stream, c)?;
    let mut save_mean_lo = alloc::<f32>(&stream, c)?;
    let mut save_invstd = alloc::<f32>(&stream, c)?;
    // The kernels update the running statistics in place: on copies, which become the
    // caller's new running statistics once the forward has succeeded.
    let mut new_running = match running {
        Some((m, v)) => {
            let copy = |t: &Tensor, what: &str| {
                with_cuda(t, what, |s, l| {
                    stream
                        .clone_dtod(&view::<P>(what, s, l)?)
                        .map_err(driver("copying the running statistics"))
                })
            };
            Some((copy(m, "running_mean")?, copy(v, "running_var")?))
        }
        None => None,
    };
    let mut ws = workspace(
        &stream,
        bn::forward_workspace_bytes(&stream, desc).map_err(wrap)?,
    )?;
    let (running_mean, running_var) = match new_running.as_mut() {
        Some((m, v)) => (Some(m.as_view_mut()), Some(v.as_view_mut())),
        None => (None, None),
    };
    bn::forward::<T, P>(
        &stream,
        desc,
        bn::ForwardBuffers {
            x: view::<T>("x", x.0, x.1)?,
            y: y.as_view_mut(),
            gamma: w.map(|(s, l)| view::<P>("weight", s, l)).transpose()?,
            beta: b.map(|(s, l)| view::<P>("bias", s, l)).transpose()?,
            running_mean,
            running_var,
            num_batches_tracked: None,
            save_mean: Some(save_mean.as_view_mut()),
            save_mean_lo: Some(save_mean_lo.as_view_mut()),
            save_invstd: Some(save_invstd.as_view_mut()),
            workspace: ws.as_mut().map(|w| w.as_view_mut()),
        },
    )
    .map_err(wrap)?;
    let running = match new_running {
        Some((m, v)) if desc.mode.batch_stats => Some((tensor(m, c, dev), tensor(v, c, dev))),
        _ => None,
    };
    stash(
        saved,
        super::batch_norm::Saved {
            save_mean: tensor(save_mean, c, dev),
            save_mean_lo: tensor(save_mean_lo, c, dev),
            save_invstd: tensor(save_invstd, c, dev),
            running,
        },
    )?;
    Ok((
        CudaStorage::wrap_cuda_slice(y, dev.clone()),
        x.1.shape().clone(),
    ))
}

pub(crate) fn bn_backward<T: CudaElem, P: CudaElem>(
    desc: &BatchNormDesc,
    x: &Tensor,
    w: Option<&Tensor>,
    dy: &Tensor,
    saved: &super::batch_norm::Saved,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (xg, xl) = x.storage_and_layout();
    let Storage::Cuda(xs) = &*xg else {
        bail!("warpnorm BatchNorm: x is not on a CUDA device")
    };
    let dev = xs.device().clone();
    let stream = dev.cuda_stream();
    let c = desc.dims[1];
    let mut dx = alloc::<T>(&stream, x.elem_count())?;
    let mut dgamma = alloc::<P>(&stream, c)?;
    let mut dbeta = alloc::<P>(&stream, c)?;
    let mut ws = workspace(
        &stream,
        bn::backward_workspace_bytes(&stream, desc).map_err(wrap)?,
    )?;
    let wg = w.map(|w| w.storage_and_layout());
    let gamma = match &wg {
        Some((g, l)) => match &**g {
            Storage::Cuda(s) => Some(view::<P>("weight", s, l)?),
            _ => bail!("warpnorm BatchNorm: the weight is not on a CUDA device"),
        },
        None => None,
    };
    with_cuda(dy, "dy", |dys, dyl| {
        with_cuda(&saved.save_mean, "save_mean", |ms, ml| {
            with_cuda(&saved.save_mean_lo, "save_mean_lo", |los, lol| {
                with_cuda(&saved.save_invstd, "save_invstd", |is, il| {
                    bn::backward::<T, P>(
                        &stream,
                        desc,
                        bn::BackwardBuffers {
                            x: view::<T>("x", xs, xl)?,
                            dy: view::<T>("dy", dys, dyl)?,
                            save_mean: view::<f32>("save_mean", ms, ml)?,
                            save_mean_lo: Some(view::<f32>("save_mean_lo", los, lol)?),
                            save_invstd: view::<f32>("save_invstd", is, il)?,
                            gamma,
                            dx: dx.as_view_mut(),
                            dgamma: Some(dgamma.as_view_mut()),
                            dbeta: Some(dbeta.as_view_mut()),
                            workspace: ws.as_mut().map(|w| w.as_view_mut()),
                        },
                    )
                    .map_err(wrap)
                })
            })
        })
    })?;
    Ok((
        tensor(dx, x.shape(), &dev),
        tensor(dgamma, c, &dev),
        tensor(dbeta, c, &dev),
    ))
}
