// LayerNorm forward, one warp per row, for ptxsim's throughput benchmark (benches/sim_throughput.rs).
// Layout: x, y row-major [rows, d] f32; gamma, beta [d]; mean, rstd [rows]. d % 128 == 0, d <= 1024.
// Each lane keeps up to 8 float4 of its row in registers; mean and variance are two warp
// butterfly all-reductions (variance two-pass from the cached row); y = (x - mean) * rstd * g + b.
// Not a shipped kernel: it only gives the simulator a realistic instruction mix.

__device__ __forceinline__ float warp_allreduce(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

extern "C" __global__ void layernorm_fwd_warp(const float* __restrict__ x, const float* __restrict__ gamma,
                                              const float* __restrict__ beta, float* __restrict__ y,
                                              float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                              int rows, int d, float eps) {
    constexpr int kMaxVec = 8;
    int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float4* xr = reinterpret_cast<const float4*>(x + (size_t)row * d);
    float4* yr = reinterpret_cast<float4*>(y + (size_t)row * d);
    const float4* g4 = reinterpret_cast<const float4*>(gamma);
    const float4* b4 = reinterpret_cast<const float4*>(beta);
    int nvec = d / 4;
    float4 v[kMaxVec];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxVec; ++k) {
        int i = lane + 32 * k;
        if (i < nvec) {
            v[k] = xr[i];
            sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        } else {
            v[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    float mean = warp_allreduce(sum) / d;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxVec; ++k) {
        if (lane + 32 * k < nvec) {
            float a = v[k].x - mean, b = v[k].y - mean, c = v[k].z - mean, e = v[k].w - mean;
            sq += (a * a + b * b) + (c * c + e * e);
        }
    }
    float rstd = rsqrtf(warp_allreduce(sq) / d + eps);
#pragma unroll
    for (int k = 0; k < kMaxVec; ++k) {
        int i = lane + 32 * k;
        if (i < nvec) {
            float4 g = g4[i], b = b4[i], o;
            o.x = (v[k].x - mean) * rstd * g.x + b.x;
            o.y = (v[k].y - mean) * rstd * g.y + b.y;
            o.z = (v[k].z - mean) * rstd * g.z + b.z;
            o.w = (v[k].w - mean) * rstd * g.w + b.w;
            yr[i] = o;
        }
    }
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}
