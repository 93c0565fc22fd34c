//! Table-driven harness for hand-written PTX instruction tests.
//!
//! A [`Case`] is a PTX snippet that reads the registers `%a %b %c` and writes `%d`, plus rows of
//! (a, b, c) inputs with the expected d. Every row runs as one thread: thread i loads its three
//! inputs from 8-byte slots of an input buffer (only the low bytes of each slot are used), runs
//! the snippet and stores `%d` into its 8-byte output slot (the rest of the slot stays zero).
//! Scratch registers `%p<8>` (pred), `%h<16>` (b16), `%r<16>` (b32), `%rd<16>` (b64),
//! `%f<16>` (f32) and `%fd<16>` (f64) are declared for the snippet to use.
//!
//! All mismatches of all cases are collected and reported together, each with its inputs.

use super::{numbered, Rng};
use ptxsim::{Arg, Device, LaunchConfig, Module, SimError};

/// Register width of an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum W {
    /// .b16
    B16,
    /// .b32
    B32,
    /// .b64
    B64,
}

impl W {
    fn bits(self) -> u32 {
        match self {
            W::B16 => 16,
            W::B32 => 32,
            W::B64 => 64,
        }
    }
    fn name(self) -> &'static str {
        match self {
            W::B16 => "b16",
            W::B32 => "b32",
            W::B64 => "b64",
        }
    }
    fn mask(self) -> u64 {
        if self == W::B64 {
            u64::MAX
        } else {
            (1u64 << self.bits()) - 1
        }
    }
}

/// One row: inputs a, b, c (raw bits) and the expected output d (raw bits).
#[derive(Clone, Copy, Debug)]
pub struct Row {
    /// Operand a.
    pub a: u64,
    /// Operand b.
    pub b: u64,
    /// Operand c.
    pub c: u64,
    /// Expected result.
    pub d: u64,
}

/// Shorthand for a [`Row`].
pub fn row(a: u64, b: u64, c: u64, d: u64) -> Row {
    Row { a, b, c, d }
}

/// An instruction test case.
#[derive(Clone, Debug)]
pub struct Case {
    /// Name shown on failure.
    pub name: String,
    /// The PTX snippet (reads %a %b %c, writes %d).
    pub body: String,
    /// Widths of a, b, c and d.
    pub w: [W; 4],
    /// The rows (at most 1024).
    pub rows: Vec<Row>,
    /// Acceptance test `check(expected, got)` for approximate instructions; `None` = exact bits.
    pub check: Option<fn(u64, u64) -> bool>,
}

impl Case {
    /// A case with operands of widths `w` = [a, b, c, d].
    pub fn new(name: impl Into<String>, body: impl Into<String>, w: [W; 4]) -> Case {
        Case {
            name: name.into(),
            body: body.into(),
            w,
            rows: Vec::new(),
            check: None,
        }
    }
    /// Accepts results for which `check(expected, got)` holds instead of exact bits.
    pub fn check(mut self, check: fn(u64, u64) -> bool) -> Case {
        self.check = Some(check);
        self
    }
    /// Adds a row.
    pub fn row(mut self, a: u64, b: u64, c: u64, d: u64) -> Case {
        self.rows.push(row(a, b, c, d));
        self
    }
    /// Adds rows.
    pub fn rows(mut self, r: impl IntoIterator<Item = Row>) -> Case {
        self.rows.extend(r);
        self
    }
}

/// The full PTX module for a case.
pub fn kernel_text(case: &Case) -> String {
    let [wa, wb, wc, wd] = case.w;
    format!(
        r#".version 8.0
.target sm_90
.address_size 64

.visible .entry isa_case(
	.param .u64 isa_case_in,
	.param .u64 isa_case_out
)
{{
	.reg .pred %p<8>;
	.reg .b16 %h<16>;
	.reg .b32 %r<16>;
	.reg .b64 %rd<16>;
	.reg .f32 %f<16>;
	.reg .f64 %fd<16>;
	.reg .{wan} %a;
	.reg .{wbn} %b;
	.reg .{wcn} %c;
	.reg .{wdn} %d;
	.reg .b64 %pin, %pout, %poff;
	.reg .b32 %t;

	ld.param.u64 %pin, [isa_case_in];
	ld.param.u64 %pout, [isa_case_out];
	cvta.to.global.u64 %pin, %pin;
	cvta.to.global.u64 %pout, %pout;
	mov.u32 %t, %tid.x;
	mul.wide.u32 %poff, %t, 24;
	add.s64 %pin, %pin, %poff;
	ld.global.{wan} %a, [%pin];
	ld.global.{wbn} %b, [%pin+8];
	ld.global.{wcn} %c, [%pin+16];
{body}
	mul.wide.u32 %poff, %t, 8;
	add.s64 %pout, %pout, %poff;
	st.global.{wdn} [%pout], %d;
	ret;
}}
"#,
        wan = wa.name(),
        wbn = wb.name(),
        wcn = wc.name(),
        wdn = wd.name(),
        body = case
            .body
            .lines()
            .map(|l| format!("\t{}\n", l.trim()))
            .collect::<String>(),
    )
}

/// Runs one case; returns the failure descriptions (empty when all rows match).
pub fn run_case(dev: &mut Device, case: &Case) -> Vec<String> {
    assert!(
        !case.rows.is_empty() && case.rows.len() <= 1024,
        "{}: 1..=1024 rows",
        case.name
    );
    let ptx = kernel_text(case);
    let fail = |e: SimError| {
        vec![format!(
            "[{}] {e}\n{}",
            case.name,
            numbered(&ptx, super::error_line(&e))
        )]
    };
    let m = match Module::parse(&ptx) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let n = case.rows.len();
    let input: Vec<u64> = case.rows.iter().flat_map(|r| [r.a, r.b, r.c]).collect();
    let (pin, pout) = match (dev.alloc(n * 24), dev.alloc_zeroed(n * 8)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    if let Err(e) = dev.write_slice(pin, &input) {
        return fail(e);
    }
    let cfg = LaunchConfig {
        grid: [1, 1, 1],
        block: [n as u32, 1, 1],
        shared_mem_bytes: 0,
    };
    if let Err(e) = dev.launch(&m, "isa_case", cfg, &[Arg::Ptr(pin), Arg::Ptr(pout)]) {
        return fail(e);
    }
    let got: Vec<u64> = match dev.read_slice(pout, n) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let _ = dev.free(pin);
    let _ = dev.free(pout);
    let mask = case.w[3].mask();
    let mut out = Vec::new();
    for (i, (r, g)) in case.rows.iter().zip(&got).enumerate() {
        let ok = match case.check {
            Some(f) => g & !mask == 0 && f(r.d & mask, *g),
            None => g & mask == r.d & mask && g & !mask == 0,
        };
        if !ok {
            out.push(format!(
                "[{}] row {i}: a={:#x} b={:#x} c={:#x}: expected {:#x}, got {:#x}\n    {}",
                case.name,
                r.a,
                r.b,
                r.c,
                r.d & mask,
                g,
                case.body.replace('\n', "\n    ")
            ));
        }
    }
    if out.len() > 6 {
        let more = out.len() - 6;
        out.truncate(6);
        out.push(format!("[{}] ... and {more} more rows", case.name));
    }
    out
}

/// Runs all cases, then panics listing every mismatch (if any).
pub fn run_cases(cases: &[Case]) {
    let mut dev = super::device();
    let mut failures = Vec::new();
    let mut failed_cases = 0;
    for c in cases {
        let f = run_case(&mut dev, c);
        if !f.is_empty() {
            failed_cases += 1;
        }
        failures.extend(f);
    }
    if !failures.is_empty() {
        panic!(
            "{failed_cases} of {} cases failed:\n{}",
            cases.len(),
            failures.join("\n")
        );
    }
}

/// `n` rows of random inputs (random bit patterns of widths `w`), expected values from `f`.
pub fn random_rows(seed: u64, n: usize, w: [W; 3], f: impl Fn(u64, u64, u64) -> u64) -> Vec<Row> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| {
            let (a, b, c) = (
                rng.next_u64() & w[0].mask(),
                rng.next_u64() & w[1].mask(),
                rng.next_u64() & w[2].mask(),
            );
            row(a, b, c, f(a, b, c))
        })
        .collect()
}
