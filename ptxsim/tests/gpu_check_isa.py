#!/usr/bin/env python3
"""Checks the expected values of ptxsim's table-driven instruction tests on a real GPU.

Usage (on a machine with an NVIDIA driver; needs only Python 3 and libcuda):
    PTXSIM_DUMP_ISA=/tmp/isa cargo test -p ptxsim --test 'isa_*'     # on the build machine
    python3 gpu_check_isa.py /tmp/isa                                 # on the GPU machine

Each case is `<name>.ptx` (kernel `isa_case(in, out)`, one thread per row, `.target sm_90`)
plus `<name>.rows`. Exact cases must match bit for bit; approximate ones (the .approx
instructions) are only listed when they differ. Exit status 1 if any exact case differs.
The kernels target sm_90, so run this on an sm_90 (H100/H200) device.
"""
import ctypes
import glob
import os
import sys

cu = ctypes.CDLL("libcuda.so.1")
u64 = ctypes.c_uint64
P = ctypes.POINTER
vp, sz, uint = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint
cu.cuMemAlloc_v2.argtypes = [P(u64), sz]
cu.cuMemFree_v2.argtypes = [u64]
cu.cuMemcpyHtoD_v2.argtypes = [u64, vp, sz]
cu.cuMemcpyDtoH_v2.argtypes = [vp, u64, sz]
cu.cuMemsetD8_v2.argtypes = [u64, ctypes.c_ubyte, sz]
cu.cuModuleLoadData.argtypes = [P(vp), ctypes.c_char_p]
cu.cuModuleGetFunction.argtypes = [P(vp), vp, ctypes.c_char_p]
cu.cuModuleUnload.argtypes = [vp]
cu.cuLaunchKernel.argtypes = [vp, uint, uint, uint, uint, uint, uint, uint, vp, P(vp), P(vp)]
cu.cuCtxSetCurrent.argtypes = [vp]
cu.cuDevicePrimaryCtxRetain.argtypes = [P(vp), ctypes.c_int]


def check(rc, what):
    if rc != 0:
        msg = ctypes.c_char_p()
        cu.cuGetErrorString(rc, ctypes.byref(msg))
        raise RuntimeError(f"{what}: CUDA error {rc} ({msg.value.decode() if msg.value else '?'})")


def main(folder):
    check(cu.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    bad_exact, bad_approx, total = [], [], 0
    for rows_path in sorted(glob.glob(os.path.join(folder, "*.rows"))):
        name = os.path.basename(rows_path)[:-5]
        with open(rows_path) as f:
            header = f.readline().split()
            widths = [int(w[1:]) for w in header[1:5]]
            approx = header[6] == "approx"
            rows = [[int(v, 16) for v in line.split()] for line in f if line.strip()]
        with open(os.path.join(folder, name + ".ptx"), "rb") as f:
            ptx = f.read() + b"\0"
        n = len(rows)
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        check(cu.cuModuleLoadData(ctypes.byref(mod), ptx), f"{name}: cuModuleLoadData")
        check(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"isa_case"), f"{name}: get function")
        inp = (u64 * (3 * n))(*[v for r in rows for v in r[:3]])
        out = (u64 * n)()
        din, dout = u64(), u64()
        check(cu.cuMemAlloc_v2(ctypes.byref(din), 24 * n), "cuMemAlloc")
        check(cu.cuMemAlloc_v2(ctypes.byref(dout), 8 * n), "cuMemAlloc")
        check(cu.cuMemcpyHtoD_v2(din, inp, 24 * n), "cuMemcpyHtoD")
        check(cu.cuMemsetD8_v2(dout, 0, 8 * n), "cuMemsetD8")
        params = (vp * 2)(ctypes.addressof(din), ctypes.addressof(dout))
        check(cu.cuLaunchKernel(fn, 1, 1, 1, n, 1, 1, 0, None, params, None), f"{name}: launch")
        check(cu.cuCtxSynchronize(), f"{name}: synchronize")
        check(cu.cuMemcpyDtoH_v2(out, dout, 8 * n), "cuMemcpyDtoH")
        cu.cuMemFree_v2(din)
        cu.cuMemFree_v2(dout)
        cu.cuModuleUnload(mod)
        mask = (1 << widths[3]) - 1
        diffs = [(i, r, out[i]) for i, r in enumerate(rows) if out[i] & mask != r[3] & mask]
        total += 1
        if diffs:
            (bad_approx if approx else bad_exact).append((name, diffs))
    for label, bad in (("EXACT", bad_exact), ("approx", bad_approx)):
        for name, diffs in bad:
            print(f"{label} mismatch in {name}: {len(diffs)} rows")
            for i, r, g in diffs[:5]:
                print(f"   row {i}: a={r[0]:#x} b={r[1]:#x} c={r[2]:#x} expected {r[3]:#x} gpu {g:#x}")
    print(f"{total} cases, {len(bad_exact)} exact mismatches, {len(bad_approx)} approximate differences")
    return 1 if bad_exact else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/isa"))
