/*
 * welford.cuh - Welford accumulation and Chan's parallel merge, in f32.
 *
 * Used to merge partial statistics (per-thread, per-warp, per-block) without ever forming
 * E[x^2] - E[x]^2. A Welford holds (count, mean, m2) where m2 = sum (x - mean)^2.
 * The count is an f32 (exact below 2^24; above that the merge weights carry a relative error
 * of at most 2^-24, far below the statistics' own rounding).
 *
 * Merges are not commutative bit-for-bit, so warp merges use a fixed tree (shfl_down) and then
 * broadcast lane 0's result: every lane gets identical bits and reruns are bitwise identical.
 */
#pragma once

#include "reduce.cuh"

namespace warpnorm {

struct Welford {
    float count;
    float mean;
    float m2;
};

__device__ __forceinline__ Welford welford_empty() { return Welford{0.0f, 0.0f, 0.0f}; }

/** Add one sample (Welford's update). */
__device__ __forceinline__ void welford_push(Welford& w, float x) {
    w.count += 1.0f;
    const float delta = x - w.mean;
    w.mean += delta / w.count;
    w.m2 += delta * (x - w.mean);
}

/** Chan's merge of two partial results, `a` first. Empty partials merge to the other one. */
__device__ __forceinline__ Welford welford_merge(const Welford& a, const Welford& b) {
    if (b.count == 0.0f) return a;
    if (a.count == 0.0f) return b;
    const float n = a.count + b.count;
    const float wb = b.count / n;
    const float delta = b.mean - a.mean;
    Welford r;
    r.count = n;
    r.mean = a.mean + delta * wb;
    r.m2 = a.m2 + b.m2 + delta * delta * a.count * wb;
    return r;
}

/**
 * Merge across groups of `Width` consecutive lanes (power of two <= 32) in a fixed tree; every
 * lane of a group returns the group's result (broadcast from the group's first lane).
 * All 32 lanes must call it.
 */
template <int Width = 32>
__device__ __forceinline__ Welford warp_allreduce_welford(Welford w) {
#pragma unroll
    for (int off = Width / 2; off > 0; off /= 2) {
        Welford o;
        o.count = __shfl_down_sync(kFullMask, w.count, off, Width);
        o.mean = __shfl_down_sync(kFullMask, w.mean, off, Width);
        o.m2 = __shfl_down_sync(kFullMask, w.m2, off, Width);
        w = welford_merge(w, o);
    }
    w.count = __shfl_sync(kFullMask, w.count, 0, Width);
    w.mean = __shfl_sync(kFullMask, w.mean, 0, Width);
    w.m2 = __shfl_sync(kFullMask, w.m2, 0, Width);
    return w;
}

/**
 * Merge across the block; every thread gets the same result. `scratch` must hold at least
 * 3 * 32 floats of shared memory; all threads must call it (two barriers inside).
 * blockDim.x must be a multiple of 32, blockDim.y == blockDim.z == 1.
 */
__device__ __forceinline__ Welford block_allreduce_welford(Welford w, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    w = warp_allreduce_welford(w);
    if (lane == 0) {
        scratch[warp] = w.count;
        scratch[32 + warp] = w.mean;
        scratch[64 + warp] = w.m2;
    }
    __syncthreads();
    Welford t = welford_empty();
    if (lane < warps) t = Welford{scratch[lane], scratch[32 + lane], scratch[64 + lane]};
    t = warp_allreduce_welford(t);
    __syncthreads();
    return t;
}

}  // namespace warpnorm
