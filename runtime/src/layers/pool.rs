//! [`AvgPool2D`] and [`MaxPool2D`]: Flax's `avg_pool` and `max_pool` as dfdx
//! modules.

use dfdx::nn::{Module, NonMutableModule, ZeroSizedModule};
use dfdx::prelude::*;

use super::{FlaxenDevice, PoolKind, Window2D};

macro_rules! pool_layer {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct $name<
            const C: usize,
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

        impl<
                const C: usize,
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
            > $name<C, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>
        {
            /// Average or max.
            pub const KIND: PoolKind = $kind;

            /// The checked window geometry. Naming it fails to compile, with
            /// a message that says which rule is broken, when the dimensions
            /// are inconsistent (`OH == (H + PT + PB - KH) / SH + 1`, likewise
            /// `OW`, strides and sizes at least 1, window no larger than the
            /// padded input). Calling the layer names it.
            pub const GEOMETRY: Window2D = {
                assert!(C >= 1, "pooling needs at least one channel (C >= 1)");
                Window2D::checked([KH, KW], [SH, SW], [PT, PB, PL, PR], [H, W], [OH, OW])
            };
        }

        impl<
                const C: usize,
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
            > ZeroSizedModule for $name<C, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>
        {
        }

        impl<
                const C: usize,
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
            > NonMutableModule for $name<C, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>
        {
        }

        impl<
                const C: usize,
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
                B: Dim,
                E: Dtype,
                D: FlaxenDevice<E>,
                T: Tape<E, D>,
            > Module<Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>>
            for $name<C, KH, KW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>
        {
            type Output = Tensor<(B, Const<C>, Const<OH>, Const<OW>), E, D, T>;
            type Error = D::Err;

            fn try_forward(
                &self,
                x: Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>,
            ) -> Result<Self::Output, D::Err> {
                let win = const { Self::GEOMETRY };
                let batch = x.shape().0;
                let dev = x.device().clone();
                dev.try_pool2d($kind, C, &win, x, (batch, Const, Const, Const))
            }
        }
    };
}

pool_layer!(
    /// Flax's `avg_pool` over each `KH x KW` window of every channel, NCHW:
    /// input `(B, C, H, W)`, output `(B, C, OH, OW)`, any batch dim `B`,
    /// with or without a tape. No parameters.
    ///
    /// The const generics are the geometry: `C` channels, a `KH x KW`
    /// window, strides `SH`, `SW`, padding `PT`/`PB`/`PL`/`PR` (top,
    /// bottom, left, right), `H x W` input, `OH x OW` output
    /// ([`GEOMETRY`](Self::GEOMETRY) checks them).
    ///
    /// Like Flax's default (`count_include_pad=True`), padded cells count as
    /// zeros: every window's sum is divided by `KH * KW`.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::AvgPool2D;
    ///
    /// let dev: Cpu = Default::default();
    /// let x: Tensor<Rank4<1, 1, 2, 2>, f32, _> = dev.tensor([[[[1.0, 2.0], [3.0, 6.0]]]]);
    /// // window 2x2, stride 1, SAME padding (one cell bottom and right).
    /// let pool = AvgPool2D::<1, 2, 2, 1, 1, 0, 1, 0, 1, 2, 2, 2, 2>;
    /// assert_eq!(pool.forward(x).array(), [[[[3.0, 2.0], [2.25, 1.5]]]]);
    /// ```
    AvgPool2D,
    PoolKind::Avg
);

pool_layer!(
    /// Flax's `max_pool` over each `KH x KW` window of every channel, NCHW:
    /// input `(B, C, H, W)`, output `(B, C, OH, OW)`, any batch dim `B`,
    /// with or without a tape. No parameters.
    ///
    /// The const generics are those of [`AvgPool2D`]. Padded cells are
    /// `-inf`, so they never win; the gradient of each window goes to its
    /// first maximal cell in row-major order.
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::MaxPool2D;
    ///
    /// let dev: Cpu = Default::default();
    /// let x: Tensor<Rank4<1, 1, 2, 2>, f32, _> = dev.tensor([[[[1.0, -2.0], [-3.0, -6.0]]]]);
    /// let pool = MaxPool2D::<1, 2, 2, 1, 1, 0, 1, 0, 1, 2, 2, 2, 2>;
    /// assert_eq!(pool.forward(x).array(), [[[[1.0, -2.0], [-3.0, -6.0]]]]);
    /// ```
    MaxPool2D,
    PoolKind::Max
);
