//! The prediction: per launch, the largest of three times (bandwidth, Little's law, issue),
//! stretched by the last wave's tail, plus the launch overhead; per op, the sum.
//!
//! For a launch of `B` blocks of `T` threads whose kernel keeps `k` blocks resident per SM
//! (registers, shared memory, threads: `warpnorm::occupancy`), on `SM` SMs:
//! - one wave holds `k x SM` blocks; a grid of more runs `ceil(waves)` waves, each as long as a
//!   full one (a grid of 1.1 waves runs as 2): the times below are multiplied by
//!   `ceil(waves) / waves`; a grid of less than one wave has `min(B, SM)` active SMs with
//!   `min(k, ceil(B / SM))` blocks each;
//! - **bandwidth**: `(read + write bytes) / copy bandwidth`;
//! - **Little's law**: only loads make a thread wait, so `read bytes x latency / (loads in flight
//!   per SM x active SMs)`, loads in flight per SM = the kernel's MLP (bytes of loads a thread
//!   issues before the first is used, from its SASS: [`crate::sass`]) x resident threads per SM;
//! - **issue**: `thread-instructions / (32 x 4 x clock x active SMs)`, thread-instructions =
//!   the main loop's instructions per byte it loads x the launch's read bytes;
//! - **shared**: `shared-memory bytes / (128 x clock x active SMs)`, shared-memory bytes = the
//!   main loop's `LDS`/`STS` bytes per byte it loads x the launch's read bytes (32 banks of 4
//!   bytes per clock; bank conflicts are not modelled: the kernels' slot layouts avoid them);
//! - **overhead**: a constant per launch ([`crate::gpu`]).
//!
//! The op's roofline is a copy of its minimum bytes: one launch, at the copy bandwidth. Its
//! "% of roofline" is that time over the predicted time, so a well-formed copy is at 100% and
//! every extra launch or byte shows.

use serde::Serialize;
use warpnorm::kernels::{KernelResources, RESOURCES};
use warpnorm::occupancy::resident_blocks;
use warpnorm::Launch;

use crate::gpu::{Gpu, BUDGET_LATENCY};
use crate::plans::{Case, Traffic};
use crate::sass::LoopWalk;

/// Which term limits a launch or an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Limit {
    /// DRAM bandwidth: at the roofline.
    Bandwidth,
    /// Too few bytes of loads in flight (Little's law).
    Latency,
    /// Too many instructions.
    Issue,
    /// Too many shared-memory bytes.
    Shared,
    /// The per-launch overhead exceeds every other term.
    Overhead,
}

impl Limit {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Bandwidth => "bandwidth",
            Limit::Latency => "latency",
            Limit::Issue => "issue",
            Limit::Shared => "shared",
            Limit::Overhead => "overhead",
        }
    }
}

/// What the model knows about one kernel on one architecture.
#[derive(Clone, Debug, Default)]
pub struct KernelFacts {
    /// The main loop walk.
    pub walk: LoopWalk,
    /// Registers per thread (ptxas).
    pub registers: u32,
    /// Static shared memory per block (ptxas).
    pub static_smem: u32,
}

impl KernelFacts {
    /// The facts of `kernel` on `arch`: its SASS walk and ptxas figures.
    pub fn new(walk: LoopWalk, kernel: &str, arch: u32) -> KernelFacts {
        let res = RESOURCES
            .iter()
            .find(|r| r.arch == arch && r.kernel == kernel);
        KernelFacts {
            walk,
            registers: res.map_or(0, |r| r.registers),
            static_smem: res.map_or(0, |r| r.shared_bytes),
        }
    }
}

/// The prediction for one launch.
#[derive(Clone, Debug, Serialize)]
pub struct LaunchPrediction {
    /// Kernel entry point.
    pub kernel: String,
    /// Grid (x, y, z).
    pub grid: [u32; 3],
    /// Threads per block.
    pub threads: u64,
    /// Registers per thread.
    pub registers: u32,
    /// Shared memory per block (static + dynamic), bytes.
    pub smem: u32,
    /// Resident blocks per SM (occupancy).
    pub blocks_per_sm: u32,
    /// Resident warps per active SM.
    pub warps_per_sm: u32,
    /// Waves (grid / (resident blocks x SMs)).
    pub waves: f64,
    /// SMs with work.
    pub active_sms: u32,
    /// DRAM bytes read.
    pub read_bytes: f64,
    /// DRAM bytes written.
    pub write_bytes: f64,
    /// Bytes of global loads a thread has in flight together (SASS walk).
    pub mlp_thread: u32,
    /// Bytes of loads in flight per active SM.
    pub inflight_per_sm: f64,
    /// Thread-instructions per byte read (main loop).
    pub instrs_per_byte: f64,
    /// Bandwidth term, seconds (tail included).
    pub t_bandwidth: f64,
    /// Little's-law term, seconds (tail included).
    pub t_latency: f64,
    /// Issue term, seconds (tail included).
    pub t_issue: f64,
    /// Shared-memory term, seconds (tail included).
    pub t_shared: f64,
    /// Launch overhead, seconds.
    pub t_overhead: f64,
    /// Dependent L2 round trips after the streaming (a folded finalize), seconds.
    pub t_tail: f64,
    /// Predicted time, seconds.
    pub time: f64,
    /// The largest term.
    pub limit: Limit,
}

/// Predicts one launch on `gpu`.
pub fn predict_launch(gpu: &Gpu, l: &Launch, facts: &KernelFacts, t: &Traffic) -> LaunchPrediction {
    let props = &gpu.props;
    let sms = props.sm_count as f64;
    let threads = l.threads_per_block();
    let smem = facts.static_smem + l.shared_mem_bytes;
    let res = KernelResources {
        kernel: "",
        arch: gpu.sass_arch,
        registers: facts.registers,
        shared_bytes: facts.static_smem,
        stack_bytes: 0,
    };
    let k = resident_blocks(Some(&res), threads as u32, l.shared_mem_bytes, props).max(1);
    let blocks = l.blocks().max(1);
    let per_wave = k as f64 * sms;
    let waves = blocks as f64 / per_wave;
    let (active, per_sm, tail) = if waves > 1.0 {
        (props.sm_count, k as u64, waves.ceil() / waves)
    } else {
        let active = blocks.min(props.sm_count as u64);
        (
            active as u32,
            (k as u64).min(blocks.div_ceil(props.sm_count as u64)),
            1.0,
        )
    };
    let warps_per_sm = (per_sm * threads.div_ceil(32)) as u32;
    let mlp = facts.walk.mlp_bytes;
    let inflight = mlp as f64 * (per_sm * threads) as f64;
    let t_bw = (t.read + t.write) / gpu.copy_bw * tail;
    let t_lat = if t.read > 0.0 {
        t.read * gpu.dram_latency / (inflight.max(1.0) * active as f64) * tail
    } else {
        0.0
    };
    let ipb = facts.walk.instrs_per_load_byte();
    let t_issue = ipb * t.read / (32.0 * gpu.issue_per_clock * gpu.clock_hz * active as f64) * tail;
    let spb = facts.walk.shared_per_load_byte();
    let t_shared = spb * t.read / (gpu.shared_per_clock * gpu.clock_hz * active as f64) * tail;
    let (limit, top) = [
        (Limit::Bandwidth, t_bw),
        (Limit::Latency, t_lat),
        (Limit::Issue, t_issue),
        (Limit::Shared, t_shared),
    ]
    .into_iter()
    .fold(
        (Limit::Bandwidth, 0.0),
        |acc, x| if x.1 > acc.1 { x } else { acc },
    );
    let t_tail = t.tail_trips * gpu.l2_round_trip;
    let limit = if gpu.launch_overhead > top {
        Limit::Overhead
    } else {
        limit
    };
    LaunchPrediction {
        kernel: l.kernel.clone(),
        grid: l.grid,
        threads,
        registers: facts.registers,
        smem,
        blocks_per_sm: k,
        warps_per_sm,
        waves,
        active_sms: active,
        read_bytes: t.read,
        write_bytes: t.write,
        mlp_thread: mlp,
        inflight_per_sm: inflight,
        instrs_per_byte: ipb,
        t_bandwidth: t_bw,
        t_latency: t_lat,
        t_issue,
        t_shared,
        t_overhead: gpu.launch_overhead,
        t_tail,
        time: top + gpu.launch_overhead + t_tail,
        limit,
    }
}

/// A loads-in-flight shortfall of one launch (issue 11's second budget).
#[derive(Clone, Debug, Serialize)]
pub struct InflightCheck {
    /// Kernel.
    pub kernel: String,
    /// Loads in flight per SM.
    pub have: f64,
    /// 1.5 x the reads' share x Little's need per SM at 800 ns.
    pub need: f64,
}

/// The prediction for one case on one GPU.
#[derive(Clone, Debug, Serialize)]
pub struct OpPrediction {
    /// GPU name.
    pub gpu: String,
    /// Op name.
    pub op: String,
    /// Shape.
    pub shape: String,
    /// Dtype pair.
    pub dtypes: String,
    /// Elements.
    pub elements: u64,
    /// Minimum DRAM bytes.
    pub min_bytes: f64,
    /// Predicted time, seconds.
    pub time: f64,
    /// Minimum bytes / predicted time, GB/s.
    pub gbs: f64,
    /// Roofline time (minimum bytes at the copy bandwidth + one launch) / predicted time, %.
    pub pct_roofline: f64,
    /// What limits the op: that of its longest launch, or overhead when the launches'
    /// overheads are more than half the time.
    pub limit: Limit,
    /// The budget (% of roofline) when one applies (budgeted GPU, >= 4M elements).
    pub budget_pct: Option<f64>,
    /// Launches below the loads-in-flight budget (only where a budget applies).
    pub inflight_short: Vec<InflightCheck>,
    /// Per launch.
    pub launches: Vec<LaunchPrediction>,
    /// A case of issue 13's shape set (summarized in the report).
    pub sweep: bool,
}

impl OpPrediction {
    /// The key used in `below_budget.txt` and the JSON: `GPU op shape dtypes`.
    pub fn key(&self) -> String {
        format!("{} {} {} {}", self.gpu, self.op, self.shape, self.dtypes)
    }

    /// Budget checks this prediction misses: `roofline` and/or `inflight`.
    pub fn misses(&self) -> Vec<&'static str> {
        let mut m = Vec::new();
        if let Some(b) = self.budget_pct {
            if self.pct_roofline < b {
                m.push("roofline");
            }
            if !self.inflight_short.is_empty() {
                m.push("inflight");
            }
        }
        m
    }

    /// Largest MLP of the op's data-moving launches (bytes per thread).
    pub fn mlp_thread(&self) -> u32 {
        self.main_launch().map_or(0, |l| l.mlp_thread)
    }

    /// The launch that moves the most bytes.
    pub fn main_launch(&self) -> Option<&LaunchPrediction> {
        self.launches.iter().max_by(|a, b| {
            (a.read_bytes + a.write_bytes).total_cmp(&(b.read_bytes + b.write_bytes))
        })
    }
}

/// Elements from which the budgets apply (issue 11: ">= 4M elements").
pub const BUDGET_MIN_ELEMENTS: u64 = 4 << 20;
/// Loads in flight per SM must be at least this many times the reads' share of Little's need.
pub const INFLIGHT_MARGIN: f64 = 1.5;
/// A launch is checked for loads in flight when it moves at least this share of the op's bytes.
pub const INFLIGHT_MIN_SHARE: f64 = 0.1;

/// Predicts a case on a GPU; `facts` gives each kernel's facts.
pub fn predict(gpu: &Gpu, case: &Case, facts: &dyn Fn(&str) -> KernelFacts) -> OpPrediction {
    let launches: Vec<LaunchPrediction> = case
        .plan
        .launches
        .iter()
        .zip(&case.traffic)
        .map(|(l, t)| predict_launch(gpu, l, &facts(&l.kernel), t))
        .collect();
    let time: f64 = launches.iter().map(|l| l.time).sum();
    let min = case.min_bytes();
    let roof = min / gpu.copy_bw + gpu.launch_overhead;
    let overheads: f64 = launches.iter().map(|l| l.t_overhead).sum();
    let limit = if overheads > time / 2.0 {
        Limit::Overhead
    } else {
        launches
            .iter()
            .max_by(|a, b| a.time.total_cmp(&b.time))
            .map_or(Limit::Overhead, |l| l.limit)
    };
    let budget = case
        .op
        .budget()
        .filter(|_| gpu.budgeted && case.elements >= BUDGET_MIN_ELEMENTS);
    let total_bytes: f64 = launches.iter().map(|l| l.read_bytes + l.write_bytes).sum();
    let inflight_short = if budget.is_some() {
        launches
            .iter()
            .filter(|l| l.read_bytes > 0.0)
            .filter(|l| l.read_bytes + l.write_bytes >= INFLIGHT_MIN_SHARE * total_bytes)
            .filter_map(|l| {
                let share = l.read_bytes / (l.read_bytes + l.write_bytes);
                let need = INFLIGHT_MARGIN * share * gpu.littles_need_per_sm(BUDGET_LATENCY);
                (l.inflight_per_sm < need).then(|| InflightCheck {
                    kernel: l.kernel.clone(),
                    have: l.inflight_per_sm,
                    need,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    OpPrediction {
        gpu: gpu.name.to_string(),
        op: case.op.name().to_string(),
        shape: case.shape.clone(),
        dtypes: case.dtypes.clone(),
        elements: case.elements,
        min_bytes: min,
        time,
        gbs: min / time / 1e9,
        pct_roofline: 100.0 * roof / time,
        limit,
        budget_pct: budget.map(|b| 100.0 * b),
        inflight_short,
        launches,
        sweep: case.sweep,
    }
}
