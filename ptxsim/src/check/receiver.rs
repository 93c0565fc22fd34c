//! [`BlockChecks`] as the executor's event receiver (`crate::exec::events`), and the factory
//! that gives each block worker one.

use super::{AccessKind, BlockChecks, LaunchChecks, MemSpace, WarpAccess};
use crate::exec::events::{AccessEv, BlockEvents, EvKind, EvSpace, Events};

impl Events for BlockChecks<'_> {
    #[inline]
    fn access(&mut self, ev: &AccessEv<'_>) {
        let space = match ev.space {
            EvSpace::Global => MemSpace::Global,
            EvSpace::Shared => MemSpace::Shared,
        };
        let kind = match ev.kind {
            EvKind::Load => AccessKind::Load,
            EvKind::Store => AccessKind::Store,
            EvKind::Atomic => AccessKind::Atomic,
        };
        BlockChecks::access(
            self,
            &WarpAccess {
                space,
                kind,
                strong: ev.strong,
                line: ev.line,
                warp: ev.warp,
                size: ev.size,
                lanes: ev.lanes,
            },
        );
    }

    #[inline]
    fn barrier(&mut self) {
        BlockChecks::barrier(self);
    }

    #[inline]
    fn warp_sync(&mut self, warp: u32, mask: u32) {
        BlockChecks::warp_sync(self, warp, mask);
    }

    #[inline]
    fn instruction(&mut self, pc: u32, active: u32) {
        BlockChecks::instruction(self, pc, active);
    }
}

impl BlockEvents for BlockChecks<'_> {
    fn start(&mut self, linear: u64, id: [u32; 3]) {
        BlockChecks::start(self, linear, id);
    }

    fn end(&mut self) {
        BlockChecks::end(self);
    }
}

impl LaunchChecks {
    /// A receiver for one block worker (see `crate::exec::events::EventsFactory`).
    pub(crate) fn receiver(&self) -> Box<dyn BlockEvents + '_> {
        Box::new(self.block())
    }
}
