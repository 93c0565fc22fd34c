/*
 * reduce.cuh - the deterministic warp/block reduction family every kernel uses, in f32.
 *
 * Two shapes, each written once and instantiated with a combine rule:
 * - All-reduce (warp_allreduce / block_allreduce): the xor butterfly. At every step lane i
 *   combines its K values with lane i^m's; with a commutative combine (f32 addition here, the
 *   compensated TwoSum pair in twosum.cuh) both lanes compute the same bits, so every lane ends
 *   with the bitwise-identical result, independent of scheduling. Over a block (or one row of
 *   a 2-D block): warp results go through shared memory and every warp re-reduces the warp
 *   results in the same butterfly (block_rows_allreduce_sum2: every thread adds its row's
 *   warp results in warp order).
 * - Column merge (column_merge): the `by` accumulators of each column of a (bx, by) block
 *   merged into thread (x, 0) in a fixed order - a shfl_down tree inside each warp, then the
 *   warps in warp order through shared memory - for accumulators whose merge is not
 *   commutative bit-for-bit (Chan's merge, welford.cuh) or that are merged once per column
 *   (BatchNorm's per-channel sums, LayerNorm's dgamma/dbeta finalize).
 * SumAcc<K> is the plain K-float sum accumulator for column_merge. No atomics anywhere: reruns
 * are bitwise identical.
 */
#pragma once

#include "dtype.cuh"

namespace warpnorm {

constexpr unsigned kFullMask = 0xffffffffu;

/** Componentwise f32 sum, the combine rule of the plain sums. */
struct AddCombine {
    template <int K>
    __device__ __forceinline__ void operator()(float (&v)[K], const float (&o)[K]) const {
#pragma unroll
        for (int i = 0; i < K; ++i) v[i] += o[i];
    }
};

/**
 * Combines K values over groups of `width` consecutive lanes (a power of two <= 32, a runtime
 * value or a constant) in the xor butterfly; every lane of a group gets the group's result.
 * `combine(v, o)` folds the partner's values `o` into `v` and must give the same bits with
 * the operands swapped. All 32 lanes of the warp must call it (the mask is full).
 */
template <int K, class Combine>
__device__ __forceinline__ void warp_allreduce(float (&v)[K], int width, Combine combine) {
    for (int m = width >> 1; m > 0; m >>= 1) {
        float o[K];
#pragma unroll
        for (int i = 0; i < K; ++i) o[i] = __shfl_xor_sync(kFullMask, v[i], m);
        combine(v, o);
    }
}

/**
 * Combines K values over the blockDim.x threads of one block row (the whole block when
 * blockDim.y == 1); every thread of the row gets the same bits. `scratch` is the row's own
 * shared memory, at least 32 * K floats. All threads of the block must call it together (two
 * barriers; the scratch may be reused right after it returns). blockDim.x must be a multiple
 * of 32. Lanes past the warp count re-reduce 0s, the identity of both combine rules.
 */
template <int K, class Combine>
__device__ __forceinline__ void block_allreduce(float (&v)[K], float* scratch, Combine combine) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    warp_allreduce(v, 32, combine);
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < K; ++i) scratch[32 * i + warp] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < K; ++i) v[i] = lane < warps ? scratch[32 * i + lane] : 0.0f;
    warp_allreduce(v, 32, combine);
    __syncthreads();
}

/** Sum of `v` over groups of `width` lanes (warp_allreduce). */
__device__ __forceinline__ float warp_allreduce_sum(float v, int width = 32) {
    float s[1] = {v};
    warp_allreduce(s, width, AddCombine{});
    return s[0];
}

/** Two sums at once (warp_allreduce). */
__device__ __forceinline__ void warp_allreduce_sum2(float& a, float& b, int width = 32) {
    float s[2] = {a, b};
    warp_allreduce(s, width, AddCombine{});
    a = s[0];
    b = s[1];
}

/** Sum of `v` over a block row (block_allreduce); `scratch` holds at least 32 floats. */
__device__ __forceinline__ float block_allreduce_sum(float v, float* scratch) {
    float s[1] = {v};
    block_allreduce(s, scratch, AddCombine{});
    return s[0];
}

/** Two sums over a block row (block_allreduce); `scratch` holds at least 64 floats. */
__device__ __forceinline__ void block_allreduce_sum2(float& a, float& b, float* scratch) {
    float s[2] = {a, b};
    block_allreduce(s, scratch, AddCombine{});
    a = s[0];
    b = s[1];
}

/**
 * Two sums over each row of a 2-D block: the blockDim.x threads (a multiple of 32) of row
 * threadIdx.y sum their values; every thread of the row gets the same bits. Warp sums
 * (warp_allreduce), then every thread adds its row's warp totals in warp order from shared
 * memory. `scratch` holds 64 * blockDim.y floats. All threads of the block must call it
 * together (two barriers). The same fixed-order contract as block_allreduce_sum2, in the form
 * that fits LayerNorm's multi-row backward block at its 128-register bound on sm_100 (the
 * butterfly second stage spills there).
 */
__device__ __forceinline__ void block_rows_allreduce_sum2(float& a, float& b, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    warp_allreduce_sum2(a, b);
    float* s = scratch + 64 * threadIdx.y;
    if (lane == 0) {
        s[warp] = a;
        s[32 + warp] = b;
    }
    __syncthreads();
    a = 0.0f;
    b = 0.0f;
    for (int w = 0; w < warps; ++w) {
        a += s[w];
        b += s[32 + w];
    }
    __syncthreads();
}

/**
 * The columns column_merge_in merges: the block's own (BlockColumns: column threadIdx.x, row
 * threadIdx.y), or FlatColumns: its threads t = 0 .. threads - 1 (in their linear order) seen
 * as gx columns, thread t in column t % gx of row t / gx.
 */
struct BlockColumns {
    __device__ __forceinline__ int bx() const { return blockDim.x; }
    __device__ __forceinline__ int t() const { return threadIdx.y * bx() + threadIdx.x; }
    __device__ __forceinline__ int warps() const { return (bx() * blockDim.y) >> 5; }
    __device__ __forceinline__ bool head() const { return threadIdx.y == 0; }
    __device__ __forceinline__ unsigned x() const { return threadIdx.x; }
};
struct FlatColumns {
    int gx, tid, threads;
    __device__ __forceinline__ int bx() const { return gx; }
    __device__ __forceinline__ int t() const { return tid; }
    __device__ __forceinline__ int warps() const { return threads >> 5; }
    __device__ __forceinline__ bool head() const { return tid < gx; }
    __device__ __forceinline__ unsigned x() const { return static_cast<unsigned>(tid); }
};

/**
 * Merges the accumulators of each column of `cols` (bx columns, a power of two <= 32, over
 * a multiple of 32 threads, at most MaxThreads) in a fixed order: a shfl_down tree inside
 * each warp, then the warps in order through shared memory; the threads of row 0 return true
 * with their column's result. `smem` must hold (MaxThreads / 32) * bx * Acc::kFloats floats.
 * Every thread must call it.
 *
 * Acc provides kFloats, merge(const Acc&) (`this` first), shfl_down(int offset),
 * to_floats(float*) and from_floats(const float*).
 */
template <int MaxThreads, class Acc, class Cols>
__device__ __forceinline__ bool column_merge_in(Acc& acc, float* smem, const Cols& cols) {
    const int bx = cols.bx();
    const int t = cols.t();
    const int lane = t & 31;
    const int warp = t >> 5;
    const int warps = cols.warps();
    for (int off = 16; off >= bx; off >>= 1) {
        const Acc o = acc.shfl_down(off);
        if (lane + off < 32) acc.merge(o);
    }
    if (warps == 1) return cols.head();
    if (lane < bx) acc.to_floats(smem + (warp * bx + lane) * Acc::kFloats);
    __syncthreads();
    if (!cols.head()) return false;
    // Column x's row-0 thread is lane x of warp 0 and already holds warp 0's result.
    for (int w = 1; w < warps; ++w) {
        Acc o;
        o.from_floats(smem + (w * bx + cols.x()) * Acc::kFloats);
        acc.merge(o);
    }
    return true;
}

/**
 * column_merge_in over the (blockDim.x, blockDim.y) block's own columns: thread (x, 0)
 * returns true and holds column x's result. blockDim.x is a power of two <= 32, blockDim.x *
 * blockDim.y a multiple of 32 and at most MaxThreads.
 */
template <int MaxThreads, class Acc>
__device__ __forceinline__ bool column_merge(Acc& acc, float* smem) {
    return column_merge_in<MaxThreads>(acc, smem, BlockColumns{});
}

/** K plain f32 sums, as a column_merge accumulator. */
template <int K> struct SumAcc {
    static constexpr int kFloats = K;
    float v[K];

    __device__ __forceinline__ void init() {
#pragma unroll
        for (int i = 0; i < K; ++i) v[i] = 0.0f;
    }
    __device__ __forceinline__ void merge(const SumAcc& o) { AddCombine{}(v, o.v); }
    __device__ __forceinline__ void to_floats(float* f) const {
#pragma unroll
        for (int i = 0; i < K; ++i) f[i] = v[i];
    }
    __device__ __forceinline__ void from_floats(const float* f) {
#pragma unroll
        for (int i = 0; i < K; ++i) v[i] = f[i];
    }
    __device__ __forceinline__ SumAcc shfl_down(int off) const {
        SumAcc o;
#pragma unroll
        for (int i = 0; i < K; ++i) o.v[i] = __shfl_down_sync(kFullMask, v[i], off);
        return o;
    }
};

}  // namespace warpnorm
