//! `adagrad` (Optax `adagrad`).

use crate::dtype::scalar;
use std::sync::Arc;

use dfdx::prelude::{Dtype, HasShape, Storage};
use dfdx::tensor_ops::{Device, TryAdd, TryMul};

use super::saved::{load_count, load_counter, load_leaves, save_count, save_counter, save_leaves};
use super::{GradientTransformation, Leaf, LeafInfo, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

/// Adagrad as Optax's `adagrad(learning_rate, initial_accumulator_value=0.1,
/// eps=1e-7)`: `sum_of_squares += g²`, `updates = -lr * g /
/// sqrt(sum_of_squares + eps)` (Optax's `scale_by_rss` then
/// `scale_by_learning_rate`).
///
/// dfdx has no Adagrad kernel, so the update is a few dfdx tensor ops per
/// leaf, on any device. Optax returns a zero scale where the accumulator
/// is zero; here that only differs with `initial_accumulator_value = 0` and
/// `eps = 0` (then a leaf whose gradients were all zero gets NaN).
///
/// ```
/// use flaxen_runtime::optim::adagrad;
/// let tx = adagrad(1e-2).initial_accumulator_value(0.0).eps(1e-10);
/// # let _ = tx;
/// ```
pub fn adagrad<L: Schedule>(learning_rate: L) -> Adagrad<L> {
    Adagrad {
        learning_rate,
        initial_accumulator_value: 0.1,
        eps: 1e-7,
    }
}

/// The transformation built by [`adagrad`].
///
/// ```
/// let tx: flaxen_runtime::optim::Adagrad<f64> = flaxen_runtime::optim::adagrad(1e-2);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct Adagrad<L> {
    learning_rate: L,
    initial_accumulator_value: f64,
    eps: f64,
}

impl<L> Adagrad<L> {
    /// Starting value of the accumulator (default 0.1).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adagrad;
    /// let tx = adagrad(1e-2).initial_accumulator_value(0.5);
    /// # let _ = tx;
    /// ```
    pub fn initial_accumulator_value(mut self, value: f64) -> Self {
        self.initial_accumulator_value = value;
        self
    }
    /// Added to the accumulator inside the square root (default 1e-7).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adagrad;
    /// let tx = adagrad(1e-2).eps(1e-10);
    /// # let _ = tx;
    /// ```
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
}

/// State of [`Adagrad`]: the update count (for a learning-rate schedule)
/// and the accumulated squared gradients, saved as `{prefix}count` and
/// `{prefix}sum_of_squares.<leaf>`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = adagrad(1e-2).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("", &mut saved);
/// assert_eq!(saved["sum_of_squares.weight"].data, vec![0.1; 6]);
/// assert_eq!(state.count(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct AdagradState<E, D: Storage<E>> {
    count: u64,
    sum_of_squares: Vec<Leaf<E, D>>,
    info: Arc<LeafInfo>,
}

impl<E, D: Storage<E>> AdagradState<E, D> {
    /// Number of updates done so far.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// assert_eq!(adagrad(1e-2).init_model(&model).unwrap().count(), 0);
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl<E: Dtype, D: Device<E>, L: Schedule> GradientTransformation<E, D> for Adagrad<L> {
    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        Some(self.learning_rate.value(state.count.saturating_sub(1)))
    }

    type State = AdagradState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        let init = scalar::<E>(self.initial_accumulator_value);
        let mut sum_of_squares = Vec::with_capacity(params.len());
        for p in params.leaves() {
            sum_of_squares.push(p.device().try_ones_like(p.shape())?.try_mul(init)?);
        }
        Ok(AdagradState {
            count: 0,
            sum_of_squares,
            info: params.info_arc(),
        })
    }

    fn update(
        &self,
        state: &mut Self::State,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        let lr = self.learning_rate.value(state.count);
        state.count += 1;
        let cast = scalar::<E>;
        for (i, sos) in state.sum_of_squares.iter_mut().enumerate() {
            let g = updates.take(i, params)?;
            // Optax's order: `g² + t`, `rsqrt(t + eps) * g`, `* -lr`.
            *sos = g.clone().try_square()?.try_add(sos.clone())?;
            let scale = sos
                .clone()
                .try_add(cast(self.eps))?
                .try_sqrt()?
                .try_recip()?;
            updates.set(i, scale.try_mul(g)?.try_mul(cast(-lr))?);
        }
        Ok(())
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for AdagradState<E, D> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_count(format!("{prefix}count"), self.count, out);
        save_leaves(
            prefix,
            "sum_of_squares",
            &self.sum_of_squares,
            &self.info,
            out,
        );
    }

    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let count = load_count(&format!("{prefix}count"), src)?;
        let fresh = load_leaves(
            prefix,
            "sum_of_squares",
            &self.sum_of_squares,
            &self.info,
            src,
        )?;
        (self.count, self.sum_of_squares) = (count, fresh);
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
