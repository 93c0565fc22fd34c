# Sourced by scripts/test.sh, scripts/demo.sh and .ci/run: makes sure NVCC points at a working
# nvcc, installing CUDA 13.0's nvcc from PyPI (scripts/install-cuda-toolchain.sh) when none is
# found on NVCC, CUDA_HOME, CUDA_PATH, CUDA_ROOT, PATH or /usr/local/cuda/bin, and that
# cuobjdump (which the performance model reads SASS with) can be found, and that libclang is
# present (scripts/libclang-env.sh).
_wn_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# libclang for the default `nvtx` feature (nvtx-sys runs bindgen when it builds).
source "$_wn_root/scripts/libclang-env.sh"
_wn_find_nvcc() {
  local c
  for c in "${NVCC:-}" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "${CUDA_PATH:+$CUDA_PATH/bin/nvcc}" \
           "${CUDA_ROOT:+$CUDA_ROOT/bin/nvcc}" "$(command -v nvcc 2>/dev/null || true)" \
           /usr/local/cuda/bin/nvcc; do
    if [ -n "$c" ] && [ -x "$c" ] && "$c" --version >/dev/null 2>&1; then
      echo "$c"
      return 0
    fi
  done
  return 1
}
if ! NVCC="$(_wn_find_nvcc)"; then
  NVCC="$(bash "$_wn_root/scripts/install-cuda-toolchain.sh" | tail -n 1)"
fi
export NVCC
# The performance model's disassembler: beside nvcc, on PATH, or installed (with the pinned
# toolchain, into its cache) by the same script.
if [ ! -x "$(dirname "$NVCC")/cuobjdump" ] && ! command -v cuobjdump >/dev/null 2>&1; then
  bash "$_wn_root/scripts/install-cuda-toolchain.sh" >/dev/null
fi
echo "using nvcc: $NVCC" >&2
