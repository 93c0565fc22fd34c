//! Lowering: syntax tree -> per-kernel internal code with registers resolved to indices.
//!
//! Each `.entry` becomes a [`Kernel`] whose code holds the entry body followed by every `.func`
//! it may call (recursion is not supported). Registers of every function get distinct indices
//! in one per-kernel register file; special registers (`%tid.x`, ...) are ordinary register
//! slots filled when a warp starts.

mod ops;
mod ops_mem;
mod ops_sync;

use crate::error::SimError;
use crate::ir::{Instr, Kind, Opd};
use crate::parser::ast::{self, Imm, Operand, Stmt};
use crate::types::{Space, Ty};
use std::collections::HashMap;

/// A special register whose per-lane value is computed at warp start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Special {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    Laneid,
    Warpid,
    Nwarpid,
    LanemaskEq,
    LanemaskLe,
    LanemaskLt,
    LanemaskGe,
    LanemaskGt,
    /// Constant zero (`%smid`, `%gridid`, `%clock`, cluster ranks, ...).
    Zero,
    /// Constant one (`%nsmid`, `%cluster_nctarank`, ...).
    One,
    DynSmem,
    TotalSmem,
    /// `%cluster_nctaid.*`: a cluster of one CTA.
    ClusterNctaid(u8),
}

fn special(name: &str) -> Option<Special> {
    let dim = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    let (base, d) = match name.rsplit_once('.') {
        Some((b, d)) => (b, dim(d)),
        None => (name, None),
    };
    Some(match (base, d) {
        ("%tid", Some(d)) => Special::Tid(d),
        ("%ntid", Some(d)) => Special::Ntid(d),
        ("%ctaid", Some(d)) | ("%clusterid", Some(d)) => Special::Ctaid(d),
        ("%nctaid", Some(d)) | ("%nclusterid", Some(d)) => Special::Nctaid(d),
        ("%cluster_ctaid", Some(_)) => Special::Zero,
        ("%cluster_nctaid", Some(d)) => Special::ClusterNctaid(d),
        ("%laneid", None) => Special::Laneid,
        ("%warpid", None) => Special::Warpid,
        ("%nwarpid", None) => Special::Nwarpid,
        ("%lanemask_eq", None) => Special::LanemaskEq,
        ("%lanemask_le", None) => Special::LanemaskLe,
        ("%lanemask_lt", None) => Special::LanemaskLt,
        ("%lanemask_ge", None) => Special::LanemaskGe,
        ("%lanemask_gt", None) => Special::LanemaskGt,
        ("%smid", None)
        | ("%gridid", None)
        | ("%clock", None)
        | ("%clock64", None)
        | ("%clock_hi", None)
        | ("%globaltimer", None)
        | ("%globaltimer_lo", None)
        | ("%globaltimer_hi", None)
        | ("%cluster_ctarank", None) => Special::Zero,
        ("%nsmid", None) | ("%cluster_nctarank", None) | ("%is_explicit_cluster", None) => {
            Special::One
        }
        ("%dynamic_smem_size", None) => Special::DynSmem,
        ("%total_smem_size", None) => Special::TotalSmem,
        _ => return None,
    })
}

/// One `.entry` parameter (public view in [`crate::EntryInfo`]).
#[derive(Clone, Debug)]
pub(crate) struct KParam {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub align: usize,
}

/// A module-level `.global`/`.const` variable.
#[derive(Clone, Debug)]
pub(crate) struct GlobalVar {
    pub size: usize,
    pub init: Vec<u8>,
    /// (byte offset, variable index, addend): initializers holding addresses.
    pub relocs: Vec<(usize, u32, i64)>,
}

/// A lowered kernel.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub name: String,
    pub code: Vec<Instr>,
    pub nregs: u32,
    pub params: Vec<KParam>,
    pub param_size: usize,
    pub specials: Vec<(u32, Special)>,
    /// Bytes of static shared memory (the dynamic part starts at `dyn_shared_offset`).
    pub static_shared: u64,
    pub dyn_shared_offset: u64,
    pub local_size: u64,
    pub has_calls: bool,
    /// Per called function: the state saved around a recursive call.
    pub frames: Vec<FrameInfo>,
    /// Module function index -> frame id, for indirect calls (`u32::MAX`: not callable).
    pub func_table: Vec<u32>,
    pub maxntid: Option<[u32; 3]>,
    pub reqntid: Option<[u32; 3]>,
}

/// What a name in a function body refers to.
#[derive(Clone, Copy, Debug)]
enum Name {
    Reg(u32),
    Shared(u64),
    Local(u64),
    /// Kernel parameter: offset in the parameter buffer.
    KParam(u64),
    /// Function parameter slot / call-site `.param`: offset in local memory.
    FParam(u64),
    Global(u32),
}

#[derive(Clone, Debug)]
struct FuncInfo {
    id: u32,
    params: Vec<(u64, u64)>,
    rets: Vec<(u64, u64)>,
    pc: Option<u32>,
}

/// What a recursive call must save for one `.func`: its registers and its local memory.
#[derive(Clone, Debug, Default)]
pub(crate) struct FrameInfo {
    /// Entry program counter.
    pub pc: u32,
    /// Parameter slots (offset, size) in local memory.
    pub params: Vec<(u32, u32)>,
    /// Return-value slots (offset, size) in local memory.
    pub rets: Vec<(u32, u32)>,
    /// Register index range `[start, end)`.
    pub regs: (u32, u32),
    /// Local-memory byte ranges `[start, end)` (parameter slots and the body's locals).
    pub locals: Vec<(u32, u32)>,
}

/// Lowering state for one kernel.
pub(crate) struct KCtx<'m> {
    ast: &'m ast::Module,
    globals: &'m HashMap<String, u32>,
    code: Vec<Instr>,
    nregs: u32,
    specials: HashMap<Special, u32>,
    shared: HashMap<String, u64>,
    shared_end: u64,
    extern_align: u64,
    local_end: u64,
    funcs: HashMap<String, FuncInfo>,
    frames: Vec<FrameInfo>,
    queue: Vec<String>,
    indirect: bool,
    /// (instruction index, callee) to patch once callee pcs are known.
    patches: Vec<(usize, String)>,
    // per-function state
    scopes: Vec<HashMap<String, Name>>,
    labels: HashMap<String, u32>,
    in_entry: bool,
    cc: Option<u32>,
}

type R<T> = Result<T, SimError>;

pub(crate) fn unsupported<T>(line: usize, what: impl Into<String>) -> R<T> {
    Err(SimError::Unsupported {
        line,
        what: what.into(),
    })
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a.max(1)) * a.max(1)
}

/// Lowers module-level variables into [`GlobalVar`]s (+ name -> index map).
pub(crate) fn lower_globals(m: &ast::Module) -> R<(Vec<GlobalVar>, HashMap<String, u32>)> {
    let mut vars = Vec::new();
    let mut map = HashMap::new();
    for v in m
        .vars
        .iter()
        .filter(|v| matches!(v.space, Space::Global | Space::Const))
    {
        map.insert(v.name.clone(), vars.len() as u32);
        vars.push(GlobalVar {
            size: v.size() as usize,
            init: Vec::new(),
            relocs: Vec::new(),
        });
    }
    for v in m
        .vars
        .iter()
        .filter(|v| matches!(v.space, Space::Global | Space::Const))
    {
        let idx = map[&v.name] as usize;
        let el = v.ty.bytes() as usize;
        // Only the initialized prefix is materialized here; the device zero-fills the rest,
        // so a huge uninitialized `.global` array costs nothing until it is allocated.
        let init_bytes = v.init.as_ref().map_or(0, |i| i.len().saturating_mul(el));
        if init_bytes as u64 > v.size() {
            return Err(SimError::Parse {
                line: v.line,
                message: format!("too many initializers for `{}`", v.name),
            });
        }
        let mut bytes = vec![0u8; init_bytes];
        if let Some(init) = &v.init {
            for (k, iv) in init.iter().enumerate() {
                let off = k * el;
                if off + el > bytes.len() {
                    return Err(SimError::Parse {
                        line: v.line,
                        message: format!("too many initializers for `{}`", v.name),
                    });
                }
                match iv {
                    ast::InitVal::Imm(imm) => {
                        let b = imm_bits(*imm, v.ty);
                        bytes[off..off + el].copy_from_slice(&b.to_le_bytes()[..el]);
                    }
                    ast::InitVal::Sym(name, add) => match map.get(name) {
                        Some(t) => vars[idx].relocs.push((off, *t, *add)),
                        None if func_index(m, name).is_some() => {
                            let a = func_addr(func_index(m, name).unwrap_or(0)) + *add as u64;
                            bytes[off..off + el].copy_from_slice(&a.to_le_bytes()[..el]);
                        }
                        None => {
                            return unsupported(
                                v.line,
                                format!("initializer with address of `{name}`"),
                            )
                        }
                    },
                }
            }
        }
        vars[idx].init = bytes;
    }
    Ok((vars, map))
}

/// Base of the (unmapped) address range standing for function addresses.
pub(crate) const FUNC_BASE: u64 = 0x0000_5000_0000_0000;

/// Module-wide index of the `.func` with a body named `name`.
fn func_index(m: &ast::Module, name: &str) -> Option<usize> {
    m.funcs
        .iter()
        .position(|f| f.name == name && !f.is_entry && f.body.is_some())
}

/// The "address" of module function `i`.
pub(crate) fn func_addr(i: usize) -> u64 {
    FUNC_BASE + 16 * i as u64
}

/// Encodes an immediate for an instruction of type `ty`.
pub(crate) fn imm_bits(imm: Imm, ty: Ty) -> u64 {
    match (imm, ty) {
        (Imm::F32(b), Ty::F64) => (f32::from_bits(b) as f64).to_bits(),
        (Imm::F32(b), _) => b as u64,
        (Imm::F64(b), Ty::F32) => (f64::from_bits(b) as f32).to_bits() as u64,
        (Imm::F64(b), _) => b,
        (Imm::Float(f), Ty::F64) => f.to_bits(),
        (Imm::Float(f), _) => (f as f32).to_bits() as u64,
        (Imm::Int(i), Ty::F32) => (i as f32).to_bits() as u64,
        (Imm::Int(i), Ty::F64) => (i as f64).to_bits(),
        (Imm::Int(i), t) => {
            let v = i as u64;
            if t == Ty::Pred {
                (v != 0) as u64
            } else {
                crate::types::extend(v, t.bits().min(64), t.is_signed())
            }
        }
    }
}

impl<'m> KCtx<'m> {
    /// Lowers entry `f` into a kernel.
    pub(crate) fn lower_entry(
        ast: &'m ast::Module,
        globals: &'m HashMap<String, u32>,
        f: &'m ast::Func,
    ) -> R<Kernel> {
        let mut k = KCtx {
            ast,
            globals,
            code: Vec::new(),
            nregs: 0,
            specials: HashMap::new(),
            shared: HashMap::new(),
            shared_end: 0,
            extern_align: 16,
            local_end: 0,
            funcs: HashMap::new(),
            frames: Vec::new(),
            queue: Vec::new(),
            indirect: false,
            patches: Vec::new(),
            scopes: Vec::new(),
            labels: HashMap::new(),
            in_entry: true,
            cc: None,
        };
        // kernel params
        let mut params = Vec::new();
        let mut off = 0u64;
        let mut pscope = HashMap::new();
        for p in &f.params {
            let a = p.alignment();
            off = align_up(off, a);
            params.push(KParam {
                name: p.name.clone(),
                offset: off as usize,
                size: p.size() as usize,
                align: a as usize,
            });
            pscope.insert(p.name.clone(), Name::KParam(off));
            off += p.size();
        }
        let param_size = off as usize;
        // module-level shared variables are resolved lazily (see `lookup`)
        k.scopes.push(pscope);
        k.lower_body(f)?;
        k.in_entry = false;
        k.drain_queue(f)?;
        if k.indirect {
            // an indirect call may reach any function of the module
            for g in ast.funcs.iter().filter(|g| !g.is_entry && g.body.is_some()) {
                k.func_info(&g.name, g.line)?;
            }
            k.drain_queue(f)?;
        }
        for (i, callee) in std::mem::take(&mut k.patches) {
            let pc = k.funcs[&callee].pc.expect("all called funcs lowered");
            if let Kind::Call { target, .. } = &mut k.code[i].kind {
                *target = pc;
            }
        }
        let mut func_table = vec![u32::MAX; ast.funcs.len()];
        for (name, fi) in &k.funcs {
            if let Some(i) = func_index(ast, name) {
                func_table[i] = fi.id;
            }
            k.frames[fi.id as usize].pc = fi.pc.unwrap_or(0);
        }
        let static_shared = k.shared_end;
        let dyn_off = align_up(static_shared, k.extern_align);
        patch_dyn_shared(&mut k.code, dyn_off);
        let has_calls = !k.funcs.is_empty();
        Ok(Kernel {
            name: f.name.clone(),
            code: k.code,
            nregs: k.nregs,
            params,
            param_size,
            specials: k.specials.into_iter().map(|(s, r)| (r, s)).collect(),
            static_shared,
            dyn_shared_offset: dyn_off,
            local_size: align_up(k.local_end, 16),
            has_calls,
            frames: k.frames,
            func_table,
            maxntid: f.maxntid,
            reqntid: f.reqntid,
        })
    }

    /// Lowers every queued function body.
    fn drain_queue(&mut self, f: &ast::Func) -> R<()> {
        let k = self;
        while let Some(name) = k.queue.pop() {
            let func = k
                .ast
                .funcs
                .iter()
                .find(|g| g.name == name && g.body.is_some())
                .ok_or_else(|| SimError::Unsupported {
                    line: f.line,
                    what: format!("call of `{name}`, which has no body in this module"),
                })?;
            let pc = k.code.len() as u32;
            k.funcs
                .get_mut(&name)
                .expect("queued funcs are registered")
                .pc = Some(pc);
            let info = k.funcs[&name].clone();
            let mut scope = HashMap::new();
            for (p, (o, _)) in func.params.iter().zip(&info.params) {
                scope.insert(p.name.clone(), Name::FParam(*o));
            }
            for (p, (o, _)) in func.rets.iter().zip(&info.rets) {
                scope.insert(p.name.clone(), Name::FParam(*o));
            }
            k.scopes = vec![scope];
            let (r0, l0) = (k.nregs, k.local_end);
            k.lower_body(func)?;
            let fr = &mut k.frames[info.id as usize];
            fr.regs = (r0, k.nregs);
            fr.locals.push((l0 as u32, k.local_end as u32));
        }
        Ok(())
    }

    /// The per-thread carry flag register (`CC.CF`).
    pub(crate) fn cc_reg(&mut self) -> u32 {
        match self.cc {
            Some(r) => r,
            None => {
                let r = self.alloc_regs(1);
                self.cc = Some(r);
                r
            }
        }
    }

    fn alloc_regs(&mut self, n: u32) -> u32 {
        let r = self.nregs;
        self.nregs += n;
        r
    }

    fn alloc_local(&mut self, size: u64, align: u64) -> u64 {
        let o = align_up(self.local_end, align);
        self.local_end = o + size.max(1);
        o
    }

    fn alloc_shared(&mut self, v: &ast::VarDecl) -> u64 {
        if v.is_extern || v.array == Some(None) {
            self.extern_align = self.extern_align.max(v.alignment());
            return u64::MAX; // marker: dynamic shared
        }
        let o = align_up(self.shared_end, v.alignment());
        self.shared_end = o + v.size();
        o
    }

    /// Registers callee `name` (allocating its parameter slots) and queues it for lowering.
    fn func_info(&mut self, name: &str, line: usize) -> R<FuncInfo> {
        if let Some(fi) = self.funcs.get(name) {
            return Ok(fi.clone());
        }
        let Some(f) = self
            .ast
            .funcs
            .iter()
            .find(|g| g.name == name && !g.is_entry)
        else {
            return unsupported(line, format!("call of unknown function `{name}`"));
        };
        if f.body.is_none()
            && !self
                .ast
                .funcs
                .iter()
                .any(|g| g.name == name && g.body.is_some())
        {
            return unsupported(
                line,
                format!("call of external function `{name}` (no body in this module)"),
            );
        }
        let mut slots = |ps: &[ast::VarDecl]| -> Vec<(u64, u64)> {
            ps.iter()
                .map(|p| (self.alloc_local(p.size(), p.alignment()), p.size()))
                .collect()
        };
        let params = slots(&f.params);
        let rets = slots(&f.rets);
        let id = self.frames.len() as u32;
        self.frames.push(FrameInfo {
            pc: 0,
            params: params.iter().map(|(o, s)| (*o as u32, *s as u32)).collect(),
            rets: rets.iter().map(|(o, s)| (*o as u32, *s as u32)).collect(),
            regs: (0, 0),
            locals: params
                .iter()
                .chain(rets.iter())
                .map(|(o, s)| (*o as u32, (*o + (*s).max(1)) as u32))
                .collect(),
        });
        let fi = FuncInfo {
            id,
            params,
            rets,
            pc: None,
        };
        self.funcs.insert(name.to_string(), fi.clone());
        self.queue.push(name.to_string());
        Ok(fi)
    }

    fn lookup(&mut self, name: &str) -> Option<Name> {
        for s in self.scopes.iter().rev() {
            if let Some(n) = s.get(name) {
                return Some(*n);
            }
        }
        if let Some(sp) = special(name) {
            let r = match self.specials.get(&sp) {
                Some(r) => *r,
                None => {
                    let r = self.alloc_regs(1);
                    self.specials.insert(sp, r);
                    r
                }
            };
            return Some(Name::Reg(r));
        }
        if let Some(o) = self.shared.get(name) {
            return Some(Name::Shared(*o));
        }
        if let Some(v) = self
            .ast
            .vars
            .iter()
            .find(|v| v.name == name && v.space == Space::Shared)
        {
            let o = self.alloc_shared(v);
            self.shared.insert(name.to_string(), o);
            return Some(Name::Shared(o));
        }
        self.globals.get(name).map(|i| Name::Global(*i))
    }

    fn lower_body(&mut self, f: &'m ast::Func) -> R<()> {
        let body = f.body.as_ref().expect("lowered funcs have bodies");
        // pass 1: label pcs
        self.labels.clear();
        let mut pc = self.code.len() as u32;
        for st in body {
            match st {
                Stmt::Instr(_) => pc += 1,
                Stmt::Label(l, line) if self.labels.insert(l.clone(), pc).is_some() => {
                    return unsupported(*line, format!("duplicate label `{l}`"));
                }
                _ => {}
            }
        }
        // pass 2
        self.scopes.push(HashMap::new());
        for st in body {
            match st {
                Stmt::Reg { names, .. } => {
                    for (n, cnt) in names {
                        match cnt {
                            Some(c) => {
                                let base = self.alloc_regs(*c);
                                let scope = self.scopes.last_mut().expect("scope");
                                for i in 0..*c {
                                    scope.insert(format!("{n}{i}"), Name::Reg(base + i));
                                }
                            }
                            None => {
                                let r = self.alloc_regs(1);
                                self.scopes
                                    .last_mut()
                                    .expect("scope")
                                    .insert(n.clone(), Name::Reg(r));
                            }
                        }
                    }
                }
                Stmt::Var(v) => {
                    let name = match v.space {
                        Space::Shared => {
                            let o = self.alloc_shared(v);
                            Name::Shared(o)
                        }
                        Space::Local => Name::Local(self.alloc_local(v.size(), v.alignment())),
                        Space::Param => Name::FParam(self.alloc_local(v.size(), v.alignment())),
                        _ => {
                            return unsupported(
                                v.line,
                                format!("`.{}` variable inside a function", v.space.name()),
                            )
                        }
                    };
                    self.scopes
                        .last_mut()
                        .expect("scope")
                        .insert(v.name.clone(), name);
                }
                Stmt::Label(..) => {}
                Stmt::Open => self.scopes.push(HashMap::new()),
                Stmt::Close => {
                    self.scopes.pop();
                }
                Stmt::Instr(i) => {
                    let ins = self.lower_instr(i)?;
                    self.code.push(ins);
                }
            }
        }
        self.scopes.pop();
        // falling off the end
        self.code.push(Instr {
            kind: if f.is_entry { Kind::Exit } else { Kind::Ret },
            guard: crate::ir::NOREG,
            neg: false,
            line: f.line as u32,
        });
        Ok(())
    }

    fn lower_instr(&mut self, i: &ast::Instr) -> R<Instr> {
        let (guard, neg) = match &i.guard {
            None => (crate::ir::NOREG, false),
            Some((g, n)) => (self.reg(g, i.line)?, *n),
        };
        let kind = ops::lower_op(self, i)?;
        Ok(Instr {
            kind,
            guard,
            neg,
            line: i.line as u32,
        })
    }

    // ---- operand helpers used by ops ----

    /// A destination register.
    pub(crate) fn reg(&mut self, name: &str, line: usize) -> R<u32> {
        match self.lookup(name) {
            Some(Name::Reg(r)) => Ok(r),
            Some(_) => Err(SimError::Parse {
                line,
                message: format!("`{name}` is not a register"),
            }),
            None => Err(SimError::Parse {
                line,
                message: format!("undeclared register `{name}`"),
            }),
        }
    }

    /// A destination operand (register name; `_` sink gets a scratch register).
    pub(crate) fn dst(&mut self, o: &Operand, line: usize) -> R<u32> {
        match o {
            Operand::Name { name, neg: false } if name == "_" => Ok(self.alloc_regs(1)),
            Operand::Name { name, neg: false } => self.reg(name, line),
            _ => Err(SimError::Parse {
                line,
                message: format!("expected a destination register, found {o:?}"),
            }),
        }
    }

    /// A source operand of type `ty`.
    pub(crate) fn src(&mut self, o: &Operand, ty: Ty, line: usize) -> R<Opd> {
        match o {
            Operand::Imm(imm) => Ok(Opd::Imm(imm_bits(*imm, ty))),
            Operand::Name { name, neg: false } => self.name_opd(name, 0, line),
            Operand::SymOff(name, off) => self.name_opd(name, *off, line),
            _ => Err(SimError::Parse {
                line,
                message: format!("unexpected operand {o:?}"),
            }),
        }
    }

    /// A predicate source, possibly negated (`!%p`).
    pub(crate) fn pred_src(&mut self, o: &Operand, line: usize) -> R<(Opd, bool)> {
        match o {
            Operand::Name { name, neg } => Ok((self.name_opd(name, 0, line)?, *neg)),
            Operand::Imm(imm) => Ok((Opd::Imm(imm_bits(*imm, Ty::Pred)), false)),
            _ => Err(SimError::Parse {
                line,
                message: format!("expected a predicate, found {o:?}"),
            }),
        }
    }

    fn name_opd(&mut self, name: &str, off: i64, line: usize) -> R<Opd> {
        let add = |b: u64| Opd::Imm(b.wrapping_add(off as u64));
        match self.lookup(name) {
            Some(Name::Reg(r)) if off == 0 => Ok(Opd::Reg(r)),
            Some(Name::Reg(_)) => unsupported(line, "register plus offset as a value"),
            Some(Name::Shared(o)) => Ok(shared_opd(o, off, false)),
            Some(Name::Local(o)) | Some(Name::FParam(o)) | Some(Name::KParam(o)) => Ok(add(o)),
            Some(Name::Global(g)) => Ok(Opd::Sym(g, off)),
            None if func_index(self.ast, name).is_some() => {
                self.func_info(name, line)?;
                let i = func_index(self.ast, name).unwrap_or(0);
                Ok(Opd::Imm(func_addr(i).wrapping_add(off as u64)))
            }
            None => Err(SimError::Parse {
                line,
                message: format!("undeclared name `{name}`"),
            }),
        }
    }

    /// An address operand `[base+off]` with its inferred state space.
    pub(crate) fn addr(
        &mut self,
        o: &Operand,
        sp: Option<Space>,
        line: usize,
    ) -> R<(Space, Opd, i64)> {
        let Operand::Addr { base, off } = o else {
            return Err(SimError::Parse {
                line,
                message: format!("expected an address `[..]`, found {o:?}"),
            });
        };
        let Some(b) = base else {
            return Ok((sp.unwrap_or(Space::Generic), Opd::Imm(0), *off));
        };
        let n = self.lookup(b);
        Ok(match (n, sp) {
            (Some(Name::Reg(r)), sp) => (sp.unwrap_or(Space::Generic), Opd::Reg(r), *off),
            (Some(Name::KParam(o)), Some(Space::Param)) => (Space::Param, Opd::Imm(o), *off),
            (Some(Name::FParam(o)), Some(Space::Param) | Some(Space::Local)) => {
                (Space::Local, Opd::Imm(o), *off)
            }
            (Some(Name::Local(o)), Some(Space::Local)) => (Space::Local, Opd::Imm(o), *off),
            (Some(Name::Shared(o)), Some(Space::Shared)) => {
                (Space::Shared, shared_opd(o, 0, false), *off)
            }
            (Some(Name::Global(g)), Some(Space::Global) | Some(Space::Const) | None) => {
                (Space::Global, Opd::Sym(g, 0), *off)
            }
            (Some(Name::Shared(o)), None) => (Space::Generic, shared_opd(o, 0, true), *off),
            (Some(n), sp) => {
                return unsupported(
                    line,
                    format!("address of `{b}` ({n:?}) used with state space {sp:?}"),
                )
            }
            (None, _) => {
                return Err(SimError::Parse {
                    line,
                    message: format!("undeclared name `{b}` in address"),
                })
            }
        })
    }

    pub(crate) fn label(&self, name: &str, line: usize) -> R<u32> {
        self.labels
            .get(name)
            .copied()
            .ok_or_else(|| SimError::Parse {
                line,
                message: format!("undefined label `{name}`"),
            })
    }

    /// Lowers `call` (operands: optional `(rets)`, callee, optional `(args)`).
    pub(crate) fn call(&mut self, i: &ast::Instr) -> R<Kind> {
        let line = i.line;
        let mut rets = Vec::new();
        let mut args = Vec::new();
        let mut callee = None;
        for o in &i.operands {
            match o {
                Operand::List(l) if callee.is_none() => rets = l.clone(),
                Operand::List(l) => args = l.clone(),
                Operand::Name { name, .. } if callee.is_none() => callee = Some(name.clone()),
                Operand::Name { .. } => {} // call prototype of an indirect call
                _ => return unsupported(line, format!("call operand {o:?}")),
            }
        }
        let Some(callee) = callee else {
            return Err(SimError::Parse {
                line,
                message: "call without a target".into(),
            });
        };
        if let Some(Name::Reg(freg)) = self.lookup(&callee) {
            self.indirect = true;
            let mut slot = |o: &Operand| -> R<(u32, u32)> {
                match o {
                    Operand::Name { name, .. } => match self.lookup(name) {
                        Some(Name::FParam(off)) => Ok((off as u32, 0)),
                        _ => unsupported(
                            line,
                            format!("call argument `{name}` is not a .param variable"),
                        ),
                    },
                    _ => unsupported(line, format!("call argument {o:?}")),
                }
            };
            let a = args.iter().map(&mut slot).collect::<R<Vec<_>>>()?;
            let r = rets.iter().map(&mut slot).collect::<R<Vec<_>>>()?;
            return Ok(Kind::CallInd {
                f: Opd::Reg(freg),
                args: a,
                rets: r,
            });
        }
        if callee == "vprintf"
            && !self
                .ast
                .funcs
                .iter()
                .any(|f| f.name == callee && f.body.is_some())
        {
            // device printf: accepted and ignored; returns 0
            let mut r = Vec::new();
            for o in &rets {
                if let Operand::Name { name, .. } = o {
                    if let Some(Name::FParam(off)) = self.lookup(name) {
                        r.push(crate::ir::Copy3 {
                            from: 0,
                            to: off as u32,
                            len: 4,
                        });
                    }
                }
            }
            return Ok(Kind::Call {
                target: crate::ir::BUILTIN_IGNORE,
                func: 0,
                args: Vec::new(),
                rets: r,
            });
        }
        let fi = self.func_info(&callee, line)?;
        if fi.params.len() != args.len() || fi.rets.len() != rets.len() {
            return Err(SimError::Parse {
                line,
                message: format!(
                    "call of `{callee}` with {} arguments and {} results, declared {} and {}",
                    args.len(),
                    rets.len(),
                    fi.params.len(),
                    fi.rets.len()
                ),
            });
        }
        let mut slot = |o: &Operand| -> R<u64> {
            match o {
                Operand::Name { name, .. } => match self.lookup(name) {
                    Some(Name::FParam(off)) => Ok(off),
                    _ => unsupported(
                        line,
                        format!("call argument `{name}` is not a .param variable"),
                    ),
                },
                _ => unsupported(line, format!("call argument {o:?}")),
            }
        };
        let mut a = Vec::new();
        for (o, (to, len)) in args.iter().zip(&fi.params) {
            a.push(crate::ir::Copy3 {
                from: slot(o)? as u32,
                to: *to as u32,
                len: *len as u32,
            });
        }
        let mut r = Vec::new();
        for (o, (from, len)) in rets.iter().zip(&fi.rets) {
            r.push(crate::ir::Copy3 {
                from: *from as u32,
                to: slot(o)? as u32,
                len: *len as u32,
            });
        }
        self.patches.push((self.code.len(), callee));
        Ok(Kind::Call {
            target: 0,
            func: fi.id,
            args: a,
            rets: r,
        })
    }
}

/// Symbol index standing for the start of dynamic shared memory (shared-space address),
/// replaced by an immediate once the kernel's static shared size is known.
const DYN_SYM: u32 = u32::MAX - 1;
/// The same as a generic address.
const DYN_SYM_GENERIC: u32 = u32::MAX;

/// Operand for the address of a shared variable at offset `o` (`u64::MAX` = dynamic shared).
fn shared_opd(o: u64, off: i64, generic: bool) -> Opd {
    let base = if generic {
        crate::memory::SHARED_BASE
    } else {
        0
    };
    if o == u64::MAX {
        Opd::Sym(if generic { DYN_SYM_GENERIC } else { DYN_SYM }, off)
    } else {
        Opd::Imm(base.wrapping_add(o).wrapping_add(off as u64))
    }
}

/// Replaces the dynamic-shared placeholder symbols by immediates.
fn patch_dyn_shared(code: &mut [Instr], dyn_off: u64) {
    for ins in code {
        ins.kind.for_each_opd_mut(&mut |o: &mut Opd| {
            if let Opd::Sym(s, off) = *o {
                if s == DYN_SYM {
                    *o = Opd::Imm(dyn_off.wrapping_add(off as u64));
                } else if s == DYN_SYM_GENERIC {
                    *o = Opd::Imm((crate::memory::SHARED_BASE + dyn_off).wrapping_add(off as u64));
                }
            }
        });
    }
}
