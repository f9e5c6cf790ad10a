//! Flat views of a model's trainable tensors, and the updates computed for
//! them.

use std::sync::Arc;

use dfdx::nn::tensor_collection::{
    RecursiveWalker, TensorCollection, TensorOptions, TensorVisitor, ViewTensorMut, ViewTensorName,
    ViewTensorRef,
};
use dfdx::prelude::{Dtype, Gradients, HasShape, ReshapeTo, Shape, Storage, Tensor};
use dfdx::tensor_ops::{Device, Momentum, SgdConfig, WeightDecay};

/// One trainable tensor of a model, viewed as a flat 1-D tensor.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # let dev: Cpu = Default::default();
/// let leaf: Leaf<f32, Cpu> = dev.zeros_like(&(6,));
/// assert_eq!(leaf.shape().0, 6);
/// ```
///
/// The view shares the parameter's buffer (reshaping a contiguous tensor is
/// free in dfdx) and keeps its id, so it can index the model's
/// [`Gradients`].
pub type Leaf<E, D> = Tensor<(usize,), E, D>;

/// Names and shapes of a model's trainable tensors, in visiting order.
///
/// ```
/// # use flaxen_runtime::optim::LeafInfo;
/// let info = LeafInfo { names: vec!["dense_0.weight".into()], shapes: vec![vec![4, 3]] };
/// assert_eq!(info.names.len(), info.shapes.len());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeafInfo {
    /// Dotted names as dfdx reports them, e.g. `dense_0.weight` or `0.bias`.
    pub names: Vec<String>,
    /// The original (unflattened) shape of each tensor.
    pub shapes: Vec<Vec<usize>>,
}

/// A model's trainable tensors as [`Leaf`] views, with their [`LeafInfo`].
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::optim::Params;
///
/// let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<3, 2>, f32>();
/// let params = Params::of(&model).unwrap();
/// assert_eq!(params.info().names, ["weight", "bias"]);
/// assert_eq!(params.info().shapes, [vec![2, 3], vec![2]]);
/// assert_eq!(params.leaves()[0].shape().0, 6);
/// ```
#[derive(Debug, Clone)]
pub struct Params<E, D: Storage<E>> {
    info: Arc<LeafInfo>,
    leaves: Vec<Leaf<E, D>>,
}

impl<E: Dtype, D: Device<E>> Params<E, D> {
    /// Collects the trainable tensors of `model` (no copy: views share the
    /// buffers).
    pub fn of<M: TensorCollection<E, D>>(model: &M) -> Result<Self, D::Err> {
        let mut op = Collect {
            info: LeafInfo::default(),
            leaves: Vec::new(),
        };
        M::iter_tensors(&mut RecursiveWalker {
            m: (model, String::new()),
            f: &mut op,
        })?;
        Ok(Self {
            info: Arc::new(op.info),
            leaves: op.leaves,
        })
    }

    /// Builds parameters from flat leaves and their names/shapes (for tests
    /// and for optimizers over plain tensors).
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::{LeafInfo, Params};
    /// let dev: Cpu = Default::default();
    /// let w = dev.tensor_from_vec(vec![1.0f32, 2.0], (2,));
    /// let info = LeafInfo { names: vec!["w".into()], shapes: vec![vec![2]] };
    /// let params = Params::from_leaves(info, vec![w]);
    /// assert_eq!(params.len(), 1);
    /// ```
    ///
    /// # Panics
    /// If `info` and `leaves` disagree in length or element counts.
    pub fn from_leaves(info: LeafInfo, leaves: Vec<Leaf<E, D>>) -> Self {
        assert_eq!(info.names.len(), leaves.len(), "one name per leaf");
        assert_eq!(info.shapes.len(), leaves.len(), "one shape per leaf");
        for (shape, leaf) in info.shapes.iter().zip(&leaves) {
            assert_eq!(shape.iter().product::<usize>(), leaf.shape().0);
        }
        Self {
            info: Arc::new(info),
            leaves,
        }
    }
}

impl<E, D: Storage<E>> Params<E, D> {
    /// Number of trainable tensors.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let params = Params::of(&dev.build_module::<Linear<2, 2>, f32>()).unwrap();
    /// assert_eq!((params.len(), params.is_empty()), (2, false));
    /// ```
    pub fn len(&self) -> usize {
        self.leaves.len()
    }
    /// True when the model has no trainable tensor (see [`Params::len`]).
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty()
    }
    /// The flat views, in visiting order.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let params = Params::of(&dev.build_module::<Linear<2, 3>, f32>()).unwrap();
    /// assert_eq!(params.leaves()[1].shape().0, 3); // the bias
    /// ```
    pub fn leaves(&self) -> &[Leaf<E, D>] {
        &self.leaves
    }
    /// Names and shapes of the leaves (see the example on [`Params`]).
    pub fn info(&self) -> &LeafInfo {
        &self.info
    }
    /// Shared handle to the names and shapes (cheap to clone); optimizer
    /// states keep one to name their tensors in checkpoints.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let params = Params::of(&dev.build_module::<Linear<2, 3>, f32>()).unwrap();
    /// assert_eq!(params.info_arc().names[0], "weight");
    /// ```
    pub fn info_arc(&self) -> Arc<LeafInfo> {
        self.info.clone()
    }
}

struct Collect<E, D: Storage<E>> {
    info: LeafInfo,
    leaves: Vec<Leaf<E, D>>,
}

impl<E: Dtype, D: Device<E>> TensorVisitor<E, D> for Collect<E, D> {
    type Viewer = (ViewTensorRef, ViewTensorName);
    type Err = D::Err;
    type E2 = E;
    type D2 = D;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, E, D>,
        (t, name): (&Tensor<S, E, D>, String),
    ) -> Result<Option<Tensor<S, E, D>>, D::Err> {
        if opts.do_gradient_update {
            let n = t.shape().num_elements();
            self.info.names.push(name);
            self.info.shapes.push(t.shape().concrete().into());
            self.leaves.push(t.clone().try_reshape_like(&(n,))?);
        }
        Ok(None)
    }
}

/// The updates being computed for each leaf.
///
/// Initially they are the model's gradients, left where `backward` put them
/// (so a fused optimizer kernel can read them without a copy); a
/// transformation that needs a tensor materialises it with
/// [`Updates::tensor`].
#[derive(Debug)]
pub struct Updates<E, D: Storage<E>> {
    raw: Gradients<E, D>,
    slots: Vec<Option<Leaf<E, D>>>,
}

impl<E: Dtype, D: Device<E>> Updates<E, D> {
    /// Updates that start as the gradients `grads` of `params`.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::{Params, Updates};
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let params = Params::of(&model).unwrap();
    /// let mut updates = Updates::from_gradients(model.alloc_grads(), &params);
    /// assert_eq!(updates.tensor(1, &params).unwrap().as_vec(), [0.0, 0.0]);
    /// ```
    pub fn from_gradients(grads: Gradients<E, D>, params: &Params<E, D>) -> Self {
        Self {
            raw: grads,
            slots: (0..params.len()).map(|_| None).collect(),
        }
    }

    /// Updates given directly as flat tensors, one per leaf.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::Updates;
    /// let dev: Cpu = Default::default();
    /// let updates = Updates::from_leaves(vec![dev.tensor_from_vec(vec![1.0f32], (1,))]);
    /// assert_eq!(updates.len(), 1);
    /// ```
    pub fn from_leaves(leaves: Vec<Leaf<E, D>>) -> Self {
        Self {
            raw: Gradients::leaky(),
            slots: leaves.into_iter().map(Some).collect(),
        }
    }

    /// Number of leaves.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let u: Updates<f32, Cpu> = Updates::from_leaves(vec![dev.zeros_like(&(3,))]);
    /// assert_eq!((u.len(), u.is_empty()), (1, false));
    /// ```
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when there is no leaf (see [`Updates::len`]).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The update of leaf `i` as a tensor (copied out of the gradients the
    /// first time; a gradient that `backward` never touched reads as zeros).
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let params = Params::of(&model).unwrap();
    /// let mut u = Updates::from_gradients(model.alloc_grads(), &params);
    /// u.tensor(0, &params).unwrap().axpy(1.0, &params.leaves()[0], 2.0);
    /// assert_eq!(u.tensor(0, &params).unwrap().as_vec()[0], 2.0 * model.weight.as_vec()[0]);
    /// ```
    pub fn tensor(&mut self, i: usize, params: &Params<E, D>) -> Result<&mut Leaf<E, D>, D::Err> {
        if self.slots[i].is_none() {
            let key = &params.leaves[i];
            self.raw.try_alloc_for(key)?;
            self.slots[i] = Some(self.raw.get(key));
        }
        Ok(self.slots[i].as_mut().expect("materialised above"))
    }

    /// Takes the update of leaf `i` out (see [`Updates::tensor`]); put a new
    /// one back with [`Updates::set`].
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let params = Params::from_leaves(
    ///     LeafInfo { names: vec!["w".into()], shapes: vec![vec![2]] },
    ///     vec![dev.zeros_like(&(2,))],
    /// );
    /// let mut u = Updates::from_leaves(vec![dev.tensor_from_vec(vec![1.0f32, 2.0], (2,))]);
    /// let doubled = u.take(0, &params).unwrap() * 2.0;
    /// u.set(0, doubled);
    /// assert_eq!(u.tensor(0, &params).unwrap().as_vec(), [2.0, 4.0]);
    /// ```
    pub fn take(&mut self, i: usize, params: &Params<E, D>) -> Result<Leaf<E, D>, D::Err> {
        self.tensor(i, params)?;
        Ok(self.slots[i].take().expect("materialised above"))
    }

    /// Replaces the update of leaf `i` (see [`Updates::take`]).
    pub fn set(&mut self, i: usize, update: Leaf<E, D>) {
        self.slots[i] = Some(update);
    }

    /// The update of leaf `i` as a raw device buffer, for dfdx's fused
    /// optimizer kernels. A gradient still in place is borrowed as is;
    /// a tensor is copied into a fresh buffer of `scratch` on the device.
    pub(crate) fn buffer<'a>(
        &'a mut self,
        i: usize,
        params: &Params<E, D>,
        scratch: &'a mut Scratch<E, D>,
    ) -> Result<&'a <D as Storage<E>>::Vec, D::Err> {
        self.buffer_for(i, &params.leaves[i], scratch)
    }

    /// [`Updates::buffer`] with the parameter itself (any shape, same id as
    /// its leaf) as the key into the gradients.
    pub(crate) fn buffer_for<'a, S: Shape>(
        &'a mut self,
        i: usize,
        param: &Tensor<S, E, D>,
        scratch: &'a mut Scratch<E, D>,
    ) -> Result<&'a <D as Storage<E>>::Vec, D::Err> {
        match self.slots[i].as_mut() {
            None => Ok(&*self.raw.get_or_alloc_mut(param)?),
            Some(t) => scratch.copy_of(t),
        }
    }

    /// Gives back the gradient buffers (for reuse by the next backward pass).
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let params = Params::of(&model).unwrap();
    /// let grads = Updates::from_gradients(model.alloc_grads(), &params).into_gradients();
    /// assert_eq!(grads.get(&model.bias).as_vec(), [0.0, 0.0]);
    /// ```
    pub fn into_gradients(self) -> Gradients<E, D> {
        self.raw
    }
}

/// Fresh device buffers for tensors that must be handed to a fused kernel.
pub(crate) struct Scratch<E, D: Storage<E>> {
    zeros: Gradients<E, D>,
    copies: Gradients<E, D>,
}

impl<E: Dtype, D: Device<E>> Scratch<E, D> {
    pub(crate) fn new() -> Self {
        Self {
            zeros: Gradients::leaky(),
            copies: Gradients::leaky(),
        }
    }

    /// Copies `t` into a raw device buffer. dfdx offers no public way to get
    /// a tensor's buffer, so this uses its fused SGD kernel with L2 decay 1,
    /// momentum 0 and a zero gradient on fresh (zeroed) buffers: the
    /// velocity becomes `0 + 1 * t + 0 * 0`, an exact copy, and `t` itself
    /// is left unchanged (`t -= 0 * velocity`) for finite values.
    pub(crate) fn copy_of(
        &mut self,
        t: &mut Leaf<E, D>,
    ) -> Result<&<D as Storage<E>>::Vec, D::Err> {
        // `t` is its own key (a clone would share its buffer and make the
        // kernel copy it first).
        let zero = self.zeros.get_or_alloc_mut(&*t)?;
        let out = self.copies.get_or_alloc_mut(&*t)?;
        COPY.try_update(t, out, zero)?;
        Ok(&*self.copies.get_or_alloc_mut(&*t)?)
    }
}

/// Writes `t` into the buffer of `dst` keyed by `key`, which must not exist
/// yet in `dst` or `zeros` (so both are allocated zeroed here). See
/// [`Scratch::copy_of`]; `t` may be changed only where it is not finite.
pub(crate) fn copy_into<E: Dtype, D: Device<E>>(
    t: &mut Leaf<E, D>,
    key: &Leaf<E, D>,
    zeros: &mut Gradients<E, D>,
    dst: &mut Gradients<E, D>,
) -> Result<(), D::Err> {
    let zero = zeros.get_or_alloc_mut(key)?;
    let out = dst.get_or_alloc_mut(key)?;
    COPY.try_update(t, out, zero)
}

/// dfdx's SGD kernel configured as a copy: `velocity = 0 + 1 * param + 0 * 0`.
const COPY: SgdConfig = SgdConfig {
    lr: 0.0,
    momentum: Some(Momentum::Classic(0.0)),
    weight_decay: Some(WeightDecay::L2(1.0)),
};

/// Adds `updates` to the trainable tensors of `model`, in place
/// (`params += updates`, Optax's `apply_updates`). Parameter ids stay the
/// same, so gradient buffers and optimizer states keep matching them.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// let dev: Cpu = Default::default();
/// let mut model: Tensor<Rank1<2>, f32, Cpu> = dev.tensor([1.0, 2.0]);
/// let update = dev.tensor_from_vec(vec![0.5, -0.5], (2,));
/// apply_updates(&mut model, Updates::from_leaves(vec![update])).unwrap();
/// assert_eq!(model.array(), [1.5, 1.5]);
/// ```
pub fn apply_updates<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    model: &mut M,
    mut updates: Updates<E, D>,
) -> Result<Gradients<E, D>, D::Err> {
    each_param(model, &mut Apply(&mut updates))?;
    Ok(updates.into_gradients())
}

/// Something done to each trainable tensor of a model in turn, with its
/// leaf index.
pub(crate) trait EachParam<E: Dtype, D: Device<E>> {
    fn param<S: Shape>(&mut self, i: usize, p: &mut Tensor<S, E, D>) -> Result<(), D::Err>;
}

/// Runs `f` on the trainable tensors of `model` in leaf order; returns how
/// many there were.
pub(crate) fn each_param<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    model: &mut M,
    f: &mut impl EachParam<E, D>,
) -> Result<usize, D::Err> {
    let mut walker = Indexed { f, i: 0 };
    M::iter_tensors(&mut RecursiveWalker {
        m: model,
        f: &mut walker,
    })?;
    Ok(walker.i)
}

struct Indexed<'a, F> {
    f: &'a mut F,
    i: usize,
}

impl<E: Dtype, D: Device<E>, F: EachParam<E, D>> TensorVisitor<E, D> for Indexed<'_, F> {
    type Viewer = ViewTensorMut;
    type Err = D::Err;
    type E2 = E;
    type D2 = D;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, E, D>,
        p: &mut Tensor<S, E, D>,
    ) -> Result<Option<Tensor<S, E, D>>, D::Err> {
        if opts.do_gradient_update {
            self.f.param(self.i, p)?;
            self.i += 1;
        }
        Ok(None)
    }
}

/// `params += updates`, per tensor.
struct Apply<'a, E, D: Storage<E>>(&'a mut Updates<E, D>);

impl<E: Dtype, D: Device<E>> EachParam<E, D> for Apply<'_, E, D> {
    fn param<S: Shape>(&mut self, i: usize, p: &mut Tensor<S, E, D>) -> Result<(), D::Err> {
        let shape = *p.shape();
        let u = match self.0.slots[i].take() {
            Some(u) => u.try_reshape_like(&shape)?,
            None => {
                self.0.raw.try_alloc_for(p)?;
                self.0.raw.get(p)
            }
        };
        p.try_axpy(1.0, &u, 1.0)
    }
}
