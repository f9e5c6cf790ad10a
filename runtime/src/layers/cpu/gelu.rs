//! Flax's `nn.gelu` (the tanh form, `approximate=True`) as one parallel
//! pass forward and one backward, the forward's `tanh` kept for the
//! backward rather than computed again.
//!
//! `tanh` is [`Math::tanh_kernel`](super::math::Math): XLA's rational form in
//! `f32`, which the compiler vectorises.

use rayon::prelude::*;

use super::math::Math;
use super::ELEMWISE_CHUNK;

/// `sqrt(2 / pi)`.
const C: f64 = 0.797_884_560_802_865_4;
/// The cubic term's weight.
const A: f64 = 0.044_715;

/// `gelu(x)` into `y`, and each `tanh` into `t` when `t` is not empty.
#[inline(always)]
fn forward_chunk<E: Math>(y: &mut [E], t: &mut [E], x: &[E]) {
    let (c, a, half, one) = consts::<E>();
    let tanh = |x: E| (c * (x + a * x * x * x)).tanh_kernel();
    if t.is_empty() {
        for (y, &x) in y.iter_mut().zip(x) {
            *y = half * x * (one + tanh(x));
        }
    } else {
        for ((y, t), &x) in y.iter_mut().zip(t.iter_mut()).zip(x) {
            *t = tanh(x);
            *y = half * x * (one + *t);
        }
    }
}

// Compiled for the CPU's widest vectors: on the crate's baseline x86-64,
// `mul_add` is a libm call per element (a fifth of TEXT's step once).
simd_dispatch!(fn forward_simd<E: Math>(y: &mut [E], t: &mut [E], x: &[E]) => forward_chunk);

/// `dx += gelu'(x) dy`, from the forward's `tanh`s.
#[inline(always)]
fn backward_chunk<E: Math>(dx: &mut [E], x: &[E], t: &[E], dy: &[E]) {
    let (c, _, half, one) = consts::<E>();
    let three_a = E::from_f64(3.0 * A).unwrap();
    for (((d, &x), &t), &g) in dx.iter_mut().zip(x).zip(t).zip(dy) {
        // d/dx 0.5 x (1 + t) = 0.5 (1 + t) + 0.5 x (1 - t²) c (1 + 3 a x²)
        let inner = c * (one + three_a * x * x);
        let df = half * (one + t) + half * x * (one - t * t) * inner;
        *d += df * g;
    }
}

simd_dispatch!(fn backward_simd<E: Math>(dx: &mut [E], x: &[E], t: &[E], dy: &[E]) => backward_chunk);

#[inline(always)]
fn consts<E: Math>() -> (E, E, E, E) {
    (
        E::from_f64(C).unwrap(),
        E::from_f64(A).unwrap(),
        E::from_f64(0.5).unwrap(),
        E::one(),
    )
}

/// `gelu(x)`, and each element's `tanh` when `keep` (for the backward).
pub(super) fn forward<E: Math>(xs: &[E], keep: bool) -> (Vec<E>, Vec<E>) {
    let n = xs.len();
    let mut ys: Vec<E> = vec![E::zero(); n];
    let mut ts: Vec<E> = Vec::new();
    if keep {
        ts = vec![E::zero(); n];
        ys.par_chunks_mut(ELEMWISE_CHUNK)
            .zip(ts.par_chunks_mut(ELEMWISE_CHUNK))
            .zip(xs.par_chunks(ELEMWISE_CHUNK))
            .for_each(|((y, t), x)| forward_simd(y, t, x));
    } else {
        ys.par_chunks_mut(ELEMWISE_CHUNK)
            .zip(xs.par_chunks(ELEMWISE_CHUNK))
            .for_each(|(y, x)| forward_simd(y, &mut [], x));
    }
    (ys, ts)
}

/// `dx += gelu'(x) dy` from the forward's `tanh`s.
pub(super) fn backward<E: Math>(xs: &[E], ts: &[E], dy: &[E], dx: &mut [E]) {
    dx.par_chunks_mut(ELEMWISE_CHUNK)
        .zip(xs.par_chunks(ELEMWISE_CHUNK))
        .zip(ts.par_chunks(ELEMWISE_CHUNK))
        .zip(dy.par_chunks(ELEMWISE_CHUNK))
        .for_each(|(((dx, x), t), dy)| backward_simd(dx, x, t, dy));
}

#[cfg(test)]
mod tests {
    use dfdx::prelude::*;

    #[test]
    fn values_and_gradients_match_dfdx_fast_gelu_in_f64() {
        let dev = Cpu::seed_from_u64(0);
        let x: Tensor<Rank2<7, 513>, f64, _> = dev.sample_normal::<Rank2<7, 513>>() * 3.0;
        let w: Tensor<Rank2<7, 513>, f64, _> = dev.sample_normal();
        let y = super::super::gelu_tanh(&dev, x.leaky_trace()).unwrap();
        let r = x.leaky_trace().fast_gelu();
        for (a, b) in y.as_vec().iter().zip(r.as_vec()) {
            assert!((a - b).abs() < 1e-14, "{a} {b}");
        }
        let ga = (y * w.clone()).sum().backward();
        let gb = (r * w).sum().backward();
        for (a, b) in ga.get(&x).as_vec().iter().zip(gb.get(&x).as_vec()) {
            assert!((a - b).abs() < 1e-13, "{a} {b}");
        }
    }
}
