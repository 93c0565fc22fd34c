//! The one host reference for the LayerNorm-like kernel `benches/cuda/layernorm_bench.cu`,
//! shared by `tests/nvcc_variants.rs` and `benches/sim_throughput.rs`.

/// Row-wise LayerNorm in f64: y = (x - mean) / sqrt(var + eps) * gamma + beta, with the biased
/// (population) variance computed two-pass.
pub fn layernorm_f64(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    rows: usize,
    d: usize,
    eps: f64,
) -> Vec<f64> {
    let mut y = Vec::with_capacity(rows * d);
    for r in 0..rows {
        let row = &x[r * d..(r + 1) * d];
        let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
        let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        y.extend((0..d).map(|c| (row[c] as f64 - mean) * rstd * gamma[c] as f64 + beta[c] as f64));
    }
    y
}

/// max over i of |got_i - ref_i| / (abs + rel * |ref_i|): the check passes when this is <= 1.
/// The kernel accumulates in f32 in a different order and uses rsqrt.approx, so its error is
/// about 1e-6 relative; the callers use abs = rel = 1e-4 (-use_fast_math included).
pub fn max_scaled_error(got: &[f32], reference: &[f64], abs: f64, rel: f64) -> f64 {
    assert_eq!(got.len(), reference.len());
    got.iter()
        .zip(reference)
        .map(|(&g, &e)| {
            let err = (g as f64 - e).abs() / (abs + rel * e.abs());
            if err.is_nan() {
                f64::INFINITY
            } else {
                err
            }
        })
        .fold(0.0, f64::max)
}

/// Deterministic inputs: x in [-2, 2) plus a per-row offset (so the mean matters),
/// gamma in [0.8, 1.2), beta in [-0.2, 0.2).
pub fn layernorm_inputs(rows: usize, d: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut s = 0x1234_5678_u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
    };
    let x: Vec<f32> = (0..rows * d).map(|i| next() + (i / d % 7) as f32).collect();
    let gamma: Vec<f32> = (0..d).map(|_| 1.0 + 0.1 * next()).collect();
    let beta: Vec<f32> = (0..d).map(|_| 0.1 * next()).collect();
    (x, gamma, beta)
}
