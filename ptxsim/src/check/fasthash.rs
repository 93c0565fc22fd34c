//! A small multiplicative hasher for integer keys (addresses, page numbers, report keys): the
//! standard library's SipHash is needlessly slow for these and they are not attacker-chosen.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hasher; good enough for integers and small tuples of them.
#[derive(Clone, Copy, Default)]
pub(super) struct FastHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl FastHasher {
    #[inline]
    fn mix(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(26) ^ v).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // Fold the high bits down: hashbrown takes its bucket index from the low bits.
        self.0 ^ (self.0 >> 29)
    }
}

/// A `HashMap` using [`FastHasher`].
pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
