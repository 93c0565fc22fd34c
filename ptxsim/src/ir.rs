//! The internal instruction form: registers are indices, labels are program counters, and each
//! arithmetic instruction carries a pointer to the pure function that gives its meaning.

use crate::num::{IRnd, Rnd};
use crate::types::{Space, Ty};

/// Call target of an ignored external function (`vprintf`): return slots are zeroed.
pub(crate) const BUILTIN_IGNORE: u32 = u32::MAX;

/// "No register" marker for optional destinations.
pub(crate) const NOREG: u32 = u32::MAX;

/// An operand: a register index, an immediate, or a module symbol resolved at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opd {
    Reg(u32),
    Imm(u64),
    /// Index into the launch's symbol address table (`.global`/`.const` variables), plus offset.
    Sym(u32, i64),
}

/// Comparison operator of `setp`/`set`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Lo,
    Ls,
    Hi,
    Hs,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

/// Boolean combiner of `setp`/`set` with a third predicate operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BoolOp {
    And,
    Or,
    Xor,
}

/// Instruction modifiers passed to the semantic functions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mods {
    /// Instruction (destination) type.
    pub ty: Ty,
    /// Source type (`cvt`, `set`, `slct`).
    pub sty: Ty,
    pub rnd: Rnd,
    pub irnd: Option<IRnd>,
    pub ftz: bool,
    pub sat: bool,
    pub cmp: Cmp,
    /// Instruction-specific extra (prmt mode, testp class, shift clamp, ...).
    pub aux: u32,
}

impl Mods {
    pub(crate) fn new(ty: Ty) -> Mods {
        Mods {
            ty,
            sty: ty,
            rnd: Rnd::Rn,
            irnd: None,
            ftz: false,
            sat: false,
            cmp: Cmp::Eq,
            aux: 0,
        }
    }
}

/// A pure per-lane function computing one result from up to four source values.
pub(crate) type AluFn = fn(&Mods, [u64; 4]) -> u64;
/// A pure per-lane comparison.
pub(crate) type CmpFn = fn(&Mods, u64, u64) -> bool;

/// Atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    Min,
    Max,
    Exch,
    Cas,
    Inc,
    Dec,
    And,
    Or,
    Xor,
}

/// `shfl.sync` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

/// `vote.sync` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VoteMode {
    All,
    Any,
    Uni,
    Ballot,
}

/// `redux.sync` operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReduxOp {
    Add,
    Min,
    Max,
    And,
    Or,
    Xor,
}

/// Warp-synchronous operations (all wait for every lane of their member mask).
#[derive(Clone, Debug)]
pub(crate) enum SyncOp {
    Shfl {
        mode: ShflMode,
        d: u32,
        p: u32,
        a: Opd,
        b: Opd,
        c: Opd,
    },
    Vote {
        mode: VoteMode,
        d: u32,
        s: Opd,
        neg: bool,
    },
    BarWarp,
    Redux {
        op: ReduxOp,
        signed: bool,
        d: u32,
        s: Opd,
    },
    Elect {
        d: u32,
        p: u32,
    },
    Match {
        all: bool,
        bits64: bool,
        d: u32,
        p: u32,
        s: Opd,
    },
}

/// Block barrier flavours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BarOp {
    Sync,
    Arrive,
    /// `bar.red.popc.u32`
    RedPopc,
    /// `bar.red.and.pred`
    RedAnd,
    /// `bar.red.or.pred`
    RedOr,
}

/// Bytes copied between per-thread parameter slots in local memory at call/return.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Copy3 {
    pub from: u32,
    pub to: u32,
    pub len: u32,
}

/// One lowered instruction.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    Alu {
        f: AluFn,
        m: Mods,
        d: u32,
        s: [Opd; 4],
        /// Number of sources used.
        n: u8,
    },
    /// Register/immediate copy of an already normalized value (`mov` of a non-predicate type).
    Mov {
        d: u32,
        s: Opd,
    },
    /// `setp`/`set`: `p = cmp(a,b) bop c`, `q = !cmp(a,b) bop c`; `set_ty` writes an integer/float instead.
    Setp {
        f: CmpFn,
        m: Mods,
        p: u32,
        q: u32,
        a: Opd,
        b: Opd,
        c: Option<(Opd, bool, BoolOp)>,
        set_ty: Option<Ty>,
        /// `.f16x2`/`.bf16x2`: `p` from the low halves, `q` from the high halves.
        packed: bool,
    },
    /// `mov.bN d, {a, b, ..}`: pack `n` fields of `w` bits.
    Pack {
        d: u32,
        s: [Opd; 4],
        n: u8,
        w: u8,
    },
    /// `mov.bN {a, b, ..}, s`: unpack.
    Unpack {
        d: [u32; 4],
        n: u8,
        w: u8,
        s: Opd,
    },
    Ld {
        sp: Space,
        sz: u8,
        sext: bool,
        n: u8,
        d: [u32; 4],
        a: Opd,
        off: i64,
        /// `.volatile`/`.relaxed`/`.acquire` (never a data race).
        strong: bool,
    },
    St {
        sp: Space,
        sz: u8,
        n: u8,
        s: [Opd; 4],
        a: Opd,
        off: i64,
        /// `.volatile`/`.relaxed`/`.release` (never a data race).
        strong: bool,
    },
    Atom {
        sp: Space,
        op: AtomOp,
        ty: Ty,
        d: u32,
        a: Opd,
        off: i64,
        b: Opd,
        c: Opd,
    },
    /// Extended-precision arithmetic with the carry flag register `cc`
    /// (op: 0 add, 1 sub, 2 mad.lo, 3 mad.hi).
    Carry {
        op: u8,
        ty: Ty,
        d: u32,
        s: [Opd; 3],
        cc: u32,
        cin: bool,
        cout: bool,
    },
    /// `cp.async` global -> shared, executed synchronously (the copy is complete before the
    /// next instruction, which is a legal schedule of the asynchronous copy).
    CpAsync {
        dst: Opd,
        doff: i64,
        src: Opd,
        soff: i64,
        size: u8,
        src_size: Option<Opd>,
    },
    Bra {
        t: u32,
    },
    Bar {
        op: BarOp,
        id: Opd,
        cnt: Option<Opd>,
        d: u32,
        src: Option<(Opd, bool)>,
    },
    Sync {
        op: SyncOp,
        mask: Opd,
    },
    Activemask {
        d: u32,
    },
    /// `%clock`, `%clock64`, `%globaltimer`: the block's warp-instruction count so far
    /// (monotonic, deterministic), scaled by `mul`.
    Clock {
        d: u32,
        mul: u64,
        bits: u8,
    },
    Call {
        target: u32,
        /// Callee index in `Kernel::frames`.
        func: u32,
        args: Vec<Copy3>,
        rets: Vec<Copy3>,
    },
    /// Indirect call through a function address in a register.
    CallInd {
        f: Opd,
        /// (local offset, size) of each argument `.param` in the caller.
        args: Vec<(u32, u32)>,
        /// (local offset, size) of each result `.param` in the caller.
        rets: Vec<(u32, u32)>,
    },
    Ret,
    Exit,
    Trap,
    Nop,
    /// `membar` / `fence`: a sequentially consistent fence of the host, so that a block's
    /// stores published by a fence and an atomic are visible to the block (on another worker
    /// thread) that observes the atomic and fences in turn.
    Fence,
    /// `nanosleep`: in a cooperative launch (every block on its own worker thread) the worker
    /// sleeps briefly, so that a block spinning on a flag yields the CPU to the blocks it
    /// waits for; elsewhere no effect.
    Sleep,
}

/// An instruction with its guard predicate and PTX line.
#[derive(Clone, Debug)]
pub(crate) struct Instr {
    pub kind: Kind,
    /// Guard register (NOREG = none) and whether it is negated.
    pub guard: u32,
    pub neg: bool,
    pub line: u32,
}

impl Kind {
    /// Calls `f` on every source/address operand (used to patch placeholders after lowering).
    pub(crate) fn for_each_opd_mut(&mut self, f: &mut dyn FnMut(&mut Opd)) {
        match self {
            Kind::Alu { s, .. } | Kind::Pack { s, .. } => s.iter_mut().for_each(f),
            Kind::Setp { a, b, c, .. } => {
                f(a);
                f(b);
                if let Some((c, _, _)) = c {
                    f(c);
                }
            }
            Kind::Unpack { s, .. } | Kind::Mov { s, .. } => f(s),
            Kind::CallInd { f: t, .. } => f(t),
            Kind::Carry { s, .. } => s.iter_mut().for_each(f),
            Kind::CpAsync {
                dst, src, src_size, ..
            } => {
                f(dst);
                f(src);
                if let Some(s) = src_size {
                    f(s);
                }
            }
            Kind::Ld { a, .. } => f(a),
            Kind::St { s, a, .. } => {
                s.iter_mut().for_each(&mut *f);
                f(a);
            }
            Kind::Atom { a, b, c, .. } => {
                f(a);
                f(b);
                f(c);
            }
            Kind::Bar { id, cnt, src, .. } => {
                f(id);
                if let Some(c) = cnt {
                    f(c);
                }
                if let Some((s, _)) = src {
                    f(s);
                }
            }
            Kind::Sync { op, mask } => {
                f(mask);
                match op {
                    SyncOp::Shfl { a, b, c, .. } => {
                        f(a);
                        f(b);
                        f(c);
                    }
                    SyncOp::Vote { s, .. } | SyncOp::Redux { s, .. } | SyncOp::Match { s, .. } => {
                        f(s)
                    }
                    SyncOp::BarWarp | SyncOp::Elect { .. } => {}
                }
            }
            Kind::Activemask { .. }
            | Kind::Clock { .. }
            | Kind::Bra { .. }
            | Kind::Call { .. }
            | Kind::Ret
            | Kind::Exit
            | Kind::Trap
            | Kind::Nop
            | Kind::Fence
            | Kind::Sleep => {}
        }
    }
}

impl Kind {
    /// True for instructions after which every lane of the group simply continues at pc+1.
    #[inline]
    pub(crate) fn is_simple(&self) -> bool {
        matches!(
            self,
            Kind::Alu { .. }
                | Kind::Mov { .. }
                | Kind::Setp { .. }
                | Kind::Pack { .. }
                | Kind::Unpack { .. }
                | Kind::Ld { .. }
                | Kind::St { .. }
                | Kind::Atom { .. }
                | Kind::Activemask { .. }
                | Kind::Clock { .. }
                | Kind::Carry { .. }
                | Kind::CpAsync { .. }
                | Kind::Nop
                | Kind::Fence
                | Kind::Sleep
        )
    }
}
