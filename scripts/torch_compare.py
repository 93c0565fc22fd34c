#!/usr/bin/env python3
"""PyTorch side of the warpnorm benchmarks: times torch.nn.functional.layer_norm (forward, and
backward through autograd) and torch.nn.functional.batch_norm (training forward, backward,
eval forward, eval backward without and with the parameters' gradients) on the SAME shapes and dtypes as the Rust benches, with the same method:

- shapes: copied from benches/layer_norm.rs (`main`) and benches/batch_norm.rs (`run`); keep
  them in sync with those files;
- CUDA events around each call, L2 flushed before every repeat by zeroing a buffer (256 MiB for
  LayerNorm, 512 MiB for BatchNorm, as the benches), one warm-up call, median of 20 (the upper
  median, element 10 of the sorted 20, as the benches);
- GB/s of the minimum traffic: LayerNorm fwd 2s bytes per element, bwd 3s; BatchNorm train fwd
  3s, bwd 5s, eval fwd 2s, eval bwd 2s (3s with the gradients); s = the activation's element size; plus a device-to-device copy
  roofline of the same size as each bench's.

Prints a table and one `RESULT {json}` line per result (the format of the Rust benches), and
writes a JSON file (--json, default torch_compare.json). `scripts/gpu-report.py` puts both side
by side.

`--device cpu --quick` runs tiny shapes on the CPU, timed with time.perf_counter, to smoke-test
the script without a GPU. Without PyTorch it says so and exits 0; with `--device cuda` and no
usable GPU it says so and exits 0, or 2 with --require-cuda.
"""

import argparse
import datetime
import json
import os
import platform
import sys
import time

REPEATS = 20
LN_FLUSH_BYTES = 256 << 20  # benches/layer_norm.rs FLUSH_BYTES
BN_FLUSH_BYTES = 512 << 20  # benches/batch_norm.rs FLUSH_BYTES
EPS = 1e-5
MOMENTUM = 0.1


def layer_norm_cases(quick):
    """(rows, cols, x dtype, param dtype), in the order of benches/layer_norm.rs `main`."""
    if quick:
        return [
            (64, 768, "f32", "f32"),
            (64, 768, "bf16", "bf16"),
            (64, 768, "bf16", "f32"),
            (4, 1 << 12, "bf16", "f32"),
            (64, 2041, "f32", "f32"),
        ]
    rows = 32 * 512
    cases = []
    for cols in [768, 1024, 2048, 4096, 8192]:
        cases.append((rows, cols, "f32", "f32"))
        cases.append((rows, cols, "bf16", "bf16"))
        cases.append((rows, cols, "bf16", "f32"))
    # Few rows with long rows (split tier) and an odd D (no D % 4 cliff).
    cases.append((4, 1 << 20, "bf16", "f32"))
    cases.append((4096, 2041, "f32", "f32"))
    cases.append((4096, 2040, "f32", "f32"))
    # Rows of 12288 and 16384 (the backward's wide tier).
    cases.append((rows, 12288, "bf16", "bf16"))
    cases.append((rows, 16384, "bf16", "f32"))
    return cases


def batch_norm_cases(quick):
    """(dims, x dtype, layout), in the order of benches/batch_norm.rs `run`; params are f32."""
    if quick:
        return [
            ([256, 8], "f32", "contig"),
            ([256, 8], "bf16", "contig"),
            ([2, 16, 8, 8], "f32", "contig"),
            ([2, 16, 8, 8], "f32", "chlast"),
            ([2, 16, 8, 8], "bf16", "chlast"),
            ([4, 8, 64], "f32", "contig"),
        ]
    return [
        ([65536 * 16, 8], "f32", "contig"),
        ([65536 * 16, 8], "bf16", "contig"),
        ([32, 256, 56, 56], "f32", "contig"),
        ([32, 256, 56, 56], "f32", "chlast"),
        ([32, 256, 56, 56], "bf16", "chlast"),
        ([32, 256, 56, 56], "bf16", "contig"),
        ([256, 64, 4096], "f32", "contig"),
        ([64, 3, 224, 224], "f32", "contig"),
        ([128, 2048, 7, 7], "f32", "contig"),
        # Shapes of the fused single-pass tiers on H200 (many channels, channel tile on chip).
        ([256, 4096], "f32", "contig"),
        ([32, 512, 7, 7], "bf16", "contig"),
    ]


def copy_elems(bench, quick):
    """f32 elements of each bench's copy roofline (layer_norm: 1 GiB, batch_norm: 256 MiB)."""
    if quick:
        return 1 << 20
    return (1 << 28) if bench == "layer_norm" else (64 << 20)


class Timer:
    """Median milliseconds of fn() over REPEATS runs after one warm-up, the cache flushed before
    each run (outside the timed region): CUDA events on a GPU, time.perf_counter on the CPU."""

    def __init__(self, torch, device, flush_bytes, repeats):
        self.torch = torch
        self.device = device
        self.repeats = repeats
        self.flush = torch.empty(flush_bytes, dtype=torch.uint8, device=device)

    def time(self, fn):
        torch = self.torch
        fn()  # warm-up
        ms = []
        cuda = self.device.type == "cuda"
        for _ in range(self.repeats):
            self.flush.zero_()
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                ms.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                ms.append((time.perf_counter() - t0) * 1e3)
        ms.sort()
        return ms[self.repeats // 2]


def gbs(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def emit(results, rec):
    results.append(rec)
    print("RESULT " + json.dumps(rec, separators=(",", ":")), flush=True)


def time_copy(torch, timer, device, bench, quick, results):
    n = copy_elems(bench, quick)
    src = torch.zeros(n, dtype=torch.float32, device=device)
    dst = torch.zeros(n, dtype=torch.float32, device=device)
    ms = timer.time(lambda: dst.copy_(src))
    rate = gbs(2.0 * 4 * n, ms)
    print(f"{bench}: copy roofline (torch copy_): {rate:.1f} GB/s ({ms * 1e3:.1f} us for 2 x "
          f"{(4 * n) >> 20} MiB)", flush=True)
    emit(results, {"bench": bench, "op": "copy", "shape": [n], "dtype": "f32",
                   "us": ms * 1e3, "bytes": 2.0 * 4 * n, "gbs": rate})
    del src, dst
    return rate


def DTYPES(torch):  # noqa: N802 - a table, named like one
    return {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def bench_layer_norm(torch, F, device, quick, repeats, results, errors):
    timer = Timer(torch, device, LN_FLUSH_BYTES if not quick else 64 << 20, repeats)
    copy_gbs = time_copy(torch, timer, device, "layer_norm", quick, results)
    gen = torch.Generator(device="cpu").manual_seed(0)
    for rows, cols, xd, pd in layer_norm_cases(quick):
        try:
            layer_norm_case(torch, F, device, timer, gen, copy_gbs, rows, cols, xd, pd, results)
        except Exception as e:  # noqa: BLE001 - record, go on with the next shape
            msg = f"layer_norm {rows}x{cols} {xd}/{pd}: {type(e).__name__}: {e}"
            print("ERROR " + msg, flush=True)
            errors.append(msg)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def layer_norm_case(torch, F, device, timer, gen, copy_gbs, rows, cols, xd, pd, results):
    dt = DTYPES(torch)
    label = f"{rows:>5} x {cols:>7} {xd:>4}/{pd:<4}"
    x = (torch.rand(rows, cols, generator=gen) * 6 - 3).to(device=device, dtype=dt[xd])
    dy = (torch.rand(rows, cols, generator=gen) * 2 - 1).to(device=device, dtype=dt[xd])
    w = (torch.rand(cols, generator=gen) + 0.5).to(device=device, dtype=dt[pd])
    b = (torch.rand(cols, generator=gen) - 0.5).to(device=device, dtype=dt[pd])
    used, note = pd, ""
    try:
        with torch.no_grad():
            F.layer_norm(x, (cols,), w, b, EPS)
    except RuntimeError as e:  # torch's CUDA LayerNorm wants matching dtypes
        used = xd
        note = (f"torch rejected {xd} x with {pd} params ({str(e).splitlines()[0][:120]}); "
                f"params cast to {xd}")
        w, b = w.to(dt[xd]), b.to(dt[xd])

    def fwd():
        with torch.no_grad():
            F.layer_norm(x, (cols,), w, b, EPS)

    t_f = timer.time(fwd)
    xg = x.detach().requires_grad_(True)
    wg = w.detach().requires_grad_(True)
    bg = b.detach().requires_grad_(True)
    y = F.layer_norm(xg, (cols,), wg, bg, EPS)

    def bwd():
        torch.autograd.grad(y, (xg, wg, bg), dy, retain_graph=True)

    t_b = timer.time(bwd)
    s = x.element_size()
    n = rows * cols
    line = []
    for op, ms, k in [("fwd", t_f, 2.0), ("bwd", t_b, 3.0)]:
        nbytes = k * s * n
        rate = gbs(nbytes, ms)
        line.append(f"{op} {ms * 1e3:9.1f} us {rate:7.1f} GB/s {100 * rate / copy_gbs:5.1f}%")
        rec = {"bench": "layer_norm", "op": op, "shape": [rows, cols], "dtype": xd,
               "param_dtype": pd, "param_dtype_used": used, "us": ms * 1e3,
               "bytes": nbytes, "gbs": rate, "pct_copy": 100 * rate / copy_gbs,
               "copy_gbs": copy_gbs}
        if note:
            rec["note"] = note
        emit(results, rec)
    print(f"{label}  " + "   ".join(line) + (f"   [{note}]" if note else ""), flush=True)


def bench_batch_norm(torch, F, device, quick, repeats, results, errors):
    timer = Timer(torch, device, BN_FLUSH_BYTES if not quick else 64 << 20, repeats)
    copy_gbs = time_copy(torch, timer, device, "batch_norm", quick, results)
    gen = torch.Generator(device="cpu").manual_seed(1)
    for dims, xd, layout in batch_norm_cases(quick):
        try:
            batch_norm_case(torch, F, device, timer, gen, copy_gbs, dims, xd, layout, results)
        except Exception as e:  # noqa: BLE001 - record, go on with the next shape
            msg = f"batch_norm {dims} {layout} {xd}: {type(e).__name__}: {e}"
            print("ERROR " + msg, flush=True)
            errors.append(msg)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def batch_norm_case(torch, F, device, timer, gen, copy_gbs, dims, xd, layout, results):
    dt = DTYPES(torch)
    label = f"{str(dims):<22} {layout:<6} {xd:<5}"
    c = dims[1]
    n = 1
    for d in dims:
        n *= d

    def make(lo, hi):
        t = (torch.rand(*dims, generator=gen) * (hi - lo) + lo).to(device=device, dtype=dt[xd])
        if layout == "chlast":
            if len(dims) == 4:
                t = t.contiguous(memory_format=torch.channels_last)
            elif len(dims) == 5:
                t = t.contiguous(memory_format=torch.channels_last_3d)
            else:  # (N, C, L): channels last is (N, L, C) in memory
                t = t.transpose(1, -1).contiguous().transpose(1, -1)
        return t

    x = make(-2.0, 2.6)
    dy = make(-1.0, 1.0)
    w = (torch.rand(c, generator=gen) * 1.0 + 0.5).to(device)
    b = (torch.rand(c, generator=gen) - 0.5).to(device)
    rm = torch.zeros(c, device=device)
    rv = torch.ones(c, device=device)
    used, note = "f32", ""
    try:
        with torch.no_grad():
            F.batch_norm(x, rm, rv, w, b, True, MOMENTUM, EPS)
    except RuntimeError as e:
        used = xd
        note = (f"torch rejected {xd} x with f32 params ({str(e).splitlines()[0][:120]}); "
                f"params cast to {xd}")
        w, b, rm, rv = (t.to(dt[xd]) for t in (w, b, rm, rv))

    def train_fwd():
        with torch.no_grad():
            F.batch_norm(x, rm, rv, w, b, True, MOMENTUM, EPS)

    def eval_fwd():
        with torch.no_grad():
            F.batch_norm(x, rm, rv, w, b, False, MOMENTUM, EPS)

    t_f = timer.time(train_fwd)
    xg = x.detach().requires_grad_(True)
    wg = w.detach().requires_grad_(True)
    bg = b.detach().requires_grad_(True)
    y = F.batch_norm(xg, rm, rv, wg, bg, True, MOMENTUM, EPS)

    def bwd():
        torch.autograd.grad(y, (xg, wg, bg), dy, retain_graph=True)

    t_b = timer.time(bwd)
    del y, bwd
    t_e = timer.time(eval_fwd)
    # Eval-mode backward (running statistics): dx alone, and with the parameters' gradients.
    ye = F.batch_norm(xg, rm, rv, wg, bg, False, MOMENTUM, EPS)

    def eval_bwd():
        torch.autograd.grad(ye, (xg,), dy, retain_graph=True)

    def eval_bwd_grads():
        torch.autograd.grad(ye, (xg, wg, bg), dy, retain_graph=True)

    t_eb = timer.time(eval_bwd)
    t_ebg = timer.time(eval_bwd_grads)
    del ye
    s = x.element_size()
    for op, ms, k in [("train_fwd", t_f, 3.0), ("train_bwd", t_b, 5.0), ("eval_fwd", t_e, 2.0),
                      ("eval_bwd", t_eb, 2.0), ("eval_bwd_grads", t_ebg, 3.0)]:
        nbytes = k * s * n
        rate = gbs(nbytes, ms)
        print(f"{label} {op.replace('_', ' '):<10} {ms * 1e3:>9.1f} us {rate:>8.1f} GB/s "
              f"{100 * rate / copy_gbs:>5.1f}% of copy" + (f"   [{note}]" if note else ""),
              flush=True)
        rec = {"bench": "batch_norm", "op": op, "shape": list(dims), "layout": layout,
               "dtype": xd, "param_dtype": "f32", "param_dtype_used": used,
               "us": ms * 1e3, "bytes": nbytes, "gbs": rate,
               "pct_copy": 100 * rate / copy_gbs, "copy_gbs": copy_gbs}
        if note:
            rec["note"] = note
        emit(results, rec)


def write_json(path, doc):
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    print(f"wrote {path}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (smoke test)")
    ap.add_argument("--only", choices=["layer_norm", "batch_norm"], help="one op family only")
    ap.add_argument("--repeats", type=int, default=REPEATS, help="timed runs per case (20)")
    ap.add_argument("--json", default="torch_compare.json",
                    help="JSON output path ('' for none; default torch_compare.json)")
    ap.add_argument("--require-cuda", action="store_true",
                    help="exit 2 instead of 0 when --device cuda has no usable GPU")
    args = ap.parse_args()
    doc = {"tool": "scripts/torch_compare.py", "argv": sys.argv[1:],
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "results": [], "errors": []}

    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - ImportError, or a broken install
        print(f"torch_compare: PyTorch is not available ({type(e).__name__}: {e}); nothing to "
              "compare, skipping (exit 0).", flush=True)
        doc["skipped"] = f"PyTorch not available: {e}"
        write_json(args.json, doc)
        return 0

    doc["torch"] = torch.__version__
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            msg = (f"torch_compare: torch {torch.__version__} sees no usable CUDA GPU "
                   f"(torch.version.cuda={torch.version.cuda}); nothing to time on the GPU.")
            print(msg + (" Failing (--require-cuda)." if args.require_cuda else
                         " Skipping (exit 0); --device cpu --quick runs on the CPU."), flush=True)
            doc["skipped"] = msg
            write_json(args.json, doc)
            return 2 if args.require_cuda else 0
        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(device)
        doc["device"] = {"type": "cuda", "name": props.name,
                         "capability": f"{props.major}.{props.minor}",
                         "sms": props.multi_processor_count,
                         "memory_bytes": props.total_memory, "cuda": torch.version.cuda,
                         "cudnn": torch.backends.cudnn.version()}
        timing = "CUDA events"
    else:
        doc["device"] = {"type": device.type, "name": platform.processor() or platform.machine(),
                         "threads": torch.get_num_threads()}
        timing = "time.perf_counter"
    doc.update({"quick": args.quick, "repeats": args.repeats, "timing": timing,
                "statistic": "median (sorted[repeats // 2])"})
    print(f"torch_compare: torch {torch.__version__} on {doc['device']['name']} "
          f"({device}), {timing}, median of {args.repeats}, cache flushed before each repeat"
          f"{', QUICK (tiny shapes)' if args.quick else ''}", flush=True)

    results, errors = doc["results"], doc["errors"]
    t0 = time.perf_counter()
    if args.only in (None, "layer_norm"):
        print("\nLayerNorm (F.layer_norm; bwd = autograd.grad for x, weight, bias):", flush=True)
        bench_layer_norm(torch, F, device, args.quick, args.repeats, results, errors)
        write_json(args.json, doc)  # partial results survive a later crash or time-out
    if args.only in (None, "batch_norm"):
        print("\nBatchNorm (F.batch_norm, f32 weight/bias/running stats; bwd = autograd.grad):",
              flush=True)
        bench_batch_norm(torch, F, device, args.quick, args.repeats, results, errors)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    write_json(args.json, doc)
    if errors:
        print(f"torch_compare: {len(errors)} case(s) failed:", *errors, sep="\n  ", flush=True)
        return 1
    print(f"torch_compare: {len(results)} results in {doc['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
