//! The build produced what the runtime and the simulator need: a fatbin per `cuda/*.cu`, PTX
//! for compute_75/80/90 exporting the same entry points, and ptxas figures for every kernel on
//! every SASS architecture.

use warpnorm::kernels;

const FATBIN_MAGIC: u32 = 0xBA55_ED50;

#[test]
fn every_family_has_a_fatbin_and_ptx_for_each_sim_arch() {
    if testkit::sim::skip_without_kernels("every_family_has_a_fatbin_and_ptx_for_each_sim_arch") {
        return;
    }
    let names: Vec<&str> = kernels::FAMILIES.iter().map(|f| f.name).collect();
    for expected in ["batch_norm", "copy", "layer_norm"] {
        assert!(
            names.contains(&expected),
            "family {expected} missing: {names:?}"
        );
    }
    for f in kernels::FAMILIES {
        assert!(f.fatbin.len() > 16, "{}: empty fatbin", f.name);
        let magic = u32::from_le_bytes(f.fatbin[..4].try_into().unwrap());
        assert_eq!(magic, FATBIN_MAGIC, "{}: not a fatbin", f.name);
        assert!(!f.entries.is_empty(), "{}: no entry points", f.name);
        for arch in testkit::sim::SIM_ARCHS {
            let ptx =
                kernels::ptx(f.name, arch).unwrap_or_else(|| panic!("{} compute_{arch}", f.name));
            assert!(
                ptx.contains(&format!(".target sm_{arch}")),
                "{} compute_{arch} target",
                f.name
            );
            let mut entries: Vec<&str> = ptx
                .lines()
                .filter_map(|l| l.trim().strip_prefix(".visible .entry "))
                .map(|r| r.split('(').next().unwrap().trim())
                .collect();
            entries.sort_unstable();
            let mut want = f.entries.to_vec();
            want.sort_unstable();
            assert_eq!(
                entries, want,
                "{} compute_{arch}: entry points differ",
                f.name
            );
            for e in f.entries {
                assert!(
                    e.starts_with("warpnorm_"),
                    "{e}: entry points are named warpnorm_<op>_..."
                );
            }
        }
    }
}

#[test]
fn ptxas_figures_cover_every_kernel_on_every_sass_arch() {
    if testkit::sim::skip_without_kernels("ptxas_figures_cover_every_kernel_on_every_sass_arch") {
        return;
    }
    assert!(!kernels::SASS_ARCHS.is_empty());
    for e in kernels::all_entries() {
        for &arch in kernels::SASS_ARCHS {
            let r = kernels::RESOURCES
                .iter()
                .find(|r| r.kernel == e && r.arch == arch)
                .unwrap_or_else(|| panic!("no ptxas figures for {e} on sm_{arch}"));
            assert!(
                r.registers > 0 && r.registers <= 255,
                "{e} sm_{arch}: {} registers",
                r.registers
            );
            // The build fails on spills; stack frames stay small (no local arrays spilled).
            assert!(
                r.stack_bytes <= 64,
                "{e} sm_{arch}: {} bytes of stack",
                r.stack_bytes
            );
        }
    }
}
