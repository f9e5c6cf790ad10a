//! Optax-style optimizers: composable gradient transformations.
//!
//! A [`GradientTransformation`] turns gradients into *updates* that are then
//! **added** to the parameters (`params += updates`), exactly as in Optax:
//! [`sgd`]`(0.1, None, false)` yields `updates = -0.1 * grads`. Transformations
//! compose with [`chain`], and every learning rate may be a constant or a
//! [`Schedule`](crate::schedule::Schedule).
//!
//! # Leaves
//!
//! A model is seen as the ordered list of its trainable tensors (dfdx's
//! `TensorCollection` order, `do_gradient_update` tensors only), each viewed as
//! a flat 1-D tensor ([`Leaf`]). Reshaping a contiguous dfdx tensor is free
//! (it shares the buffer), so transformations work on any model without
//! knowing its shapes. Names such as `dense_0.weight` are kept for
//! checkpoints.
//!
//! # Primitives, optimizers and where the work happens
//!
//! As in Optax, the optimizers are chains of primitives
//! ([`scale_by_adam`], [`scale_by_rms`], [`scale_by_belief`],
//! [`scale_by_lion`], [`scale_by_rss`], [`scale_by_factored_rms`],
//! [`scale_by_trust_ratio`], [`trace`], [`add_decayed_weights`],
//! [`clip_by_global_norm`], [`scale`], [`scale_by_learning_rate`],
//! [`scale_by_schedule`]): [`adam`] is an [`Alias`] of `scale_by_adam`,
//! `add_decayed_weights` (zero) and `scale_by_learning_rate`, [`lamb`] adds
//! `scale_by_trust_ratio`, and so on. Every primitive is a transformation
//! on its own too. All of them keep their buffers in one state type,
//! [`LeafState`] (the count and named per-leaf buffers), saved and loaded
//! in one place.
//!
//! Every per-parameter computation is a dfdx device op. Where a chain
//! matches one of dfdx's fused optimizer kernels it runs as that kernel (one
//! pass over the parameter): `sgd`, `adam`, `adamw` and `rmsprop`; on host
//! buffers (`Cpu`, `f32`/`f64`) `scale_by_adam` and `scale_by_rms` compute
//! Optax's arithmetic in one host pass instead, since dfdx's kernels round
//! Adam's constants `1 - b` as PyTorch does (see
//! [`Adam::pytorch_arithmetic`]) and apply RMSProp's momentum before the
//! learning rate. The fused path gives the primitives' results bit for bit
//! on host buffers. The other primitives use dfdx tensor ops, and
//! `clip_by_global_norm` keeps the norm and the factor as device scalars.
//! Nothing is copied to the host during an update; only the step count
//! (host state) feeds the schedules.
//!
//! Two ways to apply an optimizer:
//! - [`GradientTransformation::update_model`] then [`apply_updates`]: the
//!   Optax model, updates as tensors that any transformation can rewrite;
//! - [`GradientTransformation::apply_model`] (what
//!   [`TrainState`](crate::train_state::TrainState) uses): the same result,
//!   but `sgd`/`adam`/`adamw`/`rmsprop`, alone or last in a [`chain`], run
//!   their kernel directly on the parameters (`examples/bench_optim.rs`
//!   on 824,458 parameters: `adam(..).pytorch_arithmetic(true)` as fast as
//!   dfdx's own Adam; Optax's arithmetic, a host pass then dfdx's SGD
//!   kernel, ≈ 2.2x on the CPU).
//!
//! # Decisions
//!
//! - Sign convention and semantics are Optax's (`params += updates`;
//!   `adamw` decays before the learning-rate scaling; `rmsprop` has `eps`
//!   inside the square root, Optax's default). The `tests/optim_optax.rs`
//!   fixtures from Optax 0.2.8 pass within 1e-5 relative on both paths;
//!   `tests/optim_optax_exact.rs` holds the Adam family, lion and centred
//!   rmsprop in `f32` to Optax's values bit for bit, `f64` to 1e-12.
//! - dfdx offers no public access to a tensor's raw buffer, which its fused
//!   kernels need for the gradient and moments. Moments therefore live in
//!   `Gradients` maps keyed by a per-leaf output tensor that the state owns
//!   (not by the parameter ids, so a state is self-contained); a gradient
//!   that an earlier transformation rewrote is copied into a fresh buffer on
//!   the device (through dfdx's SGD kernel as an exact copy).
//! - Checkpoint keys (unchanged by the move to primitives: an optimizer's
//!   members save side by side under one prefix): `{prefix}count`, `{prefix}mu.<leaf>`,
//!   `{prefix}nu.<leaf>` (`trace.` for sgd; `nu.`, `mu.`, `trace.` for rmsprop;
//!   `v_row.`, `v_col.` or `v.` for adafactor), chain
//!   members under `{prefix}<i>.`, `multi_steps` under `{prefix}mini_step`,
//!   `{prefix}gradient_step`, `{prefix}acc_grads.<leaf>`, `{prefix}inner.`.
//!   `<leaf>` is dfdx's dotted tensor name; tensors keep the parameter's
//!   shape. Counters are scalars of the model's dtype, exact up to 2^24 in
//!   `f32` (2048 in `f16`).
//! - [`masked`], [`multi_transform`] and `adamw(..).`[`mask`](Adam::mask)
//!   select parameters by checkpoint key (`conv_0.weight`); the inner
//!   states exist for the selected parameters only, saved under
//!   `{prefix}inner.` (masked) and `{prefix}<label>.` (multi_transform).
//! - Not provided (Optax options without a fused dfdx kernel): Nesterov
//!   Adam, and a schedule for `multi_steps`' `k`. `scale_by_adam`'s
//!   `eps_root` (and so `lamb`'s) applies on host buffers; dfdx's Adam
//!   kernel (CUDA, `f16`) has none, and says so once on stderr.
//!
//! ```
//! use flaxen_runtime::dfdx::prelude::*;
//! use flaxen_runtime::optim::*;
//!
//! let dev: Cpu = Default::default();
//! let mut model = dev.build_module::<Linear<3, 2>, f32>();
//! let tx = chain((clip_by_global_norm(1.0), adam(1e-3)));
//! let mut opt_state = tx.init_model(&model).unwrap();
//!
//! let x: Tensor<Rank2<4, 3>, f32, _> = dev.sample_normal();
//! let grads = model.forward(x.leaky_trace()).square().mean().backward();
//! let updates = tx.update_model(&mut opt_state, grads, &model).unwrap();
//! apply_updates(&mut model, updates).unwrap();
//! ```

/// Builder methods that set a field reached from `self` by a path of field
/// names and tuple indices (`[0 .0 .b1]`: an [`Alias`]'s first member's
/// `b1`), one per line with its doc.
macro_rules! builders {
    (impl[$($g:tt)*] $T:ty { $( $(#[$doc:meta])* $name:ident: $ty:ty => [$($path:tt)+];)+ }) => {
        impl<$($g)*> $T {
            $(
                $(#[$doc])*
                pub fn $name(mut self, $name: $ty) -> Self {
                    self.$($path)+ = $name;
                    self
                }
            )+
        }
    };
}
pub(crate) use builders;

mod adabelief;
mod adafactor;
mod adagrad;
mod adam;
mod alias;
mod apply_if_finite;
mod chain;
mod exact;
mod fused;
pub(crate) use saved::{load_count, load_counter, save_count, save_counter};
mod lamb;
mod leaves;
mod lion;
mod masked;
mod multi_steps;
mod primitives;
mod rmsprop;
mod saved;
mod sgd;
mod state;
mod transforms;

pub use adabelief::{adabelief, AdaBelief};
pub use adafactor::{adafactor, Adafactor};
pub use adagrad::{adagrad, Adagrad};
pub use adam::{adam, adamw, Adam};
pub use alias::Alias;
pub use apply_if_finite::{apply_if_finite, ApplyIfFinite, ApplyIfFiniteState};
pub use chain::{chain, Chain};
pub use lamb::{lamb, Lamb};
pub use leaves::{apply_updates, Leaf, LeafInfo, Params, Updates};
pub use lion::{lion, Lion};
pub use masked::{
    decay_mask, masked, multi_transform, set_to_zero, Masked, MaskedState, MultiTransform,
    MultiTransformState, OptimError, SetToZero, NO_DECAY_SUFFIXES,
};
pub use multi_steps::{multi_steps, MultiSteps, MultiStepsState};
pub use primitives::*;
pub use rmsprop::{rmsprop, RmsProp};
pub use sgd::{sgd, Sgd};
pub use state::LeafState;
pub use transforms::{identity, Identity};

/// The state of [`adam`] and [`adamw`] (a [`LeafState`]: `count`,
/// `mu.<leaf>`, `nu.<leaf>`).
pub type AdamState<E, D> = LeafState<E, D>;
/// The state of [`sgd`] (a [`LeafState`]: `count`, `trace.<leaf>`).
pub type SgdState<E, D> = LeafState<E, D>;
/// The state of [`rmsprop`] (a [`LeafState`]).
pub type RmsPropState<E, D> = LeafState<E, D>;
/// The state of [`adagrad`] (a [`LeafState`]).
pub type AdagradState<E, D> = LeafState<E, D>;
/// The state of [`adabelief`] (a [`LeafState`]).
pub type AdaBeliefState<E, D> = LeafState<E, D>;
/// The state of [`lamb`] (a [`LeafState`]).
pub type LambState<E, D> = LeafState<E, D>;
/// The state of [`lion`] (a [`LeafState`]).
pub type LionState<E, D> = LeafState<E, D>;
/// The state of [`adafactor`] (a [`LeafState`]).
pub type AdafactorState<E, D> = LeafState<E, D>;

use crate::state::StateDict;
use dfdx::prelude::{Dtype, Gradients, TensorCollection};
use dfdx::tensor_ops::Device;

/// A gradient transformation in the sense of Optax: an `init` that builds the
/// optimizer state for a set of parameters, and an `update` that rewrites the
/// incoming updates (initially the gradients) in place.
///
/// The parameter update is `params += updates` ([`apply_updates`]).
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::optim::*;
///
/// let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 2>, f32>();
/// let tx = sgd(0.1, Some(0.9), false);
/// let params = Params::of(&model).unwrap();
/// let state = tx.init(&params).unwrap();
/// assert_eq!(params.len(), 2);
/// # let _ = state;
/// ```
pub trait GradientTransformation<E: Dtype, D: Device<E>> {
    /// The optimizer state (moments, counters, ...), saved in checkpoints.
    type State: StateDict<E> + Clone + std::fmt::Debug;

    /// Builds the initial state for `params`.
    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err>;

    /// Transforms `updates` in place, advancing `state`.
    fn update(
        &self,
        state: &mut Self::State,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err>;

    /// The learning rate of the last update (before any, the first
    /// update's), as a schedule gave it at that update's count: what
    /// Optax's `inject_hyperparams` keeps in its state. `None` for a
    /// transformation without one; a [`chain`] gives its last member's
    /// that has one, and the wrappers ([`apply_if_finite`], [`masked`],
    /// [`multi_steps`]) their inner transformation's.
    ///
    /// ```
    /// use flaxen_runtime::dfdx::prelude::*;
    /// use flaxen_runtime::optim::*;
    /// use flaxen_runtime::schedule::linear;
    ///
    /// let dev: Cpu = Default::default();
    /// let mut model = dev.build_module::<Linear<3, 2>, f32>();
    /// let tx = chain((clip_by_global_norm(1.0), adam(linear(1.0, 0.0, 10))));
    /// let mut state = tx.init_model(&model).unwrap();
    /// assert_eq!(tx.learning_rate(&state), Some(1.0));
    /// for _ in 0..3 {
    ///     let x: Tensor<Rank2<4, 3>, f32, _> = dev.sample_normal();
    ///     let grads = model.forward(x.leaky_trace()).square().mean().backward();
    ///     tx.apply_model(&mut state, grads, &mut model).unwrap();
    /// }
    /// // The third update ran at count 2: 1 - 2 / 10.
    /// assert!((tx.learning_rate(&state).unwrap() - 0.8).abs() < 1e-6);
    /// let clip = clip_by_global_norm(1.0);
    /// assert_eq!(clip.learning_rate(&clip.init_model(&model).unwrap()), None);
    /// ```
    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        let _ = state;
        None
    }

    /// Checks that the transformation can run on parameters with these
    /// names and shapes: a mask that selects nothing
    /// ([`OptimError::EmptyMask`]), a label with no transformation
    /// ([`OptimError::UnknownLabel`]). Combinators check their members.
    /// [`init`](Self::init) does not check; [`try_init`](Self::try_init)
    /// does. Default: nothing to check.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let params = Params::of(&dev.build_module::<Linear<2, 2>, f32>()).unwrap();
    /// let tx = chain((masked(add_decayed_weights(1e-4), |k: &str| k == "kernel"), sgd(0.1, None, false)));
    /// let err = GradientTransformation::<f32, Cpu>::validate(&tx, params.info()).unwrap_err();
    /// assert!(matches!(err, OptimError::EmptyMask { .. }));
    /// ```
    fn validate(&self, _info: &LeafInfo) -> Result<(), OptimError> {
        Ok(())
    }

    /// [`validate`](Self::validate) then [`init`](Self::init), with a
    /// device failure as [`OptimError::Device`].
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let params = Params::of(&dev.build_module::<Linear<2, 2>, f32>()).unwrap();
    /// let state = masked(adam(1e-3), decay_mask).try_init(&params).unwrap();
    /// # let _ = state;
    /// ```
    fn try_init(&self, params: &Params<E, D>) -> Result<Self::State, OptimError> {
        self.validate(params.info())?;
        self.init(params)
            .map_err(|e| OptimError::Device(e.to_string()))
    }

    /// [`try_init`](Self::try_init) for a whole dfdx model.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let state = adamw(1e-3, 1e-4).mask(decay_mask).try_init_model(&model).unwrap();
    /// assert_eq!(state.count(), 0);
    /// ```
    fn try_init_model<M: TensorCollection<E, D>>(
        &self,
        model: &M,
    ) -> Result<Self::State, OptimError> {
        let params = Params::of(model).map_err(|e| OptimError::Device(e.to_string()))?;
        self.try_init(&params)
    }

    /// [`init`](Self::init) for a whole dfdx model.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let state = adam(1e-3).init_model(&model).unwrap();
    /// assert_eq!(state.count(), 0);
    /// ```
    fn init_model<M: TensorCollection<E, D>>(&self, model: &M) -> Result<Self::State, D::Err> {
        self.init(&Params::of(model)?)
    }

    /// [`update`](Self::update) for a whole dfdx model: turns the gradients
    /// of `model` into updates, ready for [`apply_updates`].
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let mut model = dev.build_module::<Linear<2, 2>, f32>();
    /// let tx = sgd(0.1, None, false);
    /// let mut state = tx.init_model(&model).unwrap();
    /// let grads = model.alloc_grads(); // all zeros
    /// let updates = tx.update_model(&mut state, grads, &model).unwrap();
    /// apply_updates(&mut model, updates).unwrap();
    /// ```
    fn update_model<M: TensorCollection<E, D>>(
        &self,
        state: &mut Self::State,
        grads: Gradients<E, D>,
        model: &M,
    ) -> Result<Updates<E, D>, D::Err> {
        let params = Params::of(model)?;
        let mut updates = Updates::from_gradients(grads, &params);
        self.update(state, &mut updates, &params)?;
        Ok(updates)
    }

    /// [`update_model`](Self::update_model) followed by [`apply_updates`]:
    /// updates `model` in place and gives the gradient buffers back for
    /// reuse.
    ///
    /// `sgd`, `adam`, `adamw` and `rmsprop` run dfdx's fused kernel directly
    /// on the parameters here (one pass per tensor, the cost of dfdx's own
    /// optimizers), also as the last member of a [`chain`]; `multi_steps`
    /// leaves the parameters untouched on its accumulation steps. The result
    /// equals the two-step path bit for bit on host buffers (`Cpu`,
    /// `f32`/`f64`); with dfdx's kernels (CUDA, `f16`) `adamw` folds its
    /// decay into the kernel, which rounds differently.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let mut model = dev.build_module::<Linear<2, 2>, f32>();
    /// let tx = chain((clip_by_global_norm(1.0), adam(1e-3)));
    /// let mut state = tx.init_model(&model).unwrap();
    /// let grads = model.alloc_grads();
    /// let grads = tx.apply_model(&mut state, grads, &mut model).unwrap();
    /// # let _ = grads;
    /// ```
    fn apply_model<M: TensorCollection<E, D>>(
        &self,
        state: &mut Self::State,
        grads: Gradients<E, D>,
        model: &mut M,
    ) -> Result<Gradients<E, D>, D::Err> {
        let updates = Updates::from_gradients(grads, &Params::of(model)?);
        self.update_and_apply(state, updates, model)
    }

    /// Transforms `updates` and adds them to `model`
    /// ([`apply_model`](Self::apply_model) starting from any updates).
    /// Returns the gradient buffers the updates started from.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let mut model: Tensor<Rank1<2>, f32, Cpu> = dev.tensor([1.0, 1.0]);
    /// let tx = sgd(0.5, None, false);
    /// let mut state = tx.init_model(&model).unwrap();
    /// let g = Updates::from_leaves(vec![dev.tensor_from_vec(vec![1.0, -1.0], (2,))]);
    /// tx.update_and_apply(&mut state, g, &mut model).unwrap();
    /// assert_eq!(model.array(), [0.5, 1.5]);
    /// ```
    fn update_and_apply<M: TensorCollection<E, D>>(
        &self,
        state: &mut Self::State,
        mut updates: Updates<E, D>,
        model: &mut M,
    ) -> Result<Gradients<E, D>, D::Err> {
        // The parameter views must be gone before the in-place update, or
        // every parameter would be copied first.
        {
            let params = Params::of(model)?;
            self.update(state, &mut updates, &params)?;
        }
        apply_updates(model, updates)
    }
}
