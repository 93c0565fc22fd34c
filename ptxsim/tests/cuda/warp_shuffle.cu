// Warp shuffle and vote test kernels for ptxsim (tests/cuda_kernels.rs checks them on the host).
// Every kernel reads one int per thread from `in` (global index g) and writes one int to `out`.
// `width` is a runtime argument (a power of two <= 32) so the shfl clamp/segment operand is
// computed, not folded. Launch with whole warps.

extern "C" __global__ void shfl_xor_allreduce(const int* in, int* out, int width) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[g];
    for (int m = width / 2; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m, width);
    out[g] = v;
}

extern "C" __global__ void shfl_down_reduce(const int* in, int* out, int width) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[g];
    for (int d = width / 2; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d, width);
    out[g] = v;
}

extern "C" __global__ void shfl_up_scan(const int* in, int* out, int width) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int v = in[g];
    for (int d = 1; d < width; d <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, v, d, width);
        if ((lane % width) >= d) v += t;
    }
    out[g] = v;
}

// Source lane deliberately >= width for some blocks: CUDA takes it modulo width.
extern "C" __global__ void shfl_idx_broadcast(const int* in, int* out, int width) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int warp = g / 32;
    int src = warp * 7 + 3;
    out[g] = __shfl_sync(0xffffffffu, in[g], src, width);
}

// Only the low 16 lanes take part (mask 0xffff); the others keep their input.
extern "C" __global__ void shfl_half_warp(const int* in, int* out) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[g];
    if ((threadIdx.x & 31) < 16) {
        for (int m = 8; m > 0; m >>= 1) v += __shfl_xor_sync(0x0000ffffu, v, m, 16);
    }
    out[g] = v;
}

// out[g] = ballot of (in & 1) over the warp, any/all of (in > 0) packed in bits of a second word.
extern "C" __global__ void vote_kernel(const int* in, unsigned* out) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[g];
    unsigned b = __ballot_sync(0xffffffffu, v & 1);
    int any = __any_sync(0xffffffffu, v > 0);
    int all = __all_sync(0xffffffffu, v > 0);
    out[2 * g] = b;
    out[2 * g + 1] = (unsigned)any | ((unsigned)all << 1);
}

// 64-bit shuffles (split into two 32-bit shfl by nvcc): butterfly sum of doubles.
extern "C" __global__ void shfl_xor_double(const double* in, double* out) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    double v = in[g];
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    out[g] = v;
}

// A ballot over a partial mask inside divergent code: lanes >= 20 do not take part.
extern "C" __global__ void partial_ballot(const int* in, unsigned* out) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned r = 0xdeadbeefu;
    if ((threadIdx.x & 31) < 20) r = __ballot_sync(0x000fffffu, in[g] > 0);
    out[g] = r;
}
