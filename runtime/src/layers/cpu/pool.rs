//! Pooling kernels: direct loops over each plane, one rayon task per
//! contiguous run of planes.

use rayon::prelude::*;

use super::{chunking, Elem};
use crate::layers::Window2D;

/// Marks a max-pool window that lies wholly in the padding (its output is
/// `-inf` and it passes no gradient).
pub(super) const NO_ARGMAX: u32 = u32::MAX;

/// The input range `lo..hi` a window starting at padded offset `start`
/// covers along an axis of `size` cells padded by `pad` in front.
fn span(start: usize, kernel: usize, pad: usize, size: usize) -> (usize, usize) {
    let lo = start.saturating_sub(pad).min(size);
    let hi = (start + kernel).saturating_sub(pad).min(size);
    (lo, hi.max(lo))
}

/// Average pooling forward over `planes` planes: Flax's `avg_pool`, padded
/// cells count as zeros and every window divides by `kh * kw`.
pub(super) fn avg_forward<E: Elem>(win: &Window2D, planes: usize, x: &[E]) -> Vec<E> {
    let (plane, positions) = (win.in_plane(), win.out_plane());
    let scale = E::one() / E::from(win.window()).unwrap_or_else(E::one);
    let mut y = vec![E::zero(); planes * positions];
    let per = chunking(planes);
    y.par_chunks_mut(per * positions)
        .enumerate()
        .for_each(|(t, yc)| {
            for (i, yp) in yc.chunks_exact_mut(positions).enumerate() {
                let xp = &x[(t * per + i) * plane..][..plane];
                for oy in 0..win.oh {
                    let (y0, y1) = span(oy * win.sh, win.kh, win.pt, win.h);
                    for ox in 0..win.ow {
                        let (x0, x1) = span(ox * win.sw, win.kw, win.pl, win.w);
                        let mut acc = E::zero();
                        for iy in y0..y1 {
                            for &v in &xp[iy * win.w + x0..iy * win.w + x1] {
                                acc = acc + v;
                            }
                        }
                        yp[oy * win.ow + ox] = acc * scale;
                    }
                }
            }
        });
    y
}

/// Adds the average-pooling input gradient into `dx`.
pub(super) fn avg_backward<E: Elem>(win: &Window2D, dy: &[E], dx: &mut [E]) {
    let (plane, positions) = (win.in_plane(), win.out_plane());
    let scale = E::one() / E::from(win.window()).unwrap_or_else(E::one);
    let per = chunking(dx.len() / plane.max(1));
    dx.par_chunks_mut(per * plane)
        .enumerate()
        .for_each(|(t, dxc)| {
            for (i, dxp) in dxc.chunks_exact_mut(plane).enumerate() {
                let dyp = &dy[(t * per + i) * positions..][..positions];
                for oy in 0..win.oh {
                    let (y0, y1) = span(oy * win.sh, win.kh, win.pt, win.h);
                    for ox in 0..win.ow {
                        let (x0, x1) = span(ox * win.sw, win.kw, win.pl, win.w);
                        let g = dyp[oy * win.ow + ox] * scale;
                        for iy in y0..y1 {
                            for d in &mut dxp[iy * win.w + x0..iy * win.w + x1] {
                                *d += g;
                            }
                        }
                    }
                }
            }
        });
}

/// Max pooling forward: the outputs and, per output, the index within its
/// plane of the first maximal input (row-major), or [`NO_ARGMAX`].
pub(super) fn max_forward<E: Elem>(win: &Window2D, planes: usize, x: &[E]) -> (Vec<E>, Vec<u32>) {
    let (plane, positions) = (win.in_plane(), win.out_plane());
    let mut y = vec![E::neg_infinity(); planes * positions];
    let mut arg = vec![NO_ARGMAX; planes * positions];
    let per = chunking(planes);
    y.par_chunks_mut(per * positions)
        .zip(arg.par_chunks_mut(per * positions))
        .enumerate()
        .for_each(|(t, (yc, ac))| {
            let planes_out = yc
                .chunks_exact_mut(positions)
                .zip(ac.chunks_exact_mut(positions));
            for (i, (yp, ap)) in planes_out.enumerate() {
                let xp = &x[(t * per + i) * plane..][..plane];
                for oy in 0..win.oh {
                    let (y0, y1) = span(oy * win.sh, win.kh, win.pt, win.h);
                    for ox in 0..win.ow {
                        let (x0, x1) = span(ox * win.sw, win.kw, win.pl, win.w);
                        let (mut best, mut at) = (E::neg_infinity(), NO_ARGMAX);
                        for iy in y0..y1 {
                            for ix in x0..x1 {
                                let v = xp[iy * win.w + ix];
                                // `>` keeps the first maximum (XLA's choice for
                                // the gradient); a NaN wins, so it propagates.
                                if at == NO_ARGMAX || v > best || v.is_nan() && !best.is_nan() {
                                    best = v;
                                    at = (iy * win.w + ix) as u32;
                                }
                            }
                        }
                        yp[oy * win.ow + ox] = best;
                        ap[oy * win.ow + ox] = at;
                    }
                }
            }
        });
    (y, arg)
}

/// Adds the max-pooling input gradient into `dx`: each output's gradient
/// goes to the input cell recorded in `arg`.
pub(super) fn max_backward<E: Elem>(win: &Window2D, arg: &[u32], dy: &[E], dx: &mut [E]) {
    let (plane, positions) = (win.in_plane(), win.out_plane());
    let per = chunking(dx.len() / plane.max(1));
    dx.par_chunks_mut(per * plane)
        .enumerate()
        .for_each(|(t, dxc)| {
            for (i, dxp) in dxc.chunks_exact_mut(plane).enumerate() {
                let at = (t * per + i) * positions..(t * per + i + 1) * positions;
                for (&a, &g) in arg[at.clone()].iter().zip(&dy[at]) {
                    if a != NO_ARGMAX {
                        dxp[a as usize] += g;
                    }
                }
            }
        });
}
