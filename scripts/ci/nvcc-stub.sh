#!/usr/bin/env bash
# A stand-in for nvcc in CI's candle-cuda lint (.ci/run), for candle-kernels' build script only.
#
# That step type-checks and lints warpnorm's CUDA path against candle's `cuda` feature: nothing
# is linked or run. candle-kernels' build script compiles candle's own kernels with nvcc (PTX,
# and a static library of its quantized matmul kernels): 10 to 16 minutes on two cores, for
# files whose contents a type check never reads. Pointed at by NVCC (which candle-kernels'
# build helper, cudaforge, uses as given), this script writes each output nvcc would write,
# empty: `-o FILE` (objects, the `--lib` archive) and `--output-directory DIR` with a `.cu`
# source (DIR/<stem>.ptx).
#
# It fails `--version` and every other query, so it never passes for a compiler: warpnorm's
# build.rs and scripts/nvcc-env.sh accept an nvcc only when `nvcc --version` succeeds, and then
# find the real one (CUDA_HOME in that step). Never use it where kernels are meant to run.
set -euo pipefail
out=""
outdir=""
src=""
prev=""
for a in "$@"; do
  case "$prev" in
    -o) out="$a" ;;
    --output-directory) outdir="$a" ;;
  esac
  case "$a" in
    *.cu) src="$a" ;;
  esac
  prev="$a"
done
if [ -n "$out" ]; then
  : >"$out"
elif [ -n "$outdir" ] && [ -n "$src" ]; then
  : >"$outdir/$(basename "$src" .cu).ptx"
else
  echo "nvcc-stub.sh: not a real nvcc (only writes empty outputs for CI's candle-cuda lint): $*" >&2
  exit 1
fi
