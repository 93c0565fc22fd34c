#!/usr/bin/env bash
# Installs nvcc (CUDA 13.0) from NVIDIA's PyPI wheels into a per-user cache directory.
#
# - Pinned: an unpinned nvidia-nvvm resolves to a newer release whose libnvvm does not match
#   nvcc 13.0, so every wheel is pinned to the 13.0 series.
# - Idempotent: a second run finds the installed nvcc and only prints its path.
# - Needs no GPU and works as root. Prints the nvcc path as its last line of stdout.
#
# Environment:
#   WARPNORM_CUDA_CACHE  install prefix (default: ${XDG_CACHE_HOME:-$HOME/.cache}/warpnorm/cuda-13.0)
#   PYTHON               python interpreter with pip (default: python3)
set -euo pipefail

prefix="${WARPNORM_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warpnorm/cuda-13.0}"
python="${PYTHON:-python3}"
nvcc="$prefix/nvidia/cu13/bin/nvcc"

packages=(
  "nvidia-cuda-nvcc==13.0.88"
  "nvidia-nvvm==13.0.88"
  "nvidia-cuda-runtime==13.0.96"
  "nvidia-cuda-crt==13.0.88"
  "nvidia-cuda-cccl==13.0.85"
)

if [ -x "$nvcc" ] && "$nvcc" --version >/dev/null 2>&1; then
  echo "$nvcc"
  exit 0
fi

echo "installing nvcc 13.0 into $prefix" >&2
mkdir -p "$prefix"
"$python" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
  --upgrade --target "$prefix" "${packages[@]}" >&2

if [ ! -x "$nvcc" ]; then
  echo "error: nvcc not found at $nvcc after installing ${packages[*]}" >&2
  exit 1
fi
"$nvcc" --version >&2
echo "$nvcc"
