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

use super::gelu::Tanh;
use super::gemm::{matmul, Mat, MatMut};
use super::scratch::Scratch;
use super::{add_into, host_vec, Elem};

/// The logistic sigmoid, as `jax.nn.sigmoid` computes it.
#[inline(always)]
fn sigmoid<E: Elem>(x: E) -> E {
    E::one() / (E::one() + (-x).exp())
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
struct Dims {
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
fn gates<E: Tanh>(z: &mut [E], c_prev: &[E], c: &mut [E], tc: &mut [E], hh: &mut [E], h: usize) {
    for (row, zr) in z.chunks_exact_mut(4 * h).enumerate() {
        for j in 0..h {
            let i = sigmoid(zr[j]);
            let f = sigmoid(zr[h + j]);
            let g = zr[2 * h + j].tanh_kernel();
            let o = sigmoid(zr[3 * h + j]);
            zr[j] = i;
            zr[h + j] = f;
            zr[2 * h + j] = g;
            zr[3 * h + j] = o;
            let n = row * h + j;
            let cn = f * c_prev[n] + i * g;
            let t = cn.tanh_kernel();
            c[n] = cn;
            tc[n] = t;
            hh[n] = o * t;
        }
    }
}

// Compiled for the CPU's widest vectors: on the baseline x86-64 the f32
// `tanh`'s `mul_add`s are libm calls.
simd_dispatch!(fn gates_simd<E: Tanh>(
    z: &mut [E],
    c_prev: &[E],
    c: &mut [E],
    tc: &mut [E],
    hh: &mut [E],
    h: usize,
) => gates);

/// Runs rows `start..start + len` through every step.
fn forward_rows<E: Tanh>(
    d: Dims,
    start: usize,
    len: usize,
    xp: &[Scratch<E>],
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
        let c_prev: Vec<E> = match k {
            0 => vec![E::zero(); len * h],
            _ => r.c[(k - 1) * len * h..k * len * h].to_vec(),
        };
        let (c, tc, hh) = (
            &mut r.c[k * len * h..(k + 1) * len * h],
            &mut r.tc[k * len * h..(k + 1) * len * h],
            &mut r.h[k * len * h..(k + 1) * len * h],
        );
        gates_simd(z, &c_prev, c, tc, hh, h);
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
    E: Tanh,
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
    let g4 = 4 * H;
    let x_ghosts: Vec<_> = xp.iter().map(|x| x.ghost()).collect();
    let xs = xp
        .iter()
        .map(|x| host_vec(x.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    // The kernels stacked, `[4H, H]` (each `[out, in]`), and side by side
    // transposed, `[H, 4H]`; the biases side by side.
    let mut wstack = Vec::with_capacity(g4 * H);
    for w in &weights {
        wstack.extend_from_slice(&host_vec((*w).clone())?);
    }
    let mut wcat = vec![E::zero(); H * g4];
    for (row, w) in wstack.chunks_exact(H.max(1)).enumerate() {
        for (k, &v) in w.iter().enumerate() {
            wcat[k * g4 + row] = v;
        }
    }
    let mut bias = Vec::with_capacity(g4);
    for bb in &biases {
        bias.extend_from_slice(&host_vec((*bb).clone())?);
    }
    let per = super::chunking(d.batch);
    let rows: Vec<Rows<E>> = (0..d.batch.div_ceil(per))
        .into_par_iter()
        .map(|c| {
            let start = c * per;
            forward_rows(d, start, per.min(d.batch - start), &xs, &wcat, &bias)
        })
        .collect();
    // The hidden states in the order the steps ran, `[S, B, H]`.
    let mut out = vec![E::zero(); d.steps * d.batch * H];
    for r in &rows {
        for k in 0..d.steps {
            let src = &r.h[k * r.len * H..(k + 1) * r.len * H];
            out[(d.slot(k) * d.batch + r.start) * H..][..r.len * H].copy_from_slice(src);
        }
    }
    let y = dev.try_tensor_from_vec(out, (s, b, Const::<H>))?;
    if T::OWNS_TAPE {
        let y_ghost = y.ghost();
        let w_ghosts: Vec<_> = weights.iter().map(|w| w.ghost()).collect();
        let b_ghosts: Vec<_> = biases.iter().map(|b| b.ghost()).collect();
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            let dzs: Vec<Vec<E>> = rows
                .par_iter()
                .map(|r| backward_rows(d, r, &dy, &wstack))
                .collect();
            **grads.get_or_alloc_mut(&y_ghost)? = dy;
            for (gi, ghost) in x_ghosts.iter().enumerate() {
                let dx = grads.get_or_alloc_mut(ghost)?;
                for (r, dz) in rows.iter().zip(&dzs) {
                    for k in 0..d.steps {
                        let t = d.time(k);
                        for row in 0..r.len {
                            let src = &dz[(k * r.len + row) * g4 + gi * H..][..H];
                            let dst = &mut dx[(t * d.batch + r.start + row) * H..][..H];
                            add_into(dst, src);
                        }
                    }
                }
            }
            for (gi, (w_ghost, b_ghost)) in w_ghosts.iter().zip(&b_ghosts).enumerate() {
                let dw = grads.get_or_alloc_mut(w_ghost)?;
                for (r, dz) in rows.iter().zip(&dzs) {
                    // dW_g += Σ_k dz_g[k]ᵀ h[k - 1] over the steps after the first.
                    let n = (d.steps.saturating_sub(1)) * r.len;
                    let lhs = Mat {
                        data: &dz[r.len * g4 + gi * H..],
                        rows: H,
                        cols: n,
                        rs: 1,
                        cs: g4,
                    };
                    if n > 0 {
                        let rhs = Mat::rows(&r.h[..n * H], n, H);
                        matmul(MatMut::rows(&mut dw[..], H, H), true, lhs, rhs);
                    }
                }
                let db = grads.get_or_alloc_mut(b_ghost)?;
                for dz in &dzs {
                    for zr in dz.chunks_exact(g4) {
                        add_into(db, &zr[gi * H..(gi + 1) * H]);
                    }
                }
            }
            Ok(())
        });
    }
    Ok(y)
}
