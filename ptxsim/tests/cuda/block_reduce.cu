// Block reductions for ptxsim tests: a shared-memory tree (block_sum_tree) and a two-level
// warp-shuffle + shared-memory reduction (block_sum_warp). One partial sum per block in out[].
// blockDim.x must be 256 (tree) or a multiple of 32 up to 1024 (warp). Elements past n count 0.

extern "C" __global__ void block_sum_tree(const float* in, float* out, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
    return v;
}

extern "C" __global__ void block_sum_warp(const float* in, float* out, int n) {
    __shared__ float partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float v = warp_sum(i < n ? in[i] : 0.0f);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int nw = blockDim.x >> 5;
        v = warp_sum(lane < nw ? partial[lane] : 0.0f);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

// Barrier reductions: __syncthreads_count / _and / _or (bar.red.popc / and / or); one triple per block.
extern "C" __global__ void sync_reductions(const int* x, int* out) {
    int v = x[blockIdx.x * blockDim.x + threadIdx.x];
    int c = __syncthreads_count(v > 0);
    int a = __syncthreads_and(v > -50);
    int o = __syncthreads_or(v > 90);
    if (threadIdx.x == 0) {
        out[3 * blockIdx.x] = c;
        out[3 * blockIdx.x + 1] = a;
        out[3 * blockIdx.x + 2] = o;
    }
}

// Named barriers (128 threads): warp 0 produces into shared memory and bar.arrive's on barrier
// 1, warp 1 bar.sync's on barrier 1 and consumes; warps 2 and 3 meet on barrier 2.
extern "C" __global__ void named_barrier_pipeline(int* out) {
    __shared__ int buf[32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0) {
        buf[lane] = lane * lane;
        asm volatile("bar.arrive 1, 64;" ::: "memory");
    } else if (warp == 1) {
        asm volatile("bar.sync 1, 64;" ::: "memory");
        out[lane] = buf[31 - lane];
    } else {
        asm volatile("bar.sync 2, 64;" ::: "memory");
        out[threadIdx.x] = warp;
    }
}
