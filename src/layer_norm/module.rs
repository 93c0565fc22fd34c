//! The `LayerNorm` module type: owns gamma/beta on the device and offers allocating
//! forward/backward conveniences over the functional ops.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr};

use crate::buffers::{alloc_filled, alloc_uninit, alloc_zeros, InOut};
use crate::check::check_eps;
use crate::state::{ModuleKind, Parts, PartsMut};
use crate::{Element, Error, Result};

use super::desc::Problem;
use super::desc::{Affine, LayerNormDesc};
use super::ops::{
    backward_checked, backward_residual_checked, forward_checked, forward_residual_checked,
    Backward, BackwardResidualBuffers, Forward, ForwardResidualBuffers, ResidualIo,
};
use super::plan::{workspace_bytes_checked, workspace_bytes_residual_checked, Direction};
use crate::device::DeviceProps;
use crate::profile::{self, Op};
use crate::runtime::GpuExecutor;

/// What [`LayerNorm::forward`] returns.
pub struct ForwardOutput<T> {
    /// y, same shape as x.
    pub y: CudaSlice<T>,
    /// What the backward needs.
    pub saved: SavedStats,
}

/// What a forward saves for its backward.
pub struct SavedStats {
    /// Saved mean (f32), one per row.
    pub mean: CudaSlice<f32>,
    /// Saved 1 / sqrt(var + eps) (f32), one per row.
    pub rstd: CudaSlice<f32>,
    /// The saved mean's rounding error (f32), one per row: the row mean is `mean + mean_lo`
    /// (see [`crate::layer_norm::ForwardBuffers::mean_lo`]).
    pub mean_lo: CudaSlice<f32>,
}

/// The caller's buffers that [`LayerNorm::backward_into`] writes (views of the caller's
/// `CudaSlice`s, e.g. slices of one flat gradient buffer).
pub struct GradientBuffers<'a, T, P> {
    /// Gradient of x, rows * cols elements.
    pub dx: CudaViewMut<'a, T>,
    /// Gradient of gamma, cols elements: given exactly when the module has a weight.
    pub dgamma: Option<CudaViewMut<'a, P>>,
    /// Gradient of beta, cols elements: given exactly when the module has a bias.
    pub dbeta: Option<CudaViewMut<'a, P>>,
}

/// Backward results.
pub struct Gradients<T, P> {
    /// Gradient of x.
    pub dx: CudaSlice<T>,
    /// Gradient of gamma (when the module has a weight).
    pub dgamma: Option<CudaSlice<P>>,
    /// Gradient of beta (when the module has a bias).
    pub dbeta: Option<CudaSlice<P>>,
}

/// A LayerNorm over the trailing dims `normalized_shape`, with parameters of type `P` on the
/// device (gamma initialized to 1, beta to 0, as PyTorch). Inputs may be of any activation
/// type T with P == T or P == f32.
pub struct LayerNorm<P: Element> {
    stream: Arc<CudaStream>,
    normalized_shape: Vec<usize>,
    cols: usize,
    affine: Affine,
    eps: f32,
    gamma: Option<CudaSlice<P>>,
    beta: Option<CudaSlice<P>>,
    /// The workspace of the `_into`, in-place and inference calls: grown when a call needs
    /// more, reused after (so that a training step allocates nothing after the first call).
    workspace: Option<CudaSlice<u8>>,
}

fn driver(during: &str) -> impl FnOnce(cudarc::driver::DriverError) -> Error + '_ {
    move |source| Error::Driver {
        during: during.to_string(),
        source,
    }
}

impl<P: Element> LayerNorm<P> {
    /// A LayerNorm with fresh parameters (gamma = 1, beta = 0) on `stream`'s device.
    pub fn new(
        stream: &Arc<CudaStream>,
        normalized_shape: &[usize],
        affine: Affine,
        eps: f32,
    ) -> Result<LayerNorm<P>> {
        // Validates normalized_shape and eps (rows = 1 is a placeholder).
        let d = LayerNormDesc::new(
            normalized_shape,
            normalized_shape,
            P::DTYPE,
            P::DTYPE,
            affine,
            eps,
        )?;
        let upload = |v: f64, what: &str| -> Result<CudaSlice<P>> {
            alloc_filled(stream, d.cols, P::from_f64(v)).map_err(driver(what))
        };
        let gamma = if affine.has_weight() {
            Some(upload(1.0, "uploading gamma")?)
        } else {
            None
        };
        let beta = if affine.has_bias() {
            Some(upload(0.0, "uploading beta")?)
        } else {
            None
        };
        Ok(LayerNorm {
            stream: stream.clone(),
            normalized_shape: normalized_shape.to_vec(),
            cols: d.cols,
            affine,
            eps,
            gamma,
            beta,
            workspace: None,
        })
    }

    /// The normalized shape.
    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }

    /// Which parameters exist.
    pub fn affine(&self) -> Affine {
        self.affine
    }

    /// eps.
    pub fn eps(&self) -> f32 {
        self.eps
    }

    /// Sets eps (finite, >= 0), as PyTorch lets `module.eps` change.
    pub fn set_eps(&mut self, eps: f32) -> Result<()> {
        check_eps(eps)?;
        self.eps = eps;
        Ok(())
    }

    /// Device views of gamma and beta (`None` where the module has no such parameter), to
    /// update in place, e.g. by an optimizer step on the module's stream.
    pub fn params_mut(&mut self) -> (Option<CudaViewMut<'_, P>>, Option<CudaViewMut<'_, P>>) {
        (
            self.gamma.as_mut().map(|g| g.as_view_mut()),
            self.beta.as_mut().map(|b| b.as_view_mut()),
        )
    }

    /// gamma, if the module has a weight.
    pub fn gamma(&self) -> Option<&CudaSlice<P>> {
        self.gamma.as_ref()
    }

    /// beta, if the module has a bias.
    pub fn beta(&self) -> Option<&CudaSlice<P>> {
        self.beta.as_ref()
    }

    /// The state buffers under PyTorch's names, for the state methods (`src/state.rs`).
    pub(crate) fn state_parts(&self) -> Parts<'_, P> {
        Parts {
            kind: ModuleKind::LayerNorm,
            stream: &self.stream,
            shape: self.normalized_shape.clone(),
            values: [self.gamma.as_ref(), self.beta.as_ref(), None, None],
            count: None,
        }
    }

    /// [`LayerNorm::state_parts`], mutable.
    pub(crate) fn state_parts_mut(&mut self) -> PartsMut<'_, P> {
        PartsMut {
            kind: ModuleKind::LayerNorm,
            stream: &self.stream,
            shape: self.normalized_shape.clone(),
            values: [self.gamma.as_mut(), self.beta.as_mut(), None, None],
            count: None,
        }
    }

    /// The problem description for an input of shape `x_shape` and activation type T.
    pub fn desc<T: Element>(&self, x_shape: &[usize]) -> Result<LayerNormDesc> {
        LayerNormDesc::new(
            x_shape,
            &self.normalized_shape,
            T::DTYPE,
            P::DTYPE,
            self.affine,
            self.eps,
        )
    }

    fn workspace(&self, bytes: usize) -> Result<Option<CudaSlice<u8>>> {
        if bytes == 0 {
            return Ok(None);
        }
        alloc_zeros::<u8>(&self.stream, bytes)
            .map(Some)
            .map_err(driver("allocating the workspace"))
    }

    fn alloc<E: Element>(&self, n: usize, what: &str) -> Result<CudaSlice<E>> {
        // Every element is written by the kernels before it can be read (outputs cover
        // exactly the problem's elements).
        alloc_uninit::<E>(&self.stream, n).map_err(driver(what))
    }

    /// Forward on `x` (shape `x_shape`), allocating y, mean, rstd and the workspace on the
    /// module's stream. Asynchronous.
    pub fn forward<T: Element>(
        &self,
        x: &CudaView<'_, T>,
        x_shape: &[usize],
    ) -> Result<ForwardOutput<T>> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::LayerNormModuleForward, &problem);
        let d = *problem.desc();
        let n = d.rows * d.cols;
        let mut exec = GpuExecutor::new(&self.stream)?;
        let ws_bytes = workspace_bytes_checked(&problem, Direction::Forward, exec.props())?;
        let mut y = self.alloc::<T>(n, "allocating y")?;
        let mean = self.alloc::<f32>(d.rows, "allocating mean")?;
        let rstd = self.alloc::<f32>(d.rows, "allocating rstd")?;
        let mean_lo = self.alloc::<f32>(d.rows, "allocating mean_lo")?;
        let mut ws = self.workspace(ws_bytes)?;
        let mut saved = SavedStats {
            mean,
            rstd,
            mean_lo,
        };
        let io = InOut::Apart(x.slice(..), y.as_view_mut());
        let call = forward_call(io, &self.gamma, &self.beta, Some(&mut saved), ws.as_mut());
        forward_checked(&mut exec, &problem, call)?;
        Ok(ForwardOutput { y, saved })
    }

    /// Backward from the forward's input `x`, the output gradient `dy` and the forward's saved
    /// statistics, allocating dx, dgamma, dbeta and the workspace. Asynchronous.
    pub fn backward<T: Element>(
        &self,
        x: &CudaView<'_, T>,
        dy: &CudaView<'_, T>,
        x_shape: &[usize],
        saved: &SavedStats,
    ) -> Result<Gradients<T, P>> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::LayerNormModuleBackward, &problem);
        let d = *problem.desc();
        let n = d.rows * d.cols;
        let mut exec = GpuExecutor::new(&self.stream)?;
        let ws_bytes = workspace_bytes_checked(&problem, Direction::Backward, exec.props())?;
        let mut dx = self.alloc::<T>(n, "allocating dx")?;
        let mut dgamma = match self.affine.has_weight() {
            true => Some(self.alloc::<P>(self.cols, "allocating dgamma")?),
            false => None,
        };
        let mut dbeta = match self.affine.has_bias() {
            true => Some(self.alloc::<P>(self.cols, "allocating dbeta")?),
            false => None,
        };
        let mut ws = self.workspace(ws_bytes)?;
        let grads = GradientBuffers {
            dx: dx.as_view_mut(),
            dgamma: dgamma.as_mut().map(|g| g.as_view_mut()),
            dbeta: dbeta.as_mut().map(|b| b.as_view_mut()),
        };
        let call = backward_call(x, dy, saved, &self.gamma, grads, ws.as_mut());
        backward_checked(&mut exec, &problem, call)?;
        Ok(Gradients { dx, dgamma, dbeta })
    }

    /// Saved statistics for an input of shape `x_shape` (one f32 mean, rstd and mean_lo per
    /// row), to
    /// pass to [`LayerNorm::forward_into`] call after call. Uninitialized until a forward
    /// writes them.
    pub fn alloc_saved(&self, x_shape: &[usize]) -> Result<SavedStats> {
        let rows = self.desc::<P>(x_shape)?.rows;
        Ok(SavedStats {
            mean: self.alloc::<f32>(rows, "allocating mean")?,
            rstd: self.alloc::<f32>(rows, "allocating rstd")?,
            mean_lo: self.alloc::<f32>(rows, "allocating mean_lo")?,
        })
    }

    /// Grows the cached workspace to what `problem` needs in direction `dir` on `props`
    /// (nothing when it needs none, or already has enough: inference never allocates the
    /// backward's workspace, and only the split tier's forward has one).
    fn cached_workspace(
        &mut self,
        problem: &Problem,
        dir: Direction,
        props: &DeviceProps,
    ) -> Result<()> {
        let need = workspace_bytes_checked(problem, dir, props)?;
        self.grow_workspace(need)
    }

    /// Grows the cached workspace to `need` bytes (nothing when it has enough).
    fn grow_workspace(&mut self, need: usize) -> Result<()> {
        if need > 0 && self.workspace.as_ref().is_none_or(|w| w.len() < need) {
            self.workspace = self.workspace(need)?;
        }
        Ok(())
    }

    /// Forward on `x` (shape `x_shape`) into the caller's `y`, and into `saved` when given
    /// (`None` for inference: no statistics are stored). The workspace is the module's,
    /// allocated by the first call that needs it and reused after: a call allocates nothing
    /// once the module has run a problem at least as large. Asynchronous.
    pub fn forward_into<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        x_shape: &[usize],
        y: CudaViewMut<'_, T>,
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        self.forward_io(InOut::Apart(x.slice(..), y), x_shape, saved)
    }

    /// [`LayerNorm::forward_into`] in place: `xy` holds x (shape `x_shape`) and is overwritten
    /// by y. Asynchronous.
    pub fn forward_in_place<T: Element>(
        &mut self,
        xy: CudaViewMut<'_, T>,
        x_shape: &[usize],
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        self.forward_io(InOut::InPlace(xy), x_shape, saved)
    }

    /// [`LayerNorm::forward_into`] and [`LayerNorm::forward_in_place`].
    fn forward_io<T: Element>(
        &mut self,
        io: InOut<'_, T>,
        x_shape: &[usize],
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::LayerNormModuleForward, &problem);
        let stream = self.stream.clone();
        let mut exec = GpuExecutor::new(&stream)?;
        self.cached_workspace(&problem, Direction::Forward, exec.props())?;
        let call = forward_call(io, &self.gamma, &self.beta, saved, self.workspace.as_mut());
        forward_checked(&mut exec, &problem, call)
    }

    /// Inference: y for `x` (shape `x_shape`), allocated; no statistics are saved or moved,
    /// and the workspace is the module's (see [`LayerNorm::forward_into`]). Asynchronous.
    pub fn infer<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        x_shape: &[usize],
    ) -> Result<CudaSlice<T>> {
        let n = self.desc::<T>(x_shape)?.check()?.elements() as usize;
        let mut y = self.alloc::<T>(n, "allocating y")?;
        self.forward_into(x, x_shape, y.as_view_mut(), None)?;
        Ok(y)
    }

    /// Backward into the caller's buffers: from the forward's input `x`, the output gradient
    /// `dy` and the forward's saved statistics, writes `grads` (dgamma / dbeta given exactly
    /// when the module has them). The workspace is the module's, as in
    /// [`LayerNorm::forward_into`]. Asynchronous.
    pub fn backward_into<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        dy: &CudaView<'_, T>,
        x_shape: &[usize],
        saved: &SavedStats,
        grads: GradientBuffers<'_, T, P>,
    ) -> Result<()> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::LayerNormModuleBackward, &problem);
        let stream = self.stream.clone();
        let mut exec = GpuExecutor::new(&stream)?;
        self.cached_workspace(&problem, Direction::Backward, exec.props())?;
        let call = backward_call(x, dy, saved, &self.gamma, grads, self.workspace.as_mut());
        backward_checked(&mut exec, &problem, call)
    }

    /// The fused residual add's forward into the caller's buffers (see
    /// [`crate::layer_norm::forward_residual`]): h = x + residual (+ `bias`) into
    /// `residual_h` (apart, or over the residual), y = LayerNorm(h) into `y`, and the
    /// statistics into `saved` when given (`None` for inference). The workspace is the
    /// module's, as in [`LayerNorm::forward_into`]. Asynchronous.
    pub fn forward_residual_into<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        residual_h: ResidualIo<'_, T>,
        bias: Option<&CudaView<'_, P>>,
        x_shape: &[usize],
        y: CudaViewMut<'_, T>,
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::LayerNormModuleForward, &problem);
        let stream = self.stream.clone();
        let mut exec = GpuExecutor::new(&stream)?;
        self.cached_workspace(&problem, Direction::Forward, exec.props())?;
        let (mean, rstd, mean_lo) = saved_views(saved);
        let b = ForwardResidualBuffers {
            x: x.slice(..),
            residual_h,
            bias: bias.map(|b| b.slice(..)),
            y,
            gamma: self.gamma.as_ref().map(|g| g.as_view()),
            beta: self.beta.as_ref().map(|b| b.as_view()),
            mean,
            rstd,
            mean_lo,
            workspace: self.workspace.as_mut().map(|w| w.as_view_mut()),
        };
        forward_residual_checked(&mut exec, &problem, b)
    }

    /// The fused residual add's backward into the caller's buffers (see
    /// [`crate::layer_norm::backward_residual`]): from h as the forward wrote it, dy and the
    /// forward's `saved` statistics, dx = LayerNorm's dx + dh into `dh_dx` (apart, or over
    /// dh), `dgamma` / `dbeta` (given exactly when the module has them), and the gradient of
    /// the forward's bias into `dbias` when given (the column sum of dx). The workspace is the
    /// module's, grown for the bias gradient's partial rows when `dbias` is given.
    /// Asynchronous.
    #[allow(clippy::too_many_arguments)]
    pub fn backward_residual_into<T: Element>(
        &mut self,
        h: &CudaView<'_, T>,
        dy: &CudaView<'_, T>,
        dh_dx: ResidualIo<'_, T>,
        x_shape: &[usize],
        saved: &SavedStats,
        dgamma: Option<CudaViewMut<'_, P>>,
        dbeta: Option<CudaViewMut<'_, P>>,
        dbias: Option<CudaViewMut<'_, P>>,
    ) -> Result<()> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::LayerNormModuleBackward, &problem);
        let stream = self.stream.clone();
        let mut exec = GpuExecutor::new(&stream)?;
        let need = workspace_bytes_residual_checked(&problem, dbias.is_some(), exec.props())?;
        self.grow_workspace(need)?;
        let b = BackwardResidualBuffers {
            h: h.slice(..),
            dy: dy.slice(..),
            dh_dx,
            mean: saved.mean.as_view(),
            rstd: saved.rstd.as_view(),
            mean_lo: Some(saved.mean_lo.as_view()),
            gamma: self.gamma.as_ref().map(|g| g.as_view()),
            dgamma,
            dbeta,
            dbias,
            workspace: self.workspace.as_mut().map(|w| w.as_view_mut()),
        };
        backward_residual_checked(&mut exec, &problem, b)
    }
}

/// Views of the saved statistics the forward writes (mean, rstd, mean_lo), or none.
type SavedViews<'a> = (
    Option<CudaViewMut<'a, f32>>,
    Option<CudaViewMut<'a, f32>>,
    Option<CudaViewMut<'a, f32>>,
);

fn saved_views(saved: Option<&mut SavedStats>) -> SavedViews<'_> {
    match saved {
        Some(s) => (
            Some(s.mean.as_view_mut()),
            Some(s.rstd.as_view_mut()),
            Some(s.mean_lo.as_view_mut()),
        ),
        None => (None, None, None),
    }
}

/// A forward call over the module's parameters, `saved` (`None`: no statistics stored) and
/// workspace.
fn forward_call<'a, T, P: DeviceRepr>(
    io: InOut<'a, T>,
    gamma: &'a Option<CudaSlice<P>>,
    beta: &'a Option<CudaSlice<P>>,
    saved: Option<&'a mut SavedStats>,
    workspace: Option<&'a mut CudaSlice<u8>>,
) -> Forward<'a, T, P> {
    let (mean, rstd, mean_lo) = saved_views(saved);
    Forward {
        io,
        gamma: gamma.as_ref().map(|g| g.as_view()),
        beta: beta.as_ref().map(|b| b.as_view()),
        mean,
        rstd,
        mean_lo,
        workspace: workspace.map(|w| w.as_view_mut()),
    }
}

/// A backward call from the forward's `x` and `saved`, over the module's gamma and
/// workspace, into `grads`.
fn backward_call<'a, T, P: DeviceRepr>(
    x: &'a CudaView<'_, T>,
    dy: &'a CudaView<'_, T>,
    saved: &'a SavedStats,
    gamma: &'a Option<CudaSlice<P>>,
    grads: GradientBuffers<'a, T, P>,
    workspace: Option<&'a mut CudaSlice<u8>>,
) -> Backward<'a, T, P> {
    Backward {
        x: x.slice(..),
        grad: InOut::Apart(dy.slice(..), grads.dx),
        mean: saved.mean.as_view(),
        rstd: saved.rstd.as_view(),
        mean_lo: Some(saved.mean_lo.as_view()),
        gamma: gamma.as_ref().map(|g| g.as_view()),
        dgamma: grads.dgamma,
        dbeta: grads.dbeta,
        workspace: workspace.map(|w| w.as_view_mut()),
    }
}
