//! Which SASS architectures build.rs compiles. A module of its own so that
//! `tests/kernels/build_archs.rs` tests the same code (build.rs includes it with `#[path]`).
//!
//! The choice, first match wins:
//! 1. `WARPNORM_CUDA_ARCHS`: a list (`"80;90"`, `"8.0,9.0"`, `"sm_80 sm_90"`), `all` for the
//!    default list, or `native` for the GPUs of the build machine (an error if none is found);
//! 2. `CUDA_COMPUTE_CAP` (a list, as candle-kernels and other crates read it);
//! 3. the GPUs of the build machine, as `nvidia-smi --query-gpu=compute_cap` lists them (what
//!    candle-kernels does too), so a build on a machine with an H100 compiles sm_90 only;
//! 4. otherwise (no `nvidia-smi`, no GPU, a driver too old for that query) [`DEFAULT_SASS_ARCHS`].

use std::path::Path;
use std::process::Command;

/// Architectures that get SASS by default (intersected with `nvcc --list-gpu-code`): one per
/// SASS a device needs. A device runs the SASS of the highest built architecture with its
/// major version and a minor one not above its own, so sm_86/sm_87/sm_89 devices run the
/// sm_80 SASS and sm_103 the sm_100 SASS (`occupancy::sass_arch_in` applies the same rule);
/// the PTX of the newest covers later ones.
pub const DEFAULT_SASS_ARCHS: &[u32] = &[75, 80, 90, 100, 120];

/// Where the architectures came from, as the build and the runtime's errors name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchSource {
    /// `WARPNORM_CUDA_ARCHS` named them (`all` included).
    WarpnormCudaArchs,
    /// `CUDA_COMPUTE_CAP` named them.
    CudaComputeCap,
    /// `nvidia-smi` listed the build machine's GPUs.
    NvidiaSmi,
    /// [`DEFAULT_SASS_ARCHS`].
    Default,
}

impl ArchSource {
    /// How the build and `Error::NoKernelImage` describe this source.
    pub fn describe(self) -> &'static str {
        match self {
            ArchSource::WarpnormCudaArchs => "WARPNORM_CUDA_ARCHS",
            ArchSource::CudaComputeCap => "CUDA_COMPUTE_CAP",
            ArchSource::NvidiaSmi => "the build machine's GPUs (nvidia-smi)",
            ArchSource::Default => "the default list",
        }
    }
}

/// Parses "80;90", "8.0,9.0", "sm_80 sm_90" or "90" into arch numbers.
pub fn parse_arch_list(s: &str) -> Result<Vec<u32>, String> {
    let archs = s
        .split(|c: char| c == ';' || c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            let t = t.trim_start_matches("sm_").trim_start_matches("compute_");
            let digits: String = t.chars().filter(|c| c.is_ascii_digit()).collect();
            digits
                .parse::<u32>()
                .map_err(|_| format!("cannot read `{t}` as a CUDA architecture (e.g. 80 or 8.0)"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    if archs.is_empty() {
        return Err(format!("`{s}` names no CUDA architecture"));
    }
    Ok(archs)
}

/// Reads `nvidia-smi --query-gpu=compute_cap --format=csv,noheader`: one `major.minor` per
/// GPU ("9.0", "12.0"). Returns the distinct architectures in ascending order (90, 120), or why
/// the text is not such a list.
pub fn parse_compute_caps(stdout: &str) -> Result<Vec<u32>, String> {
    let mut archs = Vec::new();
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let arch = line
            .split_once('.')
            .and_then(|(major, minor)| {
                let major: u32 = major.parse().ok()?;
                let minor: u32 = minor.parse().ok()?;
                (major > 0 && minor < 10).then_some(major * 10 + minor)
            })
            .ok_or_else(|| format!("nvidia-smi printed `{line}`, not a compute capability"))?;
        if !archs.contains(&arch) {
            archs.push(arch);
        }
    }
    if archs.is_empty() {
        return Err("nvidia-smi listed no GPU".into());
    }
    archs.sort_unstable();
    Ok(archs)
}

/// The compute capabilities of the GPUs `nvidia_smi` lists, or why there are none (no such
/// program, no GPU, a driver whose nvidia-smi lacks the `compute_cap` field).
pub fn detect_gpus(nvidia_smi: &Path) -> Result<Vec<u32>, String> {
    let out = Command::new(nvidia_smi)
        .args(["--query-gpu=compute_cap", "--format=csv,noheader"])
        .output()
        .map_err(|e| format!("could not run {}: {e}", nvidia_smi.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            nvidia_smi.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout).trim()
        ));
    }
    parse_compute_caps(&String::from_utf8_lossy(&out.stdout))
}

/// The architectures asked for and where they came from, from the values of
/// `WARPNORM_CUDA_ARCHS` and `CUDA_COMPUTE_CAP` (None: unset) and a GPU detector (called only
/// when neither names a list). The second value is a note for the build log when detection
/// was tried and fell back to the default list.
pub fn requested_archs(
    warpnorm_cuda_archs: Option<&str>,
    cuda_compute_cap: Option<&str>,
    detect: impl FnOnce() -> Result<Vec<u32>, String>,
) -> Result<(Vec<u32>, ArchSource, Option<String>), String> {
    if let Some(v) = warpnorm_cuda_archs {
        return match v.trim() {
            "all" => Ok((
                DEFAULT_SASS_ARCHS.to_vec(),
                ArchSource::WarpnormCudaArchs,
                None,
            )),
            "native" => detect()
                .map(|a| (a, ArchSource::NvidiaSmi, None))
                .map_err(|e| format!("WARPNORM_CUDA_ARCHS=native, but no GPU was found: {e}")),
            list => Ok((parse_arch_list(list)?, ArchSource::WarpnormCudaArchs, None)),
        };
    }
    if let Some(v) = cuda_compute_cap {
        return Ok((parse_arch_list(v)?, ArchSource::CudaComputeCap, None));
    }
    match detect() {
        Ok(archs) => Ok((archs, ArchSource::NvidiaSmi, None)),
        Err(why) => Ok((DEFAULT_SASS_ARCHS.to_vec(), ArchSource::Default, Some(why))),
    }
}

/// Keeps the architectures this nvcc supports (sorted, deduplicated) and names the dropped
/// ones. GPUs found by nvidia-smi that this nvcc cannot target at all fall back to the default
/// list (whose newest PTX the driver can compile for them); an explicit list that keeps nothing
/// is an error.
pub fn supported_subset(
    requested: &[u32],
    source: ArchSource,
    supported: &[u32],
) -> Result<(Vec<u32>, Vec<u32>), String> {
    let keep = |list: &[u32]| {
        let mut kept: Vec<u32> = list
            .iter()
            .copied()
            .filter(|a| supported.contains(a))
            .collect();
        kept.sort_unstable();
        kept.dedup();
        kept
    };
    let dropped: Vec<u32> = requested
        .iter()
        .copied()
        .filter(|a| !supported.contains(a))
        .collect();
    let mut kept = keep(requested);
    if kept.is_empty() && source == ArchSource::NvidiaSmi {
        kept = keep(DEFAULT_SASS_ARCHS);
    }
    if kept.is_empty() {
        return Err(format!(
            "no architecture from {} is supported by this nvcc",
            source.describe()
        ));
    }
    Ok((kept, dropped))
}
