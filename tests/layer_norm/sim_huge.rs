//! LayerNorm on tensors of more than 2^31 elements, and rows of 2^20 elements, on ptxsim.
//!
//! **64-bit offsets.** Each case plans forward and backward for M x D > 2^31 elements (16-bit
//! activations: byte offsets pass 2^32 too; one f32 case: 2^34 bytes) and runs, on ptxsim, only
//! the block that owns the last row (every chunk of it in the split tier; in a split first
//! pass with more blocks, the blocks owning that block's rows: `run_row_blocks`): its rows lie
//! past element 2^31. The buffers are real simulator allocations of the full size, mapped lazily by
//! the host, so only the rows written here use memory, and initcheck proves the block reads
//! nothing else. The rows a block owns follow the kernels' grid-stride rule over rows (the
//! ABI's `group` and the launch's block shape give the rows per block and step), so the forward
//! (one row or one group of rows per block) and the backward (about `bwd_min_rows_per_block`
//! rows per block, a grid-stride step apart) both reach rows on either side of 2^31 / D. The
//! outputs of those rows - y, mean, rstd, dx, and the block's f32 dgamma/dbeta partial row -
//! are compared with the CPU reference of exactly those rows (tolerances of
//! `tests/layer_norm/support.rs`). The finalize kernel, which sums every block's partial row, is not
//! run: the other blocks did not run.
//!
//! **D = 2^20.** Full forward and backward plans (split tier, finalize included) on the
//! simulated 4-SM device, every output compared with the CPU reference.

use crate::support::{
    check_backward, check_forward, make_data, plan_bwd_sim, plan_fwd_sim, reference_forward,
    run_case, to_f64, Case, Outputs, Views,
};
use half::{bf16, f16};
use testkit::rows::{
    gather_rows, last_block, owner_launch, props_with_sms, run_huge_shapes, run_row_blocks,
    scatter_rows, show_rows, HugeShape,
};
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::abi::{WnLayerNormBwdArgs, WnLayerNormFwdArgs};
use warpnorm::layer_norm::Affine;
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
        affine: if h.fewer_params {
            Affine::Weight
        } else {
            Affine::WeightBias
        },
        views: Views::Aligned,
        seed,
        x_offset: 3.0,
    };
    let full = case(h.rows, 0).desc();
    let (m, d, n) = (h.rows, h.cols, h.rows * h.cols);
    let mut sim = Sim::new(arch);
    let px = sim.alloc::<T>(n, h.offset);
    // Parameters from the data of a one-row case (the same for every sub-problem below).
    let params: crate::support::Data<T, P> = make_data(&case(1, 99));
    let pg = params.gamma.as_ref().map(|g| sim.upload(g, 0));
    let pb = params.beta.as_ref().map(|b| sim.upload(b, 0));
    let with_params = |mut data: crate::support::Data<T, P>| {
        data.gamma = params.gamma.clone();
        data.beta = params.beta.clone();
        data
    };

    // Forward.
    let f = plan_fwd_sim::<T>(&mut sim, &full, &props, px, 0, pg, pb)?;
    let (fwd, py, pmean, prstd, plo) = (f.plan, f.y, f.mean, f.rstd, f.mean_lo);
    let main = &fwd.launches[0];
    if !main.kernel.contains(h.tiers.0) {
        return Err(format!(
            "forward ran {}, not the {} tier",
            main.kernel, h.tiers.0
        ));
    }
    let a: WnLayerNormFwdArgs = main.args.get().expect("forward args");
    let (_, rows_f) = last_block(owner_launch(&fwd), m as u64, a.group);
    let sub_f = case(rows_f.len(), 1);
    let data_f = with_params(make_data::<T, P>(&sub_f));
    scatter_rows(&mut sim, px, d, &rows_f, &data_f.x);
    let blocks_f = run_row_blocks(&mut sim, &fwd, a.group, m as u64, &rows_f)?;
    let got_f = Outputs {
        y: gather_rows::<T>(&sim, py, d, &rows_f),
        mean: gather_rows::<f32>(&sim, pmean, 1, &rows_f),
        rstd: gather_rows::<f32>(&sim, prstd, 1, &rows_f),
        mean_lo: gather_rows::<f32>(&sim, plo, 1, &rows_f),
        ..Outputs::default()
    };
    check_forward(&sub_f, &data_f, &got_f, &format!("{fwd}"))?;
    sim.dev.free(py).map_err(|e| e.to_string())?;

    // Backward, from the reference's statistics of the block's rows.
    let pdy = sim.alloc::<T>(n, h.offset);
    let b = plan_bwd_sim::<T, P>(
        &mut sim,
        &full,
        &props,
        (px, pdy, pg),
        (pmean, prstd, Some(plo)),
        0,
        0,
    )?;
    let (bwd, pdx) = (b.plan, b.dx);
    let main = &bwd.launches[0];
    if !main.kernel.contains(h.tiers.1) {
        return Err(format!(
            "backward ran {}, not the {} tier",
            main.kernel, h.tiers.1
        ));
    }
    let a: WnLayerNormBwdArgs = main.args.get().expect("backward args");
    let (bx, rows_b) = last_block(owner_launch(&bwd), m as u64, a.group);
    let sub_b = case(rows_b.len(), 2);
    let data_b = with_params(make_data::<T, P>(&sub_b));
    let (r, ..) = reference_forward(&sub_b, &data_b)?;
    scatter_rows(&mut sim, px, d, &rows_b, &data_b.x);
    scatter_rows(&mut sim, pdy, d, &rows_b, &data_b.dy);
    scatter_rows(&mut sim, pmean, 1, &rows_b, &r.mean);
    scatter_rows(&mut sim, prstd, 1, &rows_b, &r.rstd);
    scatter_rows(&mut sim, plo, 1, &rows_b, &r.mean_lo);
    let blocks_b = run_row_blocks(&mut sim, &bwd, a.group, m as u64, &rows_b)?;
    // The block's f32 partial rows (row blockIdx.x, stride part_stride) sum its rows'
    // dgamma / dbeta: the sub-problem's gradients before rounding.
    let part = |p: u64| {
        (p != 0).then(|| to_f64(&sim.download::<f32>(p + bx as u64 * a.part_stride as u64 * 4, d)))
    };
    let got_b = Outputs {
        dx: gather_rows::<T>(&sim, pdx, d, &rows_b),
        dgamma: part(a.dgamma_part).unwrap_or_default(),
        dbeta: part(a.dbeta_part).unwrap_or_default(),
        ..Outputs::default()
    };
    if a.dgamma_part == 0 {
        return Err(format!("backward of {h:?} has no partial rows: {bwd}"));
    }
    check_backward(&sub_b, &data_b, &got_b, &format!("{bwd}"))?;
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
fn past_two_to_the_31_elements() {
    if skip_without_kernels("past_two_to_the_31_elements") {
        return;
    }
    let failures = run_huge_shapes(run_huge_dyn);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn rows_of_two_to_the_20_elements() {
    if skip_without_kernels("rows_of_two_to_the_20_elements") {
        return;
    }
    for (dtype, param_dtype, affine, rows) in [
        (DType::F32, DType::F32, Affine::WeightBias, 2),
        (DType::BF16, DType::F32, Affine::Weight, 1),
    ] {
        let case = Case {
            rows,
            cols: 1 << 20,
            dtype,
            param_dtype,
            affine,
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
