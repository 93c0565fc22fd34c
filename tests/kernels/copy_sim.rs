//! The copy kernels on ptxsim: every variant, aligned and misaligned, with tails.

use testkit::sim::{skip_without_kernels, Sim, SIM_ARCHS};
use warpnorm::{copy::plan_copy, DeviceProps};

#[test]
fn copy_matches_input_on_every_arch() {
    if skip_without_kernels("copy_matches_input_on_every_arch") {
        return;
    }
    for arch in SIM_ARCHS {
        for (n, src_off, dst_off) in [
            (1usize, 0usize, 0usize),
            (37, 0, 0),
            (4096 + 3, 0, 0),
            (515, 1, 0),
            (515, 1, 1),
        ] {
            let mut sim = Sim::new(arch);
            let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
            let src = sim.upload(&data, src_off);
            let dst = sim.alloc::<f32>(n, dst_off);
            let plan = plan_copy(src, dst, (n * 4) as u64, &DeviceProps::SIM).unwrap();
            let expect_vec = src_off == 0 && dst_off == 0;
            assert_eq!(plan.launches[0].kernel.ends_with("vec16"), expect_vec);
            sim.run(&plan)
                .unwrap_or_else(|e| panic!("compute_{arch} n={n}: {e}"));
            assert_eq!(
                sim.download::<f32>(dst, n),
                data,
                "compute_{arch} n={n} offsets {src_off},{dst_off}"
            );
        }
    }
}
