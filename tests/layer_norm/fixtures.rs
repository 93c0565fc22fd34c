//! LayerNorm against the PyTorch fixtures (fixtures/layer_norm, torch 2.15 on CPU).
//!
//! For every case and output, the error is the largest |value - torch's float64 result|
//! (NaN and Inf positions must match exactly). Two checks:
//! - the CPU reference (`warpnorm::cpu::layer_norm`) is at least as close as torch's own
//!   output in the case's dtype, or within one rounding of the output dtype
//!   (K_ROUND * u * max|ref|: both are then as close as the dtype allows);
//! - the kernels on ptxsim (compute_75, compute_80, compute_90; backward from the kernels'
//!   own saved statistics, as in training) pass the same test.
//!
//! Saved statistics are f32 in warpnorm (torch keeps f16 for f16/f16), so their slack uses u32.
//!
//! Backward outputs get one more justified slack: both torch and warpnorm compute them from
//! statistics saved in f32, which sit up to about one f32 ulp from the exact ones (torch's
//! as much as ours). `stats_sensitivity` measures, in f64, how far each gradient moves when
//! every saved mean or rstd moves by one f32 ulp, and that amount is added to the bar.

use crate::support::{cpu_fwd_bwd, sim_fwd_bwd, Outputs, K_ROUND};
use half::{bf16, f16};
use testkit::fixtures::{self, DType as FxDType, LayerNormCase, Tensor};
use testkit::oracle::{self, max_err, max_finite};
use testkit::sim::{skip_without_kernels, Sim, SIM_ARCHS};
use warpnorm::layer_norm::{Affine, LayerNormDesc};
use warpnorm::{DType, DeviceProps, Element};

fn dtype(d: FxDType) -> DType {
    match d {
        FxDType::F32 => DType::F32,
        FxDType::F16 => DType::F16,
        FxDType::Bf16 => DType::BF16,
        other => panic!("not an activation dtype: {other:?}"),
    }
}

fn desc_of(c: &LayerNormCase) -> LayerNormDesc {
    let t = dtype(c.config.x_dtype);
    let p = c.config.param_dtype.map_or(t, dtype);
    let affine = match (c.config.elementwise_affine, c.config.bias) {
        (false, _) => Affine::None,
        (true, false) => Affine::Weight,
        (true, true) => Affine::WeightBias,
    };
    LayerNormDesc::new(
        &c.inputs.x.shape,
        &c.config.normalized_shape,
        t,
        p,
        affine,
        c.config.eps as f32,
    )
    .expect("fixture desc")
}

fn typed<E: Element>(t: &Tensor) -> Vec<E> {
    t.to_f64_vec().into_iter().map(E::from_f64).collect()
}

fn torch_outputs(r: &fixtures::LayerNormResults) -> Outputs {
    Outputs {
        y: r.y.to_f64_vec(),
        mean: r.mean.to_f64_vec(),
        rstd: r.rstd.to_f64_vec(),
        mean_lo: Vec::new(),
        dx: r.dx.to_f64_vec(),
        dgamma: r.dgamma.as_ref().map_or(Vec::new(), |t| t.to_f64_vec()),
        dbeta: r.dbeta.as_ref().map_or(Vec::new(), |t| t.to_f64_vec()),
    }
}

/// Largest change of (dx, dgamma, dbeta) when every saved mean, or every saved rstd, moves
/// by one f32 ulp (either way), around the float64 statistics. Rows with non-finite
/// statistics are left as they are.
fn stats_sensitivity(c: &LayerNormCase, d: usize) -> [f64; 3] {
    let x = c.inputs.x.to_f64_vec();
    let dy = c.inputs.dy.to_f64_vec();
    let g = c.inputs.gamma.as_ref().map(|t| t.to_f64_vec());
    let mean = c.f64.mean.to_f64_vec();
    let rstd = c.f64.rstd.to_f64_vec();
    oracle::stats_sensitivity(&[&mean, &rstd], |s| {
        oracle::layer_norm_backward_f64(&x, &dy, g.as_deref(), &s[0], &s[1], d)
    })
}

/// Checks `ours` against the f64 reference, with torch's own error as the bar.
fn check(
    name: &str,
    who: &str,
    desc: &LayerNormDesc,
    c: &LayerNormCase,
    ours: &Outputs,
) -> Vec<String> {
    let f64r = torch_outputs(&c.f64);
    let torch = torch_outputs(&c.torch);
    let (u_t, u_p) = (desc.dtype.unit_roundoff(), desc.param_dtype.unit_roundoff());
    let u32_ = DType::F32.unit_roundoff();
    let sens = stats_sensitivity(c, desc.cols);
    // (output, ours, torch's, float64 reference, unit roundoff of the output, stats slack)
    type Field<'a> = (&'a str, &'a Vec<f64>, &'a Vec<f64>, &'a Vec<f64>, f64, f64);
    let fields: [Field; 6] = [
        ("y", &ours.y, &torch.y, &f64r.y, u_t, 0.0),
        ("mean", &ours.mean, &torch.mean, &f64r.mean, u32_, 0.0),
        ("rstd", &ours.rstd, &torch.rstd, &f64r.rstd, u32_, 0.0),
        ("dx", &ours.dx, &torch.dx, &f64r.dx, u_t, sens[0]),
        (
            "dgamma",
            &ours.dgamma,
            &torch.dgamma,
            &f64r.dgamma,
            u_p,
            sens[1],
        ),
        (
            "dbeta",
            &ours.dbeta,
            &torch.dbeta,
            &f64r.dbeta,
            u_p,
            sens[2],
        ),
    ];
    let mut bad = Vec::new();
    for (what, got, tor, reference, u, stats) in fields {
        let e_ours = max_err(got, reference);
        let e_torch = max_err(tor, reference);
        let slack = K_ROUND * u * max_finite(reference);
        let e_torch = e_torch + stats;
        let ok = e_ours <= e_torch.max(slack); // false for NaN
        if !ok {
            bad.push(format!(
                "{name} {who} {what}: error {e_ours:e} > torch's {e_torch:e} and one rounding {slack:e}"
            ));
        }
    }
    bad
}

fn run<T: Element + Default, P: Element + Default>(
    c: &LayerNormCase,
    desc: &LayerNormDesc,
    sim: Option<&mut Sim>,
) -> Result<Outputs, String> {
    let x: Vec<T> = typed(&c.inputs.x);
    let dy: Vec<T> = typed(&c.inputs.dy);
    let g: Option<Vec<P>> = c.inputs.gamma.as_ref().map(typed);
    let b: Option<Vec<P>> = c.inputs.beta.as_ref().map(typed);
    match sim {
        None => cpu_fwd_bwd(desc, &x, g.as_deref(), b.as_deref(), &dy),
        Some(sim) => sim_fwd_bwd(
            sim,
            desc,
            &x,
            g.as_deref(),
            b.as_deref(),
            &dy,
            &DeviceProps::SIM,
        ),
    }
}

fn run_dyn(
    c: &LayerNormCase,
    desc: &LayerNormDesc,
    sim: Option<&mut Sim>,
) -> Result<Outputs, String> {
    match (desc.dtype, desc.param_dtype) {
        (DType::F32, DType::F32) => run::<f32, f32>(c, desc, sim),
        (DType::F16, DType::F16) => run::<f16, f16>(c, desc, sim),
        (DType::F16, DType::F32) => run::<f16, f32>(c, desc, sim),
        (DType::BF16, DType::BF16) => run::<bf16, bf16>(c, desc, sim),
        (DType::BF16, DType::F32) => run::<bf16, f32>(c, desc, sim),
        (t, p) => Err(format!("unsupported pair {t}/{p}")),
    }
}

#[test]
fn cpu_reference_is_as_close_to_float64_as_torch() {
    let cases = fixtures::layer_norm_cases();
    assert!(
        cases.len() >= 40,
        "expected the LayerNorm fixtures, found {}",
        cases.len()
    );
    let mut bad = Vec::new();
    for (fx, c) in &cases {
        let desc = desc_of(c);
        match run_dyn(c, &desc, None) {
            Ok(o) => bad.extend(check(&fx.name, "cpu", &desc, c, &o)),
            Err(e) => bad.push(format!("{}: {e}", fx.name)),
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn kernels_on_ptxsim_are_as_close_to_float64_as_torch() {
    if skip_without_kernels("kernels_on_ptxsim_are_as_close_to_float64_as_torch") {
        return;
    }
    let cases = fixtures::layer_norm_cases();
    let mut bad = Vec::new();
    for arch in SIM_ARCHS {
        for (fx, c) in &cases {
            let desc = desc_of(c);
            let mut sim = Sim::new(arch);
            match run_dyn(c, &desc, Some(&mut sim)) {
                Ok(o) => bad.extend(check(&fx.name, &format!("compute_{arch}"), &desc, c, &o)),
                Err(e) => bad.push(format!("{} compute_{arch}: {e}", fx.name)),
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
