//! Build script: compiles every `cuda/*.cu` with nvcc into one fatbin per file (SASS for the
//! selected architectures plus PTX of the newest), checks `ptxas -v` for register spills, and
//! generates `$OUT_DIR/kernels.rs` (the kernel table that `src/kernels.rs` includes). With the
//! `sim-ptx` feature (on for the crate's own tests, examples and benches) it also writes PTX
//! for compute_75/80/90, which the table embeds for the simulator.
//!
//! nvcc's products are cached (`build/kernel_cache.rs`): another run of this script with the
//! same inputs (clippy, rustdoc, another feature set) copies them instead of compiling again.
//!
//! Without nvcc (or under docs.rs) the crate still builds: the table is empty, one
//! `cargo:warning` says why, and every GPU call returns `Error::KernelsNotBuilt`.
//! `WARPNORM_REQUIRE_NVCC=1` turns a missing nvcc into a build error.

use std::collections::BTreeSet;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/archs.rs"]
mod archs;
use archs::ArchSource;
#[path = "build/kernel_cache.rs"]
mod kernel_cache;
use kernel_cache::{KernelCache, KeyBuilder};

/// Virtual architectures whose PTX is written to OUT_DIR for ptxsim (feature `sim-ptx`).
const SIM_PTX_ARCHS: &[u32] = &[75, 80, 90];

/// True when the `sim-ptx` feature asks for the simulator's PTX.
fn sim_ptx() -> bool {
    env::var_os("CARGO_FEATURE_SIM_PTX").is_some()
}
/// Environment variables this script reads (all get `rerun-if-env-changed`).
const ENV_VARS: &[&str] = &[
    "NVCC",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "PATH",
    "WARPNORM_CUDA_ARCHS",
    "CUDA_COMPUTE_CAP",
    "WARPNORM_NVCC_FLAGS",
    "WARPNORM_REQUIRE_NVCC",
    "DOCS_RS",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "NVCC_CCBIN",
    "CXX",
];
const INSTALL_HINT: &str = "install nvcc with `bash scripts/install-cuda-toolchain.sh` and set \
NVCC to the path it prints (or put a CUDA toolkit's bin/ on PATH / set CUDA_HOME)";

fn main() {
    println!("cargo:rerun-if-changed=cuda");
    println!("cargo:rerun-if-changed=build.rs");
    for var in ENV_VARS {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let cuda_dir = manifest_dir.join("cuda");
    println!(
        "cargo:rerun-if-changed={}",
        cuda_dir.join("common").display()
    );
    println!("cargo:rerun-if-changed={}", cuda_dir.join("abi").display());

    let require = env::var("WARPNORM_REQUIRE_NVCC").is_ok_and(|v| v == "1");
    if env::var_os("DOCS_RS").is_some() {
        write_stub(&out_dir, "built under docs.rs (DOCS_RS is set)");
        return;
    }
    let nvcc = match find_nvcc() {
        Some(nvcc) => nvcc,
        None => {
            let reason = format!("nvcc was not found; {INSTALL_HINT}");
            if require {
                panic!("WARPNORM_REQUIRE_NVCC=1 but {reason}");
            }
            println!("cargo:warning=warpnorm: CUDA kernels were not built: {reason}");
            write_stub(&out_dir, &reason);
            return;
        }
    };
    match build_kernels(&nvcc, &manifest_dir, &out_dir) {
        Ok(()) => {}
        Err(e) => panic!(
            "warpnorm: building the CUDA kernels with {} failed:\n{e}",
            nvcc.display()
        ),
    }
}

/// Finds nvcc: `NVCC`, then `CUDA_HOME`/`CUDA_PATH`/`CUDA_ROOT` `bin/`, then `PATH`, then
/// `/usr/local/cuda/bin`. A candidate counts only if `nvcc --version` runs.
fn find_nvcc() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(p) = env::var_os("NVCC") {
        candidates.push(PathBuf::from(p));
    }
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = env::var_os(var) {
            candidates.push(PathBuf::from(root).join("bin").join("nvcc"));
        }
    }
    if let Some(path) = env::var_os("PATH") {
        candidates.extend(env::split_paths(&path).map(|d| d.join("nvcc")));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/bin/nvcc"));
    candidates.into_iter().find(|c| {
        c.is_file()
            && Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
    })
}

/// The nvcc command as `cc` configures it (nvcc path, `-ccbin` for the host compiler, and the
/// NVCC_* environment handling), without cc's default flags; plain nvcc if cc cannot.
fn nvcc_command(nvcc: &Path) -> Command {
    // cc reads the NVCC variable to locate nvcc.
    env::set_var("NVCC", nvcc);
    let mut build = cc::Build::new();
    build
        .cuda(true)
        .cpp(true)
        .no_default_flags(true)
        .cargo_metadata(false)
        .cargo_warnings(false);
    match build.try_get_compiler() {
        Ok(tool) => tool.to_command(),
        Err(_) => Command::new(nvcc),
    }
}

fn supported_archs(nvcc: &Path) -> Result<BTreeSet<u32>, String> {
    let out = Command::new(nvcc)
        .arg("--list-gpu-code")
        .output()
        .map_err(|e| format!("running nvcc --list-gpu-code: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nvcc --list-gpu-code failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("sm_"))
        .filter_map(|n| n.parse().ok())
        .collect())
}

/// The SASS architectures to build (see `build/archs.rs` for the rules), with a build-log
/// warning for each one this nvcc cannot target.
fn selected_archs(supported: &BTreeSet<u32>) -> Result<(Vec<u32>, ArchSource), String> {
    let (requested, source, note) = archs::requested_archs(
        env::var("WARPNORM_CUDA_ARCHS").ok().as_deref(),
        env::var("CUDA_COMPUTE_CAP").ok().as_deref(),
        || archs::detect_gpus(Path::new("nvidia-smi")),
    )?;
    if let Some(note) = note {
        // Not a cargo warning: most build machines have no GPU, and the default list is right.
        println!("warpnorm: no GPU found ({note}); building for the default architectures");
    }
    let supported: Vec<u32> = supported.iter().copied().collect();
    let (kept, dropped) = archs::supported_subset(&requested, source, &supported)?;
    for arch in dropped {
        println!(
            "cargo:warning=warpnorm: sm_{arch} (from {}) is not supported by this nvcc and was dropped",
            source.describe()
        );
    }
    Ok((kept, source))
}

fn run(mut cmd: Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: could not run {cmd:?}: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("{what} failed: {cmd:?}\n{stderr}"));
    }
    Ok(stderr)
}

/// Register/shared-memory figures `ptxas -v` printed for one kernel on one architecture.
#[derive(Debug, Default, Clone)]
struct Resources {
    kernel: String,
    arch: u32,
    registers: u32,
    shared_bytes: u32,
    stack_bytes: u32,
    spill_stores: u32,
    spill_loads: u32,
}

fn number_before(line: &str, suffix: &str) -> Option<u32> {
    let idx = line.find(suffix)?;
    line[..idx].split_whitespace().last()?.parse().ok()
}

/// Parses `ptxas -v` output (one "Compiling entry function 'k' for 'sm_XX'" block per kernel).
fn parse_ptxas(stderr: &str) -> Vec<Resources> {
    let mut all: Vec<Resources> = Vec::new();
    let mut current: Option<Resources> = None;
    for line in stderr.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            if let Some(r) = current.take() {
                all.push(r);
            }
            let mut parts = rest.split('\'');
            let kernel = parts.next().unwrap_or_default().to_string();
            let arch = parts
                .nth(1)
                .and_then(|a| a.trim_start_matches("sm_").parse().ok())
                .unwrap_or(0);
            current = Some(Resources {
                kernel,
                arch,
                ..Default::default()
            });
            continue;
        }
        let Some(r) = current.as_mut() else { continue };
        if line.contains("bytes spill stores") {
            r.stack_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
            r.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
            r.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
        } else if line.contains("Used ") && line.contains("registers") {
            r.registers = number_before(line, "registers").unwrap_or(0);
            r.shared_bytes = number_before(line, "bytes smem").unwrap_or(0);
        }
    }
    all.extend(current);
    all
}

fn entries_of(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| l.trim().strip_prefix(".visible .entry "))
        .map(|rest| rest.split('(').next().unwrap_or(rest).trim().to_string())
        .collect()
}

struct FamilyOut {
    name: String,
    fatbin: PathBuf,
    ptx: Vec<(u32, PathBuf)>,
    entries: Vec<String>,
    resources: Vec<Resources>,
}

fn common_flags(cmd: &mut Command, cuda_dir: &Path) {
    // No -lineinfo: it made the SASS 2.6x larger and ptxas slower, for profilers only
    // (`WARPNORM_NVCC_FLAGS=-lineinfo` brings it back).
    cmd.args(["-O3", "-std=c++17"]);
    cmd.arg("-I").arg(cuda_dir);
    if let Ok(extra) = env::var("WARPNORM_NVCC_FLAGS") {
        cmd.args(extra.split_whitespace());
    }
}

/// Writes the simulator's PTX of `source` for `compute_<arch>` to `<name>.compute_<arch>.ptx`.
fn sim_ptx_of(
    nvcc: &Path,
    cuda_dir: &Path,
    out_dir: &Path,
    source: &Path,
    name: &str,
    arch: u32,
) -> Result<(), String> {
    let mut cmd = nvcc_command(nvcc);
    cmd.arg("-ptx").arg(format!("-arch=compute_{arch}"));
    common_flags(&mut cmd, cuda_dir);
    cmd.arg(source)
        .arg("-o")
        .arg(out_dir.join(ptx_file(name, arch)));
    run(cmd, &format!("nvcc -ptx {name}.cu for compute_{arch}")).map(|_| ())
}

fn ptx_file(name: &str, arch: u32) -> String {
    format!("{name}.compute_{arch}.ptx")
}

/// The virtual architectures whose simulator PTX this run writes.
fn sim_archs() -> Vec<u32> {
    if sim_ptx() {
        SIM_PTX_ARCHS.to_vec()
    } else {
        Vec::new()
    }
}

/// Builds one family (`cuda/<name>.cu`): each of nvcc's products (the fatbin with its
/// `ptxas -v` log, the simulator's PTX for each architecture) comes from the cache when it
/// holds one for these inputs, and is compiled otherwise; all are checked (spills, entry
/// points) either way.
fn build_family(
    nvcc: &Path,
    cuda_dir: &Path,
    out_dir: &Path,
    source: &Path,
    archs: &[u32],
    cache: Option<&KernelCache>,
) -> Result<FamilyOut, String> {
    let name = source
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| format!("bad file name {}", source.display()))?
        .to_string();
    let sass = format!("{archs:?}");
    let mut products = vec![(
        Product::Fatbin,
        format!("{name}.fatbin"),
        vec![format!("{name}.fatbin"), format!("{name}.ptxas.log")],
        vec![("sass archs", sass.as_bytes())],
    )];
    for a in sim_archs() {
        products.push((
            Product::Ptx(a),
            format!("{name}.compute_{a}"),
            vec![ptx_file(&name, a)],
            Vec::new(),
        ));
    }
    let mut missing = Vec::new();
    let mut units = Vec::new();
    for (product, unit_name, files, extra) in products {
        let unit = cache.map(|c| c.unit(&unit_name, &extra));
        let hit = matches!((cache, &unit), (Some(c), Some(u)) if c.restore(u, out_dir, &files));
        if hit {
            println!("warpnorm: {unit_name}: copied from the kernel cache");
        } else {
            println!("warpnorm: {unit_name}: compiled by nvcc");
            missing.push(product);
            units.extend(unit.map(|u| (u, files)));
        }
    }
    compile(nvcc, cuda_dir, out_dir, source, &name, archs, &missing)?;
    let family = check_family(out_dir, &name)?;
    if let Some(c) = cache {
        for (unit, files) in &units {
            if let Err(e) = c.store(unit, out_dir, files) {
                println!(
                    "cargo:warning=warpnorm: could not store {name}.cu's kernels in the cache {}: {e}",
                    c.root().display()
                );
            }
        }
    }
    Ok(family)
}

/// One nvcc product of a family.
#[derive(Clone, Copy)]
enum Product {
    /// `<name>.fatbin` and `<name>.ptxas.log`.
    Fatbin,
    /// `<name>.compute_<arch>.ptx`, for the simulator.
    Ptx(u32),
}

/// Runs nvcc for the `products` of one family, all at once: each is a separate front-end run,
/// and one after the other they were the longest path of the crate's own builds.
fn compile(
    nvcc: &Path,
    cuda_dir: &Path,
    out_dir: &Path,
    source: &Path,
    name: &str,
    archs: &[u32],
    products: &[Product],
) -> Result<(), String> {
    std::thread::scope(|s| {
        let jobs: Vec<_> = products
            .iter()
            .map(|&p| {
                s.spawn(move || match p {
                    Product::Fatbin => build_fatbin(nvcc, cuda_dir, out_dir, source, name, archs),
                    Product::Ptx(a) => sim_ptx_of(nvcc, cuda_dir, out_dir, source, name, a),
                })
            })
            .collect();
        jobs.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err("nvcc thread panicked".into()))
        })
    })
}

/// Reads nvcc's products of one family from `out_dir`: fails on a register spill, or when the
/// simulator's PTX does not export exactly the entry points ptxas compiled.
fn check_family(out_dir: &Path, name: &str) -> Result<FamilyOut, String> {
    let fatbin = out_dir.join(format!("{name}.fatbin"));
    let log_path = out_dir.join(format!("{name}.ptxas.log"));
    let ptxas_log = fs::read_to_string(&log_path)
        .map_err(|e| format!("reading {}: {e}", log_path.display()))?;
    let resources = parse_ptxas(&ptxas_log);
    let spills: Vec<String> = resources
        .iter()
        .filter(|r| r.spill_stores > 0 || r.spill_loads > 0)
        .map(|r| {
            format!(
                "  {} on sm_{}: {} bytes spill stores, {} bytes spill loads ({} registers)",
                r.kernel, r.arch, r.spill_stores, r.spill_loads, r.registers
            )
        })
        .collect();
    if !spills.is_empty() {
        return Err(format!(
            "register spills in {name}.cu (warpnorm kernels must not spill):\n{}",
            spills.join("\n")
        ));
    }

    // Entry points: those ptxas compiled (every entry, for every SASS arch).
    let entries: Vec<String> = resources
        .iter()
        .map(|r| r.kernel.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut ptx = Vec::new();
    for a in sim_archs() {
        let path = out_dir.join(ptx_file(name, a));
        let text =
            fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let in_ptx: BTreeSet<String> = entries_of(&text).into_iter().collect();
        if in_ptx.iter().ne(entries.iter()) {
            return Err(format!(
                "{name}.cu: the compute_{a} PTX exports {} entry points, ptxas compiled {}",
                in_ptx.len(),
                entries.len()
            ));
        }
        ptx.push((a, path));
    }
    Ok(FamilyOut {
        name: name.to_string(),
        fatbin,
        ptx,
        entries,
        resources,
    })
}

/// Compiles `source` into `<name>.fatbin` (SASS for every arch plus PTX of the newest, every
/// image compressed) and writes what `ptxas -v` printed to `<name>.ptxas.log`.
fn build_fatbin(
    nvcc: &Path,
    cuda_dir: &Path,
    out_dir: &Path,
    source: &Path,
    name: &str,
    archs: &[u32],
) -> Result<(), String> {
    // SASS for every arch plus PTX of the newest, for forward compatibility.
    let fatbin = out_dir.join(format!("{name}.fatbin"));
    let mut cmd = nvcc_command(nvcc);
    cmd.arg("-fatbin");
    common_flags(&mut cmd, cuda_dir);
    cmd.args(["-Xptxas", "-v", "--threads", "0"]);
    // Compress every image, SASS included (by default nvcc compresses the PTX and only the
    // SASS images it finds large enough): zstd on nvcc 12.4+, which the driver decompresses at
    // load time. 42.5 MB of fatbins became 5.2 MB (README, "Build size and time").
    cmd.arg("-Xfatbin=-compress-all");
    for a in archs {
        cmd.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
    }
    let newest = archs.iter().max().copied().unwrap_or(90);
    cmd.arg(format!(
        "-gencode=arch=compute_{newest},code=compute_{newest}"
    ));
    cmd.arg(source).arg("-o").arg(&fatbin);
    let ptxas_log = run(cmd, &format!("nvcc -fatbin {name}.cu"))?;
    fs::write(out_dir.join(format!("{name}.ptxas.log")), &ptxas_log).map_err(|e| e.to_string())
}

/// The inputs common to every product of every family (see `build/kernel_cache.rs`; a
/// fatbin's architectures are added by [`build_family`]).
fn cache_inputs(nvcc: &Path, manifest_dir: &Path) -> Result<KeyBuilder, String> {
    let mut k = KeyBuilder::new();
    let io = |e: std::io::Error| format!("hashing the kernel cache's inputs: {e}");
    k.add_tree(&manifest_dir.join("cuda")).map_err(io)?;
    k.add_tree(&manifest_dir.join("build")).map_err(io)?;
    k.add(
        "build.rs",
        &fs::read(manifest_dir.join("build.rs")).map_err(io)?,
    );
    // The program and its arguments only: the command also carries a copy of this process's
    // environment (OUT_DIR, the features, ...), which differs in every run. The variables that
    // change nvcc's output are hashed below.
    let cmd = nvcc_command(nvcc);
    k.add("nvcc", cmd.get_program().as_encoded_bytes());
    for arg in cmd.get_args() {
        k.add("nvcc argument", arg.as_encoded_bytes());
    }
    let version = Command::new(nvcc)
        .arg("--version")
        .output()
        .map_err(|e| format!("running nvcc --version: {e}"))?;
    k.add("nvcc --version", &version.stdout);
    for var in [
        "WARPNORM_NVCC_FLAGS",
        "NVCC_PREPEND_FLAGS",
        "NVCC_APPEND_FLAGS",
        "NVCC_CCBIN",
        "CXX",
    ] {
        k.add(var, format!("{:?}", env::var_os(var)).as_bytes());
    }
    Ok(k)
}

fn build_kernels(nvcc: &Path, manifest_dir: &Path, out_dir: &Path) -> Result<(), String> {
    let cuda_dir = &manifest_dir.join("cuda");
    let supported = supported_archs(nvcc)?;
    let (archs, archs_source) = selected_archs(&supported)?;
    // Not a `rerun-if-env-changed` variable: where the cache is does not change the output.
    let cache = match kernel_cache::cache_root(
        env::var("WARPNORM_KERNEL_CACHE").ok().as_deref(),
        out_dir,
    ) {
        Some(root) => Some(KernelCache::new(root, cache_inputs(nvcc, manifest_dir)?)),
        None => None,
    };
    for a in SIM_PTX_ARCHS.iter().filter(|_| sim_ptx()) {
        if !supported.contains(a) {
            return Err(format!(
                "this nvcc cannot emit PTX for compute_{a}, which ptxsim tests need"
            ));
        }
    }
    let mut sources: Vec<PathBuf> = fs::read_dir(cuda_dir)
        .map_err(|e| format!("reading {}: {e}", cuda_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    // One thread per family: nvcc is mostly single-threaded per file.
    let results: Vec<Result<FamilyOut, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = sources
            .iter()
            .map(|src| {
                s.spawn(|| build_family(nvcc, cuda_dir, out_dir, src, &archs, cache.as_ref()))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("build thread panicked".into()))
            })
            .collect()
    });
    let families = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    let version = nvcc_version(nvcc);
    write_table(out_dir, &families, &archs, archs_source, &version).map_err(|e| e.to_string())
}

fn nvcc_version(nvcc: &Path) -> String {
    Command::new(nvcc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.split(", V").nth(1).map(|v| v.trim().to_string()))
        })
        .unwrap_or_else(|| "unknown".into())
}

fn write_table(
    out_dir: &Path,
    families: &[FamilyOut],
    archs: &[u32],
    archs_source: ArchSource,
    version: &str,
) -> std::io::Result<()> {
    let mut s = String::new();
    let newest = archs.iter().max().copied().unwrap_or(0);
    writeln!(s, "// Generated by warpnorm's build.rs. Do not edit.").unwrap();
    writeln!(s, "/// True when nvcc built the kernels.").unwrap();
    writeln!(s, "pub const BUILT: bool = true;").unwrap();
    writeln!(
        s,
        "/// Why the kernels were not built (empty when they were)."
    )
    .unwrap();
    writeln!(s, "pub const NOT_BUILT_REASON: &str = \"\";").unwrap();
    writeln!(s, "/// Version of the nvcc that built the kernels.").unwrap();
    writeln!(s, "pub const NVCC_VERSION: &str = {version:?};").unwrap();
    writeln!(s, "/// Architectures with SASS in the fatbins.").unwrap();
    writeln!(s, "pub const SASS_ARCHS: &[u32] = &{archs:?};").unwrap();
    writeln!(
        s,
        "/// What chose [`SASS_ARCHS`]: an environment variable, the build machine's GPUs or the\n\
         /// default list (see the README's environment variables)."
    )
    .unwrap();
    writeln!(
        s,
        "pub const ARCHS_SOURCE: &str = {:?};",
        archs_source.describe()
    )
    .unwrap();
    writeln!(
        s,
        "/// Virtual architecture of the PTX embedded in the fatbins."
    )
    .unwrap();
    writeln!(s, "pub const FATBIN_PTX_ARCH: u32 = {newest};").unwrap();
    writeln!(s, "/// One image per `cuda/*.cu` file.").unwrap();
    writeln!(s, "pub static FAMILIES: &[Family] = &[").unwrap();
    for f in families {
        writeln!(s, "    Family {{").unwrap();
        writeln!(s, "        name: {:?},", f.name).unwrap();
        writeln!(
            s,
            "        fatbin: include_bytes!({:?}),",
            f.fatbin.display().to_string()
        )
        .unwrap();
        writeln!(s, "        ptx: &[").unwrap();
        for (arch, path) in &f.ptx {
            writeln!(
                s,
                "            PtxImage {{ arch: {arch}, text: include_str!({:?}) }},",
                path.display().to_string()
            )
            .unwrap();
        }
        writeln!(s, "        ],").unwrap();
        writeln!(s, "        entries: &{:?},", f.entries).unwrap();
        writeln!(s, "    }},").unwrap();
    }
    writeln!(s, "];").unwrap();
    writeln!(
        s,
        "/// What `ptxas -v` reported for every kernel on every SASS architecture."
    )
    .unwrap();
    writeln!(s, "pub static RESOURCES: &[KernelResources] = &[").unwrap();
    let mut tsv = String::from("kernel\tarch\tregisters\tshared_bytes\tstack_bytes\n");
    for f in families {
        for r in &f.resources {
            writeln!(
                s,
                "    KernelResources {{ kernel: {:?}, arch: {}, registers: {}, shared_bytes: {}, stack_bytes: {} }},",
                r.kernel, r.arch, r.registers, r.shared_bytes, r.stack_bytes
            )
            .unwrap();
            writeln!(
                tsv,
                "{}\t{}\t{}\t{}\t{}",
                r.kernel, r.arch, r.registers, r.shared_bytes, r.stack_bytes
            )
            .unwrap();
        }
    }
    writeln!(s, "];").unwrap();
    fs::write(out_dir.join("kernel_resources.tsv"), tsv)?;
    fs::write(out_dir.join("kernels.rs"), s)
}

fn write_stub(out_dir: &Path, reason: &str) {
    let s = format!(
        "// Generated by warpnorm's build.rs: kernels NOT built.\n\
         /// True when nvcc built the kernels.\npub const BUILT: bool = false;\n\
         /// Why the kernels were not built (empty when they were).\n\
         pub const NOT_BUILT_REASON: &str = {reason:?};\n\
         /// Version of the nvcc that built the kernels.\npub const NVCC_VERSION: &str = \"\";\n\
         /// Architectures with SASS in the fatbins.\npub const SASS_ARCHS: &[u32] = &[];\n\
         /// What chose [`SASS_ARCHS`] (empty: nothing was built).\npub const ARCHS_SOURCE: &str = \"\";\n\
         /// Virtual architecture of the PTX embedded in the fatbins.\npub const FATBIN_PTX_ARCH: u32 = 0;\n\
         /// One image per `cuda/*.cu` file.\npub static FAMILIES: &[Family] = &[];\n\
         /// What `ptxas -v` reported for every kernel on every SASS architecture.\n\
         pub static RESOURCES: &[KernelResources] = &[];\n"
    );
    fs::write(out_dir.join("kernels.rs"), s).expect("writing kernels.rs to OUT_DIR");
    fs::write(out_dir.join("kernel_resources.tsv"), "").expect("writing kernel_resources.tsv");
}
