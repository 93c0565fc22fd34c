//! What a BatchNorm call is about: shape, layout, dtypes, eps, mode - and their validation.

use crate::check::{check_eps, check_param_dtype};
use crate::{DType, Error, Result};

/// Memory layout of the activations (x, y, dy, dx all share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Row-major in the logical dims: NCHW (NCL, NCDHW).
    Contiguous,
    /// Channels innermost: NHWC (NLC, NDHWC) - PyTorch's `channels_last` /
    /// `channels_last_3d`. For `(N, C)` input both layouts are the same.
    ChannelsLast,
}

/// How the running statistics follow the batch statistics in training.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Momentum {
    /// `running = (1 - m) * running + m * batch`, m in [0, 1].
    Factor(f32),
    /// PyTorch's `momentum=None`: the cumulative average, m = 1 / num_batches_tracked (the
    /// counter is incremented before use, on the device).
    Cumulative,
}

/// Training or eval: which statistics a call normalizes with, and how training updates the
/// running ones. Part of the [`BatchNormDesc`], so a backward call knows which forward it
/// differentiates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mode {
    /// Normalize with the batch statistics (PyTorch's `training=True` of `F.batch_norm`; also
    /// eval with `track_running_stats=False`). Running statistics, when given, are updated and
    /// num_batches_tracked, when given, is incremented. When false, the running statistics
    /// are required and used (eval), and the backward is the eval-mode one
    /// (dx = dy * gamma * invstd).
    pub batch_stats: bool,
    /// Momentum of the running statistics update (ignored in eval).
    pub momentum: Momentum,
}

impl Mode {
    /// Training with momentum `m`.
    pub fn train(m: f32) -> Mode {
        Mode {
            batch_stats: true,
            momentum: Momentum::Factor(m),
        }
    }

    /// Training with the cumulative average (`momentum=None`).
    pub fn train_cumulative() -> Mode {
        Mode {
            batch_stats: true,
            momentum: Momentum::Cumulative,
        }
    }

    /// Eval with the running statistics.
    pub fn eval() -> Mode {
        Mode {
            batch_stats: false,
            momentum: Momentum::Factor(0.0),
        }
    }
}

/// Shape, layout, dtypes, constants and mode of a BatchNorm call.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNormDesc {
    /// Logical dims `(N, C)`, `(N, C, L)`, `(N, C, H, W)` or `(N, C, D, H, W)`.
    pub dims: Vec<usize>,
    /// Memory layout of the activations.
    pub layout: Layout,
    /// Element type of x, y, dy, dx.
    pub dtype: DType,
    /// Element type of gamma, beta, running statistics, dgamma, dbeta: f32 or `dtype`.
    pub param_dtype: DType,
    /// Added to the variance inside the square root (PyTorch's default 1e-5).
    pub eps: f32,
    /// Training (batch statistics, running statistics updated) or eval.
    pub mode: Mode,
}

impl BatchNormDesc {
    /// A description with eps = 1e-5 in training mode with momentum 0.1 (PyTorch's defaults).
    pub fn new(dims: &[usize], layout: Layout, dtype: DType, param_dtype: DType) -> Self {
        BatchNormDesc {
            dims: dims.to_vec(),
            layout,
            dtype,
            param_dtype,
            eps: 1e-5,
            mode: Mode::train(0.1),
        }
    }

    /// The same description with another eps.
    pub fn with_eps(mut self, eps: f32) -> Self {
        self.eps = eps;
        self
    }

    /// The same description in another mode.
    pub fn with_mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Validates the description once (dims, dtypes, eps, momentum, one value per channel
    /// in training, sizes): what planning takes.
    pub fn check(&self) -> Result<Problem> {
        if !(2..=5).contains(&self.dims.len()) {
            return Err(Error::shape(
                "BatchNorm input",
                "2 to 5 dims (N, C, ...)",
                format!("{:?}", self.dims),
            ));
        }
        let c = self.dims[1] as u64;
        if c == 0 {
            return Err(Error::shape(
                "BatchNorm input",
                "at least one channel",
                format!("{:?}", self.dims),
            ));
        }
        check_param_dtype("BatchNorm", self.dtype, self.param_dtype)?;
        check_eps(self.eps)?;
        check_momentum(self.mode.momentum)?;
        let overflow = || Error::Overflow(format!("BatchNorm input of dims {:?}", self.dims));
        let s = self.dims[2..]
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
            .ok_or_else(overflow)?;
        let n = self.dims[0] as u64;
        let numel = n
            .checked_mul(c)
            .and_then(|v| v.checked_mul(s))
            .ok_or_else(overflow)?;
        // Byte offsets must fit in i64 (the kernels use 64-bit signed offsets).
        numel
            .checked_mul(self.dtype.size() as u64)
            .filter(|&b| b <= i64::MAX as u64)
            .ok_or_else(overflow)?;
        let ncs = Ncs {
            n,
            c,
            s,
            numel,
            nhwc: self.layout == Layout::ChannelsLast || s == 1,
        };
        if self.mode.batch_stats && ncs.count() == 1 {
            return Err(one_value_error(&self.dims));
        }
        Ok(Problem {
            desc: self.clone(),
            ncs,
        })
    }
}

/// A [`BatchNormDesc`] that passed [`BatchNormDesc::check`]: the only input planning takes,
/// so that a call validates its description once.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    desc: BatchNormDesc,
    ncs: Ncs,
}

impl Problem {
    /// The checked description.
    pub fn desc(&self) -> &BatchNormDesc {
        &self.desc
    }

    /// Its (N, C, S) view.
    pub fn ncs(&self) -> &Ncs {
        &self.ncs
    }
}

/// The (N, C, S) view of a checked description: batch, channels, and the product of the
/// spatial dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ncs {
    /// Batch size.
    pub n: u64,
    /// Channels.
    pub c: u64,
    /// Product of the spatial dims (1 for `(N, C)` input).
    pub s: u64,
    /// N * C * S.
    pub numel: u64,
    /// True when the channels are innermost in memory (channels-last, or S == 1).
    pub nhwc: bool,
}

impl Ncs {
    /// Values per channel: N * S.
    pub fn count(&self) -> u64 {
        self.n * self.s
    }
}

/// Checks a momentum value.
pub(crate) fn check_momentum(m: Momentum) -> Result<()> {
    if let Momentum::Factor(f) = m {
        if !(f.is_finite() && (0.0..=1.0).contains(&f)) {
            return Err(Error::invalid(
                "momentum",
                format!("expected a value in [0, 1], got {f}"),
            ));
        }
    }
    Ok(())
}

/// PyTorch's error for one value per channel in training.
pub(crate) fn one_value_error(dims: &[usize]) -> Error {
    Error::invalid(
        "BatchNorm input",
        format!("Expected more than 1 value per channel when training, got input size {dims:?}"),
    )
}
