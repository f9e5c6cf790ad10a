//! LayerNorm, RMSNorm and GroupNorm: each row (a LayerNorm's features, a
//! GroupNorm's group of channels over all positions) normalised in one
//! pass forward, and its gradient in one pass backward, from the
//! normalised rows and each row's inverse deviation kept by the forward.

use dfdx::prelude::*;
use rayon::prelude::*;

use super::{fold_lanes, host_vec, Elem, Host, LANES};
use crate::layers::NormRows;

/// What every row of one norm shares: the scale (all of it), the bias
/// (empty: none), the row's layout, epsilon.
#[derive(Clone, Copy)]
struct Norm<'a, E> {
    scale: &'a [E],
    bias: &'a [E],
    layout: NormRows,
    eps: E,
}

impl<E: Elem> Norm<'_, E> {
    /// The scale entries of row `r`: `row / plane` of them, one per
    /// `plane` values, the rows cycling through the scale.
    #[inline(always)]
    fn first_entry(&self, r: usize) -> usize {
        let per_row = self.layout.row / self.layout.plane;
        (r * per_row) % self.scale.len()
    }
}

/// Normalises `x`'s rows (the first is row `r0`) into `y` (`xhat`, before
/// the scale and bias, into `xhat` when it is not empty) and each row's
/// `1 / sqrt(var + eps)` into `inv`.
#[inline(always)]
fn forward_rows<E: Elem>(
    p: &Norm<'_, E>,
    r0: usize,
    x: &[E],
    y: &mut [E],
    xhat: &mut [E],
    inv: &mut [E],
) {
    let (row, plane) = (p.layout.row, p.layout.plane);
    let n = E::from_usize(row).unwrap();
    for (r, (xr, yr)) in x.chunks_exact(row).zip(y.chunks_exact_mut(row)).enumerate() {
        let add = |a: E, b: E| a + b;
        let mean = if p.layout.center {
            fold_lanes(xr, E::zero(), add, add) / n
        } else {
            E::zero()
        };
        let var = fold_lanes(xr, E::zero(), |s, v| s + (v - mean) * (v - mean), add) / n;
        let k = E::one() / (var + p.eps).sqrt();
        inv[r] = k;
        let first = p.first_entry(r0 + r);
        let bias = |c: usize| {
            if p.bias.is_empty() {
                E::zero()
            } else {
                p.bias[first + c]
            }
        };
        if plane == 1 {
            // One scale entry per value (LayerNorm, RMSNorm).
            let s = &p.scale[first..first + row];
            for (j, (y, &v)) in yr.iter_mut().zip(xr).enumerate() {
                *y = (v - mean) * k * s[j] + bias(j);
            }
        } else {
            // One per plane of values (GroupNorm's channels).
            let segments = yr.chunks_exact_mut(plane).zip(xr.chunks_exact(plane));
            for (c, (ys, xs)) in segments.enumerate() {
                let (s, b) = (p.scale[first + c], bias(c));
                for (y, &v) in ys.iter_mut().zip(xs) {
                    *y = (v - mean) * k * s + b;
                }
            }
        }
        if !xhat.is_empty() {
            for (h, &v) in xhat[r * row..(r + 1) * row].iter_mut().zip(xr) {
                *h = (v - mean) * k;
            }
        }
    }
}

simd_dispatch!(fn forward_simd<E: Elem>(
    p: &Norm<'_, E>,
    r0: usize,
    x: &[E],
    y: &mut [E],
    xhat: &mut [E],
    inv: &mut [E],
) => forward_rows);

/// Gradients of one task's rows: `dx += ..`, and the scale's and bias's
/// gradients of these rows added into `dscale`, `dbias` (the scale's
/// length each).
struct RowGrads<'a, E> {
    dx: &'a mut [E],
    dscale: Vec<E>,
    dbias: Vec<E>,
}

#[inline(always)]
fn backward_rows<E: Elem>(
    p: &Norm<'_, E>,
    r0: usize,
    dy: &[E],
    xhat: &[E],
    inv: &[E],
    out: &mut RowGrads<'_, E>,
) {
    let (row, plane) = (p.layout.row, p.layout.plane);
    let n = E::from_usize(row).unwrap();
    let (dscale, dbias) = (&mut out.dscale, &mut out.dbias);
    for (r, ((g, h), d)) in dy
        .chunks_exact(row)
        .zip(xhat.chunks_exact(row))
        .zip(out.dx.chunks_exact_mut(row))
        .enumerate()
    {
        // With gs = dy * scale: dx = inv (gs - mean(gs) - xhat mean(gs xhat)),
        // without the mean(gs) term when the rows were not centred.
        let first = p.first_entry(r0 + r);
        let (mut sum, mut dot) = (E::zero(), E::zero());
        if plane == 1 {
            let s = &p.scale[first..first + row];
            let (ds, db) = (
                &mut dscale[first..first + row],
                &mut dbias[first..first + row],
            );
            for ((ds, db), (&g, &h)) in ds.iter_mut().zip(db.iter_mut()).zip(g.iter().zip(h)) {
                *ds += g * h;
                *db += g;
            }
            // The two reductions in lanes, so that they vectorise.
            let (mut sums, mut dots) = ([E::zero(); LANES], [E::zero(); LANES]);
            let lanes = g.chunks_exact(LANES).zip(h.chunks_exact(LANES));
            for ((gc, hc), sc) in lanes.zip(s.chunks_exact(LANES)) {
                for l in 0..LANES {
                    let gs = gc[l] * sc[l];
                    sums[l] += gs;
                    dots[l] += gs * hc[l];
                }
            }
            sum = sums.into_iter().fold(sum, |a, b| a + b);
            dot = dots.into_iter().fold(dot, |a, b| a + b);
            for j in row - row % LANES..row {
                let gs = g[j] * s[j];
                sum += gs;
                dot += gs * h[j];
            }
        } else {
            for (c, (gc, hc)) in g.chunks_exact(plane).zip(h.chunks_exact(plane)).enumerate() {
                let s = p.scale[first + c];
                let (mut gsum, mut ghat) = (E::zero(), E::zero());
                for (&g, &h) in gc.iter().zip(hc) {
                    gsum += g;
                    ghat += g * h;
                }
                sum += gsum * s;
                dot += ghat * s;
                dscale[first + c] += ghat;
                dbias[first + c] += gsum;
            }
        }
        let mean = if p.layout.center { sum / n } else { E::zero() };
        let (dot, k) = (dot / n, inv[r]);
        if plane == 1 {
            let s = &p.scale[first..first + row];
            for j in 0..row {
                d[j] += k * (g[j] * s[j] - mean - h[j] * dot);
            }
        } else {
            let segments = d.chunks_exact_mut(plane).zip(g.chunks_exact(plane));
            for (c, (dc, gc)) in segments.enumerate() {
                let s = p.scale[first + c];
                let hc = &h[c * plane..(c + 1) * plane];
                for ((d, &g), &h) in dc.iter_mut().zip(gc).zip(hc) {
                    *d += k * (g * s - mean - h * dot);
                }
            }
        }
    }
}

simd_dispatch!(fn backward_simd<E: Elem>(
    p: &Norm<'_, E>,
    r0: usize,
    dy: &[E],
    xhat: &[E],
    inv: &[E],
    out: &mut RowGrads<'_, E>,
) => backward_rows);

/// The forward pass on host rows: the output, and when `keep` the
/// normalised rows (else empty) and each row's inverse deviation.
pub(super) fn forward<E: Elem>(
    layout: &NormRows,
    xs: &[E],
    scale: &[E],
    bias: &[E],
    keep: bool,
) -> (Vec<E>, Vec<E>, Vec<E>) {
    let (n, row) = (xs.len(), layout.row);
    let rows = n / row;
    let norm = Norm {
        scale,
        bias,
        layout: *layout,
        eps: E::from_f64(layout.epsilon).unwrap(),
    };
    let mut ys = vec![E::zero(); n];
    let mut xhat = vec![E::zero(); if keep { n } else { 0 }];
    let mut inv = vec![E::zero(); rows];
    if rows > 0 {
        let per = super::chunking(rows);
        let mut hats: Vec<&mut [E]> = match keep {
            false => (0..rows.div_ceil(per)).map(|_| &mut [][..]).collect(),
            true => xhat.chunks_mut(per * row).collect(),
        };
        ys.par_chunks_mut(per * row)
            .zip(xs.par_chunks(per * row))
            .zip(inv.par_chunks_mut(per))
            .zip(hats.par_iter_mut())
            .enumerate()
            .for_each(|(t, (((y, x), k), h))| forward_simd(&norm, t * per, x, y, h, k));
    }
    (ys, xhat, inv)
}

/// The backward pass on host rows: adds `x`'s gradient into `dx` and
/// returns the scale's and the bias's.
pub(super) fn backward<E: Elem>(
    layout: &NormRows,
    scale: &[E],
    xhat: &[E],
    inv: &[E],
    dy: &[E],
    dx: &mut [E],
) -> (Vec<E>, Vec<E>) {
    let row = layout.row;
    let per = super::chunking(inv.len());
    let norm = Norm {
        scale,
        bias: &[],
        layout: *layout,
        eps: E::from_f64(layout.epsilon).unwrap(),
    };
    let f = scale.len();
    // Per task: its rows' scale and bias gradients, summed after.
    let partial: Vec<(Vec<E>, Vec<E>)> = dx
        .par_chunks_mut(per * row)
        .zip(dy.par_chunks(per * row))
        .zip(xhat.par_chunks(per * row))
        .zip(inv.par_chunks(per))
        .enumerate()
        .map(|(t, (((dx, dy), h), k))| {
            let mut out = RowGrads {
                dx,
                dscale: vec![E::zero(); f],
                dbias: vec![E::zero(); f],
            };
            backward_simd(&norm, t * per, dy, h, k, &mut out);
            (out.dscale, out.dbias)
        })
        .collect();
    let (mut ds, mut db) = (vec![E::zero(); f], vec![E::zero(); f]);
    for (s, b) in &partial {
        super::add_into(&mut ds, s);
        super::add_into(&mut db, b);
    }
    (ds, db)
}

/// See [`FlaxenDevice::try_norm_rows`](super::super::FlaxenDevice::try_norm_rows).
pub(in crate::layers) fn norm_rows<E: Host, S: Shape, const F: usize, T: Tape<E, Cpu>>(
    dev: &Cpu,
    x: Tensor<S, E, Cpu, T>,
    layout: NormRows,
    scale: &Tensor<Rank1<F>, E, Cpu>,
    bias: Option<&Tensor<Rank1<F>, E, Cpu>>,
) -> Result<Tensor<S, E, Cpu, T>, CpuError> {
    let shape = *x.shape();
    layout.check(shape.num_elements(), F);
    // A permuted `x` (a Mixer's token mixing) is copied into row-major
    // order on its own tape, so its gradient reaches its physical layout
    // through dfdx.
    let x = x.try_contiguous()?;
    let (x, mut tape) = x.split_tape();
    let x_ghost = x.ghost();
    let xs = host_vec(x)?;
    let ss = host_vec(scale.clone())?;
    let bs = bias.map(|b| host_vec(b.clone())).transpose()?;
    let bias_s = bs.as_deref().unwrap_or(&[]);
    let (ys, xhat, inv) = E::norm_forward(&layout, &xs, &ss, bias_s, T::OWNS_TAPE);
    let y = dev.try_tensor_from_vec(ys, shape)?;
    if T::OWNS_TAPE {
        let y_ghost = y.ghost();
        let s_ghost = scale.ghost();
        let b_ghost = bias.map(|b| b.ghost());
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            let dx = grads.get_or_alloc_mut(&x_ghost)?;
            let (ds, db) = E::norm_backward(&layout, &ss, &xhat, &inv, &dy, dx);
            super::add_into(grads.get_or_alloc_mut(&s_ghost)?, &ds);
            if let Some(b_ghost) = &b_ghost {
                super::add_into(grads.get_or_alloc_mut(b_ghost)?, &db);
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

    /// The fused passes against dfdx's ops in f64: values, and the
    /// gradients of the input, the scale and the bias (when there is one).
    fn matches_dfdx_ops<S: ConstShape, const F: usize>(layout: NormRows, biased: bool)
    where
        Cpu: SampleTensor<f64>,
    {
        let dev = Cpu::seed_from_u64(3);
        let shape = S::default();
        let x = dev.sample_normal_like(&shape) * 3.0 + 1.5;
        let w = dev.sample_normal_like(&shape);
        let s: Tensor<Rank1<F>, f64, _> = dev.sample_normal();
        let b: Tensor<Rank1<F>, f64, _> = dev.sample_normal();
        let run = |fused: bool| {
            let bias = biased.then_some(&b);
            let y = if fused {
                norm_rows(&dev, x.leaky_trace(), layout, &s, bias).unwrap()
            } else {
                norm_rows_composite(x.leaky_trace(), layout, &s, bias).unwrap()
            };
            let values = y.as_vec();
            let g = (y * w.clone()).sum().backward();
            let db = if biased { g.get(&b).as_vec() } else { vec![] };
            (values, [g.get(&x).as_vec(), g.get(&s).as_vec(), db])
        };
        let (ya, ga) = run(true);
        let (yb, gb) = run(false);
        for (a, b) in ya.iter().zip(&yb) {
            assert!((a - b).abs() < 1e-12, "{layout:?}: {a} {b}");
        }
        for (ga, gb) in ga.iter().zip(&gb) {
            assert_eq!(ga.len(), gb.len());
            for (a, b) in ga.iter().zip(gb) {
                assert!((a - b).abs() < 1e-12, "{layout:?}: {a} {b}");
            }
        }
    }

    /// LayerNorm with and without a bias, and RMSNorm, on 3 x 5 rows of 13
    /// features.
    #[test]
    fn layer_and_rms_norm_match_dfdx_ops_in_f64() {
        for (center, biased) in [(true, true), (true, false), (false, false)] {
            let layout = NormRows::features(13, center, 1e-3);
            matches_dfdx_ops::<Rank3<3, 5, 13>, 13>(layout, biased);
        }
    }

    /// GroupNorm: 6 channels of 5 x 3 in 2 groups, 3 examples.
    #[test]
    fn group_norm_matches_dfdx_ops_in_f64() {
        let layout = NormRows {
            row: 3 * 15,
            plane: 15,
            center: true,
            epsilon: 1e-3,
        };
        matches_dfdx_ops::<Rank4<3, 6, 5, 3>, 6>(layout, true);
    }
}
