#!/usr/bin/env python3
"""Puts the performance model's predictions (reports/perf-model.json, made here by
`cargo run -p perfmodel -- report`) beside the benches' measured figures (their `RESULT {json}`
lines in the step logs, torch_compare's excepted) for the GPU the benches ran on: one markdown table, measured / predicted per case.

Usage: perf-model-vs-measured.py --logs DIR [--model reports/perf-model.json]
                                 [--info gpu-info.txt] [--gpu H100|H200] --md OUT.md
The GPU is taken from --gpu, else from the first "H100"/"H200" in --info (nvidia-smi output).
"""
import argparse
import glob
import json
import os
import sys

LN_OPS = {"fwd": "LayerNorm-fwd", "bwd": "LayerNorm-bwd",
          # benches/layer_norm/fused.rs: RMSNorm and the fused residual add of both ops
          "rms_fwd": "RMSNorm-fwd", "rms_bwd": "RMSNorm-bwd",
          "res_fwd": "LayerNorm-res-fwd", "res_bwd_dbias": "LayerNorm-res-bwd-dbias",
          "rms_res_fwd": "RMSNorm-res-fwd", "rms_res_bwd_dbias": "RMSNorm-res-bwd-dbias"}
BN_OPS = {"train_fwd": "BatchNorm-train-fwd", "train_bwd": "BatchNorm-train-bwd",
          "eval_fwd": "BatchNorm-eval-fwd", "eval_bwd": "BatchNorm-eval-bwd"}


def model_key(r):
    """The perfmodel key (without the GPU) of one bench RESULT, or None."""
    op = r.get("op")
    shape = "x".join(str(d) for d in (r.get("shape") or []))
    dtypes = "%s/%s" % (r.get("dtype"), r.get("param_dtype", r.get("dtype")))
    if op == "copy":
        return "copy %s f32/f32" % shape
    if op in LN_OPS:
        return "%s %s %s" % (LN_OPS[op], shape, dtypes)
    if op in BN_OPS:
        if r.get("layout") == "chlast":
            shape += "-nhwc"
        return "%s %s %s" % (BN_OPS[op], shape, dtypes)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", required=True)
    ap.add_argument("--model", default="reports/perf-model.json")
    ap.add_argument("--info")
    ap.add_argument("--gpu")
    ap.add_argument("--md", required=True)
    a = ap.parse_args()
    gpu = a.gpu
    if not gpu and a.info and os.path.exists(a.info):
        text = open(a.info, encoding="utf-8", errors="replace").read()
        gpu = next((g for g in ("H200", "H100") if g in text), None)
    try:
        model = json.load(open(a.model, encoding="utf-8"))
    except (OSError, ValueError) as e:
        print("perf-model-vs-measured: cannot read %s: %s" % (a.model, e))
        return 1
    pred = {p["key"]: p for p in model.get("predictions", [])}
    rows = []
    for path in sorted(glob.glob(os.path.join(a.logs, "*.log"))):
        if os.path.basename(path).startswith("torch"):
            continue  # PyTorch's figures, not warpnorm's
        for line in open(path, encoding="utf-8", errors="replace"):
            if not line.startswith("RESULT "):
                continue
            try:
                r = json.loads(line[len("RESULT "):])
            except ValueError:
                continue
            k = model_key(r)
            p = pred.get("%s %s" % (gpu, k)) if gpu and k else None
            rows.append((k or r.get("op"), r.get("gbs"), p))
    with open(a.md, "w", encoding="utf-8") as f:
        f.write("# Performance model vs measured (%s)\n\n" % (gpu or "unknown GPU: no prediction"))
        f.write("Predicted: reports/perf-model.json (nvcc %s). Measured: the benches' RESULT lines.\n\n"
                % model.get("nvcc", "?"))
        f.write("| case | measured GB/s | predicted GB/s | measured / predicted | predicted limit |\n")
        f.write("|---|---|---|---|---|\n")
        for k, gbs, p in rows:
            pg = p["gbs"] if p else None
            ratio = "%.2f" % (gbs / pg) if (p and gbs and pg) else ""
            f.write("| %s | %s | %s | %s | %s |\n" % (
                k, "" if gbs is None else "%.0f" % gbs, "" if pg is None else "%.0f" % pg,
                ratio, p["limit"] if p else ""))
    matched = sum(1 for _, _, p in rows if p)
    print("perf-model-vs-measured: %d results, %d with a prediction (%s)" % (len(rows), matched, gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
