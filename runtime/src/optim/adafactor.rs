//! `adafactor` (Optax `adafactor`: `scale_by_factored_rms`,
//! `clip_by_block_rms`, the learning rate, `scale_by_param_block_rms`).

use crate::dtype::scalar;
use std::sync::Arc;

use dfdx::prelude::{Axis, Dtype, HasShape, ReshapeTo, Storage, Tensor};
use dfdx::tensor_ops::{BroadcastTo, Device, SumTo, TryAdd, TryDiv, TryMul};

use super::saved::{load_count, load_counter, lookup, save_count, save_counter};
use super::{GradientTransformation, Leaf, LeafInfo, Params, Updates};
use crate::schedule::Schedule;
use crate::state::{HostTensor, StateDict, StateError, StateMap};

/// Adafactor as Optax's `adafactor(learning_rate, min_dim_size_to_factor=128,
/// decay_rate=0.8, decay_offset=0, multiply_by_parameter_scale=True,
/// clipping_threshold=1.0, momentum=None, eps=1e-30, factored=True)`, per
/// parameter tensor:
///
/// - the second-moment decay at step `t` (0 for the first update) is
///   `d = 1 - (t - decay_offset + 1)^(-decay_rate)`, computed in `f32`;
/// - a tensor with at least two dimensions of size
///   `>= min_dim_size_to_factor` keeps factored moments over its two largest
///   dimensions (`d0` the largest, `d1` the next): `v_row = d v_row + (1 -
///   d) mean_{d0}(g² + eps)`, `v_col` the same over `d1`, and `u = g *
///   (v_row / mean_{d1}(v_row))^(-1/2) * v_col^(-1/2)`; any other tensor
///   keeps `v = d v + (1 - d)(g² + eps)` and `u = g v^(-1/2)`;
/// - with a clipping threshold `c`, `u /= max(1, rms(u) / c)`;
/// - `u *= lr`, then with `multiply_by_parameter_scale`
///   `u *= max(rms(p), 1e-3)`; `updates = -u`.
///
/// `lr` is a constant or a [`Schedule`] evaluated at the update count. The
/// options without an equivalent here are Optax's `momentum` (default
/// `None`), `weight_decay_rate` (chain [`add_decayed_weights`](super::add_decayed_weights)
/// instead) and a missing learning rate. The update is dfdx tensor ops
/// on any device; norms and means stay on the device.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::optim::*;
///
/// let dev: Cpu = Default::default();
/// let mut model = dev.build_module::<Linear<3, 2>, f32>();
/// let tx = adafactor(1e-2).min_dim_size_to_factor(2);
/// let mut state = tx.init_model(&model).unwrap();
/// let x: Tensor<Rank2<4, 3>, f32, _> = dev.sample_normal();
/// let grads = model.forward(x.leaky_trace()).square().mean().backward();
/// tx.apply_model(&mut state, grads, &mut model).unwrap();
/// assert_eq!(state.count(), 1);
/// ```
pub fn adafactor<L: Schedule>(learning_rate: L) -> Adafactor<L> {
    Adafactor {
        learning_rate,
        min_dim_size_to_factor: 128,
        decay_rate: 0.8,
        decay_offset: 0,
        multiply_by_parameter_scale: true,
        clipping_threshold: Some(1.0),
        eps: 1e-30,
        factored: true,
    }
}

/// The transformation built by [`adafactor`].
///
/// ```
/// let tx: flaxen_runtime::optim::Adafactor<f64> = flaxen_runtime::optim::adafactor(1e-2);
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct Adafactor<L> {
    learning_rate: L,
    min_dim_size_to_factor: usize,
    decay_rate: f64,
    decay_offset: u64,
    multiply_by_parameter_scale: bool,
    clipping_threshold: Option<f64>,
    eps: f64,
    factored: bool,
}

impl<L> Adafactor<L> {
    /// Factors a tensor's second moment only when its two largest
    /// dimensions are at least this size (default 128).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adafactor;
    /// let tx = adafactor(1e-2).min_dim_size_to_factor(32);
    /// # let _ = tx;
    /// ```
    pub fn min_dim_size_to_factor(mut self, size: usize) -> Self {
        self.min_dim_size_to_factor = size;
        self
    }
    /// The exponent of the second-moment decay schedule (default 0.8).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adafactor;
    /// let tx = adafactor(1e-2).decay_rate(0.5);
    /// # let _ = tx;
    /// ```
    pub fn decay_rate(mut self, decay_rate: f64) -> Self {
        self.decay_rate = decay_rate;
        self
    }
    /// Subtracted from the step in the decay schedule, for fine-tuning
    /// (default 0).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adafactor;
    /// let tx = adafactor(1e-2).decay_offset(1000);
    /// # let _ = tx;
    /// ```
    pub fn decay_offset(mut self, offset: u64) -> Self {
        self.decay_offset = offset;
        self
    }
    /// Scales each update by the root mean square of its parameter, at
    /// least 1e-3 (default `true`).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adafactor;
    /// let tx = adafactor(1e-2).multiply_by_parameter_scale(false);
    /// # let _ = tx;
    /// ```
    pub fn multiply_by_parameter_scale(mut self, on: bool) -> Self {
        self.multiply_by_parameter_scale = on;
        self
    }
    /// Clips each tensor's update to this root mean square (default
    /// `Some(1.0)`; `None` does not clip).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adafactor;
    /// let tx = adafactor(1e-2).clipping_threshold(None);
    /// # let _ = tx;
    /// ```
    pub fn clipping_threshold(mut self, threshold: Option<f64>) -> Self {
        self.clipping_threshold = threshold;
        self
    }
    /// Added to the squared gradient (default 1e-30).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adafactor;
    /// let tx = adafactor(1e-2).eps(1e-20);
    /// # let _ = tx;
    /// ```
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
    /// Whether second moments may be factored at all (default `true`).
    ///
    /// ```
    /// # use flaxen_runtime::optim::adafactor;
    /// let tx = adafactor(1e-2).factored(false);
    /// # let _ = tx;
    /// ```
    pub fn factored(mut self, on: bool) -> Self {
        self.factored = on;
        self
    }

    /// Optax's `_factored_dims`: `(d1, d0)`, the second largest and the
    /// largest dimension (a stable sort of the sizes), when factored.
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

/// The second moments of one tensor.
#[derive(Debug, Clone)]
enum Moments<E, D: Storage<E>> {
    /// Over the largest dimension removed (`v_row`) and over the second
    /// largest removed (`v_col`), flat.
    Factored {
        d1: usize,
        d0: usize,
        v_row: Leaf<E, D>,
        v_col: Leaf<E, D>,
    },
    /// One per element.
    Full(Leaf<E, D>),
}

/// State of [`Adafactor`] (Optax's `FactoredState`): the update count and
/// each tensor's second moments, saved as `{prefix}count`,
/// `{prefix}v_row.<leaf>` and `{prefix}v_col.<leaf>` (factored tensors:
/// the shape without the largest, resp. the second largest dimension) or
/// `{prefix}v.<leaf>` (the others).
///
/// ```
/// # use flaxen_runtime::dfdx::prelude::*;
/// # use flaxen_runtime::optim::*;
/// # use flaxen_runtime::state::{StateDict, StateMap};
/// # let dev: Cpu = Default::default();
/// let model = dev.build_module::<Linear<2, 3>, f32>();
/// let state = adafactor(1e-2).min_dim_size_to_factor(2).init_model(&model).unwrap();
/// let mut saved = StateMap::new();
/// state.save_state("", &mut saved);
/// assert_eq!(saved["v_row.weight"].shape, [2]);
/// assert_eq!(saved["v_col.weight"].shape, [3]);
/// assert_eq!(saved["v.bias"].shape, [3]);
/// assert_eq!(state.count(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct AdafactorState<E, D: Storage<E>> {
    count: u64,
    moments: Vec<Moments<E, D>>,
    info: Arc<LeafInfo>,
}

impl<E, D: Storage<E>> AdafactorState<E, D> {
    /// Number of updates done so far.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::optim::*;
    /// # let dev: Cpu = Default::default();
    /// let model = dev.build_module::<Linear<2, 2>, f32>();
    /// assert_eq!(adafactor(1e-2).init_model(&model).unwrap().count(), 0);
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }
}

/// `shape` without dimension `d`.
fn without(shape: &[usize], d: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s.remove(d);
    s
}

type Five = (usize, usize, usize, usize, usize);
type Four = (usize, usize, usize, usize);
type Three = (usize, usize, usize);

/// `shape` as `(A, P, B, Q, C)` around dimensions `p < q`.
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

/// Mean over axis 1 or 3 of a 5-D tensor.
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

/// Broadcasts a 4-D tensor back along axis 1 or 3 of `shape`.
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

/// Mean over axis 1 or 2 of a 4-D tensor, broadcast back.
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

/// Root mean square of a leaf, as a device scalar.
fn rms<E: Dtype, D: Device<E>>(x: &Leaf<E, D>) -> Result<Tensor<(), E, D>, D::Err> {
    let n = E::from_usize(x.shape().0).unwrap_or_default();
    x.clone().try_square()?.try_sum()?.try_div(n)?.try_sqrt()
}

impl<E: Dtype, D: Device<E>, L: Schedule> GradientTransformation<E, D> for Adafactor<L> {
    fn learning_rate(&self, state: &Self::State) -> Option<f64> {
        Some(self.learning_rate.value(state.count.saturating_sub(1)))
    }

    type State = AdafactorState<E, D>;

    fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
        let mut moments = Vec::new();
        for (p, shape) in params.leaves().iter().zip(&params.info().shapes) {
            let dev = p.device();
            moments.push(match self.factored_dims(shape) {
                Some((d1, d0)) => Moments::Factored {
                    d1,
                    d0,
                    v_row: dev.try_zeros_like(&(without(shape, d0).iter().product(),))?,
                    v_col: dev.try_zeros_like(&(without(shape, d1).iter().product(),))?,
                },
                None => Moments::Full(dev.try_zeros_like(p.shape())?),
            });
        }
        Ok(AdafactorState {
            count: 0,
            moments,
            info: params.info_arc(),
        })
    }

    fn update(
        &self,
        state: &mut Self::State,
        updates: &mut Updates<E, D>,
        params: &Params<E, D>,
    ) -> Result<(), D::Err> {
        let lr = self.learning_rate.value(state.count);
        // Optax's `_decay_rate_pow`, in f32 whatever the dtype.
        let t = (state.count as i64 - self.decay_offset as i64 + 1) as f32;
        let decay = 1.0f32 - t.powf(-(self.decay_rate as f32));
        let keep = 1.0f32 - decay;
        state.count += 1;
        let cast = scalar::<E>;
        let (decay, keep) = (cast(decay as f64), cast(keep as f64));
        for (i, moments) in state.moments.iter_mut().enumerate() {
            let g = updates.take(i, params)?;
            let p = &params.leaves()[i];
            let shape = &params.info().shapes[i];
            let g_sq = g.clone().try_square()?.try_add(cast(self.eps))?;
            let mut u = match moments {
                Moments::Factored {
                    d1,
                    d0,
                    v_row,
                    v_col,
                } => {
                    let (pp, qq) = ((*d0).min(*d1), (*d0).max(*d1));
                    let s5 = five(shape, pp, qq);
                    // Axes of d0 and d1 in the 5-D view.
                    let (a0, a1) = if *d0 == qq { (3, 1) } else { (1, 3) };
                    let g_sq = g_sq.try_reshape_like(&s5)?;
                    let row_mean = mean5(g_sq.clone(), a0)?;
                    let col_mean = mean5(g_sq, a1)?;
                    let row_shape = *row_mean.shape();
                    let col_shape = *col_mean.shape();
                    let row = v_row
                        .clone()
                        .try_reshape_like(&row_shape)?
                        .try_mul(decay)?
                        .try_add(row_mean.try_mul(keep)?)?;
                    let col = v_col
                        .clone()
                        .try_reshape_like(&col_shape)?
                        .try_mul(decay)?
                        .try_add(col_mean.try_mul(keep)?)?;
                    // d1's axis in v_row (d0 removed).
                    let r1 = if *d0 == qq { 1 } else { 2 };
                    let row_factor = row
                        .clone()
                        .try_div(mean4_keep(row.clone(), r1)?)?
                        .try_powf(-0.5)?;
                    let col_factor = col.clone().try_powf(-0.5)?;
                    let u = g
                        .try_reshape_like(&s5)?
                        .try_mul(bcast5(row_factor, a0, &s5)?)?
                        .try_mul(bcast5(col_factor, a1, &s5)?)?;
                    *v_row = row.try_reshape_like(&(v_row.shape().0,))?;
                    *v_col = col.try_reshape_like(&(v_col.shape().0,))?;
                    u.try_reshape_like(p.shape())?
                }
                Moments::Full(v) => {
                    let nv = v.clone().try_mul(decay)?.try_add(g_sq.try_mul(keep)?)?;
                    let u = g.try_mul(nv.clone().try_powf(-0.5)?)?;
                    *v = nv;
                    u
                }
            };
            if let Some(c) = self.clipping_threshold {
                let one = p.device().try_ones_like(&())?;
                let denom = rms(&u)?
                    .try_div(cast(c))?
                    .try_maximum(one)?
                    .try_broadcast_like(u.shape())?;
                u = u.try_div(denom)?;
            }
            u = u.try_mul(cast(lr))?;
            if self.multiply_by_parameter_scale {
                let floor = p.device().try_ones_like(&())?.try_mul(cast(1e-3))?;
                let scale = rms(p)?.try_maximum(floor)?.try_broadcast_like(u.shape())?;
                u = u.try_mul(scale)?;
            }
            updates.set(i, u.try_negate()?);
        }
        Ok(())
    }
}

impl<E: Dtype, D: Device<E>> StateDict<E> for AdafactorState<E, D> {
    fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
        save_count(format!("{prefix}count"), self.count, out);
        for (i, m) in self.moments.iter().enumerate() {
            let (name, shape) = (&self.info.names[i], &self.info.shapes[i]);
            let mut put = |key: &str, shape: Vec<usize>, t: &Leaf<E, D>| {
                out.insert(
                    format!("{prefix}{key}.{name}"),
                    HostTensor {
                        shape,
                        data: t.as_vec(),
                    },
                );
            };
            match m {
                Moments::Factored {
                    d1,
                    d0,
                    v_row,
                    v_col,
                } => {
                    put("v_row", without(shape, *d0), v_row);
                    put("v_col", without(shape, *d1), v_col);
                }
                Moments::Full(v) => put("v", shape.clone(), v),
            }
        }
    }

    fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
        let count = load_count(&format!("{prefix}count"), src)?;
        let mut fresh = self.moments.clone();
        for (i, m) in fresh.iter_mut().enumerate() {
            let (name, shape) = (&self.info.names[i], &self.info.shapes[i]);
            let get = |key: &str, shape: &[usize], t: &mut Leaf<E, D>| {
                let host = lookup(src, &format!("{prefix}{key}.{name}"), shape)?;
                *t = t.device().tensor_from_vec(host.data.clone(), *t.shape());
                Ok::<(), StateError>(())
            };
            match m {
                Moments::Factored {
                    d1,
                    d0,
                    v_row,
                    v_col,
                } => {
                    get("v_row", &without(shape, *d0), v_row)?;
                    get("v_col", &without(shape, *d1), v_col)?;
                }
                Moments::Full(v) => get("v", shape, v)?,
            }
        }
        (self.count, self.moments) = (count, fresh);
        Ok(())
    }

    fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
        save_counter(format!("{prefix}count"), self.count, out);
    }

    fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        self.count = load_counter(&format!("{prefix}count"), src)?;
        Ok(())
    }
}
