//! build.rs's cache of nvcc's products, keyed by everything that goes into them.
//!
//! Cargo runs the build script again for every set of features, profile and tool that builds
//! the crate (`cargo test`, `cargo clippy`, `cargo doc`, a test binary built alone, ...), each
//! time into a new `OUT_DIR`. Without a cache each run recompiled every kernel (about ten
//! minutes for the default architectures on two cores). With it, nvcc runs once per distinct
//! input. The unit is one nvcc product: a family's fatbin with its `ptxas -v` log, or its
//! simulator PTX for one virtual architecture (so a build without the `sim-ptx` feature reuses
//! the fatbins of one with it). Each is stored under a key that hashes the unit's name, every
//! file under `cuda/`, the build script's own sources, the nvcc command and `nvcc --version`,
//! the compiler flags from the environment and, for a fatbin, its SASS architectures. A hit
//! copies the unit's files into `OUT_DIR`; everything after nvcc (the spill check, the entry
//! points, the kernel table) runs on the copies exactly as on fresh output.
//!
//! Where: `WARPNORM_KERNEL_CACHE` (a folder; `0`, `off` or empty turn the cache off), else
//! `warpnorm-kernels/` in the target directory that holds `OUT_DIR`. Entries are written to a
//! temporary folder and renamed into place, so concurrent builds never see half an entry; the
//! four most recently used entries of each unit are kept.
//!
//! A module of its own so that `tests/kernels/build_cache.rs` tests the same code (build.rs
//! includes it with `#[path]`).

use std::fs;
use std::hash::{DefaultHasher, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Entries kept per unit (the most recently used): a few versions of the sources or
/// architecture sets (all architectures, or one) side by side.
pub const KEEP_PER_UNIT: usize = 4;

/// Marker written last into a complete entry; its modification time is the entry's last use.
const COMPLETE: &str = "complete";

/// The cache folder: `setting` is `WARPNORM_KERNEL_CACHE`'s value. Unset, it is
/// `<target dir>/warpnorm-kernels` when `out_dir` has cargo's layout
/// (`<target dir>/<profile>/build/<package>-<hash>/out`), and no cache otherwise.
pub fn cache_root(setting: Option<&str>, out_dir: &Path) -> Option<PathBuf> {
    match setting {
        Some(s) if s.is_empty() || s == "0" || s.eq_ignore_ascii_case("off") => None,
        Some(s) => Some(PathBuf::from(s)),
        None => {
            let build = out_dir.parent()?.parent()?;
            if build.file_name()? != "build" {
                return None;
            }
            Some(build.parent()?.parent()?.join("warpnorm-kernels"))
        }
    }
}

/// Hashes the inputs of a build: 128 bits from two SipHash states (std's `DefaultHasher`, whose
/// `new()` is the same in every run of one toolchain; another toolchain only misses the cache).
#[derive(Clone)]
pub struct KeyBuilder {
    a: DefaultHasher,
    b: DefaultHasher,
}

impl Default for KeyBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyBuilder {
    pub fn new() -> Self {
        let a = DefaultHasher::new();
        let mut b = DefaultHasher::new();
        b.write(b"warpnorm kernel cache, second half");
        Self { a, b }
    }

    /// Adds one labelled input (lengths are hashed too, so no two sequences collide by
    /// concatenation).
    pub fn add(&mut self, label: &str, bytes: &[u8]) {
        for h in [&mut self.a, &mut self.b] {
            h.write_usize(label.len());
            h.write(label.as_bytes());
            h.write_usize(bytes.len());
            h.write(bytes);
        }
    }

    /// Adds every file under `dir`, by path relative to it and contents, in sorted order.
    pub fn add_tree(&mut self, dir: &Path) -> io::Result<()> {
        let mut files = Vec::new();
        collect_files(dir, dir, &mut files)?;
        files.sort();
        for rel in files {
            let bytes = fs::read(dir.join(&rel))?;
            self.add(&rel.to_string_lossy(), &bytes);
        }
        Ok(())
    }

    /// The key of one unit: 32 hex digits.
    pub fn key(&self, unit: &str) -> String {
        let mut k = self.clone();
        k.add("unit", unit.as_bytes());
        format!("{:016x}{:016x}", k.a.finish(), k.b.finish())
    }
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(root, &path, out)?;
        } else {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// The cache of one build script run: a folder and the hash of the inputs common to every
/// unit (inputs of one kind of unit only, as a fatbin's architectures, go in through
/// [`KernelCache::unit`]).
pub struct KernelCache {
    root: PathBuf,
    inputs: KeyBuilder,
}

impl KernelCache {
    pub fn new(root: PathBuf, inputs: KeyBuilder) -> Self {
        Self { root, inputs }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A unit named `name` (as `layer_norm.fatbin`), with its own `extra` inputs.
    pub fn unit(&self, name: &str, extra: &[(&str, &[u8])]) -> Unit {
        let mut k = self.inputs.clone();
        for (label, bytes) in extra {
            k.add(label, bytes);
        }
        Unit {
            name: name.to_string(),
            key: k.key(name),
        }
    }

    fn entry(&self, unit: &Unit) -> PathBuf {
        self.root.join(format!("{}-{}", unit.name, unit.key))
    }

    /// Copies `files` of `unit`'s entry into `out_dir` and marks the entry used. False (and
    /// nothing is relied on) when there is no complete entry or a file cannot be copied.
    pub fn restore(&self, unit: &Unit, out_dir: &Path, files: &[String]) -> bool {
        let entry = self.entry(unit);
        if !entry.join(COMPLETE).is_file() {
            return false;
        }
        for f in files {
            if fs::copy(entry.join(f), out_dir.join(f)).is_err() {
                return false;
            }
        }
        // Last use, for pruning; a failure here only makes the entry look older.
        let _ = fs::write(entry.join(COMPLETE), b"");
        true
    }

    /// Stores `files` from `out_dir` as `unit`'s entry (atomically: a temporary folder renamed
    /// into place; an entry another build stored first is kept), then prunes the unit's
    /// entries to [`KEEP_PER_UNIT`].
    pub fn store(&self, unit: &Unit, out_dir: &Path, files: &[String]) -> io::Result<()> {
        fs::create_dir_all(&self.root)?;
        let entry = self.entry(unit);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let tmp = self
            .root
            .join(format!(".tmp-{}-{}-{nanos}", unit.name, std::process::id()));
        fs::create_dir_all(&tmp)?;
        let filled = files
            .iter()
            .try_for_each(|f| fs::copy(out_dir.join(f), tmp.join(f)).map(|_| ()))
            .and_then(|()| fs::write(tmp.join(COMPLETE), b""));
        if let Err(e) = filled {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e);
        }
        if fs::rename(&tmp, &entry).is_err() {
            let _ = fs::remove_dir_all(&tmp);
            if !entry.join(COMPLETE).is_file() {
                return Err(io::Error::other(format!(
                    "could not move {} to {}",
                    tmp.display(),
                    entry.display()
                )));
            }
        }
        self.prune(&unit.name)
    }

    /// Removes all but the [`KEEP_PER_UNIT`] most recently used entries of the unit `name`, and
    /// its temporary folders left for more than an hour (a build that was killed).
    fn prune(&self, name: &str) -> io::Result<()> {
        let prefix = format!("{name}-");
        let tmp_prefix = format!(".tmp-{name}-");
        let mut entries: Vec<(SystemTime, PathBuf)> = Vec::new();
        for e in fs::read_dir(&self.root)? {
            let path = e?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.starts_with(&tmp_prefix) {
                let old = fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_secs(3600));
                if old {
                    let _ = fs::remove_dir_all(&path);
                }
                continue;
            }
            // `<name>-<32 hex digits>` exactly: another unit's name may extend this one's.
            let is_entry = name
                .strip_prefix(&prefix)
                .is_some_and(|k| k.len() == 32 && k.bytes().all(|b| b.is_ascii_hexdigit()));
            if !is_entry {
                continue;
            }
            let used = fs::metadata(path.join(COMPLETE))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            entries.push((used, path));
        }
        entries.sort_by_key(|e| std::cmp::Reverse(e.0));
        for (_, path) in entries.into_iter().skip(KEEP_PER_UNIT) {
            fs::remove_dir_all(path)?;
        }
        Ok(())
    }
}

/// One cached product: its name and key.
pub struct Unit {
    name: String,
    key: String,
}
