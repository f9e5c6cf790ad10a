//! Transposed-convolution kernels (`jax.lax.conv_transpose`): a gemm and a
//! col2im-style scatter forward, a gather and two gemms backward, so the
//! work is that of the convolution whose gradient it is, not of a
//! convolution over the stride-dilated input (which is mostly zeros).
//!
//! With `win` the transposed window (input `h x w`, output `oh x ow`,
//! strides = input dilation, padding of the dilated input), input cell `i`
//! reaches output `i * s + p_lo - k * d` through kernel cell `k`.

use dfdx::prelude::*;
use rayon::prelude::*;

use super::gemm::{matmul, Mat, MatMut};
use super::scratch::Scratch;
use super::{add_into, chunking, Elem};
use crate::layers::{ConvGeometry, Epilogue, Window2D};

/// The input indices `lo..hi` (of `n`) whose output `i * s + off` lies in
/// `0..out`.
fn span(n: usize, s: usize, off: isize, out: usize) -> (usize, usize) {
    let (s, out) = (s as isize, out as isize);
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    let hi = if out <= off {
        0
    } else {
        (out - off + s - 1) / s
    };
    let hi = hi.clamp(0, n as isize) as usize;
    (lo.clamp(0, hi as isize) as usize, hi)
}

/// Visits every (kernel cell row of `rows`, input position, output
/// position) the transposed window links, as runs along output rows:
/// `f(row, input start, output start, len)` with input stride 1 and output
/// stride `sw`.
fn for_each_run(win: &Window2D, planes: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
    let cells = win.window();
    for p in 0..planes {
        for ki in 0..win.kh {
            let off_y = win.pt as isize - (ki * win.dh) as isize;
            let (ylo, yhi) = span(win.h, win.sh, off_y, win.oh);
            for kj in 0..win.kw {
                let off_x = win.pl as isize - (kj * win.dw) as isize;
                let (xlo, xhi) = span(win.w, win.sw, off_x, win.ow);
                let row = p * cells + ki * win.kw + kj;
                for iy in ylo..yhi {
                    let oy = (iy * win.sh) as isize + off_y;
                    let ox = (xlo * win.sw) as isize + off_x;
                    let out = p * win.out_plane() + oy as usize * win.ow + ox as usize;
                    f(row, iy * win.w + xlo, out, xhi - xlo);
                }
            }
        }
    }
}

/// `weight` `(o, c, kh, kw)` as the row-major `(c, o * kh * kw)` matrix the
/// gemms read (and back, for its gradient, with `back`).
fn permute<E: Elem>(geom: &ConvGeometry, src: &[E], back: bool) -> Vec<E> {
    let (c, o, cells) = (geom.c, geom.o, geom.win.window());
    let mut dst = vec![E::zero(); src.len()];
    for oc in 0..o {
        for ch in 0..c {
            let (a, b) = (oc * c * cells + ch * cells, ch * o * cells + oc * cells);
            let (from, to) = if back { (b, a) } else { (a, b) };
            dst[to..to + cells].copy_from_slice(&src[from..from + cells]);
        }
    }
    dst
}

/// Forward over `batch` examples: `y = scatter(W^T x) + bias`.
fn forward<E: Elem>(
    geom: &ConvGeometry,
    batch: usize,
    x: &[E],
    wp: &[E],
    bias: Option<&[E]>,
) -> Vec<E> {
    let win = &geom.win;
    let (hw, ohw, rows) = (win.in_plane(), win.out_plane(), geom.o * win.window());
    let (chw, out_len) = (geom.c * hw, geom.o * ohw);
    let mut y = vec![E::zero(); batch * out_len];
    let per = chunking(batch);
    y.par_chunks_mut(per * out_len)
        .enumerate()
        .for_each(|(t, yc)| {
            let mut cols = Scratch::new(rows * hw);
            for (i, yb) in yc.chunks_exact_mut(out_len).enumerate() {
                let xb = &x[(t * per + i) * chw..][..chw];
                let lhs = Mat::transposed(wp, rows, geom.c);
                matmul(
                    MatMut::rows(&mut cols, rows, hw),
                    false,
                    lhs,
                    Mat::rows(xb, geom.c, hw),
                );
                for (ch, plane) in yb.chunks_exact_mut(ohw).enumerate() {
                    plane.fill(bias.map_or(E::zero(), |b| b[ch]));
                }
                let sw = win.sw;
                for_each_run(win, geom.o, |row, src, dst, len| {
                    let src = &cols[row * hw + src..][..len];
                    let dst = yb[dst..].iter_mut().step_by(sw);
                    dst.zip(src).for_each(|(d, &v)| *d += v);
                });
            }
        });
    y
}

/// Backward: adds `x`'s gradient into `dx` and returns the gradients of the
/// permuted weight (`(c, o * kh * kw)`) and of the bias (empty without one).
fn backward<E: Elem>(
    geom: &ConvGeometry,
    batch: usize,
    x: &[E],
    wp: &[E],
    dy: &[E],
    dx: &mut [E],
    bias_grad: bool,
) -> (Vec<E>, Vec<E>) {
    let win = &geom.win;
    let (hw, ohw, rows) = (win.in_plane(), win.out_plane(), geom.o * win.window());
    let (chw, out_len) = (geom.c * hw, geom.o * ohw);
    let per = chunking(batch);
    let bias_len = if bias_grad { geom.o } else { 0 };
    let partials: Vec<(Vec<E>, Vec<E>)> = dx
        .par_chunks_mut(per * chw)
        .enumerate()
        .map(|(t, dxc)| {
            let mut dw = vec![E::zero(); geom.c * rows];
            let mut db = vec![E::zero(); bias_len];
            let mut dcols = Scratch::zeroed(rows * hw);
            for (i, dxb) in dxc.chunks_exact_mut(chw).enumerate() {
                let b = t * per + i;
                let dyb = &dy[b * out_len..][..out_len];
                // The adjoint of the forward scatter: each kernel row reads
                // the output gradient where its input cells landed.
                dcols.fill(E::zero());
                let sw = win.sw;
                for_each_run(win, geom.o, |row, dst, src, len| {
                    let dst = &mut dcols[row * hw + dst..][..len];
                    let src = dyb[src..].iter().step_by(sw);
                    dst.iter_mut().zip(src).for_each(|(d, &v)| *d = v);
                });
                let xb = &x[b * chw..][..chw];
                let dwm = MatMut::rows(&mut dw, geom.c, rows);
                matmul(
                    dwm,
                    true,
                    Mat::rows(xb, geom.c, hw),
                    Mat::transposed(&dcols, hw, rows),
                );
                let dxm = MatMut::rows(dxb, geom.c, hw);
                matmul(
                    dxm,
                    true,
                    Mat::rows(wp, geom.c, rows),
                    Mat::rows(&dcols, rows, hw),
                );
                for (acc, plane) in db.iter_mut().zip(dyb.chunks_exact(ohw)) {
                    *acc += plane.iter().fold(E::zero(), |s, &v| s + v);
                }
            }
            (dw, db)
        })
        .collect();
    let mut dw = vec![E::zero(); geom.c * rows];
    let mut db = vec![E::zero(); bias_len];
    for (pw, pb) in partials {
        add_into(&mut dw, &pw);
        add_into(&mut db, &pb);
    }
    (dw, db)
}

/// The kernels above, as [`conv_on_tape`](super::conv_on_tape) runs them:
/// the backward pass keeps `x` and the permuted weight.
struct Kernels;

// One impl per dtype, compiled here (see `conv`'s).
macro_rules! kernels {
    ($($e:ty),*) => {$(
        impl super::ConvKernels<$e> for Kernels {
            const NAME: &'static str = "conv_transpose2d";
            type Saved = (Scratch<$e>, Vec<$e>);
            type WeightGrad = Vec<$e>;

            fn supports(geom: &ConvGeometry, epi: &Epilogue) -> bool {
                geom.groups == 1 && *epi == Epilogue::NONE
            }

            #[inline(never)]
            fn forward(
                geom: &ConvGeometry,
                _: &Epilogue,
                batch: usize,
                x: Scratch<$e>,
                weight: Scratch<$e>,
                bias: Option<&[$e]>,
                _keep: bool,
            ) -> (Vec<$e>, Self::Saved) {
                let wp = permute(geom, &weight, false);
                drop(weight);
                let y = forward(geom, batch, &x, &wp, bias);
                (y, (x, wp))
            }

            #[inline(never)]
            fn backward(
                geom: &ConvGeometry,
                _: &Epilogue,
                batch: usize,
                (x, wp): &Self::Saved,
                dy: &[$e],
                dx: Option<&mut [$e]>,
                bias_grad: bool,
            ) -> (Vec<$e>, Vec<$e>) {
                // `conv_transpose2d` always asks for `x`'s gradient.
                let dx = dx.expect("conv_transpose2d computes the input gradient");
                let (dwp, db) = backward(geom, batch, x, wp, dy, dx, bias_grad);
                (permute(geom, &dwp, true), db)
            }
        }
    )*};
}
kernels!(f32, f64);

/// See [`FlaxenDevice::try_conv_transpose2d`](crate::layers::FlaxenDevice::try_conv_transpose2d).
#[allow(private_bounds)]
pub(in crate::layers) fn conv_transpose2d<
    E: Elem,
    X: Shape,
    K: Shape,
    Bs: Shape,
    Y: Shape,
    T: Tape<E, Cpu>,
>(
    dev: &Cpu,
    geom: &ConvGeometry,
    x: Tensor<X, E, Cpu, T>,
    weight: &Tensor<K, E, Cpu>,
    bias: Option<&Tensor<Bs, E, Cpu>>,
    y_shape: Y,
) -> Result<Tensor<Y, E, Cpu, T>, CpuError>
where
    Kernels: super::ConvKernels<E>,
{
    super::conv_on_tape::<Kernels, _, _, _, _, _, _>(
        dev,
        geom,
        &Epilogue::NONE,
        x,
        weight,
        bias,
        y_shape,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_keeps_outputs_in_range() {
        // i * 2 - 1 in 0..5: i = 1, 2.
        assert_eq!(span(4, 2, -1, 5), (1, 3));
        assert_eq!(span(4, 1, 2, 5), (0, 3));
        assert_eq!(span(4, 3, 7, 5), (0, 0));
        assert_eq!(span(2, 1, -5, 5), (2, 2));
    }
}
