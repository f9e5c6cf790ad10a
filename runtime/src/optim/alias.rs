//! Optimizers as Optax defines them: chains of primitives
//! ([`scale_by_adam`](super::scale_by_adam), [`trace`](super::trace),
//! [`scale_by_learning_rate`](super::scale_by_learning_rate), ...) that
//! share one [`LeafState`], with a fused kernel where the chain matches one
//! ([`plan`]).
//!
//! Every primitive is also a [`GradientTransformation`] on its own, with
//! its own `LeafState`; [`chain`](super::chain) composes them as Optax's
//! `chain` does (each member's state under `{prefix}<i>.`). An optimizer
//! such as [`adam`](super::adam) is one [`Alias`]: its members' buffers
//! are saved side by side under one prefix, as flaxen always saved them.

use dfdx::prelude::{Dtype, Gradients, Storage, TensorCollection};
use dfdx::tensor_ops::Device;

use super::exact::on_host;
use super::fused::{plan, Fusion};
use super::state::{Bufs, LeafState};
use super::{apply_updates, GradientTransformation, LeafInfo, OptimError, Params, Updates};

pub(crate) use sealed::{Members, Primitive};

mod sealed {
    use super::*;

    /// One Optax primitive: a transformation of the updates that keeps its
    /// buffers in a [`LeafState`].
    pub trait Primitive<E: Dtype, D: Device<E>>: std::fmt::Debug {
        /// This primitive's buffers for `params` (none by default).
        fn init(&self, params: &Params<E, D>) -> Result<Bufs<E, D>, D::Err> {
            let _ = params;
            Ok(Bufs::default())
        }

        /// Unsaved kernel buffers it walks when it runs alone.
        fn extra(&self, host: bool) -> usize {
            let _ = host;
            0
        }

        /// Whether it reads the step count (then the count is saved).
        fn counted(&self) -> bool {
            false
        }

        /// Transforms the updates of one step ([`Step::parts`]).
        fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err>;

        /// The learning rate it applies at update number `count`.
        fn learning_rate(&self, count: u64) -> Option<f64> {
            let _ = count;
            None
        }

        /// See [`GradientTransformation::validate`].
        fn validate(&self, info: &LeafInfo) -> Result<(), OptimError> {
            let _ = info;
            Ok(())
        }

        /// What it adds to a fused kernel at update number `count`.
        fn fusion(&self, count: u64) -> Fusion {
            let _ = count;
            Fusion::No
        }
    }

    /// The members of an [`Alias`], in order.
    pub trait Members<E: Dtype, D: Device<E>> {
        fn members(&self) -> Vec<&dyn Primitive<E, D>>;
    }

    /// The primitives a transformation runs: an [`Alias`]'s members, or a
    /// primitive alone.
    pub trait AsMembers<E: Dtype, D: Device<E>> {
        fn ms(&self) -> Vec<&dyn Primitive<E, D>>;
    }
}
use sealed::AsMembers;

/// Where a primitive runs: the update number (0 for the first) and its
/// place in the chain, whose buffers are `state.part(k)`.
#[derive(Debug, Clone, Copy)]
pub struct At {
    pub(crate) count: u64,
    pub(crate) k: usize,
}

/// One primitive's share of an update.
pub struct Step<'a, E: Dtype, D: Device<E>> {
    at: At,
    state: &'a mut LeafState<E, D>,
    updates: &'a mut Updates<E, D>,
    params: &'a Params<E, D>,
}

/// What [`Step::parts`] gives.
type Parts<'s, E, D> = (
    At,
    &'s mut LeafState<E, D>,
    &'s mut Updates<E, D>,
    &'s Params<E, D>,
);

impl<E: Dtype, D: Device<E>> Step<'_, E, D> {
    /// Where it runs, the state, the updates to transform, the parameters.
    pub(crate) fn parts(&mut self) -> Parts<'_, E, D> {
        (self.at, self.state, self.updates, self.params)
    }
}

/// An optimizer defined as a chain of primitives sharing one
/// [`LeafState`] (Optax's `alias.py`): [`Adam`](super::Adam),
/// [`Sgd`](super::Sgd), [`RmsProp`](super::RmsProp), [`Lamb`](super::Lamb),
/// ... are `Alias`es of their primitives. Where the chain matches one of
/// dfdx's fused kernels the update runs as that kernel, with the same
/// results.
///
/// ```
/// use flaxen_runtime::optim::{adam, Alias};
/// let tx = adam(1e-3);
/// let Alias((scale_by_adam, _decay, lr)) = &tx;
/// # let _ = (scale_by_adam, lr);
/// ```
#[derive(Debug, Clone)]
pub struct Alias<T>(pub T);

macro_rules! members {
    ($($T:ident $i:tt),+) => {
        impl<E: Dtype, D: Device<E>, $($T: Primitive<E, D>),+> Members<E, D> for ($($T,)+) {
            fn members(&self) -> Vec<&dyn Primitive<E, D>> {
                vec![$(&self.$i),+]
            }
        }
    };
}
members!(A 0);
members!(A 0, B 1);
members!(A 0, B 1, C 2);
members!(A 0, B 1, C 2, F 3);
members!(A 0, B 1, C 2, F 3, G 4);

/// What each of primitives `ms` adds to a fused kernel at update `count`.
fn fusions<E: Dtype, D: Device<E>>(ms: &[&dyn Primitive<E, D>], count: u64) -> Vec<Fusion> {
    ms.iter().map(|m| m.fusion(count)).collect()
}

/// The state of primitives `ms` for `params`.
fn init<E: Dtype, D: Device<E>>(
    ms: &[&dyn Primitive<E, D>],
    params: &Params<E, D>,
) -> Result<LeafState<E, D>, D::Err> {
    let host = on_host::<<D as Storage<E>>::Vec>();
    let mut parts = Vec::with_capacity(ms.len());
    for m in ms {
        parts.push(m.init(params)?);
    }
    let extra = match plan(&fusions(ms, 0), true) {
        Some(p) => p.extra(host),
        None => ms.iter().map(|m| m.extra(host)).max().unwrap_or(0),
    };
    let counted = ms.iter().any(|m| m.counted());
    LeafState::new(params, parts, extra, counted)
}

/// One update of primitives `ms`: their fused kernel, or each in turn.
fn update<E: Dtype, D: Device<E>>(
    ms: &[&dyn Primitive<E, D>],
    state: &mut LeafState<E, D>,
    updates: &mut Updates<E, D>,
    params: &Params<E, D>,
) -> Result<(), D::Err> {
    let fusion = fusions(ms, state.count);
    update_with(ms, &fusion, state, updates, params)
}

/// [`update`] with this update's `fusion` already known.
fn update_with<E: Dtype, D: Device<E>>(
    ms: &[&dyn Primitive<E, D>],
    fusion: &[Fusion],
    state: &mut LeafState<E, D>,
    updates: &mut Updates<E, D>,
    params: &Params<E, D>,
) -> Result<(), D::Err> {
    let count = state.count;
    state.count += 1;
    if let Some(kernel) = plan(fusion, false) {
        return state.kernel_step(0..ms.len(), &kernel, updates, params);
    }
    for (k, m) in ms.iter().enumerate() {
        m.update(&mut Step {
            at: At { count, k },
            state: &mut *state,
            updates: &mut *updates,
            params,
        })?;
    }
    Ok(())
}

/// [`update`] then [`apply_updates`], or the fused kernel on the
/// parameters in place.
fn update_and_apply<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    ms: &[&dyn Primitive<E, D>],
    state: &mut LeafState<E, D>,
    mut updates: Updates<E, D>,
    model: &mut M,
) -> Result<Gradients<E, D>, D::Err> {
    let fusion = fusions(ms, state.count);
    if let Some(kernel) = plan(&fusion, true) {
        state.count += 1;
        state.kernel_apply(0..ms.len(), &kernel, &mut updates, model)?;
        return Ok(updates.into_gradients());
    }
    // The parameter views must be gone before the in-place update, or
    // every parameter would be copied first.
    {
        let params = Params::of(model)?;
        update_with(ms, &fusion, state, &mut updates, &params)?;
    }
    apply_updates(model, updates)
}

/// The learning rate of the last update: the last member's that has one.
fn learning_rate<E: Dtype, D: Device<E>>(ms: &[&dyn Primitive<E, D>], count: u64) -> Option<f64> {
    ms.iter()
        .rev()
        .find_map(|m| m.learning_rate(count.saturating_sub(1)))
}

fn validate<E: Dtype, D: Device<E>>(
    ms: &[&dyn Primitive<E, D>],
    info: &LeafInfo,
) -> Result<(), OptimError> {
    ms.iter().try_for_each(|m| m.validate(info))
}

/// The [`GradientTransformation`] of a list of primitives.
macro_rules! transformation {
    () => {
        type State = LeafState<E, D>;

        fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
            init(&self.ms(), params)
        }

        fn update(
            &self,
            state: &mut Self::State,
            updates: &mut Updates<E, D>,
            params: &Params<E, D>,
        ) -> Result<(), D::Err> {
            update(&self.ms(), state, updates, params)
        }

        fn update_and_apply<M: TensorCollection<E, D>>(
            &self,
            state: &mut Self::State,
            updates: Updates<E, D>,
            model: &mut M,
        ) -> Result<Gradients<E, D>, D::Err> {
            update_and_apply(&self.ms(), state, updates, model)
        }

        fn learning_rate(&self, state: &Self::State) -> Option<f64> {
            learning_rate(&self.ms(), state.count)
        }

        fn validate(&self, info: &LeafInfo) -> Result<(), OptimError> {
            validate(&self.ms(), info)
        }
    };
}

impl<E: Dtype, D: Device<E>, T: Members<E, D>> AsMembers<E, D> for Alias<T> {
    fn ms(&self) -> Vec<&dyn Primitive<E, D>> {
        self.0.members()
    }
}

impl<E: Dtype, D: Device<E>, T: Members<E, D>> GradientTransformation<E, D> for Alias<T> {
    transformation!();
}

/// Makes each primitive a [`GradientTransformation`] on its own.
macro_rules! standalone {
    ($($P:ident $(<$L:ident: $B:path>)?),+ $(,)?) => {$(
        impl<E: Dtype, D: Device<E> $(, $L: $B)?> AsMembers<E, D> for super::$P$(<$L>)?
        where
            Self: Primitive<E, D>,
        {
            fn ms(&self) -> Vec<&dyn Primitive<E, D>> {
                vec![self]
            }
        }

        impl<E: Dtype, D: Device<E> $(, $L: $B)?> GradientTransformation<E, D> for super::$P$(<$L>)?
        where
            Self: Primitive<E, D>,
        {
            transformation!();
        }
    )+};
}

use crate::schedule::Schedule;
standalone!(
    ScaleByAdam,
    ScaleByRms,
    ScaleByBelief,
    ScaleByLion,
    ScaleByRss,
    ScaleByTrustRatio,
    ScaleByFactoredRms,
    ClipByBlockRms,
    ScaleByParamBlockRms,
    MomentumTrace,
    AddDecayedWeights,
    ClipByGlobalNorm,
    Scale,
    ScaleByLearningRate<L: Schedule>,
    ScaleBySchedule<L: Schedule>,
);
