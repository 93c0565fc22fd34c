/*
 * vec.cuh - 16-byte vector packs, and loads/stores with a predicated tail.
 *
 * A Pack<T, N> is N elements of T moved as one aligned access (N * sizeof(T) == 16 for the
 * default kVec<T>). Kernels walk a row in packs; the last, partial pack is handled by the
 * `_tail` helpers element by element under a bound, so that no row length falls to a slow
 * path. Misaligned base pointers use a separate scalar kernel variant chosen by the planner.
 */
#pragma once

#include "dtype.cuh"

namespace warpnorm {

/** Elements of T in one 16-byte vector. */
template <typename T> struct VecWidth { static constexpr int value = 16 / sizeof(T); };
template <typename T> constexpr int kVec = VecWidth<T>::value;

/** N elements of T, aligned so that one instruction moves the whole pack. */
template <typename T, int N> struct alignas(sizeof(T) * N) Pack {
    T v[N];
};

/** Load one full pack from `p` (must be aligned to sizeof(Pack<T, N>)). */
template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
    return *reinterpret_cast<const Pack<T, N>*>(p);
}

/** Store one full pack to `p` (must be aligned to sizeof(Pack<T, N>)). */
template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& pack) {
    *reinterpret_cast<Pack<T, N>*>(p) = pack;
}

/**
 * Load N elements starting at p[0] as floats. Elements at index >= `valid` are not read and
 * come back as `fill`. With valid >= N this is one vector load (p must then be pack-aligned).
 */
template <typename T, int N>
__device__ __forceinline__ void load_floats(const T* p, int64_t valid, float (&out)[N],
                                            float fill = 0.0f) {
    if (valid >= N) {
        Pack<T, N> pack = load_pack<T, N>(p);
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] = to_float(pack.v[i]);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) out[i] = i < valid ? to_float(p[i]) : fill;
    }
}

/** True when `p` is aligned for a 16-byte vector access. */
__device__ __forceinline__ bool is_vec_aligned(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace warpnorm
