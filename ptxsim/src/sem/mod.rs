//! Instruction semantics as small pure functions over raw register bits.

pub(crate) mod atom;
pub(crate) mod cmp;
pub(crate) mod cvt;
pub(crate) mod float;
pub(crate) mod int;
