/* Argument structs of the BatchNorm kernels (cuda/batch_norm.cu). */
#ifndef WARPNORM_ABI_BATCH_NORM_H
#define WARPNORM_ABI_BATCH_NORM_H

#endif
