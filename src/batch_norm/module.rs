//! The `BatchNorm` module: parameters, running statistics and the batch counter on the device,
//! an explicit train/eval mode, and allocating forward/backward conveniences over the
//! functional ops.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut};

use crate::buffers::{alloc_filled, alloc_uninit, InOut};
use crate::check::check_eps;
use crate::state::{ModuleKind, Parts, PartsMut};
use crate::{Element, Error, Result};

use super::desc::{check_momentum, BatchNormDesc, Layout, Mode, Momentum, Problem};
use super::ops::{backward_checked, forward_checked, Backward, Forward};
use super::plan::{workspace_bytes_checked, Direction};
use crate::device::DeviceProps;
use crate::profile::{self, Op};
use crate::runtime::GpuExecutor;

/// Construction parameters, with PyTorch's defaults from [`BatchNormConfig::new`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormConfig {
    /// Channels (C).
    pub num_features: usize,
    /// Added to the variance (default 1e-5).
    pub eps: f32,
    /// Running statistics update (default `Factor(0.1)`; `Cumulative` is `momentum=None`).
    pub momentum: Momentum,
    /// Learnable gamma (init 1) and beta (init 0) (default true).
    pub affine: bool,
    /// Keep running statistics (default true); without them eval uses batch statistics.
    pub track_running_stats: bool,
}

impl BatchNormConfig {
    /// PyTorch's defaults for `num_features` channels.
    pub fn new(num_features: usize) -> Self {
        BatchNormConfig {
            num_features,
            eps: 1e-5,
            momentum: Momentum::Factor(0.1),
            affine: true,
            track_running_stats: true,
        }
    }
}

/// What [`BatchNorm::forward`] returns.
pub struct ForwardOutput<T> {
    /// The output, like x.
    pub y: CudaSlice<T>,
    /// What the backward needs.
    pub saved: SavedStats,
}

/// What a forward saves for its backward.
pub struct SavedStats {
    /// Per-channel mean used (batch mean rounded to f32, or running mean in eval), f32.
    pub mean: CudaSlice<f32>,
    /// The mean's rounding error, f32: the batch mean is `mean + mean_lo` (0 in eval). Kept
    /// apart so that `mean` stays PyTorch's `save_mean`.
    pub mean_lo: CudaSlice<f32>,
    /// Per-channel 1 / sqrt(var + eps) used, f32.
    pub invstd: CudaSlice<f32>,
    /// True when the forward used the running statistics (eval-mode backward).
    pub frozen: bool,
}

/// The caller's buffers that [`BatchNorm::backward_into`] writes (views of the caller's
/// `CudaSlice`s, e.g. slices of one flat gradient buffer).
pub struct GradientBuffers<'a, T, P> {
    /// Gradient of the input, like x.
    pub dx: CudaViewMut<'a, T>,
    /// Gradient of gamma (C), when wanted (affine only).
    pub dgamma: Option<CudaViewMut<'a, P>>,
    /// Gradient of beta (C), when wanted (affine only).
    pub dbeta: Option<CudaViewMut<'a, P>>,
}

/// Gradients returned by [`BatchNorm::backward`].
pub struct Gradients<T, P> {
    /// Gradient of the input.
    pub dx: CudaSlice<T>,
    /// Gradient of gamma (affine only).
    pub dgamma: Option<CudaSlice<P>>,
    /// Gradient of beta (affine only).
    pub dbeta: Option<CudaSlice<P>>,
}

/// PyTorch's `BatchNorm1d/2d/3d` on the device, with parameters and running statistics of `P`
/// (f32 by default; activations may be f32, f16 or bf16 when `P` is f32, else `P`).
///
/// `num_batches_tracked` is a device i64 incremented by the kernels, so training steps need no
/// host synchronization. A rejected call changes no statistic.
pub struct BatchNorm<P: Element = f32> {
    stream: Arc<CudaStream>,
    config: BatchNormConfig,
    training: bool,
    gamma: Option<CudaSlice<P>>,
    beta: Option<CudaSlice<P>>,
    running_mean: Option<CudaSlice<P>>,
    running_var: Option<CudaSlice<P>>,
    num_batches_tracked: Option<CudaSlice<i64>>,
    workspace: Option<CudaSlice<u8>>,
}

fn drv(during: &str) -> impl FnOnce(cudarc::driver::DriverError) -> Error + '_ {
    move |source| Error::Driver {
        during: during.to_string(),
        source,
    }
}

impl<P: Element> BatchNorm<P> {
    /// A module in training mode: gamma 1, beta 0, running mean 0, running var 1, counter 0.
    pub fn new(stream: &Arc<CudaStream>, config: BatchNormConfig) -> Result<Self> {
        let c = config.num_features;
        if c == 0 {
            return Err(Error::invalid("num_features", "must be at least 1"));
        }
        check_eps(config.eps)?;
        check_momentum(config.momentum)?;
        let fill = |v: f64| -> Result<CudaSlice<P>> {
            alloc_filled(stream, c, P::from_f64(v)).map_err(drv("allocating BatchNorm state"))
        };
        let (gamma, beta) = if config.affine {
            (Some(fill(1.0)?), Some(fill(0.0)?))
        } else {
            (None, None)
        };
        let (running_mean, running_var, num_batches_tracked) = if config.track_running_stats {
            (
                Some(fill(0.0)?),
                Some(fill(1.0)?),
                Some(
                    stream
                        .clone_htod(&[0i64])
                        .map_err(drv("uploading BatchNorm state"))?,
                ),
            )
        } else {
            (None, None, None)
        };
        Ok(BatchNorm {
            stream: stream.clone(),
            config,
            training: true,
            gamma,
            beta,
            running_mean,
            running_var,
            num_batches_tracked,
            workspace: None,
        })
    }

    /// The construction parameters.
    pub fn config(&self) -> &BatchNormConfig {
        &self.config
    }

    /// Switches to training mode (batch statistics; running statistics updated).
    pub fn train(&mut self) {
        self.training = true;
    }

    /// Switches to eval mode (running statistics, if tracked).
    pub fn eval(&mut self) {
        self.training = false;
    }

    /// True in training mode.
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// gamma (affine only).
    pub fn gamma(&self) -> Option<&CudaSlice<P>> {
        self.gamma.as_ref()
    }

    /// beta (affine only).
    pub fn beta(&self) -> Option<&CudaSlice<P>> {
        self.beta.as_ref()
    }

    /// Device views of gamma and beta (`None` without affine parameters), to update in place,
    /// e.g. by an optimizer step on the module's stream.
    pub fn params_mut(&mut self) -> (Option<CudaViewMut<'_, P>>, Option<CudaViewMut<'_, P>>) {
        (
            self.gamma.as_mut().map(|g| g.as_view_mut()),
            self.beta.as_mut().map(|b| b.as_view_mut()),
        )
    }

    /// Sets eps (finite, >= 0), as PyTorch lets `module.eps` change.
    pub fn set_eps(&mut self, eps: f32) -> Result<()> {
        check_eps(eps)?;
        self.config.eps = eps;
        Ok(())
    }

    /// Sets the momentum of the running statistics (a factor in [0, 1], or the cumulative
    /// average), as PyTorch lets `module.momentum` change.
    pub fn set_momentum(&mut self, momentum: Momentum) -> Result<()> {
        check_momentum(momentum)?;
        self.config.momentum = momentum;
        Ok(())
    }

    /// Running mean (tracked only).
    pub fn running_mean(&self) -> Option<&CudaSlice<P>> {
        self.running_mean.as_ref()
    }

    /// Running variance (tracked only).
    pub fn running_var(&self) -> Option<&CudaSlice<P>> {
        self.running_var.as_ref()
    }

    /// Batches seen in training (tracked only), a device i64.
    pub fn num_batches_tracked(&self) -> Option<&CudaSlice<i64>> {
        self.num_batches_tracked.as_ref()
    }

    /// The state buffers under PyTorch's names, for the state methods (`src/state.rs`).
    pub(crate) fn state_parts(&self) -> Parts<'_, P> {
        Parts {
            kind: ModuleKind::BatchNorm,
            stream: &self.stream,
            shape: vec![self.config.num_features],
            values: [
                self.gamma.as_ref(),
                self.beta.as_ref(),
                self.running_mean.as_ref(),
                self.running_var.as_ref(),
            ],
            count: self.num_batches_tracked.as_ref(),
        }
    }

    /// [`BatchNorm::state_parts`], mutable.
    pub(crate) fn state_parts_mut(&mut self) -> PartsMut<'_, P> {
        PartsMut {
            kind: ModuleKind::BatchNorm,
            stream: &self.stream,
            shape: vec![self.config.num_features],
            values: [
                self.gamma.as_mut(),
                self.beta.as_mut(),
                self.running_mean.as_mut(),
                self.running_var.as_mut(),
            ],
            count: self.num_batches_tracked.as_mut(),
        }
    }

    /// The description of a call on an input of logical `dims` in `layout`, in the module's
    /// current mode (batch statistics in training, or without tracked statistics).
    pub fn desc<T: Element>(&self, dims: &[usize], layout: Layout) -> Result<BatchNormDesc> {
        if dims.get(1) != Some(&self.config.num_features) {
            return Err(Error::shape(
                "BatchNorm input",
                format!("(N, {}, ...)", self.config.num_features),
                format!("{dims:?}"),
            ));
        }
        let mode = Mode {
            batch_stats: self.training || !self.config.track_running_stats,
            momentum: self.config.momentum,
        };
        Ok(BatchNormDesc::new(dims, layout, T::DTYPE, P::DTYPE)
            .with_eps(self.config.eps)
            .with_mode(mode))
    }

    /// Grows the cached workspace to what `problem` needs in direction `dir` on `props`
    /// (nothing when it needs none: eval inference never allocates one). Zeroed: the
    /// reductions' arrival counters start at zero, and every call leaves them so.
    fn workspace(&mut self, problem: &Problem, dir: Direction, props: &DeviceProps) -> Result<()> {
        let need = workspace_bytes_checked(problem, dir, props)?;
        if need > 0 && self.workspace.as_ref().is_none_or(|w| w.len() < need) {
            self.workspace = Some(
                self.stream
                    .alloc_zeros::<u8>(need)
                    .map_err(drv("allocating the BatchNorm workspace"))?,
            );
        }
        Ok(())
    }

    /// Normalizes `x` (logical `dims`, memory `layout`) and returns y plus what backward needs.
    /// Training (or eval without tracked statistics) uses the batch statistics; training also
    /// updates the running statistics and the counter.
    pub fn forward<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        dims: &[usize],
        layout: Layout,
    ) -> Result<ForwardOutput<T>> {
        let problem = self.desc::<T>(dims, layout)?.check()?;
        let _range = profile::range(Op::BatchNormModuleForward, &problem);
        // Uninitialized: the plan writes every element of y and of the saved statistics.
        let n = problem.ncs().numel as usize;
        let mut y = alloc_uninit::<T>(&self.stream, n).map_err(drv("allocating y"))?;
        let mut saved = self.alloc_saved()?;
        let io = InOut::Apart(x.slice(..), y.as_view_mut());
        self.forward_impl(&problem, io, Some(&mut saved))?;
        Ok(ForwardOutput { y, saved })
    }

    /// Gradients of a forward over the same `x`: dx, and dgamma/dbeta when affine.
    pub fn backward<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        dy: &CudaView<'_, T>,
        dims: &[usize],
        layout: Layout,
        saved: &SavedStats,
    ) -> Result<Gradients<T, P>> {
        let c = self.config.num_features;
        let s = self.stream.clone();
        // Uninitialized: the plan writes every element of dx, dgamma and dbeta (zeros for an
        // empty batch) before anything reads them. A shape that does not fit is rejected by
        // backward_into before anything is launched; the allocation uses x's length.
        let mut dx = alloc_uninit::<T>(&s, x.len()).map_err(drv("allocating dx"))?;
        let (mut dgamma, mut dbeta) = if self.config.affine {
            (
                Some(alloc_uninit::<P>(&s, c).map_err(drv("allocating dgamma"))?),
                Some(alloc_uninit::<P>(&s, c).map_err(drv("allocating dbeta"))?),
            )
        } else {
            (None, None)
        };
        let grads = GradientBuffers {
            dx: dx.as_view_mut(),
            dgamma: dgamma.as_mut().map(|p| p.as_view_mut()),
            dbeta: dbeta.as_mut().map(|p| p.as_view_mut()),
        };
        self.backward_into(x, dy, dims, layout, saved, grads)?;
        Ok(Gradients { dx, dgamma, dbeta })
    }

    /// Saved statistics (C f32 each: mean, mean_lo, invstd) to pass to
    /// [`BatchNorm::forward_into`] call after call, then to [`BatchNorm::backward_into`].
    /// Uninitialized until a forward writes them.
    pub fn alloc_saved(&self) -> Result<SavedStats> {
        let (s, c) = (&self.stream, self.config.num_features);
        Ok(SavedStats {
            mean: alloc_uninit::<f32>(s, c).map_err(drv("allocating save_mean"))?,
            mean_lo: alloc_uninit::<f32>(s, c).map_err(drv("allocating save_mean_lo"))?,
            invstd: alloc_uninit::<f32>(s, c).map_err(drv("allocating save_invstd"))?,
            frozen: !self.training,
        })
    }

    /// The forward of [`BatchNorm::forward_into`], [`BatchNorm::forward_in_place`] and
    /// [`BatchNorm::infer`], with the module's workspace.
    fn forward_impl<T: Element>(
        &mut self,
        problem: &Problem,
        io: InOut<'_, T>,
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        let batch_stats = problem.desc().mode.batch_stats;
        let s = self.stream.clone();
        let mut exec = GpuExecutor::new(&s)?;
        self.workspace(problem, Direction::Forward, exec.props())?;
        // Eval reads the running statistics; a training call updates them and the counter.
        let counter = match batch_stats {
            true => self.num_batches_tracked.as_mut().map(|p| p.as_view_mut()),
            false => None,
        };
        let (save_mean, save_mean_lo, save_invstd) = match saved {
            Some(st) => {
                st.frozen = !batch_stats;
                (
                    Some(st.mean.as_view_mut()),
                    Some(st.mean_lo.as_view_mut()),
                    Some(st.invstd.as_view_mut()),
                )
            }
            None => (None, None, None),
        };
        let call = Forward {
            io,
            gamma: self.gamma.as_ref().map(|p| p.as_view()),
            beta: self.beta.as_ref().map(|p| p.as_view()),
            running_mean: self.running_mean.as_mut().map(|p| p.as_view_mut()),
            running_var: self.running_var.as_mut().map(|p| p.as_view_mut()),
            num_batches_tracked: counter,
            save_mean,
            save_mean_lo,
            save_invstd,
            workspace: self.workspace.as_mut().map(|w| w.as_view_mut()),
        };
        forward_checked(&mut exec, problem, call)
    }

    /// Forward on `x` (logical `dims`, memory `layout`) in the module's mode into the caller's
    /// `y`, and into `saved` when given (`None`: no statistics are saved). Training updates
    /// the running statistics and the counter, as [`BatchNorm::forward`]. The workspace is the
    /// module's, grown when a call needs more and reused after: a call allocates nothing once
    /// the module has run a problem at least as large. Asynchronous.
    pub fn forward_into<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        dims: &[usize],
        layout: Layout,
        y: CudaViewMut<'_, T>,
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        let problem = self.desc::<T>(dims, layout)?.check()?;
        let _range = profile::range(Op::BatchNormModuleForward, &problem);
        self.forward_impl(&problem, InOut::Apart(x.slice(..), y), saved)
    }

    /// [`BatchNorm::forward_into`] in place: `xy` holds x and is overwritten by y. Meant for
    /// eval; in training the running statistics are updated as usual, but the backward needs
    /// x, which is gone. Asynchronous.
    pub fn forward_in_place<T: Element>(
        &mut self,
        xy: CudaViewMut<'_, T>,
        dims: &[usize],
        layout: Layout,
        saved: Option<&mut SavedStats>,
    ) -> Result<()> {
        let problem = self.desc::<T>(dims, layout)?.check()?;
        let _range = profile::range(Op::BatchNormModuleForward, &problem);
        self.forward_impl(&problem, InOut::InPlace(xy), saved)
    }

    /// Inference: y for `x`, allocated, in eval mode whatever the module's mode (the running
    /// statistics when tracked, else the batch statistics, as PyTorch's eval); nothing is
    /// updated and no statistics are saved. The workspace is the module's. Asynchronous.
    pub fn infer<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        dims: &[usize],
        layout: Layout,
    ) -> Result<CudaSlice<T>> {
        let mut desc = self.desc::<T>(dims, layout)?;
        desc.mode.batch_stats = !self.config.track_running_stats;
        let problem = desc.check()?;
        let _range = profile::range(Op::BatchNormModuleForward, &problem);
        let n = problem.ncs().numel as usize;
        let mut y = alloc_uninit::<T>(&self.stream, n).map_err(drv("allocating y"))?;
        // Batch statistics without tracked ones update nothing (no running statistics).
        let io = InOut::Apart(x.slice(..), y.as_view_mut());
        self.forward_impl(&problem, io, None)?;
        Ok(y)
    }

    /// Backward into the caller's buffers: the gradients of a forward over the same `x` from
    /// its saved statistics (eval-mode backward when they are frozen). The workspace is the
    /// module's, as in [`BatchNorm::forward_into`]. Asynchronous.
    pub fn backward_into<T: Element>(
        &mut self,
        x: &CudaView<'_, T>,
        dy: &CudaView<'_, T>,
        dims: &[usize],
        layout: Layout,
        saved: &SavedStats,
        grads: GradientBuffers<'_, T, P>,
    ) -> Result<()> {
        let mut desc = self.desc::<T>(dims, layout)?;
        desc.mode.batch_stats = !saved.frozen;
        let problem = desc.check()?;
        let _range = profile::range(Op::BatchNormModuleBackward, &problem);
        let s = self.stream.clone();
        let mut exec = GpuExecutor::new(&s)?;
        self.workspace(&problem, Direction::Backward, exec.props())?;
        let call = Backward {
            x: x.slice(..),
            grad: InOut::Apart(dy.slice(..), grads.dx),
            save_mean: saved.mean.as_view(),
            save_mean_lo: Some(saved.mean_lo.as_view()),
            save_invstd: saved.invstd.as_view(),
            gamma: self.gamma.as_ref().map(|p| p.as_view()),
            dgamma: grads.dgamma,
            dbeta: grads.dbeta,
            workspace: self.workspace.as_mut().map(|w| w.as_view_mut()),
        };
        backward_checked(&mut exec, &problem, call)
    }
}
