//! Profiling ranges around every op and module call: NVTX ranges for Nsight Systems (feature
//! `nvtx`, on by default) and `tracing` spans that mirror them (feature `tracing`).
//!
//! An op or module function opens a range with one line, `let _range = profile::range(op,
//! &problem);`, and the guard closes it when it is dropped: on return, on `?`, on a panic. The
//! names read by themselves on a timeline:
//!
//! - `layer_norm.forward 16384x4096 bf16/f32` (rows x cols, activation / parameter dtype);
//! - `batch_norm.forward train [32, 64, 56, 56] channels_last f16/f32` (mode, logical dims,
//!   layout, dtypes);
//! - `LayerNorm.forward ...` / `BatchNorm.backward ...` for the module calls, with the same
//!   suffix; the module range holds the module's allocations and the op range nested in it.
//!
//! NVTX: every range is pushed in the `warpnorm` domain (`nvtxDomainRangePushEx`, an ASCII
//! message and a colour per op) and popped on the same thread. The domain is created once per
//! process; NVTX3 returns a null domain when no tool is attached (no injection library named by
//! `NVTX_INJECTION64_PATH`, the variable that Nsight Systems sets), and then a range costs one
//! atomic load and a branch: the name is not even formatted.
//!
//! tracing: a span at DEBUG level, target `warpnorm`, whose name is the op (`layer_norm.forward`:
//! span names are static) and whose field `range` is the whole NVTX name; it is formatted only
//! when a subscriber enables the span.

use std::fmt;

use crate::batch_norm::{Layout, Problem as BatchNormProblem};
use crate::layer_norm::Problem as LayerNormProblem;
use crate::rms_norm::Problem as RmsNormProblem;

/// The NVTX domain of every range (Nsight Systems shows it as a row of its own).
#[cfg_attr(not(feature = "nvtx"), allow(dead_code))]
pub(crate) const DOMAIN: &std::ffi::CStr = c"warpnorm";

/// What a range is about: the first word of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Functional `layer_norm::forward` (and every LayerNorm forward launched by a module).
    LayerNormForward,
    /// Functional `layer_norm::backward`.
    LayerNormBackward,
    /// Functional `batch_norm::forward`.
    BatchNormForward,
    /// Functional `batch_norm::backward`.
    BatchNormBackward,
    /// `LayerNorm::forward` (module).
    LayerNormModuleForward,
    /// `LayerNorm::backward` (module).
    LayerNormModuleBackward,
    /// `BatchNorm::forward` (module).
    BatchNormModuleForward,
    /// `BatchNorm::backward` (module).
    BatchNormModuleBackward,
    /// Functional `rms_norm::forward` (and every RMSNorm forward launched by a module).
    RmsNormForward,
    /// Functional `rms_norm::backward`.
    RmsNormBackward,
    /// `RmsNorm::forward` (module).
    RmsNormModuleForward,
    /// `RmsNorm::backward` (module).
    RmsNormModuleBackward,
    /// Functional `layer_norm::forward_residual` (the fused residual add).
    LayerNormForwardResidual,
    /// Functional `layer_norm::backward_residual`.
    LayerNormBackwardResidual,
    /// Functional `rms_norm::forward_residual`.
    RmsNormForwardResidual,
    /// Functional `rms_norm::backward_residual`.
    RmsNormBackwardResidual,
}

impl Op {
    /// The first word of the range's name (and the tracing span's name).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Op::LayerNormForward => "layer_norm.forward",
            Op::LayerNormBackward => "layer_norm.backward",
            Op::BatchNormForward => "batch_norm.forward",
            Op::BatchNormBackward => "batch_norm.backward",
            Op::LayerNormModuleForward => "LayerNorm.forward",
            Op::LayerNormModuleBackward => "LayerNorm.backward",
            Op::BatchNormModuleForward => "BatchNorm.forward",
            Op::BatchNormModuleBackward => "BatchNorm.backward",
            Op::RmsNormForward => "rms_norm.forward",
            Op::RmsNormBackward => "rms_norm.backward",
            Op::RmsNormModuleForward => "RmsNorm.forward",
            Op::RmsNormModuleBackward => "RmsNorm.backward",
            Op::LayerNormForwardResidual => "layer_norm.forward_residual",
            Op::LayerNormBackwardResidual => "layer_norm.backward_residual",
            Op::RmsNormForwardResidual => "rms_norm.forward_residual",
            Op::RmsNormBackwardResidual => "rms_norm.backward_residual",
        }
    }

    /// The range's colour (ARGB): LayerNorm blue, BatchNorm green, RMSNorm orange, backward
    /// darker; modules
    /// grey so that the op inside stands out.
    #[cfg_attr(not(feature = "nvtx"), allow(dead_code))]
    const fn argb(self) -> u32 {
        match self {
            Op::LayerNormForward | Op::LayerNormForwardResidual => 0xff4a90d9,
            Op::LayerNormBackward | Op::LayerNormBackwardResidual => 0xff1f5f9f,
            Op::BatchNormForward => 0xff5cb85c,
            Op::BatchNormBackward => 0xff2e7d32,
            Op::RmsNormForward | Op::RmsNormForwardResidual => 0xffe69a28,
            Op::RmsNormBackward | Op::RmsNormBackwardResidual => 0xffa86400,
            Op::LayerNormModuleForward
            | Op::LayerNormModuleBackward
            | Op::BatchNormModuleForward
            | Op::BatchNormModuleBackward
            | Op::RmsNormModuleForward
            | Op::RmsNormModuleBackward => 0xff9e9e9e,
        }
    }
}

/// The part of a range's name after the op: shape, mode, layout and dtypes of a checked call.
pub(crate) trait Describe {
    /// Writes the suffix (without the leading space).
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl Describe for LayerNormProblem {
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.desc();
        write!(f, "{}x{} {}/{}", d.rows, d.cols, d.dtype, d.param_dtype)
    }
}

impl Describe for RmsNormProblem {
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.desc();
        write!(f, "{}x{} {}/{}", d.rows, d.cols, d.dtype, d.param_dtype)
    }
}

impl Describe for BatchNormProblem {
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.desc();
        let mode = if d.mode.batch_stats { "train" } else { "eval" };
        let layout = match d.layout {
            Layout::Contiguous => "contiguous",
            Layout::ChannelsLast => "channels_last",
        };
        write!(
            f,
            "{mode} {:?} {layout} {}/{}",
            d.dims, d.dtype, d.param_dtype
        )
    }
}

/// A range's whole name, formatted on demand (`Display`).
pub(crate) struct Name<'a, D: ?Sized> {
    op: Op,
    what: &'a D,
}

impl<D: Describe + ?Sized> fmt::Display for Name<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.op.name())?;
        f.write_str(" ")?;
        self.what.describe(f)
    }
}

/// An open range: closed (NVTX pop, span exit) when dropped.
#[must_use = "the range closes when this guard is dropped"]
pub(crate) struct Range {
    #[cfg(feature = "nvtx")]
    pushed: bool,
    #[cfg(feature = "tracing")]
    _span: tracing::span::EnteredSpan,
}

/// Opens the range of `op` on `what` (see the module docs): `let _range = range(op, &problem);`.
#[cfg_attr(
    not(any(feature = "nvtx", feature = "tracing")),
    allow(unused_variables, clippy::needless_pass_by_value)
)]
#[inline]
pub(crate) fn range<D: Describe + ?Sized>(op: Op, what: &D) -> Range {
    let name = Name { op, what };
    Range {
        #[cfg(feature = "tracing")]
        _span: span(&name).entered(),
        #[cfg(feature = "nvtx")]
        pushed: nvtx::push(op.argb(), &name),
    }
}

impl Drop for Range {
    #[inline]
    fn drop(&mut self) {
        #[cfg(feature = "nvtx")]
        if self.pushed {
            nvtx::pop();
        }
        // The span, when there is one, exits when `_span` drops (after the pop: fields drop
        // after this body), so both close together.
    }
}

/// The tracing span of a range: one callsite per op, since span names are static.
#[cfg(feature = "tracing")]
fn span<D: Describe + ?Sized>(name: &Name<'_, D>) -> tracing::Span {
    macro_rules! spans {
        ($($op:ident => $name:literal),* $(,)?) => {
            match name.op {
                $(Op::$op => tracing::debug_span!(target: "warpnorm", $name, range = %name),)*
            }
        };
    }
    spans! {
        LayerNormForward => "layer_norm.forward",
        LayerNormBackward => "layer_norm.backward",
        BatchNormForward => "batch_norm.forward",
        BatchNormBackward => "batch_norm.backward",
        LayerNormModuleForward => "LayerNorm.forward",
        LayerNormModuleBackward => "LayerNorm.backward",
        BatchNormModuleForward => "BatchNorm.forward",
        BatchNormModuleBackward => "BatchNorm.backward",
        RmsNormForward => "rms_norm.forward",
        RmsNormBackward => "rms_norm.backward",
        RmsNormModuleForward => "RmsNorm.forward",
        RmsNormModuleBackward => "RmsNorm.backward",
        LayerNormForwardResidual => "layer_norm.forward_residual",
        LayerNormBackwardResidual => "layer_norm.backward_residual",
        RmsNormForwardResidual => "rms_norm.forward_residual",
        RmsNormBackwardResidual => "rms_norm.backward_residual",
    }
}

#[cfg(feature = "nvtx")]
mod nvtx {
    //! The NVTX3 calls (the C implementation compiled into `nvtx-sys`).

    use std::fmt::{self, Write as _};
    use std::sync::OnceLock;

    use nvtx_sys::ffi;

    /// The `warpnorm` domain's handle (as an address: raw pointers are not `Sync`); 0 when
    /// no tool is attached.
    static DOMAIN: OnceLock<usize> = OnceLock::new();

    /// The domain, created (and NVTX initialized: the injection library loaded) on first use.
    #[inline]
    fn domain() -> ffi::nvtxDomainHandle_t {
        // SAFETY: DOMAIN is a valid NUL-terminated string; NVTX copies it.
        *DOMAIN.get_or_init(|| unsafe { ffi::nvtxDomainCreateA(super::DOMAIN.as_ptr()) } as usize)
            as ffi::nvtxDomainHandle_t
    }

    /// Pushes a range named `name` in the domain; false (and nothing formatted) when no tool
    /// is attached.
    #[inline]
    pub(super) fn push(argb: u32, name: &dyn fmt::Display) -> bool {
        let domain = domain();
        if domain.is_null() {
            return false;
        }
        push_named(domain, argb, name);
        true
    }

    #[cold]
    #[inline(never)]
    fn push_named(domain: ffi::nvtxDomainHandle_t, argb: u32, name: &dyn fmt::Display) {
        let mut message = String::with_capacity(96);
        // Formatting into a String cannot fail; a NUL inside (impossible for these names)
        // would only cut the name short.
        let _ = write!(message, "{name}\0");
        let attributes = ffi::nvtxEventAttributes_t {
            version: ffi::NVTX_VERSION as u16,
            size: std::mem::size_of::<ffi::nvtxEventAttributes_t>() as u16,
            category: 0,
            colorType: ffi::nvtxColorType_t::NVTX_COLOR_ARGB as i32,
            color: argb,
            payloadType: ffi::nvtxPayloadType_t::NVTX_PAYLOAD_UNKNOWN as i32,
            reserved0: 0,
            payload: ffi::nvtxEventAttributes_v2_payload_t { ullValue: 0 },
            messageType: ffi::nvtxMessageType_t::NVTX_MESSAGE_TYPE_ASCII as i32,
            message: ffi::nvtxMessageValue_t {
                ascii: message.as_ptr().cast(),
            },
        };
        // SAFETY: a domain NVTX returned, and attributes whose message outlives the call (the
        // tool copies what it keeps).
        unsafe { ffi::nvtxDomainRangePushEx(domain, &attributes) };
    }

    /// Pops the innermost range of this thread in the domain.
    #[inline]
    pub(super) fn pop() {
        // SAFETY: a domain NVTX returned.
        unsafe { ffi::nvtxDomainRangePop(domain()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch_norm::{BatchNormDesc, Mode};
    use crate::layer_norm::{Affine, LayerNormDesc};
    use crate::DType;

    #[test]
    fn names_read_by_themselves() {
        let ln = LayerNormDesc::new(
            &[16, 1024, 4096],
            &[4096],
            DType::BF16,
            DType::F32,
            Affine::WeightBias,
            1e-5,
        )
        .unwrap()
        .check()
        .unwrap();
        assert_eq!(
            Name {
                op: Op::LayerNormForward,
                what: &ln
            }
            .to_string(),
            "layer_norm.forward 16384x4096 bf16/f32"
        );
        let bn = BatchNormDesc::new(
            &[32, 64, 56, 56],
            Layout::ChannelsLast,
            DType::F16,
            DType::F32,
        )
        .check()
        .unwrap();
        assert_eq!(
            Name {
                op: Op::BatchNormForward,
                what: &bn
            }
            .to_string(),
            "batch_norm.forward train [32, 64, 56, 56] channels_last f16/f32"
        );
        let bn = BatchNormDesc::new(&[8, 3], Layout::Contiguous, DType::F32, DType::F32)
            .with_mode(Mode::eval())
            .check()
            .unwrap();
        assert_eq!(
            Name {
                op: Op::BatchNormModuleBackward,
                what: &bn
            }
            .to_string(),
            "BatchNorm.backward eval [8, 3] contiguous f32/f32"
        );
    }

    /// The cost of a range with no profiler attached (the figure in the README): run with
    /// `cargo test --release -p warpnorm --lib profile::tests::cost -- --ignored --nocapture`
    /// and NVTX_INJECTION64_PATH unset.
    #[test]
    #[ignore = "a timing, printed: run by hand"]
    fn cost_per_range_without_a_tool() {
        let ln = LayerNormDesc::new(
            &[16384, 4096],
            &[4096],
            DType::BF16,
            DType::F32,
            Affine::WeightBias,
            1e-5,
        )
        .unwrap()
        .check()
        .unwrap();
        let n = 10_000_000u32;
        for _ in 0..1000 {
            drop(std::hint::black_box(range(
                Op::LayerNormForward,
                std::hint::black_box(&ln),
            )));
        }
        let t = std::time::Instant::now();
        for _ in 0..n {
            drop(std::hint::black_box(range(
                Op::LayerNormForward,
                std::hint::black_box(&ln),
            )));
        }
        let per = t.elapsed().as_secs_f64() / f64::from(n) * 1e9;
        println!(
            "one range (push + pop, features nvtx={} tracing={}), no tool attached: {per:.2} ns",
            cfg!(feature = "nvtx"),
            cfg!(feature = "tracing")
        );
        let t = std::time::Instant::now();
        for _ in 0..n / 100 {
            std::hint::black_box(
                Name {
                    op: Op::LayerNormForward,
                    what: std::hint::black_box(&ln),
                }
                .to_string(),
            );
        }
        let per = t.elapsed().as_secs_f64() / f64::from(n / 100) * 1e9;
        println!("formatting the name alone (what a range would cost if it always formatted): {per:.0} ns");
    }
}
