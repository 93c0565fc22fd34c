//! # perfmodel
//!
//! A performance model of warpnorm's kernels that runs without a GPU (issue 11): it reads the
//! SASS of the kernels the build shipped (`cuobjdump -sass`, [`tools`], [`sass`]), the `ptxas`
//! figures (`warpnorm::kernels::RESOURCES`) and the real plans ([`plans`]), and predicts each
//! launch's time as the largest of bandwidth, Little's-law and issue terms plus a launch
//! overhead ([`model`]), with every constant in [`gpu`]. [`report`] writes
//! `reports/perf-model.md` and `reports/perf-model.json`; [`budget`] checks the budgets against
//! the checked-in list of kernels below budget (`perfmodel/below_budget.txt`).
//!
//! Regenerate the report: `cargo run -p perfmodel -- report` (the dev profile shares the
//! kernels build with `cargo test --workspace`). Explain one kernel's walk:
//! `cargo run -p perfmodel -- walk <kernel> [arch]`.

#![warn(missing_docs)]

pub mod budget;
pub mod gpu;
pub mod model;
pub mod plans;
pub mod report;
pub mod sass;
pub mod tools;

use std::cell::RefCell;
use std::collections::BTreeMap;

use gpu::Gpu;
use model::{KernelFacts, OpPrediction};
use sass::Function;
use tools::ToolError;

/// The parsed SASS of warpnorm's kernels, per architecture.
pub struct Sass {
    by_arch: BTreeMap<u32, BTreeMap<String, Function>>,
    walks: RefCell<BTreeMap<(u32, String), KernelFacts>>,
}

impl Sass {
    /// Disassembles the build's kernels for each of `archs`.
    pub fn load(archs: &[u32]) -> Result<Sass, ToolError> {
        Sass::load_families(archs, None)
    }

    /// [`Sass::load`] for the named kernel families only (`copy`, `layer_norm`, `batch_norm`).
    pub fn load_families(archs: &[u32], families: Option<&[&str]>) -> Result<Sass, ToolError> {
        let mut by_arch = BTreeMap::new();
        for &a in archs {
            by_arch.insert(a, tools::warpnorm_sass_of(a, families)?);
        }
        Ok(Sass {
            by_arch,
            walks: RefCell::new(BTreeMap::new()),
        })
    }

    /// The architectures loaded.
    pub fn archs(&self) -> Vec<u32> {
        self.by_arch.keys().copied().collect()
    }

    /// One kernel's SASS.
    pub fn function(&self, arch: u32, kernel: &str) -> Option<&Function> {
        self.by_arch.get(&arch)?.get(kernel)
    }

    /// One kernel's facts (main-loop walk and ptxas figures), computed once. A kernel missing
    /// from the SASS gets empty facts (no loads found: the report shows MLP 0).
    pub fn facts(&self, arch: u32, kernel: &str) -> KernelFacts {
        let key = (arch, kernel.to_string());
        if let Some(f) = self.walks.borrow().get(&key) {
            return f.clone();
        }
        let walk = self
            .function(arch, kernel)
            .map(sass::walk_main_loop)
            .unwrap_or_default();
        let f = KernelFacts::new(walk, kernel, arch);
        self.walks.borrow_mut().insert(key, f.clone());
        f
    }
}

/// Predicts every case ([`plans::cases`]) on every GPU of `gpus` whose SASS is loaded.
pub fn predict_all(sass: &Sass, gpus: &[Gpu]) -> Result<Vec<OpPrediction>, String> {
    let mut out = Vec::new();
    for g in gpus {
        if !sass.by_arch.contains_key(&g.sass_arch) {
            continue;
        }
        for c in plans::cases(&g.props)? {
            out.push(model::predict(g, &c, &|k| sass.facts(g.sass_arch, k)));
        }
    }
    Ok(out)
}
