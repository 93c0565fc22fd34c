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
