/*
 * dtype.cuh - element types and their conversions to and from the f32 compute type.
 *
 * Every kernel body is written once over an element type T (float, __half, __nv_bfloat16)
 * and computes in f32: `to_float` widens exactly, `from_float` rounds to nearest even once.
 * Nothing here accumulates; accumulation conventions live in reduce.cuh and welford.cuh.
 */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace warpnorm {

/** Widen one element to f32 (exact for every supported type). */
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

/** Round an f32 to T, round-to-nearest-even (overflow to +-inf, NaN stays NaN). */
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

}  // namespace warpnorm
