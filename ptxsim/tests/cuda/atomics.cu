// Atomic operation kernels for ptxsim tests. All results are order-independent so the host can
// check them exactly: integer sums, float sums of small integers, max, a CAS-loop sum, exchange
// chains (the old values plus the final value are a permutation), a shared-memory histogram.

extern "C" __global__ void atomics_mix(const int* vals, int n, int* counter, float* fsum, int* imax,
                                       unsigned* cas_sum, int* exch, int* exch_old, double* dsum) {
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= n) return;
    int v = vals[g];
    atomicAdd(counter, 1);
    atomicAdd(fsum, (float)(v & 63));
    atomicMax(imax, v);
    unsigned old = *cas_sum, assumed;
    do {
        assumed = old;
        old = atomicCAS(cas_sum, assumed, assumed + (unsigned)v);
    } while (old != assumed);
    exch_old[g] = atomicExch(exch, g + 1);
    atomicAdd(dsum, (double)(v & 1023) * 0.25);
}

// 16-bin histogram of vals & 15: per-block bins in dynamic-free static shared memory, merged into hist.
extern "C" __global__ void histogram16(const int* vals, int n, unsigned* hist) {
    __shared__ unsigned bins[16];
    if (threadIdx.x < 16) bins[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&bins[vals[i] & 15], 1u);
    __syncthreads();
    if (threadIdx.x < 16) atomicAdd(&hist[threadIdx.x], bins[threadIdx.x]);
}

// "Last block finishes" pattern with a self-resetting ticket counter: every block writes its
// partial sum, fences, takes a ticket; the block that takes the last ticket adds the partials in
// block order, writes the total and resets the counter for the next launch.
extern "C" __global__ void last_block_total(const int* vals, int n, int* partials, unsigned* ticket, int* total) {
    __shared__ int s[256];
    __shared__ bool is_last;
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = g < n ? vals[g] : 0;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = s[0];
        __threadfence();
        is_last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (is_last && threadIdx.x == 0) {
        __threadfence();
        int t = 0;
        for (unsigned b = 0; b < gridDim.x; ++b) t += ((volatile int*)partials)[b];
        *total = t;
        *ticket = 0;
    }
}
