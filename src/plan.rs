//! *Advanced.* Launch plans: what validation and planning produce, and what every executor runs.
//!
//! A [`Plan`] is plain data - kernel names, grid and block sizes, dynamic shared memory and the
//! bytes of each kernel's argument struct (defined once in `cuda/abi.h`). The GPU path
//! ([`crate::runtime`]) and the ptxsim tests execute the same plans, so tests never assemble
//! kernel arguments by hand.

use std::fmt;

use crate::device::DeviceProps;
use crate::{Error, Result};

/// A kernel argument struct from `cuda/abi.h` (generated into [`crate::abi`]).
///
/// # Safety
/// Implementors must be `#[repr(C)]` plain-old-data with no implicit padding (the ABI header
/// adds explicit padding fields), so that their bytes are fully initialized and match the
/// C layout the kernels read.
pub unsafe trait AbiArgs: Copy + Send + Sync + 'static {
    /// The C struct name, for plan listings.
    const NAME: &'static str;
}

/// The argument struct of one launch, kept as its bytes plus its type name.
#[derive(Clone, PartialEq, Eq)]
pub struct KernelArgs {
    type_name: &'static str,
    words: Vec<u64>,
    len: usize,
}

impl KernelArgs {
    /// Captures an argument struct.
    pub fn new<T: AbiArgs>(args: &T) -> KernelArgs {
        let len = std::mem::size_of::<T>();
        let mut words = vec![0u64; len.div_ceil(8)];
        // SAFETY: T is padding-free POD (AbiArgs contract), so all `len` bytes are initialized;
        // `words` holds at least `len` bytes and does not overlap `args`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                args as *const T as *const u8,
                words.as_mut_ptr() as *mut u8,
                len,
            );
        }
        KernelArgs {
            type_name: T::NAME,
            words,
            len,
        }
    }

    /// The struct's bytes (8-byte aligned in memory).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialized bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }

    /// Pointer to the bytes, for `cuLaunchKernel`'s parameter array.
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.words.as_ptr() as *const u8
    }

    /// The C struct name.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// Reads the struct back, if it is a `T`.
    pub fn get<T: AbiArgs>(&self) -> Option<T> {
        if self.type_name != T::NAME || self.len != std::mem::size_of::<T>() {
            return None;
        }
        // SAFETY: same type and size as captured; words are 8-byte aligned (>= align of ABI
        // structs, which hold at most 8-byte fields); read_unaligned needs no alignment anyway.
        Some(unsafe { std::ptr::read_unaligned(self.words.as_ptr() as *const T) })
    }
}

impl fmt::Debug for KernelArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} bytes)", self.type_name, self.len)
    }
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// `extern "C"` entry point, `warpnorm_<op>_<dir>_<dtype>_<variant>`.
    pub kernel: String,
    /// Grid size in blocks (x, y, z).
    pub grid: [u32; 3],
    /// Block size in threads (x, y, z).
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub shared_mem_bytes: u32,
    /// The kernel's argument struct.
    pub args: KernelArgs,
    /// A cooperative launch (`cuLaunchCooperativeKernel`): every block resident at once, so
    /// that the kernel's blocks may wait for each other. The planner sizes such grids within
    /// one wave of the kernel's occupancy.
    pub cooperative: bool,
}

impl Launch {
    /// A launch with a 1-D grid and block and the given argument struct.
    pub fn new<T: AbiArgs>(
        kernel: impl Into<String>,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        args: &T,
    ) -> Launch {
        Launch {
            kernel: kernel.into(),
            grid,
            block,
            shared_mem_bytes,
            args: KernelArgs::new(args),
            cooperative: false,
        }
    }

    /// This launch, cooperative (see [`Launch::cooperative`]).
    pub fn into_cooperative(mut self) -> Launch {
        self.cooperative = true;
        self
    }

    /// Threads per block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&b| b as u64).product()
    }

    /// Blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| g as u64).product()
    }

    /// Checks the launch against the device's limits.
    pub fn check(&self, props: &DeviceProps) -> Result<()> {
        let bad = |m: String| Err(Error::invalid(format!("launch of {}", self.kernel), m));
        if self.grid.contains(&0) || self.block.contains(&0) {
            return bad(format!(
                "empty grid {:?} or block {:?}",
                self.grid, self.block
            ));
        }
        if self.threads_per_block() > props.max_threads_per_block as u64 {
            return bad(format!(
                "block {:?} has more than {} threads",
                self.block, props.max_threads_per_block
            ));
        }
        if self.grid[0] > DeviceProps::MAX_GRID_X
            || self.grid[1] > props.max_grid_yz
            || self.grid[2] > props.max_grid_yz
        {
            return bad(format!("grid {:?} exceeds the device's limits", self.grid));
        }
        if self.shared_mem_bytes > props.max_shared_per_block_optin {
            return bad(format!(
                "{} bytes of dynamic shared memory exceed the device's {} bytes per block",
                self.shared_mem_bytes, props.max_shared_per_block_optin
            ));
        }
        Ok(())
    }
}

/// An ordered list of launches on one stream. An empty plan is valid (nothing to do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The launches, in stream order.
    pub launches: Vec<Launch>,
}

impl Plan {
    /// A plan with no launches.
    pub fn empty() -> Plan {
        Plan::default()
    }

    /// Appends a launch.
    pub fn push(&mut self, launch: Launch) {
        self.launches.push(launch);
    }

    /// Checks every launch against the device's limits.
    pub fn check(&self, props: &DeviceProps) -> Result<()> {
        self.launches.iter().try_for_each(|l| l.check(props))
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.launches {
            writeln!(
                f,
                "{} grid={:?} block={:?} smem={} args={:?}{}",
                l.kernel,
                l.grid,
                l.block,
                l.shared_mem_bytes,
                l.args,
                if l.cooperative { " cooperative" } else { "" }
            )?;
        }
        Ok(())
    }
}

/// Direction of a pass: which of an op's plans, workspaces and kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Forward: the outputs (and the saved statistics) from the input.
    Forward,
    /// Backward: the input's (and the parameters') gradients.
    Backward,
}

/// Something that runs plans: a CUDA stream ([`crate::runtime::GpuExecutor`]) or, in the
/// test suite, the ptxsim simulator. Plans are made for the executor's [`DeviceProps`].
pub trait Executor {
    /// The properties of the device plans for this executor must be made for.
    fn props(&self) -> &DeviceProps;

    /// Runs every launch of the plan, in order.
    fn execute(&mut self, plan: &Plan) -> Result<()>;
}

/// Converts a u64 grid dimension to u32, or an overflow error naming the kernel.
pub(crate) fn grid_dim(v: u64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Overflow(format!("{what}: grid dimension {v} exceeds u32")))
}
