//! What a BatchNorm call is about: shape, layout, dtypes, eps, mode - and their validation.

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

/// What a forward call does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ForwardMode {
    /// Normalize with the batch statistics (PyTorch's `training=True` of `F.batch_norm`; also
    /// eval with `track_running_stats=False`). Running statistics, when given, are updated and
    /// num_batches_tracked, when given, is incremented. When false, the running statistics
    /// are required and used (eval).
    pub batch_stats: bool,
    /// Momentum of the running statistics update (ignored in eval).
    pub momentum: Momentum,
}

impl ForwardMode {
    /// Training with momentum `m`.
    pub fn train(m: f32) -> ForwardMode {
        ForwardMode {
            batch_stats: true,
            momentum: Momentum::Factor(m),
        }
    }

    /// Training with the cumulative average (`momentum=None`).
    pub fn train_cumulative() -> ForwardMode {
        ForwardMode {
            batch_stats: true,
            momentum: Momentum::Cumulative,
        }
    }

    /// Eval with the running statistics.
    pub fn eval() -> ForwardMode {
        ForwardMode {
            batch_stats: false,
            momentum: Momentum::Factor(0.0),
        }
    }
}

/// Shape, layout, dtypes and constants of a BatchNorm call.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNormDesc {
    /// Logical dims `(N, C)`, `(N, C, L)`, `(N, C, H, W)` or `(N, C, D, H, W)`.
    pub dims: Vec<usize>,
    /// Memory layout of the activations.
    pub layout: Layout,
    /// Element type of x, y, dy, dx.
    pub dtype: DType,
    /// Element type of gamma, beta, running statistics, dgamma, dbeta.
    pub param_dtype: DType,
    /// Added to the variance inside the square root (PyTorch's default 1e-5).
    pub eps: f32,
}

impl BatchNormDesc {
    /// A description with eps = 1e-5.
    pub fn new(dims: &[usize], layout: Layout, dtype: DType, param_dtype: DType) -> Self {
        BatchNormDesc {
            dims: dims.to_vec(),
            layout,
            dtype,
            param_dtype,
            eps: 1e-5,
        }
    }

    /// The same description with another eps.
    pub fn with_eps(mut self, eps: f32) -> Self {
        self.eps = eps;
        self
    }

    /// Validates the shape and constants and returns the (N, C, S) view.
    pub fn geometry(&self) -> Result<Geometry> {
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
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return Err(Error::invalid(
                "eps",
                format!("must be finite and >= 0, got {}", self.eps),
            ));
        }
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
        Ok(Geometry {
            n,
            c,
            s,
            numel,
            nhwc: self.layout == Layout::ChannelsLast || s == 1,
        })
    }
}

/// The (N, C, S) view of a validated description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
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

impl Geometry {
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
                format!("must be in [0, 1], got {f}"),
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
