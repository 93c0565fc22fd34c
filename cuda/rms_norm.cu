/*
 * rms_norm.cu - RMSNorm forward and backward over rows of D contiguous elements
 * (PyTorch's nn.RMSNorm / F.rms_norm).
 *
 * y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps); x, y, dy, dx in T (f32, f16, bf16),
 * weight in P (T or f32), saved rstd in f32; everything that accumulates is f32, outputs are
 * rounded once. Backward, with g = dy * weight and xhat = x * rstd:
 *   dx = rstd * (g - xhat * mean(g * xhat)),  dweight = sum over rows of dy * xhat.
 *
 * RMSNorm is LayerNorm with the mean pinned to 0 and no bias, so this file owns no kernel
 * body: it includes cuda/layer_norm.cu with WN_LN_BODIES_ONLY (its tiers, team reductions,
 * loaders, overflow-safe statistics and dweight partial rows + fixed-order finalize) and
 * instantiates them with ln::Norm::Rms, which
 * - sums x^2 team-wide instead of the two-pass mean and variance (tile_moments): finite rows
 *   whose sum of squares overflows f32 are redone on x * 2^-80 as in LayerNorm (tile_stats),
 *   so an f16 row [60000, 60000, 1, 1] gives 1.414, not Inf; a mean square beyond f32 gives
 *   rstd 0 and y = 0, as PyTorch's f32 arithmetic; Inf or NaN in a row gives a NaN row;
 *   for f32 activations (kExactOut) rstd and the output are formed as in LayerNorm's exact
 *   path (rstd_pair, tile_normalize<kExact>), the sum of squares stays a plain f32 sum;
 * - normalizes with mean 0 and stores no mean (the mean pointer is 0);
 * - drops the backward's mean(g) term and dbeta (its accumulators serve the fused residual
 *   add's bias gradient, a.db_dx, as LayerNorm's do; RMSNorm needs no column sum).
 * The argument structs are LayerNorm's (cuda/abi/layer_norm.h, with mean, beta, dbeta_part
 * and dbeta 0), the tiers and their sizes the same, and the planner the same
 * (src/layer_norm/plan, called with its RMSNorm op by src/rms_norm/). No float atomics:
 * reruns are bitwise identical. Bytes moved as LayerNorm's (fwd read x + write y; bwd read
 * x, dy + write dx).
 * Entry points: warpnorm_rms_norm_<fwd|bwd>_<T>_<P>_<tier>_<vec|scalar> and
 * warpnorm_rms_norm_bwd_<P>_finalize. Its own file so that nvcc compiles it alongside
 * layer_norm.cu.
 */
#define WN_LN_BODIES_ONLY
#include "layer_norm.cu"

WN_LN_ALL_PAIRS(rms_norm, Rms)
WN_LN_ALL_FINALIZE(rms_norm)
