//! Checkpoints: parameters, optimizer state, step and data order in one
//! safetensors file, written atomically, with keep-last-N rotation.
//!
//! # File format
//!
//! A plain [safetensors](https://github.com/huggingface/safetensors) file
//! that Python's `safetensors.numpy.load_file` reads. Keys:
//!
//! | key | dtype | what |
//! | --- | --- | --- |
//! | `step` | U64, shape `[]` | the training step |
//! | `params.<path>` | the model dtype | parameters, `<path>` is dfdx's tensor path, e.g. `params.conv_0.weight` |
//! | `opt.<...>` | the model dtype | optimizer state, keys chosen by the optimizer |
//! | counters, e.g. `opt.count`, `train.step` | U64, shape `[]` | exact integer counters of a part ([`StateDict::save_counters`]); a part's `<name>.step` must equal `step` |
//! | `data.<...>` | U64, shape `[]` | the loader's order: `seed`, `epoch`, `position`, and `dataset_len`, `batch_size`, `shuffle`, `drop_last` checked on resume |
//!
//! The part names (`params`, `opt`, `data`) are whatever the caller passes to
//! [`Checkpoint::add`]; those are the conventional ones. The header's
//! `__metadata__` holds `format = "flaxen-checkpoint"`, `version = "1"` and
//! `crc32c`, a CRC-32C over every key, dtype, shape and byte in key order,
//! so a flipped bit in tensor data is detected, not just a truncation.
//! Equal checkpoints give the same bytes (the header is written in key
//! order), so comparing two files' checksums compares two runs' states.
//!
//! # What is checked
//!
//! - Writing ([`Checkpoint::save`], [`CheckpointManager::save`]): every
//!   floating-point value is finite, or nothing is written (and, for the
//!   manager, no older checkpoint is rotated out); the write is atomic.
//! - Reading ([`Checkpoint::load`]): a readable header with this format,
//!   version and checksum entry (a missing entry is an error), a checksum
//!   that matches, a U64 scalar `step`, finite values.
//! - Restoring ([`Restore::apply`]): dtypes, every tensor the objects have
//!   present with the same shape, no tensor in the file that no object
//!   takes; all or nothing.
//!
//! # Example
//!
//! ```no_run
//! use flaxen_runtime::checkpoint::{Checkpoint, CheckpointManager};
//! use flaxen_runtime::data::{digits, Loader, LoaderConfig};
//! use flaxen_runtime::dfdx::prelude::*;
//!
//! let dev = Cpu::default();
//! let mut model = dev.build_module::<Linear<64, 10>, f32>();
//! let (train, _) = digits::load().unwrap();
//! let mut loader: Loader<Rank3<1, 8, 8>, 32, f32, Cpu> =
//!     Loader::new(train, &dev, LoaderConfig::new(0)).unwrap();
//!
//! let manager = CheckpointManager::new("runs/demo/ckpt", 3).unwrap();
//! let mut ckpt = Checkpoint::new(100);
//! ckpt.add_module("params", &model).unwrap().add("data", &loader).unwrap();
//! manager.save(&ckpt).unwrap();
//!
//! // Later, or in another process:
//! if let Some(ckpt) = manager.restore_latest().unwrap() {
//!     let step = ckpt
//!         .restore()
//!         .module("params", &mut model)
//!         .part("data", &mut loader)
//!         .apply()
//!         .unwrap();
//!     assert_eq!(step, 100);
//! }
//! ```

mod atomic;
mod element;
mod format;
mod manager;
mod module;
mod restore;
mod safetensors_file;

pub(crate) use atomic::write_atomic;
pub use element::Element;
pub use manager::CheckpointManager;
pub use module::{load_module_state, save_module_state};
pub use restore::Restore;
pub use safetensors_file::load_safetensors;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::Dtype;

use crate::dfdx::nn::tensor_collection::TensorCollection;
use crate::dfdx::prelude::{Device, Dtype as DfdxDtype};
use crate::state::{HostTensor, StateDict, StateError, StateMap};

use element::dtype_name;

/// Why a checkpoint could not be written, read or applied. Every variant
/// names the file (`<memory>` for one never written).
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file system failed. The message holds the cause, which is
    /// therefore not also chained as `source()` (it would print twice under
    /// anyhow's "Caused by").
    #[error("{path}: {error}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// The file is not a valid flaxen checkpoint (truncated, corrupt, or not
    /// safetensors at all).
    #[error("{path}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor does not fit the object it is loaded into (another
    /// architecture, a missing or extra tensor). The message names the
    /// tensor and both shapes. (Not chained as `source()`: the message
    /// already holds it.)
    #[error("{path}: {error}")]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// Which tensor, and how it differs.
        error: StateError,
    },
    /// A floating-point tensor holds NaN or ±infinity: the state of a
    /// diverged run, which is neither written nor restored.
    #[error("{path}: tensor `{key}` holds NaN or infinity (element {index}); a diverged state is not checkpointed")]
    NonFinite {
        /// The file (`<memory>` for a checkpoint being written).
        path: PathBuf,
        /// The tensor.
        key: String,
        /// The flat index of its first non-finite element.
        index: usize,
    },
    /// A state produced a tensor whose data does not fit its shape (a bug in
    /// its `StateDict` implementation).
    #[error("checkpoint tensor `{key}`: {reason}")]
    Invalid {
        /// The tensor.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor has another element type than the object expects.
    #[error(
        "{path}: tensor `{key}` is {found} in the checkpoint, but the model expects {expected}"
    )]
    Dtype {
        /// The file.
        path: PathBuf,
        /// The tensor.
        key: String,
        /// The dtype the object has.
        expected: String,
        /// The dtype in the file.
        found: String,
    },
    /// Two parts wrote the same key.
    #[error("checkpoint key `{key}` was added twice")]
    Duplicate {
        /// The key.
        key: String,
    },
}

/// One stored tensor: dtype, shape and little-endian bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RawTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// The contents of one checkpoint, in memory: a step and named tensors of
/// any [`Element`] type.
///
/// ```
/// use flaxen_runtime::checkpoint::Checkpoint;
/// use flaxen_runtime::dfdx::prelude::*;
///
/// let dev = Cpu::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let mut ckpt = Checkpoint::new(7);
/// ckpt.add_module("params", &model).unwrap();
/// let bytes = ckpt.to_bytes().unwrap();
/// let back = Checkpoint::from_bytes("<memory>".as_ref(), &bytes).unwrap();
/// assert_eq!(back.step(), 7);
/// assert_eq!(back.shape("params.weight"), Some(&[3, 2][..]));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    step: u64,
    tensors: BTreeMap<String, RawTensor>,
    path: PathBuf,
}

const STEP_KEY: &str = "step";

/// The key prefix of part `name`: `"name."`, or nothing for `""` (for an
/// object whose keys already carry their own prefixes).
pub(crate) fn prefix_of(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!("{name}.")
    }
}
const FORMAT: &str = "flaxen-checkpoint";
const VERSION: &str = "1";

impl Checkpoint {
    /// An empty checkpoint of training step `step`.
    pub fn new(step: u64) -> Self {
        Self {
            step,
            tensors: BTreeMap::new(),
            path: PathBuf::from("<memory>"),
        }
    }

    /// The training step.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The file this checkpoint was read from or last written to
    /// (`<memory>` otherwise).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All tensor keys except `step`, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The shape of tensor `key`, if present.
    pub fn shape(&self, key: &str) -> Option<&[usize]> {
        self.tensors.get(key).map(|t| t.shape.as_slice())
    }

    /// Adds every tensor of `state` under `name.` (e.g. `"opt"` gives keys
    /// `opt.<...>`). With `name = ""` the keys are the object's own, for a
    /// state (such as a whole training state) that prefixes its parts itself;
    /// `step` is reserved.
    ///
    /// ```
    /// use flaxen_runtime::checkpoint::Checkpoint;
    /// use flaxen_runtime::state::{HostTensor, StateDict, StateError, StateMap};
    ///
    /// struct Counter(u64);
    /// impl StateDict<u64> for Counter {
    ///     fn save_state(&self, prefix: &str, out: &mut StateMap<u64>) {
    ///         out.insert(format!("{prefix}n"), HostTensor { shape: vec![], data: vec![self.0] });
    ///     }
    ///     fn load_state(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
    ///         let key = format!("{prefix}n");
    ///         self.0 = src.get(&key).ok_or(StateError::Missing { key })?.data[0];
    ///         Ok(())
    ///     }
    /// }
    /// let mut ckpt = Checkpoint::new(0);
    /// ckpt.add("counter", &Counter(5)).unwrap();
    /// assert_eq!(ckpt.keys().collect::<Vec<_>>(), ["counter.n"]);
    /// ```
    ///
    /// The state's counters ([`StateDict::save_counters`], e.g. a
    /// `TrainState`'s `step` and an optimizer's `count`) are stored as exact
    /// U64 scalars, in place of their copies in the state's dtype.
    pub fn add<E: Element, S: StateDict<E> + ?Sized>(
        &mut self,
        name: &str,
        state: &S,
    ) -> Result<&mut Self, CheckpointError> {
        let prefix = prefix_of(name);
        let mut map = StateMap::new();
        state.save_state(&prefix, &mut map);
        let mut counters = StateMap::<u64>::new();
        state.save_counters(&prefix, &mut counters);
        for key in counters.keys() {
            map.remove(key);
        }
        // Check both before inserting either: on `Err` nothing was added.
        let both: Vec<&String> = map.keys().chain(counters.keys()).collect();
        if let Some(key) = both
            .iter()
            .find(|k| self.tensors.contains_key(**k) || **k == STEP_KEY)
        {
            return Err(CheckpointError::Duplicate {
                key: key.to_string(),
            });
        }
        self.insert_map(map)?.insert_map(counters)
    }

    /// Adds every tensor of a dfdx module under `name.<dfdx path>`.
    pub fn add_module<E, D, M>(
        &mut self,
        name: &str,
        module: &M,
    ) -> Result<&mut Self, CheckpointError>
    where
        E: Element + DfdxDtype,
        D: Device<E>,
        M: TensorCollection<E, D>,
    {
        let mut map = StateMap::new();
        save_module_state(module, &prefix_of(name), &mut map);
        self.insert_map(map)
    }

    fn insert_map<E: Element>(&mut self, map: StateMap<E>) -> Result<&mut Self, CheckpointError> {
        if let Some(key) = map
            .keys()
            .find(|k| self.tensors.contains_key(*k) || *k == STEP_KEY)
        {
            return Err(CheckpointError::Duplicate { key: key.clone() });
        }
        if let Some((key, t)) = map
            .iter()
            .find(|(_, t)| t.shape.iter().product::<usize>() != t.data.len())
        {
            return Err(CheckpointError::Invalid {
                key: key.clone(),
                reason: format!("{} values for shape {:?}", t.data.len(), t.shape),
            });
        }
        for (key, t) in map {
            let mut data = Vec::with_capacity(t.data.len() * E::SIZE);
            for v in t.data {
                v.write_le(&mut data);
            }
            let raw = RawTensor {
                dtype: E::dtype(),
                shape: t.shape,
                data,
            };
            self.tensors.insert(key, raw);
        }
        Ok(self)
    }

    /// The tensors under `name.` as element type `E`, keyed like
    /// [`StateDict::save_state`] with prefix `name.`.
    ///
    /// Fails if one of them has another dtype. For `name = ""` it returns
    /// every tensor of dtype `E` and skips the others (a file holds f32
    /// parameters next to u64 data order).
    pub fn part<E: Element>(&self, name: &str) -> Result<StateMap<E>, CheckpointError> {
        self.part_except(name, &StateMap::new())
    }

    /// [`Checkpoint::part`] without the keys of `skip` (a state's counters,
    /// stored as U64 whatever `E` is).
    pub(crate) fn part_except<E: Element>(
        &self,
        name: &str,
        skip: &StateMap<u64>,
    ) -> Result<StateMap<E>, CheckpointError> {
        let prefix = prefix_of(name);
        let mut out = StateMap::new();
        for (key, t) in self.tensors.range(prefix.clone()..) {
            if !key.starts_with(&prefix) {
                break;
            }
            if skip.contains_key(key) {
                continue;
            }
            if prefix.is_empty() && t.dtype != E::dtype() {
                continue;
            }
            if t.dtype != E::dtype() {
                return Err(CheckpointError::Dtype {
                    path: self.path.clone(),
                    key: key.clone(),
                    expected: E::NAME.into(),
                    found: dtype_name(t.dtype),
                });
            }
            let data = t.data.chunks_exact(E::SIZE).map(E::read_le).collect();
            out.insert(
                key.clone(),
                HostTensor {
                    shape: t.shape.clone(),
                    data,
                },
            );
        }
        Ok(out)
    }

    /// Tensor `key` as element type `E`: `None` if absent, a dtype error if
    /// stored with another dtype.
    pub(crate) fn tensor<E: Element>(
        &self,
        key: &str,
    ) -> Option<Result<HostTensor<E>, CheckpointError>> {
        let t = self.tensors.get(key)?;
        if let Some(e) = self.dtype_error::<E>(key) {
            return Some(Err(e));
        }
        let data = t.data.chunks_exact(E::SIZE).map(E::read_le).collect();
        Some(Ok(HostTensor {
            shape: t.shape.clone(),
            data,
        }))
    }

    /// The dtype error for `key`, if the file has it with a dtype other than `E`.
    pub(crate) fn dtype_error<E: Element>(&self, key: &str) -> Option<CheckpointError> {
        let t = self.tensors.get(key)?;
        (t.dtype != E::dtype()).then(|| CheckpointError::Dtype {
            path: self.path.clone(),
            key: key.to_string(),
            expected: E::NAME.into(),
            found: dtype_name(t.dtype),
        })
    }

    /// Starts loading this checkpoint into live objects; see [`Restore`].
    pub fn restore(&self) -> Restore<'_> {
        Restore::new(self)
    }

    fn checksum(&self) -> u32 {
        format::checksum(self.step, &self.tensors)
    }

    /// Fails, naming the tensor, if a floating-point tensor holds NaN or
    /// ±infinity. [`Checkpoint::save`] and [`Checkpoint::load`] call it.
    ///
    /// ```
    /// use flaxen_runtime::checkpoint::Checkpoint;
    /// use flaxen_runtime::dfdx::prelude::*;
    ///
    /// let dev = Cpu::default();
    /// let mut model = dev.build_module::<Linear<2, 3>, f32>();
    /// model.bias.copy_from(&[0.0, f32::NAN, 0.0]);
    /// let mut ckpt = Checkpoint::new(5);
    /// ckpt.add_module("params", &model).unwrap();
    /// let err = ckpt.check_finite().unwrap_err();
    /// assert!(err.to_string().contains("tensor `params.bias` holds NaN or infinity (element 1)"));
    /// ```
    pub fn check_finite(&self) -> Result<(), CheckpointError> {
        for (key, t) in &self.tensors {
            if let Some(index) = format::first_non_finite(t.dtype, &t.data) {
                return Err(CheckpointError::NonFinite {
                    path: self.path.clone(),
                    key: key.clone(),
                    index,
                });
            }
        }
        Ok(())
    }

    /// The safetensors bytes of this checkpoint: never empty, and the same
    /// bytes for equal checkpoints. It does not check values (see
    /// [`Checkpoint::check_finite`]).
    ///
    /// Fails only if a tensor's bytes do not fit its shape, which the `add`
    /// methods already rule out.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CheckpointError> {
        format::to_bytes(self)
    }

    /// Parses safetensors bytes; `path` names the file in errors.
    ///
    /// Fails on a truncated or corrupt file (a checksum mismatch, or a
    /// header without its format, version or checksum entry), a file
    /// without a U64 `step`, or a NaN or infinity in any tensor.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Self, CheckpointError> {
        format::from_bytes(path, bytes)
    }

    /// Writes the checkpoint to `path` atomically (temporary file in the same
    /// directory, fsync, rename, fsync of the directory), after checking
    /// that every value is finite: a diverged state is never written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), CheckpointError> {
        let path = path.as_ref();
        self.check_finite()?;
        let bytes = self.to_bytes()?;
        atomic::write_atomic(path, &bytes).map_err(|error| CheckpointError::Io {
            path: path.to_path_buf(),
            error,
        })
    }

    /// Reads and validates the checkpoint at `path` (see
    /// [`Checkpoint::from_bytes`]).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|error| CheckpointError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        Self::from_bytes(path, &bytes)
    }

    pub(crate) fn mismatch(&self, error: StateError) -> CheckpointError {
        CheckpointError::Mismatch {
            path: self.path.clone(),
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dfdx::prelude::{Cpu, DeviceBuildExt, Linear, ReLU};
    use safetensors::tensor::SafeTensors;
    use safetensors::Dtype;

    /// The file is plain safetensors: the `safetensors` crate itself reads
    /// the documented keys, dtypes and shapes back.
    #[test]
    fn safetensors_crate_reads_the_documented_layout() {
        let dev = Cpu::default();
        let model = dev.build_module::<(Linear<3, 2>, ReLU, Linear<2, 1>), f32>();
        let mut ckpt = Checkpoint::new(9);
        ckpt.add_module("params", &model).unwrap();
        let bytes = ckpt.to_bytes().unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let mut names: Vec<&String> = st.names();
        names.sort();
        assert_eq!(
            names,
            [
                "params.0.bias",
                "params.0.weight",
                "params.2.bias",
                "params.2.weight",
                "step"
            ]
        );
        let step = st.tensor("step").unwrap();
        assert_eq!((step.dtype(), step.shape()), (Dtype::U64, &[][..]));
        assert_eq!(step.data(), &9u64.to_le_bytes());
        let w = st.tensor("params.0.weight").unwrap();
        assert_eq!((w.dtype(), w.shape()), (Dtype::F32, &[2, 3][..]));
        let values: Vec<f32> = w.data().chunks_exact(4).map(f32::read_le).collect();
        assert_eq!(values, model.0.weight.as_vec());
        let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
        let meta = meta.metadata().clone().unwrap();
        assert_eq!(meta["format"], "flaxen-checkpoint");
        assert_eq!(meta["crc32c"].len(), 8);
    }
}
