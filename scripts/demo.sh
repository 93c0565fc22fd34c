#!/usr/bin/env bash
# The main job: installs nvcc if it is missing, builds the kernels, and runs the demo example
# (on the GPU when there is one; otherwise on ptxsim, saying so).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/nvcc-env.sh
export WARPNORM_REQUIRE_NVCC=1
cargo run --release --example demo -- "$@"
