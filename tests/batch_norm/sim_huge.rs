//! BatchNorm on tensors of more than 3 * 2^30 elements on ptxsim: 64-bit offsets in every
//! kernel family (statistics, reductions, finalize, elementwise passes, fused tiers; NCHW and
//! channels-last).
//!
//! Each case plans a training forward and backward for the full shape (16-bit activations,
//! so byte offsets pass 2^32 as well) and runs, on ptxsim, only the blocks that compute the
//! last channels: a channel set K at the end of the tensor whose elements lie past element
//! 2^31. The buffers are simulator allocations of the full size, mapped lazily by the host:
//! only what is written here uses memory, and initcheck proves the blocks read nothing else.
//! The blocks follow the layouts of `cuda/abi/batch_norm.h`: statistics, reductions and
//! fused blocks own a channel (NCHW) or a tile of `block.x * V` channels (channels-last) and
//! every split of it (grid.y), the finalize kernels `block.x` channels, the channels-last
//! elementwise pass a tile of channels over every row group, and the NCHW elementwise pass
//! the packs p with (p mod grid.x * block.x) / block.x == blockIdx.x (its grid-stride loop),
//! which also visits other channels: those get initialized data and coefficients here, and
//! only K is checked. The vecodd reductions (S % V != 0) read the whole 32-byte sectors that
//! cover each slice of K, with the neighbouring channels' lanes masked: those elements are
//! initialized too. Every output of K - y, save_mean, save_invstd, running_mean,
//! running_var, dx, dgamma, dbeta - is compared with the CPU reference run on the sub-tensor
//! of K (tolerances of `tests/batch_norm/support.rs`). Then the same for eval: the forward
//! (`..._eval_apply_*`, one launch, no workspace) from the running statistics the training
//! forward left, and the eval-mode backward with dgamma / dbeta (`..._eval_reduce_*`, whose
//! sums write dx; in vecodd by whole sectors, so the blocks of the channels that own the
//! sectors at the end of K's slices run as well).

use std::ops::Range;

use crate::support::{check_backward, check_forward, make_input, BwdGot, FwdGot, Rng};
use half::{bf16, f16};
use testkit::sim::{skip_without_kernels, Sim};
use warpnorm::abi::WnBatchNormApplyArgs;
use warpnorm::batch_norm::{
    plan_backward, plan_forward, workspace_bytes, BackwardPtrs, BatchNormDesc, Direction,
    ForwardPtrs, Layout, Mode, Momentum,
};
use warpnorm::cpu::batch_norm as cpu;
use warpnorm::{DType, DeviceProps, Element, Launch, Plan};

#[derive(Clone, Debug)]
struct Huge {
    dims: Vec<usize>,
    layout: Layout,
    dtype: DType,
    param_dtype: DType,
    /// SMs of the planned device (few: fused tiers; many: split reductions).
    sms: u32,
    /// A piece of the forward's and of the backward's first kernel name.
    kernels: (&'static str, &'static str),
}

/// The (n, c, s) geometry and memory order of the full tensor.
#[derive(Clone, Copy)]
struct Geo {
    n: usize,
    c: usize,
    s: usize,
    nhwc: bool,
}

impl Geo {
    /// Element ranges of channels `k` (contiguous channel range): one per (n, c) slice in
    /// NCHW, one per row in channels-last.
    fn ranges(&self, k: &Range<usize>) -> Vec<Range<usize>> {
        if self.nhwc {
            (0..self.n * self.s)
                .map(|r| r * self.c + k.start..r * self.c + k.end)
                .collect()
        } else {
            (0..self.n)
                .flat_map(|n| k.clone().map(move |c| (n * self.c + c) * self.s))
                .map(|b| b..b + self.s)
                .collect()
        }
    }
}

/// Elements per access of a kernel (its `_vec`, `_vecodd` or `_scalar` suffix).
fn access_width(kernel: &str, dtype: DType) -> usize {
    if kernel.ends_with("_vec") || kernel.ends_with("_vecodd") {
        16 / dtype.size()
    } else {
        1
    }
}

/// A box of a launch's grid (block index ranges in x, y, z).
type GridBox = [Range<u32>; 3];

/// The boxes of `l`'s grid that compute channels `k` (module docs), and the element ranges
/// of other channels those blocks read (the NCHW elementwise pass, and the covering sectors
/// of the vecodd reductions).
fn boxes_for(
    l: &Launch,
    geo: &Geo,
    dtype: DType,
    k: &Range<usize>,
) -> Result<(Vec<GridBox>, Vec<Range<usize>>), String> {
    let all_y = 0..l.grid[1];
    let v = access_width(&l.kernel, dtype);
    let bx = l.block[0] as usize;
    let nchw_apply = l.kernel.contains("_apply_nchw");
    if nchw_apply {
        // Blocks owning a pack of K, then every pack those blocks own.
        let bd = bx;
        let stride = l.grid[0] as usize * bd;
        // Packs, the last one partial in vecodd when N * C * S % V != 0.
        let numel = geo.n * geo.c * geo.s;
        let total = numel.div_ceil(v);
        let mut blocks: Vec<usize> = geo
            .ranges(k)
            .iter()
            .flat_map(|r| (r.start / v..r.end.div_ceil(v)).map(|q| (q % stride) / bd))
            .collect();
        blocks.sort_unstable();
        blocks.dedup();
        let mut extra = Vec::new();
        for &b in &blocks {
            let mut base = b * bd;
            while base < total {
                extra.push(base * v..((base + bd).min(total) * v).min(numel));
                base += stride;
            }
        }
        let boxes = blocks
            .iter()
            .map(|&b| [b as u32..b as u32 + 1, all_y.clone(), 0..1])
            .collect();
        return Ok((boxes, extra));
    }
    // Channels per blockIdx.x.
    let w = if l.kernel.ends_with("_finalize") {
        bx
    } else if geo.nhwc {
        bx * v
    } else {
        1
    };
    let (x0, x1) = (k.start / w, (k.end - 1) / w + 1);
    let owned = x0 * w..(x1 * w).min(geo.c);
    if owned != *k {
        return Err(format!(
            "{}: blocks {x0}..{x1} own channels {owned:?}, not exactly {k:?}: pick another shape",
            l.kernel
        ));
    }
    let mut boxes = vec![[x0 as u32..x1 as u32, all_y.clone(), 0..1]];
    // The vecodd eval-mode sums write dx by whole 32-byte sectors, each by the slice that holds
    // its last element: the sector after K's last element in a slice may belong to the next
    // channel, or (slices shorter than a sector) the one after it (mod C). Their blocks run
    // too (their sums and dx of other channels are not checked).
    let mut chans = vec![k.clone()];
    if l.kernel.contains("_eval_reduce_nchw_vecodd") {
        let reach = if geo.s >= 2 * v { 1 } else { 2 };
        for d in 1..=reach {
            let ch = (k.end - 1 + d) % geo.c;
            if !k.contains(&ch) {
                boxes.push([ch as u32..ch as u32 + 1, all_y.clone(), 0..1]);
                chans.push(ch..ch + 1);
            }
        }
    }
    // The vecodd reductions read the whole 32-byte sectors covering each slice of their
    // channels (the buffers are 32-byte aligned), neighbouring channels' lanes masked: the
    // 2 * (floor((S + 2V - 2) / 2V) + 1) packs from the sector of the slice's first element
    // (the most any slice needs; reduce_nchw_odd in cuda/batch_norm.cu).
    let extra = if l.kernel.ends_with("_nchw_vecodd") && !l.kernel.ends_with("_finalize") {
        let (e, numel) = (2 * v, geo.n * geo.c * geo.s);
        let run = 2 * ((geo.s + e - 2) / e + 1) * v;
        chans
            .iter()
            .flat_map(|ch| geo.ranges(ch))
            .map(|r| r.start / e * e..(r.start / e * e + run).min(numel))
            .collect()
    } else {
        Vec::new()
    };
    Ok((boxes, extra))
}

/// The blocks of a plan that compute channels K, and what else they read.
struct Blocks<'a> {
    /// Per launch, the boxes to run.
    work: Vec<(&'a Launch, Vec<GridBox>)>,
    /// Element ranges of other channels the blocks read.
    extra: Vec<Range<usize>>,
    /// Coefficient arrays (address, floats) of launches that read other channels' ones.
    coefs: Vec<(u64, usize)>,
}

/// The blocks of every launch of `plan` that compute channels `k`; the caller initializes
/// `extra` and `coefs`.
fn blocks_for_channels<'a>(
    plan: &'a Plan,
    geo: &Geo,
    dtype: DType,
    k: &Range<usize>,
) -> Result<Blocks<'a>, String> {
    let mut b = Blocks {
        work: Vec::new(),
        extra: Vec::new(),
        coefs: Vec::new(),
    };
    for l in &plan.launches {
        let (boxes, e) = boxes_for(l, geo, dtype, k)?;
        if !e.is_empty() && l.kernel.contains("_apply_nchw") {
            let a: WnBatchNormApplyArgs = l.args.get().expect("apply args");
            // Eval's apply computes its coefficients from the parameters (coef 0): the caller
            // initializes every channel's parameters instead.
            if a.coef != 0 {
                b.coefs.push((a.coef, 4 * a.coef_stride as usize));
            }
        }
        b.extra.extend(e);
        b.work.push((l, boxes));
    }
    Ok(b)
}

/// Runs the blocks; returns how many ran.
fn run_work(sim: &mut Sim, work: &[(&Launch, Vec<GridBox>)]) -> Result<u64, String> {
    let mut blocks = 0;
    for (l, boxes) in work {
        for b in boxes {
            let s = sim
                .run_blocks(l, b.clone())
                .map_err(|e| format!("{} blocks {b:?}: {e}", l.kernel))?;
            blocks += s.blocks;
        }
    }
    Ok(blocks)
}

/// Zeros over `ranges` of the buffers at `bases` (elements of E) and over `coefs`.
fn fill_zeros<E: Element>(
    sim: &mut Sim,
    bases: &[u64],
    ranges: &[Range<usize>],
    coefs: &[(u64, usize)],
) {
    for &base in bases {
        for r in ranges {
            let at = base + (r.start * std::mem::size_of::<E>()) as u64;
            sim.write(at, &vec![E::from_f64(0.0); r.len()]);
        }
    }
    for &(p, n) in coefs {
        sim.write(p, &vec![0.0f32; n]);
    }
}

/// Writes `sub` (the sub-tensor of channels K, in the order of `geo.ranges(k)`) into the
/// full buffer at `base`.
fn scatter<E: Element>(sim: &mut Sim, base: u64, geo: &Geo, k: &Range<usize>, sub: &[E]) {
    let size = std::mem::size_of::<E>();
    let mut at = 0;
    for r in geo.ranges(k) {
        sim.write(base + (r.start * size) as u64, &sub[at..at + r.len()]);
        at += r.len();
    }
}

/// Reads the sub-tensor of channels K from the full buffer at `base`.
fn gather<E: Element + Default>(sim: &Sim, base: u64, geo: &Geo, k: &Range<usize>) -> Vec<E> {
    let size = std::mem::size_of::<E>();
    geo.ranges(k)
        .iter()
        .flat_map(|r| sim.download::<E>(base + (r.start * size) as u64, r.len()))
        .collect()
}

/// Elements `k` of the buffer at `base`.
fn download_k<E: Element + Default>(sim: &Sim, base: u64, k: &Range<usize>) -> Vec<E> {
    sim.download(base + (k.start * std::mem::size_of::<E>()) as u64, k.len())
}

/// Writes `vals` at elements `k` of the buffer at `base`.
fn upload_k<E: Element>(sim: &mut Sim, base: u64, k: &Range<usize>, vals: &[E]) {
    sim.write(base + (k.start * std::mem::size_of::<E>()) as u64, vals);
}

/// Runs the blocks of `plan` that compute channels `k`: `prepare` first (values for what those
/// blocks read of other channels' parameters), then zeros over the other channels' elements
/// they read in every input buffer, each input's sub-tensor of K scattered in. Returns how
/// many blocks ran.
fn run_channels<T: Element>(
    sim: &mut Sim,
    plan: &Plan,
    geo: &Geo,
    dtype: DType,
    k: &Range<usize>,
    inputs: &[(u64, &[T])],
    prepare: &dyn Fn(&mut Sim, &Blocks<'_>),
) -> Result<u64, String> {
    let b = blocks_for_channels(plan, geo, dtype, k)?;
    prepare(sim, &b);
    let bases: Vec<u64> = inputs.iter().map(|(base, _)| *base).collect();
    fill_zeros::<T>(sim, &bases, &b.extra, &b.coefs);
    for (base, sub) in inputs {
        scatter(sim, *base, geo, k, sub);
    }
    run_work(sim, &b.work).map_err(|e| format!("{e}\n{plan}"))
}

/// A forward's outputs of channels `k`: y at `py`; `stats` = save_mean, save_mean_lo,
/// save_invstd, running_mean, running_var.
fn fwd_got<T: Element + Default, P: Element + Default>(
    sim: &Sim,
    geo: &Geo,
    k: &Range<usize>,
    py: u64,
    [sm, sml, si, rm, rv]: [u64; 5],
) -> FwdGot<T, P> {
    FwdGot {
        y: gather::<T>(sim, py, geo, k),
        save_mean: download_k(sim, sm, k),
        save_mean_lo: download_k(sim, sml, k),
        save_invstd: download_k(sim, si, k),
        running_mean: download_k(sim, rm, k),
        running_var: download_k(sim, rv, k),
    }
}

/// Checks a backward's outputs of channels `k` (dx at `pdx`, dgamma / dbeta at `pdg` / `pdb`)
/// against the CPU reference of `sub` (whose mode says training or eval) from the statistics
/// the forward saved, `saved`.
#[allow(clippy::too_many_arguments)]
fn check_backward_channels<T: Element + Default, P: Element + Default>(
    sim: &Sim,
    ctx: &str,
    sub: &BatchNormDesc,
    (geo, k): (&Geo, &Range<usize>),
    (x, dy, gamma): (&[T], &[T], &[P]),
    saved: &FwdGot<T, P>,
    [pdx, pdg, pdb]: [u64; 3],
) -> Result<(), String> {
    let want = cpu::backward::<T, P>(
        sub,
        x,
        dy,
        Some(gamma),
        &saved.save_mean,
        Some(&saved.save_mean_lo),
        &saved.save_invstd,
    )
    .map_err(|e| e.to_string())?;
    let got = BwdGot {
        dx: gather::<T>(sim, pdx, geo, k),
        dgamma: download_k(sim, pdg, k),
        dbeta: download_k(sim, pdb, k),
    };
    check_backward(
        ctx,
        sub,
        !sub.mode.batch_stats,
        x,
        dy,
        Some(gamma),
        &saved.save_mean,
        &saved.save_invstd,
        &want,
        &got,
    )
}

fn run_huge<T: Element + Default, P: Element + Default>(
    arch: u32,
    h: &Huge,
) -> Result<String, String> {
    let desc = BatchNormDesc::new(&h.dims, h.layout, h.dtype, h.param_dtype);
    let g = crate::support::ncs(&desc).map_err(|e| e.to_string())?;
    let geo = Geo {
        n: g.n as usize,
        c: g.c as usize,
        s: g.s as usize,
        nhwc: g.nhwc,
    };
    let (c, numel) = (geo.c, g.numel as usize);
    // Without cooperative launches: a cooperative pass's blocks stride over every channel,
    // so no box of its grid computes the last channels alone (its 64-bit indexing is that of
    // the statistics and the fused tiers' walks, which run here).
    let props = DeviceProps {
        sm_count: h.sms,
        cooperative_launch: false,
        ..DeviceProps::SIM
    };
    let mut sim = Sim::new(arch);
    let ws_bytes =
        workspace_bytes(&desc, Direction::Forward, &props).map_err(|e| e.to_string())? as u64;
    let pws = crate::support::workspace(&mut sim, ws_bytes, c);
    let px = sim.alloc::<T>(numel, 0);
    let py = sim.alloc::<T>(numel, 0);
    let psm = sim.alloc::<f32>(c, 0);
    let psml = sim.alloc::<f32>(c, 0);
    let psi = sim.alloc::<f32>(c, 0);
    let [pg, pb, prm, prv] = [0; 4].map(|_| sim.alloc::<P>(c, 0));
    let mode = Mode {
        batch_stats: true,
        momentum: Momentum::Factor(0.1),
    };
    let fwd = plan_forward(
        &desc.clone().with_mode(mode),
        &ForwardPtrs {
            x: px,
            y: py,
            gamma: Some(pg),
            beta: Some(pb),
            running_mean: Some(prm),
            running_var: Some(prv),
            num_batches_tracked: None,
            save_mean: Some(psm),
            save_mean_lo: Some(psml),
            save_invstd: Some(psi),
            workspace: pws,
            workspace_bytes: ws_bytes,
        },
        &props,
    )
    .map_err(|e| format!("plan_batch_norm_fwd: {e}"))?;
    let first = &fwd.launches[0];
    if !first.kernel.contains(h.kernels.0) {
        return Err(format!(
            "forward runs {}, not {}",
            first.kernel, h.kernels.0
        ));
    }
    // K: the channels the first kernel's last block computes (a channel or a tile).
    let w = if geo.nhwc {
        first.block[0] as usize * access_width(&first.kernel, h.dtype)
    } else {
        1
    };
    let k = (c - 1) / w * w..c;
    let kn = k.len();
    assert!(
        geo.ranges(&k).last().unwrap().start >= 1 << 31,
        "{h:?}: K must reach past element 2^31"
    );

    // Parameters and running statistics: only K's are written (the only ones read).
    let mut rng = Rng::new(11);
    let gamma: Vec<P> = (0..kn)
        .map(|_| P::from_f64(1.0 + 0.5 * rng.signed()))
        .collect();
    let beta: Vec<P> = (0..kn).map(|_| P::from_f64(0.5 * rng.signed())).collect();
    let mut rm: Vec<P> = (0..kn).map(|_| P::from_f64(rng.signed())).collect();
    let mut rv: Vec<P> = (0..kn).map(|_| P::from_f64(1.5 + rng.signed())).collect();
    for (p, v) in [(pg, &gamma), (pb, &beta), (prm, &rm), (prv, &rv)] {
        upload_k(&mut sim, p, &k, v);
    }

    // The sub-tensor of K: (N, |K|, S) in NCHW, (rows, |K|) channels-last.
    let sub = if geo.nhwc {
        BatchNormDesc::new(
            &[geo.n * geo.s, kn],
            Layout::Contiguous,
            h.dtype,
            h.param_dtype,
        )
    } else {
        BatchNormDesc::new(
            &[geo.n, kn, geo.s],
            Layout::Contiguous,
            h.dtype,
            h.param_dtype,
        )
    };
    let x: Vec<T> = make_input(&sub, &mut rng);
    let dy: Vec<T> = (0..x.len()).map(|_| T::from_f64(rng.signed())).collect();

    // Forward (training, momentum 0.1).
    let none = |_: &mut Sim, _: &Blocks<'_>| {};
    let blocks_f = run_channels(&mut sim, &fwd, &geo, h.dtype, &k, &[(px, &x)], &none)?;
    let want = cpu::forward::<T, P>(
        &sub.clone().with_mode(mode),
        &x,
        Some((&gamma[..], &beta[..])),
        Some(cpu::Running {
            mean: &mut rm,
            var: &mut rv,
            num_batches_tracked: None,
        }),
    )
    .map_err(|e| e.to_string())?;
    let stats = [psm, psml, psi, prm, prv];
    let got = fwd_got::<T, P>(&sim, &geo, &k, py, stats);
    let ctx = format!("compute_{arch} {h:?} channels {k:?}");
    check_forward(
        &format!("{ctx} forward"),
        &sub,
        true,
        &x,
        &want,
        &rm,
        &rv,
        &got,
    )?;
    sim.dev.free(py).map_err(|e| e.to_string())?;

    // Backward (training) from the kernels' saved statistics.
    let pdy = sim.alloc::<T>(numel, 0);
    let pdx = sim.alloc::<T>(numel, 0);
    let pdg = sim.alloc::<P>(c, 0);
    let pdb = sim.alloc::<P>(c, 0);
    let bwd = plan_backward(
        &desc,
        &BackwardPtrs {
            x: px,
            dy: pdy,
            dx: pdx,
            gamma: Some(pg),
            save_mean: psm,
            save_mean_lo: Some(psml),
            save_invstd: psi,
            dgamma: Some(pdg),
            dbeta: Some(pdb),
            workspace: pws,
            workspace_bytes: ws_bytes,
        },
        &props,
    )
    .map_err(|e| format!("plan_batch_norm_bwd: {e}"))?;
    if !bwd.launches[0].kernel.contains(h.kernels.1) {
        return Err(format!(
            "backward runs {}, not {}",
            bwd.launches[0].kernel, h.kernels.1
        ));
    }
    let inputs = [(px, &x[..]), (pdy, &dy[..])];
    let blocks_b = run_channels(&mut sim, &bwd, &geo, h.dtype, &k, &inputs, &none)?;
    let grads = [pdx, pdg, pdb];
    check_backward_channels(
        &sim,
        &format!("{ctx} backward"),
        &sub,
        (&geo, &k),
        (&x, &dy, &gamma),
        &got,
        grads,
    )?;

    // Eval: the forward (one launch, no workspace) with the running statistics the training
    // forward left, then the eval-mode backward with dgamma / dbeta (its sums write dx) from
    // the statistics the eval forward saved. The NCHW elementwise pass also visits other
    // channels and computes their coefficients from their parameters and statistics: those
    // channels get values here (gamma 0, beta 0, running mean 0, running var 1, saved mean 0,
    // saved invstd 1).
    // The eval apply also writes the saved statistics of the channels its threads take in
    // their linear order (save_frozen: channel = linear thread index, grid-stride), reading
    // those channels' parameters: they get values too.
    let init_visited = |sim: &mut Sim, b: &Blocks<'_>| {
        let mut chans: Vec<usize> = if geo.nhwc {
            Vec::new()
        } else {
            b.extra
                .iter()
                .filter(|r| !r.is_empty())
                .flat_map(|r| {
                    // The vecodd pass stages the coefficients of a group of a block's packs
                    // from the channel of its first pack: min(C, threads * V / S + 3)
                    // channels, up to 3 past the channel of the group's last element (b + 3).
                    let (a, b) = (r.start / geo.s, (r.end - 1) / geo.s);
                    (a..=b + 3).map(|q| q % geo.c)
                })
                .collect()
        };
        for (l, boxes) in &b.work {
            if !l.kernel.contains("_eval_apply_") {
                continue;
            }
            let per_block = (l.block[0] * l.block[1]) as usize;
            let threads = per_block * (l.grid[0] * l.grid[1]) as usize;
            for bx in boxes {
                for by in bx[1].clone() {
                    for x in bx[0].clone() {
                        let block = by as usize * l.grid[0] as usize + x as usize;
                        let mut start = block * per_block;
                        while start < geo.c {
                            chans.extend(start..(start + per_block).min(geo.c));
                            start += threads;
                        }
                    }
                }
            }
        }
        let mut chans: Vec<usize> = chans.into_iter().filter(|ch| !k.contains(ch)).collect();
        chans.sort_unstable();
        chans.dedup();
        for ch in chans {
            let one = ch..ch + 1;
            for (p, v) in [(pg, 0.0), (pb, 0.0), (prm, 0.0), (prv, 1.0)] {
                upload_k(sim, p, &one, &[P::from_f64(v)]);
            }
            for (p, v) in [(psm, 0.0f32), (psml, 0.0), (psi, 1.0)] {
                upload_k(sim, p, &one, &[v]);
            }
        }
    };
    let (mut erm, mut erv): (Vec<P>, Vec<P>) =
        (download_k(&sim, prm, &k), download_k(&sim, prv, &k));
    let eval = desc.clone().with_mode(Mode::eval());
    let sub_eval = sub.clone().with_mode(Mode::eval());
    let py = sim.alloc::<T>(numel, 0);
    let fwd_e = plan_forward(
        &eval,
        &ForwardPtrs {
            x: px,
            y: py,
            gamma: Some(pg),
            beta: Some(pb),
            running_mean: Some(prm),
            running_var: Some(prv),
            num_batches_tracked: None,
            save_mean: Some(psm),
            save_mean_lo: Some(psml),
            save_invstd: Some(psi),
            workspace: 0,
            workspace_bytes: 0,
        },
        &props,
    )
    .map_err(|e| format!("plan_batch_norm_fwd (eval): {e}"))?;
    if fwd_e.launches.len() != 1 || !fwd_e.launches[0].kernel.contains("_eval_apply_") {
        return Err(format!(
            "eval forward is not one eval apply launch: {fwd_e}"
        ));
    }
    let blocks_ef = run_channels(
        &mut sim,
        &fwd_e,
        &geo,
        h.dtype,
        &k,
        &[(px, &x)],
        &init_visited,
    )?;
    let want_e = cpu::forward::<T, P>(
        &sub_eval,
        &x,
        Some((&gamma[..], &beta[..])),
        Some(cpu::Running {
            mean: &mut erm,
            var: &mut erv,
            num_batches_tracked: None,
        }),
    )
    .map_err(|e| e.to_string())?;
    let got_e = fwd_got::<T, P>(&sim, &geo, &k, py, stats);
    check_forward(
        &format!("{ctx} eval forward"),
        &sub_eval,
        false,
        &x,
        &want_e,
        &erm,
        &erv,
        &got_e,
    )?;
    sim.dev.free(py).map_err(|e| e.to_string())?;
    let bwd_e = plan_backward(
        &eval,
        &BackwardPtrs {
            x: px,
            dy: pdy,
            dx: pdx,
            gamma: Some(pg),
            save_mean: psm,
            save_mean_lo: Some(psml),
            save_invstd: psi,
            dgamma: Some(pdg),
            dbeta: Some(pdb),
            workspace: pws,
            workspace_bytes: ws_bytes,
        },
        &props,
    )
    .map_err(|e| format!("plan_batch_norm_bwd (eval): {e}"))?;
    let blocks_eb = run_channels(&mut sim, &bwd_e, &geo, h.dtype, &k, &inputs, &init_visited)?;
    check_backward_channels(
        &sim,
        &format!("{ctx} eval backward"),
        &sub_eval,
        (&geo, &k),
        (&x, &dy, &gamma),
        &got_e,
        grads,
    )?;
    let names = |p: &Plan| {
        p.launches
            .iter()
            .map(|l| l.kernel.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Ok(format!(
        "{:?} {:?} {}/{}, channels {k:?} (elements up to {}): forward [{}] {blocks_f} blocks, backward [{}] {blocks_b} blocks, eval forward [{}] {blocks_ef} blocks, eval backward [{}] {blocks_eb} blocks",
        h.dims,
        h.layout,
        h.dtype,
        h.param_dtype,
        geo.ranges(&k).last().unwrap().end,
        names(&fwd),
        names(&bwd),
        names(&fwd_e),
        names(&bwd_e),
    ))
}

fn run_huge_dyn(arch: u32, h: &Huge) -> Result<String, String> {
    match (h.dtype, h.param_dtype) {
        (DType::F16, DType::F16) => run_huge::<f16, f16>(arch, h),
        (DType::F16, DType::F32) => run_huge::<f16, f32>(arch, h),
        (DType::BF16, DType::BF16) => run_huge::<bf16, bf16>(arch, h),
        (DType::BF16, DType::F32) => run_huge::<bf16, f32>(arch, h),
        (t, p) => Err(format!("not a huge-test dtype pair: {t}/{p}")),
    }
}

fn huge_cases() -> Vec<Huge> {
    // NCHW: C = 3 * 2^19 + 1 channels of 2 x 1024 (3 * 2^30 + 2048 elements); C = 1 mod 8, so
    // the last finalize block (8 channels) holds the last channel alone.
    let nchw_c = (3 << 19) + 1;
    vec![
        // Channels-last, split statistics (many SMs: no fused tier), 8192 rows x 393472.
        Huge {
            dims: vec![2, 393_472, 64, 64],
            layout: Layout::ChannelsLast,
            dtype: DType::BF16,
            param_dtype: DType::F32,
            sms: 1 << 20,
            kernels: ("_stats_nhwc_vec", "_reduce_nhwc_vec"),
        },
        // NCHW, split statistics and the grid-stride elementwise passes.
        Huge {
            dims: vec![2, nchw_c, 32, 32],
            layout: Layout::Contiguous,
            dtype: DType::F16,
            param_dtype: DType::F16,
            sms: 1 << 21,
            kernels: ("_stats_nchw_vec", "_reduce_nchw_vec"),
        },
        // The same with S = 31 x 33 (odd, >= 8 halves): the vecodd variants.
        Huge {
            dims: vec![2, 1_574_401, 31, 33],
            layout: Layout::Contiguous,
            dtype: DType::BF16,
            param_dtype: DType::F32,
            sms: 1 << 21,
            kernels: ("_stats_nchw_vecodd", "_reduce_nchw_vecodd"),
        },
        // NCHW, fused forward and backward (4 SMs).
        Huge {
            dims: vec![2, nchw_c, 32, 32],
            layout: Layout::Contiguous,
            dtype: DType::F16,
            param_dtype: DType::F32,
            sms: 4,
            kernels: ("_fused_nchw_vec", "_fused_nchw_vec"),
        },
        // (N, C) with 64 rows of 50331904 channels: fused forward; the backward's x and dy
        // do not fit on chip, so it takes the channels-last reduction tier.
        Huge {
            dims: vec![64, 50_331_904],
            layout: Layout::Contiguous,
            dtype: DType::BF16,
            param_dtype: DType::BF16,
            sms: 4,
            kernels: ("_fused_nhwc_vec", "_reduce_nhwc_vec"),
        },
    ]
}

#[test]
fn past_three_times_two_to_the_30_elements() {
    if skip_without_kernels("past_three_times_two_to_the_30_elements") {
        return;
    }
    let mut failures = Vec::new();
    for arch in [80, 75, 90] {
        for h in huge_cases() {
            let t = std::time::Instant::now();
            match run_huge_dyn(arch, &h) {
                Ok(s) => eprintln!("compute_{arch}: {s} in {:?}", t.elapsed()),
                Err(e) => failures.push(format!("compute_{arch}: {h:?}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
