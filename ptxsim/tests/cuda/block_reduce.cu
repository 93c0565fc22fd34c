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
