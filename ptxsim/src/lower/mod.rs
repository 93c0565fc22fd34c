//! Lowering: syntax tree -> per-kernel internal code with registers resolved to indices.
//!
//! Each `.entry` becomes a [`Kernel`] whose code holds the entry body followed by every `.func`
//! it may call (recursion is not supported). Registers of every function get distinct indices
//! in one per-kernel register file; special registers (`%tid.x`, ...) are ordinary register
//! slots filled when a warp starts.

mod globals;
mod operands;
mod ops;
mod ops_arith;
mod ops_bits;
mod ops_cmp;
mod ops_ctrl;
mod ops_mem;
mod ops_move;
mod ops_sync;
mod sfx;
mod special;

use globals::{func_addr, func_index};
pub(crate) use globals::{lower_globals, FUNC_BASE};
use operands::patch_dyn_shared;
use special::special;
pub(crate) use special::Special;

use crate::error::SimError;
use crate::ir::{Instr, Kind};
use crate::parser::ast::{self, Stmt};
use crate::types::Space;
use std::collections::HashMap;

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
}
