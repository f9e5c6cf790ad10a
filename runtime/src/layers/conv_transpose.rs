//! [`ConvTranspose2D`]: Flax's `nn.ConvTranspose` (`jax.lax.conv_transpose`
//! with `transpose_kernel=False`) as a dfdx module, and its size rules.

use dfdx::nn::{BuildModule, BuildOnDevice, Module, NonMutableModule};
use dfdx::prelude::*;

use super::conv::conv_layers;
use super::{dilated_kernel, ConvGeometry, FlaxenDevice, Window2D};

/// `jax.lax.conv_transpose`'s padding `(low, high)` of the stride-dilated
/// input for `padding='SAME'`, for a (dilated) kernel extent `kernel` and
/// `stride`: `kernel + stride - 2` in all, the low side `kernel - 1` when
/// `stride > kernel - 1`, else half rounded up. The output then has `size *
/// stride` cells ([`conv_transpose_out_size`]).
///
/// ```
/// use flaxen_runtime::layers::{conv_transpose_out_size, conv_transpose_same_padding};
/// assert_eq!(conv_transpose_same_padding(3, 2), (2, 1));
/// assert_eq!(conv_transpose_same_padding(2, 2), (1, 1));
/// let (lo, hi) = conv_transpose_same_padding(4, 3);
/// assert_eq!(conv_transpose_out_size(5, 4, 3, lo, hi), 15);
/// ```
pub const fn conv_transpose_same_padding(kernel: usize, stride: usize) -> (usize, usize) {
    let total = (kernel + stride).saturating_sub(2);
    let lo = if stride + 1 > kernel {
        kernel.saturating_sub(1)
    } else {
        total.div_ceil(2)
    };
    (lo, total - lo)
}

/// `jax.lax.conv_transpose`'s padding for `padding='VALID'`: `kernel - 1`
/// low and `stride - 1 + max(kernel - stride, 0)` high, so the output has
/// `size * stride + max(kernel - stride, 0)` cells.
///
/// ```
/// use flaxen_runtime::layers::{conv_transpose_out_size, conv_transpose_valid_padding};
/// assert_eq!(conv_transpose_valid_padding(3, 2), (2, 2));
/// let (lo, hi) = conv_transpose_valid_padding(3, 2);
/// assert_eq!(conv_transpose_out_size(4, 3, 2, lo, hi), 9);
/// ```
pub const fn conv_transpose_valid_padding(kernel: usize, stride: usize) -> (usize, usize) {
    let extra = kernel.saturating_sub(stride);
    (kernel.saturating_sub(1), stride.saturating_sub(1) + extra)
}

/// The output size of a transposed convolution: the input dilated by
/// `stride` (`(size - 1) * stride + 1` cells), padded by `pad_lo` and
/// `pad_hi`, then a stride-1 window of `kernel` (the dilated extent):
/// `(size - 1) * stride + 1 + pad_lo + pad_hi - kernel + 1`, or 0 when the
/// kernel does not fit (or a size or the stride is 0). Explicit padding in
/// Flax's `ConvTranspose` is this padding, as `jax.lax.conv_transpose`
/// takes it.
///
/// ```
/// use flaxen_runtime::layers::conv_transpose_out_size;
/// assert_eq!(conv_transpose_out_size(4, 3, 2, 1, 2), 8);
/// assert_eq!(conv_transpose_out_size(1, 3, 1, 0, 0), 0);
/// ```
pub const fn conv_transpose_out_size(
    size: usize,
    kernel: usize,
    stride: usize,
    pad_lo: usize,
    pad_hi: usize,
) -> usize {
    if size == 0 || stride == 0 {
        return 0;
    }
    let padded = (size - 1) * stride + 1 + pad_lo + pad_hi;
    if kernel > padded {
        0
    } else {
        padded - kernel + 1
    }
}

/// The window of a transposed convolution, checked: the fields are those
/// of [`Window2D`] with strides meaning input dilation and padding that of
/// the dilated input, `oh`/`ow` as [`conv_transpose_out_size`].
const fn transposed_window(
    kernel: [usize; 2],
    dilation: [usize; 2],
    strides: [usize; 2],
    padding: [usize; 4],
    input: [usize; 2],
    output: [usize; 2],
) -> Window2D {
    let win = Window2D::unchecked(kernel, dilation, strides, padding, input, output);
    win.check_sizes();
    let (eh, ew) = (
        dilated_kernel(win.kh, win.dh),
        dilated_kernel(win.kw, win.dw),
    );
    assert!(
        win.oh >= 1 && win.oh == conv_transpose_out_size(win.h, eh, win.sh, win.pt, win.pb),
        "output height must be OH == (H - 1) * SH + 1 + PT + PB - ((KH - 1) * DH + 1) + 1, at least 1"
    );
    assert!(
        win.ow >= 1 && win.ow == conv_transpose_out_size(win.w, ew, win.sw, win.pl, win.pr),
        "output width must be OW == (W - 1) * SW + 1 + PL + PR - ((KW - 1) * DW + 1) + 1, at least 1"
    );
    win
}

conv_layers! {
    generics [C, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW],
    weight [O, C, KH, KW],
    bias [O],
    // Flax's kernel is `(KH, KW, C, O)`: `C` is its input axis.
    fan_in C * KH * KW;

    /// Builds a [`ConvTranspose2D`](super::ConvTranspose2D) with
    /// `dev.build_module::<ConvTranspose2D<..>, E>()`.
    ///
    /// The const generics: `C` input channels, `O` features, a `KH x KW`
    /// kernel dilated by `DH`, `DW`, strides `SH`, `SW` (the input's
    /// dilation), the padding `PT`/`PB`/`PL`/`PR` of the dilated input
    /// ([`conv_transpose_same_padding`](super::conv_transpose_same_padding)
    /// for Flax's `'SAME'`), `H x W` input and `OH x OW` output
    /// ([`conv_transpose_out_size`](super::conv_transpose_out_size)).
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::builder::ConvTranspose2D;
    ///
    /// // Flax `ConvTranspose(features=4, kernel_size=(3, 3), strides=(2, 2))`
    /// // (SAME) on 8x5x5 inputs: 10x10 outputs, padding (2, 1) per axis.
    /// type Layer = ConvTranspose2D<8, 4, 3, 3, 1, 1, 2, 2, 2, 1, 2, 1, 5, 5, 10, 10>;
    /// let dev: Cpu = Default::default();
    /// let up = dev.build_module::<Layer, f32>();
    /// let y: Tensor<Rank4<2, 4, 10, 10>, f32, _> = up.forward(dev.zeros::<Rank4<2, 8, 5, 5>>());
    /// ```
    builder ConvTranspose2D;

    /// Builds an [`UnbiasedConvTranspose2D`](super::UnbiasedConvTranspose2D)
    /// (`use_bias=False`); the const generics and their check are
    /// [`ConvTranspose2D`]'s.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::builder::UnbiasedConvTranspose2D;
    ///
    /// // `ConvTranspose(2, (2, 2), strides=(2, 2), padding='VALID', use_bias=False)`.
    /// type Layer = UnbiasedConvTranspose2D<3, 2, 2, 2, 1, 1, 2, 2, 1, 1, 1, 1, 4, 4, 8, 8>;
    /// let dev: Cpu = Default::default();
    /// let up = dev.build_module::<Layer, f32>();
    /// assert_eq!(up.num_trainable_params(), 2 * 3 * 2 * 2);
    /// ```
    builder UnbiasedConvTranspose2D;

    /// Flax's `nn.ConvTranspose` with bias, NCHW: input `(B, C, H, W)`, output
    /// `(B, O, OH, OW)`, for any batch dim `B`, with or without a tape.
    ///
    /// `y[o] = bias[o] + sum_c correlate(dilate(x[c], strides), weight[o, c])`
    /// over the dilated input padded as the geometry says: what
    /// `jax.lax.conv_transpose(x, kernel, strides, padding, rhs_dilation)`
    /// computes (the kernel is not flipped, Flax's default
    /// `transpose_kernel=False`). Tensors: `weight`, `(O, C, KH, KW)` (Flax's
    /// `kernel`, `(KH, KW, C, O)`, transposed like [`Conv2D`](super::Conv2D)'s),
    /// and `bias`, `(O,)`. Initialisation is Flax's: `lecun_normal` with
    /// `fan_in = C * KH * KW` (Flax's kernel shape with `C` as its input axis)
    /// and zeros.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::builder;
    ///
    /// // 1 -> 1 channel, a 1x2 kernel, stride 2 along the width, VALID.
    /// type L = builder::ConvTranspose2D<1, 1, 1, 2, 1, 1, 1, 2, 0, 0, 1, 1, 1, 2, 1, 4>;
    /// let dev: Cpu = Default::default();
    /// let mut up = dev.build_module::<L, f32>();
    /// up.weight = dev.tensor([[[[1.0, 10.0]]]]);
    /// // Each input cell paints its 1x2 patch of the output.
    /// let y = up.forward(dev.tensor([[[[1.0, 2.0]]]]));
    /// assert_eq!(y.array(), [[[[10.0, 1.0, 20.0, 2.0]]]]);
    /// ```
    layer;

    /// [`ConvTranspose2D`] without bias (Flax's `use_bias=False`): only
    /// `weight`, `(O, C, KH, KW)`.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::builder;
    ///
    /// type L = builder::UnbiasedConvTranspose2D<2, 3, 3, 3, 1, 1, 2, 2, 2, 1, 2, 1, 4, 4, 8, 8>;
    /// let dev: Cpu = Default::default();
    /// let up = dev.build_module::<L, f32>();
    /// let x: Tensor<Rank4<1, 2, 4, 4>, f32, _> = dev.sample_normal();
    /// let grads = up.forward(x.leaky_trace()).sum().backward();
    /// assert_eq!(grads.get(&x).shape(), x.shape());
    /// ```
    unbiased layer;

    /// The checked geometry (its window is the transposed one: strides
    /// dilate the input, `OH`/`OW` as
    /// [`conv_transpose_out_size`](super::conv_transpose_out_size)). Naming
    /// it fails to compile, saying which rule is broken, on inconsistent
    /// dimensions; building and calling the layer name it.
    GEOMETRY = {
        assert!(C >= 1, "ConvTranspose2D needs at least one input channel (C >= 1)");
        assert!(O >= 1, "ConvTranspose2D needs at least one feature (O >= 1)");
        ConvGeometry {
            c: C,
            o: O,
            win: transposed_window(
                [KH, KW],
                [DH, DW],
                [SH, SW],
                [PT, PB, PL, PR],
                [H, W],
                [OH, OW],
            ),
            groups: 1,
        }
    }
}

/// The `Module` impl of one layer, with a `bias` field or not: both run
/// [`FlaxenDevice::try_conv_transpose2d`], the bias being optional there.
macro_rules! transpose_module {
    ($name:ident { $($bias:ident)? }) => {
        impl<
            const C: usize, const O: usize, const KH: usize, const KW: usize,
            const DH: usize, const DW: usize, const SH: usize, const SW: usize,
            const PT: usize, const PB: usize, const PL: usize, const PR: usize,
            const H: usize, const W: usize, const OH: usize, const OW: usize,
            B: Dim, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>,
        > Module<Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>>
            for $name<C, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D>
        {
            type Output = Tensor<(B, Const<O>, Const<OH>, Const<OW>), E, D, T>;
            type Error = D::Err;

            fn try_forward(
                &self,
                x: Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>,
            ) -> Result<Self::Output, D::Err> {
                let geom = const { Self::GEOMETRY };
                let y_shape = (x.shape().0, Const, Const, Const);
                let dev = x.device().clone();
                let bias = None::<&Tensor<Rank1<O>, E, D>>$(.or(Some(&self.$bias)))?;
                dev.try_conv_transpose2d(&geom, x, &self.weight, bias, y_shape)
            }
        }
    };
}

transpose_module!(ConvTranspose2D { bias });
transpose_module!(UnbiasedConvTranspose2D {});

#[cfg(test)]
mod tests {
    use super::*;
    use dfdx::nn::DeviceBuildExt;

    #[test]
    fn flax_sizes() {
        for size in 1..9 {
            for k in 1..6 {
                for s in 1..4 {
                    let (lo, hi) = conv_transpose_same_padding(k, s);
                    assert_eq!(conv_transpose_out_size(size, k, s, lo, hi), size * s);
                    let (lo, hi) = conv_transpose_valid_padding(k, s);
                    let want = size * s + k.saturating_sub(s);
                    assert_eq!(conv_transpose_out_size(size, k, s, lo, hi), want);
                }
            }
        }
    }

    fn close(what: &str, a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{what}: length");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-11 * y.abs().max(1.0),
                "{what}[{i}]: {x} vs {y}"
            );
        }
    }

    /// The CPU kernel against the composite path, values and gradients.
    #[test]
    fn cpu_kernel_matches_the_composite_path() {
        macro_rules! case {
            ($($g:literal),*) => {{
                type L = builder::ConvTranspose2D<$($g),*>;
                let dev = Cpu::seed_from_u64(9);
                let mut up = dev.build_module::<L, f64>();
                up.bias = dev.sample_normal();
                let geom = L::GEOMETRY;
                let x = dev.sample_normal_like(&(3usize, Const, Const, Const));
                let y = up.forward(x.leaky_trace());
                let (yv, y_shape) = (y.as_vec(), *y.shape());
                let r = dev.sample_normal_like(&y_shape);
                let g0 = (y * r.clone()).sum().backward();
                let y1 = crate::layers::composite::try_conv_transpose2d(
                    &geom, x.leaky_trace(), &up.weight, Some(&up.bias), y_shape,
                ).unwrap();
                close("y", &yv, &y1.as_vec());
                let g1 = (y1 * r).sum().backward();
                close("dx", &g0.get(&x).as_vec(), &g1.get(&x).as_vec());
                close("dw", &g0.get(&up.weight).as_vec(), &g1.get(&up.weight).as_vec());
                close("db", &g0.get(&up.bias).as_vec(), &g1.get(&up.bias).as_vec());
            }};
        }
        // C, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW
        case!(2, 3, 3, 3, 1, 1, 2, 2, 2, 1, 2, 1, 4, 5, 8, 10);
        case!(2, 3, 3, 2, 1, 1, 3, 1, 2, 2, 1, 0, 3, 4, 9, 4);
        case!(1, 2, 2, 3, 2, 1, 2, 3, 0, 0, 5, 4, 3, 2, 3, 11);
        case!(3, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 4, 4, 4, 4);
    }

    #[test]
    fn lecun_normal_uses_the_input_channels() {
        let dev = Cpu::seed_from_u64(4);
        type L = builder::ConvTranspose2D<8, 64, 3, 3, 1, 1, 2, 2, 2, 1, 2, 1, 4, 4, 8, 8>;
        let up = dev.build_module::<L, f64>();
        let w = up.weight.as_vec();
        let var = w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64;
        assert!((var * 72.0 - 1.0).abs() < 0.1, "var*fan_in {}", var * 72.0);
        assert!(up.bias.as_vec().iter().all(|&b| b == 0.0));
    }
}
