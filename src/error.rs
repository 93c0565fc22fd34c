//! The crate's one error type.

use cudarc::driver::DriverError;

/// Everything that can go wrong in warpnorm. Messages say what was expected and what was given.
///
/// Validation errors (`Shape`, `DType`, `Length`, `Workspace`, `Overlap`, `Alignment`,
/// `ContextMismatch`, `InvalidArgument`, `Overflow`, and for state loads `MissingKey`,
/// `UnexpectedKey`, `Checkpoint`) are always returned before any kernel is launched, so a
/// rejected call leaves every output and every running statistic untouched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor's shape does not fit the operation.
    #[error("shape mismatch for {what}: expected {expected}, got {given}")]
    Shape {
        /// Which argument.
        what: String,
        /// What the operation needs.
        expected: String,
        /// What it was given.
        given: String,
    },
    /// An element type the operation does not accept, or two arguments whose types disagree.
    #[error("dtype mismatch for {what}: expected {expected}, got {given}")]
    DType {
        /// Which argument.
        what: String,
        /// What the operation needs.
        expected: String,
        /// What it was given.
        given: String,
    },
    /// A buffer holds the wrong number of elements.
    #[error("length mismatch for {what}: expected {expected} elements, got {given}")]
    Length {
        /// Which argument.
        what: String,
        /// Elements the operation needs.
        expected: usize,
        /// Elements the buffer holds.
        given: usize,
    },
    /// The workspace is smaller than the op's `*_workspace_bytes` query returned.
    #[error("workspace too small: the call needs at least {needed} bytes, got {given}")]
    Workspace {
        /// Bytes the query returned for this call.
        needed: usize,
        /// Bytes of the workspace given.
        given: usize,
    },
    /// An output overlaps another buffer of the same call (other than a documented in-place
    /// pair, such as BatchNorm's `y == x`).
    #[error("{what} and {other} overlap in device memory")]
    Overlap {
        /// One buffer.
        what: String,
        /// The buffer it overlaps.
        other: String,
    },
    /// A device address is not aligned to its element size.
    #[error("{what} is misaligned: address {address:#x} is not a multiple of {required} bytes")]
    Alignment {
        /// Which argument.
        what: String,
        /// The device address given.
        address: u64,
        /// The alignment required, in bytes.
        required: u64,
    },
    /// A buffer lives in a different CUDA context than the stream the operation runs on.
    #[error("{what} belongs to CUDA device {given} but the stream runs on device {expected}")]
    ContextMismatch {
        /// Which argument.
        what: String,
        /// Ordinal of the stream's device.
        expected: usize,
        /// Ordinal of the buffer's device.
        given: usize,
    },
    /// An argument outside its valid range (eps, momentum, a dimension, ...).
    #[error("invalid {what}: {message}")]
    InvalidArgument {
        /// Which argument.
        what: String,
        /// What is wrong with it.
        message: String,
    },
    /// A module state entry the module has is absent from a strict load (PyTorch's missing
    /// keys). `key` is the full name, prefix included (e.g. `layer1.bn.running_var`).
    #[error("missing state entry `{key}`: the module has it and a strict load needs it")]
    MissingKey {
        /// The entry's full name.
        key: String,
    },
    /// A state entry the module does not have (PyTorch's unexpected keys): a name that is not a
    /// state entry, or one the module lacks (no affine parameters, untracked statistics).
    #[error("unexpected state entry `{key}`: {reason}")]
    UnexpectedKey {
        /// The entry's full name.
        key: String,
        /// Why the module cannot take it.
        reason: String,
    },
    /// A checkpoint that cannot be read or written: malformed safetensors data, or an I/O
    /// error on its file.
    #[error("checkpoint {what}: {message}")]
    Checkpoint {
        /// The file, or what was being read or written.
        what: String,
        /// What went wrong.
        message: String,
    },
    /// A size computation overflowed (shape products, byte counts, grid sizes).
    #[error("size overflow: {0}")]
    Overflow(String),
    /// The crate was built without nvcc, so it has no kernels to launch.
    #[error("the warpnorm CUDA kernels were not built: {reason}")]
    KernelsNotBuilt {
        /// The build script's explanation.
        reason: &'static str,
    },
    /// The GPU can run none of the embedded kernel images.
    #[error(
        "no warpnorm kernel image runs on this GPU (compute capability {major}.{minor}): the crate \
         was built with SASS for {built} (chosen by {chosen_by}) and PTX for compute_{ptx} (nvcc \
         {nvcc}), and the driver answered {driver}; rebuild with \
         WARPNORM_CUDA_ARCHS=\"{major}{minor}\" (or `all`, or a newer nvcc)"
    )]
    NoKernelImage {
        /// Device compute capability, major.
        major: u32,
        /// Device compute capability, minor.
        minor: u32,
        /// The SASS architectures built, e.g. "sm_75, sm_80".
        built: String,
        /// What chose the SASS architectures: an environment variable, the build machine's GPUs
        /// (nvidia-smi) or the default list.
        chosen_by: &'static str,
        /// The PTX architecture embedded.
        ptx: u32,
        /// nvcc version used.
        nvcc: &'static str,
        /// The driver's error.
        driver: String,
    },
    /// A kernel name that no embedded module exports (a planner/kernel mismatch: a bug).
    #[error("kernel `{0}` is not in the embedded modules")]
    UnknownKernel(String),
    /// No usable CUDA driver or device: libcuda missing, a stub library, or no device.
    #[error("no usable CUDA device: {0}")]
    NoDevice(String),
    /// The CUDA driver returned an error.
    #[error("CUDA driver error while {during}: {source}")]
    Driver {
        /// What warpnorm was doing.
        during: String,
        /// The driver's error code.
        #[source]
        source: DriverError,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn driver(during: impl Into<String>) -> impl FnOnce(DriverError) -> Error {
        let during = during.into();
        move |source| Error::Driver { during, source }
    }

    pub(crate) fn shape(
        what: impl Into<String>,
        expected: impl Into<String>,
        given: impl Into<String>,
    ) -> Error {
        Error::Shape {
            what: what.into(),
            expected: expected.into(),
            given: given.into(),
        }
    }

    pub(crate) fn invalid(what: impl Into<String>, message: impl Into<String>) -> Error {
        Error::InvalidArgument {
            what: what.into(),
            message: message.into(),
        }
    }
}
