//! Shared support of the RMSNorm tests: deterministic data, the CPU oracle, tolerances, and
//! [`run_case`], which runs a case's forward and backward plans on a
//! [`testkit::backend::Backend`] (ptxsim, or the GPU) and compares every output with
//! `warpnorm::cpu::rms_norm`.

use half::{bf16, f16};
use testkit::backend::Backend;
use testkit::Rng;
use warpnorm::cpu::rms_norm::{backward, forward, ForwardOut};
use warpnorm::rms_norm::{
    plan_backward, plan_forward, workspace_bytes, BackwardPtrs, Direction, ForwardPtrs, RmsNormDesc,
};
use warpnorm::{DType, DeviceProps, Element, Plan};

/// Tolerance factors (as the LayerNorm tests': `tests/layer_norm/support.rs`). Every check is
/// |got - ref| <= K_ROUND * u(dtype) * |ref| + tiny(dtype) + K_F32 * u32 * scale, `scale` the
/// first-order magnitude of the f32 rounding errors of that output:
/// - `K_ROUND = 2`: one rounding of the output to its dtype (one ulp = 2 u);
/// - `K_F32 = 64`: the f32 sums (at most 32 elements per thread, then a tree of depth <= 14,
///   ~46 u32 times the sum of the terms' magnitudes) and the few roundings after them.
pub const K_ROUND: f64 = 2.0;
/// See [`K_ROUND`].
pub const K_F32: f64 = 64.0;
/// Unit roundoff of f32.
pub const U32: f64 = 5.960464477539063e-8;

/// Every (activation, parameter) dtype pair warpnorm supports.
pub const DTYPE_PAIRS: [(DType, DType); 5] = [
    (DType::F32, DType::F32),
    (DType::F16, DType::F16),
    (DType::F16, DType::F32),
    (DType::BF16, DType::BF16),
    (DType::BF16, DType::F32),
];

/// Spacing of the dtype's subnormals.
pub fn tiny(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2f64.powi(-149),
        DType::F16 => 2f64.powi(-24),
        DType::BF16 => 2f64.powi(-133),
    }
}

/// How the activation buffers sit in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Views {
    /// Every buffer 256-byte aligned.
    Aligned,
    /// Every activation and parameter buffer one element past an aligned address.
    Offset1,
    /// Only the inputs (x, dy) one element off: the scalar variants.
    InputOffset1,
}

/// One RMSNorm test problem.
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
    /// A weight or not.
    pub weight: bool,
    /// Buffer placement.
    pub views: Views,
    /// Seed of the data.
    pub seed: u64,
    /// Added to x (a large common offset makes every row's mean square large).
    pub x_offset: f64,
}

impl Case {
    /// The problem description (eps `None`: PyTorch's default).
    pub fn desc(&self) -> RmsNormDesc {
        RmsNormDesc::from_rows(
            self.rows,
            self.cols,
            self.dtype,
            self.param_dtype,
            self.weight,
            None,
        )
        .expect("valid test desc")
    }
}

/// A case's inputs.
pub struct Data<T, P> {
    /// x, rows * cols.
    pub x: Vec<T>,
    /// dy, rows * cols.
    pub dy: Vec<T>,
    /// The weight (when the case has one).
    pub weight: Option<Vec<P>>,
}

/// Deterministic inputs: x uniform in x_offset +- 2, dy in +-1, weight in [0.5, 1.5).
pub fn make_data<T: Element, P: Element>(case: &Case) -> Data<T, P> {
    let n = case.rows * case.cols;
    let mut rng = Rng::new(case.seed);
    let x = rng.vec(n, case.x_offset - 2.0, case.x_offset + 2.0);
    let dy = rng.vec(n, -1.0, 1.0);
    let weight = case.weight.then(|| rng.vec(case.cols, 0.5, 1.5));
    Data { x, dy, weight }
}

/// Widens to f64.
pub fn to_f64<E: Element>(v: &[E]) -> Vec<f64> {
    v.iter().map(|e| e.to_f64()).collect()
}

/// Compares `got` with `reference` elementwise: |g - r| <= tol(i); NaN must match NaN and an
/// infinity the same infinity.
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
    for (i, (&g, &r)) in got.iter().zip(reference).enumerate() {
        let ok = if r.is_nan() {
            g.is_nan()
        } else if r.is_infinite() {
            g == r
        } else {
            (g - r).abs() <= tol(i)
        };
        if !ok {
            return Err(format!(
                "{what}: index {i}: got {g} expected {r} (tolerance {:e})",
                tol(i)
            ));
        }
    }
    Ok(())
}

/// Everything a forward + backward pair produces, widened to f64.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outputs {
    /// y.
    pub y: Vec<f64>,
    /// Saved rstd.
    pub rstd: Vec<f64>,
    /// dx.
    pub dx: Vec<f64>,
    /// dweight (empty without a weight).
    pub dweight: Vec<f64>,
}

/// Checks outputs against the CPU reference: `got.y`/`rstd` from the forward, `got.dx`/
/// `dweight` from a backward run on the reference's saved rstd.
pub fn check_outputs<T: Element, P: Element>(
    case: &Case,
    data: &Data<T, P>,
    got: &Outputs,
    plans: &str,
) -> Result<(), String> {
    check_forward(case, data, got, plans)?;
    check_backward(case, data, got, plans)
}

/// What the checks of one case share: the reference's forward and the data in f64.
struct Reference<T> {
    r: ForwardOut<T>,
    xf: Vec<f64>,
    wf: Option<Vec<f64>>,
    /// max |x| per row.
    xrow: Vec<f64>,
}

impl<T: Element> Reference<T> {
    fn new<P: Element>(case: &Case, data: &Data<T, P>) -> Result<Reference<T>, String> {
        let d = case.cols;
        let r = forward::<T, P>(&case.desc(), &data.x, data.weight.as_deref())
            .map_err(|e| e.to_string())?;
        let xf = to_f64(&data.x);
        let xrow = xf
            .chunks(d)
            .map(|row| row.iter().fold(0.0f64, |a, v| a.max(v.abs())))
            .collect();
        let wf = data.weight.as_deref().map(to_f64);
        Ok(Reference { r, xf, wf, xrow })
    }

    fn w(&self, c: usize) -> f64 {
        self.wf.as_ref().map_or(1.0, |w| w[c])
    }

    fn rs(&self, row: usize) -> f64 {
        self.r.rstd[row] as f64
    }
}

/// Checks `got.y` and `got.rstd` against the CPU reference.
pub fn check_forward<T: Element, P: Element>(
    case: &Case,
    data: &Data<T, P>,
    got: &Outputs,
    plans: &str,
) -> Result<(), String> {
    let d = case.cols;
    let ctx = |what: &str| format!("{what} [{case:?}]\n{plans}");
    let re = Reference::new(case, data)?;
    let (xf, xrow) = (&re.xf, &re.xrow);
    let u_t = case.dtype.unit_roundoff();
    let tiny_t = tiny(case.dtype);
    let ry = to_f64(&re.r.y);
    // y = x * rstd * w: scale = rstd |w| (|x| + max|x|).
    compare(&ctx("y"), &got.y, &ry, |i| {
        let (row, c) = (i / d, i % d);
        K_ROUND * u_t * ry[i].abs()
            + tiny_t
            + K_F32 * U32 * re.rs(row) * re.w(c).abs() * (xf[i].abs() + xrow[row])
    })?;
    let rr = to_f64(&re.r.rstd);
    compare(&ctx("rstd"), &got.rstd, &rr, |i| K_F32 * U32 * rr[i].abs())
}

/// Checks `got.dx` and `got.dweight` against the CPU reference's backward on the reference's
/// saved rstd.
pub fn check_backward<T: Element, P: Element>(
    case: &Case,
    data: &Data<T, P>,
    got: &Outputs,
    plans: &str,
) -> Result<(), String> {
    let (m, d) = (case.rows, case.cols);
    let ctx = |what: &str| format!("{what} [{case:?}]\n{plans}");
    let re = Reference::new(case, data)?;
    let rb = backward::<T, P>(
        &case.desc(),
        &data.x,
        &data.dy,
        &re.r.rstd,
        data.weight.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    let (xf, xrow) = (&re.xf, &re.xrow);
    let dyf = to_f64(&data.dy);
    let w = |c: usize| re.w(c);
    let rs = |row: usize| re.rs(row);
    let (u_t, u_p) = (case.dtype.unit_roundoff(), case.param_dtype.unit_roundoff());
    let (tiny_t, tiny_p) = (tiny(case.dtype), tiny(case.param_dtype));
    // dx = rstd (g - xhat mean(g xhat)): scale = rstd (|g| + |xhat| B + X B), B = mean|g xhat|,
    // X = rstd max|x|.
    let xhat = |i: usize| xf[i] * rs(i / d);
    let mut b_row = vec![0.0f64; m];
    for i in 0..m * d {
        b_row[i / d] += (dyf[i] * w(i % d) * xhat(i)).abs() / d as f64;
    }
    let rdx = to_f64(&rb.dx);
    compare(&ctx("dx"), &got.dx, &rdx, |i| {
        let (row, c) = (i / d, i % d);
        let big_x = rs(row) * xrow[row];
        let scale =
            rs(row) * ((dyf[i] * w(c)).abs() + xhat(i).abs() * b_row[row] + big_x * b_row[row]);
        K_ROUND * u_t * rdx[i].abs() + tiny_t + K_F32 * U32 * scale
    })?;
    // dweight = sum dy xhat: scale = sum |dy| (|xhat| + X).
    let mut sw = vec![0.0f64; d];
    for i in 0..m * d {
        sw[i % d] += dyf[i].abs() * (xhat(i).abs() + rs(i / d) * xrow[i / d]);
    }
    let rw = rb.dweight.as_deref().map_or(Vec::new(), to_f64);
    compare(&ctx("dweight"), &got.dweight, &rw, |c| {
        K_ROUND * u_p * rw[c].abs() + tiny_p + K_F32 * U32 * sw[c]
    })
}

/// The plans a case ran.
pub struct Ran {
    /// Forward plan.
    pub fwd: Plan,
    /// Backward plan.
    pub bwd: Plan,
}

/// Runs forward (rstd saved) and then backward from `rstd_in` (the forward's own rstd when
/// `None`) on `be`, buffers placed as `views` says; returns every output and the plans.
#[allow(clippy::too_many_arguments)]
pub fn run_on<T: Element + Default, P: Element + Default>(
    be: &mut impl Backend,
    desc: &RmsNormDesc,
    props: &DeviceProps,
    views: Views,
    x: &[T],
    dy: &[T],
    weight: Option<&[P]>,
    rstd_in: Option<&[f32]>,
) -> Result<(Outputs, Ran), String> {
    let (m, d) = (desc.rows, desc.cols);
    let (oin, oout) = match views {
        Views::Aligned => (0, 0),
        Views::Offset1 => (1, 1),
        Views::InputOffset1 => (1, 0),
    };
    let poff = usize::from(views == Views::Offset1);
    let px = be.upload(x, oin);
    let pw = weight.map(|w| be.upload(w, poff));
    let y = be.alloc::<T>(m * d, oout);
    let rstd = be.alloc::<f32>(m, 0);
    let wsf = workspace_bytes(desc, Direction::Forward, props).map_err(|e| e.to_string())?;
    let wf = testkit::backend::row_norm_workspace(be, wsf);
    let fptrs = ForwardPtrs {
        x: px,
        y,
        weight: pw,
        rstd: Some(rstd),
        workspace: wf,
        workspace_bytes: wsf as u64,
    };
    let fwd = plan_forward(desc, &fptrs, props).map_err(|e| format!("plan_forward: {e}"))?;
    be.execute(&fwd)
        .map_err(|e| format!("forward: {e}\n{fwd}"))?;
    let prs = match rstd_in {
        Some(r) => be.upload(r, 0),
        None => rstd,
    };
    let pdy = be.upload(dy, oin);
    let dx = be.alloc::<T>(m * d, oout);
    let dw = weight.map(|_| be.alloc::<P>(d, poff));
    let wsb = workspace_bytes(desc, Direction::Backward, props).map_err(|e| e.to_string())?;
    let wb = be.alloc::<f32>(wsb.div_ceil(4), 0);
    let bptrs = BackwardPtrs {
        x: px,
        dy: pdy,
        dx,
        weight: pw,
        rstd: prs,
        dweight: dw,
        workspace: wb,
        workspace_bytes: wsb as u64,
    };
    let bwd = plan_backward(desc, &bptrs, props).map_err(|e| format!("plan_backward: {e}"))?;
    be.execute(&bwd)
        .map_err(|e| format!("backward: {e}\n{bwd}"))?;
    let out = Outputs {
        y: to_f64(&be.download::<T>(y, m * d)),
        rstd: to_f64(&be.download::<f32>(rstd, m)),
        dx: to_f64(&be.download::<T>(dx, m * d)),
        dweight: dw.map_or(Vec::new(), |p| to_f64(&be.download::<P>(p, d))),
    };
    Ok((out, Ran { fwd, bwd }))
}

/// Runs `case` on `be` planned for `props` (backward from the reference's rstd, so that both
/// sides use the same one) and checks it against the CPU reference.
pub fn run_case<T: Element + Default, P: Element + Default>(
    be: &mut impl Backend,
    case: &Case,
    props: &DeviceProps,
) -> Result<Ran, String> {
    let desc = case.desc();
    let data: Data<T, P> = make_data(case);
    let r = forward::<T, P>(&desc, &data.x, data.weight.as_deref()).map_err(|e| e.to_string())?;
    let (got, ran) = run_on::<T, P>(
        be,
        &desc,
        props,
        case.views,
        &data.x,
        &data.dy,
        data.weight.as_deref(),
        Some(&r.rstd),
    )?;
    check_outputs(case, &data, &got, &format!("{}{}", ran.fwd, ran.bwd))?;
    Ok(ran)
}

/// [`run_case`] with the Rust types chosen from the case's dtypes.
pub fn run_case_dyn(
    be: &mut impl Backend,
    case: &Case,
    props: &DeviceProps,
) -> Result<Ran, String> {
    match (case.dtype, case.param_dtype) {
        (DType::F32, DType::F32) => run_case::<f32, f32>(be, case, props),
        (DType::F16, DType::F16) => run_case::<f16, f16>(be, case, props),
        (DType::F16, DType::F32) => run_case::<f16, f32>(be, case, props),
        (DType::BF16, DType::BF16) => run_case::<bf16, bf16>(be, case, props),
        (DType::BF16, DType::F32) => run_case::<bf16, f32>(be, case, props),
        (t, p) => Err(format!("unsupported dtype pair {t}/{p}")),
    }
}
