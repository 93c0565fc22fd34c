/*
 * batch_norm.cu - BatchNorm forward (training and eval) and backward, f32/f16/bf16 activations,
 * f32 accumulation, f32 or activation-typed parameters and running statistics.
 *
 * The input is (N, C, S) with S = product of the spatial dims, in NCHW ("nchw": every channel is
 * N slices of S contiguous elements) or channels-last ("nhwc": N * S rows of C channels; also
 * every (N, C) input). Kernels, in launch order (the Rust planner in src/batch_norm/plan.rs
 * chooses grids, splits and variants):
 *
 * Training forward (2 launches, or 3 where the finalize does not fold; DRAM traffic 3s per
 * element: read x twice, write y):
 *   fwd_<T>_stats_<layout>_<access>  grid (channel tiles, splits). Per-thread compensated
 *       Welford (welford.cuh): the mean a (hi, lo) pair, the values a thread has in flight
 *       taken as one group (16-bit NCHW packs: one group per pack, for the registers)
 *       relative to its running mean, so data with a large offset keeps its
 *       precision and the mean's error is relative to the mean; merged with Chan's formula in
 *       a fixed order (warp shfl tree, then warps in order); one (count, mean hi, mean lo, m2)
 *       partial per (split, channel). Few channels still fill the GPU: the planner splits the
 *       reduction until there are about 8 blocks per SM. NCHW: the finalize below is folded
 *       into it (WN_BN_FOLD, fold_finalize): the last block of each channel to arrive
 *       (common/arrival.cuh: a fence and an integer counter in the workspace, reset by that
 *       block) merges the channel's partials (at most FOLD_MAX_ROUNDS rounds of loads: the
 *       planner caps the splits) and finishes it. Channels-last keeps the finalize launch.
 *   fwd_<P>params_finalize  block (channels, split rows): each thread merges a strided set of
 *       splits of its channel, then the rows merge in a fixed order (column_merge); mean,
 *       invstd = 1 / sqrt(var + eps); running stats with the unbiased variance (momentum or
 *       1 / (num_batches_tracked + 1) read on the device); save_mean = fl(mean) and
 *       save_mean_lo = mean - save_mean (the pair the backward takes); coefficients.
 *   fwd_<T>_apply_<layout>_<access>  y = ((x - save_mean) - save_mean_lo) * (gamma * invstd) + beta;
 *       nchw: grid-stride over packs, channel tracked incrementally; nhwc: 2-D grid, each
 *       thread owns a vector of channels and walks rows. Bumps num_batches_tracked (after the
 *       finalize kernel read it).
 * Eval forward (1 launch, 2s per element): fwd_<T>_<P>params_eval_apply_<layout>_<access>, the
 *   apply pass with each channel's coefficients computed from the running statistics and
 *   parameters (bn_finalize.cuh's frozen_stats, FrozenCoef); it also writes save_mean /
 *   save_invstd.
 * Backward (2 launches, 3 where the finalize does not fold; 5s per element): bwd_<T>_reduce_*
 *   (sum dy, sum dy * (x - mean) per channel and split), bwd_<P>params_finalize (dgamma, dbeta,
 *   dx coefficients; folded into the sums as in the forward),
 *   bwd_<T>_apply_* (dx = a * dy + b * (x - save_mean) + d, d including -b * save_mean_lo). Eval-mode backward (frozen statistics):
 *   dx = dy * gamma * invstd by the eval apply kernel on dy (no workspace); with dgamma / dbeta,
 *   the eval-mode sums bwd_<T>_<P>params_eval_reduce_* write dx as well and finalize in their
 *   last blocks (one launch; in place on vecodd shapes: bwd_reduce, then the eval apply).
 * Cooperative tiers (devices with cooperative launches, vector access, where the fused tier
 *   does not apply): fwd_<T>_coop_<layout>_vec and bwd_<T>_coop_<layout>_vec do a training
 *   pass's reduction, finalize and elementwise pass in one launch whose blocks are all
 *   resident, with grid barriers between the phases (coop_nchw: one, each item merging its
 *   channel; coop_nhwc: two, the merge spread over the grid between them); the channels-last
 *   eval-mode backward with dgamma / dbeta: bwd_<T>_<P>params_eval_coop_nhwc_vec (the sums
 *   writing dx, a barrier, the merge).
 * Fused tiers, when a block's channels fit in shared memory and there are at least 2 channel
 *   tiles per SM (so one unsplit pass fills the GPU): fwd_<T>_<P>params_fused_<layout>_<access>
 *   (2s per element, one launch; with cumulative momentum every block reads
 *   num_batches_tracked, so the finalize kernel then bumps it with one thread) and
 *   bwd_<T>_<P>params_fused_<layout>_<access> (1 launch, 3s per element).
 * Streaming loops keep 4 loads per thread in flight (kUnroll).
 *
 * Written once for every tier (cuda/common/): the Welford update and Chan merge (welford.cuh,
 * through channel_reduce.cuh's StatsAcc), the fixed-order column merge (reduce.cuh), and the
 * per-channel finish - invstd, running statistics, saved statistics, dgamma/dbeta and the
 * apply coefficients (bn_finalize.cuh, matching the CPU reference src/cpu/batch_norm.rs).
 *
 * Access variants: "vec" moves 16-byte packs (nchw needs S % V == 0, nhwc needs C % V == 0, and
 * 16-byte aligned pointers; V = 16 / sizeof(T)); "vecodd" (nchw, S >= V and S % V != 0, such as
 * 7x7 and 14x14 in 16-bit types or 7x7 in f32, 16-byte aligned pointers) also moves 16-byte
 * packs: the reductions and fused kernels read the whole 32-byte sectors that cover each slice
 * and mask the other channels' lanes (reduce_nchw_odd, OddWalk), the elementwise passes stream
 * the flat tensor with a per-lane channel (apply_nchw_odd); "scalar" moves single elements (any
 * size and alignment: misaligned views, S < V), still coalesced. All offsets are 64-bit.
 *
 * Coalescing: on aligned shapes (32-byte aligned buffers, S * sizeof(T) (nchw) or
 * C * sizeof(T) (nhwc) a multiple of 32, C a multiple of 8) every global request is fully
 * coalesced (tests/batch_norm/coalescing.rs): per-channel f32 rows of the nhwc kernels move through
 * warp_load_row / warp_store_row (16-byte pieces consecutive across lanes, also for 8 channels
 * per thread), the fused kernels finish one channel per thread, the partials are laid out so
 * that both their writers and the finalize kernels touch consecutive channels, and nchw splits
 * start on a sector. No float atomics anywhere: reruns are
 * bitwise identical. Benchmark: `cargo bench --bench batch_norm` (GB/s, % of copy).
 */
#include "abi.h"
#include "common/bn_finalize.cuh"
#include "common/channel_reduce.cuh"
#include "common/vec.cuh"

namespace warpnorm {
namespace bn {

/** Loads each thread keeps in flight in the streaming loops. */
constexpr int kUnroll = 4;

/** Widens a pack to f32. */
template <typename T, int V>
__device__ __forceinline__ void unpack(const Pack<T, V>& p, float (&out)[V]) {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = to_float(p.v[i]);
}

__device__ __forceinline__ void bump(wn_devptr counter) {
    if (counter != 0 && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 &&
        threadIdx.y == 0) {
        *reinterpret_cast<long long*>(counter) += 1;
    }
}

/** One output pack from the K coefficients of its channel(s) (CV = channels per pack). */
template <typename T, int V, int CV, bool BWD>
__device__ __forceinline__ Pack<T, V> apply_pack(const Pack<T, V>& px, const Pack<T, V>& pd,
                                                 const float (&k)[4][CV]) {
    Pack<T, V> out;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        const int j = CV == 1 ? 0 : i;
        const float xv = to_float(px.v[i]);
        float o;
        if constexpr (BWD) {
            o = fmaf(k[0][j], to_float(pd.v[i]), fmaf(k[1][j], xv - k[2][j], k[3][j]));
        } else {
            o = fmaf((xv - k[0][j]) - k[1][j], k[2][j], k[3][j]);
        }
        out.v[i] = from_float<T>(o);
    }
    return out;
}

/**
 * The coefficients of a channels-last block's channels [c0, c0 + valid) (at most 32 * V: the
 * planner's bx is at most 32) computed once by `coef(channel)`, in the block's thread order
 * (coalesced parameter reads), then thread x takes channels x * V .. + V from shared memory
 * (0 past `valid`). Every thread of the block must call it.
 */
template <int V, class F>
__device__ __forceinline__ void block_coef_row(F&& coef, int64_t c0, int valid, float (&k)[4][V]) {
    __shared__ float tile[4][32 * V];
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    for (int i = tid; i < valid; i += blockDim.x * blockDim.y) {
        const Coef kc = coef(c0 + i);
#pragma unroll
        for (int t = 0; t < 4; ++t) tile[t][i] = kc.k[t];
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < 4; ++t) {
#pragma unroll
        for (int i = 0; i < V; ++i) {
            const int ci = threadIdx.x * V + i;
            k[t][i] = ci < valid ? tile[t][ci] : 0.0f;
        }
    }
}

/* ---------------------------------------------------------------- per-channel reductions */

/** Shared memory of column_merge for accumulators of K floats. */
template <int K> struct MergeSmem {
    static constexpr int kFloats = (kMaxColumnThreads / 32) * 32 * K;
};

/* ---------------------------------------------------------------- finalize */

/**
 * Merges the partials of the CV channels first, first + cstride, ... (`valid` of them exist)
 * over the splits: thread (x, y) merges splits y, y + by, ... in order, then column_merge()
 * merges the rows in a fixed order. Field f of split k: at (f * splits + k) * C + c, a warp
 * reading consecutive channels of consecutive splits (consecutive x, consecutive channels), or
 * (flags WN_BN_CHANNEL_MAJOR, CV = 1) at (f * C + c) * splits + k, a warp reading consecutive
 * splits of its channel. Returns true in thread (x, 0). Every thread must call it.
 */
template <class Acc>
__device__ __forceinline__ bool merge_splits(Acc& acc, const float* part, int64_t splits,
                                             int64_t channels, int64_t first, int valid,
                                             int64_t cstride, uint32_t flags, float* smem) {
    acc.init();
    if (valid > 0) {
        const bool cm = (flags & WN_BN_CHANNEL_MAJOR) != 0;
        const float* p = part + (cm ? first * splits : first);
        const int64_t k_stride = cm ? 1 : channels;
        for (int64_t k = threadIdx.y; k < splits; k += blockDim.y) {
            Acc o;
            o.from_partial(p + k * k_stride, splits * channels, valid, cstride);
            acc.merge(o);
        }
    }
    return column_merge<kMaxColumnThreads>(acc, smem);
}

/** finish_batch_stats' arguments that write nothing (no running or saved statistics). */
struct StatsOnly {
    float eps;
    wn_devptr running_mean, running_var, save_mean, save_mean_lo, save_invstd;
};

/**
 * The apply coefficients of forward channel c from its merged statistics (mean hi mh + lo ml,
 * m2); with `writes`, also its running and saved statistics (bn_finalize.cuh).
 */
template <typename P>
__device__ __forceinline__ Coef fwd_channel_coef(const WnBatchNormFinalizeArgs& a, int64_t c,
                                                 float mh, float ml, float m2, bool writes) {
    const float f = running_factor(a.flags, a.momentum, a.counter);
    const ChannelStats st = writes ? finish_batch_stats<P>(a, c, mh, ml, m2, a.count, f)
                                   : finish_batch_stats<P>(StatsOnly{a.eps, 0, 0, 0, 0, 0}, c,
                                                           mh, ml, m2, a.count, f);
    return fwd_coef<P>(a.gamma, a.beta, c, st);
}

/**
 * Finishes forward channel c from its merged statistics (mean hi mh + lo ml, m2): running
 * statistics, saved statistics and the apply coefficients in the workspace.
 */
template <typename P>
__device__ __forceinline__ void finish_fwd_channel(const WnBatchNormFinalizeArgs& a, int64_t c,
                                                   float mh, float ml, float m2) {
    const ChannelStats st = finish_batch_stats<P>(a, c, mh, ml, m2, a.count,
                                                  running_factor(a.flags, a.momentum, a.counter));
    const Coef k = fwd_coef<P>(a.gamma, a.beta, c, st);
    float* coef = reinterpret_cast<float*>(a.coef);
#pragma unroll
    for (int j = 0; j < 4; ++j) coef[j * a.coef_stride + c] = k.k[j];
}

/**
 * The dx coefficients of backward channel c from its sums sdy = sum(dy), sdx = sum(dy * (x -
 * save_mean)) over count > 0 values; with `writes`, also dgamma and dbeta (bn_finalize.cuh).
 */
template <typename P>
__device__ __forceinline__ Coef bwd_channel_coef(const WnBatchNormBwdFinalizeArgs& a, int64_t c,
                                                 float sdy, float sdx, bool writes) {
    const float ml = a.mean_lo != 0 ? reinterpret_cast<const float*>(a.mean_lo)[c] : 0.0f;
    return bwd_coef<P>(a.gamma, writes ? a.dgamma : 0, writes ? a.dbeta : 0, c,
                       reinterpret_cast<const float*>(a.mean)[c], ml,
                       reinterpret_cast<const float*>(a.invstd)[c], sdy, sdx, a.count,
                       (a.flags & WN_BN_FROZEN) != 0);
}

/**
 * Finishes backward channel c from its sums sdy = sum(dy), sdx = sum(dy * (x - save_mean))
 * over count > 0 values: dgamma, dbeta and (training) the dx coefficients in the workspace.
 */
template <typename P>
__device__ __forceinline__ void finish_bwd_channel(const WnBatchNormBwdFinalizeArgs& a, int64_t c,
                                                   float sdy, float sdx) {
    const float ml = a.mean_lo != 0 ? reinterpret_cast<const float*>(a.mean_lo)[c] : 0.0f;
    const bool frozen = (a.flags & WN_BN_FROZEN) != 0;
    const Coef k = bwd_coef<P>(a.gamma, a.dgamma, a.dbeta, c,
                               reinterpret_cast<const float*>(a.mean)[c], ml,
                               reinterpret_cast<const float*>(a.invstd)[c], sdy, sdx, a.count,
                               frozen);
    if (frozen) return;  // eval-mode backward: dx is the eval-mode sums' or the eval apply's
    float* coef = reinterpret_cast<float*>(a.coef);
#pragma unroll
    for (int j = 0; j < 4; ++j) coef[j * a.coef_stride + c] = k.k[j];
}

/**
 * Channel i of CV merged channels stored as their accumulator's floats `v` (to_floats: the
 * forward's count, mean hi[CV], mean lo[CV], m2[CV]; the backward's sum dy[CV], sum dy * (x -
 * mean)[CV]), finished.
 */
template <typename P, int CV>
__device__ __forceinline__ void finish_stored(const WnBatchNormFinalizeArgs& a, int64_t c,
                                              const float* v, int i) {
    finish_fwd_channel<P>(a, c, v[1 + i], v[1 + CV + i], v[1 + 2 * CV + i]);
}
template <typename P, int CV>
__device__ __forceinline__ void finish_stored(const WnBatchNormBwdFinalizeArgs& a, int64_t c,
                                              const float* v, int i) {
    finish_bwd_channel<P>(a, c, v[i], v[CV + i]);
}

/**
 * Forward finalize (see WnBatchNormFinalizeArgs): block (bx, by), thread (x, y) handles
 * channel blockIdx.x * bx + x and splits y, y + by, ...; thread (x, 0) finishes the channel, so
 * the per-channel reads and writes of a warp are consecutive.
 */
template <typename P> __device__ __forceinline__ void finalize_fwd(const WnBatchNormFinalizeArgs& a) {
    __shared__ float smem[MergeSmem<StatsAcc<1>::kFloats>::kFloats];
    bump(a.counter_bump);
    const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (a.count == 0) return;  // the whole grid (a counter bump only)
    StatsAcc<1> w;
    const bool head = merge_splits(w, reinterpret_cast<const float*>(a.partials), a.splits, a.c,
                                   c, c < a.c ? 1 : 0, 1, a.flags, smem);
    if (!head || c >= a.c) return;
    finish_fwd_channel<P>(a, c, w.mh[0], w.ml[0], w.m2[0]);
}

/** Backward finalize (see WnBatchNormBwdFinalizeArgs), threads as in finalize_fwd. */
template <typename P> __device__ __forceinline__ void finalize_bwd(const WnBatchNormBwdFinalizeArgs& a) {
    __shared__ float smem[MergeSmem<GradAcc<1>::kFloats>::kFloats];
    const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    GradAcc<1> g;
    const bool head = merge_splits(g, reinterpret_cast<const float*>(a.partials), a.splits, a.c,
                                   c, c < a.c ? 1 : 0, 1, a.flags, smem);
    if (!head || c >= a.c) return;
    if (a.count == 0) {
        if (a.dgamma != 0) reinterpret_cast<P*>(a.dgamma)[c] = from_float<P>(0.0f);
        if (a.dbeta != 0) reinterpret_cast<P*>(a.dbeta)[c] = from_float<P>(0.0f);
        return;
    }
    finish_bwd_channel<P>(a, c, g.sdy(0), g.sdx(0));
}

/**
 * The finalize folded into a reduction (WN_BN_FOLD in `f.flags`; see the ABI header): called
 * by every thread of a reduction block after its partials are written, with the block's
 * merge scratch (free again: last_to_arrive synchronizes the block first). The last block of
 * the tile blockIdx.x to arrive merges the tile's splits - thread x the CV channels
 * c0 + x, c0 + x + bx, ..., so that a warp's partial loads are runs of consecutive channels -
 * and finishes the tile's channels c0, c0 + 1, ... (one per thread, from shared memory) as
 * the finalize kernels do. The parameter type: P when PFIXED (the
 * `..._<P>params_*` kernels), else float with WN_BN_PARAMS_F32 or T without. A never-zeroed
 * ticket (kDirty) finishes the tile from NaN statistics, so that every output of it shows the
 * mistake.
 */
template <typename T, typename P, bool PFIXED, int CV, class Acc, class Fin>
__device__ __forceinline__ void fold_finalize(const Fin& f, int64_t c0, float* smem) {
    if ((f.flags & WN_BN_FOLD) == 0) return;
    const Arrival arrival = last_to_arrive(f.tickets, blockIdx.x, gridDim.y);
    if (arrival == kNotLast) return;
    const int64_t bx = blockDim.x;
    const int64_t first = c0 + threadIdx.x;
    // Channels first + i * bx below C: a prefix of i.
    const int valid = arrival == kLast
                          ? static_cast<int>(max(min(static_cast<int64_t>(CV), (f.c - first + bx - 1) / bx), int64_t{0}))
                          : 0;
    Acc w;
    if (merge_splits(w, reinterpret_cast<const float*>(f.partials), f.splits, f.c, first, valid,
                     bx, f.flags, smem)) {
        // Thread (x, 0) stores its channels in warp 0's merge slot x, which column_merge no
        // longer reads.
        if (arrival == kDirty) {
            float nan[Acc::kFloats];
#pragma unroll
            for (int j = 0; j < Acc::kFloats; ++j) nan[j] = __int_as_float(0x7fffffff);
            w.from_floats(nan);
        }
        w.to_floats(smem + threadIdx.x * Acc::kFloats);
    }
    __syncthreads();
    const int tile = static_cast<int>(blockDim.x) * CV;
    for (int m = threadIdx.y * blockDim.x + threadIdx.x; m < tile && c0 + m < f.c;
         m += blockDim.x * blockDim.y) {
        // Channel c0 + m is thread x = m % bx's channel i = m / bx.
        const float* v = smem + (m % bx) * Acc::kFloats;
        const int i = static_cast<int>(m / bx);
        if constexpr (PFIXED) {
            finish_stored<P, CV>(f, c0 + m, v, i);
        } else if (sizeof(T) == 4 || (f.flags & WN_BN_PARAMS_F32) != 0) {
            finish_stored<float, CV>(f, c0 + m, v, i);
        } else {
            finish_stored<T, CV>(f, c0 + m, v, i);
        }
    }
}

/**
 * dx = dy * gamma * invstd of the eval-mode backward, written by the backward sums while they
 * hold dy (DX; see WnBatchNormReduceArgs): the frozen-statistics coefficients of channel c,
 * built as FrozenCoef<P> builds them for the eval apply, so that both give the same bits.
 */
template <typename P>
__device__ __forceinline__ Coef eval_dx_coef(const WnBatchNormReduceArgs& a, int64_t c) {
    return fwd_coef<P>(a.gamma, 0, c, frozen_stats<P>(0, 0, a.invstd, c, 0.0f));
}

/**
 * The item of an NCHW reduction a block owns: channel c, split k() of splits(). GridItem: the
 * block's own (blockIdx.x, blockIdx.y of gridDim.y: read where used, so the reduction kernels
 * hold no copies in registers); LoopItem: one of a cooperative pass's items.
 */
struct GridItem {
    __device__ __forceinline__ int64_t c() const { return blockIdx.x; }
    __device__ __forceinline__ int64_t k() const { return blockIdx.y; }
    __device__ __forceinline__ int64_t splits() const { return gridDim.y; }
};
struct LoopItem {
    int64_t c_, k_, splits_;
    __device__ __forceinline__ int64_t c() const { return c_; }
    __device__ __forceinline__ int64_t k() const { return k_; }
    __device__ __forceinline__ int64_t splits() const { return splits_; }
};

/**
 * One item of an NCHW reduction: block (1, by) reduces split it.k() of channel it.c(),
 * walking packs of V elements (S % V == 0, so packs never straddle a slice), and writes its
 * partial. GRAD selects the backward sums; DX (with GRAD) also writes the eval-mode
 * backward's dx with parameters of type P. `smem`: MergeSmem<Acc::kFloats> floats.
 */
template <typename T, int V, bool GRAD, typename P = float, bool DX = false, class It>
__device__ __forceinline__ void reduce_nchw_item(const WnBatchNormReduceArgs& a, const It& it,
                                                 float* smem) {
    static_assert(GRAD || !DX, "dx is written by the backward sums");
    using Acc = typename std::conditional<GRAD, GradAcc<1>, StatsAcc<1>>::type;
    const int64_t sp = a.s / V;  // packs per slice
    const int64_t total = a.n * sp;
    const int64_t c = it.c();
    const int64_t begin = it.k() * a.chunk;
    const int64_t end = min(begin + a.chunk, total);
    const int64_t step = blockDim.y;
    const int64_t step_n = step / sp;
    const int64_t step_s = step - step_n * sp;
    const T* x = reinterpret_cast<const T*>(a.x);
    const T* dy = reinterpret_cast<const T*>(a.dy);
    const int64_t slice = a.c * a.s;  // elements from (n, c) to (n + 1, c)
    float mean = 0.0f;  // GRAD: the saved mean (its lo part is applied by the finalize)
    if constexpr (GRAD) mean = reinterpret_cast<const float*>(a.mean)[c];
    float kdx[4][1] = {};
    if constexpr (DX) {
        const Coef k = eval_dx_coef<P>(a, c);
#pragma unroll
        for (int t = 0; t < 4; ++t) kdx[t][0] = k.k[t];
    }
    T* dx = reinterpret_cast<T*>(a.dx);
    Acc acc;
    acc.init();
    int64_t u = begin + threadIdx.y;
    if (u < end) {
        int64_t n = u / sp;
        int64_t s = u - n * sp;
        while (u < end) {
            // kUnroll loads in flight before the dependent Welford/sum updates.
            Held<T, V> px[kUnroll], pd[kUnroll];
            bool ok[kUnroll];
            int64_t offs[kUnroll];
#pragma unroll
            for (int j = 0; j < kUnroll; ++j) {
                ok[j] = u < end;
                if (ok[j]) {
                    const int64_t off = n * slice + c * a.s + s * V;
                    offs[j] = off;
                    px[j].load(x + off);
                    if constexpr (GRAD) pd[j].load(dy + off);
                    u += step;
                    s += step_s;
                    n += step_n;
                    if (s >= sp) {
                        s -= sp;
                        ++n;
                    }
                }
            }
            if constexpr (GRAD) {
#pragma unroll
                for (int j = 0; j < kUnroll; ++j) {
                    if (!ok[j]) break;
                    float xv[V], dv[V];
                    unpack(px[j].pack(), xv);
                    unpack(pd[j].pack(), dv);
                    acc.template push_pack<V>(dv, xv, mean);
                    if constexpr (DX)
                        store_pack<T, V>(dx + offs[j],
                                         apply_pack<T, V, 1, false>(pd[j].pack(), pd[j].pack(), kdx));
                }
            } else {
                // The packs in flight form groups of the compensated Welford update: one group
                // of the 4 f32 packs (16 values), or for 16-bit packs (8 values each) one group
                // per pack, so that at most 16 widened values are live at a time (one group of
                // 32 took the f16 kernel from 62 to 107 registers on sm_90, two groups of 2
                // packs to 79, one per pack to 64: 4 resident blocks of 256 threads again).
                constexpr int kGroups = V > 4 ? kUnroll : 1;
                constexpr int kPacks = kUnroll / kGroups;
#pragma unroll
                for (int g = 0; g < kGroups; ++g) {
                    // ok[] is true for a prefix of the packs: the first group is never empty.
                    if (g > 0 && !ok[g * kPacks]) break;
                    float xv[kPacks * V][1];
                    int m = 0;
#pragma unroll
                    for (int j = 0; j < kPacks; ++j) {
                        m += ok[g * kPacks + j] ? V : 0;
#pragma unroll
                        for (int i = 0; i < V; ++i)
                            xv[j * V + i][0] = to_float(px[g * kPacks + j].pack().v[i]);
                    }
                    acc.template push_group<kPacks * V>(xv, m);
                }
            }
        }
    }
    if (column_merge<kMaxColumnThreads>(acc, smem)) {
        // One thread: field f of split k at (f * C + c) * splits + k (channel-major, see the
        // ABI header).
        float* p = reinterpret_cast<float*>(a.partials) + c * it.splits() + it.k();
        const int64_t field_stride = it.splits() * a.c;
#pragma unroll
        for (int f = 0; f < Acc::kPartial; ++f) p[f * field_stride] = acc.partial(f, 0);
    }
}

/**
 * NCHW reduction: block (1, by) owns channel blockIdx.x and split blockIdx.y
 * (reduce_nchw_item), then the finalize folded in (fold_finalize).
 */
template <typename T, int V, bool GRAD, typename P = float, bool DX = false, class Fin>
__device__ __forceinline__ void reduce_nchw(const WnBatchNormReduceArgs& a, const Fin& fin) {
    using Acc = typename std::conditional<GRAD, GradAcc<1>, StatsAcc<1>>::type;
    __shared__ float smem[MergeSmem<Acc::kFloats>::kFloats];
    reduce_nchw_item<T, V, GRAD, P, DX>(a, GridItem{}, smem);
    fold_finalize<T, P, DX, 1, Acc>(fin, blockIdx.x, smem);
}

/**
 * Moves lanes [lo, V) of v down to [0, V - lo) (log2 V conditional shifts: selects, no
 * dynamic register indexing). The lanes shifted in at the top are copies, never read.
 */
template <int V> __device__ __forceinline__ void shift_lanes_down(float (&v)[V], int lo) {
#pragma unroll
    for (int b = 1; b < V; b *= 2) {
        const bool take = (lo & b) != 0;
#pragma unroll
        for (int i = 0; i + b < V; ++i) v[i] = take ? v[i + b] : v[i];
    }
}

/**
 * One pack of the flat tensor at element e0 (e0 a multiple of V in [0, numel)): one 16-byte
 * load when the whole pack is inside the tensor, else (only the tensor's last pack, when
 * numel % V != 0) its elements below numel one by one, the rest zero.
 */
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_pack_in(const T* p, int64_t e0, int64_t numel) {
    if (e0 + V <= numel) return load_pack<T, V>(p + e0);
    Pack<T, V> out;
#pragma unroll
    for (int i = 0; i < V; ++i) out.v[i] = e0 + i < numel ? p[e0 + i] : from_float<T>(0.0f);
    return out;
}

/**
 * load_pack_in in two steps, so that a thread issues all its loads before it uses any (a
 * branch that merges a vector and an element-by-element load would close the window of loads
 * in flight at the first pack): load_pack_issue issues one predicated 16-byte load when the
 * pack lies wholly inside the tensor, else (only the tensor's last pack, when
 * numel % V != 0) none and returns zeros; load_pack_finish, called after the other loads of
 * the batch are issued, fills such a pack with its elements below numel one by one
 * (`tail`: what load_pack_issue set). Nothing outside the pack is read. The pack is held as
 * 32-bit words (vec.cuh's Held), zeroed and loaded over: held as 16-bit elements, nvcc merged
 * the zeros and the load with byte permutes right at the load, which waited for it, so that a
 * 16-bit thread's second pack was issued only after its first had arrived (16 bytes in flight,
 * not 32).
 */
template <typename T, int V>
__device__ __forceinline__ Held<T, V> load_pack_issue(const T* p, int64_t e0, int64_t numel,
                                                      bool& tail) {
    tail = e0 + V > numel && e0 < numel;  // a pack at or past numel: zeros, no tail
    Held<T, V> out;
#pragma unroll
    for (int i = 0; i < Held<T, V>::kCount; ++i) out.w[i] = 0u;  // +0 in every type
    if (e0 + V <= numel) out.load(p + e0);
    return out;
}

template <typename T, int V>
__device__ __forceinline__ void load_pack_finish(Held<T, V>& h, const T* p, int64_t numel,
                                                 bool tail) {
    if (!tail) return;
    const int64_t e0 = numel / V * V;
    Pack<T, V> v;
#pragma unroll
    for (int i = 0; i < V; ++i) v.v[i] = e0 + i < numel ? p[e0 + i] : from_float<T>(0.0f);
    memcpy(h.w, &v, sizeof(v));
}

/** Stores the elements of a pack at element e0 that are inside the tensor (see load_pack_in). */
template <typename T, int V>
__device__ __forceinline__ void store_pack_in(T* p, int64_t e0, int64_t numel, const Pack<T, V>& v) {
    if (e0 + V <= numel) {
        store_pack<T, V>(p + e0, v);
        return;
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
        if (e0 + i < numel) p[e0 + i] = v.v[i];
    }
}

/**
 * NCHW reduction for any slice length S >= V ("vecodd": S % V != 0, 16-byte aligned x and dy).
 * A slice (n, c) rarely starts on a sector, so the units of a slice are the spc packs of the
 * 32-byte sectors that cover it (spc = 2 * (floor((S + 2V - 2) / 2V) + 1): the most sectors
 * any start needs), counted from the sector of its first element in x's own address phase:
 * every pack of a covering sector is loaded whole (the neighbouring slices' elements are
 * masked out), so every request reads whole sectors, as in the divisible kernel. Packs outside
 * the tensor are not read; the tensor's last pack, when N * C * S % V != 0, is read element by
 * element. Each pack's elements of the slice (a contiguous range [lo, hi) of its lanes) form
 * one group of the compensated Welford update, shifted down to lanes [0, hi - lo); the
 * backward zeroes dy and sets x to the mean outside the range (adding exactly nothing).
 * Block, grid, splits and partials as reduce_nchw (units: the covering packs).
 *
 * DX (eval-mode backward sums, dx != dy: the covering reads of dy would race with the
 * neighbouring blocks' dx otherwise) also writes dx = dy * gamma * invstd over whole 32-byte
 * sectors: a sector (in x's address phase) is written by the unit of the slice that holds its
 * last element in the tensor, both its packs, each lane with the coefficients of its own
 * channel (this slice's, or the one or two before it: S >= V, so a sector reaches at most two
 * slices back). Every pack of the tensor is written once, by one unit, and every store is a
 * whole 16-byte pack (the tensor's last pack, when N * C * S % V != 0, element by element).
 */
template <typename T, int V, bool GRAD, typename P = float, bool DX = false, class Fin>
__device__ __forceinline__ void reduce_nchw_odd(const WnBatchNormReduceArgs& a, const Fin& fin) {
    static_assert(GRAD || !DX, "dx is written by the backward sums");
    using Acc = typename std::conditional<GRAD, GradAcc<1>, StatsAcc<1>>::type;
    // Packs in flight: kUnroll, but 2 in the backward sums (x and dy packs; 4 of each took
    // 110 registers on sm_90: 2 blocks per SM, short of the loads in flight the model asks).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
    // ptxas for sm_120 kept the 16-bit statistics at 80 registers and spilled 8 bytes with 4.
    constexpr int kStatsRU = sizeof(T) == 4 ? kUnroll : 2;
#else
    constexpr int kStatsRU = kUnroll;
#endif
    // The eval-mode sums that write dx (DX), 16-bit: one pack of each (two took 78 registers
    // on sm_90: 3 blocks per SM, whose 2048-block grid for 128 x 2048 x 7 x 7 ran 5.2 waves).
    constexpr int kRU = DX && sizeof(T) < 4 ? 1 : (GRAD ? 2 : kStatsRU);
    __shared__ float smem[MergeSmem<Acc::kFloats>::kFloats];
    constexpr int64_t E = 2 * V;  // elements per 32-byte sector
    const int64_t c = blockIdx.x;
    const int64_t spc = 2 * ((a.s + E - 2) / E + 1);  // covering packs per slice
    const int64_t total = a.n * spc;
    const int64_t numel = a.n * a.c * a.s;
    const int64_t begin = static_cast<int64_t>(blockIdx.y) * a.chunk;
    const int64_t end = min(begin + a.chunk, total);
    const int64_t step = blockDim.y;
    const int64_t step_n = step / spc;
    const int64_t step_s = step - step_n * spc;
    // x's first element sits `phase` elements into its 32-byte sector (x is 16-byte aligned).
    const int64_t phase = static_cast<int64_t>((a.x >> 4) & 1u) * V;
    const T* x = reinterpret_cast<const T*>(a.x);
    const T* dy = reinterpret_cast<const T*>(a.dy);
    const int64_t slice = a.c * a.s;
    float mean = 0.0f;
    if constexpr (GRAD) mean = reinterpret_cast<const float*>(a.mean)[c];
    // DX: the coefficients of this channel and the one before it (mod C), and of the one
    // before that when a slice is shorter than a sector; how far back a lane may reach (a lane
    // d < 0 elements before the slice is in the slice before it when d >= -S, else the one
    // before that).
    float kdx[3][4] = {};
    if constexpr (DX) {
        const int back = a.s < E ? 3 : 2;
#pragma unroll
        for (int b = 0; b < 3; ++b) {
            if (b >= back) break;
            const int64_t cb = ((c - b) % a.c + a.c) % a.c;  // C may be 1
            const Coef k = eval_dx_coef<P>(a, cb);
#pragma unroll
            for (int t = 0; t < 4; ++t) kdx[b][t] = k.k[t];
        }
    }
    const int s_near = static_cast<int>(min(a.s, E));
    T* dx = reinterpret_cast<T*>(a.dx);
    Acc acc;
    acc.init();
    int64_t u = begin + threadIdx.y;
    if (u < end) {
        int64_t n = u / spc;
        int64_t s = u - n * spc;
        while (u < end) {
            Held<T, V> px[kRU], pd[kRU];
            int lo[kRU], hi[kRU];
            bool tail[kRU];
            bool own[kRU];  // DX: this unit writes the pack's dx
            int rel[kRU];   // DX: the slice's first element - the pack's
            int64_t ats[kRU];
#pragma unroll
            for (int j = 0; j < kRU; ++j) {
                lo[j] = 0;
                hi[j] = 0;
                own[j] = false;
                rel[j] = 0;
                int64_t at = numel;  // no pack (load_pack_issue: zeros, no load)
                if (u < end) {
                    const int64_t b = n * slice + c * a.s;  // the slice's first element
                    const int64_t e0 = ((b + phase) / E) * E - phase + s * V;
                    if (e0 >= 0 && e0 < numel) {
                        at = e0;
                        lo[j] = static_cast<int>(max(b - e0, int64_t{0}));
                        hi[j] = static_cast<int>(min(b + a.s - e0, static_cast<int64_t>(V)));
                        if constexpr (DX) {
                            // The pack's sector: units come in sector pairs from s = 0.
                            const int64_t sec = e0 - (s & 1) * V;
                            const int64_t last = min(sec + E - 1, numel - 1);
                            own[j] = last >= b && last < b + a.s;
                            // Clamped (b - e0 > -2^31 for any S): lanes past E into the
                            // slice are its own either way.
                            rel[j] = static_cast<int>(max(b - e0, -E));
                        }
                    }
                    u += step;
                    s += step_s;
                    n += step_n;
                    if (s >= spc) {
                        s -= spc;
                        ++n;
                    }
                }
                // Outside the branch (as apply_nchw_odd): held across a join, nvcc split each
                // pack into 16-bit halves there, which waited for its load.
                ats[j] = at;
                px[j] = load_pack_issue<T, V>(x, at, numel, tail[j]);
                if constexpr (GRAD) pd[j] = load_pack_issue<T, V>(dy, at, numel, tail[j]);
            }
#pragma unroll
            for (int j = 0; j < kRU; ++j) {
                load_pack_finish<T, V>(px[j], x, numel, tail[j]);
                if constexpr (GRAD) load_pack_finish<T, V>(pd[j], dy, numel, tail[j]);
            }
#pragma unroll
            for (int j = 0; j < kRU; ++j) {
                if constexpr (DX) {
                    if (own[j]) {
                        // Lane i is d = i - rel elements into the slice: this channel's when
                        // d >= 0, else the previous slice's or (d < -S) the one before. Only
                        // the scale k[2] differs between channels: eval_dx_coef's mean and
                        // beta are 0 for every channel.
                        float k[4][V];
#pragma unroll
                        for (int i = 0; i < V; ++i) {
                            const int d = i - rel[j];
                            k[0][i] = kdx[0][0];
                            k[1][i] = kdx[0][1];
                            k[2][i] = d >= 0 ? kdx[0][2] : (d >= -s_near ? kdx[1][2] : kdx[2][2]);
                            k[3][i] = kdx[0][3];
                        }
                        const Pack<T, V> pdj = pd[j].pack();
                        store_pack_in<T, V>(dx, ats[j], numel,
                                            apply_pack<T, V, V, false>(pdj, pdj, k));
                    }
                }
                if (hi[j] <= lo[j]) continue;  // no element of the slice in this pack
                const Pack<T, V> pxj = px[j].pack();
                if constexpr (GRAD) {
                    const Pack<T, V> pdj = pd[j].pack();
                    float xv[V], dv[V];
#pragma unroll
                    for (int i = 0; i < V; ++i) {
                        const bool in = i >= lo[j] && i < hi[j];
                        xv[i] = in ? to_float(pxj.v[i]) : mean;
                        dv[i] = in ? to_float(pdj.v[i]) : 0.0f;
                    }
                    acc.template push_pack<V>(dv, xv, mean);
                } else {
                    float w[V];
                    unpack(pxj, w);
                    shift_lanes_down<V>(w, lo[j]);
                    float xv[V][1];
#pragma unroll
                    for (int i = 0; i < V; ++i) xv[i][0] = w[i];
                    acc.template push_group<V>(xv, hi[j] - lo[j]);
                }
            }
        }
    }
    if (column_merge<kMaxColumnThreads>(acc, smem)) {
        float* p = reinterpret_cast<float*>(a.partials) + c * gridDim.y + blockIdx.y;
        const int64_t field_stride = static_cast<int64_t>(gridDim.y) * a.c;
#pragma unroll
        for (int f = 0; f < Acc::kPartial; ++f) p[f * field_stride] = acc.partial(f, 0);
    }
    fold_finalize<T, P, DX, 1, Acc>(fin, c, smem);
}

/**
 * One item of a channels-last reduction: block (bx, by) reduces split it.k() of channel tile
 * it.c(); thread (x, y) owns channels [(it.c() * bx + x) * V, + V) and walks rows y, y + by,
 * ... of the split, then the block writes the tile's partials. `smem`:
 * MergeSmem<Acc::kFloats> floats.
 */
template <typename T, int V, bool GRAD, typename P = float, bool DX = false, class It>
__device__ __forceinline__ void reduce_nhwc_item(const WnBatchNormReduceArgs& a, const It& it,
                                                 float* smem) {
    static_assert(GRAD || !DX, "dx is written by the backward sums");
    using Acc = typename std::conditional<GRAD, GradAcc<V>, StatsAcc<V>>::type;
    const int64_t cv = it.c() * blockDim.x + threadIdx.x;
    const bool active = cv * V < a.c;
    // The block's channels: [c0, c0 + valid).
    const int64_t c0 = it.c() * blockDim.x * V;
    const int valid = static_cast<int>(min(static_cast<int64_t>(blockDim.x) * V, a.c - c0));
    const bool warp0 = threadIdx.y * blockDim.x + threadIdx.x < 32;  // warp-uniform
    const int64_t rows = a.n * a.s;
    const int64_t begin = it.k() * a.chunk;
    const int64_t end = min(begin + a.chunk, rows);
    const T* x = reinterpret_cast<const T*>(a.x) + cv * V;
    const T* dy = reinterpret_cast<const T*>(a.dy) + cv * V;
    // Rows in flight per thread (kFlight), in groups of kUnroll rows of the compensated
    // Welford update. The 16-bit statistics hold 8 channels per thread (25 accumulator
    // registers) and took 113 registers on sm_90 with 4 rows in flight: 2 blocks of 256 threads
    // per SM, 32 KB of loads in flight, short of an H200's need (the performance model). 8 rows
    // in flight (two groups) take 128 registers, still 2 blocks, with twice the loads in flight
    // (f16 and bf16 alike, no spill on sm_75/80/90/100/120 with nvcc 13.0; an earlier bf16 form
    // took 164). (Smaller groups spend more instructions per element than the registers they
    // save are worth: one row per group took the f16 kernel to 108 registers but 34
    // instructions per element, issue bound.)
    constexpr int kFlight = !GRAD && sizeof(T) == 2 ? 2 * kUnroll : kUnroll;
    Acc acc;
    acc.init();
    float mean[V];  // GRAD: the saved means (their lo parts are applied by the finalize)
    if constexpr (GRAD) warp_load_row<V>(reinterpret_cast<const float*>(a.mean) + c0, valid, mean);
    float kdx[4][V];
    if constexpr (DX) {
        // Only the scale varies: eval_dx_coef's mean, lo and shift are the constants +0.0f,
        // kept as constants here (as they are after inlining in reduce_nchw), so that the
        // registers hold V floats, not 4 V.
        float kt[4][V];
        block_coef_row<V>([&](int64_t ch) { return eval_dx_coef<P>(a, ch); }, c0, valid, kt);
#pragma unroll
        for (int t = 0; t < 4; ++t) {
#pragma unroll
            for (int i = 0; i < V; ++i) kdx[t][i] = t == 2 ? kt[2][i] : 0.0f;
        }
    }
    T* dx = reinterpret_cast<T*>(a.dx) + cv * V;
    if (active) {
        const int64_t by = blockDim.y;
        for (int64_t r = begin + threadIdx.y; r < end; r += kFlight * by) {
            // kFlight rows in flight before the dependent updates.
            Held<T, V> px[kFlight], pd[kFlight];
#pragma unroll
            for (int j = 0; j < kFlight; ++j) {
                if (r + j * by < end) {
                    px[j].load(x + (r + j * by) * a.c);
                    if constexpr (GRAD) pd[j].load(dy + (r + j * by) * a.c);
                }
            }
            if constexpr (GRAD) {
#pragma unroll
                for (int j = 0; j < kFlight; ++j) {
                    if (r + j * by >= end) break;
                    float xv[V], dv[V];
                    unpack(px[j].pack(), xv);
                    unpack(pd[j].pack(), dv);
                    acc.push_row(dv, xv, mean);
                    if constexpr (DX)
                        store_pack<T, V>(dx + (r + j * by) * a.c,
                                         apply_pack<T, V, V, false>(pd[j].pack(), pd[j].pack(), kdx));
                }
            } else {
                // The rows in flight form groups of kUnroll rows of the compensated Welford
                // update.
#pragma unroll
                for (int g = 0; g < kFlight / kUnroll; ++g) {
                    // The rows in range are a prefix: the first group is never empty.
                    if (g > 0 && r + g * kUnroll * by >= end) break;
                    float xv[kUnroll][V];
                    int m = 0;
#pragma unroll
                    for (int j = 0; j < kUnroll; ++j) {
                        m += r + (g * kUnroll + j) * by < end ? 1 : 0;
                        unpack(px[g * kUnroll + j].pack(), xv[j]);
                    }
                    acc.template push_group<kUnroll>(xv, m);
                }
            }
        }
    }
    column_merge<kMaxColumnThreads>(acc, smem);
    if (warp0) {
        // Threads (x, 0) = lanes x of warp 0 hold the results; field f of split k goes to
        // (f * splits + k) * C + c (see the ABI header), one coalesced row per field.
        float* p = reinterpret_cast<float*>(a.partials) + it.k() * a.c + c0;
        const int64_t field_stride = it.splits() * a.c;
#pragma unroll
        for (int f = 0; f < Acc::kPartial; ++f) {
            float v[V];
#pragma unroll
            for (int i = 0; i < V; ++i) v[i] = acc.partial(f, i);
            warp_store_row<V>(p + f * field_stride, valid, v);
        }
    }
}

/**
 * Channels-last reduction: block (bx, by) owns channel tile blockIdx.x and split blockIdx.y
 * (reduce_nhwc_item). It keeps the finalize kernel (its blocks spread the merge of many
 * splits over the SMs; folded here, the merge of 8 channels per thread took the 16-bit
 * statistics past 128 registers on sm_100 and sm_120, which spilled).
 */
template <typename T, int V, bool GRAD, typename P = float, bool DX = false, class Fin>
__device__ __forceinline__ void reduce_nhwc(const WnBatchNormReduceArgs& a, const Fin& fin) {
    using Acc = typename std::conditional<GRAD, GradAcc<V>, StatsAcc<V>>::type;
    __shared__ float smem[MergeSmem<Acc::kFloats>::kFloats];
    reduce_nhwc_item<T, V, GRAD, P, DX>(a, GridItem{}, smem);
    (void)fin;
}

/* ---------------------------------------------------------------- elementwise passes */

/**
 * Coefficient sources of the elementwise passes: `at(c)` gives channel c's four coefficients.
 * WorkspaceCoef reads the arrays a finalize kernel wrote; FrozenCoef<P> computes them from the
 * parameters and frozen statistics (eval: one launch, see WnBatchNormApplyArgs) with the same
 * per-channel rules as the finalize (bn_finalize.cuh), so both give the same bits.
 */
struct WorkspaceCoef {
    static constexpr bool kFrozen = false;
    // Pointer and stride are read from the arguments (the parameter bank) at each use, not
    // copied: copies held in registers took the f32 backward apply to spills on sm_120.
    const WnBatchNormApplyArgs& a;
    __device__ __forceinline__ explicit WorkspaceCoef(const WnBatchNormApplyArgs& args) : a(args) {}
    __device__ __forceinline__ Coef at(int64_t c) const {
        const float* coef = reinterpret_cast<const float*>(a.coef);
        Coef k;
#pragma unroll
        for (int t = 0; t < 4; ++t) k.k[t] = coef[t * a.coef_stride + c];
        return k;
    }
};

template <typename P> struct FrozenCoef {
    static constexpr bool kFrozen = true;
    const WnBatchNormApplyArgs& a;
    __device__ __forceinline__ explicit FrozenCoef(const WnBatchNormApplyArgs& args) : a(args) {}
    __device__ __forceinline__ ChannelStats stats(int64_t c) const {
        return frozen_stats<P>(a.running_mean, a.running_var, a.invstd, c, a.eps);
    }
    __device__ __forceinline__ Coef at(int64_t c) const {
        return fwd_coef<P>(a.gamma, a.beta, c, stats(c));
    }
};

/**
 * The frozen-statistics kernels write save_mean / save_mean_lo / save_invstd (each when not
 * 0): the grid's threads in their linear order take consecutive channels (coalesced).
 */
template <class Src> __device__ __forceinline__ void save_frozen(const WnBatchNormApplyArgs& a) {
    if constexpr (Src::kFrozen) {
        if (a.save_mean == 0 && a.save_mean_lo == 0 && a.save_invstd == 0) return;
        const Src src(a);
        const int64_t per_block = static_cast<int64_t>(blockDim.x) * blockDim.y;
        const int64_t threads = per_block * gridDim.x * gridDim.y;
        const int64_t block = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
        for (int64_t c = block * per_block + threadIdx.y * blockDim.x + threadIdx.x; c < a.c;
             c += threads) {
            const ChannelStats st = src.stats(c);
            save_stats(a, c, st.mh, st.ml, st.invstd);
        }
    }
}

/**
 * NCHW elementwise pass: grid-stride over packs of V elements of one slice; the pack's channel
 * is (p / (S / V)) % C, tracked incrementally (one 64-bit division per thread). kUnroll packs
 * are loaded before any is computed.
 */
template <typename T, int V, bool BWD, class Src = WorkspaceCoef>
__device__ __forceinline__ void apply_nchw(const WnBatchNormApplyArgs& a) {
    bump(a.counter_bump);
    save_frozen<Src>(a);
    const int64_t total = a.n * a.c * a.s / V;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= total) return;
    const int64_t inner = a.s / V;
    int64_t q = p / inner;
    int64_t r = p - q * inner;
    int64_t ch = q % a.c;
    const int64_t sq = stride / inner;
    const int64_t sr = stride - sq * inner;
    const int64_t sc = sq % a.c;
    const Src src(a);
    const T* x = reinterpret_cast<const T*>(a.x);
    const T* dy = reinterpret_cast<const T*>(a.dy);
    T* out = reinterpret_cast<T*>(a.out);
    for (; p < total; p += kUnroll * stride) {
        Held<T, V> px[kUnroll], pd[kUnroll];
        int64_t chs[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            chs[j] = ch;
            if (p + j * stride < total) {
                px[j].load(x + (p + j * stride) * V);
                if constexpr (BWD) pd[j].load(dy + (p + j * stride) * V);
            }
            r += sr;
            const int64_t carry = r >= inner ? 1 : 0;
            r -= carry * inner;
            ch += sc + carry;
            if (ch >= a.c) ch -= a.c;
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            if (p + j * stride >= total) break;
            const Coef kc = src.at(chs[j]);
            float k[4][1];
#pragma unroll
            for (int t = 0; t < 4; ++t) k[t][0] = kc.k[t];
            store_pack<T, V>(out + (p + j * stride) * V, apply_pack<T, V, 1, BWD>(px[j].pack(), pd[j].pack(), k));
        }
    }
}

/**
 * NCHW elementwise pass for any slice length S >= V ("vecodd": S % V != 0, 16-byte aligned
 * pointers): grid-stride over the packs of the flat tensor, so every request moves whole
 * 16-byte packs of consecutive memory. Element e belongs to channel (e / S) % C; with S >= V a
 * pack holds at most two channels: the channel of its first element up to lane S - r (r: that
 * element's place in its slice), the next channel from there. (r, channel) are tracked
 * incrementally (one 64-bit division per thread), for the thread's packs and for its block's
 * first pack of each group (the packs the block moves in one step of the grid-stride loop,
 * consecutive). Each step stages the coefficients of the channels of each group - those of
 * its blockDim.x * V elements and the next one, at most min(C, blockDim.x * V / S + 3) - in
 * dynamic shared memory (two buffers, so one barrier per step), loaded by consecutive threads
 * for consecutive channels: read per pack from global memory, the two channels' coefficients
 * of the lanes of a warp were gathers of a few bytes from one or two sectors each, a sixth of
 * the 16-bit kernels' requests (sectors/ideal 1.13 on 7 x 7 bf16). The tensor's last pack,
 * when N * C * S % V != 0, is moved element by element.
 */
template <typename T, int V, bool BWD, class Src = WorkspaceCoef>
__device__ __forceinline__ void apply_nchw_odd(const WnBatchNormApplyArgs& a) {
    // 16-bit types: 2 packs in flight (not kUnroll): the two channels' coefficients per pack
    // took the bf16 kernel to 94 registers with 4 (2 blocks of 256 threads per SM).
    constexpr int kOddUnroll = sizeof(T) == 4 ? kUnroll : 2;
    static_assert(kOddUnroll <= static_cast<int>(WN_BN_ODD_APPLY_PACKS),
                  "the planner sizes the coefficient tables for WN_BN_ODD_APPLY_PACKS groups");
    extern __shared__ __align__(16) unsigned char dyn[];
    float4* tables = reinterpret_cast<float4*>(dyn);
    bump(a.counter_bump);
    save_frozen<Src>(a);
    const int64_t numel = a.n * a.c * a.s;
    const int64_t total = (numel + V - 1) / V;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x;
    if (first >= total) return;  // the whole block: the loop below has block-wide barriers
    const int64_t p0 = first + threadIdx.x;
    int64_t q = (p0 * V) / a.s;
    int64_t r = p0 * V - q * a.s;  // place of the pack's first element in its slice
    int64_t ch = q % a.c;
    int64_t qb = (first * V) / a.s;
    int64_t rb = first * V - qb * a.s;  // the same for the block's first pack
    int64_t chb = qb % a.c;
    const int64_t se = stride * V;  // elements per grid step
    const int64_t sq = se / a.s;
    const int64_t sr = se - sq * a.s;
    const int64_t sc = sq % a.c;
    const int nch = static_cast<int>(min(a.c, static_cast<int64_t>(blockDim.x) * V / a.s + 3));
    const Src src(a);
    const T* x = reinterpret_cast<const T*>(a.x);
    const T* dy = reinterpret_cast<const T*>(a.dy);
    T* out = reinterpret_cast<T*>(a.out);
    int buf = 0;
    for (int64_t pb = first; pb < total; pb += kOddUnroll * stride) {
        Held<T, V> px[kOddUnroll], pd[kOddUnroll];
        int rel[kOddUnroll];  // the pack's channel, counted from its group's first channel
        int64_t chbs[kOddUnroll];
        int split[kOddUnroll];
        bool tail[kOddUnroll];
#pragma unroll
        for (int j = 0; j < kOddUnroll; ++j) {
            const int64_t p = pb + threadIdx.x + j * stride;
            chbs[j] = chb;
            rel[j] = static_cast<int>(ch >= chb ? ch - chb : ch - chb + a.c);
            split[j] = static_cast<int>(min(a.s - r, static_cast<int64_t>(V)));
            // Unconditional (a pack past the tensor loads nothing): behind a branch, nvcc
            // split each pack into 16-bit halves at the join, which waited for its load.
            px[j] = load_pack_issue<T, V>(x, p * V, numel, tail[j]);
            if constexpr (BWD) pd[j] = load_pack_issue<T, V>(dy, p * V, numel, tail[j]);
            r += sr;
            int64_t carry = r >= a.s ? 1 : 0;
            r -= carry * a.s;
            ch += sc + carry;
            if (ch >= a.c) ch -= a.c;
            rb += sr;
            carry = rb >= a.s ? 1 : 0;
            rb -= carry * a.s;
            chb += sc + carry;
            if (chb >= a.c) chb -= a.c;
        }
        // This step's tables: group j's channel i is chbs[j] + i (mod C).
        float4* tab = tables + buf * kOddUnroll * nch;
#pragma unroll
        for (int j = 0; j < kOddUnroll; ++j) {
            if (pb + j * stride >= total) break;
            for (int i = threadIdx.x; i < nch; i += blockDim.x) {
                int64_t c = chbs[j] + i;
                if (c >= a.c) c -= a.c;
                const Coef k = src.at(c);
                tab[j * nch + i] = make_float4(k.k[0], k.k[1], k.k[2], k.k[3]);
            }
        }
        __syncthreads();
#pragma unroll
        for (int j = 0; j < kOddUnroll; ++j) {
            load_pack_finish<T, V>(px[j], x, numel, tail[j]);
            if constexpr (BWD) load_pack_finish<T, V>(pd[j], dy, numel, tail[j]);
        }
#pragma unroll
        for (int j = 0; j < kOddUnroll; ++j) {
            const int64_t p = pb + threadIdx.x + j * stride;
            if (p >= total) break;
            const int rel2 = rel[j] + 1 == a.c ? 0 : rel[j] + 1;  // the next channel (mod C)
            const float4 ka = tab[j * nch + rel[j]];
            const float4 kb = tab[j * nch + rel2];
            float k[4][V];
#pragma unroll
            for (int i = 0; i < V; ++i) {
                const bool lo = i < split[j];
                k[0][i] = lo ? ka.x : kb.x;
                k[1][i] = lo ? ka.y : kb.y;
                k[2][i] = lo ? ka.z : kb.z;
                k[3][i] = lo ? ka.w : kb.w;
            }
            store_pack_in<T, V>(out, p * V, numel,
                                apply_pack<T, V, V, BWD>(px[j].pack(), pd[j].pack(), k));
        }
        buf ^= 1;
    }
}

/**
 * The rows r, r + step, ... below `end` of one thread's channels [c, c + V) of a channels-last
 * elementwise pass (C channels per row) with their coefficients k, kUnroll rows in flight.
 */
template <typename T, int V, bool BWD>
__device__ __forceinline__ void apply_nhwc_rows(wn_devptr xp, wn_devptr dyp, wn_devptr outp,
                                                int64_t ch, int64_t c, int64_t r, int64_t end,
                                                int64_t step, const float (&k)[4][V]) {
    const T* x = reinterpret_cast<const T*>(xp) + c;
    const T* dy = reinterpret_cast<const T*>(dyp) + c;
    T* out = reinterpret_cast<T*>(outp) + c;
    for (; r < end; r += kUnroll * step) {
        Held<T, V> px[kUnroll], pd[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            if (r + j * step < end) {
                px[j].load(x + (r + j * step) * ch);
                if constexpr (BWD) pd[j].load(dy + (r + j * step) * ch);
            }
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            if (r + j * step >= end) break;
            store_pack<T, V>(out + (r + j * step) * ch, apply_pack<T, V, V, BWD>(px[j].pack(), pd[j].pack(), k));
        }
    }
}

/**
 * Channels-last elementwise pass: block (bx, by), grid (channel tiles, row groups); thread
 * (x, y) owns channels ((blockIdx.x * bx + x) * V, + V), loads their coefficients once, and
 * walks rows blockIdx.y * by + y in steps of gridDim.y * by, kUnroll rows in flight.
 */
template <typename T, int V, bool BWD, class Src = WorkspaceCoef>
__device__ __forceinline__ void apply_nhwc(const WnBatchNormApplyArgs& a) {
    bump(a.counter_bump);
    save_frozen<Src>(a);
    const int64_t cv = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t c0 = static_cast<int64_t>(blockIdx.x) * blockDim.x * V;
    const int valid = static_cast<int>(min(static_cast<int64_t>(blockDim.x) * V, a.c - c0));
    float k[4][V];
    if constexpr (Src::kFrozen) {
        const Src src(a);
        block_coef_row<V>([&](int64_t ch) { return src.at(ch); }, c0, valid, k);
    } else {
        const float* coef = reinterpret_cast<const float*>(a.coef);
#pragma unroll
        for (int t = 0; t < 4; ++t) warp_load_row<V>(coef + t * a.coef_stride + c0, valid, k[t]);
    }
    if (cv * V >= a.c) return;
    apply_nhwc_rows<T, V, BWD>(a.x, a.dy, a.out, a.c, cv * V,
                               static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y,
                               a.n * a.s, static_cast<int64_t>(gridDim.y) * blockDim.y, k);
}

/* ---------------------------------------------------------------- fused tiers */

/**
 * The units one thread of a fused block visits: rows y, y + by, ... of its channel vector cv
 * (nhwc), or packs y, y + by, ... of channel cv's N slices (nchw, (n, s) tracked
 * incrementally). run(body) calls body(unit, element offset) for each.
 */
template <int V, bool NHWC> struct UnitWalk {
    // The walk covers units [first, units): all of them unless a caller narrows it.
    int64_t first = 0, units, c, s, sp, slice, step, step_n, step_s, cv;
    __device__ __forceinline__ UnitWalk(int64_t n_, int64_t c_, int64_t s_, int64_t cv_)
        : c(c_), s(s_), cv(cv_) {
        sp = NHWC ? 1 : s / V;  // nchw: S % V == 0 and S > 0, so sp >= 1
        units = NHWC ? n_ * s : n_ * sp;
        slice = c * s;
        step = blockDim.y;
        step_n = step / sp;
        step_s = step - step_n * sp;
    }
    /**
     * Like run(), G units at a time: body(u[G], off[G], m) with the first m >= 1 of them
     * valid (the invalid entries repeat the last valid one).
     */
    template <int G, class F> __device__ __forceinline__ void run_groups(F&& body) const {
        int64_t u = first + threadIdx.y;
        if (u >= units) return;
        int64_t n = NHWC ? 0 : u / sp;
        int64_t sv = NHWC ? 0 : u - n * sp;
        while (u < units) {
            int64_t us[G], offs[G];
            int m = 0;
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (u < units) {
                    m = g + 1;
                    us[g] = u;
                    offs[g] = NHWC ? u * c + cv * V : n * slice + cv * s + sv * V;
                    u += step;
                    if constexpr (!NHWC) {
                        sv += step_s;
                        n += step_n;
                        if (sv >= sp) {
                            sv -= sp;
                            ++n;
                        }
                    }
                } else {
                    us[g] = us[g - 1 > 0 ? g - 1 : 0];
                    offs[g] = offs[g - 1 > 0 ? g - 1 : 0];
                }
            }
            body(us, offs, m);
        }
    }
    template <class F> __device__ __forceinline__ void run(F&& body) const {
        int64_t u = first + threadIdx.y;
        if (u >= units) return;
        if constexpr (NHWC) {
            for (; u < units; u += step) body(u, u * c + cv * V);
        } else {
            int64_t n = u / sp;
            int64_t sv = u - n * sp;
            for (; u < units; u += step) {
                body(u, n * slice + cv * s + sv * V);
                sv += step_s;
                n += step_n;
                if (sv >= sp) {
                    sv -= sp;
                    ++n;
                }
            }
        }
    }
};

/**
 * The units one thread of a vecodd fused block (nchw, S % V != 0, S >= V, aligned pointers)
 * visits: the covering packs of channel cv's N slices as in reduce_nchw_odd (spc per slice,
 * from the sector of the slice's first element in x's address phase), y, y + by, ...
 * run(body) calls body(unit, first element e0, in, lo, hi) for each: `in` when the pack is
 * inside the tensor (else it is not accessed), lanes [lo, hi) the slice's elements (none when
 * hi <= lo).
 */
template <int V> struct OddWalk {
    static constexpr int64_t E = 2 * V;  // elements per 32-byte sector
    int64_t units, spc, slice, s, numel, phase, step, step_n, step_s, cv;
    __device__ __forceinline__ OddWalk(int64_t n_, int64_t c_, int64_t s_, int64_t cv_,
                                       wn_devptr x)
        : s(s_), cv(cv_) {
        spc = 2 * ((s + E - 2) / E + 1);
        units = n_ * spc;
        slice = c_ * s;
        numel = n_ * slice;
        phase = static_cast<int64_t>((x >> 4) & 1u) * V;
        step = blockDim.y;
        step_n = step / spc;
        step_s = step - step_n * spc;
    }
    /**
     * G units at a time: body(us, e0s, ins, los, his) for each group, every entry as run()'s
     * arguments (entries past the thread's last unit: not `in`, no lanes), so that a thread
     * can issue the loads of G units before it uses any.
     */
    template <int G, class F> __device__ __forceinline__ void run_groups(F&& body) const {
        int64_t u = threadIdx.y;
        if (u >= units) return;
        int64_t n = u / spc;
        int64_t sv = u - n * spc;
        while (u < units) {
            int64_t us[G], e0s[G];
            bool ins[G];
            int los[G], his[G];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                us[g] = u;
                e0s[g] = numel;
                ins[g] = false;
                los[g] = 0;
                his[g] = 0;
                if (u < units) {
                    const int64_t b = n * slice + cv * s;
                    const int64_t e0 = ((b + phase) / E) * E - phase + sv * V;
                    ins[g] = e0 >= 0 && e0 < numel;
                    e0s[g] = e0;
                    if (ins[g]) {
                        los[g] = static_cast<int>(max(b - e0, int64_t{0}));
                        his[g] = static_cast<int>(min(b + s - e0, static_cast<int64_t>(V)));
                    }
                    u += step;
                    sv += step_s;
                    n += step_n;
                    if (sv >= spc) {
                        sv -= spc;
                        ++n;
                    }
                }
            }
            body(us, e0s, ins, los, his);
        }
    }
    template <class F> __device__ __forceinline__ void run(F&& body) const {
        run_groups<1>([&](const int64_t(&us)[1], const int64_t(&e0s)[1], const bool(&ins)[1],
                          const int(&los)[1], const int(&his)[1]) {
            body(us[0], e0s[0], ins[0], los[0], his[0]);
        });
    }
};

/** Stores lanes [lo, hi) of a pack at element e0: one 16-byte store when that is all of it. */
template <typename T, int V>
__device__ __forceinline__ void store_lanes(T* p, int64_t e0, int lo, int hi, const Pack<T, V>& v) {
    if (lo == 0 && hi == V) {
        // One 16-byte store, in PTX: nvcc 13.0 split a plain pack store here (and a uint4
        // store of the same words) into 2- or 4-byte stores (traffic report: every request of
        // the fused vecodd tiers touched 14 sectors for an ideal of 2-4).
        static_assert(sizeof(Pack<T, V>) == 16, "16-byte packs");
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) memcpy(&w[k], reinterpret_cast<const char*>(&v) + 4 * k, 4);
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p + e0), "r"(w[0]),
                     "r"(w[1]), "r"(w[2]), "r"(w[3])
                     : "memory");
        return;
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
        if (i >= lo && i < hi) p[e0 + i] = v.v[i];
    }
}

/**
 * Units of a vecodd fused block loaded before any is used (OddWalk::run_groups). Forward: the
 * x packs of two units (one, 16 bytes per thread, was short of the loads in flight the model
 * asks of 128 x 512 x 14 x 14 16-bit, whose 57 KB blocks fit 3 per SM). Backward: the x and
 * dy packs of one unit (16-bit) or two (f32: a block of 128 x 2048 x 7 x 7 holds 57 KB, 3
 * blocks per SM, and 32 bytes per thread were short of the loads in flight an H200 needs;
 * two 16-bit units took 80 registers, 3 blocks per SM, and 2048 channels 6 waves where 4 had
 * done).
 */
template <typename T, bool BWD> constexpr int kOddFusedUnits = !BWD || sizeof(T) == 4 ? 2 : 1;

/**
 * The loads of one group of a vecodd fused block's units: the packs of x (and of dy, when
 * given) at e0s[g] for each unit inside the tensor (ins[g]), all issued before any is waited
 * for (load_pack_issue / load_pack_finish: the tensor's last pack element by element). Issued
 * one unit at a time behind a branch, each pack was used (stored to shared memory) before the
 * next was issued: 16 bytes in flight per 16-bit thread.
 */
template <typename T, int V, int G>
__device__ __forceinline__ void odd_fused_loads(const T* x, const int64_t (&e0s)[G],
                                                const bool (&ins)[G], int64_t numel,
                                                Held<T, V> (&hx)[G], const T* dy = nullptr,
                                                Held<T, V>* hd = nullptr) {
    bool tail[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const int64_t at = ins[g] ? e0s[g] : numel;  // at numel: zeros, nothing read
        hx[g] = load_pack_issue<T, V>(x, at, numel, tail[g]);
        if (hd != nullptr) hd[g] = load_pack_issue<T, V>(dy, at, numel, tail[g]);
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
        load_pack_finish<T, V>(hx[g], x, numel, tail[g]);
        if (hd != nullptr) load_pack_finish<T, V>(hd[g], dy, numel, tail[g]);
    }
}

/**
 * Training forward for channel tiles that fit in shared memory (one launch, 2s per element):
 * the block reads its channels' x once into dynamic shared memory while accumulating the
 * compensated Welford statistics, merges them in a fixed order, finalizes (save_mean / lo /
 * invstd, running statistics), then writes y from shared memory. Dynamic shared memory (nothing
 * static): units * bx * V * sizeof(T) bytes rounded up to 16, plus 1024 + 3584 * CV bytes of
 * merge scratch and coefficients. The batch counter is read here with cumulative momentum
 * (then bumped by a following launch), else bumped here (`counter_bump`).
 */
template <typename T, typename P, int V, bool NHWC, bool ODD = false>
__device__ __forceinline__ void fused_fwd(const WnBatchNormFusedFwdArgs& a) {
    constexpr int CV = NHWC ? V : 1;
    using Acc = StatsAcc<CV>;
    using PackT = Pack<T, V>;
    extern __shared__ __align__(16) unsigned char dyn[];
    const int bx = blockDim.x;
    const int tx = threadIdx.x;
    const int64_t cv = NHWC ? static_cast<int64_t>(blockIdx.x) * bx + tx : blockIdx.x;
    const bool active = NHWC ? cv * V < a.c : true;
    const UnitWalk<V, NHWC> walk(a.n, a.c, a.s, cv);
    bump(a.counter_bump);  // never set when a block reads the counter (cumulative)
    const OddWalk<V> odd(a.n, a.c, a.s, cv, a.x);
    const int64_t units = ODD ? odd.units : walk.units;
    PackT* sx = reinterpret_cast<PackT*>(dyn);
    const int64_t data_bytes = (units * bx * static_cast<int64_t>(sizeof(PackT)) + 15) / 16 * 16;
    float* smem = reinterpret_cast<float*>(dyn + data_bytes);
    float* coef_s = smem + MergeSmem<Acc::kFloats>::kFloats;
    static_assert((MergeSmem<Acc::kFloats>::kFloats + 32 * 4 * CV) * 4 == 1024 + 3584 * CV,
                  "the planner (fused_geom in src/batch_norm/plan/launches.rs, forward) sizes this as 1024 + 3584 * CV");
    const T* x = reinterpret_cast<const T*>(a.x);
    T* y = reinterpret_cast<T*>(a.y);
    Acc acc;
    acc.init();
    if constexpr (ODD) {
        // Whole covering packs into shared memory; each pack's lanes of the slice are one
        // group of the compensated Welford update (see reduce_nchw_odd).
        constexpr int G = kOddFusedUnits<T, false>;
        odd.template run_groups<G>([&](const int64_t(&us)[G], const int64_t(&e0s)[G],
                                       const bool(&ins)[G], const int(&los)[G],
                                       const int(&his)[G]) {
            Held<T, V> hx[G];
            odd_fused_loads<T, V, G>(x, e0s, ins, odd.numel, hx);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (!ins[g]) continue;
                const PackT px = hx[g].pack();
                sx[us[g] * bx + tx] = px;
                if (his[g] <= los[g]) continue;
                float w[V];
                unpack(px, w);
                shift_lanes_down<V>(w, los[g]);
                float xv[V][CV];
#pragma unroll
                for (int i = 0; i < V; ++i) xv[i][0] = w[i];
                acc.template push_group<V>(xv, his[g] - los[g]);
            }
        });
    } else if (active) {
        // kUnroll units in flight form one group of the compensated Welford update.
        walk.template run_groups<kUnroll>([&](const int64_t(&us)[kUnroll],
                                              const int64_t(&offs)[kUnroll], int m) {
            PackT px[kUnroll];
#pragma unroll
            for (int g = 0; g < kUnroll; ++g) {
                if (g < m) {
                    px[g] = load_pack<T, V>(x + offs[g]);
                    sx[us[g] * bx + tx] = px[g];
                }
            }
            if constexpr (NHWC) {
                float xv[kUnroll][V];
#pragma unroll
                for (int g = 0; g < kUnroll; ++g) unpack(px[g], xv[g]);
                acc.template push_group<kUnroll>(xv, m);
            } else {
                float xv[kUnroll * V][1];
#pragma unroll
                for (int g = 0; g < kUnroll; ++g) {
#pragma unroll
                    for (int i = 0; i < V; ++i) xv[g * V + i][0] = to_float(px[g].v[i]);
                }
                acc.template push_group<kUnroll * V>(xv, m * V);
            }
        });
    }
    // Thread (x, 0) holds column x's statistics: stage them per channel (mean hi, lo, m2) in
    // the merge scratch, then finish one channel per thread, so that the per-channel global
    // reads and writes of a warp are consecutive.
    const bool head = column_merge<kMaxColumnThreads>(acc, smem) && active;
    __syncthreads();
    if (head) {
#pragma unroll
        for (int i = 0; i < CV; ++i) {
            const int m = tx * CV + i;
            smem[3 * m] = acc.mh[i];
            smem[3 * m + 1] = acc.ml[i];
            smem[3 * m + 2] = acc.m2[i];
        }
    }
    __syncthreads();
    {
        const int64_t c0 = NHWC ? static_cast<int64_t>(blockIdx.x) * bx * CV : blockIdx.x;
        const int tile = static_cast<int>(min(static_cast<int64_t>(bx) * CV, a.c - c0));
        const float f = running_factor(a.flags, a.momentum, a.counter);
        for (int m = threadIdx.y * bx + tx; m < tile; m += bx * blockDim.y) {
            const int64_t ch = c0 + m;
            const ChannelStats st = finish_batch_stats<P>(a, ch, smem[3 * m], smem[3 * m + 1],
                                                          smem[3 * m + 2], a.n * a.s, f);
            const Coef k = fwd_coef<P>(a.gamma, a.beta, ch, st);
            const int x = m / CV, i = m % CV;
#pragma unroll
            for (int j = 0; j < 4; ++j) coef_s[(x * 4 + j) * CV + i] = k.k[j];
        }
    }
    __syncthreads();
    if (!active) return;
    float k[4][CV];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int i = 0; i < CV; ++i) k[j][i] = coef_s[(tx * 4 + j) * CV + i];
    }
    if constexpr (ODD) {
        odd.run([&](int64_t u, int64_t e0, bool, int lo, int hi) {
            if (hi <= lo) return;
            store_lanes<T, V>(y, e0, lo, hi,
                              apply_pack<T, V, CV, false>(sx[u * bx + tx], sx[u * bx + tx], k));
        });
    } else {
        walk.run([&](int64_t u, int64_t off) {
            store_pack<T, V>(y + off,
                             apply_pack<T, V, CV, false>(sx[u * bx + tx], sx[u * bx + tx], k));
        });
    }
}

/* ---------------------------------------------------------------- fused backward */

/**
 * Training backward for channel tiles that fit in shared memory: the block walks its units
 * like the reductions (split 0 of 1), keeps the x and dy packs in dynamic shared memory at
 * (unit * bx + x), merges the sums, writes dgamma / dbeta and the column's dx coefficients,
 * then writes dx from shared memory. Dynamic shared memory (nothing static): 2 * units * bx *
 * V * sizeof(T) bytes rounded up to 16, units = N * S / V (nchw) or N * S (nhwc), plus
 * 2560 * CV bytes of merge scratch and coefficients (CV = channels per thread).
 */
template <typename T, typename P, int V, bool NHWC, bool ODD = false>
__device__ __forceinline__ void fused_bwd(const WnBatchNormFusedBwdArgs& a) {
    constexpr int CV = NHWC ? V : 1;  // channels per thread
    using Acc = GradAcc<CV>;
    using PackT = Pack<T, V>;
    extern __shared__ __align__(16) unsigned char dyn[];
    const int bx = blockDim.x;
    const int tx = threadIdx.x;
    const int64_t cv = NHWC ? static_cast<int64_t>(blockIdx.x) * bx + tx : blockIdx.x;
    const bool active = NHWC ? cv * V < a.c : true;
    const UnitWalk<V, NHWC> walk(a.n, a.c, a.s, cv);
    const OddWalk<V> odd(a.n, a.c, a.s, cv, a.x);
    const int64_t units = ODD ? odd.units : walk.units;
    // Dynamic shared memory: x packs, dy packs (data bytes rounded up to 16), then the merge
    // scratch and the per-column coefficients (all in one allocation, so the planner's byte
    // count is the whole footprint).
    PackT* sx = reinterpret_cast<PackT*>(dyn);
    PackT* sdy = sx + units * bx;
    const int64_t data_bytes = (2 * units * bx * static_cast<int64_t>(sizeof(PackT)) + 15) / 16 * 16;
    float* smem = reinterpret_cast<float*>(dyn + data_bytes);
    float* coef_s = smem + MergeSmem<Acc::kFloats>::kFloats;
    static_assert((MergeSmem<Acc::kFloats>::kFloats + 32 * 4 * CV) * 4 == 2560 * CV,
                  "the planner (fused_geom in src/batch_norm/plan.rs, backward) sizes this as 2560 * CV");
    const T* x = reinterpret_cast<const T*>(a.x);
    const T* dy = reinterpret_cast<const T*>(a.dy);
    T* dx = reinterpret_cast<T*>(a.dx);
    // The block's channels: [c0, c0 + tile).
    const int64_t c0 = NHWC ? static_cast<int64_t>(blockIdx.x) * bx * CV : blockIdx.x;
    const int tile = static_cast<int>(min(static_cast<int64_t>(bx) * CV, a.c - c0));
    float mh[CV];
    warp_load_row<CV>(reinterpret_cast<const float*>(a.mean) + c0, tile, mh);
    Acc acc;
    acc.init();
    if constexpr (ODD) {
        // Whole covering packs of x and dy into shared memory; outside the slice's lanes dy
        // counts 0 and x the mean (adding exactly nothing).
        constexpr int G = kOddFusedUnits<T, true>;
        odd.template run_groups<G>([&](const int64_t(&us)[G], const int64_t(&e0s)[G],
                                       const bool(&ins)[G], const int(&los)[G],
                                       const int(&his)[G]) {
            Held<T, V> hx[G], hd[G];
            odd_fused_loads<T, V, G>(x, e0s, ins, odd.numel, hx, dy, hd);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                if (!ins[g]) continue;
                const PackT px = hx[g].pack();
                const PackT pd = hd[g].pack();
                sx[us[g] * bx + tx] = px;
                sdy[us[g] * bx + tx] = pd;
                if (his[g] <= los[g]) continue;
                float xv[V], dv[V];
#pragma unroll
                for (int i = 0; i < V; ++i) {
                    const bool inside = i >= los[g] && i < his[g];
                    xv[i] = inside ? to_float(px.v[i]) : mh[0];
                    dv[i] = inside ? to_float(pd.v[i]) : 0.0f;
                }
                acc.template push_pack<V>(dv, xv, mh[0]);
            }
        });
    } else if (active) {
        walk.run([&](int64_t u, int64_t off) {
            const PackT px = load_pack<T, V>(x + off);
            const PackT pd = load_pack<T, V>(dy + off);
            sx[u * bx + tx] = px;
            sdy[u * bx + tx] = pd;
            float xv[V], dv[V];
#pragma unroll
            for (int i = 0; i < V; ++i) {
                xv[i] = to_float(px.v[i]);
                dv[i] = to_float(pd.v[i]);
            }
            if constexpr (NHWC) {
                acc.push_row(dv, xv, mh);
            } else {
                acc.template push_pack<V>(dv, xv, mh[0]);
            }
        });
    }
    // Thread (x, 0) holds column x's sums: stage them per channel (sum dy, sum dy * (x - mean),
    // mean hi, mean lo) in the merge scratch, then finish one channel per thread (consecutive per-channel
    // reads and writes in every warp).
    const bool head = column_merge<kMaxColumnThreads>(acc, smem) && active;
    // The mean's lo parts, loaded after the loop (warp-cooperative: every lane calls it).
    float ml[CV];
#pragma unroll
    for (int i = 0; i < CV; ++i) ml[i] = 0.0f;
    if (a.mean_lo != 0) warp_load_row<CV>(reinterpret_cast<const float*>(a.mean_lo) + c0, tile, ml);
    __syncthreads();
    if (head) {
#pragma unroll
        for (int i = 0; i < CV; ++i) {
            const int m = tx * CV + i;
            smem[4 * m] = acc.sdy(i);
            smem[4 * m + 1] = acc.sdx(i);
            smem[4 * m + 2] = mh[i];
            smem[4 * m + 3] = ml[i];
        }
    }
    __syncthreads();
    {
        for (int m = threadIdx.y * bx + tx; m < tile; m += bx * blockDim.y) {
            const int64_t ch = c0 + m;
            const Coef k = bwd_coef<P>(a.gamma, a.dgamma, a.dbeta, ch, smem[4 * m + 2],
                                       smem[4 * m + 3],
                                       reinterpret_cast<const float*>(a.invstd)[ch], smem[4 * m],
                                       smem[4 * m + 1], a.n * a.s, false);
            const int x = m / CV, i = m % CV;
#pragma unroll
            for (int j = 0; j < 4; ++j) coef_s[(x * 4 + j) * CV + i] = k.k[j];
        }
    }
    __syncthreads();
    if (!active) return;
    float k[4][CV];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int i = 0; i < CV; ++i) k[j][i] = coef_s[(tx * 4 + j) * CV + i];
    }
    auto dx_pack = [&](int64_t u) {
        const PackT px = sx[u * bx + tx];
        const PackT pd = sdy[u * bx + tx];
        PackT po;
#pragma unroll
        for (int i = 0; i < V; ++i) {
            const int j = NHWC ? i : 0;
            const float xv = to_float(px.v[i]);
            const float dv = to_float(pd.v[i]);
            po.v[i] = from_float<T>(fmaf(k[0][j], dv, fmaf(k[1][j], xv - k[2][j], k[3][j])));
        }
        return po;
    };
    if constexpr (ODD) {
        odd.run([&](int64_t u, int64_t e0, bool, int lo, int hi) {
            if (hi > lo) store_lanes<T, V>(dx, e0, lo, hi, dx_pack(u));
        });
    } else {
        walk.run([&](int64_t u, int64_t off) { store_pack<T, V>(dx + off, dx_pack(u)); });
    }
}


/* ---------------------------------------------------------------- cooperative passes */

/** The accumulator and arguments of a cooperative pass: the forward's or the backward's. */
template <bool BWD> struct CoopTypes;
template <> struct CoopTypes<false> {
    using Acc = StatsAcc<1>;
    using Args = WnBatchNormCoopFwdArgs;
};
template <> struct CoopTypes<true> {
    using Acc = GradAcc<1>;
    using Args = WnBatchNormCoopBwdArgs;
};

/** The coefficients of channel c from its merged partials `v` (to_floats), parameters P. */
template <typename P>
__device__ __forceinline__ Coef coop_coef(const WnBatchNormFinalizeArgs& f, int64_t c,
                                          const float* v, bool writes) {
    return fwd_channel_coef<P>(f, c, v[1], v[2], v[3], writes);
}
template <typename P>
__device__ __forceinline__ Coef coop_coef(const WnBatchNormBwdFinalizeArgs& f, int64_t c,
                                          const float* v, bool writes) {
    return bwd_channel_coef<P>(f, c, v[0], v[1], writes);
}

/**
 * Cooperative training pass, NCHW (WnBatchNormCoopFwdArgs / WnBatchNormCoopBwdArgs: every
 * block resident, blocks of (1, by) threads). Phase 1 runs the reduction items i = c * splits
 * + k for i = blockIdx.x, blockIdx.x + gridDim.x, ... (reduce_nchw_item: the statistics, or
 * the backward sums with BWD); a grid barrier; phase 2 takes the same items again: the
 * channel's splits merged in the finalize's order (merge_splits, with the reduction's block
 * shape), its coefficients (split 0 alone writes the running and saved statistics, or dgamma
 * and dbeta), then the item's packs written (y, or dx) by the apply's arithmetic. Parameters
 * are float with WN_BN_PARAMS_F32 (or f32 activations), else T. A barrier count that was
 * never zeroed gives NaN outputs in the blocks that see it.
 */
template <typename T, int V, bool BWD>
__device__ __forceinline__ void coop_nchw(const typename CoopTypes<BWD>::Args& a) {
    using Acc = typename CoopTypes<BWD>::Acc;
    __shared__ float smem[MergeSmem<Acc::kFloats>::kFloats];
    __shared__ float s_coef[4];
    const WnBatchNormReduceArgs& r = a.s.r;
    const auto& f = a.s.f;
    const int64_t splits = f.splits;
    const int64_t items = r.c * splits;
    if constexpr (!BWD) bump(f.counter_bump);
    for (int64_t i = blockIdx.x; i < items; i += gridDim.x) {
        reduce_nchw_item<T, V, BWD>(r, LoopItem{i / splits, i % splits, splits}, smem);
        __syncthreads();  // the merge scratch is the next item's
    }
    unsigned left = 0;
    const bool ok = grid_barrier(a.barrier, gridDim.x, left);
    const T* x = reinterpret_cast<const T*>(r.x);
    const T* dy = reinterpret_cast<const T*>(r.dy);
    T* out = reinterpret_cast<T*>(a.out);
    const bool pf32 = sizeof(T) == 4 || (f.flags & WN_BN_PARAMS_F32) != 0;
    for (int64_t i = blockIdx.x; i < items; i += gridDim.x) {
        const int64_t c = i / splits;
        const int64_t k = i - c * splits;
        Acc w;
        // (Blocks that did not wait read no partials: they finish from NaN.)
        if (merge_splits(w, reinterpret_cast<const float*>(f.partials), splits, r.c, c,
                         ok ? 1 : 0, 1, f.flags, smem)) {
            float v[Acc::kFloats];
            w.to_floats(v);
            if (!ok) {
#pragma unroll
                for (int j = 0; j < Acc::kFloats; ++j) v[j] = __int_as_float(0x7fffffff);
            }
            const Coef kc = pf32 ? coop_coef<float>(f, c, v, k == 0) : coop_coef<T>(f, c, v, k == 0);
#pragma unroll
            for (int t = 0; t < 4; ++t) s_coef[t] = kc.k[t];
        }
        __syncthreads();
        float kk[4][1];
#pragma unroll
        for (int t = 0; t < 4; ++t) kk[t][0] = s_coef[t];
        UnitWalk<V, false> walk(r.n, r.c, r.s, c);
        walk.first = k * r.chunk;
        walk.units = min(walk.first + r.chunk, walk.units);
        walk.template run_groups<kUnroll>(
            [&](const int64_t (&)[kUnroll], const int64_t (&offs)[kUnroll], int m) {
                Held<T, V> px[kUnroll], pd[kUnroll];
#pragma unroll
                for (int g = 0; g < kUnroll; ++g) {
                    if (g < m) {
                        px[g].load(x + offs[g]);
                        if constexpr (BWD) pd[g].load(dy + offs[g]);
                    }
                }
#pragma unroll
                for (int g = 0; g < kUnroll; ++g) {
                    if (g < m)
                        store_pack<T, V>(out + offs[g],
                                         apply_pack<T, V, 1, BWD>(px[g].pack(), pd[g].pack(), kk));
                }
            });
        __syncthreads();  // s_coef and the merge scratch are the next item's
    }
    grid_barrier_reset(a.barrier, gridDim.x, left);
}


/**
 * Splits whose partials a thread of the channels-last cooperative merge loads at once: 8 in
 * the training passes; 4 in the eval-mode backward, whose f32 sums take 72 registers on sm_90
 * (3 blocks per SM), where 8 took the pass to 123 (2 blocks) and a bound of 3 blocks spilled.
 */
template <bool EVAL> constexpr int kMergeBatch = EVAL ? 4 : 8;

/**
 * merge_splits for the block's `threads` threads seen as gx columns (FlatColumns): thread
 * t merges the splits t / gx, + rows, ... (rows = threads / gx) of channel c (when `valid`;
 * partials field f of split k at (f * splits + k) * C + c), B splits' loads issued
 * before their merges, in the same order as merge_splits. Thread t < gx returns true with the
 * channel's result. Every thread must call it.
 */
template <int B, class Acc>
__device__ __forceinline__ bool merge_splits_as(Acc& acc, const float* part, int64_t splits,
                                                int64_t channels, int64_t c, bool valid, int gx,
                                                int t, int threads, float* smem) {
    acc.init();
    const int rows = threads / gx;
    if (valid) {
        for (int64_t k = t / gx; k < splits; k += B * rows) {
            Acc o[B];
#pragma unroll
            for (int b = 0; b < B; ++b) {
                if (k + b * rows < splits)
                    o[b].from_partial(part + (k + b * rows) * channels + c, splits * channels, 1, 1);
            }
#pragma unroll
            for (int b = 0; b < B; ++b) {
                if (k + b * rows < splits) acc.merge(o[b]);
            }
        }
    }
    return column_merge_in<kMaxColumnThreads>(acc, smem, FlatColumns{gx, t, threads});
}

/** finish_fwd_channel / finish_bwd_channel of a merged accumulator. */
template <typename P>
__device__ __forceinline__ void finish_merged(const WnBatchNormFinalizeArgs& f, int64_t c,
                                              const StatsAcc<1>& w) {
    finish_fwd_channel<P>(f, c, w.mh[0], w.ml[0], w.m2[0]);
}
template <typename P>
__device__ __forceinline__ void finish_merged(const WnBatchNormBwdFinalizeArgs& f, int64_t c,
                                              const GradAcc<1>& w) {
    finish_bwd_channel<P>(f, c, w.sdy(0), w.sdx(0));
}

/**
 * Cooperative training pass, channels-last (WnBatchNormCoopFwdArgs / WnBatchNormCoopBwdArgs:
 * every block resident, blocks of the reduction's (bx, by) threads). Phase 1 runs the
 * reduction items i = tile * splits + k for i = blockIdx.x, blockIdx.x + gridDim.x, ...
 * (reduce_nhwc_item); a grid barrier; the finalize's merge spread over the grid: groups of gx
 * = min(C, 8) channels (as the finalize kernel's blocks; with 256 threads the same rows, so
 * the same order), thread t merging splits t / gx, + rows, ... of channel group * gx + t % gx,
 * finishing the channel (running and saved statistics, or dgamma and dbeta, and the
 * coefficients in the workspace); a second barrier; then the items again, each thread
 * writing its channels of the item's rows (y, or dx) from the coefficients. Parameters are
 * float with WN_BN_PARAMS_F32 (or f32 activations), else T. A barrier count that was never
 * zeroed gives NaN statistics (first barrier) or outputs (second). EVAL: the eval-mode
 * backward with dgamma / dbeta (WN_BN_FROZEN; parameters PE): the sums also write dx =
 * dy * gamma * invstd (as the eval-mode sums), the merge writes dgamma and dbeta, and the
 * pass ends there (one barrier).
 */
template <typename T, int V, bool BWD, bool EVAL = false, typename PE = float>
__device__ __forceinline__ void coop_nhwc(const typename CoopTypes<BWD>::Args& a) {
    static_assert(BWD || !EVAL, "the eval-mode pass is a backward");
    using Acc = typename std::conditional<BWD, GradAcc<V>, StatsAcc<V>>::type;
    using Acc1 = typename CoopTypes<BWD>::Acc;
    __shared__ float smem[MergeSmem<Acc::kFloats>::kFloats];
    const WnBatchNormReduceArgs& r = a.s.r;
    const auto& f = a.s.f;
    const int64_t splits = f.splits;
    const int64_t tile_channels = static_cast<int64_t>(blockDim.x) * V;
    const int64_t items = (r.c + tile_channels - 1) / tile_channels * splits;
    if constexpr (!BWD) bump(f.counter_bump);
    for (int64_t i = blockIdx.x; i < items; i += gridDim.x) {
        reduce_nhwc_item<T, V, BWD, PE, EVAL>(r, LoopItem{i / splits, i % splits, splits}, smem);
        __syncthreads();  // the merge scratch is the next item's
    }
    unsigned left = 0, left2 = 0;
    const bool merged = grid_barrier(a.barrier, gridDim.x, left);
    // The merge: groups of gx channels, the block's threads as (gx, threads / gx).
    const int threads = static_cast<int>(blockDim.x * blockDim.y);
    const int t = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
    int gx = 1;
    while (gx < 8 && gx < r.c) gx <<= 1;
    const bool pf32 = sizeof(T) == 4 || (f.flags & WN_BN_PARAMS_F32) != 0;
    for (int64_t g = blockIdx.x; g * gx < r.c; g += gridDim.x) {
        const int64_t c = g * gx + t % gx;
        Acc1 w;
        // (Blocks that did not wait read no partials: they finish from NaN.)
        if (merge_splits_as<kMergeBatch<EVAL>>(w, reinterpret_cast<const float*>(f.partials), splits, r.c, c,
                            merged && c < r.c, gx, t, threads, smem) &&
            c < r.c) {
            if (!merged) {
                float nan[Acc1::kFloats];
#pragma unroll
                for (int j = 0; j < Acc1::kFloats; ++j) nan[j] = __int_as_float(0x7fffffff);
                w.from_floats(nan);
            }
            if (EVAL) {
                finish_merged<PE>(f, c, w);
            } else if (pf32) {
                finish_merged<float>(f, c, w);
            } else {
                finish_merged<T>(f, c, w);
            }
        }
        __syncthreads();  // the merge scratch is the next group's
    }
    if constexpr (EVAL) {
        // dx was written with the sums; dgamma and dbeta now.
        grid_barrier_reset(a.barrier, gridDim.x, left);
        return;
    }
    const bool ready = grid_barrier(a.barrier + 8, gridDim.x, left2);
    const int64_t rows = r.n * r.s;
    const float* coef = reinterpret_cast<const float*>(f.coef);
    for (int64_t i = blockIdx.x; i < items; i += gridDim.x) {
        const int64_t tile = i / splits;
        const int64_t k = i - tile * splits;
        const int64_t cv = tile * blockDim.x + threadIdx.x;
        const int64_t c0 = tile * tile_channels;
        const int valid = static_cast<int>(min(tile_channels, r.c - c0));
        // The tile's coefficients, written by other blocks: relaxed loads by consecutive
        // threads for consecutive channels, through shared memory (block_coef_row).
        float kk[4][V];
        block_coef_row<V>(
            [&](int64_t ch) {
                Coef kc;
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    kc.k[j] = ready ? load_relaxed(coef + j * f.coef_stride + ch)
                                    : __int_as_float(0x7fffffff);
                return kc;
            },
            c0, valid, kk);
        if (cv * V < r.c) {
            const int64_t begin = k * r.chunk;
            apply_nhwc_rows<T, V, BWD>(r.x, r.dy, a.out, r.c, cv * V, begin + threadIdx.y,
                                       min(begin + r.chunk, rows), blockDim.y, kk);
        }
        __syncthreads();  // block_coef_row's table is the next item's
    }
    grid_barrier_reset(a.barrier, gridDim.x, left);
    grid_barrier_reset(a.barrier + 8, gridDim.x, left2);
}

}  // namespace bn
}  // namespace warpnorm

#define WN_BN_LAUNCH_BOUNDS __launch_bounds__(256)
/* Resident blocks asked of ptxas where its own choice spilled: the backward vecodd pass spilled
 * 4 bytes at 80 registers on sm_100 (2 blocks: 99 registers there, as before the ABI grew the
 * eval fields); the nchw vec backward pass 20 bytes at 64 registers on sm_120 (3 blocks: up
 * to 80; 72 to 80 on sm_90 and sm_120); the eval passes' scalar variant, with its per-element
 * 1 / sqrt(var + eps), 8 bytes at the 40 registers ptxas aimed for on sm_120 (4 blocks: up
 * to 64). minBlocks 1 would let ptxas take what it likes, 142 registers for the backward
 * vecodd pass on sm_100: one block per SM. */
#define WN_BN_BOUNDS_2 __launch_bounds__(256, 2)
#define WN_BN_BOUNDS_3 __launch_bounds__(256, 3)
#define WN_BN_BOUNDS_4 __launch_bounds__(256, 4)

/* Entry points of one activation type, layout and access variant. */
#define WN_BN_ACT(T, TN, LAYOUT, NHWC, ACCESS, V, BWD_APPLY_BOUNDS)                                \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                 \
        warpnorm_batch_norm_fwd_##TN##_stats_##LAYOUT##_##ACCESS(const WnBatchNormStatsArgs a) {  \
        if constexpr (NHWC) warpnorm::bn::reduce_nhwc<T, V, false>(a.r, a.f);                    \
        else warpnorm::bn::reduce_nchw<T, V, false>(a.r, a.f);                                    \
    }                                                                                              \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                 \
        warpnorm_batch_norm_bwd_##TN##_reduce_##LAYOUT##_##ACCESS(const WnBatchNormSumsArgs a) {   \
        if constexpr (NHWC) warpnorm::bn::reduce_nhwc<T, V, true>(a.r, a.f);                     \
        else warpnorm::bn::reduce_nchw<T, V, true>(a.r, a.f);                                     \
    }                                                                                              \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                 \
        warpnorm_batch_norm_fwd_##TN##_apply_##LAYOUT##_##ACCESS(const WnBatchNormApplyArgs a) {  \
        if constexpr (NHWC) warpnorm::bn::apply_nhwc<T, V, false>(a);                            \
        else warpnorm::bn::apply_nchw<T, V, false>(a);                                            \
    }                                                                                              \
    extern "C" __global__ void BWD_APPLY_BOUNDS                                                    \
        warpnorm_batch_norm_bwd_##TN##_apply_##LAYOUT##_##ACCESS(const WnBatchNormApplyArgs a) {  \
        if constexpr (NHWC) warpnorm::bn::apply_nhwc<T, V, true>(a);                             \
        else warpnorm::bn::apply_nchw<T, V, true>(a);                                             \
    }

/* NCHW entry points for slice lengths S % V != 0 (S >= V, aligned pointers). The backward sums
 * at 4 blocks per SM: the finalize folded into them took the bf16 kernel from 64 to 69
 * registers on sm_90 without the bound (3 blocks). */
#define WN_BN_ACT_ODD(T, TN)                                                                       \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                 \
        warpnorm_batch_norm_fwd_##TN##_stats_nchw_vecodd(const WnBatchNormStatsArgs a) {          \
        warpnorm::bn::reduce_nchw_odd<T, warpnorm::kVec<T>, false>(a.r, a.f);                     \
    }                                                                                              \
    extern "C" __global__ void WN_BN_BOUNDS_4                                                      \
        warpnorm_batch_norm_bwd_##TN##_reduce_nchw_vecodd(const WnBatchNormSumsArgs a) {          \
        warpnorm::bn::reduce_nchw_odd<T, warpnorm::kVec<T>, true>(a.r, a.f);                      \
    }                                                                                              \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                 \
        warpnorm_batch_norm_fwd_##TN##_apply_nchw_vecodd(const WnBatchNormApplyArgs a) {          \
        warpnorm::bn::apply_nchw_odd<T, warpnorm::kVec<T>, false>(a);                             \
    }                                                                                              \
    extern "C" __global__ void WN_BN_BOUNDS_2                                                      \
        warpnorm_batch_norm_bwd_##TN##_apply_nchw_vecodd(const WnBatchNormApplyArgs a) {          \
        warpnorm::bn::apply_nchw_odd<T, warpnorm::kVec<T>, true>(a);                              \
    }

/* Cooperative training passes (launched with every block resident; coop_nchw, coop_nhwc).
 * The NCHW passes at 3 blocks per SM (80 registers): the departure ticket of the grid barrier
 * took the f32 backward from 80 to 98 on sm_90 without the bound (2 blocks). sm_120's ptxas
 * takes 106 to 110 for the backward and spilled 28 to 40 bytes at 80: no bound there. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define WN_BN_COOP_NCHW_BWD_BOUNDS WN_BN_LAUNCH_BOUNDS
#else
#define WN_BN_COOP_NCHW_BWD_BOUNDS WN_BN_BOUNDS_3
#endif
#define WN_BN_COOP(T, TN)                                                                          \
    extern "C" __global__ void WN_BN_BOUNDS_3                                                      \
        warpnorm_batch_norm_fwd_##TN##_coop_nchw_vec(const WnBatchNormCoopFwdArgs a) {            \
        warpnorm::bn::coop_nchw<T, warpnorm::kVec<T>, false>(a);                                  \
    }                                                                                              \
    extern "C" __global__ void WN_BN_COOP_NCHW_BWD_BOUNDS                                          \
        warpnorm_batch_norm_bwd_##TN##_coop_nchw_vec(const WnBatchNormCoopBwdArgs a) {            \
        warpnorm::bn::coop_nchw<T, warpnorm::kVec<T>, true>(a);                                   \
    }                                                                                              \
    extern "C" __global__ void WN_BN_BOUNDS_2                                                      \
        warpnorm_batch_norm_fwd_##TN##_coop_nhwc_vec(const WnBatchNormCoopFwdArgs a) {            \
        warpnorm::bn::coop_nhwc<T, warpnorm::kVec<T>, false>(a);                                  \
    }                                                                                              \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                 \
        warpnorm_batch_norm_bwd_##TN##_coop_nhwc_vec(const WnBatchNormCoopBwdArgs a) {            \
        warpnorm::bn::coop_nhwc<T, warpnorm::kVec<T>, true>(a);                                   \
    }

#define WN_BN_ACT_ALL(T, TN)                                       \
    WN_BN_ACT_ODD(T, TN)                                           \
    WN_BN_COOP(T, TN)                                              \
    WN_BN_ACT(T, TN, nchw, false, vec, warpnorm::kVec<T>, WN_BN_BOUNDS_3)          \
    WN_BN_ACT(T, TN, nchw, false, scalar, 1, WN_BN_LAUNCH_BOUNDS)                  \
    WN_BN_ACT(T, TN, nhwc, true, vec, warpnorm::kVec<T>, WN_BN_LAUNCH_BOUNDS)      \
    WN_BN_ACT(T, TN, nhwc, true, scalar, 1, WN_BN_LAUNCH_BOUNDS)

/* Entry points of one parameter type. */
#define WN_BN_PARAM(P, PN)                                                                        \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                \
        warpnorm_batch_norm_fwd_##PN##params_finalize(const WnBatchNormFinalizeArgs a) {         \
        warpnorm::bn::finalize_fwd<P>(a);                                                         \
    }                                                                                             \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                \
        warpnorm_batch_norm_bwd_##PN##params_finalize(const WnBatchNormBwdFinalizeArgs a) {      \
        warpnorm::bn::finalize_bwd<P>(a);                                                         \
    }

WN_BN_ACT_ALL(float, f32)
WN_BN_ACT_ALL(__half, f16)
WN_BN_ACT_ALL(__nv_bfloat16, bf16)
WN_BN_PARAM(float, f32)
WN_BN_PARAM(__half, f16)
WN_BN_PARAM(__nv_bfloat16, bf16)

/* Frozen-statistics elementwise pass (eval forward in one launch; eval-mode backward's dx) of
 * one activation and parameter type, every layout and access variant. */

#define WN_BN_EVAL_ONE(T, TN, P, PN, LAYOUT, ACCESS, FN, V, BOUNDS)                                \
    extern "C" __global__ void BOUNDS                                                              \
        warpnorm_batch_norm_fwd_##TN##_##PN##params_eval_apply_##LAYOUT##_##ACCESS(                \
            const WnBatchNormApplyArgs a) {                                                        \
        warpnorm::bn::FN<T, V, false, warpnorm::bn::FrozenCoef<P>>(a);                             \
    }

#define WN_BN_EVAL_APPLY(T, TN, P, PN, ODD_BOUNDS)                                       \
    WN_BN_EVAL_ONE(T, TN, P, PN, nchw, vec, apply_nchw, warpnorm::kVec<T>, WN_BN_LAUNCH_BOUNDS)           \
    WN_BN_EVAL_ONE(T, TN, P, PN, nchw, vecodd, apply_nchw_odd, warpnorm::kVec<T>, ODD_BOUNDS)             \
    WN_BN_EVAL_ONE(T, TN, P, PN, nchw, scalar, apply_nchw, 1, WN_BN_BOUNDS_4)                             \
    WN_BN_EVAL_ONE(T, TN, P, PN, nhwc, vec, apply_nhwc, warpnorm::kVec<T>, WN_BN_LAUNCH_BOUNDS)           \
    WN_BN_EVAL_ONE(T, TN, P, PN, nhwc, scalar, apply_nhwc, 1, WN_BN_BOUNDS_4)

/* Eval-mode backward sums that also write dx = dy * gamma * invstd (every access variant; the
 * vecodd one not in place). */
#define WN_BN_EVAL_RED_ONE(T, TN, P, PN, LAYOUT, ACCESS, FN, V)                                    \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                 \
        warpnorm_batch_norm_bwd_##TN##_##PN##params_eval_reduce_##LAYOUT##_##ACCESS(               \
            const WnBatchNormSumsArgs a) {                                                         \
        warpnorm::bn::FN<T, V, true, P, true>(a.r, a.f);                                           \
    }

/* The eval-mode backward with dgamma / dbeta, channels-last with vector access, in one
 * cooperative launch (coop_nhwc's EVAL). */
#define WN_BN_EVAL_COOP(T, TN, P, PN)                                                              \
    extern "C" __global__ void WN_BN_LAUNCH_BOUNDS                                                 \
        warpnorm_batch_norm_bwd_##TN##_##PN##params_eval_coop_nhwc_vec(                            \
            const WnBatchNormCoopBwdArgs a) {                                                      \
        warpnorm::bn::coop_nhwc<T, warpnorm::kVec<T>, true, true, P>(a);                           \
    }

#define WN_BN_EVAL(T, TN, P, PN, ODD_BOUNDS)                                             \
    WN_BN_EVAL_APPLY(T, TN, P, PN, ODD_BOUNDS)                                           \
    WN_BN_EVAL_COOP(T, TN, P, PN)                                                        \
    WN_BN_EVAL_RED_ONE(T, TN, P, PN, nchw, vec, reduce_nchw, warpnorm::kVec<T>)          \
    WN_BN_EVAL_RED_ONE(T, TN, P, PN, nchw, vecodd, reduce_nchw_odd, warpnorm::kVec<T>)   \
    WN_BN_EVAL_RED_ONE(T, TN, P, PN, nchw, scalar, reduce_nchw, 1)                       \
    WN_BN_EVAL_RED_ONE(T, TN, P, PN, nhwc, vec, reduce_nhwc, warpnorm::kVec<T>)          \
    WN_BN_EVAL_RED_ONE(T, TN, P, PN, nhwc, scalar, reduce_nhwc, 1)

/* Fused forward and backward entry points of one activation/parameter type pair. */
/* The fused kernels hold a tile's coefficients and accumulators at once; minBlocks 1 lets
 * ptxas use the registers it needs (sm_90 otherwise spilled 4 bytes at 80 registers). */
#define WN_BN_FUSED_BOUNDS __launch_bounds__(256, 1)

#define WN_BN_FUSED_ONE(T, TN, P, PN, LAYOUT, NHWC, ACCESS, V)                                     \
    extern "C" __global__ void WN_BN_FUSED_BOUNDS                                                 \
        warpnorm_batch_norm_fwd_##TN##_##PN##params_fused_##LAYOUT##_##ACCESS(                    \
            const WnBatchNormFusedFwdArgs a) {                                                     \
        warpnorm::bn::fused_fwd<T, P, V, NHWC>(a);                                                 \
    }                                                                                              \
    extern "C" __global__ void WN_BN_FUSED_BOUNDS                                                 \
        warpnorm_batch_norm_bwd_##TN##_##PN##params_fused_##LAYOUT##_##ACCESS(                    \
            const WnBatchNormFusedBwdArgs a) {                                                     \
        warpnorm::bn::fused_bwd<T, P, V, NHWC>(a);                                                 \
    }
/* The vecodd fused kernels (nchw, S % V != 0, S >= V, aligned pointers). The backward at 4
 * blocks per SM: ptxas took 68 (f32) and 72 (16-bit) registers without the bound, 3 blocks
 * per SM, and 54 and 56 with it, no spill on sm_75 to sm_120. */
#define WN_BN_FUSED_ODD(T, TN, P, PN)                                                              \
    extern "C" __global__ void WN_BN_FUSED_BOUNDS                                                 \
        warpnorm_batch_norm_fwd_##TN##_##PN##params_fused_nchw_vecodd(                            \
            const WnBatchNormFusedFwdArgs a) {                                                     \
        warpnorm::bn::fused_fwd<T, P, warpnorm::kVec<T>, false, true>(a);                          \
    }                                                                                              \
    extern "C" __global__ void WN_BN_BOUNDS_4                                                     \
        warpnorm_batch_norm_bwd_##TN##_##PN##params_fused_nchw_vecodd(                            \
            const WnBatchNormFusedBwdArgs a) {                                                     \
        warpnorm::bn::fused_bwd<T, P, warpnorm::kVec<T>, false, true>(a);                          \
    }
#define WN_BN_FUSED(T, TN, P, PN)                                                  \
    WN_BN_FUSED_ODD(T, TN, P, PN)                                                  \
    WN_BN_FUSED_ONE(T, TN, P, PN, nchw, false, vec, warpnorm::kVec<T>)             \
    WN_BN_FUSED_ONE(T, TN, P, PN, nchw, false, scalar, 1)                          \
    WN_BN_FUSED_ONE(T, TN, P, PN, nhwc, true, vec, warpnorm::kVec<T>)              \
    WN_BN_FUSED_ONE(T, TN, P, PN, nhwc, true, scalar, 1)

/* Every kernel of one activation / parameter type pair: the fused tiers and the eval passes. */
/* ODD_BOUNDS: the eval vecodd pass's launch bounds. f32 (4 packs per thread, each group's
 * coefficients computed from the parameters while they are in flight) spilled 8 to 32 bytes
 * at the 80 registers ptxas aimed for on sm_75 and sm_120: 2 blocks per SM let it take what
 * it needs (it takes 106 on sm_90 without a bound). A minimum of 1 block is not the same as
 * none: the 16-bit pass went from 64 to 100 registers on sm_90 with it. */
#define WN_BN_PAIR(T, TN, P, PN, ODD_BOUNDS) \
    WN_BN_FUSED(T, TN, P, PN)                \
    WN_BN_EVAL(T, TN, P, PN, ODD_BOUNDS)

WN_BN_PAIR(float, f32, float, f32, WN_BN_BOUNDS_2)
WN_BN_PAIR(__half, f16, float, f32, WN_BN_LAUNCH_BOUNDS)
WN_BN_PAIR(__nv_bfloat16, bf16, float, f32, WN_BN_LAUNCH_BOUNDS)
WN_BN_PAIR(__half, f16, __half, f16, WN_BN_LAUNCH_BOUNDS)
WN_BN_PAIR(__nv_bfloat16, bf16, __nv_bfloat16, bf16, WN_BN_LAUNCH_BOUNDS)
