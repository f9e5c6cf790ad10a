//! Data: datasets, a prefetching loader, an MNIST IDX reader and an embedded
//! set of real handwritten digits.
//!
//! The pieces fit together like this:
//!
//! ```
//! use flaxen_runtime::data::{digits, Loader, LoaderConfig};
//! use flaxen_runtime::dfdx::prelude::*;
//!
//! let dev = Cpu::default();
//! let (train, _test) = digits::load().unwrap();
//! let mut loader: Loader<Rank3<1, 8, 8>, 32, f32, Cpu> =
//!     Loader::new(train, &dev, LoaderConfig::new(0)).unwrap();
//! // Five batches stacked on a leading axis, copied to the device at once.
//! let (x, y) = loader.next_stacked::<5>().unwrap();
//! let _: &Tensor<Rank5<5, 32, 1, 8, 8>, f32, Cpu> = &x;
//! let _: &Tensor<Rank2<5, 32>, usize, Cpu> = &y;
//! ```

mod check;
pub mod digits;
pub mod idx;
mod loader;
pub(crate) mod rng;
mod shape;

pub use check::Requirements;
pub use loader::{BatchOf, Loader, LoaderConfig, LoaderState, Shard, StackedOf};
pub use shape::PrependDim;

use std::path::PathBuf;
use std::sync::Arc;

/// Why data could not be read or batched.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The file could not be opened or read. The message holds the cause,
    /// which is therefore not also chained as `source()` (it would print
    /// twice under anyhow's "Caused by").
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// The file is not a well-formed IDX file (or the pair does not match).
    #[error("{path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, in words.
        reason: String,
    },
    /// The dataset's examples do not have the shape the loader was built for.
    #[error("the dataset's examples have shape {found:?}, but the loader expects {expected:?}")]
    Shape {
        /// The per-example shape of the loader's type.
        expected: Vec<usize>,
        /// The per-example shape of the dataset.
        found: Vec<usize>,
    },
    /// The dataset has fewer examples than one batch, so no batch can be made.
    #[error("the dataset has {len} examples, fewer than one batch of {batch}")]
    TooSmall {
        /// Examples in the dataset.
        len: usize,
        /// The batch size.
        batch: usize,
    },
    /// The next batch is the short last batch of an epoch (`drop_last` is
    /// off), which a fixed-size batch cannot hold.
    #[error(
        "the next batch has only {len} of {batch} examples; use `next_batch_dyn` or `drop_last`"
    )]
    PartialBatch {
        /// Examples in the short batch.
        len: usize,
        /// The batch size.
        batch: usize,
    },
    /// Inconsistent in-memory data (lengths that do not match, bad labels).
    #[error("invalid dataset: {0}")]
    Invalid(String),
    /// The device could not allocate or copy the batch.
    #[error("device error: {0}")]
    Device(String),
    /// The prefetching thread stopped unexpectedly.
    #[error("the prefetching thread stopped: {0}")]
    Worker(String),
}

/// A finite, indexable set of labelled examples of one fixed shape.
///
/// Examples are produced as `f32` into a caller-provided buffer so that the
/// loader's worker thread can assemble batches without allocating per
/// example; the loader converts to the model's dtype.
///
/// ```
/// use flaxen_runtime::data::{DataError, Dataset};
///
/// /// Example `i` is the constant image `i`, labelled `i % 2`.
/// struct Constant;
/// impl Dataset for Constant {
///     fn len(&self) -> usize { 10 }
///     fn example_shape(&self) -> &[usize] { &[2, 2] }
///     fn get(&self, i: usize, x: &mut [f32]) -> Result<usize, DataError> {
///         x.fill(i as f32);
///         Ok(i % 2)
///     }
/// }
/// let mut x = [0.0; 4];
/// assert_eq!(Constant.get(3, &mut x).unwrap(), 1);
/// assert_eq!(x, [3.0; 4]);
/// ```
pub trait Dataset: Send + Sync {
    /// Number of examples.
    fn len(&self) -> usize;
    /// Whether there are no examples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The shape of one example, outermost first (e.g. `[1, 8, 8]`).
    fn example_shape(&self) -> &[usize];
    /// Writes example `index` (`< len()`) into `x` (of length equal to the
    /// product of `example_shape()`) and returns its label.
    fn get(&self, index: usize, x: &mut [f32]) -> Result<usize, DataError>;
}

impl<T: Dataset + ?Sized> Dataset for Arc<T> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn example_shape(&self) -> &[usize] {
        (**self).example_shape()
    }
    fn get(&self, index: usize, x: &mut [f32]) -> Result<usize, DataError> {
        (**self).get(index, x)
    }
}

/// A dataset held in memory: features as one row-major `f32` buffer and one
/// integer label per example.
///
/// ```
/// use flaxen_runtime::data::{ArrayDataset, Dataset};
///
/// let ds = ArrayDataset::new(vec![2], vec![0.0, 1.0, 2.0, 3.0], vec![0, 1]).unwrap();
/// assert_eq!(ds.len(), 2);
/// let mut x = [0.0; 2];
/// assert_eq!(ds.get(1, &mut x).unwrap(), 1);
/// assert_eq!(x, [2.0, 3.0]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayDataset {
    shape: Vec<usize>,
    features: Vec<f32>,
    labels: Vec<usize>,
}

impl ArrayDataset {
    /// Wraps `features` (`labels.len()` examples of `shape`, row-major).
    ///
    /// Fails if `features.len()` is not `labels.len()` times the example size.
    pub fn new(
        shape: Vec<usize>,
        features: Vec<f32>,
        labels: Vec<usize>,
    ) -> Result<Self, DataError> {
        let numel: usize = shape.iter().product();
        if numel == 0 {
            return Err(DataError::Invalid(format!(
                "example shape {shape:?} has no elements"
            )));
        }
        if features.len() != numel * labels.len() {
            return Err(DataError::Invalid(format!(
                "{} feature values for {} examples of shape {shape:?} (expected {})",
                features.len(),
                labels.len(),
                numel * labels.len()
            )));
        }
        Ok(Self {
            shape,
            features,
            labels,
        })
    }

    /// The examples at `indices`, in that order (indices may repeat).
    ///
    /// Fails if an index is out of range.
    pub fn subset(&self, indices: &[usize]) -> Result<Self, DataError> {
        let numel = self.numel();
        let mut features = Vec::with_capacity(indices.len() * numel);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            if i >= self.labels.len() {
                return Err(DataError::Invalid(format!(
                    "index {i} out of range for {} examples",
                    self.labels.len()
                )));
            }
            features.extend_from_slice(&self.features[i * numel..(i + 1) * numel]);
            labels.push(self.labels[i]);
        }
        Self::new(self.shape.clone(), features, labels)
    }

    /// All labels, in example order.
    pub fn labels(&self) -> &[usize] {
        &self.labels
    }

    /// All features, row-major, in example order.
    pub fn features(&self) -> &[f32] {
        &self.features
    }

    fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

impl Dataset for ArrayDataset {
    fn len(&self) -> usize {
        self.labels.len()
    }
    fn example_shape(&self) -> &[usize] {
        &self.shape
    }
    fn get(&self, index: usize, x: &mut [f32]) -> Result<usize, DataError> {
        let numel = self.numel();
        let label = *self.labels.get(index).ok_or_else(|| {
            DataError::Invalid(format!(
                "index {index} out of range for {} examples",
                self.labels.len()
            ))
        })?;
        if x.len() != numel {
            return Err(DataError::Invalid(format!(
                "buffer of {} values for an example of {numel}",
                x.len()
            )));
        }
        x.copy_from_slice(&self.features[index * numel..(index + 1) * numel]);
        Ok(label)
    }
}
