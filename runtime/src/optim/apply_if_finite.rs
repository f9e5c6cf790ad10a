//! `apply_if_finite` (Optax `apply_if_finite`): skip an update whose
//! gradients hold NaN or Inf.

use dfdx::prelude::{Dtype, Gradients, HasShape, Rank0, SumTo, TensorCollection};
use dfdx::tensor_ops::{Device, TryAdd, TryMul};

use super::saved::{load_count, load_counter, save_count, save_counter};
use super::{GradientTransformation, Params, Updates};
use crate::state::{StateDict, StateError, StateMap};

/// Optax's `apply_if_finite(inner, max_consecutive_errors)`: when the
/// incoming updates (the gradients) hold a NaN or an Inf, the update is
/// zero and `inner`'s state is left as it was; after more than
/// `max_consecutive_errors` such steps in a row the update goes through
/// anyway (Optax's escape hatch, so that training fails loudly).
///
/// The finiteness test is one device reduction over every leaf (`sum(g *
/// 0)`, NaN exactly when some element is not finite) and one scalar read
/// to the host per update, since whether to run `inner` is a host decision.
///
/// ```
/// use flaxen_runtime::optim::{adam, apply_if_finite};
/// let tx = apply_if_finite(adam(1e-3), 5);
/// # let _ = tx;
/// ```
pub fn apply_if_finite<T>(inner: T, max_consecutive_errors: u64) -> ApplyIfFinite<T> {
    ApplyIfFinite {
        inner,
        max_consecutive_errors,
    }
}

/// The transformation built by [`apply_if_finite`].
///
/// ```
/// use flaxen_runtime::optim::{apply_if_finite, sgd, ApplyIfFinite, Sgd};
/// let tx: ApplyIfFinite<Sgd<f64>> = apply_if_finite(sgd(0.1, None, false), 3);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct ApplyIfFinite<T> {
    inner: T,
    max_consecutive_errors: u64,
}

/// State of [`ApplyIfFinite`], Optax's fields: `notfinite_count` (non-finite
/// steps in a row), `last_finite`, `total_notfinite`, and the inner state,
/// saved as `{prefix}notfinite_count`, `{prefix}last_finite` (1 or 0),
/// `{prefix}total_notfinite` and `{prefix}inner.`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 2>, f32>();
/// let state = apply_if_finite(adam(1e-3), 5).init_model(&model).unwrap();
/// assert_eq!(state.notfinite_count(), 0);
/// assert!(state.last_finite());
/// assert_eq!(state.total_notfinite(), 0);
/// assert_eq!(state.inner().count(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct ApplyIfFiniteState<S> {
    notfinite_count: u64,
    last_finite: bool,
    total_notfinite: u64,
    inner: S,
}

impl<S> ApplyIfFiniteState<S> {
    /// Non-finite updates in a row, up to the last one.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// # let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let state = apply_if_finite(adam(1e-3), 5).init_model(&model).unwrap();
    /// assert_eq!(state.notfinite_count(), 0);
    /// ```
    pub fn notfinite_count(&self) -> u64 {
        self.notfinite_count
    }
    /// Whether the last update was finite (`true` before the first).
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// # let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let state = apply_if_finite(adam(1e-3), 5).init_model(&model).unwrap();
    /// assert!(state.last_finite());
    /// ```
    pub fn last_finite(&self) -> bool {
        self.last_finite
    }
    /// Non-finite updates in total.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// # let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let state = apply_if_finite(adam(1e-3), 5).init_model(&model).unwrap();
    /// assert_eq!(state.total_notfinite(), 0);
    /// ```
    pub fn total_notfinite(&self) -> u64 {
        self.total_notfinite
    }
    /// The inner transformation's state.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// # let model = dev.build_module::<Linear<2, 2>, f32>();
    /// let state = apply_if_finite(adam(1e-3), 5).init_model(&model).unwrap();
    /// assert_eq!(state.inner().count(), 0);
    /// ```
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<E: Dtype, D: Device<E>, T: GradientTransformation<E, D>> GradientTransformation<E, D>
    for ApplyIfFinite<T>
{
    fn validate(&self, info: &super::LeafInfo) -> Result<(), super::OptimError> {
        self.inner.validate(info)
    }

    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        self.inner.learning_rate(&state.inner)
    }

    type State = ApplyIfFiniteState<T::State>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        Ok(ApplyIfFiniteState {
            notfinite_count: 0,
            last_finite: true,
            total_notfinite: 0,
            inner: self.inner.init(params)?,
        })
    }

    fn update(
        &self,
        state: &mut Self::State,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        if self.check(state, updates, params)? {
            return self.inner.update(&mut state.inner, updates, params);
        }
        for (i, p) in params.leaves().iter().enumerate() {
            updates.set(i, p.device().try_zeros_like(p.shape())?);
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
            self.check(state, &mut updates, &params)?
        };
        if apply {
            return self
                .inner
                .update_and_apply(&mut state.inner, updates, model);
        }
        // A rejected update is zero: nothing to add.
        Ok(updates.into_gradients())
    }
}

impl<T> ApplyIfFinite<T> {
    /// Tests the updates, advances the counters as Optax does, and says
    /// whether the inner transformation runs.
    fn check<E: Dtype, D: Device<E>, S>(
        &self,
        state: &mut ApplyIfFiniteState<S>,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<bool, D::Err> {
        let finite = all_finite(updates, params)?;
        if finite {
            state.notfinite_count = 0;
        } else {
            state.notfinite_count = state.notfinite_count.saturating_add(1);
            state.total_notfinite = state.total_notfinite.saturating_add(1);
        }
        state.last_finite = finite;
        Ok(finite || state.notfinite_count > self.max_consecutive_errors)
    }
}

/// Whether every element of every update is finite: `sum(g * 0)` over all
/// leaves is NaN exactly when one is not (`inf * 0` and `nan * 0` are NaN;
/// a sum of finite values could overflow, a sum of zeros cannot).
fn all_finite<E: Dtype, D: Device<E>>(
    updates: &mut Updates<E, D>,
    params: &Params<E, D>,
) -> Result<bool, D::Err> {
    let mut total = None;
    for i in 0..updates.len() {
        let leaf = updates.tensor(i, params)?;
        let s = leaf.clone().try_mul(E::default())?.try_sum::<Rank0, _>()?;
        total = Some(match total {
            None => s,
            Some(t) => s.try_add(t)?,
        });
    }
    Ok(match total {
        None => true,
        Some(t) => t.as_vec()[0].to_f64().is_some_and(f64::is_finite),
    })
}

impl<E: Dtype, S: StateDict<E> + Clone> StateDict<E> for ApplyIfFiniteState<S> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_count(
            format!("{prefix}notfinite_count"),
            self.notfinite_count,
            out,
        );
        save_count(
            format!("{prefix}last_finite"),
            u64::from(self.last_finite),
            out,
        );
        save_count(
            format!("{prefix}total_notfinite"),
            self.total_notfinite,
            out,
        );
        self.inner.save_state(&format!("{prefix}inner."), out);
    }

    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let notfinite_count = load_count(&format!("{prefix}notfinite_count"), src)?;
        let last_finite = load_count(&format!("{prefix}last_finite"), src)?;
        let total_notfinite = load_count(&format!("{prefix}total_notfinite"), src)?;
        let mut inner = self.inner.clone();
        inner.load_state(&format!("{prefix}inner."), src)?;
        *self = ApplyIfFiniteState {
            notfinite_count,
            last_finite: flag(&format!("{prefix}last_finite"), last_finite)?,
            total_notfinite,
            inner,
        };
        Ok(())
    }

    fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
        save_counter(
            format!("{prefix}notfinite_count"),
            self.notfinite_count,
            out,
        );
        save_counter(
            format!("{prefix}last_finite"),
            u64::from(self.last_finite),
            out,
        );
        save_counter(
            format!("{prefix}total_notfinite"),
            self.total_notfinite,
            out,
        );
        self.inner.save_counters(&format!("{prefix}inner."), out);
    }

    fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        let notfinite_count = load_counter(&format!("{prefix}notfinite_count"), src)?;
        let last_finite = load_counter(&format!("{prefix}last_finite"), src)?;
        let total_notfinite = load_counter(&format!("{prefix}total_notfinite"), src)?;
        let last_finite = flag(&format!("{prefix}last_finite"), last_finite)?;
        let mut inner = self.inner.clone();
        inner.load_counters(&format!("{prefix}inner."), src)?;
        (
            self.notfinite_count,
            self.last_finite,
            self.total_notfinite,
            self.inner,
        ) = (notfinite_count, last_finite, total_notfinite, inner);
        Ok(())
    }
}

/// A saved boolean: 0 or 1.
fn flag(key: &str, v: u64) -> Result<bool, StateError> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(StateError::Invalid {
            key: key.into(),
            reason: format!("{v} is not 0 or 1"),
        }),
    }
}
