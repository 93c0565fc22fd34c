//! build.rs's cache of nvcc's products (`build/kernel_cache.rs`, the same file build.rs
//! includes): where it lives, what changes a key, that a stored entry restores the same bytes,
//! that a missing or incomplete entry is a miss, and pruning to the newest entries per unit.

#[path = "../../build/kernel_cache.rs"]
#[allow(dead_code)]
mod kernel_cache;

use kernel_cache::{cache_root, KernelCache, KeyBuilder, KEEP_PER_UNIT};
use std::fs;
use std::path::{Path, PathBuf};

/// A fresh empty folder under the target directory's tmp/.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("build_cache-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn inputs(source: &str) -> KeyBuilder {
    let mut k = KeyBuilder::new();
    k.add("cuda/layer_norm.cu", source.as_bytes());
    k.add("sass archs", b"[80, 90]");
    k
}

#[test]
fn root_from_setting_or_cargo_layout() {
    let out = Path::new("/t/debug/build/warpnorm-0123abcd/out");
    assert_eq!(
        cache_root(None, out),
        Some(PathBuf::from("/t/warpnorm-kernels"))
    );
    assert_eq!(cache_root(Some("/c"), out), Some(PathBuf::from("/c")));
    for off in ["", "0", "off", "OFF"] {
        assert_eq!(cache_root(Some(off), out), None, "{off:?}");
    }
    // Not cargo's layout: no default folder.
    assert_eq!(cache_root(None, Path::new("/somewhere/out")), None);
    assert_eq!(cache_root(None, Path::new("out")), None);
}

#[test]
fn keys_follow_every_input() {
    let base = inputs("kernel A");
    let key = base.key("layer_norm");
    assert_eq!(key.len(), 32);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    // Deterministic within a toolchain, distinct per family and per input.
    assert_eq!(key, inputs("kernel A").key("layer_norm"));
    assert_ne!(key, base.key("rms_norm"));
    assert_ne!(key, inputs("kernel B").key("layer_norm"));
    let mut more = inputs("kernel A");
    more.add("WARPNORM_NVCC_FLAGS", b"Some(\"-lineinfo\")");
    assert_ne!(key, more.key("layer_norm"));
    // Lengths are hashed: moving bytes between a label and its value changes the key.
    let mut a = KeyBuilder::new();
    a.add("ab", b"c");
    let mut b = KeyBuilder::new();
    b.add("a", b"bc");
    assert_ne!(a.key("f"), b.key("f"));
}

#[test]
fn tree_hash_sees_contents_and_names() {
    let dir = scratch("tree");
    fs::create_dir_all(dir.join("common")).unwrap();
    fs::write(dir.join("a.cu"), "a").unwrap();
    fs::write(dir.join("common/b.cuh"), "b").unwrap();
    let key = |dir: &Path| {
        let mut k = KeyBuilder::new();
        k.add_tree(dir).unwrap();
        k.key("a")
    };
    let first = key(&dir);
    assert_eq!(first, key(&dir));
    fs::write(dir.join("common/b.cuh"), "b2").unwrap();
    let edited = key(&dir);
    assert_ne!(first, edited);
    fs::rename(dir.join("common/b.cuh"), dir.join("common/c.cuh")).unwrap();
    assert_ne!(edited, key(&dir));
    fs::remove_dir_all(&dir).unwrap();
}

fn write_products(out: &Path, family: &str, tag: &str) -> Vec<String> {
    let files = vec![
        format!("{family}.fatbin"),
        format!("{family}.ptxas.log"),
        format!("{family}.compute_80.ptx"),
    ];
    for f in &files {
        fs::write(out.join(f), format!("{f} {tag}")).unwrap();
    }
    files
}

#[test]
fn store_then_restore_gives_the_same_bytes() {
    let dir = scratch("store");
    let (root, out1, out2) = (dir.join("cache"), dir.join("out1"), dir.join("out2"));
    fs::create_dir_all(&out1).unwrap();
    fs::create_dir_all(&out2).unwrap();
    let cache = KernelCache::new(root.clone(), inputs("kernel A"));
    let unit = cache.unit("layer_norm.fatbin", &[("sass archs", b"[80, 90]")]);
    let files = write_products(&out1, "layer_norm", "first build");
    assert!(!cache.restore(&unit, &out2, &files), "empty cache");
    cache.store(&unit, &out1, &files).unwrap();
    assert!(cache.restore(&unit, &out2, &files));
    for f in &files {
        assert_eq!(
            fs::read(out1.join(f)).unwrap(),
            fs::read(out2.join(f)).unwrap()
        );
    }
    // Other common inputs, other inputs of the unit, another unit or a file the entry lacks:
    // misses.
    let other = KernelCache::new(root.clone(), inputs("kernel B"));
    let same_name = other.unit("layer_norm.fatbin", &[("sass archs", b"[80, 90]")]);
    assert!(!other.restore(&same_name, &out2, &files));
    let one_arch = cache.unit("layer_norm.fatbin", &[("sass archs", b"[90]")]);
    assert!(!cache.restore(&one_arch, &out2, &files));
    let rms = cache.unit("rms_norm.fatbin", &[("sass archs", b"[80, 90]")]);
    assert!(!cache.restore(&rms, &out2, &files));
    let mut more = files.clone();
    more.push("layer_norm.compute_90.ptx".into());
    assert!(!cache.restore(&unit, &out2, &more));
    // Storing an entry that exists keeps it (a concurrent build stored it first).
    write_products(&out1, "layer_norm", "second build");
    cache.store(&unit, &out1, &files).unwrap();
    assert!(cache.restore(&unit, &out2, &files));
    let text = fs::read_to_string(out2.join("layer_norm.fatbin")).unwrap();
    assert_eq!(text, "layer_norm.fatbin first build");
    // No temporary folder is left behind.
    let names: Vec<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with(".tmp")), "{names:?}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn incomplete_entries_are_misses() {
    let dir = scratch("incomplete");
    let (root, out) = (dir.join("cache"), dir.join("out"));
    fs::create_dir_all(&out).unwrap();
    let cache = KernelCache::new(root.clone(), inputs("kernel A"));
    let unit = cache.unit("copy.compute_80", &[]);
    let files = write_products(&out, "copy", "x");
    cache.store(&unit, &out, &files).unwrap();
    let entry = fs::read_dir(&root).unwrap().next().unwrap().unwrap().path();
    fs::remove_file(entry.join("complete")).unwrap();
    assert!(!cache.restore(&unit, &out, &files));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn prunes_to_the_newest_entries_of_a_family() {
    let dir = scratch("prune");
    let (root, out) = (dir.join("cache"), dir.join("out"));
    fs::create_dir_all(&out).unwrap();
    // `layer_norm_x` starts with `layer_norm`: its entry must survive layer_norm's pruning.
    let files_x = write_products(&out, "layer_norm_x", "x");
    let cache = KernelCache::new(root.clone(), inputs("other"));
    let unit_x = cache.unit("layer_norm_x", &[]);
    cache.store(&unit_x, &out, &files_x).unwrap();
    let files = write_products(&out, "layer_norm", "x");
    let n = KEEP_PER_UNIT + 2;
    for i in 0..n {
        let cache = KernelCache::new(root.clone(), inputs(&format!("version {i}")));
        cache
            .store(&cache.unit("layer_norm", &[]), &out, &files)
            .unwrap();
        // Distinct modification times for the order of last use.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let count = |prefix: &str| {
        fs::read_dir(&root)
            .unwrap()
            .filter(|e| {
                let name = e
                    .as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .into_owned();
                name.strip_prefix(prefix).is_some_and(|k| k.len() == 32)
            })
            .count()
    };
    assert_eq!(count("layer_norm-"), KEEP_PER_UNIT);
    assert_eq!(count("layer_norm_x-"), 1);
    // The newest survive, the oldest are gone.
    let restore = |i: usize| {
        let cache = KernelCache::new(root.clone(), inputs(&format!("version {i}")));
        cache.restore(&cache.unit("layer_norm", &[]), &out, &files)
    };
    assert!(restore(n - 1));
    assert!(!restore(0));
    assert!(!restore(1));
    fs::remove_dir_all(&dir).unwrap();
}
