//! The host kernels' entry points, one concrete function per dtype.
//!
//! The tape-level functions are generic over shapes and tapes, so they are
//! compiled in the crate that trains a model; a release build does not
//! share generic instances across crates, so every kernel they call
//! generically would be compiled there again (three times over, for the
//! run-time SIMD dispatch), on every edit of the model. Called through
//! [`Host`], whose methods are plain functions of `f32` and `f64` compiled
//! here, they are not: a one-line model edit rebuilt in 6.5 s (release)
//! with the kernels generic, and in less than half that with them here
//! (`bench/compile_time.sh`).

use super::{attention, dense, lstm, norm, pool, Elem, ELEMWISE_CHUNK};
use crate::layers::{NormRows, PoolKind, Window2D};
use rayon::prelude::*;

/// The CPU kernels on host slices, for one dtype.
pub(crate) trait Host: Elem + super::math::Math {
    /// `y = x w^T + b` for `x` `(batch, i)`, `w` `(o, i)`, `b` `(o,)`.
    fn dense_forward(
        batch: usize,
        i: usize,
        o: usize,
        x: &[Self],
        w: &[Self],
        b: &[Self],
    ) -> Vec<Self>;
    /// `dx += dy w`, `dw += dy^T x`, `db += sum(dy)`.
    #[allow(clippy::too_many_arguments)]
    fn dense_backward(
        batch: usize,
        i: usize,
        o: usize,
        x: &[Self],
        w: &[Self],
        dy: &[Self],
        dx: &mut [Self],
        dw: &mut [Self],
        db: &mut [Self],
    );
    /// `max(x, 0)`.
    fn relu_forward(x: &[Self]) -> Vec<Self>;
    /// `dx += (x > 0) dy`.
    fn relu_backward(x: &[Self], dy: &[Self], dx: &mut [Self]);
    /// Pools `planes` planes; with `Max`, each output's argmax too.
    fn pool_forward(
        kind: PoolKind,
        win: &Window2D,
        planes: usize,
        x: &[Self],
    ) -> (Vec<Self>, Vec<u32>);
    /// `dx += ..` from `dy` (and the forward's argmaxes for `Max`).
    fn pool_backward(kind: PoolKind, win: &Window2D, arg: &[u32], dy: &[Self], dx: &mut [Self]);
    /// `gelu(x)`, and each element's `tanh` when `keep` (else empty).
    fn gelu_forward(x: &[Self], keep: bool) -> (Vec<Self>, Vec<Self>);
    /// `dx += gelu'(x) dy` from the forward's `tanh`s.
    fn gelu_backward(x: &[Self], t: &[Self], dy: &[Self], dx: &mut [Self]);
    /// Attention after its projections: the joined outputs and the
    /// weights; scales `q` in place.
    fn attention_forward(
        d: &attention::Dims,
        q: &mut [Self],
        k: &[Self],
        v: &[Self],
        mask: Option<&[bool]>,
    ) -> (Vec<Self>, Vec<Self>);
    /// Adds the gradients of `q`, `k`, `v` into `dq`, `dk`, `dv`.
    #[allow(clippy::too_many_arguments)]
    fn attention_backward(
        d: &attention::Dims,
        q: &[Self],
        k: &[Self],
        v: &[Self],
        w: &[Self],
        mask: Option<&[bool]>,
        dy: &[Self],
        dq: &mut [Self],
        dk: &mut [Self],
        dv: &mut [Self],
    );
    /// A row norm's output, and when `keep` the normalised rows and each
    /// row's inverse deviation.
    fn norm_forward(
        layout: &NormRows,
        x: &[Self],
        scale: &[Self],
        bias: &[Self],
        keep: bool,
    ) -> (Vec<Self>, Vec<Self>, Vec<Self>);
    /// Adds `x`'s gradient into `dx`; the scale's and the bias's.
    fn norm_backward(
        layout: &NormRows,
        scale: &[Self],
        xhat: &[Self],
        inv: &[Self],
        dy: &[Self],
        dx: &mut [Self],
    ) -> (Vec<Self>, Vec<Self>);
    /// An LSTM over a whole sequence: the outputs and what the backward
    /// pass needs.
    fn lstm_forward(
        d: lstm::Dims,
        x: [&[Self]; 4],
        weights: [&[Self]; 4],
        biases: [&[Self]; 4],
    ) -> (Vec<Self>, lstm::Saved<Self>);
    /// Adds the gradients of the input projections, kernels and biases.
    fn lstm_backward(
        saved: &lstm::Saved<Self>,
        dy: &[Self],
        dx: [&mut [Self]; 4],
        dw: [&mut [Self]; 4],
        db: [&mut [Self]; 4],
    );
}

/// `max(x, 0)`, written once for both dtypes.
fn relu_forward<E: Elem>(xs: &[E]) -> Vec<E> {
    let n = xs.len();
    let mut ys: Vec<E> = Vec::with_capacity(n);
    ys.spare_capacity_mut()[..n]
        .par_chunks_mut(ELEMWISE_CHUNK)
        .zip(xs.par_chunks(ELEMWISE_CHUNK))
        .for_each(|(y, x)| {
            y.iter_mut().zip(x).for_each(|(y, &x)| {
                y.write(x.max(E::zero()));
            });
        });
    // SAFETY: the chunks above cover `0..n` and write every element.
    unsafe { ys.set_len(n) };
    ys
}

fn relu_backward<E: Elem>(xs: &[E], dy: &[E], dx: &mut [E]) {
    dx.par_chunks_mut(ELEMWISE_CHUNK)
        .zip(xs.par_chunks(ELEMWISE_CHUNK))
        .zip(dy.par_chunks(ELEMWISE_CHUNK))
        .for_each(|((dx, x), dy)| {
            // dfdx's `df(x) * g`, so a NaN or infinite `g` spreads the
            // same way; branch-free, so it vectorises.
            for ((d, &x), &g) in dx.iter_mut().zip(x).zip(dy) {
                let df = if x > E::zero() { E::one() } else { E::zero() };
                *d += df * g;
            }
        });
}

macro_rules! host {
    ($($e:ty),*) => {$(
        impl Host for $e {
            #[inline(never)]
            fn dense_forward(batch: usize, i: usize, o: usize, x: &[$e], w: &[$e], b: &[$e]) -> Vec<$e> {
                dense::forward(batch, i, o, x, w, b)
            }

            #[inline(never)]
            fn dense_backward(
                batch: usize,
                i: usize,
                o: usize,
                x: &[$e],
                w: &[$e],
                dy: &[$e],
                dx: &mut [$e],
                dw: &mut [$e],
                db: &mut [$e],
            ) {
                dense::backward_x(batch, i, o, w, dy, dx);
                dense::backward_w(batch, i, o, x, dy, dw);
                dense::backward_b(o, dy, db);
            }

            #[inline(never)]
            fn relu_forward(x: &[$e]) -> Vec<$e> {
                relu_forward(x)
            }

            #[inline(never)]
            fn relu_backward(x: &[$e], dy: &[$e], dx: &mut [$e]) {
                relu_backward(x, dy, dx)
            }

            #[inline(never)]
            fn pool_forward(kind: PoolKind, win: &Window2D, planes: usize, x: &[$e]) -> (Vec<$e>, Vec<u32>) {
                match kind {
                    PoolKind::Avg => (pool::avg_forward(win, planes, x), Vec::new()),
                    PoolKind::Max => pool::max_forward(win, planes, x),
                }
            }

            #[inline(never)]
            fn pool_backward(kind: PoolKind, win: &Window2D, arg: &[u32], dy: &[$e], dx: &mut [$e]) {
                match kind {
                    PoolKind::Avg => pool::avg_backward(win, dy, dx),
                    PoolKind::Max => pool::max_backward(win, arg, dy, dx),
                }
            }

            #[inline(never)]
            fn gelu_forward(x: &[$e], keep: bool) -> (Vec<$e>, Vec<$e>) {
                super::gelu::forward(x, keep)
            }

            #[inline(never)]
            fn gelu_backward(x: &[$e], t: &[$e], dy: &[$e], dx: &mut [$e]) {
                super::gelu::backward(x, t, dy, dx)
            }

            #[inline(never)]
            fn attention_forward(
                d: &attention::Dims,
                q: &mut [$e],
                k: &[$e],
                v: &[$e],
                mask: Option<&[bool]>,
            ) -> (Vec<$e>, Vec<$e>) {
                attention::forward(d, q, k, v, mask)
            }

            #[inline(never)]
            fn attention_backward(
                d: &attention::Dims,
                q: &[$e],
                k: &[$e],
                v: &[$e],
                w: &[$e],
                mask: Option<&[bool]>,
                dy: &[$e],
                dq: &mut [$e],
                dk: &mut [$e],
                dv: &mut [$e],
            ) {
                attention::backward(d, q, k, v, w, mask, dy, dq, dk, dv)
            }

            #[inline(never)]
            fn norm_forward(
                layout: &NormRows,
                x: &[$e],
                scale: &[$e],
                bias: &[$e],
                keep: bool,
            ) -> (Vec<$e>, Vec<$e>, Vec<$e>) {
                norm::forward(layout, x, scale, bias, keep)
            }

            #[inline(never)]
            fn norm_backward(
                layout: &NormRows,
                scale: &[$e],
                xhat: &[$e],
                inv: &[$e],
                dy: &[$e],
                dx: &mut [$e],
            ) -> (Vec<$e>, Vec<$e>) {
                norm::backward(layout, scale, xhat, inv, dy, dx)
            }

            #[inline(never)]
            fn lstm_forward(
                d: lstm::Dims,
                x: [&[$e]; 4],
                weights: [&[$e]; 4],
                biases: [&[$e]; 4],
            ) -> (Vec<$e>, lstm::Saved<$e>) {
                lstm::forward(d, x, weights, biases)
            }

            #[inline(never)]
            fn lstm_backward(
                saved: &lstm::Saved<$e>,
                dy: &[$e],
                dx: [&mut [$e]; 4],
                dw: [&mut [$e]; 4],
                db: [&mut [$e]; 4],
            ) {
                lstm::backward(saved, dy, dx, dw, db)
            }
        }
    )*};
}
host!(f32, f64);
