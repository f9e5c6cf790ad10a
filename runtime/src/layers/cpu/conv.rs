//! Convolution kernels: im2col + gemm forward, gemm + col2im backward, one
//! rayon task per contiguous run of examples.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::gemm::{matmul, Mat, MatMut};
use super::scratch::Scratch;
use super::{chunking, Elem};
use crate::layers::{ConvGeometry, Window2D};

/// For kernel column `kj`, the output columns `lo..hi` whose input column
/// `ox * sw + kj * dw - pl` lies inside `0..w`; the others read padding.
fn valid_cols(win: &Window2D, kj: usize) -> (usize, usize) {
    let kj = kj * win.dw;
    let lo = win.pl.saturating_sub(kj).div_ceil(win.sw).min(win.ow);
    let hi = (win.w + win.pl)
        .saturating_sub(kj)
        .div_ceil(win.sw)
        .clamp(lo, win.ow);
    (lo, hi)
}

/// The input row that output row `oy` reads at kernel row `ki`, if any.
fn input_row(win: &Window2D, oy: usize, ki: usize) -> Option<usize> {
    (oy * win.sh + ki * win.dh)
        .checked_sub(win.pt)
        .filter(|&iy| iy < win.h)
}

/// Writes the `(c * kh * kw) x (oh * ow)` patch matrix of one example; the
/// rows of group `g` are `g * patch..(g + 1) * patch`.
fn im2col<E: Elem>(geom: &ConvGeometry, x: &[E], cols: &mut [E]) {
    let win = &geom.win;
    let (positions, plane) = (win.out_plane(), win.in_plane());
    let mut rows = cols.chunks_exact_mut(positions);
    for ch in 0..geom.c {
        let xc = &x[ch * plane..(ch + 1) * plane];
        for ki in 0..win.kh {
            for kj in 0..win.kw {
                let row = rows.next().expect("patch rows");
                let (lo, hi) = valid_cols(win, kj);
                for (oy, out) in row.chunks_exact_mut(win.ow).enumerate() {
                    let Some(iy) = input_row(win, oy, ki) else {
                        out.fill(E::zero());
                        continue;
                    };
                    out[..lo].fill(E::zero());
                    out[hi..].fill(E::zero());
                    let start = iy * win.w + lo * win.sw + kj * win.dw - win.pl;
                    if win.sw == 1 {
                        out[lo..hi].copy_from_slice(&xc[start..start + hi - lo]);
                    } else {
                        let src = xc[start..].iter().step_by(win.sw);
                        out[lo..hi].iter_mut().zip(src).for_each(|(o, &v)| *o = v);
                    }
                }
            }
        }
    }
}

/// Adds the patch-matrix gradient `dcols` of one example into its input
/// gradient `dx` (the adjoint of [`im2col`]).
fn col2im<E: Elem>(geom: &ConvGeometry, dcols: &[E], dx: &mut [E]) {
    let win = &geom.win;
    let (positions, plane) = (win.out_plane(), win.in_plane());
    let mut rows = dcols.chunks_exact(positions);
    for ch in 0..geom.c {
        let dxc = &mut dx[ch * plane..(ch + 1) * plane];
        for ki in 0..win.kh {
            for kj in 0..win.kw {
                let row = rows.next().expect("patch rows");
                let (lo, hi) = valid_cols(win, kj);
                for (oy, grad) in row.chunks_exact(win.ow).enumerate() {
                    let Some(iy) = input_row(win, oy, ki) else {
                        continue;
                    };
                    let start = iy * win.w + lo * win.sw + kj * win.dw - win.pl;
                    if win.sw == 1 {
                        let dst = &mut dxc[start..start + hi - lo];
                        dst.iter_mut()
                            .zip(&grad[lo..hi])
                            .for_each(|(d, &g)| *d += g);
                    } else {
                        let dst = dxc[start..].iter_mut().step_by(win.sw);
                        dst.zip(&grad[lo..hi]).for_each(|(d, &g)| *d += g);
                    }
                }
            }
        }
    }
}

/// The sum of `xs` with eight independent accumulators, so it vectorises
/// (a single running sum is bound by the latency of each addition).
fn sum<E: Elem>(xs: &[E]) -> E {
    let mut acc = [E::zero(); 8];
    let chunks = xs.chunks_exact(8);
    let tail = chunks.remainder().iter().fold(E::zero(), |s, &v| s + v);
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().fold(tail, |s, &v| s + v)
}

/// A 1x1 kernel with stride 1 and no padding reads the input as its own
/// patch matrix, so im2col and col2im are skipped.
pub(super) fn is_pointwise(geom: &ConvGeometry) -> bool {
    let w = &geom.win;
    w.kh == 1 && w.kw == 1 && w.sh == 1 && w.sw == 1 && w.pt + w.pb + w.pl + w.pr == 0
}

/// Forward pass over `batch` examples. Returns `y` (`batch x o x oh x ow`)
/// and, when `keep_cols`, every example's patch matrix for the backward pass
/// (none for pointwise kernels, whose patch matrix is `x` itself). Without
/// `bias` (Flax's `use_bias=False`) every output starts at zero instead.
pub(super) fn forward<E: Elem>(
    geom: &ConvGeometry,
    batch: usize,
    x: &[E],
    weight: &[E],
    bias: Option<&[E]>,
    keep_cols: bool,
) -> (Vec<E>, Option<Scratch<E>>) {
    let win = &geom.win;
    let (patch, positions) = (geom.patch(), win.out_plane());
    let (chw, out_len) = (geom.c * win.in_plane(), geom.o * positions);
    let col_len = geom.cols() * positions;
    let (groups, og) = (geom.groups, geom.o / geom.groups);
    let pointwise = is_pointwise(geom);
    // `y` is written without zeroing it first: every element starts as its
    // bias, or zero without one (below), and zeroing 3 MB per layer and step
    // ahead of the gemms was measurable.
    let mut y: Vec<E> = Vec::with_capacity(batch * out_len);
    let mut cols = (keep_cols && !pointwise).then(|| Scratch::new(batch * col_len));
    let per = chunking(batch);

    let run = |first: usize, y: &mut [MaybeUninit<E>], kept: Option<&mut [E]>| {
        let mut scratch = None;
        let kept = kept.map(|k| k.chunks_exact_mut(col_len));
        let mut kept = kept.into_iter().flatten();
        for (i, yb) in y.chunks_exact_mut(out_len).enumerate() {
            let xb = &x[(first + i) * chw..(first + i + 1) * chw];
            let colsb: &[E] = if pointwise {
                xb
            } else {
                let buf = match kept.next() {
                    Some(buf) => buf,
                    None => &mut scratch.get_or_insert_with(|| Scratch::new(col_len))[..],
                };
                im2col(geom, xb, buf);
                buf
            };
            // Every output starts as its bias (or zero); the gemm adds the
            // convolution. The rows are written here, right before the gemm
            // reads them, so they are still in cache.
            for (ch, row) in yb.chunks_exact_mut(positions).enumerate() {
                let b = bias.map_or(E::zero(), |bias| bias[ch]);
                row.iter_mut().for_each(|v| {
                    v.write(b);
                });
            }
            // SAFETY: every element of `yb` was written just above, and
            // `MaybeUninit<E>` has the layout of `E`.
            let yb = unsafe { &mut *(yb as *mut [MaybeUninit<E>] as *mut [E]) };
            // One gemm per group: its outputs, its weight rows, its patch rows.
            let blocks = yb.chunks_exact_mut(og * positions);
            let ws = weight.chunks_exact(og * patch);
            for (g, (yg, wg)) in blocks.zip(ws).enumerate().take(groups) {
                let cg = &colsb[g * patch * positions..(g + 1) * patch * positions];
                let dst = MatMut::rows(yg, og, positions);
                matmul(
                    dst,
                    true,
                    Mat::rows(wg, og, patch),
                    Mat::rows(cg, patch, positions),
                );
            }
        }
    };

    let spare = &mut y.spare_capacity_mut()[..batch * out_len];
    match cols.as_mut() {
        None => spare
            .par_chunks_mut(per * out_len)
            .enumerate()
            .for_each(|(t, yc)| run(t * per, yc, None)),
        Some(cols) => spare
            .par_chunks_mut(per * out_len)
            .zip(cols.par_chunks_mut(per * col_len))
            .enumerate()
            .for_each(|(t, (yc, cc))| run(t * per, yc, Some(cc))),
    }
    // SAFETY: the chunks above cover `0..batch * out_len` and `run` writes
    // every element of its chunk (a panic there unwinds before this line).
    unsafe { y.set_len(batch * out_len) };
    (y, cols)
}

/// Backward pass: adds the input gradient into `dx` (skipped when `dx` is
/// `None`, e.g. for the network's input batch) and returns the weight and
/// bias gradients; the bias gradient is empty unless `bias_grad` (a layer
/// without bias has none to fill). `cols` is what [`forward`] kept (or `x`
/// for a pointwise kernel).
pub(super) fn backward<E: Elem>(
    geom: &ConvGeometry,
    batch: usize,
    cols: &[E],
    weight: &[E],
    dy: &[E],
    dx: Option<&mut [E]>,
    bias_grad: bool,
) -> (Scratch<E>, Vec<E>) {
    let win = &geom.win;
    let (patch, positions) = (geom.patch(), win.out_plane());
    let (chw, out_len) = (geom.c * win.in_plane(), geom.o * positions);
    let col_len = geom.cols() * positions;
    let (groups, og) = (geom.groups, geom.o / geom.groups);
    let gcols = patch * positions;
    let pointwise = is_pointwise(geom);
    let per = chunking(batch);
    let bias_len = if bias_grad { geom.o } else { 0 };
    // One task per run of `per` examples, with its slice of `dx` if wanted.
    let tasks: Vec<(usize, Option<&mut [E]>)> = match dx {
        Some(dx) => dx.chunks_mut(per * chw).map(Some).enumerate().collect(),
        None => (0..batch.div_ceil(per)).map(|t| (t, None)).collect(),
    };

    let partials: Vec<(Scratch<E>, Vec<E>)> = tasks
        .into_par_iter()
        .map(|(t, mut dxc)| {
            // Overwritten by the first example's gemm.
            let mut dw = Scratch::new(geom.o * patch);
            let mut db = vec![E::zero(); bias_len];
            let mut dcols = None;
            for b in t * per..((t + 1) * per).min(batch) {
                let i = b - t * per;
                let dyb = &dy[b * out_len..(b + 1) * out_len];
                let colsb = &cols[b * col_len..(b + 1) * col_len];
                for (g, dwg) in dw.chunks_exact_mut(og * patch).enumerate().take(groups) {
                    let dyg =
                        Mat::rows(&dyb[g * og * positions..][..og * positions], og, positions);
                    let cg = Mat::transposed(&colsb[g * gcols..(g + 1) * gcols], positions, patch);
                    matmul(MatMut::rows(dwg, og, patch), i > 0, dyg, cg);
                }
                // An empty `db` (no bias) makes this loop a no-op.
                for (acc, row) in db.iter_mut().zip(dyb.chunks_exact(positions)) {
                    *acc += sum(row);
                }
                let Some(dxc) = dxc.as_deref_mut() else {
                    continue;
                };
                let dxb = &mut dxc[i * chw..(i + 1) * chw];
                // The patch-matrix gradient of each group, `W_g^T dy_g`: into
                // `dx` directly for a pointwise kernel (its patch rows are the
                // input's channels), else into `dcols` for col2im.
                let group_grads = |dst: &mut [E], accumulate: bool| {
                    for (g, dcg) in dst.chunks_exact_mut(gcols).enumerate().take(groups) {
                        let dyg =
                            Mat::rows(&dyb[g * og * positions..][..og * positions], og, positions);
                        let wt =
                            Mat::transposed(&weight[g * og * patch..][..og * patch], patch, og);
                        matmul(MatMut::rows(dcg, patch, positions), accumulate, wt, dyg);
                    }
                };
                if pointwise {
                    group_grads(dxb, true);
                } else {
                    let dcols = dcols.get_or_insert_with(|| Scratch::new(col_len));
                    group_grads(dcols, false);
                    col2im(geom, dcols, dxb);
                }
            }
            (dw, db)
        })
        .collect();

    let mut parts = partials.into_iter();
    let (mut dw, mut db) = parts
        .next()
        .unwrap_or_else(|| (Scratch::zeroed(geom.o * patch), vec![E::zero(); bias_len]));
    for (pw, pb) in parts {
        dw.iter_mut().zip(pw.iter()).for_each(|(a, &b)| *a += b);
        db.iter_mut().zip(&pb).for_each(|(a, &b)| *a += b);
    }
    (dw, db)
}

/// The kernels above, as [`conv_on_tape`](super::conv_on_tape) runs them:
/// the backward pass keeps the patch matrices (or, pointwise, `x`) and the
/// weight.
pub(super) struct Kernels;

impl<E: Elem> super::ConvKernels<E> for Kernels {
    const NAME: &'static str = "conv2d";
    type Saved = (Scratch<E>, Scratch<E>);
    type WeightGrad = Scratch<E>;

    fn supports(_: &ConvGeometry) -> bool {
        true
    }

    fn forward(
        geom: &ConvGeometry,
        batch: usize,
        x: Scratch<E>,
        weight: Scratch<E>,
        bias: Option<&[E]>,
        keep: bool,
    ) -> (Vec<E>, Self::Saved) {
        let (y, cols) = forward(geom, batch, &x, &weight, bias, keep);
        (y, (cols.unwrap_or(x), weight))
    }

    fn backward(
        geom: &ConvGeometry,
        batch: usize,
        (cols, weight): &Self::Saved,
        dy: &[E],
        dx: Option<&mut [E]>,
        bias_grad: bool,
    ) -> (Scratch<E>, Vec<E>) {
        backward(geom, batch, cols, weight, dy, dx, bias_grad)
    }
}

#[cfg(test)]
mod tests {
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

    fn dilated(
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
            im2col(&g, &x, &mut cols);
            assert_eq!(cols, im2col_naive(&g, &x), "{g:?}");
            // <im2col(x), d> == <x, col2im(d)>
            let d: Vec<f64> = (0..cols.len()).map(|i| (i as f64 * 0.11).cos()).collect();
            let mut dx = vec![0.0; n];
            col2im(&g, &d, &mut dx);
            let lhs: f64 = cols.iter().zip(&d).map(|(a, b)| a * b).sum();
            let rhs: f64 = x.iter().zip(&dx).map(|(a, b)| a * b).sum();
            assert!((lhs - rhs).abs() < 1e-9, "{g:?}");
        }
    }
}
