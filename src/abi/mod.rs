//! *Advanced.* The kernel ABI: argument structs shared with the CUDA C++ kernels.
//!
//! `generated.rs` is produced from `cuda/abi.h` by `cargo xtask bindings` (bindgen, offline)
//! and committed; CI checks that it is fresh. Never edit it by hand.

#[rustfmt::skip]
#[allow(missing_docs)]
mod generated;

pub use generated::*;

/// Marks generated structs as kernel argument structs (they are padding-free POD: the
/// header keeps every field naturally aligned with explicit padding, and bindgen's layout
/// tests check size and alignment). Each op family invokes it for its own structs.
macro_rules! abi_args {
    ($($t:ident),* $(,)?) => {$(
        // SAFETY: `$t` is a bindgen-generated #[repr(C)] POD struct without implicit padding.
        unsafe impl crate::plan::AbiArgs for $t {
            const NAME: &'static str = stringify!($t);
        }
    )*};
}

pub(crate) use abi_args;

abi_args!(WnCopyArgs);
