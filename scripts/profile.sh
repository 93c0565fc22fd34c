#!/usr/bin/env bash
# Profiles a command with Nsight Systems on a GPU machine: CUDA API and kernels plus warpnorm's
# NVTX ranges (domain `warpnorm`, one range per op and module call, e.g.
# `layer_norm.forward 16384x4096 bf16/f32`), then summarizes the report with `nsys stats`.
#
# Usage: bash scripts/profile.sh [-o DIR] [-n NAME] [-- COMMAND [ARGS...]]
#   without a command: the demo (`cargo run --release --example demo`, built first; on a
#   machine without cargo, the demo of the GPU bundle, .gpu-bundle/bin.tar.xz, unpacked)
#   -o DIR    where the results go (default ./profile-out)
#   -n NAME   file name stem (default warpnorm-profile)
# Results:
#   DIR/NAME.nsys-rep   the report: open it in the Nsight Systems GUI (timeline)
#   DIR/NAME.sqlite     its export (what `nsys stats` reads)
#   DIR/NAME-stats.txt  the summaries: GPU time of the kernels launched inside each NVTX
#                       range (nvtx_kern_sum), time per NVTX range (nvtx_sum), time per kernel
#                       (cuda_gpu_kern_sum) and per CUDA API call (cuda_api_sum)
# nsys is found on NSYS, PATH, /usr/local/cuda/bin or /opt/nvidia/nsight-systems*/; without it
# the script fails (exit status 2) saying so. The command's own exit status fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

out=profile-out
name=warpnorm-profile
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    -n) name="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "profile.sh: unknown argument '$1' (the command goes after --)" >&2; exit 2 ;;
  esac
done

find_nsys() {
  local c
  for c in "${NSYS:-}" "$(command -v nsys 2>/dev/null || true)" /usr/local/cuda/bin/nsys \
           /opt/nvidia/nsight-systems*/bin/nsys /opt/nvidia/nsight-systems*/*/bin/nsys; do
    if [ -n "$c" ] && [ -x "$c" ]; then
      echo "$c"
      return 0
    fi
  done
  return 1
}
if ! nsys="$(find_nsys)"; then
  echo "profile.sh: Nsight Systems (nsys) was not found (NSYS, PATH, /usr/local/cuda/bin," >&2
  echo "  /opt/nvidia/nsight-systems*): install it (the CUDA toolkit's nsight-systems package)" >&2
  echo "  on the GPU machine, or set NSYS to its nsys binary." >&2
  exit 2
fi
echo "using nsys: $nsys ($("$nsys" --version 2>/dev/null | head -n 1))"

if [ $# -eq 0 ]; then
  if command -v cargo >/dev/null 2>&1; then
    source scripts/nvcc-env.sh
    export WARPNORM_REQUIRE_NVCC=1
    cargo build --release --example demo
    target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    set -- "$target_dir/release/examples/demo"
  elif [ -f .gpu-bundle/bin.tar.xz ]; then
    bundle="$(mktemp -d)"
    trap 'rm -rf "$bundle"' EXIT
    tar -xJf .gpu-bundle/bin.tar.xz -C "$bundle"
    set -- "$bundle/demo"
  else
    echo "profile.sh: no command given, and neither cargo nor .gpu-bundle/ to run the demo" >&2
    exit 2
  fi
fi

mkdir -p "$out"
rep="$out/$name"
echo "=== nsys profile --trace=cuda,nvtx: $*"
# No CPU sampling or context switches: the timeline is CUDA and NVTX; the report is small.
"$nsys" profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite=true \
  --output="$rep" "$@"

stats="$out/$name-stats.txt"
echo "=== nsys stats -> $stats"
# Report names since nsys 2023.x; older releases call them nvtxsum / gpukernsum / cudaapisum.
if ! "$nsys" stats --force-export=true --format column \
     --report nvtx_kern_sum --report nvtx_sum --report cuda_gpu_kern_sum --report cuda_api_sum \
     "$rep.nsys-rep" >"$stats" 2>&1; then
  "$nsys" stats --force-export=true --format column \
    --report nvtxsum --report gpukernsum --report cudaapisum "$rep.nsys-rep" >"$stats" 2>&1 || {
    cat "$stats"
    echo "profile.sh: nsys stats failed" >&2
    exit 1
  }
fi
cat "$stats"
echo "=== wrote $rep.nsys-rep, $rep.sqlite and $stats"
