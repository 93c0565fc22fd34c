//! GPU access for tests: a stream when a usable GPU is present, otherwise a printed reason
//! to skip (or a failure when WARPNORM_REQUIRE_GPU=1).

use std::sync::Arc;

use cudarc::driver::CudaStream;

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
