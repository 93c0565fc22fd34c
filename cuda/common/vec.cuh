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
 * A pack loaded and held as 32-bit words until its values are used (`load`, then `pack`).
 * Holding a pack of a 16-bit type as Pack<T, N> across a branch (a load under a bound) lets
 * nvcc split it into 16-bit registers at the load: for bf16 on sm_90 a PRMT right after each
 * LDG, which waits for the data, so that a thread had one 16-byte load in flight (and more
 * registers: BatchNorm's bf16 statistics kernel 79 against f16's 64). Whole words cross the
 * join untouched and are widened where they are used. Packs of fewer than 4 bytes (the scalar
 * variants of 16-bit types) are held as they are.
 */
template <typename T, int N, bool kWords = sizeof(Pack<T, N>) % 4 == 0> struct Held;

template <typename T, int N> struct Held<T, N, true> {
    static constexpr int kCount = static_cast<int>(sizeof(Pack<T, N>) / 4);
    uint32_t w[kCount];

    /** Loads the pack at `p` (aligned to its size) as one access. */
    __device__ __forceinline__ void load(const T* p) {
        if constexpr (kCount == 4) {
            const uint4 u = *reinterpret_cast<const uint4*>(p);
            w[0] = u.x;
            w[1] = u.y;
            w[2] = u.z;
            w[3] = u.w;
        } else if constexpr (kCount == 2) {
            const uint2 u = *reinterpret_cast<const uint2*>(p);
            w[0] = u.x;
            w[1] = u.y;
        } else {
            static_assert(kCount == 1, "packs of 4, 8 or 16 bytes");
            w[0] = *reinterpret_cast<const uint32_t*>(p);
        }
    }

    /** The pack's elements. */
    __device__ __forceinline__ Pack<T, N> pack() const {
        Pack<T, N> out;
        memcpy(&out, w, sizeof(out));
        return out;
    }
};

template <typename T, int N> struct Held<T, N, false> {
    Pack<T, N> p_;
    __device__ __forceinline__ void load(const T* p) { p_ = load_pack<T, N>(p); }
    __device__ __forceinline__ Pack<T, N> pack() const { return p_; }
};

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
