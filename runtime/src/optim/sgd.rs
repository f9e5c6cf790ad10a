//! `sgd` with optional (Nesterov) momentum (Optax `sgd`).

use dfdx::prelude::{Dtype, Gradients, Shape, Storage, Tensor, TensorCollection};
use dfdx::tensor_ops::{Device, Momentum, SgdConfig};

use super::exact::Held;
use super::fused::{Buffers, Kernel};
use super::saved::{load_count, load_counter, save_count, save_counter};
use super::{GradientTransformation, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{StateDict, StateError, StateMap};

/// Stochastic gradient descent, as Optax's
/// `sgd(learning_rate, momentum, nesterov)`: with momentum `m` the trace is
/// `t = g + m * t` and the update `-lr * t` (Nesterov: `-lr * (g + m * t)`);
/// without, the update is `-lr * g`.
///
/// ```
/// use flaxen_runtime::optim::sgd;
/// let plain = sgd(0.1, None, false);
/// let heavy_ball = sgd(0.1, Some(0.9), false);
/// let nesterov = sgd(0.1, Some(0.9), true);
/// # let _ = (plain, heavy_ball, nesterov);
/// ```
pub fn sgd<L: Schedule>(learning_rate: L, momentum: Option<f64>, nesterov: bool) -> Sgd<L> {
    Sgd {
        learning_rate,
        momentum,
        nesterov,
    }
}

/// The transformation built by [`sgd`].
///
/// ```
/// let tx: flaxen_runtime::optim::Sgd<f64> = flaxen_runtime::optim::sgd(0.1, Some(0.9), false);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct Sgd<L> {
    learning_rate: L,
    momentum: Option<f64>,
    nesterov: bool,
}

/// State of [`Sgd`]: the update count (for schedules) and the momentum trace
/// (`{prefix}count`, `{prefix}trace.<leaf>`).
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = sgd(0.1, Some(0.9), false).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("", &mut saved);
/// assert_eq!(saved["trace.bias"].shape, [3]);
/// ```
#[derive(Debug, Clone)]
pub struct SgdState<E, D: dfdx::prelude::Storage<E>> {
    count: u64,
    buffers: Buffers<E, D>,
}

impl<E: Dtype, D: Device<E>, L: Schedule> GradientTransformation<E, D> for Sgd<L> {
    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        Some(self.learning_rate.value(state.count.saturating_sub(1)))
    }

    type State = SgdState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        // dfdx's kernel walks the velocity buffer even without momentum.
        let (names, unsaved): (&'static [&'static str], usize) = match self.momentum {
            Some(_) => (&["trace"], 0),
            None => (&[], 1),
        };
        Ok(SgdState {
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

impl<L: Schedule> Sgd<L> {
    /// Advances the count and returns this step's kernel configuration.
    fn next<E, D: Storage<E>>(&self, state: &mut SgdState<E, D>) -> SgdKernel {
        let lr = self.learning_rate.value(state.count);
        state.count += 1;
        SgdKernel(SgdConfig {
            lr,
            momentum: self.momentum.map(|m| {
                if self.nesterov {
                    Momentum::Nesterov(m)
                } else {
                    Momentum::Classic(m)
                }
            }),
            weight_decay: None,
        })
    }
}

/// dfdx's fused SGD kernel.
struct SgdKernel(SgdConfig);

impl<E: Dtype, D: Device<E>> Kernel<E, D> for SgdKernel {
    fn run<S: Shape>(
        &self,
        param: &mut Tensor<S, E, D>,
        moments: &mut [&mut <D as Storage<E>>::Vec],
        grad: &<D as Storage<E>>::Vec,
        _held: &mut Held,
    ) -> Result<(), D::Err> {
        self.0.try_update(param, moments[0], grad)
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for SgdState<E, D> {
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
