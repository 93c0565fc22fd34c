/*
 * channel_reduce.cuh - per-channel reductions for BatchNorm: accumulators of V channels per
 * thread, merged across the rows of a 2-D thread block by reduce.cuh's column_merge.
 *
 * A block is (bx, by) threads with bx a power of two <= 32 and bx * by a multiple of 32 and at
 * most kMaxColumnThreads; thread (x, y) owns channel column x and walks rows y, y + by, ...
 * column_merge<kMaxColumnThreads>() (reduce.cuh) merges the by accumulators of each column in
 * a fixed order (a shfl_down tree inside each warp, then the warps in order); thread (x, 0)
 * gets its column's result. No float atomics (the only atomic is arrival.cuh's integer counter,
 * which elects the block that merges, not the order of the merge): reruns are bitwise identical.
 *
 * Accumulators (all f32):
 * - StatsAcc<V>: Welford (count, mean hi[V], mean lo[V], m2[V]) with a shared count and each
 *   mean a compensated pair; the updates and merges are welford.cuh's group_stats,
 *   welford_merge_group / chan_merge_pair (non-finite values as PyTorch's two-pass).
 * - GradAcc<V>: the backward sums (sum dy[V], sum dy * (x - save_mean)[V]), a reduce.cuh
 *   SumAcc (the mean's lo part is applied once per channel: bn_finalize.cuh's bwd_coef).
 * The NCHW kernels use V = 1 (one channel per block; bx = 1).
 */
#pragma once

#include "arrival.cuh"
#include "welford.cuh"

namespace warpnorm {

/** Most threads of a BatchNorm reduction block (sizes column_merge's shared memory). */
constexpr int kMaxColumnThreads = 256;

/**
 * Welford over V channels that all saw the same number of values, each mean a compensated pair
 * (mh + ml, welford.cuh): values are added in groups (a pack, or the rows one loop iteration
 * has in flight), each group two-pass relative to the running mean, then one Chan merge.
 */
template <int V> struct StatsAcc {
    static constexpr int kFloats = 1 + 3 * V;
    float count;
    float mh[V];
    float ml[V];
    float m2[V];

    __device__ __forceinline__ void init() {
        count = 0.0f;
#pragma unroll
        for (int i = 0; i < V; ++i) mh[i] = ml[i] = m2[i] = 0.0f;
    }

    /**
     * Adds the first m >= 1 of K values per channel: v[k][i] is value k of channel i. The
     * first group of an empty accumulator is taken relative to its first value.
     */
    template <int K> __device__ __forceinline__ void push_group(const float (&v)[K][V], int m) {
        if (count == 0.0f) {
#pragma unroll
            for (int i = 0; i < V; ++i) mh[i] = isfinite(v[0][i]) ? v[0][i] : 0.0f;
        }
        const float fm = static_cast<float>(m);
        const float n = count + fm;
        const float wb = fm / n;
        const float nawb = count * wb;
        const float inv_m = m == K ? 1.0f / K : 1.0f / fm;
        // Two-pass statistics of each channel's group relative to its running mean, then the
        // merges: without checks when every value is finite (a product by 0 is NaN for
        // +-Inf and NaN, 0 otherwise), else each channel checked.
        float col[V][K], pm[V], q[V];
        float chk = 0.0f;
#pragma unroll
        for (int i = 0; i < V; ++i) {
#pragma unroll
            for (int k = 0; k < K; ++k) col[i][k] = v[k][i];
            if (m == K) {
                group_stats<K, true>(col[i], m, inv_m, mh[i], pm[i], q[i]);
            } else {
                group_stats<K, false>(col[i], m, inv_m, mh[i], pm[i], q[i]);
            }
            chk = fmaf(pm[i], 0.0f, fmaf(mh[i], 0.0f, chk));
        }
        if (isfinite(chk)) {
#pragma unroll
            for (int i = 0; i < V; ++i) welford_merge_group(mh[i], ml[i], m2[i], pm[i], q[i], wb, nawb);
        } else {
#pragma unroll
            for (int i = 0; i < V; ++i) {
                if (m == K) {
                    welford_merge_group_checked<K, true>(mh[i], ml[i], m2[i], col[i], m, inv_m,
                                                         pm[i], q[i], wb, nawb);
                } else {
                    welford_merge_group_checked<K, false>(mh[i], ml[i], m2[i], col[i], m, inv_m,
                                                          pm[i], q[i], wb, nawb);
                }
            }
        }
        count = n;
    }

    /** Chan's merge (welford.cuh), `this` first. Empty sides merge to the other one. */
    __device__ __forceinline__ void merge(const StatsAcc& b) {
        if (b.count == 0.0f) return;
        if (count == 0.0f) {
            *this = b;
            return;
        }
        const float n = count + b.count;
        const float wb = b.count / n;
#pragma unroll
        for (int i = 0; i < V; ++i)
            chan_merge_pair(mh[i], ml[i], m2[i], count, wb, b.mh[i], b.ml[i], b.m2[i]);
        count = n;
    }

    __device__ __forceinline__ void to_floats(float* f) const {
        f[0] = count;
#pragma unroll
        for (int i = 0; i < V; ++i) {
            f[1 + i] = mh[i];
            f[1 + V + i] = ml[i];
            f[1 + 2 * V + i] = m2[i];
        }
    }
    __device__ __forceinline__ void from_floats(const float* f) {
        count = f[0];
#pragma unroll
        for (int i = 0; i < V; ++i) {
            mh[i] = f[1 + i];
            ml[i] = f[1 + V + i];
            m2[i] = f[1 + 2 * V + i];
        }
    }
    __device__ __forceinline__ StatsAcc shfl_down(int off) const {
        StatsAcc o;
        o.count = __shfl_down_sync(kFullMask, count, off);
#pragma unroll
        for (int i = 0; i < V; ++i) {
            o.mh[i] = __shfl_down_sync(kFullMask, mh[i], off);
            o.ml[i] = __shfl_down_sync(kFullMask, ml[i], off);
            o.m2[i] = __shfl_down_sync(kFullMask, m2[i], off);
        }
        return o;
    }
    /** Partial of channel i: fields (count, mean hi, mean lo, m2). */
    static constexpr int kPartial = 4;
    __device__ __forceinline__ float partial(int field, int i) const {
        return field == 0 ? count : field == 1 ? mh[i] : field == 2 ? ml[i] : m2[i];
    }
    /**
     * Reads the partials of channels 0 .. valid - 1, channel i at p[i * cstride] and its fields
     * `field_stride` floats apart (written by other blocks, so read with relaxed loads); the
     * rest empty.
     */
    __device__ __forceinline__ void from_partial(const float* p, int64_t field_stride, int valid,
                                                 int64_t cstride) {
        init();
        if (valid > 0) count = load_relaxed(p);  // the same for every channel of a split
#pragma unroll
        for (int i = 0; i < V; ++i) {
            if (i < valid) {
                const float* q = p + i * cstride;
                mh[i] = load_relaxed(q + field_stride);
                ml[i] = load_relaxed(q + 2 * field_stride);
                m2[i] = load_relaxed(q + 3 * field_stride);
            }
        }
    }
};

/** The backward sums of V channels: v[i] = sum dy, v[V + i] = sum dy * (x - mean) of channel i. */
template <int V> struct GradAcc : SumAcc<2 * V> {
    using SumAcc<2 * V>::v;
    __device__ __forceinline__ float sdy(int i) const { return v[i]; }
    __device__ __forceinline__ float sdx(int i) const { return v[V + i]; }

    /** Adds one row: dy[i], x[i] of channel i with channel mean (hi part) mean[i]. */
    __device__ __forceinline__ void push_row(const float (&dy)[V], const float (&x)[V],
                                             const float (&mean)[V]) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
            v[i] += dy[i];
            v[V + i] = fmaf(dy[i], x[i] - mean[i], v[V + i]);
        }
    }
    /** Adds W values of channel 0 (V == 1), summed pairwise-in-pack first. */
    template <int W>
    __device__ __forceinline__ void push_pack(const float (&dy)[W], const float (&x)[W],
                                              float mean) {
        static_assert(V == 1, "push_pack is for one channel per thread");
        float a = 0.0f, b = 0.0f;
#pragma unroll
        for (int i = 0; i < W; ++i) {
            a += dy[i];
            b = fmaf(dy[i], x[i] - mean, b);
        }
        v[0] += a;
        v[1] += b;
    }
    __device__ __forceinline__ GradAcc shfl_down(int off) const {
        GradAcc o;
        static_cast<SumAcc<2 * V>&>(o) = SumAcc<2 * V>::shfl_down(off);
        return o;
    }
    /** Partial of channel i: fields (sum dy, sum dy * (x - mean)). */
    static constexpr int kPartial = 2;
    __device__ __forceinline__ float partial(int field, int i) const {
        return field == 0 ? sdy(i) : sdx(i);
    }
    /** Reads the partials of channels 0 .. valid - 1 as StatsAcc::from_partial. */
    __device__ __forceinline__ void from_partial(const float* p, int64_t field_stride, int valid,
                                                 int64_t cstride) {
        this->init();
#pragma unroll
        for (int i = 0; i < V; ++i) {
            if (i < valid) {
                v[i] = load_relaxed(p + i * cstride);
                v[V + i] = load_relaxed(p + i * cstride + field_stride);
            }
        }
    }
};

/** Lane of the calling thread in its warp, for blocks of any shape. */
__device__ __forceinline__ int lane_in_warp() {
    return static_cast<int>((threadIdx.y * blockDim.x + threadIdx.x) & 31u);
}

/**
 * Warp-cooperative load of per-channel f32 values: with bx = blockDim.x (a power of two <= 32),
 * every lane gets row[(lane % bx) * V + i], i < V, of the warp's bx channel columns; entries at
 * or past `valid` floats come back 0. Each load request reads consecutive 16-byte pieces
 * across lanes, so it is fully coalesced even for V = 8 (a per-lane pair of float4 loads would
 * use half of every sector). `row` is 16-byte aligned when V >= 4. V is 1, 2, 4 or 8. Every
 * lane of the warp must call it.
 */
template <int V>
__device__ __forceinline__ void warp_load_row(const float* row, int valid, float (&out)[V]) {
    const int bx = blockDim.x;
    const int lane = lane_in_warp();
    const int x = lane & (bx - 1);
    if constexpr (V <= 4) {
#pragma unroll
        for (int i = 0; i < V; ++i) out[i] = 0.0f;
        if (x * V < valid) {
            if constexpr (V == 4) {
                const float4 q = *reinterpret_cast<const float4*>(row + x * V);
                out[0] = q.x;
                out[1] = q.y;
                out[2] = q.z;
                out[3] = q.w;
            } else {
#pragma unroll
                for (int i = 0; i < V; ++i) out[i] = row[x * V + i];
            }
        }
    } else {
        static_assert(V == 8, "V is 1, 2, 4 or 8");
        // Pieces m = 0 .. 2 bx - 1 of 4 floats; lane l loads pieces l and l + 32.
        float q[2][4];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int m = lane + 32 * r;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (m < 2 * bx && 4 * m < valid) v = *reinterpret_cast<const float4*>(row + 4 * m);
            q[r][0] = v.x;
            q[r][1] = v.y;
            q[r][2] = v.z;
            q[r][3] = v.w;
        }
        // Lane x needs pieces 2x and 2x + 1: lanes (2x) % 32 and (2x + 1) % 32 of round 2x / 32.
        const bool second = 2 * x >= 32;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int src = (2 * x + h) & 31;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const float a = __shfl_sync(kFullMask, q[0][k], src);
                const float b = __shfl_sync(kFullMask, q[1][k], src);
                out[4 * h + k] = second ? b : a;
            }
        }
    }
}

/**
 * Warp-cooperative store of per-channel f32 values, the inverse of warp_load_row: lanes
 * 0 .. bx - 1 (bx = blockDim.x, so these are the threads with threadIdx.y == 0 when called by
 * warp 0) hold v[i] for row[lane * V + i]; entries at or past `valid` floats are not written.
 * Each store request writes consecutive 16-byte pieces across lanes. Every lane of the warp
 * must call it.
 */
template <int V>
__device__ __forceinline__ void warp_store_row(float* row, int valid, const float (&v)[V]) {
    const int bx = blockDim.x;
    const int lane = lane_in_warp();
    if constexpr (V <= 4) {
        if (lane < bx && lane * V < valid) {
            if constexpr (V == 4) {
                // __stwb keeps this one 16-byte store (a plain float4 store was split in
                // four by nvcc in one kernel).
                __stwb(reinterpret_cast<float4*>(row + lane * V), make_float4(v[0], v[1], v[2], v[3]));
            } else {
#pragma unroll
                for (int i = 0; i < V; ++i) row[lane * V + i] = v[i];
            }
        }
    } else {
        static_assert(V == 8, "V is 1, 2, 4 or 8");
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            // Piece m = lane + 32 r holds floats 4 (m % 2) .. of lane m / 2.
            const int m = lane + 32 * r;
            const int src = (m >> 1) & 31;
            float w[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) w[k] = __shfl_sync(kFullMask, v[k], src);
            const bool hi = m & 1;
            if (m < 2 * bx && 4 * m < valid) {
                __stwb(reinterpret_cast<float4*>(row + 4 * m),
                       hi ? make_float4(w[4], w[5], w[6], w[7]) : make_float4(w[0], w[1], w[2], w[3]));
            }
        }
    }
}

}  // namespace warpnorm
