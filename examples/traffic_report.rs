//! Memory-traffic report from ptxsim's metrics: for LayerNorm and BatchNorm plans, the unique
//! global bytes touched (first touch of each 32-byte sector: a lower bound on DRAM traffic)
//! against each op's minimum, and the coalescing of every global request (a request is
//! uncoalesced when it touches more 32-byte sectors than `ceil(distinct bytes / 32)`; the
//! offending instructions are listed after the table with their CUDA source lines).
//!
//! Regenerate (needs the kernels built; `WARPNORM_CUDA_ARCHS=90` is enough):
//! ```text
//! { echo "Generated $(date -u +%F) at commit $(git rev-parse --short HEAD) with \
//!   \`cargo run --release --example traffic_report\` (nvcc $(${NVCC:-nvcc} --version | \
//!   sed -n 's/.*release \([0-9.]*\).*V\([0-9.]*\).*/\2/p'), ptxsim)."; echo; \
//!   cargo run --release --example traffic_report; } > reports/traffic.md
//! ```
//!
//! Plans are made for `DeviceProps::SIM` (4 SMs) on ~1-4 M element problems: the extra traffic
//! of per-block partial results scales as blocks / rows, so a 4-SM device with 512 rows has
//! the same ratio as an H200 (132 SMs) with ~30x more rows, which would take too long to
//! simulate. The H200 column gives that ratio computed from the H200 plan's grid.

use testkit::{coalescing, sim};
use warpnorm::batch_norm::{self as bn, BatchNormDesc, Layout, Mode};
use warpnorm::layer_norm::{self as ln, Affine, Direction, LayerNormDesc};
use warpnorm::{kernels, DType, DeviceProps, Element, Plan};

/// Uncoalesced instructions listed per kernel in the notes.
const NOTE_LINES: usize = 4;

/// What one plan's launches did, summed.
struct Traffic {
    unique: u64,
    requests: u64,
    uncoalesced: u64,
    sectors: u64,
    ideal_sectors: u64,
    /// Launches with uncoalesced requests: kernel, and its description (PTX lines, source
    /// lines, at most [`NOTE_LINES`] instructions).
    notes: Vec<(String, String)>,
}

fn run(s: &mut sim::Sim, plan: &Plan) -> Traffic {
    let stats = s.run(plan).unwrap_or_else(|e| panic!("ptxsim: {e}"));
    let mut t = Traffic {
        unique: 0,
        requests: 0,
        uncoalesced: 0,
        sectors: 0,
        ideal_sectors: 0,
        notes: Vec::new(),
    };
    for (l, st) in plan.launches.iter().zip(&stats) {
        let m = st.metrics.as_ref().expect("metrics are on");
        t.unique += m.unique_bytes;
        t.requests += m.global_requests();
        t.uncoalesced += m.uncoalesced_requests();
        t.sectors += m.global_sectors();
        t.ideal_sectors += m.global_ideal_sectors();
        if m.uncoalesced_requests() != 0 {
            let full = coalescing::describe(&l.kernel, s.arch, m);
            // The header line, then two lines per instruction.
            let mut text: String = full
                .lines()
                .take(1 + 2 * NOTE_LINES)
                .map(|x| format!("{x}\n"))
                .collect();
            if m.uncoalesced_lines.len() > NOTE_LINES {
                let more = m.uncoalesced_lines.len() - NOTE_LINES;
                text += &format!("    ... {more} more PTX lines\n");
            }
            t.notes.push((l.kernel.clone(), text));
        }
    }
    t
}

fn sim() -> sim::Sim {
    let mut s = sim::Sim::new(90);
    let mut o = s.dev.options().clone();
    o.metrics = true;
    s.dev.set_options(o);
    s
}

fn fill<T: Element>(n: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from_f64(((i * 7919) % 1000) as f64 / 500.0 - 1.0))
        .collect()
}

/// Prints one table row; keeps the coalescing note of each kernel's first launch with
/// uncoalesced requests for after the table.
fn row(
    notes: &mut Vec<(String, String)>,
    op: &str,
    shape: &str,
    dt: &str,
    min: f64,
    t: &Traffic,
    h200: Option<f64>,
) {
    println!(
        "| {op} | {shape} | {dt} | {:.0} | {:.4} | {} | {} / {} | {:.4} |",
        min,
        t.unique as f64 / min,
        h200.map_or("-".into(), |r| format!("{r:.4}")),
        t.uncoalesced,
        t.requests,
        t.sectors as f64 / t.ideal_sectors.max(1) as f64
    );
    for (kernel, n) in &t.notes {
        if !notes.iter().any(|(k, _)| k == kernel) {
            notes.push((kernel.clone(), format!("{op} {shape} {dt}: {n}")));
        }
    }
}

/// A LayerNorm description of rows x cols, T activations, f32 gamma and beta.
fn ln_desc<T: Element>(rows: usize, cols: usize) -> LayerNormDesc {
    LayerNormDesc::new(
        &[rows, cols],
        &[cols],
        T::DTYPE,
        DType::F32,
        Affine::WeightBias,
        1e-5,
    )
    .expect("desc")
}

/// The forward's split tier (rows split into chunks across blocks; 2 rows of 65536, fewer
/// rows than the 4-SM device has SMs): the cooperative pass, which holds each chunk in shared
/// memory across its grid barrier (x read once), and the two launches a device without
/// cooperative launches gets (split_stats, then split_norm: x read twice).
fn layer_norm_split<T: Element + Default>(notes: &mut Vec<(String, String)>) {
    let (rows, cols) = (2usize, 1usize << 16);
    let desc = ln_desc::<T>(rows, cols);
    let shape = format!("{rows} x {cols}");
    let dt = format!("{}/f32", T::DTYPE);
    let min = 2.0 * T::DTYPE.size() as f64 * (rows * cols) as f64;
    let no_coop = DeviceProps {
        cooperative_launch: false,
        ..DeviceProps::SIM
    };
    for (props, op, coop) in [
        (DeviceProps::SIM, "LayerNorm fwd split, cooperative", true),
        (no_coop, "LayerNorm fwd split, 2 launches", false),
    ] {
        let mut s = sim();
        let ws_bytes = ln::workspace_bytes(&desc, Direction::Forward, &props).unwrap();
        let fp = ln::ForwardPtrs {
            x: s.upload(&fill::<T>(rows * cols), 0),
            y: s.alloc::<T>(rows * cols, 0),
            gamma: Some(s.upload(&fill::<f32>(cols), 0)),
            beta: Some(s.upload(&fill::<f32>(cols), 0)),
            mean: Some(s.alloc::<f32>(rows, 0)),
            rstd: Some(s.alloc::<f32>(rows, 0)),
            mean_lo: Some(s.alloc::<f32>(rows, 0)),
            workspace: testkit::backend::row_norm_workspace(&mut s, ws_bytes),
            workspace_bytes: ws_bytes as u64,
        };
        let plan = ln::plan_forward(&desc, &fp, &props).expect("plan");
        let names: Vec<&str> = plan.launches.iter().map(|l| l.kernel.as_str()).collect();
        assert_eq!(
            names.iter().any(|k| k.contains("_split_coop_")),
            coop,
            "{op}: planned {names:?}"
        );
        let t = run(&mut s, &plan);
        row(notes, op, &shape, &dt, min, &t, None);
    }
}

fn layer_norm<T: Element + Default>(notes: &mut Vec<(String, String)>, cols: usize) {
    let props = DeviceProps::SIM;
    // At least 512 rows: 128 rows per block of the 4-SM device's one-wave backward grid, as
    // 16384 rows give on an H200's 132 blocks (the partial-row share is blocks / rows).
    let rows = ((1usize << 20) / cols).max(512);
    let s_ = T::DTYPE.size() as f64;
    let desc = ln_desc::<T>(rows, cols);
    let mut s = sim();
    let x = s.upload(&fill::<T>(rows * cols), 0);
    let dy = s.upload(&fill::<T>(rows * cols), 0);
    let g = s.upload(&fill::<f32>(cols), 0);
    let b = s.upload(&fill::<f32>(cols), 0);
    let y = s.alloc::<T>(rows * cols, 0);
    let dx = s.alloc::<T>(rows * cols, 0);
    let m = s.alloc::<f32>(rows, 0);
    let r = s.alloc::<f32>(rows, 0);
    let lo = s.alloc::<f32>(rows, 0);
    let dg = s.alloc::<f32>(cols, 0);
    let db = s.alloc::<f32>(cols, 0);
    let ws_bytes = ln::workspace_bytes(&desc, Direction::Backward, &props)
        .unwrap()
        .max(ln::workspace_bytes(&desc, Direction::Forward, &props).unwrap());
    let ws = testkit::backend::row_norm_workspace(&mut s, ws_bytes);
    let fp = ln::ForwardPtrs {
        x,
        y,
        gamma: Some(g),
        beta: Some(b),
        mean: Some(m),
        rstd: Some(r),
        mean_lo: Some(lo),
        workspace: ws,
        workspace_bytes: ws_bytes as u64,
    };
    let bp = ln::BackwardPtrs {
        x,
        dy,
        dx,
        gamma: Some(g),
        mean: m,
        rstd: r,
        mean_lo: Some(lo),
        dgamma: Some(dg),
        dbeta: Some(db),
        workspace: ws,
        workspace_bytes: ws_bytes as u64,
    };
    let n = (rows * cols) as f64;
    let shape = format!("{rows} x {cols}");
    let dt = format!("{}/f32", T::DTYPE);
    let fwd = run(&mut s, &ln::plan_forward(&desc, &fp, &props).expect("plan"));
    row(
        notes,
        "LayerNorm fwd",
        &shape,
        &dt,
        2.0 * s_ * n,
        &fwd,
        None,
    );
    let plan = ln::plan_backward(&desc, &bp, &props).expect("plan");
    let bwd = run(&mut s, &plan);
    // Partial rows (dgamma, dbeta: 2 f32 per column per block of the backward kernel, rows
    // padded to part_stride floats) are written by the main kernel and read back by the
    // finalize. ptxsim counts unique sectors per launch, so the per-launch sum counts them
    // twice; the plan's unique bytes (every sector once) subtract the finalize's reads, which
    // are exactly those sectors. The H200 ratio replaces the simulated plan's partial bytes
    // by the H200 plan's (16384 rows): (sim unique - sim partial) / sim min + H200 partial /
    // H200 min.
    let part_of = |p: &Plan| -> f64 {
        p.launches
            .iter()
            .filter_map(|l| l.args.get::<warpnorm::abi::WnLayerNormFinalizeArgs>())
            .map(|f| {
                let arrays = u64::from(f.dgamma_part != 0)
                    + u64::from(f.dbeta_part != 0)
                    + u64::from(f.dy_sum_part != 0);
                (f.part_rows as u64 * f.part_stride as u64 * 4 * arrays) as f64
            })
            .sum()
    };
    let mut bwd = bwd;
    let sim_partial = part_of(&plan);
    bwd.unique -= sim_partial as u64;
    let h_desc = ln_desc::<T>(16384, cols);
    let h_ws = ln::workspace_bytes(&h_desc, Direction::Backward, &DeviceProps::H200).unwrap();
    // Planned only, never run: distinct 256-byte aligned addresses (as the simulator's), far
    // enough apart that the 16384-row buffers do not overlap (the planner rejects that).
    let at = |i: u64| (i + 1) << 40;
    let hp = ln::BackwardPtrs {
        x: at(0),
        dy: at(1),
        dx: at(2),
        gamma: Some(at(3)),
        mean: at(4),
        rstd: at(5),
        mean_lo: Some(at(9)),
        dgamma: Some(at(6)),
        dbeta: Some(at(7)),
        workspace: at(8),
        workspace_bytes: h_ws as u64,
    };
    let h_plan = ln::plan_backward(&h_desc, &hp, &DeviceProps::H200).unwrap();
    let h_min = 3.0 * s_ * 16384.0 * cols as f64;
    let h_partial = part_of(&h_plan);
    let h_ratio = (bwd.unique as f64 - sim_partial) / (3.0 * s_ * n) + h_partial / h_min;
    row(
        notes,
        "LayerNorm bwd",
        &shape,
        &dt,
        3.0 * s_ * n,
        &bwd,
        Some(h_ratio),
    );
    // The fused residual add's backward with the bias gradient (x is h; dh added into dx):
    // read h, dy, dh and write dx (4s); dgamma, dbias and dbeta all from the backward kernel's
    // partial rows (the block tier sums dbeta beside dbias), counted once as above.
    let dh = s.upload(&fill::<T>(rows * cols), 0);
    let dbias = s.alloc::<f32>(cols, 0);
    let r_bytes = ln::workspace_bytes_residual(&desc, true, &props).unwrap();
    let r_ws = s.alloc::<f32>(r_bytes.div_ceil(4).max(1), 0);
    let rp = ln::BackwardPtrs {
        workspace: r_ws,
        workspace_bytes: r_bytes as u64,
        ..bp
    };
    let g = ln::ResidualGrads {
        dh: Some(dh),
        dbias: Some(dbias),
    };
    let r_plan = ln::plan_backward_residual(&desc, &rp, &g, &props).expect("plan");
    let mut res = run(&mut s, &r_plan);
    res.unique -= part_of(&r_plan) as u64;
    row(
        notes,
        "LayerNorm res bwd + dbias",
        &shape,
        &dt,
        4.0 * s_ * n,
        &res,
        None,
    );
}

fn batch_norm<T: Element + Default>(
    notes: &mut Vec<(String, String)>,
    dims: &[usize],
    layout: Layout,
) {
    let props = DeviceProps::SIM;
    let s_ = T::DTYPE.size() as f64;
    let desc = BatchNormDesc::new(dims, layout, T::DTYPE, DType::F32).with_mode(Mode::train(0.1));
    let eval_desc = desc.clone().with_mode(Mode::eval());
    let c = dims[1];
    let n: usize = dims.iter().product();
    let mut s = sim();
    let x = s.upload(&fill::<T>(n), 0);
    let dy = s.upload(&fill::<T>(n), 0);
    let y = s.alloc::<T>(n, 0);
    let dx = s.alloc::<T>(n, 0);
    let g = s.upload(&vec![1.0f32; c], 0);
    let b = s.upload(&vec![0.0f32; c], 0);
    let rm = s.upload(&vec![0.0f32; c], 0);
    let rv = s.upload(&vec![1.0f32; c], 0);
    let nbt = s.dev.alloc_zeroed(8).unwrap();
    let sm = s.alloc::<f32>(c, 0);
    let sml = s.alloc::<f32>(c, 0);
    let si = s.alloc::<f32>(c, 0);
    let dg = s.alloc::<f32>(c, 0);
    let db = s.alloc::<f32>(c, 0);
    let ws_bytes = bn::workspace_bytes(&desc, bn::Direction::Forward, &props)
        .unwrap()
        .max(bn::workspace_bytes(&desc, bn::Direction::Backward, &props).unwrap());
    let ws = s.alloc::<f32>(ws_bytes.div_ceil(4).max(1), 0);
    // The reductions' arrival counters (C rounded up to 8 words at the start) start at zero.
    s.write(ws, &vec![0.0f32; c.div_ceil(8) * 8]);
    let fp = bn::ForwardPtrs {
        x,
        y,
        gamma: Some(g),
        beta: Some(b),
        running_mean: Some(rm),
        running_var: Some(rv),
        num_batches_tracked: Some(nbt),
        save_mean: Some(sm),
        save_mean_lo: Some(sml),
        save_invstd: Some(si),
        workspace: ws,
        workspace_bytes: ws_bytes as u64,
    };
    let bp = bn::BackwardPtrs {
        x,
        dy,
        dx,
        gamma: Some(g),
        save_mean: sm,
        save_mean_lo: Some(sml),
        save_invstd: si,
        dgamma: Some(dg),
        dbeta: Some(db),
        workspace: ws,
        workspace_bytes: ws_bytes as u64,
    };
    let shape = format!("{dims:?} {layout:?}");
    let dt = format!("{}/f32", T::DTYPE);
    let n = n as f64;
    let t = run(&mut s, &bn::plan_forward(&desc, &fp, &props).unwrap());
    row(
        notes,
        "BatchNorm train fwd",
        &shape,
        &dt,
        3.0 * s_ * n,
        &t,
        None,
    );
    let t = run(&mut s, &bn::plan_backward(&desc, &bp, &props).unwrap());
    row(
        notes,
        "BatchNorm train bwd",
        &shape,
        &dt,
        5.0 * s_ * n,
        &t,
        None,
    );
    let t = run(&mut s, &bn::plan_forward(&eval_desc, &fp, &props).unwrap());
    row(
        notes,
        "BatchNorm eval fwd",
        &shape,
        &dt,
        2.0 * s_ * n,
        &t,
        None,
    );
    let t = run(&mut s, &bn::plan_backward(&eval_desc, &bp, &props).unwrap());
    row(
        notes,
        "BatchNorm eval bwd grads",
        &shape,
        &dt,
        3.0 * s_ * n,
        &t,
        None,
    );
}

fn main() {
    if !kernels::BUILT {
        println!("kernels not built: {}", kernels::NOT_BUILT_REASON);
        return;
    }
    println!(
        "# Simulated memory traffic (ptxsim metrics, compute_90 PTX, planned for a 4-SM device)\n"
    );
    println!(
        "min = the op's minimum DRAM bytes (LayerNorm fwd 2s, bwd 3s; BatchNorm train fwd 3s, \
         train bwd 5s, eval fwd 2s, eval bwd with dgamma / dbeta 3s per element, s = activation \
         bytes). unique/min counts every 32-byte sector touched once per launch (parameters, \
         statistics and partial results included), summed over the plan's launches: a later launch that re-reads a sector \
         (BatchNorm's second sweep over x) pays for it again. One exception: the LayerNorm \
         backward's per-block partial rows (dgamma, dbeta: 8 bytes per column per block, rows \
         padded to 8 floats) are written by the main kernel and read back at once by the \
         finalize kernel; they are counted once (the finalize's reads are subtracted). They \
         are at most a few MB (132 x 8192 x 8 B = 8.6 MB on an H200), so the finalize reads \
         them from L2 (50 MB on an H200). LayerNorm runs at least 512 rows: 128 rows per block \
         of the 4-SM device's backward grid, as 16384 rows give an H200's 132 blocks. \
         LayerNorm res bwd + dbias: the fused residual add's backward with the bias gradient \
         (read h, dy and dh, write dx: 4s; dgamma, dbias and dbeta from the backward kernel's \
         partial rows, counted once likewise). LayerNorm fwd split: 2 rows of 65536, each \
         split into chunks across blocks; the cooperative pass holds each chunk in shared \
         memory across its grid barrier (x read once), the two launches of a device without \
         cooperative launches read x twice (0.5 more of the minimum, of which x is half). At \
         2 rows, gamma and beta (f32, 512 KiB) add 0.5 of the minimum in f32/f32 and 1.0 in \
         bf16/f32.\n\n\
         H200 16384 rows (LayerNorm bwd): the same ratio for an H200 plan with 16384 rows: \
         (sim unique - sim partial bytes) / sim min + H200 partial bytes / H200 min, partial \
         bytes = partial rows x padded cols x 4 x 2 of each plan.\n\n\
         uncoalesced / requests: global requests (warp-level loads, stores, atomics) that touch \
         more 32-byte sectors than ceil(distinct bytes / 32), of all global requests; \
         sectors/ideal: sectors of all requests over that ideal (1 = fully coalesced). \
         Aligned shapes, which must be fully coalesced (tests/layer_norm/coalescing.rs, \
         tests/batch_norm/coalescing.rs): 32-byte aligned buffers, LayerNorm rows a multiple of the \
         vector width, BatchNorm per-channel slices (NCHW: spatial x s; channels-last: C x s) \
         a multiple of 32 bytes. The 14 x 14 and 7 x 7 BatchNorm rows are not aligned (784 \
         and 196 bytes per (n, c) slice in f32, 392 and 98 in bf16): a warp's requests \
         straddle the slices' partial sectors. Their slices take the `vecodd` kernels (16-byte \
         packs; scalar only for S < V or misaligned views): the reductions read whole covering \
         sectors (the eval-mode backward's sums also write dx, by whole sectors: each sector \
         by the slice that holds its last element), the elementwise passes stream the flat \
         tensor, and the fused tier, whose \
         blocks own one channel each, stores a slice's partial end packs element by element \
         (the neighbouring channel's block writes the rest of those packs): those stores are \
         what remains above 1 in the fused 7 x 7 rows.\n"
    );
    println!(
        "| op | shape | dtype | min bytes | unique/min | H200 16384 rows | uncoalesced / requests | sectors/ideal |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut notes = Vec::new();
    for cols in [768, 1024, 4096, 8192] {
        layer_norm::<f32>(&mut notes, cols);
        layer_norm::<half::bf16>(&mut notes, cols);
    }
    layer_norm_split::<f32>(&mut notes);
    layer_norm_split::<half::bf16>(&mut notes);
    for (dims, layout) in [
        (vec![8usize, 64, 32, 32], Layout::Contiguous),
        (vec![8, 64, 32, 32], Layout::ChannelsLast),
        (vec![131072, 8], Layout::Contiguous),
        (vec![16, 256, 14, 14], Layout::Contiguous),
        (vec![16, 256, 7, 7], Layout::Contiguous),
    ] {
        batch_norm::<f32>(&mut notes, &dims, layout);
        batch_norm::<half::bf16>(&mut notes, &dims, layout);
    }
    if !notes.is_empty() {
        println!("\n## Uncoalesced requests\n");
        println!(
            "Per kernel, its first launch above with uncoalesced requests: the PTX lines \
             (compute_90) that made them, most excess sectors first (at most {NOTE_LINES}), with \
             the instruction and its CUDA source line (`.loc`; inlined helpers name their own \
             file).\n"
        );
        println!("```text");
        for (_, n) in notes {
            print!("{n}");
        }
        println!("```");
    }
}
