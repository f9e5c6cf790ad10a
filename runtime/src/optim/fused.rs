//! Shared machinery of the optimizers that run dfdx's fused kernels
//! (`sgd`, `adam`, `adamw`, `rmsprop`).
//!
//! dfdx's kernels read the gradient and the moments as raw device buffers
//! and write the result into a tensor. Each leaf therefore owns an output
//! tensor (zeroed before each step, so the kernel's `param -= step` leaves
//! exactly `-step`, the Optax update) and its moment buffers live in
//! [`Gradients`] maps keyed by that output tensor's id.

use std::sync::Arc;

use dfdx::prelude::{Dtype, Gradients, HasShape, Storage};
use dfdx::tensor_ops::Device;

use super::leaves::{copy_into, Leaf, LeafInfo, Params, Scratch, Updates};
use crate::state::{HostTensor, StateError, StateMap};

/// Per-leaf output tensors and moment buffers.
#[derive(Debug, Clone)]
pub(crate) struct Buffers<E, D: Storage<E>> {
    info: Arc<LeafInfo>,
    out: Vec<Leaf<E, D>>,
    /// Names under which the first `bufs.len() - unsaved` maps are saved.
    names: &'static [&'static str],
    bufs: Vec<Gradients<E, D>>,
}

impl<E: Dtype, D: Device<E>> Buffers<E, D> {
    /// `names` are saved in checkpoints; `unsaved` more zero buffers per leaf
    /// exist only because a kernel needs them (e.g. rmsprop's momentum).
    pub(crate) fn new(
        params: &Params<E, D>,
        names: &'static [&'static str],
        unsaved: usize,
    ) -> Result<Self, D::Err> {
        let mut out = Vec::with_capacity(params.len());
        for leaf in params.leaves() {
            out.push(leaf.device().try_zeros_like(leaf.shape())?);
        }
        let mut bufs = Vec::new();
        for _ in 0..names.len() + unsaved {
            let mut g = Gradients::leaky();
            for o in &out {
                g.try_alloc_for(o)?;
            }
            bufs.push(g);
        }
        Ok(Self {
            info: params.info_arc(),
            out,
            names,
            bufs,
        })
    }

    /// Runs `kernel(out, moments, grad)` for every leaf, with `out` zeroed
    /// first, and makes `out` the leaf's update.
    pub(crate) fn step<F>(
        &mut self,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
        mut kernel: F,
    ) -> Result<(), D::Err>
    where
        F: FnMut(usize, &mut Leaf<E, D>, &mut [&mut <D as Storage<E>>::Vec], &<D as Storage<E>>::Vec) -> Result<(), D::Err>,
    {
        assert_eq!(self.out.len(), params.len(), "optimizer state built for another model");
        let mut scratch = Scratch::new();
        for i in 0..self.out.len() {
            // The previous update was applied and dropped, so this is in place.
            self.out[i].try_fill_with_zeros()?;
            let key = &self.out[i];
            let mut moments = Vec::with_capacity(self.bufs.len());
            for b in self.bufs.iter_mut() {
                moments.push(b.get_or_alloc_mut(key)?);
            }
            let g = updates.buffer(i, params, &mut scratch)?;
            kernel(i, &mut self.out[i], &mut moments, g)?;
            updates.set(i, self.out[i].clone());
        }
        Ok(())
    }

    /// Saves the named moments as `{prefix}{name}.{leaf}` with the leaf's
    /// original shape.
    pub(crate) fn save(&self, prefix: &str, out: &mut StateMap<E>) {
        for (name, buf) in self.names.iter().zip(&self.bufs) {
            for (i, key) in self.out.iter().enumerate() {
                out.insert(
                    format!("{prefix}{name}.{}", self.info.names[i]),
                    HostTensor {
                        shape: self.info.shapes[i].clone(),
                        data: buf.get(key).as_vec(),
                    },
                );
            }
        }
    }

    /// Validates and converts the named moments of `src`; nothing changes
    /// until [`Buffers::commit`].
    pub(crate) fn prepare(&self, prefix: &str, src: &StateMap<E>) -> Result<Vec<Gradients<E, D>>, StateError> {
        let mut fresh = Vec::new();
        for name in self.names {
            let mut found = Vec::new();
            for (i, shape) in self.info.shapes.iter().enumerate() {
                let key = format!("{prefix}{name}.{}", self.info.names[i]);
                found.push(lookup(src, &key, shape)?);
            }
            let mut g = Gradients::leaky();
            let mut zeros = Gradients::leaky();
            for (key, host) in self.out.iter().zip(found) {
                let mut t = key
                    .device()
                    .tensor_from_vec(host.data.clone(), *key.shape());
                copy_into(&mut t, key, &mut zeros, &mut g).map_err(|e| StateError::Invalid {
                    key: format!("{prefix}{name}"),
                    reason: format!("device error: {e}"),
                })?;
            }
            fresh.push(g);
        }
        Ok(fresh)
    }

    /// Installs buffers returned by [`Buffers::prepare`].
    pub(crate) fn commit(&mut self, fresh: Vec<Gradients<E, D>>) {
        for (dst, src) in self.bufs.iter_mut().zip(fresh) {
            *dst = src;
        }
    }
}

/// Looks `key` up in `src` and checks its shape.
pub(crate) fn lookup<'a, E>(
    src: &'a StateMap<E>,
    key: &str,
    shape: &[usize],
) -> Result<&'a HostTensor<E>, StateError> {
    let t = src.get(key).ok_or_else(|| StateError::Missing { key: key.into() })?;
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
