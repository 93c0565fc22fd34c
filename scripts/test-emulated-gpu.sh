#!/usr/bin/env bash
# warpnorm's GPU layer on an EMULATED driver - not on a GPU. Builds simcuda (simcuda/: the
# CUDA driver API subset cudarc uses, with every kernel run on ptxsim with racecheck and
# initcheck on), links it as libcuda.so in a private folder (target/simcuda-driver/), and runs,
# with that folder on LD_LIBRARY_PATH and WARPNORM_REQUIRE_GPU=1 (a skip is a failure):
#   - the GPU tests: the `gpu` modules of the test binaries (tests/layer_norm/gpu.rs,
#     tests/rms_norm/gpu.rs, tests/batch_norm/gpu.rs, tests/kernels/copy_gpu.rs, tests/kernels/capture_gpu.rs, ..., and
#     tests/nvtx: the NVTX ranges of every op, recorded by a stand-in profiler), selected by the
#     filter `gpu::`; tests/kernels/state_gpu.rs loads PyTorch's safetensors checkpoints (the
#     crate's tests always have the `safetensors` feature, through the dev-dependency on itself);
#   - the demo example, which must report that it ran on the emulated device and give a sane
#     first result (LayerNorm forward + backward against the f64 reference); it is stopped
#     there unless WARPNORM_EMULATED_DEMO=full (its timing loops take many minutes here).
# LD_LIBRARY_PATH is set for these child commands only: a real driver elsewhere on the machine
# is neither used nor touched. Results are checked like on a GPU; timings mean nothing.
# Extra arguments go to cargo test, e.g. `bash scripts/test-emulated-gpu.sh -- --nocapture`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/nvcc-env.sh
export WARPNORM_REQUIRE_NVCC=1

start=$SECONDS
target_dir="$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)"
# Release: the emulator's speed is what bounds these runs; the test binaries stay in the
# default (debug) profile that `cargo test --workspace` already built. `--workspace` here too:
# the workspace's members unify the features of shared dependencies, so a build of the root
# package alone would rebuild warpnorm and relink every test binary (minutes, and a gigabyte).
cargo build --release -p simcuda
driver_dir="$target_dir/simcuda-driver"
mkdir -p "$driver_dir"
ln -sf "$target_dir/release/libsimcuda.so" "$driver_dir/libcuda.so"
ln -sf "$target_dir/release/libsimcuda.so" "$driver_dir/libcuda.so.1"
emulated_env=(env "LD_LIBRARY_PATH=$driver_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" WARPNORM_REQUIRE_GPU=1)

echo "=== GPU tests on the emulated driver (simcuda on ptxsim, not a GPU)"
"${emulated_env[@]}" cargo test --workspace --test kernels --test layer_norm --test rms_norm --test batch_norm --test nvtx gpu:: "$@"

# The demo's first LayerNorm forward + backward (16384 x 4096, checked against the f64
# reference) takes about half a minute on the emulator; its timing loops (20 launches of each
# kernel at that size) take many minutes and time nothing real, so the run is stopped after
# that first result unless WARPNORM_EMULATED_DEMO=full.
full_demo=0
[ "${WARPNORM_EMULATED_DEMO:-}" = full ] && full_demo=1
echo "=== demo on the emulated driver ($([ $full_demo = 1 ] && echo "whole run" || echo "up to its first result; WARPNORM_EMULATED_DEMO=full runs it all"))"
cargo build --workspace --example demo
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
"${emulated_env[@]}" "$target_dir/debug/examples/demo" >"$log" 2>&1 &
demo_pid=$!
stopped=0
deadline=$((SECONDS + 1800))
while kill -0 "$demo_pid" 2>/dev/null; do
  if [ $full_demo = 0 ] && grep -q 'max error vs f64 reference' "$log"; then
    kill "$demo_pid" 2>/dev/null || true
    stopped=1
    break
  fi
  if [ $SECONDS -ge $deadline ]; then
    kill "$demo_pid" 2>/dev/null || true
    cat "$log"
    echo "the demo ran for more than 30 minutes on the emulated device"
    exit 1
  fi
  sleep 1
done
status=0
wait "$demo_pid" || status=$?
cat "$log"
[ $stopped = 1 ] && echo "(demo stopped after its first result, as intended)"
fail() {
  echo "demo on the emulated device: $*"
  exit 1
}
grep -q '^GPU: ptxsim emulated CUDA device' "$log" || fail "it did not run on the emulated device"
grep -q '^simcuda:' "$log" && fail "the emulated driver reported an error (lines starting with simcuda:)"
errors="$(sed -n 's/.*max error vs f64 reference.*: y \([^,]*\), dx \([^ ]*\).*/\1 \2/p' "$log" | head -n 1)"
[ -n "$errors" ] || fail "no LayerNorm result"
# A sanity bound only (bf16 outputs are within a few units of 2^-8 of the reference; the GPU
# tests check every kernel precisely).
awk -v e="$errors" 'BEGIN { split(e, a, " "); exit !(a[1] < 0.05 && a[2] < 0.05) }' ||
  fail "LayerNorm errors $errors are not small"
if [ $stopped = 0 ] && [ "$status" != 0 ]; then
  fail "exit status $status"
fi
echo "=== emulated-driver runs passed in $((SECONDS - start)) s (emulated: no GPU was used)"
