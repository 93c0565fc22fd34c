//! BatchNorm against the PyTorch fixtures (`fixtures/batch_norm`, written by
//! `scripts/gen_fixtures.py`): every step of every case through the CPU reference and through
//! the kernels on any device backend (ptxsim here; the GPU in `crate::gpu`), with the module's
//! state (gamma, beta, running statistics, counter) carried across steps.
//!
//! Criterion: for every output, the largest error against torch's float64 run must be at most
//! torch's own largest error (in the case's dtypes) plus one rounding of the output type
//! (u * max|f64|): "at least as close to float64 as torch", up to the final rounding, which
//! can fall either way. Non-finite values must match torch's pattern exactly (NaN where
//! torch has NaN, the same infinities).
//!
//! Deliberate difference: torch increments num_batches_tracked before raising the
//! one-value-per-channel error; warpnorm validates first and leaves every statistic untouched.

use testkit::backend::Backend;
use testkit::fixtures::{self, BatchNormCase, Tensor};
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::batch_norm::{
    plan_backward, plan_forward, workspace_bytes, BackwardPtrs, BatchNormDesc, Direction,
    ForwardPtrs, Layout, Mode, Momentum,
};
use warpnorm::cpu::batch_norm as cpu;
use warpnorm::{DType, Element, Error};

fn dtype(d: fixtures::DType) -> DType {
    match d {
        fixtures::DType::F32 => DType::F32,
        fixtures::DType::F16 => DType::F16,
        fixtures::DType::Bf16 => DType::BF16,
        other => panic!("unexpected fixture dtype {other:?}"),
    }
}

fn layout(l: fixtures::Layout) -> Layout {
    match l {
        fixtures::Layout::Contiguous => Layout::Contiguous,
        _ => Layout::ChannelsLast,
    }
}

fn vals<T: Element>(t: &Tensor) -> Vec<T> {
    t.to_f64_vec().into_iter().map(T::from_f64).collect()
}

/// The state a module carries between steps.
pub struct State<P> {
    gamma: Option<(Vec<P>, Vec<P>)>,
    rm: Option<Vec<P>>,
    rv: Option<Vec<P>>,
    nbt: i64,
}

/// What one step produced (values widened to f64; empty when absent).
#[derive(Default, Debug)]
pub struct Out {
    y: Vec<f64>,
    save_mean: Vec<f64>,
    save_invstd: Vec<f64>,
    dx: Vec<f64>,
    dgamma: Vec<f64>,
    dbeta: Vec<f64>,
}

fn f64s<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// Slack in units of the output type's machine epsilon times the output's condition (below):
/// the few roundings of one evaluation (e.g. y = fma((x - shift) - dmean, scale, beta) and the
/// final rounding to the output type) that can fall differently from torch's.
const K_SLACK: f64 = 4.0;

/// Compares `ours` with torch against float64; see the module docs. `cond` is the magnitude
/// the output's rounding errors are relative to (max|f64| for y; the summed magnitudes for
/// sums and for dx, which is a difference of terms).
fn compare(
    what: &str,
    ours: &[f64],
    torch: Option<&Tensor>,
    f64r: Option<&Tensor>,
    eps: f64,
    cond: f64,
) -> Result<(), String> {
    let (Some(t), Some(r)) = (torch, f64r) else {
        return Ok(());
    };
    let (t, r) = (t.to_f64_vec(), r.to_f64_vec());
    if t.is_empty() {
        return Ok(());
    }
    if ours.len() != t.len() {
        return Err(format!(
            "{what}: {} values, torch has {}",
            ours.len(),
            t.len()
        ));
    }
    let (mut e_ours, mut e_torch, mut scale) = (0.0f64, 0.0f64, 0.0f64);
    for i in 0..t.len() {
        if !t[i].is_finite() || !ours[i].is_finite() {
            let same = (t[i].is_nan() && ours[i].is_nan()) || t[i] == ours[i];
            if !same {
                return Err(format!("{what}[{i}]: ours {}, torch {}", ours[i], t[i]));
            }
            continue;
        }
        if r[i].is_finite() {
            e_ours = e_ours.max((ours[i] - r[i]).abs());
            e_torch = e_torch.max((t[i] - r[i]).abs());
            scale = scale.max(r[i].abs());
        }
    }
    let slack = K_SLACK * eps * scale.max(cond);
    if e_ours > e_torch + slack {
        return Err(format!(
            "{what}: error vs float64 {e_ours:.3e} > torch's {e_torch:.3e} + {K_SLACK} eps * cond ({slack:.3e})"
        ));
    }
    Ok(())
}

/// Condition magnitudes of one step, from its inputs and the statistics used (finite values
/// only): per channel mean|x|, sum|dy|, sum|dy| * (|x - m| + |m|) * invstd (the saved mean
/// is an f32 input of the backward, carrying u * |m|), and dx's term magnitudes.
struct Cond {
    mean_abs_x: f64,
    dbeta: f64,
    dgamma: f64,
    dx: f64,
}

fn cond<T: Element, P: Element>(
    desc: &BatchNormDesc,
    frozen: bool,
    x: &[T],
    dy: &[T],
    gamma: Option<&[P]>,
    mean: &[f64],
    invstd: &[f64],
) -> Cond {
    let g = crate::support::ncs(desc).expect("valid desc");
    let mut c = Cond {
        mean_abs_x: 0.0,
        dbeta: 0.0,
        dgamma: 0.0,
        dx: 0.0,
    };
    if g.numel == 0 || mean.len() != g.c as usize {
        return c;
    }
    let fin = |v: f64| if v.is_finite() { v } else { 0.0 };
    let cnt = g.count() as f64;
    for ch in 0..g.c {
        let ci = ch as usize;
        let (m, is) = (fin(mean[ci]), fin(invstd[ci]));
        let w = fin(gamma.map_or(1.0, |w| w[ci].to_f64()));
        let idx: Vec<usize> = (0..g.n)
            .flat_map(|n| (0..g.s).map(move |s| (n, s)))
            .map(|(n, s)| cpu::index(&g, desc.layout, n, ch, s))
            .collect();
        let xa = |i: usize| fin(x[i].to_f64());
        let da = |i: usize| fin(dy[i].to_f64());
        let xh = |i: usize| ((xa(i) - m).abs() + m.abs()) * is;
        let sx: f64 = idx.iter().map(|&i| xa(i).abs()).sum();
        let sdy: f64 = idx.iter().map(|&i| da(i).abs()).sum();
        let sdx: f64 = idx.iter().map(|&i| da(i).abs() * xh(i)).sum();
        c.mean_abs_x = c.mean_abs_x.max(sx / cnt);
        c.dbeta = c.dbeta.max(sdy);
        c.dgamma = c.dgamma.max(sdx);
        for &i in &idx {
            let t = if frozen {
                da(i).abs()
            } else {
                da(i).abs() + sdy / cnt + xh(i) * sdx / cnt
            };
            c.dx = c.dx.max((w * is).abs() * t);
        }
    }
    c
}

/// One column of the fixture table, run on the same steps: the CPU reference, or any device
/// backend (ptxsim, the GPU).
pub trait Runner {
    /// Runs one step; Err(Error) for a rejected call (state must then be untouched).
    fn step<T: Element + Default, P: Element + Default>(
        &mut self,
        desc: &BatchNormDesc,
        mode: &Mode,
        frozen: bool,
        x: &[T],
        dy: &[T],
        st: &mut State<P>,
    ) -> Result<Out, Error>;
}

struct CpuBackend;

impl Runner for CpuBackend {
    fn step<T: Element + Default, P: Element + Default>(
        &mut self,
        desc: &BatchNormDesc,
        mode: &Mode,
        frozen: bool,
        x: &[T],
        dy: &[T],
        st: &mut State<P>,
    ) -> Result<Out, Error> {
        let running = match (st.rm.as_mut(), st.rv.as_mut()) {
            (Some(m), Some(v)) => Some(cpu::Running {
                mean: m,
                var: v,
                num_batches_tracked: Some(&mut st.nbt),
            }),
            _ => None,
        };
        let affine = st.gamma.as_ref().map(|(g, b)| (&g[..], &b[..]));
        let f = cpu::forward::<T, P>(&desc.clone().with_mode(*mode), x, affine, running)?;
        let b = cpu::backward::<T, P>(
            &desc.clone().with_mode(if frozen {
                Mode::eval()
            } else {
                Mode::train(0.1)
            }),
            x,
            dy,
            affine.map(|a| a.0),
            &f.save_mean,
            Some(&f.save_mean_lo),
            &f.save_invstd,
        )?;
        Ok(Out {
            y: f64s(&f.y),
            save_mean: f64s(&f.save_mean),
            save_invstd: f64s(&f.save_invstd),
            dx: f64s(&b.dx),
            dgamma: f64s(&b.dgamma),
            dbeta: f64s(&b.dbeta),
        })
    }
}

/// A device backend runs the step's plans, made for its own properties, with the module's
/// state uploaded before and downloaded after.
impl<B: Backend> Runner for B {
    fn step<T: Element + Default, P: Element + Default>(
        &mut self,
        desc: &BatchNormDesc,
        mode: &Mode,
        frozen: bool,
        x: &[T],
        dy: &[T],
        st: &mut State<P>,
    ) -> Result<Out, Error> {
        let desc = &desc.clone().with_mode(*mode);
        let be = self;
        let props = *be.props();
        let g = crate::support::ncs(desc)?;
        let (n, c) = (g.numel as usize, g.c as usize);
        let d_x = be.upload(x, 0);
        let d_dy = be.upload(dy, 0);
        let d_y = be.alloc::<T>(n, 0);
        let d_dx = be.alloc::<T>(n, 0);
        let gb = st
            .gamma
            .as_ref()
            .map(|(g, b)| (be.upload(g, 0), be.upload(b, 0)));
        let rm = st.rm.as_ref().map(|v| be.upload(v, 0));
        let rv = st.rv.as_ref().map(|v| be.upload(v, 0));
        let nbt = be.upload_i64(st.nbt);
        let sm = be.alloc::<f32>(c, 0);
        let sml = be.alloc::<f32>(c, 0);
        let si = be.alloc::<f32>(c, 0);
        let dg = be.alloc::<P>(c, 0);
        let db = be.alloc::<P>(c, 0);
        // One workspace for both directions (an eval forward needs none, its backward does).
        let ws_bytes = workspace_bytes(desc, Direction::Forward, &props)?.max(workspace_bytes(
            desc,
            Direction::Backward,
            &props,
        )?) as u64;
        let ws = crate::support::workspace(be, ws_bytes as u64, c);
        let ptrs = ForwardPtrs {
            x: d_x,
            y: d_y,
            gamma: gb.map(|p| p.0),
            beta: gb.map(|p| p.1),
            running_mean: rm,
            running_var: rv,
            num_batches_tracked: rm.map(|_| nbt),
            save_mean: Some(sm),
            save_mean_lo: Some(sml),
            save_invstd: Some(si),
            workspace: ws,
            workspace_bytes: ws_bytes,
        };
        let plan = plan_forward(&desc.clone().with_mode(*mode), &ptrs, &props)?;
        be.execute(&plan)
            .unwrap_or_else(|e| panic!("forward: {e}\n{plan}"));
        let mut out = Out::default();
        if n > 0 {
            out.y = f64s(&be.download::<T>(d_y, n));
            out.save_mean = f64s(&be.download::<f32>(sm, c));
            out.save_invstd = f64s(&be.download::<f32>(si, c));
        }
        let bptrs = BackwardPtrs {
            x: d_x,
            dy: d_dy,
            dx: d_dx,
            gamma: gb.map(|p| p.0),
            save_mean: sm,
            save_mean_lo: Some(sml),
            save_invstd: si,
            dgamma: gb.map(|_| dg),
            dbeta: gb.map(|_| db),
            workspace: ws,
            workspace_bytes: ws_bytes,
        };
        let plan = plan_backward(
            &desc.clone().with_mode(if frozen {
                Mode::eval()
            } else {
                Mode::train(0.1)
            }),
            &bptrs,
            &props,
        )?;
        be.execute(&plan)
            .unwrap_or_else(|e| panic!("backward: {e}\n{plan}"));
        if n > 0 {
            out.dx = f64s(&be.download::<T>(d_dx, n));
        }
        if gb.is_some() {
            out.dgamma = f64s(&be.download::<P>(dg, c));
            out.dbeta = f64s(&be.download::<P>(db, c));
        }
        if let (Some(m), Some(v)) = (rm, rv) {
            st.rm = Some(be.download::<P>(m, c));
            st.rv = Some(be.download::<P>(v, c));
            st.nbt = be.download_i64(nbt);
        }
        Ok(out)
    }
}

fn run_case<B: Runner, T: Element + Default, P: Element + Default>(
    be: &mut B,
    name: &str,
    bn: &BatchNormCase,
) -> Result<(), String> {
    let cfg = &bn.config;
    let mut st = State::<P> {
        gamma: bn
            .initial
            .gamma
            .as_ref()
            .map(|g| (vals(g), vals(bn.initial.beta.as_ref().expect("beta")))),
        rm: bn.initial.running_mean.as_ref().map(vals),
        rv: bn.initial.running_var.as_ref().map(vals),
        nbt: bn
            .initial
            .num_batches_tracked
            .as_ref()
            .and_then(|t| t.to_i64_vec())
            .map_or(0, |v| v[0]),
    };
    let momentum = cfg
        .momentum
        .map_or(Momentum::Cumulative, |m| Momentum::Factor(m as f32));
    // Machine epsilon (one ulp of 1.0) of each output type.
    let (ut, up, uf) = (
        dtype(cfg.x_dtype).unit_roundoff() * 2.0,
        dtype(cfg.param_dtype).unit_roundoff() * 2.0,
        DType::F32.unit_roundoff() * 2.0,
    );
    // Steps torch counted but warpnorm rejected before changing anything (see module docs).
    let mut rejected = 0i64;
    for (k, s) in bn.steps.iter().enumerate() {
        let ctx = |w: &str| format!("{name} step {k} {w}");
        let desc = BatchNormDesc::new(
            &s.x.shape,
            layout(cfg.layout),
            dtype(cfg.x_dtype),
            dtype(cfg.param_dtype),
        )
        .with_eps(cfg.eps as f32);
        let batch_stats = s.training || !cfg.track_running_stats;
        let mode = Mode {
            batch_stats,
            momentum,
        };
        let x: Vec<T> = vals(&s.x);
        let dy: Vec<T> = vals(&s.dy);
        let before = (
            st.rm.clone().map(|v| f64s(&v)),
            st.rv.clone().map(|v| f64s(&v)),
            st.nbt,
        );
        match be.step::<T, P>(&desc, &mode, !batch_stats, &x, &dy, &mut st) {
            Err(e) => {
                let Some(msg) = &s.error else {
                    return Err(ctx(&format!("unexpected error {e}")));
                };
                if !matches!(e, Error::InvalidArgument { .. })
                    || !e
                        .to_string()
                        .contains("Expected more than 1 value per channel")
                {
                    return Err(ctx(&format!("error {e}, torch said {msg}")));
                }
                let after = (
                    st.rm.clone().map(|v| f64s(&v)),
                    st.rv.clone().map(|v| f64s(&v)),
                    st.nbt,
                );
                if before != after {
                    return Err(ctx("a rejected step changed the running statistics"));
                }
                if cfg.track_running_stats {
                    rejected += 1;
                }
            }
            Ok(out) => {
                if let Some(msg) = &s.error {
                    return Err(ctx(&format!("accepted, but torch raised {msg}")));
                }
                let (t, r) = (&s.torch, &s.f64);
                let gamma = st.gamma.as_ref().map(|g| &g.0[..]);
                let k = if batch_stats {
                    cond(
                        &desc,
                        false,
                        &x,
                        &dy,
                        gamma,
                        &out.save_mean,
                        &out.save_invstd,
                    )
                } else {
                    // Eval: the statistics used are the running ones from before the step.
                    let (m, v) = (
                        before.0.clone().unwrap_or_default(),
                        before.1.clone().unwrap_or_default(),
                    );
                    let is: Vec<f64> = v.iter().map(|v| 1.0 / (v + cfg.eps).sqrt()).collect();
                    cond(&desc, true, &x, &dy, gamma, &m, &is)
                };
                compare(&ctx("y"), &out.y, t.y.as_ref(), r.y.as_ref(), ut, 0.0)?;
                if batch_stats {
                    compare(
                        &ctx("save_mean"),
                        &out.save_mean,
                        t.save_mean.as_ref(),
                        r.save_mean.as_ref(),
                        uf,
                        k.mean_abs_x,
                    )?;
                    compare(
                        &ctx("save_invstd"),
                        &out.save_invstd,
                        t.save_invstd.as_ref(),
                        r.save_invstd.as_ref(),
                        uf,
                        0.0,
                    )?;
                }
                compare(
                    &ctx("dx"),
                    &out.dx,
                    t.dx.as_ref(),
                    r.dx.as_ref(),
                    ut.max(uf),
                    k.dx,
                )?;
                compare(
                    &ctx("dgamma"),
                    &out.dgamma,
                    t.dgamma.as_ref(),
                    r.dgamma.as_ref(),
                    up.max(uf),
                    k.dgamma,
                )?;
                compare(
                    &ctx("dbeta"),
                    &out.dbeta,
                    t.dbeta.as_ref(),
                    r.dbeta.as_ref(),
                    up.max(uf),
                    k.dbeta,
                )?;
                if let (Some(m), Some(v)) = (&st.rm, &st.rv) {
                    compare(
                        &ctx("running_mean"),
                        &f64s(m),
                        t.running_mean.as_ref(),
                        r.running_mean.as_ref(),
                        up.max(uf),
                        k.mean_abs_x,
                    )?;
                    compare(
                        &ctx("running_var"),
                        &f64s(v),
                        t.running_var.as_ref(),
                        r.running_var.as_ref(),
                        up.max(uf),
                        0.0,
                    )?;
                }
                if let Some(n) = t.num_batches_tracked.as_ref().and_then(|t| t.to_i64_vec()) {
                    if cfg.track_running_stats && n[0] != st.nbt + rejected {
                        return Err(ctx(&format!(
                            "num_batches_tracked {} torch {}",
                            st.nbt, n[0]
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Every fixture case on a fresh runner from `be`; returns the failures.
pub fn run_all<B: Runner>(be: &mut impl FnMut() -> B) -> Vec<String> {
    use half::{bf16, f16};
    let mut failures = Vec::new();
    for fx in fixtures::load_all("batch_norm") {
        let bn = fx.as_batch_norm().expect("batch_norm fixture");
        let mut b = be();
        let r = match (dtype(bn.config.x_dtype), dtype(bn.config.param_dtype)) {
            (DType::F32, DType::F32) => run_case::<B, f32, f32>(&mut b, &fx.name, bn),
            (DType::F16, DType::F32) => run_case::<B, f16, f32>(&mut b, &fx.name, bn),
            (DType::BF16, DType::F32) => run_case::<B, bf16, f32>(&mut b, &fx.name, bn),
            (DType::F16, DType::F16) => run_case::<B, f16, f16>(&mut b, &fx.name, bn),
            (DType::BF16, DType::BF16) => run_case::<B, bf16, bf16>(&mut b, &fx.name, bn),
            (a, p) => Err(format!("{}: dtype pair {a}/{p}", fx.name)),
        };
        if let Err(e) = r {
            failures.push(e);
        }
    }
    failures
}

#[test]
fn cpu_reference_matches_torch() {
    let f = run_all(&mut || CpuBackend);
    assert!(
        f.is_empty(),
        "{} fixture failures:\n{}",
        f.len(),
        f.join("\n")
    );
}

#[test]
fn kernels_on_ptxsim_match_torch() {
    if skip_without_kernels("kernels_on_ptxsim_match_torch") {
        return;
    }
    for arch in testkit::sim::SIM_ARCHS {
        let f = run_all(&mut || Sim::new(arch));
        assert!(
            f.is_empty(),
            "compute_{arch}: {} fixture failures:\n{}",
            f.len(),
            f.join("\n")
        );
    }
}
