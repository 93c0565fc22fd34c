// Kernels that misbehave on purpose, for ptxsim's negative tests (tests/faults.rs). Each fault
// is planted in one chosen block/thread so the report can be checked exactly; each kernel has a
// single instruction of the faulting kind so the test can find its PTX line by text.

// One thread writes 3 elements past the end of p[0..n).
extern "C" __global__ void oob_write(float* p, int n, int bad_block, int bad_thread) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x == bad_block && threadIdx.x == bad_thread) i = n + 3;
    p[i] = 1.0f;
}

// One thread loads an int from an address 2 bytes off its natural alignment.
extern "C" __global__ void misaligned_load(const char* p, int* out, int bad_block, int bad_thread) {
    int t = threadIdx.x;
    int off = t * 4 + ((blockIdx.x == bad_block && t == bad_thread) ? 2 : 0);
    out[blockIdx.x * blockDim.x + t] = *reinterpret_cast<const int*>(p + off);
}

// One thread writes through p (the test frees p before launching).
extern "C" __global__ void write_one(int* p, int bad_block, int bad_thread) {
    if (blockIdx.x == bad_block && threadIdx.x == bad_thread) p[threadIdx.x] = 42;
}

// In block bad_block, lane 31 skips a full-mask shuffle the other lanes execute.
extern "C" __global__ void shfl_missing_lane(int* out, int bad_block) {
    int v = threadIdx.x;
    if (blockIdx.x != bad_block || threadIdx.x != 31) v += __shfl_xor_sync(0xffffffffu, v, 1);
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

// Only threads < 16 reach the barrier.
extern "C" __global__ void divergent_barrier(int* out) {
    if (threadIdx.x < 16) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

// Lanes 0-15 wait in __syncwarp() for the whole warp while lanes 16-31 wait in __syncthreads()
// for the whole block: no thread can ever move again.
extern "C" __global__ void deadlock(int* out) {
    if ((threadIdx.x & 31) < 16) __syncwarp();
    else __syncthreads();
    out[threadIdx.x] = 1;
}

// Warp 0 waits on named barrier 1 and warp 1 on named barrier 2, each expecting 64 threads:
// neither can complete.
extern "C" __global__ void named_barrier_mismatch(int* out) {
    if (threadIdx.x < 32) asm volatile("bar.sync 1, 64;");
    else asm volatile("bar.sync 2, 64;");
    out[threadIdx.x] = 1;
}

// Not a fault on sm_70+: the two halves of the warp meet in __syncwarp() at different program
// points (PTX requires the same bar.warp.sync instruction only for sm_6x and below).
extern "C" __global__ void syncwarp_two_sites(int* out) {
    int t = threadIdx.x;
    if (t < 16) {
        out[t] = t;
        __syncwarp();
    } else {
        out[t] = 2 * t;
        __syncwarp();
    }
    out[32 + t] = out[31 - t];
}

// One thread writes past the end of the dynamic shared memory.
extern "C" __global__ void shared_oob(int* out, int bad_thread) {
    extern __shared__ int s[];
    int t = threadIdx.x;
    s[t == bad_thread ? t + 1024 : t] = t;
    __syncthreads();
    out[t] = s[t];
}

// One thread traps.
extern "C" __global__ void trap_kernel(int* out, int bad_thread) {
    if (threadIdx.x == bad_thread) __trap();
    out[threadIdx.x] = 1;
}
