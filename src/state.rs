//! Module state by PyTorch's names (`weight`, `bias`, `running_mean`, `running_var`,
//! `num_batches_tracked`), in three forms, with the same methods on [`LayerNorm`] and
//! [`BatchNorm`]:
//!
//! 1. **Host values**, [`State`]: `state()` copies the module's state to the host (it waits for
//!    the module's stream), `load_state(&State)` uploads the entries that are present.
//! 2. **Device views**, [`StateView`] / [`StateViewMut`]: `state_views()` and
//!    `state_views_mut()` lend the module's own buffers (PyTorch's `state_dict()` holds tensors,
//!    not copies), `named_parameters()` / `named_parameters_mut()` lend `weight` and `bias` as
//!    (name, view) pairs for an optimizer, and `load_state_device(&StateView)` copies device
//!    buffers of the caller (or of another module) into the module on its stream, without a
//!    host round trip or a synchronization.
//! 3. **safetensors** checkpoints (feature `safetensors`, module `warpnorm::safetensors`):
//!    `save_safetensors(prefix)` / `load_safetensors(bytes, prefix, strict)` and their `_file`
//!    forms, with PyTorch's names, dtypes and shapes, as
//!    `safetensors.torch.save_file(model.state_dict(), ...)` writes them.
//!
//! Every load is partial where PyTorch allows it (an entry left out keeps its value; an old
//! checkpoint without `num_batches_tracked` loads), never ignores an entry the module does not
//! have (an [`Error::UnexpectedKey`]: it is usually a wrong prefix or the wrong module), and
//! checks every entry before it copies anything, so a rejected load changes nothing.
//!
//! # In an optimizer loop
//!
//! The parameters are updated in place through `named_parameters_mut()` (or `params_mut()`),
//! with the gradients a backward returned ([`crate::layer_norm::Gradients::named`]) under the
//! same names, so optimizer state (momentum, Adam moments) can be keyed by `prefix + name` as
//! in PyTorch:
//!
//! ```no_run
//! # fn sgd(_: &mut cudarc::driver::CudaViewMut<'_, f32>, _: &cudarc::driver::CudaView<'_, f32>) {}
//! # fn main() -> Result<(), warpnorm::Error> {
//! use warpnorm::layer_norm::{Affine, LayerNorm};
//! let stream = warpnorm::runtime::context(0)?.default_stream();
//! let mut ln = LayerNorm::<f32>::new(&stream, &[512], Affine::WeightBias, 1e-5)?;
//! # let x = stream.alloc_zeros::<f32>(8 * 512).unwrap();
//! # let dy = stream.alloc_zeros::<f32>(8 * 512).unwrap();
//! let out = ln.forward(&x.as_view(), &[8, 512])?;
//! let grads = ln.backward(&x.as_view(), &dy.as_view(), &[8, 512], &out.saved)?;
//! for ((name, mut p), (g_name, g)) in ln.named_parameters_mut().into_iter().zip(grads.named()) {
//!     assert_eq!(name, g_name); // "weight", then "bias"
//!     sgd(&mut p, &g); // the caller's update kernel, on the module's stream
//! }
//! // An exponential moving average of the weights, or a copy into another replica, stays on
//! // the device: `ema.load_state_device(&ln.state_views())?`.
//! # Ok(()) }
//! ```

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut};

use crate::batch_norm::BatchNorm;
use crate::buffers::{check_context, download_entry};
use crate::layer_norm::LayerNorm;
use crate::rms_norm::RmsNorm;
use crate::{Element, Error, Result};

/// The names of the entries of type `P`, in PyTorch's order; `num_batches_tracked` (an i64)
/// comes after them.
pub(crate) const VALUE_NAMES: [&str; 4] = ["weight", "bias", "running_mean", "running_var"];
/// The name of the batch counter.
pub(crate) const COUNT_NAME: &str = "num_batches_tracked";

/// The state of a normalization module under PyTorch's `state_dict` names, as host values.
/// `None` means absent: the module has no such entry (`state`), or the entry is not to be
/// loaded (`load_state` loads every entry that is `Some`, so partial loads are allowed, as
/// PyTorch's `load_state_dict(strict=False)`; an entry the module does not have is an error,
/// as PyTorch's unexpected keys).
#[derive(Clone, Debug, PartialEq)]
pub struct State<P> {
    /// `weight` (gamma): one value per normalized column or channel.
    pub weight: Option<Vec<P>>,
    /// `bias` (beta).
    pub bias: Option<Vec<P>>,
    /// `running_mean` (BatchNorm with tracked statistics).
    pub running_mean: Option<Vec<P>>,
    /// `running_var` (BatchNorm with tracked statistics).
    pub running_var: Option<Vec<P>>,
    /// `num_batches_tracked` (BatchNorm with tracked statistics).
    pub num_batches_tracked: Option<i64>,
}

impl<P> Default for State<P> {
    fn default() -> Self {
        State {
            weight: None,
            bias: None,
            running_mean: None,
            running_var: None,
            num_batches_tracked: None,
        }
    }
}

impl<P> State<P> {
    /// The names of the entries that are present, in PyTorch's order.
    pub fn names(&self) -> Vec<&'static str> {
        names(
            self.values().map(|v| v.is_some()),
            self.num_batches_tracked.is_some(),
        )
    }

    /// The entries of type `P`, in the order of [`VALUE_NAMES`].
    pub(crate) fn values(&self) -> [Option<&[P]>; 4] {
        [
            self.weight.as_deref(),
            self.bias.as_deref(),
            self.running_mean.as_deref(),
            self.running_var.as_deref(),
        ]
    }
}

fn names(values: [bool; 4], count: bool) -> Vec<&'static str> {
    VALUE_NAMES
        .iter()
        .zip(values)
        .filter_map(|(n, p)| p.then_some(*n))
        .chain(count.then_some(COUNT_NAME))
        .collect()
}

/// Device views of a module's state under PyTorch's names, borrowed from the module
/// (`state_views()`), or built by the caller from its own buffers to load with
/// `load_state_device` (`..Default::default()` leaves the other entries out).
#[derive(Debug)]
pub struct StateView<'a, P> {
    /// `weight` (gamma).
    pub weight: Option<CudaView<'a, P>>,
    /// `bias` (beta).
    pub bias: Option<CudaView<'a, P>>,
    /// `running_mean`.
    pub running_mean: Option<CudaView<'a, P>>,
    /// `running_var`.
    pub running_var: Option<CudaView<'a, P>>,
    /// `num_batches_tracked`: one device i64.
    pub num_batches_tracked: Option<CudaView<'a, i64>>,
}

/// Mutable device views of a module's state under PyTorch's names (`state_views_mut()`):
/// the module's own buffers, to write in place on the module's stream (an optimizer step, a
/// reset of the running statistics, a load by the caller's own kernels).
#[derive(Debug)]
pub struct StateViewMut<'a, P> {
    /// `weight` (gamma).
    pub weight: Option<CudaViewMut<'a, P>>,
    /// `bias` (beta).
    pub bias: Option<CudaViewMut<'a, P>>,
    /// `running_mean`.
    pub running_mean: Option<CudaViewMut<'a, P>>,
    /// `running_var`.
    pub running_var: Option<CudaViewMut<'a, P>>,
    /// `num_batches_tracked`: one device i64.
    pub num_batches_tracked: Option<CudaViewMut<'a, i64>>,
}

impl<P> Default for StateView<'_, P> {
    fn default() -> Self {
        StateView {
            weight: None,
            bias: None,
            running_mean: None,
            running_var: None,
            num_batches_tracked: None,
        }
    }
}

impl<P> Default for StateViewMut<'_, P> {
    fn default() -> Self {
        StateViewMut {
            weight: None,
            bias: None,
            running_mean: None,
            running_var: None,
            num_batches_tracked: None,
        }
    }
}

/// One entry of a [`StateView`] in [`StateView::into_named`]: the entries of type `P`, or the
/// i64 batch counter.
#[derive(Debug)]
pub enum EntryView<'a, P> {
    /// `weight`, `bias`, `running_mean` or `running_var`.
    Values(CudaView<'a, P>),
    /// `num_batches_tracked`.
    Count(CudaView<'a, i64>),
}

/// One entry of a [`StateViewMut`] in [`StateViewMut::into_named`].
#[derive(Debug)]
pub enum EntryViewMut<'a, P> {
    /// `weight`, `bias`, `running_mean` or `running_var`.
    Values(CudaViewMut<'a, P>),
    /// `num_batches_tracked`.
    Count(CudaViewMut<'a, i64>),
}

impl<'a, P> StateView<'a, P> {
    /// The names of the entries that are present, in PyTorch's order.
    pub fn names(&self) -> Vec<&'static str> {
        let v = [
            &self.weight,
            &self.bias,
            &self.running_mean,
            &self.running_var,
        ];
        names(v.map(|e| e.is_some()), self.num_batches_tracked.is_some())
    }

    /// The entries that are present as (name, view) pairs in PyTorch's order, as iterating
    /// over a `state_dict()`.
    pub fn into_named(self) -> Vec<(&'static str, EntryView<'a, P>)> {
        let values = [self.weight, self.bias, self.running_mean, self.running_var];
        VALUE_NAMES
            .into_iter()
            .zip(values)
            .filter_map(|(n, v)| v.map(|v| (n, EntryView::Values(v))))
            .chain(
                self.num_batches_tracked
                    .map(|c| (COUNT_NAME, EntryView::Count(c))),
            )
            .collect()
    }
}

impl<'a, P> StateViewMut<'a, P> {
    /// The names of the entries that are present, in PyTorch's order.
    pub fn names(&self) -> Vec<&'static str> {
        let v = [
            &self.weight,
            &self.bias,
            &self.running_mean,
            &self.running_var,
        ];
        names(v.map(|e| e.is_some()), self.num_batches_tracked.is_some())
    }

    /// The entries that are present as (name, view) pairs in PyTorch's order.
    pub fn into_named(self) -> Vec<(&'static str, EntryViewMut<'a, P>)> {
        let values = [self.weight, self.bias, self.running_mean, self.running_var];
        VALUE_NAMES
            .into_iter()
            .zip(values)
            .filter_map(|(n, v)| v.map(|v| (n, EntryViewMut::Values(v))))
            .chain(
                self.num_batches_tracked
                    .map(|c| (COUNT_NAME, EntryViewMut::Count(c))),
            )
            .collect()
    }
}

/// Which module lends its [`Parts`] (for error messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // the module types' names
pub(crate) enum ModuleKind {
    LayerNorm,
    BatchNorm,
    RmsNorm,
}

impl ModuleKind {
    /// Why a module of this kind without the entry `name` cannot take it.
    pub(crate) fn lacks(self, name: &str) -> String {
        match (self, name) {
            (ModuleKind::LayerNorm, "weight" | "bias") => {
                format!("this LayerNorm has no {name} (see its Affine)")
            }
            (ModuleKind::LayerNorm, _) => format!("a LayerNorm has no {name}"),
            (ModuleKind::BatchNorm, "weight" | "bias") => {
                format!("this BatchNorm has no {name} (affine: false)")
            }
            (ModuleKind::BatchNorm, "running_mean" | "running_var" | "num_batches_tracked") => {
                format!("this BatchNorm keeps no {name} (track_running_stats: false)")
            }
            (ModuleKind::BatchNorm, _) => format!("a BatchNorm has no {name}"),
            (ModuleKind::RmsNorm, "weight") => {
                format!("this RMSNorm has no {name} (elementwise_affine: false)")
            }
            (ModuleKind::RmsNorm, _) => format!("an RMSNorm has no {name}"),
        }
    }
}

/// A module's state buffers under PyTorch's names, lent by `state_parts()` to the methods
/// below, which are the same for both modules.
pub(crate) struct Parts<'a, P> {
    // `kind`, `shape` and `has` serve the safetensors methods.
    #[cfg_attr(not(feature = "safetensors"), allow(dead_code))]
    pub(crate) kind: ModuleKind,
    pub(crate) stream: &'a Arc<CudaStream>,
    /// PyTorch's shape of `weight`, `bias` and the running statistics (`normalized_shape`,
    /// or `[C]`); `num_batches_tracked` is a scalar.
    #[cfg_attr(not(feature = "safetensors"), allow(dead_code))]
    pub(crate) shape: Vec<usize>,
    /// In the order of [`VALUE_NAMES`].
    pub(crate) values: [Option<&'a CudaSlice<P>>; 4],
    pub(crate) count: Option<&'a CudaSlice<i64>>,
}

/// [`Parts`], mutable.
pub(crate) struct PartsMut<'a, P> {
    pub(crate) kind: ModuleKind,
    pub(crate) stream: &'a Arc<CudaStream>,
    pub(crate) shape: Vec<usize>,
    pub(crate) values: [Option<&'a mut CudaSlice<P>>; 4],
    pub(crate) count: Option<&'a mut CudaSlice<i64>>,
}

impl<'a, P: Element> Parts<'a, P> {
    /// Which entries the module has: the four of type `P`, then the counter.
    #[cfg_attr(not(feature = "safetensors"), allow(dead_code))]
    pub(crate) fn has(&self) -> ([bool; 4], bool) {
        (self.values.map(|v| v.is_some()), self.count.is_some())
    }

    fn download(&self) -> Result<State<P>> {
        let s = self.stream;
        let [w, b, rm, rv] = self.values;
        let nbt = download_entry(s, COUNT_NAME, self.count)?;
        Ok(State {
            weight: download_entry(s, "weight", w)?,
            bias: download_entry(s, "bias", b)?,
            running_mean: download_entry(s, "running_mean", rm)?,
            running_var: download_entry(s, "running_var", rv)?,
            num_batches_tracked: nbt.and_then(|v| v.first().copied()),
        })
    }

    fn views(self) -> StateView<'a, P> {
        let [weight, bias, running_mean, running_var] = self.values.map(|v| v.map(|s| s.as_view()));
        StateView {
            weight,
            bias,
            running_mean,
            running_var,
            num_batches_tracked: self.count.map(|c| c.as_view()),
        }
    }
}

impl<'a, P: Element> PartsMut<'a, P> {
    fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    fn views(self) -> StateViewMut<'a, P> {
        let [weight, bias, running_mean, running_var] =
            self.values.map(|v| v.map(|s| s.as_view_mut()));
        StateViewMut {
            weight,
            bias,
            running_mean,
            running_var,
            num_batches_tracked: self.count.map(|c| c.as_view_mut()),
        }
    }

    /// Checks that the module has every entry given (`Some`) and that each holds `len`
    /// elements (`len(i)` for the entries of type `P`, 1 for the counter).
    fn check_given(&self, given: [Option<usize>; 4], count: Option<usize>) -> Result<()> {
        let n = self.numel();
        let entries = VALUE_NAMES
            .iter()
            .zip(given)
            .zip(self.values.iter().map(|v| v.is_some()))
            .map(|((name, g), has)| (*name, g, has, n))
            .chain([(COUNT_NAME, count, self.count.is_some(), 1)]);
        for (name, given, has, want) in entries {
            match (given, has) {
                (Some(_), false) => {
                    return Err(Error::UnexpectedKey {
                        key: name.into(),
                        reason: self.kind.lacks(name),
                    })
                }
                (Some(len), true) if len != want => {
                    return Err(Error::Length {
                        what: name.into(),
                        expected: want,
                        given: len,
                    })
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn upload(self, state: &State<P>) -> Result<()> {
        self.check_given(
            state.values().map(|v| v.map(<[P]>::len)),
            state.num_batches_tracked.map(|_| 1),
        )?;
        let s = self.stream;
        for ((name, src), dst) in VALUE_NAMES.iter().zip(state.values()).zip(self.values) {
            if let (Some(v), Some(d)) = (src, dst) {
                if !v.is_empty() {
                    s.memcpy_htod(v, d)
                        .map_err(Error::driver(format!("uploading {name}")))?;
                }
            }
        }
        if let (Some(n), Some(d)) = (state.num_batches_tracked, self.count) {
            s.memcpy_htod(&[n][..], d)
                .map_err(Error::driver(format!("uploading {COUNT_NAME}")))?;
        }
        Ok(())
    }

    fn copy_from(self, src: &StateView<'_, P>) -> Result<()> {
        let values = [&src.weight, &src.bias, &src.running_mean, &src.running_var];
        self.check_given(
            values.map(|v| v.as_ref().map(|v| v.len())),
            src.num_batches_tracked.as_ref().map(|c| c.len()),
        )?;
        for (name, v) in VALUE_NAMES.iter().zip(values) {
            if let Some(v) = v {
                check_context(name, v, self.stream)?;
            }
        }
        if let Some(c) = &src.num_batches_tracked {
            check_context(COUNT_NAME, c, self.stream)?;
        }
        let s = self.stream;
        for ((name, src), dst) in VALUE_NAMES.iter().zip(values).zip(self.values) {
            if let (Some(v), Some(d)) = (src, dst) {
                if !v.is_empty() {
                    s.memcpy_dtod(v, d)
                        .map_err(Error::driver(format!("copying {name}")))?;
                }
            }
        }
        if let (Some(c), Some(d)) = (&src.num_batches_tracked, self.count) {
            s.memcpy_dtod(c, d)
                .map_err(Error::driver(format!("copying {COUNT_NAME}")))?;
        }
        Ok(())
    }
}

/// The state methods, the same on both module types.
macro_rules! state_methods {
    ($module:ident, $entries:literal) => {
        impl<P: Element> $module<P> {
            #[doc = concat!("The state under PyTorch's names (", $entries, "; each present")]
            /// when the module has it), copied to the host. This waits for the module's
            /// stream.
            pub fn state(&self) -> Result<State<P>> {
                self.state_parts().download()
            }

            /// Loads every entry of `state` that is present (a partial load keeps the others,
            /// as PyTorch's `strict=False`; an old checkpoint without `num_batches_tracked`
            /// loads too); each holds one value per normalized element (channel), and
            /// `num_batches_tracked` is one i64. Every entry is checked before anything is
            /// copied: a rejected call changes nothing. An entry the module does not have is
            /// an [`Error::UnexpectedKey`].
            pub fn load_state(&mut self, state: &State<P>) -> Result<()> {
                self.state_parts_mut().upload(state)
            }

            /// Device views of the state under PyTorch's names: the module's own buffers, as
            /// PyTorch's `state_dict()` holds tensors, not copies. Work queued on the
            /// module's stream is ordered before any use of them on another stream (cudarc's
            /// events).
            pub fn state_views(&self) -> StateView<'_, P> {
                self.state_parts().views()
            }

            /// Mutable device views of the state under PyTorch's names, to write in place
            /// (the module's next call sees the new values).
            pub fn state_views_mut(&mut self) -> StateViewMut<'_, P> {
                self.state_parts_mut().views()
            }

            /// The parameters present (`weight`, then `bias`) as (name, view) pairs, as
            /// PyTorch's `named_parameters()`.
            pub fn named_parameters(&self) -> Vec<(&'static str, CudaView<'_, P>)> {
                let v = self.state_views();
                [("weight", v.weight), ("bias", v.bias)]
                    .into_iter()
                    .filter_map(|(n, v)| v.map(|v| (n, v)))
                    .collect()
            }

            /// The parameters present as (name, mutable view) pairs, for an optimizer step
            /// in place; the names match the gradients' `named()`.
            pub fn named_parameters_mut(&mut self) -> Vec<(&'static str, CudaViewMut<'_, P>)> {
                let v = self.state_views_mut();
                [("weight", v.weight), ("bias", v.bias)]
                    .into_iter()
                    .filter_map(|(n, v)| v.map(|v| (n, v)))
                    .collect()
            }

            /// Copies every entry of `src` that is present into the module, device to
            /// device, on the module's stream (asynchronous; no host synchronization). As
            /// [`Self::load_state`], partial loads are allowed and every entry is checked
            /// (the module has it, its length, and that it lives in the module's CUDA
            /// context: [`Error::ContextMismatch`] otherwise; go through [`Self::state`] for
            /// another device) before anything is copied. `src` may come from another
            /// module's [`Self::state_views`] or from the caller's buffers.
            pub fn load_state_device(&mut self, src: &StateView<'_, P>) -> Result<()> {
                self.state_parts_mut().copy_from(src)
            }
        }
    };
}

state_methods!(LayerNorm, "`weight`, `bias`");
state_methods!(RmsNorm, "`weight`");
state_methods!(
    BatchNorm,
    "`weight`, `bias`, `running_mean`, `running_var`, `num_batches_tracked`"
);

/// The gradients under the parameters' names, the same on both modules' `Gradients`.
macro_rules! named_gradients {
    ($gradients:path) => {
        impl<T, P> $gradients {
            /// The gradients present as (name, view) pairs under the parameters' names
            /// (`weight` for dgamma, `bias` for dbeta), in the order of the module's
            /// `named_parameters()`.
            pub fn named(&self) -> Vec<(&'static str, CudaView<'_, P>)> {
                [("weight", &self.dgamma), ("bias", &self.dbeta)]
                    .into_iter()
                    .filter_map(|(n, g)| g.as_ref().map(|g| (n, g.as_view())))
                    .collect()
            }
        }
    };
}

named_gradients!(crate::layer_norm::Gradients<T, P>);
named_gradients!(crate::batch_norm::Gradients<T, P>);
