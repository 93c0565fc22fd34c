//! Helpers for tests that run nvcc-compiled kernels from `tests/cuda/*.cu`.

use super::{nvcc, parse, Rng};
use ptxsim::{Device, Module, Scalar};

/// Runs `f(arch, ptx, module)` for every arch in [`nvcc::ARCHS`]; returns early (a skip, with
/// the reason printed) when nvcc is missing and not required.
pub fn for_archs(file: &str, f: impl Fn(&str, &str, &Module)) {
    let Some(all) = nvcc::compile_all(file) else {
        return;
    };
    for (arch, ptx) in all {
        let m = parse(&ptx, &format!("{file} ({arch})"));
        f(arch, &ptx, &m);
    }
}

/// A new allocation holding `data`.
pub fn upload<T: Scalar>(dev: &mut Device, data: &[T]) -> u64 {
    let p = dev
        .alloc(std::mem::size_of_val(data).max(1))
        .expect("alloc");
    dev.write_slice(p, data).expect("write");
    p
}

/// A new zeroed allocation of `bytes`.
pub fn zeros(dev: &mut Device, bytes: usize) -> u64 {
    dev.alloc_zeroed(bytes).expect("alloc_zeroed")
}

/// `n` values read back from `p`.
pub fn read<T: Scalar>(dev: &Device, p: u64, n: usize) -> Vec<T> {
    dev.read_slice(p, n).expect("read")
}

/// `n` random f32 with exponents in `-exp..=exp`.
pub fn random_f32(seed: u64, n: usize, exp: i32) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..n).map(|_| rng.f32_exp(exp)).collect()
}
