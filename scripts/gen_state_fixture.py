#!/usr/bin/env python3
"""Generate the module-state fixtures: checkpoints saved by PyTorch in the safetensors format.

Two small models are trained for a few SGD steps on the CPU, so that every entry of their
normalization layers holds a value that no initializer gives (weight and bias moved by the
optimizer, running statistics averaged over several batches, num_batches_tracked > 0), and their
whole `state_dict()` is written with `safetensors.torch.save_file`:

- fixtures/state/model_f32.safetensors: a float32 model whose keys nest under prefixes, as a real
  checkpoint's do: `stem.*` (a Conv2d, which warpnorm ignores), `layer1.bn.*` (BatchNorm2d(4)),
  `layer1.ln.*` (LayerNorm([4, 5]): a 2-D normalized shape) and `head.bn.*` (BatchNorm1d(3,
  affine=False, momentum=None): running statistics only, cumulative average).
- fixtures/state/model_half.safetensors: `bn.*` (BatchNorm2d(3) in bfloat16, buffers included)
  and `ln.*` (LayerNorm(6) in float16), each trained in its own dtype.

Beside each file, a JSON (same name, `.json`) records what the script saved, independently of
the safetensors encoding: every key's dtype, shape, raw little-endian bytes (hex) and values, each
normalization module's configuration, and, for each one, a small input with the module's eval
output computed by torch (`eval_x`, `eval_y`, float32 only), so that a loaded state can be
checked by what it computes and not only by its bytes. Format: fixtures/state/README.md.

Usage (from the repository root, in the venv of scripts/requirements-fixtures.txt):
    python3 scripts/gen_state_fixture.py            # rewrite fixtures/state/ (deterministic)
    python3 scripts/gen_state_fixture.py --check    # regenerate in a temp dir, compare bytes

Determinism: one thread, a fixed seed per model, JSON with sorted keys.
Style: `ruff format --line-length 100`, `ruff check --line-length 100`.
"""

import argparse
import json
import os
import sys
import tempfile

import safetensors
import torch
import torch.nn as nn
from safetensors.torch import save_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "fixtures", "state")

ST_DTYPES = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
}


def raw_hex(t):
    """Raw little-endian bytes of a contiguous tensor, as hex."""
    return bytes(t.detach().contiguous().reshape(-1).view(torch.uint8).tolist()).hex()


def entry(t):
    """A state entry as the JSON records it."""
    values = t.detach().reshape(-1)
    values = values.tolist() if t.dtype == torch.int64 else values.double().tolist()
    return {
        "dtype": ST_DTYPES[t.dtype],
        "shape": list(t.shape),
        "hex": raw_hex(t),
        "values": values,
    }


def describe(m):
    """The configuration of a normalization module, under warpnorm's names."""
    if isinstance(m, nn.LayerNorm):
        return {
            "type": "LayerNorm",
            "normalized_shape": list(m.normalized_shape),
            "eps": m.eps,
            "weight": m.weight is not None,
            "bias": m.bias is not None,
        }
    return {
        "type": type(m).__name__,
        "num_features": m.num_features,
        "eps": m.eps,
        "momentum": m.momentum,
        "affine": m.affine,
        "track_running_stats": m.track_running_stats,
    }


def train(model, forward, inputs, lr=0.1):
    """A few SGD steps on the sum of squares of the output (plus a linear term, so that the
    gradient of a LayerNorm's bias is not zero)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x in inputs:
        opt.zero_grad()
        y = forward(x)
        loss = (y.float() ** 2).mean() + (y.float() * torch.linspace(-1, 1, y.shape[-1])).mean()
        loss.backward()
        opt.step()


def eval_case(m, shape, gen):
    """A small float32 input and the module's eval output (float32 modules only)."""
    x = torch.randn(*shape, generator=gen)
    with torch.no_grad():
        y = m.eval()(x)
    return {"eval_x": entry(x), "eval_shape": list(shape), "eval_y": entry(y)}


def model_f32():
    gen = torch.Generator().manual_seed(1401)
    torch.manual_seed(1401)
    model = nn.Module()
    model.stem = nn.Conv2d(3, 4, 1)
    model.layer1 = nn.Module()
    model.layer1.bn = nn.BatchNorm2d(4)
    model.layer1.ln = nn.LayerNorm([4, 5], eps=1e-6)
    model.head = nn.Module()
    model.head.bn = nn.BatchNorm1d(3, affine=False, momentum=None)

    def forward(x):
        h = model.layer1.ln(torch.relu(model.layer1.bn(model.stem(x))))
        # head.bn sees (N, 3) features: the means of three of the channels.
        model.head.bn(h[:, :3].mean(dim=(2, 3)))
        return h

    model.train()
    train(model, forward, [torch.randn(6, 3, 4, 5, generator=gen) * 2 + 1 for _ in range(3)])
    mods = {"layer1.bn": model.layer1.bn, "layer1.ln": model.layer1.ln, "head.bn": model.head.bn}
    evals = {
        "layer1.bn": eval_case(model.layer1.bn, (2, 4, 2, 3), gen),
        "layer1.ln": eval_case(model.layer1.ln, (3, 4, 5), gen),
        "head.bn": eval_case(model.head.bn, (5, 3), gen),
    }
    return model, mods, evals


def model_half():
    gen = torch.Generator().manual_seed(1402)
    torch.manual_seed(1402)
    model = nn.Module()
    model.bn = nn.BatchNorm2d(3).to(torch.bfloat16)
    model.ln = nn.LayerNorm(6).to(torch.float16)
    model.train()
    train(
        model.bn,
        model.bn,
        [(torch.randn(4, 3, 2, 2, generator=gen) * 3 - 2).bfloat16() for _ in range(4)],
    )
    train(model.ln, model.ln, [torch.randn(5, 6, generator=gen).half() for _ in range(2)])
    return model, {"bn": model.bn, "ln": model.ln}, {}


def write(directory, name, model, mods, evals):
    sd = model.state_dict()
    for prefix, m in mods.items():
        if getattr(m, "num_batches_tracked", None) is not None:
            assert int(m.num_batches_tracked) > 0, prefix
    path = os.path.join(directory, name + ".safetensors")
    save_file(sd, path)
    record = {
        "torch_version": torch.__version__,
        "safetensors_version": safetensors.__version__,
        "file": name + ".safetensors",
        "keys": {k: entry(v) for k, v in sd.items()},
        "modules": {p: {**describe(m), **evals.get(p, {})} for p, m in mods.items()},
    }
    with open(os.path.join(directory, name + ".json"), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")


def generate(directory):
    torch.set_num_threads(1)
    os.makedirs(directory, exist_ok=True)
    write(directory, "model_f32", *model_f32())
    write(directory, "model_half", *model_half())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with fixtures/state/")
    args = ap.parse_args()
    if not args.check:
        generate(OUT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        bad = []
        for f in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, f), "rb") as a:
                new = a.read()
            old_path = os.path.join(OUT, f)
            old = open(old_path, "rb").read() if os.path.exists(old_path) else None
            if new != old:
                bad.append(f)
        if bad:
            print("differ from a fresh run:", ", ".join(bad))
            return 1
    print("fixtures/state/ is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
