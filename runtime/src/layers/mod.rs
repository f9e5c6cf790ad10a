//! Layers that dfdx 0.13 only offers behind its `nightly` feature: 2-D
//! convolution, average/max pooling and flattening, as real dfdx modules that
//! build on stable Rust.
//!
//! Every layer carries its whole input geometry as const generics (the
//! `#[compact]` macro computes them), so a model's shapes are checked at
//! compile time without `generic_const_exprs`: each type checks its
//! arithmetic in an inline `const { assert!(..) }` block, and inconsistent
//! dimensions fail to compile as soon as the layer is built or called.
//!
//! Layout is NCHW (dfdx's), weights are OIHW. Padding is explicit per side
//! (`PT`, `PB`, `PL`, `PR`: top, bottom, left, right); [`same_padding`]
//! gives XLA's split for Flax's `padding='SAME'`.
//!
//! The arithmetic runs on a [`FlaxenDevice`]: on [`Cpu`](dfdx::tensor::Cpu)
//! in flaxen's own multi-threaded kernels (im2col + `gemm`, direct pooling
//! loops) registered on dfdx's tape, on `Cuda` through dfdx's differentiable
//! ops ([`composite`]).
//!
//! ```
//! use dfdx::prelude::*;
//! use flaxen_runtime::layers::{builder, AvgPool2D, Flatten2D};
//!
//! // Conv(8, (3, 3), padding SAME) -> avg_pool 2/2 -> flatten on 1x12x12 inputs.
//! type Model = (
//!     builder::Conv2D<1, 8, 3, 3, 1, 1, 1, 1, 1, 1, 12, 12, 12, 12>,
//!     ReLU,
//!     AvgPool2D<8, 2, 2, 2, 2, 0, 0, 0, 0, 12, 12, 6, 6>,
//!     Flatten2D<8, 6, 6, 288>,
//! );
//! let dev: Cpu = Default::default();
//! let model = dev.build_module::<Model, f32>();
//! let x: Tensor<Rank4<4, 1, 12, 12>, f32, _> = dev.sample_normal();
//! let y: Tensor<Rank2<4, 288>, f32, _> = model.forward(x);
//! ```

mod attention;
pub mod composite;
mod conv;
mod conv_general;
mod conv_transpose;
mod cpu;
mod dense;
mod device;
mod embed;
mod flatten;
mod fused;
mod gelu;
mod mask;
mod norm;
mod pool;
mod relu;
mod remat;
pub mod resize;
mod rnn;
mod rnn_lengths;
mod std_conv;

pub use attention::{
    dot_product_attention, Biased, MultiHeadAttention, Project, Projections, SelfAttention,
    Unbiased,
};
pub use conv::{Conv2D, NoInputGrad, UnbiasedConv2D};
pub use conv_general::{ConvGeneral2D, UnbiasedConvGeneral2D};
pub use conv_transpose::{
    conv_transpose_out_size, conv_transpose_same_padding, conv_transpose_valid_padding,
    ConvTranspose2D, UnbiasedConvTranspose2D,
};
pub use dense::{Dense, UnbiasedDense};
pub use device::FlaxenDevice;
pub use embed::{check_tokens, embed_attend, Embed, Rows, TokenOutOfRange};
pub use flatten::Flatten2D;
pub use fused::{conv_block, ConvLayer};
pub use gelu::Gelu;
pub use mask::{AttentionMask, CausalMask, CombineMasks};
pub use norm::{BatchNorm, GroupNorm, InferenceTape, LastAxis, LayerNorm, NormRows, RmsNorm};
pub use pool::{AvgPool2D, MaxPool2D};
pub use relu::Relu;
pub use remat::{Remat, RematInput, RematPart, TapedTensor};
pub use resize::{Resize2D, ResizeGeometry, ResizeMethod};
pub use rnn::{GruCell, LstmCell, RecurrentCell, Rnn, SimpleCell};
pub use std_conv::{Standardize, StdConv};

/// Builders of the layers with parameters, for `dev.build_module::<M, E>()`.
pub mod builder {
    pub use super::attention::builder::{MultiHeadAttention, SelfAttention};
    pub use super::conv::builder::{Conv2D, UnbiasedConv2D};
    pub use super::conv_general::builder::{ConvGeneral2D, UnbiasedConvGeneral2D};
    pub use super::conv_transpose::builder::{ConvTranspose2D, UnbiasedConvTranspose2D};
    pub use super::dense::builder::{Dense, UnbiasedDense};
    pub use super::embed::builder::Embed;
    pub use super::norm::builder::{BatchNorm, GroupNorm, LayerNorm, RmsNorm};
    pub use super::remat::Remat;
    pub use super::rnn::builder::{GruCell, LstmCell, Rnn, SimpleCell};
}

/// The padding `(low, high)` that XLA (and so Flax) uses for
/// `padding='SAME'`: the output has `ceil(size / stride)` positions, the
/// total padding is `max((ceil(size / stride) - 1) * stride + kernel - size, 0)`
/// and the low side gets the smaller half.
///
/// ```
/// use flaxen_runtime::layers::same_padding;
/// assert_eq!(same_padding(28, 3, 1), (1, 1));
/// assert_eq!(same_padding(8, 3, 2), (0, 1));
/// assert_eq!(same_padding(6, 2, 1), (0, 1));
/// ```
pub const fn same_padding(size: usize, kernel: usize, stride: usize) -> (usize, usize) {
    let out = size.div_ceil(stride);
    let needed = (out.saturating_sub(1)) * stride + kernel;
    let total = needed.saturating_sub(size);
    let low = total / 2;
    (low, total - low)
}

/// The number of output positions of a window of `kernel` cells moved by
/// `stride` over `size` cells padded with `pad_lo` and `pad_hi`:
/// `(size + pad_lo + pad_hi - kernel) / stride + 1`, or 0 when the window
/// does not fit (or the stride is 0).
///
/// ```
/// use flaxen_runtime::layers::conv_out_size;
/// assert_eq!(conv_out_size(28, 3, 1, 1, 1), 28);
/// assert_eq!(conv_out_size(28, 2, 2, 0, 0), 14);
/// assert_eq!(conv_out_size(9, 5, 2, 0, 0), 3);
/// assert_eq!(conv_out_size(2, 3, 1, 0, 0), 0);
/// ```
pub const fn conv_out_size(
    size: usize,
    kernel: usize,
    stride: usize,
    pad_lo: usize,
    pad_hi: usize,
) -> usize {
    let padded = size + pad_lo + pad_hi;
    if stride == 0 || kernel > padded {
        0
    } else {
        (padded - kernel) / stride + 1
    }
}

/// The extent of a kernel of `kernel` cells dilated by `dilation` (Flax's
/// `kernel_dilation`): `(kernel - 1) * dilation + 1`, the size that padding
/// and output sizes are computed with.
///
/// ```
/// use flaxen_runtime::layers::dilated_kernel;
/// assert_eq!(dilated_kernel(3, 1), 3);
/// assert_eq!(dilated_kernel(3, 2), 5);
/// ```
pub const fn dilated_kernel(kernel: usize, dilation: usize) -> usize {
    (kernel.saturating_sub(1)) * dilation + 1
}

/// The geometry of a window sliding over one `H x W` plane: kernel, strides,
/// padding and the output size. Shared by convolution and pooling.
///
/// Layers build it in a `const` that checks it (see
/// [`Window2D::checked`]); kernels trust it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window2D {
    /// Kernel (window) height.
    pub kh: usize,
    /// Kernel (window) width.
    pub kw: usize,
    /// Stride along the height.
    pub sh: usize,
    /// Stride along the width.
    pub sw: usize,
    /// Padding above the first row.
    pub pt: usize,
    /// Padding below the last row.
    pub pb: usize,
    /// Padding left of the first column.
    pub pl: usize,
    /// Padding right of the last column.
    pub pr: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Kernel dilation along the height (Flax's `kernel_dilation`; 1 for
    /// pooling and plain convolutions): kernel row `ki` reads input row
    /// `oy * sh + ki * dh - pt`.
    pub dh: usize,
    /// Kernel dilation along the width.
    pub dw: usize,
}

impl Window2D {
    /// Builds the geometry and checks it; meant to run in a `const` so that a
    /// failed check is a compile error naming what is wrong.
    ///
    /// # Panics
    /// (At compile time when used in a `const`.) If a stride is 0, a
    /// dimension is 0, the kernel is larger than the padded input, or
    /// `oh`/`ow` differ from [`conv_out_size`].
    ///
    /// ```
    /// use flaxen_runtime::layers::Window2D;
    /// const G: Window2D = Window2D::checked([3, 3], [2, 2], [0, 1, 1, 1], [8, 9], [4, 5]);
    /// assert_eq!(G.oh, 4);
    /// ```
    pub const fn checked(
        kernel: [usize; 2],
        strides: [usize; 2],
        padding: [usize; 4],
        input: [usize; 2],
        output: [usize; 2],
    ) -> Self {
        Self::checked_dilated(kernel, [1, 1], strides, padding, input, output)
    }

    /// [`checked`](Self::checked) for a kernel dilated by `dilation`
    /// (Flax's `kernel_dilation`): the rules hold for the dilated kernel's
    /// extent, [`dilated_kernel`].
    ///
    /// # Panics
    /// (At compile time when used in a `const`.) As [`checked`](Self::checked),
    /// and if a dilation is 0.
    ///
    /// ```
    /// use flaxen_runtime::layers::Window2D;
    /// // A 3x3 kernel dilated by 2 spans 5x5: 9 - 5 + 1 = 5 outputs per axis.
    /// const G: Window2D = Window2D::checked_dilated([3, 3], [2, 2], [1, 1], [0; 4], [9, 9], [5, 5]);
    /// assert_eq!((G.dh, G.oh), (2, 5));
    /// ```
    pub const fn checked_dilated(
        kernel: [usize; 2],
        dilation: [usize; 2],
        strides: [usize; 2],
        padding: [usize; 4],
        input: [usize; 2],
        output: [usize; 2],
    ) -> Self {
        let win = Self::unchecked(kernel, dilation, strides, padding, input, output);
        win.check_sizes();
        let Self {
            kh,
            kw,
            sh,
            sw,
            pt,
            pb,
            pl,
            pr,
            h,
            w,
            oh,
            ow,
            dh,
            dw,
        } = win;
        let (eh, ew) = (dilated_kernel(kh, dh), dilated_kernel(kw, dw));
        assert!(
            eh <= h + pt + pb,
            "kernel height is larger than the padded input height (KH > H + PT + PB)"
        );
        assert!(
            ew <= w + pl + pr,
            "kernel width is larger than the padded input width (KW > W + PL + PR)"
        );
        assert!(
            oh == conv_out_size(h, eh, sh, pt, pb),
            "output height must be OH == (H + PT + PB - KH) / SH + 1"
        );
        assert!(
            ow == conv_out_size(w, ew, sw, pl, pr),
            "output width must be OW == (W + PL + PR - KW) / SW + 1"
        );
        win
    }

    /// The window with these fields, unchecked: what the checked
    /// constructors (and the transposed convolution's, whose output rule
    /// differs) start from.
    pub(super) const fn unchecked(
        [kh, kw]: [usize; 2],
        [dh, dw]: [usize; 2],
        [sh, sw]: [usize; 2],
        [pt, pb, pl, pr]: [usize; 4],
        [h, w]: [usize; 2],
        [oh, ow]: [usize; 2],
    ) -> Self {
        Self {
            kh,
            kw,
            sh,
            sw,
            pt,
            pb,
            pl,
            pr,
            h,
            w,
            oh,
            ow,
            dh,
            dw,
        }
    }

    /// The rules every window obeys, whatever its output rule: dilations,
    /// strides, kernel and input sizes at least 1.
    pub(super) const fn check_sizes(&self) {
        assert!(
            self.dh >= 1 && self.dw >= 1,
            "kernel dilations must be at least 1"
        );
        assert!(self.sh >= 1 && self.sw >= 1, "strides must be at least 1");
        assert!(
            self.kh >= 1 && self.kw >= 1,
            "kernel sizes must be at least 1"
        );
        assert!(
            self.h >= 1 && self.w >= 1,
            "input height and width must be at least 1"
        );
    }

    /// `h * w`, the length of one input plane.
    pub const fn in_plane(&self) -> usize {
        self.h * self.w
    }

    /// `oh * ow`, the length of one output plane.
    pub const fn out_plane(&self) -> usize {
        self.oh * self.ow
    }

    /// `kh * kw`, the number of cells in a window.
    pub const fn window(&self) -> usize {
        self.kh * self.kw
    }
}

/// The geometry of a 2-D convolution: `c` input channels, `o` output
/// channels (features), `groups` (Flax's `feature_group_count`, 1 for a
/// plain convolution) and the [`Window2D`] of the kernel.
///
/// With `groups = g`, output channel `j` reads only the input channels of
/// its group, `(j / (o / g)) * (c / g)..` (`c / g` of them); the weight is
/// `(o, c / g, kh, kw)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvGeometry {
    /// Input channels.
    pub c: usize,
    /// Output channels (features).
    pub o: usize,
    /// Kernel, strides, padding and plane sizes.
    pub win: Window2D,
    /// Feature groups; divides `c` and `o`.
    pub groups: usize,
}

impl ConvGeometry {
    /// `(c / groups) * kh * kw`: the fan-in of one output, and the rows of
    /// one group's im2col.
    pub const fn patch(&self) -> usize {
        self.c / self.groups * self.win.window()
    }

    /// `c * kh * kw`: the rows of im2col over every group.
    pub const fn cols(&self) -> usize {
        self.c * self.win.window()
    }
}

/// What a fused convolution ([`FlaxenDevice::try_conv2d_fused`]) does to
/// its output inside the same kernel: Flax's `nn.relu` after the bias, then
/// `avg_pool` / `max_pool` of every output plane.
///
/// On the CPU the whole block runs example by example while the example's
/// output is in cache, so the activation and the pooling cost no pass over
/// memory of their own, and the backward pass builds the convolution's
/// output gradient in place. The results are those of the three ops run one
/// after the other.
///
/// ```
/// use flaxen_runtime::layers::{ConvGeometry, Epilogue, PoolKind, Window2D};
///
/// let geom = ConvGeometry {
///     c: 1,
///     o: 4,
///     win: Window2D::checked([3, 3], [1, 1], [1, 1, 1, 1], [8, 8], [8, 8]),
///     groups: 1,
/// };
/// let pool = Window2D::checked([2, 2], [2, 2], [0, 0, 0, 0], [8, 8], [4, 4]);
/// let epi = Epilogue { relu: true, pool: Some((PoolKind::Avg, pool)) };
/// assert_eq!(epi.out_plane(&geom), 16);
/// assert_eq!(Epilogue::NONE.out_plane(&geom), 64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Epilogue {
    /// `max(y, 0)` after the bias, with dfdx's gradient (1 where `y > 0`).
    pub relu: bool,
    /// Pooling of each output plane after the activation; the window's
    /// input plane is the convolution's output plane.
    pub pool: Option<(PoolKind, Window2D)>,
}

impl Epilogue {
    /// Nothing after the convolution.
    pub const NONE: Self = Self {
        relu: false,
        pool: None,
    };

    /// Positions per output plane: the pooled plane, or the convolution's.
    pub const fn out_plane(&self, geom: &ConvGeometry) -> usize {
        match &self.pool {
            Some((_, win)) => win.out_plane(),
            None => geom.win.out_plane(),
        }
    }

    /// Whether the epilogue fits `geom`: a pooling window must read the
    /// convolution's output plane.
    pub const fn fits(&self, geom: &ConvGeometry) -> bool {
        match &self.pool {
            Some((_, win)) => win.h == geom.win.oh && win.w == geom.win.ow,
            None => true,
        }
    }
}

/// The kind of pooling a [`FlaxenDevice::try_pool2d`] call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Flax's `avg_pool` with its default `count_include_pad=True`: the sum
    /// over the window, padded cells counting as zeros, divided by `kh * kw`.
    Avg,
    /// Flax's `max_pool`: the maximum over the window, padded cells being
    /// `-inf`. The gradient goes to the first maximal cell in row-major order.
    Max,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_padding_matches_xla() {
        // (size, kernel, stride) -> (lo, hi), worked out by hand from XLA's rule.
        let cases = [
            ((28, 3, 1), (1, 1)),
            ((7, 3, 1), (1, 1)),
            ((8, 3, 2), (0, 1)),
            ((9, 3, 2), (1, 1)),
            ((6, 2, 1), (0, 1)),
            ((5, 3, 2), (1, 1)),
            ((5, 1, 1), (0, 0)),
            ((6, 2, 2), (0, 0)),
            ((7, 5, 3), (2, 2)),
            ((2, 7, 1), (3, 3)),
        ];
        for ((size, k, s), want) in cases {
            assert_eq!(same_padding(size, k, s), want, "size {size} k {k} s {s}");
            let (lo, hi) = want;
            assert_eq!(conv_out_size(size, k, s, lo, hi), size.div_ceil(s));
        }
    }

    #[test]
    fn conv_out_size_cases() {
        assert_eq!(conv_out_size(7, 3, 1, 0, 0), 5);
        assert_eq!(conv_out_size(9, 5, 2, 0, 0), 3);
        assert_eq!(conv_out_size(6, 3, 2, 0, 1), 3);
        assert_eq!(conv_out_size(5, 3, 2, 2, 1), 3);
        assert_eq!(conv_out_size(2, 3, 1, 0, 0), 0);
        assert_eq!(conv_out_size(5, 3, 0, 0, 0), 0);
    }

    #[test]
    fn window_checked_accepts_consistent() {
        let g = Window2D::checked([2, 3], [1, 2], [0, 1, 1, 1], [6, 5], [6, 3]);
        assert_eq!((g.out_plane(), g.in_plane(), g.window()), (18, 30, 6));
    }

    #[test]
    #[should_panic(expected = "output height")]
    fn window_checked_rejects_wrong_output() {
        let _ = Window2D::checked([3, 3], [1, 1], [0, 0, 0, 0], [8, 8], [7, 6]);
    }
}
