//! `rmsprop` (Optax `rmsprop` with its defaults).

use dfdx::prelude::{Dtype, Gradients, Shape, Storage, Tensor, TensorCollection};
use dfdx::tensor_ops::{Device, RMSpropConfig};

use super::fused::{load_count, load_counter, save_count, save_counter, Buffers, Kernel};
use super::{GradientTransformation, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

/// RMSProp as Optax's `rmsprop(learning_rate, decay=0.9, eps=1e-8)`:
/// `nu = decay * nu + (1 - decay) * g²`, `updates = -lr * g / sqrt(nu + eps)`
/// (Optax's default `eps_in_sqrt=True`; no centering, no momentum,
/// `initial_scale = 0`). Runs dfdx's fused RMSprop kernel.
///
/// ```
/// use flaxen_runtime::optim::rmsprop;
/// let tx = rmsprop(1e-2).decay(0.95).eps(1e-6);
/// # let _ = tx;
/// ```
pub fn rmsprop<L: Schedule>(learning_rate: L) -> RmsProp<L> {
    RmsProp {
        learning_rate,
        decay: 0.9,
        eps: 1e-8,
    }
}

/// The transformation built by [`rmsprop`].
///
/// ```
/// let tx: flaxen_runtime::optim::RmsProp<f64> = flaxen_runtime::optim::rmsprop(1e-2);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct RmsProp<L> {
    learning_rate: L,
    decay: f64,
    eps: f64,
}

impl<L> RmsProp<L> {
    /// Decay of the squared-gradient average (default 0.9).
    ///
    /// ```
    /// # use flaxen_runtime::optim::rmsprop;
    /// let tx = rmsprop(1e-2).decay(0.99);
    /// # let _ = tx;
    /// ```
    pub fn decay(mut self, decay: f64) -> Self {
        self.decay = decay;
        self
    }
    /// Added to the average inside the square root (default 1e-8).
    ///
    /// ```
    /// # use flaxen_runtime::optim::rmsprop;
    /// let tx = rmsprop(1e-2).eps(1e-6);
    /// # let _ = tx;
    /// ```
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
}

/// State of [`RmsProp`]: the update count and the squared-gradient average
/// (`{prefix}count`, `{prefix}nu.<leaf>`).
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = rmsprop(1e-2).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("", &mut saved);
/// assert_eq!(saved.len(), 3);
/// ```
#[derive(Debug, Clone)]
pub struct RmsPropState<E, D: dfdx::prelude::Storage<E>> {
    count: u64,
    buffers: Buffers<E, D>,
}

impl<E: Dtype, D: Device<E>, L: Schedule> GradientTransformation<E, D> for RmsProp<L> {
    type State = RmsPropState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        // dfdx's kernel walks its momentum and centering buffers even when
        // they are unused, so they exist (unsaved).
        Ok(RmsPropState {
            count: 0,
            buffers: Buffers::new(params, &["nu"], 2)?,
        })
    }

    fn update(
        &self,
        state: &mut Self::State,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        let kernel = self.next(state);
        state.buffers.step(updates, params, &kernel, |_, _| Ok(()))
    }

    fn update_and_apply<M: TensorCollection<E, D>>(
        &self,
        state: &mut Self::State,
        mut updates: Updates<E, D>,
        model: &mut M,
    ) -> Result<Gradients<E, D>, D::Err> {
        let kernel = self.next(state);
        state.buffers.apply_in_place(&mut updates, model, &kernel)?;
        Ok(updates.into_gradients())
    }
}

impl<L: Schedule> RmsProp<L> {
    /// Advances the count and returns this step's kernel configuration.
    fn next<E, D: Storage<E>>(&self, state: &mut RmsPropState<E, D>) -> RmsPropKernel {
        let lr = self.learning_rate.value(state.count);
        state.count += 1;
        RmsPropKernel(RMSpropConfig {
            lr,
            alpha: self.decay,
            eps: self.eps,
            momentum: None,
            centered: false,
            weight_decay: None,
        })
    }
}

/// dfdx's fused RMSprop kernel (eps inside the square root, as Optax's
/// default `eps_in_sqrt=True`).
struct RmsPropKernel(RMSpropConfig);

impl<E: Dtype, D: Device<E>> Kernel<E, D> for RmsPropKernel {
    fn run<S: Shape>(
        &self,
        param: &mut Tensor<S, E, D>,
        moments: &mut [&mut <D as Storage<E>>::Vec],
        grad: &<D as Storage<E>>::Vec,
    ) -> Result<(), D::Err> {
        let [nu, momentum, grad_avg] = moments else {
            unreachable!("rmsprop has three buffers")
        };
        self.0.try_update(param, momentum, nu, grad_avg, grad)
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for RmsPropState<E, D> {
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
