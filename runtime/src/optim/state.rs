//! [`LeafState`]: the one state of every transformation built from
//! primitives (the step count and named per-leaf buffers), with the one
//! save/load of optimizer buffers.

use std::sync::Arc;

use dfdx::nn::tensor_collection::TensorCollection;
use dfdx::prelude::{Dtype, Gradients, HasShape, Shape, Storage, Tensor};
use dfdx::tensor_ops::{Device, TryAdd};

use super::exact::Held;
use super::fused::Plan;
use super::leaves::{copy_into, each_param, EachParam, Leaf, LeafInfo, Params, Scratch, Updates};
use super::saved::{load_count, load_counter, lookup, save_count, save_counter};
use crate::state::{HostTensor, StateDict, StateError, StateMap};

/// The state of an optimizer built from primitives ([`adam`](super::adam),
/// [`sgd`](super::sgd), [`scale_by_adam`](super::scale_by_adam), ...): the
/// number of updates done and, per primitive, its per-leaf buffers, each
/// saved as `{prefix}{name}.<leaf>` in the shape it has (the parameter's,
/// or a factored one), and the count as `{prefix}count` when a primitive
/// reads it. A chain of primitives built as one optimizer shares one
/// count, as Optax's members' counts always agree.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = adam(1e-3).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("opt.", &mut saved);
/// assert_eq!(saved["opt.mu.weight"].shape, [3, 2]);
/// assert!(saved.contains_key("opt.count"));
/// assert_eq!(state.count(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct LeafState<E, D: Storage<E>> {
    pub(crate) count: u64,
    /// Whether a primitive reads the count (only then is it saved).
    counted: bool,
    info: Arc<LeafInfo>,
    /// Per leaf, the key of the kernels' buffers (zeroed before a step, so
    /// a kernel's `param -= step` leaves exactly `-step` in it).
    keys: Vec<Leaf<E, D>>,
    /// Per leaf (see [`Held`]).
    held: Vec<Held>,
    /// Unsaved buffers a kernel walks (a direction, an unused momentum).
    extra: Vec<Gradients<E, D>>,
    /// One per primitive, in order.
    parts: Vec<Bufs<E, D>>,
}

/// The buffers of one primitive.
#[derive(Debug, Clone)]
pub struct Bufs<E, D: Storage<E>> {
    /// Read by dfdx's fused kernels as raw buffers, keyed by
    /// [`LeafState`]'s keys; each leaf's has the leaf's shape.
    maps: Vec<(&'static str, Gradients<E, D>)>,
    /// Tensors; a leaf may have none, or another shape than its own.
    tensors: Vec<Named<E, D>>,
}

/// A leaf's buffer and the shape it is saved in.
pub(crate) type Shaped<E, D> = (Leaf<E, D>, Vec<usize>);

#[derive(Debug, Clone)]
struct Named<E, D: Storage<E>> {
    name: &'static str,
    leaves: Vec<Option<Shaped<E, D>>>,
}

impl<E, D: Storage<E>> Default for Bufs<E, D> {
    fn default() -> Self {
        Self {
            maps: Vec::new(),
            tensors: Vec::new(),
        }
    }
}

impl<E: Dtype, D: Device<E>> Bufs<E, D> {
    /// Adds a kernel buffer `name` (zeros) for every leaf.
    pub(crate) fn with_map(mut self, name: &'static str) -> Self {
        self.maps.push((name, Gradients::leaky()));
        self
    }

    /// Adds the tensor buffer `name`: per leaf `None` or the buffer and the
    /// shape it is saved in.
    pub(crate) fn with_tensors(
        mut self,
        name: &'static str,
        leaves: Vec<Option<Shaped<E, D>>>,
    ) -> Self {
        self.tensors.push(Named { name, leaves });
        self
    }

    /// Adds the tensor buffer `name` with `fill` for every leaf, in the
    /// leaf's shape.
    pub(crate) fn with_filled(
        self,
        name: &'static str,
        params: &Params<E, D>,
        fill: f64,
    ) -> Result<Self, D::Err> {
        let mut leaves = Vec::with_capacity(params.len());
        for (p, shape) in params.leaves().iter().zip(&params.info().shapes) {
            let t = p.device().try_zeros_like(p.shape())?;
            let t = if fill == 0.0 {
                t
            } else {
                t.try_add(crate::dtype::scalar::<E>(fill))?
            };
            leaves.push(Some((t, shape.clone())));
        }
        Ok(self.with_tensors(name, leaves))
    }

    /// Buffer `k` (in the order added) of leaf `i`.
    pub(crate) fn tensor(&mut self, k: usize, i: usize) -> Option<&mut Leaf<E, D>> {
        self.tensors[k].leaves[i].as_mut().map(|(t, _)| t)
    }

    fn has_maps(&self) -> bool {
        !self.maps.is_empty()
    }
}

impl<E: Dtype, D: Device<E>> LeafState<E, D> {
    /// A state for `params` with one [`Bufs`] per primitive; `extra` more
    /// unsaved kernel buffers; `counted` whether the count is saved.
    pub(crate) fn new(
        params: &Params<E, D>,
        parts: Vec<Bufs<E, D>>,
        extra: usize,
        counted: bool,
    ) -> Result<Self, D::Err> {
        let kernels = extra > 0 || parts.iter().any(Bufs::has_maps);
        let mut keys = Vec::new();
        if kernels {
            for leaf in params.leaves() {
                keys.push(leaf.device().try_zeros_like(leaf.shape())?);
            }
        }
        let mut state = Self {
            count: 0,
            counted,
            info: params.info_arc(),
            held: keys.iter().map(|_| Held::default()).collect(),
            keys,
            extra: (0..extra).map(|_| Gradients::leaky()).collect(),
            parts,
        };
        // Every buffer exists (zeroed) from the start, so that a saved
        // state has all of them.
        let keys = &state.keys;
        for g in state
            .parts
            .iter_mut()
            .flat_map(|p| p.maps.iter_mut().map(|(_, g)| g))
        {
            for k in keys {
                g.try_alloc_for(k)?;
            }
        }
        Ok(state)
    }

    /// The buffers of primitive `k`.
    pub(crate) fn part(&mut self, k: usize) -> &mut Bufs<E, D> {
        &mut self.parts[k]
    }

    /// Runs `kernel` on every leaf over the kernel buffers of primitives
    /// `members` (in order) and the extra ones, with a zeroed key as the
    /// parameter, and makes `-step` the leaf's update.
    pub(crate) fn kernel_step(
        &mut self,
        members: std::ops::Range<usize>,
        kernel: &Plan,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        assert_eq!(
            self.keys.len(),
            params.len(),
            "optimizer state built for another model"
        );
        let mut scratch = Scratch::new();
        for i in 0..self.keys.len() {
            // The previous update was applied and dropped, so this is in place.
            self.keys[i].try_fill_with_zeros()?;
            let key = &self.keys[i];
            let mut moments = moments(&mut self.parts[members.clone()], &mut self.extra, key)?;
            let g = updates.buffer(i, params, &mut scratch)?;
            // The kernel's buffers hold this step's values, not the
            // parameter's, from here on.
            self.held[i].clear();
            kernel.run(&mut self.keys[i], &mut moments, g, &mut Held::default())?;
            updates.set(i, self.keys[i].clone());
        }
        Ok(())
    }

    /// Runs `kernel` directly on the parameters of `model` with `updates`
    /// as the gradients (one pass per tensor, as dfdx's own optimizers
    /// do). A gradient that backward never wrote counts as zeros.
    pub(crate) fn kernel_apply<M: TensorCollection<E, D>>(
        &mut self,
        members: std::ops::Range<usize>,
        kernel: &Plan,
        updates: &mut Updates<E, D>,
        model: &mut M,
    ) -> Result<(), D::Err> {
        let mut op = InPlace {
            state: self,
            members,
            updates,
            scratch: Scratch::new(),
            kernel,
        };
        let n = each_param(model, &mut op)?;
        assert_eq!(
            n,
            self.keys.len(),
            "optimizer state built for another model"
        );
        Ok(())
    }

    /// Every saved buffer: its key, the saved shape and the values.
    fn saved(&self, prefix: &str) -> Vec<(String, Vec<usize>, Vec<E>)> {
        let mut out = Vec::new();
        for part in &self.parts {
            for (name, g) in &part.maps {
                for (i, key) in self.keys.iter().enumerate() {
                    out.push((
                        format!("{prefix}{name}.{}", self.info.names[i]),
                        self.info.shapes[i].clone(),
                        g.get(key).as_vec(),
                    ));
                }
            }
            for n in &part.tensors {
                for (i, leaf) in n.leaves.iter().enumerate() {
                    if let Some((t, shape)) = leaf {
                        out.push((
                            format!("{prefix}{}.{}", n.name, self.info.names[i]),
                            shape.clone(),
                            t.as_vec(),
                        ));
                    }
                }
            }
        }
        out
    }
}

impl<E, D: Storage<E>> LeafState<E, D> {
    /// Number of updates done so far.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// assert_eq!(lion(1e-3).init_model(&model).unwrap().count(), 0);
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for LeafState<E, D> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        if self.counted {
            save_count(format!("{prefix}count"), self.count, out);
        }
        for (key, shape, data) in self.saved(prefix) {
            out.insert(key, HostTensor { shape, data });
        }
    }

    /// Everything is read and checked into a copy first: a failed load
    /// changes nothing.
    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let count = match self.counted {
            true => load_count(&format!("{prefix}count"), src)?,
            false => self.count,
        };
        let mut parts = self.parts.clone();
        let device_err = |key: String| {
            move |e: D::Err| StateError::Invalid {
                key,
                reason: format!("device error: {e}"),
            }
        };
        for part in parts.iter_mut() {
            for (name, g) in part.maps.iter_mut() {
                let mut fresh = Gradients::leaky();
                let mut zeros = Gradients::leaky();
                for (i, key) in self.keys.iter().enumerate() {
                    let k = format!("{prefix}{name}.{}", self.info.names[i]);
                    let host = lookup(src, &k, &self.info.shapes[i])?;
                    let mut t = key
                        .device()
                        .tensor_from_vec(host.data.clone(), *key.shape());
                    copy_into(&mut t, key, &mut zeros, &mut fresh).map_err(device_err(k))?;
                }
                *g = fresh;
            }
            for n in part.tensors.iter_mut() {
                for (i, leaf) in n.leaves.iter_mut().enumerate() {
                    if let Some((t, shape)) = leaf {
                        let k = format!("{prefix}{}.{}", n.name, self.info.names[i]);
                        let host = lookup(src, &k, shape)?;
                        *t = t.device().tensor_from_vec(host.data.clone(), *t.shape());
                    }
                }
            }
        }
        (self.count, self.parts) = (count, parts);
        // The kernels' buffers no longer hold the parameters.
        self.held.iter_mut().for_each(Held::clear);
        Ok(())
    }

    fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
        if self.counted {
            save_counter(format!("{prefix}count"), self.count, out);
        }
    }

    fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        if self.counted {
            self.count = load_counter(&format!("{prefix}count"), src)?;
        }
        Ok(())
    }
}

/// The kernel buffers of primitives `parts` then the extra ones, of the
/// leaf keyed by `key`: what a [`Plan`] walks.
fn moments<'s, E: Dtype, D: Device<E>>(
    parts: &'s mut [Bufs<E, D>],
    extra: &'s mut [Gradients<E, D>],
    key: &Leaf<E, D>,
) -> Result<Vec<&'s mut <D as Storage<E>>::Vec>, D::Err> {
    let mut out = Vec::new();
    for (_, b) in parts.iter_mut().flat_map(|p| p.maps.iter_mut()) {
        out.push(b.get_or_alloc_mut(key)?);
    }
    for b in extra.iter_mut() {
        out.push(b.get_or_alloc_mut(key)?);
    }
    Ok(out)
}

struct InPlace<'a, E, D: Storage<E>> {
    state: &'a mut LeafState<E, D>,
    members: std::ops::Range<usize>,
    updates: &'a mut Updates<E, D>,
    scratch: Scratch<E, D>,
    kernel: &'a Plan,
}

impl<E: Dtype, D: Device<E>> EachParam<E, D> for InPlace<'_, E, D> {
    fn param<S: Shape>(&mut self, i: usize, p: &mut Tensor<S, E, D>) -> Result<(), D::Err> {
        let st = &mut *self.state;
        let key = &st.keys[i];
        assert_eq!(
            key.shape().0,
            p.shape().num_elements(),
            "optimizer state built for another model"
        );
        let mut moments = moments(&mut st.parts[self.members.clone()], &mut st.extra, key)?;
        let g = self.updates.buffer_for(i, p, &mut self.scratch)?;
        self.kernel.run(p, &mut moments, g, &mut st.held[i])
    }
}
