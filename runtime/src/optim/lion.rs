//! `lion` (Optax `lion`).

use crate::dtype::scalar;
use std::sync::Arc;

use dfdx::prelude::{Dtype, HasShape, Storage};
use dfdx::tensor_ops::{Device, TryAdd, TryMul};

use super::saved::{load_count, load_counter, load_leaves, save_count, save_counter, save_leaves};
use super::{GradientTransformation, Leaf, LeafInfo, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

/// Lion as Optax's `lion(learning_rate, b1=0.9, b2=0.99,
/// weight_decay=1e-3)`: `updates = -lr * (sign((1 - b1) g + b1 mu) + wd *
/// params)`, then `mu = (1 - b2) g + b2 mu` (Optax's `scale_by_lion`,
/// `add_decayed_weights`, `scale_by_learning_rate`; no mask).
///
/// dfdx has no Lion kernel, so the update is a few dfdx tensor ops per
/// leaf, on any device; the sign is `clamp(x * 2^100, -1, 1)`, Optax's
/// except for `0 < |x| < 2^-100` (2^-15 in `f16`).
///
/// ```
/// use flaxen_runtime::optim::lion;
/// let tx = lion(1e-4).b1(0.95).b2(0.98).weight_decay(1e-2);
/// # let _ = tx;
/// ```
pub fn lion<L: Schedule>(learning_rate: L) -> Lion<L> {
    Lion {
        learning_rate,
        b1: 0.9,
        b2: 0.99,
        weight_decay: 1e-3,
    }
}

/// The transformation built by [`lion`].
///
/// ```
/// let tx: flaxen_runtime::optim::Lion<f64> = flaxen_runtime::optim::lion(1e-4);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct Lion<L> {
    learning_rate: L,
    b1: f64,
    b2: f64,
    weight_decay: f64,
}

impl<L> Lion<L> {
    /// Weight of the moment in the update's sign (default 0.9).
    ///
    /// ```
    /// # use flaxen_runtime::optim::lion;
    /// let tx = lion(1e-4).b1(0.95);
    /// # let _ = tx;
    /// ```
    pub fn b1(mut self, b1: f64) -> Self {
        self.b1 = b1;
        self
    }
    /// Decay rate of the moment (default 0.99).
    ///
    /// ```
    /// # use flaxen_runtime::optim::lion;
    /// let tx = lion(1e-4).b2(0.98);
    /// # let _ = tx;
    /// ```
    pub fn b2(mut self, b2: f64) -> Self {
        self.b2 = b2;
        self
    }
    /// Decoupled weight decay, added before the learning rate (default
    /// 1e-3, Optax's).
    ///
    /// ```
    /// # use flaxen_runtime::optim::lion;
    /// let tx = lion(1e-4).weight_decay(0.0);
    /// # let _ = tx;
    /// ```
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }
}

/// State of [`Lion`]: the update count and the moment, saved as
/// `{prefix}count` and `{prefix}mu.<leaf>`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = lion(1e-4).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("", &mut saved);
/// assert_eq!(saved["mu.weight"].data, vec![0.0; 6]);
/// assert_eq!(state.count(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct LionState<E, D: Storage<E>> {
    count: u64,
    mu: Vec<Leaf<E, D>>,
    info: Arc<LeafInfo>,
}

impl<E, D: Storage<E>> LionState<E, D> {
    /// Number of updates done so far.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// assert_eq!(lion(1e-4).init_model(&model).unwrap().count(), 0);
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl<E: Dtype, D: Device<E>, L: Schedule> GradientTransformation<E, D> for Lion<L> {
    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        Some(self.learning_rate.value(state.count.saturating_sub(1)))
    }

    type State = LionState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        let mut mu = Vec::with_capacity(params.len());
        for p in params.leaves() {
            mu.push(p.device().try_zeros_like(p.shape())?);
        }
        Ok(LionState {
            count: 0,
            mu,
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
        // sign(x) as clamp(x * 2^100, -1, 1): exact for 0, NaN (kept, as
        // Optax) and |x| >= 2^-100 (2^-15 in f16), in two cheap unary ops
        // (dfdx has no sign op; `choose` between tensors is ~10x slower).
        let big = Some(scalar::<E>(2f64.powi(100)))
            .filter(|b| b.to_f64().is_some_and(f64::is_finite))
            .unwrap_or_else(|| cast(2f64.powi(15)));
        for (i, mu) in state.mu.iter_mut().enumerate() {
            let g = updates.take(i, params)?;
            // Optax's `(1 - b1) * g + b1 * m`, with `1 - b1` from f64.
            let x = g
                .clone()
                .try_mul(cast(1.0 - self.b1))?
                .try_add(mu.clone().try_mul(cast(self.b1))?)?;
            let mut u = x.try_mul(big)?.try_clamp(-1.0, 1.0)?;
            if self.weight_decay != 0.0 {
                u = u.try_add(
                    params.leaves()[i]
                        .clone()
                        .try_mul(cast(self.weight_decay))?,
                )?;
            }
            *mu = g
                .clone()
                .try_mul(cast(1.0 - self.b2))?
                .try_add(mu.clone().try_mul(cast(self.b2))?)?;
            updates.set(i, u.try_mul(cast(-lr))?);
        }
        Ok(())
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for LionState<E, D> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_count(format!("{prefix}count"), self.count, out);
        save_leaves(prefix, "mu", &self.mu, &self.info, out);
    }

    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let count = load_count(&format!("{prefix}count"), src)?;
        let fresh = load_leaves(prefix, "mu", &self.mu, &self.info, src)?;
        (self.count, self.mu) = (count, fresh);
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
