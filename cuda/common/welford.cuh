/*
 * welford.cuh - the Welford group update and the Chan merges of partial statistics, in f32.
 *
 * A partial is (count, mean, m2) with m2 = sum (x - mean)^2; nothing here forms
 * E[x^2] - E[x]^2. Two forms of Chan's merge, for the two ops' needs:
 * - group_stats + welford_merge_group / chan_merge_pair: BatchNorm's statistics, with each mean kept as a
 *   compensated pair (hi, lo): a group of samples of one channel, or one partial, into a
 *   running (mean hi, mean lo, m2); no shift is needed for data with a large offset, and the
 *   mean's error is relative to the mean (channel_reduce.cuh's StatsAcc).
 *   The caller keeps the count (StatsAcc shares one count over V channels). Non-finite values
 *   follow PyTorch's two-pass results: a mean that sees +-Inf becomes the plain sum of the
 *   infinities (Inf, or NaN for both signs) and m2 NaN. Merges are not commutative
 *   bit-for-bit: callers merge in a fixed order (reduce.cuh's column_merge, then the splits
 *   in order).
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
 * Chan's merge of one channel with compensated means: (na, mh + ml, m2) absorbs
 * (nb, bh + bl, m2_b), `this` side first, wb = nb / (na + nb) from the caller (both counts
 * non-zero). The difference of the means is exact up to one rounding of itself (pair_sub), and
 * the new mean keeps the rounding error of its update in ml (TwoSum), so the merged mean's error
 * is relative to the mean's change, not to |mean| (BatchNorm's statistics, channel_reduce.cuh).
 * Non-finite means: the plain sum of the means and m2 NaN, as chan_merge.
 */
__device__ __forceinline__ void chan_merge_pair(float& mh, float& ml, float& m2, float na,
                                                float wb, float bh, float bl, float m2_b) {
    const float delta = pair_sub(bh, bl, mh, ml);
    const float t = delta * wb;
    float s, e;
    two_sum(mh, t, s, e);
    const float nm2 = fmaf(delta * na * wb, delta, m2 + m2_b);
    const bool bad = !isfinite(mh) || !isfinite(bh) || !isfinite(bl);
    mh = bad ? mh + bh + bl : s;
    ml = bad ? 0.0f : ml + e;
    m2 = bad ? welford_nan() : nm2;
}

/**
 * The two-pass statistics of the first `m` of K values of one channel (m >= 1, K a constant;
 * FULL: m == K) relative to `ref`: pm = mean(v - ref) (with `inv_m` = 1 / m) and
 * q = sum (v - ref - pm)^2. Values close to ref (the channel's running mean) give exact or
 * nearly exact differences, so pm and q keep the precision of the spread, not of |ref|.
 */
template <int K, bool FULL>
__device__ __forceinline__ void group_stats(const float* v, int m, float inv_m, float ref,
                                            float& pm, float& q) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        if (FULL || k < m) s += v[k] - ref;
    }
    pm = s * inv_m;
    q = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const float d = (v[k] - ref) - pm;
        if (FULL || k < m) q = fmaf(d, d, q);
    }
}

/**
 * Chan's merge of a group (its mean mh + pm relative to the running mean hi mh, its m2 q) into
 * a compensated Welford accumulator (mean mh + ml, m2), finite values only: wb = m / (na + m),
 * nawb = na * wb. The difference of the means is pm - ml; the mean's update keeps its rounding
 * error in ml (TwoSum).
 */
__device__ __forceinline__ void welford_merge_group(float& mh, float& ml, float& m2, float pm,
                                                    float q, float wb, float nawb) {
    const float delta = pm - ml;
    float s, e;
    two_sum(mh, delta * wb, s, e);
    m2 = fmaf(delta * nawb, delta, m2 + q);
    mh = s;
    ml += e;
}

/**
 * The non-finite case of welford_merge_group (a non-finite running mean or group value): the
 * plain sum of the running mean and the group's plain mean (sum of v times inv_m), lo 0, m2 NaN
 * (see the header); finite sides take welford_merge_group.
 */
template <int K, bool FULL>
__device__ __forceinline__ void welford_merge_group_checked(float& mh, float& ml, float& m2,
                                                            const float* v, int m, float inv_m,
                                                            float pm, float q, float wb,
                                                            float nawb) {
    if (isfinite(mh) && isfinite(pm)) {
        welford_merge_group(mh, ml, m2, pm, q, wb, nawb);
        return;
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
        if (FULL || k < m) s += v[k];
    }
    mh = mh + s * inv_m;
    ml = 0.0f;
    m2 = welford_nan();
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
