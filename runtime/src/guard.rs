//! A NaN/Inf guard that names the first parameter or gradient that went bad.
//!
//! The scan runs on the device and reads back one number per tensor, all in
//! one transfer: for each tensor `t` it computes `sum(t * 0)`, which is
//! exactly `0` when every element is finite and `NaN` as soon as one is NaN
//! or ±infinity (`inf * 0 = NaN`, and NaN propagates through the sum). Unlike
//! `sum(t)`, it cannot overflow to infinity on large finite values, so it
//! never reports a false alarm.
//!
//! ```
//! use flaxen_runtime::guard::{check_finite, TensorKind};
//! use flaxen_runtime::dfdx::prelude::*;
//!
//! let dev = Cpu::default();
//! let mut model = dev.build_module::<(Linear<2, 3>, ReLU, Linear<3, 1>), f32>();
//! assert!(check_finite(&model, None, 10).is_ok());
//!
//! let mut b = model.2.bias.as_vec();
//! b[0] = f32::NAN;
//! model.2.bias.copy_from(&b);
//! let err = check_finite(&model, None, 11).unwrap_err();
//! assert_eq!(err.to_string(), "step 11: parameter `2.bias` contains NaN or infinity");
//! ```

use crate::dfdx::nn::tensor_collection::{
    RecursiveWalker, TensorCollection, TensorOptions, TensorVisitor, ViewTensorName, ViewTensorRef,
};
use crate::dfdx::prelude::{Device, Dtype, Gradients, Shape, SumTo, Tensor, TryMul, TryStack};

/// Whether a bad tensor is a parameter or its gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorKind {
    /// A model parameter.
    Parameter,
    /// The gradient of a model parameter.
    Gradient,
}

impl std::fmt::Display for TensorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TensorKind::Parameter => "parameter",
            TensorKind::Gradient => "gradient",
        })
    }
}

/// What the guard found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// A tensor holds NaN or ±infinity.
    #[error("step {step}: {kind} `{path}` contains NaN or infinity")]
    NonFinite {
        /// The training step the caller reported.
        step: u64,
        /// Parameter or gradient.
        kind: TensorKind,
        /// The tensor's dfdx path, e.g. `conv_0.weight` (the checkpoint key
        /// without its `params.` prefix).
        path: String,
    },
    /// The device failed while scanning.
    #[error("device error during the NaN/Inf check: {0}")]
    Device(String),
}

/// Collects `sum(t * 0)` per tensor (on the device) and the tensor's path.
struct Probe<'a, E: Dtype, D: Device<E>> {
    grads: Option<&'a Gradients<E, D>>,
    paths: Vec<String>,
    probes: Vec<Tensor<(), E, D>>,
}

impl<E: Dtype, D: Device<E>> TensorVisitor<E, D> for Probe<'_, E, D> {
    type Viewer = (ViewTensorRef, ViewTensorName);
    type Err = D::Err;
    type E2 = E;
    type D2 = D;

    fn visit<S: Shape>(
        &mut self,
        _: TensorOptions<S, E, D>,
        (t, path): (&Tensor<S, E, D>, String),
    ) -> Result<Option<Tensor<S, E, D>>, D::Err> {
        let zero = E::from_f32(0.0).unwrap_or_default();
        let t = match self.grads {
            Some(g) => g.get(t),
            None => t.clone(),
        };
        self.probes
            .push(t.try_mul(zero)?.try_sum::<(), S::AllAxes>()?);
        self.paths.push(path);
        Ok(None)
    }
}

fn first_bad<E, D, M>(
    model: &M,
    grads: Option<&Gradients<E, D>>,
) -> Result<Option<String>, GuardError>
where
    E: Dtype,
    D: Device<E>,
    M: TensorCollection<E, D>,
{
    let mut probe = Probe {
        grads,
        paths: Vec::new(),
        probes: Vec::new(),
    };
    M::iter_tensors(&mut RecursiveWalker {
        m: (model, String::new()),
        f: &mut probe,
    })
    .map_err(|e| GuardError::Device(format!("{e:?}")))?;
    if probe.probes.is_empty() {
        return Ok(None);
    }
    // One device-to-host copy for all tensors.
    let values = probe
        .probes
        .try_stack()
        .map_err(|e| GuardError::Device(format!("{e:?}")))?
        .as_vec();
    // Exactly 0 means all finite; anything else (NaN) means a bad element.
    let bad = values.iter().position(|v| v.to_f64() != Some(0.0));
    Ok(bad.map(|i| probe.paths.swap_remove(i)))
}

/// Checks every parameter of `model`, then (if given) every gradient, in
/// dfdx path order, and names the first tensor holding NaN or ±infinity.
/// `step` is only reported back in the error.
///
/// # Panics
///
/// If `grads` lacks the gradient of one of the model's parameters, dfdx's
/// `Gradients::get` panics; gradients from `model.alloc_grads()` (kept with
/// `zero_grads`) always hold all of them.
///
/// ```
/// use flaxen_runtime::guard::{check_finite, GuardError, TensorKind};
/// use flaxen_runtime::dfdx::prelude::*;
///
/// let dev = Cpu::default();
/// let model = dev.build_module::<Linear<2, 2>, f32>();
/// let x: Tensor<Rank2<1, 2>, f32, _> = dev.tensor([[f32::INFINITY, 1.0]]);
/// let grads = model.forward(x.leaky_trace()).sum().backward();
/// let err = check_finite(&model, Some(&grads), 3).unwrap_err();
/// assert_eq!(
///     err,
///     GuardError::NonFinite { step: 3, kind: TensorKind::Gradient, path: "weight".into() }
/// );
/// ```
pub fn check_finite<E, D, M>(
    model: &M,
    grads: Option<&Gradients<E, D>>,
    step: u64,
) -> Result<(), GuardError>
where
    E: Dtype,
    D: Device<E>,
    M: TensorCollection<E, D>,
{
    if let Some(path) = first_bad(model, None)? {
        return Err(GuardError::NonFinite {
            step,
            kind: TensorKind::Parameter,
            path,
        });
    }
    if let Some(grads) = grads {
        if let Some(path) = first_bad(model, Some(grads))? {
            return Err(GuardError::NonFinite {
                step,
                kind: TensorKind::Gradient,
                path,
            });
        }
    }
    Ok(())
}
