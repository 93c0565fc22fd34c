//! Every call into warpnorm's planning API, in this one file: the cases the model predicts
//! (op x shape x dtype pair, planned for a device; LayerNorm and RMSNorm also with the fused
//! residual forward) and the DRAM bytes of each launch, which
//! depend on the kernels' names and argument structs.
//!
//! Shapes: the benches' (benches/layer_norm.rs, benches/batch_norm.rs), the LayerNorm row
//! lengths of issue 12 at 16384 rows, the channels-last grid of issue 11 ([256, 256, 14, 14])
//! and small-batch shapes that fill about one wave; then issue 13's BatchNorm shape set
//! (every ResNet-50 BatchNorm2d layer at batch 32 and 128 in both layouts, 131072x8,
//! 4096x4096), summarized in the report. Pointers are distinct, 256-byte aligned fake
//! addresses: plans depend only on their residues.

use warpnorm::abi::{
    WnBatchNormCoopBwdArgs, WnBatchNormCoopFwdArgs, WnBatchNormReduceArgs, WnBatchNormStatsArgs,
    WnBatchNormSumsArgs, WnLayerNormBwdArgs, WnLayerNormFwdArgs, WN_BN_FOLD,
};
use warpnorm::batch_norm::{self as bn, BatchNormDesc, Layout, Mode};
use warpnorm::copy::plan_copy;
use warpnorm::layer_norm::{self as ln, Affine, Direction, LayerNormDesc, ResidualPtrs};
use warpnorm::rms_norm::{self as rms, RmsNormDesc};
use warpnorm::{DType, DeviceProps, Launch, Plan};

/// The ops the model predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// LayerNorm forward (weight and bias).
    LnFwd,
    /// LayerNorm backward (dx, dgamma, dbeta).
    LnBwd,
    /// BatchNorm training forward (batch statistics, running statistics updated).
    BnTrainFwd,
    /// BatchNorm training backward.
    BnTrainBwd,
    /// BatchNorm eval forward (an apply pass with the running statistics).
    BnEvalFwd,
    /// BatchNorm eval backward (dx = dy * gamma * invstd: an apply pass), without the
    /// parameters' gradients.
    BnEvalBwd,
    /// BatchNorm eval backward with dgamma and dbeta: x is read too (dgamma = sum(dy * (x -
    /// mean)) * invstd), so the minimum is 3 bytes per element of the activation size.
    BnEvalBwdGrads,
    /// Device-to-device copy (the roofline itself).
    Copy,
    /// RMSNorm forward (with a weight).
    RmsFwd,
    /// RMSNorm backward (dx, dweight).
    RmsBwd,
    /// LayerNorm forward with the fused residual add (h = x + residual + bias stored, y of h).
    LnResFwd,
    /// RMSNorm forward with the fused residual add (as [`Op::LnResFwd`], with a weight).
    RmsResFwd,
    /// LayerNorm backward of the fused residual add (h, dy and dh read, dx written).
    LnResBwd,
    /// RMSNorm backward of the fused residual add (as [`Op::LnResBwd`]).
    RmsResBwd,
    /// [`Op::LnResBwd`] with the bias's gradient (dbias, summed by the backward kernels;
    /// dbeta beside it in the block and split tiers' kernels, else by two more launches, the
    /// column sum of dy, that read dy again).
    LnResBwdBias,
    /// [`Op::RmsResBwd`] with the bias's gradient (summed by the backward kernels: no more
    /// activation traffic).
    RmsResBwdBias,
}

impl Op {
    /// Name in reports and in `below_budget.txt` (no spaces).
    pub fn name(self) -> &'static str {
        match self {
            Op::LnFwd => "LayerNorm-fwd",
            Op::LnBwd => "LayerNorm-bwd",
            Op::BnTrainFwd => "BatchNorm-train-fwd",
            Op::BnTrainBwd => "BatchNorm-train-bwd",
            Op::BnEvalFwd => "BatchNorm-eval-fwd",
            Op::BnEvalBwd => "BatchNorm-eval-bwd",
            Op::BnEvalBwdGrads => "BatchNorm-eval-bwd-grads",
            Op::Copy => "copy",
            Op::RmsFwd => "RMSNorm-fwd",
            Op::RmsBwd => "RMSNorm-bwd",
            Op::LnResFwd => "LayerNorm-res-fwd",
            Op::RmsResFwd => "RMSNorm-res-fwd",
            Op::LnResBwd => "LayerNorm-res-bwd",
            Op::RmsResBwd => "RMSNorm-res-bwd",
            Op::LnResBwdBias => "LayerNorm-res-bwd-dbias",
            Op::RmsResBwdBias => "RMSNorm-res-bwd-dbias",
        }
    }

    /// Minimum DRAM bytes per element in units of the activation size (shared/KERNELS.md;
    /// the fused residual forward reads x and the residual and writes h and y, its backward
    /// reads h, dy and dh and writes dx, issue 17; with the bias's gradient the minimum is the
    /// same: the pass that writes dx sums it too - RMSNorm's plan moves just that, and so does
    /// LayerNorm's block and split tiers, which sum dbeta beside it; its warp tiers read dy
    /// again for dbeta, whose accumulators then hold dbias).
    pub fn min_bytes_factor(self) -> f64 {
        match self {
            Op::LnFwd | Op::RmsFwd | Op::BnEvalFwd | Op::BnEvalBwd | Op::Copy => 2.0,
            Op::LnBwd | Op::RmsBwd | Op::BnTrainFwd | Op::BnEvalBwdGrads => 3.0,
            Op::LnResFwd
            | Op::RmsResFwd
            | Op::LnResBwd
            | Op::RmsResBwd
            | Op::LnResBwdBias
            | Op::RmsResBwdBias => 4.0,
            Op::BnTrainBwd => 5.0,
        }
    }

    /// The budget (fraction of the copy roofline) issue 11 sets: 90% for LayerNorm forward and
    /// BatchNorm eval/apply passes, 85% for LayerNorm backward and BatchNorm training; RMSNorm
    /// and the fused residual forwards (issue 17) as the LayerNorm forward, the fused residual
    /// backwards as the LayerNorm backward; the eval backward with the parameters' gradients
    /// (a reduction over x and dy, as in training) as BatchNorm training.
    pub fn budget(self) -> Option<f64> {
        match self {
            Op::LnFwd
            | Op::RmsFwd
            | Op::LnResFwd
            | Op::RmsResFwd
            | Op::BnEvalFwd
            | Op::BnEvalBwd => Some(0.90),
            Op::LnBwd
            | Op::RmsBwd
            | Op::LnResBwd
            | Op::RmsResBwd
            | Op::LnResBwdBias
            | Op::RmsResBwdBias
            | Op::BnTrainFwd
            | Op::BnTrainBwd
            | Op::BnEvalBwdGrads => Some(0.85),
            Op::Copy => None,
        }
    }
}

/// DRAM bytes one launch reads and writes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traffic {
    /// Bytes read.
    pub read: f64,
    /// Bytes written.
    pub write: f64,
    /// Dependent L2 round trips after the streaming ends (a reduction's folded finalize).
    pub tail_trips: f64,
}

/// One op, shape and dtype pair, planned for one device.
#[derive(Clone, Debug)]
pub struct Case {
    /// The op.
    pub op: Op,
    /// Shape as written in reports, e.g. `16384x768` or `32x256x56x56-nhwc`.
    pub shape: String,
    /// `activation/parameter` dtypes, e.g. `bf16/f32`.
    pub dtypes: String,
    /// Activation elements.
    pub elements: u64,
    /// Bytes of one activation element.
    pub elem_bytes: u64,
    /// The plan.
    pub plan: Plan,
    /// DRAM traffic of each launch (parallel to `plan.launches`).
    pub traffic: Vec<Traffic>,
    /// One of issue 13's shape set ([`bn_sweep_shapes`]): summarized in the report, not listed
    /// row by row.
    pub sweep: bool,
}

impl Case {
    /// The op's minimum DRAM bytes.
    pub fn min_bytes(&self) -> f64 {
        self.op.min_bytes_factor() * (self.elements * self.elem_bytes) as f64
    }

    /// The key of the case in `below_budget.txt` and the JSON: `op shape dtypes`.
    pub fn key(&self) -> String {
        format!("{} {} {}", self.op.name(), self.shape, self.dtypes)
    }
}

/// The dtype pairs (activation, parameter) of every op.
pub const DTYPE_PAIRS: [(DType, DType); 5] = [
    (DType::F32, DType::F32),
    (DType::F16, DType::F16),
    (DType::BF16, DType::BF16),
    (DType::F16, DType::F32),
    (DType::BF16, DType::F32),
];

/// LayerNorm (rows, cols): the benches', issue 12's row lengths at 16384 rows, and small
/// batches of about one wave.
pub const LN_SHAPES: [(usize, usize); 14] = [
    (16384, 768),
    (16384, 1024),
    (16384, 2048),
    (16384, 4096),
    (16384, 5120),
    (16384, 8192),
    (16384, 12288),
    (16384, 16384),
    (4, 1 << 20),
    (4096, 2041),
    (4096, 2040),
    (1024, 1024),
    (264, 4096),
    (132, 8192),
];

/// BatchNorm (dims, layout): the benches', issue 11's channels-last example and a small batch.
pub fn bn_shapes() -> Vec<(Vec<usize>, Layout)> {
    use Layout::{ChannelsLast as L, Contiguous as C};
    vec![
        (vec![65536 * 16, 8], C),
        (vec![32, 256, 56, 56], C),
        (vec![32, 256, 56, 56], L),
        (vec![256, 64, 4096], C),
        (vec![64, 3, 224, 224], C),
        (vec![128, 2048, 7, 7], C),
        (vec![256, 4096], C),
        (vec![32, 512, 7, 7], C),
        (vec![256, 256, 14, 14], L),
        (vec![8, 256, 14, 14], C),
    ]
}

/// The BatchNorm2d layers of ResNet-50 (torchvision's): (channels, spatial size) of every
/// distinct layer, stem to the last stage.
pub const RESNET50_BN: [(usize, usize); 12] = [
    (64, 112),
    (64, 56),
    (256, 56),
    (128, 56),
    (128, 28),
    (512, 28),
    (256, 28),
    (256, 14),
    (1024, 14),
    (512, 14),
    (512, 7),
    (2048, 7),
];

/// Issue 13's BatchNorm shape set beyond [`bn_shapes`]: every layer of [`RESNET50_BN`] at
/// batch 32 and 128 in both layouts, and the (N, C) shapes 131072x8 and 4096x4096.
pub fn bn_sweep_shapes() -> Vec<(Vec<usize>, Layout)> {
    use Layout::{ChannelsLast as L, Contiguous as C};
    let listed = bn_shapes();
    let mut v: Vec<(Vec<usize>, Layout)> = Vec::new();
    for n in [32, 128] {
        for (c, hw) in RESNET50_BN {
            for layout in [C, L] {
                v.push((vec![n, c, hw, hw], layout));
            }
        }
    }
    v.push((vec![131072, 8], C));
    v.push((vec![4096, 4096], C));
    v.retain(|s| !listed.contains(s));
    v
}

/// Bytes of the copy case: the benches' roofline copy (2 x 256 MiB).
pub const COPY_BYTES: u64 = 256 << 20;

/// Distinct, 256-byte aligned fake device addresses.
struct Addrs(u64);
impl Addrs {
    fn next(&mut self) -> u64 {
        self.0 += 1 << 36;
        self.0
    }
}

fn dt(t: DType, p: DType) -> String {
    format!("{}/{}", t.name(), p.name())
}

/// DRAM bytes of one launch, from its kernel name: the activation passes it makes (`n` elements
/// of `s` bytes), plus the per-row statistics (LayerNorm: mean, rstd and mean_lo, 12 bytes;
/// RMSNorm: rstd), the backward's partial rows and BatchNorm's reduction partials.
/// Parameters (O(C) or O(D), read from L2 after the first block) and the finalize kernels
/// (a few MB at most, read from L2 right after they were written) count nothing.
fn traffic(l: &Launch, n: f64, s: f64, rows: f64, cols: f64) -> Option<Traffic> {
    let k = l.kernel.as_str();
    let ns = n * s;
    let t = |read: f64, write: f64| {
        Some(Traffic {
            read,
            write,
            tail_trips: 0.0,
        })
    };
    if k.contains("finalize") {
        return t(0.0, 0.0);
    }
    if k.starts_with("warpnorm_copy") {
        return t(ns, ns);
    }
    // LayerNorm's dbeta by the column sum (with the bias gradient): dy read again, one f32
    // partial row per row chunk.
    if k.ends_with("_colsum") {
        return t(ns, l.grid[1] as f64 * cols * 4.0);
    }
    // Fused residual forward (`_res_`): x and the residual read, h written (and y with the
    // statistics, except in split_stats, whose h the plain split_norm then reads as its x).
    if k.starts_with("warpnorm_layer_norm_fwd") || k.starts_with("warpnorm_rms_norm_fwd") {
        // The split tier's cooperative pass: x (and the residual) read once, h and y written,
        // the chunk partials written and read back through L2; between the phases a grid
        // barrier (2 L2 round trips: arrivals, then the wait that sees the last one) and the
        // row's partials (1: every thread's loads issued together).
        if k.contains("_split_coop_") {
            let a = l.args.get::<WnLayerNormFwdArgs>()?;
            let stats = if k.starts_with("warpnorm_layer_norm") {
                12.0
            } else {
                4.0
            };
            let partials = (a.rows * a.splits) as f64 * 16.0;
            let streams = if k.contains("_res_") { 2.0 } else { 1.0 };
            return Some(Traffic {
                read: streams * ns,
                write: streams * ns + stats * rows + partials,
                tail_trips: 3.0,
            });
        }
        if k.contains("_res_split_stats") {
            return t(2.0 * ns, ns);
        }
        if k.contains("_res_") {
            let stats = if k.starts_with("warpnorm_layer_norm") {
                12.0
            } else {
                4.0
            };
            return t(2.0 * ns, 2.0 * ns + stats * rows);
        }
    }
    if k.starts_with("warpnorm_layer_norm_fwd") {
        if k.contains("split_stats") {
            return t(ns, 0.0);
        }
        return t(ns, ns + 12.0 * rows);
    }
    if k.starts_with("warpnorm_layer_norm_bwd") {
        if k.contains("split_sums") {
            return t(2.0 * ns + 12.0 * rows, 0.0);
        }
        // Partial rows: one f32 row per block of each set the kernel writes (dgamma, dbeta or
        // dbias, and LayerNorm's dbeta beside dbias in the bias-gradient kernels).
        let partial = l.grid[0] as f64 * cols * 4.0 * partial_sets(l);
        return t(2.0 * ns + 12.0 * rows, ns + partial);
    }
    // RMSNorm: LayerNorm's passes with one saved statistic (rstd) and one partial row
    // (dweight) per block.
    if k.starts_with("warpnorm_rms_norm_fwd") {
        if k.contains("split_stats") {
            return t(ns, 0.0);
        }
        return t(ns, ns + 4.0 * rows);
    }
    if k.starts_with("warpnorm_rms_norm_bwd") {
        if k.contains("split_sums") {
            return t(2.0 * ns + 4.0 * rows, 0.0);
        }
        // dweight's partial rows, and dbias's with the bias gradient.
        let partial = l.grid[0] as f64 * cols * 4.0 * partial_sets(l);
        return t(2.0 * ns + 4.0 * rows, ns + partial);
    }
    if k.starts_with("warpnorm_batch_norm") {
        let fwd = k.starts_with("warpnorm_batch_norm_fwd");
        // The reductions' per-(split, channel) partials, written here (the finalize reads
        // them from L2): 4 f32 fields forward (count, mean hi, mean lo, m2), 2 backward.
        let partials = |fields: f64| {
            bn_reduce_args(l).map(|(r, _)| l.grid[1] as f64 * r.c as f64 * 4.0 * fields)
        };
        let folded = |t: Option<Traffic>| {
            let (_, trips) = bn_reduce_args(l)?;
            t.map(|t| Traffic {
                tail_trips: trips,
                ..t
            })
        };
        // The cooperative passes: the reduction's reads, the partials, a grid barrier, then
        // the elementwise pass's reads and writes.
        // The channels-last eval-mode backward with dgamma / dbeta (`_eval_coop_`): the
        // eval-mode sums' traffic (x and dy read, dx written) and the merge, no second pass.
        if k.contains("_coop_") {
            let (r, splits, trips) = bn_coop_args(l)?;
            let partials = splits * r.c as f64 * 4.0 * if fwd { 4.0 } else { 2.0 };
            let reads = if fwd || k.contains("_eval_coop_") {
                2.0 * ns
            } else {
                4.0 * ns
            };
            return Some(Traffic {
                read: reads,
                write: ns + partials,
                tail_trips: trips,
            });
        }
        if k.contains("_stats_") {
            return folded(t(ns, partials(4.0)?));
        }
        // The eval-mode backward sums also write dx.
        if k.contains("_eval_reduce_") {
            return folded(t(2.0 * ns, ns + partials(2.0)?));
        }
        if k.contains("_reduce_") {
            return folded(t(2.0 * ns, partials(2.0)?));
        }
        // The eval apply (`..._params_eval_apply_*`) is a forward pass, also for the eval
        // backward (dy in, dx out).
        if k.contains("_fused_") || k.contains("_apply_") {
            return if fwd { t(ns, ns) } else { t(2.0 * ns, ns) };
        }
    }
    None
}

/// A BatchNorm reduction's own arguments and the L2 round trips its folded finalize adds
/// after the streaming (0 without WN_BN_FOLD): with more than one split, the release fence
/// and the arrival counter's atomic; the last block's rounds of partial loads
/// (ceil(splits / block rows)); one for the parameters and statistics the finish reads.
fn bn_reduce_args(l: &Launch) -> Option<(WnBatchNormReduceArgs, f64)> {
    let (r, flags, splits) = match l.args.get::<WnBatchNormStatsArgs>() {
        Some(a) => (a.r, a.f.flags, a.f.splits),
        None => {
            let a = l.args.get::<WnBatchNormSumsArgs>()?;
            (a.r, a.f.flags, a.f.splits)
        }
    };
    let trips = if flags & WN_BN_FOLD == 0 {
        0.0
    } else {
        let splits = splits.max(1) as u64;
        let sync = if splits > 1 { 2 } else { 0 };
        (sync + splits.div_ceil(l.block[1].max(1) as u64) + 1) as f64
    };
    Some((r, trips))
}

/// A cooperative BatchNorm pass's reduction arguments, splits and the L2 round trips between
/// its phases: per grid barrier the release fence and the arrival atomic, then the waiting
/// blocks' acquire load that sees the last arrival (2; the departure ticket and the reset
/// come after the phases, cuda/common/arrival.cuh); the rounds of partial loads and one for
/// the parameters and statistics of the finish. NCHW: ceil(splits / block rows) rounds.
/// Channels-last: the merge's threads as groups of min(C, 8) channels, each thread loading
/// [`coop_merge_batch`] splits at once (ceil(splits / (rows x batch)) rounds), then a second
/// barrier (2) and the coefficients' loads (1), except in the eval-mode backward.
fn bn_coop_args(l: &Launch) -> Option<(WnBatchNormReduceArgs, f64, f64)> {
    let (r, splits) = match l.args.get::<WnBatchNormCoopFwdArgs>() {
        Some(a) => (a.s.r, a.s.f.splits),
        None => {
            let a = l.args.get::<WnBatchNormCoopBwdArgs>()?;
            (a.s.r, a.s.f.splits)
        }
    };
    let splits = splits.max(1) as u64;
    let trips = if l.kernel.contains("_coop_nhwc_") {
        let threads = l.block[0] as u64 * l.block[1] as u64;
        let gx = (r.c.max(1) as u64).next_power_of_two().min(8);
        let rows = (threads / gx).max(1);
        // The eval-mode pass ends after the merge.
        let eval = l.kernel.contains("_eval_coop_");
        let second = if eval { 0 } else { 2 + 1 };
        2 + splits.div_ceil(rows * coop_merge_batch(eval)) + 1 + second
    } else {
        2 + splits.div_ceil(l.block[1].max(1) as u64) + 1
    };
    Some((r, splits as f64, trips as f64))
}

/// Splits whose partials a thread of a channels-last cooperative pass's merge loads before
/// merging them (kMergeBatch in cuda/batch_norm.cu): 8, 4 in the eval-mode backward.
fn coop_merge_batch(eval: bool) -> u64 {
    if eval {
        4
    } else {
        8
    }
}

/// The sets of f32 partial rows a LayerNorm / RMSNorm backward launch writes (one row per
/// block each): those its arguments point at (0 for a single block, which writes its outputs).
fn partial_sets(l: &Launch) -> f64 {
    l.args.get::<WnLayerNormBwdArgs>().map_or(0.0, |a| {
        [a.dgamma_part, a.dbeta_part, a.dy_sum_part]
            .iter()
            .filter(|&&p| p != 0)
            .count() as f64
    })
}

/// `size`: (elements, bytes per element); `rc`: LayerNorm (rows, cols), zeros otherwise.
fn case(
    op: Op,
    shape: String,
    dtypes: String,
    size: (u64, u64),
    plan: Plan,
    rc: (f64, f64),
) -> Result<Case, String> {
    let ((n, s), (rows, cols)) = (size, rc);
    let traffic = plan
        .launches
        .iter()
        .map(|l| {
            traffic(l, n as f64, s as f64, rows, cols)
                .ok_or_else(|| format!("no byte accounting for kernel {}", l.kernel))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Case {
        op,
        shape,
        dtypes,
        elements: n,
        elem_bytes: s,
        plan,
        traffic,
        sweep: false,
    })
}

/// [`case`] for the backward of the fused residual add: its launches are the plain
/// backward's (dh is a runtime argument), and each launch that writes dx also reads dh.
fn res_bwd_case(
    op: Op,
    shape: String,
    dtypes: String,
    size: (u64, u64),
    plan: Plan,
    rc: (f64, f64),
) -> Result<Case, String> {
    let mut c = case(op, shape, dtypes, size, plan, rc)?;
    let ns = (size.0 * size.1) as f64;
    for (l, t) in c.plan.launches.iter().zip(c.traffic.iter_mut()) {
        let k = l.kernel.as_str();
        if k.contains("_bwd_")
            && !k.contains("finalize")
            && !k.contains("split_sums")
            && !k.ends_with("_colsum")
        {
            t.read += ns;
        }
    }
    Ok(c)
}

fn layer_norm(
    rows: usize,
    cols: usize,
    t: DType,
    p: DType,
    props: &DeviceProps,
) -> Result<Vec<Case>, String> {
    let e = |e: warpnorm::Error| e.to_string();
    let desc = LayerNormDesc::from_rows(rows, cols, t, p, Affine::WeightBias, 1e-5).map_err(e)?;
    let mut a = Addrs(1 << 40);
    // One workspace for every plan of the case: the largest (the plain backward's can exceed
    // the fused one's: on an A100 LayerNorm's wide tier runs the plain backward of 12288 f32
    // columns on 108 blocks, the bias gradient's split tier on 54).
    let ws = ln::workspace_bytes(&desc, Direction::Forward, props)
        .map_err(e)?
        .max(ln::workspace_bytes(&desc, Direction::Backward, props).map_err(e)?)
        .max(ln::workspace_bytes_residual(&desc, true, props).map_err(e)?) as u64;
    let (x, y, dy, dx) = (a.next(), a.next(), a.next(), a.next());
    let (g, b, m, r, dg, db, w) = (
        a.next(),
        a.next(),
        a.next(),
        a.next(),
        a.next(),
        a.next(),
        a.next(),
    );
    let lo = a.next();
    let fp = ln::ForwardPtrs {
        x,
        y,
        gamma: Some(g),
        beta: Some(b),
        mean: Some(m),
        rstd: Some(r),
        mean_lo: Some(lo),
        workspace: w,
        workspace_bytes: ws,
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
        workspace: w,
        workspace_bytes: ws,
    };
    // The fused residual forward: h = x + residual (no bias), h written to its own buffer.
    let res = ResidualPtrs {
        residual: a.next(),
        bias: None,
        h: a.next(),
    };
    let dh = a.next();
    let shape = format!("{rows}x{cols}");
    let n = (rows * cols) as u64;
    let s = t.size() as u64;
    let (rf, cf) = (rows as f64, cols as f64);
    Ok(vec![
        case(
            Op::LnFwd,
            shape.clone(),
            dt(t, p),
            (n, s),
            ln::plan_forward(&desc, &fp, props).map_err(e)?,
            (rf, cf),
        )?,
        case(
            Op::LnBwd,
            shape.clone(),
            dt(t, p),
            (n, s),
            ln::plan_backward(&desc, &bp, props).map_err(e)?,
            (rf, cf),
        )?,
        case(
            Op::LnResFwd,
            shape.clone(),
            dt(t, p),
            (n, s),
            ln::plan_forward_residual(&desc, &fp, &res, props).map_err(e)?,
            (rf, cf),
        )?,
        // Its backward: x is h, dh read from its own buffer.
        res_bwd_case(
            Op::LnResBwd,
            shape.clone(),
            dt(t, p),
            (n, s),
            ln::plan_backward_residual(
                &desc,
                &ln::BackwardPtrs { x: res.h, ..bp },
                &ln::ResidualGrads {
                    dh: Some(dh),
                    dbias: None,
                },
                props,
            )
            .map_err(e)?,
            (rf, cf),
        )?,
        // With the bias's gradient (dbeta by the column sum of dy and its finalize first).
        res_bwd_case(
            Op::LnResBwdBias,
            shape,
            dt(t, p),
            (n, s),
            ln::plan_backward_residual(
                &desc,
                &ln::BackwardPtrs { x: res.h, ..bp },
                &ln::ResidualGrads {
                    dh: Some(dh),
                    dbias: Some(a.next()),
                },
                props,
            )
            .map_err(e)?,
            (rf, cf),
        )?,
    ])
}

/// RMSNorm at a LayerNorm shape, with a weight (eps None), as [`layer_norm`].
fn rms_norm(
    rows: usize,
    cols: usize,
    t: DType,
    p: DType,
    props: &DeviceProps,
) -> Result<Vec<Case>, String> {
    let e = |e: warpnorm::Error| e.to_string();
    let desc = RmsNormDesc::from_rows(rows, cols, t, p, true, None).map_err(e)?;
    let mut a = Addrs(1 << 40);
    // One workspace for every plan of the case: the largest (the plain backward's can exceed
    // the fused one's: on an A100 LayerNorm's wide tier runs the plain backward of 12288 f32
    // columns on 108 blocks, the bias gradient's split tier on 54).
    let ws = rms::workspace_bytes(&desc, Direction::Forward, props)
        .map_err(e)?
        .max(rms::workspace_bytes(&desc, Direction::Backward, props).map_err(e)?)
        .max(rms::workspace_bytes_residual(&desc, true, props).map_err(e)?) as u64;
    let (x, y, dy, dx) = (a.next(), a.next(), a.next(), a.next());
    let (g, r, dg, w) = (a.next(), a.next(), a.next(), a.next());
    let fp = rms::ForwardPtrs {
        x,
        y,
        weight: Some(g),
        rstd: Some(r),
        workspace: w,
        workspace_bytes: ws,
    };
    let bp = rms::BackwardPtrs {
        x,
        dy,
        dx,
        weight: Some(g),
        rstd: r,
        dweight: Some(dg),
        workspace: w,
        workspace_bytes: ws,
    };
    // The fused residual forward: h = x + residual (no bias), h written to its own buffer.
    let res = ResidualPtrs {
        residual: a.next(),
        bias: None,
        h: a.next(),
    };
    let dh = a.next();
    let shape = format!("{rows}x{cols}");
    let n = (rows * cols) as u64;
    let s = t.size() as u64;
    let (rf, cf) = (rows as f64, cols as f64);
    Ok(vec![
        case(
            Op::RmsFwd,
            shape.clone(),
            dt(t, p),
            (n, s),
            rms::plan_forward(&desc, &fp, props).map_err(e)?,
            (rf, cf),
        )?,
        case(
            Op::RmsBwd,
            shape.clone(),
            dt(t, p),
            (n, s),
            rms::plan_backward(&desc, &bp, props).map_err(e)?,
            (rf, cf),
        )?,
        case(
            Op::RmsResFwd,
            shape.clone(),
            dt(t, p),
            (n, s),
            rms::plan_forward_residual(&desc, &fp, &res, props).map_err(e)?,
            (rf, cf),
        )?,
        // Its backward: x is h, dh read from its own buffer.
        res_bwd_case(
            Op::RmsResBwd,
            shape.clone(),
            dt(t, p),
            (n, s),
            rms::plan_backward_residual(
                &desc,
                &rms::BackwardPtrs { x: res.h, ..bp },
                &rms::ResidualGrads {
                    dh: Some(dh),
                    dbias: None,
                },
                props,
            )
            .map_err(e)?,
            (rf, cf),
        )?,
        // With the bias's gradient (summed by the backward kernels).
        res_bwd_case(
            Op::RmsResBwdBias,
            shape,
            dt(t, p),
            (n, s),
            rms::plan_backward_residual(
                &desc,
                &rms::BackwardPtrs { x: res.h, ..bp },
                &rms::ResidualGrads {
                    dh: Some(dh),
                    dbias: Some(a.next()),
                },
                props,
            )
            .map_err(e)?,
            (rf, cf),
        )?,
    ])
}

fn batch_norm(
    dims: &[usize],
    layout: Layout,
    t: DType,
    p: DType,
    props: &DeviceProps,
) -> Result<Vec<Case>, String> {
    let e = |e: warpnorm::Error| e.to_string();
    let desc = BatchNormDesc::new(dims, layout, t, p);
    let mut a = Addrs(1 << 40);
    let (x, y, dy, dx) = (a.next(), a.next(), a.next(), a.next());
    let (g, b, rm, rv, nbt) = (a.next(), a.next(), a.next(), a.next(), a.next());
    let (sm, si, dg, db, ws) = (a.next(), a.next(), a.next(), a.next(), a.next());
    let sml = a.next();
    let ws_bytes = bn::workspace_bytes(&desc, Direction::Forward, props)
        .map_err(e)?
        .max(bn::workspace_bytes(&desc, Direction::Backward, props).map_err(e)?)
        as u64;
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
        workspace_bytes: ws_bytes,
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
        workspace_bytes: ws_bytes,
    };
    let dims_s: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    let shape = format!(
        "{}{}",
        dims_s.join("x"),
        if layout == Layout::ChannelsLast {
            "-nhwc"
        } else {
            ""
        }
    );
    let n: u64 = dims.iter().map(|&d| d as u64).product();
    let s = t.size() as u64;
    let d = dt(t, p);
    let train = desc.clone().with_mode(Mode::train(0.1));
    let eval = desc.clone().with_mode(Mode::eval());
    Ok(vec![
        case(
            Op::BnTrainFwd,
            shape.clone(),
            d.clone(),
            (n, s),
            bn::plan_forward(&train, &fp, props).map_err(e)?,
            (0.0, 0.0),
        )?,
        case(
            Op::BnTrainBwd,
            shape.clone(),
            d.clone(),
            (n, s),
            bn::plan_backward(&train, &bp, props).map_err(e)?,
            (0.0, 0.0),
        )?,
        case(
            Op::BnEvalFwd,
            shape.clone(),
            d.clone(),
            (n, s),
            bn::plan_forward(&eval, &fp, props).map_err(e)?,
            (0.0, 0.0),
        )?,
        case(
            Op::BnEvalBwd,
            shape.clone(),
            d.clone(),
            (n, s),
            bn::plan_backward(
                &eval,
                &bn::BackwardPtrs {
                    dgamma: None,
                    dbeta: None,
                    ..bp
                },
                props,
            )
            .map_err(e)?,
            (0.0, 0.0),
        )?,
        case(
            Op::BnEvalBwdGrads,
            shape,
            d,
            (n, s),
            bn::plan_backward(&eval, &bp, props).map_err(e)?,
            (0.0, 0.0),
        )?,
    ])
}

/// The f32 roofline copy of the benches (256 MiB), planned for `props`.
pub fn copy_case(props: &DeviceProps) -> Result<Case, String> {
    let plan = plan_copy(1 << 40, 1 << 41, COPY_BYTES, props).map_err(|e| e.to_string())?;
    case(
        Op::Copy,
        format!("{}", COPY_BYTES / 4),
        dt(DType::F32, DType::F32),
        (COPY_BYTES / 4, 4),
        plan,
        (0.0, 0.0),
    )
}

/// Every case, planned for `props`, in report order (copy, LayerNorm, RMSNorm, BatchNorm, then
/// issue 13's BatchNorm shape set). A shape a planner rejects is an error naming it.
pub fn cases(props: &DeviceProps) -> Result<Vec<Case>, String> {
    let mut out = vec![copy_case(props)?];
    for &(rows, cols) in &LN_SHAPES {
        for &(t, p) in &DTYPE_PAIRS {
            out.extend(
                layer_norm(rows, cols, t, p, props)
                    .map_err(|e| format!("LayerNorm {rows}x{cols} {}: {e}", dt(t, p)))?,
            );
        }
    }
    for &(rows, cols) in &LN_SHAPES {
        for &(t, p) in &DTYPE_PAIRS {
            out.extend(
                rms_norm(rows, cols, t, p, props)
                    .map_err(|e| format!("RMSNorm {rows}x{cols} {}: {e}", dt(t, p)))?,
            );
        }
    }
    for (sweep, shapes) in [(false, bn_shapes()), (true, bn_sweep_shapes())] {
        for (dims, layout) in shapes {
            for &(t, p) in &DTYPE_PAIRS {
                let cs = batch_norm(&dims, layout, t, p, props)
                    .map_err(|e| format!("BatchNorm {dims:?} {layout:?} {}: {e}", dt(t, p)))?;
                out.extend(cs.into_iter().map(|c| Case { sweep, ..c }));
            }
        }
    }
    Ok(out)
}
