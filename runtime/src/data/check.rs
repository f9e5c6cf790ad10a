//! Checking a data set against what the program will do with it, right
//! after loading.
//!
//! A loader only finds out later, and without the file's name, that the
//! examples have the wrong size or that there is no full batch; a label past
//! the last class is not noticed at all until the loss indexes out of bounds
//! mid-training. [`Requirements::check`] reports each of these up front,
//! naming the file, before a run directory is created or a step is taken.

use std::path::Path;

use super::{ArrayDataset, DataError};

/// What a training or evaluation program needs of a data set: the example
/// shape its model takes, the number of classes of its output, and how many
/// examples at least (a training batch; 1 for evaluation).
///
/// ```
/// use flaxen_runtime::data::{ArrayDataset, Requirements};
///
/// let ds = ArrayDataset::new(vec![1, 2, 2], vec![0.5; 12], vec![0, 1, 9]).unwrap();
/// let need = Requirements::new(vec![1, 2, 2], 10);
/// need.check(&ds, "images".as_ref(), "labels".as_ref()).unwrap();
///
/// let err = need.min_len(32).check(&ds, "images".as_ref(), "labels".as_ref()).unwrap_err();
/// assert_eq!(err.to_string(), "images: 3 examples, fewer than one batch of 32");
/// let err = Requirements::new(vec![1, 2, 2], 5)
///     .check(&ds, "images".as_ref(), "labels".as_ref())
///     .unwrap_err();
/// assert!(err.to_string().starts_with("labels: label 9 of example 2 is out of range"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirements {
    /// The shape of one example the model takes, e.g. `[1, 28, 28]`.
    pub example_shape: Vec<usize>,
    /// Number of classes: every label must be below it.
    pub classes: usize,
    /// Fewest examples accepted (at least 1: an empty set is always refused).
    pub min_len: usize,
}

impl Requirements {
    /// Examples of `example_shape`, labels below `classes`, at least one
    /// example.
    pub fn new(example_shape: Vec<usize>, classes: usize) -> Self {
        Self {
            example_shape,
            classes,
            min_len: 1,
        }
    }

    /// Sets [`Requirements::min_len`] (e.g. the batch size of a loader that
    /// drops short batches).
    pub fn min_len(mut self, examples: usize) -> Self {
        self.min_len = examples;
        self
    }

    /// Checks `dataset`. Errors are [`DataError::Format`] naming `features`
    /// (the file the examples came from) for a wrong shape or too few
    /// examples, and `labels` (the labels' file) for a label out of range.
    pub fn check(
        &self,
        dataset: &ArrayDataset,
        features: &Path,
        labels: &Path,
    ) -> Result<(), DataError> {
        let fault = |path: &Path, reason: String| DataError::Format {
            path: path.to_path_buf(),
            reason,
        };
        let shape = super::Dataset::example_shape(dataset);
        if shape != self.example_shape.as_slice() {
            return Err(fault(
                features,
                format!(
                    "examples of shape {}, but the model takes {}",
                    dims(shape),
                    dims(&self.example_shape)
                ),
            ));
        }
        let len = dataset.labels().len();
        if len == 0 {
            return Err(fault(features, "no examples: the data set is empty".into()));
        }
        if len < self.min_len {
            return Err(fault(
                features,
                format!("{len} examples, fewer than one batch of {}", self.min_len),
            ));
        }
        if let Some((i, l)) = dataset
            .labels()
            .iter()
            .enumerate()
            .find(|(_, &l)| l >= self.classes)
        {
            return Err(fault(
                labels,
                format!(
                    "label {l} of example {i} is out of range: the model has {} classes (labels 0..={})",
                    self.classes,
                    self.classes.saturating_sub(1)
                ),
            ));
        }
        Ok(())
    }
}

/// `[1, 28, 28]` as `1×28×28`.
fn dims(shape: &[usize]) -> String {
    let parts: Vec<String> = shape.iter().map(usize::to_string).collect();
    parts.join("×")
}
