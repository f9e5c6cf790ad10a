//! `scale_by_factored_rms` (Optax; Adafactor's direction).

use dfdx::prelude::{Axis, Dtype, HasShape, ReshapeTo, Tensor};
use dfdx::tensor_ops::{BroadcastTo, Device, SumTo, TryAdd, TryDiv, TryMul};

use crate::dtype::scalar;
use crate::optim::alias::{Primitive, Step};
use crate::optim::state::Bufs;
use crate::optim::Params;

/// Optax's `scale_by_factored_rms(factored=True, decay_rate=0.8,
/// step_offset=0, min_dim_size_to_factor=128, epsilon=1e-30)`, per
/// parameter tensor:
///
/// - the second-moment decay at step `t` (0 for the first update) is
///   `d = 1 - (t - decay_offset + 1)^(-decay_rate)`, computed in `f32`;
/// - a tensor with at least two dimensions of size
///   `>= min_dim_size_to_factor` keeps factored moments over its two largest
///   dimensions (`d0` the largest, `d1` the next): `v_row = d v_row + (1 -
///   d) mean_{d0}(g² + eps)`, `v_col` the same over `d1`, and `u = g *
///   (v_row / mean_{d1}(v_row))^(-1/2) * v_col^(-1/2)`; any other tensor
///   keeps `v = d v + (1 - d)(g² + eps)` and `u = g v^(-1/2)`.
///
/// dfdx tensor ops on any device. State: `count`, and per leaf
/// `v_row.<leaf>` and `v_col.<leaf>` (the leaf's shape without `d0`,
/// without `d1`) or `v.<leaf>`.
///
/// ```
/// let p = flaxen_runtime::optim::scale_by_factored_rms().min_dim_size_to_factor(32);
/// # let _ = p;
/// ```
pub fn scale_by_factored_rms() -> ScaleByFactoredRms {
    ScaleByFactoredRms {
        factored: true,
        decay_rate: 0.8,
        decay_offset: 0,
        min_dim_size_to_factor: 128,
        eps: 1e-30,
    }
}

/// The primitive built by [`scale_by_factored_rms`].
///
/// ```
/// let p: flaxen_runtime::optim::ScaleByFactoredRms = flaxen_runtime::optim::scale_by_factored_rms();
/// # let _ = p;
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ScaleByFactoredRms {
    pub(crate) factored: bool,
    pub(crate) decay_rate: f64,
    pub(crate) decay_offset: u64,
    pub(crate) min_dim_size_to_factor: usize,
    pub(crate) eps: f64,
}

crate::optim::builders! { impl[] ScaleByFactoredRms {
    /// Factors a tensor's second moment only when its two largest
    /// dimensions are at least this size (default 128).
    min_dim_size_to_factor: usize => [min_dim_size_to_factor];
    /// The exponent of the second-moment decay schedule (default 0.8).
    decay_rate: f64 => [decay_rate];
    /// Subtracted from the step in the decay schedule, for fine-tuning
    /// (default 0).
    decay_offset: u64 => [decay_offset];
    /// Added to the squared gradient (default 1e-30).
    eps: f64 => [eps];
    /// Whether to factor at all (default `true`).
    factored: bool => [factored];
}}

impl ScaleByFactoredRms {
    /// The two largest dimensions `(d1, d0)` of a factored tensor.
    fn factored_dims(&self, shape: &[usize]) -> Option<(usize, usize)> {
        if !self.factored || shape.len() < 2 {
            return None;
        }
        let mut idx: Vec<usize> = (0..shape.len()).collect();
        idx.sort_by_key(|&i| shape[i]);
        let (d1, d0) = (idx[idx.len() - 2], idx[idx.len() - 1]);
        (shape[d1] >= self.min_dim_size_to_factor).then_some((d1, d0))
    }
}

fn without(shape: &[usize], d: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s.remove(d);
    s
}

type Five = (usize, usize, usize, usize, usize);
type Four = (usize, usize, usize, usize);
type Three = (usize, usize, usize);

/// A shape as `[before p, p, between, q, after q]`.
fn five(shape: &[usize], p: usize, q: usize) -> Five {
    let prod = |s: &[usize]| s.iter().product::<usize>();
    (
        prod(&shape[..p]),
        shape[p],
        prod(&shape[p + 1..q]),
        shape[q],
        prod(&shape[q + 1..]),
    )
}

fn mean5<E: Dtype, D: Device<E>>(
    x: Tensor<Five, E, D>,
    axis: usize,
) -> Result<Tensor<Four, E, D>, D::Err> {
    let (_, p, _, q, _) = *x.shape();
    let (n, out) = if axis == 1 {
        (p, x.try_sum::<Four, Axis<1>>()?)
    } else {
        (q, x.try_sum::<Four, Axis<3>>()?)
    };
    out.try_div(E::from_usize(n).unwrap_or_default())
}

fn bcast5<E: Dtype, D: Device<E>>(
    x: Tensor<Four, E, D>,
    axis: usize,
    shape: &Five,
) -> Result<Tensor<Five, E, D>, D::Err> {
    if axis == 1 {
        x.try_broadcast_like::<Five, Axis<1>>(shape)
    } else {
        x.try_broadcast_like::<Five, Axis<3>>(shape)
    }
}

fn mean4_keep<E: Dtype, D: Device<E>>(
    x: Tensor<Four, E, D>,
    axis: usize,
) -> Result<Tensor<Four, E, D>, D::Err> {
    let shape = *x.shape();
    if axis == 1 {
        let n = E::from_usize(shape.1).unwrap_or_default();
        x.try_sum::<Three, Axis<1>>()?
            .try_div(n)?
            .try_broadcast_like::<Four, Axis<1>>(&shape)
    } else {
        let n = E::from_usize(shape.2).unwrap_or_default();
        x.try_sum::<Three, Axis<2>>()?
            .try_div(n)?
            .try_broadcast_like::<Four, Axis<2>>(&shape)
    }
}

impl<E: Dtype, D: Device<E>> Primitive<E, D> for ScaleByFactoredRms {
    fn init(&self, params: &Params<E, D>) -> Result<Bufs<E, D>, D::Err> {
        let (mut rows, mut cols, mut full) = (Vec::new(), Vec::new(), Vec::new());
        for (p, shape) in params.leaves().iter().zip(&params.info().shapes) {
            let dev = p.device();
            let zeros = |s: Vec<usize>| {
                dev.try_zeros_like(&(s.iter().product::<usize>(),))
                    .map(|t| Some((t, s)))
            };
            match self.factored_dims(shape) {
                Some((d1, d0)) => {
                    rows.push(zeros(without(shape, d0))?);
                    cols.push(zeros(without(shape, d1))?);
                    full.push(None);
                }
                None => {
                    rows.push(None);
                    cols.push(None);
                    full.push(zeros(shape.clone())?);
                }
            }
        }
        Ok(Bufs::default()
            .with_tensors("v_row", rows)
            .with_tensors("v_col", cols)
            .with_tensors("v", full))
    }

    fn counted(&self) -> bool {
        true
    }

    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (at, state, updates, params) = step.parts();
        // Optax's `_decay_rate_pow`, in f32 whatever the dtype.
        let t = (at.count as i64 - self.decay_offset as i64 + 1) as f32;
        let decay = 1.0f32 - t.powf(-(self.decay_rate as f32));
        let keep = 1.0f32 - decay;
        let cast = scalar::<E>;
        let (decay, keep) = (cast(decay as f64), cast(keep as f64));
        let bufs = state.part(at.k);
        for i in 0..params.len() {
            let g = updates.take(i, params)?;
            let p = &params.leaves()[i];
            let shape = &params.info().shapes[i];
            let g_sq = g.clone().try_square()?.try_add(cast(self.eps))?;
            let u = match self.factored_dims(shape) {
                Some((d1, d0)) => {
                    let (pp, qq) = (d0.min(d1), d0.max(d1));
                    let s5 = five(shape, pp, qq);
                    // Axes of d0 and d1 in the 5-D view.
                    let (a0, a1) = if d0 == qq { (3, 1) } else { (1, 3) };
                    let g_sq = g_sq.try_reshape_like(&s5)?;
                    let row_mean = mean5(g_sq.clone(), a0)?;
                    let col_mean = mean5(g_sq, a1)?;
                    let (row_shape, col_shape) = (*row_mean.shape(), *col_mean.shape());
                    let v_row = bufs.tensor(0, i).expect("a factored leaf has v_row");
                    let row = v_row
                        .clone()
                        .try_reshape_like(&row_shape)?
                        .try_mul(decay)?
                        .try_add(row_mean.try_mul(keep)?)?;
                    *v_row = row.clone().try_reshape_like(&(v_row.shape().0,))?;
                    let v_col = bufs.tensor(1, i).expect("a factored leaf has v_col");
                    let col = v_col
                        .clone()
                        .try_reshape_like(&col_shape)?
                        .try_mul(decay)?
                        .try_add(col_mean.try_mul(keep)?)?;
                    *v_col = col.clone().try_reshape_like(&(v_col.shape().0,))?;
                    // d1's axis in v_row (d0 removed).
                    let r1 = if d0 == qq { 1 } else { 2 };
                    let row_factor = row.clone().try_div(mean4_keep(row, r1)?)?.try_powf(-0.5)?;
                    let col_factor = col.try_powf(-0.5)?;
                    g.try_reshape_like(&s5)?
                        .try_mul(bcast5(row_factor, a0, &s5)?)?
                        .try_mul(bcast5(col_factor, a1, &s5)?)?
                        .try_reshape_like(p.shape())?
                }
                None => {
                    let v = bufs.tensor(2, i).expect("an unfactored leaf has v");
                    *v = v.clone().try_mul(decay)?.try_add(g_sq.try_mul(keep)?)?;
                    g.try_mul(v.clone().try_powf(-0.5)?)?
                }
            };
            updates.set(i, u);
        }
        Ok(())
    }
}
