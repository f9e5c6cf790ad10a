//! [`Resize2D`]: `jax.image.resize` on the height and width of NCHW images,
//! with its methods (`nearest`, `linear`, `cubic`, `lanczos3`, `lanczos5`),
//! half-pixel centres and its default `antialias=True`.
//!
//! Every method but `nearest` is a linear map per axis: the output is
//! `Mh · x · Mwᵀ` for two interpolation matrices that
//! [`axis_taps`] computes exactly as jax's `compute_weight_mat` does (the
//! sample position of output `o` is `(o + 0.5) · in / out - 0.5`; when
//! downsampling with `antialias`, the kernel is widened by `in / out`, so
//! that every input contributes, as a low-pass filter; weights are
//! normalised to sum to 1). `nearest` reads input `floor((o + 0.5) · in /
//! out)`, computed in `f32` as jax does.
//!
//! The CPU runs the two axes as separate 1-D passes over each plane
//! ([`FlaxenDevice::try_resize2d`]);
//! other devices run [`try_resize2d`]: two `matmul`s with the dense
//! matrices.

use crate::dtype::scalar;
use core::marker::PhantomData;

use dfdx::nn::{Module, NonMutableModule, ZeroSizedModule};
use dfdx::prelude::*;

use super::FlaxenDevice;

/// The interpolation of `jax.image.resize`'s `method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResizeMethod {
    /// `"nearest"`: input `floor((o + 0.5) · in / out)`, so upsampling by an
    /// integer factor repeats each pixel.
    Nearest,
    /// `"linear"` (`"bilinear"`): the triangle kernel `max(0, 1 - |x|)`.
    Linear,
    /// `"cubic"` (`"bicubic"`): Keys' cubic kernel with `a = -0.5`.
    Cubic,
    /// `"lanczos3"`: the Lanczos kernel of radius 3.
    Lanczos3,
    /// `"lanczos5"`: the Lanczos kernel of radius 5.
    Lanczos5,
}

impl ResizeMethod {
    /// The kernel's value at distance `x >= 0` (jax's `_kernels`); 1 at 0.
    fn kernel(self, x: f64) -> f64 {
        let lanczos = |r: f64| {
            if x > r {
                0.0
            } else if x > 1e-3 {
                let pi = core::f64::consts::PI;
                r * (pi * x).sin() * (pi * x / r).sin() / (pi * pi * x * x)
            } else {
                1.0
            }
        };
        match self {
            ResizeMethod::Nearest | ResizeMethod::Linear => (1.0 - x).max(0.0),
            ResizeMethod::Cubic if x >= 2.0 => 0.0,
            ResizeMethod::Cubic if x >= 1.0 => ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0,
            ResizeMethod::Cubic => ((1.5 * x - 2.5) * x) * x + 1.0,
            ResizeMethod::Lanczos3 => lanczos(3.0),
            ResizeMethod::Lanczos5 => lanczos(5.0),
        }
    }

    /// Where the kernel is zero beyond.
    fn radius(self) -> f64 {
        match self {
            ResizeMethod::Nearest | ResizeMethod::Linear => 1.0,
            ResizeMethod::Cubic => 2.0,
            ResizeMethod::Lanczos3 => 3.0,
            ResizeMethod::Lanczos5 => 5.0,
        }
    }
}

/// How one axis of `input` cells becomes `output` cells: output `o` is
/// `sum_t weights[o * width + t] * input[start[o] + t]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Taps {
    /// The first input cell each output reads.
    pub start: Vec<usize>,
    /// Cells read per output (trailing weights may be 0).
    pub width: usize,
    /// `output * width` weights.
    pub weights: Vec<f64>,
}

impl Taps {
    /// The dense `output x input` matrix (row-major).
    pub fn dense(&self, input: usize) -> Vec<f64> {
        let mut m = vec![0.0; self.start.len() * input];
        for (o, &s) in self.start.iter().enumerate() {
            for t in 0..self.width {
                if let Some(cell) = m.get_mut(o * input + s + t) {
                    *cell += self.weights[o * self.width + t];
                }
            }
        }
        m
    }
}

/// The taps of one axis, `input` cells to `output`, as `jax.image.resize`
/// computes them (both sizes at least 1).
///
/// ```
/// use flaxen_runtime::layers::resize::axis_taps;
/// use flaxen_runtime::layers::ResizeMethod;
///
/// // Linear 2 -> 4: half-pixel centres, edges clamped.
/// let t = axis_taps(ResizeMethod::Linear, true, 2, 4);
/// let m = t.dense(2);
/// assert_eq!(m, [1.0, 0.0, 0.75, 0.25, 0.25, 0.75, 0.0, 1.0]);
/// // Nearest 3 -> 6 repeats each cell twice.
/// assert_eq!(axis_taps(ResizeMethod::Nearest, true, 3, 6).start, [0, 0, 1, 1, 2, 2]);
/// ```
pub fn axis_taps(method: ResizeMethod, antialias: bool, input: usize, output: usize) -> Taps {
    if method == ResizeMethod::Nearest {
        // jax: floor((arange(n, float32) + 0.5) * m / n), in float32.
        let (m, n) = (input as f32, output as f32);
        let start = (0..output)
            .map(|o| (((o as f32 + 0.5) * m / n).floor() as usize).min(input - 1))
            .collect();
        return Taps {
            start,
            width: 1,
            weights: vec![1.0; output],
        };
    }
    if input == output {
        // jax skips axes whose size does not change.
        return Taps {
            start: (0..output).collect(),
            width: 1,
            weights: vec![1.0; output],
        };
    }
    let scale = output as f64 / input as f64;
    let inv_scale = 1.0 / scale;
    let kernel_scale = if antialias { inv_scale.max(1.0) } else { 1.0 };
    let reach = method.radius() * kernel_scale;
    // One cell more each side than the kernel reaches: rounding can only
    // add cells of weight 0.
    let span = |s: f64| {
        let lo = (s - reach).floor().max(0.0) as usize;
        let hi = ((s + reach).ceil() as usize).min(input - 1);
        (lo.min(hi), hi)
    };
    let sample = |o: usize| (o as f64 + 0.5) * inv_scale - 0.5;
    let width = (0..output)
        .map(|o| {
            let (lo, hi) = span(sample(o));
            hi - lo + 1
        })
        .max()
        .unwrap_or(1);
    let mut start = Vec::with_capacity(output);
    let mut weights = vec![0.0; output * width];
    for o in 0..output {
        let s = sample(o);
        // Shifted left where the widest window would pass the last cell;
        // the cells added get weight 0 beyond the kernel's reach.
        let lo = span(s).0.min(input - width);
        let row = &mut weights[o * width..(o + 1) * width];
        for (t, w) in row.iter_mut().enumerate() {
            *w = method.kernel((s - (lo + t) as f64).abs() / kernel_scale);
        }
        let total: f64 = row.iter().sum();
        // jax: weights with a near-zero sum become 0, as do samples
        // outside the input (which half-pixel centres never produce).
        let inside = (-0.5..=input as f64 - 0.5).contains(&s);
        if total.abs() > 1000.0 * f64::from(f32::EPSILON) && inside {
            row.iter_mut().for_each(|w| *w /= total);
        } else {
            row.iter_mut().for_each(|w| *w = 0.0);
        }
        start.push(lo);
    }
    Taps {
        start,
        width,
        weights,
    }
}

/// The geometry of a [`FlaxenDevice::try_resize2d`] call: the method and
/// the plane sizes (the channels are untouched).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResizeGeometry {
    /// The interpolation.
    pub method: ResizeMethod,
    /// jax's `antialias`: widen the kernel when downsampling (not used by
    /// `nearest`).
    pub antialias: bool,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
}

impl ResizeGeometry {
    /// Builds the geometry and checks it; meant to run in a `const`.
    ///
    /// # Panics
    /// (At compile time when used in a `const`.) If a size is 0.
    ///
    /// ```
    /// use flaxen_runtime::layers::{ResizeGeometry, ResizeMethod};
    /// const G: ResizeGeometry = ResizeGeometry::checked(ResizeMethod::Linear, true, [5, 7], [9, 4]);
    /// assert_eq!((G.oh, G.ow), (9, 4));
    /// ```
    pub const fn checked(
        method: ResizeMethod,
        antialias: bool,
        input: [usize; 2],
        output: [usize; 2],
    ) -> Self {
        let [h, w] = input;
        let [oh, ow] = output;
        assert!(
            h >= 1 && w >= 1 && oh >= 1 && ow >= 1,
            "resize: every height and width must be at least 1"
        );
        Self {
            method,
            antialias,
            h,
            w,
            oh,
            ow,
        }
    }

    /// The taps of the height, then of the width.
    pub fn taps(&self) -> (Taps, Taps) {
        (
            axis_taps(self.method, self.antialias, self.h, self.oh),
            axis_taps(self.method, self.antialias, self.w, self.ow),
        )
    }
}

/// `jax.image.resize` of every `h x w` plane of `x` from dfdx's public ops:
/// two `matmul`s with the dense interpolation matrices (the `Cuda` path,
/// and the reference the CPU kernel is tested against). `x` holds
/// `planes * h * w` values, `y_shape` `planes * oh * ow`.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{composite, ResizeGeometry, ResizeMethod};
///
/// let dev: Cpu = Default::default();
/// let x: Tensor<Rank4<1, 1, 1, 2>, f64, _> = dev.tensor([[[[1.0, 3.0]]]]);
/// let g = ResizeGeometry::checked(ResizeMethod::Linear, true, [1, 2], [1, 4]);
/// let y = composite::try_resize2d(&g, x, Rank4::<1, 1, 1, 4>::default()).unwrap();
/// assert_eq!(y.array(), [[[[1.0, 1.5, 2.5, 3.0]]]]);
/// ```
pub fn try_resize2d<E, D, X, Y, T>(
    geom: &ResizeGeometry,
    x: Tensor<X, E, D, T>,
    y_shape: Y,
) -> Result<Tensor<Y, E, D, T>, D::Err>
where
    E: Dtype,
    D: Device<E>,
    X: Shape,
    Y: Shape,
    T: Tape<E, D>,
{
    let g = geom;
    let planes = x.shape().num_elements() / (g.h * g.w).max(1);
    let dev = x.device().clone();
    let (th, tw) = g.taps();
    // The matrices are constants: no tape, no gradient.
    let matrix = |t: &Taps, input: usize, output: usize| {
        let m = t.dense(input);
        // Transposed, `input x output`, as the right operand.
        let mut mt = Vec::with_capacity(m.len());
        for i in 0..input {
            for o in 0..output {
                mt.push(scalar::<E>(m[o * input + i]));
            }
        }
        dev.try_tensor_from_vec(mt, (input, output))
    };
    let mw = matrix(&tw, g.w, g.ow)?;
    let mh = matrix(&th, g.h, g.oh)?;
    let x = x.try_reshape_like(&(planes * g.h, g.w))?;
    let x = x.try_matmul(mw)?;
    let x = x.try_reshape_like(&(planes, g.h, g.ow))?;
    let x = x.try_permute::<_, Axes3<0, 2, 1>>()?;
    let x = x.try_reshape_like(&(planes * g.ow, g.h))?;
    let x = x.try_matmul(mh)?;
    let x = x.try_reshape_like(&(planes, g.ow, g.oh))?;
    let x = x.try_permute::<_, Axes3<0, 2, 1>>()?;
    x.try_reshape_like(&y_shape)
}

/// A `jax.image.resize` method as a type, for [`Resize2D`]'s `M`.
pub trait Method: Default + Copy + core::fmt::Debug {
    /// The method.
    const METHOD: ResizeMethod;
}

macro_rules! methods {
    ($($(#[$doc:meta])* $name:ident => $m:ident,)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct $name;
        impl Method for $name {
            const METHOD: ResizeMethod = ResizeMethod::$m;
        }
    )*};
}

methods! {
    /// [`ResizeMethod::Nearest`].
    Nearest => Nearest,
    /// [`ResizeMethod::Linear`].
    Linear => Linear,
    /// [`ResizeMethod::Cubic`].
    Cubic => Cubic,
    /// [`ResizeMethod::Lanczos3`].
    Lanczos3 => Lanczos3,
    /// [`ResizeMethod::Lanczos5`].
    Lanczos5 => Lanczos5,
}

/// `jax.image.resize(x, (B, C, OH, OW), method, antialias = ANTIALIAS)` on
/// NCHW input `(B, C, H, W)`: output `(B, C, OH, OW)`, any batch dim `B`,
/// with or without a tape. No parameters. `M` is the method
/// ([`Nearest`], [`Linear`], [`Cubic`], [`Lanczos3`], [`Lanczos5`]).
///
/// `nearest` upsampling by integer factors is a copy of each pixel; the
/// other methods run as two 1-D passes on the CPU.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::resize::{Linear, Nearest};
/// use flaxen_runtime::layers::Resize2D;
///
/// let dev: Cpu = Default::default();
/// let x: Tensor<Rank4<1, 1, 2, 2>, f32, _> = dev.tensor([[[[1.0, 2.0], [3.0, 4.0]]]]);
/// let up = Resize2D::<1, 2, 2, 4, 4, Nearest>::default();
/// assert_eq!(up.forward(x.clone()).array()[0][0][1], [1.0, 1.0, 2.0, 2.0]);
/// let down = Resize2D::<1, 2, 2, 1, 1, Linear>::default();
/// assert_eq!(down.forward(x).array(), [[[[2.5]]]]);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Resize2D<
    const C: usize,
    const H: usize,
    const W: usize,
    const OH: usize,
    const OW: usize,
    M: Method,
    const ANTIALIAS: bool = true,
>(PhantomData<M>);

impl<
        const C: usize,
        const H: usize,
        const W: usize,
        const OH: usize,
        const OW: usize,
        M: Method,
        const ANTIALIAS: bool,
    > Resize2D<C, H, W, OH, OW, M, ANTIALIAS>
{
    /// The checked geometry; naming it fails to compile when a size is 0.
    pub const GEOMETRY: ResizeGeometry = {
        assert!(C >= 1, "resize needs at least one channel (C >= 1)");
        ResizeGeometry::checked(M::METHOD, ANTIALIAS, [H, W], [OH, OW])
    };
}

impl<
        const C: usize,
        const H: usize,
        const W: usize,
        const OH: usize,
        const OW: usize,
        M: Method,
        const ANTIALIAS: bool,
    > ZeroSizedModule for Resize2D<C, H, W, OH, OW, M, ANTIALIAS>
{
}

impl<
        const C: usize,
        const H: usize,
        const W: usize,
        const OH: usize,
        const OW: usize,
        M: Method,
        const ANTIALIAS: bool,
    > NonMutableModule for Resize2D<C, H, W, OH, OW, M, ANTIALIAS>
{
}

impl<
        const C: usize,
        const H: usize,
        const W: usize,
        const OH: usize,
        const OW: usize,
        M: Method,
        const ANTIALIAS: bool,
        B: Dim,
        E: Dtype,
        D: FlaxenDevice<E>,
        T: Tape<E, D>,
    > Module<Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>>
    for Resize2D<C, H, W, OH, OW, M, ANTIALIAS>
{
    type Output = Tensor<(B, Const<C>, Const<OH>, Const<OW>), E, D, T>;
    type Error = D::Err;

    fn try_forward(
        &self,
        x: Tensor<(B, Const<C>, Const<H>, Const<W>), E, D, T>,
    ) -> Result<Self::Output, D::Err> {
        let geom = const { Self::GEOMETRY };
        let batch = x.shape().0;
        let dev = x.device().clone();
        dev.try_resize2d(&geom, x, (batch, Const, Const, Const))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// jax's `compute_weight_mat`, dense, as written there.
    fn jax_dense(method: ResizeMethod, antialias: bool, m: usize, n: usize) -> Vec<f64> {
        let inv = 1.0 / (n as f64 / m as f64);
        let ks = if antialias { inv.max(1.0) } else { 1.0 };
        let mut out = vec![0.0; n * m];
        for o in 0..n {
            let s = (o as f64 + 0.5) * inv - 0.5;
            let w: Vec<f64> = (0..m)
                .map(|j| method.kernel((s - j as f64).abs() / ks))
                .collect();
            let total: f64 = w.iter().sum();
            for j in 0..m {
                out[o * m + j] = w[j] / total;
            }
        }
        out
    }

    #[test]
    fn taps_match_the_dense_rule() {
        let methods = [
            ResizeMethod::Linear,
            ResizeMethod::Cubic,
            ResizeMethod::Lanczos3,
            ResizeMethod::Lanczos5,
        ];
        for method in methods {
            for aa in [true, false] {
                for (m, n) in [
                    (5, 9),
                    (9, 5),
                    (7, 3),
                    (3, 7),
                    (1, 4),
                    (4, 1),
                    (6, 12),
                    (12, 5),
                ] {
                    let got = axis_taps(method, aa, m, n).dense(m);
                    let want = jax_dense(method, aa, m, n);
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (g - w).abs() < 1e-14,
                            "{method:?} aa {aa} {m}->{n}: {got:?} vs {want:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn nearest_indices() {
        assert_eq!(
            axis_taps(ResizeMethod::Nearest, true, 5, 3).start,
            [0, 2, 4]
        );
        assert_eq!(
            axis_taps(ResizeMethod::Nearest, true, 3, 7).start,
            [0, 0, 1, 1, 1, 2, 2]
        );
        assert_eq!(axis_taps(ResizeMethod::Nearest, true, 4, 2).start, [1, 3]);
    }
}
