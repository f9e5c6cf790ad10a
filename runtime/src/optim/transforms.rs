//! Small stateless (or count-only) transformations: `identity`, `scale`,
//! `scale_by_schedule`, `add_decayed_weights`.

use crate::dtype::scalar;
use dfdx::prelude::{Dtype, TryMul};
use dfdx::tensor_ops::Device;

use super::saved::{load_count, load_counter, save_count, save_counter};
use super::{GradientTransformation, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

impl<E> StateDict<E> for () {
    fn save_state(&self, _prefix: &str, _out: &mut StateMap<E>) {}
    fn load_state(&mut self, _prefix: &str, _src: &StateMap<E>) -> Result<(), StateError> {
        Ok(())
    }
}

/// Leaves the updates unchanged (Optax `identity`).
///
/// ```
/// use flaxen_runtime::optim::{chain, identity, sgd};
/// let tx = chain((identity(), sgd(0.1, None, false)));
/// # let _ = tx;
/// ```
pub fn identity() -> Identity {
    Identity
}

/// See [`identity`].
///
/// ```
/// let tx = flaxen_runtime::optim::Identity;
/// # let _ = tx;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl<E: Dtype, D: Device<E>> GradientTransformation<E, D> for Identity {
    type State = ();
    fn init(&self, _params: &Params<E, D>) -> Result<(), D::Err> {
        Ok(())
    }
    fn update(&self, _: &mut (), _: &mut Updates<E, D>, _: &Params<E, D>) -> Result<(), D::Err> {
        Ok(())
    }
}

/// Multiplies the updates by a constant (Optax `scale`); `scale(-lr)` after
/// a direction-only transformation turns it into a descent step.
///
/// ```
/// use flaxen_runtime::optim::{chain, clip_by_global_norm, scale};
/// let tx = chain((clip_by_global_norm(1.0), scale(-0.1)));
/// # let _ = tx;
/// ```
pub fn scale(factor: f64) -> Scale {
    Scale(factor)
}

/// See [`scale`].
///
/// ```
/// let tx = flaxen_runtime::optim::Scale(-0.1);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Scale(pub f64);

impl<E: Dtype, D: Device<E>> GradientTransformation<E, D> for Scale {
    type State = ();
    fn init(&self, _params: &Params<E, D>) -> Result<(), D::Err> {
        Ok(())
    }
    fn update(
        &self,
        _: &mut (),
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        scale_all(updates, params, self.0)
    }
}

/// Multiplies every update by `factor` (in place when the buffer is not
/// shared).
pub(crate) fn scale_all<E: Dtype, D: Device<E>>(
    updates: &mut Updates<E, D>,
    params: &Params<E, D>,
    factor: f64,
) -> Result<(), D::Err> {
    let f = scalar::<E>(factor);
    for i in 0..updates.len() {
        let u = updates.take(i, params)?;
        updates.set(i, u.try_mul(f)?);
    }
    Ok(())
}

/// Multiplies the updates by `schedule(count)` (Optax `scale_by_schedule`;
/// the count starts at 0). `scale_by_schedule(cosine_decay(-0.1, ..))` is a
/// decaying descent step.
///
/// ```
/// use flaxen_runtime::optim::{chain, scale_by_schedule};
/// use flaxen_runtime::schedule::linear;
/// let tx = scale_by_schedule(linear(-0.1, 0.0, 100));
/// # let _ = tx;
/// ```
pub fn scale_by_schedule<S: Schedule>(schedule: S) -> ScaleBySchedule<S> {
    ScaleBySchedule(schedule)
}

/// See [`scale_by_schedule`].
///
/// ```
/// let tx = flaxen_runtime::optim::ScaleBySchedule(flaxen_runtime::schedule::constant(-0.1));
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct ScaleBySchedule<S>(pub S);

/// A bare update counter (state of [`ScaleBySchedule`]), saved as
/// `{prefix}count`.
///
/// ```
/// # use flaxen_runtime::optim::CountState;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// let mut saved = StateMap::<f32>::new();
/// CountState { count: 7 }.save_state("", &mut saved);
/// assert_eq!(saved["count"].data, [7.0]);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountState {
    /// Updates done so far.
    pub count: u64,
}

impl<E: Dtype> StateDict<E> for CountState {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_count(format!("{prefix}count"), self.count, out);
    }
    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        self.count = load_count(&format!("{prefix}count"), src)?;
        Ok(())
    }
    fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
        save_counter(format!("{prefix}count"), self.count, out);
    }
    fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        self.count = load_counter(&format!("{prefix}count"), src)?;
        Ok(())
    }
}

impl<E: Dtype, D: Device<E>, S: Schedule> GradientTransformation<E, D> for ScaleBySchedule<S> {
    type State = CountState;
    fn init(&self, _params: &Params<E, D>) -> Result<CountState, D::Err> {
        Ok(CountState::default())
    }
    fn update(
        &self,
        state: &mut CountState,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        let factor = self.0.value(state.count);
        state.count += 1;
        scale_all(updates, params, factor)
    }
}

/// Adds `weight_decay * params` to the updates (Optax
/// `add_decayed_weights`, no mask). Placed before the learning-rate
/// scaling it is decoupled weight decay; placed after, it is added as is.
///
/// ```
/// use flaxen_runtime::optim::{add_decayed_weights, adamw, chain};
/// use flaxen_runtime::schedule::cosine_decay;
/// // The seed's optimizer.
/// let tx = chain((adamw(cosine_decay(1e-3, 1000, 0.0), 1e-4), add_decayed_weights(1e-4)));
/// # let _ = tx;
/// ```
pub fn add_decayed_weights(weight_decay: f64) -> AddDecayedWeights {
    AddDecayedWeights(weight_decay)
}

/// See [`add_decayed_weights`].
///
/// ```
/// let tx = flaxen_runtime::optim::AddDecayedWeights(1e-4);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct AddDecayedWeights(pub f64);

impl<E: Dtype, D: Device<E>> GradientTransformation<E, D> for AddDecayedWeights {
    type State = ();
    fn init(&self, _params: &Params<E, D>) -> Result<(), D::Err> {
        Ok(())
    }
    fn update(
        &self,
        _: &mut (),
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        if self.0 == 0.0 {
            return Ok(());
        }
        for (i, p) in params.leaves().iter().enumerate() {
            updates.tensor(i, params)?.try_axpy(1.0, p, self.0)?;
        }
        Ok(())
    }
}
