//! Errors: simulator errors ([`SimError`]) and guest faults ([`Fault`]).

use std::fmt;

/// Everything that can go wrong when parsing PTX or running a kernel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The PTX text is malformed.
    #[error("PTX parse error at line {line}: {message}")]
    Parse {
        /// 1-based PTX line.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// Valid PTX that ptxsim does not model.
    #[error("unsupported PTX at line {line}: {what}")]
    Unsupported {
        /// 1-based PTX line.
        line: usize,
        /// The opcode or syntax that is not modelled.
        what: String,
    },
    /// No `.entry` of that name in the module.
    #[error("no kernel entry named `{0}` in the module")]
    UnknownEntry(String),
    /// API misuse: wrong argument count or size, bad launch configuration, bad pointer.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The kernel misbehaved (out-of-bounds access, barrier divergence, ...).
    #[error("{0}")]
    Fault(Box<Fault>),
    /// A block executed more warp instructions than `Options::max_warp_steps`.
    #[error("kernel {kernel} exceeded the step limit of {steps} warp instructions in one block (infinite loop?)")]
    StepLimit {
        /// Kernel name.
        kernel: String,
        /// The limit that was exceeded.
        steps: u64,
    },
    /// A block of a cooperative launch gave up waiting (at a `nanosleep`) because another
    /// block of the launch failed; the launch returns that block's error, never this one.
    #[error("block abandoned: another block of the cooperative launch failed")]
    Abandoned,
    /// Host-side memory API misuse (bad pointer for read/write/free, out of memory).
    #[error("memory error: {0}")]
    Memory(String),
}

impl From<Fault> for SimError {
    fn from(f: Fault) -> Self {
        SimError::Fault(Box::new(f))
    }
}

/// What kind of guest fault happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// Global access outside every live allocation.
    OutOfBounds,
    /// Access address not aligned to the access width.
    Misaligned,
    /// Global access into a freed allocation.
    UseAfterFree,
    /// Shared-memory access outside the block's shared memory.
    SharedOutOfBounds,
    /// Local-memory access outside the thread's local memory.
    LocalOutOfBounds,
    /// Parameter-space access outside the parameter buffer, or a write to kernel parameters.
    ParamOutOfBounds,
    /// A lane named in a warp-synchronous mask exited, does not exist, or the executing lane is not in its own mask.
    ShflMaskLane,
    /// A block barrier that part of the block can never reach.
    BarrierDivergence,
    /// No thread of the block can make progress.
    Deadlock,
    /// `trap` or `brkpt` executed.
    Trap,
    /// Integer division by zero (`div`/`rem`).
    DivideByZero,
    /// Control flow left the function without `ret`/`exit`, or an invalid call.
    InvalidControlFlow,
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            FaultKind::OutOfBounds => "out-of-bounds",
            FaultKind::Misaligned => "misaligned",
            FaultKind::UseAfterFree => "use-after-free",
            FaultKind::SharedOutOfBounds => "out-of-bounds shared",
            FaultKind::LocalOutOfBounds => "out-of-bounds local",
            FaultKind::ParamOutOfBounds => "out-of-bounds parameter",
            FaultKind::ShflMaskLane => "warp-synchronous mask error",
            FaultKind::BarrierDivergence => "barrier divergence",
            FaultKind::Deadlock => "deadlock",
            FaultKind::Trap => "trap",
            FaultKind::DivideByZero => "integer division by zero",
            FaultKind::InvalidControlFlow => "invalid control flow",
        };
        f.write_str(s)
    }
}

/// A guest fault: the kernel did something a GPU (or compute-sanitizer) would flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// What happened.
    pub kind: FaultKind,
    /// Kernel (entry) name.
    pub kernel: String,
    /// 1-based PTX line of the faulting instruction.
    pub line: usize,
    /// Block index.
    pub block: [u32; 3],
    /// Thread index within the block.
    pub thread: [u32; 3],
    /// Faulting address, for memory faults.
    pub address: Option<u64>,
    /// Base and size of the owning or nearest allocation, for global memory faults.
    pub allocation: Option<(u64, usize)>,
    /// Human-readable description (e.g. `global store of 4 bytes at 0x..`).
    pub message: String,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} in kernel {} (PTX line {}), block ({},{},{}) thread ({},{},{})",
            self.kind,
            self.message,
            self.kernel,
            self.line,
            self.block[0],
            self.block[1],
            self.block[2],
            self.thread[0],
            self.thread[1],
            self.thread[2]
        )?;
        if let (Some(a), Some((base, size))) = (self.address, self.allocation) {
            if a >= base + size as u64 {
                write!(
                    f,
                    ": {} bytes past allocation {:#x} ({} bytes)",
                    a - (base + size as u64),
                    base,
                    size
                )?;
            } else if a < base {
                write!(
                    f,
                    ": {} bytes before allocation {:#x} ({} bytes)",
                    base - a,
                    base,
                    size
                )?;
            } else {
                write!(
                    f,
                    ": at offset {} of allocation {:#x} ({} bytes)",
                    a - base,
                    base,
                    size
                )?;
            }
        }
        Ok(())
    }
}
