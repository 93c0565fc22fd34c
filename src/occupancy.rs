//! *Advanced.* Resident blocks per SM of a kernel, from the build's `ptxas` figures
//! ([`crate::kernels::RESOURCES`]) and the device's limits ([`DeviceProps`]): what the CUDA
//! occupancy calculator computes, as a pure function, so that persistent grids are sized to
//! one wave without asking the driver.
//!
//! The SASS a device runs is that of the highest built architecture with the device's major
//! compute capability and a minor one not above the device's ([`sass_arch_in`]); a device with
//! no such SASS JIT-compiles the fatbin's PTX, whose register count the build does not know.
//! Then (and for a build without nvcc) the answer is the guarantee every kernel declares with
//! `__launch_bounds__(BOUND, 1)`: one block per SM.
//!
//! Limits, per SM: `max_blocks_per_sm`; `max_threads_per_sm / (32 * warps per block)` blocks;
//! registers allocated per warp in units of 256 (`ceil(32 * regs / 256) * 256`), from the four
//! sub-partitions' quarters of the register file (`4 * floor(registers_per_sm / 4 / per-warp)`
//! warps); shared memory `static + dynamic + reserved_shared_per_block`, rounded up to 128 bytes,
//! from `shared_per_sm`.

use crate::device::DeviceProps;
use crate::kernels::{KernelResources, RESOURCES, SASS_ARCHS};

/// The SASS architecture (e.g. 86) among `archs` that a device of compute capability `cc`
/// runs: the highest one with the same major version and a minor version <= the device's.
/// `None`: the device would JIT-compile the PTX.
pub fn sass_arch_in(archs: &[u32], cc: (u32, u32)) -> Option<u32> {
    archs
        .iter()
        .copied()
        .filter(|&a| a / 10 == cc.0 && a % 10 <= cc.1)
        .max()
}

/// [`sass_arch_in`] for the archs this build compiled ([`crate::kernels::SASS_ARCHS`]).
pub fn sass_arch(props: &DeviceProps) -> Option<u32> {
    sass_arch_in(SASS_ARCHS, props.compute_capability)
}

/// What `ptxas` reported for `kernel` on the SASS the device would run, if the build has it.
pub fn kernel_resources(kernel: &str, props: &DeviceProps) -> Option<&'static KernelResources> {
    let arch = sass_arch(props)?;
    RESOURCES
        .iter()
        .find(|r| r.arch == arch && r.kernel == kernel)
}

/// Resident blocks per SM of a kernel with resources `res` (None: unknown, see the module
/// docs), blocks of `block_threads` threads and `dynamic_smem` bytes of dynamic shared memory.
/// At least 1 (a launch the device cannot hold at all fails at launch, not here).
pub fn resident_blocks(
    res: Option<&KernelResources>,
    block_threads: u32,
    dynamic_smem: u32,
    props: &DeviceProps,
) -> u32 {
    let Some(res) = res else {
        return 1;
    };
    let warps = block_threads.div_ceil(32).max(1);
    let mut blocks = props.max_blocks_per_sm;
    blocks = blocks.min(props.max_threads_per_sm / (32 * warps));
    if res.registers > 0 {
        let per_warp = (32 * res.registers).div_ceil(256) * 256;
        let warps_by_regs = 4 * (props.registers_per_sm / 4 / per_warp);
        blocks = blocks.min(warps_by_regs / warps);
    }
    let smem = res.shared_bytes + dynamic_smem;
    if smem > 0 {
        let per_block = (smem + props.reserved_shared_per_block).div_ceil(128) * 128;
        blocks = blocks.min(props.shared_per_sm / per_block);
    }
    blocks.max(1)
}

/// [`resident_blocks`] of the named kernel on the device, from the build's figures.
pub fn resident_blocks_of(
    kernel: &str,
    block_threads: u32,
    dynamic_smem: u32,
    props: &DeviceProps,
) -> u32 {
    resident_blocks(
        kernel_resources(kernel, props),
        block_threads,
        dynamic_smem,
        props,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(registers: u32, shared_bytes: u32) -> KernelResources {
        KernelResources {
            kernel: "k",
            arch: 90,
            registers,
            shared_bytes,
            stack_bytes: 0,
        }
    }

    #[test]
    fn sass_selection_follows_the_driver_rule() {
        let built = [75, 80, 86, 89, 90, 100, 120];
        assert_eq!(sass_arch_in(&built, (9, 0)), Some(90));
        assert_eq!(sass_arch_in(&built, (8, 7)), Some(86));
        assert_eq!(sass_arch_in(&built, (8, 0)), Some(80));
        assert_eq!(sass_arch_in(&built, (10, 3)), Some(100));
        assert_eq!(sass_arch_in(&[90], (8, 0)), None);
        // The default build (no sm_86/sm_89 SASS): 8.6 and 8.9 devices run the sm_80 SASS.
        let default = [75, 80, 90, 100, 120];
        assert_eq!(sass_arch_in(&default, (8, 6)), Some(80));
        assert_eq!(sass_arch_in(&default, (8, 9)), Some(80));
        assert_eq!(sass_arch_in(&default, (12, 1)), Some(120));
        assert_eq!(
            sass_arch_in(&[80], (9, 0)),
            None,
            "sm_80 SASS does not run on 9.0"
        );
    }

    #[test]
    fn limits_by_hand() {
        let h = DeviceProps::H200;
        // 128 registers x 512 threads: 4096 registers per warp, 4 warps per sub-partition.
        assert_eq!(resident_blocks(Some(&res(128, 0)), 512, 0, &h), 1);
        // 64 registers: 2048 per warp, 8 warps per sub-partition = 32 warps = 2 blocks.
        assert_eq!(resident_blocks(Some(&res(64, 0)), 512, 0, &h), 2);
        // 72 registers: 2304 per warp, floor(16384 / 2304) = 7 per sub-partition = 28 warps.
        assert_eq!(resident_blocks(Some(&res(72, 0)), 512, 0, &h), 1);
        assert_eq!(resident_blocks(Some(&res(72, 0)), 128, 0, &h), 7);
        // 32 registers x 128 threads: thread limit 2048 / 128 = 16 blocks.
        assert_eq!(resident_blocks(Some(&res(32, 0)), 128, 0, &h), 16);
        // T4: 1024 threads per SM.
        assert_eq!(
            resident_blocks(Some(&res(32, 0)), 128, 0, &DeviceProps::T4),
            8
        );
        // Shared memory: 32 KiB + 1 KiB static + 1 KiB reserved = 34 KiB -> 6 on an H200.
        assert_eq!(resident_blocks(Some(&res(32, 1024)), 128, 32768, &h), 6);
        // Block limit: 32 registers x 32 threads.
        assert_eq!(resident_blocks(Some(&res(32, 0)), 32, 0, &h), 32);
        // Unknown resources: the __launch_bounds__(BOUND, 1) guarantee.
        assert_eq!(resident_blocks(None, 128, 0, &h), 1);
        // Never 0.
        assert_eq!(resident_blocks(Some(&res(255, 0)), 1024, 0, &h), 1);
    }
}
