//! Shared helpers of the BatchNorm tests: deterministic data, tolerances, and one full
//! training + eval step (forward and backward) run through the planner on a
//! [`testkit::backend::Backend`] (ptxsim or the GPU) and compared with the CPU reference.

use warpnorm::batch_norm::{
    plan_backward, plan_forward, workspace_bytes, BackwardPtrs, BatchNormDesc, Direction,
    ForwardPtrs, Layout, Mode, Momentum, Ncs,
};
use warpnorm::cpu::batch_norm as cpu;
use warpnorm::{DType, DeviceProps, Element, Plan};

use testkit::backend::Backend;

pub use testkit::Rng;

/// The (N, C, S) view of `desc` whatever its mode (its shape checks, without the training
/// rule of more than one value per channel): for sizing test data.
pub fn ncs(desc: &BatchNormDesc) -> Result<Ncs, warpnorm::Error> {
    desc.clone()
        .with_mode(Mode::eval())
        .check()
        .map(|p| *p.ncs())
}

/// `DeviceProps::SIM` without cooperative launches: the planner takes the split tiers (a
/// reduction, then an elementwise pass) where SIM takes the cooperative passes.
pub const SIM_SPLIT: DeviceProps = DeviceProps {
    cooperative_launch: false,
    ..DeviceProps::SIM
};

/// The plan of a training forward of `desc` on `props` (momentum 0.1) over placeholder
/// buffers 2^40 bytes apart, the activations `offset` bytes past an aligned base: which tier
/// and kernels the planner picks, without memory.
pub fn training_forward_plan(
    desc: &BatchNormDesc,
    offset: u64,
    props: &DeviceProps,
) -> Result<Plan, warpnorm::Error> {
    let desc = desc.clone().with_mode(Mode::train(0.1));
    let ws = workspace_bytes(&desc, Direction::Forward, props)? as u64;
    let a = 1u64 << 40;
    let p = |i: u64| Some(i * a);
    let ptrs = ForwardPtrs {
        x: a + offset,
        y: 2 * a + offset,
        gamma: p(3),
        beta: p(4),
        running_mean: p(5),
        running_var: p(6),
        num_batches_tracked: None,
        save_mean: p(7),
        save_mean_lo: p(8),
        save_invstd: p(9),
        workspace: 10 * a,
        workspace_bytes: ws,
    };
    plan_forward(&desc, &ptrs, props)
}

/// The plan of an eval-mode backward of `desc` with dgamma and dbeta on `props` over
/// placeholder buffers as [`training_forward_plan`]'s.
pub fn eval_backward_plan(
    desc: &BatchNormDesc,
    offset: u64,
    props: &DeviceProps,
) -> Result<Plan, warpnorm::Error> {
    let desc = desc.clone().with_mode(Mode::eval());
    let ws = workspace_bytes(&desc, Direction::Backward, props)? as u64;
    let a = 1u64 << 40;
    let ptrs = BackwardPtrs {
        x: a + offset,
        dy: 2 * a + offset,
        dx: 3 * a + offset,
        gamma: Some(4 * a),
        save_mean: 5 * a,
        save_mean_lo: Some(6 * a),
        save_invstd: 7 * a,
        dgamma: Some(8 * a),
        dbeta: Some(9 * a),
        workspace: 10 * a,
        workspace_bytes: ws,
    };
    plan_backward(&desc, &ptrs, props)
}

/// Whether a training forward or an eval-mode backward with the parameters' gradients of
/// `case` (its views at its offset) plans a cooperative launch on `props`: then the same case
/// on [`SIM_SPLIT`] reaches the split tiers instead.
pub fn plans_cooperative(case: &Case, props: &DeviceProps) -> bool {
    let offset = (case.offset * case.dtype.size()) as u64;
    let coop = |plan: Result<Plan, warpnorm::Error>| {
        plan.is_ok_and(|plan| plan.launches.iter().any(|l| l.cooperative))
    };
    coop(training_forward_plan(&case.desc(), offset, props))
        || coop(eval_backward_plan(&case.desc(), offset, props))
}

/// Tolerance of one output: |got - ref| <= atol + k * u * scale, where scale is max|ref| of
/// the output unless the check says otherwise.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub atol: f64,
    pub k: f64,
}

/// Compares element by element; NaN must match NaN and infinities must match exactly.
pub fn check(
    what: &str,
    got: &[f64],
    want: &[f64],
    tol: Tol,
    u: f64,
    scale: &[f64],
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() || g.is_nan() {
            if w.is_nan() != g.is_nan() {
                return Err(format!("{what}[{i}]: got {g}, expected {w}"));
            }
            continue;
        }
        if w.is_infinite() || g.is_infinite() {
            if g != w {
                return Err(format!("{what}[{i}]: got {g}, expected {w}"));
            }
            continue;
        }
        let s = scale[if scale.len() == 1 { 0 } else { i }];
        let bound = tol.atol + tol.k * u * s;
        let err = (g - w).abs();
        if err > bound {
            return Err(format!(
                "{what}[{i}]: got {g}, expected {w} (error {err:.3e} > bound {bound:.3e} = {} + {} * {u:.3e} * {s:.3e})",
                tol.atol, tol.k
            ));
        }
        if err > worst.0 {
            worst = (err, i);
        }
    }
    Ok(())
}

/// A BatchNorm workspace of `bytes` for `c` channels on `be`: uninitialized (initcheck reports
/// any read of what no kernel wrote) except the reductions' arrival counters at its start
/// (C rounded up to 8 words), zeroed as the API asks before a workspace's first use. Every
/// call leaves them zero again: [`tickets_are_zero`] checks.
pub fn workspace<B: Backend>(be: &mut B, bytes: u64, c: usize) -> u64 {
    let p = be.alloc::<f32>((bytes as usize).div_ceil(4).max(1), 0);
    if bytes > 0 {
        be.write(p, &vec![0.0f32; c.div_ceil(8) * 8]);
    }
    p
}

/// Whether a workspace's arrival counters (see [`workspace`]) are all zero.
pub fn tickets_are_zero<B: Backend>(be: &mut B, ws: u64, c: usize) -> bool {
    be.download::<f32>(ws, c.div_ceil(8) * 8)
        .iter()
        .all(|v| v.to_bits() == 0)
}

pub fn f64s<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

pub fn max_abs(v: &[f64]) -> f64 {
    v.iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |a, &b| a.max(b.abs()))
}

/// One sweep case.
#[derive(Clone, Debug)]
pub struct Case {
    pub dims: Vec<usize>,
    pub layout: Layout,
    pub dtype: DType,
    pub param_dtype: DType,
    /// Element offset of every activation buffer from an aligned base (1 = misaligned views).
    pub offset: usize,
    pub affine: bool,
    pub momentum: Momentum,
    /// Number of training steps before the eval step.
    pub steps: usize,
    pub seed: u64,
}

impl Case {
    pub fn new(dims: &[usize], layout: Layout, dtype: DType, param_dtype: DType) -> Case {
        Case {
            dims: dims.to_vec(),
            layout,
            dtype,
            param_dtype,
            offset: 0,
            affine: true,
            momentum: Momentum::Factor(0.1),
            steps: 1,
            seed: 1,
        }
    }
    pub fn desc(&self) -> BatchNormDesc {
        BatchNormDesc::new(&self.dims, self.layout, self.dtype, self.param_dtype)
    }
}

// Tolerances, with u = the unit roundoff of the output's type (outputs in T or P) or of f32
// (saved statistics), and the scale named per output:
// - y, dx (type T), scale max|ref| (dx: max of dx_scale, the magnitude of its terms): one rounding to T on each side (GPU f32 -> T, reference f64 -> T) can
//   differ by one ulp of T, 2u * |ref|; plus the f32 error of the statistics, about
//   8 u_f32 * max|ref| for the data used here (|mean| / std <= 2). For T = f32 the whole bound
//   is 32 u_f32 * max|ref|; for f16/bf16 the T rounding dominates: 4 u_T * max|ref|.
// - save_mean: 32 u_f32 * mean|x| of the channel (Welford/Chan error is relative to the
//   magnitudes summed, not to the mean itself, which may be ~0).
// - save_invstd: 32 u_f32 * |ref|.
// - running stats (type P): 32 u_f32 * (|ref| + mean|x|) for P = f32, plus 2 u_P * |ref|.
// - dgamma, dbeta: f32 sums: 32 u_f32 * sum|terms| (the condition of the sum; the
//   per-thread partial sums are short and merged in trees), plus 2 u_P * |ref|.
pub const TOL_ACT_F32: Tol = Tol { atol: 0.0, k: 32.0 };
pub const TOL_ACT_HALF: Tol = Tol { atol: 0.0, k: 4.0 };
pub const TOL_STATS: Tol = Tol { atol: 0.0, k: 32.0 };

fn act_tol(d: DType) -> Tol {
    if d == DType::F32 {
        TOL_ACT_F32
    } else {
        TOL_ACT_HALF
    }
}

/// Data of one channel-structured input: values in [-2, 2) plus a channel offset in
/// [-1.5, 1.5], so that |mean| / std stays below about 2.
pub fn make_input<T: Element>(desc: &BatchNormDesc, rng: &mut Rng) -> Vec<T> {
    let g = crate::support::ncs(desc).expect("valid desc");
    let mut v = vec![T::from_f64(0.0); g.numel as usize];
    for n in 0..g.n {
        for c in 0..g.c {
            for s in 0..g.s {
                let off = (c % 7) as f64 * 0.5 - 1.5;
                v[cpu::index(&g, desc.layout, n, c, s)] = T::from_f64(2.0 * rng.signed() + off);
            }
        }
    }
    v
}

fn u(d: DType) -> f64 {
    d.unit_roundoff()
}

/// Mean |x| per channel.
fn mean_abs<T: Element>(desc: &BatchNormDesc, x: &[T]) -> Vec<f64> {
    let g = crate::support::ncs(desc).expect("valid desc");
    (0..g.c)
        .map(|c| {
            let mut s = 0.0;
            for n in 0..g.n {
                for sp in 0..g.s {
                    s += x[cpu::index(&g, desc.layout, n, c, sp)].to_f64().abs();
                }
            }
            s / g.count().max(1) as f64
        })
        .collect()
}

/// The magnitude of the terms dx is computed from, per element:
/// |gamma * invstd| * (|dy| + |mean(dy)| + |xhat| * |mean(dy * xhat)|) (training; frozen: the
/// first term only). dx is a difference of these terms and is exactly 0 for N * S = 2, so its
/// rounding error is relative to them, not to |dx|.
pub fn dx_scale<T: Element, P: Element>(
    desc: &BatchNormDesc,
    frozen: bool,
    x: &[T],
    dy: &[T],
    gamma: Option<&[P]>,
    mean: &[f32],
    invstd: &[f32],
) -> Vec<f64> {
    let g = crate::support::ncs(desc).expect("valid desc");
    let mut out = vec![0.0f64; g.numel as usize];
    let cnt = g.count() as f64;
    for c in 0..g.c {
        let ci = c as usize;
        let (m, is) = (mean[ci] as f64, invstd[ci] as f64);
        let w = gamma.map_or(1.0, |w| w[ci].to_f64());
        let (mut sdy, mut sdx) = (0.0, 0.0);
        for n in 0..g.n {
            for s in 0..g.s {
                let i = cpu::index(&g, desc.layout, n, c, s);
                sdy += dy[i].to_f64();
                sdx += dy[i].to_f64() * (x[i].to_f64() - m) * is;
            }
        }
        for n in 0..g.n {
            for s in 0..g.s {
                let i = cpu::index(&g, desc.layout, n, c, s);
                let xh = ((x[i].to_f64() - m) * is).abs();
                let t = if frozen {
                    dy[i].to_f64().abs()
                } else {
                    dy[i].to_f64().abs() + (sdy / cnt).abs() + xh * (sdx / cnt).abs()
                };
                out[i] = (w * is).abs() * t;
            }
        }
    }
    out
}

/// What a backend's training or eval forward left in its outputs, downloaded.
pub struct FwdGot<T, P> {
    pub y: Vec<T>,
    pub save_mean: Vec<f32>,
    pub save_mean_lo: Vec<f32>,
    pub save_invstd: Vec<f32>,
    pub running_mean: Vec<P>,
    pub running_var: Vec<P>,
}

/// Compares a forward's outputs with the CPU reference's `want` (run on the same x) and its
/// running statistics `rm`, `rv` after the step (tolerances above; saved statistics only in
/// training).
#[allow(clippy::too_many_arguments)]
pub fn check_forward<T: Element, P: Element>(
    ctx: &str,
    desc: &BatchNormDesc,
    training: bool,
    x: &[T],
    want: &cpu::ForwardOut<T>,
    rm: &[P],
    rv: &[P],
    got: &FwdGot<T, P>,
) -> Result<(), String> {
    let ctx = |w: &str| format!("{ctx} {w}");
    let (ut, up, uf) = (u(desc.dtype), u(desc.param_dtype), u(DType::F32));
    let wy = f64s(&want.y);
    check(
        &ctx("y"),
        &f64s(&got.y),
        &wy,
        act_tol(desc.dtype),
        ut.max(uf),
        &[max_abs(&wy)],
    )?;
    let ma = mean_abs(desc, x);
    let wm = f64s(&want.save_mean);
    let wi = f64s(&want.save_invstd);
    if training {
        check(
            &ctx("save_mean"),
            &f64s(&got.save_mean),
            &wm,
            TOL_STATS,
            uf,
            &ma,
        )?;
        // The pair: save_mean + save_mean_lo is the mean before its rounding to f32.
        let pair = |m: &[f32], lo: &[f32]| -> Vec<f64> {
            m.iter()
                .zip(lo)
                .map(|(&h, &l)| h as f64 + l as f64)
                .collect()
        };
        check(
            &ctx("save_mean + save_mean_lo"),
            &pair(&got.save_mean, &got.save_mean_lo),
            &pair(&want.save_mean, &want.save_mean_lo),
            TOL_STATS,
            uf,
            &ma,
        )?;
        check(
            &ctx("save_invstd"),
            &f64s(&got.save_invstd),
            &wi,
            TOL_STATS,
            uf,
            &wi.iter().map(|v| v.abs()).collect::<Vec<_>>(),
        )?;
    }
    let wrm = f64s(rm);
    let wrv = f64s(rv);
    let scale_m: Vec<f64> = wrm.iter().zip(&ma).map(|(r, m)| r.abs() + m).collect();
    let scale_v: Vec<f64> = wrv.iter().map(|r| r.abs()).collect();
    let tol_p = Tol {
        atol: 0.0,
        k: 32.0 + 2.0 * up / uf,
    };
    check(
        &ctx("running_mean"),
        &f64s(&got.running_mean),
        &wrm,
        tol_p,
        uf,
        &scale_m,
    )?;
    check(
        &ctx("running_var"),
        &f64s(&got.running_var),
        &wrv,
        tol_p,
        uf,
        &scale_v,
    )
}

/// What a backend's backward wrote, downloaded.
pub struct BwdGot<T, P> {
    pub dx: Vec<T>,
    pub dgamma: Vec<P>,
    pub dbeta: Vec<P>,
}

/// Compares a backward's outputs with the CPU reference's `want`, both run from the saved
/// statistics `sm`, `si` (tolerances above).
#[allow(clippy::too_many_arguments)]
pub fn check_backward<T: Element, P: Element>(
    ctx: &str,
    desc: &BatchNormDesc,
    frozen: bool,
    x: &[T],
    dy: &[T],
    gamma: Option<&[P]>,
    sm: &[f32],
    si: &[f32],
    want: &cpu::BackwardOut<T, P>,
    got: &BwdGot<T, P>,
) -> Result<(), String> {
    let ctx = |w: &str| format!("{ctx} {w}");
    let g = crate::support::ncs(desc).map_err(|e| e.to_string())?;
    let c = g.c as usize;
    let (ut, up, uf) = (u(desc.dtype), u(desc.param_dtype), u(DType::F32));
    let wdx = f64s(&want.dx);
    let sx = dx_scale(desc, frozen, x, dy, gamma, sm, si);
    check(
        &ctx("dx"),
        &f64s(&got.dx),
        &wdx,
        act_tol(desc.dtype),
        ut.max(uf),
        &[max_abs(&sx)],
    )?;
    // Condition of the sums: sum |dy| and sum |dy * (x - mean)| * invstd per channel.
    let mut abs_db = vec![0.0f64; c];
    let mut abs_dg = vec![0.0f64; c];
    for n in 0..g.n {
        for ch in 0..g.c {
            for s in 0..g.s {
                let i = cpu::index(&g, desc.layout, n, ch, s);
                let d = dy[i].to_f64();
                abs_db[ch as usize] += d.abs();
                abs_dg[ch as usize] +=
                    (d * (x[i].to_f64() - sm[ch as usize] as f64)).abs() * si[ch as usize] as f64;
            }
        }
    }
    let wdg = f64s(&want.dgamma);
    let wdb = f64s(&want.dbeta);
    let sg: Vec<f64> = abs_dg
        .iter()
        .zip(&wdg)
        .map(|(a, r)| a + r.abs() * up / uf)
        .collect();
    let sb: Vec<f64> = abs_db
        .iter()
        .zip(&wdb)
        .map(|(a, r)| a + r.abs() * up / uf)
        .collect();
    check(&ctx("dgamma"), &f64s(&got.dgamma), &wdg, TOL_STATS, uf, &sg)?;
    check(&ctx("dbeta"), &f64s(&got.dbeta), &wdb, TOL_STATS, uf, &sb)
}

/// One case on a backend: uploads, plans with `props`, runs, compares every output with the
/// CPU reference over `case.steps` training steps, one eval step and both backward modes.
pub fn run_case<B: Backend, T: Element + Default, P: Element + Default>(
    be: &mut B,
    case: &Case,
    props: &DeviceProps,
) -> Result<Vec<String>, String> {
    let desc = case.desc();
    let g = crate::support::ncs(&desc).map_err(|e| e.to_string())?;
    let (numel, c) = (g.numel as usize, g.c as usize);
    let mut rng = Rng::new(case.seed);
    let mut kernels = Vec::new();
    let gamma: Vec<P> = (0..c)
        .map(|_| P::from_f64(1.0 + 0.5 * rng.signed()))
        .collect();
    let beta: Vec<P> = (0..c).map(|_| P::from_f64(0.5 * rng.signed())).collect();
    let mut rm: Vec<P> = vec![P::from_f64(0.0); c];
    let mut rv: Vec<P> = vec![P::from_f64(1.0); c];
    let mut nbt = 0i64;
    let d_gamma = be.upload(&gamma, 0);
    let d_beta = be.upload(&beta, 0);
    let d_rm = be.upload(&rm, 0);
    let d_rv = be.upload(&rv, 0);
    let d_nbt = be.upload_i64(0);
    let ws_bytes =
        workspace_bytes(&desc, Direction::Forward, props).map_err(|e| e.to_string())? as u64;
    let d_ws = workspace(be, ws_bytes, c);
    let d_sm = be.alloc::<f32>(c, 0);
    let d_sml = be.alloc::<f32>(c, 0);
    let d_si = be.alloc::<f32>(c, 0);
    let d_y = be.alloc::<T>(numel, case.offset);
    let d_dx = be.alloc::<T>(numel, case.offset);
    let d_dg = be.alloc::<P>(c, 0);
    let d_db = be.alloc::<P>(c, 0);
    let affine = case.affine;
    for step in 0..=case.steps {
        let training = step < case.steps;
        let x: Vec<T> = make_input(&desc, &mut rng);
        let dy: Vec<T> = (0..numel).map(|_| T::from_f64(rng.signed())).collect();
        let d_x = be.upload(&x, case.offset);
        let d_dy = be.upload(&dy, case.offset);
        let mode = if training {
            Mode {
                batch_stats: true,
                momentum: case.momentum,
            }
        } else {
            Mode::eval()
        };
        let ptrs = ForwardPtrs {
            x: d_x,
            y: d_y,
            gamma: affine.then_some(d_gamma),
            beta: affine.then_some(d_beta),
            running_mean: Some(d_rm),
            running_var: Some(d_rv),
            num_batches_tracked: Some(d_nbt),
            save_mean: Some(d_sm),
            save_mean_lo: Some(d_sml),
            save_invstd: Some(d_si),
            workspace: d_ws,
            workspace_bytes: ws_bytes,
        };
        let plan =
            plan_forward(&desc.clone().with_mode(mode), &ptrs, props).map_err(|e| e.to_string())?;
        kernels.extend(plan.launches.iter().map(|l| l.kernel.clone()));
        be.execute(&plan)
            .map_err(|e| format!("step {step} forward: {e}\n{plan}"))?;
        let want = cpu::forward::<T, P>(
            &desc.clone().with_mode(mode),
            &x,
            affine.then_some((&gamma[..], &beta[..])),
            Some(cpu::Running {
                mean: &mut rm,
                var: &mut rv,
                num_batches_tracked: Some(&mut nbt),
            }),
        )
        .map_err(|e| e.to_string())?;
        let ctx = |w: &str| format!("{case:?} step {step} {w}");
        if numel > 0 {
            let got = FwdGot {
                y: be.download(d_y, numel),
                save_mean: be.download(d_sm, c),
                save_mean_lo: be.download(d_sml, c),
                save_invstd: be.download(d_si, c),
                running_mean: be.download(d_rm, c),
                running_var: be.download(d_rv, c),
            };
            let (sm, sml, si) = (
                got.save_mean.clone(),
                got.save_mean_lo.clone(),
                got.save_invstd.clone(),
            );
            check_forward(&ctx(""), &desc, training, &x, &want, &rm, &rv, &got)?;
            // Backward from the GPU's saved statistics (the reference uses the same ones).
            let bptrs = BackwardPtrs {
                x: d_x,
                dy: d_dy,
                dx: d_dx,
                gamma: affine.then_some(d_gamma),
                save_mean: d_sm,
                save_mean_lo: Some(d_sml),
                save_invstd: d_si,
                dgamma: Some(d_dg),
                dbeta: Some(d_db),
                workspace: d_ws,
                workspace_bytes: ws_bytes,
            };
            let frozen = !training;
            let plan = plan_backward(
                &desc.clone().with_mode(if frozen {
                    Mode::eval()
                } else {
                    Mode::train(0.1)
                }),
                &bptrs,
                props,
            )
            .map_err(|e| e.to_string())?;
            kernels.extend(plan.launches.iter().map(|l| l.kernel.clone()));
            be.execute(&plan)
                .map_err(|e| format!("step {step} backward: {e}\n{plan}"))?;
            let wb = cpu::backward::<T, P>(
                &desc.clone().with_mode(if frozen {
                    Mode::eval()
                } else {
                    Mode::train(0.1)
                }),
                &x,
                &dy,
                affine.then_some(&gamma[..]),
                &sm,
                Some(&sml),
                &si,
            )
            .map_err(|e| e.to_string())?;
            let got = BwdGot {
                dx: be.download(d_dx, numel),
                dgamma: be.download(d_dg, c),
                dbeta: be.download(d_db, c),
            };
            let gamma = affine.then_some(&gamma[..]);
            check_backward(&ctx(""), &desc, frozen, &x, &dy, gamma, &sm, &si, &wb, &got)?;
        }
        if !tickets_are_zero(be, d_ws, c) {
            return Err(format!(
                "{case:?} step {step}: the workspace's arrival counters are not back at zero"
            ));
        }
        let gn = [be.download_i64(d_nbt)];
        if gn[0] != nbt {
            return Err(format!(
                "{case:?} step {step}: num_batches_tracked {} expected {nbt}",
                gn[0]
            ));
        }
    }
    Ok(kernels)
}

/// [`run_case`] with the Rust types chosen from the case's dtypes; returns the kernels run.
pub fn run_on<B: Backend>(
    be: &mut B,
    case: &Case,
    props: &DeviceProps,
) -> Result<Vec<String>, String> {
    use half::{bf16, f16};
    match (case.dtype, case.param_dtype) {
        (DType::F32, DType::F32) => run_case::<B, f32, f32>(be, case, props),
        (DType::F16, DType::F32) => run_case::<B, f16, f32>(be, case, props),
        (DType::BF16, DType::F32) => run_case::<B, bf16, f32>(be, case, props),
        (DType::F16, DType::F16) => run_case::<B, f16, f16>(be, case, props),
        (DType::BF16, DType::BF16) => run_case::<B, bf16, bf16>(be, case, props),
        (a, b) => Err(format!("unsupported dtype pair {a}/{b}")),
    }
}

// ---------------------------------------------------------------- the case lists

/// The activation / parameter dtype pairs.
pub const PAIRS: [(DType, DType); 5] = [
    (DType::F32, DType::F32),
    (DType::F16, DType::F32),
    (DType::BF16, DType::F32),
    (DType::F16, DType::F16),
    (DType::BF16, DType::BF16),
];

/// Small cases that reach every kernel: per dtype, both layouts x both access variants.
pub fn coverage_cases() -> Vec<Case> {
    let mut v = Vec::new();
    for (i, dt) in DType::ALL.into_iter().enumerate() {
        let pt = if i.is_multiple_of(2) { DType::F32 } else { dt };
        let pt2 = if pt == DType::F32 { dt } else { DType::F32 };
        // nchw vec: S = 16 divides every vector width; split reduction (N * S / V >> 1024).
        let mut a = Case::new(&[9, 2, 4, 4 * 64], Layout::Contiguous, dt, pt);
        a.steps = 2;
        v.push(a);
        // nchw scalar: odd S, misaligned views.
        let mut b = Case::new(&[3, 5, 7, 5], Layout::Contiguous, dt, pt2);
        b.offset = 1;
        v.push(b);
        // nhwc vec: C = 16, many rows (split), cumulative momentum.
        let mut c = Case::new(&[4, 16, 20, 20], Layout::ChannelsLast, dt, pt);
        c.momentum = Momentum::Cumulative;
        c.steps = 2;
        v.push(c);
        // nhwc scalar: (N, C) with odd C, no affine.
        let mut d = Case::new(&[300, 5], Layout::Contiguous, dt, pt2);
        d.affine = false;
        v.push(d);
        // nhwc vec with misaligned views -> scalar; 5-D channels-last.
        let mut e = Case::new(&[2, 8, 3, 2, 5], Layout::ChannelsLast, dt, pt);
        e.offset = 1;
        v.push(e);
    }
    // The fused backward (at least 2 channel tiles per SM: 8 on SIM) for every dtype pair.
    for (j, (dt, pt)) in PAIRS.into_iter().enumerate() {
        v.push(Case::new(&[3, 9, 16], Layout::Contiguous, dt, pt)); // nchw vec
        let mut b = Case::new(&[2, 10, 7], Layout::Contiguous, dt, pt); // nchw scalar
        b.offset = j % 2;
        v.push(b);
        v.push(Case::new(&[5, 64, 3], Layout::ChannelsLast, dt, pt)); // nhwc vec
        let mut d = Case::new(&[6, 9], Layout::Contiguous, dt, pt); // nhwc scalar
        d.affine = j.is_multiple_of(2);
        v.push(d);
        // nchw scalar fused with aligned views: S = 3 below every vector width.
        v.push(Case::new(&[2, 10, 3], Layout::Contiguous, dt, pt));
        // nchw vecodd fused: S = 25, both sector phases.
        let mut e = Case::new(&[3, 9, 5, 5], Layout::Contiguous, dt, pt);
        e.offset = (j % 2) * 16 / dt.size();
        v.push(e);
    }
    // No cliff at odd spatial sizes: NCHW slices of S % V != 0 elements (S >= V) take the
    // vecodd kernels with aligned views (whole covering sectors in the reductions, the flat
    // tensor in the elementwise passes); 1x1 is channels-innermost, S < V scalar. Several N
    // and C, N * C * S % V != 0 (a partial last pack), views 16 but not 32 bytes aligned
    // (odd k: the other sector phase), and split reductions ([160, 2, 7, 7]). Slices shorter
    // than a 32-byte sector (S = 9 in 16-bit, S = 5 in f32): a sector reaches two slices back
    // (the eval-mode backward's sums write dx by whole sectors, each lane with its channel's
    // coefficient).
    for (i, dt) in DType::ALL.into_iter().enumerate() {
        let pt = if i.is_multiple_of(2) { DType::F32 } else { dt };
        let shapes: [&[usize]; 10] = [
            &[3, 5, 7, 7],
            &[2, 3, 14, 14],
            &[4, 6, 3, 3],
            &[5, 7, 1, 1],
            &[2, 9, 5, 5],
            &[3, 4, 13, 13],
            &[160, 2, 7, 7],
            &[7, 3, 7, 7],
            &[6, 7, 5],
            &[5, 4, 5],
        ];
        for (k, dims) in shapes.into_iter().enumerate() {
            let mut a = Case::new(dims, Layout::Contiguous, dt, pt);
            if k % 2 == 1 {
                a.offset = 16 / dt.size();
            }
            if k == 6 {
                a.steps = 2;
            }
            v.push(a);
        }
    }
    v
}

/// Logical dims and layout of the sweep's shape `form` for C channels and N * S = ns.
fn dims_for(c: usize, ns: usize, form: usize) -> (Vec<usize>, Layout) {
    use Layout::{ChannelsLast as Cl, Contiguous as Co};
    match (form, ns) {
        (0, _) => (vec![ns, c], Co),
        (1, _) if ns.is_multiple_of(2) => (vec![2, c, ns / 2], Co),
        (1, _) => (vec![1, c, ns], Co),
        (2, 64) => (vec![2, c, 4, 8], Cl),
        (2, 1000) => (vec![2, c, 20, 25], Cl),
        (2, _) => (vec![1, c, ns, 1], Cl),
        (3, 64) => (vec![2, c, 4, 8], Co),
        (3, 1000) => (vec![1, c, 40, 25], Co),
        (3, _) => (vec![ns, c, 1, 1], Co),
        (_, 64) => (vec![2, c, 2, 4, 4], Cl),
        (_, 1000) => (vec![5, c, 2, 10, 10], Cl),
        (_, _) => (vec![1, c, ns, 1, 1], Cl),
    }
}

/// The sweep, two cases per (C, N * S), rotating forms, dtype pairs, offsets and momentum.
/// C = 64 and 1000 with N * S = 65539 (4 M and 65 M elements) are left out: too slow to
/// simulate; 65539 runs with C = 1 and 3.
pub fn sweep_cases() -> Vec<Case> {
    let mut v = Vec::new();
    let mut j = 0usize;
    for c in [1usize, 3, 64, 1000] {
        for ns in [2usize, 7, 64, 1000, 65539] {
            if c * ns > 1_100_000 {
                continue;
            }
            for _ in 0..2 {
                let (dims, layout) = dims_for(c, ns, j % 5);
                let (dt, pt) = PAIRS[(j * 3) % 5];
                let mut case = Case::new(&dims, layout, dt, pt);
                case.offset = (j / 2) % 2;
                case.affine = j % 6 != 5;
                if j % 4 == 3 {
                    case.momentum = Momentum::Cumulative;
                }
                case.seed = j as u64 + 100;
                v.push(case);
                j += 1;
            }
        }
    }
    v
}
