//! NVIDIA's disassembler, found next to nvcc, and the SASS listings of warpnorm's kernels.
//!
//! `cuobjdump` comes from the pinned `nvidia-cuda-cuobjdump` wheel that
//! `scripts/install-cuda-toolchain.sh` links into nvcc's `bin/` folder (a CUDA toolkit has it
//! there too). It is looked for, in order: `WARPNORM_CUOBJDUMP`; the folder of `NVCC`; the `bin/`
//! of `CUDA_HOME`, `CUDA_PATH`, `CUDA_ROOT`; `PATH`; `/usr/local/cuda/bin`; the install script's
//! default prefix.

use std::collections::BTreeMap;
use std::env;
use std::fmt;
use std::path::PathBuf;
use std::process::Command;

use crate::sass::{parse_listing, Function};

/// What went wrong finding or running the disassembler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// No working cuobjdump anywhere we looked.
    NotFound(String),
    /// warpnorm was built without nvcc: there is no SASS to read.
    KernelsNotBuilt(String),
    /// The build has no SASS for the architecture the model needs.
    NoSass(u32),
    /// cuobjdump failed.
    Failed(String),
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::NotFound(looked) => write!(
                f,
                "cuobjdump was not found (looked at: {looked}); install it with \
                 `bash scripts/install-cuda-toolchain.sh` (it links cuobjdump and nvdisasm next \
                 to nvcc) and export NVCC=<the path it prints>, or set WARPNORM_CUOBJDUMP"
            ),
            ToolError::KernelsNotBuilt(why) => {
                write!(f, "warpnorm's kernels were not built: {why}")
            }
            ToolError::NoSass(arch) => write!(
                f,
                "the build has no sm_{arch} SASS (WARPNORM_CUDA_ARCHS must include {arch})"
            ),
            ToolError::Failed(msg) => write!(f, "cuobjdump failed: {msg}"),
        }
    }
}

impl std::error::Error for ToolError {}

fn works(p: &PathBuf) -> bool {
    p.is_file()
        && Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
}

/// The path of a working `cuobjdump` (see the module docs for where it is looked for).
pub fn cuobjdump() -> Result<PathBuf, ToolError> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = env::var_os("WARPNORM_CUOBJDUMP") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(nvcc) = env::var_os("NVCC") {
        if let Some(dir) = PathBuf::from(nvcc).parent() {
            candidates.push(dir.join("cuobjdump"));
        }
    }
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = env::var_os(var) {
            candidates.push(PathBuf::from(root).join("bin").join("cuobjdump"));
        }
    }
    if let Some(path) = env::var_os("PATH") {
        candidates.extend(env::split_paths(&path).map(|d| d.join("cuobjdump")));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/bin/cuobjdump"));
    let cache = env::var_os("WARPNORM_CUDA_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .map(|c| c.join("warpnorm").join("cuda-13.0"))
        });
    if let Some(c) = cache {
        candidates.push(c.join("nvidia").join("cu13").join("bin").join("cuobjdump"));
    }
    let looked = candidates
        .iter()
        .filter(|c| !c.as_os_str().is_empty())
        .take(6)
        .map(|c| c.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    candidates
        .into_iter()
        .find(works)
        .ok_or(ToolError::NotFound(looked))
}

/// Runs `cuobjdump -sass -arch sm_<arch>` on a fatbin's bytes and returns the listing.
pub fn disassemble(
    tool: &PathBuf,
    fatbin: &[u8],
    arch: u32,
    tag: &str,
) -> Result<String, ToolError> {
    let dir = env::temp_dir().join(format!("warpnorm-perfmodel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| ToolError::Failed(e.to_string()))?;
    let file = dir.join(format!("{tag}.fatbin"));
    std::fs::write(&file, fatbin).map_err(|e| ToolError::Failed(e.to_string()))?;
    let out = Command::new(tool)
        .arg("-sass")
        .arg("-arch")
        .arg(format!("sm_{arch}"))
        .arg(&file)
        .output()
        .map_err(|e| ToolError::Failed(format!("running {}: {e}", tool.display())));
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir(&dir);
    let out = out?;
    if !out.status.success() {
        return Err(ToolError::Failed(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every kernel of warpnorm's build for `sm_<arch>`, disassembled and parsed, by name.
pub fn warpnorm_sass(arch: u32) -> Result<BTreeMap<String, Function>, ToolError> {
    warpnorm_sass_of(arch, None)
}

/// [`warpnorm_sass`] for the named families only (`copy`, `layer_norm`, `batch_norm`), or all.
pub fn warpnorm_sass_of(
    arch: u32,
    families: Option<&[&str]>,
) -> Result<BTreeMap<String, Function>, ToolError> {
    use warpnorm::kernels;
    if !kernels::BUILT {
        return Err(ToolError::KernelsNotBuilt(
            kernels::NOT_BUILT_REASON.to_string(),
        ));
    }
    if !kernels::SASS_ARCHS.contains(&arch) {
        return Err(ToolError::NoSass(arch));
    }
    let tool = cuobjdump()?;
    // One thread per family: cuobjdump is single-threaded.
    let listings: Vec<Result<String, ToolError>> = std::thread::scope(|s| {
        let handles: Vec<_> = kernels::FAMILIES
            .iter()
            .filter(|f| families.is_none_or(|w| w.contains(&f.name)))
            .map(|f| {
                let tool = &tool;
                s.spawn(move || disassemble(tool, f.fatbin, arch, &format!("{}_{arch}", f.name)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(ToolError::Failed("thread panicked".into())))
            })
            .collect()
    });
    let mut all = BTreeMap::new();
    for l in listings {
        for f in parse_listing(&l?) {
            all.insert(f.name.clone(), f);
        }
    }
    Ok(all)
}

/// The outcome a test should take when the tools or kernels are missing: with
/// `WARPNORM_REQUIRE_NVCC=1` (scripts/test.sh) a failure, otherwise a printed skip.
pub fn require() -> bool {
    env::var("WARPNORM_REQUIRE_NVCC").is_ok_and(|v| v == "1")
}

/// nvcc: `NVCC`, else the one beside cuobjdump.
pub fn nvcc() -> Result<PathBuf, ToolError> {
    if let Some(p) = env::var_os("NVCC").map(PathBuf::from).filter(works) {
        return Ok(p);
    }
    let beside = cuobjdump()?.with_file_name("nvcc");
    if works(&beside) {
        Ok(beside)
    } else {
        Err(ToolError::NotFound(format!(
            "nvcc (NVCC, {})",
            beside.display()
        )))
    }
}

/// Compiles a `.cu` file to a cubin for `sm_<arch>` (`-O3`, as the build) and returns its
/// parsed SASS.
pub fn compile_and_disassemble(
    source: &std::path::Path,
    arch: u32,
) -> Result<Vec<Function>, ToolError> {
    let nvcc = nvcc()?;
    let tool = cuobjdump()?;
    // One folder per call: tests of one process compile probes concurrently.
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = env::temp_dir().join(format!(
        "warpnorm-perfmodel-probe-{}-{call}-{arch}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| ToolError::Failed(e.to_string()))?;
    let cubin = dir.join("probe.cubin");
    let out = Command::new(&nvcc)
        .args(["-cubin", "-O3", "-std=c++17"])
        .arg(format!("-arch=sm_{arch}"))
        .arg(source)
        .arg("-o")
        .arg(&cubin)
        .output()
        .map_err(|e| ToolError::Failed(format!("running {}: {e}", nvcc.display())))?;
    if !out.status.success() {
        return Err(ToolError::Failed(format!(
            "nvcc {}: {}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let bytes = std::fs::read(&cubin).map_err(|e| ToolError::Failed(e.to_string()))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(parse_listing(&disassemble(&tool, &bytes, arch, "probe")?))
}
