//! LayerNorm forward accuracy on ptxsim (compute_75, 80, 90) for the rows where f32 statistics are
//! hard, in every tier (subwarp, warp, block, split; vector and scalar variants) and in f32 and
//! bf16, against the f64 reference `warpnorm::cpu::layer_norm`:
//!
//! - **a large common offset**: 1e4, 1e6 and 3e7 + N(0, 1). An f32 mean is off by up to about
//!   u32 * |mean|, which shifts every x - mean of the row: with rstd ~ 1 that is an output
//!   error of ~6e-4 at 1e4 and ~2 at 3e7 (the documented tolerance of `tests/layer_norm/support.rs`
//!   allows it: its "X" term is rstd * max|x|). The kernels carry the mean as a compensated
//!   pair in every tier, so the bound here replaces max|x| by the row's spread sigma:
//!
//!   |y - ref| <= K_ROUND u_T |ref| + tiny_T + K_F32 u32 (|g| (|y0| + rstd sigma) + |b|)
//!
//!   with y0 = (x - mean) rstd and sigma = sqrt(var), all from the reference in f64.
//!   Derivation: y = ((x - mean_hi) - mean_lo) rstd g + b. The pair (mean_hi, mean_lo) is
//!   within a few u32 * sigma of the mean (the compensated sums leave errors of u32 times the
//!   residuals, not of u32 * |mean|; the split tier merges chunk means as pairs through their
//!   differences, which are of the order of sigma), so it moves y by <= ~u32 rstd sigma |g|.
//!   x - mean_hi is exact or one rounding of |x - mean|; rstd carries the relative error of
//!   the sum of squares (<= ~46 u32, see `K_F32`), which moves y by <= ~46 u32 |y0| |g|; the
//!   products and the final rounding add K_ROUND u_T |ref|. K_F32 = 64 covers all of it.
//!   The saved mean must be within 2 u32 |mean| + K_F32 u32 sigma, rstd within K_F32 u32 rstd.
//! - **finite rows whose f32 sums overflow** (values near 1e37 or +-3e38, or a spread of 1e19
//!   whose squares overflow although the variance does not): mean and rstd stay finite and
//!   match the reference (a variance beyond f32's range gives rstd 0 and y = beta, as the
//!   reference and PyTorch's f32 row [1e30, -1e30, 0, 0]), under the same bound.
//!
//! - **rows of small values with one large outlier** (1e-3 N(0, 1) with one +-100 first, in the
//!   middle or last), every dtype pair, every tier, vector and scalar variants: every output
//!   within 2 units of roundoff of the output dtype, relative to the row's max |y|, of the f64
//!   result (statistics and output in f64, unrounded); the CPU reference too. f32 outputs get
//!   there by the exact statistics of `cuda/layer_norm.cu` (tile_moments' kExact: before it,
//!   the f32 forward was up to ~5 units off, its rstd up to 4.5 u32).
//!
//! The measured errors are printed (`cargo test --test layer_norm_accuracy -- --nocapture`).

use crate::support::{tiny, to_f64, Rng, K_F32, K_ROUND, U32};
use half::bf16;
use testkit::sim::{skip_without_kernels, Sim, SIM_ARCHS};
use warpnorm::cpu::layer_norm::{forward, row_stats};
use warpnorm::layer_norm::{
    plan_backward, plan_forward, workspace_bytes, Affine, BackwardPtrs, Direction, ForwardPtrs,
    LayerNormDesc,
};
use warpnorm::{DType, DeviceProps, Element, Plan};

const EPS: f32 = 1e-5;

/// The tier the forward plan chose, from its first kernel's name.
fn tier_of(plan: &Plan) -> &'static str {
    let k = &plan.launches[0].kernel;
    ["split", "subwarp", "warp", "block", "wide"]
        .into_iter()
        .find(|t| k.contains(&format!("_{t}_")))
        .unwrap_or("?")
}

/// Forward outputs widened to f64, and the plan that made them.
struct Fwd {
    y: Vec<f64>,
    mean: Vec<f64>,
    rstd: Vec<f64>,
    mean_lo: Vec<f64>,
    plan: Plan,
}

/// Runs the forward on ptxsim's compute_`arch`; `scalar` offsets x (only) by one element,
/// which selects the scalar kernel variant.
fn sim_fwd<T: Element + Default, P: Element + Default>(
    arch: u32,
    desc: &LayerNormDesc,
    x: &[T],
    gamma: &[P],
    beta: &[P],
    scalar: bool,
) -> Fwd {
    let props = DeviceProps::SIM;
    let mut sim = Sim::new(arch);
    let (m, n) = (desc.rows, desc.rows * desc.cols);
    let px = sim.upload(x, usize::from(scalar));
    let py = sim.alloc::<T>(n, 0);
    let pg = sim.upload(gamma, 0);
    let pb = sim.upload(beta, 0);
    let pmean = sim.alloc::<f32>(m, 0);
    let prstd = sim.alloc::<f32>(m, 0);
    let plo = sim.alloc::<f32>(m, 0);
    let ws = workspace_bytes(desc, Direction::Forward, &props).unwrap();
    let pws = testkit::backend::row_norm_workspace(&mut sim, ws);
    let ptrs = ForwardPtrs {
        x: px,
        y: py,
        gamma: Some(pg),
        beta: Some(pb),
        mean: Some(pmean),
        rstd: Some(prstd),
        mean_lo: Some(plo),
        workspace: pws,
        workspace_bytes: ws as u64,
    };
    let plan = plan_forward(desc, &ptrs, &props).unwrap();
    sim.run(&plan).unwrap_or_else(|e| panic!("{e}\n{plan}"));
    Fwd {
        y: to_f64(&sim.download::<T>(py, n)),
        mean: to_f64(&sim.download::<f32>(pmean, m)),
        rstd: to_f64(&sim.download::<f32>(prstd, m)),
        mean_lo: to_f64(&sim.download::<f32>(plo, m)),
        plan,
    }
}

/// Largest errors of a run (y, saved mean, saved rstd) against the reference.
#[derive(Clone, Copy, Debug, Default)]
struct Errs {
    y: f64,
    mean: f64,
    rstd: f64,
    /// The saved pair mean + mean_lo against the f64 mean.
    pair: f64,
}

impl Errs {
    fn max(self, o: Errs) -> Errs {
        Errs {
            y: self.y.max(o.y),
            mean: self.mean.max(o.mean),
            rstd: self.rstd.max(o.rstd),
            pair: self.pair.max(o.pair),
        }
    }
}

/// Records |got - want| in `max`, and a message in `bad` when it exceeds `tol` (a non-finite
/// value always does; its error counts as infinite).
fn within(
    what: &str,
    i: usize,
    got: f64,
    want: f64,
    tol: f64,
    max: &mut f64,
    bad: &mut Vec<String>,
) {
    let e = if got.is_finite() {
        (got - want).abs()
    } else {
        f64::INFINITY
    };
    *max = max.max(e);
    if e > tol && bad.len() < 3 {
        bad.push(format!(
            "{what}[{i}]: got {got:e}, reference {want:e} (error {e:e} > bound {tol:e})"
        ));
    }
}

/// Checks a forward run against the f64 reference under the bound of the module docs:
/// the largest errors, and an error naming the first violations.
fn check<T: Element, P: Element>(
    desc: &LayerNormDesc,
    x: &[T],
    gamma: &[P],
    beta: &[P],
    got: &Fwd,
) -> (Errs, Result<(), String>) {
    let (m, d) = (desc.rows, desc.cols);
    let r = forward::<T, P>(desc, x, Some(gamma), Some(beta)).unwrap();
    let (u_t, tiny_t) = (desc.dtype.unit_roundoff(), tiny(desc.dtype));
    let mut e = Errs::default();
    let mut bad = Vec::new();
    for row in 0..m {
        let xs: Vec<f64> = x[row * d..(row + 1) * d]
            .iter()
            .map(|v| v.to_f64())
            .collect();
        let (mu, rstd) = row_stats(&xs, desc.eps);
        let sigma = (xs.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / d as f64).sqrt();
        let tol = 2.0 * U32 * mu.abs() + K_F32 * U32 * sigma;
        let want = r.mean[row] as f64;
        within("mean", row, got.mean[row], want, tol, &mut e.mean, &mut bad);
        // The saved pair is the mean to the spread's precision, not |mean|'s.
        let tol = K_F32 * U32 * sigma + 4.0 * U32 * U32 * mu.abs();
        let pair = got.mean[row] + got.mean_lo[row];
        within("mean + mean_lo", row, pair, mu, tol, &mut e.pair, &mut bad);
        let want = r.rstd[row] as f64;
        let tol = K_F32 * U32 * want;
        within("rstd", row, got.rstd[row], want, tol, &mut e.rstd, &mut bad);
        for (c, xv) in xs.iter().enumerate() {
            let i = row * d + c;
            let want = r.y[i].to_f64();
            let (g, b) = (gamma[c].to_f64(), beta[c].to_f64());
            let y0 = (xv - mu) * rstd;
            let scale = g.abs() * (y0.abs() + rstd * sigma) + b.abs();
            let tol = K_ROUND * u_t * want.abs() + tiny_t + K_F32 * U32 * scale;
            within("y", i, got.y[i], want, tol, &mut e.y, &mut bad);
        }
    }
    let verdict = if bad.is_empty() {
        Ok(())
    } else {
        Err(bad.join("; "))
    };
    (e, verdict)
}

/// N(0, 1) by Box-Muller.
fn normal(rng: &mut Rng) -> f64 {
    let u1 = 1.0 - rng.unit();
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn desc(rows: usize, cols: usize, dtype: DType) -> LayerNormDesc {
    LayerNormDesc::from_rows(rows, cols, dtype, DType::F32, Affine::WeightBias, EPS).unwrap()
}

/// gamma in [0.5, 1.5), beta in [-0.5, 0.5).
fn params(cols: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Rng::new(seed ^ 0xABCD);
    (rng.vec(cols, 0.5, 1.5), rng.vec(cols, -0.5, 0.5))
}

/// (tier, cols, rows) per tier on `DeviceProps::SIM` (4 SMs), the same for f32 and bf16:
/// groups of 16 lanes, a warp per row, a block per row, and the split tier twice (a row
/// longer than a block holds, and fewer rows than SMs).
const TIERS: [(&str, usize, usize); 5] = [
    ("subwarp", 60, 16),
    ("warp", 1000, 8),
    ("block", 3000, 4),
    ("split", 16385, 1),
    ("split", 8192, 2),
];

/// Rows of `offset + sigma * N(0, 1)` rounded to T, checked in every tier (violations are
/// added to `failures`); the errors are printed.
fn offset_rows<T: Element + Default>(
    dtype: DType,
    offset: f64,
    sigma: f64,
    failures: &mut Vec<String>,
) {
    for (ti, &(tier, cols, rows)) in TIERS.iter().enumerate() {
        for scalar in [false, true] {
            if scalar && tier != "split" && tier != "block" {
                continue;
            }
            let d = desc(rows, cols, dtype);
            let mut rng = Rng::new(ti as u64 + 11);
            let x: Vec<T> = (0..rows * cols)
                .map(|_| T::from_f64(offset + sigma * normal(&mut rng)))
                .collect();
            let (g, b) = params(cols, ti as u64);
            let label = format!(
                "{dtype} {offset:e} + {sigma} N(0,1), {tier} {rows}x{cols}{}",
                if scalar { " scalar" } else { "" }
            );
            let mut worst = Errs::default();
            for arch in SIM_ARCHS {
                let got = sim_fwd::<T, f32>(arch, &d, &x, &g, &b, scalar);
                assert_eq!(tier_of(&got.plan), tier, "{rows}x{cols}:\n{}", got.plan);
                let (e, verdict) = check(&d, &x, &g, &b, &got);
                worst = worst.max(e);
                if let Err(msg) = verdict {
                    failures.push(format!("{label}, compute_{arch}: {msg}"));
                }
            }
            eprintln!(
                "{label}: max |y - ref| {:.3e}, |mean - ref| {:.3e}, |rstd - ref| {:.3e}, \
                 |mean + mean_lo - mean64| {:.3e} (worst of compute_75/80/90)",
                worst.y, worst.mean, worst.rstd, worst.pair
            );
        }
    }
}

#[test]
fn f32_rows_with_a_large_offset_are_accurate_in_every_tier() {
    if skip_without_kernels("f32_rows_with_a_large_offset_are_accurate_in_every_tier") {
        return;
    }
    let mut failures = Vec::new();
    for offset in [1e4, 1e6, 3e7] {
        offset_rows::<f32>(DType::F32, offset, 1.0, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn bf16_rows_with_a_large_offset_are_accurate_in_every_tier() {
    if skip_without_kernels("bf16_rows_with_a_large_offset_are_accurate_in_every_tier") {
        return;
    }
    // N(0, 1) around 1e4 or 1e6 rounds to one bf16 value: constant rows, where any error in
    // the mean is multiplied by rstd = 1 / sqrt(eps) ~ 316, and y must be beta. Then a spread
    // of a few bf16 ulps (sigma = offset / 64).
    let mut failures = Vec::new();
    for offset in [1e4, 1e6] {
        offset_rows::<bf16>(DType::BF16, offset, 1.0, &mut failures);
        offset_rows::<bf16>(DType::BF16, offset, offset / 64.0, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Row kinds whose f32 sums or sums of squares overflow although every value is finite.
const HUGE_KINDS: usize = 5;

fn huge_value(kind: usize, c: usize, rng: &mut Rng) -> f64 {
    match kind {
        // 1e37 * (1 + 0.01 u): the sum overflows, the variance too (rstd 0, y = beta).
        0 => 1e37 * (1.0 + 0.01 * rng.unit()),
        // Constant 1e37: the sum overflows, variance 0 (rstd = 1 / sqrt(eps), y = beta).
        1 => 1e37,
        // +-3e38 alternating (every pair of adds overflows), a few small values: mean ~ 0.
        2 => {
            if c % 5 == 4 {
                rng.range(-1.0, 1.0)
            } else if c.is_multiple_of(2) {
                3e38
            } else {
                -3e38
            }
        }
        // A spread of 1e19: the squares' sum overflows, the variance (~3e37) does not.
        3 => 1e19 * rng.range(-1.0, 1.0),
        // -1e37 with a 1e35 spread: the sum overflows negatively.
        _ => -1e37 + 1e35 * normal(rng),
    }
}

/// Rows of every huge kind (row r has kind (r + start) % HUGE_KINDS).
fn huge_rows<T: Element>(rows: usize, cols: usize, start: usize, seed: u64) -> Vec<T> {
    let mut rng = Rng::new(seed);
    (0..rows * cols)
        .map(|i| {
            T::from_f64(huge_value(
                (i / cols + start) % HUGE_KINDS,
                i % cols,
                &mut rng,
            ))
        })
        .collect()
}

fn huge_case<T: Element + Default>(dtype: DType, tier: &str, cols: usize, rows: usize) {
    let mut start = 0;
    while start < HUGE_KINDS {
        let d = desc(rows, cols, dtype);
        let x: Vec<T> = huge_rows(rows, cols, start, cols as u64 + start as u64);
        let (g, b) = params(cols, 5);
        let label = format!("{dtype} huge rows from kind {start}, {tier} {rows}x{cols}");
        let mut worst = Errs::default();
        for arch in SIM_ARCHS {
            let got = sim_fwd::<T, f32>(arch, &d, &x, &g, &b, false);
            assert_eq!(tier_of(&got.plan), tier, "{rows}x{cols}:\n{}", got.plan);
            let (e, verdict) = check(&d, &x, &g, &b, &got);
            if let Err(msg) = verdict {
                panic!(
                    "{label}, compute_{arch}: {msg}\nmean {:?}\nrstd {:?}",
                    got.mean, got.rstd
                );
            }
            worst = worst.max(e);
        }
        eprintln!(
            "{label}: max |y - ref| {:.3e}, |mean - ref| {:.3e}, |rstd - ref| {:.3e}",
            worst.y, worst.mean, worst.rstd
        );
        start += rows;
    }
}

#[test]
fn finite_rows_whose_sums_overflow_stay_finite_in_every_tier() {
    if skip_without_kernels("finite_rows_whose_sums_overflow_stay_finite_in_every_tier") {
        return;
    }
    for (tier, cols, rows) in [
        ("subwarp", 64, 6),
        ("warp", 1000, 5),
        ("block", 3000, 5),
        ("split", 16385, 3),
        ("split", 6000, 2),
    ] {
        huge_case::<f32>(DType::F32, tier, cols, rows);
    }
    for (tier, cols, rows) in [("subwarp", 64, 5), ("block", 3000, 5), ("split", 16385, 3)] {
        huge_case::<bf16>(DType::BF16, tier, cols, rows);
    }
}

#[test]
fn an_overflowing_row_leaves_its_warp_neighbours_unchanged() {
    if skip_without_kernels("an_overflowing_row_leaves_its_warp_neighbours_unchanged") {
        return;
    }
    // D = 64 f32: groups of 16 lanes, two rows per warp. Row 0 overflows (1e37), row 1 holds
    // tiny values, which the overflow path's scaling would flush: row 1 must come out bitwise
    // as when its warp has no overflowing row.
    let cols = 64;
    let mut rng = Rng::new(99);
    let tiny_row: Vec<f32> = (0..cols)
        .map(|_| (1e-20 * normal(&mut rng)) as f32)
        .collect();
    let (g, b) = params(cols, 1);
    let d = desc(2, cols, DType::F32);
    let mut mixed = vec![1e37f32; cols];
    mixed.extend_from_slice(&tiny_row);
    let mut calm = tiny_row.clone();
    calm.extend_from_slice(&tiny_row);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for arch in SIM_ARCHS {
        let a = sim_fwd::<f32, f32>(arch, &d, &mixed, &g, &b, false);
        let c = sim_fwd::<f32, f32>(arch, &d, &calm, &g, &b, false);
        assert_eq!(tier_of(&a.plan), "subwarp");
        check(&d, &mixed, &g, &b, &a).1.unwrap();
        assert_eq!(bits(&a.y[cols..]), bits(&c.y[cols..]), "compute_{arch}");
        assert_eq!(bits(&a.mean[1..]), bits(&c.mean[1..]), "compute_{arch}");
        assert_eq!(bits(&a.rstd[1..]), bits(&c.rstd[1..]), "compute_{arch}");
    }
}

#[test]
fn split_tier_reruns_are_bitwise_identical() {
    if skip_without_kernels("split_tier_reruns_are_bitwise_identical") {
        return;
    }
    let (rows, cols) = (3usize, 16385usize);
    let d = desc(rows, cols, DType::F32);
    let mut rng = Rng::new(5);
    let mut x: Vec<f32> = (0..rows * cols)
        .map(|_| (1e6 + normal(&mut rng)) as f32)
        .collect();
    // Row 2 overflows.
    x[2 * cols..].copy_from_slice(&huge_rows::<f32>(1, cols, 4, 8));
    let (g, b) = params(cols, 2);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for arch in SIM_ARCHS {
        let first = sim_fwd::<f32, f32>(arch, &d, &x, &g, &b, false);
        let second = sim_fwd::<f32, f32>(arch, &d, &x, &g, &b, false);
        assert_eq!(tier_of(&first.plan), "split");
        check(&d, &x, &g, &b, &first).1.unwrap();
        assert_eq!(bits(&first.y), bits(&second.y), "compute_{arch}");
        assert_eq!(bits(&first.mean), bits(&second.mean), "compute_{arch}");
        assert_eq!(bits(&first.rstd), bits(&second.rstd), "compute_{arch}");
    }
}

// ------------------------------------------------------------------------------------------
// Rows of small values with one large outlier
// ------------------------------------------------------------------------------------------

/// (tier, cols, rows) of the vector and the scalar variants on `DeviceProps::SIM`, for every
/// dtype pair: the scalar variants hold fewer elements per thread (8 forward), so their
/// subwarp and warp rows are shorter.
const VEC_TIERS: [(&str, usize, usize); 5] = TIERS;
const SCALAR_TIERS: [(&str, usize, usize); 5] = [
    ("subwarp", 30, 16),
    ("warp", 250, 8),
    ("block", 3000, 4),
    ("split", 16385, 3),
    ("split", 8192, 2),
];

/// Row `r` of an outlier case: values 1e-3 N(0, 1) with one +-100 at the first, middle or
/// last column (`(r + shift) % 3`), its sign alternating every three rows.
fn outlier_rows<T: Element>(rows: usize, cols: usize, shift: usize, seed: u64) -> Vec<T> {
    let mut rng = Rng::new(seed);
    let mut x: Vec<f64> = (0..rows * cols).map(|_| 1e-3 * normal(&mut rng)).collect();
    for r in 0..rows {
        let c = match (r + shift) % 3 {
            0 => 0,
            1 => cols / 2,
            _ => cols - 1,
        };
        x[r * cols + c] = if (r + shift) % 6 < 3 { 100.0 } else { -100.0 };
    }
    x.into_iter().map(T::from_f64).collect()
}

/// The f64 result of the forward (statistics and output in f64, nothing rounded), and the
/// largest error of `y` per row in units of roundoff of T relative to the row's max |y|.
fn units_vs_f64<T: Element, P: Element>(
    desc: &LayerNormDesc,
    x: &[T],
    gamma: &[P],
    beta: &[P],
    y: &[f64],
) -> f64 {
    let (m, d) = (desc.rows, desc.cols);
    let u = desc.dtype.unit_roundoff();
    let mut worst = 0.0f64;
    for row in 0..m {
        let xs: Vec<f64> = x[row * d..(row + 1) * d]
            .iter()
            .map(|v| v.to_f64())
            .collect();
        let (mu, rstd) = row_stats(&xs, desc.eps);
        let exact: Vec<f64> = xs
            .iter()
            .enumerate()
            .map(|(c, v)| (v - mu) * rstd * gamma[c].to_f64() + beta[c].to_f64())
            .collect();
        let ymax = exact.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        for (c, e) in exact.iter().enumerate() {
            let got = y[row * d + c];
            let err = if got.is_finite() {
                (got - e).abs()
            } else {
                f64::INFINITY
            };
            worst = worst.max(err / (u * ymax));
        }
    }
    worst
}

fn outlier_case<T: Element + Default, P: Element + Default>(failures: &mut Vec<String>) {
    let dtype = T::DTYPE;
    for scalar in [false, true] {
        let tiers = if scalar { SCALAR_TIERS } else { VEC_TIERS };
        for (ti, &(tier, cols, rows)) in tiers.iter().enumerate() {
            let d = LayerNormDesc::from_rows(rows, cols, dtype, P::DTYPE, Affine::WeightBias, EPS)
                .unwrap();
            let (g32, b32) = params(cols, ti as u64 + 40);
            let g: Vec<P> = g32.iter().map(|v| P::from_f64(*v as f64)).collect();
            let b: Vec<P> = b32.iter().map(|v| P::from_f64(*v as f64)).collect();
            let mut worst = 0.0f64;
            let mut cpu_worst = 0.0f64;
            for shift in 0..(4 - rows.min(3)) {
                let x: Vec<T> = outlier_rows(rows, cols, shift, 77 + ti as u64);
                let r = forward::<T, P>(&d, &x, Some(&g), Some(&b)).unwrap();
                cpu_worst = cpu_worst.max(units_vs_f64(&d, &x, &g, &b, &to_f64(&r.y)));
                for arch in SIM_ARCHS {
                    let got = sim_fwd::<T, P>(arch, &d, &x, &g, &b, scalar);
                    assert_eq!(tier_of(&got.plan), tier, "{rows}x{cols}:\n{}", got.plan);
                    worst = worst.max(units_vs_f64(&d, &x, &g, &b, &got.y));
                }
            }
            let label = format!(
                "{dtype}/{} outlier rows, {tier} {rows}x{cols}{}",
                P::DTYPE,
                if scalar { " scalar" } else { "" }
            );
            eprintln!("{label}: {worst:.3} units (CPU reference {cpu_worst:.3})");
            if worst > 2.0 || cpu_worst > 2.0 {
                failures.push(format!("{label}: {worst} units, CPU {cpu_worst}"));
            }
        }
    }
}

#[test]
fn outlier_rows_are_within_two_units_in_every_tier_and_dtype_pair() {
    if skip_without_kernels("outlier_rows_are_within_two_units_in_every_tier_and_dtype_pair") {
        return;
    }
    use half::f16;
    let mut failures = Vec::new();
    outlier_case::<f32, f32>(&mut failures);
    outlier_case::<f16, f16>(&mut failures);
    outlier_case::<f16, f32>(&mut failures);
    outlier_case::<bf16, bf16>(&mut failures);
    outlier_case::<bf16, f32>(&mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ------------------------------------------------------------------------------------------
// Backward on rows with a large offset
// ------------------------------------------------------------------------------------------

/// Backward outputs widened to f64, and the plan that made them.
struct Bwd {
    dx: Vec<f64>,
    dgamma: Vec<f64>,
    dbeta: Vec<f64>,
    plan: Plan,
}

/// Runs the backward on ptxsim's compute_`arch` from the statistics `fwd` saved (with its
/// mean_lo when `with_lo`, else without: the kernels then take it as zeros, as for a
/// PyTorch-saved mean); `scalar` offsets x (only) by one element: the scalar variant.
#[allow(clippy::too_many_arguments)]
fn sim_bwd<T: Element + Default>(
    arch: u32,
    desc: &LayerNormDesc,
    x: &[T],
    dy: &[T],
    gamma: &[f32],
    fwd: &Fwd,
    with_lo: bool,
    scalar: bool,
) -> Bwd {
    let props = DeviceProps::SIM;
    let mut sim = Sim::new(arch);
    let (m, d) = (desc.rows, desc.cols);
    let f32s = |v: &[f64]| v.iter().map(|e| *e as f32).collect::<Vec<f32>>();
    let px = sim.upload(x, usize::from(scalar));
    let pdy = sim.upload(dy, 0);
    let pdx = sim.alloc::<T>(m * d, 0);
    let pg = sim.upload(gamma, 0);
    let pm = sim.upload(&f32s(&fwd.mean), 0);
    let pr = sim.upload(&f32s(&fwd.rstd), 0);
    let plo = with_lo.then(|| sim.upload(&f32s(&fwd.mean_lo), 0));
    let (pdg, pdb) = (sim.alloc::<f32>(d, 0), sim.alloc::<f32>(d, 0));
    let ws = workspace_bytes(desc, Direction::Backward, &props).unwrap();
    let pws = sim.alloc::<f32>(ws.div_ceil(4).max(1), 0);
    let ptrs = BackwardPtrs {
        x: px,
        dy: pdy,
        dx: pdx,
        gamma: Some(pg),
        mean: pm,
        rstd: pr,
        mean_lo: plo,
        dgamma: Some(pdg),
        dbeta: Some(pdb),
        workspace: pws,
        workspace_bytes: ws as u64,
    };
    let plan = plan_backward(desc, &ptrs, &props).unwrap();
    sim.run(&plan).unwrap_or_else(|e| panic!("{e}\n{plan}"));
    Bwd {
        dx: to_f64(&sim.download::<T>(pdx, m * d)),
        dgamma: to_f64(&sim.download::<f32>(pdg, d)),
        dbeta: to_f64(&sim.download::<f32>(pdb, d)),
        plan,
    }
}

/// Largest errors of a backward run, each in units of its bound's f32 term (u32 * scale).
#[derive(Clone, Copy, Debug, Default)]
struct BwdErrs {
    dx: f64,
    dgamma: f64,
    dbeta: f64,
}

/// Checks a backward run against the f64 backward of x itself (statistics in f64, nothing
/// rounded): with xhat = (x - mean) rstd, g = gamma dy, A = mean |g|, B = mean |g xhat|,
///
///   |dx - ref| <= K_ROUND u_T |ref| + tiny_T + K_F32 u32 rstd (|g| + (1 + |xhat|)(A + B))
///   |dgamma - ref| <= K_ROUND u32 |ref| + K_F32 u32 sum |dy| (1 + |xhat|)
///   |dbeta - ref| <= K_ROUND u32 |ref| + K_F32 u32 sum |dy|
///
/// This is the error of the f32 formula with xhat off by a few u32 (1 + |xhat|): the
/// saved pair mean + mean_lo is within a few u32 sigma of the mean and rstd within a few u32
/// of its value, so xhat is as good as the forward's. With the f32 mean alone xhat is off by
/// up to u32 |mean| rstd (6e-4 at 1e4 + N(0, 1)), far outside. Returns the errors in units of
/// u32 * scale and the first violations.
fn check_bwd<T: Element>(
    desc: &LayerNormDesc,
    x: &[T],
    dy: &[T],
    gamma: &[f32],
    got: &Bwd,
) -> (BwdErrs, Result<(), String>) {
    let (m, d) = (desc.rows, desc.cols);
    let (u_t, tiny_t) = (desc.dtype.unit_roundoff(), tiny(desc.dtype));
    let mut dg = vec![0.0f64; d];
    let mut db = vec![0.0f64; d];
    let mut sg = vec![0.0f64; d];
    let mut sb = vec![0.0f64; d];
    let mut e = BwdErrs::default();
    let mut bad = Vec::new();
    let mut note = |what: &str, i: usize, got: f64, want: f64, round: f64, scale: f64| -> f64 {
        let err = if got.is_finite() {
            (got - want).abs()
        } else {
            f64::INFINITY
        };
        let tol = K_ROUND * round * want.abs() + tiny_t + K_F32 * U32 * scale;
        if err > tol && bad.len() < 3 {
            bad.push(format!(
                "{what}[{i}]: got {got:e}, reference {want:e} (error {err:e} > bound {tol:e})"
            ));
        }
        (err - K_ROUND * round * want.abs()).max(0.0) / (U32 * scale).max(f64::MIN_POSITIVE)
    };
    for row in 0..m {
        let xs: Vec<f64> = x[row * d..(row + 1) * d]
            .iter()
            .map(|v| v.to_f64())
            .collect();
        let (mu, rstd) = row_stats(&xs, desc.eps);
        let dys: Vec<f64> = dy[row * d..(row + 1) * d]
            .iter()
            .map(|v| v.to_f64())
            .collect();
        let xhat: Vec<f64> = xs.iter().map(|v| (v - mu) * rstd).collect();
        let g: Vec<f64> = (0..d).map(|c| dys[c] * gamma[c] as f64).collect();
        let n = d as f64;
        let c1 = g.iter().sum::<f64>() / n;
        let c2 = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n;
        let a = g.iter().map(|v| v.abs()).sum::<f64>() / n;
        let b = g.iter().zip(&xhat).map(|(a, b)| (a * b).abs()).sum::<f64>() / n;
        for c in 0..d {
            let i = row * d + c;
            let want = rstd * (g[c] - c1 - xhat[c] * c2);
            let scale = rstd * (g[c].abs() + (1.0 + xhat[c].abs()) * (a + b));
            e.dx = e.dx.max(note("dx", i, got.dx[i], want, u_t, scale));
            dg[c] += dys[c] * xhat[c];
            db[c] += dys[c];
            sg[c] += dys[c].abs() * (1.0 + xhat[c].abs());
            sb[c] += dys[c].abs();
        }
    }
    for c in 0..d {
        e.dgamma = e
            .dgamma
            .max(note("dgamma", c, got.dgamma[c], dg[c], U32, sg[c]));
        e.dbeta = e
            .dbeta
            .max(note("dbeta", c, got.dbeta[c], db[c], U32, sb[c]));
    }
    let verdict = if bad.is_empty() {
        Ok(())
    } else {
        Err(bad.join("; "))
    };
    (e, verdict)
}

/// (cols, rows) of the backward check on `DeviceProps::SIM`: together they run the subwarp,
/// warp, block, wide (8200 x 4: dgamma/dbeta summed in shared memory, x and dy held packed)
/// and split backward tiers (asserted), vector and scalar variants.
const BWD_SHAPES: [(usize, usize); 6] = [
    (60, 16),
    (500, 8),
    (3000, 4),
    (16385, 1),
    (8192, 2),
    (8200, 4),
];

#[test]
fn backward_on_rows_with_a_large_offset_is_as_accurate_as_the_forward() {
    if skip_without_kernels("backward_on_rows_with_a_large_offset_is_as_accurate_as_the_forward") {
        return;
    }
    let mut failures = Vec::new();
    let mut tiers = std::collections::BTreeSet::new();
    for (offset, sigma) in [(1e4, 1.0), (1e6, 0.01)] {
        for (si, &(cols, rows)) in BWD_SHAPES.iter().enumerate() {
            for scalar in [false, true] {
                if scalar && cols < 3000 {
                    continue;
                }
                let d = desc(rows, cols, DType::F32);
                let mut rng = Rng::new(si as u64 + 71);
                let x: Vec<f32> = (0..rows * cols)
                    .map(|_| (offset + sigma * normal(&mut rng)) as f32)
                    .collect();
                let dy: Vec<f32> = (0..rows * cols).map(|_| normal(&mut rng) as f32).collect();
                let (g, b) = params(cols, si as u64 + 3);
                let label = format!(
                    "f32 {offset:e} + {sigma} N(0,1), {rows}x{cols}{}",
                    if scalar { " scalar" } else { "" }
                );
                let mut worst = BwdErrs::default();
                let mut without = None;
                let mut tier = "?";
                for arch in SIM_ARCHS {
                    let fwd = sim_fwd::<f32, f32>(arch, &d, &x, &g, &b, scalar);
                    let got = sim_bwd(arch, &d, &x, &dy, &g, &fwd, true, scalar);
                    tier = tier_of(&got.plan);
                    let variant = if scalar { "_scalar" } else { "_vec" };
                    assert!(
                        got.plan.launches[0].kernel.ends_with(variant),
                        "{label}: {}",
                        got.plan
                    );
                    tiers.insert((tier, scalar));
                    let (e, verdict) = check_bwd(&d, &x, &dy, &g, &got);
                    worst.dx = worst.dx.max(e.dx);
                    worst.dgamma = worst.dgamma.max(e.dgamma);
                    worst.dbeta = worst.dbeta.max(e.dbeta);
                    if let Err(msg) = verdict {
                        failures.push(format!("{label}, compute_{arch}: {msg}"));
                    }
                    if arch == 80 {
                        // The same saved statistics without mean_lo (a PyTorch-saved mean).
                        let plain = sim_bwd(arch, &d, &x, &dy, &g, &fwd, false, scalar);
                        let (e, verdict) = check_bwd(&d, &x, &dy, &g, &plain);
                        // At 1e4 + N(0, 1) the f32 mean alone puts dx outside the bound in
                        // every shape: the bound can fail.
                        if offset == 1e4 && verdict.is_ok() {
                            failures.push(format!(
                                "{label}: without mean_lo the backward is within the bound \
                                 ({} units): the check does not see the mean's rounding",
                                e.dx
                            ));
                        }
                        without = Some(e);
                    }
                }
                let w = without.unwrap_or_default();
                eprintln!(
                    "{label}, {} tier: errors in units of u32 * scale (bound {K_F32}): dx {:.2}, \
                     dgamma {:.2}, dbeta {:.2}; without mean_lo (compute_80): dx {:.3e}, \
                     dgamma {:.3e}",
                    tier, worst.dx, worst.dgamma, worst.dbeta, w.dx, w.dgamma
                );
            }
        }
    }
    for tier in ["subwarp", "warp", "block", "wide", "split"] {
        assert!(
            tiers.contains(&(tier, false)),
            "no vector {tier} backward ran: {tiers:?}"
        );
    }
    for tier in ["block", "split"] {
        assert!(
            tiers.contains(&(tier, true)),
            "no scalar {tier} backward ran: {tiers:?}"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
