//! [`StateDict`]-style access to any dfdx module, keyed by dfdx's own tensor
//! paths (`conv_0.weight`, `0.bias`, ...), the names its safetensors
//! support uses.
//!
//! A blanket `impl StateDict<E> for M where M: TensorCollection<E, D>` is not
//! expressible (the device `D` would be unconstrained), so this module offers
//! two functions a `StateDict` impl can call, and [`Checkpoint::add_module`] /
//! [`Restore::module`] use them directly.
//!
//! Scalars that dfdx modules expose through `TensorCollection` (for example
//! `BatchNorm`'s momentum) are configuration, not learned state, and are not
//! saved.
//!
//! [`Checkpoint::add_module`]: super::Checkpoint::add_module
//! [`Restore::module`]: super::Restore::module

use std::convert::Infallible;

use crate::dfdx::nn::tensor_collection::{
    RecursiveWalker, TensorCollection, TensorOptions, TensorVisitor, ViewTensorMut, ViewTensorName,
    ViewTensorRef,
};
use crate::dfdx::prelude::{Device, Dtype, HasShape, Shape, Tensor};
use crate::state::{HostTensor, StateError, StateMap};

struct Collect<'a, E> {
    prefix: &'a str,
    out: &'a mut StateMap<E>,
}

impl<E: Dtype, D: Device<E>> TensorVisitor<E, D> for Collect<'_, E> {
    type Viewer = (ViewTensorRef, ViewTensorName);
    type Err = Infallible;
    type E2 = E;
    type D2 = D;

    fn visit<S: Shape>(
        &mut self,
        _: TensorOptions<S, E, D>,
        (t, path): (&Tensor<S, E, D>, String),
    ) -> Result<Option<Tensor<S, E, D>>, Infallible> {
        self.out.insert(
            format!("{}{path}", self.prefix),
            HostTensor {
                shape: t.shape().concrete().into_iter().collect(),
                data: t.as_vec(),
            },
        );
        Ok(None)
    }
}

/// Checks that every tensor is in the map with the right shape.
struct Check<'a, E> {
    prefix: &'a str,
    src: &'a StateMap<E>,
    seen: usize,
}

impl<E: Dtype, D: Device<E>> TensorVisitor<E, D> for Check<'_, E> {
    type Viewer = (ViewTensorRef, ViewTensorName);
    type Err = StateError;
    type E2 = E;
    type D2 = D;

    fn visit<S: Shape>(
        &mut self,
        _: TensorOptions<S, E, D>,
        (t, path): (&Tensor<S, E, D>, String),
    ) -> Result<Option<Tensor<S, E, D>>, StateError> {
        let key = format!("{}{path}", self.prefix);
        let stored = self
            .src
            .get(&key)
            .ok_or_else(|| StateError::Missing { key: key.clone() })?;
        let expected: Vec<usize> = t.shape().concrete().into_iter().collect();
        if stored.shape != expected {
            return Err(StateError::Shape {
                key,
                expected,
                found: stored.shape.clone(),
            });
        }
        if stored.data.len() != t.shape().num_elements() {
            return Err(StateError::Invalid {
                key,
                reason: format!("{} values for shape {:?}", stored.data.len(), stored.shape),
            });
        }
        self.seen += 1;
        Ok(None)
    }
}

struct Write<'a, E> {
    prefix: &'a str,
    src: &'a StateMap<E>,
}

impl<E: Dtype, D: Device<E>> TensorVisitor<E, D> for Write<'_, E> {
    type Viewer = (ViewTensorMut, ViewTensorName);
    type Err = Infallible;
    type E2 = E;
    type D2 = D;

    fn visit<S: Shape>(
        &mut self,
        _: TensorOptions<S, E, D>,
        (t, path): (&mut Tensor<S, E, D>, String),
    ) -> Result<Option<Tensor<S, E, D>>, Infallible> {
        if let Some(stored) = self.src.get(&format!("{}{path}", self.prefix)) {
            t.copy_from(&stored.data);
        }
        Ok(None)
    }
}

/// Copies every tensor of `module` to the host under `prefix` + its dfdx path.
///
/// ```
/// use flaxen_runtime::checkpoint::save_module_state;
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::state::StateMap;
///
/// let dev = Cpu::default();
/// let model = dev.build_module::<(Linear<3, 4>, ReLU, Linear<4, 2>), f32>();
/// let mut out = StateMap::new();
/// save_module_state(&model, "params.", &mut out);
/// let keys: Vec<_> = out.keys().cloned().collect();
/// assert_eq!(keys, ["params.0.bias", "params.0.weight", "params.2.bias", "params.2.weight"]);
/// assert_eq!(out["params.0.weight"].shape, vec![4, 3]);
/// ```
pub fn save_module_state<E, D, M>(module: &M, prefix: &str, out: &mut StateMap<E>)
where
    E: Dtype,
    D: Device<E>,
    M: TensorCollection<E, D>,
{
    let mut v = Collect { prefix, out };
    let walked = M::iter_tensors(&mut RecursiveWalker {
        m: (module, String::new()),
        f: &mut v,
    });
    match walked {
        Ok(_) => {}
        Err(never) => match never {},
    }
}

/// Replaces every tensor of `module` with the one stored under `prefix` + its
/// dfdx path. Everything is checked first (every tensor present, same shape,
/// and no tensor under `prefix` that the module lacks); on `Err` the module
/// is unchanged.
///
/// ```
/// use flaxen_runtime::checkpoint::{load_module_state, save_module_state};
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::state::{StateError, StateMap};
///
/// let dev = Cpu::default();
/// let a = dev.build_module::<Linear<3, 4>, f32>();
/// let mut b = dev.build_module::<Linear<3, 4>, f32>();
/// let mut saved = StateMap::new();
/// save_module_state(&a, "", &mut saved);
/// load_module_state(&mut b, "", &saved).unwrap();
/// assert_eq!(a.weight.array(), b.weight.array());
///
/// let mut wide = dev.build_module::<Linear<3, 5>, f32>();
/// let err = load_module_state(&mut wide, "", &saved).unwrap_err();
/// assert!(matches!(err, StateError::Shape { .. }));
/// ```
pub fn load_module_state<E, D, M>(
    module: &mut M,
    prefix: &str,
    src: &StateMap<E>,
) -> Result<(), StateError>
where
    E: Dtype,
    D: Device<E>,
    M: TensorCollection<E, D>,
{
    let mut check = Check {
        prefix,
        src,
        seen: 0,
    };
    M::iter_tensors(&mut RecursiveWalker {
        m: (&*module, String::new()),
        f: &mut check,
    })?;
    let under_prefix = src.keys().filter(|k| k.starts_with(prefix)).count();
    if under_prefix != check.seen {
        // Some stored tensor has no counterpart: name it.
        let mut live = StateMap::new();
        save_module_state(&*module, prefix, &mut live);
        if let Some(extra) = src
            .keys()
            .find(|k| k.starts_with(prefix) && !live.contains_key(*k))
        {
            return Err(StateError::Invalid {
                key: extra.clone(),
                reason: "is in the checkpoint but not in the model (another architecture?)".into(),
            });
        }
    }
    let walked = M::iter_tensors(&mut RecursiveWalker {
        m: (module, String::new()),
        f: &mut Write { prefix, src },
    });
    match walked {
        Ok(_) => Ok(()),
        Err(never) => match never {},
    }
}
