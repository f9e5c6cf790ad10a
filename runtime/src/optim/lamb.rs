//! `lamb` (Optax `lamb`: `scale_by_adam`, `add_decayed_weights`,
//! `scale_by_trust_ratio`, then the learning rate).

use crate::dtype::scalar;
use std::sync::Arc;

use dfdx::prelude::{Dtype, HasShape, Storage, Tensor};
use dfdx::tensor_ops::{BroadcastTo, ChooseFrom, Device, SumTo, TryAdd, TryDiv, TryEq, TryMul};

use super::masked::Mask;
use super::saved::{load_count, load_counter, load_leaves, save_count, save_counter, save_leaves};
use super::{GradientTransformation, Leaf, LeafInfo, OptimError, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

/// LAMB as Optax's `lamb(learning_rate, b1=0.9, b2=0.999, eps=1e-6,
/// eps_root=0.0, weight_decay=0.0, mask=None)`, per parameter tensor:
///
/// - Adam's direction `u = m̂ / (sqrt(v̂ + eps_root) + eps)`, with
///   `mu = (1 - b1) g + b1 mu`, `nu = (1 - b2) g² + b2 nu`,
///   `m̂ = mu / (1 - b1^t)`, `v̂ = nu / (1 - b2^t)`;
/// - the weight decay `u += weight_decay * p` (on the parameters the
///   [`mask`](Lamb::mask) selects, all by default);
/// - the trust ratio `u *= ‖p‖ / ‖u‖` (Euclidean norms of the whole
///   tensor), or `u` unchanged when either norm is zero;
/// - `updates = -lr * u`.
///
/// `lr` is a constant or a [`Schedule`] evaluated at the update count (0
/// for the first update). As in Optax without `jax_enable_x64`, the weights
/// `1 - b` are computed in `f64` and rounded to the dtype, and the bias
/// corrections `1 - b^t` are computed in the dtype. The update is a few
/// dfdx tensor ops per leaf, on any device; the norms and the trust ratio
/// stay on the device.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::optim::*;
///
/// let dev: Cpu = Default::default();
/// let mut model = dev.build_module::<Linear<3, 2>, f32>();
/// let tx = lamb(1e-3).weight_decay(1e-2).mask(decay_mask);
/// let mut state = tx.try_init_model(&model).unwrap();
/// let x: Tensor<Rank2<4, 3>, f32, _> = dev.sample_normal();
/// let grads = model.forward(x.leaky_trace()).square().mean().backward();
/// tx.apply_model(&mut state, grads, &mut model).unwrap();
/// assert_eq!(state.count(), 1);
/// ```
pub fn lamb<L: Schedule>(learning_rate: L) -> Lamb<L> {
    Lamb {
        learning_rate,
        b1: 0.9,
        b2: 0.999,
        eps: 1e-6,
        eps_root: 0.0,
        weight_decay: 0.0,
        mask: None,
    }
}

/// The transformation built by [`lamb`].
///
/// ```
/// let tx: flaxen_runtime::optim::Lamb<f64> = flaxen_runtime::optim::lamb(1e-3);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct Lamb<L> {
    learning_rate: L,
    b1: f64,
    b2: f64,
    eps: f64,
    eps_root: f64,
    weight_decay: f64,
    /// The parameters the weight decay applies to (all when `None`).
    mask: Option<Mask>,
}

impl<L> Lamb<L> {
    /// Decay rate of the first moment (default 0.9).
    ///
    /// ```
    /// # use flaxen_runtime::optim::lamb;
    /// let tx = lamb(1e-3).b1(0.8);
    /// # let _ = tx;
    /// ```
    pub fn b1(mut self, b1: f64) -> Self {
        self.b1 = b1;
        self
    }
    /// Decay rate of the second moment (default 0.999).
    ///
    /// ```
    /// # use flaxen_runtime::optim::lamb;
    /// let tx = lamb(1e-3).b2(0.99);
    /// # let _ = tx;
    /// ```
    pub fn b2(mut self, b2: f64) -> Self {
        self.b2 = b2;
        self
    }
    /// Added to the root of the second moment, outside the square root
    /// (default 1e-6, Optax's).
    ///
    /// ```
    /// # use flaxen_runtime::optim::lamb;
    /// let tx = lamb(1e-3).eps(1e-8);
    /// # let _ = tx;
    /// ```
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
    /// Added to the bias-corrected second moment inside the square root
    /// (default 0, Optax's); it is not stored in the state.
    ///
    /// ```
    /// # use flaxen_runtime::optim::lamb;
    /// let tx = lamb(1e-3).eps_root(1e-8);
    /// # let _ = tx;
    /// ```
    pub fn eps_root(mut self, eps_root: f64) -> Self {
        self.eps_root = eps_root;
        self
    }
    /// Strength of the weight decay added to the direction before the
    /// trust ratio (default 0).
    ///
    /// ```
    /// # use flaxen_runtime::optim::lamb;
    /// let tx = lamb(1e-3).weight_decay(1e-2);
    /// # let _ = tx;
    /// ```
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }
    /// Applies the weight decay only to the parameters whose checkpoint key
    /// `mask` selects (Optax's `lamb(..., mask=...)`); the trust ratio and
    /// the Adam direction still apply to every parameter.
    /// [`decay_mask`](super::decay_mask) leaves out biases and
    /// normalisation scales. A mask that selects nothing is reported by
    /// [`validate`](GradientTransformation::validate) as
    /// [`OptimError::EmptyMask`].
    ///
    /// ```
    /// use flaxen_runtime::optim::{decay_mask, lamb};
    /// let tx = lamb(1e-3).weight_decay(1e-2).mask(decay_mask);
    /// # let _ = tx;
    /// ```
    pub fn mask(mut self, mask: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.mask = Some(Mask::new(mask));
        self
    }

    /// Whether each leaf is decayed.
    fn decayed(&self, info: &LeafInfo) -> Vec<bool> {
        match &self.mask {
            None => vec![true; info.names.len()],
            Some(m) => {
                let sel = m.select(&info.names);
                (0..info.names.len()).map(|i| sel.contains(&i)).collect()
            }
        }
    }
}

/// State of [`Lamb`] (Optax's `ScaleByAdamState`; the other members are
/// stateless): the update count and the two moments, saved as
/// `{prefix}count`, `{prefix}mu.<leaf>` and `{prefix}nu.<leaf>`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = lamb(1e-3).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("", &mut saved);
/// assert_eq!(saved["mu.weight"].shape, [3, 2]);
/// assert_eq!(state.count(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct LambState<E, D: Storage<E>> {
    count: u64,
    mu: Vec<Leaf<E, D>>,
    nu: Vec<Leaf<E, D>>,
    info: Arc<LeafInfo>,
}

impl<E, D: Storage<E>> LambState<E, D> {
    /// Number of updates done so far.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// assert_eq!(lamb(1e-3).init_model(&model).unwrap().count(), 0);
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// Euclidean norm of a leaf, as a device scalar.
fn norm<E: Dtype, D: Device<E>>(x: &Leaf<E, D>) -> Result<Tensor<(), E, D>, D::Err> {
    x.clone().try_square()?.try_sum()?.try_sqrt()
}

impl<E: Dtype, D: Device<E>, L: Schedule> GradientTransformation<E, D> for Lamb<L> {
    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        Some(self.learning_rate.value(state.count.saturating_sub(1)))
    }

    type State = LambState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        let (mut mu, mut nu) = (Vec::new(), Vec::new());
        for p in params.leaves() {
            mu.push(p.device().try_zeros_like(p.shape())?);
            nu.push(p.device().try_zeros_like(p.shape())?);
        }
        Ok(LambState {
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
        let decayed = self.decayed(params.info());
        for (i, &decay) in decayed.iter().enumerate() {
            let g = updates.take(i, params)?;
            let p = &params.leaves()[i];
            let mu = g
                .clone()
                .try_mul(w1)?
                .try_add(state.mu[i].clone().try_mul(b1)?)?;
            let nu = g
                .clone()
                .try_square()?
                .try_mul(w2)?
                .try_add(state.nu[i].clone().try_mul(b2)?)?;
            let mut v_hat = nu.clone().try_div(bc2)?;
            if self.eps_root != 0.0 {
                v_hat = v_hat.try_add(cast(self.eps_root))?;
            }
            let denom = v_hat.try_sqrt()?.try_add(cast(self.eps))?;
            let mut u = mu.clone().try_div(bc1)?.try_div(denom)?;
            if self.weight_decay != 0.0 && decay {
                u = u.try_add(p.clone().try_mul(cast(self.weight_decay))?)?;
            }
            // Optax's scale_by_trust_ratio (min_norm 0, eps 0, coefficient
            // 1): a zero norm leaves the update as it is.
            let (p_norm, u_norm) = (norm(p)?, norm(&u)?);
            let zero = cast(0.0);
            let either_zero = &p_norm.try_eq(zero)? | &u_norm.try_eq(zero)?;
            let ratio = p_norm.clone().try_div(u_norm)?;
            let one = p.device().try_ones_like(&())?;
            let ratio = either_zero
                .try_choose(one, ratio)?
                .try_broadcast_like(u.shape())?;
            let u = u.try_mul(ratio)?.try_mul(cast(-lr))?;
            (state.mu[i], state.nu[i]) = (mu, nu);
            updates.set(i, u);
        }
        Ok(())
    }

    fn validate(&self, info: &LeafInfo) -> Result<(), OptimError> {
        match &self.mask {
            Some(m) => m.check("lamb(..).mask", info),
            None => Ok(()),
        }
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for LambState<E, D> {
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
