//! A tiny, fully specified PRNG for data order.
//!
//! Why not `rand`: `rand` documents that `StdRng` and `SliceRandom::shuffle`
//! may change their output between versions, and a checkpoint resumed after a
//! dependency bump must still see the same batches. SplitMix64 plus
//! Fisher–Yates with Lemire's unbiased bounded integers is a few lines, fixed
//! forever, and fast enough (one `u64` per example per epoch).

/// SplitMix64 (Steele, Lea & Flood 2014), the generator Java's
/// `SplittableRandom` and `rand`'s seeding use.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n > 0`), without modulo bias (Lemire 2019).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

/// The order of `0..n` for one epoch: a Fisher–Yates shuffle driven by
/// SplitMix64 seeded with `seed` and `epoch` mixed together, so every epoch
/// has its own permutation and any epoch can be recomputed on its own.
pub(crate) fn permutation(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    // Mix the epoch through one SplitMix64 step so that (seed, epoch) and
    // (seed + 1, epoch - 1) do not collide.
    let mixed = SplitMix64::new(epoch).next_u64() ^ seed;
    let mut rng = SplitMix64::new(mixed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // First outputs of SplitMix64 seeded with 0 (reference implementation).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn permutation_is_a_deterministic_permutation() {
        let a = permutation(100, 7, 3);
        assert_eq!(a, permutation(100, 7, 3));
        assert_ne!(a, permutation(100, 7, 4));
        assert_ne!(a, permutation(100, 8, 3));
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
        assert!(permutation(0, 1, 1).is_empty());
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = SplitMix64::new(42);
        for n in 1..50u64 {
            for _ in 0..20 {
                assert!(r.below(n) < n);
            }
        }
    }
}
