//! Shared helpers for the ptxsim integration tests: nvcc discovery and PTX caching ([`nvcc`]),
//! a table-driven harness for hand-written PTX instruction tests ([`isa`]), first-principles
//! floating-point references ([`fp`]) and small launch / fault helpers (here).
#![allow(dead_code)]

pub mod cuda;
pub mod fp;
pub mod isa;
pub mod layernorm_ref;
pub mod nvcc;

use ptxsim::{Arg, Device, Fault, LaunchConfig, LaunchStats, Module, Options, SimError};

/// A launch configuration without dynamic shared memory.
pub fn cfg(grid: [u32; 3], block: [u32; 3]) -> LaunchConfig {
    LaunchConfig {
        grid,
        block,
        shared_mem_bytes: 0,
    }
}

/// A 1-D launch configuration.
pub fn cfg1(grid: u32, block: u32) -> LaunchConfig {
    cfg([grid, 1, 1], [block, 1, 1])
}

/// A device with default options except for the worker thread count (2 keeps tests light
/// when the test harness already runs several tests in parallel).
pub fn device() -> Device {
    Device::with_options(Options {
        threads: 2,
        ..Options::default()
    })
}

/// Parses PTX, panicking with the error (and `what`) on failure.
pub fn parse(ptx: &str, what: &str) -> Module {
    match Module::parse(ptx) {
        Ok(m) => m,
        Err(e) => panic!(
            "{what}: parse failed: {e}\n{}",
            numbered(ptx, error_line(&e))
        ),
    }
}

/// The PTX line an error refers to, if any.
pub fn error_line(e: &SimError) -> Option<usize> {
    match e {
        SimError::Parse { line, .. } | SimError::Unsupported { line, .. } => Some(*line),
        SimError::Fault(f) => Some(f.line),
        _ => None,
    }
}

/// A window of the PTX text around `line` (1-based) with line numbers, for failure messages.
pub fn numbered(ptx: &str, line: Option<usize>) -> String {
    let Some(line) = line else {
        return String::new();
    };
    let lo = line.saturating_sub(4).max(1);
    ptx.lines()
        .enumerate()
        .skip(lo - 1)
        .take(8)
        .map(|(i, l)| {
            let mark = if i + 1 == line { ">>" } else { "  " };
            format!("{mark}{:5} {l}\n", i + 1)
        })
        .collect()
}

/// Launches and panics with a readable message on error.
pub fn launch(
    dev: &mut Device,
    m: &Module,
    ptx: &str,
    entry: &str,
    c: LaunchConfig,
    args: &[Arg],
) -> LaunchStats {
    match dev.launch(m, entry, c, args) {
        Ok(s) => s,
        Err(e) => panic!(
            "launch of {entry} failed: {e}\n{}",
            numbered(ptx, error_line(&e))
        ),
    }
}

/// Expects a launch to end in a guest fault and returns it.
pub fn expect_fault(r: Result<LaunchStats, SimError>, what: &str) -> Fault {
    match r {
        Ok(_) => panic!("{what}: launch succeeded, expected a fault"),
        Err(SimError::Fault(f)) => *f,
        Err(e) => panic!("{what}: expected SimError::Fault, got {e:?}"),
    }
}

/// The 1-based line numbers, inside the body of `.entry entry`, of the lines that contain
/// `needle`.
pub fn lines_in_entry(ptx: &str, entry: &str, needle: &str) -> Vec<usize> {
    let mut inside = false;
    let mut found = Vec::new();
    for (i, l) in ptx.lines().enumerate() {
        if l.contains(".entry") {
            inside = l.contains(&format!(".entry {entry}(")) || l.trim_end().ends_with(entry);
        }
        if inside && l.contains(needle) {
            found.push(i + 1);
        }
    }
    found
}

/// The one line in `.entry entry` that contains `needle` (panics unless there is exactly one).
pub fn line_in_entry(ptx: &str, entry: &str, needle: &str) -> usize {
    let v = lines_in_entry(ptx, entry, needle);
    assert_eq!(
        v.len(),
        1,
        "expected exactly one line containing {needle:?} in entry {entry}, found {v:?}"
    );
    v[0]
}

/// The mangled name of the `.entry` whose name contains `part` (nvcc mangles C++ names unless the
/// kernel is `extern "C"`; our kernels are `extern "C"`, so this is mostly a check).
pub fn entry_named<'a>(m: &'a Module, part: &str) -> &'a str {
    let names = m.entry_names();
    let hits: Vec<&str> = names.iter().copied().filter(|n| n.contains(part)).collect();
    assert_eq!(hits.len(), 1, "entries matching {part}: {names:?}");
    hits[0]
}

/// A small deterministic generator (SplitMix64) for test inputs.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// A value in `lo..hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo) as u64) as i64
    }
    /// An f32 with a random sign, mantissa and an exponent in `-e..=e`.
    pub fn f32_exp(&mut self, e: i32) -> f32 {
        let exp = (self.range(-e as i64, e as i64 + 1) + 127) as u32;
        let bits = (self.next_u32() & 0x8000_0000) | (exp << 23) | (self.next_u32() & 0x7f_ffff);
        f32::from_bits(bits)
    }
    /// An f64 with a random sign, mantissa and an exponent in `-e..=e`.
    pub fn f64_exp(&mut self, e: i32) -> f64 {
        let exp = (self.range(-e as i64, e as i64 + 1) + 1023) as u64;
        let bits =
            (self.next_u64() & (1 << 63)) | (exp << 52) | (self.next_u64() & ((1 << 52) - 1));
        f64::from_bits(bits)
    }
}

/// Bytes of a slice of f32 values, little-endian.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A PTX module header (`.version 8.0`, `.target sm_90`, 64-bit addresses) followed by `body`.
pub fn ptx_module(body: &str) -> String {
    format!(".version 8.0\n.target sm_90\n.address_size 64\n\n{body}")
}

/// A `.visible .entry` taking `nptr` pointer parameters. The body sees the global addresses in
/// `%a0..%a{nptr-1}`, `%t` = tid.x, `%g` = ctaid.x * ntid.x + tid.x, and scratch registers
/// `%p<8>`, `%h<16>`, `%r<32>`, `%rd<32>`, `%f<16>`, `%fd<16>`.
pub fn simple_entry(name: &str, nptr: usize, body: &str) -> String {
    let params = (0..nptr)
        .map(|i| format!("\t.param .u64 {name}_p{i}"))
        .collect::<Vec<_>>()
        .join(",\n");
    let loads: String = (0..nptr)
        .map(|i| {
            format!("\tld.param.u64 %a{i}, [{name}_p{i}];\n\tcvta.to.global.u64 %a{i}, %a{i};\n")
        })
        .collect();
    // State-space declarations in the body go to the top of the function.
    let is_decl = |l: &str| {
        let l = l.trim();
        l.starts_with(".shared") || l.starts_with(".local") || l.starts_with(".reg")
    };
    let decls: String = body
        .lines()
        .filter(|l| is_decl(l))
        .map(|l| format!("\t{}\n", l.trim()))
        .collect();
    let body: String = body
        .lines()
        .filter(|l| !is_decl(l))
        .map(|l| format!("\t{}\n", l.trim()))
        .collect();
    format!(
        ".visible .entry {name}(\n{params}\n)\n{{\n{decls}\t.reg .pred %p<8>;\n\t.reg .b16 %h<16>;\n\t.reg .b32 %r<32>;\n\t.reg .b64 %rd<32>;\n\t.reg .f32 %f<16>;\n\t.reg .f64 %fd<16>;\n\t.reg .b64 %a<4>;\n\t.reg .b32 %t, %g, %bid, %nt;\n\n{loads}\tmov.u32 %t, %tid.x;\n\tmov.u32 %bid, %ctaid.x;\n\tmov.u32 %nt, %ntid.x;\n\tmad.lo.s32 %g, %bid, %nt, %t;\n{body}\tret;\n}}\n"
    )
}

/// Allocates one device buffer per input (initialised with its bytes), launches `entry` with the
/// buffers as pointer arguments, and returns every buffer's final contents.
pub fn run_buffers(
    ptx: &str,
    entry: &str,
    c: LaunchConfig,
    inputs: &[Vec<u8>],
) -> Result<Vec<Vec<u8>>, String> {
    let show = |e: SimError| format!("{entry}: {e}\n{}", numbered(ptx, error_line(&e)));
    let m = Module::parse(ptx).map_err(show)?;
    let mut dev = device();
    let mut ptrs = Vec::new();
    for buf in inputs {
        let p = dev.alloc(buf.len().max(1)).map_err(show)?;
        dev.write(p, buf).map_err(show)?;
        ptrs.push(p);
    }
    let args: Vec<Arg> = ptrs.iter().map(|&p| Arg::Ptr(p)).collect();
    dev.launch(&m, entry, c, &args).map_err(show)?;
    ptrs.iter()
        .zip(inputs)
        .map(|(&p, b)| dev.read(p, b.len()).map_err(show))
        .collect()
}

/// Little-endian u32 values of a byte buffer.
pub fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Bytes of u32 values, little-endian.
pub fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
