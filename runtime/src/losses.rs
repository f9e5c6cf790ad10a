//! Loss functions with Optax's names and conventions.
//!
//! Like Optax, the classification losses return one value per example; take
//! `.mean()` for the batch loss. Every function keeps the tape of its first
//! argument, so it works inside
//! [`TrainState::value_and_grad`](crate::train_state::TrainState::value_and_grad) and never reads the
//! device. Logits are `(batch, classes)` with any [`Dim`]s (`Const<N>` or
//! `usize`).
//!
//! ```
//! use flaxen_runtime::dfdx::prelude::*;
//! use flaxen_runtime::losses::*;
//!
//! let dev: Cpu = Default::default();
//! let logits: Tensor<Rank2<2, 3>, f32, _> = dev.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 5.0]]);
//! let labels = dev.tensor([0usize, 2]);
//! let loss = softmax_cross_entropy_with_integer_labels(logits, labels).mean();
//! assert!(loss.array() < 0.2);
//! ```

use dfdx::prelude::*;
use dfdx::tensor_ops::Device;

/// Cross-entropy between `softmax(logits)` and integer class labels
/// (Optax `softmax_cross_entropy_with_integer_labels`): per example,
/// `logsumexp(logits) - logits[label]`. The label is picked on the device
/// with dfdx's `select`; labels must be `< classes`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::losses::*;
/// let dev: Cpu = Default::default();
/// let logits: Tensor<Rank2<1, 2>, f32, _> = dev.tensor([[0.0, 0.0]]);
/// let per_example = softmax_cross_entropy_with_integer_labels(logits, dev.tensor([1usize]));
/// assert!((per_example.array()[0] - 2f32.ln()).abs() < 1e-6);
/// ```
pub fn softmax_cross_entropy_with_integer_labels<
    B: Dim,
    C: Dim,
    E: Dtype,
    D: Device<E>,
    T: Tape<E, D>,
>(
    logits: Tensor<(B, C), E, D, T>,
    labels: Tensor<(B,), usize, D>,
) -> Tensor<(B,), E, D, T> {
    logits.log_softmax::<Axis<1>>().select(labels).negate()
}

/// Cross-entropy between `softmax(logits)` and a distribution over classes
/// per example (one-hot or soft labels; Optax `softmax_cross_entropy`):
/// `-sum(labels * log_softmax(logits))`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::losses::*;
/// let dev: Cpu = Default::default();
/// let logits: Tensor<Rank2<1, 2>, f32, _> = dev.tensor([[0.0, 0.0]]);
/// let labels = dev.tensor([[0.25, 0.75]]);
/// let per_example = softmax_cross_entropy(logits, labels);
/// assert!((per_example.array()[0] - 2f32.ln()).abs() < 1e-6);
/// ```
pub fn softmax_cross_entropy<B: Dim, C: Dim, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    logits: Tensor<(B, C), E, D, T>,
    labels: Tensor<(B, C), E, D>,
) -> Tensor<(B,), E, D, T> {
    (logits.log_softmax::<Axis<1>>() * labels)
        .sum::<(B,), Axis<1>>()
        .negate()
}

/// Element-wise binary cross-entropy of `sigmoid(logits)` against
/// probabilities `labels` (Optax `sigmoid_binary_cross_entropy`), computed
/// stably from the logits by dfdx's `bce_with_logits`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::losses::*;
/// let dev: Cpu = Default::default();
/// let logits: Tensor<Rank1<2>, f32, _> = dev.tensor([0.0, 100.0]);
/// let loss = sigmoid_binary_cross_entropy(logits, dev.tensor([1.0, 1.0]));
/// let v = loss.array();
/// assert!((v[0] - 2f32.ln()).abs() < 1e-6 && v[1].abs() < 1e-6);
/// ```
pub fn sigmoid_binary_cross_entropy<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    logits: Tensor<S, E, D, T>,
    labels: Tensor<S, E, D>,
) -> Tensor<S, E, D, T> {
    logits.bce_with_logits(labels)
}

/// Element-wise `(predictions - targets)²` (Optax `squared_error`).
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::losses::*;
/// let dev: Cpu = Default::default();
/// let e = squared_error(dev.tensor([1.0f32, 2.0]), dev.tensor([0.0, 0.0]));
/// assert_eq!(e.array(), [1.0, 4.0]);
/// ```
pub fn squared_error<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    predictions: Tensor<S, E, D, T>,
    targets: Tensor<S, E, D>,
) -> Tensor<S, E, D, T> {
    (predictions - targets).square()
}

/// Mean squared error over every element, as a scalar.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::losses::*;
/// let dev: Cpu = Default::default();
/// let l = mse(dev.tensor([1.0f32, 2.0]), dev.tensor([0.0, 0.0]));
/// assert_eq!(l.array(), 2.5);
/// ```
pub fn mse<S: Shape, E: Dtype, D: Device<E>, T: Tape<E, D>>(
    predictions: Tensor<S, E, D, T>,
    targets: Tensor<S, E, D>,
) -> Tensor<Rank0, E, D, T> {
    squared_error(predictions, targets).mean()
}
