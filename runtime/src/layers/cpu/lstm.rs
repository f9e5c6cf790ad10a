//! Flax's `LSTMCell` over a whole sequence in one op, from the input
//! projections of every step (computed before, one product per gate).
//!
//! A batch's rows never meet in an LSTM, so the batch is split over the
//! rayon threads once, and each thread runs its rows through every step
//! with no synchronisation between steps. Per step: one product of the
//! hidden state with the four recurrent kernels side by side (`[rows, H] x
//! [H, 4H]`), then the gate arithmetic in one pass. The backward pass runs
//! the steps in reverse the same way, keeping each step's gate gradients,
//! and computes the recurrent kernels' gradients after the loop as one
//! product per gate over all steps. `f32`'s `tanh` is XLA's rational
//! approximation (as in [`gelu`](super::gelu): within 2.9e-7; libm's
//! `tanhf` was half of the LSTM's time), `f64`'s libm's.

use dfdx::prelude::*;
use rayon::prelude::*;

use super::gemm::{matmul, Mat, MatMut};
use super::math::Math;
use super::scratch::Scratch;
use super::{add_into, host_vec, Elem, Host};

/// The logistic sigmoid, as `jax.nn.sigmoid` computes it.
#[inline(always)]
fn sigmoid<E: Math>(x: E) -> E {
    E::one() / (E::one() + (-x).exp_kernel())
}

/// What one thread's rows keep from the forward pass, per step (in the
/// order the steps ran): the gates `i, f, g, o` (`[rows, 4H]`), the cell
/// `c`, `tanh(c)` and the hidden state `h` (`[rows, H]` each).
struct Rows<E> {
    start: usize,
    len: usize,
    gates: Vec<E>,
    c: Vec<E>,
    tc: Vec<E>,
    h: Vec<E>,
}

/// The sequence's shape: `steps` steps of `batch` rows of `h` features.
#[derive(Clone, Copy)]
pub(crate) struct Dims {
    steps: usize,
    batch: usize,
    h: usize,
    reverse: bool,
    /// Outputs by time index (`keep_order`), not in the order run.
    by_time: bool,
}

impl Dims {
    /// The time index of the `k`-th step run.
    fn time(&self, k: usize) -> usize {
        if self.reverse {
            self.steps - 1 - k
        } else {
            k
        }
    }

    /// Where the `k`-th step's output goes.
    fn slot(&self, k: usize) -> usize {
        if self.by_time {
            self.time(k)
        } else {
            k
        }
    }
}

/// One step's gate arithmetic over rows of `h` features: `z` (`[rows,
/// 4H]`, the pre-activations) becomes the gates `i, f, g, o`; then the
/// cell, its `tanh` and the hidden state.
#[inline(always)]
fn gates<E: Math>(z: &mut [E], c_prev: &[E], c: &mut [E], tc: &mut [E], hh: &mut [E], h: usize) {
    let rows = z
        .chunks_exact_mut(4 * h)
        .zip(c_prev.chunks_exact(h))
        .zip(c.chunks_exact_mut(h))
        .zip(tc.chunks_exact_mut(h))
        .zip(hh.chunks_exact_mut(h));
    for ((((zr, cp), c), tc), hh) in rows {
        // One simple loop per activation and slices of one length: loops
        // the compiler vectorises (a zip of eight slices it did not).
        let (ifg, zo) = zr.split_at_mut(3 * h);
        let (zif, zg) = ifg.split_at_mut(2 * h);
        zif.iter_mut().for_each(|x| *x = sigmoid(*x));
        zg.iter_mut().for_each(|x| *x = x.tanh_kernel());
        zo.iter_mut().for_each(|x| *x = sigmoid(*x));
        let (zi, zf) = zif.split_at(h);
        let (zg, zo, cp) = (&zg[..h], &zo[..h], &cp[..h]);
        let (c, tc, hh) = (&mut c[..h], &mut tc[..h], &mut hh[..h]);
        for j in 0..h {
            let cn = zf[j] * cp[j] + zi[j] * zg[j];
            let t = cn.tanh_kernel();
            c[j] = cn;
            tc[j] = t;
            hh[j] = zo[j] * t;
        }
    }
}

// Compiled for the CPU's widest vectors: on the baseline x86-64 the f32
// `tanh`'s `mul_add`s are libm calls.
simd_dispatch!(fn gates_simd<E: Math>(
    z: &mut [E],
    c_prev: &[E],
    c: &mut [E],
    tc: &mut [E],
    hh: &mut [E],
    h: usize,
) => gates);

/// Runs rows `start..start + len` through every step.
fn forward_rows<E: Math>(
    d: Dims,
    start: usize,
    len: usize,
    xp: &[&[E]; 4],
    wcat: &[E],
    bias: &[E],
) -> Rows<E> {
    let (h, g4) = (d.h, 4 * d.h);
    let mut r = Rows {
        start,
        len,
        gates: vec![E::zero(); d.steps * len * g4],
        c: vec![E::zero(); d.steps * len * h],
        tc: vec![E::zero(); d.steps * len * h],
        h: vec![E::zero(); d.steps * len * h],
    };
    // The first step's previous cell: zeros, allocated once.
    let c_zero = vec![E::zero(); len * h];
    for k in 0..d.steps {
        let t = d.time(k);
        let z = &mut r.gates[k * len * g4..(k + 1) * len * g4];
        // z = x projections + recurrent bias + h_prev · [Wiᵀ Wfᵀ Wgᵀ Woᵀ]
        for row in 0..len {
            let b = start + row;
            for (gi, xg) in xp.iter().enumerate() {
                let src = &xg[(t * d.batch + b) * h..][..h];
                let dst = &mut z[row * g4 + gi * h..][..h];
                for ((z, &x), &bb) in dst.iter_mut().zip(src).zip(&bias[gi * h..][..h]) {
                    *z = x + bb;
                }
            }
        }
        if k > 0 {
            let h_prev = &r.h[(k - 1) * len * h..k * len * h];
            matmul(
                MatMut::rows(z, len, g4),
                true,
                Mat::rows(h_prev, len, h),
                Mat::rows(wcat, h, g4),
            );
        }
        // The previous step's cell and this one's, from one buffer.
        let (before, c) = r.c.split_at_mut(k * len * h);
        let c_prev = match k {
            0 => &c_zero[..],
            _ => &before[(k - 1) * len * h..],
        };
        let (tc, hh) = (
            &mut r.tc[k * len * h..(k + 1) * len * h],
            &mut r.h[k * len * h..(k + 1) * len * h],
        );
        gates_simd(z, c_prev, &mut c[..len * h], tc, hh, h);
    }
    r
}

/// Gradients of one thread's rows: the gate pre-activations' (`[S, rows,
/// 4H]`, in run order).
fn backward_rows<E: Elem>(d: Dims, r: &Rows<E>, dy: &[E], wstack: &[E]) -> Vec<E> {
    let (h, g4, len) = (d.h, 4 * d.h, r.len);
    let mut dz = vec![E::zero(); d.steps * len * g4];
    let mut dh_next = vec![E::zero(); len * h];
    let mut dc_next = vec![E::zero(); len * h];
    let one = E::one();
    for k in (0..d.steps).rev() {
        let gates = &r.gates[k * len * g4..(k + 1) * len * g4];
        let tc = &r.tc[k * len * h..(k + 1) * len * h];
        let dzk = &mut dz[k * len * g4..(k + 1) * len * g4];
        for row in 0..len {
            let gr = &gates[row * g4..(row + 1) * g4];
            let dzr = &mut dzk[row * g4..(row + 1) * g4];
            let b = r.start + row;
            for j in 0..h {
                let n = row * h + j;
                let (i, f, g, o) = (gr[j], gr[h + j], gr[2 * h + j], gr[3 * h + j]);
                let c_prev = if k > 0 {
                    r.c[(k - 1) * len * h + n]
                } else {
                    E::zero()
                };
                let dh = dy[(d.slot(k) * d.batch + b) * h + j] + dh_next[n];
                let t = tc[n];
                let dc = dc_next[n] + dh * o * (one - t * t);
                dc_next[n] = dc * f;
                dzr[j] = dc * g * i * (one - i);
                dzr[h + j] = dc * c_prev * f * (one - f);
                dzr[2 * h + j] = dc * i * (one - g * g);
                dzr[3 * h + j] = dh * t * o * (one - o);
            }
        }
        // dh_prev = dz · [Wi; Wf; Wg; Wo] (the kernels stacked, [4H, H])
        if k > 0 {
            matmul(
                MatMut::rows(&mut dh_next, len, h),
                false,
                Mat::rows(dzk, len, g4),
                Mat::rows(wstack, g4, h),
            );
        }
    }
    dz
}

/// What the backward pass needs: the sizes, each thread's rows, the
/// kernels stacked.
pub(crate) struct Saved<E> {
    d: Dims,
    rows: Vec<Rows<E>>,
    wstack: Vec<E>,
}

/// The forward pass on host slices: the four gates' input projections
/// (`[S, B, H]` each, by time), recurrent kernels (`[H, H]`, `[out, in]`)
/// and biases; the outputs (`[S, B, H]` by slot) and what the backward
/// pass needs.
pub(super) fn forward<E: Math>(
    d: Dims,
    xs: [&[E]; 4],
    weights: [&[E]; 4],
    biases: [&[E]; 4],
) -> (Vec<E>, Saved<E>) {
    let h = d.h;
    let g4 = 4 * h;
    // The kernels stacked, `[4H, H]` (each `[out, in]`), and side by side
    // transposed, `[H, 4H]`; the biases side by side.
    let wstack: Vec<E> = weights.concat();
    let mut wcat = vec![E::zero(); h * g4];
    for (row, w) in wstack.chunks_exact(h.max(1)).enumerate() {
        for (k, &v) in w.iter().enumerate() {
            wcat[k * g4 + row] = v;
        }
    }
    let bias: Vec<E> = biases.concat();
    let per = super::chunking(d.batch);
    let rows: Vec<Rows<E>> = (0..d.batch.div_ceil(per))
        .into_par_iter()
        .map(|c| {
            let start = c * per;
            forward_rows(d, start, per.min(d.batch - start), &xs, &wcat, &bias)
        })
        .collect();
    // The hidden states by slot, `[S, B, H]`.
    let mut out = vec![E::zero(); d.steps * d.batch * h];
    for r in &rows {
        for k in 0..d.steps {
            let src = &r.h[k * r.len * h..(k + 1) * r.len * h];
            out[(d.slot(k) * d.batch + r.start) * h..][..r.len * h].copy_from_slice(src);
        }
    }
    (out, Saved { d, rows, wstack })
}

/// The backward pass on host slices: adds the gradients of the input
/// projections, kernels and biases into `dx`, `dw`, `db`.
pub(super) fn backward<E: Math>(
    saved: &Saved<E>,
    dy: &[E],
    dx: [&mut [E]; 4],
    dw: [&mut [E]; 4],
    db: [&mut [E]; 4],
) {
    let Saved { d, rows, wstack } = saved;
    let (d, h) = (*d, d.h);
    let g4 = 4 * h;
    let dzs: Vec<Vec<E>> = rows
        .par_iter()
        .map(|r| backward_rows(d, r, dy, wstack))
        .collect();
    for (gi, dx) in dx.into_iter().enumerate() {
        for (r, dz) in rows.iter().zip(&dzs) {
            for k in 0..d.steps {
                let t = d.time(k);
                for row in 0..r.len {
                    let src = &dz[(k * r.len + row) * g4 + gi * h..][..h];
                    let dst = &mut dx[(t * d.batch + r.start + row) * h..][..h];
                    add_into(dst, src);
                }
            }
        }
    }
    for (gi, (dw, db)) in dw.into_iter().zip(db).enumerate() {
        for (r, dz) in rows.iter().zip(&dzs) {
            // dW_g += Σ_k dz_g[k]ᵀ h[k - 1] over the steps after the first.
            let n = (d.steps.saturating_sub(1)) * r.len;
            if n > 0 {
                let lhs = Mat {
                    data: &dz[r.len * g4 + gi * h..],
                    rows: h,
                    cols: n,
                    rs: 1,
                    cs: g4,
                };
                let rhs = Mat::rows(&r.h[..n * h], n, h);
                matmul(MatMut::rows(&mut dw[..], h, h), true, lhs, rhs);
            }
            for zr in dz.chunks_exact(g4) {
                add_into(db, &zr[gi * h..(gi + 1) * h]);
            }
        }
    }
}

/// Four mutable slices out of four buffers.
fn four<E>(v: &mut [Vec<E>]) -> [&mut [E]; 4] {
    match v {
        [a, b, c, d] => [a, b, c, d],
        _ => unreachable!("four gates"),
    }
}

/// See [`FlaxenDevice::try_lstm_scan`](super::super::FlaxenDevice::try_lstm_scan).
#[allow(clippy::type_complexity)]
pub(in crate::layers) fn lstm_scan<E, S, B, const H: usize, T>(
    dev: &Cpu,
    xp: &[Tensor<(S, B, Const<H>), E, Cpu>; 4],
    tape: &mut T,
    weights: [&Tensor<Rank2<H, H>, E, Cpu>; 4],
    biases: [&Tensor<Rank1<H>, E, Cpu>; 4],
    reverse: bool,
    keep_order: bool,
) -> Result<Tensor<(S, B, Const<H>), E, Cpu>, CpuError>
where
    E: Host,
    S: Dim,
    B: Dim,
    T: Tape<E, Cpu>,
{
    let (s, b, _) = *xp[0].shape();
    let d = Dims {
        steps: s.size(),
        batch: b.size(),
        h: H,
        reverse,
        by_time: keep_order,
    };
    let x_ghosts = xp.each_ref().map(|x| x.ghost());
    let w_ghosts = weights.map(|w| w.ghost());
    let b_ghosts = biases.map(|b| b.ghost());
    let host = |t: Vec<Scratch<E>>| -> [Scratch<E>; 4] {
        t.try_into().unwrap_or_else(|_| unreachable!("four gates"))
    };
    let xs = host(
        xp.iter()
            .map(|x| host_vec(x.clone()))
            .collect::<Result<_, _>>()?,
    );
    let ws = host(
        weights
            .iter()
            .map(|w| host_vec((*w).clone()))
            .collect::<Result<_, _>>()?,
    );
    let bs = host(
        biases
            .iter()
            .map(|b| host_vec((*b).clone()))
            .collect::<Result<_, _>>()?,
    );
    let (out, saved) = E::lstm_forward(
        d,
        xs.each_ref().map(|x| &x[..]),
        ws.each_ref().map(|w| &w[..]),
        bs.each_ref().map(|b| &b[..]),
    );
    drop((xs, ws, bs));
    let y = dev.try_tensor_from_vec(out, (s, b, Const::<H>))?;
    if T::OWNS_TAPE {
        let y_ghost = y.ghost();
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            // Each gradient taken out while the twelve are written.
            let mut dx = Vec::with_capacity(4);
            for g in &x_ghosts {
                dx.push(std::mem::take(&mut **grads.get_or_alloc_mut(g)?));
            }
            let mut dw = Vec::with_capacity(4);
            for g in &w_ghosts {
                dw.push(std::mem::take(&mut **grads.get_or_alloc_mut(g)?));
            }
            let mut db = Vec::with_capacity(4);
            for g in &b_ghosts {
                db.push(std::mem::take(&mut **grads.get_or_alloc_mut(g)?));
            }
            E::lstm_backward(&saved, &dy, four(&mut dx), four(&mut dw), four(&mut db));
            for (g, v) in x_ghosts.iter().zip(dx) {
                **grads.get_or_alloc_mut(g)? = v;
            }
            for (g, v) in w_ghosts.iter().zip(dw) {
                **grads.get_or_alloc_mut(g)? = v;
            }
            for (g, v) in b_ghosts.iter().zip(db) {
                **grads.get_or_alloc_mut(g)? = v;
            }
            **grads.get_or_alloc_mut(&y_ghost)? = dy;
            Ok(())
        });
    }
    Ok(y)
}
