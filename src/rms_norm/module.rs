//! The `RmsNorm` module type: owns the weight on the device and offers allocating
//! forward/backward conveniences over the functional ops, and the allocation-free
//! `forward_into` / `backward_into` / `forward_in_place` / `infer` with a cached workspace.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr};

use crate::buffers::{alloc_filled, alloc_uninit, alloc_zeros, InOut};
use crate::check::check_eps;
use crate::device::DeviceProps;
use crate::profile::{self, Op};
use crate::runtime::GpuExecutor;
use crate::state::{ModuleKind, Parts, PartsMut};
use crate::{Element, Error, Result};

use super::desc::{Problem, RmsNormDesc, DEFAULT_EPS};
use super::ops::{
    backward_checked, backward_residual_checked, forward_checked, forward_residual_checked,
    Backward, BackwardResidualBuffers, Forward, ForwardResidualBuffers, ResidualIo,
};
use super::plan::{workspace_bytes_checked, workspace_bytes_residual_checked, Direction};

/// What [`RmsNorm::forward`] returns.
pub struct ForwardOutput<T> {
    /// y, same shape as x.
    pub y: CudaSlice<T>,
    /// What the backward needs.
    pub saved: SavedStats,
}

/// What a forward saves for its backward.
pub struct SavedStats {
    /// Saved 1 / sqrt(mean(x^2) + eps) (f32), one per row.
    pub rstd: CudaSlice<f32>,
}

/// The caller's buffers that [`RmsNorm::backward_into`] writes.
pub struct GradientBuffers<'a, T, P> {
    /// Gradient of x, rows * cols elements.
    pub dx: CudaViewMut<'a, T>,
    /// Gradient of the weight, cols elements: given exactly when the module has a weight.
    pub dweight: Option<CudaViewMut<'a, P>>,
}

/// Backward results.
pub struct Gradients<T, P> {
    /// Gradient of x.
    pub dx: CudaSlice<T>,
    /// Gradient of the weight (when the module has one).
    pub dweight: Option<CudaSlice<P>>,
}

impl<T, P> Gradients<T, P> {
    /// The gradients present as (name, view) pairs under the parameters' names (`weight`),
    /// in the order of the module's `named_parameters()`.
    pub fn named(&self) -> Vec<(&'static str, CudaView<'_, P>)> {
        self.dweight
            .as_ref()
            .map(|g| ("weight", g.as_view()))
            .into_iter()
            .collect()
    }
}

/// An RMSNorm over the trailing dims `normalized_shape`, with a weight of type `P` on the
/// device (initialized to 1, as PyTorch) unless built without one. Inputs may be of any
/// activation type T with P == T or P == f32.
pub struct RmsNorm<P: Element> {
    stream: Arc<CudaStream>,
    normalized_shape: Vec<usize>,
    cols: usize,
    eps: f32,
    weight: Option<CudaSlice<P>>,
    /// The workspace of the `_into`, in-place and inference calls: grown when a call needs
    /// more, reused after.
    workspace: Option<CudaSlice<u8>>,
}

fn driver(during: &str) -> impl FnOnce(cudarc::driver::DriverError) -> Error + '_ {
    move |source| Error::Driver {
        during: during.to_string(),
        source,
    }
}

impl<P: Element> RmsNorm<P> {
    /// An RMSNorm with a fresh weight (1) when `elementwise_affine`, on `stream`'s device;
    /// `eps` `None` is [`DEFAULT_EPS`] (PyTorch's `eps=None`).
    pub fn new(
        stream: &Arc<CudaStream>,
        normalized_shape: &[usize],
        elementwise_affine: bool,
        eps: Option<f32>,
    ) -> Result<RmsNorm<P>> {
        let d = RmsNormDesc::new(
            normalized_shape,
            normalized_shape,
            P::DTYPE,
            P::DTYPE,
            elementwise_affine,
            eps,
        )?;
        let weight = if elementwise_affine {
            Some(
                alloc_filled(stream, d.cols, P::from_f64(1.0))
                    .map_err(driver("uploading weight"))?,
            )
        } else {
            None
        };
        Ok(RmsNorm {
            stream: stream.clone(),
            normalized_shape: normalized_shape.to_vec(),
            cols: d.cols,
            eps: eps.unwrap_or(DEFAULT_EPS),
            weight,
            workspace: None,
        })
    }

    /// The normalized shape.
    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }

    /// True when the module has a weight.
    pub fn elementwise_affine(&self) -> bool {
        self.weight.is_some()
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

    /// A device view of the weight (`None` without one), to update in place, e.g. by an
    /// optimizer step on the module's stream.
    pub fn params_mut(&mut self) -> Option<CudaViewMut<'_, P>> {
        self.weight.as_mut().map(|w| w.as_view_mut())
    }

    /// The weight, if the module has one.
    pub fn weight(&self) -> Option<&CudaSlice<P>> {
        self.weight.as_ref()
    }

    /// The state buffers under PyTorch's names, for the state methods (`src/state.rs`).
    pub(crate) fn state_parts(&self) -> Parts<'_, P> {
        Parts {
            kind: ModuleKind::RmsNorm,
            stream: &self.stream,
            shape: self.normalized_shape.clone(),
            values: [self.weight.as_ref(), None, None, None],
            count: None,
        }
    }

    /// [`RmsNorm::state_parts`], mutable.
    pub(crate) fn state_parts_mut(&mut self) -> PartsMut<'_, P> {
        PartsMut {
            kind: ModuleKind::RmsNorm,
            stream: &self.stream,
            shape: self.normalized_shape.clone(),
            values: [self.weight.as_mut(), None, None, None],
            count: None,
        }
    }

    /// The problem description for an input of shape `x_shape` and activation type T.
    pub fn desc<T: Element>(&self, x_shape: &[usize]) -> Result<RmsNormDesc> {
        RmsNormDesc::new(
            x_shape,
            &self.normalized_shape,
            T::DTYPE,
            P::DTYPE,
            self.weight.is_some(),
            Some(self.eps),
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
        // Every element is written by the kernels before it can be read.
        alloc_uninit::<E>(&self.stream, n).map_err(driver(what))
    }

    /// Forward on `x` (shape `x_shape`), allocating y, rstd and the workspace on the module's
    /// stream. Asynchronous.
    pub fn forward<T: Element>(
        &self,
        x: &CudaView<'_, T>,
        x_shape: &[usize],
    ) -> Result<ForwardOutput<T>> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::RmsNormModuleForward, &problem);
        let d = *problem.desc();
        let mut exec = GpuExecutor::new(&self.stream)?;
        let ws_bytes = workspace_bytes_checked(&problem, Direction::Forward, exec.props())?;
        let mut y = self.alloc::<T>(d.rows * d.cols, "allocating y")?;
        let rstd = self.alloc::<f32>(d.rows, "allocating rstd")?;
        let mut ws = self.workspace(ws_bytes)?;
        let mut saved = SavedStats { rstd };
        let io = InOut::Apart(x.slice(..), y.as_view_mut());
        let call = forward_call(io, &self.weight, Some(&mut saved), ws.as_mut());
        forward_checked(&mut exec, &problem, call)?;
        Ok(ForwardOutput { y, saved })
    }

    /// Backward from the forward's input `x`, the output gradient `dy` and the forward's saved
    /// rstd, allocating dx, dweight and the workspace. Asynchronous.
    pub fn backward<T: Element>(
        &self,
        x: &CudaView<'_, T>,
        dy: &CudaView<'_, T>,
        x_shape: &[usize],
        saved: &SavedStats,
    ) -> Result<Gradients<T, P>> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::RmsNormModuleBackward, &problem);
        let d = *problem.desc();
        let mut exec = GpuExecutor::new(&self.stream)?;
        let ws_bytes = workspace_bytes_checked(&problem, Direction::Backward, exec.props())?;
        let mut dx = self.alloc::<T>(d.rows * d.cols, "allocating dx")?;
        let mut dweight = match self.weight.is_some() {
            true => Some(self.alloc::<P>(self.cols, "allocating dweight")?),
            false => None,
        };
        let mut ws = self.workspace(ws_bytes)?;
        let grads = GradientBuffers {
            dx: dx.as_view_mut(),
            dweight: dweight.as_mut().map(|g| g.as_view_mut()),
        };
        let call = backward_call(x, dy, saved, &self.weight, grads, ws.as_mut());
        backward_checked(&mut exec, &problem, call)?;
        Ok(Gradients { dx, dweight })
    }

    /// Saved statistics for an input of shape `x_shape` (one f32 rstd per row), to pass to
    /// [`RmsNorm::forward_into`] call after call. Uninitialized until a forward writes them.
    pub fn alloc_saved(&self, x_shape: &[usize]) -> Result<SavedStats> {
        let rows = self.desc::<P>(x_shape)?.rows;
        Ok(SavedStats {
            rstd: self.alloc::<f32>(rows, "allocating rstd")?,
        })
    }

    /// Grows the cached workspace to what `problem` needs in direction `dir` on `props`.
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
    /// (`None` for inference: no rstd is stored). The workspace is the module's, allocated by
    /// the first call that needs it and reused after. Asynchronous.
    pub fn forward_into<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        x_shape: &[usize],
        y: CudaViewMut<'_, T>,
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        self.forward_io(InOut::Apart(x.slice(..), y), x_shape, saved)
    }

    /// [`RmsNorm::forward_into`] in place: `xy` holds x (shape `x_shape`) and is overwritten
    /// by y. Asynchronous.
    pub fn forward_in_place<T: Element>(
        &mut self,
        xy: CudaViewMut<'_, T>,
        x_shape: &[usize],
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        self.forward_io(InOut::InPlace(xy), x_shape, saved)
    }

    /// [`RmsNorm::forward_into`] and [`RmsNorm::forward_in_place`].
    fn forward_io<T: Element>(
        &mut self,
        io: InOut<'_, T>,
        x_shape: &[usize],
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::RmsNormModuleForward, &problem);
        let stream = self.stream.clone();
        let mut exec = GpuExecutor::new(&stream)?;
        self.cached_workspace(&problem, Direction::Forward, exec.props())?;
        let call = forward_call(io, &self.weight, saved, self.workspace.as_mut());
        forward_checked(&mut exec, &problem, call)
    }

    /// Inference: y for `x` (shape `x_shape`), allocated; no rstd is saved or moved, and the
    /// workspace is the module's. Asynchronous.
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
    /// `dy` and the forward's saved rstd, writes `grads` (dweight given exactly when the
    /// module has a weight). The workspace is the module's. Asynchronous.
    pub fn backward_into<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        dy: &CudaView<'_, T>,
        x_shape: &[usize],
        saved: &SavedStats,
        grads: GradientBuffers<'_, T, P>,
    ) -> Result<()> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::RmsNormModuleBackward, &problem);
        let stream = self.stream.clone();
        let mut exec = GpuExecutor::new(&stream)?;
        self.cached_workspace(&problem, Direction::Backward, exec.props())?;
        let call = backward_call(x, dy, saved, &self.weight, grads, self.workspace.as_mut());
        backward_checked(&mut exec, &problem, call)
    }

    /// The fused residual add's forward into the caller's buffers (see
    /// [`crate::rms_norm::forward_residual`]): h = x + residual (+ `bias`) into `residual_h`
    /// (apart, or over the residual), y = RMSNorm(h) into `y`, and rstd into `saved` when
    /// given (`None` for inference). The workspace is the module's, as in
    /// [`RmsNorm::forward_into`]. Asynchronous.
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
        let _range = profile::range(Op::RmsNormModuleForward, &problem);
        let stream = self.stream.clone();
        let mut exec = GpuExecutor::new(&stream)?;
        self.cached_workspace(&problem, Direction::Forward, exec.props())?;
        let b = ForwardResidualBuffers {
            x: x.slice(..),
            residual_h,
            bias: bias.map(|b| b.slice(..)),
            y,
            weight: self.weight.as_ref().map(|w| w.as_view()),
            rstd: saved.map(|s| s.rstd.as_view_mut()),
            workspace: self.workspace.as_mut().map(|w| w.as_view_mut()),
        };
        forward_residual_checked(&mut exec, &problem, b)
    }

    /// The fused residual add's backward into the caller's buffers (see
    /// [`crate::rms_norm::backward_residual`]): from h as the forward wrote it, dy and the
    /// forward's `saved` rstd, dx = RMSNorm's dx + dh into `dh_dx` (apart, or over dh), and
    /// `dweight` (given exactly when the module has a weight), and the gradient of the
    /// forward's bias into `dbias` when given (the column sum of dx). The workspace is the
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
        dweight: Option<CudaViewMut<'_, P>>,
        dbias: Option<CudaViewMut<'_, P>>,
    ) -> Result<()> {
        let problem = self.desc::<T>(x_shape)?.check()?;
        let _range = profile::range(Op::RmsNormModuleBackward, &problem);
        let stream = self.stream.clone();
        let mut exec = GpuExecutor::new(&stream)?;
        let need = workspace_bytes_residual_checked(&problem, dbias.is_some(), exec.props())?;
        self.grow_workspace(need)?;
        let b = BackwardResidualBuffers {
            h: h.slice(..),
            dy: dy.slice(..),
            dh_dx,
            rstd: saved.rstd.as_view(),
            weight: self.weight.as_ref().map(|w| w.as_view()),
            dweight,
            dbias,
            workspace: self.workspace.as_mut().map(|w| w.as_view_mut()),
        };
        backward_residual_checked(&mut exec, &problem, b)
    }
}

/// A forward call over the module's weight, `saved` (`None`: no rstd stored) and workspace.
fn forward_call<'a, T, P: DeviceRepr>(
    io: InOut<'a, T>,
    weight: &'a Option<CudaSlice<P>>,
    saved: Option<&'a mut SavedStats>,
    workspace: Option<&'a mut CudaSlice<u8>>,
) -> Forward<'a, T, P> {
    Forward {
        io,
        weight: weight.as_ref().map(|w| w.as_view()),
        rstd: saved.map(|s| s.rstd.as_view_mut()),
        workspace: workspace.map(|w| w.as_view_mut()),
    }
}

/// A backward call from the forward's `x` and `saved`, over the module's weight and
/// workspace, into `grads`.
fn backward_call<'a, T, P: DeviceRepr>(
    x: &'a CudaView<'_, T>,
    dy: &'a CudaView<'_, T>,
    saved: &'a SavedStats,
    weight: &'a Option<CudaSlice<P>>,
    grads: GradientBuffers<'a, T, P>,
    workspace: Option<&'a mut CudaSlice<u8>>,
) -> Backward<'a, T, P> {
    Backward {
        x: x.slice(..),
        grad: InOut::Apart(dy.slice(..), grads.dx),
        rstd: saved.rstd.as_view(),
        weight: weight.as_ref().map(|w| w.as_view()),
        dweight: grads.dweight,
        workspace: workspace.map(|w| w.as_view_mut()),
    }
}
