//! `scale_by_learning_rate` and `scale_by_schedule` (Optax).

use dfdx::prelude::Dtype;
use dfdx::tensor_ops::Device;

use crate::optim::alias::{Primitive, Step};
use crate::optim::fused::Fusion;
use crate::optim::transforms::scale_all;
use crate::schedule::Schedule;

/// Optax's `scale_by_learning_rate(learning_rate, flip_sign=True)`:
/// `updates *= -lr(count)`, the rate a constant or a [`Schedule`] at the
/// update count (0 for the first). This is the member that makes an
/// optimizer's learning rate readable
/// ([`GradientTransformation::learning_rate`](crate::optim::GradientTransformation::learning_rate)).
/// State: `count`.
///
/// ```
/// use flaxen_runtime::optim::{chain, scale_by_learning_rate, scale_by_rss};
/// use flaxen_runtime::schedule::cosine_decay;
/// let tx = chain((scale_by_rss(), scale_by_learning_rate(cosine_decay(0.1, 100, 0.0))));
/// # let _ = tx;
/// ```
pub fn scale_by_learning_rate<L: Schedule>(learning_rate: L) -> ScaleByLearningRate<L> {
    ScaleByLearningRate {
        learning_rate,
        flip_sign: true,
    }
}

/// The primitive built by [`scale_by_learning_rate`].
///
/// ```
/// let p: flaxen_runtime::optim::ScaleByLearningRate<f64> =
///     flaxen_runtime::optim::scale_by_learning_rate(0.1).flip_sign(false);
/// # let _ = p;
/// ```
#[derive(Debug, Clone)]
pub struct ScaleByLearningRate<L> {
    pub(crate) learning_rate: L,
    pub(crate) flip_sign: bool,
}

impl<L> ScaleByLearningRate<L> {
    /// With `false`, `updates *= lr` (Optax's `flip_sign=False`, as in
    /// `adafactor`). Default `true`.
    ///
    /// ```
    /// let p = flaxen_runtime::optim::scale_by_learning_rate(0.1).flip_sign(false);
    /// # let _ = p;
    /// ```
    pub fn flip_sign(mut self, flip: bool) -> Self {
        self.flip_sign = flip;
        self
    }
}

impl<E: Dtype, D: Device<E>, L: Schedule> Primitive<E, D> for ScaleByLearningRate<L> {
    fn counted(&self) -> bool {
        true
    }

    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (at, _, updates, params) = step.parts();
        let lr = self.learning_rate.value(at.count);
        scale_all(updates, params, if self.flip_sign { -lr } else { lr })
    }

    fn learning_rate(&self, count: u64) -> Option<f64> {
        Some(self.learning_rate.value(count))
    }

    fn fusion(&self, count: u64) -> Fusion {
        match self.flip_sign {
            true => Fusion::Lr(self.learning_rate.value(count)),
            false => Fusion::No,
        }
    }
}

/// Optax's `scale_by_schedule(step_size_fn)`: `updates *= schedule(count)`
/// (no sign flip). State: `count`.
///
/// ```
/// use flaxen_runtime::optim::{chain, scale_by_schedule, sgd};
/// use flaxen_runtime::schedule::linear;
/// let tx = chain((sgd(1.0, None, false), scale_by_schedule(linear(0.1, 0.0, 100))));
/// # let _ = tx;
/// ```
pub fn scale_by_schedule<S: Schedule>(schedule: S) -> ScaleBySchedule<S> {
    ScaleBySchedule(schedule)
}

/// The primitive built by [`scale_by_schedule`].
///
/// ```
/// let p = flaxen_runtime::optim::ScaleBySchedule(0.5);
/// # let _ = p;
/// ```
#[derive(Debug, Clone)]
pub struct ScaleBySchedule<S>(pub S);

impl<E: Dtype, D: Device<E>, S: Schedule> Primitive<E, D> for ScaleBySchedule<S> {
    fn counted(&self) -> bool {
        true
    }

    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (at, _, updates, params) = step.parts();
        scale_all(updates, params, self.0.value(at.count))
    }
}
