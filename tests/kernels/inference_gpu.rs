//! Inference and allocation-free calls on a GPU (or the emulated driver): the modules'
//! `forward_into` / `backward_into` / `forward_in_place` / `infer` and the functional in-place
//! ops give the same bits as the allocating calls (which the other GPU tests check against
//! the CPU reference), a forward without saved statistics leaves the caller's statistics
//! untouched, and a training step with caller buffers allocates nothing after its first call
//! (counted by the emulated driver's `simcuda_alloc_count`, which counts the calling
//! thread's allocations: tests running in parallel do not disturb it).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use warpnorm::batch_norm::{self as bn, BatchNorm, BatchNormConfig, Layout};
use warpnorm::layer_norm::{self as ln, Affine, LayerNorm};
use warpnorm::{Element, Error};

fn down<T: DeviceRepr + Clone + Default>(s: &Arc<CudaStream>, v: &CudaSlice<T>) -> Vec<T> {
    s.clone_dtoh(v).unwrap()
}

/// Bits of a download (through f64, which holds every f32, f16 and bf16 exactly).
fn bits<T: Element + DeviceRepr + Clone + Default>(
    s: &Arc<CudaStream>,
    v: &CudaSlice<T>,
) -> Vec<u64> {
    down(s, v).iter().map(|x| x.to_f64().to_bits()).collect()
}

/// Asserts equal bits, naming the first difference (not printing whole tensors).
#[track_caller]
fn same(got: impl AsRef<[u64]>, want: impl AsRef<[u64]>, what: &str) {
    let (got, want) = (got.as_ref(), want.as_ref());
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        let (g, w) = (f64::from_bits(got[i]), f64::from_bits(want[i]));
        panic!("{what}: element {i} is {g}, expected {w} (bitwise equality)");
    }
}

fn data(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f32> {
    let mut rng = testkit::Rng::new(seed);
    (0..n)
        .map(|_| (lo + (hi - lo) * rng.unit()) as f32)
        .collect()
}

/// The number of device allocations this thread has made when the driver is the emulated
/// one (which exports `simcuda_alloc_count`), else None (a real driver has no counter).
fn alloc_count() -> Option<u64> {
    // SAFETY: opening the already loaded driver library again runs no initializer; the
    // symbol, when present, is simcuda's `extern "C" fn() -> u64`.
    unsafe {
        let lib = libloading::Library::new("libcuda.so")
            .or_else(|_| libloading::Library::new("libcuda.so.1"))
            .ok()?;
        let f = lib
            .get::<unsafe extern "C" fn() -> u64>(b"simcuda_alloc_count\0")
            .ok()?;
        Some(f())
    }
}

/// True on the emulated driver, whose allocation counter the tests then require.
fn emulated(stream: &Arc<CudaStream>) -> bool {
    stream
        .context()
        .name()
        .is_ok_and(|n| n.starts_with("ptxsim"))
}

/// LayerNorm: forward_into (with and without saved statistics), infer, forward_in_place and
/// backward_into are bitwise the allocating forward/backward; the functional in-place ops
/// and a forward with one statistic agree too. Shapes in the warp tier and in the split tier
/// (which has a workspace in both directions).
#[test]
fn layer_norm_into_in_place_and_infer_match_forward() {
    let Some(s) = testkit::gpu::gpu_stream("layer_norm_into_in_place_and_infer_match_forward")
    else {
        return;
    };
    for (rows, cols) in [(6usize, 96usize), (2, 4096)] {
        let shape = [rows, cols];
        let n = rows * cols;
        let mut m = LayerNorm::<f32>::new(&s, &[cols], Affine::WeightBias, 1e-5).unwrap();
        {
            let (g, b) = m.params_mut();
            s.memcpy_htod(&data(cols, 1, 0.5, 1.5), &mut g.unwrap())
                .unwrap();
            s.memcpy_htod(&data(cols, 2, -0.5, 0.5), &mut b.unwrap())
                .unwrap();
        }
        let xh = data(n, 3, -3.0, 3.0);
        let x = s.clone_htod(&xh).unwrap();
        let dy = s.clone_htod(&data(n, 4, -1.0, 1.0)).unwrap();
        let out = m.forward(&x.as_view(), &shape).unwrap();
        let grads = m
            .backward(&x.as_view(), &dy.as_view(), &shape, &out.saved)
            .unwrap();
        let (want_y, want_mean, want_rstd) = (
            bits(&s, &out.y),
            bits(&s, &out.saved.mean),
            bits(&s, &out.saved.rstd),
        );
        // And the allocating forward is right (the f64 reference, f32 tolerance).
        let gamma = down(&s, m.gamma().unwrap());
        let beta = down(&s, m.beta().unwrap());
        let desc = m.desc::<f32>(&shape).unwrap();
        let r = warpnorm::cpu::layer_norm::forward(&desc, &xh, Some(&gamma), Some(&beta)).unwrap();
        for (a, e) in down(&s, &out.y).iter().zip(&r.y) {
            assert!((a - e).abs() <= 1e-5 * (1.0 + e.abs()), "{a} vs {e}");
        }

        let mut y = s.alloc_zeros::<f32>(n).unwrap();
        let mut saved = m.alloc_saved(&shape).unwrap();
        m.forward_into(&x.as_view(), &shape, y.as_view_mut(), Some(&mut saved))
            .unwrap();
        same(
            bits(&s, &y),
            &want_y,
            &format!("{rows}x{cols} forward_into y"),
        );
        same(bits(&s, &saved.mean), &want_mean, "forward_into mean");
        same(bits(&s, &saved.rstd), &want_rstd, "forward_into rstd");
        // Without statistics: the same y, and the caller's statistics are not touched.
        let mut y = s.alloc_zeros::<f32>(n).unwrap();
        s.memset_zeros(&mut saved.mean).unwrap();
        m.forward_into(&x.as_view(), &shape, y.as_view_mut(), None)
            .unwrap();
        same(bits(&s, &y), &want_y, "forward_into without statistics");
        assert_eq!(down(&s, &saved.mean), vec![0.0; rows], "mean untouched");
        same(
            bits(&s, &m.infer(&x.as_view(), &shape).unwrap()),
            &want_y,
            "infer",
        );
        // In place, with and without statistics.
        let mut xy = s.clone_htod(&xh).unwrap();
        m.forward_in_place(xy.as_view_mut(), &shape, None).unwrap();
        same(bits(&s, &xy), &want_y, "forward_in_place");
        let mut xy = s.clone_htod(&xh).unwrap();
        let mut saved2 = m.alloc_saved(&shape).unwrap();
        m.forward_in_place(xy.as_view_mut(), &shape, Some(&mut saved2))
            .unwrap();
        same(bits(&s, &xy), &want_y, "forward_in_place with statistics");
        same(bits(&s, &saved2.rstd), &want_rstd, "forward_in_place rstd");
        same(bits(&s, &saved2.mean), &want_mean, "forward_in_place mean");

        // backward_into the caller's buffers, from the in-place forward's statistics.
        let mut dx = s.alloc_zeros::<f32>(n).unwrap();
        let mut dg = s.alloc_zeros::<f32>(cols).unwrap();
        let mut db = s.alloc_zeros::<f32>(cols).unwrap();
        m.backward_into(
            &x.as_view(),
            &dy.as_view(),
            &shape,
            &saved2,
            ln::GradientBuffers {
                dx: dx.as_view_mut(),
                dgamma: Some(dg.as_view_mut()),
                dbeta: Some(db.as_view_mut()),
            },
        )
        .unwrap();
        same(bits(&s, &dx), bits(&s, &grads.dx), "backward_into dx");
        same(
            bits(&s, &dg),
            bits(&s, grads.dgamma.as_ref().unwrap()),
            "dgamma",
        );
        same(
            bits(&s, &db),
            bits(&s, grads.dbeta.as_ref().unwrap()),
            "dbeta",
        );
        // A missing dbeta where the module has a bias is an error, before any launch.
        let e = m
            .backward_into(
                &x.as_view(),
                &dy.as_view(),
                &shape,
                &saved,
                ln::GradientBuffers {
                    dx: dx.as_view_mut(),
                    dgamma: Some(dg.as_view_mut()),
                    dbeta: None,
                },
            )
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");

        // The functional ops: in place both ways, and the mean alone.
        let ws_bytes = ln::forward_workspace_bytes(&s, &desc)
            .unwrap()
            .max(ln::backward_workspace_bytes(&s, &desc).unwrap());
        let mut ws = s.alloc_zeros::<u8>(ws_bytes.max(16)).unwrap();
        let mut xy = s.clone_htod(&xh).unwrap();
        let mut mean = s.alloc_zeros::<f32>(rows).unwrap();
        let (g, b) = (m.gamma().unwrap(), m.beta().unwrap());
        ln::forward_in_place(
            &s,
            &desc,
            ln::ForwardInPlaceBuffers {
                xy: xy.as_view_mut(),
                gamma: Some(g.as_view()),
                beta: Some(b.as_view()),
                mean: Some(mean.as_view_mut()),
                rstd: None,
                mean_lo: None,
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        same(bits(&s, &xy), &want_y, "functional forward_in_place");
        same(bits(&s, &mean), &want_mean, "the mean alone");
        let mut dydx = dy.clone();
        ln::backward_in_place(
            &s,
            &desc,
            ln::BackwardInPlaceBuffers {
                x: x.as_view(),
                dy_dx: dydx.as_view_mut(),
                mean: out.saved.mean.as_view(),
                rstd: out.saved.rstd.as_view(),
                mean_lo: Some(out.saved.mean_lo.as_view()),
                gamma: Some(g.as_view()),
                dgamma: Some(dg.as_view_mut()),
                dbeta: Some(db.as_view_mut()),
                workspace: Some(ws.as_view_mut()),
            },
        )
        .unwrap();
        same(
            bits(&s, &dydx),
            bits(&s, &grads.dx),
            "functional backward_in_place",
        );
        same(
            bits(&s, &db),
            bits(&s, grads.dbeta.as_ref().unwrap()),
            "dbeta",
        );
    }
}

/// A BatchNorm module with random parameters and running statistics (f32, C channels).
fn batch_norm(s: &Arc<CudaStream>, c: usize) -> BatchNorm<f32> {
    let mut m = BatchNorm::<f32>::new(s, BatchNormConfig::new(c)).unwrap();
    m.load_state(&warpnorm::State {
        weight: Some(data(c, 11, 0.5, 1.5)),
        bias: Some(data(c, 12, -0.5, 0.5)),
        running_mean: Some(data(c, 13, -1.0, 1.0)),
        running_var: Some(data(c, 14, 0.5, 2.0)),
        num_batches_tracked: Some(3),
    })
    .unwrap();
    m
}

/// BatchNorm: forward_into (training and eval), forward_in_place, infer and backward_into
/// are bitwise the allocating calls on an identical module; infer leaves the running
/// statistics and the counter alone in training mode; the functional in-place ops agree.
#[test]
fn batch_norm_into_in_place_and_infer_match_forward() {
    let Some(s) = testkit::gpu::gpu_stream("batch_norm_into_in_place_and_infer_match_forward")
    else {
        return;
    };
    let (dims, layout) = ([4usize, 3, 5, 5], Layout::Contiguous);
    let n = dims.iter().product::<usize>();
    let xh = data(n, 15, -2.0, 3.0);
    let x = s.clone_htod(&xh).unwrap();
    let dy = s.clone_htod(&data(n, 16, -1.0, 1.0)).unwrap();
    let (mut a, mut b) = (batch_norm(&s, 3), batch_norm(&s, 3));
    for training in [true, false] {
        if !training {
            a.eval();
            b.eval();
        }
        let out = a.forward(&x.as_view(), &dims, layout).unwrap();
        let grads = a
            .backward(&x.as_view(), &dy.as_view(), &dims, layout, &out.saved)
            .unwrap();
        let mut y = s.alloc_zeros::<f32>(n).unwrap();
        let mut saved = b.alloc_saved().unwrap();
        b.forward_into(
            &x.as_view(),
            &dims,
            layout,
            y.as_view_mut(),
            Some(&mut saved),
        )
        .unwrap();
        let ctx = format!("training {training}");
        if training {
            // A training forward without saved statistics: the same y and running statistics.
            let mut c = batch_norm(&s, 3);
            let mut y = s.alloc_zeros::<f32>(n).unwrap();
            c.forward_into(&x.as_view(), &dims, layout, y.as_view_mut(), None)
                .unwrap();
            same(
                bits(&s, &y),
                bits(&s, &out.y),
                "training forward_into without statistics",
            );
            assert_eq!(c.state().unwrap(), a.state().unwrap(), "running statistics");
        }
        same(
            bits(&s, &y),
            bits(&s, &out.y),
            &format!("{ctx}: forward_into y"),
        );
        assert_eq!(saved.frozen, out.saved.frozen, "{ctx}: frozen");
        same(
            bits(&s, &saved.mean),
            bits(&s, &out.saved.mean),
            &format!("{ctx}: save_mean"),
        );
        same(
            bits(&s, &saved.mean_lo),
            bits(&s, &out.saved.mean_lo),
            &format!("{ctx}: save_mean_lo"),
        );
        same(
            bits(&s, &saved.invstd),
            bits(&s, &out.saved.invstd),
            &format!("{ctx}: save_invstd"),
        );
        assert_eq!(
            a.state().unwrap(),
            b.state().unwrap(),
            "{ctx}: module state"
        );
        let mut dx = s.alloc_zeros::<f32>(n).unwrap();
        let mut dg = s.alloc_zeros::<f32>(3).unwrap();
        let mut db = s.alloc_zeros::<f32>(3).unwrap();
        b.backward_into(
            &x.as_view(),
            &dy.as_view(),
            &dims,
            layout,
            &saved,
            bn::GradientBuffers {
                dx: dx.as_view_mut(),
                dgamma: Some(dg.as_view_mut()),
                dbeta: Some(db.as_view_mut()),
            },
        )
        .unwrap();
        same(
            bits(&s, &dx),
            bits(&s, &grads.dx),
            &format!("{ctx}: backward_into dx"),
        );
        same(
            bits(&s, &dg),
            bits(&s, grads.dgamma.as_ref().unwrap()),
            "dgamma",
        );
        same(
            bits(&s, &db),
            bits(&s, grads.dbeta.as_ref().unwrap()),
            "dbeta",
        );
    }
    // Eval in place, and infer (eval statistics) from training mode without updating.
    let want = bits(&s, &a.forward(&x.as_view(), &dims, layout).unwrap().y);
    let mut xy = s.clone_htod(&xh).unwrap();
    b.forward_in_place(xy.as_view_mut(), &dims, layout, None)
        .unwrap();
    same(bits(&s, &xy), &want, "eval forward_in_place");
    b.train();
    let before = b.state().unwrap();
    same(
        bits(&s, &b.infer(&x.as_view(), &dims, layout).unwrap()),
        &want,
        "infer",
    );
    assert_eq!(b.state().unwrap(), before, "infer updates nothing");
    // The functional ops in place (eval forward, eval-mode backward).
    let desc = a.desc::<f32>(&dims, layout).unwrap();
    // One workspace for both calls: the eval forward needs none (0 bytes), the eval-mode
    // backward with dgamma / dbeta does.
    assert_eq!(bn::forward_workspace_bytes(&s, &desc).unwrap(), 0);
    let ws_bytes = bn::backward_workspace_bytes(&s, &desc).unwrap();
    let mut ws = s.alloc_zeros::<u8>(ws_bytes).unwrap();
    let mut xy = s.clone_htod(&xh).unwrap();
    let (mut sm, mut sl, mut si) = (
        s.alloc_zeros::<f32>(3).unwrap(),
        s.alloc_zeros::<f32>(3).unwrap(),
        s.alloc_zeros::<f32>(3).unwrap(),
    );
    let mut rm = s.clone_htod(&before.running_mean.clone().unwrap()).unwrap();
    let mut rv = s.clone_htod(&before.running_var.clone().unwrap()).unwrap();
    bn::forward_in_place(
        &s,
        &desc,
        bn::ForwardInPlaceBuffers {
            xy: xy.as_view_mut(),
            gamma: Some(a.gamma().unwrap().as_view()),
            beta: Some(a.beta().unwrap().as_view()),
            running_mean: Some(rm.as_view_mut()),
            running_var: Some(rv.as_view_mut()),
            num_batches_tracked: None,
            save_mean: Some(sm.as_view_mut()),
            save_mean_lo: Some(sl.as_view_mut()),
            save_invstd: Some(si.as_view_mut()),
            workspace: Some(ws.as_view_mut()),
        },
    )
    .unwrap();
    same(bits(&s, &xy), &want, "functional eval forward_in_place");
    let out = a.forward(&x.as_view(), &dims, layout).unwrap();
    let grads = a
        .backward(&x.as_view(), &dy.as_view(), &dims, layout, &out.saved)
        .unwrap();
    let mut dydx = dy.clone();
    bn::backward_in_place(
        &s,
        &desc,
        bn::BackwardInPlaceBuffers {
            x: x.as_view(),
            dy_dx: dydx.as_view_mut(),
            save_mean: sm.as_view(),
            save_mean_lo: Some(sl.as_view()),
            save_invstd: si.as_view(),
            gamma: Some(a.gamma().unwrap().as_view()),
            dgamma: None,
            dbeta: None,
            workspace: Some(ws.as_view_mut()),
        },
    )
    .unwrap();
    same(
        bits(&s, &dydx),
        bits(&s, &grads.dx),
        "functional backward_in_place",
    );
}

/// A training step of both modules with the caller's buffers (forward_into, backward_into,
/// plus an eval forward in place) allocates nothing after its first call; a larger problem
/// grows the cached workspaces once, and a smaller one after it allocates nothing.
#[test]
fn training_step_with_caller_buffers_allocates_nothing_after_the_first() {
    let test = "training_step_with_caller_buffers_allocates_nothing_after_the_first";
    let Some(s) = testkit::gpu::gpu_stream(test) else {
        return;
    };
    if alloc_count().is_none() {
        assert!(
            !emulated(&s),
            "the emulated driver must export simcuda_alloc_count"
        );
        eprintln!("SKIP {test}: the driver has no allocation counter (not the emulated one)");
        return;
    }
    // LayerNorm (2, 4096): the split tier, with a workspace in both directions.
    let (rows, cols) = (2usize, 4096usize);
    let ln_shape = [rows, cols];
    let mut lnm = LayerNorm::<f32>::new(&s, &[cols], Affine::WeightBias, 1e-5).unwrap();
    let (bn_dims, layout) = ([4usize, 3, 5, 5], Layout::Contiguous);
    let mut bnm = batch_norm(&s, 3);
    let (nl, nb) = (rows * cols, bn_dims.iter().product::<usize>());
    // Every buffer of the step, allocated once.
    let x = s.clone_htod(&data(nl, 21, -3.0, 3.0)).unwrap();
    let dy = s.clone_htod(&data(nl, 22, -1.0, 1.0)).unwrap();
    let mut y = s.alloc_zeros::<f32>(nl).unwrap();
    let mut dx = s.alloc_zeros::<f32>(nl).unwrap();
    let mut dg = s.alloc_zeros::<f32>(cols).unwrap();
    let mut db = s.alloc_zeros::<f32>(cols).unwrap();
    let mut saved = lnm.alloc_saved(&ln_shape).unwrap();
    let xb = s.clone_htod(&data(nb, 23, -2.0, 3.0)).unwrap();
    let dyb = s.clone_htod(&data(nb, 24, -1.0, 1.0)).unwrap();
    let mut yb = s.alloc_zeros::<f32>(nb).unwrap();
    let mut dxb = s.alloc_zeros::<f32>(nb).unwrap();
    let mut dgb = s.alloc_zeros::<f32>(3).unwrap();
    let mut dbb = s.alloc_zeros::<f32>(3).unwrap();
    let mut savedb = bnm.alloc_saved().unwrap();
    let mut step = |lnm: &mut LayerNorm<f32>, bnm: &mut BatchNorm<f32>| {
        lnm.forward_into(&x.as_view(), &ln_shape, y.as_view_mut(), Some(&mut saved))
            .unwrap();
        let grads = ln::GradientBuffers {
            dx: dx.as_view_mut(),
            dgamma: Some(dg.as_view_mut()),
            dbeta: Some(db.as_view_mut()),
        };
        lnm.backward_into(&x.as_view(), &dy.as_view(), &ln_shape, &saved, grads)
            .unwrap();
        bnm.train();
        bnm.forward_into(
            &xb.as_view(),
            &bn_dims,
            layout,
            yb.as_view_mut(),
            Some(&mut savedb),
        )
        .unwrap();
        let grads = bn::GradientBuffers {
            dx: dxb.as_view_mut(),
            dgamma: Some(dgb.as_view_mut()),
            dbeta: Some(dbb.as_view_mut()),
        };
        bnm.backward_into(
            &xb.as_view(),
            &dyb.as_view(),
            &bn_dims,
            layout,
            &savedb,
            grads,
        )
        .unwrap();
        // Inference in place on the outputs, both modules.
        bnm.eval();
        bnm.forward_in_place(yb.as_view_mut(), &bn_dims, layout, None)
            .unwrap();
        lnm.forward_in_place(y.as_view_mut(), &ln_shape, None)
            .unwrap();
        s.synchronize().unwrap();
    };
    let start = alloc_count().unwrap();
    step(&mut lnm, &mut bnm);
    let first = alloc_count().unwrap();
    assert!(first > start, "the first step allocates the workspaces");
    for _ in 0..3 {
        step(&mut lnm, &mut bnm);
    }
    assert_eq!(
        alloc_count().unwrap(),
        first,
        "steps after the first allocate nothing"
    );
    // A larger LayerNorm problem grows the workspace once; the smaller one after it reuses it.
    let big = [2usize, 3, cols];
    let xl = s.clone_htod(&data(3 * nl, 25, -3.0, 3.0)).unwrap();
    let mut yl = s.alloc_zeros::<f32>(3 * nl).unwrap();
    let mut dxl = s.alloc_zeros::<f32>(3 * nl).unwrap();
    let mut savedl = lnm.alloc_saved(&big).unwrap();
    let (mut dgl, mut dbl) = (
        s.alloc_zeros::<f32>(cols).unwrap(),
        s.alloc_zeros::<f32>(cols).unwrap(),
    );
    let mut big_step = |lnm: &mut LayerNorm<f32>| {
        lnm.forward_into(&xl.as_view(), &big, yl.as_view_mut(), Some(&mut savedl))
            .unwrap();
        let grads = ln::GradientBuffers {
            dx: dxl.as_view_mut(),
            dgamma: None,
            dbeta: None,
        };
        // dgamma/dbeta are required with a weight and bias: rejected before any launch.
        assert!(lnm
            .backward_into(&xl.as_view(), &xl.as_view(), &big, &savedl, grads)
            .is_err());
        let grads = ln::GradientBuffers {
            dx: dxl.as_view_mut(),
            dgamma: Some(dgl.as_view_mut()),
            dbeta: Some(dbl.as_view_mut()),
        };
        lnm.backward_into(&xl.as_view(), &xl.as_view(), &big, &savedl, grads)
            .unwrap();
        s.synchronize().unwrap();
    };
    let before = alloc_count().unwrap();
    big_step(&mut lnm);
    let grown = alloc_count().unwrap();
    assert!(
        grown > before,
        "a larger split problem needs a larger workspace"
    );
    big_step(&mut lnm);
    assert_eq!(alloc_count().unwrap(), grown, "the larger step again");
    step(&mut lnm, &mut bnm);
    assert_eq!(
        alloc_count().unwrap(),
        grown,
        "nothing allocated after growing"
    );
}
