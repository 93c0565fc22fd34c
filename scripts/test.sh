#!/usr/bin/env bash
# The whole test suite: installs nvcc if it is missing, then `cargo test --workspace`, the
# candle feature's tests and example, and the GPU layer on the emulated driver.
# Kernel tests run the compiled PTX on ptxsim; GPU tests run when a GPU is present and say
# why they skip otherwise (WARPNORM_REQUIRE_GPU=1 makes a skip a failure).
# Extra arguments go to cargo test, e.g. `bash scripts/test.sh -- --nocapture`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/nvcc-env.sh
export WARPNORM_REQUIRE_NVCC=1
# Every default architecture (spill checks on each, SASS for the performance model's sm_80 and
# sm_90) even on a machine with a GPU, where the build would otherwise compile only for it.
export WARPNORM_CUDA_ARCHS="${WARPNORM_CUDA_ARCHS:-all}"
cargo test --workspace "$@"
# The candle feature (warpnorm::candle on the CPU: outputs and autograd against candle_nn), its
# doctest, and the training example (it fails unless the loss falls below half). Another feature
# set, so build.rs runs again: its kernel cache (target/warpnorm-kernels) gives it the kernels
# compiled above instead of running nvcc again.
cargo test -p warpnorm --features candle --test candle "$@"
cargo test -p warpnorm --features candle --doc candle
cargo run -p warpnorm --features candle --example candle_train -- --steps 150
bash scripts/test-emulated-gpu.sh
