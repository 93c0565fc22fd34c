/*
 * channel_reduce.cuh - per-channel reductions for BatchNorm: accumulators of V channels per
 * thread and their deterministic merges across the rows of a 2-D thread block.
 *
 * A block is (bx, by) threads with bx a power of two <= 32 and bx * by a multiple of 32 and at
 * most kMaxColumnThreads; thread (x, y) owns channel column x and walks rows y, y + by, ...
 * column_merge() merges the by accumulators of each column: first inside each warp with a
 * fixed shfl_down tree (offsets 16 .. bx), then across warps in warp order through shared
 * memory. Thread (x, 0) gets its column's result. No atomics: reruns are bitwise identical.
 *
 * Accumulators (all f32):
 * - StatsAcc<V>: Welford (count, mean[V], m2[V]) with a shared count; merges use Chan's formula.
 *   Non-finite values follow PyTorch's two-pass results: a mean that sees +-Inf becomes the
 *   plain sum of the infinities (Inf, or NaN for both signs) and the m2 becomes NaN.
 * - GradAcc<V>: the backward sums (sum dy[V], sum dy * (x - mean)[V]).
 * The NCHW kernels use V = 1 (one channel per block; bx = 1).
 */
#pragma once

#include "welford.cuh"

namespace warpnorm {

/** Most threads of a block that column_merge() supports (sizes its shared memory). */
constexpr int kMaxColumnThreads = 256;

/** Welford over V channels that all saw the same number of values. */
template <int V> struct StatsAcc {
    static constexpr int kFloats = 1 + 2 * V;
    float count;
    float mean[V];
    float m2[V];

    __device__ __forceinline__ void init() {
        count = 0.0f;
#pragma unroll
        for (int i = 0; i < V; ++i) mean[i] = m2[i] = 0.0f;
    }

    /** Adds one row: value v[i] to channel i (one division per row). */
    __device__ __forceinline__ void push_row(const float (&v)[V]) {
        count += 1.0f;
        const float inv = 1.0f / count;
#pragma unroll
        for (int i = 0; i < V; ++i) {
            const float d = v[i] - mean[i];
            const float nm = mean[i] + d * inv;
            const float nm2 = m2[i] + d * (v[i] - nm);
            const bool bad = !isfinite(nm);
            mean[i] = bad ? mean[i] + v[i] : nm;
            m2[i] = bad ? __int_as_float(0x7fffffff) : nm2;
        }
    }

    /** Adds W values of channel 0 (V == 1): two-pass on the pack, then one Chan merge. */
    template <int W> __device__ __forceinline__ void push_pack(const float (&v)[W]) {
        static_assert(V == 1, "push_pack is for one channel per thread");
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < W; ++i) s += v[i];
        const float pm = s * (1.0f / W);
        float q = 0.0f;
#pragma unroll
        for (int i = 0; i < W; ++i) q += (v[i] - pm) * (v[i] - pm);
        StatsAcc<1> o;
        o.count = static_cast<float>(W);
        o.mean[0] = pm;
        o.m2[0] = q;
        merge(o);
    }

    /** Chan's merge, `this` first. Empty sides merge to the other one. */
    __device__ __forceinline__ void merge(const StatsAcc& b) {
        if (b.count == 0.0f) return;
        if (count == 0.0f) {
            *this = b;
            return;
        }
        const float n = count + b.count;
        const float wb = b.count / n;
#pragma unroll
        for (int i = 0; i < V; ++i) {
            const float delta = b.mean[i] - mean[i];
            const float nm = mean[i] + delta * wb;
            const float nm2 = m2[i] + b.m2[i] + delta * delta * count * wb;
            const bool bad = !isfinite(mean[i]) || !isfinite(b.mean[i]);
            mean[i] = bad ? mean[i] + b.mean[i] : nm;
            m2[i] = bad ? __int_as_float(0x7fffffff) : nm2;
        }
        count = n;
    }

    __device__ __forceinline__ void to_floats(float* f) const {
        f[0] = count;
#pragma unroll
        for (int i = 0; i < V; ++i) {
            f[1 + i] = mean[i];
            f[1 + V + i] = m2[i];
        }
    }
    __device__ __forceinline__ void from_floats(const float* f) {
        count = f[0];
#pragma unroll
        for (int i = 0; i < V; ++i) {
            mean[i] = f[1 + i];
            m2[i] = f[1 + V + i];
        }
    }
    __device__ __forceinline__ StatsAcc shfl_down(int off) const {
        StatsAcc o;
        o.count = __shfl_down_sync(kFullMask, count, off);
#pragma unroll
        for (int i = 0; i < V; ++i) {
            o.mean[i] = __shfl_down_sync(kFullMask, mean[i], off);
            o.m2[i] = __shfl_down_sync(kFullMask, m2[i], off);
        }
        return o;
    }
    /** Partial of channel i: fields (count, mean, m2). */
    static constexpr int kPartial = 3;
    __device__ __forceinline__ float partial(int field, int i) const {
        return field == 0 ? count : field == 1 ? mean[i] : m2[i];
    }
    /** Reads a one-channel partial whose fields are `field_stride` floats apart. */
    __device__ __forceinline__ void from_partial(const float* p, int64_t field_stride) {
        static_assert(V == 1, "one channel");
        count = p[0];
        mean[0] = p[field_stride];
        m2[0] = p[2 * field_stride];
    }
};

/** The backward sums of V channels. */
template <int V> struct GradAcc {
    static constexpr int kFloats = 2 * V;
    float sdy[V];
    float sdx[V];

    __device__ __forceinline__ void init() {
#pragma unroll
        for (int i = 0; i < V; ++i) sdy[i] = sdx[i] = 0.0f;
    }
    /** Adds one row: dy[i], x[i] of channel i with channel mean mean[i]. */
    __device__ __forceinline__ void push_row(const float (&dy)[V], const float (&x)[V],
                                             const float (&mean)[V]) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
            sdy[i] += dy[i];
            sdx[i] = fmaf(dy[i], x[i] - mean[i], sdx[i]);
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
        sdy[0] += a;
        sdx[0] += b;
    }
    __device__ __forceinline__ void merge(const GradAcc& o) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
            sdy[i] += o.sdy[i];
            sdx[i] += o.sdx[i];
        }
    }
    __device__ __forceinline__ void to_floats(float* f) const {
#pragma unroll
        for (int i = 0; i < V; ++i) {
            f[i] = sdy[i];
            f[V + i] = sdx[i];
        }
    }
    __device__ __forceinline__ void from_floats(const float* f) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
            sdy[i] = f[i];
            sdx[i] = f[V + i];
        }
    }
    __device__ __forceinline__ GradAcc shfl_down(int off) const {
        GradAcc o;
#pragma unroll
        for (int i = 0; i < V; ++i) {
            o.sdy[i] = __shfl_down_sync(kFullMask, sdy[i], off);
            o.sdx[i] = __shfl_down_sync(kFullMask, sdx[i], off);
        }
        return o;
    }
    /** Partial of channel i: fields (sum dy, sum dy * (x - mean)). */
    static constexpr int kPartial = 2;
    __device__ __forceinline__ float partial(int field, int i) const {
        return field == 0 ? sdy[i] : sdx[i];
    }
    /** Reads a one-channel partial whose fields are `field_stride` floats apart. */
    __device__ __forceinline__ void from_partial(const float* p, int64_t field_stride) {
        static_assert(V == 1, "one channel");
        sdy[0] = p[0];
        sdx[0] = p[field_stride];
    }
};

/**
 * Merges the accumulators of each column x of the (blockDim.x, blockDim.y) block in a fixed
 * order; thread (x, 0) returns true and holds its column's result in `acc`. `smem` must hold
 * (kMaxColumnThreads / 32) * blockDim.x * Acc::kFloats floats. Every thread must call it.
 */
template <class Acc>
__device__ __forceinline__ bool column_merge(Acc& acc, float* smem) {
    const int bx = blockDim.x;
    const int t = threadIdx.y * bx + threadIdx.x;
    const int lane = t & 31;
    const int warp = t >> 5;
    const int warps = (bx * blockDim.y) >> 5;
    for (int off = 16; off >= bx; off >>= 1) {
        const Acc o = acc.shfl_down(off);
        if (lane + off < 32) acc.merge(o);
    }
    if (warps == 1) return threadIdx.y == 0;
    if (lane < bx) acc.to_floats(smem + (warp * bx + lane) * Acc::kFloats);
    __syncthreads();
    if (threadIdx.y != 0) return false;
    // Thread (x, 0) is lane x of warp 0 and already holds warp 0's result.
    for (int w = 1; w < warps; ++w) {
        Acc o;
        o.from_floats(smem + (w * bx + threadIdx.x) * Acc::kFloats);
        acc.merge(o);
    }
    return true;
}

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
