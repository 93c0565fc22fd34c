//! Deterministic test data without a dependency.

use warpnorm::Element;

/// xorshift64*: the same sequence for the same seed on every machine.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-1, 1).
    pub fn signed(&mut self) -> f64 {
        2.0 * self.unit() - 1.0
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// n values uniform in [lo, hi), rounded to E.
    pub fn vec<E: Element>(&mut self, n: usize, lo: f64, hi: f64) -> Vec<E> {
        (0..n).map(|_| E::from_f64(self.range(lo, hi))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn signed_is_the_unit_value_scaled_to_minus_one_one() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            let (u, n) = (a.unit(), b.signed());
            assert!((0.0..1.0).contains(&u) && (-1.0..1.0).contains(&n));
            assert_eq!(n, 2.0 * u - 1.0);
        }
    }
}
