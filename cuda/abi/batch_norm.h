/* Argument structs of the BatchNorm kernels (cuda/batch_norm.cu).
 *
 * Shapes: the input is viewed as (N, C, S) with S the product of the spatial dims (1 for
 * (N, C) input). Layout NCHW ("nchw" kernels): element (n, c, s) at (n * C + c) * S + s.
 * Channels-last ("nhwc" kernels, also used for every (N, C) input): at (n * S + s) * C + c.
 *
 * Workspace (16-byte aligned): `tickets` (u32, first; the planner's ticket_bytes) holds one
 * arrival counter per channel tile of a reduction that finalizes in its last block
 * (WN_BN_FOLD): they must be zero before a workspace's first use, and every such launch
 * leaves them zero again (the last block of each tile resets its counter). A counter found
 * at `splits` or more (a workspace never zeroed) makes that launch write NaN statistics,
 * coefficients and gradients for the tile, so that the mistake shows. Then, f32:
 * `coef` holds per-channel coefficient arrays of
 * `coef_stride` floats each (coef_stride = C rounded up to a multiple of 8, so that each array
 * starts on a 32-byte sector); `partials` holds per-(split, channel) partial results: K = 4
 * fields (count, mean hi, mean lo, m2) for the forward statistics, K = 2 (sum dy, sum dy * (x - mean)) for
 * the backward sums. Channels-last reductions put field f of split k and channel c at
 * (f * splits + k) * C + c: a block writes one run of consecutive channels per field, and the
 * finalize reads consecutive channels of consecutive splits (coalesced on both sides). NCHW
 * reductions (one channel per block) put it at (f * C + c) * splits + k (WN_BN_CHANNEL_MAJOR
 * in the finalize's flags): the merge of a channel reads its splits consecutively.
 */
#ifndef WARPNORM_ABI_BATCH_NORM_H
#define WARPNORM_ABI_BATCH_NORM_H

/** finalize flag: momentum None - running stats use 1 / (num_batches_tracked + 1). */
#define WN_BN_CUMULATIVE 2u
/** backward finalize flag: frozen statistics (eval-mode backward: dx = dy * gamma * invstd). */
#define WN_BN_FROZEN 4u
/**
 * finalize flag, in the finalize arguments a reduction carries (WnBatchNormStatsArgs,
 * WnBatchNormSumsArgs): the reduction finalizes itself - after its partials are written, the
 * last block of each channel tile to arrive (`tickets`, one u32 per tile) merges the tile's
 * partials and does what the finalize kernel does for those channels, so that no finalize
 * launch follows. Without it the reduction only writes its partials.
 */
#define WN_BN_FOLD 8u
/**
 * finalize flag for the reductions, whose kernels are not typed by the parameters: the
 * parameters, running statistics and parameter gradients are f32 (else of the activation
 * type). The finalize kernels and the `..._<P>params_*` kernels ignore it.
 */
#define WN_BN_PARAMS_F32 16u
/** finalize flag: the partials are channel-major, (f * C + c) * splits + k (the NCHW reductions). */
#define WN_BN_CHANNEL_MAJOR 32u

/**
 * Per-channel partial reductions (kernels `..._fwd_<T>_stats_*` and `..._bwd_<T>_reduce_*`).
 * Grid (channel tiles, splits); split k covers reduction units k * chunk up to (k + 1) * chunk (exclusive)
 * where a unit is a pack of V elements of one channel (nchw) or one row of C (nhwc).
 * The forward statistics read x and accumulate a compensated Welford partial (the mean as a
 * (hi, lo) pair, cuda/common/welford.cuh). The backward sums read x, dy and the saved mean
 * (C floats) and sum dy * (x - mean); the finalize applies the mean's lo part.
 * The eval-mode backward's sums (`..._bwd_<T>_<P>params_eval_reduce_*`, every access variant)
 * also write dx = dy * gamma * invstd (`gamma` of type P, 1 when 0; `invstd` the saved C
 * floats) with the bits of the eval apply; `dx` may equal `dy`, except in the vecodd kernel
 * (its covering reads of dy reach the neighbouring channels' lanes, which their blocks write).
 * The other kernels ignore dx, gamma and invstd.
 */
typedef struct WnBatchNormReduceArgs {
    wn_devptr x;
    wn_devptr dy;
    wn_devptr mean;
    wn_devptr partials;
    wn_devptr dx;
    wn_devptr gamma;
    wn_devptr invstd;
    int64_t n;
    int64_t c;
    int64_t s;
    int64_t chunk;
} WnBatchNormReduceArgs;

/**
 * Forward finalize (`..._fwd_<P>params_finalize`): block (bx, by) with bx = C rounded up to a
 * power of two, at most 8; thread (x, y) merges the splits y, y + by, ... of channel
 * blockIdx.x * bx + x, then the rows are merged in a fixed order. It merges `splits` partials
 * in a fixed order into the batch mean and biased variance and (when running_mean is not 0)
 * updates the running statistics with the unbiased variance (training; eval forward is one
 * `..._params_eval_apply_*` launch). It writes save_mean (the mean rounded to f32),
 * save_mean_lo (its rounding error: the mean is save_mean + save_mean_lo) and save_invstd
 * (each when not 0), and the coefficient arrays 0..3 (of coef_stride
 * floats each) at channel c: save_mean, save_mean_lo, gamma * invstd, beta.
 * `counter` is read for WN_BN_CUMULATIVE; `counter_bump` (when not 0) is incremented
 * once by thread 0 of block 0. `count` = N * S; with count 0 only the bump happens.
 * `tickets`: the reductions' arrival counters (WN_BN_FOLD); the finalize kernel ignores them.
 */
typedef struct WnBatchNormFinalizeArgs {
    wn_devptr partials;
    wn_devptr coef;
    wn_devptr gamma;
    wn_devptr beta;
    wn_devptr running_mean;
    wn_devptr running_var;
    wn_devptr save_mean;
    wn_devptr save_mean_lo;
    wn_devptr save_invstd;
    wn_devptr counter;
    wn_devptr counter_bump;
    wn_devptr tickets;
    int64_t count;
    int64_t c;
    int64_t splits;
    int64_t coef_stride;
    float momentum;
    float eps;
    uint32_t flags;
    uint32_t _pad;
} WnBatchNormFinalizeArgs;

/**
 * Backward finalize (`..._bwd_<P>params_finalize`): threads as the forward finalize; merges `splits`
 * partial sums in a fixed order, writes dgamma = sum(dy * (x - mean)) * invstd and
 * dbeta = sum(dy) (when not 0), and the dx coefficients: training, arrays 0..3 at channel c =
 * a, b, mean, d with dx = a * dy + b * (x - mean) + d (mean = `mean` + `mean_lo`, the forward's
 * saved pair; `mean_lo` 0 = zeros; d includes -b * mean_lo); WN_BN_FROZEN (eval-mode backward:
 * dgamma and dbeta only, the coefficients are not written; dx = dy * gamma * invstd is the
 * eval-mode sums' or the frozen-statistics apply kernel's, see WnBatchNormApplyArgs).
 */
typedef struct WnBatchNormBwdFinalizeArgs {
    wn_devptr partials;
    wn_devptr coef;
    wn_devptr mean;
    wn_devptr mean_lo;
    wn_devptr invstd;
    wn_devptr gamma;
    wn_devptr dgamma;
    wn_devptr dbeta;
    wn_devptr tickets;
    int64_t count;
    int64_t c;
    int64_t splits;
    int64_t coef_stride;
    uint32_t flags;
    uint32_t _pad;
} WnBatchNormBwdFinalizeArgs;

/**
 * The forward statistics (`..._fwd_<T>_stats_*`): the reduction's arguments and the finalize's
 * (`f.partials` and `f.splits` those of `r`), used when `f.flags` has WN_BN_FOLD.
 */
typedef struct WnBatchNormStatsArgs {
    WnBatchNormReduceArgs r;
    WnBatchNormFinalizeArgs f;
} WnBatchNormStatsArgs;

/**
 * The backward sums (`..._bwd_<T>_reduce_*`, `..._bwd_<T>_<P>params_eval_reduce_*`): the
 * reduction's arguments and the backward finalize's, used when `f.flags` has WN_BN_FOLD.
 */
typedef struct WnBatchNormSumsArgs {
    WnBatchNormReduceArgs r;
    WnBatchNormBwdFinalizeArgs f;
} WnBatchNormSumsArgs;

/**
 * Cooperative training passes with vector access (`..._<dir>_<T>_coop_<layout>_vec`): one
 * launch instead of a reduction, a finalize and an elementwise pass. Launched cooperatively
 * (cuLaunchCooperativeKernel) with a grid that is resident at once, blocks of the reduction's
 * shape. Phase 1: the reduction items i = tile * splits + k (`s.f.splits` splits of
 * `s.r.chunk` units per channel tile: one channel of packs NCHW, a tile of bx * V channels of
 * rows channels-last), i = blockIdx.x, blockIdx.x + gridDim.x, ..., write their partials (NCHW
 * channel-major, WN_BN_CHANNEL_MAJOR; no WN_BN_FOLD). A grid barrier on `barrier` (two u32
 * counts in the workspace, arrivals and departures: zero before the first use, left zero).
 * NCHW, phase 2: the same items again, each merging its channel's partials as the finalize
 * does, finishing the channel (running and saved statistics, or dgamma and dbeta: by split 0
 * alone) and writing its elements of `out` (y, or dx) from the coefficients.
 * Channels-last: the finalize's merge spread over the grid (groups of min(C, 8) channels,
 * blockIdx.x, blockIdx.x + gridDim.x, ...: the finalize kernel's merge, its coefficients in
 * `s.f.coef`), a second grid barrier on the two counts after them (`barrier` + 8 bytes, the
 * same rules), then the items again writing `out` from those coefficients.
 * Forward: `s.f.counter_bump` as in WnBatchNormFusedFwdArgs.
 */
typedef struct WnBatchNormCoopFwdArgs {
    WnBatchNormStatsArgs s;
    wn_devptr out;
    wn_devptr barrier;
} WnBatchNormCoopFwdArgs;

typedef struct WnBatchNormCoopBwdArgs {
    WnBatchNormSumsArgs s;
    wn_devptr out;
    wn_devptr barrier;
} WnBatchNormCoopBwdArgs;

/**
 * Elementwise passes over the whole tensor (`..._fwd_<T>_apply_*`:
 * y = ((x - coef0) - coef1) * coef2 + coef3; `..._bwd_<T>_apply_*`: dx = coef0 * dy + coef1 * (x - coef2) + coef3), grid-stride
 * over packs of V elements, the coefficients read from the workspace (`coef`, written by a
 * finalize kernel). `counter_bump` (when not 0) is incremented once by thread 0 of
 * block 0 (after the finalize kernel has read it).
 *
 * Frozen statistics (`..._fwd_<T>_<P>params_eval_apply_*`, one launch, no workspace): the
 * forward coefficients of every channel come from the parameters themselves: mean =
 * running_mean (0 when 0), invstd = `invstd` (C floats) when not 0, else
 * 1 / sqrt(running_var + eps), scale = gamma * invstd (gamma 1 when 0), shift = beta (0 when
 * 0); y = (x - mean) * scale + shift. Eval forward passes the running statistics; eval-mode
 * backward passes dy as x, gamma and the saved invstd (dx = dy * gamma * invstd). The kernel
 * also writes save_mean = mean, save_mean_lo = 0 and save_invstd = invstd (each when not 0).
 * `coef`, `coef_stride` and `counter_bump` are unused there; the workspace kernels ignore the
 * parameter fields.
 *
 * The NCHW vecodd variants (`..._apply_nchw_vecodd`) stage the coefficients of the channels
 * each group of a block's packs covers in dynamic shared memory, in two buffers of
 * WN_BN_ODD_APPLY_PACKS groups of min(C, blockDim.x * V / S + 3) channels x 4 floats
 * (V = 16 / sizeof(T)); the other variants use none.
 */
#define WN_BN_ODD_APPLY_PACKS 4u

typedef struct WnBatchNormApplyArgs {
    wn_devptr x;
    wn_devptr dy;
    wn_devptr out;
    wn_devptr coef;
    wn_devptr counter_bump;
    wn_devptr gamma;
    wn_devptr beta;
    wn_devptr running_mean;
    wn_devptr running_var;
    wn_devptr invstd;
    wn_devptr save_mean;
    wn_devptr save_mean_lo;
    wn_devptr save_invstd;
    int64_t n;
    int64_t c;
    int64_t s;
    int64_t coef_stride;
    float eps;
    uint32_t _pad;
} WnBatchNormApplyArgs;

/**
 * Fused training forward for channel tiles that fit on chip
 * (`..._fwd_<T>_<P>params_fused_<layout>_<access>`): grid (channel tiles, 1); each block
 * reads x of its channels once into dynamic shared memory while accumulating the statistics,
 * finalizes them (running statistics, save_mean / save_mean_lo / save_invstd, as the finalize
 * kernel does)
 * and writes y from shared memory. Traffic 2s per element. `counter` is only read
 * (WN_BN_CUMULATIVE), by every block, so the planner bumps it with a following launch then;
 * `counter_bump` (when not 0: a momentum factor, where no block reads the counter) is
 * incremented once by thread 0 of block 0, so that such a training forward is one launch.
 */
typedef struct WnBatchNormFusedFwdArgs {
    wn_devptr x;
    wn_devptr y;
    wn_devptr gamma;
    wn_devptr beta;
    wn_devptr running_mean;
    wn_devptr running_var;
    wn_devptr save_mean;
    wn_devptr save_mean_lo;
    wn_devptr save_invstd;
    wn_devptr counter;
    wn_devptr counter_bump;
    int64_t n;
    int64_t c;
    int64_t s;
    float momentum;
    float eps;
    uint32_t flags;
    uint32_t _pad;
} WnBatchNormFusedFwdArgs;

/**
 * Fused training backward for channel tiles that fit on chip
 * (`..._bwd_<T>_<P>params_fused_<layout>_<access>`): grid (channel tiles, 1); each block reads
 * x and dy of its channels once into dynamic shared memory while summing dy and
 * dy * (x - mean), merges the sums in a fixed order, writes dgamma / dbeta (when not 0), then
 * writes dx from shared memory. Traffic 3s per element instead of 5s.
 */
typedef struct WnBatchNormFusedBwdArgs {
    wn_devptr x;
    wn_devptr dy;
    wn_devptr dx;
    wn_devptr mean;
    wn_devptr mean_lo;
    wn_devptr invstd;
    wn_devptr gamma;
    wn_devptr dgamma;
    wn_devptr dbeta;
    int64_t n;
    int64_t c;
    int64_t s;
} WnBatchNormFusedBwdArgs;

#endif
