//! The one device interface of the tests: a [`Backend`] is a [`warpnorm::Executor`] (it runs
//! plans made for its [`Executor::props`]) with device memory the tests can fill and read.
//! Implemented by the simulator ([`crate::sim::Sim`]) and the GPU ([`crate::gpu::Gpu`]), so a
//! case written once against this trait runs on both; the CPU reference is the third column.
//!
//! Addresses are plain device addresses (`u64`), as in warpnorm's `*Ptrs` structs: the same
//! plans run unchanged on every backend. Memory stays allocated for the backend's lifetime.
//! A backend's [`Executor::execute`] has finished (and reported any fault) when it returns.

use warpnorm::{Element, Executor};

/// Device memory plus plan execution; see the module docs.
pub trait Backend: Executor {
    /// Allocates `n` elements of T (contents unspecified), `offset` elements past a 256-byte
    /// aligned base (offset 1 gives a deliberately misaligned view).
    fn alloc<T: Element>(&mut self, n: usize, offset: usize) -> u64;

    /// Allocates and uploads `data`, `offset` elements past an aligned base.
    fn upload<T: Element>(&mut self, data: &[T], offset: usize) -> u64;

    /// Overwrites device memory at `ptr` (inside an allocation of this backend) with `data`.
    fn write<T: Element>(&mut self, ptr: u64, data: &[T]);

    /// Reads `n` elements of T from `ptr`.
    fn download<T: Element + Default>(&mut self, ptr: u64, n: usize) -> Vec<T>;

    /// Allocates one i64 holding `v` (BatchNorm's `num_batches_tracked`).
    fn upload_i64(&mut self, v: i64) -> u64;

    /// Reads one i64 from `ptr`.
    fn download_i64(&mut self, ptr: u64) -> i64;
}

/// A LayerNorm / RMSNorm workspace of `bytes` on `be`: uninitialized (initcheck reports any
/// read of what no kernel wrote) except its first
/// [`warpnorm::layer_norm::SPLIT_BARRIER_BYTES`], the cooperative split pass's barrier counts,
/// zeroed as the API asks before a workspace's first use (every call leaves them zero:
/// [`barrier_is_zero`] checks). 0 bytes: a 4-byte allocation nothing reads.
pub fn row_norm_workspace<B: Backend>(be: &mut B, bytes: usize) -> u64 {
    let p = be.alloc::<f32>(bytes.div_ceil(4).max(1), 0);
    if bytes > 0 {
        be.write(p, &[0.0f32; 4]);
    }
    p
}

/// Whether a row-norm workspace's barrier counts (see [`row_norm_workspace`]) are zero.
pub fn barrier_is_zero<B: Backend>(be: &mut B, ws: u64) -> bool {
    be.download::<f32>(ws, 4).iter().all(|v| v.to_bits() == 0)
}
