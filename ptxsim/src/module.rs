//! [`Module`]: a parsed and lowered PTX module.

use crate::error::SimError;
use crate::lower::{self, GlobalVar, Kernel};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One parameter of a kernel entry, in declaration order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// Parameter name as written in the PTX.
    pub name: String,
    /// Size in bytes (an [`crate::Arg`] for it must have exactly this size).
    pub size: usize,
    /// Alignment in bytes.
    pub align: usize,
    /// Offset in the kernel parameter buffer.
    pub offset: usize,
}

/// Facts about one `.entry`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    /// Entry name.
    pub name: String,
    /// Parameters in order.
    pub params: Vec<ParamInfo>,
    /// Bytes of statically declared shared memory.
    pub static_shared_bytes: usize,
    /// Offset at which dynamic (`.extern .shared`) memory starts.
    pub dynamic_shared_offset: usize,
    /// Bytes of local memory per thread (`.local` arrays and call parameters).
    pub local_bytes: usize,
    /// Number of simulated registers (including special-register slots).
    pub registers: usize,
    /// Number of lowered instructions (entry and the functions it calls).
    pub instructions: usize,
}

/// A parsed and lowered PTX module. Immutable; launch it on a [`crate::Device`] any number of times.
#[derive(Debug)]
pub struct Module {
    pub(crate) id: u64,
    version: (u32, u32),
    target: String,
    pub(crate) kernels: Vec<Kernel>,
    entries: Vec<EntryInfo>,
    pub(crate) globals: Vec<GlobalVar>,
}

impl Module {
    /// Parses PTX text (as emitted by nvcc) and lowers every `.entry`.
    ///
    /// Errors name the PTX line: [`SimError::Parse`] for malformed text and
    /// [`SimError::Unsupported`] for valid PTX that ptxsim does not model.
    pub fn parse(ptx: &str) -> Result<Module, SimError> {
        let ast = crate::parser::parse(ptx)?;
        let (globals, gmap) = lower::lower_globals(&ast)?;
        let mut kernels = Vec::new();
        let mut entries = Vec::new();
        for f in ast.funcs.iter().filter(|f| f.is_entry && f.body.is_some()) {
            let k = lower::KCtx::lower_entry(&ast, &gmap, f)?;
            entries.push(EntryInfo {
                name: k.name.clone(),
                params: k
                    .params
                    .iter()
                    .map(|p| ParamInfo {
                        name: p.name.clone(),
                        size: p.size,
                        align: p.align,
                        offset: p.offset,
                    })
                    .collect(),
                static_shared_bytes: k.static_shared as usize,
                dynamic_shared_offset: k.dyn_shared_offset as usize,
                local_bytes: k.local_size as usize,
                registers: k.nregs as usize,
                instructions: k.code.len(),
            });
            kernels.push(k);
        }
        Ok(Module {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            version: ast.version,
            target: ast.target,
            kernels,
            entries,
            globals,
        })
    }

    /// Names of every `.entry`, in module order.
    pub fn entry_names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }

    /// Facts about entry `name`.
    pub fn entry(&self, name: &str) -> Option<&EntryInfo> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// The `.version` directive (major, minor).
    pub fn version(&self) -> (u32, u32) {
        self.version
    }

    /// The `.target` directive (e.g. `sm_80`).
    pub fn target(&self) -> &str {
        &self.target
    }

    pub(crate) fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name == name)
    }
}
