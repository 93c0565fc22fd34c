//! RMSNorm on tensors of more than 2^31 elements, and rows of 2^20 elements, on ptxsim (as
//! `tests/layer_norm/sim_huge.rs` for LayerNorm).
//!
//! **64-bit offsets.** Each case plans forward and backward for M x D > 2^31 elements and runs,
//! on ptxsim, only the block that owns the last row (every chunk of it in the split tier; in a
//! split first pass with more blocks, those owning that block's rows), whose rows lie past
//! element 2^31 (past byte 2^33 in the f32 case). The buffers are full-size
//! simulator allocations, mapped lazily, so only the rows written here use memory, and
//! initcheck proves the block reads nothing else. The outputs of those rows - y and rstd, dx
//! and the block's f32 partial dweight row - are compared with the CPU reference of exactly
//! those rows (the tolerances of `support.rs`). The finalize, which sums every block's partial
//! row, is not run: the other blocks did not run.
//!
//! **D = 2^20.** Full forward and backward plans (split tier, finalize included) on the
//! simulated 4-SM device, every output compared with the CPU reference.

use crate::support::{
    check_backward, check_forward, make_data, run_case, to_f64, Case, Data, Outputs, Views,
};
use half::{bf16, f16};
use testkit::rows::{
    gather_rows, last_block, owner_launch, props_with_sms, run_huge_shapes, run_row_blocks,
    scatter_rows, show_rows, HugeShape,
};
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::abi::{WnLayerNormBwdArgs, WnLayerNormFwdArgs};
use warpnorm::cpu::rms_norm::forward as cpu_forward;
use warpnorm::rms_norm::{
    plan_backward, plan_forward, workspace_bytes, BackwardPtrs, Direction, ForwardPtrs,
};
use warpnorm::{DType, DeviceProps, Element};

/// One huge case: the forward and backward of the block owning the last row.
fn run_huge<T: Element + Default, P: Element + Default>(
    arch: u32,
    h: &HugeShape,
) -> Result<String, String> {
    assert!(
        (h.rows - 1) * h.cols >= 1 << 31,
        "{h:?}: the last row must start past element 2^31 - 1"
    );
    let props = props_with_sms(h.sms);
    let case = |rows: usize, seed: u64| Case {
        rows,
        cols: h.cols,
        dtype: h.dtype,
        param_dtype: h.param_dtype,
        weight: !h.fewer_params,
        views: Views::Aligned,
        seed,
        x_offset: 3.0,
    };
    let full = case(h.rows, 0).desc();
    let (m, d, n) = (h.rows, h.cols, h.rows * h.cols);
    let mut sim = Sim::new(arch);
    let px = sim.alloc::<T>(n, h.offset);
    // The weight from a one-row case's data, the same for both sub-problems below.
    let weight = make_data::<T, P>(&case(1, 99)).weight;
    let pw = weight.as_ref().map(|w| sim.upload(w, 0));
    let sub = |rows: usize, seed: u64| {
        let c = case(rows, seed);
        let data = Data {
            weight: weight.clone(),
            ..make_data::<T, P>(&c)
        };
        (c, data)
    };

    // Forward.
    let py = sim.alloc::<T>(n, 0);
    let prstd = sim.alloc::<f32>(m, 0);
    let ws = workspace_bytes(&full, Direction::Forward, &props).map_err(|e| e.to_string())?;
    let pws = testkit::backend::row_norm_workspace(&mut sim, ws);
    let fptrs = ForwardPtrs {
        x: px,
        y: py,
        weight: pw,
        rstd: Some(prstd),
        workspace: pws,
        workspace_bytes: ws as u64,
    };
    let fwd = plan_forward(&full, &fptrs, &props).map_err(|e| e.to_string())?;
    let main = &fwd.launches[0];
    if !main.kernel.contains(h.tiers.0) {
        return Err(format!(
            "forward ran {}, not the {} tier",
            main.kernel, h.tiers.0
        ));
    }
    let a: WnLayerNormFwdArgs = main.args.get().expect("forward args");
    let (_, rows_f) = last_block(owner_launch(&fwd), m as u64, a.group);
    let (case_f, data_f) = sub(rows_f.len(), 1);
    scatter_rows(&mut sim, px, d, &rows_f, &data_f.x);
    let blocks_f = run_row_blocks(&mut sim, &fwd, a.group, m as u64, &rows_f)?;
    let got_f = Outputs {
        y: gather_rows::<T>(&sim, py, d, &rows_f),
        rstd: gather_rows::<f32>(&sim, prstd, 1, &rows_f),
        ..Outputs::default()
    };
    check_forward(&case_f, &data_f, &got_f, &format!("{fwd}"))?;
    sim.dev.free(py).map_err(|e| e.to_string())?;

    // Backward, from the reference's rstd of the block's rows.
    let pdy = sim.alloc::<T>(n, h.offset);
    let pdx = sim.alloc::<T>(n, 0);
    let pdw = weight.as_ref().map(|_| sim.alloc::<P>(d, 0));
    let ws = workspace_bytes(&full, Direction::Backward, &props).map_err(|e| e.to_string())?;
    let pwb = sim.alloc::<f32>(ws.div_ceil(4), 0);
    let bptrs = BackwardPtrs {
        x: px,
        dy: pdy,
        dx: pdx,
        weight: pw,
        rstd: prstd,
        dweight: pdw,
        workspace: pwb,
        workspace_bytes: ws as u64,
    };
    let bwd = plan_backward(&full, &bptrs, &props).map_err(|e| e.to_string())?;
    let main = &bwd.launches[0];
    if !main.kernel.contains(h.tiers.1) {
        return Err(format!(
            "backward ran {}, not the {} tier",
            main.kernel, h.tiers.1
        ));
    }
    let a: WnLayerNormBwdArgs = main.args.get().expect("backward args");
    let (bx, rows_b) = last_block(owner_launch(&bwd), m as u64, a.group);
    let (case_b, data_b) = sub(rows_b.len(), 2);
    let r = cpu_forward::<T, P>(&case_b.desc(), &data_b.x, data_b.weight.as_deref())
        .map_err(|e| e.to_string())?;
    scatter_rows(&mut sim, px, d, &rows_b, &data_b.x);
    scatter_rows(&mut sim, pdy, d, &rows_b, &data_b.dy);
    scatter_rows(&mut sim, prstd, 1, &rows_b, &r.rstd);
    let blocks_b = run_row_blocks(&mut sim, &bwd, a.group, m as u64, &rows_b)?;
    if !h.fewer_params && a.dgamma_part == 0 {
        return Err(format!("backward of {h:?} has no partial rows: {bwd}"));
    }
    // The block's f32 partial row (row blockIdx.x, stride part_stride) sums its rows'
    // dweight: the sub-problem's gradient before rounding.
    let dweight = if !h.fewer_params {
        let at = a.dgamma_part + bx as u64 * a.part_stride as u64 * 4;
        to_f64(&sim.download::<f32>(at, d))
    } else {
        Vec::new()
    };
    let got_b = Outputs {
        dx: gather_rows::<T>(&sim, pdx, d, &rows_b),
        dweight,
        ..Outputs::default()
    };
    check_backward(&case_b, &data_b, &got_b, &format!("{bwd}"))?;
    Ok(format!(
        "{m}x{d} {}/{}: fwd {} ({blocks_f} blocks, {}), bwd {} ({blocks_b} blocks, {})",
        h.dtype,
        h.param_dtype,
        fwd.launches[0].kernel,
        show_rows(&rows_f),
        bwd.launches[0].kernel,
        show_rows(&rows_b),
    ))
}

fn run_huge_dyn(arch: u32, h: &HugeShape) -> Result<String, String> {
    match (h.dtype, h.param_dtype) {
        (DType::F32, DType::F32) => run_huge::<f32, f32>(arch, h),
        (DType::F16, DType::F16) => run_huge::<f16, f16>(arch, h),
        (DType::F16, DType::F32) => run_huge::<f16, f32>(arch, h),
        (DType::BF16, DType::BF16) => run_huge::<bf16, bf16>(arch, h),
        (DType::BF16, DType::F32) => run_huge::<bf16, f32>(arch, h),
        (t, p) => Err(format!("unsupported dtype pair {t}/{p}")),
    }
}

#[test]
fn rms_norm_past_two_to_the_31_elements() {
    if skip_without_kernels("rms_norm_past_two_to_the_31_elements") {
        return;
    }
    let failures = run_huge_shapes(run_huge_dyn);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn rms_norm_rows_of_two_to_the_20_elements() {
    if skip_without_kernels("rms_norm_rows_of_two_to_the_20_elements") {
        return;
    }
    for (dtype, param_dtype, rows) in [(DType::F32, DType::F32, 2), (DType::BF16, DType::F32, 1)] {
        let case = Case {
            rows,
            cols: 1 << 20,
            dtype,
            param_dtype,
            weight: true,
            views: Views::Aligned,
            seed: 5,
            x_offset: 1000.0,
        };
        let t = std::time::Instant::now();
        let mut sim = Sim::new(80);
        let ran = match (dtype, param_dtype) {
            (DType::F32, DType::F32) => run_case::<f32, f32>(&mut sim, &case, &DeviceProps::SIM),
            _ => run_case::<bf16, f32>(&mut sim, &case, &DeviceProps::SIM),
        }
        .unwrap_or_else(|e| panic!("{case:?}: {e}"));
        for plan in [&ran.fwd, &ran.bwd] {
            assert!(
                plan.launches[0].kernel.contains("_split_"),
                "D = 2^20 must take the split tier:\n{plan}"
            );
        }
        eprintln!("{case:?}: ok in {:?}", t.elapsed());
    }
}
