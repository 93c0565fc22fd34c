//! SASS listings (`cuobjdump -sass`) parsed into instructions, and the walk of a kernel's main
//! loop that gives its memory-level parallelism and its instructions per byte loaded.
//!
//! **The main loop.** Every backward branch closes a loop `[target, branch]`. Each loop's body
//! is walked along its common path (below); the main loop is the one whose walk issues the most
//! bytes of global loads (ties: a loop nested in the other, else the longer walk). A kernel
//! without a backward branch is walked from its first instruction.
//!
//! **The common path.** From the loop's first instruction, in address order: a conditional
//! forward branch falls through (compilers lay the guarded, usual work out in line), except
//! over the per-element path of a row's partial first or last pack - a short region of at
//! least 4 global loads all narrower than the loop's widest (a whole pack's), with no store,
//! shuffle, barrier or branch out of it (`partial_pack_region`) - which the walk skips:
//! it runs for one pack of a row at most, and walked it counted its loads and instructions
//! with every pack's (the 8-byte packs' kernels of the mixed pairs lay it out in line, the
//! 16-byte ones out of line; the model's instructions per byte then differed by the layout); an
//! unconditional forward branch is followed; the loop's own backward branch, an unconditional
//! `EXIT`/`RET` or a jump out of the loop ends the walk; other (inner) backward branches fall
//! through (one trip of the inner loop).
//!
//! **Loads in flight.** A global load (`LDG`, or a generic `LD`) is in flight from its issue
//! until an instruction reads (or overwrites) one of its destination registers. A thread
//! waits on scoreboards shared by its outstanding loads, so the first such consumer is taken to
//! wait for all of them: the *window* closes, and its bytes are the loads issued since the
//! previous window closed. The kernel's memory-level parallelism (MLP) is the largest window
//! of the walk; the walk runs the loop body twice so that loads issued at the end of an
//! iteration and consumed in the next (software pipelining) count together.

use std::collections::BTreeSet;

/// One SASS instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instr {
    /// Byte address within the function.
    pub addr: u32,
    /// Guard predicate (`P0`, `!P1`, ...), if any.
    pub pred: Option<String>,
    /// Opcode with its modifiers, e.g. `LDG.E.128`.
    pub opcode: String,
    /// Operands as printed.
    pub operands: Vec<String>,
}

impl Instr {
    /// The opcode without modifiers (`LDG`).
    pub fn base(&self) -> &str {
        self.opcode.split('.').next().unwrap_or("")
    }

    /// Bytes a global load moves per thread, or None for anything else.
    pub fn global_load_bytes(&self) -> Option<u32> {
        if !matches!(self.base(), "LDG" | "LD") {
            return None;
        }
        let mods: Vec<&str> = self.opcode.split('.').skip(1).collect();
        let bytes = if mods.contains(&"128") {
            16
        } else if mods.contains(&"64") {
            8
        } else if mods.iter().any(|m| matches!(*m, "U16" | "S16")) {
            2
        } else if mods.iter().any(|m| matches!(*m, "U8" | "S8")) {
            1
        } else {
            4
        };
        Some(bytes)
    }

    /// Bytes a shared-memory load or store (`LDS`, `STS`) moves per thread, or None for
    /// anything else.
    pub fn shared_bytes(&self) -> Option<u32> {
        if !matches!(self.base(), "LDS" | "STS") {
            return None;
        }
        let mods: Vec<&str> = self.opcode.split('.').skip(1).collect();
        Some(if mods.contains(&"128") {
            16
        } else if mods.contains(&"64") {
            8
        } else if mods.iter().any(|m| matches!(*m, "U16" | "S16")) {
            2
        } else if mods.iter().any(|m| matches!(*m, "U8" | "S8")) {
            1
        } else {
            4
        })
    }

    /// Branch target of a `BRA`, if it has one.
    pub fn branch_target(&self) -> Option<u32> {
        if self.base() != "BRA" {
            return None;
        }
        let last = self.operands.last()?;
        u32::from_str_radix(last.trim().trim_start_matches("0x"), 16).ok()
    }

    /// True for a branch or exit that always happens (no guard, no predicate operand).
    fn unconditional(&self) -> bool {
        let guarded = self.pred.as_deref().is_some_and(|p| p != "PT");
        !guarded && self.operands.len() <= 1 && !self.opcode.contains("DIV")
    }

    /// Registers the instruction reads.
    pub fn reads(&self) -> BTreeSet<u32> {
        let skip_dest = !NO_DEST.contains(&self.base());
        let mut regs = BTreeSet::new();
        for (i, op) in self.operands.iter().enumerate() {
            if skip_dest && i == 0 {
                continue;
            }
            regs.extend(registers_in(op));
        }
        regs
    }

    /// The first register the instruction writes, if it has a register destination.
    pub fn dest(&self) -> Option<u32> {
        if NO_DEST.contains(&self.base()) {
            return None;
        }
        registers_in(self.operands.first()?).into_iter().next()
    }
}

/// Opcodes whose first operand is read, not written.
const NO_DEST: &[&str] = &[
    "ST", "STG", "STS", "STL", "RED", "REDG", "BRA", "BRX", "JMP", "EXIT", "RET", "CALL", "BAR",
    "MEMBAR", "BSSY", "BSYNC", "WARPSYNC", "NOP", "DEPBAR", "YIELD", "FENCE", "CCTL", "ERRBAR",
];

/// General registers named in an operand: `R12` is one, `R12.64` two, `R12.128` four (RZ,
/// uniform and special registers are not).
pub fn registers_in(op: &str) -> Vec<u32> {
    let b = op.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let prev_ok = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i] == b'R' && prev_ok && i + 1 < b.len() && b[i + 1].is_ascii_digit() {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let r: u32 = op[i + 1..j].parse().unwrap_or(0);
            let width = if op[j..].starts_with(".128") {
                4
            } else if op[j..].starts_with(".64") {
                2
            } else {
                1
            };
            out.extend(r..r + width);
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// One kernel's SASS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// The entry point's name.
    pub name: String,
    /// Its instructions, in address order.
    pub instrs: Vec<Instr>,
}

fn parse_instr(line: &str) -> Option<Instr> {
    let rest = line.trim_start().strip_prefix("/*")?;
    let (addr, rest) = rest.split_once("*/")?;
    let addr = u32::from_str_radix(addr.trim(), 16).ok()?;
    let body = rest.split(';').next()?.trim();
    if body.is_empty() {
        return None;
    }
    let (pred, body) = match body.strip_prefix('@') {
        Some(p) => {
            let (pred, rest) = p.split_once(char::is_whitespace)?;
            (Some(pred.to_string()), rest.trim_start())
        }
        None => (None, body),
    };
    let (opcode, operands) = match body.split_once(char::is_whitespace) {
        Some((o, rest)) => (
            o.to_string(),
            rest.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
        None => (body.to_string(), Vec::new()),
    };
    Some(Instr {
        addr,
        pred,
        opcode,
        operands,
    })
}

/// Parses a `cuobjdump -sass` listing (one architecture) into its functions.
pub fn parse_listing(text: &str) -> Vec<Function> {
    let mut out: Vec<Function> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.trim().strip_prefix("Function : ") {
            out.push(Function {
                name: name.trim().to_string(),
                instrs: Vec::new(),
            });
        } else if let (Some(f), Some(i)) = (out.last_mut(), parse_instr(line)) {
            f.instrs.push(i);
        }
    }
    out
}

/// What the walk of a kernel's main loop found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoopWalk {
    /// Address range of the loop walked (first, last instruction); the whole function when it
    /// has no loop.
    pub range: (u32, u32),
    /// Instructions on the common path of one iteration (NOPs excluded).
    pub instrs: u32,
    /// Bytes of global loads one iteration issues per thread.
    pub load_bytes: u32,
    /// Global loads one iteration issues per thread.
    pub loads: u32,
    /// Bytes of shared-memory loads and stores one iteration moves per thread.
    pub shared_bytes: u32,
    /// The largest window: bytes of global loads a thread has in flight together.
    pub mlp_bytes: u32,
    /// The instruction that closes the largest window (first consumer), with its address.
    pub first_consumer: String,
}

impl LoopWalk {
    /// Bytes of shared-memory accesses per byte of global loads (0 when the loop loads
    /// nothing).
    pub fn shared_per_load_byte(&self) -> f64 {
        if self.load_bytes == 0 {
            0.0
        } else {
            self.shared_bytes as f64 / self.load_bytes as f64
        }
    }

    /// Thread-instructions per byte of global loads (0 when the loop loads nothing).
    pub fn instrs_per_load_byte(&self) -> f64 {
        if self.load_bytes == 0 {
            0.0
        } else {
            self.instrs as f64 / self.load_bytes as f64
        }
    }
}

/// Global loads a region must hold, all narrower than the loop's widest, to be taken for the
/// per-element path of a partial pack (a pack is at least 4 elements wide).
const PARTIAL_PACK_LOADS: usize = 4;
/// The longest region taken for a partial pack's per-element path (instructions).
const PARTIAL_PACK_MAX_INSTRS: usize = 128;

/// Whether the instructions `[from, to)` are the per-element path of a row's partial head or
/// tail pack: at most [`PARTIAL_PACK_MAX_INSTRS`] instructions holding at least
/// [`PARTIAL_PACK_LOADS`] global loads, every one narrower than `widest` (the loop's widest
/// load, a whole pack's), and no store, branch, shuffle, barrier or atomic (the work that
/// follows a pack's loads is not part of it; branches only forward within the region).
fn partial_pack_region(f: &Function, from: usize, to: usize, widest: u32) -> bool {
    let region = &f.instrs[from..to];
    let end = f.instrs.get(to).map_or(u32::MAX, |i| i.addr);
    let foreign = |i: &Instr| {
        matches!(
            i.base(),
            "STG" | "ST" | "STS" | "SHFL" | "BAR" | "ATOM" | "ATOMG" | "RED" | "EXIT" | "RET"
        ) || i.branch_target().is_some_and(|t| t <= i.addr || t > end)
    };
    if region.len() > PARTIAL_PACK_MAX_INSTRS || region.iter().any(foreign) {
        return false;
    }
    let loads: Vec<u32> = region.iter().filter_map(Instr::global_load_bytes).collect();
    loads.len() >= PARTIAL_PACK_LOADS && loads.iter().all(|&b| b < widest)
}

/// The instruction indices of the common path through `[first, last]` (see the module docs).
fn common_path(f: &Function, first: usize, last: usize) -> Vec<usize> {
    let index_of = |addr: u32| f.instrs.binary_search_by_key(&addr, |i| i.addr).ok();
    let widest = f.instrs[first..=last]
        .iter()
        .filter_map(Instr::global_load_bytes)
        .max()
        .unwrap_or(0);
    let mut path = Vec::new();
    let mut seen = BTreeSet::new();
    let mut pc = first;
    while pc <= last && seen.insert(pc) {
        let ins = &f.instrs[pc];
        path.push(pc);
        let base = ins.base();
        if (base == "EXIT" || base == "RET") && ins.unconditional() {
            break;
        }
        if let Some(t) = ins.branch_target() {
            if pc == last {
                break;
            }
            if t > ins.addr && ins.unconditional() {
                match index_of(t) {
                    Some(ti) if ti <= last => {
                        pc = ti;
                        continue;
                    }
                    _ => break,
                }
            }
            if t <= ins.addr && ins.unconditional() {
                break;
            }
            // A conditional branch over a partial pack's per-element path: taken.
            if t > ins.addr {
                if let Some(ti) = index_of(t).filter(|&ti| ti <= last) {
                    if partial_pack_region(f, pc + 1, ti, widest) {
                        pc = ti;
                        continue;
                    }
                }
            }
        }
        pc += 1;
    }
    path
}

fn walk_path(f: &Function, path: &[usize]) -> LoopWalk {
    let mut w = LoopWalk::default();
    let mut outstanding: BTreeSet<u32> = BTreeSet::new();
    let mut window = 0u32;
    // Two passes over the path: the second only closes windows (pipelined loads).
    for (pass, &i) in [0, 1]
        .iter()
        .flat_map(|p| path.iter().map(move |i| (*p, i)))
    {
        let ins = &f.instrs[i];
        if ins.base() == "NOP" {
            continue;
        }
        if !outstanding.is_empty() {
            let reads = ins.reads();
            let overwrites = ins.dest().is_some_and(|d| outstanding.contains(&d));
            if overwrites || reads.iter().any(|r| outstanding.contains(r)) {
                if window > w.mlp_bytes {
                    w.mlp_bytes = window;
                    w.first_consumer = format!(
                        "/*{:04x}*/ {} {}",
                        ins.addr,
                        ins.opcode,
                        ins.operands.join(", ")
                    );
                }
                outstanding.clear();
                window = 0;
            }
        }
        if let Some(bytes) = ins.global_load_bytes() {
            window += bytes;
            if let Some(d) = ins.dest() {
                outstanding.extend(d..d + bytes.div_ceil(4));
            }
            if pass == 0 {
                w.load_bytes += bytes;
                w.loads += 1;
            }
        }
        if pass == 0 {
            w.instrs += 1;
            w.shared_bytes += ins.shared_bytes().unwrap_or(0);
        }
    }
    if window > w.mlp_bytes {
        w.mlp_bytes = window;
        w.first_consumer = "(none before the end of the walk)".into();
    }
    w
}

/// Walks the main loop of a kernel (see the module docs).
pub fn walk_main_loop(f: &Function) -> LoopWalk {
    main_loop(f).0
}

/// The main loop's walk and its common path (instruction indices).
fn main_loop(f: &Function) -> (LoopWalk, Vec<usize>) {
    if f.instrs.is_empty() {
        return (LoopWalk::default(), Vec::new());
    }
    let mut loops: Vec<(usize, usize)> = Vec::new();
    for (bi, ins) in f.instrs.iter().enumerate() {
        if let Some(t) = ins.branch_target() {
            if t <= ins.addr {
                if let Ok(ti) = f.instrs.binary_search_by_key(&t, |i| i.addr) {
                    loops.push((ti, bi));
                }
            }
        }
    }
    // The trailing `BRA self` after EXIT is a trap, not a loop.
    loops.retain(|&(t, b)| t != b);
    if loops.is_empty() {
        loops.push((0, f.instrs.len() - 1));
    }
    let mut best: Option<(LoopWalk, Vec<usize>)> = None;
    for (t, b) in loops {
        let path = common_path(f, t, b);
        let mut w = walk_path(f, &path);
        w.range = (f.instrs[t].addr, f.instrs[b].addr);
        let better = match &best {
            None => true,
            Some((o, _)) if w.load_bytes != o.load_bytes => w.load_bytes > o.load_bytes,
            // As many bytes: a loop nested in the other is the streaming loop (the outer one
            // walks it once among its per-item work, as a cooperative pass's item loop).
            Some((o, _)) if nested(w.range, o.range) => true,
            Some((o, _)) if nested(o.range, w.range) => false,
            Some((o, _)) => w.instrs > o.instrs,
        };
        if better {
            best = Some((w, path));
        }
    }
    best.unwrap_or_default()
}

/// Whether the address range `a` lies within `b` and is not `b`.
fn nested(a: (u32, u32), b: (u32, u32)) -> bool {
    a != b && b.0 <= a.0 && a.1 <= b.1
}

/// The main loop's common path, one instruction a line, loads and their first consumers
/// marked: what a kernel author reads to see why a kernel has few bytes in flight.
pub fn explain(f: &Function) -> String {
    use std::fmt::Write as _;
    let (w, path) = main_loop(f);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: main loop {:#x}-{:#x}, {} instructions, {} global loads ({} bytes) and {} bytes of \
         shared-memory accesses per iteration per thread; MLP {} bytes (closed by {})",
        f.name,
        w.range.0,
        w.range.1,
        w.instrs,
        w.loads,
        w.load_bytes,
        w.shared_bytes,
        w.mlp_bytes,
        w.first_consumer
    );
    let mut outstanding: BTreeSet<u32> = BTreeSet::new();
    let mut window = 0u32;
    for &i in &path {
        let ins = &f.instrs[i];
        let mut note = String::new();
        if !outstanding.is_empty() {
            let overwrites = ins.dest().is_some_and(|d| outstanding.contains(&d));
            if overwrites || ins.reads().iter().any(|r| outstanding.contains(r)) {
                note = format!("   <== waits: window of {window} bytes closes");
                outstanding.clear();
                window = 0;
            }
        }
        if let Some(b) = ins.global_load_bytes() {
            window += b;
            if let Some(d) = ins.dest() {
                outstanding.extend(d..d + b.div_ceil(4));
            }
            note += &format!("   <== load {b} B (in flight: {window} B)");
        }
        let _ = writeln!(
            s,
            "  /*{:04x}*/ {}{} {}{note}",
            ins.addr,
            ins.pred
                .as_ref()
                .map_or(String::new(), |p| format!("@{p} ")),
            ins.opcode,
            ins.operands.join(", ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "
\t\tFunction : k
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x0 */
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;       /* 0x0 */
        /*0020*/                   LDG.E.128 R8, desc[UR4][R2.64+0x10] ;  /* 0x0 */
        /*0030*/                   IADD3 R2, P0, R2, 0x20, RZ ;           /* 0x0 */
        /*0040*/               @P1 BRA 0x60 ;                             /* 0x0 */
        /*0050*/                   LDG.E R12, desc[UR4][R2.64] ;          /* 0x0 */
        /*0060*/                   STG.E.128 desc[UR4][R14.64], R8 ;      /* 0x0 */
        /*0070*/              @!P0 BRA 0x10 ;                             /* 0x0 */
        /*0080*/                   EXIT ;                                 /* 0x0 */
        /*0090*/                   BRA 0x90;                              /* 0x0 */
";

    #[test]
    fn parses_and_walks() {
        let fs = parse_listing(LISTING);
        assert_eq!(fs.len(), 1);
        assert_eq!(fs[0].instrs.len(), 10);
        assert_eq!(fs[0].instrs[4].pred.as_deref(), Some("P1"));
        assert_eq!(fs[0].instrs[4].branch_target(), Some(0x60));
        let w = walk_main_loop(&fs[0]);
        assert_eq!(w.range, (0x10, 0x70));
        // Two 16-byte loads and the guarded 4-byte one before the store reads R8.
        assert_eq!(w.load_bytes, 36);
        assert_eq!(w.loads, 3);
        assert_eq!(w.mlp_bytes, 36);
        assert_eq!(w.instrs, 7);
        assert_eq!(w.shared_bytes, 0);
        assert!(w.first_consumer.contains("STG"));
    }

    /// Shared-memory accesses of the common path, by width (a slot's read-modify-write as the
    /// wide backward tier does it: 16-byte load and store), per byte of global loads.
    #[test]
    fn counts_shared_memory_bytes() {
        let fs = parse_listing(
            "
\t\tFunction : s
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;       /* 0x0 */
        /*0010*/                   LDS.128 R8, [R0] ;                     /* 0x0 */
        /*0020*/                   FADD R8, R8, R4 ;                      /* 0x0 */
        /*0030*/                   STS.128 [R0], R8 ;                     /* 0x0 */
        /*0040*/                   LDS R12, [R0+0x10] ;                   /* 0x0 */
        /*0050*/                   STS.U16 [R0+0x20], R12 ;               /* 0x0 */
        /*0060*/              @!P0 BRA 0x0 ;                              /* 0x0 */
        /*0070*/                   EXIT ;                                 /* 0x0 */
",
        );
        let w = walk_main_loop(&fs[0]);
        assert_eq!(w.load_bytes, 16);
        assert_eq!(w.shared_bytes, 16 + 16 + 4 + 2);
        assert_eq!(w.shared_per_load_byte(), 38.0 / 16.0);
    }

    /// A pack's 8-byte load, then (guarded, in line) its per-element path of four 2-byte
    /// loads, which the walk skips; a guarded region of fewer narrow loads (a row statistic) or
    /// of loads as wide as the pack's stays on the path.
    const PARTIAL: &str = "
\t\tFunction : p
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x0 */
        /*0010*/                   LDG.E.64 R4, desc[UR4][R2.64] ;        /* 0x0 */
        /*0020*/               @P1 BRA 0x80 ;                             /* 0x0 */
        /*0030*/                   LDG.E.U16 R6, desc[UR4][R2.64] ;       /* 0x0 */
        /*0040*/                   LDG.E.U16 R7, desc[UR4][R2.64+0x2] ;   /* 0x0 */
        /*0050*/                   LDG.E.U16 R8, desc[UR4][R2.64+0x4] ;   /* 0x0 */
        /*0060*/                   LDG.E.U16 R9, desc[UR4][R2.64+0x6] ;   /* 0x0 */
        /*0070*/                   PRMT R4, R6, 0x5410, R7 ;              /* 0x0 */
        /*0080*/               @P2 BRA 0xa0 ;                             /* 0x0 */
        /*0090*/                   LDG.E R10, desc[UR4][R12.64] ;         /* 0x0 */
        /*00a0*/               @P3 BRA 0xc0 ;                             /* 0x0 */
        /*00b0*/                   LDG.E.64 R14, desc[UR4][R16.64] ;      /* 0x0 */
        /*00c0*/                   FADD R18, R4, R10 ;                    /* 0x0 */
        /*00d0*/              @!P0 BRA 0x10 ;                             /* 0x0 */
        /*00e0*/                   EXIT ;                                 /* 0x0 */
";

    #[test]
    fn skips_a_partial_packs_per_element_path() {
        let fs = parse_listing(PARTIAL);
        let w = walk_main_loop(&fs[0]);
        assert_eq!(w.range, (0x10, 0xd0));
        // The pack (8), the statistic (4) and the wide guarded load (8); not the 2-byte ones.
        assert_eq!(w.loads, 3);
        assert_eq!(w.load_bytes, 20);
        // 0x10, 0x20, then 0x80 to 0xd0.
        assert_eq!(w.instrs, 8);
    }

    /// A guarded region of four 4-byte loads (per-element parameters) that also stores: the
    /// work after a pack's loads, which the walk keeps (a first version of the rule skipped a
    /// BatchNorm kernel's whole normalize-and-store section this way).
    const GUARDED_WORK: &str = "
\t\tFunction : w
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x0 */
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;       /* 0x0 */
        /*0020*/               @P1 BRA 0x80 ;                             /* 0x0 */
        /*0030*/                   LDG.E R8, desc[UR4][R12.64] ;          /* 0x0 */
        /*0040*/                   LDG.E R9, desc[UR4][R12.64+0x4] ;      /* 0x0 */
        /*0050*/                   LDG.E R10, desc[UR4][R12.64+0x8] ;     /* 0x0 */
        /*0060*/                   LDG.E R11, desc[UR4][R12.64+0xc] ;     /* 0x0 */
        /*0070*/                   STG.E.128 desc[UR4][R14.64], R4 ;      /* 0x0 */
        /*0080*/              @!P0 BRA 0x10 ;                             /* 0x0 */
        /*0090*/                   EXIT ;                                 /* 0x0 */
";

    #[test]
    fn keeps_guarded_work_that_stores() {
        let fs = parse_listing(GUARDED_WORK);
        let w = walk_main_loop(&fs[0]);
        assert_eq!(w.range, (0x10, 0x80));
        assert_eq!(w.loads, 5);
        assert_eq!(w.load_bytes, 32);
        assert_eq!(w.instrs, 8);
    }

    #[test]
    fn registers() {
        assert_eq!(registers_in("desc[UR4][R2.64+0x10]"), vec![2, 3]);
        assert_eq!(registers_in("R24.128"), vec![24, 25, 26, 27]);
        assert_eq!(registers_in("-|R7|"), vec![7]);
        assert!(registers_in("RZ").is_empty());
        assert!(registers_in("UR12").is_empty());
        assert!(registers_in("SR_TID.X").is_empty());
    }
}
