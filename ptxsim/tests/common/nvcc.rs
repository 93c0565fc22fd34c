//! Finding nvcc and compiling `tests/cuda/*.cu` to PTX, cached under the target dir.
//!
//! nvcc is looked up in this order: `$NVCC`, `$CUDA_HOME/bin/nvcc`, `$CUDA_PATH/bin/nvcc`, `nvcc`
//! on `$PATH`, the cache directory used by `scripts/install-cuda-toolchain.sh`
//! (`$WARPNORM_CUDA_CACHE`, `$XDG_CACHE_HOME/warpnorm/cuda-13.0`, `$HOME/.cache/warpnorm/cuda-13.0`,
//! `/root/.cache/warpnorm/cuda-13.0`). When none is found, tests that need nvcc print why and
//! return early, unless `PTXSIM_REQUIRE_NVCC=1` or `WARPNORM_REQUIRE_NVCC=1` is set: then the
//! install script is run once and, if that fails too, the test fails.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The virtual architectures every CUDA test kernel is compiled for.
pub const ARCHS: [&str; 3] = ["compute_75", "compute_80", "compute_90"];

fn env_set(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// True when a missing nvcc must fail the test instead of skipping it.
pub fn nvcc_required() -> bool {
    env_set("PTXSIM_REQUIRE_NVCC") || env_set("WARPNORM_REQUIRE_NVCC")
}

fn works(nvcc: &Path) -> bool {
    Command::new(nvcc)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn candidates() -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(p) = std::env::var_os("NVCC") {
        c.push(PathBuf::from(p));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(p) = std::env::var_os(var) {
            c.push(PathBuf::from(p).join("bin").join("nvcc"));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            c.push(dir.join("nvcc"));
        }
    }
    let tail = Path::new("nvidia/cu13/bin/nvcc");
    if let Some(p) = std::env::var_os("WARPNORM_CUDA_CACHE") {
        c.push(PathBuf::from(p).join(tail));
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        c.push(PathBuf::from(p).join("warpnorm/cuda-13.0").join(tail));
    }
    if let Some(p) = std::env::var_os("HOME") {
        c.push(
            PathBuf::from(p)
                .join(".cache/warpnorm/cuda-13.0")
                .join(tail),
        );
    }
    c.push(PathBuf::from("/root/.cache/warpnorm/cuda-13.0").join(tail));
    c
}

fn run_install_script() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install-cuda-toolchain.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or("").trim().to_string();
    let p = PathBuf::from(last);
    if works(&p) {
        Ok(p)
    } else {
        Err(format!(
            "install script printed {}, which does not run",
            p.display()
        ))
    }
}

fn find_nvcc() -> Result<PathBuf, String> {
    let cands = candidates();
    if let Some(p) = cands.iter().find(|p| works(p)) {
        return Ok(p.clone());
    }
    let looked = cands
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let why = format!(
        "nvcc not found (looked at NVCC, CUDA_HOME, CUDA_PATH, PATH and the install cache: {looked}); \
         run scripts/install-cuda-toolchain.sh or set NVCC"
    );
    if nvcc_required() {
        run_install_script().map_err(|e| format!("{why}; {e}"))
    } else {
        Err(why)
    }
}

/// The nvcc to use, or why there is none. Computed once per test binary.
pub fn nvcc() -> Result<&'static Path, &'static str> {
    static NVCC: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match NVCC.get_or_init(find_nvcc) {
        Ok(p) => Ok(p.as_path()),
        Err(e) => Err(e.as_str()),
    }
}

/// Directory of the CUDA test sources.
pub fn cuda_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cuda")
}

/// Compiles `src` (a `.cu` file) to PTX for `arch` (e.g. `compute_80`), caching the result under
/// `CARGO_TARGET_TMPDIR`. The cache key covers the nvcc path, the flags, the source and every
/// header next to it. Returns `None` (after printing why) when nvcc is missing and not required;
/// panics when nvcc is required but missing, or when compilation fails.
pub fn compile_file(src: &Path, arch: &str) -> Option<String> {
    compile_file_with(src, arch, &[])
}

/// [`compile_file`] with extra nvcc flags (e.g. `-G`, `-use_fast_math`), part of the cache key.
pub fn compile_file_with(src: &Path, arch: &str, extra: &[&str]) -> Option<String> {
    let nvcc = match nvcc() {
        Ok(p) => p,
        Err(why) => {
            if nvcc_required() {
                panic!("PTXSIM_REQUIRE_NVCC/WARPNORM_REQUIRE_NVCC is set but {why}");
            }
            eprintln!("SKIP: {why}");
            return None;
        }
    };
    let text = std::fs::read(src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
    let flags = ["-ptx", "-std=c++17", "-lineinfo"];
    let mut h = DefaultHasher::new();
    nvcc.hash(&mut h);
    flags.hash(&mut h);
    extra.hash(&mut h);
    arch.hash(&mut h);
    text.hash(&mut h);
    let dir = src.parent().expect("source has a parent directory");
    let mut headers: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    headers.retain(|p| p.extension().is_some_and(|e| e == "cuh" || e == "h"));
    headers.sort();
    for hdr in &headers {
        std::fs::read(hdr).unwrap_or_default().hash(&mut h);
    }
    let stem = src.file_stem().unwrap().to_string_lossy().to_string();
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ptxsim-ptx-cache");
    std::fs::create_dir_all(&cache).expect("create PTX cache dir");
    let out = cache.join(format!("{stem}-{arch}-{:016x}.ptx", h.finish()));
    if let Ok(ptx) = std::fs::read_to_string(&out) {
        return Some(ptx);
    }
    // Unique temporary name: tests in one binary run in parallel threads, binaries in parallel processes.
    let tmp = cache.join(format!(
        "{stem}-{arch}.{}.{:?}.tmp",
        std::process::id(),
        std::thread::current().id()
    ));
    let res = Command::new(nvcc)
        .args(flags)
        .args(extra)
        .arg(format!("-arch={arch}"))
        .arg("-I")
        .arg(dir)
        .arg("-o")
        .arg(&tmp)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", nvcc.display()));
    if !res.status.success() {
        panic!(
            "nvcc failed on {} for {arch}:\n{}",
            src.display(),
            String::from_utf8_lossy(&res.stderr)
        );
    }
    std::fs::rename(&tmp, &out).expect("move compiled PTX into the cache");
    Some(std::fs::read_to_string(&out).expect("read compiled PTX"))
}

/// [`compile_file`] for `tests/cuda/<name>`.
pub fn compile(name: &str, arch: &str) -> Option<String> {
    compile_file(&cuda_dir().join(name), arch)
}

/// Compiles `tests/cuda/<name>` for every arch in [`ARCHS`]; `None` when nvcc is missing.
pub fn compile_all(name: &str) -> Option<Vec<(&'static str, String)>> {
    let mut v = Vec::new();
    for arch in ARCHS {
        v.push((arch, compile(name, arch)?));
    }
    Some(v)
}
