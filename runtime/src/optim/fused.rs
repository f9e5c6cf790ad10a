//! The fused fast paths: dfdx's optimizer kernels (and Optax-exact host
//! passes) that do the work of several primitives in one pass per tensor,
//! and the plan that picks one for a chain of primitives.
//!
//! dfdx's kernels read the gradient and the moments as raw device buffers
//! and write the result into a tensor: `param -= step(grad, moments)`.
//! Run on a zeroed tensor they leave exactly `-step`, the Optax update
//! ([`LeafState::kernel_step`](super::state::LeafState)); run on the
//! parameter they apply it in place.
//!
//! A chain matches a plan when its primitives, with the no-ops left out,
//! are one of ([`plan`]):
//! - `scale_by_adam`, `scale_by_learning_rate`: the Adam kernel;
//! - `scale_by_adam`, `add_decayed_weights` (unmasked),
//!   `scale_by_learning_rate`: the Adam kernel with decoupled decay, when
//!   applied in place only (the two-step path runs the primitives, which
//!   is Optax's rounding of the decay);
//! - `scale_by_rms`, `scale_by_learning_rate`, optionally `trace`: the
//!   RMSProp kernel;
//! - optionally `trace`, then `scale_by_learning_rate`: the SGD kernel.
//!
//! Each gives the primitives' results bit for bit on host buffers
//! (`tests/optim_primitives.rs` composes every optimizer from its
//! primitives with `chain` and compares), and Optax's
//! (`tests/optim_optax_exact.rs`).

use dfdx::prelude::{Dtype, Shape, Storage, Tensor};
use dfdx::tensor_ops::{AdamConfig, Device, Momentum, RMSpropConfig, SgdConfig, WeightDecay};

use super::exact::{run_on_host, run_on_host_param, AdamConsts, AdamStep, Held, RmsConsts};

/// What a primitive contributes to a fused kernel at one step.
#[derive(Debug, Clone, Copy)]
pub enum Fusion {
    /// Not part of any kernel.
    No,
    /// Changes nothing this step (a zero decay, a trace without momentum).
    Skip,
    /// `scale_by_adam` (`pytorch`: dfdx's rounding of the constants).
    Adam { consts: AdamConsts, pytorch: bool },
    /// `scale_by_rms` / `scale_by_stddev`.
    Rms {
        decay: f64,
        eps: f64,
        centered: bool,
    },
    /// `trace`.
    Trace { momentum: f64, nesterov: bool },
    /// `add_decayed_weights` on every leaf.
    Decay(f64),
    /// `scale_by_learning_rate` (flipped sign) at this step's rate.
    Lr(f64),
}

/// One of dfdx's fused optimizer kernels (or an Optax-exact host pass) with
/// its configuration for one step: `param -= step(grad, moments)`. A
/// primitive alone runs one with a learning rate of -1, which leaves its
/// direction in a zeroed tensor.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Plan {
    /// Adam at step `t`: Optax's direction and learning-rate step in one
    /// pass on host buffers ([`AdamStep`]), dfdx's fused Adam kernel
    /// elsewhere or with `pytorch`. Buffers: `mu`, `nu`, and on host the
    /// direction (which holds the parameter between steps, see [`Held`]).
    Adam { step: AdamStep, pytorch: bool },
    /// Optax's rmsprop on host buffers, then dfdx's SGD kernel adding the
    /// update; elsewhere dfdx's fused RMSprop kernel (eps inside the square
    /// root, as Optax's default `eps_in_sqrt=True`). Buffers: `nu`, `mu`
    /// (centred), `trace` (momentum), then the host pass's output or
    /// dfdx's unused ones.
    Rms(RmsConsts),
    /// dfdx's SGD kernel: `velocity = g + m * velocity`, `param -= lr *
    /// velocity` (Optax's `trace` then the learning rate); without momentum
    /// it only reads its velocity buffer.
    Sgd(SgdConfig),
}

impl Plan {
    /// Unsaved kernel buffers the plan walks besides the primitives' own.
    pub(crate) fn extra(&self, host: bool) -> usize {
        match self {
            Plan::Adam { pytorch, .. } => usize::from(host && !pytorch),
            Plan::Rms(c) => rms_extra(c, host),
            Plan::Sgd(cfg) => usize::from(cfg.momentum.is_none()),
        }
    }
}

/// RMSProp's unsaved buffers: the host pass writes the update into one;
/// dfdx's kernel walks momentum and centering buffers even when unused.
pub(crate) fn rms_extra(c: &RmsConsts, host: bool) -> usize {
    if host {
        1
    } else {
        3 - c.saved()
    }
}

/// The kernel for a chain whose members contribute `parts`, if any;
/// `in_place`: the updates are applied to the parameters right away.
pub(crate) fn plan(parts: &[Fusion], in_place: bool) -> Option<Plan> {
    let parts: Vec<Fusion> = parts
        .iter()
        .copied()
        .filter(|p| !matches!(p, Fusion::Skip))
        .collect();
    let adam = |adam, pytorch, lr, weight_decay| Plan::Adam {
        step: AdamStep {
            adam,
            lr,
            weight_decay,
        },
        pytorch,
    };
    let sgd = |lr, momentum: Option<(f64, bool)>| {
        Plan::Sgd(SgdConfig {
            lr,
            momentum: momentum.map(|(m, nesterov)| match nesterov {
                true => Momentum::Nesterov(m),
                false => Momentum::Classic(m),
            }),
            weight_decay: None,
        })
    };
    let rms = |decay, eps, centered, lr, momentum: Option<(f64, bool)>| {
        Plan::Rms(RmsConsts {
            lr,
            decay,
            eps,
            centered,
            momentum: momentum.map(|m| m.0),
            nesterov: momentum.is_some_and(|m| m.1),
        })
    };
    use Fusion::*;
    Some(match parts[..] {
        [Adam { consts, pytorch }, Lr(lr)] => adam(consts, pytorch, lr, None),
        [Adam { consts, pytorch }, Decay(wd), Lr(lr)] if in_place => {
            adam(consts, pytorch, lr, Some(wd))
        }
        [Rms {
            decay,
            eps,
            centered,
        }, Lr(lr)] => rms(decay, eps, centered, lr, None),
        [Rms {
            decay,
            eps,
            centered,
        }, Lr(lr), Trace { momentum, nesterov }] => {
            rms(decay, eps, centered, lr, Some((momentum, nesterov)))
        }
        [Lr(lr)] => sgd(lr, None),
        [Trace { momentum, nesterov }, Lr(lr)] => sgd(lr, Some((momentum, nesterov))),
        _ => return None,
    })
}

impl Plan {
    /// Runs the kernel on one tensor; `held` is the leaf's [`Held`].
    pub(crate) fn run<E: Dtype, D: Device<E>, S: Shape>(
        &self,
        param: &mut Tensor<S, E, D>,
        moments: &mut [&mut <D as Storage<E>>::Vec],
        grad: &<D as Storage<E>>::Vec,
        held: &mut Held,
    ) -> Result<(), D::Err> {
        match self {
            Plan::Adam { step, pytorch } => run_adam(step, *pytorch, param, moments, grad, held),
            Plan::Rms(c) => run_rms(c, param, moments, grad),
            Plan::Sgd(cfg) => cfg.try_update(param, moments[0], grad),
        }
    }
}

fn run_adam<E: Dtype, D: Device<E>, S: Shape>(
    step: &AdamStep,
    pytorch: bool,
    param: &mut Tensor<S, E, D>,
    moments: &mut [&mut <D as Storage<E>>::Vec],
    grad: &<D as Storage<E>>::Vec,
    held: &mut Held,
) -> Result<(), D::Err> {
    // Three buffers (mu, nu, direction) exactly when the state was
    // built for the host kernel.
    if let (false, [mu, nu, dir]) = (pytorch, &mut *moments) {
        // `param -= lr * (dir + wd * param)`: Optax's
        // `add_decayed_weights` then `scale_by_learning_rate`, after the
        // direction in the same pass; the direction's buffer holds the
        // parameter meanwhile.
        if run_on_host_param(step, param, &mut [&mut **mu, &mut **nu], dir, grad, held) {
            return Ok(());
        }
    }
    let [mu, nu, ..] = moments else {
        unreachable!("adam has two moments")
    };
    let c = &step.adam;
    let cfg = AdamConfig {
        lr: step.lr,
        betas: [c.b1, c.b2],
        eps: c.eps,
        weight_decay: step.weight_decay.map(WeightDecay::Decoupled),
    };
    cfg.try_update(c.t, param, mu, nu, grad)
}

fn run_rms<E: Dtype, D: Device<E>, S: Shape>(
    c: &RmsConsts,
    param: &mut Tensor<S, E, D>,
    moments: &mut [&mut <D as Storage<E>>::Vec],
    grad: &<D as Storage<E>>::Vec,
) -> Result<(), D::Err> {
    // One buffer past the saved ones exactly when the state was built
    // for the host kernel.
    if moments.len() == c.saved() + 1 && run_on_host(c, moments, grad) {
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
