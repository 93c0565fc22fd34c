// Kernels for the memory-metrics tests (ptxsim/tests/checks_metrics.rs), each with a traffic
// pattern whose requests, sectors and bank conflicts are worked out by hand in the test.
// n must be a multiple of the block size (copy_f32), of 1024 (copy_stride32) or of 32
// (transpose*, an n x n matrix on a grid of (n/32, n/32) blocks of 32 x 32 threads).

// Coalesced copy: each warp reads and writes 128 consecutive bytes (4 sectors per request).
extern "C" __global__ void copy_f32(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

// The same elements in another order: within each 1024-element tile, lane l of warp w copies
// element 32 * l + w, so the 32 lanes of a warp are 128 bytes apart (32 sectors per request).
extern "C" __global__ void copy_stride32(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = i & 1023;
    const int j = (i - r) + (r & 31) * 32 + (r >> 5);
    if (j < n) out[j] = in[j];
}

// 32 x 32 tile transpose through shared memory. Reading a tile column makes the 32 lanes of a
// warp hit one bank (32-way conflict) unless rows are padded to 33 floats.
template <int COLS>
__device__ __forceinline__ void transpose_tile(const float* in, float* out, int n) {
    __shared__ float tile[32][COLS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int bx = blockIdx.x * 32, by = blockIdx.y * 32;
    tile[ty][tx] = in[(by + ty) * n + bx + tx];
    __syncthreads();
    out[(bx + ty) * n + by + tx] = tile[tx][ty];
}

extern "C" __global__ void transpose32(const float* in, float* out, int n) {
    transpose_tile<32>(in, out, n);
}

extern "C" __global__ void transpose32_padded(const float* in, float* out, int n) {
    transpose_tile<33>(in, out, n);
}

// float4 copy: 512 bytes per warp request (16 sectors).
extern "C" __global__ void copy_f32x4(const float4* in, float4* out, int n4) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) out[i] = in[i];
}

// Reads a __constant__ table (zero-filled by the simulator): constant-bank loads are not
// global traffic, so only the stores count.
__constant__ float k_table[32];
extern "C" __global__ void const_read(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = k_table[threadIdx.x & 31] + 1.0f;
}
