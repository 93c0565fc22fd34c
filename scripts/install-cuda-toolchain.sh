#!/usr/bin/env bash
# Installs nvcc (CUDA 13.0) from NVIDIA's PyPI wheels into a per-user cache directory.
#
# - Pinned: an unpinned nvidia-nvvm resolves to a newer release whose libnvvm does not match
#   nvcc 13.0, so every wheel is pinned to the 13.0 series.
# - cuobjdump and nvdisasm (the SASS disassemblers the performance model reads kernels with,
#   perfmodel/) come from the 13.2 wheels, the earliest on PyPI; they read CUDA 13.0 cubins.
#   They are installed into their own folder ($prefix/sass-tools-<version>) and linked into
#   nvcc's bin/ folder, so that they sit next to nvcc without pip replacing nvcc's files.
# - Idempotent: a second run finds the installed tools and only prints nvcc's path.
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
sass_tools_version="13.2.86"
sass_tools=(
  "nvidia-cuda-cuobjdump==$sass_tools_version"
  "nvidia-cuda-nvdisasm==$sass_tools_version"
)
bin="$(dirname "$nvcc")"
tools_prefix="$prefix/sass-tools-$sass_tools_version"

# True when both disassemblers run from nvcc's bin/ folder.
sass_tools_ok() {
  "$bin/cuobjdump" --version >/dev/null 2>&1 && "$bin/nvdisasm" --version >/dev/null 2>&1
}

# Installs (when missing) and links cuobjdump and nvdisasm next to nvcc.
install_sass_tools() {
  local t
  if [ ! -x "$tools_prefix/nvidia/cu13/bin/cuobjdump" ] || [ ! -x "$tools_prefix/nvidia/cu13/bin/nvdisasm" ]; then
    echo "installing cuobjdump and nvdisasm $sass_tools_version into $tools_prefix" >&2
    mkdir -p "$tools_prefix"
    "$python" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
      --upgrade --target "$tools_prefix" "${sass_tools[@]}" >&2
  fi
  for t in cuobjdump nvdisasm; do
    if [ ! -x "$tools_prefix/nvidia/cu13/bin/$t" ]; then
      echo "error: $t not found at $tools_prefix/nvidia/cu13/bin/$t after installing ${sass_tools[*]}" >&2
      exit 1
    fi
    ln -sfn "$tools_prefix/nvidia/cu13/bin/$t" "$bin/$t"
  done
}

if [ -x "$nvcc" ] && "$nvcc" --version >/dev/null 2>&1; then
  sass_tools_ok || install_sass_tools
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
install_sass_tools
"$nvcc" --version >&2
"$bin/cuobjdump" --version | tail -n 1 >&2
echo "$nvcc"
