//! `masked`, `multi_transform` and `set_to_zero` (Optax `masked`,
//! `multi_transform`, `set_to_zero`): transformations that act on a
//! selection of the parameters, chosen by their checkpoint keys.

use std::fmt;
use std::sync::Arc;

use dfdx::prelude::{Dtype, HasShape};
use dfdx::tensor_ops::Device;

use super::{GradientTransformation, LeafInfo, Params, Updates};
use crate::state::{StateDict, StateError, StateMap};

/// Why a transformation cannot run on a model's parameters (see
/// [`GradientTransformation::validate`] and
/// [`GradientTransformation::try_init_model`]).
///
/// ```
/// use flaxen_runtime::optim::OptimError;
/// let e = OptimError::EmptyMask { transform: "masked".into(), keys: vec!["w".into()] };
/// assert_eq!(e.to_string(), "masked: the mask selects none of the parameters [\"w\"]");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptimError {
    /// A mask is false for every parameter.
    #[error("{transform}: the mask selects none of the parameters {keys:?}")]
    EmptyMask {
        /// The transformation holding the mask (`masked`, `adamw(..).mask`).
        transform: String,
        /// The keys of the parameters it was given.
        keys: Vec<String>,
    },
    /// A label function gave a parameter a label with no transformation.
    #[error(
        "multi_transform: parameter `{key}` has label `{label}`, which has no \
         transformation (labels: {labels:?})"
    )]
    UnknownLabel {
        /// The parameter's key.
        key: String,
        /// The label the function returned for it.
        label: String,
        /// The labels that have a transformation.
        labels: Vec<String>,
    },
    /// Two transformations were given the same label.
    #[error("multi_transform: label `{label}` is given more than one transformation")]
    DuplicateLabel {
        /// The repeated label.
        label: String,
    },
    /// The model has no trainable tensor to optimize.
    #[error("the model has no trainable tensor: there is nothing to optimize")]
    NoParameters,
    /// The device failed while building the state.
    #[error("device error: {0}")]
    Device(String),
}

/// A predicate over checkpoint keys, shared by clones.
#[derive(Clone)]
pub(crate) struct Mask(Arc<dyn Fn(&str) -> bool + Send + Sync>);

impl Mask {
    pub(crate) fn new(f: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Positions of the keys the mask selects.
    pub(crate) fn select(&self, names: &[String]) -> Vec<usize> {
        (0..names.len()).filter(|&i| (self.0)(&names[i])).collect()
    }

    /// [`OptimError::EmptyMask`] when nothing in `info` is selected.
    pub(crate) fn check(&self, transform: &str, info: &LeafInfo) -> Result<(), OptimError> {
        if self.select(&info.names).is_empty() {
            return Err(OptimError::EmptyMask {
                transform: transform.into(),
                keys: info.names.clone(),
            });
        }
        Ok(())
    }
}

impl fmt::Debug for Mask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Mask(..)")
    }
}

/// The key suffixes (last dotted segment) that [`decay_mask`] excludes.
///
/// ```
/// use flaxen_runtime::optim::NO_DECAY_SUFFIXES;
/// assert_eq!(NO_DECAY_SUFFIXES, ["bias", "scale", "gamma", "beta"]);
/// ```
pub const NO_DECAY_SUFFIXES: [&str; 4] = ["bias", "scale", "gamma", "beta"];

/// The usual weight-decay mask: true for weights and kernels, false for
/// biases and normalisation parameters.
///
/// A key is excluded when its last dotted segment is one of
/// [`NO_DECAY_SUFFIXES`]: `bias` (dense, conv and norm offsets),
/// `scale` (flaxen's `batch_norm_*` / `layer_norm_*` scales), `gamma` and
/// `beta` (`LayerNorm`'s, named as dfdx's `LayerNorm1D` names them). Every other key (`weight`, `kernel`,
/// `embedding`, ...) is selected.
///
/// ```
/// use flaxen_runtime::optim::*;
/// assert!(decay_mask("conv_0.weight"));
/// assert!(decay_mask("embed_0.embedding"));
/// assert!(!decay_mask("dense_1.bias"));
/// assert!(!decay_mask("batch_norm_0.scale"));
/// // Optax's idiom, and adamw's mask option.
/// let a = chain((masked(add_decayed_weights(1e-4), decay_mask), adam(1e-3)));
/// let b = adamw(1e-3, 1e-4).mask(decay_mask);
/// # let _ = (a, b);
/// ```
pub fn decay_mask(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key);
    !NO_DECAY_SUFFIXES.contains(&last)
}

/// Optax's `masked(inner, mask)`: `inner` sees and transforms only the
/// parameters whose checkpoint key (`conv_0.weight`, `dense_1.bias`, ...)
/// the mask selects; the other updates are returned as they came in.
///
/// `inner`'s state exists for the selected parameters only, and is saved
/// under `{prefix}inner.` with their keys (e.g. `opt.0.inner.mu.dense_0.weight`).
///
/// A mask that selects nothing makes `inner` run on no parameter, as in
/// Optax; [`validate`](GradientTransformation::validate) and
/// [`try_init_model`](GradientTransformation::try_init_model) report it as
/// [`OptimError::EmptyMask`].
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::optim::*;
///
/// let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<3, 2>, f32>();
/// let tx = chain((masked(add_decayed_weights(1e-4), decay_mask), adam(1e-3)));
/// let state = tx.try_init_model(&model).unwrap();
/// # let _ = state;
/// let nothing = masked(adam(1e-3), |key: &str| key.starts_with("conv"));
/// let err = nothing.try_init_model(&model).unwrap_err();
/// assert!(matches!(err, OptimError::EmptyMask { .. }));
/// ```
pub fn masked<T>(inner: T, mask: impl Fn(&str) -> bool + Send + Sync + 'static) -> Masked<T> {
    Masked {
        inner,
        mask: Mask::new(mask),
    }
}

/// The transformation built by [`masked`].
///
/// ```
/// use flaxen_runtime::optim::*;
/// let tx: Masked<AddDecayedWeights> = masked(add_decayed_weights(1e-4), decay_mask);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct Masked<T> {
    inner: T,
    mask: Mask,
}

/// State of [`Masked`] (Optax's `MaskedState`): the inner state, built for
/// the selected parameters, saved under `{prefix}inner.`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = masked(adam(1e-3), decay_mask).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("opt.", &mut saved);
/// assert!(saved.contains_key("opt.inner.mu.weight"));
/// assert!(!saved.contains_key("opt.inner.mu.bias"));
/// assert_eq!(state.inner().count(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct MaskedState<S> {
    inner: S,
}

impl<S> MaskedState<S> {
    /// The inner transformation's state.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 3>, f32>();
    /// let state = masked(adam(1e-3), decay_mask).init_model(&model).unwrap();
    /// assert_eq!(state.inner().count(), 0);
    /// ```
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

/// The parameters at positions `idx`, with their names and shapes.
fn subset<E: Dtype, D: Device<E>>(params: &Params<E, D>, idx: &[usize]) -> Params<E, D> {
    Params::from_leaves(
        subset_info(params.info(), idx),
        idx.iter().map(|&i| params.leaves()[i].clone()).collect(),
    )
}

fn subset_info(info: &LeafInfo, idx: &[usize]) -> LeafInfo {
    LeafInfo {
        names: idx.iter().map(|&i| info.names[i].clone()).collect(),
        shapes: idx.iter().map(|&i| info.shapes[i].clone()).collect(),
    }
}

/// Runs `inner` on the updates at positions `idx` only.
fn update_subset<E: Dtype, D: Device<E>, T: GradientTransformation<E, D>>(
    inner: &T,
    state: &mut T::State,
    updates: &mut Updates<E, D>,
    params: &Params<E, D>,
    idx: &[usize],
) -> Result<(), D::Err> {
    let sub_params = subset(params, idx);
    let mut leaves = Vec::with_capacity(idx.len());
    for &i in idx {
        leaves.push(updates.take(i, params)?);
    }
    let mut sub = Updates::from_leaves(leaves);
    inner.update(state, &mut sub, &sub_params)?;
    for (j, &i) in idx.iter().enumerate() {
        updates.set(i, sub.take(j, &sub_params)?);
    }
    Ok(())
}

impl<E: Dtype, D: Device<E>, T: GradientTransformation<E, D>> GradientTransformation<E, D>
    for Masked<T>
{
    type State = MaskedState<T::State>;

    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        self.inner.learning_rate(&state.inner)
    }

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        let idx = self.mask.select(&params.info().names);
        Ok(MaskedState {
            inner: self.inner.init(&subset(params, &idx))?,
        })
    }

    fn update(
        &self,
        state: &mut Self::State,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        let idx = self.mask.select(&params.info().names);
        update_subset(&self.inner, &mut state.inner, updates, params, &idx)
    }

    fn validate(&self, info: &LeafInfo) -> Result<(), OptimError> {
        self.mask.check("masked", info)?;
        let idx = self.mask.select(&info.names);
        GradientTransformation::<E, D>::validate(&self.inner, &subset_info(info, &idx))
    }
}

impl<E, S: StateDict<E> + Clone> StateDict<E> for MaskedState<S> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        self.inner.save_state(&format!("{prefix}inner."), out);
    }
    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        self.inner.load_state(&format!("{prefix}inner."), src)
    }
    fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
        self.inner.save_counters(&format!("{prefix}inner."), out);
    }
    fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        self.inner.load_counters(&format!("{prefix}inner."), src)
    }
}

/// Sets every update to zero (Optax `set_to_zero`): the parameters it sees
/// do not move. With [`multi_transform`] it freezes a group.
///
/// ```
/// use flaxen_runtime::optim::*;
/// let frozen_bias = masked(set_to_zero(), |key: &str| key.ends_with("bias"));
/// # let _ = frozen_bias;
/// ```
pub fn set_to_zero() -> SetToZero {
    SetToZero
}

/// See [`set_to_zero`].
///
/// ```
/// let tx = flaxen_runtime::optim::SetToZero;
/// # let _ = tx;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SetToZero;

impl<E: Dtype, D: Device<E>> GradientTransformation<E, D> for SetToZero {
    type State = ();
    fn init(&self, _params: &Params<E, D>) -> Result<(), D::Err> {
        Ok(())
    }
    fn update(
        &self,
        _: &mut (),
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        for (i, p) in params.leaves().iter().enumerate() {
            updates.set(i, p.device().try_zeros_like(p.shape())?);
        }
        Ok(())
    }
}

/// Optax's `multi_transform(transforms, param_labels)`: `labels` gives each
/// parameter's checkpoint key a label, and each label's transformation
/// runs on the parameters with that label only (as if they were the whole
/// model: a `clip_by_global_norm` in a group clips that group's norm).
///
/// `transforms` is a tuple (up to 8) of `(label, transformation)` pairs. The
/// state holds one state per label, built for that label's parameters and
/// saved under `{prefix}<label>.` (e.g. `opt.head.mu.dense_0.weight`).
///
/// A label with no parameter is allowed (its transformation runs on
/// nothing, as in Optax). A parameter whose label has no transformation,
/// or a label given twice, is an error reported by
/// [`validate`](GradientTransformation::validate) and
/// [`try_init_model`](GradientTransformation::try_init_model); the plain
/// `init`/`update` do not fail on it but leave such a parameter in place
/// (a zero update).
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::optim::*;
///
/// let dev: Cpu = Default::default();
/// let model = dev.build_module::<(Linear<3, 4>, Linear<4, 2>), f32>();
/// let tx = multi_transform(
///     (("frozen", set_to_zero()), ("head", adam(1e-3)), ("body", sgd(1e-2, None, false))),
///     |key: &str| match key {
///         k if k.starts_with("1.") => "head",
///         k if k.ends_with("bias") => "frozen",
///         _ => "body",
///     },
/// );
/// let state = tx.try_init_model(&model).unwrap();
/// # let _ = state;
/// let typo = multi_transform((("head", adam(1e-3)),), |_: &str| "haed");
/// let err = typo.try_init_model(&model).unwrap_err();
/// assert!(matches!(err, OptimError::UnknownLabel { .. }));
/// ```
pub fn multi_transform<T, R: Into<String>>(
    transforms: T,
    labels: impl Fn(&str) -> R + Send + Sync + 'static,
) -> MultiTransform<T> {
    MultiTransform {
        transforms,
        labels: Labels(Arc::new(move |key| labels(key).into())),
    }
}

/// A label function, shared by clones.
#[derive(Clone)]
struct Labels(Arc<dyn Fn(&str) -> String + Send + Sync>);

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Labels(..)")
    }
}

/// The transformation built by [`multi_transform`].
///
/// ```
/// use flaxen_runtime::optim::*;
/// let tx: MultiTransform<((&str, SetToZero), (&str, Sgd<f64>))> = multi_transform(
///     (("frozen", set_to_zero()), ("body", sgd(1e-2, None, false))),
///     |key: &str| if key.ends_with("bias") { "frozen" } else { "body" },
/// );
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct MultiTransform<T> {
    transforms: T,
    labels: Labels,
}

/// State of [`MultiTransform`] (Optax's `MultiTransformState`): one state
/// per label, saved under `{prefix}<label>.`.
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let tx = multi_transform(
///     (("w", adam(1e-3)), ("b", set_to_zero())),
///     |key: &str| if key == "weight" { "w" } else { "b" },
/// );
/// let state = tx.init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("opt.", &mut saved);
/// assert_eq!(saved.keys().collect::<Vec<_>>(), ["opt.w.count", "opt.w.mu.weight", "opt.w.nu.weight"]);
/// assert_eq!(state.labels(), ["w", "b"]);
/// assert_eq!(state.states().0.count(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct MultiTransformState<S> {
    labels: Vec<String>,
    states: S,
}

impl<S> MultiTransformState<S> {
    /// The labels, in the order of the transformations.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 3>, f32>();
    /// let tx = multi_transform((("all", sgd(0.1, None, false)),), |_: &str| "all");
    /// assert_eq!(tx.init_model(&model).unwrap().labels(), ["all"]);
    /// ```
    pub fn labels(&self) -> &[String] {
        &self.labels
    }
    /// The tuple of per-label states.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 3>, f32>();
    /// let tx = multi_transform((("all", adam(1e-3)),), |_: &str| "all");
    /// assert_eq!(tx.init_model(&model).unwrap().states().0.count(), 0);
    /// ```
    pub fn states(&self) -> &S {
        &self.states
    }
}

impl<T> MultiTransform<T> {
    /// Positions of the parameters of each label in `labels` (a label
    /// given twice gets its parameters at its first position), and the
    /// parameters whose label has no transformation.
    fn groups(&self, labels: &[&str], names: &[String]) -> (Vec<Vec<usize>>, Vec<usize>) {
        let mut groups = vec![Vec::new(); labels.len()];
        let mut unknown = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let label = (self.labels.0)(name);
            match labels.iter().position(|l| *l == label) {
                Some(g) => groups[g].push(i),
                None => unknown.push(i),
            }
        }
        (groups, unknown)
    }

    fn check(&self, labels: &[&str], info: &LeafInfo) -> Result<Vec<Vec<usize>>, OptimError> {
        for (i, l) in labels.iter().enumerate() {
            if labels[..i].contains(l) {
                return Err(OptimError::DuplicateLabel { label: (*l).into() });
            }
        }
        let (groups, unknown) = self.groups(labels, &info.names);
        if let Some(&i) = unknown.first() {
            return Err(OptimError::UnknownLabel {
                key: info.names[i].clone(),
                label: (self.labels.0)(&info.names[i]),
                labels: labels.iter().map(|l| (*l).into()).collect(),
            });
        }
        Ok(groups)
    }
}

macro_rules! multi_impls {
    ($($T:ident $i:tt),+) => {
        impl<E: Dtype, D: Device<E>, $($T: GradientTransformation<E, D>),+>
            GradientTransformation<E, D> for MultiTransform<($((&'static str, $T),)+)>
        {
            type State = MultiTransformState<($($T::State,)+)>;

            fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
                let labels = [$(self.transforms.$i.0),+];
                let (groups, _) = self.groups(&labels, &params.info().names);
                Ok(MultiTransformState {
                    labels: labels.iter().map(|l| (*l).into()).collect(),
                    states: ($(self.transforms.$i.1.init(&subset(params, &groups[$i]))?,)+),
                })
            }

            fn update(
                &self,
                state: &mut Self::State,
                updates: &mut Updates<E, D>,
                params: &Params<E, D>,
            ) -> Result<(), D::Err> {
                let labels = [$(self.transforms.$i.0),+];
                let (groups, unknown) = self.groups(&labels, &params.info().names);
                $(update_subset(
                    &self.transforms.$i.1,
                    &mut state.states.$i,
                    updates,
                    params,
                    &groups[$i],
                )?;)+
                for i in unknown {
                    let p = &params.leaves()[i];
                    updates.set(i, p.device().try_zeros_like(p.shape())?);
                }
                Ok(())
            }

            fn validate(&self, info: &LeafInfo) -> Result<(), OptimError> {
                let groups = self.check(&[$(self.transforms.$i.0),+], info)?;
                $(GradientTransformation::<E, D>::validate(
                    &self.transforms.$i.1,
                    &subset_info(info, &groups[$i]),
                )?;)+
                Ok(())
            }
        }

        impl<E, $($T: StateDict<E> + Clone),+> StateDict<E> for MultiTransformState<($($T,)+)> {
            fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
                $(self.states.$i.save_state(&format!("{prefix}{}.", self.labels[$i]), out);)+
            }

            fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
                // Load into a copy first so that a failure leaves `self` intact.
                let mut next = self.states.clone();
                $(next.$i.load_state(&format!("{prefix}{}.", self.labels[$i]), src)?;)+
                self.states = next;
                Ok(())
            }

            fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
                $(self.states.$i.save_counters(&format!("{prefix}{}.", self.labels[$i]), out);)+
            }

            fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
                let mut next = self.states.clone();
                $(next.$i.load_counters(&format!("{prefix}{}.", self.labels[$i]), src)?;)+
                self.states = next;
                Ok(())
            }
        }
    };
}

multi_impls!(A 0);
multi_impls!(A 0, B 1);
multi_impls!(A 0, B 1, C 2);
multi_impls!(A 0, B 1, C 2, F 3);
multi_impls!(A 0, B 1, C 2, F 3, G 4);
multi_impls!(A 0, B 1, C 2, F 3, G 4, H 5);
multi_impls!(A 0, B 1, C 2, F 3, G 4, H 5, I 6);
multi_impls!(A 0, B 1, C 2, F 3, G 4, H 5, I 6, J 7);
