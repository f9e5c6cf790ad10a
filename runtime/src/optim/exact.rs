//! Optax's rounding of Adam's constants, for the buffers that live in host
//! memory (`Cpu`, `f32` and `f64`).
//!
//! dfdx's fused Adam kernel computes the moment weights as `1 - b` in the
//! dtype, from `b` already rounded to it; Optax computes `1 - b` in Python
//! double and rounds the result (a JAX weak type). In `f32` with
//! `b2 = 0.999` that is `0.00099998713` against `0.001`, which makes every
//! step ≈6.7e-6 (relative) larger than Optax's. dfdx gives no way to pass
//! other constants to its kernel, so for host buffers this module computes
//! Optax's direction `m̂ / (sqrt(v̂) + eps)` itself, in the same single pass
//! and in Optax's order of operations; the learning-rate step is then
//! dfdx's SGD kernel (`p -= lr * (direction + wd * p)`, Optax's
//! `add_decayed_weights` then `scale_by_learning_rate`, same rounding).
//! Other buffers (CUDA, `f16`) keep dfdx's kernel.

use std::any::{Any, TypeId};

use dfdx::prelude::{Cpu, Storage};
use num_traits::Float;

/// Adam's constants for one step, from `f64` hyper-parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamConsts {
    pub(crate) b1: f64,
    pub(crate) b2: f64,
    pub(crate) eps: f64,
    /// 1-based step, for the bias corrections.
    pub(crate) t: i32,
}

/// Whether [`adam_direction`] runs on buffers of type `V` (the storage of
/// `Cpu` in `f32` or `f64`), i.e. whether a state needs its direction
/// buffer.
pub(crate) fn on_host<V: 'static>() -> bool {
    let v = TypeId::of::<V>();
    v == TypeId::of::<<Cpu as Storage<f32>>::Vec>()
        || v == TypeId::of::<<Cpu as Storage<f64>>::Vec>()
}

/// Updates the moments `mu`, `nu` with `grad` and writes Optax's direction
/// `m̂ / (sqrt(v̂) + eps)` into `dir`, when the buffers are host memory;
/// returns `false` (touching nothing) otherwise.
pub(crate) fn adam_direction<V: 'static>(
    c: &AdamConsts,
    mu: &mut V,
    nu: &mut V,
    dir: &mut V,
    grad: &V,
) -> bool {
    // `<Cpu as Storage<F>>::Vec` derefs to `Vec<F>` once `F` is concrete.
    macro_rules! try_dtype {
        ($f:ty) => {
            type H = <Cpu as Storage<$f>>::Vec;
            if let (Some(mu), Some(nu), Some(dir), Some(g)) = (
                (&mut *mu as &mut dyn Any).downcast_mut::<H>(),
                (&mut *nu as &mut dyn Any).downcast_mut::<H>(),
                (&mut *dir as &mut dyn Any).downcast_mut::<H>(),
                (grad as &dyn Any).downcast_ref::<H>(),
            ) {
                adam_host::<$f>(c, mu, nu, dir, g);
                return true;
            }
        };
    }
    {
        try_dtype!(f32);
    }
    {
        try_dtype!(f64);
    }
    false
}

/// Optax's `scale_by_adam` (eps_root = 0, no Nesterov) on host slices:
/// `mu = (1 - b1) g + b1 mu`, `nu = (1 - b2) g² + b2 nu`,
/// `dir = (mu / (1 - b1^t)) / (sqrt(nu / (1 - b2^t)) + eps)`, with `1 - b`
/// rounded from `f64` and the bias corrections computed in `F` (as Optax
/// does in `f32` without `jax_enable_x64`).
fn adam_host<F: Float>(c: &AdamConsts, mu: &mut [F], nu: &mut [F], dir: &mut [F], g: &[F]) {
    let cast = |x: f64| F::from(x).unwrap_or_else(F::nan);
    let (b1, b2) = (cast(c.b1), cast(c.b2));
    let (w1, w2) = (cast(1.0 - c.b1), cast(1.0 - c.b2));
    // `b^t` as a correctly rounded power of the rounded `b`: XLA's `pow`
    // agrees with it where `powi`'s repeated products drift by an ulp, and
    // `1 - b2^t` turns that ulp into 3e-5 (relative) at t = 2.
    let pow = |b: F| cast(b.to_f64().unwrap_or(f64::NAN).powf(f64::from(c.t)));
    let bc1 = F::one() - pow(b1);
    let bc2 = F::one() - pow(b2);
    let eps = cast(c.eps);
    for (((m, v), d), &g) in mu.iter_mut().zip(nu.iter_mut()).zip(dir.iter_mut()).zip(g) {
        *m = w1 * g + b1 * *m;
        *v = w2 * (g * g) + b2 * *v;
        *d = (*m / bc1) / ((*v / bc2).sqrt() + eps);
    }
}
