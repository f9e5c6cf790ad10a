//! [`ConvGeneral2D`]: Flax's `nn.Conv`, with `feature_group_count` (grouped
//! and depthwise convolutions) and `kernel_dilation`, as a dfdx module: the
//! one implementation of Flax's convolution, of which
//! [`Conv2D`](super::Conv2D) (one group, no dilation) is a type alias.
//!
//! The geometry ([`ConvGeometry`]) carries the groups and the dilation; the
//! [`FlaxenDevice`] kernels read them (the CPU's im2col reads dilated cells
//! and multiplies each group's block on its own, and takes its plain path
//! when there is one group and no dilation). `#[compact]` emits this type
//! only when `feature_group_count` or `kernel_dilation` is not 1, so plain
//! convolutions keep their shorter type.

use dfdx::nn::{BuildModule, BuildOnDevice, Module, NonMutableModule};
use dfdx::prelude::*;

use super::conv::conv_layers;
use super::{ConvGeometry, FlaxenDevice, NoInputGrad, Window2D};

conv_layers! {
    generics [C, I, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW],
    weight [O, I, KH, KW],
    bias [O],
    // Flax's fan-in is the kernel's size less its output axis: one group's
    // channels.
    fan_in I * KH * KW;

    /// Builds a [`ConvGeneral2D`](super::ConvGeneral2D) with
    /// `dev.build_module::<ConvGeneral2D<..>, E>()`.
    ///
    /// The const generics are the whole geometry: `C` input channels, `I =
    /// C / feature_group_count` input channels per group (the weight's
    /// second axis; `I = 1` is depthwise, `I = C` a plain convolution), `O`
    /// output channels (features, a multiple of the group count), a `KH x
    /// KW` kernel dilated by `DH`, `DW`, strides `SH`, `SW`, padding
    /// `PT`/`PB`/`PL`/`PR`, `H x W` input and `OH x OW` output.
    /// [`GEOMETRY`](Self::GEOMETRY) checks them.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::builder::ConvGeneral2D;
    ///
    /// // Flax `Conv(features=8, kernel_size=(3, 3), kernel_dilation=2,
    /// // feature_group_count=4)` on 4x9x9 inputs with `padding='SAME'`: the
    /// // dilated kernel spans 5x5, so XLA pads 2 on every side.
    /// type Layer = ConvGeneral2D<4, 1, 8, 3, 3, 2, 2, 1, 1, 2, 2, 2, 2, 9, 9, 9, 9>;
    /// let dev: Cpu = Default::default();
    /// let conv = dev.build_module::<Layer, f32>();
    /// assert_eq!(conv.num_trainable_params(), 8 * 1 * 3 * 3 + 8);
    /// let y: Tensor<Rank4<2, 8, 9, 9>, f32, _> = conv.forward(dev.zeros::<Rank4<2, 4, 9, 9>>());
    /// ```
    builder ConvGeneral2D;

    /// Builds an [`UnbiasedConvGeneral2D`](super::UnbiasedConvGeneral2D)
    /// (`use_bias=False`); the const generics and their check are
    /// [`ConvGeneral2D`]'s.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::builder::UnbiasedConvGeneral2D;
    ///
    /// // Depthwise: Flax `Conv(features=3, kernel_size=(3, 3), padding='VALID',
    /// // feature_group_count=3, use_bias=False)` on 3x6x6 inputs.
    /// type Layer = UnbiasedConvGeneral2D<3, 1, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 6, 6, 4, 4>;
    /// let dev: Cpu = Default::default();
    /// let conv = dev.build_module::<Layer, f32>();
    /// assert_eq!(conv.num_trainable_params(), 3 * 9);
    /// let y: Tensor<Rank4<1, 3, 4, 4>, f32, _> = conv.forward(dev.zeros::<Rank4<1, 3, 6, 6>>());
    /// ```
    builder UnbiasedConvGeneral2D;

    /// Flax's `nn.Conv` with `feature_group_count = C / I` and `kernel_dilation
    /// = (DH, DW)`, with bias, in NCHW layout: input `(B, C, H, W)`, output `(B,
    /// O, OH, OW)` for any batch dim `B`, with or without a tape, and through
    /// [`NoInputGrad`].
    ///
    /// Tensors: `weight`, `(O, I, KH, KW)` (Flax's HWIO kernel of shape `(KH,
    /// KW, C / groups, O)` transposed), and `bias`, `(O,)`. Output channel `j`
    /// belongs to group `j / (O / groups)` and reads that group's `I` input
    /// channels. Initialisation is Flax's: `lecun_normal` with fan-in `I * KH *
    /// KW` (the per-group fan-in, as Flax computes it from the kernel's shape)
    /// and zeros for the bias.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::builder;
    ///
    /// // Two groups of one channel, a 2x1 kernel dilated by 2 rows, VALID.
    /// type L = builder::ConvGeneral2D<2, 1, 2, 2, 1, 2, 1, 1, 1, 0, 0, 0, 0, 3, 1, 1, 1>;
    /// let dev: Cpu = Default::default();
    /// let mut conv = dev.build_module::<L, f32>();
    /// conv.weight = dev.tensor([[[[1.0], [1.0]]], [[[1.0], [-1.0]]]]);
    /// let x = dev.tensor([[[[1.0], [2.0], [3.0]], [[10.0], [20.0], [30.0]]]]);
    /// // Rows 0 and 2 of each channel: 1 + 3, and 10 - 30.
    /// assert_eq!(conv.forward(x).array(), [[[[4.0]], [[-20.0]]]]);
    /// ```
    layer;

    /// [`ConvGeneral2D`] without bias (Flax's `use_bias=False`): only `weight`,
    /// `(O, I, KH, KW)`, initialised with `lecun_normal` like
    /// [`ConvGeneral2D`]'s.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::{builder, NoInputGrad};
    ///
    /// type L = builder::UnbiasedConvGeneral2D<4, 2, 6, 3, 3, 1, 2, 1, 1, 1, 1, 2, 2, 5, 5, 5, 5>;
    /// let dev: Cpu = Default::default();
    /// let conv = dev.build_module::<L, f32>();
    /// let x: Tensor<Rank4<2, 4, 5, 5>, f32, _> = dev.sample_normal();
    /// let grads = conv.forward(NoInputGrad(x.leaky_trace())).sum().backward();
    /// assert_eq!(grads.get(&conv.weight).shape(), &(Const::<6>, Const::<2>, Const::<3>, Const::<3>));
    /// ```
    unbiased layer;

    /// The checked geometry. Naming it (`let _ = ConvGeneral2D::<..>::GEOMETRY;`
    /// or `const _: ConvGeometry = ..`) fails to compile, with a message
    /// that says which rule is broken, when the dimensions are inconsistent:
    /// `I` divides `C`, the group count `C / I` divides `O`, dilations and
    /// strides at least 1, the dilated kernel `(KH - 1) * DH + 1` no larger
    /// than the padded input, and `OH`/`OW` as
    /// [`conv_out_size`](super::conv_out_size) of the dilated kernel
    /// (`OH == (H + PT + PB - KH) / SH + 1` without dilation). Building and
    /// calling the layer name it.
    GEOMETRY = {
        assert!(C >= 1 && I >= 1, "a convolution needs at least one input channel (C >= 1, I >= 1)");
        assert!(C.is_multiple_of(I), "I (input channels per group) must divide C (input channels)");
        assert!(O >= 1, "a convolution needs at least one feature (O >= 1)");
        assert!(O.is_multiple_of(C / I), "the group count C / I must divide O (features)");
        ConvGeometry {
            c: C,
            o: O,
            win: Window2D::checked_dilated(
                [KH, KW],
                [DH, DW],
                [SH, SW],
                [PT, PB, PL, PR],
                [H, W],
                [OH, OW],
            ),
            groups: C / I,
        }
    }
}

/// The two `Module` impls of one layer, on an NCHW tensor and on
/// [`NoInputGrad`] of one: `$plain` and `$no_input_grad` are the
/// [`FlaxenDevice`] methods they call, with `self.$bias` after the weight
/// when the layer has a bias. One body for the biased and the unbiased
/// layer, and so for [`Conv2D`](super::Conv2D) and [`UnbiasedConv2D`](super::UnbiasedConv2D) too.
macro_rules! general_modules {
    ($name:ident { $($bias:ident)? }, $plain:ident, $no_input_grad:ident) => {
        general_modules!(@one $name { $($bias)? }, $plain, X, x => x);
        general_modules!(@one $name { $($bias)? }, $no_input_grad, NoInputGrad<X>, NoInputGrad(x) => x);
    };
    (@one $name:ident { $($bias:ident)? }, $method:ident, $input:ident $(<$x:ident>)?, $pat:pat_param => $v:ident) => {
        impl<
            const C: usize, const I: usize, const O: usize, const KH: usize, const KW: usize,
            const DH: usize, const DW: usize, const SH: usize, const SW: usize,
            const PT: usize, const PB: usize, const PL: usize, const PR: usize,
            const H: usize, const W: usize, const OH: usize, const OW: usize,
            B: Dim, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>,
        > Module<general_modules!(@input $input $(<$x>)?)>
            for $name<C, I, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D>
        {
            type Output = Tensor<(B, Const<O>, Const<OH>, Const<OW>), E, D, T>;
            type Error = D::Err;

            fn try_forward(
                &self,
                $pat: general_modules!(@input $input $(<$x>)?),
            ) -> Result<Self::Output, D::Err> {
                let geom = const { Self::GEOMETRY };
                let y_shape = ($v.shape().0, Const, Const, Const);
                let dev = $v.device().clone();
                dev.$method(&geom, $v, &self.weight, $(&self.$bias,)? y_shape)
            }
        }
    };
    // The input type: the NCHW tensor `X`, or a wrapper of it.
    (@input X) => { Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T> };
    (@input $wrap:ident<X>) => { $wrap<Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>> };
}

general_modules!(ConvGeneral2D { bias }, try_conv2d, try_conv2d_no_input_grad);
general_modules!(
    UnbiasedConvGeneral2D {},
    try_conv2d_unbiased,
    try_conv2d_unbiased_no_input_grad
);

#[cfg(test)]
mod tests {
    use super::*;
    use dfdx::nn::DeviceBuildExt;

    #[test]
    fn lecun_normal_uses_the_per_group_fan_in() {
        let dev = Cpu::seed_from_u64(3);
        // 8 groups of 2 channels, 64 features, 3x3: fan_in = 2 * 9.
        type L = builder::ConvGeneral2D<16, 2, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 4, 4>;
        let conv = dev.build_module::<L, f64>();
        let w = conv.weight.as_vec();
        let var = w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64;
        assert!((var * 18.0 - 1.0).abs() < 0.1, "var*fan_in {}", var * 18.0);
        assert!(conv.bias.as_vec().iter().all(|&b| b == 0.0));
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

    /// The CPU kernels (plain and pointwise, grouped and dilated) against
    /// the composite path, values and every gradient.
    #[test]
    fn grouped_dilated_cpu_kernels_match_the_composite_path() {
        macro_rules! case {
            ($($g:literal),*) => {{
                type L = builder::ConvGeneral2D<$($g),*>;
                let dev = Cpu::seed_from_u64(7);
                let mut conv = dev.build_module::<L, f64>();
                conv.bias = dev.sample_normal();
                let geom = L::GEOMETRY;
                let x = dev.sample_normal_like(&(3usize, Const, Const, Const));
                let y = conv.forward(x.leaky_trace());
                let (yv, y_shape) = (y.as_vec(), *y.shape());
                let r = dev.sample_normal_like(&y_shape);
                let g0 = (y * r.clone()).sum().backward();
                let y1 = crate::layers::composite::try_conv2d(
                    &geom, x.leaky_trace(), &conv.weight, &conv.bias, y_shape,
                ).unwrap();
                close("y", &yv, &y1.as_vec());
                let g1 = (y1 * r).sum().backward();
                close("dx", &g0.get(&x).as_vec(), &g1.get(&x).as_vec());
                close("dw", &g0.get(&conv.weight).as_vec(), &g1.get(&conv.weight).as_vec());
                close("db", &g0.get(&conv.bias).as_vec(), &g1.get(&conv.bias).as_vec());
            }};
        }
        // C, I, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW
        case!(4, 2, 6, 3, 2, 2, 1, 1, 2, 2, 2, 0, 1, 7, 6, 7, 3);
        case!(3, 1, 6, 3, 3, 1, 1, 2, 2, 1, 1, 1, 1, 5, 5, 3, 3);
        case!(4, 1, 4, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, 4, 3, 4);
        case!(2, 2, 3, 3, 3, 2, 3, 1, 1, 0, 0, 0, 0, 8, 9, 4, 3);
    }
}
