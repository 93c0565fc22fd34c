// Indirect calls for ptxsim tests (kept apart from device_call.cu so that a simulator without
// indirect-call support still runs the direct-call tests).

// Indirect calls through a table of device-function pointers (.callprototype, call through a
// register, function addresses in a global initializer).
__device__ __noinline__ int op_inc(int x) { return x + 1; }
__device__ __noinline__ int op_dbl(int x) { return 2 * x; }
__device__ int (*kOps[2])(int) = {op_inc, op_dbl};

extern "C" __global__ void indirect_calls(const int* x, int* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = kOps[i & 1](x[i]);
}
