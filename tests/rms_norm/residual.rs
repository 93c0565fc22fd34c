//! The fused residual add of LayerNorm and RMSNorm (h = x + residual (+ bias), y = norm(h);
//! backward dx = norm's dx + dh), both ops here:
//! - the CPU reference (`warpnorm::cpu::residual` and the ops' `forward_residual` /
//!   `backward_residual`) against hand-checked values and central finite differences of the
//!   forward reference;
//! - the kernels on ptxsim (memcheck, racecheck, initcheck on) for every tier and dtype pair:
//!   h bitwise equal to the reference's one-rounding h; y and the saved statistics bitwise
//!   equal to the plain kernels' on that h (the fused op normalizes the stored h), every
//!   fused entry point (`_res_`) run; dx with dh
//!   within the bound that follows from the plain dx's error; the parameter gradients bitwise
//!   equal to the plain backward's (LayerNorm's dbeta, by its column sum when the backward's
//!   accumulators form dbias, within the f32 summation bound of the column sums of dy); the
//!   bias gradient (summed by the backward kernels from the f32 dx) equal to the column sums
//!   of the stored dx within the f32 summation bound plus the stored dx's own rounding;
//!   bitwise reruns; h written over the residual in place;
//! - the bias gradient on compute_75 and compute_90, with one and many row chunks of
//!   LayerNorm's dbeta column sum, aligned and misaligned dy, and with no rows (zeros);
//! - the planner's rejections (overlaps, misaligned buffers, a short workspace).

use half::{bf16, f16};
use testkit::sim::{sim_rows, skip_without_kernels, Sim, SIM_SM90_SHARED};
use testkit::Rng;
use warpnorm::abi::{WnLayerNormBwdArgs, WnLayerNormFinalizeArgs};
use warpnorm::cpu::residual::residual_add;
use warpnorm::layer_norm::{self as ln, Affine, LayerNormDesc};
use warpnorm::rms_norm::{self as rms, RmsNormDesc};
use warpnorm::{cpu, kernels, occupancy, DType, DeviceProps, Element, Executor, Plan};

use crate::support::{tiny, to_f64, DTYPE_PAIRS, K_ROUND};

// ---------------------------------------------------------------------------------------
// CPU reference
// ---------------------------------------------------------------------------------------

/// One rounding of the f32 sum: f16 2048 + 1 + 1 (bias) is 2050, where PyTorch's unfused
/// `x + residual + bias` (two f16 roundings, 2048 + 1 -> 2048 by ties-to-even) gives 2048;
/// without a bias it is PyTorch's add (2048 + 1 -> 2048; 1 + 0.5 -> 1.5).
#[test]
fn cpu_residual_add_rounds_once() {
    let h = |x: f32, r: f32, b: Option<f32>| {
        let bias = b.map(|b| vec![b]);
        residual_add::<f16, f32>(
            1,
            1,
            &[f16::from_f32(x)],
            &[f16::from_f32(r)],
            bias.as_deref(),
        )
        .unwrap()[0]
            .to_f32()
    };
    assert_eq!(h(2048.0, 1.0, Some(1.0)), 2050.0);
    assert_eq!(h(2048.0, 1.0, None), 2048.0);
    assert_eq!(h(1.0, 0.5, None), 1.5);
    assert_eq!(h(1.0, 0.5, Some(0.25)), 1.75);
    // bf16: 256 + 1 is a tie (spacing 2) -> 256; + 1.5 from an f32 bias -> 258.5 -> 258.
    let hb = residual_add::<bf16, f32>(
        1,
        1,
        &[bf16::from_f32(256.0)],
        &[bf16::from_f32(1.0)],
        Some(&[1.5]),
    )
    .unwrap();
    assert_eq!(hb[0].to_f32(), 258.0);
    // f32: (1 + 2^-24) + 2^-24 in f32 arithmetic, left to right: 1 + 2^-24 -> 1 (tie to
    // even), then 1 again; two f32 roundings, as PyTorch's f32 adds.
    let hf =
        residual_add::<f32, f32>(1, 1, &[1.0], &[2f32.powi(-24)], Some(&[2f32.powi(-24)])).unwrap();
    assert_eq!(hf[0], 1.0);
    // Lengths are checked: an Error, not a panic.
    assert!(residual_add::<f32, f32>(2, 2, &[0.0; 4], &[0.0; 3], None).is_err());
    assert!(residual_add::<f32, f32>(2, 2, &[0.0; 4], &[0.0; 4], Some(&[0.0; 3])).is_err());
}

/// Hand-checked forward values: LayerNorm of h = [1, 2] + [0, 2] = [1, 4] (mean 2.5, var
/// 2.25, eps 0: y = [-1, 1]); RMSNorm of h = [3, 0] + [0, 4] = [3, 4] (mean square 12.5).
#[test]
fn cpu_forward_residual_hand_values() {
    let d = LayerNormDesc::from_rows(1, 2, DType::F32, DType::F32, Affine::None, 0.0).unwrap();
    let (h, out) = cpu::layer_norm::forward_residual::<f32, f32>(
        &d,
        &[1.0, 2.0],
        &[0.0, 2.0],
        None,
        None,
        None,
    )
    .unwrap();
    assert_eq!(h, [1.0, 4.0]);
    assert_eq!(out.mean, [2.5]);
    assert_eq!(out.rstd, [(1.0f64 / 1.5) as f32]);
    assert_eq!(out.y, [-1.0, 1.0]);
    let d = RmsNormDesc::from_rows(1, 2, DType::F32, DType::F32, false, Some(0.0)).unwrap();
    let (h, out) =
        cpu::rms_norm::forward_residual::<f32, f32>(&d, &[3.0, 0.0], &[0.0, 4.0], None, None)
            .unwrap();
    assert_eq!(h, [3.0, 4.0]);
    let r = 1.0 / 12.5f64.sqrt();
    assert_eq!(out.rstd, [r as f32]);
    assert_eq!(out.y, [(3.0 * r) as f32, (4.0 * r) as f32]);
    // With a bias [1, -4]: h = [4, 0], mean square 8.
    let (h, out) = cpu::rms_norm::forward_residual::<f32, f32>(
        &d,
        &[3.0, 0.0],
        &[0.0, 4.0],
        Some(&[1.0, -4.0]),
        None,
    )
    .unwrap();
    assert_eq!(h, [4.0, 0.0]);
    assert_eq!(out.y, [(4.0 / 8f64.sqrt()) as f32, 0.0]);
}

/// Hand-checked backward: the norm's dx plus dh (RMSNorm of [3, 4], dy = 0: dx = dh), and the
/// bias gradient as the column sum of dx over rows.
#[test]
fn cpu_backward_residual_hand_values() {
    let d = RmsNormDesc::from_rows(2, 2, DType::F32, DType::F32, false, Some(0.0)).unwrap();
    let h = [3.0f32, 4.0, 3.0, 4.0];
    let rstd = [0.2f32, 0.2];
    let g = cpu::rms_norm::backward_residual::<f32, f32>(
        &d,
        &h,
        &[0.0; 4],
        Some(&[1.0, 2.0, 3.0, 4.0]),
        &rstd,
        None,
        true,
    )
    .unwrap();
    assert_eq!(g.dx, [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(g.dbias, Some(vec![4.0, 6.0]));
    assert_eq!(g.dbeta, None);
    // Without dh it is the plain backward.
    let dy = [1.0f32, 0.0, 0.0, 1.0];
    let g = cpu::rms_norm::backward_residual::<f32, f32>(&d, &h, &dy, None, &rstd, None, false)
        .unwrap();
    let p = cpu::rms_norm::backward::<f32, f32>(&d, &h, &dy, &rstd, None).unwrap();
    assert_eq!(g.dx, p.dx);
    assert_eq!(g.dbias, None);
    // LayerNorm: dy = 0 gives dx = dh and dbeta = 0.
    let dl =
        LayerNormDesc::from_rows(2, 2, DType::F32, DType::F32, Affine::WeightBias, 0.0).unwrap();
    let g = cpu::layer_norm::backward_residual::<f32, f32>(
        &dl,
        &h,
        &[0.0; 4],
        Some(&[1.0, -2.0, 0.5, 8.0]),
        (&[3.5, 3.5], &[2.0, 2.0], None),
        Some(&[1.0, 1.0]),
        true,
    )
    .unwrap();
    assert_eq!(g.dx, [1.0, -2.0, 0.5, 8.0]);
    assert_eq!(g.dbias, Some(vec![1.5, 6.0]));
    assert_eq!(g.dbeta, Some(vec![0.0, 0.0]));
    assert_eq!(g.dgamma, Some(vec![0.0, 0.0]));
    // A dh of the wrong length is an Error.
    assert!(cpu::rms_norm::backward_residual::<f32, f32>(
        &d,
        &h,
        &dy,
        Some(&[0.0; 3]),
        &rstd,
        None,
        true
    )
    .is_err());
}

/// Dyadic values (multiples of 2^-10 in [-2, 2)): x +- 2^-10 and every h are exact in f32.
fn dyadic(rng: &mut Rng, n: usize) -> Vec<f32> {
    rng.vec::<f32>(n, -2.0, 2.0)
        .into_iter()
        .map(|v| (v * 1024.0).round() / 1024.0)
        .collect()
}

/// Central finite differences of L = sum(y dy) + sum(h dh) through the forward references
/// against the backward references' dx (= dL/dx = dL/dresidual) and dbias, for both ops.
#[test]
fn cpu_backward_residual_matches_finite_differences() {
    let (rows, cols) = (3usize, 8usize);
    let n = rows * cols;
    let mut rng = Rng::new(17);
    let x = dyadic(&mut rng, n);
    let res = dyadic(&mut rng, n);
    let bias = dyadic(&mut rng, cols);
    let gamma: Vec<f32> = rng.vec(cols, 0.5, 1.5);
    let beta: Vec<f32> = rng.vec(cols, -0.5, 0.5);
    let dy: Vec<f32> = rng.vec(n, -1.0, 1.0);
    let dh: Vec<f32> = rng.vec(n, -1.0, 1.0);
    let e = 2f32.powi(-10);
    let dot = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(u, v)| *u as f64 * *v as f64)
            .sum::<f64>()
    };
    // LayerNorm (eps 0.1 keeps the curvature small).
    let dl = LayerNormDesc::from_rows(rows, cols, DType::F32, DType::F32, Affine::WeightBias, 0.1)
        .unwrap();
    let loss_ln = |x: &[f32], b: &[f32]| {
        let (h, o) = cpu::layer_norm::forward_residual::<f32, f32>(
            &dl,
            x,
            &res,
            Some(b),
            Some(&gamma[..]),
            Some(&beta[..]),
        )
        .unwrap();
        dot(&o.y, &dy) + dot(&h, &dh)
    };
    let (h, o) = cpu::layer_norm::forward_residual::<f32, f32>(
        &dl,
        &x,
        &res,
        Some(&bias[..]),
        Some(&gamma[..]),
        Some(&beta[..]),
    )
    .unwrap();
    let g = cpu::layer_norm::backward_residual::<f32, f32>(
        &dl,
        &h,
        &dy,
        Some(&dh[..]),
        (&o.mean, &o.rstd, Some(&o.mean_lo)),
        Some(&gamma[..]),
        true,
    )
    .unwrap();
    // RMSNorm.
    let dr = RmsNormDesc::from_rows(rows, cols, DType::F32, DType::F32, true, Some(0.1)).unwrap();
    let loss_rms = |x: &[f32], b: &[f32]| {
        let (h, o) =
            cpu::rms_norm::forward_residual::<f32, f32>(&dr, x, &res, Some(b), Some(&gamma[..]))
                .unwrap();
        dot(&o.y, &dy) + dot(&h, &dh)
    };
    let (hr, or) = cpu::rms_norm::forward_residual::<f32, f32>(
        &dr,
        &x,
        &res,
        Some(&bias[..]),
        Some(&gamma[..]),
    )
    .unwrap();
    let gr = cpu::rms_norm::backward_residual::<f32, f32>(
        &dr,
        &hr,
        &dy,
        Some(&dh[..]),
        &or.rstd,
        Some(&gamma[..]),
        true,
    )
    .unwrap();
    let ed = e as f64;
    for (name, loss, grad) in [
        ("layer_norm", &loss_ln as &dyn Fn(&[f32], &[f32]) -> f64, &g),
        ("rms_norm", &loss_rms, &gr),
    ] {
        for i in 0..n {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[i] += e;
            xm[i] -= e;
            let fd = (loss(&xp, &bias) - loss(&xm, &bias)) / (2.0 * ed);
            let got = grad.dx[i] as f64;
            assert!(
                (fd - got).abs() <= 2e-3 * (1.0 + got.abs()),
                "{name} dx[{i}]: fd {fd} got {got}"
            );
        }
        let db = grad.dbias.as_ref().unwrap();
        for c in 0..cols {
            let (mut bp, mut bm) = (bias.clone(), bias.clone());
            bp[c] += e;
            bm[c] -= e;
            let fd = (loss(&x, &bp) - loss(&x, &bm)) / (2.0 * ed);
            let got = db[c] as f64;
            assert!(
                (fd - got).abs() <= 2e-3 * (1.0 + got.abs()),
                "{name} dbias[{c}]: fd {fd} got {got}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Kernels on ptxsim
// ---------------------------------------------------------------------------------------

/// The op of a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Layer,
    Rms,
}

/// One fused-residual case.
#[derive(Clone, Copy, Debug)]
struct Case {
    op: Op,
    rows: usize,
    cols: usize,
    dtype: DType,
    param_dtype: DType,
    /// Element offset of x, the residual, dy and dh (1: misaligned inputs).
    oin: usize,
    /// Element offset of h, y and dx.
    oout: usize,
    bias: bool,
    dh: bool,
    /// Planned for a device with cooperative launches (the forward split tier's one-launch
    /// pass where it fits), else without (its two launches).
    coop: bool,
    seed: u64,
}

/// Everything read back from one run, widened to f64 (bitwise for f32; exact for 16-bit).
#[derive(Clone, Debug, Default, PartialEq)]
struct Got {
    h: Vec<f64>,
    y: Vec<f64>,
    mean: Vec<f64>,
    mean_lo: Vec<f64>,
    rstd: Vec<f64>,
    dx: Vec<f64>,
    dgamma: Vec<f64>,
    dbeta: Vec<f64>,
    /// The bias gradient (fused runs with a bias only).
    dbias: Vec<f64>,
    kernels: Vec<String>,
}

struct Inputs<T, P> {
    x: Vec<T>,
    res: Vec<T>,
    dy: Vec<T>,
    dh: Vec<T>,
    gamma: Vec<P>,
    beta: Vec<P>,
    bias: Option<Vec<P>>,
}

fn inputs<T: Element, P: Element>(c: &Case) -> Inputs<T, P> {
    let n = c.rows * c.cols;
    let mut rng = Rng::new(c.seed);
    Inputs {
        x: rng.vec(n, -2.0, 2.0),
        res: rng.vec(n, -2.0, 2.0),
        dy: rng.vec(n, -1.0, 1.0),
        dh: rng.vec(n, -1.0, 1.0),
        gamma: rng.vec(c.cols, 0.5, 1.5),
        beta: rng.vec(c.cols, -0.5, 0.5),
        bias: c.bias.then(|| rng.vec(c.cols, -1.0, 1.0)),
    }
}

fn ln_desc(c: &Case) -> LayerNormDesc {
    LayerNormDesc::from_rows(
        c.rows,
        c.cols,
        c.dtype,
        c.param_dtype,
        Affine::WeightBias,
        1e-5,
    )
    .unwrap()
}

fn rms_desc(c: &Case) -> RmsNormDesc {
    RmsNormDesc::from_rows(c.rows, c.cols, c.dtype, c.param_dtype, true, None).unwrap()
}

fn run(sim: &mut Sim, plan: &Plan, what: &str) -> Result<(), String> {
    sim.execute(plan)
        .map_err(|e| format!("{what}: {e}\n{plan}"))
}

/// Runs the fused forward and backward (`residual` given: fused; else the plain op on `x`),
/// backward from the forward's own statistics. `h_in_place`: h written over the residual.
fn run_op<T: Element + Default, P: Element + Default>(
    sim: &mut Sim,
    c: &Case,
    x: &[T],
    fused: Option<(&Inputs<T, P>, bool)>,
    inp: &Inputs<T, P>,
) -> Result<Got, String> {
    let (m, d) = (c.rows, c.cols);
    let n = m * d;
    // (An H100's shared memory: LayerNorm's wide bias-gradient backward needs 193 KiB.)
    let props = DeviceProps {
        cooperative_launch: c.coop,
        ..SIM_SM90_SHARED
    };
    let px = sim.upload(x, c.oin);
    let pg = sim.upload(&inp.gamma, 0);
    let pb = sim.upload(&inp.beta, 0);
    let y = sim.alloc::<T>(n, c.oout);
    let mean = sim.alloc::<f32>(m, 0);
    let mean_lo = sim.alloc::<f32>(m, 0);
    let rstd = sim.alloc::<f32>(m, 0);
    let (pres, ph, pbias) = match fused {
        Some((f, in_place)) => {
            let pr = sim.upload(&f.res, c.oin);
            let ph = if in_place {
                pr
            } else {
                sim.alloc::<T>(n, c.oout)
            };
            let pbias = f.bias.as_ref().map(|b| sim.upload(b, 0));
            (Some(pr), Some(ph), pbias)
        }
        None => (None, None, None),
    };
    let r = pres.map(|residual| ln::ResidualPtrs {
        residual,
        bias: pbias,
        h: ph.unwrap(),
    });
    let e = |e: warpnorm::Error| e.to_string();
    let mut kernels = Vec::new();
    let ws_f;
    let fwd = match c.op {
        Op::Layer => {
            let desc = ln_desc(c);
            ws_f = ln::workspace_bytes(&desc, ln::Direction::Forward, &props).map_err(e)?;
            let w = testkit::backend::row_norm_workspace(sim, ws_f);
            let p = ln::ForwardPtrs {
                x: px,
                y,
                gamma: Some(pg),
                beta: Some(pb),
                mean: Some(mean),
                rstd: Some(rstd),
                mean_lo: Some(mean_lo),
                workspace: w,
                workspace_bytes: ws_f as u64,
            };
            match &r {
                Some(r) => ln::plan_forward_residual(&desc, &p, r, &props),
                None => ln::plan_forward(&desc, &p, &props),
            }
        }
        Op::Rms => {
            let desc = rms_desc(c);
            ws_f = rms::workspace_bytes(&desc, rms::Direction::Forward, &props).map_err(e)?;
            let w = testkit::backend::row_norm_workspace(sim, ws_f);
            let p = rms::ForwardPtrs {
                x: px,
                y,
                weight: Some(pg),
                rstd: Some(rstd),
                workspace: w,
                workspace_bytes: ws_f as u64,
            };
            match &r {
                Some(r) => rms::plan_forward_residual(&desc, &p, r, &props),
                None => rms::plan_forward(&desc, &p, &props),
            }
        }
    }
    .map_err(|e| format!("plan forward: {e}"))?;
    run(sim, &fwd, "forward")?;
    kernels.extend(fwd.launches.iter().map(|l| l.kernel.clone()));
    let h = match ph {
        Some(ph) => to_f64(&sim.download::<T>(ph, n)),
        None => Vec::new(),
    };
    // Backward re-reads h (or x for the plain op).
    let pxb = ph.unwrap_or(px);
    let pdy = sim.upload(&inp.dy, c.oin);
    let pdh = fused.map(|_| sim.upload(&inp.dh, c.oin)).filter(|_| c.dh);
    let dx = sim.alloc::<T>(n, c.oout);
    let dg = sim.alloc::<P>(d, 0);
    let db = sim.alloc::<P>(d, 0);
    let with_dbias = pbias.is_some();
    let pdbias = with_dbias.then(|| sim.alloc::<P>(d, 0));
    let grads = ln::ResidualGrads {
        dh: pdh,
        dbias: pdbias,
    };
    let bwd = match c.op {
        Op::Layer => {
            let desc = ln_desc(c);
            let ws = ln::workspace_bytes_residual(&desc, with_dbias, &props).map_err(e)?;
            let w = sim.alloc::<f32>(ws.div_ceil(4), 0);
            let p = ln::BackwardPtrs {
                x: pxb,
                dy: pdy,
                dx,
                gamma: Some(pg),
                mean,
                rstd,
                mean_lo: Some(mean_lo),
                dgamma: Some(dg),
                dbeta: Some(db),
                workspace: w,
                workspace_bytes: ws as u64,
            };
            ln::plan_backward_residual(&desc, &p, &grads, &props)
        }
        Op::Rms => {
            let desc = rms_desc(c);
            let ws = rms::workspace_bytes_residual(&desc, with_dbias, &props).map_err(e)?;
            let w = sim.alloc::<f32>(ws.div_ceil(4), 0);
            let p = rms::BackwardPtrs {
                x: pxb,
                dy: pdy,
                dx,
                weight: Some(pg),
                rstd,
                dweight: Some(dg),
                workspace: w,
                workspace_bytes: ws as u64,
            };
            rms::plan_backward_residual(&desc, &p, &grads, &props)
        }
    }
    .map_err(|e| format!("plan backward: {e}"))?;
    run(sim, &bwd, "backward")?;
    kernels.extend(bwd.launches.iter().map(|l| l.kernel.clone()));
    Ok(Got {
        h,
        y: to_f64(&sim.download::<T>(y, n)),
        mean: if c.op == Op::Layer {
            to_f64(&sim.download::<f32>(mean, m))
        } else {
            Vec::new()
        },
        mean_lo: if c.op == Op::Layer {
            to_f64(&sim.download::<f32>(mean_lo, m))
        } else {
            Vec::new()
        },
        rstd: to_f64(&sim.download::<f32>(rstd, m)),
        dx: to_f64(&sim.download::<T>(dx, n)),
        dgamma: to_f64(&sim.download::<P>(dg, d)),
        dbeta: if c.op == Op::Layer {
            to_f64(&sim.download::<P>(db, d))
        } else {
            Vec::new()
        },
        dbias: pdbias.map_or(Vec::new(), |b| to_f64(&sim.download::<P>(b, d))),
        kernels,
    })
}

/// The bias gradient against the column sums (in f64) of the stored dx: the backward kernels
/// sum the f32 dx before its rounding to the activation dtype `act` (within u_act |dx| of the
/// stored value, or half its smallest subnormal below the normal range), see
/// [`check_column_sums`].
pub(crate) fn check_dbias(
    rows: usize,
    cols: usize,
    dx: &[f64],
    dbias: &[f64],
    param: DType,
    act: DType,
) -> Result<(), String> {
    let round = (act.unit_roundoff(), tiny(act) / 2.0);
    check_column_sums("dbias", rows, cols, dx, dbias, param, round)
}

/// Column sums `sums` (a parameter gradient in `param`) against the f64 column sums of `src`,
/// whose values the kernels summed in f32 to within `round` = (relative, absolute) of each
/// ((0, 0): exactly those values): through at most rows + 16 additions each (the backward: a
/// thread's rows and the partial rows' merges; the column sum: a row lane's share of its
/// chunk, the 8 row lanes, a finalize lane's share of the chunks, the 8 finalize lanes), so
/// |error| <= (rel (1 + gamma) + gamma_(rows + 16)) * sum |src| + rows * abs (1 + gamma),
/// plus one rounding to the parameter dtype.
pub(crate) fn check_column_sums(
    what: &str,
    rows: usize,
    cols: usize,
    src: &[f64],
    sums: &[f64],
    param: DType,
    round: (f64, f64),
) -> Result<(), String> {
    if sums.len() != cols {
        return Err(format!("{what} has {} values, expected {cols}", sums.len()));
    }
    let u32_ = DType::F32.unit_roundoff();
    let k = (rows + 16) as f64;
    let gamma = k * u32_ / (1.0 - k * u32_);
    for c in 0..cols {
        let (mut sum, mut abs) = (0.0f64, 0.0f64);
        for r in 0..rows {
            sum += src[r * cols + c];
            abs += src[r * cols + c].abs();
        }
        let (rel, abs_round) = round;
        let f32_err = (rel * (1.0 + gamma) + gamma) * abs + rows as f64 * abs_round * (1.0 + gamma);
        let tol = f32_err + param.unit_roundoff() * (sum.abs() + f32_err) + 1e-38;
        let err = (sums[c] - sum).abs();
        if err.is_nan() || err > tol {
            return Err(format!(
                "{what}[{c}]: got {} f64 column sum {sum} (tol {tol:e})",
                sums[c]
            ));
        }
    }
    Ok(())
}

/// Bitwise equality with NaN equal to NaN.
fn same(what: &str, a: &[f64], b: &[f64]) -> Result<(), String> {
    if a.len() != b.len() {
        return Err(format!("{what}: {} vs {} values", a.len(), b.len()));
    }
    for (i, (u, v)) in a.iter().zip(b).enumerate() {
        if u.to_bits() != v.to_bits() && !(u.is_nan() && v.is_nan()) {
            return Err(format!("{what}[{i}]: {u} vs {v}"));
        }
    }
    Ok(())
}

/// Runs one case on compute_`arch`; returns the kernels it ran.
fn check_case<T: Element + Default, P: Element + Default>(
    arch: u32,
    c: &Case,
) -> Result<Vec<String>, String> {
    let inp: Inputs<T, P> = inputs(c);
    let ctx = |e: String| format!("{c:?}: {e}");
    let mut sim = Sim::new(arch);
    let got = run_op::<T, P>(&mut sim, c, &inp.x, Some((&inp, false)), &inp).map_err(ctx)?;
    // h: exactly the reference's one rounding.
    let h_ref = residual_add::<T, P>(c.rows, c.cols, &inp.x, &inp.res, inp.bias.as_deref())
        .map_err(|e| ctx(e.to_string()))?;
    same("h", &got.h, &to_f64(&h_ref)).map_err(ctx)?;
    // y and the statistics: those of the plain kernels on the stored h; the parameter
    // gradients too (dh does not enter them). The plain backward runs on h without dh.
    let mut sim2 = Sim::new(arch);
    let plain = run_op::<T, P>(&mut sim2, c, &h_ref, None, &inp).map_err(ctx)?;
    same("y", &got.y, &plain.y).map_err(ctx)?;
    same("mean", &got.mean, &plain.mean).map_err(ctx)?;
    same("mean_lo", &got.mean_lo, &plain.mean_lo).map_err(ctx)?;
    same("rstd", &got.rstd, &plain.rstd).map_err(ctx)?;
    same("dgamma", &got.dgamma, &plain.dgamma).map_err(ctx)?;
    // The bias gradient: summed by the backward kernels in dbeta's accumulators; LayerNorm's
    // dbeta then beside it in the block, wide and split tiers (in shared memory, in the same
    // order as the plain kernels' accumulators: bitwise their dbeta), else by two launches
    // before the backward (the column sum of dy, its finalize).
    let mut fused_kernels = got.kernels.clone();
    let in_kernel_tier = plain.kernels.iter().any(|k| {
        k.contains("_bwd_")
            && (k.contains("_block_") || k.contains("_wide_") || k.contains("_split_dx_"))
    });
    let colsum = c.bias && c.op == Op::Layer && !in_kernel_tier;
    if colsum {
        let dy = to_f64(&inp.dy);
        check_column_sums(
            "dbeta",
            c.rows,
            c.cols,
            &dy,
            &got.dbeta,
            c.param_dtype,
            (0.0, 0.0),
        )
        .map_err(ctx)?;
        // After the forward's launches (the plain forward's count).
        let at = plain
            .kernels
            .iter()
            .position(|k| k.contains("_bwd_"))
            .ok_or_else(|| ctx("no backward launch".into()))?;
        let pair: Vec<String> = fused_kernels.drain(at..at + 2).collect();
        let want = [
            format!("warpnorm_layer_norm_bwd_{}_colsum", c.dtype.name()),
            format!("warpnorm_layer_norm_bwd_{}_finalize", c.param_dtype.name()),
        ];
        if pair != want {
            return Err(ctx(format!("the backward starts {pair:?}, not {want:?}")));
        }
    } else {
        same("dbeta", &got.dbeta, &plain.dbeta).map_err(ctx)?;
    }
    if c.bias {
        check_dbias(c.rows, c.cols, &got.dx, &got.dbias, c.param_dtype, c.dtype).map_err(ctx)?;
    } else if !got.dbias.is_empty() {
        return Err(ctx("dbias read back without a bias".into()));
    }
    // The same launches, the forward's first one the fused variant (`res_<tier>_vec`, and
    // `res_split_stats_scalar`); the other scalar kernels take the residual at run time.
    // (Every case has a weight, so the backward's finalize is there in both, or in neither
    // for a single-block grid; with dbias it also writes dbias, and the block and wide tiers
    // run their `block_dbias` / `wide_dbias` entry points.)
    let unfused: Vec<String> = fused_kernels
        .iter()
        .map(|k| {
            k.replace("_res_", "_")
                .replace("_block_dbias_", "_block_")
                .replace("_wide_dbias_", "_wide_")
                .replace("_split_dx_dbias_", "_split_dx_")
        })
        .collect();
    let own_entry = |k: &String| k.contains("_block_dbias_") || k.contains("_wide_dbias_");
    if c.bias != fused_kernels.iter().any(own_entry)
        && plain
            .kernels
            .iter()
            .any(|k| k.contains("_bwd_") && (k.contains("_block_") || k.contains("_wide_")))
    {
        return Err(ctx(format!("block tier entry {fused_kernels:?}")));
    }
    let fused_name =
        plain.kernels[0].ends_with("_vec") || plain.kernels[0].contains("_split_stats_");
    if unfused != plain.kernels || got.kernels[0].contains("_res_") != fused_name {
        return Err(ctx(format!(
            "kernels {:?} vs plain {:?}",
            got.kernels, plain.kernels
        )));
    }
    // dx = round(D + dh), D the kernel's f32 dx, against the reference round(D64 + dh): with
    // the plain run's error |round(D) - round(D64)|, |D - D64| <= that + u (|round(D)| +
    // |round(D64)|), and each side's rounding adds u |result|.
    let mean_f: Vec<f32> = got.mean.iter().map(|v| *v as f32).collect();
    let mean_lo_f: Vec<f32> = got.mean_lo.iter().map(|v| *v as f32).collect();
    let rstd_f: Vec<f32> = got.rstd.iter().map(|v| *v as f32).collect();
    let dh = c.dh.then_some(&inp.dh[..]);
    let (rf, pf) = match c.op {
        Op::Layer => {
            let desc = ln_desc(c);
            let f = |dh| {
                cpu::layer_norm::backward_residual::<T, P>(
                    &desc,
                    &h_ref,
                    &inp.dy,
                    dh,
                    (&mean_f, &rstd_f, Some(&mean_lo_f)),
                    Some(&inp.gamma[..]),
                    false,
                )
            };
            (f(dh), f(None))
        }
        Op::Rms => {
            let desc = rms_desc(c);
            let f = |dh| {
                cpu::rms_norm::backward_residual::<T, P>(
                    &desc,
                    &h_ref,
                    &inp.dy,
                    dh,
                    &rstd_f,
                    Some(&inp.gamma[..]),
                    false,
                )
            };
            (f(dh), f(None))
        }
    };
    let (rf, pf) = (
        rf.map_err(|e| ctx(e.to_string()))?,
        pf.map_err(|e| ctx(e.to_string()))?,
    );
    let (r, p) = (to_f64(&rf.dx), to_f64(&pf.dx));
    let u = c.dtype.unit_roundoff();
    for i in 0..r.len() {
        let tol = (plain.dx[i] - p[i]).abs()
            + K_ROUND * u * (r[i].abs() + p[i].abs() + plain.dx[i].abs())
            + 2.0 * tiny(c.dtype);
        let err = (got.dx[i] - r[i]).abs();
        if err.is_nan() || err > tol {
            return Err(ctx(format!(
                "dx[{i}]: got {} expected {} (plain got {} ref {}, tol {tol:e})",
                got.dx[i], r[i], plain.dx[i], p[i]
            )));
        }
    }
    // Bitwise rerun, and h written over the residual in place: the same bits.
    let mut sim3 = Sim::new(arch);
    let again = run_op::<T, P>(&mut sim3, c, &inp.x, Some((&inp, true)), &inp).map_err(ctx)?;
    if again != got {
        return Err(ctx("the in-place rerun differs".into()));
    }
    Ok(got.kernels)
}

fn check_dyn(arch: u32, c: &Case) -> Result<Vec<String>, String> {
    match (c.dtype, c.param_dtype) {
        (DType::F32, DType::F32) => check_case::<f32, f32>(arch, c),
        (DType::F16, DType::F16) => check_case::<f16, f16>(arch, c),
        (DType::F16, DType::F32) => check_case::<f16, f32>(arch, c),
        (DType::BF16, DType::BF16) => check_case::<bf16, bf16>(arch, c),
        (DType::BF16, DType::F32) => check_case::<bf16, f32>(arch, c),
        (t, p) => Err(format!("unsupported dtype pair {t}/{p}")),
    }
}

/// (cols, rows) reaching every tier on `DeviceProps::SIM` with an H100's shared memory
/// (`SIM_SM90_SHARED`; the RMSNorm sweep's representatives, rows capped at [`MAX_ELEMS`]
/// elements by `sim_rows`): subwarp, warp, block, wide (backward), split, forward and
/// backward.
const SHAPES: [(usize, usize); 10] = [
    (7, 64),
    (64, 257),
    (128, 3),
    (512, 64),
    (768, 257),
    (2048, 16),
    // Two wide-tier shapes in a row: the bias alternates every two cases, so each pair's
    // aligned case runs the wide tier once with and once without it.
    (8200, 4),
    (9000, 4),
    (12288, 3),
    (65537, 1),
];
/// Largest simulated problem (elements).
const MAX_ELEMS: usize = 1 << 14;

/// Every tier and dtype pair of both ops, vector and scalar variants, with and without a
/// bias and dh, on compute_80 (the PTX the sweeps run with the most shapes).
#[test]
fn sim_fused_residual_every_tier_and_dtype() {
    if skip_without_kernels("fused residual sweep") {
        return;
    }
    let arch = 80;
    let mut ran = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    let mut k = 0u64;
    for op in [Op::Layer, Op::Rms] {
        for &(dtype, param_dtype) in &DTYPE_PAIRS {
            for &(cols, rows) in &SHAPES {
                for (oin, oout) in [(0, 0), (1, 0)] {
                    k += 1;
                    let c = Case {
                        op,
                        rows: sim_rows(rows, cols, MAX_ELEMS),
                        cols,
                        dtype,
                        param_dtype,
                        oin,
                        oout,
                        // Both variants of every shape's pair get a bias somewhere in the
                        // sweep (the block tier's vector and scalar `block_dbias` kernels).
                        bias: (k / 2).is_multiple_of(2),
                        dh: !k.is_multiple_of(3),
                        // The longest rows plan without cooperative launches: the two-launch
                        // split tier's fused vector kernels run as well as the one-launch pass.
                        coop: cols != 65537,
                        seed: k,
                    };
                    match check_dyn(arch, &c) {
                        Ok(ks) => ran.extend(ks),
                        Err(e) => failures.push(e),
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    // Every fused entry point the build exports ran (each tier, dtype pair and variant of
    // both ops, the block tier's bias-gradient entries and LayerNorm's column sums), and every
    // backward tier with dh.
    let missing: Vec<&str> = warpnorm::kernels::all_entries()
        .filter(|k| {
            (k.contains("_res_")
                || k.ends_with("_colsum")
                || k.contains("_block_dbias_")
                || k.contains("_wide_dbias_")
                || k.contains("_split_dx_dbias_"))
                && !ran.contains(*k)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "fused entry points never run: {missing:?}"
    );
    assert!(ran.iter().filter(|k| k.contains("_res_")).count() >= 50);
    // The scalar variant's forward tiers that take the residual at run time ran too.
    for tier in ["subwarp", "warp", "block"] {
        for op in ["layer_norm", "rms_norm"] {
            assert!(
                ran.iter()
                    .any(|k| k.starts_with(&format!("warpnorm_{op}_fwd_"))
                        && k.ends_with(&format!("_{tier}_scalar"))),
                "{op} fused residual forward never ran the scalar {tier} tier"
            );
        }
    }
    for op in ["layer_norm", "rms_norm"] {
        for tier in ["subwarp", "warp", "block", "split_sums", "split_dx"] {
            for v in ["vec", "scalar"] {
                let hit = ran.iter().any(|k| {
                    k.starts_with(&format!("warpnorm_{op}_bwd_"))
                        && k.ends_with(&format!("_{tier}_{v}"))
                });
                assert!(hit, "no {op} backward {tier} {v} kernel ran: {ran:?}");
            }
        }
        // The wide tier (vector variant only) without the bias gradient, dh or not.
        let hit = ran
            .iter()
            .any(|k| k.starts_with(&format!("warpnorm_{op}_bwd_")) && k.ends_with("_wide_vec"));
        assert!(hit, "no {op} backward wide kernel ran: {ran:?}");
    }
}

/// The fused backward's extra buffers with dh alone.
fn dh_only(dh: u64) -> ln::ResidualGrads {
    ln::ResidualGrads {
        dh: Some(dh),
        dbias: None,
    }
}

/// The fused residual forward's persistent grid is one wave of the kernel the plan launches
/// (`res_<tier>`, more registers than the plain kernel of the tier): on an H200, LayerNorm and
/// RMSNorm, 16384 rows of 768 and 1024 columns (the warp tier), 16-bit and mixed pairs. Sized
/// by the plain warp kernel's occupancy, the bf16 grid was 528 blocks, 1.33 waves of its own.
#[test]
fn plan_fused_forward_grid_is_one_wave_of_its_own_kernel() {
    let props = DeviceProps::H200;
    let mut checked = 0;
    for op in [Op::Layer, Op::Rms] {
        for (dtype, param_dtype) in [(DType::BF16, DType::BF16), (DType::BF16, DType::F32)] {
            for cols in [768usize, 1024] {
                let rows = 16384usize;
                let n = (rows * cols) as u64;
                let base = 1u64 << 32;
                let r = ln::ResidualPtrs {
                    residual: base + 2 * n,
                    bias: None,
                    h: base + 4 * n,
                };
                let plan = match op {
                    Op::Layer => {
                        let desc = LayerNormDesc::from_rows(
                            rows,
                            cols,
                            dtype,
                            param_dtype,
                            Affine::Weight,
                            1e-5,
                        )
                        .unwrap();
                        let p = ln::ForwardPtrs {
                            x: base,
                            y: base + 6 * n,
                            gamma: Some(base + 8 * n),
                            beta: None,
                            mean: Some(base + 9 * n),
                            rstd: Some(base + 10 * n),
                            mean_lo: Some(base + 11 * n),
                            workspace: 0,
                            workspace_bytes: 0,
                        };
                        ln::plan_forward_residual(&desc, &p, &r, &props).unwrap()
                    }
                    Op::Rms => {
                        let desc =
                            RmsNormDesc::from_rows(rows, cols, dtype, param_dtype, true, None)
                                .unwrap();
                        let p = rms::ForwardPtrs {
                            x: base,
                            y: base + 6 * n,
                            weight: Some(base + 8 * n),
                            rstd: Some(base + 10 * n),
                            workspace: 0,
                            workspace_bytes: 0,
                        };
                        rms::plan_forward_residual(&desc, &p, &r, &props).unwrap()
                    }
                };
                assert_eq!(plan.launches.len(), 1, "{plan}");
                let l = &plan.launches[0];
                assert!(l.kernel.ends_with("_res_warp_vec"), "{}", l.kernel);
                let threads = l.block[0] * l.block[1];
                // Only a build without kernels lacks the ptxas figures.
                let Some(res) = occupancy::kernel_resources(&l.kernel, &props) else {
                    if kernels::BUILT {
                        panic!("{}: no ptxas figures", l.kernel);
                    }
                    continue;
                };
                let resident = occupancy::resident_blocks(Some(res), threads, 0, &props);
                assert_eq!(
                    l.grid[0],
                    props.sm_count * resident,
                    "{}: {} blocks, {resident} resident per SM",
                    l.kernel,
                    l.grid[0]
                );
                checked += 1;
            }
        }
    }
    assert!(checked == 8 || !kernels::BUILT, "{checked} plans checked");
}

/// Bad calls are Errors before any launch: h overlapping y, a misaligned h, a null residual,
/// a dh partly over dx; the documented in-place pairs (h over the residual or x, dx over dh)
/// are accepted.
#[test]
fn plan_residual_rejects_bad_buffers() {
    let props = DeviceProps::SIM;
    let desc = RmsNormDesc::from_rows(4, 64, DType::F32, DType::F32, false, None).unwrap();
    let base = 1u64 << 20;
    let p = rms::ForwardPtrs {
        x: base,
        y: base + 4096,
        weight: None,
        rstd: None,
        workspace: 0,
        workspace_bytes: 0,
    };
    let good = ln::ResidualPtrs {
        residual: base + 8192,
        bias: None,
        h: base + 12288,
    };
    assert!(rms::plan_forward_residual(&desc, &p, &good, &props).is_ok());
    // h over the residual and over x: allowed in place.
    assert!(rms::plan_forward_residual(
        &desc,
        &p,
        &ln::ResidualPtrs {
            h: good.residual,
            ..good
        },
        &props
    )
    .is_ok());
    assert!(
        rms::plan_forward_residual(&desc, &p, &ln::ResidualPtrs { h: base, ..good }, &props)
            .is_ok()
    );
    // h over y: both outputs.
    assert!(
        rms::plan_forward_residual(&desc, &p, &ln::ResidualPtrs { h: p.y, ..good }, &props)
            .is_err()
    );
    // A misaligned h, a null residual.
    assert!(rms::plan_forward_residual(
        &desc,
        &p,
        &ln::ResidualPtrs {
            h: good.h + 1,
            ..good
        },
        &props
    )
    .is_err());
    assert!(rms::plan_forward_residual(
        &desc,
        &p,
        &ln::ResidualPtrs {
            residual: 0,
            ..good
        },
        &props
    )
    .is_err());
    // dx over dh is the in-place pair; a misaligned dh partly over dx is refused.
    let b = rms::BackwardPtrs {
        x: base,
        dy: base + 4096,
        dx: base + 8192,
        weight: None,
        rstd: base + 16384,
        dweight: None,
        workspace: 0,
        workspace_bytes: 0,
    };
    assert!(rms::plan_backward_residual(&desc, &b, &dh_only(base + 12288), &props).is_ok());
    assert!(rms::plan_backward_residual(&desc, &b, &dh_only(b.dx), &props).is_ok());
    assert!(rms::plan_backward_residual(&desc, &b, &dh_only(b.dx + 2), &props).is_err());
}

/// The bias gradient on the other PTX targets the sweeps run (compute_75 and compute_90):
/// both ops, every dtype pair, through the whole fused case (so dbias is checked against the
/// column sums of the stored dx, LayerNorm's dbeta against those of dy, and everything else
/// as in the compute_80 sweep), with several row chunks of LayerNorm's column sum and its
/// vector form (64 columns, aligned dy), several chunks and the element-wise one (72
/// columns, dy one element off), and 7 columns (fewer than a pack); and the block tier's
/// `block_dbias` kernels (LayerNorm's sum dbeta in shared memory beside dbias), vector and
/// scalar, on a multi-block grid (768 columns, 40 rows: partial rows and the finalize's three
/// outputs) and a single block (2048 columns, 16 rows, x one element off: outputs written
/// directly), and the split tier's `split_dx_dbias` (12288 columns, 3 rows; 6000 columns, 2
/// rows, x one element off). Every `_colsum`, `_block_dbias_` and `_split_dx_dbias_` entry
/// point runs on both targets.
#[test]
fn sim_dbias_compute_75_and_90() {
    if skip_without_kernels("dbias on compute_75 and compute_90") {
        return;
    }
    // (cols, rows, x's and dx's element offsets): the warp tiers' shapes, one per case in
    // turn, then both block-tier shapes for every case.
    let shapes = [
        (64usize, 257usize, 0usize, 0usize),
        (72, 130, 1, 1),
        (7, 200, 0, 0),
    ];
    let block_shapes = [
        (768usize, 40usize, 0usize, 0usize),
        (2048, 16, 1, 0),
        (12288, 3, 0, 0),
        (6000, 2, 1, 0),
        (8200, 4, 0, 0),
    ];
    let mut failures = Vec::new();
    for arch in [75, 90] {
        let mut ran = std::collections::BTreeSet::new();
        let mut k = 1000u64;
        for op in [Op::Layer, Op::Rms] {
            for &(dtype, param_dtype) in &DTYPE_PAIRS {
                k += 1;
                let warp_shape = shapes[(k % 3) as usize];
                for (cols, rows, oin, oout) in std::iter::once(warp_shape).chain(block_shapes) {
                    let c = Case {
                        op,
                        rows,
                        cols,
                        dtype,
                        param_dtype,
                        oin,
                        oout,
                        bias: true,
                        dh: true,
                        coop: true,
                        seed: k,
                    };
                    let dg = ln::column_sum_geometry(&ln_desc(&c), &DeviceProps::SIM);
                    if cols == 64 && dg.chunks < 2 {
                        failures.push(format!("{c:?}: {dg:?} has one chunk"));
                    }
                    match check_dyn(arch, &c) {
                        Ok(ks) => ran.extend(ks),
                        Err(e) => failures.push(format!("compute_{arch}: {e}")),
                    }
                }
            }
        }
        let missing: Vec<&str> = warpnorm::kernels::all_entries()
            .filter(|k| {
                (k.ends_with("_colsum")
                    || k.contains("_block_dbias_")
                    || k.contains("_wide_dbias_")
                    || k.contains("_split_dx_dbias_"))
                    && !ran.contains(*k)
            })
            .collect();
        if !missing.is_empty() {
            failures.push(format!("compute_{arch}: never run: {missing:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// No rows: the bias gradient is zero (the finalize alone, with no partial rows), and so is
/// the weight's, for both ops; nothing else is launched.
#[test]
fn sim_dbias_without_rows_is_zero() {
    if skip_without_kernels("dbias without rows") {
        return;
    }
    let props = DeviceProps::SIM;
    let cols = 40usize;
    for op in [Op::Layer, Op::Rms] {
        let mut sim = Sim::new(80);
        let sentinel = vec![7.0f32; cols];
        let dg = sim.upload(&sentinel, 0);
        let db = sim.upload(&sentinel, 0);
        let dbias = sim.upload(&sentinel, 0);
        let gamma = sim.upload(&vec![1.0f32; cols], 0);
        let some = 1u64 << 16; // 0 elements: any aligned address
        let g = ln::ResidualGrads {
            dh: Some(some),
            dbias: Some(dbias),
        };
        let plan = match op {
            Op::Layer => {
                let desc = LayerNormDesc::from_rows(
                    0,
                    cols,
                    DType::F32,
                    DType::F32,
                    Affine::WeightBias,
                    1e-5,
                )
                .unwrap();
                assert_eq!(
                    ln::workspace_bytes_residual(&desc, true, &props).unwrap(),
                    0
                );
                let p = ln::BackwardPtrs {
                    x: some,
                    dy: some,
                    dx: some,
                    gamma: Some(gamma),
                    mean: some,
                    rstd: some,
                    mean_lo: Some(some),
                    dgamma: Some(dg),
                    dbeta: Some(db),
                    workspace: 0,
                    workspace_bytes: 0,
                };
                ln::plan_backward_residual(&desc, &p, &g, &props).unwrap()
            }
            Op::Rms => {
                let desc =
                    RmsNormDesc::from_rows(0, cols, DType::F32, DType::F32, true, None).unwrap();
                let p = rms::BackwardPtrs {
                    x: some,
                    dy: some,
                    dx: some,
                    weight: Some(gamma),
                    rstd: some,
                    dweight: Some(dg),
                    workspace: 0,
                    workspace_bytes: 0,
                };
                rms::plan_backward_residual(&desc, &p, &g, &props).unwrap()
            }
        };
        assert!(
            plan.launches
                .iter()
                .all(|l| l.kernel.ends_with("_finalize")),
            "{plan}"
        );
        sim.execute(&plan).unwrap();
        assert_eq!(sim.download::<f32>(dbias, cols), vec![0.0; cols], "{op:?}");
        assert_eq!(sim.download::<f32>(dg, cols), vec![0.0; cols], "{op:?}");
        if op == Op::Layer {
            assert_eq!(sim.download::<f32>(db, cols), vec![0.0; cols]);
        }
    }
}

/// The bias gradient's buffers and workspace are checked before any launch: dbias over dx or
/// over dweight, a misaligned or short dbias, and a workspace too small for its partial rows
/// (the error names the size `workspace_bytes_residual` returns); the same call with the
/// full workspace plans the backward and one finalize (dweight and dbias), nothing more.
#[test]
fn plan_dbias_rejects_bad_buffers() {
    let props = DeviceProps::H100;
    let (rows, cols) = (4096usize, 1024usize);
    let desc = RmsNormDesc::from_rows(rows, cols, DType::BF16, DType::F32, true, None).unwrap();
    let plain = rms::workspace_bytes(&desc, rms::Direction::Backward, &props).unwrap();
    let need = rms::workspace_bytes_residual(&desc, true, &props).unwrap();
    assert_eq!(
        rms::workspace_bytes_residual(&desc, false, &props).unwrap(),
        plain
    );
    // dbias's partial rows, one per block of a multi-block grid.
    assert!(need >= plain + 2 * cols * 4, "{need} {plain}");
    let n = (rows * cols) as u64;
    let base = 1u64 << 32;
    let p = rms::BackwardPtrs {
        x: base,
        dy: base + 2 * n,
        dx: base + 4 * n,
        weight: Some(base + 6 * n),
        rstd: base + 6 * n + 4096 * 4,
        dweight: Some(base + 6 * n + 8 * 4096),
        workspace: base + 8 * n,
        workspace_bytes: need as u64,
    };
    let dbias = base + 6 * n + 16 * 4096;
    let g = ln::ResidualGrads {
        dh: Some(base + 10 * n),
        dbias: Some(dbias),
    };
    let plan = rms::plan_backward_residual(&desc, &p, &g, &props).unwrap();
    let names: Vec<&str> = plan.launches.iter().map(|l| l.kernel.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("warpnorm_rms_norm_bwd_bf16_f32_"));
    assert_eq!(names[1], "warpnorm_rms_norm_bwd_f32_finalize");
    let rejected = |g: ln::ResidualGrads, p: rms::BackwardPtrs| {
        rms::plan_backward_residual(&desc, &p, &g, &props).is_err()
    };
    // dbias over dx, over dweight, misaligned, partly past a buffer end is not ours to see;
    // a null dbias.
    for bad in [p.dx, p.dweight.unwrap(), dbias + 2, 0] {
        assert!(
            rejected(
                ln::ResidualGrads {
                    dbias: Some(bad),
                    ..g
                },
                p
            ),
            "dbias at {bad:#x} accepted"
        );
    }
    // A workspace large enough for the plain backward only.
    let e = rms::plan_backward_residual(
        &desc,
        &rms::BackwardPtrs {
            workspace_bytes: plain as u64,
            ..p
        },
        &g,
        &props,
    )
    .unwrap_err();
    assert!(
        matches!(e, warpnorm::Error::Workspace { needed, given } if needed == need && given == plain),
        "{e}"
    );
}

/// A LayerNorm backward call with a bias, the bias gradient and dh, of `rows` x `cols`
/// bf16/f32 on an H100, with `workspace_bytes` of workspace and dx over dy.
fn ln_dbias_call(
    rows: usize,
    cols: usize,
    workspace_bytes: u64,
) -> (LayerNormDesc, ln::BackwardPtrs, ln::ResidualGrads) {
    let desc = LayerNormDesc::from_rows(
        rows,
        cols,
        DType::BF16,
        DType::F32,
        Affine::WeightBias,
        1e-5,
    )
    .unwrap();
    // Buffer i at base + i * 2^36: apart for any size these tests plan.
    let at = |i: u64| (1u64 << 32) + i * (1u64 << 36);
    let dy = at(1);
    let p = ln::BackwardPtrs {
        x: at(0),
        dy,
        dx: dy, // in place over dy
        gamma: Some(at(2)),
        mean: at(3),
        rstd: at(4),
        mean_lo: Some(at(5)),
        dgamma: Some(at(6)),
        dbeta: Some(at(7)),
        workspace: at(8),
        workspace_bytes,
    };
    let g = ln::ResidualGrads {
        dh: Some(at(9)),
        dbias: Some(at(10)),
    };
    (desc, p, g)
}

/// LayerNorm with a bias and the bias gradient in the block tier and, on an H100 with 12288
/// columns, the wide tier: one backward launch (the `block_dbias` / `wide_dbias` kernel, which
/// sums dbias in its second accumulators and dbeta in shared memory, with the dynamic shared
/// memory for that) and one finalize for dgamma, dbias and dbeta; the workspace is the plain backward's plus one set of partial rows (dbeta's). A
/// workspace one byte short is refused with the size the query returns.
#[test]
fn plan_layer_norm_dbias_block_tier_sums_dbeta_itself() {
    for (rows, cols, tier, smem) in [
        (4096usize, 1024usize, "block_dbias", 512 * 16 * 4),
        (16384, 12288, "wide_dbias", 3 * 512 * 32 * 4),
    ] {
        let props = DeviceProps::H100;
        let (desc, _, _) = ln_dbias_call(rows, cols, 0);
        let plain = ln::workspace_bytes(&desc, ln::Direction::Backward, &props).unwrap();
        let need = ln::workspace_bytes_residual(&desc, true, &props).unwrap();
        let (_, p, g) = ln_dbias_call(rows, cols, need as u64);
        let plan = ln::plan_backward_residual(&desc, &p, &g, &props).unwrap();
        let names: Vec<&str> = plan.launches.iter().map(|l| l.kernel.as_str()).collect();
        assert_eq!(
            names,
            [
                format!("warpnorm_layer_norm_bwd_bf16_f32_{tier}_vec"),
                "warpnorm_layer_norm_bwd_f32_finalize".to_string()
            ]
        );
        let main = &plan.launches[0];
        let a: WnLayerNormBwdArgs = main.args.get().expect("backward args");
        let grid = main.grid[0] as usize;
        assert!(grid > 1, "{grid}");
        let set = (grid * ln::plan::part_stride(cols as u64) as usize * 4)
            .next_multiple_of(ln::plan::WORKSPACE_ALIGN as usize);
        assert_eq!(need, plain + set, "{need} {plain} {set}");
        // The dy sums' slots: 16 floats of each of 512 threads (compute capability 9.0); the wide
        // tier's three arrays of 32 (dgamma, dbias, dbeta).
        assert!(
            main.shared_mem_bytes >= smem
                && (tier == "block_dbias" || main.shared_mem_bytes == smem),
            "{}",
            main.shared_mem_bytes
        );
        assert_eq!(a.db_dx, 1);
        assert_ne!(a.dy_sum_part, 0);
        assert_eq!(a.dy_sum, 0);
        let parts = [a.dgamma_part, a.dbeta_part, a.dy_sum_part];
        assert!(parts
            .iter()
            .all(|&q| q >= p.workspace && q + set as u64 <= p.workspace + need as u64));
        assert!(parts[0] != parts[1] && parts[1] != parts[2] && parts[0] != parts[2]);
        let f: WnLayerNormFinalizeArgs = plan.launches[1].args.get().expect("finalize args");
        assert_eq!(
            (f.dgamma_part, f.dbeta_part, f.dy_sum_part),
            (a.dgamma_part, a.dbeta_part, a.dy_sum_part)
        );
        assert_eq!(
            (f.dgamma, f.dbeta, f.dy_sum),
            (p.dgamma.unwrap(), g.dbias.unwrap(), p.dbeta.unwrap())
        );
        assert_eq!(f.part_rows as usize, grid);
        let short = ln::BackwardPtrs {
            workspace_bytes: need as u64 - 1,
            ..p
        };
        let e = ln::plan_backward_residual(&desc, &short, &g, &props).unwrap_err();
        assert!(
            matches!(e, warpnorm::Error::Workspace { needed, given } if needed == need && given == need - 1),
            "{e}"
        );
    }
}

/// The split tier with the bias gradient: split_sums, then the `split_dx_dbias` kernel, which
/// sums dbeta in shared memory beside dbias (with the dy sums' shared memory): with 16384 rows
/// of 12288 on an A100 (whose 163 KiB of shared memory do not hold the wide tier's three
/// arrays) into partial rows and one finalize of dgamma, dbias and dbeta; with 4 rows of 2^20
/// on an H100 (one block of rows) written directly. No column sum either way.
#[test]
fn plan_layer_norm_dbias_split_tier_sums_dbeta_itself() {
    for (props, rows, cols) in [
        (DeviceProps::A100, 16384usize, 12288usize),
        (DeviceProps::H100, 4, 1 << 20),
    ] {
        let (desc, _, _) = ln_dbias_call(rows, cols, 0);
        let need = ln::workspace_bytes_residual(&desc, true, &props).unwrap();
        let (_, p, g) = ln_dbias_call(rows, cols, need as u64);
        let plan = ln::plan_backward_residual(&desc, &p, &g, &props).unwrap();
        let names: Vec<&str> = plan.launches.iter().map(|l| l.kernel.as_str()).collect();
        assert_eq!(
            names[..2],
            [
                "warpnorm_layer_norm_bwd_bf16_f32_split_sums_vec",
                "warpnorm_layer_norm_bwd_bf16_f32_split_dx_dbias_vec",
            ],
            "{rows}x{cols}"
        );
        let dx = &plan.launches[1];
        assert!(
            dx.shared_mem_bytes >= 512 * 16 * 4,
            "{}",
            dx.shared_mem_bytes
        );
        let a: WnLayerNormBwdArgs = dx.args.get().expect("backward args");
        assert_eq!(a.db_dx, 1);
        let outs = (p.dgamma.unwrap(), g.dbias.unwrap(), p.dbeta.unwrap());
        if dx.grid[0] == 1 {
            assert_eq!(names.len(), 2, "{rows}x{cols}: {names:?}");
            assert_eq!((a.dgamma_part, a.dbeta_part, a.dy_sum_part), (0, 0, 0));
            assert_eq!((a.dgamma, a.dbeta, a.dy_sum), outs);
        } else {
            assert_eq!(names.len(), 3, "{rows}x{cols}: {names:?}");
            assert!(a.dgamma_part != 0 && a.dbeta_part != 0 && a.dy_sum_part != 0);
            let f: WnLayerNormFinalizeArgs = plan.launches[2].args.get().expect("finalize");
            assert_eq!(names[2], "warpnorm_layer_norm_bwd_f32_finalize");
            assert_eq!((f.dgamma, f.dbeta, f.dy_sum), outs);
            assert_eq!(f.dy_sum_part, a.dy_sum_part);
        }
        assert_eq!(
            dx.grid[0] == 1,
            rows == 4,
            "{rows}x{cols}: grid {:?}",
            dx.grid
        );
    }
}

/// The block tier's bias-gradient kernel on a single-block grid writes dgamma, dbias and dbeta
/// itself (no partial rows, no finalize, no workspace beyond the plain backward's).
#[test]
fn plan_layer_norm_dbias_single_block_writes_dbeta_directly() {
    let props = DeviceProps::SIM;
    let (rows, cols) = (8usize, 1024usize);
    let (desc, _, _) = ln_dbias_call(rows, cols, 0);
    let plain = ln::workspace_bytes(&desc, ln::Direction::Backward, &props).unwrap();
    let need = ln::workspace_bytes_residual(&desc, true, &props).unwrap();
    assert_eq!(need, plain);
    let (_, p, g) = ln_dbias_call(rows, cols, need as u64);
    let plan = ln::plan_backward_residual(&desc, &p, &g, &props).unwrap();
    let names: Vec<&str> = plan.launches.iter().map(|l| l.kernel.as_str()).collect();
    assert_eq!(names, ["warpnorm_layer_norm_bwd_bf16_f32_block_dbias_vec"]);
    let a: WnLayerNormBwdArgs = plan.launches[0].args.get().expect("backward args");
    assert_eq!(plan.launches[0].grid[0], 1);
    assert_eq!((a.dgamma_part, a.dbeta_part, a.dy_sum_part), (0, 0, 0));
    assert_eq!(
        (a.dgamma, a.dbeta, a.dy_sum),
        (p.dgamma.unwrap(), g.dbias.unwrap(), p.dbeta.unwrap())
    );
}

/// LayerNorm with a bias and the bias gradient in a warp tier (whose kernels choose the second
/// accumulators' sum at run time and have no room for a third): dbeta's column sum of dy and
/// its finalize come first (dx may be written over dy), then the backward (its dbeta
/// accumulators sum dbias) and one finalize for dgamma and dbias; the workspace is the plain
/// backward's plus the column sum's partial rows, which are several chunks of at least
/// `COLSUM_MIN_CHUNK_ROWS` rows.
#[test]
fn plan_layer_norm_dbias_warp_tier_takes_the_column_sum() {
    let props = DeviceProps::H100;
    let (rows, cols) = (4096usize, 256usize);
    let (desc, _, _) = ln_dbias_call(rows, cols, 0);
    let plain = ln::workspace_bytes(&desc, ln::Direction::Backward, &props).unwrap();
    let need = ln::workspace_bytes_residual(&desc, true, &props).unwrap();
    let cg = ln::column_sum_geometry(&desc, &props);
    assert!(cg.chunks > 1 && cg.chunk_rows >= ln::COLSUM_MIN_CHUNK_ROWS);
    assert_eq!(need, plain + cg.workspace_bytes as usize);
    let (_, p, g) = ln_dbias_call(rows, cols, need as u64);
    let plan = ln::plan_backward_residual(&desc, &p, &g, &props).unwrap();
    let names: Vec<&str> = plan.launches.iter().map(|l| l.kernel.as_str()).collect();
    assert_eq!(
        names,
        [
            "warpnorm_layer_norm_bwd_bf16_colsum",
            "warpnorm_layer_norm_bwd_f32_finalize",
            "warpnorm_layer_norm_bwd_bf16_f32_warp_vec",
            "warpnorm_layer_norm_bwd_f32_finalize"
        ]
    );
    let a: WnLayerNormBwdArgs = plan.launches[2].args.get().expect("backward args");
    assert_eq!((a.db_dx, a.dy_sum_part, a.dy_sum), (1, 0, 0));
    let short = ln::BackwardPtrs {
        workspace_bytes: plain as u64,
        ..p
    };
    let e = ln::plan_backward_residual(&desc, &short, &g, &props).unwrap_err();
    assert!(
        matches!(e, warpnorm::Error::Workspace { needed, given } if needed == need && given == plain),
        "{e}"
    );
}

/// One LayerNorm fused backward with the bias gradient on ptxsim (compute_`arch`, every
/// check on): `gamma` None for an affine without a weight; dbeta read back only with a bias;
/// x, dy and dh `oin` elements past an aligned base (1: the scalar variant), dx aligned.
/// Returns (dx, dgamma, dbeta, dbias, kernels), the gradients widened to f64.
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn ln_dbias_backward_sim<T: Element + Default, P: Element + Default>(
    arch: u32,
    rows: usize,
    cols: usize,
    oin: usize,
    affine: Affine,
    inp: &Inputs<T, P>,
    gamma: Option<&[P]>,
    stats: (&[f32], &[f32]),
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<String>), String> {
    let props = DeviceProps::SIM;
    let n = rows * cols;
    let desc = LayerNormDesc::from_rows(rows, cols, T::DTYPE, P::DTYPE, affine, 1e-5)
        .map_err(|e| e.to_string())?;
    let mut sim = Sim::new(arch);
    let x = sim.upload(&inp.x, oin);
    let dy = sim.upload(&inp.dy, oin);
    let dh = sim.upload(&inp.dh, oin);
    let mean = sim.upload(stats.0, 0);
    let rstd = sim.upload(stats.1, 0);
    let g = gamma.map(|g| sim.upload(g, 0));
    let dx = sim.alloc::<T>(n, 0);
    let dg = affine.has_weight().then(|| sim.alloc::<P>(cols, 0));
    let db = affine.has_bias().then(|| sim.alloc::<P>(cols, 0));
    let dbias = sim.alloc::<P>(cols, 0);
    let ws = ln::workspace_bytes_residual(&desc, true, &props).map_err(|e| e.to_string())?;
    let w = sim.alloc::<f32>(ws.div_ceil(4), 0);
    let p = ln::BackwardPtrs {
        x,
        dy,
        dx,
        gamma: g,
        mean,
        rstd,
        mean_lo: None,
        dgamma: dg,
        dbeta: db,
        workspace: w,
        workspace_bytes: ws as u64,
    };
    let grads = ln::ResidualGrads {
        dh: Some(dh),
        dbias: Some(dbias),
    };
    let plan = ln::plan_backward_residual(&desc, &p, &grads, &props)
        .map_err(|e| format!("plan backward: {e}"))?;
    run(&mut sim, &plan, &format!("{affine:?} backward"))?;
    let read_p = |q: Option<u64>| q.map_or(Vec::new(), |q| to_f64(&sim.download::<P>(q, cols)));
    Ok((
        to_f64(&sim.download::<T>(dx, n)),
        read_p(dg),
        read_p(db),
        read_p(Some(dbias)),
        plan.launches.iter().map(|l| l.kernel.clone()).collect(),
    ))
}

/// LayerNorm's fused backward with the bias gradient but without a beta (affine weight only,
/// or none): the block and split tiers' bias-gradient kernels sum dy in shared-memory slots
/// whether or not there is a dbeta to write, so those launches need the slots' shared memory
/// too (they had only the team reduction's: 4 x 1024 x 4 bytes for 4 rows of 1024 columns in
/// a block, 16 KiB short; one chunk's for the split tier). On ptxsim with every check: dx,
/// dgamma and dbias bitwise those of the same call with a beta (and, for no weight, a gamma of
/// ones), block and split tiers, vector and scalar, 16-bit and mixed pairs.
#[test]
fn sim_layer_norm_dbias_without_beta() {
    if skip_without_kernels("LayerNorm dbias without beta") {
        return;
    }
    fn case<T: Element + Default, P: Element + Default>(
        rows: usize,
        cols: usize,
        oin: usize,
        seed: u64,
    ) -> Result<Vec<String>, String> {
        let c = Case {
            op: Op::Layer,
            rows,
            cols,
            dtype: T::DTYPE,
            param_dtype: P::DTYPE,
            oin: 0,
            oout: 0,
            bias: true,
            dh: true,
            coop: true,
            seed,
        };
        let inp: Inputs<T, P> = inputs(&c);
        // Any saved statistics do: both runs read the same.
        let (mut mean, mut rstd) = (Vec::new(), Vec::new());
        for r in 0..rows {
            let row: Vec<f64> = inp.x[r * cols..(r + 1) * cols]
                .iter()
                .map(|v| v.to_f64())
                .collect();
            let m = row.iter().sum::<f64>() / cols as f64;
            let var = row.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / cols as f64;
            mean.push(m as f32);
            rstd.push((1.0 / (var + 1e-5).sqrt()) as f32);
        }
        let stats = (&mean[..], &rstd[..]);
        let ones = vec![P::from_f64(1.0); cols];
        let mut kernels = Vec::new();
        for (affine, gamma) in [(Affine::Weight, &inp.gamma[..]), (Affine::None, &ones[..])] {
            let ctx =
                |e: String| format!("{rows}x{cols} {}/{} {affine:?}: {e}", T::DTYPE, P::DTYPE);
            let with_beta = ln_dbias_backward_sim::<T, P>(
                80,
                rows,
                cols,
                oin,
                Affine::WeightBias,
                &inp,
                Some(gamma),
                stats,
            )
            .map_err(ctx)?;
            let g = affine.has_weight().then_some(gamma);
            let got = ln_dbias_backward_sim::<T, P>(80, rows, cols, oin, affine, &inp, g, stats)
                .map_err(ctx)?;
            same("dx", &got.0, &with_beta.0).map_err(ctx)?;
            if affine.has_weight() {
                same("dgamma", &got.1, &with_beta.1).map_err(ctx)?;
            }
            same("dbias", &got.3, &with_beta.3).map_err(ctx)?;
            kernels.extend(got.4);
        }
        Ok(kernels)
    }
    let mut failures = Vec::new();
    let mut ran = std::collections::BTreeSet::new();
    // 4 rows of 1024 per 512-thread block, and rows of 12288 split into chunks; x, dy and dh
    // one element off dx for the scalar variant.
    for (k, &(rows, cols, oin)) in [
        (40usize, 1024usize, 0usize),
        (40, 1024, 1),
        (3, 12288, 0),
        (2, 12288, 1),
    ]
    .iter()
    .enumerate()
    {
        let seed = 7000 + k as u64;
        for r in [
            case::<bf16, bf16>(rows, cols, oin, seed),
            case::<f16, f32>(rows, cols, oin, seed),
            case::<bf16, f32>(rows, cols, oin, seed),
        ] {
            match r {
                Ok(ks) => ran.extend(ks),
                Err(e) => failures.push(e),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    for k in [
        "_block_dbias_vec",
        "_block_dbias_scalar",
        "_split_dx_dbias_vec",
        "_split_dx_dbias_scalar",
    ] {
        assert!(
            ran.iter().any(|r| r.ends_with(k)),
            "no {k} kernel ran: {ran:?}"
        );
    }
}

/// The block tier's bias-gradient backward of RMSNorm with 16-bit activations and f32
/// parameters (vector variant) sums dbias in shared-memory slots (`kDbInSlots` in
/// cuda/layer_norm.cu; in registers it spilled at the 128-register bound on sm_90 once its x
/// and dy packs were held raw): its launch gets 16 floats of each of 512 threads; RMSNorm's
/// plain block backward and the 16-bit pairs' bias-gradient one keep the team reduction's
/// shared memory alone.
#[test]
fn plan_rms_norm_mixed_dbias_block_gets_the_slots() {
    let props = DeviceProps::H200;
    let slots = 512 * 16 * 4;
    let (rows, cols) = (4096usize, 1024usize);
    let at = |i: u64| (1u64 << 32) + i * (1u64 << 36);
    for (dtype, param_dtype) in [(DType::BF16, DType::F32), (DType::BF16, DType::BF16)] {
        let mixed = param_dtype == DType::F32;
        let desc = RmsNormDesc::from_rows(rows, cols, dtype, param_dtype, true, None).unwrap();
        for dbias in [true, false] {
            let ws = rms::workspace_bytes_residual(&desc, dbias, &props).unwrap();
            let p = rms::BackwardPtrs {
                x: at(0),
                dy: at(1),
                dx: at(2),
                weight: Some(at(3)),
                rstd: at(4),
                dweight: Some(at(5)),
                workspace: at(6),
                workspace_bytes: ws as u64,
            };
            let g = ln::ResidualGrads {
                dh: Some(at(7)),
                dbias: dbias.then(|| at(8)),
            };
            let plan = rms::plan_backward_residual(&desc, &p, &g, &props).unwrap();
            let l = &plan.launches[0];
            let want_kernel = if dbias {
                "_block_dbias_vec"
            } else {
                "_block_vec"
            };
            assert!(l.kernel.ends_with(want_kernel), "{}", l.kernel);
            // The team reduction: blockDim.y rows of `cols` floats.
            let team = l.block[1] * cols as u32 * 4;
            let want = if mixed && dbias {
                team.max(slots)
            } else {
                team
            };
            assert_eq!(l.shared_mem_bytes, want, "{} dbias {dbias}", l.kernel);
            assert!(team < slots, "{team}: the slots must be what is added");
        }
    }
}
