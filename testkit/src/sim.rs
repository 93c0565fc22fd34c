//! Runs warpnorm launch plans on ptxsim, the PTX simulator: the same plans the GPU executes,
//! on the PTX nvcc emitted for compute_75, compute_80 or compute_90.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use ptxsim::{Arg, Device, LaunchConfig, LaunchStats, Module, SimError};
use warpnorm::{kernels, DeviceProps, Element, Executor, Launch, Plan};

use crate::backend::Backend;

/// The PTX architectures every simulator test runs on.
pub const SIM_ARCHS: [u32; 3] = [75, 80, 90];

/// [`DeviceProps::SIM`] with an H100's or H200's shared memory (227 KiB opt-in per block, 228
/// KiB per SM), for plans that need more than an A100's 163 KiB: LayerNorm's wide-tier
/// backward with the bias gradient keeps three 64 KiB arrays of sums there.
pub const SIM_SM90_SHARED: DeviceProps = DeviceProps {
    max_shared_per_block_optin: DeviceProps::H200.max_shared_per_block_optin,
    shared_per_sm: DeviceProps::H200.shared_per_sm,
    ..DeviceProps::SIM
};

/// Rows a simulated case of `cols` columns gets: `m`, at most `max_elems` elements, but at
/// least [`DeviceProps::SIM`]'s SM count up to 16384 columns, so that rows up to the wide
/// backward tier's bound are not split for having fewer rows than SMs.
pub fn sim_rows(m: usize, cols: usize, max_elems: usize) -> usize {
    let floor = if cols <= 16384 {
        DeviceProps::SIM.sm_count as usize
    } else {
        1
    };
    m.min((max_elems / cols.max(1)).max(floor))
}

/// True when kernels are missing and the test should say so and return (fails instead when
/// WARPNORM_REQUIRE_NVCC=1, as in CI).
pub fn skip_without_kernels(test: &str) -> bool {
    if kernels::BUILT {
        return false;
    }
    if std::env::var("WARPNORM_REQUIRE_NVCC").is_ok_and(|v| v == "1") {
        panic!(
            "{test}: kernels not built but WARPNORM_REQUIRE_NVCC=1: {}",
            kernels::NOT_BUILT_REASON
        );
    }
    eprintln!(
        "SKIP {test}: kernels not built ({})",
        kernels::NOT_BUILT_REASON
    );
    true
}

/// Parsed modules, shared by every test of the process (parsing is done once per family/arch).
type ModuleCache = Mutex<HashMap<(&'static str, u32), Arc<Module>>>;

fn module(family: &'static str, arch: u32) -> Arc<Module> {
    static CACHE: OnceLock<ModuleCache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(m) = cache.lock().unwrap().get(&(family, arch)) {
        return m.clone();
    }
    let text = kernels::ptx(family, arch).unwrap_or_else(|| {
        panic!("no PTX for {family} compute_{arch} in the build (feature sim-ptx off?)")
    });
    let m = Arc::new(
        Module::parse(text)
            .unwrap_or_else(|e| panic!("ptxsim cannot parse {family}.compute_{arch}.ptx: {e}")),
    );
    cache.lock().unwrap().insert((family, arch), m.clone());
    m
}

/// A simulated GPU running one PTX architecture.
pub struct Sim {
    /// The simulated device (memory + launches).
    pub dev: Device,
    /// The PTX architecture (75, 80 or 90).
    pub arch: u32,
    /// What plans run here are made for ([`DeviceProps::SIM`] unless a test says otherwise:
    /// any plan runs on ptxsim, whatever device it was made for).
    pub props: DeviceProps,
}

/// The simulator is an executor like the GPU path: a simulator error or a sanitizer finding
/// becomes an error (a finding fails the test at once, see [`Sim::run`]).
impl Executor for Sim {
    fn props(&self) -> &DeviceProps {
        &self.props
    }

    fn execute(&mut self, plan: &Plan) -> warpnorm::Result<()> {
        self.run(plan)
            .map(|_| ())
            .map_err(|e| warpnorm::Error::InvalidArgument {
                what: "ptxsim launch".into(),
                message: e.to_string(),
            })
    }
}

/// The simulator's memory, for code written against every backend (the inherent methods
/// below are the same operations).
impl Backend for Sim {
    fn alloc<T: Element>(&mut self, n: usize, offset: usize) -> u64 {
        Sim::alloc::<T>(self, n, offset)
    }

    fn upload<T: Element>(&mut self, data: &[T], offset: usize) -> u64 {
        Sim::upload(self, data, offset)
    }

    fn write<T: Element>(&mut self, ptr: u64, data: &[T]) {
        Sim::write(self, ptr, data)
    }

    fn download<T: Element + Default>(&mut self, ptr: u64, n: usize) -> Vec<T> {
        Sim::download(self, ptr, n)
    }

    fn upload_i64(&mut self, v: i64) -> u64 {
        let p = self.dev.alloc(8).expect("sim alloc");
        self.dev.write_slice(p, &[v]).expect("sim write");
        p
    }

    fn download_i64(&mut self, ptr: u64) -> i64 {
        self.dev.read_slice::<i64>(ptr, 1).expect("sim read")[0]
    }
}

fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: Element types (f32, f16, bf16) are plain old data without padding.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

impl Sim {
    /// A fresh device with every check ptxsim has switched on.
    pub fn new(arch: u32) -> Sim {
        Sim {
            dev: Device::new(),
            arch,
            props: DeviceProps::SIM,
        }
    }

    /// Allocates `n` elements of T, uninitialized, `offset` elements past a 256-byte aligned
    /// base (offset 1 gives a deliberately misaligned view).
    pub fn alloc<T: Element>(&mut self, n: usize, offset: usize) -> u64 {
        let size = std::mem::size_of::<T>();
        let base = self
            .dev
            .alloc((n + offset).max(1) * size)
            .expect("sim alloc");
        base + (offset * size) as u64
    }

    /// Allocates and uploads `data`, `offset` elements past an aligned base.
    pub fn upload<T: Element>(&mut self, data: &[T], offset: usize) -> u64 {
        let p = self.alloc::<T>(data.len(), offset);
        self.dev.write(p, as_bytes(data)).expect("sim write");
        p
    }

    /// Overwrites device memory at `ptr` with `data`.
    pub fn write<T: Element>(&mut self, ptr: u64, data: &[T]) {
        self.dev.write(ptr, as_bytes(data)).expect("sim write");
    }

    /// Reads `n` elements of T from `ptr`.
    pub fn download<T: Element + Default>(&self, ptr: u64, n: usize) -> Vec<T> {
        let bytes = self
            .dev
            .read(ptr, n * std::mem::size_of::<T>())
            .expect("sim read");
        let mut out = vec![T::default(); n];
        // SAFETY: `out` has exactly bytes.len() bytes of POD storage.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr() as *mut u8, bytes.len())
        };
        out
    }

    /// Runs every launch of the plan in order; the first simulator error stops it.
    ///
    /// Racecheck and initcheck are on (ptxsim's defaults): any race or uninitialized read a
    /// launch reports fails the calling test here, naming the kernel and the first reports, so
    /// every kernel test is also a sanitizer test.
    pub fn run(&mut self, plan: &Plan) -> Result<Vec<LaunchStats>, SimError> {
        plan.launches
            .iter()
            .map(|l| {
                let [gx, gy, gz] = l.grid;
                self.run_blocks(l, [0..gx, 0..gy, 0..gz])
            })
            .collect()
    }

    /// Runs only the blocks of `only` (a box of the launch's grid; see
    /// `ptxsim::Device::launch_blocks`), with the checks of [`Sim::run`].
    pub fn run_blocks(
        &mut self,
        l: &Launch,
        only: [Range<u32>; 3],
    ) -> Result<LaunchStats, SimError> {
        let opts = self.dev.options();
        assert!(
            opts.racecheck && opts.initcheck,
            "simulator tests must run with racecheck and initcheck on"
        );
        let family = kernels::family_of(&l.kernel)
            .unwrap_or_else(|| panic!("kernel {} is not in the build", l.kernel));
        let m = module(family.name, self.arch);
        let cfg = LaunchConfig {
            grid: l.grid,
            block: l.block,
            shared_mem_bytes: l.shared_mem_bytes,
        };
        let args = [Arg::Bytes(l.args.bytes().to_vec())];
        let stats = if l.cooperative {
            // every block at once: a part of the grid alone would wait for the rest
            assert!(
                only.iter()
                    .zip(l.grid)
                    .all(|(r, g)| r.start == 0 && r.end == g),
                "a cooperative launch ({}) runs whole",
                l.kernel
            );
            self.dev.launch_cooperative(&m, &l.kernel, cfg, &args)?
        } else {
            self.dev.launch_blocks(&m, &l.kernel, cfg, &args, only)?
        };
        assert!(
            stats.reports.is_empty(),
            "sanitizer findings in {} on compute_{} ({} shown, {} more):\n{}",
            l.kernel,
            self.arch,
            stats.reports.len(),
            stats.reports_omitted,
            stats
                .reports
                .iter()
                .take(5)
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        );
        Ok(stats)
    }
}
