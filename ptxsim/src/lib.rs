//! # ptxsim: run nvcc's PTX on the CPU
//!
//! ptxsim parses PTX as nvcc emits it and executes it with the semantics of a Volta-or-later
//! GPU (independent thread scheduling, `.sync` warp intrinsics), checking every memory access
//! the way compute-sanitizer's memcheck does. It needs no GPU and no CUDA installation.
//!
//! ```
//! use ptxsim::{Arg, Device, LaunchConfig, Module};
//!
//! let ptx = r#"
//! .version 9.0
//! .target sm_80
//! .address_size 64
//! .visible .entry scale(.param .u64 p, .param .f32 s, .param .u32 n)
//! {
//!     .reg .pred %p<2>; .reg .b32 %r<6>; .reg .f32 %f<3>; .reg .b64 %rd<5>;
//!     ld.param.u64 %rd1, [p];
//!     ld.param.f32 %f1, [s];
//!     ld.param.u32 %r1, [n];
//!     mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x;
//!     mad.lo.s32 %r5, %r2, %r3, %r4;
//!     setp.ge.u32 %p1, %r5, %r1;
//!     @%p1 bra DONE;
//!     cvta.to.global.u64 %rd2, %rd1;
//!     mul.wide.u32 %rd3, %r5, 4;
//!     add.s64 %rd4, %rd2, %rd3;
//!     ld.global.f32 %f2, [%rd4];
//!     mul.rn.f32 %f2, %f2, %f1;
//!     st.global.f32 [%rd4], %f2;
//! DONE:
//!     ret;
//! }
//! "#;
//! let module = Module::parse(ptx)?;
//! let mut dev = Device::new();
//! let buf = dev.alloc(100 * 4)?;
//! dev.write_slice(buf, &vec![1.5f32; 100])?;
//! let cfg = LaunchConfig { grid: [4, 1, 1], block: [32, 1, 1], shared_mem_bytes: 0 };
//! dev.launch(&module, "scale", cfg, &[Arg::Ptr(buf), Arg::F32(2.0), Arg::U32(100)])?;
//! assert_eq!(dev.read_slice::<f32>(buf, 100)?, vec![3.0f32; 100]);
//! # Ok::<(), ptxsim::SimError>(())
//! ```
//!
//! See the crate README for what is modelled and what is not.

mod check;
mod device;
mod error;
mod exec;
mod ir;
mod lower;
mod memory;
mod module;
pub mod numeric;
mod parser;
mod sem;
mod types;

/// Numeric semantics used by the executor.
use numeric as num;

pub use check::{
    AccessKind, AccessSite, Hazard, InstrClass, MemSpace, Metrics, Report, ReportKind,
    UncoalescedLine,
};
pub use device::{Arg, Device, LaunchConfig, LaunchStats, Options, Scalar, MAX_COOPERATIVE_BLOCKS};
pub use error::{Fault, FaultKind, SimError};
pub use module::{EntryInfo, Module, ParamInfo};
