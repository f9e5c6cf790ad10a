//! `adam` and `adamw` (Optax `adam` / `adamw`).

use dfdx::prelude::{Dtype, Gradients, Shape, Storage, Tensor, TensorCollection};
use dfdx::tensor_ops::{AdamConfig, Device, WeightDecay};

use super::exact::{on_host, run_on_host_param, AdamConsts, AdamStep, Held};
use super::fused::{Buffers, Kernel};
use super::masked::Mask;
use super::saved::{load_count, load_counter, save_count, save_counter};
use super::{apply_updates, GradientTransformation, LeafInfo, OptimError, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

/// Adam with Optax's defaults (`b1 = 0.9`, `b2 = 0.999`, `eps = 1e-8`,
/// `eps_root = 0`): `updates = -lr * m̂ / (sqrt(v̂) + eps)` with
/// `m̂ = m / (1 - b1^t)`, `v̂ = v / (1 - b2^t)`.
///
/// `lr` is a constant or a [`Schedule`] evaluated at the update count
/// (0 for the first update). The arithmetic is Optax's, rounding
/// included: the moment weights `1 - b` are computed in `f64` and rounded to
/// the dtype, the bias corrections `1 - b^t` in the dtype (on `Cpu` in
/// `f32`/`f64`; on other devices and in `f16` the update is dfdx's kernel,
/// see [`Adam::pytorch_arithmetic`]). `eps` is outside the square root, as
/// in Optax and PyTorch.
///
/// ```
/// use flaxen_runtime::optim::adam;
/// let tx = adam(1e-3).b1(0.8).b2(0.99).eps(1e-6);
/// # let _ = tx;
/// ```
pub fn adam<L: Schedule>(learning_rate: L) -> Adam<L> {
    Adam {
        learning_rate,
        b1: 0.9,
        b2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        mask: None,
        pytorch: false,
    }
}

/// AdamW with Optax semantics: `updates = -lr * (adam_direction + wd *
/// params)`, i.e. the decay is added before the learning-rate scaling. It
/// applies to every parameter unless restricted with
/// [`mask`](Adam::mask) (Optax's `mask` argument). Optax's default
/// `weight_decay` is `1e-4`.
///
/// ```
/// use flaxen_runtime::optim::adamw;
/// use flaxen_runtime::schedule::cosine_decay;
/// let tx = adamw(cosine_decay(1e-3, 1000, 0.0), 1e-4);
/// # let _ = tx;
/// ```
pub fn adamw<L: Schedule>(learning_rate: L, weight_decay: f64) -> Adam<L> {
    Adam {
        weight_decay,
        ..adam(learning_rate)
    }
}

/// The transformation built by [`adam`] and [`adamw`].
///
/// ```
/// let tx: flaxen_runtime::optim::Adam<f64> = flaxen_runtime::optim::adamw(1e-3, 1e-4);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct Adam<L> {
    learning_rate: L,
    b1: f64,
    b2: f64,
    eps: f64,
    weight_decay: f64,
    /// The parameters the weight decay applies to (all when `None`).
    mask: Option<Mask>,
    /// dfdx's kernel everywhere (PyTorch's rounding of the constants).
    pytorch: bool,
}

impl<L> Adam<L> {
    /// Decay rate of the first moment (default 0.9).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adam;
    /// let tx = adam(1e-3).b1(0.5);
    /// # let _ = tx;
    /// ```
    pub fn b1(mut self, b1: f64) -> Self {
        self.b1 = b1;
        self
    }
    /// Decay rate of the second moment (default 0.999).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adam;
    /// let tx = adam(1e-3).b2(0.99);
    /// # let _ = tx;
    /// ```
    pub fn b2(mut self, b2: f64) -> Self {
        self.b2 = b2;
        self
    }
    /// Added to the root of the second moment (default 1e-8).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adam;
    /// let tx = adam(1e-3).eps(1e-6);
    /// # let _ = tx;
    /// ```
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
    /// Applies the weight decay only to the parameters whose checkpoint key
    /// `mask` selects (Optax's `adamw(..., mask=...)`); the Adam direction
    /// still updates every parameter. [`decay_mask`](super::decay_mask)
    /// leaves out biases and normalisation scales. The state is unchanged
    /// (`count`, `mu.<leaf>`, `nu.<leaf>` for every leaf).
    ///
    /// With a mask (and a non-zero decay) [`apply_model`](GradientTransformation::apply_model)
    /// computes the updates then adds them, instead of running the fused
    /// kernel on the parameters.
    ///
    /// ```
    /// use flaxen_runtime::optim::{adamw, decay_mask};
    /// let tx = adamw(1e-3, 1e-2).mask(decay_mask);
    /// let head_only = adamw(1e-3, 1e-2).mask(|key: &str| key.starts_with("dense_1."));
    /// # let _ = (tx, head_only);
    /// ```
    pub fn mask(mut self, mask: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.mask = Some(Mask::new(mask));
        self
    }
    /// With `true`, every update is dfdx's fused Adam kernel, i.e.
    /// PyTorch's arithmetic (`torch.optim.Adam`, `dfdx::optim::Adam`): the
    /// moment weights are `1 - b` computed in the dtype. In `f32` with
    /// `b2 = 0.999` each step is then ≈6.7e-6 (relative) larger than
    /// Optax's. The default, `false`, rounds as Optax on host buffers.
    ///
    /// ```
    /// # use flaxen_runtime::optim::adam;
    /// let tx = adam(1e-3).pytorch_arithmetic(true);
    /// # let _ = tx;
    /// ```
    pub fn pytorch_arithmetic(mut self, on: bool) -> Self {
        self.pytorch = on;
        self
    }
}

/// State of [`Adam`]: the update count and the two moments per leaf,
/// saved as `{prefix}count`, `{prefix}mu.<leaf>` and `{prefix}nu.<leaf>`
/// (the same with either arithmetic).
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = adam(1e-3).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("opt.", &mut saved);
/// assert_eq!(saved["opt.mu.weight"].shape, [3, 2]);
/// assert!(saved.contains_key("opt.count"));
/// ```
#[derive(Debug, Clone)]
pub struct AdamState<E, D: dfdx::prelude::Storage<E>> {
    count: u64,
    buffers: Buffers<E, D>,
}

impl<E, D: dfdx::prelude::Storage<E>> AdamState<E, D> {
    /// Number of updates done so far.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// assert_eq!(adam(1e-3).init_model(&model).unwrap().count(), 0);
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl<E: Dtype, D: Device<E>, L: Schedule> GradientTransformation<E, D> for Adam<L> {
    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        Some(self.learning_rate.value(state.count.saturating_sub(1)))
    }

    type State = AdamState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        Ok(AdamState {
            count: 0,
            // Optax's arithmetic writes its direction into a third buffer.
            buffers: Buffers::new(
                params,
                &["mu", "nu"],
                usize::from(!self.pytorch && on_host::<<D as Storage<E>>::Vec>()),
            )?,
        })
    }

    fn update(
        &self,
        state: &mut Self::State,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        let (lr, kernel) = self.next(state, None);
        let wd = self.weight_decay;
        let decayed = self.decayed(params.info());
        state.buffers.step(updates, params, &kernel, |i, out| {
            // Optax adamw: -lr * (direction + wd * params). `out` is zero
            // in the kernel, so the decay of `params` is added here.
            if wd != 0.0 && decayed[i] {
                out.try_axpy(1.0, &params.leaves()[i], -lr * wd)?;
            }
            Ok(())
        })
    }

    fn update_and_apply<M: TensorCollection<E, D>>(
        &self,
        state: &mut Self::State,
        mut updates: Updates<E, D>,
        model: &mut M,
    ) -> Result<Gradients<E, D>, D::Err> {
        if self.mask.is_some() && self.weight_decay != 0.0 {
            // One kernel configuration serves every leaf: a decay on some
            // leaves only goes through the two-step path.
            {
                let params = Params::of(model)?;
                self.update(state, &mut updates, &params)?;
            }
            return apply_updates(model, updates);
        }
        // dfdx's decoupled decay subtracts `lr * (step + wd * p)`, which is
        // Optax's adamw update.
        let decay = (self.weight_decay != 0.0).then_some(WeightDecay::Decoupled(self.weight_decay));
        let (_, kernel) = self.next(state, decay);
        state.buffers.apply_in_place(&mut updates, model, &kernel)?;
        Ok(updates.into_gradients())
    }

    fn validate(&self, info: &LeafInfo) -> Result<(), OptimError> {
        match &self.mask {
            Some(m) => m.check("adamw(..).mask", info),
            None => Ok(()),
        }
    }
}

impl<L> Adam<L> {
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

impl<L: Schedule> Adam<L> {
    /// Advances the count and returns this step's learning rate and kernel.
    fn next<E, D: Storage<E>>(
        &self,
        state: &mut AdamState<E, D>,
        weight_decay: Option<WeightDecay>,
    ) -> (f64, AdamKernel) {
        let lr = self.learning_rate.value(state.count);
        state.count += 1;
        let kernel = AdamKernel {
            t: i32::try_from(state.count).unwrap_or(i32::MAX),
            cfg: AdamConfig {
                lr,
                betas: [self.b1, self.b2],
                eps: self.eps,
                weight_decay,
            },
            pytorch: self.pytorch,
        };
        (lr, kernel)
    }
}

/// Adam at step `t` (1-based, for the bias correction): Optax's direction
/// and learning-rate step in one pass on host buffers ([`AdamStep`]),
/// dfdx's fused Adam kernel elsewhere or with `pytorch`.
struct AdamKernel {
    t: i32,
    cfg: AdamConfig,
    pytorch: bool,
}

impl<E: Dtype, D: Device<E>> Kernel<E, D> for AdamKernel {
    fn run<S: Shape>(
        &self,
        param: &mut Tensor<S, E, D>,
        moments: &mut [&mut <D as Storage<E>>::Vec],
        grad: &<D as Storage<E>>::Vec,
        held: &mut Held,
    ) -> Result<(), D::Err> {
        let consts = AdamConsts {
            b1: self.cfg.betas[0],
            b2: self.cfg.betas[1],
            eps: self.cfg.eps,
            t: self.t,
        };
        // Three buffers (mu, nu, direction) exactly when the state was
        // built for the host kernel.
        if let (false, [mu, nu, dir]) = (self.pytorch, &mut *moments) {
            // `param -= lr * (dir + wd * param)`: Optax's
            // `add_decayed_weights` then `scale_by_learning_rate`, after the
            // direction in the same pass; the direction's buffer holds the
            // parameter meanwhile.
            let step = AdamStep {
                adam: consts,
                lr: self.cfg.lr,
                weight_decay: self.cfg.weight_decay.map(|wd| match wd {
                    WeightDecay::Decoupled(wd) | WeightDecay::L2(wd) => wd,
                }),
            };
            if run_on_host_param(&step, param, &mut [&mut **mu, &mut **nu], dir, grad, held) {
                return Ok(());
            }
        }
        let [mu, nu, ..] = moments else {
            unreachable!("adam has two moments")
        };
        self.cfg.try_update(self.t, param, mu, nu, grad)
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for AdamState<E, D> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_count(format!("{prefix}count"), self.count, out);
        self.buffers.save(prefix, out);
    }

    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let count = load_count(&format!("{prefix}count"), src)?;
        let fresh = self.buffers.prepare(prefix, src)?;
        self.count = count;
        self.buffers.commit(fresh);
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
