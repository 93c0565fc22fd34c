// Probe kernels for the performance model's own tests (perfmodel/tests/probes.rs): small
// kernels whose memory-level parallelism and instruction mix are known by construction, compiled
// with nvcc at test time and disassembled with cuobjdump, so that the SASS walk
// (perfmodel/src/sass.rs) and the prediction (perfmodel/src/model.rs) can be checked without a GPU.
//
// - probe_copy<K>: a grid-stride copy of 16-byte packs, K independent loads per thread per
//   iteration, all issued before the first of them is used: 16 K bytes in flight per thread.
//   Every stored pack carries the xor of the K packs' last words (a zero when the K packs are
//   equal), so that no store can be issued before the last load: with plain stores ptxas
//   interleaves stores with the later loads and keeps only about 4 loads in flight.
// - probe_chain: the same copy, 4 packs per iteration, each stored (used) before the next is
//   loaded (a compiler barrier after each store): 16 bytes in flight.
// - probe_compute: one 16-byte load per thread per iteration followed by a long chain of
//   dependent FMAs: bound by instruction issue, not by memory.
#include <cstdint>

template <int K>
__device__ __forceinline__ void copy_k(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                       long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    // Not unrolled: one iteration has exactly K loads (n is taken to be a multiple of K x the
    // grid's threads; the probes are never run).
#pragma unroll 1
    for (; i + (K - 1) * stride < n; i += K * stride) {
        uint4 v[K];
#pragma unroll
        for (int k = 0; k < K; ++k) v[k] = src[i + k * stride];
        unsigned t = 0;
#pragma unroll
        for (int k = 0; k < K; ++k) t ^= v[k].w;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            uint4 o = v[k];
            o.w ^= t ^ v[k].w;
            dst[i + k * stride] = o;
        }
    }
}

extern "C" __global__ void probe_copy1(const uint4* __restrict__ s, uint4* __restrict__ d, long long n) { copy_k<1>(s, d, n); }
extern "C" __global__ void probe_copy2(const uint4* __restrict__ s, uint4* __restrict__ d, long long n) { copy_k<2>(s, d, n); }
extern "C" __global__ void probe_copy4(const uint4* __restrict__ s, uint4* __restrict__ d, long long n) { copy_k<4>(s, d, n); }
extern "C" __global__ void probe_copy8(const uint4* __restrict__ s, uint4* __restrict__ d, long long n) { copy_k<8>(s, d, n); }

extern "C" __global__ void probe_chain(const uint4* src, uint4* dst, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 1
    for (; i + 3 * stride < n; i += 4 * stride) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            dst[i + k * stride] = src[i + k * stride];
            asm volatile("" ::: "memory");
        }
    }
}

extern "C" __global__ void probe_compute(const float4* __restrict__ src, float4* __restrict__ dst,
                                         long long n, float a, float b) {
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 1
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float4 v = src[i];
#pragma unroll
        for (int k = 0; k < 128; ++k) {
            v.x = fmaf(v.x, a, b);
            v.y = fmaf(v.y, a, b);
            v.z = fmaf(v.z, a, b);
            v.w = fmaf(v.w, a, b);
        }
        dst[i] = v;
    }
}
