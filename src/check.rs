//! Validation shared by every op: device addresses (one checker for all of them), element
//! types, and the workspace.
//!
//! A planner lists every buffer of a call once with [`Buffers::input`] / [`Buffers::output`]
//! (name, address, element count, element size); [`Buffers::finish`] then checks, before any
//! launch, that every non-empty buffer has a non-null address aligned to its element size
//! whose end does not overflow, and that no output overlaps another buffer - except the exact
//! in-place pairs the op allows (for example BatchNorm's `y == x`).

use crate::{DType, Error, Result};

/// The address range and role of one buffer of a call.
#[derive(Clone, Copy, Debug)]
struct Entry {
    what: &'static str,
    start: u64,
    bytes: u64,
    output: bool,
}

/// The buffers of one call, checked together (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    entries: Vec<Entry>,
    in_place: &'static [(&'static str, &'static str)],
}

impl Buffers {
    /// A checker that accepts, as the only overlaps, `(output, input)` pairs of `in_place`
    /// given at exactly the same address with the same size.
    pub(crate) fn new(in_place: &'static [(&'static str, &'static str)]) -> Buffers {
        Buffers {
            entries: Vec::with_capacity(12),
            in_place,
        }
    }

    fn push(
        &mut self,
        what: &'static str,
        ptr: u64,
        elems: u64,
        elem_size: u64,
        output: bool,
    ) -> Result<()> {
        let bytes = elems
            .checked_mul(elem_size)
            .ok_or_else(|| Error::Overflow(format!("{what}: {elems} elements in bytes")))?;
        if bytes == 0 {
            return Ok(());
        }
        if ptr == 0 {
            return Err(Error::invalid(
                what,
                "null device address for a non-empty buffer",
            ));
        }
        check_alignment(what, ptr, elem_size)?;
        ptr.checked_add(bytes)
            .ok_or_else(|| Error::Overflow(format!("{what}: address {ptr:#x} + {bytes} bytes")))?;
        self.entries.push(Entry {
            what,
            start: ptr,
            bytes,
            output,
        });
        Ok(())
    }

    /// A buffer the call reads: `elems` elements of `elem_size` bytes at `ptr`.
    pub(crate) fn input(
        &mut self,
        what: &'static str,
        ptr: u64,
        elems: u64,
        elem_size: u64,
    ) -> Result<()> {
        self.push(what, ptr, elems, elem_size, false)
    }

    /// A buffer the call writes (or reads and writes).
    pub(crate) fn output(
        &mut self,
        what: &'static str,
        ptr: u64,
        elems: u64,
        elem_size: u64,
    ) -> Result<()> {
        self.push(what, ptr, elems, elem_size, true)
    }

    /// [`Buffers::input`] for an optional buffer.
    pub(crate) fn input_opt(
        &mut self,
        what: &'static str,
        ptr: Option<u64>,
        elems: u64,
        elem_size: u64,
    ) -> Result<()> {
        ptr.map_or(Ok(()), |p| self.input(what, p, elems, elem_size))
    }

    /// [`Buffers::output`] for an optional buffer.
    pub(crate) fn output_opt(
        &mut self,
        what: &'static str,
        ptr: Option<u64>,
        elems: u64,
        elem_size: u64,
    ) -> Result<()> {
        ptr.map_or(Ok(()), |p| self.output(what, p, elems, elem_size))
    }

    fn allowed(&self, a: &Entry, b: &Entry) -> bool {
        a.start == b.start
            && a.bytes == b.bytes
            && self
                .in_place
                .iter()
                .any(|&(o, i)| (a.what, b.what) == (o, i) || (b.what, a.what) == (o, i))
    }

    /// Checks that no output overlaps another buffer (other than the allowed in-place pairs).
    pub(crate) fn finish(self) -> Result<()> {
        for (i, a) in self.entries.iter().enumerate() {
            for b in &self.entries[i + 1..] {
                let overlap = a.start < b.start + b.bytes && b.start < a.start + a.bytes;
                if overlap && (a.output || b.output) && !self.allowed(a, b) {
                    return Err(Error::Overlap {
                        what: a.what.into(),
                        other: b.what.into(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// `address` must be a multiple of `align` bytes.
pub fn check_alignment(what: &str, address: u64, align: u64) -> Result<()> {
    if !address.is_multiple_of(align) {
        return Err(Error::Alignment {
            what: what.into(),
            address,
            required: align,
        });
    }
    Ok(())
}

/// The workspace: at least `needed` bytes (what the op's `*_workspace_bytes` query returned),
/// 16-byte aligned.
pub(crate) fn check_workspace(ptr: u64, given: u64, needed: u64) -> Result<()> {
    if given < needed {
        return Err(Error::Workspace {
            needed: needed as usize,
            given: given as usize,
        });
    }
    if needed > 0 {
        if ptr == 0 {
            return Err(Error::invalid(
                "workspace",
                "null device address for a non-empty buffer",
            ));
        }
        check_alignment("workspace", ptr, WORKSPACE_ALIGN)?;
        ptr.checked_add(needed).ok_or_else(|| {
            Error::Overflow(format!("workspace: address {ptr:#x} + {needed} bytes"))
        })?;
    }
    Ok(())
}

/// Alignment (bytes) every op requires of its workspace.
pub const WORKSPACE_ALIGN: u64 = 16;

/// eps must be finite and >= 0 (every op's rule).
pub(crate) fn check_eps(eps: f32) -> Result<()> {
    if !eps.is_finite() || eps < 0.0 {
        return Err(Error::invalid(
            "eps",
            format!("expected a finite value >= 0, got {eps}"),
        ));
    }
    Ok(())
}

/// The parameter dtype must be f32 or the activation dtype (every op's rule).
pub(crate) fn check_param_dtype(op: &str, dtype: DType, param_dtype: DType) -> Result<()> {
    if param_dtype != dtype && param_dtype != DType::F32 {
        return Err(Error::DType {
            what: format!("{op} parameters"),
            expected: format!("f32 or the activation dtype {dtype}"),
            given: param_dtype.to_string(),
        });
    }
    Ok(())
}

/// The Rust element types of a call's buffers must be the description's dtypes.
pub(crate) fn check_element_types(
    dtype: DType,
    param_dtype: DType,
    t: DType,
    p: DType,
) -> Result<()> {
    for (what, want, got) in [
        ("activation buffers", dtype, t),
        ("parameter buffers", param_dtype, p),
    ] {
        if want != got {
            return Err(Error::DType {
                what: what.into(),
                expected: want.to_string(),
                given: got.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_misaligned_and_overflowing_buffers_are_rejected() {
        let mut b = Buffers::new(&[]);
        assert!(matches!(
            b.input("x", 0, 4, 4),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            b.input("x", 0x1002, 4, 4),
            Err(Error::Alignment { required: 4, .. })
        ));
        assert!(matches!(
            b.input("x", u64::MAX - 7, 4, 4),
            Err(Error::Overflow(_))
        ));
        // Empty buffers may be null.
        b.input("x", 0, 0, 4).unwrap();
        b.finish().unwrap();
    }

    #[test]
    fn outputs_may_not_overlap_except_allowed_in_place_pairs() {
        let mut b = Buffers::new(&[("y", "x")]);
        b.input("x", 0x1000, 64, 4).unwrap();
        b.output("y", 0x1000, 64, 4).unwrap();
        b.input("gamma", 0x1000, 8, 4).unwrap(); // inputs may overlap each other
        assert!(matches!(b.finish(), Err(Error::Overlap { .. })));

        let mut b = Buffers::new(&[("y", "x")]);
        b.input("x", 0x1000, 64, 4).unwrap();
        b.output("y", 0x1000, 64, 4).unwrap();
        b.finish().unwrap();

        // In place only at exactly the same range.
        let mut b = Buffers::new(&[("y", "x")]);
        b.input("x", 0x1000, 64, 4).unwrap();
        b.output("y", 0x1004, 64, 4).unwrap();
        assert!(matches!(b.finish(), Err(Error::Overlap { .. })));

        let mut b = Buffers::new(&[]);
        b.output("mean", 0x1000, 16, 4).unwrap();
        b.output("rstd", 0x1000, 16, 4).unwrap();
        let e = b.finish().unwrap_err();
        assert_eq!(e.to_string(), "mean and rstd overlap in device memory");

        let mut b = Buffers::new(&[]);
        b.output("mean", 0x1000, 16, 4).unwrap();
        b.output("rstd", 0x1040, 16, 4).unwrap();
        b.finish().unwrap();
    }

    #[test]
    fn workspace_is_checked_in_bytes() {
        let e = check_workspace(0x1000, 0, 320).unwrap_err();
        assert_eq!(
            e.to_string(),
            "workspace too small: the call needs at least 320 bytes, got 0"
        );
        check_workspace(0, 0, 0).unwrap();
        assert!(matches!(
            check_workspace(0x1008, 512, 320),
            Err(Error::Alignment { required: 16, .. })
        ));
    }
}
