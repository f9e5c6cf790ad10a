//! Host-side named tensors: the common currency of checkpoints.
//!
//! Models, optimizer states and data-order states all implement [`StateDict`],
//! so a checkpoint is just the union of their [`StateMap`]s under distinct key
//! prefixes.

use std::collections::BTreeMap;

/// One tensor copied to the host: its shape and its values in row-major order.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor<E> {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Row-major values; `data.len()` is the product of `shape`.
    pub data: Vec<E>,
}

/// Named host tensors, ordered by key.
pub type StateMap<E> = BTreeMap<String, HostTensor<E>>;

/// Why a [`StateMap`] could not be loaded into a live object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// A tensor the object needs is absent from the map.
    #[error("tensor `{key}` is missing")]
    Missing {
        /// The key that was looked up.
        key: String,
    },
    /// A tensor is present but has another shape.
    #[error(
        "tensor `{key}` has shape {found:?} in the checkpoint, but the model expects {expected:?}"
    )]
    Shape {
        /// The key of the tensor.
        key: String,
        /// The shape the live object has.
        expected: Vec<usize>,
        /// The shape stored in the map.
        found: Vec<usize>,
    },
    /// Anything else that makes the map unusable (e.g. a scalar out of range).
    #[error("tensor `{key}`: {reason}")]
    Invalid {
        /// The key of the tensor.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Something whose persistent state can be copied to and from a [`StateMap`].
///
/// `load_state` must validate everything before it changes anything: on
/// `Err`, `self` is left exactly as it was.
pub trait StateDict<E> {
    /// Appends every persistent tensor under `prefix` (e.g. `"params."`).
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>);
    /// Replaces every persistent tensor with the one stored under `prefix`.
    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError>;

    /// Appends the integer counters (update counts, steps) as exact `u64`s,
    /// under the keys `save_state` gives them. Default: none.
    ///
    /// `save_state` writes them too, converted to `E`, so that a
    /// [`StateMap<E>`] alone round-trips in memory; but `E` may not hold
    /// them exactly (`f16` holds integers exactly only up to 2048), so a
    /// checkpoint stores these values instead, as U64, and on restore calls
    /// [`StateDict::load_counters`] after `load_state` (which then sees `0`
    /// for each counter).
    fn save_counters(&self, _prefix: &str, _out: &mut StateMap<u64>) {}

    /// Sets the counters from the exact values `save_counters` wrote. Same
    /// contract as `load_state`: on `Err`, `self` is unchanged. Default:
    /// nothing to load.
    fn load_counters(&mut self, _prefix: &str, _src: &StateMap<u64>) -> Result<(), StateError> {
        Ok(())
    }
}
