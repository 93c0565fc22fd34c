// bf16 conversion and arithmetic kernels for ptxsim tests. On compute_75 the intrinsics are
// emulated with integer code by cuda_bf16.h; on compute_80+ they map to cvt/fma instructions.

#include <cuda_bf16.h>

// Every float -> bf16 rounding mode, and bf16 -> float of the round-to-nearest result.
extern "C" __global__ void bf16_convert(const float* x, unsigned short* rn, unsigned short* rz,
                                        unsigned short* rd, unsigned short* ru, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    __nv_bfloat16 h = __float2bfloat16_rn(v);
    rn[i] = __bfloat16_as_ushort(h);
    rz[i] = __bfloat16_as_ushort(__float2bfloat16_rz(v));
    rd[i] = __bfloat16_as_ushort(__float2bfloat16_rd(v));
    ru[i] = __bfloat16_as_ushort(__float2bfloat16_ru(v));
    back[i] = __bfloat162float(h);
}

// d = a * b + c per bf16 pair. compute_75 has no bf16 __hfma2: it goes through f32 fma and one
// rounding to bf16, which equals the fused result whenever a * b + c is exact in f32 (the test
// inputs are chosen so).
extern "C" __global__ void bf16x2_fma(const __nv_bfloat162* a, const __nv_bfloat162* b,
                                      const __nv_bfloat162* c, __nv_bfloat162* d, int n2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n2) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    d[i] = __hfma2(a[i], b[i], c[i]);
#else
    float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]), fc = __bfloat1622float2(c[i]);
    d[i] = __floats2bfloat162_rn(fmaf(fa.x, fb.x, fc.x), fmaf(fa.y, fb.y, fc.y));
#endif
}
