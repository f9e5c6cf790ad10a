//! Flax's initialisers (`flax.linen.initializers`, which are JAX's
//! `jax.nn.initializers`), as values that fill a tensor.
//!
//! `#[compact]` models name them in `kernel_init = xavier_uniform()`,
//! `bias_init = constant(0.1)`, `embedding_init = normal(stddev = 1.0)` and
//! `param("cls", zeros, (1, 1, c))`; the generated code calls
//! [`Init::try_fill`] with the [`Fans`] Flax computes for that tensor's
//! kernel layout. The distributions are Flax's:
//!
//! | initialiser | draw |
//! | --- | --- |
//! | `zeros`, `ones`, `constant(v)` | that value |
//! | `normal(stddev = 0.01)` | `N(0, stddev²)` |
//! | `uniform(scale = 0.01)` | `U[0, scale)` |
//! | `truncated_normal(stddev = 0.01, lower = -2, upper = 2)` | `stddev · z`, `z` a standard normal truncated to `[lower, upper]` |
//! | `variance_scaling(scale, mode, distribution)` | variance `scale / fan` (`fan_in`, `fan_out`, `fan_avg` or `fan_geo_avg`): `"truncated_normal"` is a standard normal truncated to `[-2, 2]` times `sqrt(variance) / 0.8796…` (the truncated normal's std), `"normal"` is `N(0, variance)`, `"uniform"` is `U(-sqrt(3 variance), sqrt(3 variance))` |
//! | `lecun_normal()`, `lecun_uniform()` | `variance_scaling(1, "fan_in", "truncated_normal" / "uniform")` |
//! | `xavier_normal()`, `xavier_uniform()` (`glorot_`) | `variance_scaling(1, "fan_avg", ..)` |
//! | `he_normal()`, `he_uniform()` (`kaiming_`) | `variance_scaling(2, "fan_in", ..)` |
//! | `orthogonal(scale = 1)` | a Haar-distributed matrix with orthonormal columns (or rows, whichever side is shorter) times `scale` |
//!
//! Draws come from the device's seeded generator (as every dfdx init
//! does), so they are reproducible per seed but are not JAX's numbers:
//! a model is equal to Flax's in distribution, and equal in value once a
//! Flax checkpoint is loaded.
//!
//! ```
//! use dfdx::prelude::*;
//! use flaxen_runtime::init::{Fans, Init};
//!
//! let dev: Cpu = Default::default();
//! let mut w: Tensor<Rank2<64, 32>, f32, _> = dev.zeros();
//! Init::xavier_uniform().try_fill(&mut w, Fans::new(32, 64)).unwrap();
//! let limit = (6.0f32 / (32.0 + 64.0)).sqrt();
//! assert!(w.as_vec().iter().all(|v| v.abs() <= limit));
//! ```

use crate::dtype::scalar;
use dfdx::prelude::*;
use rand::Rng;
use rand_distr::{Distribution, Exp1, StandardNormal};

/// The standard deviation of a standard normal truncated to `[-2, 2]`,
/// JAX's constant for `variance_scaling(.., "truncated_normal")`.
pub const TRUNCATED_STD: f64 = 0.879_625_661_034_239_8;

/// Which fan a [`Init::VarianceScaling`] divides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanMode {
    /// `"fan_in"`
    In,
    /// `"fan_out"`
    Out,
    /// `"fan_avg"`: `(fan_in + fan_out) / 2`
    Avg,
    /// `"fan_geo_avg"`: `sqrt(fan_in * fan_out)`
    GeoAvg,
}

/// What a [`Init::VarianceScaling`] draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanDistribution {
    /// `"truncated_normal"`: truncated to two standard deviations, rescaled
    /// to the variance asked for.
    TruncatedNormal,
    /// `"normal"`, untruncated.
    Normal,
    /// `"uniform"`
    Uniform,
}

/// One of Flax's initialisers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// `constant(value)` (`zeros` and `ones` too).
    Constant(f64),
    /// `normal(stddev)`
    Normal {
        /// The standard deviation.
        stddev: f64,
    },
    /// `uniform(scale)`: `[0, scale)`.
    Uniform {
        /// The upper end.
        scale: f64,
    },
    /// `truncated_normal(stddev, lower, upper)`: `stddev` times a standard
    /// normal truncated to `[lower, upper]`.
    TruncatedNormal {
        /// The scale of the standard normal.
        stddev: f64,
        /// The lower bound, in standard deviations.
        lower: f64,
        /// The upper bound, in standard deviations.
        upper: f64,
    },
    /// `variance_scaling(scale, mode, distribution)`.
    VarianceScaling {
        /// The variance's numerator.
        scale: f64,
        /// The fan it divides by.
        mode: FanMode,
        /// The distribution.
        distribution: FanDistribution,
    },
    /// `orthogonal(scale)`.
    Orthogonal {
        /// The multiplier.
        scale: f64,
    },
}

/// A tensor's fans, as Flax computes them from its kernel layout (a conv's
/// receptive field counts in both; attention's multi-axis kernels are
/// flattened to `(in, out)` first), and where its output axis is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fans {
    /// The inputs each output reads.
    pub fan_in: usize,
    /// The outputs each input feeds.
    pub fan_out: usize,
    /// Whether the stored tensor's first axis is the output one (dfdx's
    /// `(out, in)` kernels) rather than its last (Flax's layout): the
    /// matrix that `orthogonal` makes orthonormal.
    pub out_first: bool,
}

impl Fans {
    /// Fans of a kernel stored as Flax stores it, output axis last.
    pub fn new(fan_in: usize, fan_out: usize) -> Self {
        Self {
            fan_in,
            fan_out,
            out_first: false,
        }
    }

    /// Fans of a kernel stored output axis first (dfdx's `(out, in)`).
    pub fn out_first(fan_in: usize, fan_out: usize) -> Self {
        Self {
            fan_in,
            fan_out,
            out_first: true,
        }
    }
}

impl Init {
    /// `zeros`
    pub const ZEROS: Init = Init::Constant(0.0);
    /// `ones`
    pub const ONES: Init = Init::Constant(1.0);

    /// `lecun_normal()`
    pub fn lecun_normal() -> Self {
        Self::scaling(1.0, FanMode::In, FanDistribution::TruncatedNormal)
    }

    /// `xavier_uniform()` (`glorot_uniform()`)
    pub fn xavier_uniform() -> Self {
        Self::scaling(1.0, FanMode::Avg, FanDistribution::Uniform)
    }

    /// `variance_scaling(scale, mode, distribution)`.
    pub fn scaling(scale: f64, mode: FanMode, distribution: FanDistribution) -> Self {
        Init::VarianceScaling {
            scale,
            mode,
            distribution,
        }
    }

    /// Fills `t` (of the given fans) with a draw from the device's
    /// generator.
    pub fn try_fill<S: Shape, E: Dtype, D: Device<E>>(
        &self,
        t: &mut Tensor<S, E, D>,
        fans: Fans,
    ) -> Result<(), D::Err> {
        match *self {
            Init::Constant(v) => t.try_fill_with_distr(Draw::Constant(v)),
            Init::Normal { stddev } => t.try_fill_with_distr(Draw::Normal(stddev)),
            Init::Uniform { scale } => t.try_fill_with_distr(Draw::Uniform(0.0, scale)),
            Init::TruncatedNormal {
                stddev,
                lower,
                upper,
            } => t.try_fill_with_distr(Draw::Truncated(lower, upper, stddev)),
            Init::VarianceScaling {
                scale,
                mode,
                distribution,
            } => {
                let (i, o) = (fans.fan_in.max(1) as f64, fans.fan_out.max(1) as f64);
                let fan = match mode {
                    FanMode::In => i,
                    FanMode::Out => o,
                    FanMode::Avg => (i + o) / 2.0,
                    FanMode::GeoAvg => (i * o).sqrt(),
                };
                let variance = scale / fan;
                t.try_fill_with_distr(match distribution {
                    FanDistribution::TruncatedNormal => {
                        Draw::Truncated(-2.0, 2.0, variance.sqrt() / TRUNCATED_STD)
                    }
                    FanDistribution::Normal => Draw::Normal(variance.sqrt()),
                    FanDistribution::Uniform => {
                        let limit = (3.0 * variance).sqrt();
                        Draw::Uniform(-limit, limit)
                    }
                })
            }
            Init::Orthogonal { scale } => orthogonal(t, fans.out_first, scale),
        }
    }
}

/// One element's distribution.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Draw {
    Constant(f64),
    Normal(f64),
    /// `[lo, hi)`
    Uniform(f64, f64),
    /// A standard normal truncated to `[lo, hi]`, times the scale.
    Truncated(f64, f64, f64),
}

impl<E: Dtype> Distribution<E> for Draw {
    fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> E {
        scalar::<E>(match *self {
            Draw::Constant(v) => v,
            Draw::Normal(s) => s * Distribution::<f64>::sample(&StandardNormal, rng),
            Draw::Uniform(lo, hi) => lo + (hi - lo) * rng.gen::<f64>(),
            Draw::Truncated(lo, hi, s) => s * truncated(rng, lo, hi),
        })
    }
}

/// A standard normal truncated to `[lo, hi]` (`lo < hi`), by rejection
/// from whichever proposal accepts often for that interval: the normal
/// itself for a wide one around 0, a uniform over a narrow one, and
/// Robert's (1995) exponential one in a tail.
pub(crate) fn truncated<R: Rng + ?Sized>(rng: &mut R, lo: f64, hi: f64) -> f64 {
    // NaN ends, or an empty interval: its one end (the macro refuses it).
    if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
        return lo;
    }
    if lo <= 0.0 && hi >= 0.0 {
        if hi - lo >= 1.0 {
            loop {
                let z: f64 = StandardNormal.sample(rng);
                if (lo..=hi).contains(&z) {
                    return z;
                }
            }
        }
        // Narrow around 0: accept a uniform draw with the density's ratio
        // to its peak, at least exp(-1/2).
        loop {
            let z = lo + (hi - lo) * rng.gen::<f64>();
            if rng.gen::<f64>() <= (-z * z / 2.0).exp() {
                return z;
            }
        }
    }
    // A one-sided interval, mirrored to `0 < a < b`.
    let (a, b, sign) = if lo > 0.0 {
        (lo, hi, 1.0)
    } else {
        (-hi, -lo, -1.0)
    };
    let z = if (b - a) * (b + a) <= 2.0 {
        loop {
            let z = a + (b - a) * rng.gen::<f64>();
            if rng.gen::<f64>() <= ((a * a - z * z) / 2.0).exp() {
                break z;
            }
        }
    } else {
        let lambda = (a + (a * a + 4.0).sqrt()) / 2.0;
        loop {
            let e: f64 = Exp1.sample(rng);
            let z = a + e / lambda;
            if z <= b && rng.gen::<f64>() <= (-(z - lambda).powi(2) / 2.0).exp() {
                break z;
            }
        }
    };
    sign * z
}

/// JAX's `orthogonal(scale)`: the tensor as a matrix of its output axis
/// against the rest, with its shorter side orthonormal (Gram-Schmidt on a
/// standard normal draw, which is QR with a positive diagonal), times
/// `scale`. Transposing keeps the distribution, so the layout only decides
/// which axis stands apart.
fn orthogonal<S: Shape, E: Dtype, D: Device<E>>(
    t: &mut Tensor<S, E, D>,
    out_first: bool,
    scale: f64,
) -> Result<(), D::Err> {
    let dims = t.shape().concrete();
    let dims = dims.as_ref();
    let n = t.shape().num_elements();
    let (rows, cols) = match (dims.len(), out_first) {
        (0 | 1, _) => (1, n),
        (_, true) => (dims[0], n / dims[0].max(1)),
        (_, false) => (n / dims[dims.len() - 1].max(1), dims[dims.len() - 1]),
    };
    t.try_fill_with_distr(Draw::Normal(1.0))?;
    let a: Vec<f64> = t
        .as_vec()
        .iter()
        .map(|v| v.to_f64().unwrap_or(0.0))
        .collect();
    // The shorter side's vectors: rows when there are fewer rows.
    let (count, len) = (rows.min(cols), rows.max(cols));
    let at = |v: usize, k: usize| {
        if rows <= cols {
            v * cols + k
        } else {
            k * cols + v
        }
    };
    let mut q = vec![0.0f64; n];
    for v in 0..count {
        let mut x: Vec<f64> = (0..len).map(|k| a[at(v, k)]).collect();
        for u in 0..v {
            let dot: f64 = (0..len).map(|k| x[k] * q[at(u, k)]).sum();
            for k in 0..len {
                x[k] -= dot * q[at(u, k)];
            }
        }
        let norm = x.iter().map(|e| e * e).sum::<f64>().sqrt();
        for k in 0..len {
            // A draw in the span of the vectors before it has probability
            // 0; a unit vector keeps the result finite if it happens.
            q[at(v, k)] = if norm > 0.0 {
                x[k] / norm
            } else {
                f64::from(u8::from(k == v))
            };
        }
    }
    let q: Vec<E> = q.into_iter().map(|v| scalar::<E>(v * scale)).collect();
    t.copy_from(&q);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn moments(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        (
            m,
            (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt(),
        )
    }

    #[test]
    fn truncated_draws_stay_inside_their_bounds_whatever_the_interval() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        for (lo, hi) in [
            (-2.0, 2.0),
            (-0.1, 0.2),
            (1.0, 1.5),
            (3.0, 9.0),
            (-9.0, -4.0),
            (0.0, 0.01),
        ] {
            let v: Vec<f64> = (0..20000).map(|_| truncated(&mut rng, lo, hi)).collect();
            assert!(v.iter().all(|z| (lo..=hi).contains(z)), "[{lo}, {hi}]");
        }
        // [-2, 2]: JAX's constant is this distribution's std.
        let v: Vec<f64> = (0..400_000)
            .map(|_| truncated(&mut rng, -2.0, 2.0))
            .collect();
        let (m, s) = moments(&v);
        assert!(
            m.abs() < 0.005 && (s - TRUNCATED_STD).abs() < 0.003,
            "{m} {s}"
        );
        // The tail [3, 9]: mean φ(3)/(1-Φ(3)) = 3.2831.
        let v: Vec<f64> = (0..200_000)
            .map(|_| truncated(&mut rng, 3.0, 9.0))
            .collect();
        assert!((moments(&v).0 - 3.283_15).abs() < 0.005);
    }

    #[test]
    fn orthogonal_has_an_orthonormal_shorter_side() {
        let dev: Cpu = Default::default();
        let mut t: Tensor<Rank2<7, 4>, f64, _> = dev.zeros();
        Init::Orthogonal { scale: 2.0 }
            .try_fill(&mut t, Fans::new(7, 4))
            .unwrap();
        let a = t.array();
        for i in 0..4 {
            for j in 0..4 {
                let dot: f64 = (0..7).map(|k| a[k][i] * a[k][j]).sum();
                let want = if i == j { 4.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-12);
            }
        }
    }
}
