// Vectorized half-precision kernels for ptxsim tests: __half2 arithmetic with a by-value __half2
// parameter, 16-byte (uint4) loads/stores of 8 halves, float4 loads converted to __half2 pairs.

#include <cuda_fp16.h>

// y[i] = a * x[i] + b per half, fused (one rounding).
extern "C" __global__ void half2_fma(const __half2* x, __half2* y, __half2 a, __half2 b, int n2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n2) y[i] = __hfma2(a, x[i], b);
}

// 8 halves per thread through one uint4: y = half(float(x) * scale), round to nearest.
extern "C" __global__ void half8_scale(const uint4* x, uint4* y, float scale, int n8) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    uint4 v = x[i];
    __half2* h = reinterpret_cast<__half2*>(&v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        float2 f = __half22float2(h[k]);
        h[k] = __floats2half2_rn(f.x * scale, f.y * scale);
    }
    y[i] = v;
}

// float4 in, two __half2 out (round to nearest), plus the sum of the four floats as f32.
extern "C" __global__ void float4_to_half(const float4* x, __half2* y, float* sum, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = x[i];
    y[2 * i] = __floats2half2_rn(v.x, v.y);
    y[2 * i + 1] = __floats2half2_rn(v.z, v.w);
    sum[i] = __fadd_rn(__fadd_rn(v.x, v.y), __fadd_rn(v.z, v.w));
}
