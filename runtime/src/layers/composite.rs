//! Convolution and pooling composed from dfdx's public differentiable ops
//! (`concat_along`, `gather`, `matmul`, `sum`/`max`), so they run, and
//! differentiate, on any dfdx [`Device`]: the `Cuda` path of
//! [`FlaxenDevice`](super::FlaxenDevice), and the reference that tests hold
//! the CPU kernels to.
//!
//! Padding is one extra cell appended to every flattened input row (zero, or
//! `-inf` for max pooling) that the im2col gather index points at for every
//! window cell outside the input; this avoids a pad op, which dfdx lacks.

use crate::dtype::scalar;
use dfdx::prelude::*;

use super::{ConvGeometry, PoolKind, Window2D};

pub use super::resize::try_resize2d;

/// For every output position (row-major) and every window cell (row-major),
/// the index of the input cell it reads within one flattened plane of
/// `h * w` cells, or `pad` when the cell lies in the padding.
fn window_indices(win: &Window2D, pad: usize) -> Vec<usize> {
    let mut idx = Vec::with_capacity(win.out_plane() * win.window());
    for oy in 0..win.oh {
        for ox in 0..win.ow {
            for ki in 0..win.kh {
                for kj in 0..win.kw {
                    let iy = (oy * win.sh + ki * win.dh).checked_sub(win.pt);
                    let ix = (ox * win.sw + kj * win.dw).checked_sub(win.pl);
                    idx.push(match (iy, ix) {
                        (Some(iy), Some(ix)) if iy < win.h && ix < win.w => iy * win.w + ix,
                        _ => pad,
                    });
                }
            }
        }
    }
    idx
}

/// The im2col gather index of a convolution over one example: for every
/// output position, `c * kh * kw` indices into the example's `c * h * w`
/// values plus one padding cell at index `c * h * w`.
fn conv_indices(geom: &ConvGeometry) -> Vec<usize> {
    let win = &geom.win;
    let plane = win.in_plane();
    let pad = geom.c * plane;
    let per_window = window_indices(win, usize::MAX);
    let mut idx = Vec::with_capacity(win.out_plane() * geom.cols());
    for pos in per_window.chunks_exact(win.window()) {
        for ch in 0..geom.c {
            idx.extend(pos.iter().map(|&i| match i {
                usize::MAX => pad,
                i => ch * plane + i,
            }));
        }
    }
    idx
}

/// Repeats `row` once per row of a `(rows, row.len())` index tensor, as
/// `gather` along the last axis wants one index row per data row.
fn repeat_rows(row: &[usize], rows: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(row.len() * rows);
    for _ in 0..rows {
        out.extend_from_slice(row);
    }
    out
}

/// 2-D convolution of NCHW `x` with an OIHW `weight` plus `bias`, from
/// dfdx ops; see [`FlaxenDevice::try_conv2d`](super::FlaxenDevice::try_conv2d)
/// for the contract. Every op is recorded on `x`'s tape, and the parameters'
/// gradients land under their own ids, as with dfdx's `Linear`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{composite, ConvGeometry, Window2D};
///
/// let dev: Cpu = Default::default();
/// let geom = ConvGeometry {
///     c: 1,
///     o: 1,
///     win: Window2D::checked([2, 2], [1, 1], [0, 0, 0, 0], [2, 3], [1, 2]),
///     groups: 1,
/// };
/// let x: Tensor<Rank4<1, 1, 2, 3>, f32, _> = dev.tensor([[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]]);
/// let w: Tensor<Rank4<1, 1, 2, 2>, f32, _> = dev.tensor([[[[1.0, 0.0], [0.0, 1.0]]]]);
/// let b: Tensor<Rank1<1>, f32, _> = dev.tensor([0.5]);
/// let y = composite::try_conv2d(&geom, x, &w, &b, Rank4::<1, 1, 1, 2>::default()).unwrap();
/// assert_eq!(y.array(), [[[[6.5, 8.5]]]]);
/// ```
pub fn try_conv2d<E, D, X, K, Bs, Y, T>(
    geom: &ConvGeometry,
    x: Tensor<X, E, D, T>,
    weight: &Tensor<K, E, D>,
    bias: &Tensor<Bs, E, D>,
    y_shape: Y,
) -> Result<Tensor<Y, E, D, T>, D::Err>
where
    E: Dtype,
    D: Device<E>,
    X: Shape,
    K: Shape,
    Bs: Shape,
    Y: Shape,
    T: Tape<E, D> + Merge<T>,
{
    conv2d(geom, x, weight, Some(bias), y_shape)
}

/// [`try_conv2d`] without bias (Flax's `Conv(use_bias=False)`), from dfdx
/// ops; see
/// [`FlaxenDevice::try_conv2d_unbiased`](super::FlaxenDevice::try_conv2d_unbiased).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{composite, ConvGeometry, Window2D};
///
/// let dev: Cpu = Default::default();
/// let geom = ConvGeometry {
///     c: 1,
///     o: 1,
///     win: Window2D::checked([2, 2], [1, 1], [0, 0, 0, 0], [2, 3], [1, 2]),
///     groups: 1,
/// };
/// let x: Tensor<Rank4<1, 1, 2, 3>, f32, _> = dev.tensor([[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]]);
/// let w: Tensor<Rank4<1, 1, 2, 2>, f32, _> = dev.tensor([[[[1.0, 0.0], [0.0, 1.0]]]]);
/// let y = composite::try_conv2d_unbiased(&geom, x, &w, Rank4::<1, 1, 1, 2>::default()).unwrap();
/// assert_eq!(y.array(), [[[[6.0, 8.0]]]]);
/// ```
pub fn try_conv2d_unbiased<E, D, X, K, Y, T>(
    geom: &ConvGeometry,
    x: Tensor<X, E, D, T>,
    weight: &Tensor<K, E, D>,
    y_shape: Y,
) -> Result<Tensor<Y, E, D, T>, D::Err>
where
    E: Dtype,
    D: Device<E>,
    X: Shape,
    K: Shape,
    Y: Shape,
    T: Tape<E, D> + Merge<T>,
{
    conv2d::<_, _, _, _, Rank1<0>, _, _>(geom, x, weight, None, y_shape)
}

/// The convolution of [`try_conv2d`] and [`try_conv2d_unbiased`]: one body,
/// with the bias added when there is one. A grouped convolution multiplies
/// the patches of every channel by a block-diagonal `(o, c * kh * kw)`
/// weight gathered from the `(o, c / groups, kh, kw)` one (zeros off the
/// group's block), so its gradient lands on the real weight.
fn conv2d<E, D, X, K, Bs, Y, T>(
    geom: &ConvGeometry,
    x: Tensor<X, E, D, T>,
    weight: &Tensor<K, E, D>,
    bias: Option<&Tensor<Bs, E, D>>,
    y_shape: Y,
) -> Result<Tensor<Y, E, D, T>, D::Err>
where
    E: Dtype,
    D: Device<E>,
    X: Shape,
    K: Shape,
    Bs: Shape,
    Y: Shape,
    T: Tape<E, D> + Merge<T>,
{
    let win = &geom.win;
    let dev = x.device().clone();
    let weight = if geom.groups == 1 {
        weight
            .retaped::<T>()
            .try_reshape_like(&(geom.o, geom.patch()))?
    } else {
        let n = geom.o * geom.patch();
        let flat = weight.retaped::<T>().try_reshape_like(&(n,))?;
        let zero: Tensor<(usize,), E, D> = dev.try_zeros_like(&(1,))?;
        let flat = (flat, zero).try_concat_along(Axis::<0>)?;
        let idx = dev.try_tensor_from_vec(block_diagonal(geom), (geom.o * geom.cols(),))?;
        let full: Tensor<(usize,), E, D, T> = flat.try_gather(idx)?;
        full.try_reshape_like(&(geom.o, geom.cols()))?
    };
    let plan = Patches {
        idx: conv_indices(geom),
        chw: geom.c * win.in_plane(),
        cols: geom.cols(),
        o: geom.o,
        positions: win.out_plane(),
    };
    patches_matmul(&plan, x, weight, bias, y_shape)
}

/// The transposed convolution of Flax's `ConvTranspose` from dfdx ops; see
/// [`FlaxenDevice::try_conv_transpose2d`](super::FlaxenDevice::try_conv_transpose2d).
/// The gather reads, for every output cell and kernel cell, the input cell
/// the stride-dilated, padded input has there (or a zero).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{builder, composite};
///
/// type L = builder::ConvTranspose2D<1, 1, 1, 2, 1, 1, 1, 2, 0, 0, 1, 1, 1, 2, 1, 4>;
/// let dev: Cpu = Default::default();
/// let w: Tensor<Rank4<1, 1, 1, 2>, f32, _> = dev.tensor([[[[1.0, 10.0]]]]);
/// let x: Tensor<Rank4<1, 1, 1, 2>, f32, _> = dev.tensor([[[[1.0, 2.0]]]]);
/// let no_bias = None::<&Tensor<Rank1<1>, f32, Cpu>>;
/// let y = composite::try_conv_transpose2d(&L::GEOMETRY, x, &w, no_bias, Rank4::<1, 1, 1, 4>::default())
///     .unwrap();
/// assert_eq!(y.array(), [[[[10.0, 1.0, 20.0, 2.0]]]]);
/// ```
pub fn try_conv_transpose2d<E, D, X, K, Bs, Y, T>(
    geom: &ConvGeometry,
    x: Tensor<X, E, D, T>,
    weight: &Tensor<K, E, D>,
    bias: Option<&Tensor<Bs, E, D>>,
    y_shape: Y,
) -> Result<Tensor<Y, E, D, T>, D::Err>
where
    E: Dtype,
    D: Device<E>,
    X: Shape,
    K: Shape,
    Bs: Shape,
    Y: Shape,
    T: Tape<E, D> + Merge<T>,
{
    let win = &geom.win;
    let chw = geom.c * win.in_plane();
    // The input cell at dilated, padded position `o + k * d` along an axis.
    let source = |o: usize, k: usize, d: usize, pad: usize, s: usize, n: usize| {
        (o + k * d)
            .checked_sub(pad)
            .filter(|m| m % s == 0 && m / s < n)
            .map(|m| m / s)
    };
    let mut idx = Vec::with_capacity(win.out_plane() * geom.cols());
    for oy in 0..win.oh {
        for ox in 0..win.ow {
            for ch in 0..geom.c {
                for ki in 0..win.kh {
                    for kj in 0..win.kw {
                        let iy = source(oy, ki, win.dh, win.pt, win.sh, win.h);
                        let ix = source(ox, kj, win.dw, win.pl, win.sw, win.w);
                        idx.push(match (iy, ix) {
                            (Some(iy), Some(ix)) => ch * win.in_plane() + iy * win.w + ix,
                            _ => chw,
                        });
                    }
                }
            }
        }
    }
    let plan = Patches {
        idx,
        chw,
        cols: geom.cols(),
        o: geom.o,
        positions: win.out_plane(),
    };
    let weight = weight
        .retaped::<T>()
        .try_reshape_like(&(geom.o, geom.cols()))?;
    patches_matmul(&plan, x, weight, bias, y_shape)
}

/// For the block-diagonal weight of a grouped convolution, row-major
/// `(o, c * kh * kw)`: the index into the flattened `(o, c / groups, kh,
/// kw)` weight, or its length (a zero cell) off the output's group.
fn block_diagonal(geom: &ConvGeometry) -> Vec<usize> {
    let (cells, patch) = (geom.win.window(), geom.patch());
    let (cg, og) = (geom.c / geom.groups, geom.o / geom.groups);
    let zero = geom.o * patch;
    let mut idx = Vec::with_capacity(geom.o * geom.cols());
    for o in 0..geom.o {
        for ch in 0..geom.c {
            let inside = ch / cg == o / og;
            idx.extend((0..cells).map(|k| match inside {
                true => o * patch + (ch % cg) * cells + k,
                false => zero,
            }));
        }
    }
    idx
}

/// A convolution as im2col by `gather` and one `matmul`: `idx` holds, for
/// every output position, `cols` indices into one example's `chw` values
/// (index `chw` is a zero cell); the `(o, cols)` weight multiplies them.
pub(super) struct Patches {
    pub(super) idx: Vec<usize>,
    pub(super) chw: usize,
    pub(super) cols: usize,
    pub(super) o: usize,
    pub(super) positions: usize,
}

/// `y = patches(x) weight^T (+ bias)`, reshaped to `y_shape`: the body of
/// every composite convolution.
pub(super) fn patches_matmul<E, D, X, Bs, Y, T>(
    plan: &Patches,
    x: Tensor<X, E, D, T>,
    weight: Tensor<(usize, usize), E, D, T>,
    bias: Option<&Tensor<Bs, E, D>>,
    y_shape: Y,
) -> Result<Tensor<Y, E, D, T>, D::Err>
where
    E: Dtype,
    D: Device<E>,
    X: Shape,
    Bs: Shape,
    Y: Shape,
    T: Tape<E, D> + Merge<T>,
{
    let (chw, cols, positions) = (plan.chw, plan.cols, plan.positions);
    let batch = x.shape().num_elements() / chw;
    let dev = x.device().clone();

    let x = x.try_reshape_like(&(batch, chw))?;
    let pad: Tensor<(usize, usize), E, D> = dev.try_zeros_like(&(batch, 1))?;
    let x = (x, pad).try_concat_along(Axis::<1>)?;
    let idx = repeat_rows(&plan.idx, batch);
    let idx = dev.try_tensor_from_vec(idx, (batch, positions * cols))?;
    let patches: Tensor<(usize, usize), E, D, T> = x.try_gather(idx)?;
    let patches = patches.try_reshape_like(&(batch, positions, cols))?;

    let w = weight.try_permute::<_, Axes2<1, 0>>()?;
    let y = patches.try_matmul(w)?.try_permute::<_, Axes3<0, 2, 1>>()?;
    let y = match bias {
        Some(bias) => {
            let b = bias
                .retaped::<T>()
                .try_reshape_like(&(plan.o,))?
                .try_broadcast_like::<_, Axes2<0, 2>>(&(batch, plan.o, positions))?;
            y.try_add(b)?
        }
        None => y,
    };
    y.try_reshape_like(&y_shape)
}

/// Average or max pooling of every `h x w` plane of `x` (`channels` planes
/// per example), from dfdx ops; see
/// [`FlaxenDevice::try_pool2d`](super::FlaxenDevice::try_pool2d).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{composite, PoolKind, Window2D};
///
/// let dev: Cpu = Default::default();
/// let win = Window2D::checked([2, 2], [1, 1], [0, 0, 0, 0], [2, 3], [1, 2]);
/// let x: Tensor<Rank4<1, 1, 2, 3>, f32, _> = dev.tensor([[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]]]);
/// let y = composite::try_pool2d(PoolKind::Avg, 1, &win, x, Rank4::<1, 1, 1, 2>::default()).unwrap();
/// assert_eq!(y.array(), [[[[3.0, 4.0]]]]);
/// ```
pub fn try_pool2d<E, D, X, Y, T>(
    kind: PoolKind,
    channels: usize,
    win: &Window2D,
    x: Tensor<X, E, D, T>,
    y_shape: Y,
) -> Result<Tensor<Y, E, D, T>, D::Err>
where
    E: Dtype,
    D: Device<E>,
    X: Shape,
    Y: Shape,
    T: Tape<E, D> + Merge<T>,
{
    let plane = win.in_plane();
    let planes = x.shape().num_elements() / plane;
    debug_assert_eq!(planes % channels.max(1), 0);
    let (cells, positions) = (win.window(), win.out_plane());
    let dev = x.device().clone();

    let x = x.try_reshape_like(&(planes, plane))?;
    let pad_value = match kind {
        PoolKind::Avg => E::default(),
        PoolKind::Max => scalar(f64::NEG_INFINITY),
    };
    let pad: Tensor<(usize, usize), E, D> =
        dev.try_tensor_from_vec(vec![pad_value; planes], (planes, 1))?;
    let x = (x, pad).try_concat_along(Axis::<1>)?;
    let idx = repeat_rows(&window_indices(win, plane), planes);
    let idx = dev.try_tensor_from_vec(idx, (planes, positions * cells))?;
    let cols: Tensor<(usize, usize), E, D, T> = x.try_gather(idx)?;
    let cols = cols.try_reshape_like(&(planes, positions, cells))?;
    let y: Tensor<(usize, usize), E, D, T> = match kind {
        PoolKind::Avg => cols
            .try_sum::<_, Axis<2>>()?
            .try_mul(scalar::<E>(1.0 / cells as f64))?,
        PoolKind::Max => cols.try_max::<_, Axis<2>>()?,
    };
    y.try_reshape_like(&y_shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_indices_pad_cells() {
        // 3x3 input, 2x2 window, stride 2, one cell of padding before: four
        // windows, the first reads only (0, 0).
        let win = Window2D::checked([2, 2], [2, 2], [1, 0, 1, 0], [3, 3], [2, 2]);
        let idx = window_indices(&win, 9);
        assert_eq!(&idx[..4], &[9, 9, 9, 0]);
        assert_eq!(&idx[4..8], &[9, 9, 1, 2]);
        assert_eq!(&idx[12..16], &[4, 5, 7, 8]);
    }
}
