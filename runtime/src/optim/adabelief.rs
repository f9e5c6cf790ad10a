//! `adabelief` (Optax `adabelief`: `scale_by_belief` then the learning
//! rate).

use crate::dtype::scalar;
use std::sync::Arc;

use dfdx::prelude::{Dtype, HasShape, Storage};
use dfdx::tensor_ops::{Device, TryAdd, TryDiv, TryMul, TrySub};

use super::saved::{load_count, load_counter, load_leaves, save_count, save_counter, save_leaves};
use super::{GradientTransformation, Leaf, LeafInfo, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

/// AdaBelief as Optax's `adabelief(learning_rate, b1=0.9, b2=0.999,
/// eps=1e-16, eps_root=1e-16, nesterov=False)`:
///
/// - `mu = (1 - b1) g + b1 mu`,
/// - `nu = (1 - b2) (g - mu)² + b2 nu + eps_root` (`eps_root` is added
///   to the stored `nu`, inside the square root),
/// - `updates = -lr * m̂ / (sqrt(nu / (1 - b2^t)) + eps)` (`eps` outside
///   the square root), with `m̂ = mu / (1 - b1^t)`, or with
///   [`nesterov`](AdaBelief::nesterov) `m̂ = b1 mu / (1 - b1^(t+1)) +
///   (1 - b1) g / (1 - b1^t)`.
///
/// `lr` is a constant or a [`Schedule`] evaluated at the update count (0
/// for the first update). As in Optax without `jax_enable_x64`, the weights
/// `1 - b` are computed in `f64` and rounded to the dtype, and the bias
/// corrections `1 - b^t` are computed in the dtype. dfdx has no AdaBelief
/// kernel: the update is a few dfdx tensor ops per leaf, on any device.
///
/// ```
/// use flaxen_runtime::optim::adabelief;
/// let tx = adabelief(1e-3).b1(0.8).b2(0.99).eps(1e-8).eps_root(0.0).nesterov(true);
/// # let _ = tx;
/// ```
pub fn adabelief<L: Schedule>(learning_rate: L) -> AdaBelief<L> {
    AdaBelief {
        learning_rate,
        b1: 0.9,
        b2: 0.999,
        eps: 1e-16,
        eps_root: 1e-16,
        nesterov: false,
    }
}

/// The transformation built by [`adabelief`].
///
/// ```
/// let tx: flaxen_runtime::optim::AdaBelief<f64> = flaxen_runtime::optim::adabelief(1e-3);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct AdaBelief<L> {
    learning_rate: L,
    b1: f64,
    b2: f64,
    eps: f64,
    eps_root: f64,
    nesterov: bool,
}

impl<L> AdaBelief<L> {
    /// Decay rate of the first moment (default 0.9).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adabelief;
    /// let tx = adabelief(1e-3).b1(0.8);
    /// # let _ = tx;
    /// ```
    pub fn b1(mut self, b1: f64) -> Self {
        self.b1 = b1;
        self
    }
    /// Decay rate of the prediction error's second moment (default 0.999).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adabelief;
    /// let tx = adabelief(1e-3).b2(0.99);
    /// # let _ = tx;
    /// ```
    pub fn b2(mut self, b2: f64) -> Self {
        self.b2 = b2;
        self
    }
    /// Added to the root of the second moment, outside the square root
    /// (default 1e-16, Optax's).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adabelief;
    /// let tx = adabelief(1e-3).eps(1e-8);
    /// # let _ = tx;
    /// ```
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
    /// Added to the stored second moment at every step, inside the square
    /// root (default 1e-16, Optax's).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adabelief;
    /// let tx = adabelief(1e-3).eps_root(0.0);
    /// # let _ = tx;
    /// ```
    pub fn eps_root(mut self, eps_root: f64) -> Self {
        self.eps_root = eps_root;
        self
    }
    /// Nesterov momentum (default `false`).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adabelief;
    /// let tx = adabelief(1e-3).nesterov(true);
    /// # let _ = tx;
    /// ```
    pub fn nesterov(mut self, nesterov: bool) -> Self {
        self.nesterov = nesterov;
        self
    }
}

/// State of [`AdaBelief`] (Optax's `ScaleByBeliefState`): the update count
/// and the two moments, saved as `{prefix}count`, `{prefix}mu.<leaf>` and
/// `{prefix}nu.<leaf>`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = adabelief(1e-3).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("", &mut saved);
/// assert_eq!(saved["nu.weight"].shape, [3, 2]);
/// assert_eq!(state.count(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct AdaBeliefState<E, D: Storage<E>> {
    count: u64,
    mu: Vec<Leaf<E, D>>,
    nu: Vec<Leaf<E, D>>,
    info: Arc<LeafInfo>,
}

impl<E, D: Storage<E>> AdaBeliefState<E, D> {
    /// Number of updates done so far.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// assert_eq!(adabelief(1e-3).init_model(&model).unwrap().count(), 0);
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl<E: Dtype, D: Device<E>, L: Schedule> GradientTransformation<E, D> for AdaBelief<L> {
    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        Some(self.learning_rate.value(state.count.saturating_sub(1)))
    }

    type State = AdaBeliefState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        let (mut mu, mut nu) = (Vec::new(), Vec::new());
        for p in params.leaves() {
            mu.push(p.device().try_zeros_like(p.shape())?);
            nu.push(p.device().try_zeros_like(p.shape())?);
        }
        Ok(AdaBeliefState {
            count: 0,
            mu,
            nu,
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
        let t = state.count;
        let cast = scalar::<E>;
        let back = |x: E| x.to_f64().unwrap_or(f64::NAN);
        // `1 - b^t` in the dtype: `b` rounded, its power correctly rounded,
        // and `1 - x` exact in f64 for a dtype value then rounded once.
        let bias = |b: f64, t: u64| cast(1.0 - back(cast(back(cast(b)).powf(t as f64))));
        let (b1, b2) = (cast(self.b1), cast(self.b2));
        let (w1, w2) = (cast(1.0 - self.b1), cast(1.0 - self.b2));
        let (bc1, bc2) = (bias(self.b1, t), bias(self.b2, t));
        for i in 0..state.mu.len() {
            let g = updates.take(i, params)?;
            let mu = g
                .clone()
                .try_mul(w1)?
                .try_add(state.mu[i].clone().try_mul(b1)?)?;
            let err = g.clone().try_sub(mu.clone())?;
            let mut nu = err
                .clone()
                .try_mul(err)?
                .try_mul(w2)?
                .try_add(state.nu[i].clone().try_mul(b2)?)?;
            if self.eps_root != 0.0 {
                nu = nu.try_add(cast(self.eps_root))?;
            }
            let m_hat = if self.nesterov {
                let bc1_next = bias(self.b1, t + 1);
                mu.clone()
                    .try_div(bc1_next)?
                    .try_mul(b1)?
                    .try_add(g.try_div(bc1)?.try_mul(w1)?)?
            } else {
                mu.clone().try_div(bc1)?
            };
            let denom = nu
                .clone()
                .try_div(bc2)?
                .try_sqrt()?
                .try_add(cast(self.eps))?;
            let u = m_hat.try_div(denom)?.try_mul(cast(-lr))?;
            (state.mu[i], state.nu[i]) = (mu, nu);
            updates.set(i, u);
        }
        Ok(())
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for AdaBeliefState<E, D> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_count(format!("{prefix}count"), self.count, out);
        save_leaves(prefix, "mu", &self.mu, &self.info, out);
        save_leaves(prefix, "nu", &self.nu, &self.info, out);
    }

    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let count = load_count(&format!("{prefix}count"), src)?;
        let mu = load_leaves(prefix, "mu", &self.mu, &self.info, src)?;
        let nu = load_leaves(prefix, "nu", &self.nu, &self.info, src)?;
        (self.count, self.mu, self.nu) = (count, mu, nu);
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
