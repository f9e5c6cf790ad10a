//! [`Conv2D`]: Flax's `nn.Conv` as a dfdx module, and what every
//! convolution layer shares.
//!
//! A plain convolution is the special case of
//! [`ConvGeneral2D`](super::ConvGeneral2D) with one feature group (`I = C`)
//! and no dilation (`DH = DW = 1`): [`Conv2D`], [`UnbiasedConv2D`] and
//! their builders are type aliases of it, so one implementation (geometry
//! check, initialisation, tensor names, forward) serves both, and the
//! shorter names that `#[compact]` emits for plain convolutions keep
//! working. [`conv_layers!`] writes the types and parameter impls that the
//! general and the transposed convolutions share.

use crate::dtype::scalar;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

#[cfg(doc)]
use super::FlaxenDevice;
use super::{ConvGeneral2D, UnbiasedConvGeneral2D};

/// Builders of the layers with parameters.
pub mod builder {
    use super::super::builder::{ConvGeneral2D, UnbiasedConvGeneral2D};

    /// Builds a [`Conv2D`](super::Conv2D) with `dev.build_module::<Conv2D<..>, E>()`.
    ///
    /// The const generics are the whole geometry: `C` input channels, `O`
    /// output channels (features), a `KH x KW` kernel, strides `SH`, `SW`,
    /// padding `PT`/`PB`/`PL`/`PR` (top, bottom, left, right), `H x W`
    /// input and `OH x OW` output. It is
    /// [`ConvGeneral2D`] with one group and no dilation, whose
    /// [`GEOMETRY`](ConvGeneral2D::GEOMETRY) checks them:
    /// `OH == (H + PT + PB - KH) / SH + 1`, likewise `OW`, strides and sizes
    /// at least 1, and the kernel no larger than the padded input.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::builder::Conv2D;
    ///
    /// // Flax `Conv(features=4, kernel_size=(3, 3), strides=(2, 2), padding='SAME')`
    /// // on 3x8x9 inputs: XLA pads (0, 1) rows and (1, 1) columns.
    /// type Layer = Conv2D<3, 4, 3, 3, 2, 2, 0, 1, 1, 1, 8, 9, 4, 5>;
    /// let dev: Cpu = Default::default();
    /// let conv = dev.build_module::<Layer, f32>();
    /// let y: Tensor<Rank4<2, 4, 4, 5>, f32, _> = conv.forward(dev.zeros::<Rank4<2, 3, 8, 9>>());
    /// assert_eq!(Layer::GEOMETRY.groups, 1);
    /// ```
    pub type Conv2D<
        const C: usize,
        const O: usize,
        const KH: usize,
        const KW: usize,
        const SH: usize,
        const SW: usize,
        const PT: usize,
        const PB: usize,
        const PL: usize,
        const PR: usize,
        const H: usize,
        const W: usize,
        const OH: usize,
        const OW: usize,
    > = ConvGeneral2D<C, C, O, KH, KW, 1, 1, SH, SW, PT, PB, PL, PR, H, W, OH, OW>;

    /// Builds an [`UnbiasedConv2D`](super::UnbiasedConv2D) (Flax's
    /// `Conv(use_bias=False)`) with `dev.build_module::<UnbiasedConv2D<..>, E>()`.
    ///
    /// The const generics are those of [`Conv2D`], and so is the check
    /// ([`UnbiasedConvGeneral2D::GEOMETRY`]).
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::builder::UnbiasedConv2D;
    ///
    /// // Flax `Conv(features=4, kernel_size=(1, 1), strides=(2, 2), use_bias=False)`
    /// // on 3x8x8 inputs, a ResNet shortcut.
    /// type Layer = UnbiasedConv2D<3, 4, 1, 1, 2, 2, 0, 0, 0, 0, 8, 8, 4, 4>;
    /// let dev: Cpu = Default::default();
    /// let conv = dev.build_module::<Layer, f32>();
    /// let y: Tensor<Rank4<2, 4, 4, 4>, f32, _> = conv.forward(dev.zeros::<Rank4<2, 3, 8, 8>>());
    /// ```
    pub type UnbiasedConv2D<
        const C: usize,
        const O: usize,
        const KH: usize,
        const KW: usize,
        const SH: usize,
        const SW: usize,
        const PT: usize,
        const PB: usize,
        const PL: usize,
        const PR: usize,
        const H: usize,
        const W: usize,
        const OH: usize,
        const OW: usize,
    > = UnbiasedConvGeneral2D<C, C, O, KH, KW, 1, 1, SH, SW, PT, PB, PL, PR, H, W, OH, OW>;
}

/// A 2-D convolution with bias, Flax's `nn.Conv` in NCHW layout: input
/// `(B, C, H, W)`, output `(B, O, OH, OW)`, for any batch dim `B`
/// (`Const<N>` or `usize`), with or without a tape, and through
/// [`NoInputGrad`].
///
/// The const generics are those of [`builder::Conv2D`], which builds it;
/// the layer is [`ConvGeneral2D`] with one group and no dilation. Tensors
/// are named `weight` (OIHW, Flax's HWIO kernel transposed) and `bias`.
/// Initialisation follows Flax's defaults: `lecun_normal` for the weight (a
/// normal truncated at two standard deviations and rescaled so the
/// variance is `1 / fan_in`, `fan_in = C * KH * KW`) and zeros for the
/// bias.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// let conv = dev.build_module::<builder::Conv2D<1, 2, 3, 3, 1, 1, 1, 1, 1, 1, 5, 5, 5, 5>, f32>();
/// let x: Tensor<(usize, Const<1>, Const<5>, Const<5>), f32, _> =
///     dev.sample_normal_like(&(3, Const, Const, Const));
/// let y = conv.forward(x.leaky_trace());
/// assert_eq!(y.shape().0, 3);
/// let grads = y.sum().backward();
/// assert_eq!(grads.get(&conv.bias).array(), [75.0, 75.0]);
/// ```
pub type Conv2D<
    const C: usize,
    const O: usize,
    const KH: usize,
    const KW: usize,
    const SH: usize,
    const SW: usize,
    const PT: usize,
    const PB: usize,
    const PL: usize,
    const PR: usize,
    const H: usize,
    const W: usize,
    const OH: usize,
    const OW: usize,
    E,
    D,
> = ConvGeneral2D<C, C, O, KH, KW, 1, 1, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D>;

/// A 2-D convolution without bias, Flax's `nn.Conv(use_bias=False)` (as
/// before a BatchNorm), in NCHW layout: [`Conv2D`] less its `bias`, that is
/// [`UnbiasedConvGeneral2D`] with one group and no dilation.
///
/// Built by [`builder::UnbiasedConv2D`], with the same const generics. The
/// only tensor is `weight` (OIHW, initialised with `lecun_normal` like
/// [`Conv2D`]'s), so a checkpoint holds `<name>.weight` and no
/// `<name>.bias`. The convolution runs on the same kernels as [`Conv2D`]'s,
/// and accepts [`NoInputGrad`] inputs too.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{builder, NoInputGrad};
///
/// let dev: Cpu = Default::default();
/// type L = builder::UnbiasedConv2D<1, 2, 3, 3, 1, 1, 1, 1, 1, 1, 5, 5, 5, 5>;
/// let conv = dev.build_module::<L, f32>();
/// assert_eq!(conv.num_trainable_params(), 2 * 9);
/// let x: Tensor<Rank4<3, 1, 5, 5>, f32, _> = dev.sample_normal();
/// let grads = conv.forward(NoInputGrad(x.leaky_trace())).sum().backward();
/// assert_eq!(grads.get(&conv.weight).shape(), &(Const::<2>, Const::<1>, Const::<3>, Const::<3>));
/// ```
pub type UnbiasedConv2D<
    const C: usize,
    const O: usize,
    const KH: usize,
    const KW: usize,
    const SH: usize,
    const SW: usize,
    const PT: usize,
    const PB: usize,
    const PL: usize,
    const PR: usize,
    const H: usize,
    const W: usize,
    const OH: usize,
    const OW: usize,
    E,
    D,
> = UnbiasedConvGeneral2D<C, C, O, KH, KW, 1, 1, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D>;

/// Flax's `lecun_normal` (`variance_scaling(1, "fan_in", "truncated_normal")`):
/// a standard normal truncated to `[-2, 2]`, scaled so that the result has
/// variance `1 / fan_in`.
#[derive(Debug, Clone, Copy)]
pub(super) struct LecunNormal {
    pub(super) fan_in: usize,
}

impl<E: dfdx::dtypes::Dtype> Distribution<E> for LecunNormal {
    fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> E {
        // The standard deviation of a standard normal truncated to [-2, 2].
        const TRUNCATED_STD: f64 = 0.879_625_661_034_239_8;
        let z = loop {
            let z: f64 = StandardNormal.sample(rng);
            if z.abs() <= 2.0 {
                break z;
            }
        };
        let std = (1.0 / self.fan_in.max(1) as f64).sqrt() / TRUNCATED_STD;
        scalar::<E>(z * std)
    }
}

/// The network's input batch, marked so that the first layer does not
/// compute its gradient (training never reads it): `model.forward(NoInputGrad(x))`.
///
/// [`Conv2D`] and [`UnbiasedConv2D`] (and the grouped or dilated
/// [`ConvGeneral2D`] and [`UnbiasedConvGeneral2D`]) accept it (through
/// [`FlaxenDevice::try_conv2d_no_input_grad`] and
/// [`FlaxenDevice::try_conv2d_unbiased_no_input_grad`]) and so does any dfdx
/// tuple of modules that starts with one. The tape of `x` still carries the
/// parameters' gradients; only `x`'s own gradient is skipped, as if it went
/// through `jax.lax.stop_gradient`. On the CPU this saves the first conv's
/// input-gradient gemm and col2im, a quarter of W1's convolution work.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{builder, NoInputGrad};
///
/// let dev: Cpu = Default::default();
/// let conv = dev.build_module::<builder::Conv2D<1, 2, 3, 3, 1, 1, 1, 1, 1, 1, 5, 5, 5, 5>, f32>();
/// let x: Tensor<Rank4<3, 1, 5, 5>, f32, _> = dev.sample_normal();
/// let grads = conv.forward(NoInputGrad(x.leaky_trace())).sum().backward();
/// assert_eq!(grads.get(&conv.bias).array(), [75.0, 75.0]);
/// ```
#[derive(Debug, Clone)]
pub struct NoInputGrad<T>(pub T);

/// A family of convolution layers, a layer with bias and its
/// `use_bias=False` twin, from one list of const generics `[$g, ..]`
/// (the general and the transposed convolutions each write one, so that the
/// biased and unbiased layers, and the two families, cannot drift apart):
///
/// - `pub mod builder` with the two builder structs (`$builder` docs);
/// - the two module structs (`$layer` docs): `weight`, a `Rank4<$k, ..>`,
///   and on the biased one `bias`, a `Rank1<$o>`;
/// - the biased builder's `GEOMETRY` (`$geometry`, which checks the const
///   generics with `assert!`s), the twin builder's (the same value), and a
///   private `GEOMETRY` on each module for its `Module` impls;
/// - `BuildOnDevice` (naming `GEOMETRY`, so inconsistent dimensions fail to
///   compile as soon as a layer is built), `NonMutableModule`, and
///   `TensorCollection`: `weight` initialised with Flax's `lecun_normal` of
///   `$fan_in`, `bias` with zeros. These names are the checkpoint keys.
///
/// The `Module` impls differ per family and stay with it. The caller
/// imports what the expansion names (dfdx's prelude, `BuildModule`,
/// `BuildOnDevice`, `NonMutableModule`, `ConvGeometry`).
macro_rules! conv_layers {
    (
        generics [$($g:ident),*], weight [$($k:ident),*], bias [$o:ident], fan_in $fan_in:expr;
        $(#[$b_doc:meta])* builder $biased:ident;
        $(#[$ub_doc:meta])* builder $unbiased:ident;
        $(#[$l_doc:meta])* layer;
        $(#[$ul_doc:meta])* unbiased layer;
        $(#[$g_doc:meta])* GEOMETRY = $geometry:block
    ) => {
        /// Builders of the layers with parameters.
        pub mod builder {
            $(#[$b_doc])*
            #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
            pub struct $biased<$(const $g: usize),*>;

            $(#[$ub_doc])*
            #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
            pub struct $unbiased<$(const $g: usize),*>;
        }

        $(#[$l_doc])*
        #[derive(Debug, Clone)]
        pub struct $biased<$(const $g: usize,)* E: Dtype, D: Storage<E>> {
            #[doc = concat!("The kernel, `(", stringify!($($k),*), ")`.")]
            pub weight: Tensor<Rank4<$($k),*>, E, D>,
            #[doc = concat!("The bias, `(", stringify!($o), ",)`.")]
            pub bias: Tensor<Rank1<$o>, E, D>,
        }

        $(#[$ul_doc])*
        #[derive(Debug, Clone)]
        pub struct $unbiased<$(const $g: usize,)* E: Dtype, D: Storage<E>> {
            #[doc = concat!("The kernel, `(", stringify!($($k),*), ")`.")]
            pub weight: Tensor<Rank4<$($k),*>, E, D>,
        }

        impl<$(const $g: usize),*> builder::$biased<$($g),*> {
            $(#[$g_doc])*
            pub const GEOMETRY: ConvGeometry = $geometry;
        }

        impl<$(const $g: usize),*> builder::$unbiased<$($g),*> {
            #[doc = concat!(
                "The checked geometry, [`", stringify!($biased), "::GEOMETRY`](builder::",
                stringify!($biased), "::GEOMETRY) (the same rules; naming it fails to compile ",
                "on inconsistent dimensions)."
            )]
            pub const GEOMETRY: ConvGeometry = builder::$biased::<$($g),*>::GEOMETRY;
        }

        conv_layers!(@params [$($g),*] $biased { bias } weight [$($k),*], bias [$o], fan_in $fan_in);
        conv_layers!(@params [$($g),*] $unbiased {} weight [$($k),*], bias [$o], fan_in $fan_in);
    };

    (@bias $self:ident bias) => { Some(&$self.bias) };
    (@bias $self:ident) => { None };

    // The builder, `NonMutableModule` and `TensorCollection` impls of one
    // layer, with a `bias` field or not.
    (@params [$($g:ident),*] $name:ident { $($bias:ident)? } weight [$($k:ident),*], bias [$o:ident], fan_in $fan_in:expr) => {
        impl<$(const $g: usize,)* E: Dtype, D: Storage<E>> $name<$($g,)* E, D> {
            /// The builder's checked geometry, for the `Module` impls.
            const GEOMETRY: ConvGeometry = builder::$name::<$($g),*>::GEOMETRY;
        }

        impl<$(const $g: usize,)* E: Dtype, D: Device<E>> BuildOnDevice<D, E>
            for builder::$name<$($g),*>
        where
            $name<$($g,)* E, D>: BuildModule<D, E>,
        {
            type Built = $name<$($g,)* E, D>;
            fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
                let _ = const { Self::GEOMETRY };
                Self::Built::try_build(device)
            }
        }

        impl<$(const $g: usize,)* E: Dtype, D: Storage<E>> NonMutableModule for $name<$($g,)* E, D> {}

        impl<$(const $g: usize,)* E: Dtype, D: Storage<E>> $crate::layers::ConvLayer<E, D>
            for $name<$($g,)* E, D>
        {
            type Weight = Rank4<$($k),*>;
            type Bias = Rank1<$o>;
            fn geometry(&self) -> ConvGeometry {
                const { Self::GEOMETRY }
            }
            fn weight(&self) -> &Tensor<Self::Weight, E, D> {
                &self.weight
            }
            fn bias(&self) -> Option<&Tensor<Self::Bias, E, D>> {
                conv_layers!(@bias self $($bias)?)
            }
            fn with_weight(&self, weight: Tensor<Self::Weight, E, D>) -> Self {
                $name { weight, $($bias: self.$bias.clone())? }
            }
        }

        impl<$(const $g: usize,)* E: Dtype, D: Device<E>> TensorCollection<E, D>
            for $name<$($g,)* E, D>
        {
            type To<E2: Dtype, D2: Device<E2>> = $name<$($g,)* E2, D2>;

            fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
                visitor: &mut V,
            ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
                visitor.visit_fields(
                    (
                        Self::tensor(
                            "weight",
                            |s| &s.weight,
                            |s| &mut s.weight,
                            TensorOptions::reset_with(|t| {
                                t.try_fill_with_distr($crate::layers::conv::LecunNormal {
                                    fan_in: $fan_in,
                                })
                            }),
                        ),
                        $(Self::tensor(
                            stringify!($bias),
                            |s| &s.$bias,
                            |s| &mut s.$bias,
                            TensorOptions::reset_with(|t| t.try_fill_with_zeros()),
                        ),)?
                    ),
                    |(weight, $($bias,)?)| $name { weight, $($bias)? },
                )
            }
        }
    };
}
pub(super) use conv_layers;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dfdx::nn::{DeviceBuildExt, Module};
    use dfdx::prelude::*;

    #[test]
    fn lecun_normal_init_has_flax_statistics() {
        let dev: Cpu = Default::default();
        type L = builder::Conv2D<8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 4, 4, 4, 4>;
        let conv = dev.build_module::<L, f64>();
        let w = conv.weight.as_vec();
        let n = w.len() as f64;
        let mean = w.iter().sum::<f64>() / n;
        let var = w.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let fan_in = 72.0f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!(
            (var * fan_in - 1.0).abs() < 0.1,
            "var*fan_in {}",
            var * fan_in
        );
        let bound = 2.0 / 0.879_625_661_034_239_8 / fan_in.sqrt();
        assert!(w.iter().all(|v| v.abs() <= bound + 1e-12));
        assert!(conv.bias.as_vec().iter().all(|&b| b == 0.0));
    }

    // 2 -> 3 channels, 3x2 kernel, strides (2, 1), padding (1, 0, 1, 1) on
    // 5x4 inputs: OH = (5 + 1 - 3) / 2 + 1 = 2, OW = (4 + 2 - 2) / 1 + 1 = 5.
    type Biased = builder::Conv2D<2, 3, 3, 2, 2, 1, 1, 0, 1, 1, 5, 4, 2, 5>;
    type Unbiased = builder::UnbiasedConv2D<2, 3, 3, 2, 2, 1, 1, 0, 1, 1, 5, 4, 2, 5>;

    /// Element by element within 1e-12 (relative above 1).
    pub(crate) fn assert_close(what: &str, a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{what}: length");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-12 * y.abs().max(1.0),
                "{what}[{i}]: {x} vs {y}"
            );
        }
    }

    /// `UnbiasedConv2D` is `Conv2D` with a zero bias: values and the
    /// gradients of `x` and `weight`, plain and through `NoInputGrad`, with
    /// `Const` and `usize` batches, and on the composite (Cuda) path too.
    #[test]
    fn unbiased_matches_conv_with_zero_bias() {
        let dev = Cpu::seed_from_u64(11);
        let mut biased = dev.build_module::<Biased, f64>();
        let unbiased = dev.build_module::<Unbiased, f64>();
        biased.weight = unbiased.weight.clone();
        let x: Tensor<Rank4<3, 2, 5, 4>, f64, _> = dev.sample_normal();
        let r: Tensor<Rank4<3, 3, 2, 5>, f64, _> = dev.sample_normal();

        let y0 = biased.forward(x.leaky_trace());
        let (v0, g0) = (y0.as_vec(), (y0 * r.clone()).sum().backward());
        let y1 = unbiased.forward(x.leaky_trace());
        let (v1, g1) = (y1.as_vec(), (y1 * r.clone()).sum().backward());
        assert_close("y", &v1, &v0);
        assert_close("dx", &g1.get(&x).as_vec(), &g0.get(&x).as_vec());
        let dw0 = g0.get(&biased.weight).as_vec();
        assert_close("dw", &g1.get(&unbiased.weight).as_vec(), &dw0);

        // NoInputGrad: the same weight gradient, and no input gradient.
        let y2 = unbiased.forward(NoInputGrad(x.leaky_trace()));
        let g2 = (y2 * r.clone()).sum().backward();
        assert_close(
            "dw, no input grad",
            &g2.get(&unbiased.weight).as_vec(),
            &dw0,
        );
        let dx = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g2.get(&x)));
        assert!(dx.is_err(), "NoInputGrad recorded an input gradient");

        // A `usize` batch without a tape.
        let xd = x.clone().reshape_like(&(3usize, Const, Const, Const));
        assert_close("y, usize batch", &unbiased.forward(xd).as_vec(), &v0);

        // The composite path (what Cuda runs) on the same tensors.
        let geom = Unbiased::GEOMETRY;
        let y3 = crate::layers::composite::try_conv2d_unbiased(
            &geom,
            x.leaky_trace(),
            &unbiased.weight,
            Rank4::<3, 3, 2, 5>::default(),
        )
        .unwrap();
        assert_close("y, composite", &y3.as_vec(), &v0);
        let g3 = (y3 * r).sum().backward();
        assert_close("dx, composite", &g3.get(&x).as_vec(), &g0.get(&x).as_vec());
        assert_close("dw, composite", &g3.get(&unbiased.weight).as_vec(), &dw0);
    }

    /// Only `weight`, as Flax's `use_bias=False` kernel: the parameter count,
    /// the tensor names a checkpoint sees, and `lecun_normal` statistics.
    #[test]
    fn unbiased_has_only_a_lecun_normal_weight() {
        let dev = Cpu::seed_from_u64(5);
        let conv = dev.build_module::<Unbiased, f64>();
        assert_eq!(conv.num_trainable_params(), 3 * 2 * 3 * 2);
        let biased = dev.build_module::<Biased, f64>();
        assert_eq!(biased.num_trainable_params(), 3 * 2 * 3 * 2 + 3);
        let params = crate::optim::Params::of(&conv).unwrap();
        assert_eq!(params.info().names, ["weight"]);
        assert_eq!(params.info().shapes, [vec![3, 2, 3, 2]]);

        type L = builder::UnbiasedConv2D<8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 4, 4, 4, 4>;
        let w = dev.build_module::<L, f64>().weight.as_vec();
        let n = w.len() as f64;
        let var = w.iter().map(|v| v * v).sum::<f64>() / n;
        assert!((var * 72.0 - 1.0).abs() < 0.1, "var*fan_in {}", var * 72.0);
    }
}
