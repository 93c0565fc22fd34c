//! RMSNorm against the PyTorch fixtures (fixtures/rms_norm, torch 2.15 on CPU;
//! scripts/gen_fixtures.py), as tests/layer_norm/fixtures.rs does for LayerNorm.
//!
//! For every case and output, the error is the largest |value - torch's float64 result|
//! (NaN and Inf positions must match exactly). The CPU reference (`warpnorm::cpu::rms_norm`)
//! and the kernels on ptxsim (compute_75, compute_80, compute_90; backward from the kernels'
//! own saved rstd, as in training) must each be at least as close as torch's own output in
//! the case's dtype, or within one rounding of the output dtype (K_ROUND * u * max|ref|).
//!
//! Backward outputs get one more justified slack, as LayerNorm's: both torch and warpnorm
//! compute them from an rstd saved in f32, up to about one f32 ulp from the exact one;
//! `stats_sensitivity` measures in f64 how far each gradient moves when every saved rstd
//! moves by one f32 ulp, and that is added to the bar.

use crate::support::{run_on, to_f64, Outputs, Views, K_ROUND};
use half::{bf16, f16};
use testkit::fixtures::{self, DType as FxDType, RmsNormCase, Tensor};
use testkit::oracle::{self, max_err, max_finite};
use testkit::sim::{skip_without_kernels, Sim, SIM_ARCHS};
use warpnorm::cpu::rms_norm::{backward, forward};
use warpnorm::rms_norm::RmsNormDesc;
use warpnorm::{DType, DeviceProps, Element};

/// warpnorm's dtype of a fixture's activation or parameter dtype.
pub(crate) fn dtype(d: FxDType) -> DType {
    match d {
        FxDType::F32 => DType::F32,
        FxDType::F16 => DType::F16,
        FxDType::Bf16 => DType::BF16,
        other => panic!("not an activation dtype: {other:?}"),
    }
}

fn desc_of(c: &RmsNormCase) -> RmsNormDesc {
    let t = dtype(c.config.x_dtype);
    let p = c.config.param_dtype.map_or(t, dtype);
    RmsNormDesc::new(
        &c.inputs.x.shape,
        &c.config.normalized_shape,
        t,
        p,
        c.config.elementwise_affine,
        c.config.eps.map(|e| e as f32),
    )
    .expect("fixture desc")
}

/// A fixture tensor's values as `E` (exact when `E` is the tensor's dtype).
pub(crate) fn typed<E: Element>(t: &Tensor) -> Vec<E> {
    t.to_f64_vec().into_iter().map(E::from_f64).collect()
}

fn torch_outputs(r: &fixtures::RmsNormResults) -> Outputs {
    Outputs {
        y: r.y.to_f64_vec(),
        rstd: r.rstd.to_f64_vec(),
        dx: r.dx.to_f64_vec(),
        dweight: r.dweight.as_ref().map_or(Vec::new(), |t| t.to_f64_vec()),
    }
}

/// Largest change of (dx, dweight) when every saved rstd moves by one f32 ulp (either way),
/// around the float64 rstd. Rows with a non-finite rstd are left as they are.
fn stats_sensitivity(c: &RmsNormCase, d: usize) -> [f64; 2] {
    let x = c.inputs.x.to_f64_vec();
    let dy = c.inputs.dy.to_f64_vec();
    let w = c.inputs.weight.as_ref().map(|t| t.to_f64_vec());
    let rstd = c.f64.rstd.to_f64_vec();
    oracle::stats_sensitivity(&[&rstd], |s| {
        oracle::rms_norm_backward_f64(&x, &dy, w.as_deref(), &s[0], d)
    })
}

/// Checks `ours` against the f64 reference, with torch's own error as the bar.
fn check(
    name: &str,
    who: &str,
    desc: &RmsNormDesc,
    c: &RmsNormCase,
    ours: &Outputs,
) -> Vec<String> {
    let f64r = torch_outputs(&c.f64);
    let torch = torch_outputs(&c.torch);
    let (u_t, u_p) = (desc.dtype.unit_roundoff(), desc.param_dtype.unit_roundoff());
    let u32_ = DType::F32.unit_roundoff();
    let sens = stats_sensitivity(c, desc.cols);
    type Field<'a> = (&'a str, &'a Vec<f64>, &'a Vec<f64>, &'a Vec<f64>, f64, f64);
    let fields: [Field; 4] = [
        ("y", &ours.y, &torch.y, &f64r.y, u_t, 0.0),
        ("rstd", &ours.rstd, &torch.rstd, &f64r.rstd, u32_, 0.0),
        ("dx", &ours.dx, &torch.dx, &f64r.dx, u_t, sens[0]),
        (
            "dweight",
            &ours.dweight,
            &torch.dweight,
            &f64r.dweight,
            u_p,
            sens[1],
        ),
    ];
    let mut bad = Vec::new();
    for (what, got, tor, reference, u, stats) in fields {
        let e_ours = max_err(got, reference);
        let e_torch = max_err(tor, reference) + stats;
        let slack = K_ROUND * u * max_finite(reference);
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
    c: &RmsNormCase,
    desc: &RmsNormDesc,
    sim: Option<&mut Sim>,
) -> Result<Outputs, String> {
    let x: Vec<T> = typed(&c.inputs.x);
    let dy: Vec<T> = typed(&c.inputs.dy);
    let w: Option<Vec<P>> = c.inputs.weight.as_ref().map(typed);
    match sim {
        None => {
            let f = forward::<T, P>(desc, &x, w.as_deref()).map_err(|e| e.to_string())?;
            let b = backward::<T, P>(desc, &x, &dy, &f.rstd, w.as_deref())
                .map_err(|e| e.to_string())?;
            Ok(Outputs {
                y: to_f64(&f.y),
                rstd: to_f64(&f.rstd),
                dx: to_f64(&b.dx),
                dweight: b.dweight.map_or(Vec::new(), |v| to_f64(&v)),
            })
        }
        Some(sim) => run_on::<T, P>(
            sim,
            desc,
            &DeviceProps::SIM,
            Views::Aligned,
            &x,
            &dy,
            w.as_deref(),
            None,
        )
        .map(|(o, _)| o),
    }
}

fn run_dyn(c: &RmsNormCase, desc: &RmsNormDesc, sim: Option<&mut Sim>) -> Result<Outputs, String> {
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
    let cases = fixtures::rms_norm_cases();
    assert!(
        cases.len() >= 20,
        "expected the RMSNorm fixtures, found {}",
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
    if skip_without_kernels("rms_norm fixtures on ptxsim") {
        return;
    }
    let cases = fixtures::rms_norm_cases();
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

/// The eps None cases carry `eps: null` and run with 2^-23 (f32's epsilon) for every dtype.
#[test]
fn default_eps_cases_are_present() {
    let cases = fixtures::rms_norm_cases();
    let none: Vec<_> = cases
        .iter()
        .filter(|(_, c)| c.config.eps.is_none())
        .collect();
    assert!(none.len() >= 10);
    for (_, c) in none {
        assert_eq!(desc_of(c).eps, f32::EPSILON);
    }
    assert!(cases.iter().any(|(f, _)| f.name == "f16_near_max"));
    assert!(cases.iter().any(|(f, _)| f.name == "f16_small_default_eps"));
}
