/*
 * reduce.cuh - deterministic warp and block sum reductions in f32.
 *
 * Warp all-reduce uses the xor butterfly: at every step lane i adds lane i^m's value, and
 * since f32 addition is commutative both lanes compute the same bits, so every lane ends with
 * the bitwise-identical total, independent of scheduling. Block all-reduce: warp totals are
 * written to shared memory, then every warp re-reduces the warp totals in the same fixed order.
 * No atomics anywhere: reruns are bitwise identical.
 */
#pragma once

#include "dtype.cuh"

namespace warpnorm {

constexpr unsigned kFullMask = 0xffffffffu;

/**
 * Sum `v` over groups of `Width` consecutive lanes (Width a power of two <= 32); every lane of
 * a group gets the group total. All 32 lanes of the warp must call it (mask is full).
 */
template <int Width = 32>
__device__ __forceinline__ float warp_allreduce_sum(float v) {
#pragma unroll
    for (int m = Width / 2; m > 0; m /= 2) v += __shfl_xor_sync(kFullMask, v, m, Width);
    return v;
}

/** Two sums at once (one shuffle round trip per step each), same contract as above. */
template <int Width = 32>
__device__ __forceinline__ void warp_allreduce_sum2(float& a, float& b) {
#pragma unroll
    for (int m = Width / 2; m > 0; m /= 2) {
        a += __shfl_xor_sync(kFullMask, a, m, Width);
        b += __shfl_xor_sync(kFullMask, b, m, Width);
    }
}

/**
 * Sum `v` over the whole block; every thread gets the same bits. `scratch` must hold at least
 * 32 floats of shared memory, and all threads of the block must call this (it contains two
 * barriers; the scratch may be reused right after it returns). blockDim.x must be a multiple
 * of 32 and blockDim.y == blockDim.z == 1.
 */
__device__ __forceinline__ float block_allreduce_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = warp_allreduce_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = lane < warps ? scratch[lane] : 0.0f;
    t = warp_allreduce_sum(t);
    __syncthreads();
    return t;
}

/** Two block sums at once; `scratch` must hold at least 64 floats. Contract as above. */
__device__ __forceinline__ void block_allreduce_sum2(float& a, float& b, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    warp_allreduce_sum2(a, b);
    if (lane == 0) {
        scratch[warp] = a;
        scratch[32 + warp] = b;
    }
    __syncthreads();
    a = lane < warps ? scratch[lane] : 0.0f;
    b = lane < warps ? scratch[32 + lane] : 0.0f;
    warp_allreduce_sum2(a, b);
    __syncthreads();
}

}  // namespace warpnorm
