// Kernels for the racecheck / initcheck tests (ptxsim/tests/checks_race.rs): each planted fault
// next to its correct version. Source lines the tests look for carry a `CHECK:<name>` marker;
// the tests map the PTX lines named in reports back to these source lines through `.loc`.
// Launch shapes: reduce_* 128 threads per block; exchange_* 64; uninit_shared_* 64;
// global_* any 1-D shape.

// Shared-memory tree reduction of 128 floats per block into out[blockIdx.x].
extern "C" __global__ void reduce_ok(const float* in, float* out) {
    __shared__ float s[128];
    const int t = threadIdx.x;
    s[t] = in[blockIdx.x * 128 + t];
    __syncthreads();
    for (int k = 64; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// The same without the barrier between filling s and the first reduction step: thread t reads
// s[t + 64], which another warp writes with nothing ordering the two.
extern "C" __global__ void reduce_missing_sync(const float* in, float* out) {
    __shared__ float s[128];
    const int t = threadIdx.x;
    s[t] = in[blockIdx.x * 128 + t];  // CHECK:reduce_fill
    for (int k = 64; k > 0; k >>= 1) {
        if (t < k) s[t] += s[t + k];  // CHECK:reduce_step
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// Each lane swaps its value with its neighbour (lane ^ 1) through shared memory.
extern "C" __global__ void exchange_ok(const int* in, int* out) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    const int i = blockIdx.x * 64 + t;
    s[t] = in[i];
    __syncwarp();
    out[i] = s[t ^ 1];
}

// The same without __syncwarp: lanes of one warp are not ordered (independent thread
// scheduling), so the read of the neighbour's slot races with its write.
extern "C" __global__ void exchange_missing_syncwarp(const int* in, int* out) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    const int i = blockIdx.x * 64 + t;
    s[t] = in[i];  // CHECK:exchange_write
    out[i] = s[t ^ 1];  // CHECK:exchange_read
}

// Every thread writes its slot, then reads it back shifted by 32 (mod 64).
extern "C" __global__ void uninit_shared_ok(float* out) {
    __shared__ float s[64];
    const int t = threadIdx.x;
    s[t] = float(t);
    __syncthreads();
    out[blockIdx.x * 64 + t] = s[(t + 32) & 63];
}

// Only the first warp writes; threads 0..31 then read slots 32..63 that nobody wrote.
extern "C" __global__ void uninit_shared_bad(float* out) {
    __shared__ float s[64];
    const int t = threadIdx.x;
    if (t < 32) s[t] = float(t);
    __syncthreads();
    out[blockIdx.x * 64 + t] = s[(t + 32) & 63];  // CHECK:uninit_read
}

// out[i] = in[i] + 1 over the whole grid: no two threads touch the same element.
extern "C" __global__ void global_ok(const float* in, float* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i] + 1.0f;
}

// Every block writes out[threadIdx.x]: threads of different blocks write the same bytes.
extern "C" __global__ void global_waw(const float* in, float* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[threadIdx.x] = in[i];  // CHECK:global_waw
}

// Atomic accumulation of every element into out[0]: atomics never race.
extern "C" __global__ void global_atomic_sum(const float* in, float* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(out, in[i]);
}
