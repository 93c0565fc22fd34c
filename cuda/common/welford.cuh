/*
 * welford.cuh - the one Welford update and the one Chan merge of partial statistics, in f32.
 *
 * A partial is (count, mean, m2) with m2 = sum (x - mean)^2; nothing here forms
 * E[x^2] - E[x]^2. Two forms of Chan's merge, for the two ops' needs:
 * - welford_push / chan_merge: one sample, or one partial, into a running (mean, m2) whose
 *   count the caller keeps (BatchNorm's StatsAcc shares one count over V channels,
 *   channel_reduce.cuh). Non-finite values follow PyTorch's two-pass results: a mean that sees
 *   +-Inf becomes the plain sum of the infinities (Inf, or NaN for both signs) and m2 NaN.
 *   Merges are not commutative bit-for-bit: callers merge in a fixed order (reduce.cuh's
 *   column_merge, then the splits in order).
 * - chan_merge_all: all partials of a row at once, with the means as compensated (hi, lo)
 *   pairs (twosum.cuh): LayerNorm's split tier, whose chunk means keep about one rounding of
 *   accuracy and must not lose it in the merge (README, "LayerNorm statistics on hard rows").
 * invstd_of turns a variance into 1 / sqrt(var + eps) for both ops.
 * The count is an f32 (exact below 2^24; above that the merge weights carry a relative error
 * of at most 2^-24, far below the statistics' own rounding).
 */
#pragma once

#include "twosum.cuh"

namespace warpnorm {

/**
 * 1 / sqrt(var + eps) from a biased variance: LayerNorm's rstd and BatchNorm's invstd. A NaN
 * variance (0/0 for an empty row, or a non-finite input) gives NaN, as PyTorch.
 */
__device__ __forceinline__ float invstd_of(float var, float eps) { return 1.0f / sqrtf(var + eps); }

/** The NaN that m2 becomes when its mean is not finite. */
__device__ __forceinline__ float welford_nan() { return __int_as_float(0x7fffffff); }

/**
 * Welford's update of one channel with sample `v`, `inv` = 1 / (count after the sample).
 * A non-finite new mean takes the plain sum (see the header) and m2 NaN.
 */
__device__ __forceinline__ void welford_push(float& mean, float& m2, float v, float inv) {
    const float d = v - mean;
    const float nm = mean + d * inv;
    const float nm2 = m2 + d * (v - nm);
    const bool bad = !isfinite(nm);
    mean = bad ? mean + v : nm;
    m2 = bad ? welford_nan() : nm2;
}

/**
 * Chan's merge of one channel: (na, mean, m2) absorbs (nb, mean_b, m2_b), `this` side first,
 * with wb = nb / (na + nb) computed once by the caller for all its channels (both counts
 * non-zero). A non-finite mean on either side gives the plain sum of the means and m2 NaN.
 */
__device__ __forceinline__ void chan_merge(float& mean, float& m2, float na, float wb,
                                           float mean_b, float m2_b) {
    const float delta = mean_b - mean;
    const float nm = mean + delta * wb;
    const float nm2 = m2 + m2_b + delta * delta * na * wb;
    const bool bad = !isfinite(mean) || !isfinite(mean_b);
    mean = bad ? mean + mean_b : nm;
    m2 = bad ? welford_nan() : nm2;
}

/**
 * Chan's merge of `k` >= 1 partials j = 0 .. k - 1 at once, in order, with compensated means:
 * part(j) gives a float4-like (mean hi, mean lo, m2_j / n, -) and weight(j) = n_j / n (n the
 * total count). With m_j the pair means:
 *   mean = m_0 + sum_{j>0} w_j (m_j - m_0),   var = sum_j (m2_j / n + w_j (m_j - mean)^2).
 * The differences of pairs are exact up to one rounding (pair_sub), so the mean keeps the
 * partials' compensated accuracy and a variance with a large offset does not see the partial
 * means' roundings. The mean is returned as the pair (mh, ml) in half units: halving the means
 * makes every difference finite. Every thread calling it with the same partials gets the same
 * bits.
 */
template <class Part, class Weight>
__device__ __forceinline__ void chan_merge_all(int64_t k, Part part, Weight weight, float& mh,
                                               float& ml, float& var) {
    const auto p0 = part(0);
    const float h0 = 0.5f * p0.x, l0 = 0.5f * p0.y;
    float dsum = 0.0f;
#pragma unroll 1
    for (int64_t j = 1; j < k; ++j) {
        const auto pj = part(j);
        dsum = fmaf(weight(j), pair_sub(0.5f * pj.x, 0.5f * pj.y, h0, l0), dsum);
    }
    float e;
    two_sum(h0, dsum, mh, e);
    two_sum(mh, e + l0, mh, ml);
    var = 0.0f;
#pragma unroll 1
    for (int64_t j = 0; j < k; ++j) {
        const auto pj = part(j);
        const float dm = pair_sub(0.5f * pj.x, 0.5f * pj.y, mh, ml);
        var += pj.z;
        var = fmaf(4.0f * weight(j) * dm, dm, var);
    }
}

}  // namespace warpnorm
