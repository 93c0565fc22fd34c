#!/usr/bin/env python3
"""warpnorm and PyTorch side by side, from a scripts/gpu-run.sh run.

Reads the `RESULT {json}` lines the Rust benches print (benches/layer_norm.rs,
benches/batch_norm.rs; any *.log under --logs) and the JSON of scripts/torch_compare.py, matches
results by (bench, op, shape, layout, dtype, param dtype), and writes:
  --md    a Markdown table per bench: time, GB/s of the minimum traffic, % of the copy roofline
          (warpnorm's copy kernel measured in the same bench run, for both columns), and the
          ratio warpnorm GB/s / torch GB/s (> 1: warpnorm faster);
  --json  the same as data (both sides' raw records plus the pairs).
Standard library only. Usage (gpu-run.sh does this):
  python3 scripts/gpu-report.py --logs DIR --torch torch_compare.json --md compare.md \
      --json results.json [--info gpu-info.txt] [--manifest .gpu-bundle/MANIFEST]
"""

import argparse
import glob
import json
import math
import os
import sys


def read_results(path):
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("RESULT "):
                    try:
                        out.append(json.loads(line[len("RESULT "):]))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def key(r):
    return (r.get("bench"), r.get("op"), tuple(r.get("shape") or ()), r.get("layout", ""),
            r.get("dtype"), r.get("param_dtype", ""))


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def gpu_line(info_path):
    """'name, driver, ...' from gpu-info.txt's --query-gpu CSV, or None."""
    try:
        lines = open(info_path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return None
    for i, line in enumerate(lines):
        if line.startswith("--- nvidia-smi --query-gpu") and i + 2 < len(lines):
            hdr = [h.strip() for h in lines[i + 1].split(",")]
            val = [v.strip() for v in lines[i + 2].split(",")]
            if len(hdr) == len(val) and hdr[0] == "name":
                return "; ".join(f"{h} = {v}" for h, v in zip(hdr, val))
            return lines[i + 2].strip()
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", required=True, help="folder with the bench logs (*.log)")
    ap.add_argument("--torch", help="torch_compare.py's JSON")
    ap.add_argument("--info", help="gpu-run.sh's gpu-info.txt")
    ap.add_argument("--manifest", help=".gpu-bundle/MANIFEST")
    ap.add_argument("--md", required=True)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()

    wn = []
    for path in sorted(glob.glob(os.path.join(args.logs, "*.log"))):
        if os.path.basename(path).startswith("torch"):
            continue
        wn.extend(read_results(path))
    tdoc = {}
    if args.torch and os.path.exists(args.torch):
        try:
            tdoc = json.load(open(args.torch, encoding="utf-8"))
        except ValueError as e:
            print(f"gpu-report: cannot read {args.torch}: {e}", file=sys.stderr)
    th = list(tdoc.get("results", []))
    if not th:  # a torch run that died before writing its JSON: its log still has the lines
        th = read_results(os.path.join(args.logs, "torch_compare.log"))

    copy = {}  # bench -> (warpnorm copy GB/s, torch copy GB/s)
    for r in wn:
        if r.get("op") == "copy":
            copy.setdefault(r["bench"], [None, None])[0] = r["gbs"]
    for r in th:
        if r.get("op") == "copy":
            copy.setdefault(r["bench"], [None, None])[1] = r["gbs"]
    tmap = {key(r): r for r in th if r.get("op") != "copy"}
    pairs, seen = [], set()
    for r in wn:
        if r.get("op") == "copy":
            continue
        k = key(r)
        seen.add(k)
        t = tmap.get(k)
        roof = copy.get(r["bench"], [None])[0] or r.get("copy_gbs")
        p = {"bench": r["bench"], "op": r["op"], "shape": r.get("shape"),
             "layout": r.get("layout", ""), "dtype": r.get("dtype"),
             "param_dtype": r.get("param_dtype", ""), "warpnorm": r, "torch": t,
             "copy_gbs": roof}
        if t and t.get("gbs") and r.get("gbs"):
            p["ratio"] = r["gbs"] / t["gbs"]
            p["torch_pct_copy"] = 100 * t["gbs"] / roof if roof else None
        pairs.append(p)
    torch_only = [r for r in th if r.get("op") != "copy" and key(r) not in seen]

    meta = {"gpu": gpu_line(args.info) if args.info else None, "torch": tdoc.get("torch"),
            "torch_device": tdoc.get("device"), "torch_skipped": tdoc.get("skipped"),
            "bundle": None}
    if args.manifest and os.path.exists(args.manifest):
        meta["bundle"] = open(args.manifest, encoding="utf-8").read().splitlines()[:6]

    md = ["# warpnorm vs PyTorch", ""]
    if meta["gpu"]:
        md.append(f"- GPU: {meta['gpu']}")
    if meta["bundle"]:
        for line in meta["bundle"][1:5]:
            md.append(f"- bundle {line}")
    md.append(f"- torch: {meta['torch'] or 'not run'}"
              + (f" ({meta['torch_skipped']})" if meta["torch_skipped"] else ""))
    md.append("- GB/s of the minimum traffic (LayerNorm and RMSNorm fwd 2s, bwd 3s bytes per "
              "element, their fused residual add fwd and bwd with dbias 4s; "
              "BatchNorm train fwd 3s, bwd 5s, eval fwd 2s, eval bwd 2s, with grads 3s; s = activation "
              "element size), median of "
              "20 with L2 flushed; % copy = of warpnorm's copy kernel in the same bench run (both "
              "columns); ratio = warpnorm GB/s / torch GB/s (> 1: warpnorm faster).")
    for bench, (wc, tc) in sorted(copy.items()):
        md.append(f"- {bench} copy roofline: warpnorm {fmt(wc, '.1f') or 'n/a'} GB/s, torch copy_ "
                  f"{fmt(tc, '.1f') or 'n/a'} GB/s")
    md.append("")
    if not pairs:
        md.append("No warpnorm bench results (no GPU, or the benches did not run).")
    ratios_all = []
    for bench in ("layer_norm", "batch_norm"):
        rows = [p for p in pairs if p["bench"] == bench]
        if not rows:
            continue
        md += [f"## {bench}", "",
               "| shape | layout | dtype x/params | op | warpnorm us | GB/s | % copy | torch us | "
               "GB/s | % copy | warpnorm/torch | note |",
               "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|"]
        for p in rows:
            w, t = p["warpnorm"], p["torch"] or {}
            note = t.get("note", "") if t else "no torch result"
            if w.get("check") == "FAILED":
                note = "warpnorm check FAILED; " + note
            md.append(
                f"| {'x'.join(map(str, p['shape'] or []))} | {p['layout'] or '-'} | "
                f"{p['dtype']}/{p['param_dtype'] or '-'} | {p['op']} | {fmt(w.get('us'), '.1f')} | "
                f"{fmt(w.get('gbs'), '.1f')} | {fmt(w.get('pct_copy'), '.1f')} | "
                f"{fmt(t.get('us'), '.1f')} | {fmt(t.get('gbs'), '.1f')} | "
                f"{fmt(p.get('torch_pct_copy'), '.1f')} | {fmt(p.get('ratio'), '.2f')} | "
                f"{note.replace('|', '/')} |")
        md.append("")
        by_op = {}
        for p in rows:
            if p.get("ratio"):
                by_op.setdefault(p["op"], []).append(p["ratio"])
                ratios_all.append(p["ratio"])
        for op, rs in by_op.items():
            g = math.exp(sum(math.log(x) for x in rs) / len(rs))
            md.append(f"- {bench} {op}: geometric mean warpnorm/torch {g:.2f} over {len(rs)} "
                      f"shapes (min {min(rs):.2f}, max {max(rs):.2f})")
        md.append("")
    if torch_only:
        md += ["## torch results without a warpnorm counterpart", ""]
        for r in torch_only:
            md.append(f"- {r.get('bench')} {r.get('op')} {r.get('shape')} {r.get('layout', '')} "
                      f"{r.get('dtype')}/{r.get('param_dtype', '')}: {fmt(r.get('gbs'), '.1f')} GB/s")
        md.append("")

    with open(args.md, "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "copy": copy, "pairs": pairs, "torch_only": torch_only,
                   "warpnorm": wn, "torch": th}, f, indent=1)
        f.write("\n")
    n_wn = sum(1 for r in wn if r.get("op") != "copy")
    n_th = sum(1 for r in th if r.get("op") != "copy")
    msg = f"{n_wn} warpnorm results, {n_th} torch, {len(ratios_all)} pairs"
    if ratios_all:
        g = math.exp(sum(math.log(x) for x in ratios_all) / len(ratios_all))
        msg += f", geomean warpnorm/torch {g:.2f}"
    print(f"gpu-report: {msg} -> {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
