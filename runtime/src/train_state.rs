//! [`TrainState`]: parameters, optimizer, optimizer state, step counter and
//! reusable gradient buffers, as in Flax's `train_state.TrainState`.
//!
//! ```
//! use flaxen_runtime::dfdx::prelude::*;
//! use flaxen_runtime::losses::softmax_cross_entropy_with_integer_labels;
//! use flaxen_runtime::optim::adam;
//! use flaxen_runtime::train_state::TrainState;
//!
//! type Mlp = (Linear<4, 8>, ReLU, Linear<8, 3>);
//! type State = TrainState<<Mlp as BuildOnDevice<Cpu, f32>>::Built, flaxen_runtime::optim::Adam<f64>, f32, Cpu>;
//! type Batch = (Tensor<Rank2<16, 4>, f32, Cpu>, Tensor<Rank1<16>, usize, Cpu>);
//!
//! fn train_step(mut state: State, (x, y): Batch) -> (State, Tensor<Rank0, f32, Cpu>) {
//!     let (loss, grads) = state
//!         .value_and_grad(|model, tape| {
//!             let logits = model.forward(x.put_tape(tape));
//!             softmax_cross_entropy_with_integer_labels(logits, y).mean()
//!         })
//!         .unwrap();
//!     state.apply_gradients(grads).unwrap();
//!     (state, loss)
//! }
//!
//! let dev: Cpu = Default::default();
//! let mut state = TrainState::create(dev.build_module::<Mlp, f32>(), adam(1e-2)).unwrap();
//! let batch: Batch = (dev.sample_normal(), dev.tensor([0usize, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0]));
//! let (state, loss) = train_step(state, batch);
//! assert_eq!(state.step(), 1);
//! assert!(loss.array().is_finite());
//! ```

use dfdx::nn::tensor_collection::TensorCollection;
use dfdx::prelude::*;
use dfdx::tensor_ops::Device;

use crate::checkpoint::{load_module_state, save_module_state};
use crate::optim::{GradientTransformation, OptimError, Params};
use crate::state::{StateDict, StateError, StateMap};

/// A scalar loss that stays on the device (read it with `.array()` when
/// needed).
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::train_state::Loss;
/// let dev: Cpu = Default::default();
/// let loss: Loss<f32, Cpu> = dev.tensor(0.5);
/// assert_eq!(loss.array(), 0.5);
/// ```
pub type Loss<E, D> = Tensor<Rank0, E, D>;

/// What [`TrainState::value_and_grad`] returns: the loss and the gradients
/// (see the example there).
pub type ValueAndGrad<E, D> = (Loss<E, D>, Gradients<E, D>);

/// Everything that changes during training (see the module example for a
/// whole train step).
///
/// Gradient buffers are allocated once (`alloc_grads`) and reused: each
/// [`value_and_grad`](Self::value_and_grad) zeroes them and backward writes
/// into them, and [`apply_gradients`](Self::apply_gradients) hands them back.
///
/// Parameters are updated in place, so their ids stay valid for the buffers.
/// Replacing `params` wholesale is allowed (the next `value_and_grad`
/// registers the new tensors) as long as the shapes do not change.
#[derive(Debug)]
pub struct TrainState<M, O: GradientTransformation<E, D>, E: Dtype, D: Device<E>> {
    /// The model (its parameters).
    pub params: M,
    /// The gradient transformation (the optimizer).
    pub tx: O,
    /// The optimizer's state.
    pub opt_state: O::State,
    step: u64,
    grads: Option<Gradients<E, D>>,
    dev: D,
}

impl<M, O, E, D> TrainState<M, O, E, D>
where
    M: TensorCollection<E, D>,
    O: GradientTransformation<E, D>,
    E: Dtype,
    D: Device<E>,
{
    /// Builds the state for `params` trained by `tx` (Flax's
    /// `TrainState.create`).
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # use flaxen_runtime::train_state::TrainState;
    /// # let dev: Cpu = Default::default();
    /// let state = TrainState::create(dev.build_module::<Linear<3, 2>, f32>(), sgd(0.1, None, false)).unwrap();
    /// assert_eq!(state.step(), 0);
    /// ```
    ///
    /// # Panics
    /// If the model has no trainable tensor.
    pub fn create(params: M, tx: O) -> Result<Self, D::Err> {
        let p = Params::of(&params)?;
        let dev = p
            .leaves()
            .first()
            .expect("TrainState needs a model with at least one trainable tensor")
            .device()
            .clone();
        let opt_state = tx.init(&p)?;
        drop(p);
        Self::assemble(params, tx, opt_state, dev)
    }

    /// [`create`](Self::create), with the optimizer's settings checked
    /// against the model first (Optax finds these only when a leaf is
    /// missing at update time): a mask that selects no parameter
    /// ([`OptimError::EmptyMask`]), a parameter label with no
    /// transformation ([`OptimError::UnknownLabel`]), a model with no
    /// trainable tensor ([`OptimError::NoParameters`], where `create`
    /// panics); a device failure is [`OptimError::Device`].
    ///
    /// ```
    /// use flaxen_runtime::dfdx::prelude::*;
    /// use flaxen_runtime::optim::*;
    /// use flaxen_runtime::train_state::TrainState;
    ///
    /// let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<3, 2>, f32>();
    /// // A weight-decay mask that matches no key (a Flax name, `kernel`).
    /// let tx = adamw(1e-3, 1e-4).mask(|key| key.ends_with("kernel"));
    /// let err = TrainState::try_create(model, tx).unwrap_err();
    /// assert!(matches!(err, OptimError::EmptyMask { .. }), "{err}");
    ///
    /// let nothing = TrainState::<_, _, f32, Cpu>::try_create(dev.build_module::<ReLU, f32>(), adam(1e-3));
    /// assert!(matches!(nothing, Err(OptimError::NoParameters)));
    ///
    /// let model = dev.build_module::<Linear<3, 2>, f32>();
    /// let tx = adamw(1e-3, 1e-4).mask(|key| key.ends_with("weight"));
    /// assert_eq!(TrainState::try_create(model, tx).unwrap().step(), 0);
    /// ```
    pub fn try_create(params: M, tx: O) -> Result<Self, OptimError> {
        let device = |e: D::Err| OptimError::Device(e.to_string());
        let p = Params::of(&params).map_err(device)?;
        let dev = match p.leaves().first() {
            Some(leaf) => leaf.device().clone(),
            None => return Err(OptimError::NoParameters),
        };
        let opt_state = tx.try_init(&p)?;
        drop(p);
        Self::assemble(params, tx, opt_state, dev).map_err(device)
    }

    fn assemble(params: M, tx: O, opt_state: O::State, dev: D) -> Result<Self, D::Err> {
        let grads = params.try_alloc_grads()?;
        Ok(Self {
            params,
            tx,
            opt_state,
            step: 0,
            grads: Some(grads),
            dev,
        })
    }

    /// Number of [`apply_gradients`](Self::apply_gradients) calls so far
    /// (see the example there).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The learning rate of the last update (before any, of the first), as
    /// the optimizer's schedule gave it
    /// ([`GradientTransformation::learning_rate`]); `None` when the
    /// optimizer has none.
    ///
    /// ```
    /// use flaxen_runtime::dfdx::prelude::*;
    /// use flaxen_runtime::optim::adamw;
    /// use flaxen_runtime::schedule::warmup_cosine_decay;
    /// use flaxen_runtime::train_state::TrainState;
    ///
    /// let dev: Cpu = Default::default();
    /// let schedule = warmup_cosine_decay(0.0, 1e-3, 10, 100, 0.0);
    /// let state = TrainState::create(dev.build_module::<Linear<3, 2>, f32>(), adamw(schedule, 1e-4))
    ///     .unwrap();
    /// assert_eq!(state.learning_rate(), Some(0.0)); // the warm-up starts at 0
    /// ```
    pub fn learning_rate(&self) -> Option<f64> {
        self.tx.learning_rate(&self.opt_state)
    }

    /// Runs `loss_fn(model, tape)` and backpropagates: returns the loss, still
    /// on the device (no sync), and the gradients of every parameter.
    ///
    /// `loss_fn` puts `tape` on its input (`x.put_tape(tape)`) and returns a
    /// scalar loss that carries the tape. The gradient buffers of the state
    /// are zeroed and reused, not reallocated.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # use flaxen_runtime::train_state::TrainState;
    /// # let dev: Cpu = Default::default();
    /// let mut state = TrainState::create(dev.build_module::<Linear<3, 1>, f32>(), adam(1e-3)).unwrap();
    /// let x: Tensor<Rank2<4, 3>, f32, _> = dev.sample_normal();
    /// let (loss, grads) = state
    ///     .value_and_grad(|model, tape| model.forward(x.put_tape(tape)).square().mean())
    ///     .unwrap();
    /// assert!(loss.array() >= 0.0);
    /// assert_eq!(grads.get(&state.params.bias).as_vec().len(), 1);
    /// ```
    pub fn value_and_grad<F>(&mut self, loss_fn: F) -> Result<ValueAndGrad<E, D>, D::Err>
    where
        F: FnOnce(&mut M, OwnedTape<E, D>) -> Tensor<Rank0, E, D, OwnedTape<E, D>>,
    {
        let mut grads = match self.grads.take() {
            Some(g) => g,
            None => self.params.try_alloc_grads()?,
        };
        // Also marks the current parameter ids as leaves, so that their
        // gradients survive backward even if `params` was replaced.
        self.params.try_zero_grads(&mut grads)?;
        let seed: Tensor<Rank0, E, D> = self.dev.try_zeros()?;
        let (_, tape) = seed.traced(grads).split_tape();
        let loss = loss_fn(&mut self.params, tape);
        let value = loss.retaped::<NoneTape>();
        let grads = loss.try_backward()?;
        Ok((value, grads))
    }

    /// Updates the parameters with `grads` through the optimizer
    /// (`params += tx.update(grads)`), advances the step, and keeps the
    /// buffers for the next [`value_and_grad`](Self::value_and_grad).
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # use flaxen_runtime::train_state::TrainState;
    /// # let dev: Cpu = Default::default();
    /// let mut state = TrainState::create(dev.build_module::<Linear<3, 1>, f32>(), sgd(0.1, None, false)).unwrap();
    /// let before = state.params.bias.array();
    /// let x: Tensor<Rank2<4, 3>, f32, _> = dev.ones();
    /// let (_, grads) = state.value_and_grad(|m, tape| m.forward(x.put_tape(tape)).sum()).unwrap();
    /// state.apply_gradients(grads).unwrap();
    /// // d(sum)/d(bias) = 4, so the bias moves by -0.1 * 4.
    /// assert!((state.params.bias.array()[0] - (before[0] - 0.4)).abs() < 1e-6);
    /// assert_eq!(state.step(), 1);
    /// ```
    pub fn apply_gradients(&mut self, grads: Gradients<E, D>) -> Result<(), D::Err> {
        let grads = self
            .tx
            .apply_model(&mut self.opt_state, grads, &mut self.params)?;
        self.grads = Some(grads);
        self.step += 1;
        Ok(())
    }
}

impl<M, O, E, D> StateDict<E> for TrainState<M, O, E, D>
where
    M: TensorCollection<E, D>,
    O: GradientTransformation<E, D>,
    E: Dtype,
    D: Device<E>,
{
    /// Writes `{prefix}params.<tensor>` (every tensor of the model, trainable
    /// or not, by dfdx path: the same code and keys as
    /// [`save_module_state`]), `{prefix}opt.<...>` (the optimizer state) and
    /// `{prefix}step`.
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_module_state(&self.params, &format!("{prefix}params."), out);
        self.opt_state.save_state(&format!("{prefix}opt."), out);
        crate::optim::save_count(format!("{prefix}step"), self.step, out);
    }

    /// Loads what `save_state` wrote. Every tensor of the model must be
    /// present with its shape, and a tensor under `{prefix}params.` that the
    /// model lacks is an error (as for [`load_module_state`], which does
    /// the model's part). On `Err` nothing changed.
    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let step = crate::optim::load_count(&format!("{prefix}step"), src)?;
        let mut opt_state = self.opt_state.clone();
        opt_state.load_state(&format!("{prefix}opt."), src)?;
        // Checks everything before it writes (in place, so the parameter
        // ids the gradient buffers know stay valid); on `Err` the model is
        // untouched, and the optimizer state and step are not yet assigned.
        load_module_state(&mut self.params, &format!("{prefix}params."), src)?;
        self.opt_state = opt_state;
        self.step = step;
        Ok(())
    }

    /// `{prefix}step` and the optimizer state's counters, exact.
    fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
        crate::optim::save_counter(format!("{prefix}step"), self.step, out);
        self.opt_state.save_counters(&format!("{prefix}opt."), out);
    }

    fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        let step = crate::optim::load_counter(&format!("{prefix}step"), src)?;
        let mut opt_state = self.opt_state.clone();
        opt_state.load_counters(&format!("{prefix}opt."), src)?;
        self.opt_state = opt_state;
        self.step = step;
        Ok(())
    }
}
