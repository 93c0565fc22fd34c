#!/usr/bin/env bash
# The whole test suite: installs nvcc if it is missing, then `cargo test --workspace`.
# Kernel tests run the compiled PTX on ptxsim; GPU tests run when a GPU is present and say
# why they skip otherwise (WARPNORM_REQUIRE_GPU=1 makes a skip a failure).
# Extra arguments go to cargo test, e.g. `bash scripts/test.sh -- --nocapture`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/nvcc-env.sh
export WARPNORM_REQUIRE_NVCC=1
cargo test --workspace "$@"
bash scripts/test-emulated-gpu.sh
