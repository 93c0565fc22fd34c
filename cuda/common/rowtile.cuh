/*
 * rowtile.cuh - a row segment held in registers by a team of threads, moved with vectors of
 * VEC elements (8 or 16 bytes) aligned to the segment's absolute address, head and tail
 * predicated.
 *
 * Layout: a team of `team` threads (a sub-warp group, a warp or a block) holds a segment of
 * `n` contiguous elements. Thread `t` owns packs p = t + k * team for k < NPACK; pack p covers
 * the segment columns [p * VEC - off, p * VEC - off + VEC), where `off` is the number of
 * elements between the previous VEC * sizeof(T)-byte boundary (the access width) and the
 * segment's first element. So every
 * full pack is one aligned vector access whatever the row length, and only the (at most two)
 * packs that straddle the segment's ends fall back to per-element accesses under a bound:
 * no row length takes a slow path. VEC == 1 is the scalar variant (any alignment; off == 0).
 * Columns outside [0, n) hold 0 after a load and are never stored.
 *
 * Nothing here accumulates; the kernels reduce the registers with reduce.cuh / welford.cuh.
 */
#pragma once

#include <type_traits>

#include "vec.cuh"

namespace warpnorm {

/**
 * Where a thread's packs sit in a segment (see the header comment), with column indices of
 * type I. A segment is at most one team's tile (512 threads of 32 elements: the planner's
 * tiers), so 32-bit indices (TileGeom) cannot overflow; a bound check is then one ISETP instead
 * of two and an address one IMAD.WIDE. The forward's warp and block tiers use them (LayerNorm
 * bf16/f32 block kernel on sm_90: 1168 -> 1045 instructions per 32 elements; bf16/bf16 935 ->
 * 835). The backward and the split tier keep 64-bit indices (TileGeom64): at their
 * 128-register bound the 32-bit form spilled five backward kernels on sm_90 and sm_100, and
 * RMSNorm's split_stats issued half its loads before converting the first.
 */
template <typename I>
struct TileGeomT {
    /** Valid columns in the segment. */
    I n;
    /** Elements between the previous access-width boundary and the segment start (0 for VEC 1). */
    int off;
    /** This thread's index in the team. */
    int t;
    /** Threads in the team. */
    int team;

    /** First segment column of this thread's k-th pack (may be negative for the head). */
    template <int VEC>
    __device__ __forceinline__ I lo(int k) const {
        return (static_cast<I>(k) * team + t) * VEC - off;
    }
};

/** 32-bit column indices (the forward's warp and block tiers). */
using TileGeom = TileGeomT<int>;
/** 64-bit column indices (the backward, the split tier). */
using TileGeom64 = TileGeomT<int64_t>;

/**
 * Elements of T between the previous VEC * sizeof(T)-byte boundary (the access width) and `p`
 * (0 when VEC == 1).
 */
template <typename T, int VEC>
__device__ __forceinline__ int head_offset(const T* p) {
    if constexpr (VEC == 1) {
        return 0;
    } else {
        return static_cast<int>((reinterpret_cast<uintptr_t>(p) / sizeof(T)) % VEC);
    }
}

/**
 * Stores a 16-byte pack at `p` (a 16-byte aligned global address) as one st.global.v4.b32.
 * nvcc splits a plain struct or uint4 assignment after a per-element fill into per-element
 * stores - a full sector per lane per element, uncoalesced - so the instruction is explicit.
 */
template <typename T, int N>
__device__ __forceinline__ void store_vec16(T* p, const Pack<T, N>& pack) {
    static_assert(sizeof(Pack<T, N>) == 16, "a 16-byte pack");
    uint4 u;
    memcpy(&u, &pack, 16);
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(u.x), "r"(u.y),
                 "r"(u.z), "r"(u.w)
                 : "memory");
}

/**
 * Stores an 8-byte pack at `p` (an 8-byte aligned global address) as one st.global.v2.b32,
 * for the same reason as store_vec16.
 */
template <typename T, int N>
__device__ __forceinline__ void store_vec8(T* p, const Pack<T, N>& pack) {
    static_assert(sizeof(Pack<T, N>) == 8, "an 8-byte pack");
    uint2 u;
    memcpy(&u, &pack, 8);
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(u.x), "r"(u.y) : "memory");
}

/** Stores a full pack at `p` (aligned to its size) as one instruction (8 or 16 bytes). */
template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Pack<T, N>& pack) {
    if constexpr (sizeof(Pack<T, N>) == 16) {
        store_vec16<T, N>(p, pack);
    } else if constexpr (sizeof(Pack<T, N>) == 8) {
        store_vec8<T, N>(p, pack);
    } else {
        store_pack<T, N>(p, pack);
    }
}

/** True when column `c` lies in the segment. */
template <typename I>
__device__ __forceinline__ bool in_seg(I c, I n) {
    return c >= 0 && c < n;
}

/** True when this thread's k-th pack lies wholly in the segment (one vector access). */
template <int VEC, class G>
__device__ __forceinline__ bool full_pack(const G& g, int k) {
    const auto lo = g.template lo<VEC>(k);
    return lo >= 0 && lo + VEC <= g.n;
}

/** A raw pack's holder (Pack, or vec.cuh's Held words): its load and its pack. */
template <typename T, int VEC>
__device__ __forceinline__ void raw_load(Pack<T, VEC>& r, const T* p) {
    r = load_pack<T, VEC>(p);
}
template <typename T, int VEC, bool W>
__device__ __forceinline__ void raw_load(Held<T, VEC, W>& r, const T* p) {
    r.load(p);
}
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> raw_pack(const Pack<T, VEC>& r) {
    return r;
}
template <typename T, int VEC, bool W>
__device__ __forceinline__ Pack<T, VEC> raw_pack(const Held<T, VEC, W>& r) {
    return r.pack();
}

/**
 * Issues the vector loads of every full pack of this thread (raw, unconverted), all before
 * any is used, so that NPACK loads are in flight per thread rather than one; packs that are
 * not full are left unset (tile_convert reads them element by element).
 */
template <typename T, int VEC, int NPACK, class R, class G>
__device__ __forceinline__ void tile_load_raw(const T* base, const G& g, R (&raw)[NPACK]) {
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        if (full_pack<VEC>(g, k)) raw_load(raw[k], base + g.template lo<VEC>(k));
    }
}

/**
 * Converts tile_load_raw's packs to floats; the (at most two) packs at the segment's ends
 * are read here element by element under the bound (0 outside).
 */
template <typename T, int VEC, int NPACK, class R, class G>
__device__ __forceinline__ void tile_convert(const T* base, const G& g, const R (&raw)[NPACK],
                                             float (&v)[NPACK][VEC]) {
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
        if (full_pack<VEC>(g, k)) {
            const Pack<T, VEC> pack = raw_pack(raw[k]);
#pragma unroll
            for (int i = 0; i < VEC; ++i) v[k][i] = to_float(pack.v[i]);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) v[k][i] = in_seg(lo + i, g.n) ? to_float(base[lo + i]) : 0.0f;
        }
    }
}

/**
 * tile_load with each pack converted as soon as it arrives (one load in flight per thread, the
 * fewest live registers): for kernels at their register bound (the backward's split_sums, and
 * tile_load2's 8- and 16-byte packs of the other pairs).
 */
template <typename T, int VEC, int NPACK, class G>
__device__ __forceinline__ void tile_load_each(const T* base, const G& g,
                                               float (&v)[NPACK][VEC]) {
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        const auto lo = g.template lo<VEC>(k);
        if (full_pack<VEC>(g, k)) {
            const Pack<T, VEC> pack = load_pack<T, VEC>(base + lo);
#pragma unroll
            for (int i = 0; i < VEC; ++i) v[k][i] = to_float(pack.v[i]);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) v[k][i] = in_seg(lo + i, g.n) ? to_float(base[lo + i]) : 0.0f;
        }
    }
}

/**
 * Whether tile_load takes the 8-byte packs of a 16-bit type (the forward's mixed pairs) one at
 * a time (tile_load_each): on compute capability >= 12.0, where holding them all raw spilled
 * the LayerNorm and RMSNorm bf16/f32 block kernels (16 bytes each, at 128 registers).
 */
constexpr bool kLoadEach8 =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
    true;
#else
    false;
#endif

/**
 * Loads this thread's packs of the segment starting at `base` as floats (0 outside): every
 * full pack issued raw (tile_load_raw) before any is converted. The 8-byte packs of a 16-bit
 * type are held as 32-bit words (vec.cuh's Held; as packs, nvcc kept a 16-bit half of one in
 * local memory in LayerNorm's bf16/f32 block kernel on sm_90).
 */
template <typename T, int VEC, int NPACK, class G>
__device__ __forceinline__ void tile_load(const T* base, const G& g, float (&v)[NPACK][VEC]) {
    constexpr bool kWords8 = sizeof(T) == 2 && VEC * sizeof(T) == 8;
    if constexpr (kWords8 && kLoadEach8) {
        tile_load_each<T, VEC, NPACK>(base, g, v);
    } else {
        using Raw = typename std::conditional<kWords8, Held<T, VEC>, Pack<T, VEC>>::type;
        Raw raw[NPACK];
        tile_load_raw<T, VEC, NPACK>(base, g, raw);
        tile_convert<T, VEC, NPACK>(base, g, raw, v);
    }
}

/** tile_load2's conversion of a whole pack of each segment (a first, then b). */
template <typename T, int VEC>
__device__ __forceinline__ void pack2_to_float(const Pack<T, VEC>& pa, const Pack<T, VEC>& pb,
                                               float (&va)[VEC], float (&vb)[VEC]) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) va[i] = to_float(pa.v[i]);
#pragma unroll
    for (int i = 0; i < VEC; ++i) vb[i] = to_float(pb.v[i]);
}

/**
 * tile_load2's pack at the row's head or tail (not whole): per-element loads of columns
 * [lo, lo + VEC) in [0, n) of both segments, 0 elsewhere.
 */
template <typename T, int VEC, typename I>
__device__ __forceinline__ void end_pack2_load(const T* a, const T* b, I lo, I n,
                                               float (&va)[VEC], float (&vb)[VEC]) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        va[i] = in_seg(lo + i, n) ? to_float(a[lo + i]) : 0.0f;
        vb[i] = in_seg(lo + i, n) ? to_float(b[lo + i]) : 0.0f;
    }
}

/**
 * tile_load_each of two segments with one geometry (the backward's x and dy). With 16-byte
 * packs of a 16-bit type, each pack of both segments is loaded raw before either is converted
 * (two loads in flight per thread at the fewest registers; nvcc hoists the next pair's loads
 * above the conversions, so that every pack of the row is in flight at once). The 8-byte packs
 * of 16-bit activations (the pairs with f32 parameters), with kHold8, are all loaded first as
 * 32-bit words (Held: nvcc neither splits them into halves at the load nor hoists the next
 * pair's loads over a pair's conversions, so a thread had 32-40 bytes in flight, not the row's
 * 64) and converted afterwards; without kHold8 (kernels whose own loop already keeps more in
 * flight, or with no registers to spare) they load as tile_load_each. f32 packs need no
 * conversion (nvcc issues them all at once).
 */
template <typename T, int VEC, int NPACK, bool kHold8 = true, class G>
__device__ __forceinline__ void tile_load2(const T* a, const T* b, const G& g,
                                           float (&va)[NPACK][VEC], float (&vb)[NPACK][VEC]) {
    if constexpr (sizeof(T) == 2 && VEC * sizeof(T) == 16) {
#pragma unroll
        for (int k = 0; k < NPACK; ++k) {
            const auto lo = g.template lo<VEC>(k);
            if (full_pack<VEC>(g, k)) {
                const Pack<T, VEC> pa = load_pack<T, VEC>(a + lo);
                const Pack<T, VEC> pb = load_pack<T, VEC>(b + lo);
                pack2_to_float(pa, pb, va[k], vb[k]);
            } else {
                end_pack2_load(a, b, lo, g.n, va[k], vb[k]);
            }
        }
    } else if constexpr (kHold8 && sizeof(T) == 2 && VEC * sizeof(T) == 8) {
        Held<T, VEC> ha[NPACK], hb[NPACK];
#pragma unroll
        for (int k = 0; k < NPACK; ++k) {
            if (full_pack<VEC>(g, k)) {
                ha[k].load(a + g.template lo<VEC>(k));
                hb[k].load(b + g.template lo<VEC>(k));
            }
        }
#pragma unroll
        for (int k = 0; k < NPACK; ++k) {
            const auto lo = g.template lo<VEC>(k);
            if (full_pack<VEC>(g, k)) {
                pack2_to_float(ha[k].pack(), hb[k].pack(), va[k], vb[k]);
            } else {
                end_pack2_load(a, b, lo, g.n, va[k], vb[k]);
            }
        }
    } else {
        tile_load_each<T, VEC, NPACK>(a, g, va);
        tile_load_each<T, VEC, NPACK>(b, g, vb);
    }
}

/**
 * Rounds and stores one pack, columns [lo, lo + VEC) of the segment at `base` (those in
 * [0, n) only): one vector store where the pack is whole.
 */
template <typename T, int VEC, typename I>
__device__ __forceinline__ void pack_store(T* base, I lo, I n, const float (&v)[VEC]) {
    if (lo >= 0 && lo + VEC <= n) {
        Pack<T, VEC> pack;
#pragma unroll
        for (int i = 0; i < VEC; ++i) pack.v[i] = from_float<T>(v[i]);
        store_vec<T, VEC>(base + lo, pack);
    } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            if (in_seg(lo + i, n)) base[lo + i] = from_float<T>(v[i]);
        }
    }
}

/** Rounds and stores this thread's packs of the segment at `base` (columns in [0, n) only). */
template <typename T, int VEC, int NPACK, class G>
__device__ __forceinline__ void tile_store(T* base, const G& g,
                                           const float (&v)[NPACK][VEC]) {
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
        // Written out rather than calling pack_store: that form changed ptxas's allocation
        // in the backward kernels (spills on sm_90/sm_100).
        const auto lo = g.template lo<VEC>(k);
        if (lo >= 0 && lo + VEC <= g.n) {
            Pack<T, VEC> pack;
#pragma unroll
            for (int i = 0; i < VEC; ++i) pack.v[i] = from_float<T>(v[k][i]);
            store_vec<T, VEC>(base + lo, pack);
        } else {
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                if (in_seg(lo + i, g.n)) base[lo + i] = from_float<T>(v[k][i]);
            }
        }
    }
}

/**
 * Loads the parameter values of columns [lo, lo + VEC) of a length-n vector `p` as floats
 * (`fill` outside [0, n)). Uses 16-byte loads when the whole range is in bounds, its address is
 * 16-byte aligned and VEC elements of P span whole 16-byte vectors; per-element loads
 * otherwise. Parameters are small and re-read per row from L1/L2, never from DRAM twice.
 */
template <typename P, int VEC, typename I>
__device__ __forceinline__ void param_load(const P* p, I lo, I n, float (&out)[VEC],
                                           float fill) {
    constexpr int kBytes = VEC * static_cast<int>(sizeof(P));
    if constexpr (kBytes >= 16 && kBytes % 16 == 0) {
        if (lo >= 0 && lo + VEC <= n && is_vec_aligned(p + lo)) {
            constexpr int kPer = 16 / sizeof(P);
#pragma unroll
            for (int j = 0; j < VEC / kPer; ++j) {
                const Pack<P, kPer> pack = load_pack<P, kPer>(p + lo + j * kPer);
#pragma unroll
                for (int e = 0; e < kPer; ++e) out[j * kPer + e] = to_float(pack.v[e]);
            }
            return;
        }
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = in_seg(lo + i, n) ? to_float(p[lo + i]) : fill;
}

/** True when columns [lo, lo + VEC) of the parameter `p` are one aligned pack in [0, n). */
template <typename P, int VEC, typename I>
__device__ __forceinline__ bool param_whole(const P* p, I lo, I n) {
    return lo >= 0 && lo + VEC <= n &&
           reinterpret_cast<uintptr_t>(p + lo) % sizeof(Pack<P, VEC>) == 0;
}

/**
 * Issues the parameter loads of this thread's packs k0 .. k0 + G - 1 (param_whole ones, as one
 * vector load each; none for a null `p`), all before any is converted: G packs in flight per
 * thread and parameter, where param_load per pack keeps one (tile_load_raw's form; held as
 * 32-bit words, vec.cuh's Held: as Pack<bf16, 8>, nvcc spilled their 16-bit halves).
 */
template <typename P, int VEC, int G, class Geo>
__device__ __forceinline__ void param_load_raw(const P* p, const Geo& g, int k0,
                                               Held<P, VEC> (&raw)[G]) {
    if (p == nullptr) return;
#pragma unroll
    for (int j = 0; j < G; ++j) {
        const auto lo = g.template lo<VEC>(k0 + j);
        if (param_whole<P, VEC>(p, lo, g.n)) raw[j].load(p + lo);
    }
}

/**
 * param_load_raw's pack of columns [lo, lo + VEC) as floats: converted where it was loaded,
 * element by element under the bound otherwise (`fill` outside [0, n)).
 */
template <typename P, int VEC, typename I>
__device__ __forceinline__ void param_convert(const P* p, I lo, I n, const Held<P, VEC>& raw,
                                              float (&out)[VEC], float fill) {
    if (param_whole<P, VEC>(p, lo, n)) {
        const Pack<P, VEC> pack = raw.pack();
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = to_float(pack.v[i]);
    } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = in_seg(lo + i, n) ? to_float(p[lo + i]) : fill;
    }
}

}  // namespace warpnorm
