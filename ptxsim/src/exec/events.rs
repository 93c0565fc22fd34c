//! Execution events for shadow-state checkers and metrics (`crate::check`): the executor
//! reports every warp-level global/shared memory access (one event per instruction execution
//! by a group of lanes: a "request"), completed barriers and warp synchronizations, and every
//! executed warp instruction. Nothing is recorded when no receiver is attached.

/// Memory space of a reported access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EvSpace {
    Global,
    Shared,
}

/// Direction of a reported access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EvKind {
    Load,
    Store,
    Atomic,
}

/// One lane of a warp-level access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaneAcc {
    /// Global address, or byte offset into the block's shared memory.
    pub addr: u64,
    pub lane: u8,
    /// Global loads/atomics: some accessed byte had never been written (checked before the access).
    pub uninit: bool,
}

/// One warp-level execution of a memory instruction, for one space.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AccessEv<'a> {
    pub space: EvSpace,
    pub kind: EvKind,
    /// `.volatile`, `.relaxed`, `.acquire`, `.release` accesses.
    pub strong: bool,
    pub line: u32,
    pub warp: u32,
    /// Bytes per lane (all vector elements together).
    pub size: u32,
    /// Active lanes in increasing order.
    pub lanes: &'a [LaneAcc],
}

/// Receiver of one block's events, in execution order.
pub(crate) trait Events {
    /// A warp-level global or shared memory access.
    fn access(&mut self, ev: &AccessEv<'_>);
    /// A block barrier completed.
    fn barrier(&mut self);
    /// A warp-synchronous instruction completed for `mask` lanes of `warp`.
    fn warp_sync(&mut self, warp: u32, mask: u32);
    /// The instruction at `pc` executed by `active` lanes (guard true).
    fn instruction(&mut self, pc: u32, active: u32);
}

/// A per-worker receiver: [`Events`] for the blocks it runs, one after another.
pub(crate) trait BlockEvents: Events {
    /// Starts block `linear` (x-fastest linear index) with index `id`.
    fn start(&mut self, linear: u64, id: [u32; 3]);
    /// Ends the current block.
    fn end(&mut self);
}

/// Makes one [`BlockEvents`] per worker thread (or none).
pub(crate) type EventsFactory<'a> = dyn Fn() -> Option<Box<dyn BlockEvents + 'a>> + Sync + 'a;

/// Lane buffers for gathering one instruction's accesses per space.
#[derive(Default)]
pub(crate) struct EvBufs {
    pub global: Vec<LaneAcc>,
    pub shared: Vec<LaneAcc>,
}
