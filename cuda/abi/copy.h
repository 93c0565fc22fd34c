/* Argument struct of the device-to-device copy kernels (cuda/copy.cu). */
#ifndef WARPNORM_ABI_COPY_H
#define WARPNORM_ABI_COPY_H

/**
 * Copy `n_bytes` bytes from `src` to `dst` (non-overlapping).
 * The `vec16` variant requires both addresses to be 16-byte aligned; the `scalar` variant
 * has no alignment requirement.
 */
typedef struct WnCopyArgs {
    wn_devptr src;
    wn_devptr dst;
    uint64_t n_bytes;
} WnCopyArgs;

#endif
