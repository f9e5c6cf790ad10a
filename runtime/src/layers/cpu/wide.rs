//! The "wide" patch matrix of a stride-1 convolution: one column per cell
//! of the zero-padded input's rows, `oh x wp` of them, instead of one per
//! output position (`oh x ow`).
//!
//! With stride 1, patch row `(c, ki, kj)` over the wide columns is the
//! padded plane itself from offset `ki * dh * wp + kj * dw` on: one copy
//! of `oh * wp` values, where the exact patch matrix needs `oh` copies of
//! `ow` (14 values each for a 14 x 14 plane, where the per-row overhead
//! costs more than the copy). The `(kw - 1) * dw` extra columns per row
//! read cells that wrap into the next row: they are computed, then
//! dropped when the output is [`compact`]ed, and their output gradients
//! are zero when the gradient is [`expand`]ed, so they add nothing to the
//! weight gradient and exact zeros to the input gradient. The products
//! grow by `wp / ow` (16 / 14 for a 3x3 SAME convolution on 14 x 14).
//!
//! The adjoint, [`col2im`], is likewise one contiguous sum per patch row.

use std::mem::MaybeUninit;

use super::im2col::{add_interior, pad_plane};
use super::Elem;
use crate::layers::{ConvGeometry, Window2D};

/// The wide layout of a convolution, if it has one (see [`Wide::of`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Wide {
    /// The padded plane's width: columns per output row.
    pub wp: usize,
    /// Columns of the wide patch matrix, `oh * wp`.
    pub n: usize,
    /// The padded plane, `hp * wp`, plus `(kw - 1) * dw` zeros after it
    /// that the last row's wrapped columns read.
    pub pad_len: usize,
}

impl Wide {
    /// The wide layout of `geom`: for stride 1 in both axes, a kernel
    /// wider than one cell (a 1x1 kernel reads its input as it lies), at
    /// most a quarter more columns than output positions, and more patch
    /// rows than output channels: the layout saves `oh` short copies per
    /// patch row and costs `oh` per output channel ([`compact`],
    /// [`expand`]), so a first layer (1 channel in, 9 patch rows, 32 out)
    /// measured slower with it.
    pub fn of(geom: &ConvGeometry) -> Option<Self> {
        let w = &geom.win;
        let (hp, wp) = (w.h + w.pt + w.pb, w.w + w.pl + w.pr);
        let fits = w.sh == 1 && w.sw == 1 && w.kw > 1 && 4 * wp <= 5 * w.ow && geom.cols() > geom.o;
        fits.then(|| Self {
            wp,
            n: w.oh * wp,
            pad_len: hp * wp + (w.kw - 1) * w.dw,
        })
    }
}

/// Writes the wide patch matrix of one example, `(c * kh * kw) x n`;
/// `pad` is scratch of `pad_len`.
#[inline(always)]
pub(super) fn im2col<E: Elem>(
    geom: &ConvGeometry,
    wide: &Wide,
    x: &[E],
    cols: &mut [E],
    pad: &mut [E],
) {
    let win = &geom.win;
    let mut rows = cols.chunks_exact_mut(wide.n);
    for xc in x.chunks_exact(win.in_plane()).take(geom.c) {
        // The zeros after the plane come with its bottom padding.
        pad_plane(win, xc, pad);
        for ki in 0..win.kh {
            for kj in 0..win.kw {
                let row = rows.next().expect("patch rows");
                row.copy_from_slice(&pad[ki * win.dh * wide.wp + kj * win.dw..][..wide.n]);
            }
        }
    }
}

/// Adds the wide patch-matrix gradient `dcols` of one example into its
/// input gradient `dx` (the adjoint of [`im2col`]); `pad` as there.
#[inline(always)]
pub(super) fn col2im<E: Elem>(
    geom: &ConvGeometry,
    wide: &Wide,
    dcols: &[E],
    dx: &mut [E],
    pad: &mut [E],
) {
    let win = &geom.win;
    let mut rows = dcols.chunks_exact(wide.n);
    for dxc in dx.chunks_exact_mut(win.in_plane()).take(geom.c) {
        pad.iter_mut().for_each(|v| *v = E::zero());
        for ki in 0..win.kh {
            for kj in 0..win.kw {
                let row = rows.next().expect("patch rows");
                let acc = &mut pad[ki * win.dh * wide.wp + kj * win.dw..][..wide.n];
                acc.iter_mut().zip(row).for_each(|(a, &g)| *a += g);
            }
        }
        add_interior(win, pad, dxc);
    }
}

/// `out[ch][oy][ox] = wide[ch][oy * wp + ox] + bias(ch)` for `ox < ow`:
/// the convolution's output from its wide product, written once into
/// `out` (which may be uninitialised).
#[inline(always)]
pub(super) fn compact<E: Elem>(
    win: &Window2D,
    wide: &Wide,
    src: &[E],
    out: &mut [MaybeUninit<E>],
    bias_of: impl Fn(usize) -> E,
) {
    let planes = src
        .chunks_exact(wide.n)
        .zip(out.chunks_exact_mut(win.out_plane()));
    for (ch, (s, o)) in planes.enumerate() {
        let b = bias_of(ch);
        for (sr, or) in s.chunks_exact(wide.wp).zip(o.chunks_exact_mut(win.ow)) {
            or.iter_mut().zip(sr).for_each(|(o, &v)| {
                o.write(v + b);
            });
        }
    }
}

/// The wide form of the output gradient `dy` (`ch x oh x ow`): zeros in
/// the extra columns, so they contribute nothing.
#[inline(always)]
pub(super) fn expand<E: Elem>(win: &Window2D, wide: &Wide, dy: &[E], out: &mut [E]) {
    let planes = dy
        .chunks_exact(win.out_plane())
        .zip(out.chunks_exact_mut(wide.n));
    for (d, o) in planes {
        for (dr, or) in d.chunks_exact(win.ow).zip(o.chunks_exact_mut(wide.wp)) {
            or[..win.ow].copy_from_slice(dr);
            or[win.ow..].iter_mut().for_each(|v| *v = E::zero());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::im2col::tests::dilated;
    use super::*;

    /// A stride-1 geometry (the only ones with a wide layout).
    fn geom(c: usize, k: [usize; 2], d: [usize; 2], p: [usize; 4], hw: [usize; 2]) -> ConvGeometry {
        dilated(c, k, d, [1, 1], p, hw)
    }

    /// The wide patch matrix holds the exact one in its first `ow` columns
    /// of every row (checked against the definition), and `col2im` is its
    /// adjoint on the gradients that `expand` produces: SAME, VALID,
    /// asymmetric and dilated windows, several channels.
    #[test]
    fn wide_columns_hold_the_patch_matrix_and_col2im_is_adjoint() {
        for g in [
            geom(2, [3, 3], [1, 1], [1, 1, 1, 1], [14, 14]),
            geom(1, [3, 3], [1, 1], [0, 0, 0, 0], [9, 11]),
            geom(3, [2, 3], [1, 1], [0, 1, 2, 0], [6, 9]),
            geom(2, [3, 2], [2, 3], [2, 1, 0, 3], [7, 12]),
        ] {
            let win = g.win;
            let w = Wide::of(&g).expect("a stride-1 window with a wide layout");
            let x: Vec<f64> = (0..g.c * win.in_plane())
                .map(|i| (i as f64 * 0.37).sin())
                .collect();
            let mut cols = vec![f64::NAN; g.cols() * w.n];
            let mut pad = vec![f64::NAN; w.pad_len];
            im2col(&g, &w, &x, &mut cols, &mut pad);
            for (r, row) in cols.chunks_exact(w.n).enumerate() {
                let (c, kk) = (r / win.window(), r % win.window());
                let (ki, kj) = (kk / win.kw, kk % win.kw);
                for oy in 0..win.oh {
                    for ox in 0..win.ow {
                        let iy = (oy + ki * win.dh) as isize - win.pt as isize;
                        let ix = (ox + kj * win.dw) as isize - win.pl as isize;
                        let inside =
                            iy >= 0 && ix >= 0 && (iy as usize) < win.h && (ix as usize) < win.w;
                        let want = if inside {
                            x[c * win.in_plane() + iy as usize * win.w + ix as usize]
                        } else {
                            0.0
                        };
                        assert_eq!(row[oy * w.wp + ox], want, "{g:?} row {r} ({oy}, {ox})");
                    }
                }
            }
            // <im2col(x), expand(d)> == <x, col2im(W d)> with the wide
            // gradient of the exact positions only.
            let o = g.cols();
            let d: Vec<f64> = (0..o * win.out_plane())
                .map(|i| (i as f64 * 0.11).cos())
                .collect();
            let mut dw = vec![f64::NAN; o * w.n];
            expand(&win, &w, &d, &mut dw);
            let mut dx = vec![0.0; x.len()];
            col2im(&g, &w, &dw, &mut dx, &mut pad);
            let lhs: f64 = cols.iter().zip(&dw).map(|(a, b)| a * b).sum();
            let rhs: f64 = x.iter().zip(&dx).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-9, "{g:?}: {lhs} vs {rhs}");
            // compact undoes expand, adding the bias.
            let mut back = vec![MaybeUninit::new(f64::NAN); d.len()];
            compact(&win, &w, &dw, &mut back, |ch| ch as f64);
            for (i, (b, v)) in back.iter().zip(&d).enumerate() {
                // SAFETY: initialised (NaN) above, and overwritten by `compact`.
                assert_eq!(unsafe { b.assume_init() }, v + (i / win.out_plane()) as f64);
            }
        }
    }
}
