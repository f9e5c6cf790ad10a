//! Optax's rounding of Adam's constants, for the buffers that live in host
//! memory (`Cpu`, `f32` and `f64`).
//!
//! dfdx's fused Adam kernel computes the moment weights as `1 - b` in the
//! dtype, from `b` already rounded to it; Optax computes `1 - b` in Python
//! double and rounds the result (a JAX weak type). In `f32` with
//! `b2 = 0.999` that is `0.00099998713` against `0.001`, which makes every
//! step ≈6.7e-6 (relative) larger than Optax's. dfdx gives no way to pass
//! other constants to its kernel, so for host buffers this module computes
//! Optax's direction `m̂ / (sqrt(v̂) + eps)` itself, in Optax's order of
//! operations, and the learning-rate step after it in the same pass
//! ([`AdamStep`]: `p -= lr * (direction + wd * p)`, Optax's
//! `add_decayed_weights` then `scale_by_learning_rate`, rounded as dfdx's
//! SGD kernel rounds it). Other buffers (CUDA, `f16`) keep dfdx's kernel.
//!
//! The pass runs on the rayon threads. It replaced a host pass for the
//! direction followed by dfdx's SGD kernel, a serial loop that measured as
//! 5% of a W2 training step's cycles on its own; dfdx keeps a tensor's
//! memory private, so the parameter is copied out, updated and written
//! back ([`run_on_host_param`]; the copy is kept for the next step while
//! the parameter provably has not changed, see [`Held`]), and the result
//! is the two kernels', bit for bit.

use std::any::{Any, TypeId};

use dfdx::prelude::{CopySlice, Cpu, HasShape, Shape, Storage, Tensor};
use num_traits::Float;
use rayon::prelude::*;

/// Adam's constants for one step, from `f64` hyper-parameters.
#[derive(Debug, Clone, Copy)]
pub struct AdamConsts {
    pub(crate) b1: f64,
    pub(crate) b2: f64,
    pub(crate) eps: f64,
    /// Added to `v̂` inside the square root (0 for Adam, exact then).
    pub(crate) eps_root: f64,
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

/// A clone of the parameter that [`run_on_host_param`] last wrote, kept
/// with the leaf's buffers: while the parameter still has that clone's
/// memory, the direction buffer still holds its values.
///
/// dfdx changes a tensor's values only through `Arc::make_mut`, which gives
/// a tensor whose memory is shared (here, with this clone) a copy of its
/// own first. So a parameter that still has the clone's memory has not
/// changed since the clone was taken, whoever held it meanwhile; one that
/// was written (`copy_from`, a checkpoint load, another optimizer) or
/// replaced has other memory, and is copied out again. A clone of the
/// optimizer state starts without one.
#[derive(Default)]
pub(crate) struct Held(Option<Box<dyn Any + Send + Sync>>);

impl Clone for Held {
    fn clone(&self) -> Self {
        Self(None)
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Held(param)"
        } else {
            "Held(none)"
        })
    }
}

impl Held {
    /// Forgets the clone: the direction buffer is about to hold something
    /// else.
    pub(crate) fn clear(&mut self) {
        self.0 = None;
    }

    /// Whether `param` still has the memory of the clone held.
    fn still_holds<S: Shape, F: dfdx::prelude::Unit>(&self, param: &Tensor<S, F, Cpu>) -> bool {
        let Some(held) = self
            .0
            .as_ref()
            .and_then(|h| h.downcast_ref::<Tensor<S, F, Cpu>>())
        else {
            return false;
        };
        // The address of element 0 is the address of the tensor's memory.
        let first = Default::default();
        param.shape().num_elements() > 0
            && held.shape().num_elements() == param.shape().num_elements()
            && std::ptr::eq(&held[first], &param[first])
    }
}

/// Runs `kernel` with the values of `param` appended to `bufs` as their
/// last slice, in `out` (a buffer of `param`'s size the caller owns), and
/// writes the last slice back into `param`: for kernels that update the
/// parameter itself ([`AdamStep`]). `out` is filled from `param` unless
/// `held` shows it still holds `param`'s values from the last call, which
/// saves one copy of every parameter per step. Returns `false`, touching
/// nothing, unless all of them are host buffers (`Cpu`, `f32` or `f64`).
pub(crate) fn run_on_host_param<S: Shape, E, D: Storage<E>, K: HostKernel>(
    kernel: &K,
    param: &mut Tensor<S, E, D>,
    bufs: &mut [&mut D::Vec],
    out: &mut D::Vec,
    grad: &D::Vec,
    held: &mut Held,
) -> bool
where
    E: dfdx::prelude::Unit,
{
    fn run<S: Shape, F: HostFloat + dfdx::prelude::Unit, V: 'static, K: HostKernel>(
        kernel: &K,
        param: &mut dyn Any,
        bufs: &mut [&mut V],
        out: &mut V,
        grad: &V,
        held: &mut Held,
    ) -> bool
    where
        Cpu: CopySlice<F>,
    {
        let Some(param) = param.downcast_mut::<Tensor<S, F, Cpu>>() else {
            return false;
        };
        let Some((mut views, g)) = views::<F, V>(bufs, grad) else {
            return false;
        };
        let Some(out) = F::view_mut(out) else {
            return false;
        };
        if out.len() != g.len() || views.iter().any(|v| v.len() != g.len()) {
            return false;
        }
        if !held.still_holds(param) {
            param.copy_into(out);
        }
        // Dropped before the write, so that the parameter's memory is no
        // longer shared and `copy_from` writes it in place.
        held.clear();
        views.push(&mut *out);
        run_split(kernel, views, g);
        param.copy_from(out);
        held.0 = Some(Box::new(param.clone()));
        true
    }
    let param: &mut dyn Any = param;
    run::<S, f32, D::Vec, K>(kernel, param, bufs, out, grad, held)
        || run::<S, f64, D::Vec, K>(kernel, param, bufs, out, grad, held)
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

/// One step's constants of Optax's `scale_by_adam` in the dtype: the one
/// copy of its per-element formula.
struct AdamDir<F> {
    b1: F,
    b2: F,
    w1: F,
    w2: F,
    bc1: F,
    bc2: F,
    eps: F,
    eps_root: F,
}

impl<F: Float> AdamDir<F> {
    #[inline(always)]
    fn new(c: &AdamConsts) -> Self {
        let (b1, b2): (F, F) = (cast(c.b1), cast(c.b2));
        // `b^t` as a correctly rounded power of the rounded `b`: XLA's `pow`
        // agrees with it where `powi`'s repeated products drift by an ulp, and
        // `1 - b2^t` turns that ulp into 3e-5 (relative) at t = 2.
        let pow = |b: F| cast(b.to_f64().unwrap_or(f64::NAN).powf(f64::from(c.t)));
        Self {
            b1,
            b2,
            w1: cast(1.0 - c.b1),
            w2: cast(1.0 - c.b2),
            bc1: F::one() - pow(b1),
            bc2: F::one() - pow(b2),
            eps: cast(c.eps),
            eps_root: cast(c.eps_root),
        }
    }

    /// Updates the moments `m`, `v` with `g` and returns the direction.
    #[inline(always)]
    fn step(&self, m: &mut F, v: &mut F, g: F) -> F {
        *m = self.w1 * g + self.b1 * *m;
        *v = self.w2 * (g * g) + self.b2 * *v;
        (*m / self.bc1) / ((*v / self.bc2 + self.eps_root).sqrt() + self.eps)
    }
}

/// Adam's direction ([`AdamConsts`]) and the learning-rate step after it,
/// `p -= lr * (dir + wd * p)` with `lr` and `wd` rounded to the dtype and
/// dfdx's SGD kernel's order of operations (no momentum), in one pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamStep {
    pub(crate) adam: AdamConsts,
    pub(crate) lr: f64,
    pub(crate) weight_decay: Option<f64>,
}

impl HostKernel for AdamStep {
    /// `bufs`: `mu`, `nu`, and the parameter, updated in place.
    fn run<F: Float>(&self, bufs: &mut [&mut [F]], g: &[F]) {
        if let [mu, nu, p] = bufs {
            adam_step_simd(self, mu, nu, p, g);
        }
    }
}

simd_dispatch!(fn adam_step_simd<F: Float>(
    c: &AdamStep,
    mu: &mut [F],
    nu: &mut [F],
    p: &mut [F],
    g: &[F],
) => adam_step);

/// [`AdamDir::step`]'s direction, then dfdx's `sgd_kernel` on it, per
/// element.
#[inline(always)]
fn adam_step<F: Float>(c: &AdamStep, mu: &mut [F], nu: &mut [F], p: &mut [F], g: &[F]) {
    let a = AdamDir::new(&c.adam);
    let lr: F = cast(c.lr);
    let wd: Option<F> = c.weight_decay.map(cast);
    for (((m, v), p), &g) in mu.iter_mut().zip(nu.iter_mut()).zip(p.iter_mut()).zip(g) {
        let mut d = a.step(m, v, g);
        if let Some(wd) = wd {
            d = d + wd * *p;
        }
        *p = *p - d * lr;
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

impl RmsConsts {
    /// The saved buffers: `nu`, `mu` when centred, `trace` with momentum.
    pub(crate) fn saved(&self) -> usize {
        1 + usize::from(self.centered) + usize::from(self.momentum.is_some())
    }
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
    use dfdx::prelude::*;
    use dfdx::tensor_ops::{SgdConfig, WeightDecay};

    use super::*;

    fn start(n: usize, k: f32) -> Vec<f32> {
        (0..n).map(|i| ((i as f32) * k).cos() * 0.1).collect()
    }

    /// One pass of [`AdamStep`] equals Optax's direction followed by
    /// dfdx's SGD kernel (the two passes it replaces), bit for bit, with
    /// and without weight decay, split across threads (three blocks and a
    /// ragged tail) or not.
    #[test]
    fn fused_step_equals_direction_then_sgd() {
        let dev: Cpu = Default::default();
        for n in [1000, 3 * SPLIT + 123] {
            for weight_decay in [None, Some(0.3)] {
                let c = AdamStep {
                    adam: AdamConsts {
                        b1: 0.9,
                        b2: 0.999,
                        eps: 1e-8,
                        eps_root: 0.0,
                        t: 3,
                    },
                    lr: 0.7,
                    weight_decay,
                };
                let g = start(n, 0.37);
                let p0 = start(n, 0.05);
                let (mut m1, mut v1) = (start(n, 0.11), start(n, 0.13));
                v1.iter_mut().for_each(|v| *v *= *v);
                let (mut m2, mut v2) = (m1.clone(), v1.clone());

                // The reference: the direction, then dfdx's kernel.
                let a = AdamDir::<f32>::new(&c.adam);
                let dir: Vec<f32> = (0..n)
                    .map(|i| a.step(&mut m1[i], &mut v1[i], g[i]))
                    .collect();
                let mut want: Tensor<(usize,), f32, _> = dev.tensor_from_vec(p0.clone(), (n,));
                let sgd = SgdConfig {
                    lr: c.lr,
                    momentum: None,
                    weight_decay: weight_decay.map(WeightDecay::L2),
                };
                // dfdx's kernel takes its buffers as `Gradients` entries.
                let key: Tensor<(usize,), f32, _> = dev.zeros_like(&(n,));
                let (mut velocity, mut direction) = (Gradients::leaky(), Gradients::leaky());
                velocity.try_alloc_for(&key).unwrap();
                direction.try_alloc_for(&key).unwrap();
                direction
                    .get_or_alloc_mut(&key)
                    .unwrap()
                    .copy_from_slice(&dir);
                let velocity = velocity.get_or_alloc_mut(&key).unwrap();
                let direction = direction.get_or_alloc_mut(&key).unwrap();
                sgd.try_update(&mut want, velocity, direction).unwrap();

                let mut got = p0.clone();
                run_split(&c, vec![&mut m2[..], &mut v2[..], &mut got[..]], &g);
                assert_eq!((&m1, &v1), (&m2, &v2));
                assert_eq!(got, want.as_vec(), "n {n} weight decay {weight_decay:?}");
            }
        }
    }
}
