/*
 * copy.cu - device-to-device copy: the bandwidth roofline that the normalization kernels are
 * measured against, and the smallest kernel that proves the whole path (ABI header -> planner
 * -> fatbin -> module load -> launch, on the GPU and on ptxsim).
 *
 * Variants:
 * - vec16: both pointers 16-byte aligned. A grid-stride loop moves one 16-byte pack per thread
 *   per iteration; the n_bytes % 16 tail bytes are copied by the first threads of block 0.
 * - scalar: any alignment, one byte per thread per iteration (the planner's fallback).
 * Bytes moved: read n + write n. Measured (GB/s) as the copy roofline at the start of
 * `cargo bench --bench layer_norm` and `--bench batch_norm`, which report every figure as % of it.
 */
#include "abi.h"
#include "common/vec.cuh"

namespace warpnorm {

__device__ __forceinline__ void copy_vec16(const WnCopyArgs& a) {
    const auto* src = reinterpret_cast<const uint4*>(a.src);
    auto* dst = reinterpret_cast<uint4*>(a.dst);
    const uint64_t packs = a.n_bytes / 16;
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
         i += stride) {
        dst[i] = src[i];
    }
    const uint64_t tail = a.n_bytes - packs * 16;
    if (blockIdx.x == 0 && threadIdx.x < tail) {
        const uint64_t j = packs * 16 + threadIdx.x;
        reinterpret_cast<uint8_t*>(a.dst)[j] = reinterpret_cast<const uint8_t*>(a.src)[j];
    }
}

__device__ __forceinline__ void copy_scalar(const WnCopyArgs& a) {
    const auto* src = reinterpret_cast<const uint8_t*>(a.src);
    auto* dst = reinterpret_cast<uint8_t*>(a.dst);
    const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
    for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < a.n_bytes; i += stride) {
        dst[i] = src[i];
    }
}

}  // namespace warpnorm

extern "C" __global__ void warpnorm_copy_fwd_u8_vec16(const WnCopyArgs args) {
    warpnorm::copy_vec16(args);
}

extern "C" __global__ void warpnorm_copy_fwd_u8_scalar(const WnCopyArgs args) {
    warpnorm::copy_scalar(args);
}
