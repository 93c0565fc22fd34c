//! How build.rs chooses the SASS architectures (`build/archs.rs`, the same file build.rs
//! includes): the environment variables, the build machine's GPUs as nvidia-smi lists them
//! (stand-in nvidia-smi scripts here, as no machine of this project has a GPU), the default
//! list, and what this nvcc supports.

#[path = "../../build/archs.rs"]
mod archs;

use archs::{
    detect_gpus, parse_arch_list, parse_compute_caps, requested_archs, supported_subset,
    ArchSource, DEFAULT_SASS_ARCHS,
};
use std::path::PathBuf;

/// What nvcc 13.0 lists (`nvcc --list-gpu-code`, sm_ numbers).
const NVCC13: &[u32] = &[75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121];

fn no_detection() -> Result<Vec<u32>, String> {
    panic!("an explicit list must not run nvidia-smi")
}

/// An executable shell script standing in for nvidia-smi: it checks the query it was given
/// and prints `stdout` with exit status `status`.
fn fake_nvidia_smi(dir: &std::path::Path, name: &str, stdout: &str, status: i32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    let script = format!(
        "#!/bin/sh\n\
         [ \"$1\" = --query-gpu=compute_cap ] && [ \"$2\" = --format=csv,noheader ] || exit 99\n\
         printf '%s' '{stdout}'\nexit {status}\n"
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The stand-in nvidia-smi programs, all written before any test runs one (a script being
/// written while another thread forks could fail to execute with "text file busy").
struct Fakes {
    h100: PathBuf,
    two: PathBuf,
    none: PathBuf,
    old: PathBuf,
}

fn fakes() -> &'static Fakes {
    static FAKES: std::sync::OnceLock<Fakes> = std::sync::OnceLock::new();
    FAKES.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("warpnorm-archs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Fakes {
            h100: fake_nvidia_smi(&dir, "h100", "9.0\n", 0),
            two: fake_nvidia_smi(&dir, "two", "8.0\n12.0\n", 0),
            // nvidia-smi on a machine without a GPU (exit status 6), and one whose driver
            // predates the compute_cap field (it prints an error and fails).
            none: fake_nvidia_smi(&dir, "none", "No devices were found\n", 6),
            old: fake_nvidia_smi(
                &dir,
                "old",
                "Field \"compute_cap\" is not a valid field to query.\n",
                2,
            ),
        }
    })
}

#[test]
fn arch_lists_in_every_spelling() {
    assert_eq!(parse_arch_list("80;90").unwrap(), vec![80, 90]);
    assert_eq!(parse_arch_list("8.0,9.0").unwrap(), vec![80, 90]);
    assert_eq!(parse_arch_list("sm_80 sm_90").unwrap(), vec![80, 90]);
    assert_eq!(parse_arch_list(" 120 ").unwrap(), vec![120]);
    assert_eq!(parse_arch_list("compute_75").unwrap(), vec![75]);
    assert!(parse_arch_list("hopper").unwrap_err().contains("hopper"));
    assert!(
        parse_arch_list(" ; ").is_err(),
        "a list naming nothing is an error"
    );
}

#[test]
fn nvidia_smi_compute_caps() {
    assert_eq!(parse_compute_caps("9.0\n").unwrap(), vec![90]);
    // Eight GPUs of two kinds: each architecture once, ascending.
    let mixed = "9.0\n9.0\n8.6\n9.0\n8.6\n9.0\n9.0\n9.0\n";
    assert_eq!(parse_compute_caps(mixed).unwrap(), vec![86, 90]);
    assert_eq!(
        parse_compute_caps("12.0\r\n10.3\r\n").unwrap(),
        vec![103, 120]
    );
    assert!(parse_compute_caps("").is_err());
    assert!(parse_compute_caps("[N/A]\n").unwrap_err().contains("[N/A]"));
    assert!(parse_compute_caps("9\n").is_err());
    assert!(parse_compute_caps("9.10\n").is_err());
}

#[test]
fn detection_runs_nvidia_smi() {
    let f = fakes();
    assert_eq!(detect_gpus(&f.h100).unwrap(), vec![90]);
    assert_eq!(detect_gpus(&f.two).unwrap(), vec![80, 120]);
    // No GPU, or an old driver: no architecture, and why.
    assert!(detect_gpus(&f.none)
        .unwrap_err()
        .contains("No devices were found"));
    assert!(detect_gpus(&f.old)
        .unwrap_err()
        .contains("not a valid field"));
    let missing = std::env::temp_dir().join("warpnorm-archs-no-such-dir/nvidia-smi");
    assert!(detect_gpus(&missing).unwrap_err().contains("could not run"));
}

#[test]
fn explicit_lists_win_over_detection() {
    let (a, s, note) = requested_archs(Some("80;90"), Some("120"), no_detection).unwrap();
    assert_eq!(
        (a, s, note),
        (vec![80, 90], ArchSource::WarpnormCudaArchs, None)
    );
    let (a, s, _) = requested_archs(Some("all"), None, no_detection).unwrap();
    assert_eq!(
        (a.as_slice(), s),
        (DEFAULT_SASS_ARCHS, ArchSource::WarpnormCudaArchs)
    );
    let (a, s, _) = requested_archs(None, Some("8.6"), no_detection).unwrap();
    assert_eq!((a, s), (vec![86], ArchSource::CudaComputeCap));
    assert!(requested_archs(Some("ampere"), None, no_detection).is_err());
}

#[test]
fn detected_gpus_or_the_default_list() {
    let f = fakes();
    let (a, s, note) = requested_archs(None, None, || detect_gpus(&f.h100)).unwrap();
    assert_eq!((a, s, note), (vec![90], ArchSource::NvidiaSmi, None));
    let (a, s, _) = requested_archs(Some("native"), None, || detect_gpus(&f.h100)).unwrap();
    assert_eq!((a, s), (vec![90], ArchSource::NvidiaSmi));

    // No GPU: the default list, with the reason for the build log; `native` insists.
    let (a, s, note) = requested_archs(None, None, || detect_gpus(&f.none)).unwrap();
    assert_eq!((a.as_slice(), s), (DEFAULT_SASS_ARCHS, ArchSource::Default));
    assert!(note.unwrap().contains("No devices were found"));
    let err = requested_archs(Some("native"), None, || detect_gpus(&f.none)).unwrap_err();
    assert!(err.contains("WARPNORM_CUDA_ARCHS=native"), "{err}");
}

#[test]
fn only_what_nvcc_supports() {
    let (kept, dropped) =
        supported_subset(&[90, 75, 90, 37], ArchSource::WarpnormCudaArchs, NVCC13).unwrap();
    assert_eq!((kept, dropped), (vec![75, 90], vec![37]));
    // The default list is all supported by nvcc 13.0.
    let (kept, dropped) =
        supported_subset(DEFAULT_SASS_ARCHS, ArchSource::Default, NVCC13).unwrap();
    assert_eq!((kept.as_slice(), dropped.len()), (DEFAULT_SASS_ARCHS, 0));
    // A GPU newer than this nvcc: the default list, whose newest PTX the driver compiles for it.
    let (kept, dropped) = supported_subset(&[150], ArchSource::NvidiaSmi, NVCC13).unwrap();
    assert_eq!((kept.as_slice(), dropped), (DEFAULT_SASS_ARCHS, vec![150]));
    // The same asked for by name is an error, not a silent substitute.
    let err = supported_subset(&[150], ArchSource::WarpnormCudaArchs, NVCC13).unwrap_err();
    assert!(err.contains("WARPNORM_CUDA_ARCHS"), "{err}");
}

#[test]
fn this_build_says_what_chose_its_architectures() {
    if !warpnorm::kernels::BUILT {
        assert_eq!(warpnorm::kernels::ARCHS_SOURCE, "");
        return;
    }
    let sources = [
        ArchSource::WarpnormCudaArchs,
        ArchSource::CudaComputeCap,
        ArchSource::NvidiaSmi,
        ArchSource::Default,
    ];
    let source = sources
        .iter()
        .find(|s| s.describe() == warpnorm::kernels::ARCHS_SOURCE)
        .unwrap_or_else(|| panic!("unknown source {:?}", warpnorm::kernels::ARCHS_SOURCE));
    if *source == ArchSource::Default {
        assert_eq!(warpnorm::kernels::SASS_ARCHS, DEFAULT_SASS_ARCHS);
    }
}
