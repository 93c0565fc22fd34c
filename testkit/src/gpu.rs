//! GPU access for tests: a stream when a usable GPU is present, otherwise a printed reason
//! to skip (or a failure when WARPNORM_REQUIRE_GPU=1); and [`Gpu`], the GPU as a
//! [`Backend`], so the simulator's cases run unchanged on the device.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use warpnorm::runtime::GpuExecutor;
use warpnorm::{DeviceProps, Element, Error, Executor, Plan};

use crate::backend::Backend;

/// A stream on device 0, or None after printing why the test skips.
pub fn gpu_stream(test: &str) -> Option<Arc<CudaStream>> {
    let require = std::env::var("WARPNORM_REQUIRE_GPU").is_ok_and(|v| v == "1");
    let reason = if !warpnorm::kernels::BUILT {
        format!(
            "kernels not built ({})",
            warpnorm::kernels::NOT_BUILT_REASON
        )
    } else {
        match warpnorm::runtime::context(0) {
            Ok(ctx) => return Some(ctx.default_stream()),
            Err(e) => e.to_string(),
        }
    };
    if require {
        panic!("{test}: WARPNORM_REQUIRE_GPU=1 but no GPU can be used: {reason}");
    }
    eprintln!("SKIP {test} (GPU): {reason}");
    None
}

/// The GPU as a [`Backend`]: plans run on a stream through [`GpuExecutor`], and every buffer
/// allocated here stays alive (and its raw address valid) until the backend is dropped.
/// [`Executor::execute`] synchronizes the stream, so a kernel fault is reported by the run
/// that caused it, and downloads see its results.
pub struct Gpu {
    stream: Arc<CudaStream>,
    props: DeviceProps,
    keep: Vec<CudaSlice<u8>>,
}

impl Gpu {
    /// A backend on `stream`, with warpnorm's kernels loaded into its context.
    pub fn new(stream: &Arc<CudaStream>) -> warpnorm::Result<Gpu> {
        let props = *GpuExecutor::new(stream)?.props();
        Ok(Gpu {
            stream: stream.clone(),
            props,
            keep: Vec::new(),
        })
    }

    /// Waits for the stream. This also makes the stream's context current on the calling
    /// thread, which the raw copies below (cudarc's `result` layer) rely on.
    fn sync(&self, during: &str) -> warpnorm::Result<()> {
        self.stream.synchronize().map_err(|source| Error::Driver {
            during: during.into(),
            source,
        })
    }

    /// A zero-filled allocation of `bytes` (at least 1: CUDA cannot allocate zero bytes),
    /// kept alive with the backend; returns its address (256-byte aligned, as every CUDA
    /// allocation).
    fn alloc_bytes(&mut self, bytes: usize) -> u64 {
        let buf = self
            .stream
            .alloc_zeros::<u8>(bytes.max(1))
            .expect("GPU alloc");
        let (p, guard) = buf.device_ptr(&self.stream);
        drop(guard);
        self.keep.push(buf);
        p
    }

    /// Copies `data` to `ptr`, which must point into an allocation of this backend with room
    /// for it (every caller passes an address [`Gpu::alloc_bytes`] sized for `data`).
    fn copy_in<T>(&self, ptr: u64, data: &[T]) {
        self.sync("uploading").expect("GPU sync");
        if !data.is_empty() {
            // SAFETY: `ptr` points into a live allocation of at least size_of_val(data)
            // bytes (see above), and the context is current (sync binds it).
            unsafe { cudarc::driver::result::memcpy_htod_sync(ptr, data) }.expect("GPU upload");
        }
    }

    /// Copies `out.len()` elements from `ptr` after the stream's work has finished.
    fn copy_out<T>(&self, out: &mut [T], ptr: u64) {
        self.sync("downloading").expect("GPU sync");
        if !out.is_empty() {
            // SAFETY: the tests read only what they allocated here (at least out.len()
            // elements at `ptr`, kept alive in `keep`); the context is current.
            unsafe { cudarc::driver::result::memcpy_dtoh_sync(out, ptr) }.expect("GPU download");
        }
    }
}

impl Executor for Gpu {
    fn props(&self) -> &DeviceProps {
        &self.props
    }

    fn execute(&mut self, plan: &Plan) -> warpnorm::Result<()> {
        GpuExecutor::new(&self.stream)?.execute(plan)?;
        self.sync("synchronizing after a test plan")
    }
}

impl Backend for Gpu {
    fn alloc<T: Element>(&mut self, n: usize, offset: usize) -> u64 {
        let size = std::mem::size_of::<T>();
        self.alloc_bytes((n + offset) * size) + (offset * size) as u64
    }

    fn upload<T: Element>(&mut self, data: &[T], offset: usize) -> u64 {
        let p = self.alloc::<T>(data.len(), offset);
        self.copy_in(p, data);
        p
    }

    fn write<T: Element>(&mut self, ptr: u64, data: &[T]) {
        self.copy_in(ptr, data);
    }

    fn download<T: Element + Default>(&mut self, ptr: u64, n: usize) -> Vec<T> {
        let mut out = vec![T::default(); n];
        self.copy_out(&mut out, ptr);
        out
    }

    fn upload_i64(&mut self, v: i64) -> u64 {
        let p = self.alloc_bytes(8);
        self.copy_in(p, &[v]);
        p
    }

    fn download_i64(&mut self, ptr: u64) -> i64 {
        let mut out = [0i64];
        self.copy_out(&mut out, ptr);
        out[0]
    }
}
