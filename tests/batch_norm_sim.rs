//! BatchNorm kernels on ptxsim (compute_75/80/90) against the CPU reference.

mod batch_norm_support;
mod common;

use batch_norm_support::{run_sim, Case};
use common::sim::{skip_without_kernels, Sim};
use warpnorm::batch_norm::Layout;
use warpnorm::{DType, DeviceProps};

#[test]
fn smoke_small_shapes() {
    if skip_without_kernels("smoke_small_shapes") {
        return;
    }
    for (dims, layout) in [
        (vec![4usize, 3], Layout::Contiguous),
        (vec![2, 3, 7], Layout::Contiguous),
        (vec![2, 8, 4, 4], Layout::Contiguous),
        (vec![2, 8, 4, 4], Layout::ChannelsLast),
    ] {
        let case = Case::new(&dims, layout, DType::F32, DType::F32);
        let mut sim = Sim::new(80);
        let t = std::time::Instant::now();
        let k = run_sim(&mut sim, &case, &DeviceProps::SIM).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{dims:?} {layout:?}: {:?} in {:?}", k, t.elapsed());
    }
}
