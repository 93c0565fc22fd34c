/*
 * twosum.cuh - compensated (double-float) f32 sums: Knuth's TwoSum, a running sum with its
 * exact rounding errors collected in a second float, and warp/block all-reduces of such
 * (hi, lo) pairs.
 *
 * TwoSum(a, b) returns s = fl(a + b) and the exact error e = (a + b) - s for any a, b (no
 * ordering needed), so both lanes of an xor-butterfly step compute identical (s, e) bits:
 * reductions stay deterministic and every lane ends with the same pair. Used where an f32
 * sum must be accurate to about one rounding of the result (LayerNorm's row mean), not only
 * to ~log(n) roundings of the sum of magnitudes. Non-finite inputs give NaN errors, so a
 * row with an Inf gets a NaN sum, as PyTorch's LayerNorm mean.
 */
#pragma once

#include "reduce.cuh"

namespace warpnorm {

/** s = fl(a + b), e = (a + b) - s exactly. */
__device__ __forceinline__ void two_sum(float a, float b, float& s, float& e) {
    s = a + b;
    const float bp = s - a;
    e = (a - (s - bp)) + (b - bp);
}

/**
 * (ah + al) - (bh + bl) for two unevaluated pairs, with one rounding of the result plus the
 * pairs' own lo-part errors: the hi parts are subtracted exactly (TwoSum), so the difference of
 * two close means keeps its full precision.
 */
__device__ __forceinline__ float pair_sub(float ah, float al, float bh, float bl) {
    float s, e;
    two_sum(ah, -bh, s, e);
    return s + (e + (al - bl));
}

/** hi + lo += v, keeping the rounding error of the addition in lo. */
__device__ __forceinline__ void comp_add(float& hi, float& lo, float v) {
    float s, e;
    two_sum(hi, v, s, e);
    hi = s;
    lo += e;
}

/**
 * Sums (hi, lo) pairs over groups of `width` consecutive lanes (power of two <= 32, may be a
 * runtime value); every lane of a group gets the same pair. All 32 lanes must call it.
 */
__device__ __forceinline__ void warp_allreduce_comp(float& hi, float& lo, int width) {
    for (int m = width >> 1; m > 0; m >>= 1) {
        const float h2 = __shfl_xor_sync(kFullMask, hi, m);
        const float l2 = __shfl_xor_sync(kFullMask, lo, m);
        float s, e;
        two_sum(hi, h2, s, e);
        hi = s;
        lo = (lo + l2) + e;
    }
}

/**
 * Sums (hi, lo) pairs over the block; every thread gets the same pair. `scratch` must hold
 * 64 floats of shared memory; all threads must call it (two barriers). blockDim.x must be a
 * multiple of 32, blockDim.y == blockDim.z == 1.
 */
__device__ __forceinline__ void block_allreduce_comp(float& hi, float& lo, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    warp_allreduce_comp(hi, lo, 32);
    if (lane == 0) {
        scratch[warp] = hi;
        scratch[32 + warp] = lo;
    }
    __syncthreads();
    hi = lane < warps ? scratch[lane] : 0.0f;
    lo = lane < warps ? scratch[32 + lane] : 0.0f;
    warp_allreduce_comp(hi, lo, 32);
    __syncthreads();
}

}  // namespace warpnorm
