//! Quick LayerNorm checks on ptxsim: one case per tier on compute_80.

use crate::support::{run_case_dyn, Case, Views};
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::layer_norm::Affine;
use warpnorm::{DType, DeviceProps};

#[test]
fn one_case_per_tier() {
    if skip_without_kernels("one_case_per_tier") {
        return;
    }
    for (rows, cols) in [(3usize, 7usize), (5, 300), (3, 2000), (1, 8192)] {
        let case = Case {
            rows,
            cols,
            dtype: DType::F32,
            param_dtype: DType::F32,
            affine: Affine::WeightBias,
            views: Views::Aligned,
            seed: 1,
            x_offset: 0.0,
        };
        let mut sim = Sim::new(80);
        let t = std::time::Instant::now();
        let ran =
            run_case_dyn(&mut sim, &case, &DeviceProps::SIM).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{rows}x{cols}: {:?}\n{}{}", t.elapsed(), ran.fwd, ran.bwd);
    }
}
