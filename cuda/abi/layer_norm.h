/* Argument structs of the LayerNorm kernels (cuda/layer_norm.cu). */
#ifndef WARPNORM_ABI_LAYER_NORM_H
#define WARPNORM_ABI_LAYER_NORM_H

/** Threads per block of the warp tiers (rows handled by groups of `group` lanes). */
#define WN_LN_WARP_BLOCK 128
/** Threads per block of the backward warp tiers (larger blocks: fewer dgamma partial rows). */
#define WN_LN_BWD_WARP_BLOCK 512
/** Largest block of the one-row-per-block and split tiers. */
#define WN_LN_MAX_BLOCK 512
/** Row elements each thread holds in registers in the forward warp/block/split tiers. */
#define WN_LN_FWD_THREAD_ELEMS 32
/** Row elements each thread holds (of x and of dy) in the backward warp/block/split tiers. */
#define WN_LN_BWD_THREAD_ELEMS 16
/** The same for the scalar (misaligned) variants, whose per-element addresses cost registers. */
#define WN_LN_FWD_THREAD_ELEMS_SCALAR 8
#define WN_LN_BWD_THREAD_ELEMS_SCALAR 8
/**
 * Backward vector variants on compute capability 12.x and newer: ptxas for sm_120 needs a few
 * more registers for the same code, so these hold fewer elements (no spills on any arch).
 */
#define WN_LN_BWD_THREAD_ELEMS_CC12 8
/**
 * The backward's wide block tier (vector variants): this many times the block tier's elements
 * per thread, its dgamma/dbeta sums in shared memory instead of registers; f32 activations on
 * compute capability 10.x hold the block tier's (WN_LN_BWD_THREAD_ELEMS: 32 spilled 64-88 bytes
 * on sm_100, 24 still 4), so the planner does not choose the wide tier for them there.
 */
#define WN_LN_BWD_WIDE_FACTOR 2
/**
 * Bytes at the start of every non-empty LayerNorm / RMSNorm workspace kept for the forward
 * split tier's cooperative pass: its grid barrier's two u32 counts (see `partials`), padded
 * to a 32-byte sector so that the partials (and the backward's partial rows) start on one.
 */
#define WN_LN_SPLIT_BARRIER_BYTES 32
/** The finalize kernel's block: columns per block (x) and partial-row lanes (y). */
#define WN_LN_FINALIZE_COLS 32
#define WN_LN_FINALIZE_LANES 8

/**
 * LayerNorm forward over `rows` rows of `cols` contiguous elements (row stride = cols).
 * Every forward tier takes this struct; fields a tier does not use are 0.
 */
typedef struct WnLayerNormFwdArgs {
    /** Input, activation dtype, rows * cols elements. */
    wn_devptr x;
    /** Output, activation dtype, rows * cols elements. */
    wn_devptr y;
    /** Scale (parameter dtype, cols elements), or 0 without elementwise affine. */
    wn_devptr gamma;
    /** Shift (parameter dtype, cols elements), or 0 without bias. */
    wn_devptr beta;
    /** Saved mean, f32, rows elements, or 0: not saved (inference; nothing is stored). */
    wn_devptr mean;
    /** Saved 1 / sqrt(var + eps), f32, rows elements, or 0: not saved. */
    wn_devptr rstd;
    /**
     * The saved mean's rounding error, f32, rows elements, or 0: not saved. The row mean is
     * `mean + mean_lo` to about a rounding of the row's spread (`mean` is it rounded to f32);
     * the backward re-centres x on the pair. LayerNorm only (RMSNorm saves no mean).
     */
    wn_devptr mean_lo;
    /**
     * Split tier: rows * splits float4 (mean hi, mean lo, m2 / cols, its lo part), 16-byte
     * aligned; else 0. The forward's cooperative pass (`..._split_coop_vec`,
     * `..._res_split_coop_vec`) keeps its grid barrier's two u32 counts (arrivals,
     * departures) in the WN_LN_SPLIT_BARRIER_BYTES before it (the workspace's start), zero
     * before the first call and left zero by every call. (Not a field of its own: one more
     * pointer in this struct spilled three block kernels on sm_100.)
     */
    wn_devptr partials;
    /** Number of rows (M). */
    int64_t rows;
    /** Elements per row (D). */
    int64_t cols;
    /** Split tier: columns per chunk (a multiple of the vector width); cols otherwise. */
    int64_t chunk;
    /** Split tier: chunks per row (grid.y); 1 otherwise. */
    int64_t splits;
    /** Added to the variance inside the square root. */
    float eps;
    /** Warp tiers: lanes per row (a power of two <= 32); 0 otherwise. */
    uint32_t group;
    /**
     * Fused residual add (the `..._res_<tier>_...` entry points; 0 for the others):
     * residual, activation dtype, rows * cols. Those kernels form h = (x + residual) + bias in
     * f32, round it once to the activation dtype, store it to `h` and normalize the stored h.
     */
    wn_devptr residual;
    /** Fused residual add: bias added to h, parameter dtype, cols elements, or 0 (none). */
    wn_devptr bias;
    /**
     * Fused residual add: h (written), activation dtype, rows * cols; set exactly when
     * `residual` is (the split tier's second pass, a plain kernel, gets h as its x).
     */
    wn_devptr h;
} WnLayerNormFwdArgs;

/**
 * LayerNorm backward: dx from x, dy and the saved statistics; per-block f32 partial sums of
 * dgamma / dbeta (reduced by the finalize kernel). Fields a tier does not use are 0.
 */
typedef struct WnLayerNormBwdArgs {
    /** Forward input, activation dtype, rows * cols. */
    wn_devptr x;
    /** Gradient of the output, activation dtype, rows * cols. */
    wn_devptr dy;
    /** Gradient of the input (written), activation dtype, rows * cols. */
    wn_devptr dx;
    /** Scale (parameter dtype, cols), or 0 without elementwise affine. */
    wn_devptr gamma;
    /** Saved mean, f32, rows. */
    wn_devptr mean;
    /** Saved rstd, f32, rows. */
    wn_devptr rstd;
    /**
     * The forward's saved mean_lo, f32, rows, or 0 (zeros: a mean saved without it, as
     * PyTorch's). xhat = ((x - mean) - mean_lo) * rstd.
     */
    wn_devptr mean_lo;
    /** f32 partial dgamma rows (row = blockIdx.x, stride part_stride), or 0 without affine. */
    wn_devptr dgamma_part;
    /** f32 partial dbeta rows (stride part_stride), or 0 without bias. */
    wn_devptr dbeta_part;
    /** Split tier: f32 workspace of rows * splits (sum g*dy, sum g*dy*xhat) pairs; else 0. */
    wn_devptr row_sums;
    /**
     * Single-block grids (gridDim.x == 1): dgamma written directly in the parameter dtype
     * (then dgamma_part is 0 and no finalize runs); else 0.
     */
    wn_devptr dgamma;
    /** Single-block grids: dbeta written directly; else 0. */
    wn_devptr dbeta;
    /** Number of rows (M). */
    int64_t rows;
    /** Elements per row (D). */
    int64_t cols;
    /** Split tier: columns per chunk (a multiple of the vector width); cols otherwise. */
    int64_t chunk;
    /** Split tier: chunks per row (grid.y); 1 otherwise. */
    int64_t splits;
    /** Floats between partial rows: cols rounded up to a multiple of 8 (32-byte rows). */
    int64_t part_stride;
    /** Warp tiers: lanes per row (a power of two <= 32); 0 otherwise. */
    uint32_t group;
    /**
     * Fused residual add's bias gradient: 1 makes the accumulators that otherwise sum dbeta
     * sum dx instead - the f32 gradient of h before its one rounding, dh included - written
     * through dbeta_part / dbeta (which then hold dbias; LayerNorm's dbeta then comes from
     * dy_sum_part / dy_sum in the block tier, else from the column sum of dy). 0 otherwise.
     */
    uint32_t db_dx;
    /**
     * Fused residual add: the gradient arriving on h, activation dtype, rows * cols, or 0
     * (none). Added in f32 to the normalization's dx before its one rounding: dx is then the
     * gradient of h (and of x and of the residual). `x` is h, as the forward stored it.
     */
    wn_devptr dh;
    /**
     * LayerNorm's bias-gradient block and split_dx kernels (`..._block_dbias_...`,
     * `..._split_dx_dbias_...`): f32 partial rows (stride part_stride, row blockIdx.x) of the
     * column sums of dy - dbeta, which the second accumulators (db_dx) cannot hold - or 0: not
     * written. Those kernels sum dy in thread-private shared-memory slots (dynamic shared
     * memory of at least WN_LN_MAX_BLOCK * 4 * elems bytes, elems the backward elements per
     * thread), so that dbeta needs no column sum of its own. Every other kernel: 0.
     */
    wn_devptr dy_sum_part;
    /** The same kernels, single-block grids: the column sums of dy written directly (dbeta). */
    wn_devptr dy_sum;
} WnLayerNormBwdArgs;

/**
 * dgamma(c) = sum over p of dgamma_part(p * part_stride + c) (likewise dbeta and dy_sum), summed
 * in a fixed order and rounded once to the parameter dtype. part_rows == 0 writes zeros.
 */
typedef struct WnLayerNormFinalizeArgs {
    /** f32 partial rows, part_rows * cols, or 0 (then dgamma is not written). */
    wn_devptr dgamma_part;
    /** f32 partial rows, part_rows * cols, or 0 (then dbeta is not written). */
    wn_devptr dbeta_part;
    /** Output, parameter dtype, cols elements. */
    wn_devptr dgamma;
    /** Output, parameter dtype, cols elements. */
    wn_devptr dbeta;
    /** A third set of f32 partial rows, or 0 (then dy_sum is not written). */
    wn_devptr dy_sum_part;
    /** Its output, parameter dtype, cols elements. */
    wn_devptr dy_sum;
    /** Number of partial rows. */
    int64_t part_rows;
    /** Elements per row (D). */
    int64_t cols;
    /** Floats between partial rows (a multiple of 8, >= cols). */
    int64_t part_stride;
} WnLayerNormFinalizeArgs;

/** The column sum (`warpnorm_layer_norm_bwd_<T>_colsum`): block (32, 8). */
#define WN_LN_COLSUM_LANES 32
#define WN_LN_COLSUM_ROWS 8

/**
 * A column sum, first pass (the fused residual add's dbeta when the backward's accumulators
 * form dbias, WnLayerNormBwdArgs.db_dx): the f32 column sums of `src` (dy, rows * cols
 * activation elements) over chunks of `chunk_rows` rows, one partial row per chunk
 * (blockIdx.y) at `part + chunk * part_stride`; the finalize kernel (WnLayerNormFinalizeArgs,
 * dgamma_part = part) sums them into its output in a fixed order. Block
 * (WN_LN_COLSUM_LANES, WN_LN_COLSUM_ROWS): lane x sums 16 bytes' worth of columns (V = 16 /
 * sizeof(T) elements), row lane y the chunk's rows y, y + 8, ...; grid.x covers the columns in
 * blocks of 32 * V.
 */
typedef struct WnLayerNormColSumArgs {
    /** The summed tensor (dy), activation dtype, rows * cols. */
    wn_devptr src;
    /** f32 partial rows (written), chunks * part_stride, 16-byte aligned. */
    wn_devptr part;
    /** Number of rows (M). */
    int64_t rows;
    /** Elements per row (D). */
    int64_t cols;
    /** Rows per chunk (grid.y = ceil(rows / chunk_rows) chunks). */
    int64_t chunk_rows;
    /** Floats between partial rows (a multiple of 8, >= cols). */
    int64_t part_stride;
    /**
     * 1: `src` and the row length are 16-byte aligned, each lane reads V consecutive columns
     * with one 16-byte load per row; 0: lane x reads columns x, x + 32, ... of its block's
     * 32 * V (element accesses, coalesced).
     */
    uint32_t vec;
    /** Explicit padding. */
    uint32_t _pad;
} WnLayerNormColSumArgs;

#endif
