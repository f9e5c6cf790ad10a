//! `multi_steps`: gradient accumulation (Optax `MultiSteps`).

use std::sync::Arc;

use dfdx::prelude::{Dtype, Gradients, HasShape, Storage, TensorCollection};
use dfdx::tensor_ops::Device;

use super::saved::{load_count, load_counter, load_leaves, save_count, save_counter, save_leaves};
use super::{GradientTransformation, Leaf, LeafInfo, Params, Updates};
use crate::state::{StateDict, StateError, StateMap};

/// Accumulates the mean of `k` successive updates and applies `inner` to it
/// on every `k`-th call; the other calls yield zero updates (Optax
/// `MultiSteps(inner, every_k_schedule=k)` with `use_grad_mean=True`).
///
/// This is gradient accumulation: `k` mini-batches make one optimizer step.
/// It is not the `scan!` loop, which makes `k` steps.
///
/// ```
/// use flaxen_runtime::optim::{adam, multi_steps};
/// let tx = multi_steps(4, adam(1e-3)); // one Adam step per 4 mini-batches
/// # let _ = tx;
/// ```
///
/// # Panics
/// If `k` is 0.
pub fn multi_steps<T>(k: u64, inner: T) -> MultiSteps<T> {
    assert!(k > 0, "multi_steps needs k >= 1");
    MultiSteps { k, inner }
}

/// See [`multi_steps`].
///
/// ```
/// use flaxen_runtime::optim::*;
/// let tx: MultiSteps<Adam<f64>> = multi_steps(4, adam(1e-3));
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct MultiSteps<T> {
    k: u64,
    inner: T,
}

/// State of [`MultiSteps`]: `{prefix}mini_step`, `{prefix}gradient_step`,
/// `{prefix}acc_grads.<leaf>` and the inner state under `{prefix}inner.`.
///
/// See [`MultiStepsState::mini_step`] for an example.
#[derive(Debug, Clone)]
pub struct MultiStepsState<S, E, D: Storage<E>> {
    mini_step: u64,
    gradient_step: u64,
    inner: S,
    acc: Vec<Leaf<E, D>>,
    info: Arc<LeafInfo>,
}

impl<S, E, D: Storage<E>> MultiStepsState<S, E, D> {
    /// Mini-steps accumulated since the last inner update.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let s = multi_steps(2, sgd(0.1, None, false)).init_model(&model).unwrap();
    /// assert_eq!((s.mini_step(), s.gradient_step()), (0, 0));
    /// ```
    pub fn mini_step(&self) -> u64 {
        self.mini_step
    }
    /// Inner updates done so far (see [`MultiStepsState::mini_step`]).
    pub fn gradient_step(&self) -> u64 {
        self.gradient_step
    }
    /// The inner transformation's state.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let s = multi_steps(2, adam(1e-3)).init_model(&model).unwrap();
    /// assert_eq!(s.inner().count(), 0);
    /// ```
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<E: Dtype, D: Device<E>, T: GradientTransformation<E, D>> GradientTransformation<E, D>
    for MultiSteps<T>
{
    fn validate(&self, info: &super::LeafInfo) -> Result<(), super::OptimError> {
        self.inner.validate(info)
    }

    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        self.inner.learning_rate(&state.inner)
    }

    type State = MultiStepsState<T::State, E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        let mut acc = Vec::with_capacity(params.len());
        for p in params.leaves() {
            acc.push(p.device().try_zeros_like(p.shape())?);
        }
        Ok(MultiStepsState {
            mini_step: 0,
            gradient_step: 0,
            inner: self.inner.init(params)?,
            acc,
            info: params.info_arc(),
        })
    }

    fn update(
        &self,
        state: &mut Self::State,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        if self.accumulate(state, updates, params)? {
            let mut inner = Updates::from_leaves(take_mean(state)?);
            self.inner.update(&mut state.inner, &mut inner, params)?;
            for i in 0..inner.len() {
                updates.set(i, inner.take(i, params)?);
            }
        } else {
            // Optax yields zero updates between the k-th steps.
            for (i, p) in params.leaves().iter().enumerate() {
                updates.set(i, p.device().try_zeros_like(p.shape())?);
            }
        }
        Ok(())
    }

    fn update_and_apply<M: TensorCollection<E, D>>(
        &self,
        state: &mut Self::State,
        mut updates: Updates<E, D>,
        model: &mut M,
    ) -> Result<Gradients<E, D>, D::Err> {
        let apply = {
            let params = Params::of(model)?;
            self.accumulate(state, &mut updates, &params)?
        };
        if apply {
            let mean = Updates::from_leaves(take_mean(state)?);
            self.inner.update_and_apply(&mut state.inner, mean, model)?;
        }
        // Between the k-th steps the update is zero: nothing to add.
        Ok(updates.into_gradients())
    }
}

impl<T> MultiSteps<T> {
    /// Adds `updates` to the running mean and advances the counters; true
    /// when this is a k-th step (the mean must be applied).
    fn accumulate<E: Dtype, D: Device<E>, S>(
        &self,
        state: &mut MultiStepsState<S, E, D>,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<bool, D::Err> {
        // Running mean, as Optax: acc += (g - acc) / (mini_step + 1).
        let n = state.mini_step as f64 + 1.0;
        for (i, acc) in state.acc.iter_mut().enumerate() {
            let g = updates.take(i, params)?;
            acc.try_axpy(1.0 - 1.0 / n, &g, 1.0 / n)?;
        }
        if state.mini_step + 1 >= self.k {
            state.mini_step = 0;
            state.gradient_step += 1;
            Ok(true)
        } else {
            state.mini_step += 1;
            Ok(false)
        }
    }
}

/// Takes the accumulated mean out of `state`, leaving zeros.
fn take_mean<E: Dtype, D: Device<E>, S>(
    state: &mut MultiStepsState<S, E, D>,
) -> Result<Vec<Leaf<E, D>>, D::Err> {
    let mut fresh = Vec::with_capacity(state.acc.len());
    for a in &state.acc {
        fresh.push(a.device().try_zeros_like(a.shape())?);
    }
    Ok(std::mem::replace(&mut state.acc, fresh))
}

impl<E: Dtype, D: Device<E>, S: StateDict<E> + Clone> StateDict<E> for MultiStepsState<S, E, D> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_count(format!("{prefix}mini_step"), self.mini_step, out);
        save_count(format!("{prefix}gradient_step"), self.gradient_step, out);
        save_leaves(prefix, "acc_grads", &self.acc, &self.info, out);
        self.inner.save_state(&format!("{prefix}inner."), out);
    }

    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let mini_step = load_count(&format!("{prefix}mini_step"), src)?;
        let gradient_step = load_count(&format!("{prefix}gradient_step"), src)?;
        let acc = load_leaves(prefix, "acc_grads", &self.acc, &self.info, src)?;
        let mut inner = self.inner.clone();
        inner.load_state(&format!("{prefix}inner."), src)?;
        *self = MultiStepsState {
            mini_step,
            gradient_step,
            inner,
            acc,
            info: self.info.clone(),
        };
        Ok(())
    }

    fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
        save_counter(format!("{prefix}mini_step"), self.mini_step, out);
        save_counter(format!("{prefix}gradient_step"), self.gradient_step, out);
        self.inner.save_counters(&format!("{prefix}inner."), out);
    }

    fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        let mini_step = load_counter(&format!("{prefix}mini_step"), src)?;
        let gradient_step = load_counter(&format!("{prefix}gradient_step"), src)?;
        let mut inner = self.inner.clone();
        inner.load_counters(&format!("{prefix}inner."), src)?;
        (self.mini_step, self.gradient_step, self.inner) = (mini_step, gradient_step, inner);
        Ok(())
    }
}
