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
    /** Partial of channel i: (count, mean, m2). */
    static constexpr int kPartial = 3;
    __device__ __forceinline__ void write_partial(float* p, int i) const {
        p[0] = count;
        p[1] = mean[i];
        p[2] = m2[i];
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
    /** Partial of channel i: (sum dy, sum dy * (x - mean)). */
    static constexpr int kPartial = 2;
    __device__ __forceinline__ void write_partial(float* p, int i) const {
        p[0] = sdy[i];
        p[1] = sdx[i];
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

}  // namespace warpnorm
