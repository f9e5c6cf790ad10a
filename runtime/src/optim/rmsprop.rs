//! `rmsprop` (Optax `rmsprop`, with `centered`, `momentum` and `nesterov`).

use dfdx::prelude::{Dtype, Gradients, Shape, Storage, Tensor, TensorCollection};
use dfdx::tensor_ops::{Device, RMSpropConfig, SgdConfig};

use super::exact::{on_host, run_on_host, Held, RmsConsts};
use super::fused::{Buffers, Kernel};
use super::saved::{load_count, load_counter, save_count, save_counter};
use super::{GradientTransformation, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

/// RMSProp as Optax's `rmsprop(learning_rate, decay=0.9, eps=1e-8)`:
/// `nu = decay * nu + (1 - decay) * g²`, `updates = -lr * g / sqrt(nu + eps)`
/// (Optax's default `eps_in_sqrt=True`, `initial_scale = 0`), with Optax's
/// options [`RmsProp::centered`], [`RmsProp::momentum`] and
/// [`RmsProp::nesterov`].
///
/// On host buffers (`Cpu`, `f32`/`f64`) the update is Optax's arithmetic in
/// one pass. Elsewhere (CUDA, `f16`) it is dfdx's fused RMSprop kernel:
/// the same formulas, except that its momentum is applied before the
/// learning rate (PyTorch's order: equal to Optax's for a constant learning
/// rate, its `trace` saved divided by `-lr`) and that it has no Nesterov
/// momentum (there `nesterov` is classic momentum).
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
        centered: false,
        momentum: None,
        nesterov: false,
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
    centered: bool,
    momentum: Option<f64>,
    nesterov: bool,
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
    /// Optax's `centered=True`: divides by the root of the variance
    /// estimate `nu - mu² + eps`, `mu` the moving average of the gradient
    /// (saved as `{prefix}mu.<leaf>`).
    ///
    /// ```
    /// # use flaxen_runtime::optim::rmsprop;
    /// let tx = rmsprop(1e-2).centered(true);
    /// # let _ = tx;
    /// ```
    pub fn centered(mut self, centered: bool) -> Self {
        self.centered = centered;
        self
    }
    /// Optax's `momentum=m`: a trace of the scaled updates, `trace = u + m *
    /// trace` after the learning rate (saved as `{prefix}trace.<leaf>`).
    ///
    /// ```
    /// # use flaxen_runtime::optim::rmsprop;
    /// let tx = rmsprop(1e-2).momentum(0.9);
    /// # let _ = tx;
    /// ```
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.momentum = Some(momentum);
        self
    }
    /// Optax's `nesterov=True`: the update is `u + m * trace` instead of
    /// `trace` (needs [`RmsProp::momentum`]; without it, nothing changes).
    ///
    /// ```
    /// # use flaxen_runtime::optim::rmsprop;
    /// let tx = rmsprop(1e-2).momentum(0.9).nesterov(true);
    /// # let _ = tx;
    /// ```
    pub fn nesterov(mut self, nesterov: bool) -> Self {
        self.nesterov = nesterov;
        self
    }

    /// The saved buffers, in the host kernel's order.
    fn names(&self) -> &'static [&'static str] {
        match (self.centered, self.momentum.is_some()) {
            (false, false) => &["nu"],
            (true, false) => &["nu", "mu"],
            (false, true) => &["nu", "trace"],
            (true, true) => &["nu", "mu", "trace"],
        }
    }
}

/// State of [`RmsProp`]: the update count and the squared-gradient average
/// (`{prefix}count`, `{prefix}nu.<leaf>`), and with the options the
/// gradient average (`{prefix}mu.<leaf>`) and the momentum trace
/// (`{prefix}trace.<leaf>`).
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
    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        Some(self.learning_rate.value(state.count.saturating_sub(1)))
    }

    type State = RmsPropState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        // The host kernel writes the update into one more buffer; dfdx's
        // kernel walks its momentum and centering buffers even when they
        // are unused, so all three exist.
        let names = self.names();
        let unsaved = if on_host::<<D as Storage<E>>::Vec>() {
            1
        } else {
            3 - names.len()
        };
        Ok(RmsPropState {
            count: 0,
            buffers: Buffers::new(params, names, unsaved)?,
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
        RmsPropKernel(RmsConsts {
            lr,
            decay: self.decay,
            eps: self.eps,
            centered: self.centered,
            momentum: self.momentum,
            nesterov: self.nesterov,
        })
    }
}

/// Optax's rmsprop on host buffers, then dfdx's SGD kernel adding the
/// update; elsewhere dfdx's fused RMSprop kernel (eps inside the square
/// root, as Optax's default `eps_in_sqrt=True`).
struct RmsPropKernel(RmsConsts);

impl<E: Dtype, D: Device<E>> Kernel<E, D> for RmsPropKernel {
    fn run<S: Shape>(
        &self,
        param: &mut Tensor<S, E, D>,
        moments: &mut [&mut <D as Storage<E>>::Vec],
        grad: &<D as Storage<E>>::Vec,
        _held: &mut Held,
    ) -> Result<(), D::Err> {
        let c = &self.0;
        let saved = 1 + usize::from(c.centered) + usize::from(c.momentum.is_some());
        // One buffer past the saved ones exactly when the state was built
        // for the host kernel.
        if moments.len() == saved + 1 && run_on_host(c, moments, grad) {
            let [nu, .., out] = moments else {
                unreachable!("at least two buffers")
            };
            // `param -= -1 * update`, i.e. `param + update` exactly; with
            // no momentum the kernel only reads its velocity buffer.
            let add = SgdConfig {
                lr: -1.0,
                momentum: None,
                weight_decay: None,
            };
            return add.try_update(param, nu, out);
        }
        let [nu, x, y] = moments else {
            unreachable!("dfdx's rmsprop has three buffers")
        };
        let (momentum, grad_avg) = if c.centered { (y, x) } else { (x, y) };
        let cfg = RMSpropConfig {
            lr: c.lr,
            alpha: c.decay,
            eps: c.eps,
            momentum: c.momentum,
            centered: c.centered,
            weight_decay: None,
        };
        cfg.try_update(param, momentum, nu, grad_avg, grad)
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
