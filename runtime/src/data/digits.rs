//! The UCI 8×8 handwritten digits (1,797 images), embedded in the binary so
//! the main example trains on real data with no download.
//!
//! Pixels are 0..=16 in the source and are scaled to `[0, 1]` (divided by
//! 16); each example has shape `[1, 8, 8]` (NCHW), labels are 0..=9.
//!
//! **Split (fixed, documented):** the 1,797 examples are permuted with
//! flaxen's data-order shuffle (SplitMix64 Fisher–Yates, see
//! [`crate::data::LoaderConfig`]) under seed [`SPLIT_SEED`]; the first
//! [`TRAIN_LEN`] = 1,500 of that order are the training set and the last
//! [`TEST_LEN`] = 297 the test set. The split never changes between runs,
//! machines or flaxen versions. Provenance and license (CC BY 4.0) are in
//! `src/data/assets/README.md`.
//!
//! ```
//! use flaxen_runtime::data::{digits, Dataset};
//!
//! let (train, test) = digits::load().unwrap();
//! assert_eq!((train.len(), test.len()), (1500, 297));
//! assert_eq!(train.example_shape(), &[1, 8, 8]);
//! ```

use std::path::Path;

use super::{idx, rng, ArrayDataset, DataError};

/// Number of examples in the embedded set.
pub const LEN: usize = 1797;
/// Examples in the training split.
pub const TRAIN_LEN: usize = 1500;
/// Examples in the test split.
pub const TEST_LEN: usize = LEN - TRAIN_LEN;
/// Classes: the digits 0 to 9.
pub const CLASSES: usize = 10;
/// Seed of the permutation that defines the split.
pub const SPLIT_SEED: u64 = 0;

const IMAGES: &[u8] = include_bytes!("assets/digits-images-idx3-ubyte.gz");
const LABELS: &[u8] = include_bytes!("assets/digits-labels-idx1-ubyte.gz");

/// All 1,797 examples in the source order.
///
/// ```
/// let all = flaxen_runtime::data::digits::load_all().unwrap();
/// assert_eq!(&all.labels()[..3], &[0, 1, 2]);
/// ```
pub fn load_all() -> Result<ArrayDataset, DataError> {
    let ip = Path::new("<embedded digits images>");
    let lp = Path::new("<embedded digits labels>");
    idx::images_and_labels(
        idx::parse_idx(ip, IMAGES)?,
        ip,
        idx::parse_idx(lp, LABELS)?,
        lp,
        16.0,
        CLASSES,
    )
}

/// The fixed train (1,500) and test (297) splits described in the module docs.
///
/// ```
/// let (train, test) = flaxen_runtime::data::digits::load().unwrap();
/// assert_eq!(train.labels().len() + test.labels().len(), 1797);
/// ```
pub fn load() -> Result<(ArrayDataset, ArrayDataset), DataError> {
    let all = load_all()?;
    let order = rng::permutation(LEN, SPLIT_SEED, 0);
    let train = all.subset(&order[..TRAIN_LEN])?;
    let test = all.subset(&order[TRAIN_LEN..])?;
    Ok((train, test))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Dataset;

    #[test]
    fn embedded_data_matches_the_source() {
        let all = load_all().unwrap();
        assert_eq!(all.len(), LEN);
        let mut counts = [0usize; 10];
        for &l in all.labels() {
            counts[l] += 1;
        }
        assert_eq!(counts, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);
        let sum: f64 = all.features().iter().map(|&v| (v * 16.0) as f64).sum();
        assert_eq!(sum, 561_718.0);
        assert_eq!(&all.features()[..4], &[0.0, 0.0, 5.0 / 16.0, 13.0 / 16.0]);
        assert!(all.features().iter().all(|&v| (0.0..=1.0).contains(&v)));
    }

    #[test]
    fn split_is_fixed_and_disjoint() {
        let (train, test) = load().unwrap();
        let (train2, test2) = load().unwrap();
        assert_eq!(train, train2);
        assert_eq!(test, test2);
        assert_eq!(train.len(), TRAIN_LEN);
        assert_eq!(test.len(), TEST_LEN);
        // Every class is present in the test split.
        for c in 0..10 {
            assert!(test.labels().contains(&c), "class {c} missing from test");
        }
        // Disjoint: together the two splits hold each source example once.
        let order = rng::permutation(LEN, SPLIT_SEED, 0);
        let mut seen = order.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), LEN);
    }
}
