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
 *
 * grid_barrier: every block of a cooperative launch waits for all the others (the same
 * publication protocol; the waiting blocks watch the counter return to zero).
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

/** An acquire load at GPU scope of a u32 another block of the launch writes. */
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/** Sleeps of grid_barrier's wait before a block gives up (a few seconds on a GPU). */
constexpr unsigned kBarrierSpins = 1u << 24;

/**
 * Block-wide (every thread of every block calls it once): a barrier of the whole grid of a
 * cooperative launch (every block resident at once: the planner sizes such grids within one
 * wave and they are launched with cuLaunchCooperativeKernel). `bar` is two u32 counts,
 * arrivals and departures, zero before the first use and left zero by grid_barrier_reset.
 *
 * Thread 0 of each block fences (the block's writes, ordered before it by the block barrier,
 * are released) and takes an arrival ticket; the blocks that are not the last sleep-spin until
 * an acquire load sees every arrival (one L2 round trip after the last one; nothing resets the
 * count while a block may still be waiting), then fence. After the block barrier thread 0
 * takes a departure ticket (`left`: a block leaves only after it saw every arrival), which
 * grid_barrier_reset uses at the end of the kernel, off the path between the phases.
 * Returns true in every thread, or false in the blocks that found the count at `blocks` or
 * more (never zeroed: they do not wait) or gave up after kBarrierSpins sleeps (a count that
 * started above zero releases early and leaves late arrivals waiting): no block waits
 * forever, and the caller makes the mistake visible.
 */
__device__ __forceinline__ bool grid_barrier(wn_devptr bar, unsigned blocks, unsigned& left) {
    __shared__ int s_ok;
    __syncthreads();
    const bool t0 = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
    unsigned* count = reinterpret_cast<unsigned*>(bar);
    if (t0) {
        __threadfence();
        const unsigned seen = atomicAdd(count, 1u);
        int ok = seen < blocks ? 1 : 0;
        if (ok && seen != blocks - 1) {
            for (unsigned spins = 0; load_acquire(count) < blocks; ++spins) {
                if (spins == kBarrierSpins) {
                    ok = 0;
                    break;
                }
                __nanosleep(128);
            }
        }
        __threadfence();
        s_ok = ok;
    }
    __syncthreads();
    // The departure ticket; its value is first needed by grid_barrier_reset.
    if (t0) left = atomicAdd(count + 1, 1u);
    return s_ok != 0;
}

/**
 * At the end of a kernel that passed grid_barrier(bar, blocks, left) (every thread of every
 * block calls it): the last block to leave that barrier (every block has then seen every
 * arrival) sets both of its counts back to zero for the next call.
 */
__device__ __forceinline__ void grid_barrier_reset(wn_devptr bar, unsigned blocks, unsigned left) {
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0 && left == blocks - 1) {
        unsigned* count = reinterpret_cast<unsigned*>(bar);
        atomicExch(count, 0u);
        atomicExch(count + 1, 0u);
    }
}

}  // namespace warpnorm
