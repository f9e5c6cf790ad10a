//! `scale_by_adam` (Optax): Adam's direction `m̂ / (sqrt(v̂ + eps_root) + eps)`.

use dfdx::prelude::{Dtype, Storage};
use dfdx::tensor_ops::Device;

use crate::optim::alias::{Primitive, Step};
use crate::optim::exact::{on_host, AdamConsts, AdamStep};
use crate::optim::fused::{Fusion, Plan};
use crate::optim::state::Bufs;
use crate::optim::Params;

/// Optax's `scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0)`:
/// `mu = (1 - b1) g + b1 mu`, `nu = (1 - b2) g² + b2 nu`, `updates = m̂ /
/// (sqrt(v̂ + eps_root) + eps)` with `m̂ = mu / (1 - b1^t)`, `v̂ = nu / (1 -
/// b2^t)`. State: `count`, `mu.<leaf>`, `nu.<leaf>`.
///
/// The arithmetic is Optax's, rounding included, on host buffers (`Cpu`,
/// `f32`/`f64`): the weights `1 - b` computed in `f64` and rounded to the
/// dtype, the bias corrections `1 - b^t` in the dtype. Elsewhere (CUDA,
/// `f16`), and with [`pytorch_arithmetic`](ScaleByAdam::pytorch_arithmetic),
/// it is dfdx's fused Adam kernel, which rounds `1 - b` in the dtype as
/// PyTorch does and has no `eps_root` (a warning is printed once when a
/// non-zero `eps_root` meets it).
///
/// ```
/// use flaxen_runtime::optim::{chain, scale_by_adam, scale_by_learning_rate};
/// // Optax's `adam(1e-3)`, each member's state under its own prefix.
/// let tx = chain((scale_by_adam().b2(0.99), scale_by_learning_rate(1e-3)));
/// # let _ = tx;
/// ```
pub fn scale_by_adam() -> ScaleByAdam {
    ScaleByAdam {
        b1: 0.9,
        b2: 0.999,
        eps: 1e-8,
        eps_root: 0.0,
        pytorch: false,
    }
}

/// The primitive built by [`scale_by_adam`].
///
/// ```
/// let p: flaxen_runtime::optim::ScaleByAdam = flaxen_runtime::optim::scale_by_adam()
///     .b1(0.8)
///     .eps(1e-6)
///     .eps_root(1e-8)
///     .pytorch_arithmetic(false);
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ScaleByAdam {
    pub(crate) b1: f64,
    pub(crate) b2: f64,
    pub(crate) eps: f64,
    pub(crate) eps_root: f64,
    pub(crate) pytorch: bool,
}

crate::optim::builders! { impl[] ScaleByAdam {
    /// Decay rate of the first moment (default 0.9).
    b1: f64 => [b1];
    /// Decay rate of the second moment (default 0.999).
    b2: f64 => [b2];
    /// Added to the root of the second moment (default 1e-8).
    eps: f64 => [eps];
    /// Added to `v̂` inside the square root (default 0).
    eps_root: f64 => [eps_root];
    /// With `true`, dfdx's fused Adam kernel everywhere (PyTorch's rounding
    /// of `1 - b`: in `f32` with `b2 = 0.999` each step ≈6.7e-6 relative
    /// larger than Optax's). Default `false`.
    pytorch_arithmetic: bool => [pytorch];
}}

impl ScaleByAdam {
    fn consts(&self, count: u64) -> AdamConsts {
        AdamConsts {
            b1: self.b1,
            b2: self.b2,
            eps: self.eps,
            eps_root: self.eps_root,
            t: i32::try_from(count + 1).unwrap_or(i32::MAX),
        }
    }
}

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ScaleByAdam {
    fn init(&self, _params: &Params<E, D>) -> Result<Bufs<E, D>, D::Err> {
        if self.eps_root != 0.0 && (self.pytorch || !on_host::<<D as Storage<E>>::Vec>()) {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!(
                    "flaxen: scale_by_adam's eps_root is ignored by dfdx's Adam kernel \
                     (CUDA, f16, pytorch_arithmetic); only eps applies"
                )
            });
        }
        Ok(Bufs::default().with_map("mu").with_map("nu"))
    }

    /// Optax's arithmetic writes its direction into one more buffer.
    fn extra(&self, host: bool) -> usize {
        usize::from(host && !self.pytorch)
    }

    fn counted(&self) -> bool {
        true
    }

    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (at, state, updates, params) = step.parts();
        // `param -= -1 * direction` on a zeroed tensor leaves the direction.
        let kernel = Plan::Adam {
            step: AdamStep {
                adam: self.consts(at.count),
                lr: -1.0,
                weight_decay: None,
            },
            pytorch: self.pytorch,
        };
        state.kernel_step(at.k..at.k + 1, &kernel, updates, params)
    }

    fn fusion(&self, count: u64) -> Fusion {
        Fusion::Adam {
            consts: self.consts(count),
            pytorch: self.pytorch,
        }
    }
}
