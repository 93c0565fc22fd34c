// A kernel calling __noinline__ device functions (real PTX .func calls with parameters and
// return values, one returning a struct by value) for ptxsim tests.

__device__ __noinline__ float horner(float x, int k, const float* coef) {
    float r = 0.0f;
    for (int i = k - 1; i >= 0; --i) r = __fmaf_rn(r, x, coef[i]);
    return r;
}

__device__ __noinline__ int2 divmod(int a, int b) {
    return make_int2(a / b, a % b);
}

extern "C" __global__ void call_kernel(const float* x, const float* coef, int k, float* y,
                                       const int* a, const int* b, int2* dm, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = horner(x[i], k, coef);
    dm[i] = divmod(a[i], b[i]);
}

// Double recursion forces a real call stack (local-memory frames, %SP).
__device__ __noinline__ int fib(int v) {
    if (v < 2) return v;
    return fib(v - 1) + fib(v - 2);
}

extern "C" __global__ void recursion_kernel(const int* arg, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fib(arg[i]);
}

// Generic pointers into shared, local and global memory passed to a __noinline__ function.
__device__ __noinline__ float sum_strided(const float* p, int n, int stride) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += p[i * stride];
    return s;
}

__device__ __noinline__ void fill_squares(int* p, int n, int base) {
    for (int i = 0; i < n; ++i) p[i] = (base + i) * (base + i);
}

extern "C" __global__ void generic_pointers(const float* g, float* out, int* out2) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = g[t] * 2.0f;
    __syncthreads();
    int tmp[8];
    fill_squares(tmp, 8, t);
    int acc = 0;
    for (int i = 0; i < 8; ++i) acc += tmp[i] * (i + 1);
    out[2 * t] = sum_strided(s + (t % 8), 8, 8);      // shared through a generic pointer
    out[2 * t + 1] = sum_strided(g + (t % 8), 8, 8);  // global through a generic pointer
    out2[t] = acc;                                     // local through a generic pointer
}
