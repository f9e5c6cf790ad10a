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
use rayon::prelude::*;

/// Adam's constants for one step, from `f64` hyper-parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamConsts {
    pub(crate) b1: f64,
    pub(crate) b2: f64,
    pub(crate) eps: f64,
    /// 1-based step, for the bias corrections.
    pub(crate) t: i32,
}

/// Whether [`run_on_host`] runs on buffers of type `V` (the storage of
/// `Cpu` in `f32` or `f64`), i.e. whether a state needs the host kernels'
/// scratch buffer.
pub(crate) fn on_host<V: 'static>() -> bool {
    let v = TypeId::of::<V>();
    v == TypeId::of::<<Cpu as Storage<f32>>::Vec>()
        || v == TypeId::of::<<Cpu as Storage<f64>>::Vec>()
}

/// A per-element computation over host slices (moments, scratch) and the
/// gradient, in any float type: element `i` of every output depends only
/// on element `i` of the inputs, so [`run_on_host`] may split the slices
/// across threads.
pub(crate) trait HostKernel: Sync {
    fn run<F: Float>(&self, bufs: &mut [&mut [F]], grad: &[F]);
}

/// Dtypes whose `Cpu` buffers [`run_on_host`] can view as slices.
trait HostFloat: Float + 'static {
    fn view(v: &dyn Any) -> Option<&[Self]>;
    fn view_mut(v: &mut dyn Any) -> Option<&mut [Self]>;
}

// `<Cpu as Storage<F>>::Vec` derefs to `Vec<F>` once `F` is concrete.
macro_rules! host_float {
    ($f:ty) => {
        impl HostFloat for $f {
            fn view(v: &dyn Any) -> Option<&[Self]> {
                v.downcast_ref::<<Cpu as Storage<$f>>::Vec>()
                    .map(|h| h.as_slice())
            }
            fn view_mut(v: &mut dyn Any) -> Option<&mut [Self]> {
                v.downcast_mut::<<Cpu as Storage<$f>>::Vec>()
                    .map(|h| h.as_mut_slice())
            }
        }
    };
}
host_float!(f32);
host_float!(f64);

fn views<'a, F: HostFloat, V: 'static>(
    bufs: &'a mut [&mut V],
    grad: &'a V,
) -> Option<(Vec<&'a mut [F]>, &'a [F])> {
    let g = F::view(grad)?;
    let mut out = Vec::with_capacity(bufs.len());
    for b in bufs.iter_mut() {
        out.push(F::view_mut(&mut **b)?);
    }
    Some((out, g))
}

/// Runs `kernel` when `bufs` and `grad` are host buffers (`Cpu`, `f32` or
/// `f64`); returns `false`, touching nothing, otherwise.
pub(crate) fn run_on_host<V: 'static, K: HostKernel>(
    kernel: &K,
    bufs: &mut [&mut V],
    grad: &V,
) -> bool {
    if let Some((b, g)) = views::<f32, V>(bufs, grad) {
        run_split(kernel, b, g);
        return true;
    }
    if let Some((b, g)) = views::<f64, V>(bufs, grad) {
        run_split(kernel, b, g);
        return true;
    }
    false
}

/// Elements per task of [`run_split`]: a task outweighs its scheduling.
const SPLIT: usize = 1 << 15;

/// `kernel` over `bufs` and `g`, in blocks of [`SPLIT`] elements on the
/// rayon threads (the same arithmetic per element, so the same results).
fn run_split<F: Float + Send + Sync, K: HostKernel>(kernel: &K, mut bufs: Vec<&mut [F]>, g: &[F]) {
    if g.len() <= SPLIT {
        return kernel.run(&mut bufs, g);
    }
    let blocks = g.len().div_ceil(SPLIT);
    let mut per: Vec<Vec<&mut [F]>> = (0..blocks)
        .map(|_| Vec::with_capacity(bufs.len()))
        .collect();
    for b in bufs {
        for (i, c) in b.chunks_mut(SPLIT).enumerate() {
            per[i].push(c);
        }
    }
    per.into_par_iter()
        .zip(g.par_chunks(SPLIT))
        .for_each(|(mut b, g)| kernel.run(&mut b, g));
}

/// `x` rounded from `f64` to `F` (hyper-parameters are `f64`, as Python's
/// floats; Optax's weak types round them on use).
#[inline(always)]
fn cast<F: Float>(x: f64) -> F {
    F::from(x).unwrap_or_else(F::nan)
}

impl HostKernel for AdamConsts {
    /// `bufs`: `mu`, `nu`, and the direction's output.
    fn run<F: Float>(&self, bufs: &mut [&mut [F]], g: &[F]) {
        if let [mu, nu, dir] = bufs {
            adam_host_simd(self, mu, nu, dir, g);
        }
    }
}

simd_dispatch!(fn adam_host_simd<F: Float>(
    c: &AdamConsts,
    mu: &mut [F],
    nu: &mut [F],
    dir: &mut [F],
    g: &[F],
) => adam_host);

/// Optax's `scale_by_adam` (eps_root = 0, no Nesterov) on host slices:
/// `mu = (1 - b1) g + b1 mu`, `nu = (1 - b2) g² + b2 nu`,
/// `dir = (mu / (1 - b1^t)) / (sqrt(nu / (1 - b2^t)) + eps)`, with `1 - b`
/// rounded from `f64` and the bias corrections computed in `F` (as Optax
/// does in `f32` without `jax_enable_x64`).
#[inline(always)]
fn adam_host<F: Float>(c: &AdamConsts, mu: &mut [F], nu: &mut [F], dir: &mut [F], g: &[F]) {
    let (b1, b2): (F, F) = (cast(c.b1), cast(c.b2));
    let (w1, w2): (F, F) = (cast(1.0 - c.b1), cast(1.0 - c.b2));
    // `b^t` as a correctly rounded power of the rounded `b`: XLA's `pow`
    // agrees with it where `powi`'s repeated products drift by an ulp, and
    // `1 - b2^t` turns that ulp into 3e-5 (relative) at t = 2.
    let pow = |b: F| cast(b.to_f64().unwrap_or(f64::NAN).powf(f64::from(c.t)));
    let bc1 = F::one() - pow(b1);
    let bc2 = F::one() - pow(b2);
    let eps: F = cast(c.eps);
    for (((m, v), d), &g) in mu.iter_mut().zip(nu.iter_mut()).zip(dir.iter_mut()).zip(g) {
        *m = w1 * g + b1 * *m;
        *v = w2 * (g * g) + b2 * *v;
        *d = (*m / bc1) / ((*v / bc2).sqrt() + eps);
    }
}

/// Optax's `rmsprop` for one step, from `f64` hyper-parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RmsConsts {
    pub(crate) lr: f64,
    pub(crate) decay: f64,
    pub(crate) eps: f64,
    pub(crate) centered: bool,
    pub(crate) momentum: Option<f64>,
    pub(crate) nesterov: bool,
}

impl HostKernel for RmsConsts {
    /// `bufs`: `nu`, then `mu` if centered, `trace` with momentum, and the
    /// update's output.
    fn run<F: Float>(&self, bufs: &mut [&mut [F]], g: &[F]) {
        rms_host_simd(self, bufs, g);
    }
}

simd_dispatch!(fn rms_host_simd<F: Float>(c: &RmsConsts, bufs: &mut [&mut [F]], g: &[F]) => rms_host);

/// Optax's `rmsprop` on host slices (see [`RmsConsts`]'s `run`).
#[inline(always)]
fn rms_host<F: Float>(c: &RmsConsts, bufs: &mut [&mut [F]], g: &[F]) {
    let (w, d, eps): (F, F, F) = (cast(1.0 - c.decay), cast(c.decay), cast(c.eps));
    let neg_lr: F = cast(-c.lr);
    let m: F = cast(c.momentum.unwrap_or(0.0));
    let (nu, rest) = match bufs.split_first_mut() {
        Some((nu, rest)) => (nu, rest),
        None => return,
    };
    let (mut mu, rest) = match (c.centered, rest) {
        (true, [mu, rest @ ..]) => (Some(mu), rest),
        (_, rest) => (None, rest),
    };
    let (mut trace, out) = match (c.momentum.is_some(), rest) {
        (true, [trace, out]) => (Some(trace), out),
        (false, [out]) => (None, out),
        _ => return,
    };
    for i in 0..g.len() {
        let gi = g[i];
        nu[i] = w * (gi * gi) + d * nu[i];
        // Optax's scale_by_stddev / scale_by_rms: `rsqrt(nu - mu² + eps)`.
        let var = match &mut mu {
            Some(mu) => {
                mu[i] = w * gi + d * mu[i];
                nu[i] - mu[i] * mu[i] + eps
            }
            None => nu[i] + eps,
        };
        // Then scale_by_learning_rate, then trace (momentum after the
        // learning rate, unlike PyTorch's).
        let mut u = (rsqrt(var) * gi) * neg_lr;
        if let Some(trace) = &mut trace {
            trace[i] = u + m * trace[i];
            u = if c.nesterov {
                u + m * trace[i]
            } else {
                trace[i]
            };
        }
        out[i] = u;
    }
}

/// `1 / sqrt(x)` correctly rounded (through `f64`): XLA's `rsqrt` is within
/// an ulp of it, and agrees more often than `1 / sqrt` in `F` does.
#[inline(always)]
fn rsqrt<F: Float>(x: F) -> F {
    cast(1.0 / x.to_f64().unwrap_or(f64::NAN).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Split across threads, the kernel gives the values it gives in one
    /// piece, bit for bit (three blocks and a ragged tail).
    #[test]
    fn split_runs_equal_one_run() {
        let n = 3 * SPLIT + 123;
        let g: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin()).collect();
        let start = |k: f32| -> Vec<f32> { (0..n).map(|i| ((i as f32) * k).cos() * 0.1).collect() };
        let c = AdamConsts {
            b1: 0.9,
            b2: 0.999,
            eps: 1e-8,
            t: 3,
        };
        let (mut m1, mut v1, mut d1) = (
            start(0.11),
            start(0.13).iter().map(|v| v * v).collect::<Vec<_>>(),
            vec![0.0; n],
        );
        let (mut m2, mut v2, mut d2) = (m1.clone(), v1.clone(), d1.clone());
        c.run(&mut [&mut m1[..], &mut v1[..], &mut d1[..]], &g);
        run_split(&c, vec![&mut m2[..], &mut v2[..], &mut d2[..]], &g);
        assert_eq!((m1, v1, d1), (m2, v2, d2));
    }
}
