//! A module's tensors from a plain safetensors file, keyed by dfdx's paths
//! (what `model.save_safetensors(path)` or another tool wrote), without
//! touching the module's settings.
//!
//! dfdx's own `load_safetensors` also reads the settings a module exposes
//! as scalars (`LayerNorm1D`'s epsilon, `BatchNorm`'s momentum), and sets
//! each one the file lacks to dfdx's default: a file written by another
//! tool silently turns a Flax LayerNorm's epsilon of 1e-6 into 1e-5. Here
//! settings are the model's: only tensors are read.

use std::path::Path;

use super::element::dtype_name;
use super::{load_module_state, CheckpointError, Element};
use crate::dfdx::nn::tensor_collection::TensorCollection;
use crate::dfdx::prelude::{Device, Dtype};
use crate::state::{HostTensor, StateMap};

/// Loads the tensors of the safetensors file at `path` into `module`, by
/// dfdx's keys (`conv_0.weight`, `res_block_0.dense_1.bias`).
///
/// Every tensor of the module must be in the file with its shape and the
/// module's dtype, and every tensor of the file in the module; on `Err`
/// the module is unchanged. Rank-0 entries (the settings dfdx's
/// `save_safetensors` writes next to the tensors) are skipped: settings
/// such as a LayerNorm's epsilon stay what the model says, whether the file
/// holds them or not.
///
/// ```
/// use flaxen_runtime::checkpoint::load_safetensors;
/// use flaxen_runtime::dfdx::prelude::*;
///
/// let dev = Cpu::default();
/// let a = dev.build_module::<(Linear<3, 4>, LayerNorm1D<4>), f32>();
/// let path = std::env::temp_dir().join(format!("flaxen-doc-{}.safetensors", std::process::id()));
/// a.save_safetensors(&path).unwrap();
/// let mut b = dev.build_module::<(Linear<3, 4>, LayerNorm1D<4>), f32>();
/// b.1.epsilon = 1e-6;
/// load_safetensors(&mut b, &path).unwrap();
/// assert_eq!(b.0.weight.array(), a.0.weight.array());
/// assert_eq!(b.1.epsilon, 1e-6); // dfdx's `load_safetensors` would set 1e-5
/// std::fs::remove_file(&path).unwrap();
/// ```
pub fn load_safetensors<E, D, M>(
    module: &mut M,
    path: impl AsRef<Path>,
) -> Result<(), CheckpointError>
where
    E: Dtype + Element,
    D: Device<E>,
    M: TensorCollection<E, D>,
{
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|error| CheckpointError::Io {
        path: path.into(),
        error,
    })?;
    let file =
        safetensors::SafeTensors::deserialize(&bytes).map_err(|e| CheckpointError::Corrupt {
            path: path.into(),
            reason: format!("not a safetensors file: {e:?}"),
        })?;
    let mut state = StateMap::new();
    for (key, view) in file.tensors() {
        if view.shape().is_empty() {
            continue;
        }
        if view.dtype() != E::dtype() {
            return Err(CheckpointError::Dtype {
                path: path.into(),
                key,
                expected: E::NAME.into(),
                found: dtype_name(view.dtype()),
            });
        }
        let data = view.data().chunks_exact(E::SIZE).map(E::read_le).collect();
        let shape = view.shape().to_vec();
        state.insert(key, HostTensor { shape, data });
    }
    load_module_state(module, "", &state).map_err(|error| CheckpointError::Mismatch {
        path: path.into(),
        error,
    })
}
