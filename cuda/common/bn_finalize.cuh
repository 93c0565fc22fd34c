/*
 * bn_finalize.cuh - the per-channel finish of BatchNorm, written once for every tier: invstd,
 * the running-statistics update, save_mean / save_invstd, the parameter gradients and the
 * per-channel coefficients of the elementwise passes. Used by the finalize kernels (two-sweep
 * tiers) and the fused kernels of cuda/batch_norm.cu, so every tier gives the same bits for
 * the same merged statistics. All f32; parameters and running statistics are read and written
 * in the parameter type P, rounded once.
 *
 * The rules match the f64 CPU reference (src/cpu/batch_norm.rs), evaluated in f32:
 * - invstd = 1 / sqrt(m2 / count + eps) (biased variance; welford.cuh's invstd_of).
 * - running = (1 - f) * running + f * batch, with the unbiased variance m2 / (count - 1);
 *   f = momentum, or for the cumulative average (momentum None) 1 / (num_batches_tracked + 1)
 *   computed in f64 and rounded once to f32 - the reference's f64 factor, rounded once (the
 *   count is exact for any 64-bit counter; an f32 reciprocal of the rounded count is not
 *   beyond 2^24).
 * - The batch mean is a compensated pair: save_mean = fl(mean), save_mean_lo = the exact
 *   rounding error (mean - save_mean), so that x - mean stays accurate when the mean is large
 *   against the spread, in the forward and, through the saved pair, in the backward.
 * - Forward coefficients (y = ((x - k0) - k1) * k2 + k3): k0 = save_mean, k1 = save_mean_lo,
 *   k2 = scale = gamma * invstd, k3 = beta.
 * - Backward (training): dgamma = sum(dy * (x - mean)) * invstd, dbeta = sum(dy), and
 *   dx = k0 * dy + k1 * (x - k2) + k3 with k0 = gamma * invstd,
 *   k1 = -k0 * invstd^2 * sum(dy * (x - mean)) / count, k2 = save_mean,
 *   k3 = -k0 * sum(dy) / count - k1 * save_mean_lo; the sums are taken against save_mean and
 *   sum(dy * (x - mean)) = sum(dy * (x - save_mean)) - save_mean_lo * sum(dy).
 * - Frozen statistics (eval): mean = running_mean, invstd = 1 / sqrt(running_var + eps) (or
 *   the saved invstd, eval-mode backward), the forward coefficients from them; eval-mode
 *   backward is dx = dy * gamma * invstd, the same coefficients with mean 0 and beta 0.
 */
#pragma once

#include "../abi.h"
#include "dtype.cuh"
#include "welford.cuh"

namespace warpnorm {
namespace bn {

/** Parameter of channel c as f32, or `dflt` when the pointer is 0 (no affine / no running stats). */
template <typename P> __device__ __forceinline__ float param(wn_devptr p, int64_t c, float dflt) {
    return p != 0 ? to_float(reinterpret_cast<const P*>(p)[c]) : dflt;
}

/**
 * The running-average factor: `momentum`, or with WN_BN_CUMULATIVE (and a counter)
 * 1 / (num_batches_tracked + 1) from the counter as it was before this batch (see the header).
 */
__device__ __forceinline__ float running_factor(uint32_t flags, float momentum, wn_devptr counter) {
    if ((flags & WN_BN_CUMULATIVE) && counter != 0) {
        const long long seen = *reinterpret_cast<const long long*>(counter);
        return static_cast<float>(1.0 / static_cast<double>(seen + 1));
    }
    return momentum;
}

/** Writes save_mean / save_mean_lo / save_invstd of channel c (each when not 0). */
template <class Args>
__device__ __forceinline__ void save_stats(const Args& a, int64_t c, float mh, float ml,
                                           float invstd) {
    if (a.save_mean != 0) reinterpret_cast<float*>(a.save_mean)[c] = mh;
    if (a.save_mean_lo != 0) reinterpret_cast<float*>(a.save_mean_lo)[c] = ml;
    if (a.save_invstd != 0) reinterpret_cast<float*>(a.save_invstd)[c] = invstd;
}

/** The statistics of one channel, finished: mean = mh + ml (mh = the mean rounded to f32). */
struct ChannelStats {
    float mh;
    float ml;
    float invstd;
};

/**
 * Finishes channel c from its merged statistics of `count` values (mean the pair mh + ml, m2):
 * invstd, the running statistics (when args.running_mean is not 0) with factor `f`
 * (running_factor), save_mean / save_mean_lo / save_invstd (when not 0). Args is a forward
 * finalize or fused argument struct.
 */
template <typename P, class Args>
__device__ __forceinline__ ChannelStats finish_batch_stats(const Args& a, int64_t c, float mh,
                                                           float ml, float m2, int64_t count,
                                                           float f) {
    const float n = static_cast<float>(count);
    const float invstd = invstd_of(m2 / n, a.eps);
    // The pair normalized: mean = fl(mh + ml), lo = its exact rounding error (NaN for a
    // non-finite mean, which the apply then propagates anyway).
    float mean, lo;
    two_sum(mh, ml, mean, lo);
    if (!isfinite(mean)) lo = 0.0f;
    if (a.running_mean != 0) {
        const float unbiased = m2 / static_cast<float>(count - 1);
        P* rm = reinterpret_cast<P*>(a.running_mean);
        P* rv = reinterpret_cast<P*>(a.running_var);
        rm[c] = from_float<P>((1.0f - f) * to_float(rm[c]) + f * mean);
        rv[c] = from_float<P>((1.0f - f) * to_float(rv[c]) + f * unbiased);
    }
    save_stats(a, c, mean, lo, invstd);
    return ChannelStats{mean, lo, invstd};
}

/**
 * Frozen statistics of channel c (eval): mean = running_mean (0 when 0), lo 0, invstd =
 * `invstd` (f32) when not 0, else 1 / sqrt(running_var + eps) (running_var 1 when 0).
 */
template <typename P>
__device__ __forceinline__ ChannelStats frozen_stats(wn_devptr running_mean, wn_devptr running_var,
                                                     wn_devptr invstd, int64_t c, float eps) {
    const float is = invstd != 0 ? reinterpret_cast<const float*>(invstd)[c]
                                 : invstd_of(param<P>(running_var, c, 1.0f), eps);
    return ChannelStats{param<P>(running_mean, c, 0.0f), 0.0f, is};
}

/** Per-channel coefficients k[0..3] of an elementwise pass (see the header). */
struct Coef {
    float k[4];
};

/** Forward coefficients of channel c: (mean hi, mean lo, gamma * invstd, beta). */
template <typename P>
__device__ __forceinline__ Coef fwd_coef(wn_devptr gamma, wn_devptr beta, int64_t c,
                                         const ChannelStats& s) {
    return Coef{{s.mh, s.ml, param<P>(gamma, c, 1.0f) * s.invstd, param<P>(beta, c, 0.0f)}};
}

/**
 * Backward of channel c from its sums sdy = sum(dy), sdx_hi = sum(dy * (x - mh)) over `count`
 * values, mean = mh + ml: sum(dy * (x - mean)) = sdx_hi - ml * sdy (x - mh is exact or nearly
 * so where the lo part matters, so this is as accurate as centring each x on the pair). Writes
 * dgamma / dbeta (when not 0) and returns the dx coefficients (frozen: none; dx is the
 * frozen-statistics apply's). The mean's lo part enters dx through k3:
 * k1 * (x - mean) = k1 * (x - mh) - k1 * ml.
 */
template <typename P>
__device__ __forceinline__ Coef bwd_coef(wn_devptr gamma, wn_devptr dgamma, wn_devptr dbeta,
                                         int64_t c, float mh, float ml, float invstd, float sdy,
                                         float sdx_hi, int64_t count, bool frozen) {
    const float sdx = fmaf(-ml, sdy, sdx_hi);
    if (dgamma != 0) reinterpret_cast<P*>(dgamma)[c] = from_float<P>(sdx * invstd);
    if (dbeta != 0) reinterpret_cast<P*>(dbeta)[c] = from_float<P>(sdy);
    if (frozen) return Coef{{0.0f, 0.0f, 0.0f, 0.0f}};
    const float k = param<P>(gamma, c, 1.0f) * invstd;
    const float n = static_cast<float>(count);
    const float k1 = -k * invstd * invstd * (sdx / n);
    return Coef{{k, k1, mh, fmaf(-k1, ml, -k * (sdy / n))}};
}

}  // namespace bn
}  // namespace warpnorm
