//! Shared machinery of the optimizers that run dfdx's fused kernels
//! (`sgd`, `adam`, `adamw`, `rmsprop`).
//!
//! dfdx's kernels read the gradient and the moments as raw device buffers
//! and write the result into a tensor. Each leaf therefore owns an output
//! tensor (zeroed before each step, so the kernel's `param -= step` leaves
//! exactly `-step`, the Optax update) and its moment buffers live in
//! [`Gradients`] maps keyed by that output tensor's id.

use std::sync::Arc;

use dfdx::nn::tensor_collection::{
    RecursiveWalker, TensorCollection, TensorOptions, TensorVisitor, ViewTensorMut,
};
use dfdx::prelude::{Dtype, Gradients, HasShape, Shape, Storage, Tensor};
use dfdx::tensor_ops::Device;

use super::exact::Held;
use super::leaves::{copy_into, Leaf, LeafInfo, Params, Scratch, Updates};
use super::saved::lookup;
use crate::state::{HostTensor, StateError, StateMap};

/// One of dfdx's fused optimizer kernels with its configuration for this
/// step: `param -= step(grad, moments)`.
pub(crate) trait Kernel<E: Dtype, D: Device<E>> {
    /// `held` is the leaf's [`Held`], for kernels that keep the parameter's
    /// values in a buffer between steps.
    fn run<S: Shape>(
        &self,
        param: &mut Tensor<S, E, D>,
        moments: &mut [&mut <D as Storage<E>>::Vec],
        grad: &<D as Storage<E>>::Vec,
        held: &mut Held,
    ) -> Result<(), D::Err>;
}

/// Per-leaf output tensors and moment buffers.
#[derive(Debug, Clone)]
pub(crate) struct Buffers<E, D: Storage<E>> {
    info: Arc<LeafInfo>,
    out: Vec<Leaf<E, D>>,
    /// Names under which the first `bufs.len() - unsaved` maps are saved.
    names: &'static [&'static str],
    bufs: Vec<Gradients<E, D>>,
    /// Per leaf (see [`Held`]).
    held: Vec<Held>,
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
        let held = out.iter().map(|_| Held::default()).collect();
        Ok(Self {
            info: params.info_arc(),
            out,
            names,
            bufs,
            held,
        })
    }

    /// Runs `kernel` on every leaf with a zeroed `out` as the parameter, so
    /// that `out` ends up as exactly `-step`, then `post(i, out)`, and makes
    /// `out` the leaf's update.
    pub(crate) fn step<K: Kernel<E, D>, F>(
        &mut self,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
        kernel: &K,
        mut post: F,
    ) -> Result<(), D::Err>
    where
        F: FnMut(usize, &mut Leaf<E, D>) -> Result<(), D::Err>,
    {
        assert_eq!(
            self.out.len(),
            params.len(),
            "optimizer state built for another model"
        );
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
            // The kernel's buffers hold this step's values, not the
            // parameter's, from here on.
            self.held[i].clear();
            kernel.run(&mut self.out[i], &mut moments, g, &mut Held::default())?;
            post(i, &mut self.out[i])?;
            updates.set(i, self.out[i].clone());
        }
        Ok(())
    }

    /// Runs `kernel` directly on the parameters of `model` with `updates` as
    /// the gradients (one pass per tensor, as dfdx's own optimizers do). A
    /// gradient that backward never wrote counts as zeros.
    pub(crate) fn apply_in_place<M: TensorCollection<E, D>, K: Kernel<E, D>>(
        &mut self,
        updates: &mut Updates<E, D>,
        model: &mut M,
        kernel: &K,
    ) -> Result<(), D::Err> {
        let mut op = InPlace {
            buffers: self,
            updates,
            scratch: Scratch::new(),
            kernel,
            i: 0,
        };
        M::iter_tensors(&mut RecursiveWalker {
            m: model,
            f: &mut op,
        })?;
        assert_eq!(
            op.i,
            self.out.len(),
            "optimizer state built for another model"
        );
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
    pub(crate) fn prepare(
        &self,
        prefix: &str,
        src: &StateMap<E>,
    ) -> Result<Vec<Gradients<E, D>>, StateError> {
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

struct InPlace<'a, E, D: Storage<E>, K> {
    buffers: &'a mut Buffers<E, D>,
    updates: &'a mut Updates<E, D>,
    scratch: Scratch<E, D>,
    kernel: &'a K,
    i: usize,
}

impl<E: Dtype, D: Device<E>, K: Kernel<E, D>> TensorVisitor<E, D> for InPlace<'_, E, D, K> {
    type Viewer = ViewTensorMut;
    type Err = D::Err;
    type E2 = E;
    type D2 = D;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, E, D>,
        p: &mut Tensor<S, E, D>,
    ) -> Result<Option<Tensor<S, E, D>>, D::Err> {
        if !opts.do_gradient_update {
            return Ok(None);
        }
        let i = self.i;
        let key = &self.buffers.out[i];
        assert_eq!(
            key.shape().0,
            p.shape().num_elements(),
            "optimizer state built for another model"
        );
        self.i += 1;
        let mut moments = Vec::with_capacity(self.buffers.bufs.len());
        for b in self.buffers.bufs.iter_mut() {
            moments.push(b.get_or_alloc_mut(key)?);
        }
        let g = self.updates.buffer_for(i, p, &mut self.scratch)?;
        self.kernel
            .run(p, &mut moments, g, &mut self.buffers.held[i])?;
        Ok(None)
    }
}
