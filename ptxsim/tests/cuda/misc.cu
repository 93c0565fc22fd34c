// Miscellaneous kernels for ptxsim tests: a predicated grid-stride loop, a by-value struct
// parameter, dynamic (extern) shared memory, 64-bit indexing past 2^32 bytes, 3-D indexing.

// Grid-stride loop with a partially unrolled body: y = 2x + 1 for i < n.
extern "C" __global__ void grid_stride(const float* x, float* y, int n) {
    int stride = gridDim.x * blockDim.x;
#pragma unroll 4
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = 2.0f * x[i] + 1.0f;
}

// Layout: scale @0, n @4, offset @8, tag @16, s @18; size 24, align 8.
struct Params {
    float scale;
    int n;
    double offset;
    unsigned char tag;
    short s;
};

extern "C" __global__ void struct_param(Params p, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) out[i] = p.scale * (float)i + (float)p.offset + (float)p.tag + (float)p.s;
}

// Reverses each block's chunk through dynamic shared memory (floats, then ints after them).
extern "C" __global__ void dyn_shared_reverse(const float* x, float* y, int* idx) {
    extern __shared__ float dyn[];
    int* ids = reinterpret_cast<int*>(dyn + blockDim.x);
    int t = threadIdx.x, g = blockIdx.x * blockDim.x + t;
    dyn[t] = x[g];
    ids[t] = g;
    __syncthreads();
    y[g] = dyn[blockDim.x - 1 - t];
    idx[g] = ids[blockDim.x - 1 - t];
}

// out[i] = 2 * base[offset + i]: the element offset is >= 2^31 and the byte offset >= 2^32, so
// 32-bit index arithmetic would read the wrong address.
extern "C" __global__ void index64(const float* base, float* out, unsigned long long offset, int n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)n) out[i] = 2.0f * base[offset + i];
}

// Each thread writes its packed (block, thread) coordinates at its linear index; thread 0 of
// block 0 also writes gridDim and blockDim.
extern "C" __global__ void index3d(unsigned* out, unsigned* dims) {
    unsigned bl = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    unsigned th = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    unsigned lin = bl * (blockDim.x * blockDim.y * blockDim.z) + th;
    out[lin] = blockIdx.x | (blockIdx.y << 4) | (blockIdx.z << 8) | (threadIdx.x << 12) |
               (threadIdx.y << 16) | (threadIdx.z << 20);
    if (bl == 0 && th == 0) {
        dims[0] = gridDim.x; dims[1] = gridDim.y; dims[2] = gridDim.z;
        dims[3] = blockDim.x; dims[4] = blockDim.y; dims[5] = blockDim.z;
    }
}

// Divergence and reconvergence: a per-lane trip count with continue/break, an early return for
// some lanes of the last warp, then warp and block collectives over the survivors.
// out[g] = per-lane loop result; wsum[warp] = warp sum of the loop results of live lanes.
extern "C" __global__ void divergent_loops(const int* trips, int* out, int* wsum, int n) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int acc = 0;
    if (g < n) {
        for (int i = 0; i < trips[g]; ++i) {
            if (i % 3 == 1) continue;
            if (acc > 1000) break;
            acc += i * (g & 7) + 1;
        }
        out[g] = acc;
    }
    unsigned live = __ballot_sync(0xffffffffu, g < n);
    int v = g < n ? acc : 0;
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    if ((threadIdx.x & 31) == 0 && live != 0) wsum[g / 32] = v;
}

// A thread-private array indexed dynamically (lives in local memory): histogram of 16 values.
extern "C" __global__ void local_array(const int* x, int* out, int n) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n) return;
    int h[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) h[k] = 0;
    for (int k = 0; k < 16; ++k) h[(x[g] >> k) & 15] += k;
    int s = 0;
    for (int k = 0; k < 16; ++k) s += h[k] * (k + 1);
    out[g] = s;
}

// Module-scope variables with initializers: a __constant__ table, a __device__ table and a
// __device__ counter updated atomically.
__constant__ float kCoef[4] = {0.5f, -1.25f, 2.0f, 3.0f};
__device__ unsigned short gTable[6] = {1, 2, 3, 4, 5, 6};
__device__ int gCounter = 5;

extern "C" __global__ void module_globals(float* out, int* counter_out) {
    int t = threadIdx.x;
    out[t] = kCoef[t & 3] * (float)gTable[t % 6];
    atomicAdd(&gCounter, 1);
    __syncthreads();
    if (t == 0) *counter_out = atomicAdd(&gCounter, 0);
}

// __launch_bounds__ (.maxntid) and a loop that must not be unrolled (.pragma "nounroll").
extern "C" __global__ void __launch_bounds__(256, 2) bounded(const int* x, int* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int s = 0;
#pragma unroll 1
    for (int k = 0; k <= (x[i] & 15); ++k) s += k;
    y[i] = s;
}

// Small and odd kernel parameter types: .u8/.s8, .s16, .f64, a 16-byte-aligned float4 by value.
extern "C" __global__ void small_params(signed char c, short s, unsigned char uc, double d, float4 v, float* out) {
    if (threadIdx.x != 0) return;
    out[0] = (float)c;
    out[1] = (float)s;
    out[2] = (float)uc;
    out[3] = (float)d;
    out[4] = v.x;
    out[5] = v.y;
    out[6] = v.z;
    out[7] = v.w;
}
