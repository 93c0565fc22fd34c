/*
 * arrival.cuh - the last block to arrive: how the blocks of one launch that each wrote a share
 * of a result (the partials of a channel tile's splits) elect the one that finishes it, without
 * a second launch and without float atomics (the merge that follows reads the shares in a
 * fixed order, so the result does not depend on which block arrives last).
 *
 * Protocol (the CUDA C++ Programming Guide's memory-fence example, "Memory Fence Functions"):
 * every thread fences its writes (release), the block synchronizes, one thread increments the
 * tile's u32 counter; the block that sees parts - 1 is the last, resets the counter to zero for
 * the next launch on the stream and fences again (acquire) before it reads the others' shares.
 * The shares are read with relaxed loads at GPU scope (load_relaxed): morally strong accesses,
 * which a race checker must not pair with the plain writes they are ordered after.
 *
 * Counters must be zero before their first use. A counter found at `parts` or more cannot come
 * from a zeroed one: exactly one block of the launch then reports it (`kDirty`), so that the
 * caller can make the mistake visible instead of finishing from missing shares.
 */
#pragma once

#include <stdint.h>

#include "../abi.h"

namespace warpnorm {

/** What last_to_arrive found for the calling block. */
enum Arrival : int { kNotLast = 0, kLast = 1, kDirty = -1 };

/**
 * Block-wide (every thread of the block calls it once, after writing its share): the arrival
 * of this block at counter `slot` of `tickets` (u32), shared by `parts` blocks. parts <= 1: the
 * block is the only one (kLast, the counter untouched). Returns the same value in every thread.
 */
__device__ __forceinline__ Arrival last_to_arrive(wn_devptr tickets, int64_t slot, uint32_t parts) {
    __shared__ int s_arrival;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        int r = kLast;
        if (parts > 1) {
            unsigned* t = reinterpret_cast<unsigned*>(tickets) + slot;
            const unsigned seen = atomicAdd(t, 1u);
            if (seen == parts - 1) {
                atomicExch(t, 0u);
            } else if (seen >= parts && seen % parts == parts - 1) {
                r = kDirty;  // one block of the launch: the residues of parts arrivals differ
            } else {
                r = kNotLast;
            }
        }
        s_arrival = r;
    }
    __syncthreads();
    const Arrival a = static_cast<Arrival>(s_arrival);
    if (a != kNotLast) __threadfence();
    return a;
}

/** A relaxed load at GPU scope (a share written by another block of the launch). */
__device__ __forceinline__ float load_relaxed(const float* p) {
    float v;
    asm volatile("ld.relaxed.gpu.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}

}  // namespace warpnorm
