//! A small candle training loop with warpnorm's norms (feature `candle`):
//! linear -> warpnorm LayerNorm -> relu -> linear, and the same with BatchNorm, fitted to a
//! synthetic regression task with candle_nn's AdamW. Prints the loss as it goes down and fails
//! (exit status 1) unless the loss of the last tenth of the steps is below half the first one.
//!
//! `cargo run --release --features candle --example candle_train [-- --steps N]`
//! (with `--features candle-cuda` it runs on the GPU when there is one).

use candle_core::{DType, Device, Module, ModuleT, Result, Tensor};
use candle_nn::{linear, AdamW, Linear, Optimizer, ParamsAdamW, VarBuilder, VarMap};

const IN: usize = 16;
const HIDDEN: usize = 64;
const BATCH: usize = 128;

/// Deterministic values in [-1, 1) (a small LCG), so that every run is the same.
fn lcg(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Batch `step` of the task: x ~ U(-1, 1)^16 * 2 + 1 (an offset the norm must remove),
/// target = sin(x . a / 2) + (x . b)^2 / 16.
fn batch(step: usize, dev: &Device) -> Result<(Tensor, Tensor)> {
    let x = Tensor::from_vec(lcg(BATCH * IN, 1000 + step as u64), (BATCH, IN), dev)?;
    let x = ((x * 2.0)? + 1.0)?;
    let a = Tensor::from_vec(lcg(IN, 7), (IN, 1), dev)?;
    let b = Tensor::from_vec(lcg(IN, 8), (IN, 1), dev)?;
    let xa = x.matmul(&a)?;
    let xb = x.matmul(&b)?;
    let target = ((xa * 0.5)?.sin()? + (xb.sqr()? / 16.0)?)?;
    Ok((x, target))
}

enum Norm {
    Layer(warpnorm::candle::LayerNorm),
    Batch(warpnorm::candle::BatchNorm),
}

struct Model {
    l1: Linear,
    norm: Norm,
    l2: Linear,
}

impl Model {
    fn new(vb: VarBuilder, batch_norm: bool) -> Result<Model> {
        let l1 = linear(IN, HIDDEN, vb.pp("l1"))?;
        // The one-line swaps: candle_nn::layer_norm / candle_nn::batch_norm -> warpnorm::candle.
        let norm = if batch_norm {
            Norm::Batch(warpnorm::candle::batch_norm(HIDDEN, 1e-5, vb.pp("norm"))?)
        } else {
            Norm::Layer(warpnorm::candle::layer_norm(HIDDEN, 1e-5, vb.pp("norm"))?)
        };
        let l2 = linear(HIDDEN, 1, vb.pp("l2"))?;
        Ok(Model { l1, norm, l2 })
    }
}

impl ModuleT for Model {
    fn forward_t(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let h = self.l1.forward(x)?;
        let h = match &self.norm {
            Norm::Layer(ln) => ln.forward(&h)?,
            Norm::Batch(bn) => bn.forward_t(&h, train)?,
        };
        self.l2.forward(&h.relu()?)
    }
}

/// Sets every trainable variable from the LCG (scaled by 1/sqrt(fan-in) for matrices), so the
/// run does not depend on candle's random initialization.
fn init(varmap: &VarMap) -> Result<()> {
    let data = varmap.data().lock().unwrap();
    let mut names: Vec<_> = data.keys().cloned().collect();
    names.sort();
    for (i, name) in names.iter().enumerate() {
        let var = &data[name];
        if name.contains("norm") {
            continue; // weight 1, bias 0, running statistics 0 and 1: as loaded
        }
        let dims = var.dims().to_vec();
        let fan_in = *dims.last().unwrap_or(&1) as f64;
        let v = Tensor::from_vec(lcg(var.elem_count(), 50 + i as u64), dims, var.device())?;
        var.set(&(v / fan_in.sqrt())?.to_dtype(var.dtype())?)?;
    }
    Ok(())
}

fn train(dev: &Device, batch_norm: bool, steps: usize) -> Result<(f32, f32)> {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, dev);
    let model = Model::new(vb, batch_norm)?;
    init(&varmap)?;
    let params = ParamsAdamW {
        lr: 1e-2,
        weight_decay: 0.0,
        ..Default::default()
    };
    let mut opt = AdamW::new(varmap.all_vars(), params)?;
    let name = if batch_norm { "BatchNorm" } else { "LayerNorm" };
    let mut losses = Vec::with_capacity(steps);
    for step in 0..steps {
        let (x, target) = batch(step, dev)?;
        let pred = model.forward_t(&x, true)?;
        let loss = (pred - &target)?.sqr()?.mean_all()?;
        opt.backward_step(&loss)?;
        let l = loss.to_scalar::<f32>()?;
        losses.push(l);
        if step % (steps / 10).max(1) == 0 || step + 1 == steps {
            println!("{name:9} step {step:4}  loss {l:.5}");
        }
    }
    // Held-out batch, eval mode (BatchNorm uses its running statistics).
    let (x, target) = batch(1_000_000, dev)?;
    let pred = model.forward_t(&x, false)?;
    let eval = (pred - &target)?.sqr()?.mean_all()?.to_scalar::<f32>()?;
    let zero = target.sqr()?.mean_all()?.to_scalar::<f32>()?;
    println!("{name:9} eval loss {eval:.5} (predicting 0: {zero:.5})");
    // The first loss against the mean of the last tenth (one batch's loss is noisy).
    let tail = &losses[losses.len() - (steps / 10).max(1)..];
    Ok((losses[0], tail.iter().sum::<f32>() / tail.len() as f32))
}

fn device() -> Device {
    #[cfg(feature = "candle-cuda")]
    if let Ok(d) = Device::new_cuda(0) {
        return d;
    }
    Device::Cpu
}

fn main() -> std::process::ExitCode {
    let mut steps = 300usize;
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--steps") {
        match args.get(i + 1).and_then(|s| s.parse().ok()) {
            Some(n) if n >= 2 => steps = n,
            _ => {
                eprintln!("--steps takes a number >= 2");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    let dev = device();
    println!("candle_train on {:?}, {steps} steps", dev.location());
    let mut ok = true;
    for batch_norm in [false, true] {
        match train(&dev, batch_norm, steps) {
            Ok((first, last)) => {
                let good = last.is_finite() && last < 0.5 * first;
                println!(
                    "loss {first:.5} -> {last:.5}: {}",
                    if good {
                        "down"
                    } else {
                        "NOT below half the initial loss"
                    }
                );
                ok &= good;
            }
            Err(e) => {
                eprintln!("error: {e}");
                ok = false;
            }
        }
    }
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
