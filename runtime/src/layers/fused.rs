//! [`conv_block`]: a convolution layer with its activation and pooling as
//! one op ([`FlaxenDevice::try_conv2d_fused`]), which `#[compact]` emits for
//! `avg_pool(relu(Conv(..)(x)), ..)` and its kin.

use dfdx::prelude::*;

use super::{ConvGeometry, Epilogue, FlaxenDevice};

/// A convolution layer's geometry and parameters, for kernels that run it
/// together with what follows ([`conv_block`]). Implemented by
/// [`ConvGeneral2D`](super::ConvGeneral2D) (so [`Conv2D`](super::Conv2D))
/// and [`UnbiasedConvGeneral2D`](super::UnbiasedConvGeneral2D).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{builder, ConvLayer};
///
/// let dev: Cpu = Default::default();
/// let conv = dev.build_module::<builder::Conv2D<1, 4, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8>, f32>();
/// assert_eq!(conv.geometry().o, 4);
/// assert!(conv.bias().is_some());
/// ```
pub trait ConvLayer<E: Dtype, D: Storage<E>> {
    /// The weight's shape, `(o, c / groups, kh, kw)`.
    type Weight: Shape;
    /// The bias's shape, `(o,)` (unused without one).
    type Bias: Shape;
    /// The checked geometry.
    fn geometry(&self) -> ConvGeometry;
    /// The kernel.
    fn weight(&self) -> &Tensor<Self::Weight, E, D>;
    /// The bias, if the layer has one.
    fn bias(&self) -> Option<&Tensor<Self::Bias, E, D>>;
    /// The same layer with another kernel (the bias shared).
    fn with_weight(&self, weight: Tensor<Self::Weight, E, D>) -> Self
    where
        Self: Sized;
}

/// `epi(layer(x))`: the convolution `layer` followed by `epi` (relu,
/// pooling) in one [`FlaxenDevice::try_conv2d_fused`] call; `y_shape` is
/// the epilogue's output shape and `input_grad: false` records no gradient
/// for `x` (as [`NoInputGrad`](super::NoInputGrad) does for a layer).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{builder, conv_block, AvgPool2D, Epilogue, PoolKind};
///
/// let dev: Cpu = Default::default();
/// let conv = dev.build_module::<builder::Conv2D<1, 4, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8>, f32>();
/// type Pool = AvgPool2D<4, 2, 2, 2, 2, 0, 0, 0, 0, 8, 8, 4, 4>;
/// let epi = Epilogue { relu: true, pool: Some((Pool::KIND, Pool::GEOMETRY)) };
/// let x: Tensor<Rank4<2, 1, 8, 8>, f32, _> = dev.sample_normal();
/// let y = conv_block(&conv, &epi, x, Rank4::<2, 4, 4, 4>::default(), true).unwrap();
/// assert!(y.as_vec().iter().all(|&v| v >= 0.0));
/// ```
pub fn conv_block<L, E, D, X, Y, T>(
    layer: &L,
    epi: &Epilogue,
    x: Tensor<X, E, D, T>,
    y_shape: Y,
    input_grad: bool,
) -> Result<Tensor<Y, E, D, T>, D::Err>
where
    L: ConvLayer<E, D>,
    E: Dtype,
    D: FlaxenDevice<E>,
    X: Shape,
    Y: Shape,
    T: Tape<E, D>,
{
    let dev = x.device().clone();
    let geom = layer.geometry();
    dev.try_conv2d_fused(
        &geom,
        epi,
        x,
        layer.weight(),
        layer.bias(),
        y_shape,
        input_grad,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::conv::tests::assert_close as close;
    use crate::layers::{PoolKind, Window2D};

    /// The fused kernel equals conv, relu and pooling run one after the
    /// other: values and the gradients of `x`, the weight and the bias, for
    /// every epilogue, with and without bias and input gradient, with
    /// negative pre-activations (relu's mask) and windows that overlap and
    /// pad (pooling's general path). Two input depths: 2 channels (an
    /// 18-row patch matrix, through gemm) and 1 (a first layer's 9-row
    /// patch: the short-inner-dimension product, and with relu and the
    /// unpadded 2x2 average pool the direct forward kernel, whose saved
    /// relu mask the im2col backward pass reads).
    #[test]
    fn fused_equals_the_ops_in_sequence() {
        fused_vs_sequence::<2>();
        fused_vs_sequence::<1>();
    }

    fn fused_vs_sequence<const C: usize>() {
        let dev = Cpu::seed_from_u64(3);
        // C -> 4 channels, 3x3 SAME on 6x5, three examples.
        let geom = ConvGeometry {
            c: C,
            o: 4,
            win: Window2D::checked([3, 3], [1, 1], [1, 1, 1, 1], [6, 5], [6, 5]),
            groups: 1,
        };
        let tiled = Window2D::checked([2, 2], [2, 2], [0, 0, 0, 1], [6, 5], [3, 3]);
        let overlap = Window2D::checked([3, 2], [2, 1], [1, 1, 0, 0], [6, 5], [3, 4]);
        // Unpadded 2x2 windows that drop the last column (5 is odd): with
        // one input channel and relu, the direct first-layer kernel.
        let valid = Window2D::checked([2, 2], [2, 2], [0, 0, 0, 0], [6, 5], [3, 2]);
        let x: Tensor<Rank4<3, C, 6, 5>, f64, _> = dev.sample_normal();
        let w: Tensor<Rank4<4, C, 3, 3>, f64, _> = dev.sample_normal();
        let b: Tensor<Rank1<4>, f64, _> = dev.sample_normal();
        for pool in [
            None,
            Some((PoolKind::Avg, tiled)),
            Some((PoolKind::Max, tiled)),
            Some((PoolKind::Avg, overlap)),
            Some((PoolKind::Max, overlap)),
            Some((PoolKind::Avg, valid)),
        ] {
            for relu in [false, true] {
                for bias in [Some(&b), None] {
                    for input_grad in [true, false] {
                        let epi = Epilogue { relu, pool };
                        let n = 3 * 4 * epi.out_plane(&geom);
                        let r: Tensor<(usize,), f64, _> = dev.sample_normal_like(&(n,));
                        let fused = dev
                            .try_conv2d_fused(
                                &geom,
                                &epi,
                                x.leaky_trace(),
                                &w,
                                bias,
                                (n,),
                                input_grad,
                            )
                            .unwrap();
                        let conv_n = 3 * 4 * 30;
                        let y = match bias {
                            Some(b) => dev.try_conv2d(&geom, x.leaky_trace(), &w, b, (conv_n,)),
                            None => dev.try_conv2d_unbiased(&geom, x.leaky_trace(), &w, (conv_n,)),
                        }
                        .unwrap();
                        let y = if relu {
                            dev.try_relu_fast(y).unwrap()
                        } else {
                            y
                        };
                        let seq = match pool {
                            Some((kind, win)) => dev.try_pool2d(kind, 4, &win, y, (n,)).unwrap(),
                            None => y,
                        };
                        let what =
                            format!("{epi:?} bias {} input_grad {input_grad}", bias.is_some());
                        close(&format!("y {what}"), &fused.as_vec(), &seq.as_vec());
                        let gf = (fused * r.clone()).sum().backward();
                        let gs = (seq * r).sum().backward();
                        close(
                            &format!("dw {what}"),
                            &gf.get(&w).as_vec(),
                            &gs.get(&w).as_vec(),
                        );
                        if bias.is_some() {
                            close(
                                &format!("db {what}"),
                                &gf.get(&b).as_vec(),
                                &gs.get(&b).as_vec(),
                            );
                        }
                        if input_grad {
                            close(
                                &format!("dx {what}"),
                                &gf.get(&x).as_vec(),
                                &gs.get(&x).as_vec(),
                            );
                        }
                    }
                }
            }
        }
    }
}
