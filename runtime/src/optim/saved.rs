//! How optimizer states are saved and loaded: the lookups and the step
//! counters every optimizer's `StateDict` implementation shares.

use dfdx::prelude::{Dtype, HasShape};
use dfdx::tensor_ops::Device;

use super::leaves::{Leaf, LeafInfo};
use crate::state::{HostTensor, StateError, StateMap};

/// Looks `key` up in `src` and checks its shape.
pub(crate) fn lookup<'a, E>(
    src: &'a StateMap<E>,
    key: &str,
    shape: &[usize],
) -> Result<&'a HostTensor<E>, StateError> {
    let t = src
        .get(key)
        .ok_or_else(|| StateError::Missing { key: key.into() })?;
    if t.shape != shape {
        return Err(StateError::Shape {
            key: key.into(),
            expected: shape.to_vec(),
            found: t.shape.clone(),
        });
    }
    if t.data.len() != shape.iter().product::<usize>() {
        return Err(StateError::Invalid {
            key: key.into(),
            reason: format!("{} values for shape {shape:?}", t.data.len()),
        });
    }
    Ok(t)
}

/// Saves a step counter as a scalar (exact up to 2^24 in `f32`).
pub(crate) fn save_count<E: Dtype>(key: String, count: u64, out: &mut StateMap<E>) {
    out.insert(
        key,
        HostTensor {
            shape: vec![],
            data: vec![E::from_u64(count).expect("count fits the dtype")],
        },
    );
}

/// Saves a step counter exactly, for [`StateDict::save_counters`](crate::state::StateDict::save_counters).
pub(crate) fn save_counter(key: String, count: u64, out: &mut StateMap<u64>) {
    out.insert(
        key,
        HostTensor {
            shape: vec![],
            data: vec![count],
        },
    );
}

/// Reads a counter saved by [`save_counter`].
pub(crate) fn load_counter(key: &str, src: &StateMap<u64>) -> Result<u64, StateError> {
    Ok(lookup(src, key, &[])?.data[0])
}

/// Reads a counter saved by [`save_count`].
pub(crate) fn load_count<E: Dtype>(key: &str, src: &StateMap<E>) -> Result<u64, StateError> {
    let t = lookup(src, key, &[])?;
    let v = t.data[0].to_f64().unwrap_or(f64::NAN);
    if !(v.is_finite() && v >= 0.0 && v.fract() == 0.0) {
        return Err(StateError::Invalid {
            key: key.into(),
            reason: format!("{v} is not a step count"),
        });
    }
    Ok(v as u64)
}

/// Saves one per-leaf buffer of an optimizer (a moment, an accumulator) as
/// `{prefix}{name}.<leaf>`, each in its leaf's original shape.
pub(crate) fn save_leaves<E: Dtype, D: Device<E>>(
    prefix: &str,
    name: &str,
    bufs: &[Leaf<E, D>],
    info: &LeafInfo,
    out: &mut StateMap<E>,
) {
    for (i, buf) in bufs.iter().enumerate() {
        out.insert(
            format!("{prefix}{name}.{}", info.names[i]),
            HostTensor {
                shape: info.shapes[i].clone(),
                data: buf.as_vec(),
            },
        );
    }
}

/// Reads the buffers [`save_leaves`] wrote, checking every shape, into new
/// tensors on the devices of `like`: the caller swaps them in only when
/// everything loaded, so a failed load changes nothing.
pub(crate) fn load_leaves<E: Dtype, D: Device<E>>(
    prefix: &str,
    name: &str,
    like: &[Leaf<E, D>],
    info: &LeafInfo,
    src: &StateMap<E>,
) -> Result<Vec<Leaf<E, D>>, StateError> {
    let mut fresh = Vec::with_capacity(like.len());
    for (i, buf) in like.iter().enumerate() {
        let key = format!("{prefix}{name}.{}", info.names[i]);
        let host = lookup(src, &key, &info.shapes[i])?;
        fresh.push(
            buf.device()
                .tensor_from_vec(host.data.clone(), *buf.shape()),
        );
    }
    Ok(fresh)
}
