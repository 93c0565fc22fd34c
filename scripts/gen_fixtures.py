#!/usr/bin/env python3
"""Generate warpnorm's PyTorch oracle fixtures (LayerNorm, RMSNorm, BatchNorm; fwd and bwd).

Also the fused residual add of LayerNorm and RMSNorm (layer_norm_residual, rms_norm_residual).

Every case is one JSON file, fixtures/<op>/<case>.json. Tensors are stored bit-exactly as
{"dtype", "shape", "layout", "hex"} (little-endian raw bytes in memory order), so NaN payloads and
-0 survive. Each case carries its inputs, torch's results computed in the case's dtype ("torch")
and torch's results computed in float64 from the same, already rounded inputs ("f64").
The format is documented in fixtures/README.md.

Usage (from the repository root, in a venv with scripts/requirements-fixtures.txt installed):
    python3 scripts/gen_fixtures.py            # rewrite fixtures/ (deterministic)
    python3 scripts/gen_fixtures.py --check    # regenerate in memory, compare with fixtures/

Determinism: every case draws from its own generator seeded by crc32(case name), torch runs with
one thread (the CPU batch-norm kernels split reductions by thread count), and JSON is written with
a fixed key order. Style: `ruff format --line-length 100`, `ruff check --line-length 100`.
"""

import argparse
import json
import math
import os
import sys
import zlib

import torch
import torch.nn.functional as F

FORMAT_VERSION = 1
RESIDUAL_OPS = ("layer_norm_residual", "rms_norm_residual")
# The subdirectories of fixtures/, in the manifest's order.
OPS = ("layer_norm", "rms_norm", "batch_norm") + RESIDUAL_OPS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DTYPE_NAMES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int64: "i64",
}
F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64

# Physical (memory) order of each layout, as a permutation of the logical dims.
LAYOUT_PERMS = {
    "channels_last": (0, 2, 3, 1),
    "channels_last_3d": (0, 2, 3, 4, 1),
}
MEMORY_FORMATS = {
    "channels_last": torch.channels_last,
    "channels_last_3d": torch.channels_last_3d,
}


# ----------------------------------------------------------------------------- encoding helpers


def raw_bytes(t, layout="contiguous"):
    """Raw little-endian bytes of `t` in the memory order of `layout`."""
    t = t.detach()
    if layout != "contiguous":
        t = t.permute(*LAYOUT_PERMS[layout])
    flat = t.contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).tolist())


def enc(t, layout="contiguous"):
    """Encode a tensor (or None) as a fixture tensor object."""
    if t is None:
        return None
    return {
        "dtype": DTYPE_NAMES[t.dtype],
        "shape": list(t.shape),
        "layout": layout,
        "hex": raw_bytes(t, layout).hex(),
    }


def same_bits(a, b):
    """True when two tensors have the same dtype, shape and bytes (NaN == NaN)."""
    return a.dtype == b.dtype and a.shape == b.shape and raw_bytes(a) == raw_bytes(b)


def gen_for(name):
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def randn(gen, shape, dtype, scale=1.0, offset=0.0):
    """N(offset, scale^2) drawn in float64, then rounded once to `dtype`."""
    return (torch.randn(shape, generator=gen, dtype=F64) * scale + offset).to(dtype)


def opt(t, dtype):
    return None if t is None else t.to(dtype)


def leaf(t):
    return None if t is None else t.detach().clone().requires_grad_(True)


def grad(t):
    return None if t is None else t.grad


def dname(t):
    return None if t is None else DTYPE_NAMES[t.dtype]


# ----------------------------------------------------------------------------- LayerNorm


def run_layer_norm(x, ns, gamma, beta, eps, dy):
    y, mean, rstd = torch.ops.aten.native_layer_norm(x, ns, gamma, beta, eps)
    xg, gg, bg = leaf(x), leaf(gamma), leaf(beta)
    y2 = F.layer_norm(xg, ns, gg, bg, eps)
    assert same_bits(y, y2), "F.layer_norm and aten.native_layer_norm disagree"
    y2.backward(dy)
    dx = xg.grad if xg.grad is not None else torch.zeros_like(x)
    return {
        "y": enc(y),
        "mean": enc(mean),
        "rstd": enc(rstd),
        "dx": enc(dx),
        "dgamma": enc(grad(gg)),
        "dbeta": enc(grad(bg)),
    }


def layer_norm_case(name, desc, x, ns, gamma=None, beta=None, eps=1e-5, dy=None):
    ns = list(ns)
    if dy is None:
        dy = randn(gen_for(name + "/dy"), x.shape, x.dtype)
    res = run_layer_norm(x, ns, gamma, beta, eps, dy)
    res64 = run_layer_norm(x.to(F64), ns, opt(gamma, F64), opt(beta, F64), eps, dy.to(F64))
    config = {
        "normalized_shape": ns,
        "eps": eps,
        "elementwise_affine": gamma is not None,
        "bias": beta is not None,
        "x_dtype": dname(x),
        "param_dtype": dname(gamma),
    }
    case = {
        "format_version": FORMAT_VERSION,
        "op": "layer_norm",
        "name": name,
        "description": desc,
        "torch_version": torch.__version__,
        "config": config,
        "inputs": {"x": enc(x), "gamma": enc(gamma), "beta": enc(beta), "dy": enc(dy)},
        "torch": res,
        "f64": res64,
    }
    return name, case


def ln_params(gen, d_shape, dtype, affine=True, bias=True):
    if not affine:
        return None, None
    gamma = randn(gen, d_shape, dtype, scale=0.5, offset=1.0)
    beta = randn(gen, d_shape, dtype, scale=0.5) if bias else None
    return gamma, beta


def ln_random(
    name,
    desc,
    x_shape,
    ns,
    x_dtype,
    p_dtype=None,
    affine=True,
    bias=True,
    eps=1e-5,
    scale=1.0,
    offset=0.0,
):
    gen = gen_for(name)
    x = randn(gen, x_shape, x_dtype, scale=scale, offset=offset)
    gamma, beta = ln_params(gen, ns, p_dtype or x_dtype, affine, bias)
    return layer_norm_case(name, desc, x, ns, gamma, beta, eps)


def layer_norm_cases():
    cases = []
    add = cases.append
    # Ordinary random shapes, same-dtype parameters.
    for dt, shapes in (
        (F32, [(1, 7), (5, 1), (5, 32), (33, 32), (5, 100), (3, 256), (2, 1000)]),
        (F16, [(1, 7), (5, 32), (33, 32), (3, 256), (2, 1000)]),
        (BF16, [(1, 7), (5, 32), (33, 32), (3, 256), (2, 1000)]),
    ):
        for m, d in shapes:
            nm = f"{DTYPE_NAMES[dt]}_m{m}_d{d}"
            add(ln_random(nm, f"random N(0,1) rows, {DTYPE_NAMES[dt]} params", (m, d), (d,), dt))
    # Mixed: half activations with fp32 parameters (output in the input dtype, grads of params fp32).
    for dt in (F16, BF16):
        for m, d in ((5, 32), (33, 7), (2, 1000) if dt == BF16 else (2, 500)):
            nm = f"{DTYPE_NAMES[dt]}_f32params_m{m}_d{d}"
            add(
                ln_random(
                    nm, f"{DTYPE_NAMES[dt]} activations, f32 gamma/beta", (m, d), (d,), dt, F32
                )
            )
    # normalized_shape with two dims (leading dims flattened into rows).
    add(ln_random("f32_ns2d", "x (3,4,6), normalized_shape (4,6)", (3, 4, 6), (4, 6), F32))
    add(ln_random("bf16_ns2d", "x (2,3,5,7), normalized_shape (5,7)", (2, 3, 5, 7), (5, 7), BF16))
    add(
        ln_random(
            "f16_f32params_ns2d",
            "x (2,3,4,8) f16, normalized_shape (4,8), f32 params",
            (2, 3, 4, 8),
            (4, 8),
            F16,
            F32,
        )
    )
    # elementwise_affine=False, bias=False.
    for dt in (F32, F16):
        nm = f"{DTYPE_NAMES[dt]}_no_affine"
        add(ln_random(nm, "elementwise_affine=False", (5, 24), (24,), dt, affine=False))
    for dt in (F32, BF16):
        nm = f"{DTYPE_NAMES[dt]}_no_bias"
        add(ln_random(nm, "bias=False (gamma only)", (5, 24), (24,), dt, bias=False))
    add(ln_random("f32_eps1e-3", "eps = 1e-3", (4, 16), (16,), F32, eps=1e-3))
    # NaN / Inf rows: the whole row becomes NaN, other rows unaffected.
    for dt in (F32, F16, BF16):
        nm = f"{DTYPE_NAMES[dt]}_nan_inf_rows"
        gen = gen_for(nm)
        x = randn(gen, (4, 16), dt)
        x[0, 3] = float("nan")
        x[1, 5] = float("inf")
        x[2, 0] = float("-inf")
        gamma, beta = ln_params(gen, (16,), dt)
        add(
            layer_norm_case(
                nm, "row 0 has a NaN, row 1 +Inf, row 2 -Inf, row 3 finite", x, (16,), gamma, beta
            )
        )
    # Large offset with small spread: 1e4 + N(0,1) (defeats E[x^2] - E[x]^2).
    for dt, m, d in ((F32, 4, 64), (F32, 2, 1000), (F16, 4, 64), (BF16, 4, 64)):
        nm = f"{DTYPE_NAMES[dt]}_offset1e4_m{m}_d{d}"
        add(ln_random(nm, "1e4 + N(0,1), rounded to the dtype", (m, d), (d,), dt, offset=1e4))
    add(ln_random("f32_offset1e6_d256", "1e6 + N(0,1)", (2, 256), (256,), F32, offset=1e6))
    # fp16 near the top of its range: the arithmetic must be in fp32.
    x = torch.tensor(
        [
            [60000, -60000, 0, 0],
            [60000, 60000, 60000, -60000],
            [65504, 65504, 65504, 65504],
            [-65504, 65504, 1, -1],
        ],
        dtype=F64,
    ).to(F16)
    gen = gen_for("f16_near_max")
    gamma, beta = ln_params(gen, (4,), F16)
    add(layer_norm_case("f16_near_max", "fp16 rows with +-60000 and +-65504", x, (4,), gamma, beta))
    add(
        layer_norm_case(
            "f16_near_max_f32params",
            "fp16 rows with +-60000, f32 params",
            x,
            (4,),
            gamma.to(F32),
            beta.to(F32),
        )
    )
    add(layer_norm_case("f16_near_max_no_affine", "fp16 rows with +-60000, no affine", x, (4,)))
    # fp32 row [1e30, -1e30, 0, 0]: torch's fp32 variance overflows (rstd 0, y 0); f64 does not.
    x = torch.tensor([[1e30, -1e30, 0, 0], [1.0, 2.0, 3.0, 4.0]], dtype=F32)
    add(layer_norm_case("f32_huge_1e30", "row [1e30,-1e30,0,0] and an ordinary row", x, (4,)))
    # Small variance: var = 1e-6, eps inside the sqrt -> y = +-1e-3/sqrt(1.1e-5).
    x = torch.tensor([[1e-3, -1e-3, 1e-3, -1e-3]], dtype=F32)
    add(layer_norm_case("f32_small_var", "var 1e-6 (eps matters)", x, (4,)))
    # Constant rows (var 0) and -0.
    x = torch.tensor([[3.0, 3.0, 3.0, 3.0, 3.0], [-0.0, 0.0, -0.0, 0.0, -0.0]], dtype=F32)
    gen = gen_for("f32_constant_rows")
    gamma, beta = ln_params(gen, (5,), F32)
    add(
        layer_norm_case(
            "f32_constant_rows", "constant rows (var 0) and signed zeros", x, (5,), gamma, beta
        )
    )
    # Constant rows in half precision: exact answer y = beta; torch's fp16/bf16 CPU kernel
    # computes x * rstd + (-mean * rstd) in fp32 and leaves a residue when |mean| * rstd is large.
    for dt in (F16, BF16):
        nm = f"{DTYPE_NAMES[dt]}_constant_rows"
        x = torch.tensor([[60000.0] * 8, [10000.3] * 8, [0.1] * 8, [-3.0] * 8], dtype=F64).to(dt)
        gamma, beta = ln_params(gen_for(nm), (8,), dt)
        add(layer_norm_case(nm, "constant rows (var 0): exact y = beta", x, (8,), gamma, beta))
    # Degenerate sizes.
    add(ln_random("f32_d1", "D = 1 (y = beta, dx = 0)", (6, 1), (1,), F32))
    add(ln_random("f16_d1", "D = 1, fp16", (6, 1), (1,), F16))
    add(ln_random("f32_m0", "M = 0: empty output, zero dgamma/dbeta", (0, 8), (8,), F32))
    add(ln_random("f32_d0", "D = 0: normalized_shape (0,), mean 0, rstd NaN", (2, 0), (0,), F32))
    return cases


def check_layer_norm_semantics(cases):
    """Assert the numbers in shared/SEMANTICS.md against what was generated."""
    by_name = dict(cases)
    y = dec(by_name["f32_small_var"]["f64"]["y"])
    assert all(abs(abs(v) - 1e-3 / math.sqrt(1.1e-5)) < 1e-6 for v in y), y
    assert abs(1e-3 / math.sqrt(1.1e-5) - 0.3015113) < 1e-7
    y = dec(by_name["f16_near_max_no_affine"]["torch"]["y"])
    assert abs(y[0] - math.sqrt(2)) < 2e-3 and abs(y[1] + math.sqrt(2)) < 2e-3, y[:4]
    y = dec(by_name["f32_huge_1e30"]["torch"]["y"])
    assert y[:4] == [0.0, 0.0, 0.0, 0.0], y[:4]
    for dt in ("f32", "f16", "bf16"):
        c = by_name[f"{dt}_nan_inf_rows"]
        y = dec(c["torch"]["y"])
        assert all(math.isnan(v) for v in y[:48]) and not any(math.isnan(v) for v in y[48:])
        assert all(math.isnan(v) for v in dec(c["torch"]["dgamma"]))
    c = by_name["f32_m0"]
    assert dec(c["torch"]["dgamma"]) == [0.0] * 8 and dec(c["torch"]["y"]) == []
    c = by_name["f32_d0"]
    assert dec(c["torch"]["mean"]) == [0.0, 0.0] and all(map(math.isnan, dec(c["torch"]["rstd"])))
    assert by_name["f16_m5_d32"]["torch"]["mean"]["dtype"] == "f16"
    assert by_name["f16_f32params_m5_d32"]["torch"]["mean"]["dtype"] == "f32"
    assert by_name["f16_f32params_m5_d32"]["torch"]["dgamma"]["dtype"] == "f32"


def dec(t):
    """Decode a fixture tensor to a list of Python floats (memory order)."""
    dt = {"f32": F32, "f16": F16, "bf16": BF16, "f64": F64, "i64": torch.int64}[t["dtype"]]
    raw = bytearray.fromhex(t["hex"])
    if not raw:
        return []
    return torch.frombuffer(raw, dtype=dt).tolist()


# ----------------------------------------------------------------------------- RMSNorm

# eps=None: torch computes in f32 for f32/f16/bf16 inputs and takes f32's epsilon (SEMANTICS.md).
# The float64 run gets that same eps explicitly (eps=None in f64 would be f64's epsilon).
RMS_DEFAULT_EPS = torch.finfo(F32).eps


def run_rms_norm(x, ns, weight, eps, dy):
    _, rstd = torch.ops.aten._fused_rms_norm(x, ns, weight, eps)
    xg, wg = leaf(x), leaf(weight)
    y = F.rms_norm(xg, ns, wg, eps)
    y.backward(dy)
    dx = xg.grad if xg.grad is not None else torch.zeros_like(x)
    return {"y": enc(y), "rstd": enc(rstd), "dx": enc(dx), "dweight": enc(grad(wg))}


def rms_norm_case(name, desc, x, ns, weight=None, eps=None, dy=None):
    ns = list(ns)
    if dy is None:
        dy = randn(gen_for(name + "/dy"), x.shape, x.dtype)
    res = run_rms_norm(x, ns, weight, eps, dy)
    eps64 = RMS_DEFAULT_EPS if eps is None else eps
    res64 = run_rms_norm(x.to(F64), ns, opt(weight, F64), eps64, dy.to(F64))
    config = {
        "normalized_shape": ns,
        "eps": eps,
        "elementwise_affine": weight is not None,
        "x_dtype": dname(x),
        "param_dtype": dname(weight),
    }
    case = {
        "format_version": FORMAT_VERSION,
        "op": "rms_norm",
        "name": name,
        "description": desc,
        "torch_version": torch.__version__,
        "config": config,
        "inputs": {"x": enc(x), "weight": enc(weight), "dy": enc(dy)},
        "torch": res,
        "f64": res64,
    }
    return name, case


def rms_random(name, desc, x_shape, ns, x_dtype, p_dtype=None, affine=True, eps=None, **kw):
    gen = gen_for(name)
    x = randn(gen, x_shape, x_dtype, **kw)
    w = randn(gen, ns, p_dtype or x_dtype, scale=0.5, offset=1.0) if affine else None
    return rms_norm_case(name, desc, x, ns, w, eps)


def rms_norm_cases():
    cases = []
    add = cases.append
    for dt, nm in ((F32, "f32"), (F16, "f16"), (BF16, "bf16")):
        add(rms_random(f"{nm}_m5_d32", f"{nm}, small, eps None", (5, 32), (32,), dt))
        add(rms_random(f"{nm}_m2_d1000", f"{nm}, D = 1000 (warp tier)", (2, 1000), (1000,), dt))
        add(rms_random(f"{nm}_m1_d2500", f"{nm}, block tier", (1, 2500), (2500,), dt))
        add(rms_random(f"{nm}_m1_d4500", f"{nm}, split tier (one row)", (1, 4500), (4500,), dt))
        add(
            rms_random(
                f"{nm}_offset100", f"{nm}, x = 100 + N(0, 1)", (16, 256), (256,), dt, offset=100.0
            )
        )
    for dt, nm in ((F16, "f16"), (BF16, "bf16")):
        add(
            rms_random(
                f"{nm}_f32params_m8_d768",
                f"{nm} activations, f32 weight (torch unfused)",
                (8, 768),
                (768,),
                dt,
                F32,
            )
        )
    add(rms_random("f32_no_weight", "no weight", (7, 129), (129,), F32, affine=False))
    add(rms_random("f32_eps1e-5", "eps 1e-5", (6, 100), (100,), F32, eps=1e-5))
    add(rms_random("f32_3d_ns2", "normalized_shape (4, 24)", (2, 3, 4, 24), (4, 24), F32))
    add(rms_random("f16_d1", "D = 1, fp16", (6, 1), (1,), F16))
    add(rms_random("f32_m0", "M = 0: empty output, zero dweight", (0, 8), (8,), F32))
    add(rms_random("f32_d0", "D = 0: rstd NaN", (2, 0), (0,), F32, affine=False))
    add(
        rms_norm_case(
            "f16_small_default_eps",
            "f16 row of 0.01s, eps None: 0.99951 (f32's epsilon, not f16's)",
            torch.full((2, 64), 0.01, dtype=F16),
            (64,),
        )
    )
    add(
        rms_norm_case(
            "bf16_small_default_eps",
            "bf16 row of 0.01s, eps None: 1.0",
            torch.full((2, 64), 0.01, dtype=BF16),
            (64,),
        )
    )
    add(
        rms_norm_case(
            "f16_near_max",
            "f16 [60000, 60000, 1, 1]: 1.414 (f32 arithmetic), not Inf",
            torch.tensor([[60000.0, 60000.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0]], dtype=F16),
            (4,),
        )
    )
    add(
        rms_norm_case(
            "f32_special_rows",
            "f32 rows: [3, 4, 0, 0], zeros, a NaN, an Inf, sum of squares overflowing, 1e30s",
            torch.tensor(
                [
                    [3.0, 4.0, 0.0, 0.0] * 4,
                    [0.0] * 16,
                    [1.0, float("nan"), 2.0, 3.0] * 4,
                    [1.0, float("inf"), 2.0, 3.0] * 4,
                    [1e19, -2e19, 3e18, 0.5] * 4,
                    [1e30, -1e30, 0.0, 0.0] * 4,
                ],
                dtype=F32,
            ),
            (16,),
            weight=randn(gen_for("f32_special_rows/w"), (16,), F32, scale=0.5, offset=1.0),
            eps=0.0,
        )
    )
    return cases


def check_rms_norm_semantics(cases):
    """Assert the RMSNorm numbers in shared/SEMANTICS.md against what was generated."""
    by_name = dict(cases)
    y = dec(by_name["f16_small_default_eps"]["torch"]["y"])
    assert all(abs(v - 0.99951171875) < 1e-9 for v in y), y[:4]
    y = dec(by_name["bf16_small_default_eps"]["torch"]["y"])
    assert all(v == 1.0 for v in y), y[:4]
    y = dec(by_name["f16_near_max"]["torch"]["y"])
    assert abs(y[0] - 1.414) < 1e-3 and abs(y[2] - 2.35e-5) < 1e-7, y[:4]
    c = by_name["f32_special_rows"]["torch"]
    r = dec(c["rstd"])
    assert abs(r[0] - 0.4) < 1e-7 and r[3] == 0.0 and r[5] == 0.0 and math.isnan(r[2]), r
    y = dec(c["y"])
    assert all(math.isnan(v) for v in y[32:48]) and y[48] == 0.0 and math.isnan(y[49])
    assert by_name["f16_m5_d32"]["torch"]["rstd"]["dtype"] == "f32"
    assert by_name["f32_m0"]["torch"]["dweight"]["hex"] == "00" * 32
    assert all(map(math.isnan, dec(by_name["f32_d0"]["torch"]["rstd"])))


# ----------------------------------------------------------------------------- fused residual add

# warpnorm's fused residual add (h = x + residual (+ bias), y = norm(h); backward: dx = norm's
# dx + dh, the gradient of x and of the residual; dbias) against torch's unfused reference:
# h = x + residual (+ bias), y = F.layer_norm(h) / F.rms_norm(h), the gradient of
# sum(y * dy) + sum(h * dh). Without dh the loss is sum(y * dy).


def unfused_h(x, residual, bias):
    """torch's unfused h, in x's dtype. `x + residual` adds in f32 and rounds once; with a bias
    torch rounds again: `+ bias` in the activation dtype (16-bit bias), or promoted to f32 (f32
    bias) and cast back."""
    h = x + residual
    if bias is not None:
        h = (h + bias).to(x.dtype)
    return h


def one_rounding_h(x, residual, bias):
    """The fused op's h: (x + residual) + bias in f32 arithmetic, rounded once to x's dtype."""
    h = x.to(F32) + residual.to(F32)
    if bias is not None:
        h = h + bias.to(F32)
    return h.to(x.dtype)


def residual_backward(y, h, dy, dh):
    if dh is None:
        y.backward(dy)
    else:
        torch.autograd.backward([y, h], [dy, dh])


def run_layer_norm_residual(x, residual, bias, ns, gamma, beta, eps, dy, dh):
    xg, rg, bg, gg, btg = (leaf(t) for t in (x, residual, bias, gamma, beta))
    h = unfused_h(xg, rg, bg)
    y = F.layer_norm(h, ns, gg, btg, eps)
    y_ref, mean, rstd = torch.ops.aten.native_layer_norm(h.detach(), ns, gamma, beta, eps)
    assert same_bits(y, y_ref), "F.layer_norm and aten.native_layer_norm disagree"
    residual_backward(y, h, dy, dh)
    assert same_bits(xg.grad, rg.grad), "the gradients of x and of the residual differ"
    return {
        "h": enc(h),
        "y": enc(y),
        "mean": enc(mean),
        "rstd": enc(rstd),
        "dx": enc(xg.grad),
        "dgamma": enc(grad(gg)),
        "dbeta": enc(grad(btg)),
        "dbias": enc(grad(bg)),
    }


def run_rms_norm_residual(x, residual, bias, ns, weight, eps, dy, dh):
    xg, rg, bg, wg = (leaf(t) for t in (x, residual, bias, weight))
    h = unfused_h(xg, rg, bg)
    y = F.rms_norm(h, ns, wg, eps)
    _, rstd = torch.ops.aten._fused_rms_norm(h.detach(), ns, weight, eps)
    residual_backward(y, h, dy, dh)
    assert same_bits(xg.grad, rg.grad), "the gradients of x and of the residual differ"
    return {
        "h": enc(h),
        "y": enc(y),
        "rstd": enc(rstd),
        "dx": enc(xg.grad),
        "dweight": enc(grad(wg)),
        "dbias": enc(grad(bg)),
    }


def leaf_h(h):
    """A float64 leaf holding `h` (an h rounded to the activation dtype, widened exactly)."""
    return h.detach().to(F64).requires_grad_(True)


def col_sums(dx, ns, bias):
    """The bias gradient downstream of h: the sums of h's gradient over the leading dims."""
    return None if bias is None else dx.sum(dim=tuple(range(dx.dim() - len(ns))))


def run_layer_norm_at_h(h, ns, gamma, beta, eps, dy, dh, bias):
    """torch's float64 LayerNorm of a given (rounded) h: everything downstream of h."""
    hg, gg, btg = leaf_h(h), leaf(opt(gamma, F64)), leaf(opt(beta, F64))
    y = F.layer_norm(hg, ns, gg, btg, eps)
    _, mean, rstd = torch.ops.aten.native_layer_norm(
        hg.detach(), ns, opt(gamma, F64), opt(beta, F64), eps
    )
    residual_backward(y, hg, dy.to(F64), opt(dh, F64))
    return {
        "h": enc(hg),
        "y": enc(y),
        "mean": enc(mean),
        "rstd": enc(rstd),
        "dx": enc(hg.grad),
        "dgamma": enc(grad(gg)),
        "dbeta": enc(grad(btg)),
        "dbias": enc(col_sums(hg.grad, ns, bias)),
    }


def run_rms_norm_at_h(h, ns, weight, eps, dy, dh, bias):
    """torch's float64 RMSNorm of a given (rounded) h: everything downstream of h."""
    hg, wg = leaf_h(h), leaf(opt(weight, F64))
    y = F.rms_norm(hg, ns, wg, eps)
    _, rstd = torch.ops.aten._fused_rms_norm(hg.detach(), ns, opt(weight, F64), eps)
    residual_backward(y, hg, dy.to(F64), opt(dh, F64))
    return {
        "h": enc(hg),
        "y": enc(y),
        "rstd": enc(rstd),
        "dx": enc(hg.grad),
        "dweight": enc(grad(wg)),
        "dbias": enc(col_sums(hg.grad, ns, bias)),
    }


def residual_grads(name, x, with_dh):
    dy = randn(gen_for(name + "/dy"), x.shape, x.dtype)
    dh = randn(gen_for(name + "/dh"), x.shape, x.dtype) if with_dh else None
    return dy, dh


def residual_rounding(x, residual, bias, desc):
    """(h_one_rounding, torch_h_differs, description): where torch's h rounds twice (a bias
    with 16-bit activations), the one-rounding h and how many elements of torch's h differ
    from it; else (None, 0), torch's h being the one-rounding h bit for bit (asserted)."""
    once = one_rounding_h(x, residual, bias)
    torch_h = unfused_h(x, residual, bias)
    if bias is None or x.dtype == F32:
        assert same_bits(torch_h, once), "torch's h is not the one-rounding h"
        return None, 0, desc
    differs = int((torch_h.view(torch.int16) != once.view(torch.int16)).sum())
    note = (
        f"; torch's h rounds twice (x + residual, then + bias): {differs} of {x.numel()} "
        "elements differ from one rounding"
    )
    return enc(once), differs, desc + note


def ln_residual_case(name, desc, x, residual, bias, ns, gamma, beta, eps=1e-5, dh=True):
    ns = list(ns)
    dy, dh = residual_grads(name, x, dh)
    res = run_layer_norm_residual(x, residual, bias, ns, gamma, beta, eps, dy, dh)
    res64 = run_layer_norm_residual(
        x.to(F64),
        residual.to(F64),
        opt(bias, F64),
        ns,
        opt(gamma, F64),
        opt(beta, F64),
        eps,
        dy.to(F64),
        opt(dh, F64),
    )
    once, differs, desc = residual_rounding(x, residual, bias, desc)

    def at_h(h):
        return run_layer_norm_at_h(h, ns, gamma, beta, eps, dy, dh, bias)

    res_at_h = at_h(unfused_h(x, residual, bias))
    res_at_once = None if once is None else at_h(one_rounding_h(x, residual, bias))
    params = [t for t in (gamma, beta, bias) if t is not None]
    assert all(p.dtype == params[0].dtype for p in params)
    config = {
        "normalized_shape": ns,
        "eps": eps,
        "elementwise_affine": gamma is not None,
        "bias": beta is not None,
        "residual_bias": bias is not None,
        "x_dtype": dname(x),
        "param_dtype": dname(params[0]) if params else None,
    }
    inputs = {
        "x": enc(x),
        "residual": enc(residual),
        "bias": enc(bias),
        "gamma": enc(gamma),
        "beta": enc(beta),
        "dy": enc(dy),
        "dh": enc(dh),
    }
    case = {
        "format_version": FORMAT_VERSION,
        "op": "layer_norm_residual",
        "name": name,
        "description": desc,
        "torch_version": torch.__version__,
        "config": config,
        "inputs": inputs,
        "h_one_rounding": once,
        "torch_h_differs": differs,
        "torch": res,
        "f64": res64,
        "f64_at_h": res_at_h,
        "f64_at_h_one_rounding": res_at_once,
    }
    return name, case


def rms_residual_case(name, desc, x, residual, bias, ns, weight, eps=None, dh=True):
    ns = list(ns)
    dy, dh = residual_grads(name, x, dh)
    res = run_rms_norm_residual(x, residual, bias, ns, weight, eps, dy, dh)
    eps64 = RMS_DEFAULT_EPS if eps is None else eps
    res64 = run_rms_norm_residual(
        x.to(F64),
        residual.to(F64),
        opt(bias, F64),
        ns,
        opt(weight, F64),
        eps64,
        dy.to(F64),
        opt(dh, F64),
    )
    once, differs, desc = residual_rounding(x, residual, bias, desc)

    def at_h(h):
        return run_rms_norm_at_h(h, ns, weight, eps64, dy, dh, bias)

    res_at_h = at_h(unfused_h(x, residual, bias))
    res_at_once = None if once is None else at_h(one_rounding_h(x, residual, bias))
    params = [t for t in (weight, bias) if t is not None]
    assert all(p.dtype == params[0].dtype for p in params)
    config = {
        "normalized_shape": ns,
        "eps": eps,
        "elementwise_affine": weight is not None,
        "residual_bias": bias is not None,
        "x_dtype": dname(x),
        "param_dtype": dname(params[0]) if params else None,
    }
    inputs = {
        "x": enc(x),
        "residual": enc(residual),
        "bias": enc(bias),
        "weight": enc(weight),
        "dy": enc(dy),
        "dh": enc(dh),
    }
    case = {
        "format_version": FORMAT_VERSION,
        "op": "rms_norm_residual",
        "name": name,
        "description": desc,
        "torch_version": torch.__version__,
        "config": config,
        "inputs": inputs,
        "h_one_rounding": once,
        "torch_h_differs": differs,
        "torch": res,
        "f64": res64,
        "f64_at_h": res_at_h,
        "f64_at_h_one_rounding": res_at_once,
    }
    return name, case


def residual_random(
    op,
    name,
    desc,
    shape,
    x_dtype,
    p_dtype=None,
    affine=True,
    ln_bias=True,
    bias=True,
    dh=True,
    eps=None,
    offset=0.0,
    outlier=False,
):
    """x and the residual N(0,1) (x around +offset, the residual around -0.99 offset: their
    sum cancels all but 1% of it); `outlier`: one x of 100 and one residual of -60 per row.
    Parameters in p_dtype (default x_dtype); ns = the last dim."""
    gen = gen_for(name)
    ns = shape[-1:]
    x = randn(gen, shape, F64, offset=offset)
    residual = randn(gen, shape, F64, offset=-0.99 * offset)
    if outlier:
        rows = x.reshape(-1, ns[0])
        for r in range(rows.shape[0]):
            rows[r, (7 * r + 1) % ns[0]] = 100.0
            residual.reshape(-1, ns[0])[r, (5 * r + 3) % ns[0]] = -60.0
    x, residual = x.to(x_dtype), residual.to(x_dtype)
    pdt = p_dtype or x_dtype
    b = randn(gen, ns, pdt, scale=0.5) if bias else None
    if op == "layer_norm_residual":
        gamma, beta = ln_params(gen, ns, pdt, affine, ln_bias)
        return ln_residual_case(name, desc, x, residual, b, ns, gamma, beta, eps or 1e-5, dh)
    w = randn(gen, ns, pdt, scale=0.5, offset=1.0) if affine else None
    return rms_residual_case(name, desc, x, residual, b, ns, w, eps, dh)


def residual_cases(op):
    """The cases of `op` ("layer_norm_residual" or "rms_norm_residual")."""
    cases = []

    def add(name, desc, shape, x_dtype, **kw):
        cases.append(residual_random(op, name, desc, shape, x_dtype, **kw))

    # Every activation dtype, with and without the bias and dh; odd widths.
    for dt in (F32, F16, BF16):
        nm = DTYPE_NAMES[dt]
        add(f"{nm}_m4_d33", f"{nm}, bias and dh", (4, 33), dt)
        add(f"{nm}_m1_d257_no_bias", f"{nm}, dh, no bias", (1, 257), dt, bias=False)
        add(
            f"{nm}_m3_d3_no_bias_no_dh",
            f"{nm}, no bias, no dh (the plain norm of x + residual)",
            (3, 3),
            dt,
            bias=False,
            dh=False,
        )
    add("f32_m3_d129_no_dh", "f32, bias, no dh", (3, 129), F32, dh=False)
    add("bf16_m1_d1000_no_bias", "bf16, dh, no bias", (1, 1000), BF16, bias=False)
    # 16-bit activations with f32 parameters (and an f32 bias).
    add("f16_f32params_m2_d129", "f16, f32 params and bias, dh", (2, 129), F16, p_dtype=F32)
    add(
        "bf16_f32params_m4_d33_no_dh",
        "bf16, f32 params and bias, no dh",
        (4, 33),
        BF16,
        p_dtype=F32,
        dh=False,
    )
    add(
        "f16_f32params_m1_d1000_no_bias",
        "f16, f32 params, no bias, dh",
        (1, 1000),
        F16,
        p_dtype=F32,
        bias=False,
    )
    # Without the norm's parameters (the bias alone has the parameter dtype).
    add("f32_no_affine_m3_d3", "no affine, bias and dh", (3, 3), F32, affine=False)
    add(
        "f16_f32params_no_affine_m3_d33",
        "f16, no affine, f32 bias, dh",
        (3, 33),
        F16,
        p_dtype=F32,
        affine=False,
    )
    add(
        "bf16_no_affine_no_bias_m2_d33",
        "bf16, no affine, no bias, dh",
        (2, 33),
        BF16,
        affine=False,
        bias=False,
    )
    if op == "layer_norm_residual":
        add(
            "f32_weight_only_m3_d33",
            "gamma only (bias=False), bias and dh",
            (3, 33),
            F32,
            ln_bias=False,
        )
    else:
        add("f32_eps1e-5_m3_d33", "eps 1e-5, bias and dh", (3, 33), F32, eps=1e-5)
    # D = 1, and leading dims (2, 3).
    add("f32_m6_d1", "D = 1, bias and dh", (6, 1), F32)
    add("f16_m6_d1_no_bias", "D = 1, f16, dh, no bias", (6, 1), F16, bias=False)
    add("f32_x2x3_d33", "x (2, 3, 33), normalized over the last dim, bias and dh", (2, 3, 33), F32)
    # Large common offset: x = 1e3 + N(0,1), residual = -990 + N(0,1), h = 10 + N(0,2).
    desc = "x 1e3 + N(0,1), residual -990 + N(0,1): the sum cancels to 10 + N(0,2)"
    add("f32_offset1e3_m4_d64", desc + ", bias and dh", (4, 64), F32, offset=1e3)
    add("f16_offset1e3_m4_d64", desc + ", bias and dh", (4, 64), F16, offset=1e3)
    add(
        "bf16_f32params_offset1e3_m4_d64",
        desc + ", f32 params and bias, dh",
        (4, 64),
        BF16,
        p_dtype=F32,
        offset=1e3,
    )
    # Outliers.
    desc = "N(0,1) with one x of 100 and one residual of -60 per row"
    add("f32_outlier_m4_d33", desc + ", bias and dh", (4, 33), F32, outlier=True)
    add("f16_outlier_m4_d33", desc + ", bias and dh", (4, 33), F16, outlier=True)
    add(
        "bf16_outlier_m4_d33_no_bias",
        desc + ", dh, no bias",
        (4, 33),
        BF16,
        bias=False,
        outlier=True,
    )
    cases.append(double_rounding_case(op))
    return cases


def double_rounding_case(op):
    """Where torch's two roundings of h are visible: f16 2048 + 1 + 1 (LayerNorm) and bf16
    256 + 1 + 1 (RMSNorm) give 2048 / 256 in torch (x + residual is a tie, rounded to even,
    then + 1 is a tie again), 2050 / 258 with one rounding."""
    dt, big = (F16, 2048.0) if op == "layer_norm_residual" else (BF16, 256.0)
    name = f"{DTYPE_NAMES[dt]}_double_rounding_m2_d4"
    desc = f"{DTYPE_NAMES[dt]} h[0] = {big:g} + 1 + bias 1, bias and dh"
    x = t64([[big, 1.0, 3.0, -2.0], [1.0, 0.5, -0.25, 2.0]]).to(dt)
    residual = t64([[1.0, 2.0, -1.0, 0.5], [-0.5, 1.0, 1.0, 1.0]]).to(dt)
    bias = t64([1.0, 0.25, 0.5, -1.0]).to(dt)
    gen = gen_for(name)
    if op == "layer_norm_residual":
        gamma, beta = ln_params(gen, (4,), dt)
        return ln_residual_case(name, desc, x, residual, bias, (4,), gamma, beta)
    w = randn(gen, (4,), dt, scale=0.5, offset=1.0)
    return rms_residual_case(name, desc, x, residual, bias, (4,), w)


def check_residual_semantics(op, cases):
    """Assert the fused residual add's rules (src/cpu/residual.rs) on what was generated."""
    by_name = dict(cases)
    # torch's two roundings against one: 2048 (256) vs 2050 (258).
    dt, big = ("f16", 2048.0) if op == "layer_norm_residual" else ("bf16", 256.0)
    c = by_name[f"{dt}_double_rounding_m2_d4"]
    assert dec(c["torch"]["h"])[0] == big and dec(c["h_one_rounding"])[0] == big + 2
    assert dec(c["f64"]["h"])[0] == big + 2
    # Some random 16-bit cases with a bias show it too; f32 and bias-free cases never do.
    assert by_name["f16_m4_d33"]["torch_h_differs"] > 0
    for name, c in cases:
        once = c["config"]["x_dtype"] == "f32" or not c["config"]["residual_bias"]
        assert (c["h_one_rounding"] is None) == once, name
        assert (c["torch_h_differs"] == 0) or not once, name
        # The float64 runs downstream of h normalize exactly the rounded h they name.
        assert dec(c["f64_at_h"]["h"]) == dec(c["torch"]["h"]), name
        at_once = c["f64_at_h_one_rounding"]
        assert (at_once is None) == once, name
        if at_once is not None:
            assert dec(at_once["h"]) == dec(c["h_one_rounding"]), name
        # f64: dbias is the column sum of dx; dx is the gradient of h (dh included).
        f = c["f64"]
        d = c["config"]["normalized_shape"][-1]
        dx = dec(f["dx"])
        if f["dbias"] is not None:
            sums = [sum(dx[i::d]) for i in range(d)]
            assert all(abs(a - b) <= 1e-12 * (1 + abs(b)) for a, b in zip(dec(f["dbias"]), sums))
    # D = 1: the norm's dx is 0 (LayerNorm), so dx is dh.
    if op == "layer_norm_residual":
        c = by_name["f32_m6_d1"]
        pairs = zip(dec(c["f64"]["dx"]), dec(c["inputs"]["dh"]))
        assert all(abs(a - b) <= 1e-12 for a, b in pairs), "D = 1: dx != dh"


# ----------------------------------------------------------------------------- BatchNorm

BN_MODULES = {2: "BatchNorm1d", 3: "BatchNorm1d", 4: "BatchNorm2d", 5: "BatchNorm3d"}


def make_bn(module, c, eps, momentum, affine, track, dtype):
    cls = getattr(torch.nn, module)
    return cls(c, eps=eps, momentum=momentum, affine=affine, track_running_stats=track, dtype=dtype)


def bn_state(m):
    return {
        "running_mean": enc(m.running_mean),
        "running_var": enc(m.running_var),
        "num_batches_tracked": enc(m.num_batches_tracked),
    }


def bn_saved_stats(m, x):
    """(y, save_mean, save_invstd) from aten.native_batch_norm on copies of the module state."""
    use_batch = m.training or m.running_mean is None
    if x.numel() == 0:
        return None, None, None  # aten refuses empty input; the module path special-cases it
    rm = None if m.running_mean is None else m.running_mean.clone()
    rv = None if m.running_var is None else m.running_var.clone()
    if m.training and m.track_running_stats:
        nbt = int(m.num_batches_tracked) + 1
        factor = 1.0 / nbt if m.momentum is None else m.momentum
    else:
        factor = 0.0 if m.momentum is None else m.momentum
    w = None if m.weight is None else m.weight.detach()
    b = None if m.bias is None else m.bias.detach()
    y, sm, si = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, use_batch, factor, m.eps)
    return y, sm, si


def bn_step(m, x, dy, layout):
    """Run one module step (forward + backward); return the recorded results."""
    y_ref, save_mean, save_invstd = bn_saved_stats(m, x)
    xg = x.detach().clone().requires_grad_(True)  # clone keeps the memory format
    for p in (m.weight, m.bias):
        if p is not None:
            p.grad = None
    try:
        y = m(xg)
    except (ValueError, RuntimeError) as e:
        res = {k: None for k in ("y", "save_mean", "save_invstd", "dx", "dgamma", "dbeta")}
        res.update(bn_state(m))
        return str(e), res
    if y_ref is not None:
        assert same_bits(y, y_ref), "module and aten.native_batch_norm disagree"
    if layout != "contiguous" and y.numel() > 0:
        assert y.is_contiguous(memory_format=MEMORY_FORMATS[layout])
    y.backward(dy)
    dx = xg.grad if xg.grad is not None else torch.zeros_like(x)
    res = {
        "y": enc(y, layout),
        "save_mean": enc(save_mean),
        "save_invstd": enc(save_invstd),
        "dx": enc(dx, layout),
        "dgamma": enc(grad(m.weight)),
        "dbeta": enc(grad(m.bias)),
    }
    res.update(bn_state(m))
    return None, res


def batch_norm_case(
    name,
    desc,
    steps,
    c,
    x_dtype,
    p_dtype=None,
    eps=1e-5,
    momentum=0.1,
    affine=True,
    track=True,
    layout="contiguous",
    init=None,
):
    """`steps`: list of (training, x) with x in x_dtype (logical shape, contiguous).

    dy for each step is drawn from the case's generator. `init` optionally sets
    (running_mean, running_var) before the first step.
    """
    p_dtype = p_dtype or x_dtype
    module = BN_MODULES[steps[0][1].dim()]
    gen = gen_for(name)
    m = make_bn(module, c, eps, momentum, affine, track, p_dtype)
    m64 = make_bn(module, c, eps, momentum, affine, track, F64)
    with torch.no_grad():
        if affine:
            m.weight.copy_(randn(gen, (c,), p_dtype, scale=0.5, offset=1.0))
            m.bias.copy_(randn(gen, (c,), p_dtype, scale=0.5))
            m64.weight.copy_(m.weight.to(F64))
            m64.bias.copy_(m.bias.to(F64))
        if init is not None:
            m.running_mean.copy_(init[0].to(p_dtype))
            m.running_var.copy_(init[1].to(p_dtype))
        if track:
            m64.running_mean.copy_(m.running_mean.to(F64))
            m64.running_var.copy_(m.running_var.to(F64))
    initial = {"gamma": enc(m.weight), "beta": enc(m.bias)}
    initial.update(bn_state(m))
    records = []
    for training, x in steps:
        dy = randn(gen, x.shape, x_dtype)
        if layout != "contiguous":
            mf = MEMORY_FORMATS[layout]
            x, dy = x.contiguous(memory_format=mf), dy.contiguous(memory_format=mf)
        m.train(training)
        m64.train(training)
        err, res = bn_step(m, x, dy, layout)
        err64, res64 = bn_step(m64, x.to(F64), dy.to(F64), layout)
        assert (err is None) == (err64 is None), (err, err64)
        records.append(
            {
                "training": training,
                "x": enc(x, layout),
                "dy": enc(dy, layout),
                "error": err,
                "torch": res,
                "f64": res64,
            }
        )
    config = {
        "module": module,
        "num_features": c,
        "eps": eps,
        "momentum": momentum,
        "affine": affine,
        "track_running_stats": track,
        "layout": layout,
        "x_dtype": DTYPE_NAMES[x_dtype],
        "param_dtype": DTYPE_NAMES[p_dtype],
    }
    case = {
        "format_version": FORMAT_VERSION,
        "op": "batch_norm",
        "name": name,
        "description": desc,
        "torch_version": torch.__version__,
        "config": config,
        "initial": initial,
        "steps": records,
    }
    return name, case


def bn_batches(name, shape, dtype, n_train=3, n_eval=1, offset=0.0, scale=1.0):
    """Training batches (per-channel shifted means) followed by eval batches."""
    gen = gen_for(name + "/x")
    c = shape[1]
    bshape = [1] * len(shape)
    bshape[1] = c
    steps = []
    for i in range(n_train + n_eval):
        shift = torch.randn(bshape, generator=gen, dtype=F64)
        x = (torch.randn(shape, generator=gen, dtype=F64) * scale + shift + offset).to(dtype)
        steps.append((i < n_train, x))
    return steps


def bn_random(name, desc, shape, x_dtype, p_dtype=None, n_train=3, n_eval=1, offset=0.0, **kw):
    steps = bn_batches(name, shape, x_dtype, n_train, n_eval, offset=offset)
    return batch_norm_case(name, desc, steps, shape[1], x_dtype, p_dtype, **kw)


def bn_adversarial(name, shape, dtype):
    """One training batch whose channels c = 0..4 are (c % 5): N(0,1); an outlier of 100 first
    among values of scale 1e-3; the same outlier last; 3e4 plus a spread of 5 ulps of 3e4
    (0.01 N(0,1) in f32); N(0,1) centred on 1e-3 (a tiny mean of large values)."""
    gen = gen_for(name + "/x")
    c = shape[1]
    per = [shape[0]] + list(shape[2:])
    count = 1
    for d in per:
        count *= d
    spread = {F32: 0.01, F16: 0.01 * 2**13, BF16: 0.01 * 2**16}[dtype]
    chans = []
    for ch in range(c):
        kind = ch % 5
        if kind == 0:
            v = torch.randn(count, generator=gen, dtype=F64)
        elif kind in (1, 2):
            v = 1e-3 * (1.0 + torch.rand(count, generator=gen, dtype=F64))
            v[0 if kind == 1 else count - 1] = 100.0
        elif kind == 3:
            v = 3e4 + spread * torch.randn(count, generator=gen, dtype=F64)
        else:
            z = torch.randn(count, generator=gen, dtype=F64)
            v = z - z.mean() + 1e-3
        chans.append(v.reshape(per))
    x = torch.stack(chans, dim=1).to(dtype)
    return [(True, x)]


def t64(rows):
    return torch.tensor(rows, dtype=F64)


def batch_norm_cases():
    cases = []
    add = cases.append
    seq = "3 training steps then 1 eval step"
    # Shapes and layouts, fp32.
    add(bn_random("bn1d_nc_f32", f"BatchNorm1d (8,5), {seq}", (8, 5), F32))
    add(bn_random("bn1d_ncl_f32", f"BatchNorm1d (4,3,7), {seq}", (4, 3, 7), F32))
    add(bn_random("bn2d_f32", f"BatchNorm2d (2,4,3,5), {seq}", (2, 4, 3, 5), F32))
    add(
        bn_random(
            "bn2d_f32_channels_last",
            f"BatchNorm2d (2,4,3,5) channels_last, {seq}",
            (2, 4, 3, 5),
            F32,
            layout="channels_last",
        )
    )
    add(bn_random("bn3d_f32", f"BatchNorm3d (2,3,2,3,4), {seq}", (2, 3, 2, 3, 4), F32))
    add(
        bn_random(
            "bn3d_f32_channels_last_3d",
            f"BatchNorm3d (2,3,2,3,4) channels_last_3d, {seq}",
            (2, 3, 2, 3, 4),
            F32,
            layout="channels_last_3d",
        )
    )
    add(
        bn_random(
            "bn1d_ncl_f32_wide",
            "BatchNorm1d (16,4,32), one training step",
            (16, 4, 32),
            F32,
            n_train=1,
            n_eval=0,
        )
    )
    # Momentum variants and statistics options.
    add(
        bn_random(
            "bn2d_f32_cumulative",
            f"momentum=None (cumulative average), {seq}",
            (2, 3, 2, 3),
            F32,
            momentum=None,
        )
    )
    add(
        bn_random(
            "bn2d_f32_no_track",
            "track_running_stats=False: 1 training, 2 eval steps (batch statistics in eval)",
            (2, 3, 2, 3),
            F32,
            n_train=1,
            n_eval=2,
            track=False,
        )
    )
    add(bn_random("bn1d_ncl_f32_no_affine", f"affine=False, {seq}", (3, 4, 5), F32, affine=False))
    add(
        bn_random(
            "bn2d_f32_eps1e-3_momentum0.3",
            f"eps 1e-3, momentum 0.3, {seq}",
            (2, 3, 2, 2),
            F32,
            eps=1e-3,
            momentum=0.3,
        )
    )
    # Mixed dtypes: half input, fp32 params and running stats.
    add(
        bn_random(
            "bn2d_f16_f32params", f"f16 input, f32 params/stats, {seq}", (2, 4, 3, 5), F16, F32
        )
    )
    add(
        bn_random(
            "bn2d_f16_f32params_channels_last",
            f"f16 channels_last, f32 params, {seq}",
            (2, 4, 3, 5),
            F16,
            F32,
            layout="channels_last",
        )
    )
    add(
        bn_random(
            "bn1d_ncl_bf16_f32params", f"bf16 input, f32 params/stats, {seq}", (4, 3, 7), BF16, F32
        )
    )
    add(
        bn_random(
            "bn3d_bf16_f32params_channels_last_3d",
            f"bf16 channels_last_3d, f32 params, {seq}",
            (2, 3, 2, 2, 3),
            BF16,
            F32,
            layout="channels_last_3d",
        )
    )
    # Same-dtype half params (torch keeps running stats and saved stats in the half dtype).
    add(bn_random("bn2d_f16", f"f16 input and f16 params/stats, {seq}", (2, 3, 2, 3), F16))
    add(bn_random("bn2d_bf16", f"bf16 input and bf16 params/stats, {seq}", (2, 3, 2, 3), BF16))
    # NaN / Inf in one channel.
    for dt, pdt in ((F32, F32), (F16, F32)):
        nm = f"bn2d_{DTYPE_NAMES[dt]}_nan_inf"
        steps = bn_batches(nm, (2, 4, 3, 3), dt, n_train=2, n_eval=1)
        steps[0][1][1, 1, 0, 2] = float("nan")
        steps[0][1][0, 2, 2, 1] = float("inf")
        steps[2][1][0, 0, 1, 1] = float("-inf")
        steps[2][1][1, 3, 0, 0] = float("nan")
        add(
            batch_norm_case(
                nm,
                "train step 1: NaN in channel 1, +Inf in channel 2; train step 2 "
                "clean; eval: -Inf in channel 0, NaN in channel 3",
                steps,
                4,
                dt,
                pdt,
            )
        )
    # Large offsets.
    add(bn_random("bn1d_ncl_f32_offset1e4", f"1e4 + N(0,1), {seq}", (8, 3, 8), F32, offset=1e4))
    add(
        bn_random(
            "bn2d_f16_f32params_offset1e4",
            f"f16 1e4 + N(0,1), f32 params, {seq}",
            (4, 3, 4, 4),
            F16,
            F32,
            offset=1e4,
        )
    )
    add(
        bn_random(
            "bn1d_ncl_f32_offset1e6",
            "1e6 + N(0,1), 2 training steps",
            (8, 2, 16),
            F32,
            n_train=2,
            n_eval=0,
            offset=1e6,
        )
    )
    # Adversarial statistics (issue 13): outliers first and last, a large offset with a small
    # spread, a tiny mean of large values, next to N(0, 1).
    for nm, shape, dt, pdt, lay in (
        ("bn1d_nc_f32_adversarial", (384, 5), F32, F32, "contiguous"),
        ("bn2d_nhwc_f16_f32params_adversarial", (4, 5, 8, 8), F16, F32, "channels_last"),
        ("bn2d_bf16_adversarial", (4, 5, 8, 8), BF16, BF16, "contiguous"),
    ):
        add(
            batch_norm_case(
                nm,
                "one channel each: N(0,1), outlier 100 first / last among 1e-3s, "
                "3e4 + 5 ulps * N(0,1), N(0,1) centred on 1e-3",
                bn_adversarial(nm, shape, dt),
                shape[1],
                dt,
                pdt,
                layout=lay,
            )
        )
    # Tiny reductions: N * spatial = 2.
    add(
        bn_random(
            "bn1d_nc_f32_two_values", f"BatchNorm1d (2,3): 2 values per channel, {seq}", (2, 3), F32
        )
    )
    add(
        bn_random(
            "bn2d_f32_two_values",
            f"BatchNorm2d (1,3,1,2): 2 values per channel, {seq}",
            (1, 3, 1, 2),
            F32,
        )
    )
    # One value per channel in training: torch raises (and still counts the batch).
    gen = gen_for("bn1d_one_value_error/x")
    x = torch.randn((1, 3), generator=gen, dtype=F64).to(F32)
    add(
        batch_norm_case(
            "bn1d_one_value_error",
            "x (1,3): training raises; the same x in eval works",
            [(True, x), (False, x)],
            3,
            F32,
        )
    )
    x = torch.randn((1, 3, 1, 1), generator=gen, dtype=F64).to(F32)
    add(
        batch_norm_case("bn2d_one_value_error", "x (1,3,1,1): training raises", [(True, x)], 3, F32)
    )
    # Empty batches in training.
    steps = bn_batches("bn2d_empty_batch", (2, 3, 2, 2), F32, n_train=1, n_eval=0)
    steps.append((True, torch.zeros((0, 3, 2, 2), dtype=F32)))
    steps.append((False, torch.zeros((0, 3, 2, 2), dtype=F32)))
    add(
        batch_norm_case(
            "bn2d_empty_batch",
            "one training step, then N=0 in training (running "
            "stats unchanged, counter incremented), then N=0 in eval",
            steps,
            3,
            F32,
        )
    )
    steps = bn_batches("bn2d_empty_spatial", (2, 3, 2, 2), F32, n_train=1, n_eval=0)
    steps.append((True, torch.zeros((2, 3, 0, 4), dtype=F32)))
    add(
        batch_norm_case(
            "bn2d_empty_spatial", "one training step, then H=0 in training", steps, 3, F32
        )
    )
    # The worked examples of SEMANTICS.md (C = 1).
    add(
        batch_norm_case(
            "example_124_momentum0.1",
            "x=[1,2,4], momentum 0.1",
            [(True, t64([[1], [2], [4]]).to(F32))],
            1,
            F32,
        )
    )
    add(
        batch_norm_case(
            "example_momentum0.3",
            "batches [1,2,4], [3,5], momentum 0.3",
            [(True, t64([[1], [2], [4]]).to(F32)), (True, t64([[3], [5]]).to(F32))],
            1,
            F32,
            momentum=0.3,
        )
    )
    add(
        batch_norm_case(
            "example_cumulative",
            "batches [1,2,4], [3,5], [0,10,20,30], momentum=None",
            [
                (True, t64([[1], [2], [4]]).to(F32)),
                (True, t64([[3], [5]]).to(F32)),
                (True, t64([[0], [10], [20], [30]]).to(F32)),
            ],
            1,
            F32,
            momentum=None,
        )
    )
    add(
        batch_norm_case(
            "example_eval",
            "eval x=3 with running mean 1, var 4",
            [(False, t64([[3]]).to(F32))],
            1,
            F32,
            affine=False,
            init=(t64([1]), t64([4])),
        )
    )
    return cases


def check_batch_norm_semantics(cases):
    """Assert the numbers in shared/SEMANTICS.md against what was generated."""
    c = dict(cases)

    def close(got, want, tol=1e-5):
        assert len(got) == len(want) and all(abs(g - w) <= tol for g, w in zip(got, want)), (
            got,
            want,
        )

    s = c["example_124_momentum0.1"]["steps"][0]
    for k in ("torch", "f64"):
        # gamma/beta are random here, so check the normalized values through them.
        g = dec(c["example_124_momentum0.1"]["initial"]["gamma"])[0]
        b = dec(c["example_124_momentum0.1"]["initial"]["beta"])[0]
        close([(v - b) / g for v in dec(s[k]["y"])], [-1.0690415, -0.2672604, 1.3363019], 2e-6)
        close(dec(s[k]["running_mean"]), [0.2333333])
        close(dec(s[k]["running_var"]), [1.1333333])
    steps = c["example_momentum0.3"]["steps"]
    close([dec(st["torch"]["running_mean"])[0] for st in steps], [0.7, 1.69])
    close([dec(st["torch"]["running_var"])[0] for st in steps], [1.4, 1.58])
    steps = c["example_cumulative"]["steps"]
    close([dec(st["f64"]["running_mean"])[0] for st in steps], [7 / 3, 19 / 6, 64 / 9], 1e-12)
    close([dec(st["f64"]["running_var"])[0] for st in steps], [7 / 3, 13 / 6, 57], 1e-12)
    close(dec(c["example_eval"]["steps"][0]["torch"]["y"]), [0.99999875], 1e-7)
    st = c["bn1d_one_value_error"]["steps"][0]
    assert st["error"] == (
        "Expected more than 1 value per channel when training, got input size torch.Size([1, 3])"
    ), st["error"]
    steps = c["bn2d_empty_batch"]["steps"]
    assert steps[1]["error"] is None and dec(steps[1]["torch"]["y"]) == []
    assert steps[1]["torch"]["running_mean"] == steps[0]["torch"]["running_mean"]
    assert steps[1]["torch"]["running_var"] == steps[0]["torch"]["running_var"]
    assert dec(steps[1]["torch"]["num_batches_tracked"]) == [2]
    assert dec(steps[1]["torch"]["dgamma"]) == [0.0] * 3
    st = c["bn2d_f32_nan_inf"]["steps"][0]["torch"]
    rm, rv = dec(st["running_mean"]), dec(st["running_var"])
    assert math.isnan(rm[1]) and math.isnan(rv[1]) and rm[2] == math.inf and math.isnan(rv[2])
    assert not any(math.isnan(v) for v in rm[::3] + rv[::3])
    st = c["bn2d_f16_f32params"]["steps"][0]["torch"]
    assert st["save_mean"]["dtype"] == "f32" and st["dgamma"]["dtype"] == "f32"
    assert st["y"]["dtype"] == "f16"


# ----------------------------------------------------------------------------- driver


def render(obj, indent=0):
    """JSON with one key per line, except that tensor objects and lists stay on one line."""
    pad = " " * (indent + 1)
    if isinstance(obj, dict) and obj and "hex" not in obj:
        items = [f"{pad}{json.dumps(k)}: {render(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        items = [pad + render(v, indent + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    return json.dumps(obj)


def generate():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    ln = layer_norm_cases()
    check_layer_norm_semantics(ln)
    rms = rms_norm_cases()
    check_rms_norm_semantics(rms)
    bn = batch_norm_cases()
    check_batch_norm_semantics(bn)
    res = {}
    for op in RESIDUAL_OPS:
        res[op] = residual_cases(op)
        check_residual_semantics(op, res[op])
    ops = (("layer_norm", ln), ("rms_norm", rms), ("batch_norm", bn))
    ops += tuple((op, res[op]) for op in RESIDUAL_OPS)
    assert tuple(op for op, _ in ops) == OPS
    files = {}
    for op, cases in ops:
        names = [n for n, _ in cases]
        assert len(set(names)) == len(names), "duplicate case names"
        for name, case in cases:
            files[f"{op}/{name}.json"] = render(case) + "\n"
    manifest = {
        "format_version": FORMAT_VERSION,
        "torch_version": torch.__version__,
        "generator": "scripts/gen_fixtures.py",
        "cases": {op: [n for n, _ in cases] for op, cases in ops},
    }
    files["manifest.json"] = render(manifest) + "\n"
    files["CASES.md"] = cases_table(ops, files)
    return files


def cases_table(ops, files):
    """Markdown list of every case with its description and file size (generated)."""
    lines = [
        "# Fixture cases (generated by scripts/gen_fixtures.py; do not edit)",
        "",
        f"torch {torch.__version__}. Format: README.md.",
    ]
    for op, cases in ops:
        lines += [
            "",
            f"## {op}",
            "",
            "| case | dtypes | description | bytes |",
            "|---|---|---|---|",
        ]
        for name, case in cases:
            cfg = case["config"]
            dts = cfg["x_dtype"] + ("/" + cfg["param_dtype"] if cfg["param_dtype"] else "")
            size = len(files[f"{op}/{name}.json"])
            lines.append(f"| {name} | {dts} | {case['description']} | {size} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "fixtures"), help="output directory")
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing")
    args = ap.parse_args()
    files = generate()
    if args.check:
        bad = []
        for rel, text in files.items():
            path = os.path.join(args.out, rel)
            if not os.path.exists(path):
                bad.append(rel)
                continue
            with open(path, encoding="utf-8") as fh:
                if fh.read() != text:
                    bad.append(rel)
        for op in OPS:
            d = os.path.join(args.out, op)
            for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                if f"{op}/{f}" not in files:
                    bad.append(f"{op}/{f} (stale)")
        for rel in bad:
            print(f"differs: {rel}")
        print(f"{len(files) - len(bad)} of {len(files)} files identical")
        sys.exit(1 if bad else 0)
    for op in OPS:
        d = os.path.join(args.out, op)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            if f.endswith(".json"):
                os.remove(os.path.join(d, f))
    total = 0
    for rel, text in sorted(files.items()):
        with open(os.path.join(args.out, rel), "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        total += len(text)
    print(f"wrote {len(files)} files, {total} bytes, torch {torch.__version__}")


if __name__ == "__main__":
    main()
