//! RMSNorm on a GPU, or here on the emulated driver (skips with a reason without one;
//! WARPNORM_REQUIRE_GPU=1 makes that a failure): the simulator sweep's cases through the
//! shared `run_case` on the GPU backend, the functional API (out of place and in place), the
//! module type (forward/backward, `infer`, `forward_into` / `backward_into`, state by
//! PyTorch's name `weight`), bitwise reruns, and bad inputs rejected before any launch.

use std::sync::Arc;

use crate::support::{check_outputs, make_data, to_f64, Case, Data, Outputs, Views, DTYPE_PAIRS};
use cudarc::driver::{CudaSlice, CudaStream};
use half::{bf16, f16};
use testkit::gpu::Gpu;
use warpnorm::cpu::rms_norm::forward as cpu_forward;
use warpnorm::rms_norm::{
    backward, backward_in_place, backward_workspace_bytes, forward, forward_in_place,
    forward_workspace_bytes, BackwardBuffers, BackwardInPlaceBuffers, ForwardBuffers,
    ForwardInPlaceBuffers, GradientBuffers, RmsNorm, RmsNormDesc,
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

/// The simulator sweep's cases (the tier representatives, every dtype pair and placement)
/// through the shared `run_case`, planned for the device.
#[test]
fn simulator_cases_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("rms_norm simulator_cases_on_gpu") else {
        return;
    };
    let mut failures = Vec::new();
    for case in crate::sim::cases(false) {
        let mut gpu = Gpu::new(&s).unwrap();
        let props = *gpu.props();
        if let Err(e) = crate::support::run_case_dyn(&mut gpu, &case, &props) {
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

/// One case through the functional API: forward, then backward from the reference's rstd;
/// in place when `in_place` (y over x, dx over dy). Returns the outputs after checking them.
fn run_functional<T: Element, P: Element>(
    s: &Arc<CudaStream>,
    case: &Case,
    in_place: bool,
) -> Result<Outputs, String> {
    let desc = case.desc();
    let (m, d) = (case.rows, case.cols);
    let n = m * d;
    let data: Data<T, P> = make_data(case);
    let off = usize::from(case.views != Views::Aligned);
    let x = up(s, &data.x, off);
    let w = data.weight.as_ref().map(|w| up(s, w, off));
    let mut y = zeros::<T>(s, n + off);
    let mut rstd = zeros::<f32>(s, m);
    let wsf = forward_workspace_bytes(s, &desc).map_err(|e| e.to_string())?;
    let wsb = backward_workspace_bytes(s, &desc).map_err(|e| e.to_string())?;
    let mut ws = s.clone_htod(&vec![0u8; wsf.max(wsb).max(1)]).unwrap();
    let wv = w.as_ref().map(|w| w.slice(off..off + d));
    let y_host = if in_place {
        let mut xy = up(s, &data.x, off);
        forward_in_place(
            s,
            &desc,
            ForwardInPlaceBuffers {
                xy: xy.slice_mut(off..off + n),
                weight: wv.as_ref().map(|v| v.slice(..)),
                rstd: Some(rstd.slice_mut(0..m)),
                workspace: Some(ws.slice_mut(..)),
            },
        )
        .map_err(|e| format!("forward_in_place: {e}"))?;
        down(s, &xy, off, n)
    } else {
        forward(
            s,
            &desc,
            ForwardBuffers {
                x: x.slice(off..off + n),
                y: y.slice_mut(off..off + n),
                weight: wv.as_ref().map(|v| v.slice(..)),
                rstd: Some(rstd.slice_mut(0..m)),
                workspace: Some(ws.slice_mut(..)),
            },
        )
        .map_err(|e| format!("forward: {e}"))?;
        down(s, &y, off, n)
    };
    let r = cpu_forward::<T, P>(&desc, &data.x, data.weight.as_deref()).unwrap();
    let rr = s.clone_htod(&r.rstd).unwrap();
    let mut dw = data.weight.as_ref().map(|_| zeros::<P>(s, d + off));
    let dx_host = if in_place {
        let mut dy_dx = up(s, &data.dy, off);
        backward_in_place(
            s,
            &desc,
            BackwardInPlaceBuffers {
                x: x.slice(off..off + n),
                dy_dx: dy_dx.slice_mut(off..off + n),
                rstd: rr.slice(..),
                weight: wv,
                dweight: dw.as_mut().map(|v| v.slice_mut(off..off + d)),
                workspace: Some(ws.slice_mut(..)),
            },
        )
        .map_err(|e| format!("backward_in_place: {e}"))?;
        down(s, &dy_dx, off, n)
    } else {
        let dy = up(s, &data.dy, off);
        let mut dx = zeros::<T>(s, n + off);
        backward(
            s,
            &desc,
            BackwardBuffers {
                x: x.slice(off..off + n),
                dy: dy.slice(off..off + n),
                rstd: rr.slice(..),
                weight: wv,
                dx: dx.slice_mut(off..off + n),
                dweight: dw.as_mut().map(|v| v.slice_mut(off..off + d)),
                workspace: Some(ws.slice_mut(..)),
            },
        )
        .map_err(|e| format!("backward: {e}"))?;
        down(s, &dx, off, n)
    };
    let got = Outputs {
        y: y_host,
        rstd: down(s, &rstd, 0, m),
        dx: dx_host,
        dweight: dw.as_ref().map_or(Vec::new(), |v| down(s, v, off, d)),
    };
    check_outputs(case, &data, &got, "(GPU functional API)")?;
    Ok(got)
}

fn run_dyn(s: &Arc<CudaStream>, case: &Case, in_place: bool) -> Result<Outputs, String> {
    match (case.dtype, case.param_dtype) {
        (DType::F32, DType::F32) => run_functional::<f32, f32>(s, case, in_place),
        (DType::F16, DType::F16) => run_functional::<f16, f16>(s, case, in_place),
        (DType::F16, DType::F32) => run_functional::<f16, f32>(s, case, in_place),
        (DType::BF16, DType::BF16) => run_functional::<bf16, bf16>(s, case, in_place),
        (DType::BF16, DType::F32) => run_functional::<bf16, f32>(s, case, in_place),
        _ => Err("unsupported".into()),
    }
}

/// The functional API on every dtype pair and tier, aligned and offset, out of place and in
/// place; in place gives the bits of out of place, and a rerun the same bits.
#[test]
fn functional_api_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("rms_norm functional_api_on_gpu") else {
        return;
    };
    let mut failures = Vec::new();
    let shapes = [(257usize, 33usize), (64, 768), (3, 5000), (2, 65537)];
    let mut idx = 0;
    for &(dtype, param_dtype) in &DTYPE_PAIRS {
        for &(rows, cols) in &shapes {
            idx += 1;
            let case = Case {
                rows,
                cols,
                dtype,
                param_dtype,
                weight: idx % 3 != 0,
                views: if idx % 2 == 0 {
                    Views::Aligned
                } else {
                    Views::Offset1
                },
                seed: idx as u64,
                x_offset: 0.0,
            };
            let res = run_dyn(&s, &case, false).and_then(|a| {
                let b = run_dyn(&s, &case, true)?;
                let again = run_dyn(&s, &case, false)?;
                if a != b {
                    return Err(format!("{case:?}: in place differs from out of place"));
                }
                if a != again {
                    return Err(format!("{case:?}: a rerun differs"));
                }
                Ok(())
            });
            if let Err(e) = res {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn module_on_gpu() {
    let Some(s) = testkit::gpu::gpu_stream("rms_norm module_on_gpu") else {
        return;
    };
    let case = Case {
        rows: 96,
        cols: 1024,
        dtype: DType::BF16,
        param_dtype: DType::F32,
        weight: true,
        views: Views::Aligned,
        seed: 11,
        x_offset: 0.0,
    };
    let data: Data<bf16, f32> = make_data(&case);
    let shape = [4, 24, 1024];
    let mut rms = RmsNorm::<f32>::new(&s, &[1024], true, None).unwrap();
    assert_eq!(rms.eps(), f32::EPSILON);
    assert_eq!(rms.state().unwrap().weight.unwrap(), vec![1.0f32; 1024]);
    rms.load_state(&warpnorm::State {
        weight: data.weight.clone(),
        ..Default::default()
    })
    .unwrap();
    let names: Vec<&str> = rms.named_parameters().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["weight"]);
    let x = s.clone_htod(&data.x).unwrap();
    let dy = s.clone_htod(&data.dy).unwrap();
    let out = rms.forward(&x.as_view(), &shape).unwrap();
    let g = rms
        .backward(&x.as_view(), &dy.as_view(), &shape, &out.saved)
        .unwrap();
    assert_eq!(g.named().len(), 1);
    let got = Outputs {
        y: to_f64(&s.clone_dtoh(&out.y).unwrap()),
        rstd: to_f64(&s.clone_dtoh(&out.saved.rstd).unwrap()),
        dx: to_f64(&s.clone_dtoh(&g.dx).unwrap()),
        dweight: to_f64(&s.clone_dtoh(g.dweight.as_ref().unwrap()).unwrap()),
    };
    // The module's backward ran on its own forward's rstd; the check's reference backward
    // uses the reference rstd, within the same tolerance of it.
    check_outputs(&case, &data, &got, "(module)").unwrap();

    // infer, forward_into and backward_into give the same bits.
    let y2 = rms.infer(&x.as_view(), &shape).unwrap();
    assert_eq!(s.clone_dtoh(&y2).unwrap(), s.clone_dtoh(&out.y).unwrap());
    let mut saved = rms.alloc_saved(&shape).unwrap();
    let mut y3 = zeros::<bf16>(&s, 96 * 1024);
    rms.forward_into(&x.as_view(), &shape, y3.as_view_mut(), Some(&mut saved))
        .unwrap();
    assert_eq!(s.clone_dtoh(&y3).unwrap(), s.clone_dtoh(&out.y).unwrap());
    let mut dx = zeros::<bf16>(&s, 96 * 1024);
    let mut dw = zeros::<f32>(&s, 1024);
    rms.backward_into(
        &x.as_view(),
        &dy.as_view(),
        &shape,
        &saved,
        GradientBuffers {
            dx: dx.as_view_mut(),
            dweight: Some(dw.as_view_mut()),
        },
    )
    .unwrap();
    assert_eq!(s.clone_dtoh(&dx).unwrap(), s.clone_dtoh(&g.dx).unwrap());
    assert_eq!(
        s.clone_dtoh(&dw).unwrap(),
        s.clone_dtoh(g.dweight.as_ref().unwrap()).unwrap()
    );

    // Bad inputs: Errors, nothing launched.
    assert!(rms.forward(&x.as_view(), &[96, 1000]).is_err());
    assert!(rms
        .backward_into(
            &x.as_view(),
            &dy.as_view(),
            &shape,
            &saved,
            GradientBuffers {
                dx: dx.as_view_mut(),
                dweight: None,
            },
        )
        .is_err());
    assert!(rms.set_eps(-1.0).is_err());
    assert!(matches!(
        rms.load_state(&warpnorm::State {
            bias: Some(vec![0.0; 1024]),
            ..Default::default()
        }),
        Err(Error::UnexpectedKey { .. })
    ));
    let plain = RmsNorm::<f32>::new(&s, &[1024], false, Some(1e-6)).unwrap();
    assert!(plain.named_parameters().is_empty());
    let desc = RmsNormDesc::new(&shape, &[1024], DType::BF16, DType::F32, true, None).unwrap();
    let mut short = zeros::<bf16>(&s, 10);
    let r = forward::<bf16, f32>(
        &s,
        &desc,
        ForwardBuffers {
            x: x.as_view(),
            y: short.as_view_mut(),
            weight: rms.weight().map(|w| w.as_view()),
            rstd: None,
            workspace: None,
        },
    );
    assert!(matches!(r, Err(Error::Length { .. })), "{:?}", r.err());
}
