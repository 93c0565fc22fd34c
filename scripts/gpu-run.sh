#!/usr/bin/env bash
# Runs the prebuilt GPU bundle on a GPU machine that has no Rust toolchain, from the repository
# root, with `.gpu-bundle/` (made here by `bash scripts/gpu-bundle.sh`) carried along:
#   1. gpu-info: nvidia-smi, nvidia-smi -q (name, driver, clocks), the bundle's MANIFEST;
#      then .gpu-bundle/bin.tar.xz is unpacked into a temporary folder;
#   2. every GPU test binary, with WARPNORM_REQUIRE_GPU=1 (a skip is a failure);
#   3. the two benches (bench_layer_norm, bench_batch_norm), then the demo;
#   4. scripts/torch_compare.py (when `python3 -c 'import torch'` works), then
#      scripts/gpu-report.py: warpnorm and torch side by side in $OUT/compare.md;
#      scripts/perf-model-vs-measured.py: the performance model's predictions beside the
#      benches' figures, appended to $OUT/compare.md.
# Each step runs under `timeout` and within an overall time budget; a failing step never stops
# the run. Results in $OUT (default ./gpu-out), at most 8 files (what the device tool returns):
#   summary.txt       one line per step: name, status, exit code, seconds, note (tab-separated)
#   run.log           every step's output, in order (written while it runs)
#   gpu-info.txt      nvidia-smi and friends, the bundle MANIFEST
#   logs.tar.gz       one log per step
#   compare.md, results.json, torch_compare.json   (full runs)
# Exit status: 0 when every step passed or was skipped on purpose, 1 otherwise.
#
# Usage: bash scripts/gpu-run.sh [--quick] [--no-tests] [--no-torch] [--ncu] [--no-require-gpu]
#                                [--budget SECONDS]
#   --quick           tests only (gpu-info + test binaries)
#   --no-tests        benches, demo, torch and report only (e.g. a second call after --quick)
#   --no-torch        skip scripts/torch_compare.py
#   --ncu             also profile the demo's kernels with Nsight Compute (ncu --clock-control none)
#   --no-require-gpu  do not set WARPNORM_REQUIRE_GPU=1 (also GPU_RUN_REQUIRE_GPU=0): tests skip
#                     and benches say "no GPU" without failing; for trying this script without a GPU
#   --budget S        stop starting steps so that the whole run ends within S seconds (default
#                     560, GPU_RUN_BUDGET; the device tool allows 600 per command)
# Environment: OUT, GPU_BUNDLE (default .gpu-bundle), GPU_BIN_DIR (where bin.tar.xz is unpacked;
# default a temporary folder), GPU_RUN_BUDGET, GPU_RUN_REQUIRE_GPU.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

quick=0
tests=1
torch=1
ncu=0
require="${GPU_RUN_REQUIRE_GPU:-1}"
budget="${GPU_RUN_BUDGET:-560}"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-tests) tests=0 ;;
    --no-torch) torch=0 ;;
    --ncu) ncu=1 ;;
    --no-require-gpu) require=0 ;;
    --budget)
      budget="${2:?--budget needs seconds}"
      shift
      ;;
    --budget=*) budget="${1#--budget=}" ;;
    -h | --help)
      sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "gpu-run: unknown option $1 (see --help)" >&2
      exit 2
      ;;
  esac
  shift
done

OUT="${OUT:-./gpu-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
bundle="${GPU_BUNDLE:-.gpu-bundle}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
logs="$work/logs"
mkdir -p "$logs"
summary="$OUT/summary.txt"
runlog="$OUT/run.log"
info="$OUT/gpu-info.txt"
rm -f "$summary" "$runlog" "$info" "$OUT/logs.tar.gz" "$OUT/compare.md" "$OUT/results.json" \
  "$OUT/torch_compare.json"
reserve=20 # seconds kept for the report and the log archive

now() { date +%s.%N; }
t_start="$(now)"
elapsed() { awk -v a="$t_start" -v b="$(now)" 'BEGIN { printf "%d", b - a }'; }

if [ "$require" = 1 ]; then
  export WARPNORM_REQUIRE_GPU=1
else
  unset WARPNORM_REQUIRE_GPU
fi
export RUST_BACKTRACE=1 PYTHONUNBUFFERED=1

failed=0
nsteps=0
{
  echo "# warpnorm gpu-run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname 2>/dev/null || echo ?)"
  echo "# options: quick=$quick tests=$tests torch=$torch ncu=$ncu require_gpu=$require budget=${budget}s"
  echo "# bundle: $(sed -n 's/^commit: //p' "$bundle/MANIFEST" 2>/dev/null || echo '(no MANIFEST)')"
  printf '# step\tstatus\texit\tseconds\tnote\n'
} >"$summary"

# record NAME STATUS EXIT SECONDS NOTE: one summary line (written at once, so a run killed from
# outside still leaves the lines of the steps that finished).
record() {
  nsteps=$((nsteps + 1))
  case "$2" in
    ok | SKIP) ;;
    *) failed=$((failed + 1)) ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$summary"
  printf '=== %s: %s (exit %s, %s s) %s\n' "$1" "$2" "$3" "$4" "$5" | tee -a "$runlog"
}

# run_step NAME LIMIT CMD...: runs CMD under `timeout` (LIMIT seconds, less if the budget has
# less left), output to its own log and to run.log; sets rc, secs, log for the caller's checks.
run_step() {
  local name="$1" limit="$2" left t0
  shift 2
  log="$logs/$name.log"
  left=$((budget - $(elapsed) - reserve))
  if [ "$left" -lt 15 ]; then
    rc=-1
    secs=0
    : >"$log"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  printf '\n=== %s (limit %s s): %s\n' "$name" "$limit" "$*" | tee -a "$runlog"
  t0="$(now)"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log" >>"$runlog"
  rc="${PIPESTATUS[0]}"
  secs="$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
  return 0
}

# status_of RC: ok / TIMEOUT / FAIL from an exit code.
status_of() {
  case "$1" in
    0) echo ok ;;
    124 | 137) echo TIMEOUT ;;
    *) echo FAIL ;;
  esac
}

not_run() { record "$1" NOT_RUN - 0 "no time left in the ${budget} s budget"; }

# ---- 1. GPU information ------------------------------------------------------------------------
gpu_info() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -a)"
  echo
  echo "--- $bundle/MANIFEST"
  cat "$bundle/MANIFEST" 2>/dev/null || echo "(missing)"
  echo
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "nvidia-smi: not found"
    return 1
  fi
  local rc=0
  echo "--- nvidia-smi"
  timeout 60 nvidia-smi || rc=1
  echo
  echo "--- nvidia-smi --query-gpu"
  timeout 60 nvidia-smi --format=csv --query-gpu=name,driver_version,pci.bus_id,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,clocks.applications.graphics,clocks.applications.memory,power.draw,power.limit,temperature.gpu,persistence_mode,compute_mode || rc=1
  echo
  echo "--- nvidia-smi -q (header)"
  timeout 60 nvidia-smi -q | sed -n '1,/^GPU /p; /Product Name/p; /Product Architecture/p' | head -n 20
  echo
  echo "--- nvidia-smi -q -d CLOCK,PERFORMANCE,POWER"
  timeout 60 nvidia-smi -q -d CLOCK,PERFORMANCE,POWER
  echo
  echo "--- tools"
  echo "python3: $(python3 --version 2>&1 || echo none)"
  echo "torch: $(timeout 120 python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -n 1)"
  echo "ncu: $(command -v ncu >/dev/null && ncu --version 2>&1 | tail -n 1 || echo none)"
  echo "nvcc: $(command -v nvcc >/dev/null && nvcc --version 2>&1 | grep -i release || echo none)"
  return "$rc"
}
if run_step gpu-info 300 bash -c "$(declare -f gpu_info); bundle='$bundle' gpu_info"; then
  cp "$log" "$info"
  if [ "$rc" = 0 ]; then
    record gpu-info ok "$rc" "$secs" "$(sed -n '/--query-gpu/{n;n;p}' "$log" | cut -c1-120)"
  elif [ "$require" = 1 ]; then
    record gpu-info FAIL "$rc" "$secs" "nvidia-smi failed or missing"
  else
    record gpu-info SKIP "$rc" "$secs" "nvidia-smi failed or missing (GPU not required)"
  fi
else
  not_run gpu-info
fi

# ---- unpack the bundle ----------------------------------------------------------------------
# bin.tar.xz (scripts/gpu-bundle.sh) goes to a temporary folder (GPU_BIN_DIR to choose one); a
# bundle of plain executables is used where it is.
bin="${GPU_BIN_DIR:-$work/bin}"
if [ -f "$bundle/bin.tar.xz" ]; then
  mkdir -p "$bin"
  t0="$(now)"
  if command -v xz >/dev/null 2>&1; then
    tar -xJf "$bundle/bin.tar.xz" -C "$bin" 2>"$logs/unpack.log"
  else # no xz binary: Python's lzma
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$bundle/bin.tar.xz" "$bin" 2>"$logs/unpack.log"
  fi
  rc=$?
  secs="$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
  record unpack "$(status_of "$rc")" "$rc" "$secs" \
    "$(find "$bin" -maxdepth 1 -type f | wc -l) files into $bin $(head -c 200 "$logs/unpack.log" | tr '\n' ' ')"
elif [ -f "$bundle/MANIFEST" ]; then
  bin="$bundle"
else
  record bundle FAIL - 0 "no $bundle/bin.tar.xz: run 'bash scripts/gpu-bundle.sh' on the dev machine and carry $bundle"
fi

# ---- 2. tests ----------------------------------------------------------------------------------
if [ "$tests" = 1 ]; then
  # The GPU tests are the `gpu` modules of these test binaries (filter `gpu::`).
  for name in kernels layer_norm batch_norm; do
    if [ ! -x "$bin/$name" ]; then
      record "$name" FAIL - 0 "$bin/$name missing: rebuild the bundle"
      continue
    fi
    if ! run_step "$name" 300 "$bin/$name" gpu:: --nocapture --color never; then
      not_run "$name"
      continue
    fi
    st="$(status_of "$rc")"
    passed="$(sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log" |
      awk '{ p += $1; f += $2 } END { if (NR) print p, f }')"
    skips="$(grep -c '^SKIP ' "$log")"
    note="${passed:+$(echo "$passed" | awk '{ print $1 " passed, " $2 " failed" }')}"
    [ -z "$passed" ] && note="no 'test result' line" && [ "$st" = ok ] && st=FAIL
    if [ "$skips" -gt 0 ]; then
      note="$note; $skips SKIP lines (no GPU)"
      [ "$require" = 1 ] && st=FAIL
    fi
    record "$name" "$st" "$rc" "$secs" "$note"
  done
fi

# ---- 3. benches and demo ------------------------------------------------------------------------
# bench_check NAME: status from the exit code and the RESULT lines (none = it found no GPU).
bench_check() {
  local st n
  st="$(status_of "$rc")"
  n="$(grep '^RESULT ' "$log" | grep -vc '"op":"copy"')"
  local note="$n results"
  if grep -q '^RESULT .*"check":"FAILED"' "$log"; then
    note="$note; a correctness check FAILED"
    st=FAIL
  fi
  if [ "$n" = 0 ] && [ "$st" = ok ]; then
    note="no results: $(grep -m1 -i 'skipped\|no GPU\|not built' "$log" | cut -c1-100)"
    if [ "$require" = 1 ]; then st=FAIL; else st=SKIP; fi
  fi
  record "$1" "$st" "$rc" "$secs" "$note"
}

if [ "$quick" = 0 ]; then
  for b in layer_norm batch_norm; do
    if [ ! -x "$bin/bench_$b" ]; then
      record "bench_$b" FAIL - 0 "$bin/bench_$b missing: rebuild the bundle"
    elif run_step "bench_$b" 300 "$bin/bench_$b"; then
      bench_check "bench_$b"
    else
      not_run "bench_$b"
    fi
  done

  if [ ! -x "$bin/demo" ]; then
    record demo FAIL - 0 "$bin/demo missing: rebuild the bundle"
  elif run_step demo 240 "$bin/demo"; then
    st="$(status_of "$rc")"
    note="$(grep -m1 '^GPU: ' "$log" | cut -c1-80)"
    if grep -q '^No GPU' "$log"; then
      note="no GPU: ran on ptxsim instead"
      [ "$require" = 1 ] && st=FAIL
    fi
    record demo "$st" "$rc" "$secs" "$note"
  else
    not_run demo
  fi

  if [ "$ncu" = 1 ]; then
    if ! command -v ncu >/dev/null 2>&1; then
      record ncu SKIP - 0 "ncu not found"
    elif run_step ncu 300 ncu --clock-control none -k regex:warpnorm_ --launch-count 24 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis "$bin/demo"; then
      record ncu "$(status_of "$rc")" "$rc" "$secs" "kernel metrics in logs.tar.gz (ncu.log)"
    else
      not_run ncu
    fi
  fi

  # ---- 4. PyTorch side by side ------------------------------------------------------------------
  if [ "$torch" = 0 ]; then
    record torch_compare SKIP - 0 "--no-torch"
  elif ! timeout 120 python3 -c 'import torch' >/dev/null 2>&1; then
    record torch_compare SKIP - 0 "python3 cannot import torch"
  else
    req=()
    [ "$require" = 1 ] && req=(--require-cuda)
    if run_step torch_compare 300 python3 scripts/torch_compare.py --json "$OUT/torch_compare.json" \
      "${req[@]}"; then
      st="$(status_of "$rc")"
      n="$(grep '^RESULT ' "$log" | grep -vc '"op":"copy"')"
      note="$n results"
      if [ "$n" = 0 ]; then
        note="no results: $(grep -m1 'torch_compare:' "$log" | cut -c1-100)"
        if [ "$st" = ok ]; then
          if [ "$require" = 1 ]; then st=FAIL; else st=SKIP; fi
        fi
      fi
      record torch_compare "$st" "$rc" "$secs" "$note"
    else
      not_run torch_compare
    fi
  fi

  if ! command -v python3 >/dev/null 2>&1; then
    record report SKIP - 0 "no python3"
  else
    # The report runs even with little time left (it takes well under a second).
    t0="$(now)"
    python3 scripts/gpu-report.py --logs "$logs" --torch "$OUT/torch_compare.json" \
      --info "$info" --manifest "$bundle/MANIFEST" --md "$OUT/compare.md" \
      --json "$OUT/results.json" >"$logs/report.log" 2>&1
    rc=$?
    cat "$logs/report.log" >>"$runlog"
    secs="$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
    record report "$(status_of "$rc")" "$rc" "$secs" "$(tail -n 1 "$logs/report.log" | cut -c1-100)"
    # The performance model's predictions (reports/perf-model.json) beside the measured figures.
    t0="$(now)"
    python3 scripts/perf-model-vs-measured.py --logs "$logs" --info "$info" \
      --md "$logs/perf-model-vs-measured.md" >"$logs/perf-model.log" 2>&1
    rc=$?
    cat "$logs/perf-model.log" >>"$runlog"
    [ -f "$logs/perf-model-vs-measured.md" ] && cat "$logs/perf-model-vs-measured.md" >>"$OUT/compare.md"
    secs="$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')"
    record perf_model "$(status_of "$rc")" "$rc" "$secs" "$(tail -n 1 "$logs/perf-model.log" | cut -c1-100)"
  fi
fi

tar -czf "$OUT/logs.tar.gz" -C "$work" logs 2>/dev/null || echo "gpu-run: could not archive logs" >&2
if [ "$failed" -eq 0 ]; then
  overall="PASS ($nsteps steps)"
else
  overall="FAIL ($failed of $nsteps steps failed)"
fi
printf '# overall: %s, %s s\n' "$overall" "$(elapsed)" >>"$summary"
echo
echo "=== summary ($summary)"
grep '^#' "$summary"
grep -v '^#' "$summary" | { column -t -s $'\t' 2>/dev/null || cat; }
[ "$failed" -eq 0 ]
