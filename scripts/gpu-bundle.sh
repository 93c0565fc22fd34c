#!/usr/bin/env bash
# Builds, here (no GPU needed), everything a lent GPU machine without a Rust toolchain runs:
# the test binaries that hold GPU tests (kernels, layer_norm, batch_norm: their `gpu` modules),
# the two benches and the demo, in release, with SASS for
# WARPNORM_CUDA_ARCHS (default 90: H100/H200; PTX of the newest arch is embedded anyway), and
# packs them, debug info stripped, under readable names into .gpu-bundle/:
#   bin.tar.xz  kernels, layer_norm, batch_norm, bench_layer_norm, bench_batch_norm, demo,
#               kernel_resources.tsv
#   MANIFEST    commit, date, nvcc, archs, sizes and checksums
# Each executable is ~50 MB, nearly all of it the same embedded PTX (the simulator's compute_75/
# 80/90 PTX is in every binary), so they travel as one solid xz archive (~6 MB: the repeats
# compress to nothing); scripts/gpu-run.sh unpacks it into a temporary folder (by hand:
# `mkdir -p /tmp/wn && tar -xJf .gpu-bundle/bin.tar.xz -C /tmp/wn`).
# Fails if the folder exceeds 60 MiB (the device tool carries 64 MiB, working tree included).
#
# Then, on the GPU machine (carry `.gpu-bundle`): `bash scripts/gpu-run.sh` (see there).
#
# Environment: CARGO_TARGET_DIR (default target-gpu, so the normal target/ build is untouched),
# WARPNORM_CUDA_ARCHS (default 90), GPU_BUNDLE_DIR (default .gpu-bundle), NVCC and the other
# variables build.rs reads (README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
# shellcheck source=scripts/nvcc-env.sh
source scripts/nvcc-env.sh
export WARPNORM_REQUIRE_NVCC=1
export WARPNORM_CUDA_ARCHS="${WARPNORM_CUDA_ARCHS:-90}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target-gpu}"
bundle="${GPU_BUNDLE_DIR:-.gpu-bundle}"
max_mib=60

# The test binaries with GPU tests (scripts/gpu-run.sh runs their `gpu::` tests).
tests=(kernels layer_norm batch_norm)
args=(--release --bench layer_norm --bench batch_norm --example demo)
for t in "${tests[@]}"; do
  args+=(--test "$t")
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "gpu-bundle: cargo build ${args[*]} (CARGO_TARGET_DIR=$CARGO_TARGET_DIR," \
  "WARPNORM_CUDA_ARCHS=$WARPNORM_CUDA_ARCHS)" >&2
# JSON messages on stdout (artifact paths: test binaries have hashed names), diagnostics rendered
# on stderr as usual.
cargo build "${args[@]}" --message-format=json-render-diagnostics >"$tmp/cargo.json"

# name<TAB>path for each executable of this package: tests keep their name, benches get a
# bench_ prefix, the example keeps its name.
python3 - "$tmp/cargo.json" "$root/Cargo.toml" >"$tmp/artifacts.tsv" <<'PY'
import json, os, sys
manifest = os.path.realpath(sys.argv[2])
msgs = []
for line in open(sys.argv[1], encoding="utf-8"):
    try:
        msgs.append(json.loads(line))
    except ValueError:
        pass
# This package's id, from its artifacts (build-script-executed messages carry no manifest path).
ids = {m.get("package_id") for m in msgs
       if os.path.realpath(m.get("manifest_path") or "/nonexistent") == manifest}
seen = {}
for m in msgs:
    if m.get("package_id") not in ids:
        continue  # another workspace member or a dependency
    if m.get("reason") == "build-script-executed":
        seen["__out_dir__"] = m["out_dir"]
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    kinds = t.get("kind", [])
    if "test" in kinds:
        name = t["name"]
    elif "bench" in kinds:
        name = "bench_" + t["name"]
    elif "example" in kinds:
        name = t["name"]
    else:
        continue
    seen[name] = m["executable"]
for name in sorted(seen):
    print(f"{name}\t{seen[name]}")
PY

want=("${tests[@]}" bench_layer_norm bench_batch_norm demo)
rm -rf "$bundle"
mkdir -p "$bundle" "$tmp/bin"
for name in "${want[@]}"; do
  path="$(awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$tmp/artifacts.tsv")"
  if [ -z "$path" ] || [ ! -x "$path" ]; then
    echo "gpu-bundle: cargo reported no executable for $name" >&2
    cat "$tmp/artifacts.tsv" >&2
    exit 1
  fi
  # Debug info off, symbols kept (readable panic backtraces).
  strip --strip-debug -o "$tmp/bin/$name" "$path"
  chmod 755 "$tmp/bin/$name"
done

# Kernel resources (registers, shared memory per kernel and arch) of the build that was bundled.
out_dir="$(awk -F'\t' '$1 == "__out_dir__" { print $2 }' "$tmp/artifacts.tsv")"
if [ -n "$out_dir" ] && [ -f "$out_dir/kernel_resources.tsv" ]; then
  cp "$out_dir/kernel_resources.tsv" "$tmp/bin/kernel_resources.tsv"
fi
files=("${want[@]}")
[ -f "$tmp/bin/kernel_resources.tsv" ] && files+=(kernel_resources.tsv)
# One solid xz stream, single-threaded (threads would cut it into blocks and lose the matches
# across files), with a dictionary larger than one executable.
echo "gpu-bundle: packing ${#files[@]} files with xz (about a minute)" >&2
tar -C "$tmp/bin" -cf - "${files[@]}" | xz -T1 --lzma2=preset=9,dict=192MiB >"$bundle/bin.tar.xz"

commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
dirty="$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l | tr -d ' ')"
glibc="$(for f in "${want[@]}"; do objdump -T "$tmp/bin/$f" 2>/dev/null; done |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1 || true)"
{
  echo "warpnorm GPU bundle"
  echo "commit: $commit$([ "$dirty" != 0 ] && echo " (+ $dirty uncommitted changed files)")"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
  echo "nvcc: $NVCC: $("$NVCC" --version | grep -i 'release' | head -n 1)"
  echo "WARPNORM_CUDA_ARCHS: $WARPNORM_CUDA_ARCHS (SASS; PTX of the newest embedded too)"
  echo "rustc: $(rustc --version)"
  echo "profile: release, debug info stripped (strip --strip-debug)"
  echo "needs: libcuda at run time (NVIDIA driver); newest glibc symbol: ${glibc:-?}"
  echo "bin.tar.xz: $(stat -c %s "$bundle/bin.tar.xz") bytes; unpack: tar -xJf bin.tar.xz -C DIR"
  echo "files in bin.tar.xz (bytes, sha256 prefix):"
  (cd "$tmp/bin" && for f in "${files[@]}"; do
    printf '  %-24s %10d  %s\n' "$f" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -c1-16)"
  done)
} >"$bundle/MANIFEST"

total="$(du -sb "$bundle" | cut -f1)"
tree="$(git ls-files -co --exclude-standard -z 2>/dev/null | du -cb --files0-from=- 2>/dev/null |
  tail -n 1 | cut -f1 || echo 0)"
echo "total: $total bytes ($((total >> 20)) MiB); working tree that travels with it:" \
  "$tree bytes ($((tree >> 20)) MiB)" >>"$bundle/MANIFEST"
cat "$bundle/MANIFEST"
if [ "$total" -gt $((max_mib << 20)) ]; then
  echo "gpu-bundle: $bundle is $((total >> 20)) MiB, over the $max_mib MiB limit" >&2
  exit 1
fi
if [ $((total + tree)) -gt $((64 << 20)) ]; then
  echo "gpu-bundle: warning: bundle + working tree = $(((total + tree) >> 20)) MiB, over the" \
    "device tool's 64 MiB" >&2
fi
echo "gpu-bundle: ok: $root/$bundle ($((total >> 20)) MiB). On the GPU machine, carry" \
  "'$bundle' and run: bash scripts/gpu-run.sh" >&2
