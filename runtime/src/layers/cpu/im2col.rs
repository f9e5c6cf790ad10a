//! Patch matrices of a convolution ("im2col"): the `(c * kh * kw) x (oh *
//! ow)` matrix whose product with the kernel is the convolution, and its
//! adjoint, which spreads a patch-matrix gradient back onto the input.

use super::scratch::Scratch;
use super::Elem;
use crate::layers::{ConvGeometry, Window2D};

/// `dst = src` for the short runs of one output row: a run of eight or more
/// is copied in fixed eight-element blocks (the last one overlapping), so
/// no call to `memcpy` is paid per row.
#[inline(always)]
pub(super) fn copy_run<E: Elem>(dst: &mut [E], src: &[E]) {
    let n = dst.len();
    let src = &src[..n];
    if n < 8 {
        dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s);
        return;
    }
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        d.copy_from_slice(s);
    }
    if !d.into_remainder().is_empty() {
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    }
}

/// The zero-padded plane's height and width, `(h + pt + pb, w + pl + pr)`.
#[inline(always)]
pub(super) fn padded_dims(win: &Window2D) -> (usize, usize) {
    (win.h + win.pt + win.pb, win.w + win.pl + win.pr)
}

#[inline(always)]
pub(super) fn is_padded(win: &Window2D) -> bool {
    win.pt + win.pb + win.pl + win.pr > 0
}

/// The scratch [`im2col`] and [`col2im`] need: one padded plane, or none.
pub(super) fn pad_scratch<E: Elem>(win: &Window2D) -> Scratch<E> {
    let (hp, wp) = padded_dims(win);
    Scratch::new(if is_padded(win) { hp * wp } else { 0 })
}

/// Copies the `h x w` plane `xc` into `pad` with its zero padding around
/// it, so that every window reads inside `pad` without bounds logic.
#[inline(always)]
pub(super) fn pad_plane<E: Elem>(win: &Window2D, xc: &[E], pad: &mut [E]) {
    let (_, wp) = padded_dims(win);
    let zero = |s: &mut [E]| s.iter_mut().for_each(|v| *v = E::zero());
    zero(&mut pad[..win.pt * wp]);
    zero(&mut pad[(win.pt + win.h) * wp..]);
    for (r, row) in pad[win.pt * wp..]
        .chunks_exact_mut(wp)
        .take(win.h)
        .enumerate()
    {
        zero(&mut row[..win.pl]);
        copy_run(&mut row[win.pl..win.pl + win.w], &xc[r * win.w..]);
        zero(&mut row[win.pl + win.w..]);
    }
}

/// Writes the `(c * kh * kw) x (oh * ow)` patch matrix of one example; the
/// rows of group `g` are `g * patch..(g + 1) * patch`. `pad` is scratch of
/// one padded plane (unused without padding).
#[inline(always)]
pub(super) fn im2col<E: Elem>(geom: &ConvGeometry, x: &[E], cols: &mut [E], pad: &mut [E]) {
    let win = &geom.win;
    let (positions, plane) = (win.out_plane(), win.in_plane());
    let wp = padded_dims(win).1;
    let mut rows = cols.chunks_exact_mut(positions);
    for xc in x.chunks_exact(plane).take(geom.c) {
        let src: &[E] = if is_padded(win) {
            pad_plane(win, xc, pad);
            pad
        } else {
            xc
        };
        for ki in 0..win.kh {
            for kj in 0..win.kw {
                let row = rows.next().expect("patch rows");
                for (oy, out) in row.chunks_exact_mut(win.ow).enumerate() {
                    let start = (oy * win.sh + ki * win.dh) * wp + kj * win.dw;
                    if win.sw == 1 {
                        copy_run(out, &src[start..]);
                    } else {
                        let src = src[start..].iter().step_by(win.sw);
                        out.iter_mut().zip(src).for_each(|(o, &v)| *o = v);
                    }
                }
            }
        }
    }
}

/// Adds the patch-matrix gradient `dcols` of one example into its input
/// gradient `dx` (the adjoint of [`im2col`]); `pad` as there.
#[inline(always)]
pub(super) fn col2im<E: Elem>(geom: &ConvGeometry, dcols: &[E], dx: &mut [E], pad: &mut [E]) {
    let win = &geom.win;
    let (positions, plane) = (win.out_plane(), win.in_plane());
    let wp = padded_dims(win).1;
    let mut rows = dcols.chunks_exact(positions);
    for dxc in dx.chunks_exact_mut(plane).take(geom.c) {
        let padded = is_padded(win);
        let acc: &mut [E] = if padded {
            pad.iter_mut().for_each(|v| *v = E::zero());
            &mut *pad
        } else {
            &mut *dxc
        };
        for ki in 0..win.kh {
            for kj in 0..win.kw {
                let row = rows.next().expect("patch rows");
                for (oy, grad) in row.chunks_exact(win.ow).enumerate() {
                    let start = (oy * win.sh + ki * win.dh) * wp + kj * win.dw;
                    if win.sw == 1 {
                        let dst = &mut acc[start..start + win.ow];
                        dst.iter_mut().zip(grad).for_each(|(d, &g)| *d += g);
                    } else {
                        let dst = acc[start..].iter_mut().step_by(win.sw);
                        dst.zip(grad).for_each(|(d, &g)| *d += g);
                    }
                }
            }
        }
        if padded {
            add_interior(win, pad, dxc);
        }
    }
}

/// `dxc += ` the interior (the unpadded `h x w` cells) of the padded
/// plane `pad`: the input gradient that a col2im gathered there.
#[inline(always)]
pub(super) fn add_interior<E: Elem>(win: &Window2D, pad: &[E], dxc: &mut [E]) {
    let wp = padded_dims(win).1;
    let inner = pad[win.pt * wp..].chunks_exact(wp).take(win.h);
    for (d, p) in dxc.chunks_exact_mut(win.w).zip(inner) {
        d.iter_mut()
            .zip(&p[win.pl..win.pl + win.w])
            .for_each(|(d, &g)| *d += g);
    }
}

/// A 1x1 kernel with stride 1 and no padding reads the input as its own
/// patch matrix, so im2col and col2im are skipped.
#[inline(always)]
pub(super) fn is_pointwise(geom: &ConvGeometry) -> bool {
    let w = &geom.win;
    w.kh == 1 && w.kw == 1 && w.sh == 1 && w.sw == 1 && w.pt + w.pb + w.pl + w.pr == 0
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn geom(
        c: usize,
        kernel: [usize; 2],
        s: [usize; 2],
        p: [usize; 4],
        hw: [usize; 2],
    ) -> ConvGeometry {
        let oh = crate::layers::conv_out_size(hw[0], kernel[0], s[0], p[0], p[1]);
        let ow = crate::layers::conv_out_size(hw[1], kernel[1], s[1], p[2], p[3]);
        ConvGeometry {
            c,
            o: 1,
            win: Window2D::checked(kernel, s, p, hw, [oh, ow]),
            groups: 1,
        }
    }

    /// A one-output-channel geometry with a dilated kernel (shared with
    /// the wide layout's tests).
    pub(in crate::layers::cpu) fn dilated(
        c: usize,
        kernel: [usize; 2],
        d: [usize; 2],
        s: [usize; 2],
        p: [usize; 4],
        hw: [usize; 2],
    ) -> ConvGeometry {
        let (eh, ew) = (
            crate::layers::dilated_kernel(kernel[0], d[0]),
            crate::layers::dilated_kernel(kernel[1], d[1]),
        );
        let oh = crate::layers::conv_out_size(hw[0], eh, s[0], p[0], p[1]);
        let ow = crate::layers::conv_out_size(hw[1], ew, s[1], p[2], p[3]);
        ConvGeometry {
            c,
            o: 1,
            win: Window2D::checked_dilated(kernel, d, s, p, hw, [oh, ow]),
            groups: 1,
        }
    }

    /// im2col by definition, to check the fast one against.
    fn im2col_naive(g: &ConvGeometry, x: &[f64]) -> Vec<f64> {
        let w = &g.win;
        let mut out = Vec::new();
        for ch in 0..g.c {
            for ki in 0..w.kh {
                for kj in 0..w.kw {
                    for oy in 0..w.oh {
                        for ox in 0..w.ow {
                            let iy = (oy * w.sh + ki * w.dh) as isize - w.pt as isize;
                            let ix = (ox * w.sw + kj * w.dw) as isize - w.pl as isize;
                            let inside =
                                iy >= 0 && ix >= 0 && (iy as usize) < w.h && (ix as usize) < w.w;
                            out.push(if inside {
                                x[ch * w.h * w.w + iy as usize * w.w + ix as usize]
                            } else {
                                0.0
                            });
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn im2col_and_col2im_are_adjoint_and_exact() {
        let cases = [
            geom(2, [3, 3], [1, 1], [1, 1, 1, 1], [5, 4]),
            geom(1, [2, 3], [2, 2], [0, 1, 2, 0], [6, 7]),
            geom(3, [3, 2], [2, 3], [2, 2, 1, 1], [4, 5]),
            geom(1, [5, 5], [2, 2], [0, 0, 0, 0], [9, 9]),
            dilated(2, [3, 2], [2, 3], [1, 2], [2, 1, 0, 3], [7, 8]),
            dilated(1, [2, 3], [3, 1], [2, 2], [0, 0, 1, 1], [6, 5]),
        ];
        for g in cases {
            let n = g.c * g.win.in_plane();
            let x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
            let mut cols = vec![0.0; g.patch() * g.win.out_plane()];
            let (hp, wp) = padded_dims(&g.win);
            let mut pad = vec![0.0; hp * wp];
            im2col(&g, &x, &mut cols, &mut pad);
            assert_eq!(cols, im2col_naive(&g, &x), "{g:?}");
            // <im2col(x), d> == <x, col2im(d)>
            let d: Vec<f64> = (0..cols.len()).map(|i| (i as f64 * 0.11).cos()).collect();
            let mut dx = vec![0.0; n];
            col2im(&g, &d, &mut dx, &mut pad);
            let lhs: f64 = cols.iter().zip(&d).map(|(a, b)| a * b).sum();
            let rhs: f64 = x.iter().zip(&dx).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-9, "{g:?}");
        }
    }
}
