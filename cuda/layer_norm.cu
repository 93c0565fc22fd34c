/*
 * layer_norm.cu - LayerNorm forward and backward over rows of D contiguous elements.
 *
 * y = (x - mean) * rstd * gamma + beta, biased variance, rstd = 1 / sqrt(var + eps); x, y, dy,
 * dx in T (f32, f16, bf16), gamma/beta in P (T or f32), saved mean, mean_lo (the mean's
 * rounding error: the backward re-centres x on the pair) and rstd in f32. Everything
 * that accumulates is f32. Statistics come from the row held in
 * registers: f32 activations by the corrected two-pass residuals (a sum for mean0, then the
 * sum of x - mean0 with their exact rounding errors and sum (x - mean0)^2 as a compensated
 * pair, rstd as a pair and the output formed from it); 16-bit activations the mean from a
 * compensated sum as a pair and one plain pass of (x - mean0)^2 (tile_moments /
 * tile_normalize; they save rstd refined by saved_rstd) - never
 * E[x^2] - E[x]^2; Chan's merge only combines chunk
 * statistics in the split tier, with chunk means kept as compensated pairs (welford.cuh's
 * chan_merge_all). Finite rows whose f32 sums overflow are redone on x * 2^-80 (tile_stats).
 * Outputs are rounded once. Team sums (plain and compensated) are reduce.cuh's xor-butterfly
 * all-reduces (twosum.cuh's combine for the pairs); the dgamma/dbeta finalize is its column
 * merge. No float atomics anywhere: reruns are bitwise identical.
 *
 * Tiers (chosen by the Rust planner, src/layer_norm/plan.rs; sizes in cuda/abi/layer_norm.h):
 * - subwarp: groups of `group` lanes (1..32) per row, one pack per lane. Tiny D.
 * - warp:    a full warp per row, up to 32 (fwd) / 16 (bwd) elements per lane: f32 D <= 1024
 *            (fwd) / 512 (bwd); 16-bit types the same element counts.
 * - block:   a row per team of 128..512 threads, in registers, D <= 16K (fwd) / 8K (bwd)
 *            elements; backward packs 512 / team rows per 512-thread block (blockDim.y teams).
 * - wide:    backward, vec only: a row per 512-thread block with twice the block tier's
 *            elements per thread (D <= 16K), x and dy held as loaded, dgamma/dbeta summed in
 *            shared-memory slots (bwd_wide, SlotGrads): the row read once where split reads
 *            it twice; planned where the device's opt-in shared memory holds the slots.
 * - split:   a row split into chunks across grid.y (longer rows, or fewer rows than SMs with
 *            D >= 4096): fwd split_stats writes per-chunk (mean hi, mean lo, m2 / D, lo),
 *            split_norm merges them in chunk order and normalizes; bwd split_sums /
 *            split_dx likewise for the two row sums of the dx formula. Forward, where every
 *            chunk fits in the shared memory of one wave (4 x 2^20 in every dtype on an
 *            H100 / H200), the same chunks in one cooperative launch instead (split_coop:
 *            each chunk held on chip between its statistics and its output, x read once,
 *            a grid barrier between the phases; fwd_split_coop).
 * Every tier has a `vec` variant and a `scalar` one (pointers not congruent; fewer elements
 * per thread). The vec variant moves packs of VEC = 16 / max(sizeof(T), sizeof(P)) elements
 * (kPairVec), aligned to the absolute address with a predicated head/tail (common/rowtile.cuh):
 * 16-byte activation accesses for T == P or f32 activations, 8-byte ones for f16/bf16
 * activations with f32 parameters, so that a lane's gamma/beta of a pack is one 16-byte load
 * and both the activation and the parameter requests of a warp are coalesced. It needs the
 * activation pointers congruent mod the activation access width A = VEC * sizeof(T) (16 or 8
 * bytes), any D. Grids are
 * persistent (grid-stride over rows, one wave sized by occupancy in the planner); offsets are
 * 64-bit.
 * Backward writes dx directly and accumulates dgamma/dbeta per thread in f32 registers for
 * the thread's columns (LayerNorm's plain block kernels of the mixed pairs keep dbeta in
 * thread-private shared-memory slots instead, and RMSNorm's bias-gradient ones their dbias,
 * kDbInSlots: their x and dy packs are held raw, tile_load2's kHold8, and registers ran out).
 * A row's head offset repeats every V' = VEC / gcd(D, VEC) rows and the
 * planner makes each team's grid-stride step a multiple of V' (or gives it one row), so a
 * team's columns never change (split_dx checks it per row and traps). At the end the
 * block's teams are summed in team order through shared memory (each team with its own head)
 * and written with coalesced 16-byte stores as partial row blockIdx.x (rows 32-byte aligned,
 * stride part_stride); `finalize` sums the partial rows in a fixed order and rounds to P. A
 * single-block grid writes dgamma/dbeta itself (no partial rows, no finalize).
 * Bytes moved (fwd): read x + write y; (bwd) read x, dy + write dx (+ 2 * 4 * D per partial
 * row, written and read once; at most 1/8 of the minimum for few rows, ~1 % at 16384 rows on
 * an H200, see src/layer_norm/plan.rs); split
 * tiers read x (and dy) twice, but the forward's cooperative pass (split_coop) once.
 * gamma/beta are re-read per row from L1/L2.
 * Fused residual add: forward h = (x + residual) + bias in f32, rounded once to T and
 * stored, then y = norm(stored h) - equal to PyTorch's unfused `h = x + residual;
 * y = norm(h)` whenever its add is exact. Its own forward entry points
 * (`..._fwd_<T>_<P>_res_<tier>_vec` for subwarp, warp, block and split_stats; a
 * runtime branch in the plain vector kernels cost them registers and issue slots in the
 * performance model's reading; the plain scalar subwarp, warp and block kernels take the
 * residual at run time, ResMode, and split_stats_scalar has a res_ entry too): every tier loads the residual's full packs raw next to x's
 * (tile_load_raw, all before any is converted), with the same vector width (the planner
 * requires x, residual, h, y congruent for the vec variant); the split tier stores h in split_stats and the plain split_norm
 * normalizes it. Backward is a runtime choice (a.dh 0: none; the model predicts the plain
 * backward unchanged): x = h, and dh is added to dx in f32 before dx's one rounding.
 * Bytes moved with it: fwd read x, residual + write h, y; bwd read h, dy, dh + write dx.
 * The bias's gradient (dbias = column sums of dx, a.db_dx) is summed by the backward kernels
 * themselves from the f32 dx before its rounding (dh included), in the accumulators that
 * otherwise hold dbeta (RMSNorm has none; a third accumulator would cost the 16-bit warp
 * tier, at its register bound, spills), into dbeta's partial rows and finalize. The block
 * and split tiers fix the choice at compile time (`..._block_dbias_<vec|scalar>` and
 * `..._split_dx_dbias_<vec|scalar>` entry points, DbMode), the warp tiers read a.db_dx.
 * LayerNorm's dbeta (= column sums of dy, exact inputs) is then summed beside it by those
 * block and split_dx kernels, in thread-private shared-memory slots (add_dy_sums: no
 * registers, which those kernels, at their bound, do not have), into its own partial rows
 * (a.dy_sum_part) that the one finalize sums with dgamma's and dbias's; in the warp tiers it
 * comes from two more launches: column_sum (`warpnorm_layer_norm_bwd_<T>_colsum`) reads dy
 * once more into f32 partial rows per row chunk, and the finalize sums them in chunk order.
 * Benchmark: `cargo bench --bench layer_norm`.
 * RMSNorm (cuda/rms_norm.cu) reuses every body here through the compile-time op ln::Norm:
 * with WN_LN_BODIES_ONLY defined this file defines the bodies and entry macros only.
 */
#include "abi.h"
#include "common/arrival.cuh"
#include "common/reduce.cuh"
#include "common/rowtile.cuh"
#include "common/twosum.cuh"
#include "common/welford.cuh"

namespace warpnorm {
namespace ln {

/**
 * The op a body computes, fixed at compile time: LayerNorm (centred: statistics mean and
 * variance, a bias) or RMSNorm (uncentred: the mean square only, mean taken as 0, no bias).
 * RMSNorm is LayerNorm with the mean pinned to 0, so every tier, team reduction and loader
 * below serves both; the few places that differ test `N == Norm::Layer`.
 */
enum class Norm { Layer, Rms };

/** A group of `g` consecutive lanes (power of two <= 32) of a warp: xor-butterfly sums. */
struct GroupTeam {
    int g;
    __device__ __forceinline__ float sum(float v) const { return warp_allreduce_sum(v, g); }
    __device__ __forceinline__ void sum2(float& a, float& b) const {
        warp_allreduce_sum2(a, b, g);
    }
    __device__ __forceinline__ void sum_comp(float& hi, float& lo) const {
        warp_allreduce_comp(hi, lo, g);
    }
    /** True when `p` (uniform over each group) holds in any group of the warp. */
    __device__ __forceinline__ bool any(bool p) const { return __any_sync(kFullMask, p) != 0; }
};

/** The whole block: warp sums, then warp totals re-reduced (reduce.cuh). */
struct BlockTeam {
    float* scratch;  // >= 64 floats of shared memory
    __device__ __forceinline__ float sum(float v) const {
        return block_allreduce_sum(v, scratch);
    }
    __device__ __forceinline__ void sum2(float& a, float& b) const {
        block_allreduce_sum2(a, b, scratch);
    }
    __device__ __forceinline__ void sum_comp(float& hi, float& lo) const {
        block_allreduce_comp(hi, lo, scratch);
    }
    /** `p` itself: callers pass block-uniform values (computed from all-reduced sums). */
    __device__ __forceinline__ bool any(bool p) const { return p; }
};

/**
 * One of blockDim.y teams of blockDim.x threads (a multiple of 32) in a block, each team on
 * its own row (reduce.cuh's block_rows_allreduce_sum2). Every team calls it together (two
 * block barriers inside).
 */
struct RowTeam {
    float* scratch;  // >= 64 * blockDim.y floats of shared memory
    __device__ __forceinline__ void sum2(float& a, float& b) const {
        block_rows_allreduce_sum2(a, b, scratch);
    }
};

/** True for the block team (a row per block: block and split tiers). */
template <class Team>
constexpr bool kIsBlockTeam = false;
template <>
constexpr bool kIsBlockTeam<BlockTeam> = true;

/**
 * Moments of the held segment, team-wide, by the corrected two-pass algorithm: mean0 =
 * sum(x) / n; then d = x - mean0, sd = sum(d), q = sum(d^2); the mean is mean0 + c with
 * c = sd / n, and m2 = q - sd * c = sum((x - mean)^2), not clamped. Never E[x^2] - E[x]^2.
 *
 * 16-bit activations (!kExact), every tier: the mean from a compensated sum, as the pair
 * mean0 + c to about one rounding (the saved mean as close to the f64 one as torch's:
 * tests/layer_norm/fixtures.rs), then one plain pass q = sum((x - mean0)^2), m2 = q - n c^2
 * (about 9 instructions per element for both). Its error, tens of u32 relative to the row's
 * variance, is some 2^13 times below one rounding of a 16-bit output:
 * tests/layer_norm/accuracy.rs holds bf16 rows at 1e4 and 1e6 (constant, and a few ulps of
 * spread) and f16/bf16 outlier rows to their bounds. In the warp tiers c's division waits
 * until after the second pass: formed before it, their kernels took 170-200 registers on
 * sm_90 (not 124-128), a third fewer warps.
 *
 * kExact (f32 activations, whose output must be within ~1 rounding of the f64 result,
 * relative to the row's largest output): the first sum is compensated across the team,
 * each d carries its exact rounding error (two_sum), and q is a compensated pair too - each
 * d^2 split exactly (fma), the residual's own rounding added as 2 d de, the pair summed with
 * Fast2Sum (terms >= 0) - so m2 + m2lo carries about u32^2 relative error instead of one
 * rounding per add (~30 in a thread's sum: rows of small values with one large outlier lost up
 * to ~5 units in rstd); c and S^2 / n are formed as pairs.
 */
template <Norm N, bool kExact, int VEC, int NPACK, class Team, class G>
__device__ __forceinline__ void tile_moments(const float (&v)[NPACK][VEC], const G& g,
                                             const Team& team, float& mean0, float& c,
                                             float& cl, float& m2, float& m2lo) {
    if constexpr (N == Norm::Rms) {
        // RMSNorm: m2 = sum(x^2) (the mean is 0 by definition), a plain sum also for kExact
        // (m2lo = 0: a compensated pair turns an Inf row's Inf sum into NaN; f32 rows still
        // get rstd_pair and the exact output of LayerNorm's kExact path).
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < NPACK; ++k)
#pragma unroll
            for (int i = 0; i < VEC; ++i) q = fmaf(v[k][i], v[k][i], q);  // 0 outside
        mean0 = 0.0f;
        c = 0.0f;
        cl = 0.0f;
        m2 = team.sum(q);
        m2lo = 0.0f;
        return;
    }
    const float n = static_cast<float>(g.n);
    if constexpr (!kExact) {
        // 16-bit activations: a compensated sum (s, se) gives the mean as the pair mean0 + c
        // to about one rounding (c from the division's exact residual), then q = sum((x -
        // mean0)^2) plainly: mean0 is within a rounding of the mean, so q - n c^2 is m2 to
        // tens of u32 (2^13 below one rounding of a 16-bit output), and a constant row gives
        // x - mean0 = 0 exactly.
        float s = 0.0f, se = 0.0f;
#pragma unroll
        for (int k = 0; k < NPACK; ++k)
#pragma unroll
            for (int i = 0; i < VEC; ++i) comp_add(s, se, v[k][i]);  // 0 outside the segment
        team.sum_comp(s, se);
        mean0 = g.n > 0 ? s / n : 0.0f;
        // c = residual / n: the warp tiers divide after the second pass (see above: registers),
        // the block tiers before it (after, bf16/f32's block kernel spilled 14 bytes on sm_90).
        const float residual = fmaf(-mean0, n, s) + se;
        if constexpr (kIsBlockTeam<Team>) c = g.n > 0 ? residual / n : 0.0f;
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < NPACK; ++k) {
            const auto lo = g.template lo<VEC>(k);
            if (full_pack<VEC>(g, k)) {
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    const float d = v[k][i] - mean0;
                    q = fmaf(d, d, q);
                }
            } else {
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    const float d = in_seg(lo + i, g.n) ? v[k][i] - mean0 : 0.0f;
                    q = fmaf(d, d, q);
                }
            }
        }
        q = team.sum(q);
        if constexpr (!kIsBlockTeam<Team>) c = g.n > 0 ? residual / n : 0.0f;
        m2 = q - (c * n) * c;
        m2lo = 0.0f;
        cl = 0.0f;
        return;
    } else {
        // f32 activations (kExact): mean0 only centres the residuals, corrected below.
        float s = 0.0f, se = 0.0f;
#pragma unroll
        for (int k = 0; k < NPACK; ++k)
#pragma unroll
            for (int i = 0; i < VEC; ++i) s += v[k][i];  // 0 outside the segment
        team.sum_comp(s, se);
        mean0 = g.n > 0 ? (s + se) / n : 0.0f;
        float sd = 0.0f, sde = 0.0f, q = 0.0f, qe = 0.0f;
#pragma unroll
        for (int k = 0; k < NPACK; ++k) {
            const auto lo = g.template lo<VEC>(k);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                if (in_seg(lo + i, g.n)) {
                    float d, de;
                    two_sum(v[k][i], -mean0, d, de);
                    comp_add(sd, sde, d);
                    sde += de;
                    // d^2 = p + pe exactly; q + p by Fast2Sum (both >= 0: max first).
                    const float p = d * d;
                    const float pe = fmaf(d, d, -p);
                    const float a = fmaxf(q, p), b = fminf(q, p);
                    q = a + b;
                    qe += (b - (q - a)) + fmaf(d + d, de, pe);
                }
            }
        }
        team.sum_comp(sd, sde);
        team.sum_comp(q, qe);
        const float sdt = sd + sde;
        c = g.n > 0 ? sdt / n : 0.0f;
        // m2 = q - S^2 / n with S = sd + sde and c = S / n as pairs: mean0 is a plain sum's (a
        // few roundings of |mean| off), so S^2 / n may exceed m2 manyfold and is formed to
        // ~u32^2 (with q's pair) before the difference.
        float sh, sl;
        two_sum(sd, sde, sh, sl);
        cl = g.n > 0 ? (fmaf(-c, n, sh) + sl) / n : 0.0f;
        const float corr = sh * c;
        const float corr_lo = fmaf(sh, c, -corr) + fmaf(sh, cl, sl * c);
        float hi, e;
        two_sum(q, -corr, hi, e);
        two_sum(hi, (e - corr_lo) + qe, m2, m2lo);
    }
}

/**
 * Scale of the overflow path: for any finite x (|x| < 2^128) and a tile of n <= 2^14
 * elements, |x * 2^-80| < 2^48, |x - mean| < 2^49 and sum (x - mean)^2 < 2^112 stay finite.
 * Values below 2^-69 lose bits, far below the rounding of such a row's statistics.
 */
constexpr float kStatsDown = 0x1p-80f;
constexpr float kStatsUp = 0x1p80f;

/**
 * Statistics of a tile in the units of the held values: mean = (mean0 + c) * unscale, and
 * y = ((v - mean0) - c) * (rstd * unscale); `var` is m2 / denom in x's units (Inf beyond
 * f32's range, so that rstd is 0).
 */
struct TileStats {
    float unscale;
    float mean0;
    float c;
    float c_lo;  // kExact: c's rounding error (mean = mean0 + c + c_lo); else 0
    float var;
    float var_lo;  // var + var_lo is the variance to ~u32^2 (kExact; else 0)
};

/**
 * Statistics of the held segment, team-wide (tile_moments): the saved mean is within about
 * one rounding of the exact one, and rows with a large offset (1e4 + N(0, 1)) normalize as
 * ((x - mean0) - c) * rstd without the f32 mean's rounding error.
 *
 * Overflow: when m2 is not finite - a finite row whose f32 sum or sum of squares overflows
 * (|x| ~ 1e37, or a spread of ~1e19), or a row with an Inf or NaN - the held values are
 * scaled in place by 2^-80 and the moments recomputed; `unscale` = 2^80 takes them
 * back, the variance as (m2 / denom) * 2^160, which overflows to Inf only when the variance
 * is beyond f32 (rstd 0, y = beta, as the f64 reference). A row with an Inf or NaN stays NaN
 * (Inf - Inf), as PyTorch. The common path costs one uniform branch (a warp vote for
 * sub-warp groups; groups that were fine recompute the same bits, so a row's result never
 * depends on its neighbours).
 */
template <Norm N, bool kExact, int VEC, int NPACK, class Team, class G>
__device__ __forceinline__ TileStats tile_stats(float (&v)[NPACK][VEC], const G& g,
                                                const Team& team, float denom) {
    TileStats st{1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float m2, m2lo;
    for (;;) {
        tile_moments<N, kExact, VEC, NPACK>(v, g, team, st.mean0, st.c, st.c_lo, m2, m2lo);
        const bool over = st.unscale == 1.0f && !isfinite(m2);
        if (!team.any(over)) break;
        if (over) {
            st.unscale = kStatsUp;
#pragma unroll
            for (int k = 0; k < NPACK; ++k)
#pragma unroll
                for (int i = 0; i < VEC; ++i) v[k][i] *= kStatsDown;
        }
    }
    if (m2 < 0.0f) m2 = m2lo = 0.0f;  // rounding only; NaN stays NaN
    st.var = m2 / denom;
    if constexpr (kExact) st.var_lo = (fmaf(-st.var, denom, m2) + m2lo) / denom;
    if (st.unscale != 1.0f) {
        st.var = (st.var * kStatsUp) * kStatsUp;
        st.var_lo = isinf(st.var) ? 0.0f : (st.var_lo * kStatsUp) * kStatsUp;
    }
    return st;
}

/**
 * 1 / sqrt(var + eps) as an unevaluated pair rhi + rlo, from the variance pair (vh, vl): rhi
 * = 1 / sqrtf(var + eps), then one Newton step with the residual 1 - (var + eps) rhi^2
 * formed exactly (fma), so that rhi + rlo is within ~u32^2 of the exact value (f32 outputs,
 * kExact). rlo is 0 where rhi is 0, Inf or NaN (variance beyond f32, eps = var = 0, NaN rows).
 */
__device__ __forceinline__ void rstd_pair(float vh, float vl, float eps, float& rhi,
                                          float& rlo) {
    float a, ae;
    two_sum(vh, eps, a, ae);
    ae += vl;
    rhi = 1.0f / sqrtf(a);
    const float rr = rhi * rhi;
    float e = fmaf(-a, rr, 1.0f);
    e = fmaf(-a, fmaf(rhi, rhi, -rr), e);
    e = fmaf(-ae, rr, e);
    rlo = 0.5f * rhi * e;
    if (!(fabsf(rlo) <= fabsf(rhi))) rlo = 0.0f;
}

/**
 * The saved rstd of 16-bit activations (their normalization applies `fallback`, the f32
 * 1 / sqrtf(var + eps), whose ~1.5 roundings are far below a 16-bit output's): the hardware's
 * approximate 1 / sqrt(var + eps) refined by one Newton step whose residual 1 - (var + eps)
 * r^2 is formed exactly (fma, with var + eps as an exact pair), so that the saved value is
 * within about half a rounding (an RMSNorm f16 row's was 1.5 ulp off where torch's was 0.6,
 * tests/rms_norm/residual_fixtures.rs); `fallback` where the step cannot apply (var + eps 0,
 * Inf or NaN, or r^2 beyond f32). No IEEE division or square root, and called where registers
 * are free (the warp tiers in lane 0's store branch, the block tier after the tile is stored):
 * beside the tile it spilled the RMSNorm block tier's scalar forward on sm_120.
 */
__device__ __forceinline__ float saved_rstd(float var, float eps, float fallback) {
    float aa, ae;
    two_sum(var, eps, aa, ae);
    const float r = rsqrtf(aa);
    const float rr = r * r;
    float e = fmaf(-aa, rr, 1.0f);
    e = fmaf(-aa, fmaf(r, r, -rr), e);
    e = fmaf(-ae, rr, e);
    const float c = 0.5f * r * e;
    return fabsf(c) <= 0x1p-8f * fabsf(r) ? r + c : fallback;
}

/**
 * Normalizes one pack in place: v = ((v - mean0) - c) * rstd [* gm + bt] (tile_normalize's
 * arithmetic; gm and bt are read only where the parameter is present).
 */
template <bool kExact, int VEC>
__device__ __forceinline__ void normalize_pack(float (&v)[VEC], float mean0, float c, float rstd,
                                               float rlo, bool has_gamma, const float (&gm)[VEC],
                                               bool has_beta, const float (&bt)[VEC]) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        if constexpr (kExact) {
            // y = t (rstd + rlo) g + b, t = (v - mean0) - c, with s = (rstd + rlo) g as
            // the exact pair shi + slo: t * shi is exact inside the last fma, so y sees
            // t's roundings and its own only (where |t| dominates, as for an outlier,
            // c is below t's last bit and t - c is exact).
            const float g1 = has_gamma ? gm[i] : 1.0f;
            const float shi = rstd * g1;
            const float slo = fmaf(rlo, g1, fmaf(rstd, g1, -shi));
            const float t = (v[i] - mean0) - c;
            const float b = has_beta ? bt[i] : 0.0f;
            v[i] = fmaf(t, shi, fmaf(t, slo, b));
        } else {
            float y = ((v[i] - mean0) - c) * rstd;
            if (has_gamma) y *= gm[i];
            if (has_beta) y += bt[i];
            v[i] = y;
        }
    }
}

/**
 * Normalizes the held segment in place: v = ((v - mean0) - c) * rstd [* gamma + beta], with
 * the mean split as mean0 + c (tile_stats). `gamma` and `beta` point at the parameter of the
 * segment's column 0 (null when absent).
 */
template <bool kExact, typename P, int VEC, int NPACK, class G>
__device__ __forceinline__ void tile_normalize(float (&v)[NPACK][VEC], const G& g,
                                               float mean0, float c, float rstd, float rlo,
                                               const P* gamma, const P* beta) {
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
        if (lo >= g.n) continue;
        float gm[VEC], bt[VEC];
        if (gamma != nullptr) {
            param_load<P, VEC>(gamma, lo, g.n, gm, 1.0f);
        }
        if (beta != nullptr) {
            param_load<P, VEC>(beta, lo, g.n, bt, 0.0f);
        }
        normalize_pack<kExact, VEC>(v[k], mean0, c, rstd, rlo, gamma != nullptr, gm,
                                    beta != nullptr, bt);
    }
}

// ------------------------------------------------------------------------------------------
// Forward
// ------------------------------------------------------------------------------------------

/**
 * Statistics and output in the exact form (tile_moments' kExact) for f32 activations: their
 * outputs are within 2 units of roundoff of the f64 result relative to the row's max |y|
 * (tests/layer_norm/accuracy.rs, outlier rows). 16-bit outputs round 2^13 or 2^16 times
 * coarser than the f32 arithmetic's errors and keep the cheaper form.
 */
template <typename T>
constexpr bool kExactOut = sizeof(T) == 4;

/**
 * Saves a row statistic where the caller asked for it: a null `p` (inference, no saved
 * statistics) stores nothing, so the forward moves no mean/rstd bytes.
 */
__device__ __forceinline__ void save_stat(wn_devptr p, int64_t row, float v) {
    if (p != 0) reinterpret_cast<float*>(p)[row] = v;
}

/**
 * The row mean mean0 + c + c_lo as the pair hi + lo (hi = fl(mean)): the saved mean (and the
 * split tier's chunk means), in units of the held values.
 */
__device__ __forceinline__ void mean_pair(const TileStats& st, float& hi, float& lo) {
    two_sum(st.mean0, st.c, hi, lo);
    two_sum(hi, lo + st.c_lo, hi, lo);
}

/** Loads one pack of a segment (columns [lo, lo + VEC), 0 outside [0, n)) as floats. */
template <typename T, int VEC, typename I>
__device__ __forceinline__ void pack_load(const T* base, I lo, I n,
                                          float (&out)[VEC]) {
    if (lo >= 0 && lo + VEC <= n) {
        const Pack<T, VEC> pack = load_pack<T, VEC>(base + lo);
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = to_float(pack.v[i]);
    } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = in_seg(lo + i, n) ? to_float(base[lo + i]) : 0.0f;
    }
}

/**
 * Fused residual add (a.residual set): loads the held segment at element offset `off` of the
 * activations as h instead of x. h = (x + residual) + bias is formed in f32 and rounded once
 * to T (the only rounding: x and residual widen exactly), stored to a.h at the same offset,
 * and held (as floats) in `v`, so that the statistics and the output are those of the stored
 * h. `bias` points at the parameter of the segment's column 0 (null when absent). Columns
 * outside the segment hold 0, as after tile_load.
 *
 * The loads in tile_load's form, in groups of KC packs: every full pack of x and of the
 * residual in a group is issued raw (as tile_load_raw) before any is converted, 2 * KC vector
 * loads in flight per thread; then a pack at a time the two are widened (the packs at the
 * segment's ends element by element under the bound, as tile_convert), h formed, rounded,
 * stored (store_vec) and held. KC == NPACK for the warp tiers (255 registers) and the
 * scalar variant (NPACK / 4 spilled LayerNorm's 16-bit split_stats on sm_100); the vector
 * block tiers (128 registers at 512 threads) take KC == NPACK / 4 (at least 1): with
 * NPACK / 2 the LayerNorm f32 and bf16/f32 block kernels spilled on sm_90 (20 and 32
 * bytes), with NPACK / 4 they use 120 registers. The 16-byte packs of the 16-bit pairs
 * (VEC == 8) take NPACK / 2: 64 bytes in flight per thread instead of 32 on sm_90, no spill
 * on sm_75/80/90/100/120 (one-file harness; LayerNorm bf16 res_block at 128 registers on
 * sm_90). The 8-byte packs of the mixed pairs (16-bit activations, f32 parameters) take
 * NPACK / 2 too, held as 32-bit words (vec.cuh's Held; as packs, nvcc split each into halves
 * right at its load, which then waited for the data): the bf16/f32 and f16/f32 res_block
 * and res_split_stats kernels went from 32 to 80-84 bytes in flight per thread on sm_90.
 */
template <typename T, typename P, int VEC, int NPACK, int KC, class G>
__device__ __forceinline__ void load_residual(const WnLayerNormFwdArgs& a, int64_t off,
                                              const P* bias, const G& g,
                                              float (&v)[NPACK][VEC]) {
    static_assert(KC >= 1 && NPACK % KC == 0, "whole groups of packs");
    const T* xp = reinterpret_cast<const T*>(a.x) + off;
    const T* res = reinterpret_cast<const T*>(a.residual) + off;
    T* hp = reinterpret_cast<T*>(a.h) + off;
#pragma unroll
    for (int k0 = 0; k0 < NPACK; k0 += KC) {
        // The mixed pairs' 8-byte packs as 32-bit words (Held), others as packs.
        constexpr bool kWords8 = sizeof(T) == 2 && VEC * sizeof(T) == 8;
        Held<T, VEC> hx[kWords8 ? KC : 1], hr[kWords8 ? KC : 1];
        Pack<T, VEC> rx[KC], rr[KC];
#pragma unroll
        for (int j = 0; j < KC; ++j) {
            if (full_pack<VEC>(g, k0 + j)) {
                if constexpr (kWords8) {
                    hx[j].load(xp + g.template lo<VEC>(k0 + j));
                    hr[j].load(res + g.template lo<VEC>(k0 + j));
                } else {
                    rx[j] = load_pack<T, VEC>(xp + g.template lo<VEC>(k0 + j));
                    rr[j] = load_pack<T, VEC>(res + g.template lo<VEC>(k0 + j));
                }
            }
        }
#pragma unroll
        for (int j = 0; j < KC; ++j) {
            const int k = k0 + j;
            const auto lo = g.template lo<VEC>(k);
            if (lo >= g.n) {
#pragma unroll
                for (int i = 0; i < VEC; ++i) v[k][i] = 0.0f;
                continue;
            }
            const bool full = full_pack<VEC>(g, k);
            float b[VEC];
            if (bias != nullptr) param_load<P, VEC>(bias, lo, g.n, b, 0.0f);
            Pack<T, VEC> pack;
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                const bool in = full || in_seg(lo + i, g.n);
                float h;
                if (full && kWords8) {
                    h = to_float(hx[j].pack().v[i]) + to_float(hr[j].pack().v[i]);
                } else if (full) {
                    h = to_float(rx[j].v[i]) + to_float(rr[j].v[i]);
                } else {
                    h = in ? to_float(xp[lo + i]) + to_float(res[lo + i]) : 0.0f;
                }
                if (bias != nullptr) h += b[i];
                pack.v[i] = from_float<T>(h);
                v[k][i] = in ? to_float(pack.v[i]) : 0.0f;
            }
            if (full) {
                store_vec<T, VEC>(hp + lo, pack);
            } else {
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    if (in_seg(lo + i, g.n)) hp[lo + i] = pack.v[i];
                }
            }
        }
    }
}

/** True for the subwarp / warp tiers' team. */
template <class Team>
constexpr bool kIsGroupTeam = false;
template <>
constexpr bool kIsGroupTeam<GroupTeam> = true;

/** load_residual's packs per load group for a team (see there). */
template <class Team, typename T, int VEC, int NPACK>
constexpr int kResGroup = !kIsBlockTeam<Team> || VEC == 1                       ? NPACK
                          : sizeof(T) == 2 && VEC * sizeof(T) >= 8 && NPACK % 2 == 0 ? NPACK / 2
                          : NPACK % 4 == 0             ? NPACK / 4
                                                       : 1;

/**
 * How a forward body gets its row: kPlain reads x; kFused forms h = x + residual (+ bias)
 * (load_residual; the `..._res_<tier>_vec` entry points); kRuntime chooses by a.residual at
 * run time (the plain scalar entry points, which thereby serve the fused residual add for
 * views whose addresses are not congruent mod the access width: one entry point instead of
 * two for that rare path; the vector variants keep their own, as a runtime branch cost the
 * plain vector kernels registers and issue slots in the performance model's reading; the
 * scalar split_stats keeps a fused entry point too, as its runtime branch spilled on sm_100).
 */
enum ResMode : int { kPlain = 0, kFused = 1, kRuntime = 2 };

/** Fills `v` with the row segment at element offset `off`: x, or h (load_residual). */
template <int kRes, class Team, typename T, typename P, int VEC, int NPACK, class G>
__device__ __forceinline__ void fwd_load(const WnLayerNormFwdArgs& a, int64_t off,
                                         const P* bias, const G& g,
                                         float (&v)[NPACK][VEC]) {
    constexpr int KC = kResGroup<Team, T, VEC, NPACK>;
    if constexpr (kRes == kFused) {
        load_residual<T, P, VEC, NPACK, KC>(a, off, bias, g, v);
    } else if constexpr (kRes == kRuntime) {
        if (a.residual != 0) {  // uniform
            load_residual<T, P, VEC, NPACK, KC>(a, off, bias, g, v);
        } else {
            tile_load<T, VEC, NPACK>(reinterpret_cast<const T*>(a.x) + off, g, v);
        }
    } else {
        tile_load<T, VEC, NPACK>(reinterpret_cast<const T*>(a.x) + off, g, v);
    }
}

/**
 * One full row held by a team: statistics, saved mean/rstd (when given), normalized output
 * (of h = x + residual (+ bias), stored first, when a.residual is set).
 */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kRes, class Team>
__device__ __forceinline__ void fwd_row(const WnLayerNormFwdArgs& a, int64_t row, bool active,
                                        const Team& team, int t, int team_size) {
    const int64_t off = row * a.cols;
    const T* xr = reinterpret_cast<const T*>(a.x) + off;
    const TileGeom g{active ? static_cast<int>(a.cols) : 0, head_offset<T, VEC>(xr), t, team_size};
    float v[NPACK][VEC];
    fwd_load<kRes, Team, T, P, VEC, NPACK>(a, off, reinterpret_cast<const P*>(a.bias), g, v);
    constexpr bool kExact = kExactOut<T>;
    const TileStats st =
        tile_stats<N, kExact, VEC, NPACK>(v, g, team, static_cast<float>(a.cols));
    if (!active) return;
    float rstd, rlo = 0.0f;
    if constexpr (kExact) {
        rstd_pair(st.var, st.var_lo, a.eps, rstd, rlo);
    } else {
        rstd = invstd_of(st.var, a.eps);
    }
    if (t == 0) {
        float hi, lo;
        mean_pair(st, hi, lo);
        save_stat(a.mean, row, hi * st.unscale);
        save_stat(a.mean_lo, row, lo * st.unscale);
        if constexpr (kExact) {
            save_stat(a.rstd, row, rstd + rlo);
        } else if constexpr (!kIsBlockTeam<Team>) {
            save_stat(a.rstd, row, saved_rstd(st.var, a.eps, rstd));
        }
    }
    tile_normalize<kExact, P, VEC, NPACK>(v, g, st.mean0, st.c, rstd * st.unscale,
                                          rlo * st.unscale, reinterpret_cast<const P*>(a.gamma),
                                          reinterpret_cast<const P*>(a.beta));
    tile_store<T, VEC, NPACK>(reinterpret_cast<T*>(a.y) + off, g, v);
    if constexpr (!kExact && kIsBlockTeam<Team>) {
        if (t == 0) save_stat(a.rstd, row, saved_rstd(st.var, a.eps, rstd));
    }
}

/**
 * subwarp / warp tiers: groups of a.group lanes per row, grid-stride over rows. kRes: the
 * fused residual add's variant (entry points `..._res_<tier>_...`).
 */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kRes = kPlain>
__device__ __forceinline__ void fwd_warp(const WnLayerNormFwdArgs& a) {
    const int g = static_cast<int>(a.group);
    const int lane = threadIdx.x & 31;
    const int64_t per_block = blockDim.x / g;
    const int64_t per_warp = 32 / g;
    const GroupTeam team{g};
    // The loop bound is warp-uniform so that every lane takes part in every shuffle.
    for (int64_t base = blockIdx.x * per_block + (threadIdx.x >> 5) * per_warp; base < a.rows;
         base += static_cast<int64_t>(gridDim.x) * per_block) {
        const int64_t row = base + lane / g;
        fwd_row<N, T, P, VEC, NPACK, kRes>(a, row, row < a.rows, team, lane & (g - 1), g);
    }
}

/** block tier: one row per block, grid-stride over rows (kRes: as fwd_warp). */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kRes = kPlain>
__device__ __forceinline__ void fwd_block(const WnLayerNormFwdArgs& a) {
    __shared__ float scratch[64];
    const BlockTeam team{scratch};
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        fwd_row<N, T, P, VEC, NPACK, kRes>(a, row, true, team, threadIdx.x, blockDim.x);
    }
}

/** Columns of chunk `c` in a row of `cols` (the last chunk may be short). */
__device__ __forceinline__ int64_t chunk_len(int64_t c, int64_t chunk, int64_t cols) {
    const int64_t rest = cols - c * chunk;
    return rest < chunk ? rest : chunk;
}

/**
 * split tier, pass 1: statistics of chunk blockIdx.y of each row (tile_stats), stored as the
 * float4 (mean hi, mean lo, m2 / D, its lo part): the chunk mean as an unevaluated pair, and the chunk's
 * share of the row variance (finite whenever the row variance is). kRes: the fused residual
 * add's variant, which stores h (split_norm, the plain kernel, then normalizes it: the
 * planner passes h as its x).
 */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kRes = kPlain>
__device__ __forceinline__ void fwd_split_stats(const WnLayerNormFwdArgs& a) {
    __shared__ float scratch[64];
    const BlockTeam team{scratch};
    const int64_t c = blockIdx.y;
    const int64_t n = chunk_len(c, a.chunk, a.cols);
    float4* part = reinterpret_cast<float4*>(a.partials);
    const P* bias = a.bias ? reinterpret_cast<const P*>(a.bias) + c * a.chunk : nullptr;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const int64_t off = row * a.cols + c * a.chunk;
        const T* xs = reinterpret_cast<const T*>(a.x) + off;
        const TileGeom64 g{n, head_offset<T, VEC>(xs), static_cast<int>(threadIdx.x),
                         static_cast<int>(blockDim.x)};
        float v[NPACK][VEC];
        // Fused residual add: this pass stores h, split_norm reads it back.
        fwd_load<kRes, BlockTeam, T, P, VEC, NPACK>(a, off, bias, g, v);
        const TileStats st =
            tile_stats<N, kExactOut<T>, VEC, NPACK>(v, g, team, static_cast<float>(a.cols));
        if (threadIdx.x == 0) {
            float hi, lo;
            mean_pair(st, hi, lo);
            part[row * a.splits + c] =
                make_float4(hi * st.unscale, lo * st.unscale, st.var, st.var_lo);
        }
    }
}

/**
 * Merges a row's chunk partials (fwd_split_stats) in chunk order with welford.cuh's
 * chan_merge_all (compensated chunk means; weights n_j / D): the mean as the pair (mh, ml)
 * in half units, and the variance. kExact: the variance as the pair var + var_lo, the chunks'
 * m2 pairs summed with TwoSum (their between-chunk terms, small beside them, plainly).
 */
template <bool kExact>
__device__ __forceinline__ void merge_chunks(const float4* part, int64_t splits, int64_t chunk,
                                             int64_t cols, float& mh, float& ml, float& var,
                                             float& var_lo) {
    // Every chunk but the last has `chunk` columns.
    const float n = static_cast<float>(cols);
    const float w_full = static_cast<float>(chunk) / n;
    const float w_last = static_cast<float>(chunk_len(splits - 1, chunk, cols)) / n;
    const auto weight = [&](int64_t j) { return j + 1 < splits ? w_full : w_last; };
    chan_merge_all(
        splits, [&](int64_t j) { return part[j]; }, weight, mh, ml, var);
    var_lo = 0.0f;
    if constexpr (kExact) {
        float vh = 0.0f, vl = 0.0f, between = 0.0f;
#pragma unroll 1
        for (int64_t j = 0; j < splits; ++j) {
            const float4 pj = part[j];
            const float dm = pair_sub(0.5f * pj.x, 0.5f * pj.y, mh, ml);
            comp_add(vh, vl, pj.z);
            vl += pj.w;
            between = fmaf(4.0f * weight(j) * dm, dm, between);
        }
        // A variance beyond f32 (Inf: rstd 0) or NaN keeps chan_merge_all's value.
        if (isfinite(var)) two_sum(vh, vl + between, var, var_lo);
    }
}

/**
 * split tier, pass 2: merge the row's chunk statistics in a fixed order, normalize a chunk
 * (of x; for the fused residual add the planner passes h, as split_stats stored it, as x).
 */
template <Norm N, typename T, typename P, int VEC, int NPACK>
__device__ __forceinline__ void fwd_split_norm(const WnLayerNormFwdArgs& a) {
    const int64_t c = blockIdx.y;
    const int64_t n = chunk_len(c, a.chunk, a.cols);
    const float4* part = reinterpret_cast<const float4*>(a.partials);
    const P* gamma = a.gamma ? reinterpret_cast<const P*>(a.gamma) + c * a.chunk : nullptr;
    const P* beta = a.beta ? reinterpret_cast<const P*>(a.beta) + c * a.chunk : nullptr;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        // Every thread merges the same partials in the same order: identical bits.
        constexpr bool kExact = kExactOut<T>;
        float mh, ml, var, var_lo;
        merge_chunks<kExact>(part + row * a.splits, a.splits, a.chunk, a.cols, mh, ml, var,
                             var_lo);
        float rstd, rlo = 0.0f;
        if constexpr (kExact) {
            rstd_pair(var, var_lo, a.eps, rstd, rlo);
        } else {
            rstd = invstd_of(var, a.eps);
        }
        if (c == 0 && threadIdx.x == 0) {
            // The saved pair normalized: mean = fl(mean), as the other tiers save it.
            float hi, lo;
            two_sum(2.0f * mh, 2.0f * ml, hi, lo);
            save_stat(a.mean, row, hi);
            save_stat(a.mean_lo, row, lo);
            save_stat(a.rstd, row, kExact ? rstd + rlo : saved_rstd(var, a.eps, rstd));
        }
        const int64_t off = row * a.cols + c * a.chunk;
        const T* xs = reinterpret_cast<const T*>(a.x) + off;
        const TileGeom64 g{n, head_offset<T, VEC>(xs), static_cast<int>(threadIdx.x),
                         static_cast<int>(blockDim.x)};
        float v[NPACK][VEC];
        tile_load<T, VEC, NPACK>(xs, g, v);
        // rstd 0 means a variance beyond f32 of a row without Inf or NaN (those give NaN):
        // y = x * 0 * gamma + beta, without forming x - mean, which may overflow.
        const bool zero = rstd == 0.0f;
        const float mean0 = zero ? 0.0f : 2.0f * mh;
        const float corr = zero ? 0.0f : 2.0f * ml;
        tile_normalize<kExact, P, VEC, NPACK>(v, g, mean0, corr, rstd, rlo, gamma, beta);
        tile_store<T, VEC, NPACK>(reinterpret_cast<T*>(a.y) + off, g, v);
    }
}

/**
 * merge_chunks by one warp, for the cooperative split pass: the same formulas (chan_merge_all
 * and the exact variance pair), each lane summing the partials j = lane, lane + 32, ... and
 * the lanes' sums combined by the xor butterfly (warp_allreduce, twosum.cuh's CompCombine for
 * the pair), so that every lane of every warp merging the same partials gets the same bits.
 * The partials sit in shared memory. The sums' order differs from merge_chunks' (32 running
 * sums, then a tree): the same error bounds, not the same bits as the two-launch split tier.
 */
template <bool kExact>
__device__ __forceinline__ void merge_chunks_warp(const float4* part, int64_t splits,
                                                  int64_t chunk, int64_t cols, float& mh,
                                                  float& ml, float& var, float& var_lo) {
    const int lane = static_cast<int>(threadIdx.x & 31);
    const float n = static_cast<float>(cols);
    const float w_full = static_cast<float>(chunk) / n;
    const float w_last = static_cast<float>(chunk_len(splits - 1, chunk, cols)) / n;
    const float4 p0 = part[0];
    const float h0 = 0.5f * p0.x, l0 = 0.5f * p0.y;
    float dsum = 0.0f;
    for (int64_t j = 1 + lane; j < splits; j += 32) {
        const float4 pj = part[j];
        const float w = j + 1 < splits ? w_full : w_last;
        dsum = fmaf(w, pair_sub(0.5f * pj.x, 0.5f * pj.y, h0, l0), dsum);
    }
    dsum = warp_allreduce_sum(dsum);
    float e;
    two_sum(h0, dsum, mh, e);
    two_sum(mh, e + l0, mh, ml);
    float v = 0.0f, vh = 0.0f, vl = 0.0f, between = 0.0f;
    for (int64_t j = lane; j < splits; j += 32) {
        const float4 pj = part[j];
        const float w = j + 1 < splits ? w_full : w_last;
        const float dm = pair_sub(0.5f * pj.x, 0.5f * pj.y, mh, ml);
        v += pj.z;
        v = fmaf(4.0f * w * dm, dm, v);
        if constexpr (kExact) {
            comp_add(vh, vl, pj.z);
            vl += pj.w;
            between = fmaf(4.0f * w * dm, dm, between);
        }
    }
    var = warp_allreduce_sum(v);
    var_lo = 0.0f;
    if constexpr (kExact) {
        warp_allreduce_comp(vh, vl, 32);
        between = warp_allreduce_sum(between);
        // A variance beyond f32 (Inf: rstd 0) or NaN keeps the plain sum, as merge_chunks.
        if (isfinite(var)) two_sum(vh, vl + between, var, var_lo);
    }
}

/**
 * split tier in one cooperative launch (`..._split_coop_vec`, `..._res_split_coop_vec`; the
 * planner's choice where every chunk fits on chip across one wave). The chunks (items
 * i = row * splits + c, as split_stats's) are dealt to the blocks in contiguous runs of
 * `per` = ceil(items / grid). Phase 1, per item: split_stats's body - the chunk loaded (h
 * formed and stored for the fused residual add, kRes), its statistics to the workspace - with
 * the loaded chunk also kept in dynamic shared memory as T (exact: the held floats came from
 * T; pack k of thread t at [k][t], conflict-free). A grid barrier (arrival.cuh). Phase 2, per
 * item: the row's partials loaded once per row by the block's threads (relaxed loads: other
 * blocks wrote them) into shared memory after the held chunks, merged by warp 0
 * (merge_chunks_warp), which saves the statistics (in the block holding the row's chunk 0)
 * and shares the normalization through shared memory; the chunk normalized pack by pack from
 * its held copy and y stored, each group of kCoopGroup packs' parameters loaded before any is
 * used (one pack at a time, as tile_normalize, left a thread 16-32 bytes in flight in a loop
 * that reads nothing else). x is read once, where the two-launch split tier reads it twice.
 * A block that found the barrier's counts not zeroed (or gave up waiting) merges NaN
 * partials: its rows come out NaN, visibly. Dynamic shared memory: per * blockDim.x * NPACK
 * packs, then splits float4.
 */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kRes = kPlain>
__device__ __forceinline__ void fwd_split_coop(const WnLayerNormFwdArgs& a) {
    extern __shared__ __align__(16) unsigned char coop_smem[];
    __shared__ float scratch[64];
    const BlockTeam team{scratch};
    using Pk = Pack<T, VEC>;
    Pk* held = reinterpret_cast<Pk*>(coop_smem);
    const int t = static_cast<int>(threadIdx.x);
    const int nt = static_cast<int>(blockDim.x);
    const int64_t items = a.rows * a.splits;
    // Items per block (the planner keeps them few: they share the block's shared memory).
    const int per = static_cast<int>((items + gridDim.x - 1) / gridDim.x);
    const int64_t i0 = static_cast<int64_t>(blockIdx.x) * per;
    const int count = static_cast<int>(max(min(items - i0, static_cast<int64_t>(per)), int64_t{0}));
    float4* part = reinterpret_cast<float4*>(a.partials);
    float4* sp = reinterpret_cast<float4*>(held + (per * NPACK) * nt);
    for (int s = 0; s < count; ++s) {
        const int64_t i = i0 + s;
        const int64_t row = i / a.splits;
        const int64_t c = i - row * a.splits;
        const int64_t off = row * a.cols + c * a.chunk;
        const T* xs = reinterpret_cast<const T*>(a.x) + off;
        const TileGeom64 g{chunk_len(c, a.chunk, a.cols), head_offset<T, VEC>(xs), t, nt};
        const P* bias = a.bias ? reinterpret_cast<const P*>(a.bias) + c * a.chunk : nullptr;
        float v[NPACK][VEC];
        fwd_load<kRes, BlockTeam, T, P, VEC, NPACK>(a, off, bias, g, v);
        Pk* mine = held + (s * NPACK) * nt + t;
#pragma unroll
        for (int k = 0; k < NPACK; ++k) {
            Pk q;
#pragma unroll
            for (int e = 0; e < VEC; ++e) q.v[e] = from_float<T>(v[k][e]);
            mine[k * nt] = q;
        }
        const TileStats st =
            tile_stats<N, kExactOut<T>, VEC, NPACK>(v, g, team, static_cast<float>(a.cols));
        if (t == 0) {
            float hi, lo;
            mean_pair(st, hi, lo);
            part[i] = make_float4(hi * st.unscale, lo * st.unscale, st.var, st.var_lo);
        }
    }
    unsigned left = 0;
    const wn_devptr bar = a.partials - WN_LN_SPLIT_BARRIER_BYTES;
    const bool ok = grid_barrier(bar, gridDim.x, left);
    constexpr bool kExact = kExactOut<T>;
    // Packs whose parameters phase 2 holds in flight at once: RMSNorm's gamma, every pack
    // (8 x 16 bytes per thread at most); LayerNorm's gamma and beta, a tile of 4 packs at once,
    // 2 of 8 (4 of 8 spilled the f32 and bf16/f32 kernels on sm_90).
    constexpr int kCoopGroup = N == Norm::Rms ? NPACK : (NPACK <= 4 ? NPACK : 2);
    static_assert(NPACK % kCoopGroup == 0, "whole groups of packs");
    const P* gamma0 = reinterpret_cast<const P*>(a.gamma);
    const P* beta0 = reinterpret_cast<const P*>(a.beta);
    // The current row's normalization (mean0, corr, rstd, rlo), from warp 0's merge.
    __shared__ float s_norm[4];
    int64_t merged = -1;
    for (int s = 0; s < count; ++s) {
        const int64_t i = i0 + s;
        const int64_t row = i / a.splits;
        const int64_t c = i - row * a.splits;
        if (row != merged) {  // block-uniform
            __syncthreads();  // the previous row's s_norm and partials are read
            // The row's partials as floats, consecutive threads on consecutive floats
            // (coalesced).
            const float* pr = reinterpret_cast<const float*>(part + row * a.splits);
            float* sf = reinterpret_cast<float*>(sp);
            for (int64_t j = t; j < 4 * a.splits; j += nt) {
                sf[j] = ok ? load_relaxed(pr + j) : welford_nan();
            }
            __syncthreads();
            if (t < 32) {
                float mh, ml, var, var_lo;
                merge_chunks_warp<kExact>(sp, a.splits, a.chunk, a.cols, mh, ml, var, var_lo);
                float rstd, rlo = 0.0f;
                if constexpr (kExact) {
                    rstd_pair(var, var_lo, a.eps, rstd, rlo);
                } else {
                    rstd = invstd_of(var, a.eps);
                }
                if (t == 0) {
                    // The block with the row's chunk 0 saves its statistics (split_norm's).
                    if (row * a.splits >= i0) {
                        float hi, lo;
                        two_sum(2.0f * mh, 2.0f * ml, hi, lo);
                        save_stat(a.mean, row, hi);
                        save_stat(a.mean_lo, row, lo);
                        save_stat(a.rstd, row,
                                  kExact ? rstd + rlo : saved_rstd(var, a.eps, rstd));
                    }
                    // rstd 0: a variance beyond f32 of a row without Inf or NaN (split_norm).
                    const bool zero = rstd == 0.0f;
                    s_norm[0] = zero ? 0.0f : 2.0f * mh;
                    s_norm[1] = zero ? 0.0f : 2.0f * ml;
                    s_norm[2] = rstd;
                    s_norm[3] = rlo;
                }
            }
            __syncthreads();
            merged = row;
        }
        const int64_t off = row * a.cols + c * a.chunk;
        const TileGeom64 g{chunk_len(c, a.chunk, a.cols),
                           head_offset<T, VEC>(reinterpret_cast<const T*>(a.x) + off), t, nt};
        const P* gamma = gamma0 ? gamma0 + c * a.chunk : nullptr;
        const P* beta = beta0 ? beta0 + c * a.chunk : nullptr;
        T* y = reinterpret_cast<T*>(a.y) + off;
        const Pk* mine = held + (s * NPACK) * nt + t;
        // The chunk goes pack by pack from shared memory, so the registers hold a group of
        // packs' parameters in flight (issued before any is converted) rather than the tile.
#pragma unroll 1
        for (int k0 = 0; k0 < NPACK; k0 += kCoopGroup) {
            Held<P, VEC> rg[kCoopGroup], rb[kCoopGroup];
            param_load_raw<P, VEC, kCoopGroup>(gamma, g, k0, rg);
            param_load_raw<P, VEC, kCoopGroup>(beta, g, k0, rb);
#pragma unroll
            for (int j = 0; j < kCoopGroup; ++j) {
                const int64_t lo = g.template lo<VEC>(k0 + j);
                if (lo >= g.n) continue;
                const Pk q = mine[(k0 + j) * nt];
                float v[VEC], gm[VEC], bt[VEC];
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[e] = to_float(q.v[e]);
                if (gamma != nullptr) param_convert<P, VEC>(gamma, lo, g.n, rg[j], gm, 1.0f);
                if (beta != nullptr) param_convert<P, VEC>(beta, lo, g.n, rb[j], bt, 0.0f);
                normalize_pack<kExact, VEC>(v, s_norm[0], s_norm[1], s_norm[2], s_norm[3],
                                            gamma != nullptr, gm, beta != nullptr, bt);
                pack_store<T, VEC>(y, lo, g.n, v);
            }
        }
    }
    grid_barrier_reset(bar, gridDim.x, left);
}

// ------------------------------------------------------------------------------------------
// Backward: dx = rstd * (g*dy - mean(g*dy) - xhat * mean(g*dy*xhat)),
//           dgamma = sum_rows dy * xhat, dbeta = sum_rows dy,
//           xhat = ((x - mean) - mean_lo) * rstd from the saved statistics (centre_tile).
// Vector variants need x, dy and dx congruent mod the access width. A row's head offset depends only
// on its index mod V' = VEC / gcd(D, VEC), and the planner makes every grid-stride step a
// multiple of V', so each team sees one head: its columns are fixed and dgamma/dbeta
// accumulate in its registers (store_partials then uses each team's own geometry).
// ------------------------------------------------------------------------------------------

/**
 * Whether the accumulators' second sum is dbias (the f32 dx, a.db_dx) instead of dbeta: read
 * from a.db_dx at run time (subwarp, warp and split tiers), or fixed (the block tier: its
 * `block` entry points never, `block_dbias` always - the runtime predicate spilled its
 * f32-parameter kernels on sm_100, which sit at their 128-register bound).
 */
enum DbMode : int { kDbOff = 0, kDbOn = 1, kDbRuntime = 2 };

/**
 * Per-thread accumulators of dgamma and dbeta for the thread's columns. With a.db_dx (the
 * fused residual add's bias gradient) `db` sums dx instead of dy - the f32 gradient of h
 * before its rounding, dh included (acc_dx) - and is written where dbeta's would be.
 */
template <int VEC, int NPACK>
struct ParamGrads {
    static constexpr bool kSlots = false;
    float dg[NPACK][VEC];
    float db[NPACK][VEC];
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int k = 0; k < NPACK; ++k)
#pragma unroll
            for (int i = 0; i < VEC; ++i) dg[k][i] = db[k][i] = 0.0f;
    }
    /**
     * Applies `f(dg, db)` to pack k's accumulators in place (SlotGrads' interface; `dg_on` and
     * `db_on` say which of them f changes, which only SlotGrads needs).
     */
    template <class F>
    __device__ __forceinline__ void update(int k, bool, bool, F&& f) {
        f(dg[k], db[k]);
    }
};

/**
 * A row's saved statistics as the backward reads them: rstd, and for LayerNorm the mean as
 * the forward's pair (mean, mean_lo); a.mean_lo 0 reads as zeros.
 */
struct RowStats {
    float rstd;
    float mean;
    float mean_lo;
};

template <Norm N>
__device__ __forceinline__ RowStats row_stats(const WnLayerNormBwdArgs& a, int64_t row,
                                              bool active) {
    RowStats r{0.0f, 0.0f, 0.0f};
    if (!active) return r;
    r.rstd = reinterpret_cast<const float*>(a.rstd)[row];
    if constexpr (N == Norm::Layer) {
        r.mean = reinterpret_cast<const float*>(a.mean)[row];
        if (a.mean_lo != 0) r.mean_lo = reinterpret_cast<const float*>(a.mean_lo)[row];
    }
    return r;
}

/**
 * LayerNorm: re-centres the held segment of x in place on the saved mean pair,
 * x = (x - mean) - mean_lo, before the row sums and dx, which then take xhat = x * rstd (as
 * RMSNorm's uncentred x). x - mean is exact where x is within a factor 2 of the mean (rows
 * with a large offset), so xhat there is as accurate as the forward's, not off by
 * u32 |mean| rstd. One pass, so that mean and mean_lo are dead before the row sums and dx
 * (no more instructions per element than x - mean in each of them: the same two FADDs).
 */
template <Norm N, int VEC, int NPACK>
__device__ __forceinline__ void centre_tile(float (&x)[NPACK][VEC], const RowStats& rs) {
    if constexpr (N == Norm::Layer) {
        // Every held value, unpredicated: those outside the segment are never read as x
        // (the sums and dx test in_seg) nor stored (tile_store is predicated), and the
        // predicates cost the 128-register kernels a spill on sm_100.
#pragma unroll
        for (int k = 0; k < NPACK; ++k)
#pragma unroll
            for (int i = 0; i < VEC; ++i) x[k][i] = (x[k][i] - rs.mean) - rs.mean_lo;
    }
}

/**
 * Local (this thread's) sums of g*dy and g*dy*xhat over the held segment, xhat =
 * (x - mean) * rstd: `mean` 0 where x was re-centred (centre_tile), the f32 mean in the split
 * tier's first pass (which applies mean_lo to the sums afterwards).
 */
template <Norm N, typename P, int VEC, int NPACK, class G>
__device__ __forceinline__ void bwd_local_sums(const float (&x)[NPACK][VEC],
                                               const float (&dy)[NPACK][VEC], const G& g,
                                               float mean, float rstd, const P* gamma, float& sa,
                                               float& sb) {
    sa = 0.0f;
    sb = 0.0f;
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
        if (lo >= g.n) continue;
        float gm[VEC];
        if (gamma != nullptr) param_load<P, VEC>(gamma, lo, g.n, gm, 0.0f);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            if (in_seg(lo + i, g.n)) {
                const float xhat = (x[k][i] - mean) * rstd;
                const float gdy = gamma != nullptr ? dy[k][i] * gm[i] : dy[k][i];
                if constexpr (N == Norm::Layer) sa += gdy;  // RMSNorm: no mean term
                sb = fmaf(gdy, xhat, sb);
            }
        }
    }
}

/**
 * LayerNorm's bias-gradient block kernels: the column sums of dy (dbeta) in thread-private
 * shared-memory slots, since the second accumulators hold dbias and a third set of registers
 * would spill those kernels (at the 128-register bound on sm_100). Element e = k * VEC + i of
 * the thread's packs lives at float `(e / 4) * 4 * WN_LN_MAX_BLOCK + e % 4` after `base` =
 * smem + 4 * (thread index in the block): slot e / 4 of every thread is one 16-byte-strided
 * array, so a warp's 16-byte accesses are conflict-free, and every offset is a compile-time
 * constant. No barrier: no other thread touches the slots until dy_sums_take. Values outside
 * the segment are the loaders' zeros, and their slots are never written out.
 */
constexpr int kDySlotStride = 4 * WN_LN_MAX_BLOCK;

template <int VEC>
__device__ __forceinline__ void add_dy_sums(float* base, int k, const float (&dy)[VEC]) {
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int q = 0; q < VEC / 4; ++q) {
            float4* s = reinterpret_cast<float4*>(base + (k * (VEC / 4) + q) * kDySlotStride);
            float4 v = *s;
            v.x += dy[4 * q];
            v.y += dy[4 * q + 1];
            v.z += dy[4 * q + 2];
            v.w += dy[4 * q + 3];
            *s = v;
        }
    } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const int e = k * VEC + i;
            base[(e / 4) * kDySlotStride + e % 4] += dy[i];
        }
    }
}

/** Zeroes this thread's dy-sum slots (add_dy_sums' layout). */
template <int VEC, int NPACK>
__device__ __forceinline__ void dy_sums_zero(float* base) {
    static_assert((VEC * NPACK) % 4 == 0, "dy-sum slots are 16 bytes");
#pragma unroll
    for (int q = 0; q < VEC * NPACK / 4; ++q) {
        *reinterpret_cast<float4*>(base + q * kDySlotStride) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

/** Reads this thread's dy sums back into registers (then a barrier may reuse the memory). */
template <int VEC, int NPACK>
__device__ __forceinline__ void dy_sums_take(const float* base, float (&out)[NPACK][VEC]) {
#pragma unroll
    for (int k = 0; k < NPACK; ++k)
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const int e = k * VEC + i;
            out[k][i] = base[(e / 4) * kDySlotStride + e % 4];
        }
}

/**
 * The wide block tier's accumulators (bwd_wide): dgamma (array 0) and the second sums (array
 * 1: dbeta, or the bias gradient) in thread-private shared-memory slots, add_dy_sums' layout,
 * `kArrays` arrays of NPACK * VEC floats for each of WN_LN_MAX_BLOCK threads (the planner's
 * `wide_shared_bytes`), so that a thread's registers hold only the row it works on: twice the
 * block tier's columns per thread. `update` reads a pack's 16-byte slots, applies the same
 * adds as the registers' ParamGrads, in the same order, and writes them back; no barrier (no
 * other thread touches the slots until bwd_wide reads them back, dy_sums_take).
 */
template <int VEC, int NPACK, int kArrays>
struct SlotGrads {
    static_assert(VEC % 4 == 0, "slot packs are whole 16-byte slots");
    static constexpr bool kSlots = true;
    /** Floats of one array (its slots for every thread of the block). */
    static constexpr int kArray = NPACK * VEC * WN_LN_MAX_BLOCK;
    float* base;  // the block's shared memory + 4 * (thread index)
    __device__ __forceinline__ float* array(int q) const { return base + q * kArray; }
    /** Pack k's slots as pack 0 (for one-pack calls: bwd_row_wide). */
    __device__ __forceinline__ SlotGrads at(int k) const {
        return SlotGrads{base + k * (VEC / 4) * kDySlotStride};
    }
    __device__ __forceinline__ void zero() const {
#pragma unroll
        for (int q = 0; q < kArrays; ++q) dy_sums_zero<VEC, NPACK>(array(q));
    }
    __device__ __forceinline__ static float4* slot(float* arr, int k, int q) {
        return reinterpret_cast<float4*>(arr + (k * (VEC / 4) + q) * kDySlotStride);
    }
    __device__ __forceinline__ static void get(float* arr, int k, float (&v)[VEC]) {
#pragma unroll
        for (int q = 0; q < VEC / 4; ++q) {
            const float4 s = *slot(arr, k, q);
            v[4 * q] = s.x;
            v[4 * q + 1] = s.y;
            v[4 * q + 2] = s.z;
            v[4 * q + 3] = s.w;
        }
    }
    __device__ __forceinline__ static void put(float* arr, int k, const float (&v)[VEC]) {
#pragma unroll
        for (int q = 0; q < VEC / 4; ++q) {
            *slot(arr, k, q) = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
        }
    }
    template <class F>
    __device__ __forceinline__ void update(int k, bool dg_on, bool db_on, F&& f) const {
        float dg[VEC] = {}, db[VEC] = {};
        if (dg_on) get(array(0), k, dg);
        if (db_on) get(array(1), k, db);
        f(dg, db);
        if (dg_on) put(array(0), k, dg);
        if (db_on) put(array(1), k, db);
    }
};

/**
 * dx of the held segment (written over `x`), given the row means c1 = mean(g*dy) and
 * c2 = mean(g*dy*xhat); accumulates dgamma/dbeta into `acc`.
 */
template <Norm N, typename P, int VEC, int NPACK, class G, class Acc>
__device__ __forceinline__ void bwd_dx(float (&x)[NPACK][VEC], const float (&dy)[NPACK][VEC],
                                       const G& g, float rstd, float c1, float c2,
                                       const P* gamma, bool db_dx, bool db_here, Acc& acc,
                                       float* ysum = nullptr) {
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
        if (lo >= g.n) continue;
        if (ysum != nullptr) add_dy_sums<VEC>(ysum, k, dy[k]);  // dbeta beside dbias
        float gm[VEC];
        if (gamma != nullptr) param_load<P, VEC>(gamma, lo, g.n, gm, 0.0f);
        // db_dx: db sums dx (here with db_here, else after dh is added: bwd_row) and dbeta is
        // the planner's or ysum's; else LayerNorm's dbeta (RMSNorm has none), in ysum where
        // the kernel sums it in shared memory (kDbInSlots).
        const bool db_dy = N == Norm::Layer && !db_dx && ysum == nullptr;
        acc.update(k, true, db_dy || db_here, [&](float (&dg)[VEC], float (&db)[VEC]) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                if (in_seg(lo + i, g.n)) {
                    const float xhat = x[k][i] * rstd;  // x re-centred (centre_tile)
                    const float gdy = gamma != nullptr ? dy[k][i] * gm[i] : dy[k][i];
                    dg[i] = fmaf(dy[k][i], xhat, dg[i]);
                    const float d = (gdy - fmaf(xhat, c2, c1)) * rstd;
                    if (db_dy) db[i] += dy[k][i];
                    if (db_here) db[i] += d;  // dh's share, if any, in store_dx
                    x[k][i] = d;
                }
            }
        });
    }
}

/**
 * The bias gradient (a.db_dx): adds the segment's f32 dx held in `v` (dh included) to the db
 * accumulators.
 */
template <int VEC, int NPACK, class G>
__device__ __forceinline__ void acc_dx(ParamGrads<VEC, NPACK>& acc, const G& g,
                                       const float (&v)[NPACK][VEC]) {
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            if (in_seg(lo + i, g.n)) acc.db[k][i] += v[k][i];
        }
    }
}

/**
 * Fused residual add, backward (a.dh set): adds the gradient arriving on h, at element offset
 * `off`, to the segment's dx held in `v` (f32, before dx's one rounding). A pack at a time.
 */
template <typename T, int VEC, int NPACK, class G>
__device__ __forceinline__ void add_dh(const WnLayerNormBwdArgs& a, int64_t off,
                                       const G& g, float (&v)[NPACK][VEC]) {
    const T* dh = reinterpret_cast<const T*>(a.dh) + off;
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
        if (lo >= g.n) continue;
        float d[VEC];
        pack_load<T, VEC>(dh, lo, g.n, d);  // 0 outside the segment
#pragma unroll
        for (int i = 0; i < VEC; ++i) v[k][i] += d[i];
    }
}

/**
 * add_dh (when a.dh is set, uniform) and then the bias gradient's sum of the segment's f32 dx
 * in one pass (RMSNorm's block tier, a.db_dx): into acc.db, or with `slots` into those
 * shared-memory slots (add_dy_sums; the whole pack: columns outside the segment hold 0, the
 * loaders' zeros plus dh's, and are never written out).
 */
template <typename T, int VEC, int NPACK, class G, class Acc>
__device__ __forceinline__ void add_dh_acc(const WnLayerNormBwdArgs& a, int64_t off,
                                           const G& g, float (&v)[NPACK][VEC], Acc& acc,
                                           float* slots = nullptr) {
    const T* dh = reinterpret_cast<const T*>(a.dh) + off;
    const bool has_dh = a.dh != 0;
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
        if (lo >= g.n) continue;
        float d[VEC];
        if (has_dh) {
            pack_load<T, VEC>(dh, lo, g.n, d);  // 0 outside the segment
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) d[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            v[k][i] += d[i];
            if constexpr (!Acc::kSlots) {  // (SlotGrads: `slots` is its db array)
                if (slots == nullptr && in_seg(lo + i, g.n)) acc.db[k][i] += v[k][i];
            }
        }
        if (slots != nullptr) add_dy_sums<VEC>(slots, k, v[k]);
    }
}

/**
 * Rounds and stores the segment's dx held in `v` at element offset `off` (tile_store), with
 * the fused residual add's gradient arriving on h (a.dh set: a uniform branch) added in f32
 * before the one rounding, a pack at a time: each dh pack is loaded just before its dx pack
 * is stored, so that no dh tile is held (the 16-bit warp backward sits at its 128-register
 * bound).
 */
template <Norm N, typename T, int VEC, int NPACK, class G>
__device__ __forceinline__ void store_dx(const WnLayerNormBwdArgs& a, int64_t off,
                                         const G& g, const float (&v)[NPACK][VEC],
                                         ParamGrads<VEC, NPACK>& acc) {
    T* dx = reinterpret_cast<T*>(a.dx) + off;
    const bool db_dx = a.db_dx != 0;  // uniform: the bias gradient sums the f32 dx
    if (a.dh == 0) {
        if (N == Norm::Layer && db_dx) acc_dx<VEC, NPACK>(acc, g, v);
        tile_store<T, VEC, NPACK>(dx, g, v);
        return;
    }
    // dx's addresses from dh's plus one uniform byte distance (from the kernel parameters), so
    // that the loop holds one pointer: with two the 16-bit warp backward spilled on sm_100.
    const T* dh = reinterpret_cast<const T*>(a.dh) + off;
    const int64_t dist = static_cast<int64_t>(a.dx) - static_cast<int64_t>(a.dh);
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
        const T* hp = dh + lo;
        T* xp = reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(hp) + dist);
        if (lo >= 0 && lo + VEC <= g.n) {
            const Pack<T, VEC> d = load_pack<T, VEC>(hp);
            Pack<T, VEC> pack;
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                const float h = to_float(d.v[i]), t = v[k][i] + h;
                if (db_dx) acc.db[k][i] += N == Norm::Layer ? t : h;
                pack.v[i] = from_float<T>(t);
            }
            store_vec<T, VEC>(xp, pack);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                if (in_seg(lo + i, g.n)) {
                    const float h = to_float(hp[i]), t = v[k][i] + h;
                    if (db_dx) acc.db[k][i] += N == Norm::Layer ? t : h;
                    xp[i] = from_float<T>(t);
                }
            }
        }
    }
}

/**
 * Head offset (elements after the previous VEC * sizeof(T)-byte boundary) of row `row` of x;
 * dy and dx share it (the planner requires the three congruent mod that width). Integer
 * arithmetic only,
 * so that a row past the end (an idle team) is fine. 0 for the scalar variant.
 */
template <typename T, int VEC>
__device__ __forceinline__ int row_head(const WnLayerNormBwdArgs& a, int64_t row) {
    if constexpr (VEC == 1) {
        return 0;
    } else {
        const uint64_t e = a.x / sizeof(T) + static_cast<uint64_t>(row) * a.cols;
        return static_cast<int>(e % VEC);
    }
}

/**
 * Whether bwd_row holds the mixed pairs' 8-byte x and dy packs raw before converting them
 * (tile_load2's kHold8: the row's 64 bytes in flight per thread, not 32-40): everywhere but
 * LayerNorm's bias-gradient block kernels on sm_75 and sm_80, which spilled (24 bytes) at their
 * 128-register bound with them held. (RMSNorm's spilled 8 bytes on sm_90 until their dbias
 * sums moved to shared memory, kDbInSlots; recomputing the head per row did not help.)
 */
template <Norm N, int kDb, class Team>
constexpr bool kHoldPacks =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    !(N == Norm::Layer && kDb == kDbOn && !kIsGroupTeam<Team>);
#else
    true;
#endif

/**
 * One full row held by a team: dx written, dgamma/dbeta accumulated. `off` is the team's
 * head offset, the same for every row it visits (the planner makes the grid-stride step a
 * multiple of the head period, see the header; not re-checked per row here: these kernels
 * are at the 128-register bound on sm_100, and a check costs a spill).
 */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kDb, class Team>
__device__ __forceinline__ void bwd_row(const WnLayerNormBwdArgs& a, int64_t row, bool active,
                                        const Team& team, int t, int team_size, int off,
                                        ParamGrads<VEC, NPACK>& acc, float* ysum = nullptr) {
    const int64_t base = row * a.cols;
    const T* xr = reinterpret_cast<const T*>(a.x) + base;
    const TileGeom64 g{active ? a.cols : 0, off, t, team_size};
    float x[NPACK][VEC], dy[NPACK][VEC];
    tile_load2<T, VEC, NPACK, kHoldPacks<N, kDb, Team>>(xr, reinterpret_cast<const T*>(a.dy) + base,
                                                        g, x, dy);
    const RowStats rs = row_stats<N>(a, row, active);
    centre_tile<N, VEC, NPACK>(x, rs);
    const float rstd = rs.rstd;
    const P* gamma = reinterpret_cast<const P*>(a.gamma);
    float sa, sb;
    bwd_local_sums<N, P, VEC, NPACK>(x, dy, g, 0.0f, rstd, gamma, sa, sb);
    team.sum2(sa, sb);
    if (!active) return;
    const float inv_n = 1.0f / static_cast<float>(a.cols);
    const bool db_dx = kDb == kDbRuntime ? a.db_dx != 0 : kDb == kDbOn;
    // Where the bias gradient's sum of the f32 dx is taken (each placement the one that does
    // not spill at the 128-register bound on sm_100): LayerNorm after dh is added (acc_dx,
    // store_dx); RMSNorm's warp tiers in bwd_dx, dh's share in store_dx; RMSNorm's block tier
    // with the dh add (add_dh_acc).
    const bool db_here = N == Norm::Rms && kIsGroupTeam<Team> && db_dx;
    // `ysum`: LayerNorm's dy sums; RMSNorm's (block tier) dbias sums (kDbInSlots).
    bwd_dx<N, P, VEC, NPACK>(x, dy, g, rstd, sa * inv_n, sb * inv_n, gamma, db_dx, db_here,
                             acc, N == Norm::Layer ? ysum : nullptr);
    if constexpr (!kIsGroupTeam<Team>) {
        // The block tier keeps the dh add apart from the store (store_dx's form spilled its
        // f32-parameter kernels on sm_100; this one spills the 16-bit warp kernels there).
        if (N == Norm::Rms && db_dx) {
            // + dh (if any), the bias gradient
            add_dh_acc<T, VEC, NPACK>(a, base, g, x, acc, ysum);
        } else if (a.dh != 0) {
            add_dh<T, VEC, NPACK>(a, base, g, x);  // uniform: fused residual add
        }
        tile_store<T, VEC, NPACK>(reinterpret_cast<T*>(a.dx) + base, g, x);
        if (N == Norm::Layer && db_dx) acc_dx<VEC, NPACK>(acc, g, x);  // the bias gradient
    } else {
        store_dx<N, T, VEC, NPACK>(a, base, g, x, acc);  // + dh, dbias: the fused residual add
    }
}

/**
 * dst[c] = sum over teams o (in order) of smem[o * n + c], c in [0, n), rounded to D; the
 * block's threads store 16-byte vectors aligned to dst's address, per-element accesses only
 * for the (at most two) partial vectors at the ends: fully coalesced.
 */
template <typename D>
__device__ __forceinline__ void store_team_sums(D* dst, int64_t n, int teams, const float* smem) {
    constexpr int W = 16 / sizeof(D);
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int nthreads = blockDim.x * blockDim.y;
    const int h = static_cast<int>((reinterpret_cast<uintptr_t>(dst) / sizeof(D)) % W);
    const int64_t vecs = (n + h + W - 1) / W;
    for (int64_t q = tid; q < vecs; q += nthreads) {
        const int64_t lo = q * W - h;
        Pack<D, W> v;
#pragma unroll
        for (int e = 0; e < W; ++e) {
            float s = 0.0f;
            if (in_seg(lo + e, n)) {
                for (int o = 0; o < teams; ++o) s += smem[o * n + lo + e];
            }
            v.v[e] = from_float<D>(s);
        }
        if (lo >= 0 && lo + W <= n) {
            store_vec16<D, W>(dst + lo, v);
        } else {
#pragma unroll
            for (int e = 0; e < W; ++e) {
                if (in_seg(lo + e, n)) dst[lo + e] = v.v[e];
            }
        }
    }
}

/**
 * Writes one parameter gradient of columns [col0, col0 + g.n): the sums, in team order, of the
 * values `v` of the block's `teams` teams (this thread is in team `team`; `g` is its team's
 * geometry, head included - teams may have different heads, every team covers all g.n
 * columns). Each team writes its values to its own slice of `smem` (teams * g.n floats); after
 * a barrier store_team_sums writes them: as f32 partial row blockIdx.x (stride a.part_stride)
 * of `part_addr` or, for a single-block grid (`out_addr` set), directly as the final values
 * in P. Nothing when both are 0 (block-uniform). Every thread of the block must call it.
 */
template <typename P, int VEC, int NPACK, class G>
__device__ __forceinline__ void store_partial(const WnLayerNormBwdArgs& a, wn_devptr part_addr,
                                              wn_devptr out_addr, const G& g, int team,
                                              int teams, int64_t col0,
                                              const float (&v)[NPACK][VEC], float* smem) {
    float* part = reinterpret_cast<float*>(part_addr);
    P* out = reinterpret_cast<P*>(out_addr);
    if (part == nullptr && out == nullptr) return;  // block-uniform
    float* mine = smem + team * g.n;
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            if (in_seg(lo + i, g.n)) mine[lo + i] = v[k][i];
        }
    }
    __syncthreads();
    if (out != nullptr) {
        store_team_sums<P>(out + col0, g.n, teams, smem);
    } else {
        store_team_sums<float>(part + static_cast<int64_t>(blockIdx.x) * a.part_stride + col0,
                               g.n, teams, smem);
    }
    __syncthreads();
}

/**
 * Writes dgamma and dbeta of columns [col0, col0 + g.n) (the second accumulators: dbias with
 * a.db_dx), as store_partial of acc.dg and acc.db, in the form that LayerNorm's f32-parameter
 * block kernels on sm_100 (at their 128-register bound) compile without a spill (calling
 * store_partial for each spilled them); with `ys` (LayerNorm's bias-gradient block kernels)
 * then the column sums of dy (dbeta there: a.dy_sum_part / a.dy_sum) by store_partial.
 * Every thread of the block must call it.
 */
template <typename P, int VEC, int NPACK, class G>
__device__ __forceinline__ void store_partials(const WnLayerNormBwdArgs& a, const G& g,
                                               int team, int teams, int64_t col0,
                                               const ParamGrads<VEC, NPACK>& acc, float* smem,
                                               const float (*ys)[NPACK][VEC] = nullptr) {
#pragma unroll
    for (int which = 0; which < 2; ++which) {
        float* part = reinterpret_cast<float*>(which == 0 ? a.dgamma_part : a.dbeta_part);
        P* out = reinterpret_cast<P*>(which == 0 ? a.dgamma : a.dbeta);
        if (part == nullptr && out == nullptr) continue;  // block-uniform
        float* mine = smem + team * g.n;
#pragma unroll
        for (int k = 0; k < NPACK; ++k) {
            const auto lo = g.template lo<VEC>(k);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                if (in_seg(lo + i, g.n)) mine[lo + i] = which == 0 ? acc.dg[k][i] : acc.db[k][i];
            }
        }
        __syncthreads();
        if (out != nullptr) {
            store_team_sums<P>(out + col0, g.n, teams, smem);
        } else {
            store_team_sums<float>(part + static_cast<int64_t>(blockIdx.x) * a.part_stride + col0,
                                   g.n, teams, smem);
        }
        __syncthreads();
    }
    if (ys != nullptr) {
        store_partial<P, VEC, NPACK>(a, a.dy_sum_part, a.dy_sum, g, team, teams, col0, *ys,
                                     smem);
    }
}

/**
 * subwarp / warp tiers: groups of a.group lanes, one row each, grid-stride over rows. The
 * block's groups are its teams (each with its own head): partial row blockIdx.x sums them.
 */
template <Norm N, typename T, typename P, int VEC, int NPACK>
__device__ __forceinline__ void bwd_warp(const WnLayerNormBwdArgs& a) {
    extern __shared__ float smem[];
    const int g = static_cast<int>(a.group);
    const int lane = threadIdx.x & 31;
    const int t = lane & (g - 1);
    const int per_block = blockDim.x / g;
    const int64_t per_warp = 32 / g;
    const GroupTeam team{g};
    const int64_t first = blockIdx.x * static_cast<int64_t>(per_block) +
                          (threadIdx.x >> 5) * per_warp + lane / g;
    const int off = row_head<T, VEC>(a, first);
    ParamGrads<VEC, NPACK> acc;
    acc.zero();
    // The loop bound is warp-uniform so that every lane takes part in every shuffle.
    for (int64_t base = first - lane / g; base < a.rows;
         base += static_cast<int64_t>(gridDim.x) * per_block) {
        const int64_t row = base + lane / g;
        bwd_row<N, T, P, VEC, NPACK, kDbRuntime>(a, row, row < a.rows, team, t, g, off, acc);
    }
    const TileGeom64 cols{a.cols, off, t, g};
    store_partials<P, VEC, NPACK>(a, cols, threadIdx.x / g, per_block, 0, acc, smem);
}

/**
 * Whether bwd_block recomputes its team's head offset for every row (the same value: the
 * planner's grid-stride rule) instead of holding it across the row loop. Held it is one
 * register, which LayerNorm's block kernels with 16-bit activations and f32 parameters spill
 * on sm_100 at their 128-register bound (their x and dy packs held raw, kHoldPacks; it did not
 * help RMSNorm's bias-gradient ones on sm_90); recomputed, the packs' bounds are no longer
 * loop-invariant and the loop has about a quarter more instructions, so only there.
 */
template <Norm N, typename T, typename P, int kDb>
constexpr bool kHeadPerRow =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200
    N == Norm::Layer && sizeof(P) > sizeof(T);
#else
    false;
#endif

/**
 * Whether a block kernel sums its second accumulators (db) in thread-private shared-memory
 * slots (add_dy_sums' layout, as LayerNorm's bias-gradient kernels sum dy) instead of
 * registers, reading them back into acc.db after the row loop: the vector variants of 16-bit
 * activations with f32 parameters, whose x and dy packs are held raw before conversion
 * (tile_load2's kHold8, all 64 bytes of a thread's row in flight), where that spilled at the
 * 128-register bound on sm_90 with db in registers: LayerNorm's plain kernel (db = dbeta) and
 * RMSNorm's bias-gradient kernel (db = dbias, added in add_dh_acc). The adds are the same, in
 * the same order: the sums are bitwise what the registers give. The planner gives these
 * launches the slots' shared memory (src/layer_norm/plan/geometry.rs, `db_in_shared`).
 */
template <Norm N, typename T, typename P, int VEC, int kDb>
constexpr bool kDbInSlots =
    sizeof(P) > sizeof(T) && VEC > 1 &&
    ((N == Norm::Layer && kDb == kDbOff) || (N == Norm::Rms && kDb == kDbOn));

/**
 * block tier: blockDim.y rows at a time per block, one per team of blockDim.x threads, so
 * that a 512-thread block covers several short rows; the teams' accumulators are summed in
 * team order into partial row blockIdx.x.
 */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kDb = kDbOff>
__device__ __forceinline__ void bwd_block(const WnLayerNormBwdArgs& a) {
    __shared__ float scratch[64 * (WN_LN_MAX_BLOCK / 128)];
    extern __shared__ float smem[];
    const RowTeam team{scratch};
    const int64_t teams = blockDim.y;
    constexpr bool kPerRow = kHeadPerRow<N, T, P, kDb>;
    const int held = kPerRow ? 0 : row_head<T, VEC>(a, blockIdx.x * teams + threadIdx.y);
    // LayerNorm's bias-gradient kernels also sum dy (dbeta) in shared memory (add_dy_sums);
    // the mixed pairs' LayerNorm plain and RMSNorm bias-gradient kernels sum db there
    // (kDbInSlots).
    constexpr bool kYSum = N == Norm::Layer && kDb == kDbOn;
    constexpr bool kDbSlots = kDbInSlots<N, T, P, VEC, kDb>;
    float* ysum = kYSum || kDbSlots ? smem + 4 * (threadIdx.y * blockDim.x + threadIdx.x)
                                     : nullptr;
    if constexpr (kYSum || kDbSlots) dy_sums_zero<VEC, NPACK>(ysum);
    ParamGrads<VEC, NPACK> acc;
    acc.zero();
    for (int64_t base = blockIdx.x * teams; base < a.rows; base += gridDim.x * teams) {
        const int64_t row = base + threadIdx.y;
        const int off = kPerRow ? row_head<T, VEC>(a, row) : held;
        bwd_row<N, T, P, VEC, NPACK, kDb>(a, row, row < a.rows, team, threadIdx.x,
                                          blockDim.x, off, acc, ysum);
    }
    const int off = kPerRow ? row_head<T, VEC>(a, blockIdx.x * teams + threadIdx.y) : held;
    const TileGeom64 g{a.cols, off, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
    if constexpr (kYSum) {
        float ys[NPACK][VEC];
        dy_sums_take<VEC, NPACK>(ysum, ys);
        __syncthreads();  // store_partials reuses the slots' shared memory
        store_partials<P, VEC, NPACK>(a, g, threadIdx.y, blockDim.y, 0, acc, smem, &ys);
    } else if constexpr (kDbSlots) {
        dy_sums_take<VEC, NPACK>(ysum, acc.db);  // db into its (untouched) registers
        __syncthreads();  // store_partials reuses the slots' shared memory
        store_partials<P, VEC, NPACK>(a, g, threadIdx.y, blockDim.y, 0, acc, smem);
    } else {
        store_partials<P, VEC, NPACK>(a, g, threadIdx.y, blockDim.y, 0, acc, smem);
    }
}

/** block tier with the fused residual add's bias gradient (`..._block_dbias_...`). */
template <Norm N, typename T, typename P, int VEC, int NPACK>
__device__ __forceinline__ void bwd_block_dbias(const WnLayerNormBwdArgs& a) {
    bwd_block<N, T, P, VEC, NPACK, kDbOn>(a);
}

/**
 * One row of the wide block tier (bwd_wide): its x and dy packs held raw (16-bit pairs: half
 * the registers of floats, the block tier's form; tile_load_raw) from their loads to dx, and
 * converted to floats a pack at a time twice, for the row sums and for dx (the same arithmetic
 * as bwd_row's, one pack per call: `gk` is pack k alone, TileGeom64 with thread index
 * k * team + t), the accumulators' pack k at `acc.at(k)`.
 */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kDb, class Acc>
__device__ __forceinline__ void bwd_row_wide(const WnLayerNormBwdArgs& a, int64_t row,
                                             const RowTeam& team, int off, const Acc& acc,
                                             float* ysum) {
    const int64_t base = row * a.cols;
    const T* xr = reinterpret_cast<const T*>(a.x) + base;
    const T* dyr = reinterpret_cast<const T*>(a.dy) + base;
    const TileGeom64 g{a.cols, off, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
    using Raw = typename std::conditional<sizeof(T) == 2, Held<T, VEC>,
                                          Pack<T, VEC>>::type;
    Raw rx[NPACK], rdy[NPACK];
    tile_load_raw<T, VEC, NPACK>(xr, g, rx);
    tile_load_raw<T, VEC, NPACK>(dyr, g, rdy);
    const RowStats rs = row_stats<N>(a, row, true);
    const P* gamma = reinterpret_cast<const P*>(a.gamma);
    // Pack k of the tile as floats (x re-centred), 0 outside the segment.
    auto convert = [&](int k, const TileGeom64& gk, float (&x)[1][VEC], float (&dy)[1][VEC]) {
        tile_convert<T, VEC, 1>(xr, gk, *reinterpret_cast<const Raw(*)[1]>(&rx[k]), x);
        tile_convert<T, VEC, 1>(dyr, gk, *reinterpret_cast<const Raw(*)[1]>(&rdy[k]), dy);
        centre_tile<N, VEC, 1>(x, rs);
    };
    float sa = 0.0f, sb = 0.0f;
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const TileGeom64 gk{g.n, g.off, k * g.team + g.t, g.team};
        if (gk.template lo<VEC>(0) >= g.n) continue;
        float x[1][VEC], dy[1][VEC], pa, pb;
        convert(k, gk, x, dy);
        // LayerNorm's dy sums (dbeta beside the bias gradient) here, where fewer registers are
        // live than beside dx (there the f16 and bf16 kernels spilled 4 bytes on sm_90).
        if (ysum != nullptr) add_dy_sums<VEC>(ysum + k * (VEC / 4) * kDySlotStride, 0, dy[0]);
        bwd_local_sums<N, P, VEC, 1>(x, dy, gk, 0.0f, rs.rstd, gamma, pa, pb);
        sa += pa;
        sb += pb;
    }
    team.sum2(sa, sb);
    if constexpr (sizeof(T) == 2) {
        // The held words as new values (no instruction): else nvcc keeps the first pass's
        // floats for the second instead of converting again, twice the registers (LayerNorm's
        // f16 wide_dbias kernel spilled 28 bytes on sm_90).
#pragma unroll
        for (int k = 0; k < NPACK; ++k) {
#pragma unroll
            for (int j = 0; j < Raw::kCount; ++j) {
                asm("" : "+r"(rx[k].w[j]));
                asm("" : "+r"(rdy[k].w[j]));
            }
        }
    }
    const float inv_n = 1.0f / static_cast<float>(a.cols);
    constexpr bool kDbDx = kDb == kDbOn;
    T* dx = reinterpret_cast<T*>(a.dx) + base;
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const TileGeom64 gk{g.n, g.off, k * g.team + g.t, g.team};
        if (gk.template lo<VEC>(0) >= g.n) continue;
        float x[1][VEC], dy[1][VEC];
        convert(k, gk, x, dy);
        const Acc acc_k = acc.at(k);
        bwd_dx<N, P, VEC, 1>(x, dy, gk, rs.rstd, sa * inv_n, sb * inv_n, gamma, kDbDx, false,
                             acc_k);
        if (kDbDx) {
            // + dh (if any), and the bias gradient into array 1's slots in the same pass
            add_dh_acc<T, VEC, 1>(a, base, gk, x, acc_k, acc_k.array(1));
        } else if (a.dh != 0) {
            add_dh<T, VEC, 1>(a, base, gk, x);  // uniform: fused residual add
        }
        tile_store<T, VEC, 1>(dx, gk, x);
    }
}

/**
 * wide block tier: one row per 512-thread block (blockDim.y == 1), twice the block tier's
 * elements per thread, for rows too long for it (LayerNorm and RMSNorm backward beyond 8192
 * columns: read once, not twice as the split tier reads them). The accumulators live in
 * shared-memory slots (SlotGrads): array 0 dgamma, array 1 dbeta (LayerNorm) or the bias
 * gradient (kDbOn), array 2 LayerNorm's dy sums beside it (dbeta, kDbOn); RMSNorm without a
 * bias gradient has array 0 only. After the row loop each array is read back into registers
 * and written out as the block tier's partial rows (store_partial; its one team's column
 * slice overlays array 0, which is read back first).
 */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kDb = kDbOff>
__device__ __forceinline__ void bwd_wide(const WnLayerNormBwdArgs& a) {
    __shared__ float scratch[64 * (WN_LN_MAX_BLOCK / 128)];
    extern __shared__ float smem[];
    const RowTeam team{scratch};
    constexpr bool kHasDb = N == Norm::Layer || kDb == kDbOn;
    constexpr bool kYSum = N == Norm::Layer && kDb == kDbOn;
    constexpr int kArrays = 1 + int{kHasDb} + int{kYSum};
    const SlotGrads<VEC, NPACK, kArrays> acc{smem + 4 * threadIdx.x};
    acc.zero();
    // LayerNorm's dy sums beside the bias gradient (kDbOn), added by add_dy_sums.
    float* ysum = kYSum ? acc.array(2) : nullptr;
    const int off = row_head<T, VEC>(a, blockIdx.x);
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        bwd_row_wide<N, T, P, VEC, NPACK, kDb>(a, row, team, off, acc, ysum);
    }
    const TileGeom64 g{a.cols, off, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
    float v[NPACK][VEC];
    dy_sums_take<VEC, NPACK>(acc.array(0), v);
    __syncthreads();  // store_partial's column slice overlays array 0
    store_partial<P, VEC, NPACK>(a, a.dgamma_part, a.dgamma, g, 0, 1, 0, v, smem);
    if constexpr (kHasDb) {
        dy_sums_take<VEC, NPACK>(acc.array(1), v);
        store_partial<P, VEC, NPACK>(a, a.dbeta_part, a.dbeta, g, 0, 1, 0, v, smem);
    }
    if constexpr (kYSum) {
        dy_sums_take<VEC, NPACK>(acc.array(2), v);
        store_partial<P, VEC, NPACK>(a, a.dy_sum_part, a.dy_sum, g, 0, 1, 0, v, smem);
    }
}

/** wide block tier with the fused residual add's bias gradient (`..._wide_dbias_...`). */
template <Norm N, typename T, typename P, int VEC, int NPACK>
__device__ __forceinline__ void bwd_wide_dbias(const WnLayerNormBwdArgs& a) {
    bwd_wide<N, T, P, VEC, NPACK, kDbOn>(a);
}

/** split tier, pass 1: per-chunk sums of g*dy and g*dy*xhat. */
template <Norm N, typename T, typename P, int VEC, int NPACK>
__device__ __forceinline__ void bwd_split_sums(const WnLayerNormBwdArgs& a) {
    __shared__ float scratch[64];
    const BlockTeam team{scratch};
    const int64_t c = blockIdx.y;
    const int64_t n = chunk_len(c, a.chunk, a.cols);
    const P* gamma = a.gamma ? reinterpret_cast<const P*>(a.gamma) + c * a.chunk : nullptr;
    float* sums = reinterpret_cast<float*>(a.row_sums);
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const int64_t off = row * a.cols + c * a.chunk;
        // Chunks start at multiples of the vector width: a chunk's head is its row's.
        const TileGeom64 g{n, row_head<T, VEC>(a, row), static_cast<int>(threadIdx.x),
                         static_cast<int>(blockDim.x)};
        float x[NPACK][VEC], dy[NPACK][VEC];
        // One pack in flight at a time: with both packs raw, this kernel took 66 registers on
        // sm_90 for some 16-bit pairs (64 before), and its occupancy halved.
        tile_load_each<T, VEC, NPACK>(reinterpret_cast<const T*>(a.x) + off, g, x);
        tile_load_each<T, VEC, NPACK>(reinterpret_cast<const T*>(a.dy) + off, g, dy);
        // xhat from the f32 mean alone here; split_dx applies mean_lo to the row's sums:
        // sum g dy ((x - mean) - mean_lo) rstd = sum g dy (x - mean) rstd - mean_lo rstd sum g dy.
        // (Any use of mean_lo here took these kernels from 64 to 71 registers on sm_90, past
        // 64: half the occupancy.)
        const float mean = N == Norm::Layer ? reinterpret_cast<const float*>(a.mean)[row] : 0.0f;
        const float rstd = reinterpret_cast<const float*>(a.rstd)[row];
        float sa, sb;
        bwd_local_sums<N, P, VEC, NPACK>(x, dy, g, mean, rstd, gamma, sa, sb);
        team.sum2(sa, sb);
        if (threadIdx.x == 0) {
            sums[2 * (row * a.splits + c)] = sa;
            sums[2 * (row * a.splits + c) + 1] = sb;
        }
    }
}

/**
 * split tier, pass 2: row sums added in chunk order, dx of one chunk, dgamma/dbeta of the
 * chunk's columns accumulated (the block's rows share one head, as in the other tiers) and
 * written to partial row blockIdx.x.
 */
template <Norm N, typename T, typename P, int VEC, int NPACK, int kDb = kDbRuntime>
__device__ __forceinline__ void bwd_split_dx(const WnLayerNormBwdArgs& a) {
    extern __shared__ float smem[];
    // LayerNorm's bias-gradient kernels also sum dy (dbeta) in shared memory, as bwd_block.
    constexpr bool kYSum = N == Norm::Layer && kDb == kDbOn;
    float* ysum = kYSum ? smem + 4 * threadIdx.x : nullptr;
    if constexpr (kYSum) dy_sums_zero<VEC, NPACK>(ysum);
    const int64_t c = blockIdx.y;
    const int64_t n = chunk_len(c, a.chunk, a.cols);
    const P* gamma = a.gamma ? reinterpret_cast<const P*>(a.gamma) + c * a.chunk : nullptr;
    const float* sums = reinterpret_cast<const float*>(a.row_sums);
    const int head = row_head<T, VEC>(a, blockIdx.x);
    const TileGeom64 g{n, head, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
    const float inv_n = 1.0f / static_cast<float>(a.cols);
    ParamGrads<VEC, NPACK> acc;
    acc.zero();
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        if (head_offset<T, VEC>(reinterpret_cast<const T*>(a.x) + row * a.cols) != head) {
            __trap();
        }
        float sa = 0.0f, sb = 0.0f;
        for (int64_t j = 0; j < a.splits; ++j) {
            sa += sums[2 * (row * a.splits + j)];
            sb += sums[2 * (row * a.splits + j) + 1];
        }
        const int64_t off = row * a.cols + c * a.chunk;
        float x[NPACK][VEC], dy[NPACK][VEC];
        // The mixed pairs' 8-byte packs as tile_load_each (kHold8 false): this loop already
        // has 128 bytes in flight per thread on sm_90, and holding them spilled it there.
        tile_load2<T, VEC, NPACK, false>(reinterpret_cast<const T*>(a.x) + off,
                                         reinterpret_cast<const T*>(a.dy) + off, g, x, dy);
        const RowStats rs = row_stats<N>(a, row, true);
        centre_tile<N, VEC, NPACK>(x, rs);
        // split_sums formed sb from the f32 mean: mean_lo's share, -mean_lo rstd sum g dy.
        if constexpr (N == Norm::Layer) sb = fmaf(-rs.mean_lo * rs.rstd, sa, sb);
        // As bwd_row's warp tiers (run time), or fixed by the `split_dx_dbias` entry points.
        const bool db_dx = kDb == kDbRuntime ? a.db_dx != 0 : kDb == kDbOn;
        bwd_dx<N, P, VEC, NPACK>(x, dy, g, rs.rstd, sa * inv_n, sb * inv_n, gamma, db_dx,
                                 N == Norm::Rms && db_dx, acc, ysum);
        store_dx<N, T, VEC, NPACK>(a, off, g, x, acc);  // + dh, dbias: the fused residual add
    }
    if constexpr (kYSum) {
        float ys[NPACK][VEC];
        dy_sums_take<VEC, NPACK>(ysum, ys);
        __syncthreads();  // store_partials reuses the slots' shared memory
        store_partials<P, VEC, NPACK>(a, g, 0, 1, c * a.chunk, acc, smem, &ys);
    } else {
        store_partials<P, VEC, NPACK>(a, g, 0, 1, c * a.chunk, acc, smem);
    }
}

/** split tier, pass 2, with the fused residual add's bias gradient (`..._split_dx_dbias_...`). */
template <Norm N, typename T, typename P, int VEC, int NPACK>
__device__ __forceinline__ void bwd_split_dx_dbias(const WnLayerNormBwdArgs& a) {
    bwd_split_dx<N, T, P, VEC, NPACK, kDbOn>(a);
}

/**
 * finalize: block (COLS, LANES). Lane y sums partial rows y, y + LANES, ... in order; then
 * reduce.cuh's column_merge adds the LANES sums in lane order into lane 0, which rounds once
 * to P. Each warp reads 32 consecutive floats of a partial row (rows start 32-byte aligned:
 * part_stride is a multiple of 8), so the reads are fully coalesced.
 */
template <typename P>
__device__ __forceinline__ void finalize(const WnLayerNormFinalizeArgs& a) {
    constexpr int kThreads = WN_LN_FINALIZE_COLS * WN_LN_FINALIZE_LANES;
    __shared__ float smem[kThreads * 3];
    const int64_t col = static_cast<int64_t>(blockIdx.x) * WN_LN_FINALIZE_COLS + threadIdx.x;
    const float* gp = reinterpret_cast<const float*>(a.dgamma_part);
    const float* bp = reinterpret_cast<const float*>(a.dbeta_part);
    const float* sp = reinterpret_cast<const float*>(a.dy_sum_part);
    SumAcc<3> acc;  // (dgamma, dbeta, dy_sum)
    acc.init();
    if (col < a.cols) {
        for (int64_t p = threadIdx.y; p < a.part_rows; p += WN_LN_FINALIZE_LANES) {
            if (gp != nullptr) acc.v[0] += gp[p * a.part_stride + col];
            if (bp != nullptr) acc.v[1] += bp[p * a.part_stride + col];
            if (sp != nullptr) acc.v[2] += sp[p * a.part_stride + col];
        }
    }
    if (column_merge<kThreads>(acc, smem) && col < a.cols) {
        if (gp != nullptr) reinterpret_cast<P*>(a.dgamma)[col] = from_float<P>(acc.v[0]);
        if (bp != nullptr) reinterpret_cast<P*>(a.dbeta)[col] = from_float<P>(acc.v[1]);
        if (sp != nullptr) reinterpret_cast<P*>(a.dy_sum)[col] = from_float<P>(acc.v[2]);
    }
}

/**
 * column_sum: the f32 column sums of a rows * cols tensor, first pass (the fused residual
 * add's dbeta = sum over rows of dy, when the backward's accumulators sum dbias). Block
 * (32, 8), grid (ceil(cols / (32 * V)), chunks), V = 16 / sizeof(T). Row lane y
 * sums the chunk's rows y, y + 8, ... in row order, four rows' loads issued before any is
 * added; column_merge then adds the 8 row lanes in lane order, and row lane 0 writes the
 * chunk's partial row. The finalize kernel sums the partial rows in chunk order: no atomics,
 * reruns are bitwise identical. Vector path (a.vec): lane x reads columns [V x, V x + V) of
 * its block with one 16-byte load per row (src and cols * sizeof(T) 16-byte aligned); else
 * lane x reads columns x, x + 32, ..., element by element (each warp access coalesced).
 */
template <typename T>
__device__ __forceinline__ void column_sum(const WnLayerNormColSumArgs& a) {
    constexpr int V = kVec<T>;
    constexpr int kRows = WN_LN_COLSUM_ROWS;
    constexpr int kLanes = WN_LN_COLSUM_LANES;
    constexpr int kThreads = kLanes * kRows;
    __shared__ float smem[kThreads * V];
    const T* src = reinterpret_cast<const T*>(a.src);
    const int64_t rows = a.rows, cols = a.cols;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * a.chunk_rows;
    const int64_t r1 = min(r0 + a.chunk_rows, rows);
    const int64_t base = static_cast<int64_t>(blockIdx.x) * kLanes * V;
    const bool vec = a.vec != 0;
    // Element i of this lane is column c0 + i * step.
    const int64_t c0 = vec ? base + threadIdx.x * V : base + threadIdx.x;
    const int64_t step = vec ? 1 : kLanes;
    SumAcc<V> acc;
    acc.init();
    if (vec) {
        if (c0 < cols) {  // cols is a multiple of V here: the whole pack is in the row
            const T* p = src + (r0 + threadIdx.y) * cols + c0;
            const int64_t stride = kRows * cols;
            int64_t r = r0 + threadIdx.y;
            for (; r + 3 * kRows < r1; r += 4 * kRows, p += 4 * stride) {
                Pack<T, V> q[4];
#pragma unroll
                for (int k = 0; k < 4; ++k) q[k] = load_pack<T, V>(p + k * stride);
#pragma unroll
                for (int k = 0; k < 4; ++k)
#pragma unroll
                    for (int i = 0; i < V; ++i) acc.v[i] += to_float(q[k].v[i]);
            }
            for (; r < r1; r += kRows, p += stride) {
                const Pack<T, V> q = load_pack<T, V>(p);
#pragma unroll
                for (int i = 0; i < V; ++i) acc.v[i] += to_float(q.v[i]);
            }
        }
    } else {
        for (int64_t r = r0 + threadIdx.y; r < r1; r += kRows) {
            const T* row = src + r * cols;
            float v[V];
#pragma unroll
            for (int i = 0; i < V; ++i) {
                const int64_t c = c0 + i * kLanes;
                v[i] = c < cols ? to_float(row[c]) : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < V; ++i) acc.v[i] += v[i];
        }
    }
    if (column_merge<kThreads>(acc, smem)) {
        float* part = reinterpret_cast<float*>(a.part) + blockIdx.y * a.part_stride;
#pragma unroll
        for (int i = 0; i < V; ++i) {
            const int64_t c = c0 + i * step;
            if (c < cols) part[c] = acc.v[i];
        }
    }
}

/**
 * Elements per pack of the vector variants of a dtype pair: 16 / max(sizeof(T), sizeof(P)),
 * so that a pack's parameters are at most one 16-byte load per lane (f16/bf16 activations
 * with f32 parameters: 4 elements, an 8-byte activation and a 16-byte parameter access; a
 * 16-byte activation pack would need two parameter loads whose lanes sit 32 bytes apart).
 */
template <typename T, typename P>
constexpr int kPairVec = 16 / (sizeof(T) > sizeof(P) ? sizeof(T) : sizeof(P));

/** Packs per thread of a tier: `elems` elements per thread in VEC-wide packs. */
template <int VEC, int ELEMS>
constexpr int kPacks = ELEMS / VEC;

}  // namespace ln
}  // namespace warpnorm

// ------------------------------------------------------------------------------------------
// Entry points: warpnorm_<op>_<dir>_<T>_<P>_<tier>_<vec|scalar>, one list per dtype pair; <op>
// is layer_norm here, rms_norm in cuda/rms_norm.cu (which includes this file with
// WN_LN_BODIES_ONLY defined, for the bodies and these macros, and instantiates them with
// Norm::Rms).
// ------------------------------------------------------------------------------------------

#define WN_LN_ENTRY(OP, NORM, DIR, TN, PN, TIER, VNAME, BOUND, BODY, T, P, VEC, NPACK)       \
    extern "C" __global__ void __launch_bounds__(BOUND, 1)                                     \
        warpnorm_##OP##_##DIR##_##TN##_##PN##_##TIER##_##VNAME(                               \
            const WnLayerNorm##DIR##Args_ a) {                                                 \
        warpnorm::ln::BODY<warpnorm::ln::Norm::NORM, T, P, VEC, NPACK>(a);                     \
    }

/**
 * A forward entry point of a body that takes a ResMode: warpnorm_<op>_fwd_<T>_<P>_<NAME>_<v>,
 * NAME the tier (RES kPlain for vec, kRuntime for scalar) or res_<tier> (RES kFused).
 */
#define WN_LN_ENTRY_FWD(OP, NORM, TN, PN, NAME, VNAME, BOUND, BODY, T, P, VEC, NPACK, RES)      \
    extern "C" __global__ void __launch_bounds__(BOUND, 1)                                     \
        warpnorm_##OP##_fwd_##TN##_##PN##_##NAME##_##VNAME(const WnLayerNormFwdArgs a) {      \
        warpnorm::ln::BODY<warpnorm::ln::Norm::NORM, T, P, VEC, NPACK, warpnorm::ln::RES>(a);  \
    }

/**
 * The fused residual add's forward entry points (`res_<tier>`), and the split tier's
 * cooperative pass (`split_coop`, `res_split_coop`): the vector variant only.
 */
#define WN_LN_RES_vec(OP, NORM, TN, PN, T, P, VEC, FE)                                         \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, res_subwarp, vec, WN_LN_WARP_BLOCK, fwd_warp, T, P, VEC, \
                    1, kFused)                                                                 \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, res_warp, vec, WN_LN_WARP_BLOCK, fwd_warp, T, P, VEC,    \
                    (warpnorm::ln::kPacks<VEC, FE>), kFused)                                   \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, res_block, vec, WN_LN_MAX_BLOCK, fwd_block, T, P, VEC,   \
                    (warpnorm::ln::kPacks<VEC, FE>), kFused)                                   \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, res_split_stats, vec, WN_LN_MAX_BLOCK, fwd_split_stats,  \
                    T, P, VEC, (warpnorm::ln::kPacks<VEC, FE>), kFused)                        \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, split_coop, vec, WN_LN_MAX_BLOCK, fwd_split_coop, T, P,  \
                    VEC, (warpnorm::ln::kPacks<VEC, FE>), kPlain)                              \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, res_split_coop, vec, WN_LN_MAX_BLOCK, fwd_split_coop,    \
                    T, P, VEC, (warpnorm::ln::kPacks<VEC, FE>), kFused)
/**
 * The scalar variant's plain subwarp, warp and block kernels take the residual at run time
 * (kRuntime); split_stats keeps its own fused entry point (with the runtime branch, the
 * 16-bit LayerNorm split_stats spilled 8 bytes on sm_100).
 */
#define WN_LN_RES_scalar(OP, NORM, TN, PN, T, P, VEC, FE)                                      \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, res_split_stats, scalar, WN_LN_MAX_BLOCK,                \
                    fwd_split_stats, T, P, VEC, (warpnorm::ln::kPacks<VEC, FE>), kFused)

namespace warpnorm {
namespace ln {
/**
 * Elements per thread of the backward's wide block tier for activations T, BE the block
 * tier's: WN_LN_BWD_WIDE_FACTOR times, but BE for f32 on compute capability 10.x (see the ABI
 * header; the planner's `wide_elems` is the same rule).
 */
template <typename T, int BE>
constexpr int kWideElems =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && __CUDA_ARCH__ < 1200
    sizeof(T) == 4 ? BE : WN_LN_BWD_WIDE_FACTOR * BE;
#else
    WN_LN_BWD_WIDE_FACTOR * BE;
#endif
}  // namespace ln
}  // namespace warpnorm

/** The backward's wide block tier (bwd_wide): the vector variant only (16-byte slots). */
#define WN_LN_WIDE_vec(OP, NORM, TN, PN, T, P, VEC, BE)                                       \
    WN_LN_ENTRY(OP, NORM, bwd, TN, PN, wide, vec, WN_LN_MAX_BLOCK, bwd_wide, T, P, VEC,       \
                (warpnorm::ln::kPacks<VEC, warpnorm::ln::kWideElems<T, BE>>))                  \
    WN_LN_ENTRY(OP, NORM, bwd, TN, PN, wide_dbias, vec, WN_LN_MAX_BLOCK, bwd_wide_dbias, T, P, \
                VEC, (warpnorm::ln::kPacks<VEC, warpnorm::ln::kWideElems<T, BE>>))
#define WN_LN_WIDE_scalar(OP, NORM, TN, PN, T, P, VEC, BE)

using WnLayerNormfwdArgs_ = WnLayerNormFwdArgs;
using WnLayerNormbwdArgs_ = WnLayerNormBwdArgs;

#define WN_LN_VARIANTS(OP, NORM, TN, PN, T, P, VNAME, VEC, FE, BE, RES)                        \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, subwarp, VNAME, WN_LN_WARP_BLOCK, fwd_warp, T, P, VEC, 1, \
                    RES)                                                                       \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, warp, VNAME, WN_LN_WARP_BLOCK, fwd_warp, T, P, VEC,      \
                    (warpnorm::ln::kPacks<VEC, FE>), RES)                                      \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, block, VNAME, WN_LN_MAX_BLOCK, fwd_block, T, P, VEC,     \
                    (warpnorm::ln::kPacks<VEC, FE>), RES)                                      \
    WN_LN_ENTRY_FWD(OP, NORM, TN, PN, split_stats, VNAME, WN_LN_MAX_BLOCK, fwd_split_stats, T, \
                    P, VEC, (warpnorm::ln::kPacks<VEC, FE>), kPlain)                           \
    WN_LN_ENTRY(OP, NORM, fwd, TN, PN, split_norm, VNAME, WN_LN_MAX_BLOCK, fwd_split_norm, T, \
                P, VEC, (warpnorm::ln::kPacks<VEC, FE>))                                       \
    WN_LN_RES_##VNAME(OP, NORM, TN, PN, T, P, VEC, FE)                                         \
    WN_LN_ENTRY(OP, NORM, bwd, TN, PN, subwarp, VNAME, WN_LN_BWD_WARP_BLOCK, bwd_warp, T, P,  \
                VEC, 1)                                                                        \
    WN_LN_ENTRY(OP, NORM, bwd, TN, PN, warp, VNAME, WN_LN_BWD_WARP_BLOCK, bwd_warp, T, P, VEC, \
                (warpnorm::ln::kPacks<VEC, BE>))                                               \
    WN_LN_ENTRY(OP, NORM, bwd, TN, PN, block, VNAME, WN_LN_MAX_BLOCK, bwd_block, T, P, VEC,   \
                (warpnorm::ln::kPacks<VEC, BE>))                                               \
    WN_LN_ENTRY(OP, NORM, bwd, TN, PN, block_dbias, VNAME, WN_LN_MAX_BLOCK, bwd_block_dbias, T, \
                P, VEC, (warpnorm::ln::kPacks<VEC, BE>))                                       \
    WN_LN_ENTRY(OP, NORM, bwd, TN, PN, split_sums, VNAME, WN_LN_MAX_BLOCK, bwd_split_sums, T, \
                P, VEC, (warpnorm::ln::kPacks<VEC, BE>))                                       \
    WN_LN_ENTRY(OP, NORM, bwd, TN, PN, split_dx, VNAME, WN_LN_MAX_BLOCK, bwd_split_dx, T, P,  \
                VEC, (warpnorm::ln::kPacks<VEC, BE>))                                          \
    WN_LN_ENTRY(OP, NORM, bwd, TN, PN, split_dx_dbias, VNAME, WN_LN_MAX_BLOCK,                \
                bwd_split_dx_dbias, T, P, VEC, (warpnorm::ln::kPacks<VEC, BE>))                \
    WN_LN_WIDE_##VNAME(OP, NORM, TN, PN, T, P, VEC, BE)

// Backward elements per thread of the vector variants; fewer on compute capability >= 12.0
// (the planner uses the same rule, src/layer_norm/plan.rs).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define WN_LN_BWD_ELEMS_VEC WN_LN_BWD_THREAD_ELEMS_CC12
#else
#define WN_LN_BWD_ELEMS_VEC WN_LN_BWD_THREAD_ELEMS
#endif

#define WN_LN_DTYPE_PAIR(OP, NORM, TN, PN, T, P)                                               \
    WN_LN_VARIANTS(OP, NORM, TN, PN, T, P, vec, (warpnorm::ln::kPairVec<T, P>),                \
                   WN_LN_FWD_THREAD_ELEMS, WN_LN_BWD_ELEMS_VEC, kPlain)                        \
    WN_LN_VARIANTS(OP, NORM, TN, PN, T, P, scalar, 1, WN_LN_FWD_THREAD_ELEMS_SCALAR,           \
                   WN_LN_BWD_THREAD_ELEMS_SCALAR, kRuntime)

/** Every dtype pair of one op (layer_norm / Layer, rms_norm / Rms). */
#define WN_LN_ALL_PAIRS(OP, NORM)                                                              \
    WN_LN_DTYPE_PAIR(OP, NORM, f32, f32, float, float)                                         \
    WN_LN_DTYPE_PAIR(OP, NORM, f16, f16, __half, __half)                                       \
    WN_LN_DTYPE_PAIR(OP, NORM, f16, f32, __half, float)                                        \
    WN_LN_DTYPE_PAIR(OP, NORM, bf16, bf16, __nv_bfloat16, __nv_bfloat16)                       \
    WN_LN_DTYPE_PAIR(OP, NORM, bf16, f32, __nv_bfloat16, float)

#define WN_LN_FINALIZE(OP, PN, P)                                                              \
    extern "C" __global__ void __launch_bounds__(WN_LN_FINALIZE_COLS * WN_LN_FINALIZE_LANES)   \
        warpnorm_##OP##_bwd_##PN##_finalize(const WnLayerNormFinalizeArgs a) {                 \
        warpnorm::ln::finalize<P>(a);                                                          \
    }

/** The column sum of one activation dtype (see column_sum): LayerNorm only (its dbeta). */
#define WN_LN_COLSUM(OP, TN, T)                                                                \
    extern "C" __global__ void __launch_bounds__(WN_LN_COLSUM_LANES * WN_LN_COLSUM_ROWS)       \
        warpnorm_##OP##_bwd_##TN##_colsum(const WnLayerNormColSumArgs a) {                     \
        warpnorm::ln::column_sum<T>(a);                                                        \
    }

/** The finalize kernels (one per parameter dtype) of one op. */
#define WN_LN_ALL_FINALIZE(OP)                                                                 \
    WN_LN_FINALIZE(OP, f32, float)                                                             \
    WN_LN_FINALIZE(OP, f16, __half)                                                            \
    WN_LN_FINALIZE(OP, bf16, __nv_bfloat16)

#ifndef WN_LN_BODIES_ONLY
WN_LN_ALL_PAIRS(layer_norm, Layer)
WN_LN_ALL_FINALIZE(layer_norm)
WN_LN_COLSUM(layer_norm, f32, float)
WN_LN_COLSUM(layer_norm, f16, __half)
WN_LN_COLSUM(layer_norm, bf16, __nv_bfloat16)
#endif
