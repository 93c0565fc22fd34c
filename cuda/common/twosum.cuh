/*
 * twosum.cuh - compensated (double-float) f32 sums: Knuth's TwoSum, a running sum with its
 * exact rounding errors collected in a second float, and the combine rule that makes
 * reduce.cuh's warp/block all-reduces sum such (hi, lo) pairs.
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
 * The combine rule of compensated (hi, lo) pairs for reduce.cuh's all-reduces: hi parts added
 * with TwoSum, lo parts and the error summed. Commutative bit-for-bit (TwoSum needs no
 * ordering), so both lanes of a butterfly step get the same pair.
 */
struct CompCombine {
    __device__ __forceinline__ void operator()(float (&v)[2], const float (&o)[2]) const {
        float s, e;
        two_sum(v[0], o[0], s, e);
        v[0] = s;
        v[1] = (v[1] + o[1]) + e;
    }
};

/**
 * Sums (hi, lo) pairs over groups of `width` consecutive lanes (power of two <= 32, may be a
 * runtime value); every lane of a group gets the same pair. All 32 lanes must call it.
 */
__device__ __forceinline__ void warp_allreduce_comp(float& hi, float& lo, int width) {
    float p[2] = {hi, lo};
    warp_allreduce(p, width, CompCombine{});
    hi = p[0];
    lo = p[1];
}

/**
 * Sums (hi, lo) pairs over a block row (block_allreduce); every thread gets the same pair.
 * `scratch` must hold 64 floats of shared memory; all threads must call it (two barriers).
 */
__device__ __forceinline__ void block_allreduce_comp(float& hi, float& lo, float* scratch) {
    float p[2] = {hi, lo};
    block_allreduce(p, scratch, CompCombine{});
    hi = p[0];
    lo = p[1];
}

}  // namespace warpnorm
