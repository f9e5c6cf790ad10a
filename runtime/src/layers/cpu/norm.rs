//! LayerNorm and RMSNorm over the last axis: each row normalised in one
//! pass forward, and its gradient in one pass backward, from the
//! normalised rows and each row's inverse deviation kept by the forward.

use dfdx::prelude::*;
use rayon::prelude::*;

use super::{host_vec, Elem};

/// Rows per rayon task, and the partial sums of the scale's and bias's
/// gradients each task keeps.
fn rows_per_task(rows: usize) -> usize {
    super::chunking(rows)
}

/// What every row of one norm shares: the scale, the bias (empty: none),
/// whether rows are centred (LayerNorm) or not (RMSNorm), epsilon.
#[derive(Clone, Copy)]
struct Norm<'a, E> {
    scale: &'a [E],
    bias: &'a [E],
    center: bool,
    eps: E,
}

/// Normalises `x`'s rows into `y` (`xhat`, before the scale and bias,
/// into `xhat` when it is not empty) and each row's `1 / sqrt(var + eps)`
/// into `inv`.
#[inline(always)]
fn forward_rows<E: Elem>(p: &Norm<'_, E>, x: &[E], y: &mut [E], xhat: &mut [E], inv: &mut [E]) {
    let (scale, bias) = (p.scale, p.bias);
    let f = scale.len();
    let n = E::from_usize(f).unwrap();
    for (r, (xr, yr)) in x.chunks_exact(f).zip(y.chunks_exact_mut(f)).enumerate() {
        let mean = if p.center {
            xr.iter().fold(E::zero(), |s, &v| s + v) / n
        } else {
            E::zero()
        };
        let var = xr
            .iter()
            .fold(E::zero(), |s, &v| s + (v - mean) * (v - mean))
            / n;
        let k = E::one() / (var + p.eps).sqrt();
        inv[r] = k;
        for (j, (y, &v)) in yr.iter_mut().zip(xr).enumerate() {
            let h = (v - mean) * k;
            *y = h * scale[j] + if bias.is_empty() { E::zero() } else { bias[j] };
        }
        if !xhat.is_empty() {
            for (h, &v) in xhat[r * f..(r + 1) * f].iter_mut().zip(xr) {
                *h = (v - mean) * k;
            }
        }
    }
}

simd_dispatch!(fn forward_simd<E: Elem>(
    p: &Norm<'_, E>,
    x: &[E],
    y: &mut [E],
    xhat: &mut [E],
    inv: &mut [E],
) => forward_rows);

/// Gradients of one task's rows: `dx += ..`, and the scale's and bias's
/// gradients of these rows added into `dscale`, `dbias`.
struct RowGrads<'a, E> {
    dx: &'a mut [E],
    dscale: Vec<E>,
    dbias: Vec<E>,
}

#[inline(always)]
fn backward_rows<E: Elem>(
    p: &Norm<'_, E>,
    dy: &[E],
    xhat: &[E],
    inv: &[E],
    out: &mut RowGrads<'_, E>,
) {
    let scale = p.scale;
    let f = scale.len();
    let n = E::from_usize(f).unwrap();
    let (dscale, dbias) = (&mut out.dscale, &mut out.dbias);
    for (r, ((g, h), d)) in dy
        .chunks_exact(f)
        .zip(xhat.chunks_exact(f))
        .zip(out.dx.chunks_exact_mut(f))
        .enumerate()
    {
        // With gs = dy * scale: dx = inv (gs - mean(gs) - xhat mean(gs xhat)),
        // without the mean(gs) term when the rows were not centred.
        let (mut sum, mut dot) = (E::zero(), E::zero());
        for j in 0..f {
            let gs = g[j] * scale[j];
            sum += gs;
            dot += gs * h[j];
            dscale[j] += g[j] * h[j];
            dbias[j] += g[j];
        }
        let mean = if p.center { sum / n } else { E::zero() };
        let (dot, k) = (dot / n, inv[r]);
        for j in 0..f {
            d[j] += k * (g[j] * scale[j] - mean - h[j] * dot);
        }
    }
}

simd_dispatch!(fn backward_simd<E: Elem>(
    p: &Norm<'_, E>,
    dy: &[E],
    xhat: &[E],
    inv: &[E],
    out: &mut RowGrads<'_, E>,
) => backward_rows);

/// See [`FlaxenDevice::try_norm_rows`](super::super::FlaxenDevice::try_norm_rows).
pub(in crate::layers) fn norm_rows<E: Elem, S: Shape, const F: usize, T: Tape<E, Cpu>>(
    dev: &Cpu,
    x: Tensor<S, E, Cpu, T>,
    center: bool,
    scale: &Tensor<Rank1<F>, E, Cpu>,
    bias: Option<&Tensor<Rank1<F>, E, Cpu>>,
    epsilon: f64,
) -> Result<Tensor<S, E, Cpu, T>, CpuError> {
    let shape = *x.shape();
    let n = shape.num_elements();
    assert!(
        F > 0 && n.is_multiple_of(F),
        "norm over {F} features of a tensor of {n} values"
    );
    let rows = n / F;
    let (x, mut tape) = x.split_tape();
    let x_ghost = x.ghost();
    let xs = host_vec(x)?;
    let ss = host_vec(scale.clone())?;
    let bs = bias.map(|b| host_vec(b.clone())).transpose()?;
    let eps = E::from_f64(epsilon).unwrap();
    let mut ys = vec![E::zero(); n];
    let mut xhat = vec![E::zero(); if T::OWNS_TAPE { n } else { 0 }];
    let mut inv = vec![E::zero(); rows];
    let per = rows_per_task(rows);
    let norm = Norm {
        scale: &ss,
        bias: bs.as_deref().unwrap_or(&[]),
        center,
        eps,
    };
    if rows > 0 {
        let hat_chunk = if T::OWNS_TAPE { per * F } else { 0 };
        let mut hats: Vec<&mut [E]> = match hat_chunk {
            0 => (0..rows.div_ceil(per)).map(|_| &mut [][..]).collect(),
            c => xhat.chunks_mut(c).collect(),
        };
        ys.par_chunks_mut(per * F)
            .zip(xs.par_chunks(per * F))
            .zip(inv.par_chunks_mut(per))
            .zip(hats.par_iter_mut())
            .for_each(|(((y, x), k), h)| forward_simd(&norm, x, y, h, k));
    }
    let y = dev.try_tensor_from_vec(ys, shape)?;
    if T::OWNS_TAPE {
        let y_ghost = y.ghost();
        let s_ghost = scale.ghost();
        let b_ghost = bias.map(|b| b.ghost());
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            let dx = grads.get_or_alloc_mut(&x_ghost)?;
            // Per task: its rows' scale and bias gradients, summed after.
            let partial: Vec<(Vec<E>, Vec<E>)> = dx
                .par_chunks_mut(per * F)
                .zip(dy.par_chunks(per * F))
                .zip(xhat.par_chunks(per * F))
                .zip(inv.par_chunks(per))
                .map(|(((dx, dy), h), k)| {
                    let mut out = RowGrads {
                        dx,
                        dscale: vec![E::zero(); F],
                        dbias: vec![E::zero(); F],
                    };
                    let norm = Norm {
                        scale: &ss,
                        bias: &[],
                        center,
                        eps,
                    };
                    backward_simd(&norm, dy, h, k, &mut out);
                    (out.dscale, out.dbias)
                })
                .collect();
            let ds = grads.get_or_alloc_mut(&s_ghost)?;
            for (p, _) in &partial {
                super::add_into(ds, p);
            }
            if let Some(b_ghost) = &b_ghost {
                let db = grads.get_or_alloc_mut(b_ghost)?;
                for (_, p) in &partial {
                    super::add_into(db, p);
                }
            }
            **grads.get_or_alloc_mut(&y_ghost)? = dy;
            Ok(())
        });
    }
    Ok(y.put_tape(tape))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::norm::norm_rows_composite;

    /// LayerNorm (with and without a bias) and RMSNorm against dfdx's ops,
    /// in f64, on 3 x 5 rows of 13 features: values, and the gradients of
    /// the input, the scale and the bias.
    #[test]
    fn matches_dfdx_ops_in_f64() {
        let dev = Cpu::seed_from_u64(3);
        let x: Tensor<Rank3<3, 5, 13>, f64, _> = dev.sample_normal::<Rank3<3, 5, 13>>() * 3.0 + 1.5;
        let w: Tensor<Rank3<3, 5, 13>, f64, _> = dev.sample_normal();
        let s: Tensor<Rank1<13>, f64, _> = dev.sample_normal();
        let b: Tensor<Rank1<13>, f64, _> = dev.sample_normal();
        for (center, biased) in [(true, true), (true, false), (false, false)] {
            let run = |fused: bool| {
                let bias = biased.then_some(&b);
                let y = if fused {
                    norm_rows(&dev, x.leaky_trace(), center, &s, bias, 1e-3).unwrap()
                } else {
                    norm_rows_composite(x.leaky_trace(), center, &s, bias, 1e-3).unwrap()
                };
                let values = y.as_vec();
                let g = (y * w.clone()).sum().backward();
                let db = if biased { g.get(&b).as_vec() } else { vec![] };
                (values, [g.get(&x).as_vec(), g.get(&s).as_vec(), db])
            };
            let (ya, ga) = run(true);
            let (yb, gb) = run(false);
            for (a, b) in ya.iter().zip(&yb) {
                assert!((a - b).abs() < 1e-12, "{center} {biased}: {a} {b}");
            }
            for (ga, gb) in ga.iter().zip(&gb) {
                assert_eq!(ga.len(), gb.len());
                for (a, b) in ga.iter().zip(gb) {
                    assert!((a - b).abs() < 1e-12, "{center} {biased}: {a} {b}");
                }
            }
        }
    }
}
