//! Multi-head dot-product attention after the projections, one pass per
//! example forward and one backward: per head, `q kᵀ` into the weights'
//! buffer, the mask and softmax in place on it, `w v` written straight into
//! the joined `[Q, heads * depth]` rows. No head is copied out of its
//! projection, no float mask is built, and the softmax's weights are the
//! only thing kept for the backward pass besides the inputs.

use dfdx::prelude::*;
use rayon::prelude::*;

use super::gemm::{dot, matmul, Mat, MatMut};
use super::math::Math;
use super::{fold_lanes, host_vec, Host};

/// `[batch, Q, F]` rows on the CPU.
type Rows<B, Q, const F: usize, E, T> = Tensor<(B, Q, Const<F>), E, Cpu, T>;

/// Head `h`'s `[rows, depth]` columns of `[rows, features]` rows.
fn head<E>(rows_buf: &[E], h: usize, rows: usize, depth: usize, features: usize) -> Mat<'_, E> {
    Mat {
        data: &rows_buf[h * depth..],
        rows,
        cols: depth,
        rs: features,
        cs: 1,
    }
}

/// [`head`], writable.
fn head_mut<E>(
    rows_buf: &mut [E],
    h: usize,
    rows: usize,
    depth: usize,
    features: usize,
) -> MatMut<'_, E> {
    MatMut {
        data: &mut rows_buf[h * depth..],
        rows,
        cols: depth,
        rs: features,
        cs: 1,
    }
}

/// `[depth, rows]`: the transpose of head `h`'s columns.
fn head_t<E>(rows_buf: &[E], h: usize, rows: usize, depth: usize, features: usize) -> Mat<'_, E> {
    Mat {
        data: &rows_buf[h * depth..],
        rows: depth,
        cols: rows,
        rs: 1,
        cs: features,
    }
}

/// Flax's masked softmax of each `nk`-long row of `w`, in place: a masked
/// logit becomes the dtype's minimum first (so a row with every key masked
/// gets uniform weights, as Flax's does), then `exp(x - max) / sum`.
#[inline(always)]
fn masked_softmax_rows<E: Math>(w: &mut [E], nk: usize, mask: Option<&[bool]>) {
    if nk == 0 {
        return;
    }
    for (i, row) in w.chunks_exact_mut(nk).enumerate() {
        if let Some(m) = mask {
            for (x, &keep) in row.iter_mut().zip(&m[i * nk..(i + 1) * nk]) {
                if !keep {
                    *x = E::min_value();
                }
            }
        }
        let max = fold_lanes(row, E::neg_infinity(), E::max, E::max);
        row.iter_mut().for_each(|x| *x = (*x - max).exp_kernel());
        let sum = fold_lanes(row, E::zero(), |a, b| a + b, |a, b| a + b);
        row.iter_mut().for_each(|x| *x /= sum);
    }
}

simd_dispatch!(fn softmax_simd<E: Math>(w: &mut [E], nk: usize, mask: Option<&[bool]>) => masked_softmax_rows);

/// The softmax's backward on each row, in place on `ds` (`dy vᵀ` in, the
/// logits' gradient out): `p (d - <d, p>)`, nothing through a masked logit
/// (Flax's `where`).
#[inline(always)]
fn softmax_backward_rows<E: Math>(ds: &mut [E], w: &[E], nk: usize, mask: Option<&[bool]>) {
    for (i, (d, p)) in ds.chunks_exact_mut(nk).zip(w.chunks_exact(nk)).enumerate() {
        let dot = dot(d, p);
        for (d, &p) in d.iter_mut().zip(p) {
            *d = p * (*d - dot);
        }
        if let Some(m) = mask {
            for (d, &keep) in d.iter_mut().zip(&m[i * nk..(i + 1) * nk]) {
                if !keep {
                    *d = E::zero();
                }
            }
        }
    }
}

simd_dispatch!(fn softmax_backward_simd<E: Math>(
    ds: &mut [E],
    w: &[E],
    nk: usize,
    mask: Option<&[bool]>,
) => softmax_backward_rows);

/// One attention's sizes: `batch` examples of `nq` queries and `nk` keys,
/// `features` split into `heads`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dims {
    pub(crate) batch: usize,
    pub(crate) nq: usize,
    pub(crate) nk: usize,
    pub(crate) heads: usize,
    pub(crate) features: usize,
}

impl Dims {
    fn depth(&self) -> usize {
        self.features / self.heads
    }

    /// `1 / sqrt(depth)`, which Flax multiplies the queries by.
    fn scale<E: Math>(&self) -> E {
        E::from_f64(1.0 / (self.depth() as f64).sqrt()).unwrap()
    }
}

/// The forward pass on host rows: scales `q` in place (Flax scales the
/// queries before the product) and returns the joined outputs and the
/// softmax's weights (`[batch, heads, nq, nk]`, for the backward).
pub(super) fn forward<E: Math>(
    d: &Dims,
    qs: &mut [E],
    ks: &[E],
    vs: &[E],
    mask: Option<&[bool]>,
) -> (Vec<E>, Vec<E>) {
    let (f, nq, nk, dh) = (d.features, d.nq, d.nk, d.depth());
    let scale = d.scale::<E>();
    qs.par_iter_mut().for_each(|x| *x *= scale);
    let (q_len, k_len, w_len) = (nq * f, nk * f, d.heads * nq * nk);
    let mut w = vec![E::zero(); d.batch * w_len];
    let mut out = vec![E::zero(); d.batch * q_len];
    if w_len > 0 && q_len > 0 {
        let qs = &*qs;
        out.par_chunks_mut(q_len)
            .zip(w.par_chunks_mut(w_len))
            .enumerate()
            .for_each(|(e, (o, we))| {
                let (qe, ke, ve) = (&qs[e * q_len..], &ks[e * k_len..], &vs[e * k_len..]);
                let me = mask.map(|m| &m[e * nq * nk..(e + 1) * nq * nk]);
                for (h, wh) in we.chunks_exact_mut(nq * nk).enumerate() {
                    let logits = MatMut::rows(wh, nq, nk);
                    matmul(
                        logits,
                        false,
                        head(qe, h, nq, dh, f),
                        head_t(ke, h, nk, dh, f),
                    );
                    softmax_simd(wh, nk, me);
                    let wv = head_mut(o, h, nq, dh, f);
                    matmul(wv, false, Mat::rows(wh, nq, nk), head(ve, h, nk, dh, f));
                }
            });
    }
    (out, w)
}

/// The backward pass on host rows: adds the gradients of `q`, `k` and `v`
/// (`qs` as [`forward`] scaled it, `w` its weights) into `dq`, `dk`, `dv`.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward<E: Math>(
    d: &Dims,
    qs: &[E],
    ks: &[E],
    vs: &[E],
    w: &[E],
    mask: Option<&[bool]>,
    dy: &[E],
    dq: &mut [E],
    dk: &mut [E],
    dv: &mut [E],
) {
    let (f, nq, nk, dh) = (d.features, d.nq, d.nk, d.depth());
    let scale = d.scale::<E>();
    let (q_len, k_len, w_len) = (nq * f, nk * f, d.heads * nq * nk);
    if w_len == 0 || q_len == 0 {
        return;
    }
    dq.par_chunks_mut(q_len)
        .zip(dk.par_chunks_mut(k_len))
        .zip(dv.par_chunks_mut(k_len))
        .enumerate()
        .for_each(|(e, ((dqe, dke), dve))| {
            let (qe, ke, ve) = (&qs[e * q_len..], &ks[e * k_len..], &vs[e * k_len..]);
            let dye = &dy[e * q_len..];
            let me = mask.map(|m| &m[e * nq * nk..(e + 1) * nq * nk]);
            let mut ds = vec![E::zero(); nq * nk];
            for (h, wh) in w[e * w_len..(e + 1) * w_len]
                .chunks_exact(nq * nk)
                .enumerate()
            {
                let dyh = head(dye, h, nq, dh, f);
                // dw = dy vᵀ, dv += wᵀ dy
                let dw = MatMut::rows(&mut ds, nq, nk);
                matmul(dw, false, dyh, head_t(ve, h, nk, dh, f));
                let dvh = head_mut(dve, h, nk, dh, f);
                matmul(dvh, true, Mat::transposed(wh, nk, nq), dyh);
                softmax_backward_simd(&mut ds, wh, nk, me);
                // dk += dlogitsᵀ (q scale), dq += (dlogits k) scale
                let dkh = head_mut(dke, h, nk, dh, f);
                matmul(
                    dkh,
                    true,
                    Mat::transposed(&ds, nk, nq),
                    head(qe, h, nq, dh, f),
                );
                ds.iter_mut().for_each(|d| *d *= scale);
                let dqh = head_mut(dqe, h, nq, dh, f);
                matmul(dqh, true, Mat::rows(&ds, nq, nk), head(ke, h, nk, dh, f));
            }
        });
}

/// See [`FlaxenDevice::try_attention`](super::super::FlaxenDevice::try_attention).
pub(in crate::layers) fn attention<E, B, Q, K, const F: usize, T>(
    dev: &Cpu,
    heads: usize,
    q: Tensor<(B, Q, Const<F>), E, Cpu, T>,
    k: Tensor<(B, K, Const<F>), E, Cpu, T>,
    v: Tensor<(B, K, Const<F>), E, Cpu, T>,
    mask: Option<Tensor<(B, Q, K), bool, Cpu>>,
) -> Result<Rows<B, Q, F, E, T>, CpuError>
where
    E: Host,
    B: Dim,
    Q: Dim,
    K: Dim,
    T: Tape<E, Cpu>,
{
    assert!(
        heads >= 1 && F.is_multiple_of(heads),
        "attention: {heads} heads do not divide {F} features"
    );
    let (b, q_dim, _) = *q.shape();
    let d = Dims {
        batch: b.size(),
        nq: q_dim.size(),
        nk: k.shape().1.size(),
        heads,
        features: F,
    };
    // Row-major copies of permuted inputs, on their tapes (see `norm`).
    let (q, tq) = q.try_contiguous()?.split_tape();
    let (k, tk) = k.try_contiguous()?.split_tape();
    let (v, tv) = v.try_contiguous()?.split_tape();
    let mut tape = tq.merge(tk).merge(tv);
    let (q_ghost, k_ghost, v_ghost) = (q.ghost(), k.ghost(), v.ghost());
    let mut qs = host_vec(q)?;
    let (ks, vs) = (host_vec(k)?, host_vec(v)?);
    let mask = mask.map(|m| m.as_vec());
    let (out, w) = E::attention_forward(&d, &mut qs, &ks, &vs, mask.as_deref());
    let y = dev.try_tensor_from_vec(out, (b, q_dim, Const::<F>))?;
    if T::OWNS_TAPE {
        let y_ghost = y.ghost();
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            let mut dq = std::mem::take(&mut **grads.get_or_alloc_mut(&q_ghost)?);
            let mut dk = std::mem::take(&mut **grads.get_or_alloc_mut(&k_ghost)?);
            let mut dv = std::mem::take(&mut **grads.get_or_alloc_mut(&v_ghost)?);
            let m = mask.as_deref();
            E::attention_backward(&d, &qs, &ks, &vs, &w, m, &dy, &mut dq, &mut dk, &mut dv);
            **grads.get_or_alloc_mut(&q_ghost)? = dq;
            **grads.get_or_alloc_mut(&k_ghost)? = dk;
            **grads.get_or_alloc_mut(&v_ghost)? = dv;
            **grads.get_or_alloc_mut(&y_ghost)? = dy;
            Ok(())
        });
    }
    Ok(y.put_tape(tape))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::attention::heads_composite;

    /// The fused pass against dfdx's ops, in f64, on odd shapes with a mask
    /// that hides some keys from every query and every key from one
    /// query: values, and the gradients of `q`, `k` and `v`.
    #[test]
    fn matches_dfdx_ops_in_f64() {
        let dev = Cpu::seed_from_u64(7);
        let q: Tensor<Rank3<3, 5, 12>, f64, _> = dev.sample_normal::<Rank3<3, 5, 12>>() * 2.0;
        let k: Tensor<Rank3<3, 7, 12>, f64, _> = dev.sample_normal::<Rank3<3, 7, 12>>() * 2.0;
        let v: Tensor<Rank3<3, 7, 12>, f64, _> = dev.sample_normal();
        let w: Tensor<Rank3<3, 5, 12>, f64, _> = dev.sample_normal();
        let mask: Vec<bool> = (0..3 * 5 * 7)
            .map(|i| (i / 7) % 5 != 2 && (i * 5) % 3 != 0)
            .collect();
        let mask: Tensor<Rank3<3, 5, 7>, bool, _> = dev.tensor_from_vec(mask, Default::default());
        let run = |fused: bool| {
            let (qt, kt, vt) = (q.leaky_trace(), k.leaky_trace(), v.leaky_trace());
            let y = if fused {
                attention(&dev, 3, qt, kt, vt, Some(mask.clone())).unwrap()
            } else {
                heads_composite(3, qt, kt, vt, Some(mask.clone()), None).unwrap()
            };
            let values = y.as_vec();
            let g = (y * w.clone()).sum().backward();
            (
                values,
                [g.get(&q).as_vec(), g.get(&k).as_vec(), g.get(&v).as_vec()],
            )
        };
        let (ya, ga) = run(true);
        let (yb, gb) = run(false);
        for (a, b) in ya.iter().zip(&yb) {
            assert!((a - b).abs() < 1e-12, "{a} {b}");
        }
        for (ga, gb) in ga.iter().zip(&gb) {
            for (a, b) in ga.iter().zip(gb) {
                assert!((a - b).abs() < 1e-12, "{a} {b}");
            }
        }
    }
}
