//! [`Conv2D`]: Flax's `nn.Conv` as a dfdx module.

use dfdx::nn::{BuildModule, BuildOnDevice, Module, NonMutableModule};
use dfdx::prelude::*;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use super::{ConvGeometry, FlaxenDevice, Window2D};

/// Builders of the layers with parameters.
pub mod builder {
    /// Builds a [`Conv2D`](super::Conv2D) with `dev.build_module::<Conv2D<..>, E>()`.
    ///
    /// The const generics are the whole geometry: `C` input channels, `O`
    /// output channels (features), a `KH x KW` kernel, strides `SH`, `SW`,
    /// padding `PT`/`PB`/`PL`/`PR` (top, bottom, left, right), `H x W`
    /// input and `OH x OW` output. [`GEOMETRY`](Self::GEOMETRY) checks them.
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
    /// ```
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct Conv2D<
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
    >;
}

impl<
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
    > builder::Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>
{
    /// The checked geometry. Naming it (`let _ = Conv2D::<..>::GEOMETRY;`
    /// or `const _: ConvGeometry = ..`) fails to compile, with a message
    /// that says which rule is broken, when the dimensions are inconsistent:
    /// `OH == (H + PT + PB - KH) / SH + 1`, likewise `OW`, strides and sizes
    /// at least 1, and the kernel no larger than the padded input. Building
    /// and calling the layer name it.
    pub const GEOMETRY: ConvGeometry = {
        assert!(C >= 1, "Conv2D needs at least one input channel (C >= 1)");
        assert!(O >= 1, "Conv2D needs at least one feature (O >= 1)");
        ConvGeometry {
            c: C,
            o: O,
            win: Window2D::checked([KH, KW], [SH, SW], [PT, PB, PL, PR], [H, W], [OH, OW]),
        }
    };
}

/// A 2-D convolution with bias, Flax's `nn.Conv` in NCHW layout: input
/// `(B, C, H, W)`, output `(B, O, OH, OW)`, for any batch dim `B`
/// (`Const<N>` or `usize`) and with or without a tape.
///
/// The const generics are those of [`builder::Conv2D`], which builds it.
/// Tensors are named `weight` (OIHW, Flax's HWIO kernel transposed) and
/// `bias`. Initialisation follows Flax's defaults: `lecun_normal` for the
/// weight (a normal truncated at two standard deviations and rescaled so
/// the variance is `1 / fan_in`, `fan_in = C * KH * KW`) and zeros for the
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
#[derive(Debug, Clone)]
pub struct Conv2D<
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
    E: Dtype,
    D: Storage<E>,
> {
    /// The kernel, `(O, C, KH, KW)`.
    pub weight: Tensor<Rank4<O, C, KH, KW>, E, D>,
    /// The bias, `(O,)`.
    pub bias: Tensor<Rank1<O>, E, D>,
}

/// Flax's `lecun_normal` (`variance_scaling(1, "fan_in", "truncated_normal")`):
/// a standard normal truncated to `[-2, 2]`, scaled so that the result has
/// variance `1 / fan_in`.
#[derive(Debug, Clone, Copy)]
pub(super) struct LecunNormal {
    pub(super) fan_in: usize,
}

impl<E: Dtype> Distribution<E> for LecunNormal {
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
        E::from_f64(z * std).unwrap_or_default()
    }
}

macro_rules! conv_generics {
    ($($rest:tt)*) => {
        impl<
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
            $($rest)*
    };
}
type ConvBuilder<
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
> = builder::Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>;

conv_generics! {
    E: Dtype,
    D: Device<E>,
> BuildOnDevice<D, E> for builder::Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>
where
    Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D>: BuildModule<D, E>,
{
    type Built = Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        let _ = const { Self::GEOMETRY };
        Self::Built::try_build(device)
    }
}
}

conv_generics! {
    E: Dtype,
    D: Storage<E>,
> NonMutableModule for Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D> {}
}

conv_generics! {
    E: Dtype,
    D: Device<E>,
> TensorCollection<E, D> for Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D> {
    type To<E2: Dtype, D2: Device<E2>> =
        Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E2, D2>;

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
                        t.try_fill_with_distr(LecunNormal { fan_in: C * KH * KW })
                    }),
                ),
                Self::tensor(
                    "bias",
                    |s| &s.bias,
                    |s| &mut s.bias,
                    TensorOptions::reset_with(|t| t.try_fill_with_zeros()),
                ),
            ),
            |(weight, bias)| Conv2D { weight, bias },
        )
    }
}
}

conv_generics! {
    B: Dim,
    E: Dtype,
    D: FlaxenDevice<E>,
    T: Tape<E, D>,
> Module<Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>>
    for Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D>
{
    type Output = Tensor<(B, Const<O>, Const<OH>, Const<OW>), E, D, T>;
    type Error = D::Err;

    fn try_forward(
        &self,
        x: Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>,
    ) -> Result<Self::Output, D::Err> {
        let geom = const { ConvBuilder::<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>::GEOMETRY };
        let batch = x.shape().0;
        let dev = x.device().clone();
        dev.try_conv2d(&geom, x, &self.weight, &self.bias, (batch, Const, Const, Const))
    }
}
}

/// The network's input batch, marked so that the first layer does not
/// compute its gradient (training never reads it): `model.forward(NoInputGrad(x))`.
///
/// [`Conv2D`] accepts it (through
/// [`FlaxenDevice::try_conv2d_no_input_grad`]) and so does any dfdx tuple of
/// modules that starts with a `Conv2D`. The tape of `x` still carries the
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

conv_generics! {
    B: Dim,
    E: Dtype,
    D: FlaxenDevice<E>,
    T: Tape<E, D>,
> Module<NoInputGrad<Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>>>
    for Conv2D<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW, E, D>
{
    type Output = Tensor<(B, Const<O>, Const<OH>, Const<OW>), E, D, T>;
    type Error = D::Err;

    fn try_forward(
        &self,
        NoInputGrad(x): NoInputGrad<Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>>,
    ) -> Result<Self::Output, D::Err> {
        let geom = const { ConvBuilder::<C, O, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>::GEOMETRY };
        let batch = x.shape().0;
        let dev = x.device().clone();
        dev.try_conv2d_no_input_grad(&geom, x, &self.weight, &self.bias, (batch, Const, Const, Const))
    }
}
}

#[cfg(test)]
mod tests {
    use super::*;
    use dfdx::nn::DeviceBuildExt;

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
}
