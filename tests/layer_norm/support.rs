//! Shared support of the LayerNorm tests: deterministic data, the CPU oracle, tolerances, and
//! one function ([`run_case`]) that runs a case's forward and backward plans on a
//! [`testkit::backend::Backend`] (ptxsim, or the GPU) and compares every output with
//! `warpnorm::cpu::layer_norm`.

use warpnorm::cpu::layer_norm::{backward, forward, ForwardOut};
use warpnorm::layer_norm::{
    plan_backward, plan_forward, workspace_bytes, Affine, BackwardPtrs, Direction, ForwardPtrs,
    LayerNormDesc,
};
use warpnorm::{DType, DeviceProps, Element, Plan};

use testkit::backend::Backend;

pub use testkit::Rng;

/// A LayerNorm description of `rows` x `cols` elements of T with parameters of P, whose
/// affine parameters are the ones given (the fields as given: the CPU reference and the
/// planners are what check them).
pub fn ln_desc<T: Element, P: Element>(
    rows: usize,
    cols: usize,
    weight: bool,
    bias: bool,
    eps: f32,
) -> LayerNormDesc {
    let affine = match (weight, bias) {
        (false, _) => Affine::None,
        (true, false) => Affine::Weight,
        (true, true) => Affine::WeightBias,
    };
    LayerNormDesc {
        rows,
        cols,
        dtype: T::DTYPE,
        param_dtype: P::DTYPE,
        affine,
        eps,
    }
}

/// How the activation buffers sit in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Views {
    /// Every buffer 256-byte aligned.
    Aligned,
    /// Every activation and parameter buffer one element past an aligned address.
    Offset1,
    /// Only the inputs (x, dy) offset by one element: forward and backward take the scalar
    /// variant.
    InputOffset1,
}

/// One LayerNorm test problem.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// M.
    pub rows: usize,
    /// D.
    pub cols: usize,
    /// Activation dtype.
    pub dtype: DType,
    /// Parameter dtype.
    pub param_dtype: DType,
    /// Parameters present.
    pub affine: Affine,
    /// Buffer placement.
    pub views: Views,
    /// Seed of the data.
    pub seed: u64,
    /// Mean added to x (large values test the two-pass variance).
    pub x_offset: f64,
}

impl Case {
    /// The problem description.
    pub fn desc(&self) -> LayerNormDesc {
        LayerNormDesc::from_rows(
            self.rows,
            self.cols,
            self.dtype,
            self.param_dtype,
            self.affine,
            1e-5,
        )
        .expect("valid test desc")
    }
}

/// Tolerance factors, in one place. Every check is |got - ref| <= tol with
/// tol = K_ROUND * u(dtype) * |ref| + tiny(dtype) + K_F32 * u32 * scale, where `scale` is the
/// first-order magnitude of the f32 rounding errors of that output (computed per element in
/// [`run_case`] from the f64 values of the terms the kernel adds up):
///
/// - `K_ROUND = 2`: an output rounded once to its dtype differs from the rounded f64
///   reference by at most one ulp = 2 u; `tiny` is the dtype's subnormal spacing.
/// - `K_F32 = 64`: the f32 arithmetic. Each thread sums at most 32 elements sequentially and
///   partial sums meet in a tree of depth <= 14, so a sum carries an error of at most ~46 u32
///   times the sum of its terms' magnitudes; a few more roundings follow (rstd, normalize,
///   the backward's row sums). The mean's error (<= 46 u32 max|x|) shifts every x - mean of
///   the row, which is why the scales carry rstd * max|x| terms ("X" below).
pub const K_ROUND: f64 = 2.0;
/// See [`K_ROUND`].
pub const K_F32: f64 = 64.0;
/// Unit roundoff of f32.
pub const U32: f64 = 5.960464477539063e-8;

/// Spacing of the dtype's subnormals (the absolute rounding error floor).
pub fn tiny(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2f64.powi(-149),
        DType::F16 => 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-133),
    }
}

/// Compares `got` with `reference` elementwise: |g - r| <= tol(i); NaN must match NaN.
pub fn compare(
    what: &str,
    got: &[f64],
    reference: &[f64],
    tol: impl Fn(usize) -> f64,
) -> Result<(), String> {
    if got.len() != reference.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            reference.len()
        ));
    }
    let mut worst: Option<(usize, f64, f64)> = None;
    for (i, (&g, &r)) in got.iter().zip(reference).enumerate() {
        let ok = if r.is_nan() {
            g.is_nan()
        } else if r.is_infinite() {
            g == r
        } else {
            (g - r).abs() <= tol(i)
        };
        if !ok {
            let e = if g.is_finite() {
                (g - r).abs()
            } else {
                f64::INFINITY
            };
            if worst.is_none_or(|(_, we, _)| e > we) {
                worst = Some((i, e, tol(i)));
            }
        }
    }
    match worst {
        None => Ok(()),
        Some((i, e, t)) => Err(format!(
            "{what}: index {i}: got {} expected {} (error {e:e} > tolerance {t:e})",
            got[i], reference[i]
        )),
    }
}

/// Widens to f64.
pub fn to_f64<E: Element>(v: &[E]) -> Vec<f64> {
    v.iter().map(|e| e.to_f64()).collect()
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(0.0, |m, x| m.max(x.abs()))
}

/// The plans a case ran (for tier-coverage checks).
pub struct Ran {
    /// Forward plan.
    pub fwd: Plan,
    /// Backward plan.
    pub bwd: Plan,
}

fn offsets(views: Views) -> (usize, usize) {
    match views {
        Views::Aligned => (0, 0),
        Views::Offset1 => (1, 1),
        Views::InputOffset1 => (1, 0),
    }
}

/// A case's inputs.
pub struct Data<T, P> {
    /// x, rows * cols.
    pub x: Vec<T>,
    /// dy, rows * cols.
    pub dy: Vec<T>,
    /// gamma (when the case has a weight).
    pub gamma: Option<Vec<P>>,
    /// beta (when the case has a bias).
    pub beta: Option<Vec<P>>,
}

/// Deterministic inputs of `case`: x uniform in x_offset +- 2, dy in +-1, gamma in [0.5, 1.5),
/// beta in +-0.5, all rounded to their dtypes.
pub fn make_data<T: Element, P: Element>(case: &Case) -> Data<T, P> {
    let (d, n) = (case.cols, case.rows * case.cols);
    let mut rng = Rng::new(case.seed);
    let x = rng.vec(n, case.x_offset - 2.0, case.x_offset + 2.0);
    let dy = rng.vec(n, -1.0, 1.0);
    let gamma = case.affine.has_weight().then(|| rng.vec(d, 0.5, 1.5));
    let beta = case.affine.has_bias().then(|| rng.vec(d, -0.5, 0.5));
    Data { x, dy, gamma, beta }
}

/// Checks a backend's outputs for `case` against the CPU reference. `got.y/mean/rstd` come
/// from the backend's forward; `got.dx/dgamma/dbeta` from its backward run on the
/// reference's saved statistics (so both sides use the same ones). `plans` is printed on
/// failure.
pub fn check_outputs<T: Element, P: Element>(
    case: &Case,
    data: &Data<T, P>,
    got: &Outputs,
    plans: &str,
) -> Result<(), String> {
    check_forward(case, data, got, plans)?;
    check_backward(case, data, got, plans)
}

/// The reference forward, x widened to f64, and per row max |x| and X = rstd * max |x|.
type Reference<T> = (ForwardOut<T>, Vec<f64>, Vec<f64>, Vec<f64>);

/// The reference forward of `case` on `data` (see [`Reference`]).
pub fn reference_forward<T: Element, P: Element>(
    case: &Case,
    data: &Data<T, P>,
) -> Result<Reference<T>, String> {
    let desc = case.desc();
    let (m, d) = (case.rows, case.cols);
    let r = forward::<T, P>(&desc, &data.x, data.gamma.as_deref(), data.beta.as_deref())
        .map_err(|e| e.to_string())?;
    let xf = to_f64(&data.x);
    let xrow: Vec<f64> = (0..m).map(|i| max_abs(&xf[i * d..(i + 1) * d])).collect();
    let big_x: Vec<f64> = (0..m).map(|i| r.rstd[i] as f64 * xrow[i]).collect();
    Ok((r, xf, xrow, big_x))
}

/// The forward half of [`check_outputs`]: `got.y`, `got.mean`, `got.rstd`.
pub fn check_forward<T: Element, P: Element>(
    case: &Case,
    data: &Data<T, P>,
    got: &Outputs,
    plans: &str,
) -> Result<(), String> {
    let (r, xf, xrow, _) = reference_forward(case, data)?;
    let d = case.cols;
    let ctx = |what: &str| format!("{what} [{case:?}]\n{plans}");
    let u_t = case.dtype.unit_roundoff();
    let tiny_t = tiny(case.dtype);
    let gf = data.gamma.as_deref().map(to_f64);
    let bf = data.beta.as_deref().map(to_f64);
    let gam = |c: usize| gf.as_ref().map_or(1.0, |g| g[c]);
    let bet = |c: usize| bf.as_ref().map_or(0.0, |b| b[c]);
    let ry = to_f64(&r.y);
    // y = (x - mean) * rstd * g + b: scale = rstd |g| (|x - mean| + max|x|) + |b|.
    let y_scale = |i: usize| {
        let (row, c) = (i / d.max(1), i % d.max(1));
        let (mu, rs) = (r.mean[row] as f64, r.rstd[row] as f64);
        rs * gam(c).abs() * ((xf[i] - mu).abs() + xrow[row]) + bet(c).abs()
    };
    compare(&ctx("y"), &got.y, &ry, |i| {
        K_ROUND * u_t * ry[i].abs() + tiny_t + K_F32 * U32 * y_scale(i)
    })?;
    compare(&ctx("mean"), &got.mean, &to_f64(&r.mean), |i| {
        K_F32 * U32 * xrow[i]
    })?;
    // mean_lo: the saved pair is the mean (to the same bound). Every caller reads mean_lo
    // back: a missing one gives a pair shorter than the reference, an error.
    {
        let pair: Vec<f64> = got
            .mean
            .iter()
            .zip(&got.mean_lo)
            .map(|(h, l)| h + l)
            .collect();
        let want: Vec<f64> = r
            .mean
            .iter()
            .zip(&r.mean_lo)
            .map(|(h, l)| *h as f64 + *l as f64)
            .collect();
        compare(&ctx("mean + mean_lo"), &pair, &want, |i| {
            K_F32 * U32 * xrow[i]
        })?;
    }
    let rr = to_f64(&r.rstd);
    compare(&ctx("rstd"), &got.rstd, &rr, |i| K_F32 * U32 * rr[i].abs())
}

/// The backward half of [`check_outputs`]: `got.dx`, `got.dgamma`, `got.dbeta`, from a
/// backward run on the reference forward's saved statistics.
pub fn check_backward<T: Element, P: Element>(
    case: &Case,
    data: &Data<T, P>,
    got: &Outputs,
    plans: &str,
) -> Result<(), String> {
    let (r, xf, _, big_x) = reference_forward(case, data)?;
    let (m, d) = (case.rows, case.cols);
    let (x, dy) = (&data.x, &data.dy);
    let gamma = data.gamma.as_deref();
    let ctx = |what: &str| format!("{what} [{case:?}]\n{plans}");
    let (u_t, u_p) = (case.dtype.unit_roundoff(), case.param_dtype.unit_roundoff());
    let (tiny_t, tiny_p) = (tiny(case.dtype), tiny(case.param_dtype));
    let gf = gamma.map(to_f64);
    let gam = |c: usize| gf.as_ref().map_or(1.0, |g| g[c]);
    let saved = (&r.mean[..], &r.rstd[..], Some(&r.mean_lo[..]));
    let rb = backward::<T, P>(&case.desc(), x, dy, saved, gamma).map_err(|e| e.to_string())?;
    let dyf = to_f64(dy);
    // Per row: A = mean |g dy|, B = mean |g dy xhat|; per element
    // dx scale = rstd (|g dy| + A + |xhat| B + X (B + |xhat| A)).
    let xhat = |i: usize| {
        let row = i / d.max(1);
        (xf[i] - r.mean[row] as f64 - r.mean_lo[row] as f64) * r.rstd[row] as f64
    };
    let mut a_row = vec![0.0f64; m];
    let mut b_row = vec![0.0f64; m];
    for (i, dyv) in dyf.iter().enumerate() {
        let row = i / d;
        let gdy = (dyv * gam(i % d)).abs();
        a_row[row] += gdy / d as f64;
        b_row[row] += gdy * xhat(i).abs() / d as f64;
    }
    let rdx = to_f64(&rb.dx);
    compare(&ctx("dx"), &got.dx, &rdx, |i| {
        let (row, c) = (i / d, i % d);
        let (xh, rs) = (xhat(i).abs(), r.rstd[row] as f64);
        let scale = rs
            * ((dyf[i] * gam(c)).abs()
                + a_row[row]
                + xh * b_row[row]
                + big_x[row] * (b_row[row] + xh * a_row[row]));
        K_ROUND * u_t * rdx[i].abs() + tiny_t + K_F32 * U32 * scale
    })?;
    // dgamma = sum dy xhat: scale = sum |dy| (|xhat| + X); dbeta: scale = sum |dy|.
    let (mut sg, mut sb) = (vec![0.0f64; d], vec![0.0f64; d]);
    for (i, dyv) in dyf.iter().enumerate() {
        let (row, c) = (i / d, i % d);
        sg[c] += dyv.abs() * (xhat(i).abs() + big_x[row]);
        sb[c] += dyv.abs();
    }
    let rg = rb.dgamma.as_deref().map_or(Vec::new(), to_f64);
    compare(&ctx("dgamma"), &got.dgamma, &rg, |c| {
        K_ROUND * u_p * rg[c].abs() + tiny_p + K_F32 * U32 * sg[c]
    })?;
    let rbt = rb.dbeta.as_deref().map_or(Vec::new(), to_f64);
    compare(&ctx("dbeta"), &got.dbeta, &rbt, |c| {
        K_ROUND * u_p * rbt[c].abs() + tiny_p + K_F32 * U32 * sb[c]
    })?;
    Ok(())
}

/// A forward planned on a backend's buffers.
pub struct PlannedFwd {
    /// The plan.
    pub plan: Plan,
    /// y (rows x cols of T).
    pub y: u64,
    /// Saved mean (rows f32).
    pub mean: u64,
    /// Saved rstd (rows f32).
    pub rstd: u64,
    /// Saved mean_lo (rows f32).
    pub mean_lo: u64,
    /// The workspace (testkit's `row_norm_workspace`: its barrier counts zeroed).
    pub workspace: u64,
}

/// Allocates y (`y_offset` elements past an aligned address), mean, rstd and the workspace
/// of `desc`'s forward on `be`, and plans it for `props` on x, gamma, beta.
pub fn plan_fwd_sim<T: Element>(
    be: &mut impl Backend,
    desc: &LayerNormDesc,
    props: &DeviceProps,
    x: u64,
    y_offset: usize,
    gamma: Option<u64>,
    beta: Option<u64>,
) -> Result<PlannedFwd, String> {
    let m = desc.rows;
    let y = be.alloc::<T>(m * desc.cols, y_offset);
    let mean = be.alloc::<f32>(m, 0);
    let rstd = be.alloc::<f32>(m, 0);
    let mean_lo = be.alloc::<f32>(m, 0);
    let ws = workspace_bytes(desc, Direction::Forward, props).map_err(|e| e.to_string())?;
    let workspace = testkit::backend::row_norm_workspace(be, ws);
    let ptrs = ForwardPtrs {
        x,
        y,
        gamma,
        beta,
        mean: Some(mean),
        rstd: Some(rstd),
        mean_lo: Some(mean_lo),
        workspace,
        workspace_bytes: ws as u64,
    };
    let plan = plan_forward(desc, &ptrs, props).map_err(|e| format!("plan_forward: {e}"))?;
    Ok(PlannedFwd {
        plan,
        y,
        mean,
        rstd,
        mean_lo,
        workspace,
    })
}

/// A backward planned on a backend's buffers.
pub struct PlannedBwd {
    /// The plan.
    pub plan: Plan,
    /// dx (rows x cols of T).
    pub dx: u64,
    /// dgamma (cols of P), with a weight.
    pub dgamma: Option<u64>,
    /// dbeta (cols of P), with a bias.
    pub dbeta: Option<u64>,
}

/// Allocates dx (`dx_offset` elements off), dgamma / dbeta (as `desc.affine` has them,
/// `param_offset` elements off) and the workspace of `desc`'s backward on `be`, and plans
/// it for `props` on x, dy, gamma and the saved statistics.
#[allow(clippy::too_many_arguments)]
pub fn plan_bwd_sim<T: Element, P: Element>(
    be: &mut impl Backend,
    desc: &LayerNormDesc,
    props: &DeviceProps,
    (x, dy, gamma): (u64, u64, Option<u64>),
    (mean, rstd, mean_lo): (u64, u64, Option<u64>),
    dx_offset: usize,
    param_offset: usize,
) -> Result<PlannedBwd, String> {
    let d = desc.cols;
    let dx = be.alloc::<T>(desc.rows * d, dx_offset);
    let dgamma = desc
        .affine
        .has_weight()
        .then(|| be.alloc::<P>(d, param_offset));
    let dbeta = desc
        .affine
        .has_bias()
        .then(|| be.alloc::<P>(d, param_offset));
    let ws = workspace_bytes(desc, Direction::Backward, props).map_err(|e| e.to_string())?;
    let workspace = be.alloc::<f32>(ws.div_ceil(4), 0);
    let ptrs = BackwardPtrs {
        x,
        dy,
        dx,
        gamma,
        mean,
        rstd,
        mean_lo,
        dgamma,
        dbeta,
        workspace,
        workspace_bytes: ws as u64,
    };
    let plan = plan_backward(desc, &ptrs, props).map_err(|e| format!("plan_backward: {e}"))?;
    Ok(PlannedBwd {
        plan,
        dx,
        dgamma,
        dbeta,
    })
}

/// Every output of a forward and a backward that ran on `be`, widened to f64.
fn download_outputs<T: Element + Default, P: Element + Default>(
    be: &mut impl Backend,
    desc: &LayerNormDesc,
    f: &PlannedFwd,
    b: &PlannedBwd,
) -> Outputs {
    let (m, d) = (desc.rows, desc.cols);
    let mut param = |p: Option<u64>| p.map_or(Vec::new(), |p| to_f64(&be.download::<P>(p, d)));
    let (dgamma, dbeta) = (param(b.dgamma), param(b.dbeta));
    Outputs {
        y: to_f64(&be.download::<T>(f.y, m * d)),
        mean: to_f64(&be.download::<f32>(f.mean, m)),
        rstd: to_f64(&be.download::<f32>(f.rstd, m)),
        mean_lo: to_f64(&be.download::<f32>(f.mean_lo, m)),
        dx: to_f64(&be.download::<T>(b.dx, m * d)),
        dgamma,
        dbeta,
    }
}

/// Runs forward and backward of `case` on `be` (ptxsim or the GPU; buffers placed as
/// `case.views` says), planned for `props`, and checks them against the CPU reference.
pub fn run_case<T: Element + Default, P: Element + Default>(
    be: &mut impl Backend,
    case: &Case,
    props: &DeviceProps,
) -> Result<Ran, String> {
    let desc = case.desc();
    let data: Data<T, P> = make_data(case);
    let (oin, oout) = offsets(case.views);
    let poff = if case.views == Views::Offset1 { 1 } else { 0 };

    let px = be.upload(&data.x, oin);
    let pg = data.gamma.as_ref().map(|g| be.upload(g, poff));
    let pb = data.beta.as_ref().map(|b| be.upload(b, poff));
    let f = plan_fwd_sim::<T>(be, &desc, props, px, oout, pg, pb)?;
    be.execute(&f.plan)
        .map_err(|e| format!("forward: {e}\n{}", f.plan))?;

    // Backward from the reference's saved statistics.
    let (r, ..) = reference_forward(case, &data)?;
    let pdy = be.upload(&data.dy, oin);
    let pmean2 = be.upload(&r.mean, 0);
    let prstd2 = be.upload(&r.rstd, 0);
    let plo2 = be.upload(&r.mean_lo, 0);
    let b = plan_bwd_sim::<T, P>(
        be,
        &desc,
        props,
        (px, pdy, pg),
        (pmean2, prstd2, Some(plo2)),
        oout,
        poff,
    )?;
    be.execute(&b.plan)
        .map_err(|e| format!("backward: {e}\n{}", b.plan))?;
    let got = download_outputs::<T, P>(be, &desc, &f, &b);
    check_outputs(case, &data, &got, &format!("{}{}", f.plan, b.plan))?;
    Ok(Ran {
        fwd: f.plan,
        bwd: b.plan,
    })
}

/// Every (activation, parameter) dtype pair warpnorm supports.
pub const DTYPE_PAIRS: [(DType, DType); 5] = [
    (DType::F32, DType::F32),
    (DType::F16, DType::F16),
    (DType::F16, DType::F32),
    (DType::BF16, DType::BF16),
    (DType::BF16, DType::F32),
];

/// [`run_case`] with the Rust types chosen from the case's dtypes.
pub fn run_case_dyn(
    be: &mut impl Backend,
    case: &Case,
    props: &DeviceProps,
) -> Result<Ran, String> {
    use half::{bf16, f16};
    match (case.dtype, case.param_dtype) {
        (DType::F32, DType::F32) => run_case::<f32, f32>(be, case, props),
        (DType::F16, DType::F16) => run_case::<f16, f16>(be, case, props),
        (DType::F16, DType::F32) => run_case::<f16, f32>(be, case, props),
        (DType::BF16, DType::BF16) => run_case::<bf16, bf16>(be, case, props),
        (DType::BF16, DType::F32) => run_case::<bf16, f32>(be, case, props),
        (t, p) => Err(format!("unsupported dtype pair {t}/{p}")),
    }
}

/// Everything a forward + backward pair produces, widened to f64.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// y.
    pub y: Vec<f64>,
    /// Saved mean.
    pub mean: Vec<f64>,
    /// Saved rstd.
    pub rstd: Vec<f64>,
    /// Saved mean_lo (empty: not read back).
    pub mean_lo: Vec<f64>,
    /// dx.
    pub dx: Vec<f64>,
    /// dgamma (empty without a weight).
    pub dgamma: Vec<f64>,
    /// dbeta (empty without a bias).
    pub dbeta: Vec<f64>,
}

/// Runs forward, then backward from the forward's own statistics, on `be` (ptxsim in the
/// callers; aligned buffers), returning every output. Faults are errors.
pub fn sim_fwd_bwd<T: Element + Default, P: Element + Default>(
    be: &mut impl Backend,
    desc: &LayerNormDesc,
    x: &[T],
    gamma: Option<&[P]>,
    beta: Option<&[P]>,
    dy: &[T],
    props: &DeviceProps,
) -> Result<Outputs, String> {
    let px = be.upload(x, 0);
    let pg = gamma.map(|g| be.upload(g, 0));
    let pb = beta.map(|b| be.upload(b, 0));
    let f = plan_fwd_sim::<T>(be, desc, props, px, 0, pg, pb)?;
    be.execute(&f.plan)
        .map_err(|e| format!("forward: {e}\n{}", f.plan))?;
    let pdy = be.upload(dy, 0);
    let b = plan_bwd_sim::<T, P>(
        be,
        desc,
        props,
        (px, pdy, pg),
        (f.mean, f.rstd, Some(f.mean_lo)),
        0,
        0,
    )?;
    be.execute(&b.plan)
        .map_err(|e| format!("backward: {e}\n{}", b.plan))?;
    Ok(download_outputs::<T, P>(be, desc, &f, &b))
}

/// The CPU reference's forward + backward (backward from its own saved statistics).
pub fn cpu_fwd_bwd<T: Element, P: Element>(
    desc: &LayerNormDesc,
    x: &[T],
    gamma: Option<&[P]>,
    beta: Option<&[P]>,
    dy: &[T],
) -> Result<Outputs, String> {
    let f = forward::<T, P>(desc, x, gamma, beta).map_err(|e| e.to_string())?;
    let saved = (&f.mean[..], &f.rstd[..], Some(&f.mean_lo[..]));
    let b = backward::<T, P>(desc, x, dy, saved, gamma).map_err(|e| e.to_string())?;
    Ok(Outputs {
        y: to_f64(&f.y),
        mean: to_f64(&f.mean),
        rstd: to_f64(&f.rstd),
        mean_lo: to_f64(&f.mean_lo),
        dx: to_f64(&b.dx),
        dgamma: b.dgamma.map_or(Vec::new(), |v| to_f64(&v)),
        dbeta: b.dbeta.map_or(Vec::new(), |v| to_f64(&v)),
    })
}
