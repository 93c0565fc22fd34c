/* Argument structs of the LayerNorm kernels (cuda/layer_norm.cu). */
#ifndef WARPNORM_ABI_LAYER_NORM_H
#define WARPNORM_ABI_LAYER_NORM_H

#endif
