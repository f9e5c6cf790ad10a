//! Pooling kernels: loops over each plane, one rayon task per contiguous run
//! of planes.
//!
//! The loops run window cell by window cell over a whole output row
//! (`acc[ox] += x[iy, ox * sw + kj - pl]` for the output columns whose
//! input column is inside the plane), so the inner loop has no bounds logic
//! and vectorises for stride 1.

use rayon::prelude::*;

use super::{chunking, Elem};
use crate::layers::Window2D;

/// Marks a max-pool window that lies wholly in the padding (its output is
/// `-inf` and it passes no gradient).
pub(super) const NO_ARGMAX: u32 = u32::MAX;

/// For window column `kj`, the output columns `lo..hi` whose input column
/// `ox * sw + kj - pl` lies inside `0..w`, and the input column of `lo`.
#[inline(always)]
fn valid_cols(win: &Window2D, kj: usize) -> (usize, usize, usize) {
    let lo = win.pl.saturating_sub(kj).div_ceil(win.sw).min(win.ow);
    let hi = (win.w + win.pl)
        .saturating_sub(kj)
        .div_ceil(win.sw)
        .clamp(lo, win.ow);
    (lo, hi, (lo * win.sw + kj).saturating_sub(win.pl))
}

/// The input row that output row `oy` reads at window row `ki`, if any.
#[inline(always)]
fn input_row(win: &Window2D, oy: usize, ki: usize) -> Option<usize> {
    (oy * win.sh + ki)
        .checked_sub(win.pt)
        .filter(|&iy| iy < win.h)
}

/// [`valid_cols`] for every window column.
fn all_valid_cols(win: &Window2D) -> Vec<(usize, usize, usize)> {
    (0..win.kw).map(|kj| valid_cols(win, kj)).collect()
}

/// Calls `f(lo, hi, first)` for every window cell (in row-major window
/// order) that output row `oy` reads: output columns `lo..hi` read the plane
/// at `first, first + sw, ...`. `cols` is [`all_valid_cols`].
#[inline(always)]
fn for_each_cell(
    win: &Window2D,
    cols: &[(usize, usize, usize)],
    oy: usize,
    mut f: impl FnMut(usize, usize, usize),
) {
    for ki in 0..win.kh {
        let Some(iy) = input_row(win, oy, ki) else {
            continue;
        };
        for &(lo, hi, ix) in cols {
            if lo < hi {
                f(lo, hi, iy * win.w + ix);
            }
        }
    }
}

/// Windows that tile the plane exactly (window == stride, no padding), the
/// usual `pool(2, 2)`: every input cell is in at most one window.
fn is_tiling(win: &Window2D) -> bool {
    win.kh == win.sh && win.kw == win.sw && win.pt + win.pb + win.pl + win.pr == 0
}

/// Adds, for every output column, the sum of its `K` input cells in `row`
/// (window width `K` known at compile time, so the loop vectorises).
#[inline(always)]
fn add_window_sums<E: Elem, const K: usize>(row: &[E], out: &mut [E]) {
    let (cells, _) = row.as_chunks::<K>();
    for (o, cell) in out.iter_mut().zip(cells) {
        *o += cell.iter().fold(E::zero(), |s, &v| s + v);
    }
}

/// Adds `g[ox]` to each of the `K` input cells of output column `ox`.
#[inline(always)]
fn spread_window_grads<E: Elem, const K: usize>(g: &[E], row: &mut [E]) {
    let (cells, _) = row.as_chunks_mut::<K>();
    for (cell, &g) in cells.iter_mut().zip(g) {
        cell.iter_mut().for_each(|d| *d += g);
    }
}

/// [`avg_forward`] of one plane for [`is_tiling`] windows.
#[inline(always)]
fn avg_forward_tiled<E: Elem>(win: &Window2D, scale: E, xp: &[E], yp: &mut [E]) {
    let used = win.ow * win.kw;
    // `yp` starts zeroed.
    for (oy, out) in yp.chunks_exact_mut(win.ow).enumerate() {
        for row in xp[oy * win.kh * win.w..].chunks_exact(win.w).take(win.kh) {
            let row = &row[..used];
            match win.kw {
                2 => add_window_sums::<E, 2>(row, out),
                3 => add_window_sums::<E, 3>(row, out),
                kw => {
                    for (o, cell) in out.iter_mut().zip(row.chunks_exact(kw)) {
                        *o += cell.iter().fold(E::zero(), |s, &v| s + v);
                    }
                }
            }
        }
        out.iter_mut().for_each(|o| *o *= scale);
    }
}

/// [`avg_backward`] of one plane for [`is_tiling`] windows; `g` is scratch
/// of `ow` elements.
#[inline(always)]
fn avg_backward_tiled<E: Elem>(win: &Window2D, scale: E, dyp: &[E], dxp: &mut [E], g: &mut [E]) {
    let used = win.ow * win.kw;
    for (oy, gy) in dyp.chunks_exact(win.ow).enumerate() {
        g.iter_mut().zip(gy).for_each(|(g, &v)| *g = v * scale);
        let rows = dxp[oy * win.kh * win.w..]
            .chunks_exact_mut(win.w)
            .take(win.kh);
        for row in rows {
            let row = &mut row[..used];
            match win.kw {
                2 => spread_window_grads::<E, 2>(g, row),
                3 => spread_window_grads::<E, 3>(g, row),
                kw => {
                    for (cell, &g) in row.chunks_exact_mut(kw).zip(g.iter()) {
                        cell.iter_mut().for_each(|d| *d += g);
                    }
                }
            }
        }
    }
}

/// The per-plane pooling kernels of one window, with what every plane
/// shares worked out once: the parallel passes below and the fused
/// convolution epilogue ([`super::conv`]) run these.
pub(super) struct PlanePool<E> {
    win: Window2D,
    scale: E,
    cols: Vec<(usize, usize, usize)>,
    tiling: bool,
}

impl<E: Elem> PlanePool<E> {
    pub(super) fn new(win: &Window2D) -> Self {
        Self {
            win: *win,
            scale: E::one() / E::from(win.window()).unwrap_or_else(E::one),
            cols: all_valid_cols(win),
            tiling: is_tiling(win),
        }
    }

    /// Flax's `avg_pool` of plane `xp` into `yp` (overwritten): padded
    /// cells count as zeros and every window divides by `kh * kw`.
    #[inline(always)]
    pub(super) fn avg_forward(&self, xp: &[E], yp: &mut [E]) {
        let win = &self.win;
        yp.iter_mut().for_each(|v| *v = E::zero());
        if self.tiling {
            return avg_forward_tiled(win, self.scale, xp, yp);
        }
        for (oy, out) in yp.chunks_exact_mut(win.ow).enumerate() {
            for_each_cell(win, &self.cols, oy, |lo, hi, first| {
                let src = xp[first..].iter().step_by(win.sw);
                out[lo..hi].iter_mut().zip(src).for_each(|(o, &v)| *o += v);
            });
            out.iter_mut().for_each(|o| *o *= self.scale);
        }
    }

    /// Adds plane `dyp`'s average-pooling input gradient into `dxp`; `g` is
    /// scratch of `ow` elements.
    #[inline(always)]
    pub(super) fn avg_backward(&self, dyp: &[E], dxp: &mut [E], g: &mut [E]) {
        let win = &self.win;
        if self.tiling {
            return avg_backward_tiled(win, self.scale, dyp, dxp, g);
        }
        for (oy, gy) in dyp.chunks_exact(win.ow).enumerate() {
            g.iter_mut().zip(gy).for_each(|(g, &v)| *g = v * self.scale);
            for ki in 0..win.kh {
                let Some(iy) = input_row(win, oy, ki) else {
                    continue;
                };
                let row = &mut dxp[iy * win.w..(iy + 1) * win.w];
                for &(lo, hi, ix) in &self.cols {
                    let dst = row[ix..].iter_mut().step_by(win.sw);
                    dst.zip(&g[lo..hi]).for_each(|(d, &v)| *d += v);
                }
            }
        }
    }

    /// Flax's `max_pool` of plane `xp` into `yp`, and in `ap` the index
    /// within the plane of each output's first maximal input (row-major),
    /// or [`NO_ARGMAX`].
    #[inline(always)]
    pub(super) fn max_forward(&self, xp: &[E], yp: &mut [E], ap: &mut [u32]) {
        let win = &self.win;
        yp.iter_mut().for_each(|v| *v = E::neg_infinity());
        ap.iter_mut().for_each(|a| *a = NO_ARGMAX);
        let rows = yp.chunks_exact_mut(win.ow).zip(ap.chunks_exact_mut(win.ow));
        for (oy, (out, at)) in rows.enumerate() {
            // Cells are visited in row-major window order, so `>` keeps the
            // first maximum (XLA's choice for the gradient); a NaN wins, so
            // it propagates.
            for_each_cell(win, &self.cols, oy, |lo, hi, first| {
                let cells = xp[first..].iter().step_by(win.sw);
                let outs = out[lo..hi].iter_mut().zip(&mut at[lo..hi]);
                for (k, ((o, a), &v)) in outs.zip(cells).enumerate() {
                    if *a == NO_ARGMAX || v > *o || v.is_nan() && !o.is_nan() {
                        *o = v;
                        *a = (first + k * win.sw) as u32;
                    }
                }
            });
        }
    }

    /// Adds plane `dyp`'s max-pooling input gradient into `dxp`: each
    /// output's gradient goes to the cell `ap` recorded.
    #[inline(always)]
    pub(super) fn max_backward(ap: &[u32], dyp: &[E], dxp: &mut [E]) {
        for (&a, &g) in ap.iter().zip(dyp) {
            if a != NO_ARGMAX {
                dxp[a as usize] += g;
            }
        }
    }
}

/// Average pooling forward over `planes` planes: Flax's `avg_pool`, padded
/// cells count as zeros and every window divides by `kh * kw`.
pub(super) fn avg_forward<E: Elem>(win: &Window2D, planes: usize, x: &[E]) -> Vec<E> {
    let (plane, positions) = (win.in_plane(), win.out_plane());
    let pool = PlanePool::new(win);
    let mut y = vec![E::zero(); planes * positions];
    let per = chunking(planes);
    y.par_chunks_mut(per * positions)
        .enumerate()
        .for_each(|(t, yc)| {
            for (i, yp) in yc.chunks_exact_mut(positions).enumerate() {
                pool.avg_forward(&x[(t * per + i) * plane..][..plane], yp);
            }
        });
    y
}

/// Adds the average-pooling input gradient into `dx`.
pub(super) fn avg_backward<E: Elem>(win: &Window2D, dy: &[E], dx: &mut [E]) {
    let (plane, positions) = (win.in_plane(), win.out_plane());
    let pool = PlanePool::new(win);
    let per = chunking(dx.len() / plane.max(1));
    dx.par_chunks_mut(per * plane)
        .enumerate()
        .for_each(|(t, dxc)| {
            let mut g = vec![E::zero(); win.ow];
            for (i, dxp) in dxc.chunks_exact_mut(plane).enumerate() {
                let dyp = &dy[(t * per + i) * positions..][..positions];
                pool.avg_backward(dyp, dxp, &mut g);
            }
        });
}

/// Max pooling forward: the outputs and, per output, the index within its
/// plane of the first maximal input (row-major), or [`NO_ARGMAX`].
pub(super) fn max_forward<E: Elem>(win: &Window2D, planes: usize, x: &[E]) -> (Vec<E>, Vec<u32>) {
    let (plane, positions) = (win.in_plane(), win.out_plane());
    let pool = PlanePool::new(win);
    let mut y = vec![E::zero(); planes * positions];
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
                pool.max_forward(&x[(t * per + i) * plane..][..plane], yp, ap);
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
                PlanePool::<E>::max_backward(&arg[at.clone()], &dy[at], dxp);
            }
        });
}
