//! Every constant of the model, in one place, with its source.
//!
//! Constants change only from measurements on a lent GPU (`scripts/gpu-run.sh`), recorded in
//! `reports/` next to the predictions.

use warpnorm::DeviceProps;

/// The figures the model uses for one GPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gpu {
    /// Short name used in reports and in `below_budget.txt`.
    pub name: &'static str,
    /// The limits the planners use (SMs, registers, shared memory, threads).
    pub props: DeviceProps,
    /// The SASS architecture the GPU runs.
    pub sass_arch: u32,
    /// Device-to-device copy bandwidth, bytes/s: the roofline.
    pub copy_bw: f64,
    /// DRAM latency under load, seconds (Little's law).
    pub dram_latency: f64,
    /// SM clock, Hz.
    pub clock_hz: f64,
    /// Warp-instructions issued per clock per SM.
    pub issue_per_clock: f64,
    /// Shared-memory bytes an SM moves per clock (loads and stores, no bank conflicts).
    pub shared_per_clock: f64,
    /// Time each launch adds, seconds.
    pub launch_overhead: f64,
    /// One round trip from an SM to the L2 and back (a fence, an atomic, a load of data another
    /// SM just wrote), seconds: what a reduction that finalizes in its last block, or a
    /// cooperative pass's grid barrier, adds after its streaming ends, per dependent step.
    pub l2_round_trip: f64,
    /// True when the budgets apply (issue 11: an H100 SXM and an H200).
    pub budgeted: bool,
}

/// DRAM latency under load on Hopper: shared/KERNELS.md gives 600-800 ns; issue 11 computes
/// Little's need with ~700 ns. The budgets use [`BUDGET_LATENCY`] instead.
pub const HOPPER_DRAM_LATENCY: f64 = 700e-9;
/// The latency at which the budgets require loads in flight (issue 11: "at 800 ns").
pub const BUDGET_LATENCY: f64 = 800e-9;
/// Warp-instructions per clock per SM: four sub-partitions, one warp-instruction each per
/// clock (shared/KERNELS.md; the Volta..Hopper SM layout).
pub const ISSUE_PER_CLOCK: f64 = 4.0;
/// Shared-memory bytes per clock per SM: 32 banks of 4 bytes, each serving one access per
/// clock (the CUDA C++ Programming Guide's shared-memory banks, compute capability 5.x and
/// later), so a warp's conflict-free 16-byte accesses take 4 clocks per 512 bytes.
pub const SHARED_PER_CLOCK: f64 = 128.0;
/// Per-launch overhead: "a few microseconds" (shared/KERNELS.md); 2 us chosen, the usual
/// back-to-back launch-to-launch gap of a stream on Hopper, until a lent GPU measures it.
pub const LAUNCH_OVERHEAD: f64 = 2e-6;
/// An L2 round trip: published Hopper-class figures for an L2 hit are about 200 to 340 cycles
/// (a pointer chase; on an L40, 222-339 cycles depending on the SM, arXiv 2606.22588), about
/// 110-170 ns at 1.98 GHz. The model takes 300 ns - twice that or more, for the far L2
/// partition, the atomic unit and a memory system still draining the launch's stores - until
/// a lent GPU measures it.
pub const L2_ROUND_TRIP: f64 = 300e-9;

/// An H100 SXM (80 GB HBM3).
/// - copy bandwidth 3.35 TB/s: NVIDIA's datasheet figure (shared/KERNELS.md), not yet
///   measured; a measured copy is usually below the datasheet, so this is optimistic;
/// - clock 1.98 GHz: the boost clock (NVIDIA's FP32 peak of 66.9 TFLOPS = 16896 cores x 2 x
///   1.98 GHz);
/// - latency [`HOPPER_DRAM_LATENCY`], issue rate [`ISSUE_PER_CLOCK`], overhead
///   [`LAUNCH_OVERHEAD`].
pub const H100: Gpu = Gpu {
    name: "H100",
    props: DeviceProps::H100,
    sass_arch: 90,
    copy_bw: 3.35e12,
    dram_latency: HOPPER_DRAM_LATENCY,
    clock_hz: 1.98e9,
    issue_per_clock: ISSUE_PER_CLOCK,
    shared_per_clock: SHARED_PER_CLOCK,
    launch_overhead: LAUNCH_OVERHEAD,
    l2_round_trip: L2_ROUND_TRIP,
    budgeted: true,
};

/// An H200 (141 GB HBM3e).
/// - copy bandwidth 4.3 TB/s: measured device-to-device copy (shared/KERNELS.md; the
///   datasheet says 4.8 TB/s);
/// - clock 1.98 GHz: the same GH100 SMs and boost clock as the H100 SXM (NVIDIA's H200
///   datasheet gives the same 67 TFLOPS FP32 peak);
/// - latency, issue rate, overhead as the H100.
pub const H200: Gpu = Gpu {
    name: "H200",
    props: DeviceProps::H200,
    sass_arch: 90,
    copy_bw: 4.3e12,
    dram_latency: HOPPER_DRAM_LATENCY,
    clock_hz: 1.98e9,
    issue_per_clock: ISSUE_PER_CLOCK,
    shared_per_clock: SHARED_PER_CLOCK,
    launch_overhead: LAUNCH_OVERHEAD,
    l2_round_trip: L2_ROUND_TRIP,
    budgeted: true,
};

/// An A100-40GB, for information only (no budget): the sm_80 SASS.
/// - copy bandwidth 1.555 TB/s: datasheet (shared/KERNELS.md);
/// - clock 1.41 GHz: the boost clock (NVIDIA's FP32 peak of 19.5 TFLOPS = 6912 x 2 x 1.41 GHz);
/// - latency: the Hopper figure, unmeasured on an A100.
pub const A100: Gpu = Gpu {
    name: "A100",
    props: DeviceProps::A100,
    sass_arch: 80,
    copy_bw: 1.555e12,
    dram_latency: HOPPER_DRAM_LATENCY,
    clock_hz: 1.41e9,
    issue_per_clock: ISSUE_PER_CLOCK,
    shared_per_clock: SHARED_PER_CLOCK,
    launch_overhead: LAUNCH_OVERHEAD,
    l2_round_trip: L2_ROUND_TRIP,
    budgeted: false,
};

/// The GPUs of the report, budgeted ones first.
pub const GPUS: [Gpu; 3] = [H100, H200, A100];

impl Gpu {
    /// Thread-instructions the whole GPU issues per second.
    pub fn thread_instr_rate(&self) -> f64 {
        self.issue_per_clock * 32.0 * self.clock_hz * self.props.sm_count as f64
    }

    /// Bytes that must be in flight per SM to stream at the copy bandwidth (Little's law) at
    /// `latency` seconds.
    pub fn littles_need_per_sm(&self, latency: f64) -> f64 {
        self.copy_bw * latency / self.props.sm_count as f64
    }
}
