//! [`FlaxenDevice`]: the convolution and pooling kernels a device provides.

use dfdx::prelude::*;

use super::{cpu, ConvGeometry, Epilogue, PoolKind, Window2D};

/// A batch of `N`-feature rows, the output of `FlaxenDevice::try_dense`.
type Batch<B, const N: usize, E, D, T> = Tensor<(B, Const<N>), E, D, T>;

/// A dfdx device that can run flaxen's convolution and pooling, forward and
/// backward.
///
/// Implemented for [`Cpu`] (flaxen's own im2col + `gemm` and pooling kernels,
/// parallel with rayon, for `f32` and `f64`; `f16` and `AMP<f16>` take the
/// slower [`composite`](super::composite) path) and, with the `cuda` feature, for `Cuda`
/// (the [`composite`](super::composite) path: dfdx's `gather` + `matmul`, all on the GPU).
///
/// The layers call these methods; they are public so that other code can
/// run a convolution on tensors of any shape with the right number of
/// elements. Shapes are only checked by element count: `x` holds
/// `batch * c * h * w` values (batch = any), `weight` `o * c * kh * kw`,
/// `bias` `o`, and `y_shape` `batch * o * oh * ow`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{FlaxenDevice, PoolKind, Window2D};
///
/// let dev: Cpu = Default::default();
/// let x: Tensor<Rank4<1, 1, 4, 4>, f32, _> = dev.tensor([[[
///     [1.0, 2.0, 3.0, 4.0],
///     [5.0, 6.0, 7.0, 8.0],
///     [9.0, 10.0, 11.0, 12.0],
///     [13.0, 14.0, 15.0, 16.0],
/// ]]]);
/// let win = Window2D::checked([2, 2], [2, 2], [0, 0, 0, 0], [4, 4], [2, 2]);
/// let y = dev.try_pool2d(PoolKind::Max, 1, &win, x, Rank4::<1, 1, 2, 2>::default()).unwrap();
/// assert_eq!(y.array(), [[[[6.0, 8.0], [14.0, 16.0]]]]);
/// ```
pub trait FlaxenDevice<E: Dtype>: Device<E> {
    /// `y = conv2d(x, weight) + bias` with weight in OIHW layout; records
    /// the backward pass (gradients of `x`, `weight` and `bias`) on `x`'s
    /// tape.
    ///
    /// The default is the [`composite`](super::composite) path; the CPU
    /// runs flaxen's im2col + `gemm` kernel for `f32` and `f64`.
    fn try_conv2d<X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<E, Self>>(
        &self,
        geom: &ConvGeometry,
        x: Tensor<X, E, Self, T>,
        weight: &Tensor<K, E, Self>,
        bias: &Tensor<Bs, E, Self>,
        y_shape: Y,
    ) -> Result<Tensor<Y, E, Self, T>, Self::Err> {
        super::composite::try_conv2d(geom, x, weight, bias, y_shape)
    }

    /// [`try_conv2d`](Self::try_conv2d) for an input whose gradient nobody
    /// reads, such as the network's input batch: the backward pass records
    /// the gradients of `weight` and `bias` only, which saves a third of the
    /// layer's backward work. Like `jax.lax.stop_gradient(x)`, nothing
    /// upstream of `x` gets a gradient through this call, and
    /// `x` has no gradient (`grads.get(&x)` panics). Devices without a specialised
    /// kernel (the composite path) fall back to `try_conv2d`, which computes
    /// `x`'s gradient anyway.
    fn try_conv2d_no_input_grad<X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<E, Self>>(
        &self,
        geom: &ConvGeometry,
        x: Tensor<X, E, Self, T>,
        weight: &Tensor<K, E, Self>,
        bias: &Tensor<Bs, E, Self>,
        y_shape: Y,
    ) -> Result<Tensor<Y, E, Self, T>, Self::Err> {
        self.try_conv2d(geom, x, weight, bias, y_shape)
    }

    /// [`try_conv2d`](Self::try_conv2d) without bias, `y = conv2d(x, weight)`
    /// (Flax's `Conv(use_bias=False)`); records the gradients of `x` and
    /// `weight`. The default is the [`composite`](super::composite) path;
    /// the CPU runs flaxen's kernel, the same one as with a bias.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::{ConvGeometry, FlaxenDevice, Window2D};
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
    /// let y = dev.try_conv2d_unbiased(&geom, x, &w, Rank4::<1, 1, 1, 2>::default()).unwrap();
    /// assert_eq!(y.array(), [[[[6.0, 8.0]]]]);
    /// ```
    fn try_conv2d_unbiased<X: Shape, K: Shape, Y: Shape, T: Tape<E, Self>>(
        &self,
        geom: &ConvGeometry,
        x: Tensor<X, E, Self, T>,
        weight: &Tensor<K, E, Self>,
        y_shape: Y,
    ) -> Result<Tensor<Y, E, Self, T>, Self::Err> {
        super::composite::try_conv2d_unbiased(geom, x, weight, y_shape)
    }

    /// [`try_conv2d_unbiased`](Self::try_conv2d_unbiased) for an input whose
    /// gradient nobody reads, as
    /// [`try_conv2d_no_input_grad`](Self::try_conv2d_no_input_grad) is for
    /// [`try_conv2d`](Self::try_conv2d): only `weight`'s gradient is recorded
    /// where the device has a specialised kernel.
    fn try_conv2d_unbiased_no_input_grad<X: Shape, K: Shape, Y: Shape, T: Tape<E, Self>>(
        &self,
        geom: &ConvGeometry,
        x: Tensor<X, E, Self, T>,
        weight: &Tensor<K, E, Self>,
        y_shape: Y,
    ) -> Result<Tensor<Y, E, Self, T>, Self::Err> {
        self.try_conv2d_unbiased(geom, x, weight, y_shape)
    }

    /// `epi(conv2d(x, weight) + bias)`: the convolution followed by its
    /// [`Epilogue`] (relu, pooling) as one op, with or without a bias, and
    /// with `x`'s gradient only when `input_grad`. `y_shape` holds `batch *
    /// o * epi.out_plane(geom)` values. The results equal the ops run one
    /// after another ([`try_conv2d`](Self::try_conv2d),
    /// [`try_relu_fast`](Self::try_relu_fast), [`try_pool2d`](Self::try_pool2d)),
    /// which is the default; the CPU runs them in one kernel for `f32` and
    /// `f64`.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::{ConvGeometry, Epilogue, FlaxenDevice, PoolKind, Window2D};
    ///
    /// let dev: Cpu = Default::default();
    /// let geom = ConvGeometry {
    ///     c: 1,
    ///     o: 1,
    ///     win: Window2D::checked([1, 1], [1, 1], [0, 0, 0, 0], [2, 2], [2, 2]),
    ///     groups: 1,
    /// };
    /// let pool = Window2D::checked([2, 2], [2, 2], [0, 0, 0, 0], [2, 2], [1, 1]);
    /// let epi = Epilogue { relu: true, pool: Some((PoolKind::Avg, pool)) };
    /// let x: Tensor<Rank4<1, 1, 2, 2>, f32, _> = dev.tensor([[[[1.0, -2.0], [3.0, 4.0]]]]);
    /// let w: Tensor<Rank4<1, 1, 1, 1>, f32, _> = dev.tensor([[[[2.0]]]]);
    /// let b: Tensor<Rank1<1>, f32, _> = dev.tensor([1.0]);
    /// let y = dev
    ///     .try_conv2d_fused(&geom, &epi, x, &w, Some(&b), Rank4::<1, 1, 1, 1>::default(), true)
    ///     .unwrap();
    /// // relu([3, -3, 7, 9]) averaged: (3 + 0 + 7 + 9) / 4.
    /// assert_eq!(y.array(), [[[[4.75]]]]);
    /// ```
    #[allow(clippy::too_many_arguments)]
    fn try_conv2d_fused<X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<E, Self>>(
        &self,
        geom: &ConvGeometry,
        epi: &Epilogue,
        x: Tensor<X, E, Self, T>,
        weight: &Tensor<K, E, Self>,
        bias: Option<&Tensor<Bs, E, Self>>,
        y_shape: Y,
        input_grad: bool,
    ) -> Result<Tensor<Y, E, Self, T>, Self::Err> {
        let batch = x.shape().num_elements() / (geom.c * geom.win.in_plane()).max(1);
        let conv_shape = (batch * geom.o * geom.win.out_plane(),);
        let y = match (bias, input_grad) {
            (Some(b), true) => self.try_conv2d(geom, x, weight, b, conv_shape)?,
            (Some(b), false) => self.try_conv2d_no_input_grad(geom, x, weight, b, conv_shape)?,
            (None, true) => self.try_conv2d_unbiased(geom, x, weight, conv_shape)?,
            (None, false) => self.try_conv2d_unbiased_no_input_grad(geom, x, weight, conv_shape)?,
        };
        let y = if epi.relu { self.try_relu_fast(y)? } else { y };
        match &epi.pool {
            Some((kind, win)) => self.try_pool2d(*kind, geom.o, win, y, y_shape),
            None => y.try_reshape_like(&y_shape),
        }
    }

    /// The transposed convolution of Flax's `ConvTranspose`
    /// (`jax.lax.conv_transpose`, kernel not flipped): `x` dilated by the
    /// window's strides and padded by its padding, correlated with
    /// `weight`, `(o, c, kh, kw)`, plus `bias` when given; `geom.win` is the
    /// transposed window ([`ConvTranspose2D`](super::ConvTranspose2D)'s
    /// `GEOMETRY`). Records the gradients of `x`, `weight` and `bias`. The
    /// default is the [`composite`](super::composite) path; the CPU runs a
    /// gemm + scatter kernel.
    fn try_conv_transpose2d<X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<E, Self>>(
        &self,
        geom: &ConvGeometry,
        x: Tensor<X, E, Self, T>,
        weight: &Tensor<K, E, Self>,
        bias: Option<&Tensor<Bs, E, Self>>,
        y_shape: Y,
    ) -> Result<Tensor<Y, E, Self, T>, Self::Err> {
        super::composite::try_conv_transpose2d(geom, x, weight, bias, y_shape)
    }

    /// `y = x weight^T + bias` for a `(batch, I)` input and an `(O, I)`
    /// weight (the [`Dense`](super::Dense) layer); records the backward pass
    /// on `x`'s tape. The default is dfdx's `matmul` and `add`.
    fn try_dense<B: Dim, const I: usize, const O: usize, T: Tape<E, Self>>(
        &self,
        x: Tensor<(B, Const<I>), E, Self, T>,
        weight: &Tensor<Rank2<O, I>, E, Self>,
        bias: &Tensor<Rank1<O>, E, Self>,
    ) -> Result<Batch<B, O, E, Self, T>, Self::Err> {
        let y = x.try_matmul(weight.retaped::<T>().try_permute()?)?;
        let b = bias.retaped::<T>().try_broadcast_like(y.shape())?;
        y.try_add(b)
    }

    /// `max(x, 0)` with dfdx's gradient (1 where `x > 0`), the
    /// [`Relu`](super::Relu) layer. The default is dfdx's `relu`.
    fn try_relu_fast<S: Shape, T: Tape<E, Self>>(
        &self,
        x: Tensor<S, E, Self, T>,
    ) -> Result<Tensor<S, E, Self, T>, Self::Err> {
        x.try_relu()
    }

    /// Flax's `nn.gelu` in its default tanh form, `0.5 x (1 + tanh(sqrt(2
    /// / pi) (x + 0.044715 x³)))`, the [`Gelu`](super::Gelu) layer. The
    /// default is dfdx's `fast_gelu`; the CPU runs one parallel pass each
    /// way, keeping the forward's `tanh` for the backward.
    fn try_gelu_tanh<S: Shape, T: Tape<E, Self>>(
        &self,
        x: Tensor<S, E, Self, T>,
    ) -> Result<Tensor<S, E, Self, T>, Self::Err> {
        x.try_fast_gelu()
    }

    /// Normalises `x` as `layout` says: each row of `layout.row` values
    /// by its own mean (when `layout.center`) and variance, `(x - mean) /
    /// sqrt(var + epsilon)`, then `* scale + bias` with one scale entry per
    /// `layout.plane` values. Flax's `LayerNorm` and `RMSNorm` (whose
    /// `bias` is `None`) over the last axis, and its `GroupNorm`
    /// ([`NormRows`](super::NormRows)). Records the gradients of `x`,
    /// `scale` and `bias`.
    ///
    /// The default is dfdx's ops (its `normalize` when centred); the CPU
    /// runs one pass over each row forward and one backward for `f32` and
    /// `f64`.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::{FlaxenDevice, NormRows};
    ///
    /// let dev: Cpu = Default::default();
    /// let x: Tensor<Rank2<1, 2>, f64, _> = dev.tensor([[3.0, 4.0]]);
    /// let scale = dev.tensor([1.0, 2.0]);
    /// let rms = NormRows::features(2, false, 0.0);
    /// let y = dev.try_norm_rows(x, rms, &scale, None).unwrap();
    /// assert!((y.array()[0][1] - 8.0 / 12.5f64.sqrt()).abs() < 1e-12);
    /// ```
    fn try_norm_rows<S: Shape, const F: usize, T: Tape<E, Self>>(
        &self,
        x: Tensor<S, E, Self, T>,
        layout: super::NormRows,
        scale: &Tensor<Rank1<F>, E, Self>,
        bias: Option<&Tensor<Rank1<F>, E, Self>>,
    ) -> Result<Tensor<S, E, Self, T>, Self::Err> {
        super::norm::norm_rows_composite(x, layout, scale, bias)
    }

    /// Flax's `LSTMCell` over a whole sequence in one op, where the device
    /// has a kernel for it (the CPU, `f32` and `f64`); `None` elsewhere,
    /// and the cell runs step by step in dfdx's ops. `xp` holds the input
    /// projections of the gates `i, f, g, o` (`[S, B, H]` each, by time),
    /// `weights` and `biases` the recurrent kernels (`[out, in]`) and
    /// biases in that order. Runs the steps from the last with `reverse`;
    /// returns the hidden states in the order the steps ran, or by time
    /// with `keep_order`, and records the gradients of `xp`, `weights`
    /// and `biases` on `tape`.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::FlaxenDevice;
    ///
    /// let dev: Cpu = Default::default();
    /// let xp: [Tensor<Rank3<2, 1, 1>, f64, _>; 4] = [
    ///     dev.tensor([[[0.0]], [[0.0]]]),
    ///     dev.tensor([[[0.0]], [[0.0]]]),
    ///     dev.tensor([[[1.0]], [[1.0]]]),
    ///     dev.tensor([[[0.0]], [[0.0]]]),
    /// ];
    /// let w: Tensor<Rank2<1, 1>, f64, _> = dev.zeros();
    /// let b: Tensor<Rank1<1>, f64, _> = dev.zeros();
    /// let mut tape = NoneTape;
    /// let h = dev
    ///     .try_lstm_scan(&xp, &mut tape, [&w; 4], [&b; 4], false, false)
    ///     .expect("the CPU has the kernel")
    ///     .unwrap();
    /// // c = 0.5 tanh(1), h = 0.5 tanh(c) at the first step.
    /// let c = 0.5 * 1f64.tanh();
    /// assert!((h.array()[0][0][0] - 0.5 * c.tanh()).abs() < 1e-12);
    /// ```
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn try_lstm_scan<S: Dim, B: Dim, const H: usize, T: Tape<E, Self>>(
        &self,
        xp: &[Tensor<(S, B, Const<H>), E, Self>; 4],
        tape: &mut T,
        weights: [&Tensor<Rank2<H, H>, E, Self>; 4],
        biases: [&Tensor<Rank1<H>, E, Self>; 4],
        reverse: bool,
        keep_order: bool,
    ) -> Option<Result<Tensor<(S, B, Const<H>), E, Self>, Self::Err>> {
        let _ = (xp, tape, weights, biases, reverse, keep_order);
        None
    }

    /// Flax's multi-head dot-product attention on projected rows: `q`
    /// `[batch, Q, F]`, `k` and `v` `[batch, K, F]`, each the `heads`
    /// heads' features side by side (`F / heads` each, as Flax's
    /// `DenseGeneral` lays them out); per head `softmax(q kᵀ / sqrt(F /
    /// heads)) v`, a logit whose `mask` entry is false replaced by the
    /// dtype's minimum (a `[batch, Q, K]` mask shared by the heads), the
    /// heads joined back into `[batch, Q, F]`. No dropout. Records the
    /// gradients of `q`, `k` and `v` on their merged tapes.
    ///
    /// The default is dfdx's ops (reshape, permute, matmul, choose,
    /// softmax); the CPU runs one pass per example each way for `f32` and
    /// `f64`, the mask applied inside the softmax.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::FlaxenDevice;
    ///
    /// let dev: Cpu = Default::default();
    /// let q: Tensor<Rank3<1, 2, 4>, f64, _> = dev.sample_normal();
    /// let kv: Tensor<Rank3<1, 3, 4>, f64, _> = dev.sample_normal();
    /// // Every query may see only the first key: it gets that key's values.
    /// let mask = dev.tensor([[[true, false, false], [true, false, false]]]);
    /// let y = dev.try_attention(2, q, kv.clone(), kv.clone(), Some(mask)).unwrap();
    /// assert_eq!(y.array()[0][1], kv.array()[0][0]);
    /// ```
    #[allow(clippy::type_complexity)]
    fn try_attention<B: Dim, Q: Dim, K: Dim, const F: usize, T: Tape<E, Self>>(
        &self,
        heads: usize,
        q: Tensor<(B, Q, Const<F>), E, Self, T>,
        k: Tensor<(B, K, Const<F>), E, Self, T>,
        v: Tensor<(B, K, Const<F>), E, Self, T>,
        mask: Option<Tensor<(B, Q, K), bool, Self>>,
    ) -> Result<Tensor<(B, Q, Const<F>), E, Self, T>, Self::Err>
    where
        E: num_traits::Float,
    {
        super::attention::heads_composite(heads, q, k, v, mask, None)
    }

    /// Pools every one of the `batch * channels` planes of `x` with the
    /// window `win`; records the backward pass on `x`'s tape.
    ///
    /// The default is the [`composite`](super::composite) path; the CPU runs
    /// direct pooling loops for `f32` and `f64`.
    fn try_pool2d<X: Shape, Y: Shape, T: Tape<E, Self>>(
        &self,
        kind: PoolKind,
        channels: usize,
        win: &Window2D,
        x: Tensor<X, E, Self, T>,
        y_shape: Y,
    ) -> Result<Tensor<Y, E, Self, T>, Self::Err> {
        super::composite::try_pool2d(kind, channels, win, x, y_shape)
    }

    /// `jax.image.resize` of every `h x w` plane of `x` (`x` holds
    /// `planes * h * w` values, `y_shape` `planes * oh * ow`); records the
    /// backward pass on `x`'s tape. The default is the
    /// [`composite`](super::composite) path (two `matmul`s); the CPU runs
    /// separable 1-D passes (`nearest` as copies).
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::{FlaxenDevice, ResizeGeometry, ResizeMethod};
    ///
    /// let dev: Cpu = Default::default();
    /// let x: Tensor<Rank4<1, 1, 1, 2>, f32, _> = dev.tensor([[[[1.0, 2.0]]]]);
    /// let g = ResizeGeometry::checked(ResizeMethod::Nearest, true, [1, 2], [2, 4]);
    /// let y = dev.try_resize2d(&g, x, Rank4::<1, 1, 2, 4>::default()).unwrap();
    /// assert_eq!(y.array(), [[[[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 2.0, 2.0]]]]);
    /// ```
    fn try_resize2d<X: Shape, Y: Shape, T: Tape<E, Self>>(
        &self,
        geom: &super::ResizeGeometry,
        x: Tensor<X, E, Self, T>,
        y_shape: Y,
    ) -> Result<Tensor<Y, E, Self, T>, Self::Err> {
        super::resize::try_resize2d(geom, x, y_shape)
    }
}

macro_rules! impl_with_cpu_kernels {
    ($($e:ty),*) => {$(
        impl FlaxenDevice<$e> for Cpu {
            fn try_conv2d<X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<$e, Self>>(
                &self,
                geom: &ConvGeometry,
                x: Tensor<X, $e, Self, T>,
                weight: &Tensor<K, $e, Self>,
                bias: &Tensor<Bs, $e, Self>,
                y_shape: Y,
            ) -> Result<Tensor<Y, $e, Self, T>, Self::Err> {
                cpu::conv2d(self, geom, &Epilogue::NONE, x, weight, Some(bias), y_shape, true)
            }

            fn try_conv2d_no_input_grad<X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<$e, Self>>(
                &self,
                geom: &ConvGeometry,
                x: Tensor<X, $e, Self, T>,
                weight: &Tensor<K, $e, Self>,
                bias: &Tensor<Bs, $e, Self>,
                y_shape: Y,
            ) -> Result<Tensor<Y, $e, Self, T>, Self::Err> {
                cpu::conv2d(self, geom, &Epilogue::NONE, x, weight, Some(bias), y_shape, false)
            }

            fn try_conv2d_unbiased<X: Shape, K: Shape, Y: Shape, T: Tape<$e, Self>>(
                &self,
                geom: &ConvGeometry,
                x: Tensor<X, $e, Self, T>,
                weight: &Tensor<K, $e, Self>,
                y_shape: Y,
            ) -> Result<Tensor<Y, $e, Self, T>, Self::Err> {
                // The absent bias's shape only names a type.
                let no_bias = None::<&Tensor<Rank1<0>, $e, Self>>;
                cpu::conv2d(self, geom, &Epilogue::NONE, x, weight, no_bias, y_shape, true)
            }

            fn try_conv2d_unbiased_no_input_grad<
                X: Shape,
                K: Shape,
                Y: Shape,
                T: Tape<$e, Self>,
            >(
                &self,
                geom: &ConvGeometry,
                x: Tensor<X, $e, Self, T>,
                weight: &Tensor<K, $e, Self>,
                y_shape: Y,
            ) -> Result<Tensor<Y, $e, Self, T>, Self::Err> {
                let no_bias = None::<&Tensor<Rank1<0>, $e, Self>>;
                cpu::conv2d(self, geom, &Epilogue::NONE, x, weight, no_bias, y_shape, false)
            }

            fn try_conv2d_fused<X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<$e, Self>>(
                &self,
                geom: &ConvGeometry,
                epi: &Epilogue,
                x: Tensor<X, $e, Self, T>,
                weight: &Tensor<K, $e, Self>,
                bias: Option<&Tensor<Bs, $e, Self>>,
                y_shape: Y,
                input_grad: bool,
            ) -> Result<Tensor<Y, $e, Self, T>, Self::Err> {
                cpu::conv2d(self, geom, epi, x, weight, bias, y_shape, input_grad)
            }

            fn try_conv_transpose2d<X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<$e, Self>>(
                &self,
                geom: &ConvGeometry,
                x: Tensor<X, $e, Self, T>,
                weight: &Tensor<K, $e, Self>,
                bias: Option<&Tensor<Bs, $e, Self>>,
                y_shape: Y,
            ) -> Result<Tensor<Y, $e, Self, T>, Self::Err> {
                cpu::conv_transpose2d(self, geom, x, weight, bias, y_shape)
            }

            fn try_dense<B: Dim, const I: usize, const O: usize, T: Tape<$e, Self>>(
                &self,
                x: Tensor<(B, Const<I>), $e, Self, T>,
                weight: &Tensor<Rank2<O, I>, $e, Self>,
                bias: &Tensor<Rank1<O>, $e, Self>,
            ) -> Result<Batch<B, O, $e, Self, T>, Self::Err> {
                let batch = x.shape().0;
                cpu::dense(self, x, weight, bias, (batch, Const))
            }

            fn try_relu_fast<S: Shape, T: Tape<$e, Self>>(
                &self,
                x: Tensor<S, $e, Self, T>,
            ) -> Result<Tensor<S, $e, Self, T>, Self::Err> {
                cpu::relu(self, x)
            }

            fn try_gelu_tanh<S: Shape, T: Tape<$e, Self>>(
                &self,
                x: Tensor<S, $e, Self, T>,
            ) -> Result<Tensor<S, $e, Self, T>, Self::Err> {
                cpu::gelu_tanh(self, x)
            }

            fn try_norm_rows<S: Shape, const F: usize, T: Tape<$e, Self>>(
                &self,
                x: Tensor<S, $e, Self, T>,
                layout: super::NormRows,
                scale: &Tensor<Rank1<F>, $e, Self>,
                bias: Option<&Tensor<Rank1<F>, $e, Self>>,
            ) -> Result<Tensor<S, $e, Self, T>, Self::Err> {
                cpu::norm::norm_rows(self, x, layout, scale, bias)
            }

            fn try_lstm_scan<S: Dim, B: Dim, const H: usize, T: Tape<$e, Self>>(
                &self,
                xp: &[Tensor<(S, B, Const<H>), $e, Self>; 4],
                tape: &mut T,
                weights: [&Tensor<Rank2<H, H>, $e, Self>; 4],
                biases: [&Tensor<Rank1<H>, $e, Self>; 4],
                reverse: bool,
                keep_order: bool,
            ) -> Option<Result<Tensor<(S, B, Const<H>), $e, Self>, Self::Err>> {
                Some(cpu::lstm::lstm_scan(self, xp, tape, weights, biases, reverse, keep_order))
            }

            fn try_attention<B: Dim, Q: Dim, K: Dim, const F: usize, T: Tape<$e, Self>>(
                &self,
                heads: usize,
                q: Tensor<(B, Q, Const<F>), $e, Self, T>,
                k: Tensor<(B, K, Const<F>), $e, Self, T>,
                v: Tensor<(B, K, Const<F>), $e, Self, T>,
                mask: Option<Tensor<(B, Q, K), bool, Self>>,
            ) -> Result<Tensor<(B, Q, Const<F>), $e, Self, T>, Self::Err> {
                cpu::attention::attention(self, heads, q, k, v, mask)
            }

            fn try_pool2d<X: Shape, Y: Shape, T: Tape<$e, Self>>(
                &self,
                kind: PoolKind,
                channels: usize,
                win: &Window2D,
                x: Tensor<X, $e, Self, T>,
                y_shape: Y,
            ) -> Result<Tensor<Y, $e, Self, T>, Self::Err> {
                cpu::pool2d(self, kind, channels, win, x, y_shape)
            }

            fn try_resize2d<X: Shape, Y: Shape, T: Tape<$e, Self>>(
                &self,
                geom: &super::ResizeGeometry,
                x: Tensor<X, $e, Self, T>,
                y_shape: Y,
            ) -> Result<Tensor<Y, $e, Self, T>, Self::Err> {
                cpu::resize::resize2d(self, geom, x, y_shape)
            }
        }
    )*};
}

impl_with_cpu_kernels!(f32, f64);

// Devices and dtypes without flaxen kernels run the composite path: every
// method's default.
#[allow(unused_macros)]
macro_rules! impl_composite {
    ($dev:ty: $($e:ty),*) => {$(
        impl FlaxenDevice<$e> for $dev {}
    )*};
}

#[cfg(feature = "f16")]
impl_composite!(Cpu: dfdx::dtypes::f16, dfdx::dtypes::AMP<dfdx::dtypes::f16>);

#[cfg(feature = "cuda")]
impl_composite!(Cuda: f32, f64);

#[cfg(all(feature = "cuda", feature = "f16"))]
impl_composite!(Cuda: dfdx::dtypes::f16, dfdx::dtypes::AMP<dfdx::dtypes::f16>);
