//! Support for the code that `#[compact]` generates.
//!
//! Users rarely name anything here directly: the macro implements [`Compact`]
//! for every model type and converts number literals with [`scalar`] (the
//! activations it calls are in [`crate::activations`]). The items are
//! public (and documented) because generated code in the user's crate must
//! reach them, and because [`Compact`] describes a model to generic code.

use dfdx::prelude::Dtype;
use dfdx::tensor::Storage;

/// What a `#[compact]` model type publishes about itself.
///
/// Every model's per-example input and output shapes and its parameter
/// count, as associated consts usable in const-generic arguments of concrete
/// types (`Const<{ <Block as Compact>::OUT_0 }>` is legal on stable Rust).
/// The macro instantiates nested models from their source, so it knows
/// their shapes itself; the consts describe a model to generic code.
///
/// Shapes are per example (the batch axis is not counted). Ranks are at most
/// 4; unused dimensions are `0`.
///
/// `#[compact]` implements it (see `flaxen::compact`); generic code can read
/// a model's shapes from it:
///
/// ```
/// use flaxen_runtime::compact::Compact;
///
/// /// `[c, h, w]` of an image model's input.
/// fn image_input<M: Compact>() -> Option<[usize; 3]> {
///     (M::IN_RANK == 3).then_some([M::IN_0, M::IN_1, M::IN_2])
/// }
/// ```
pub trait Compact {
    /// The built module (`MlpModule<E, D>` for `Mlp`).
    type Module<E: Dtype, D: Storage<E>>;
    /// Rank of the per-example input.
    const IN_RANK: usize;
    /// First input dimension.
    const IN_0: usize;
    /// Second input dimension (0 when absent).
    const IN_1: usize;
    /// Third input dimension (0 when absent).
    const IN_2: usize;
    /// Fourth input dimension (0 when absent).
    const IN_3: usize;
    /// Rank of the per-example output.
    const OUT_RANK: usize;
    /// First output dimension.
    const OUT_0: usize;
    /// Second output dimension (0 when absent).
    const OUT_1: usize;
    /// Third output dimension (0 when absent).
    const OUT_2: usize;
    /// Fourth output dimension (0 when absent).
    const OUT_3: usize;
    /// Number of trainable parameters, nested models included.
    const NUM_PARAMS: usize;
}

/// Fills a built model's tensors with the initialisers its source gives
/// (`Dense(10, kernel_init = zeros)`), nested models included.
///
/// `dev.build_module::<Model, E>()` calls it, so a built model starts as
/// its source says. dfdx's `reset_params` redraws every tensor with its
/// layer's default (Flax's default) initialiser; call
/// [`try_initialize`](Self::try_initialize) after it to apply the
/// source's again. A declared `param(..)` is redrawn with its own
/// initialiser by `reset_params` too.
///
/// ```
/// use flaxen_runtime::compact::Initialize;
///
/// /// Redraws every parameter as a freshly built model has it.
/// fn reinitialize<E, D, M>(model: &mut M) -> Result<(), D::Err>
/// where
///     E: dfdx::shapes::Dtype,
///     D: dfdx::tensor_ops::Device<E>,
///     M: dfdx::nn::ResetParams<E, D> + Initialize<E, D>,
/// {
///     model.try_reset_params()?;
///     model.try_initialize()
/// }
/// ```
pub trait Initialize<E: Dtype, D: dfdx::tensor_ops::Device<E>> {
    /// Applies the model's own initialisers; the others are untouched.
    fn try_initialize(&mut self) -> Result<(), D::Err>;
}

/// The floating-point types a compact model can be built with: the bounds
/// dfdx's own `Linear` puts on its dtype for initialisation.
pub trait ParamDtype: Dtype + num_traits::Float + rand_distr::uniform::SampleUniform {}

impl<E: Dtype + num_traits::Float + rand_distr::uniform::SampleUniform> ParamDtype for E {}

pub use crate::dtype::scalar;

/// `[batch]` copies of `index`: what `x[i]` in a model selects with, the
/// same element of every example.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::same_index;
///
/// let dev: Cpu = Default::default();
/// let i = same_index(&dev, 3usize, 2).unwrap();
/// assert_eq!(i.as_vec(), [2, 2, 2]);
/// ```
#[doc(hidden)]
pub fn same_index<B: dfdx::shapes::Dim, D: dfdx::tensor::TensorFromVec<usize>>(
    dev: &D,
    batch: B,
    index: usize,
) -> Result<dfdx::tensor::Tensor<(B,), usize, D>, D::Err> {
    dev.try_tensor_from_vec(vec![index; batch.size()], (batch,))
}

/// A batch of `N` token ids per example, on tape `T`.
pub type TokenIds<B, const N: usize, D, T> =
    dfdx::tensor::Tensor<(B, dfdx::shapes::Const<N>), usize, D, T>;

/// Rows of token ids moved along the sequence, for `ids[a..b]` (`from =
/// a`) and `shift_right(ids)` (`shift`: a 0 in front, the last id
/// dropped): the ids are read on the host (a sequence of ids is small), the
/// tape passes on as it is.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::token_rows;
///
/// let dev: Cpu = Default::default();
/// let ids: Tensor<Rank2<1, 4>, usize, _> = dev.tensor([[5, 6, 7, 8]]);
/// let shifted = token_rows::<_, 4, 4, _, _>(ids.clone(), 0, true).unwrap();
/// assert_eq!(shifted.array(), [[0, 5, 6, 7]]);
/// let tail = token_rows::<_, 4, 2, _, _>(ids, 2, false).unwrap();
/// assert_eq!(tail.array(), [[7, 8]]);
/// ```
#[doc(hidden)]
pub fn token_rows<B, const N: usize, const M: usize, D, T>(
    ids: TokenIds<B, N, D, T>,
    from: usize,
    shift: bool,
) -> Result<TokenIds<B, M, D, T>, D::Err>
where
    B: dfdx::shapes::Dim,
    D: dfdx::tensor::TensorFromVec<usize>,
{
    use dfdx::shapes::HasShape;
    use dfdx::tensor::{PutTape, SplitTape};
    let (ids, tape) = ids.split_tape();
    let b = ids.shape().0;
    let host = ids.as_vec();
    let mut out = Vec::with_capacity(b.size() * M);
    for row in host.chunks(N) {
        out.extend((0..M).map(|k| match shift {
            true if k == 0 => 0,
            true => row[k - 1],
            false => row[from + k],
        }));
    }
    let moved = ids
        .device()
        .try_tensor_from_vec(out, (b, dfdx::shapes::Const::<M>))?;
    Ok(moved.put_tape(tape))
}

/// A batch of `[S, F]` sequences of features, on tape `T`.
pub type Sequence<B, const S: usize, const F: usize, E, D, T> =
    dfdx::tensor::Tensor<(B, dfdx::shapes::Const<S>, dfdx::shapes::Const<F>), E, D, T>;

/// The fixed sinusoidal position table of Flax's lm1b / wmt examples
/// (`sinusoidal_init(max_len)(None, (1, max_len, f), None)[:, :s, :]`),
/// in the shape of `x` (`[batch, s, f]`, each example the same rows),
/// carrying `x`'s tape. Row `p`, column `i < f / 2`: `sin(p * w_i)`, column
/// `f / 2 + i`: `cos(p * w_i)`, `w_i = min_scale * exp(-i * ln(max_scale /
/// min_scale) / (f / 2 - 1))`, computed in f64 (as NumPy does) then cast;
/// an odd last column is 0.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::sinusoidal_like;
///
/// let dev: Cpu = Default::default();
/// let x: Tensor<Rank3<1, 3, 4>, f64, _> = dev.zeros();
/// let t = sinusoidal_like(x, 1.0, 10000.0).unwrap().array();
/// assert_eq!(t[0][0], [0.0, 0.0, 1.0, 1.0]); // position 0: sin 0, cos 0
/// // Flax stores the table in float32, whatever the dtype: so does flaxen.
/// assert_eq!(t[0][2][0], f64::from(2f64.sin() as f32));
/// ```
pub fn sinusoidal_like<B, const S: usize, const F: usize, E, D, T>(
    x: Sequence<B, S, F, E, D, T>,
    min_scale: f64,
    max_scale: f64,
) -> Result<Sequence<B, S, F, E, D, T>, D::Err>
where
    B: dfdx::shapes::Dim,
    E: Dtype,
    D: dfdx::tensor_ops::Device<E>,
    T: dfdx::tensor::Tape<E, D>,
{
    use dfdx::shapes::{Const, HasShape};
    use dfdx::tensor::{PutTape, SplitTape};
    use dfdx::tensor_ops::BroadcastTo;
    let (x, tape) = x.split_tape();
    let b = x.shape().0;
    let half = F / 2;
    let scale = -(max_scale / min_scale).ln() / (half as f64 - 1.0);
    let mut table = vec![scalar::<E>(0.0); S * F];
    for p in 0..S {
        for i in 0..half {
            let v = p as f64 * (min_scale * (i as f64 * scale).exp());
            // Flax's table is float64 maths stored in a float32 NumPy
            // array, in every dtype: the same rounding here.
            table[p * F + i] = scalar::<E>(f64::from(v.sin() as f32));
            table[p * F + half + i] = scalar::<E>(f64::from(v.cos() as f32));
        }
    }
    let table = x
        .device()
        .try_tensor_from_vec(table, (Const::<S>, Const::<F>))?;
    let rows =
        table.try_broadcast_like::<_, dfdx::shapes::Axis<0>>(&(b, Const::<S>, Const::<F>))?;
    Ok(rows.put_tape(tape))
}

/// `[batch, N]` rows on the tape `T`.
pub type Row<B, const N: usize, E, D, T> =
    dfdx::tensor::Tensor<(B, dfdx::shapes::Const<N>), E, D, T>;

/// `[batch, N]` copies of the row `start, start + 1, .., start + N - 1`:
/// what `arange(start, stop)` in a model is, on the tape `T` (without
/// gradient).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::arange;
///
/// let dev: Cpu = Default::default();
/// let r = arange::<_, 3, f32, Cpu, NoneTape>(&dev, Const::<2>, 1.0).unwrap();
/// assert_eq!(r.array(), [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]);
/// ```
pub fn arange<B, const N: usize, E, D, T>(
    dev: &D,
    batch: B,
    start: f64,
) -> Result<Row<B, N, E, D, T>, D::Err>
where
    B: dfdx::shapes::Dim,
    E: Dtype,
    D: dfdx::tensor_ops::Device<E>,
    T: dfdx::tensor::Tape<E, D>,
{
    use dfdx::shapes::Const;
    use dfdx::tensor::PutTape;
    use dfdx::tensor_ops::BroadcastTo;
    let row: Vec<E> = (0..N).map(|k| scalar::<E>(start + k as f64)).collect();
    let row = dev.try_tensor_from_vec(row, (Const::<N>,))?;
    let rows = row.try_broadcast_like::<_, dfdx::shapes::Axis<0>>(&(batch, Const::<N>))?;
    Ok(rows.put_tape(T::default()))
}

/// `random.normal(shape)`: standard normal draws of the batched `shape`
/// from the device's seeded generator (drawn in f64, then rounded to the
/// dtype), a constant (no gradient) on the tape `T`, so that arithmetic
/// with taped values keeps their gradients (a VAE's `mean + eps *
/// exp(0.5 * logvar)`). Each call draws afresh, in `forward` and
/// `forward_mut` alike, as JAX draws whenever it is given a key; a device
/// seeded the same way draws the same values.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::draw_normal;
///
/// let draw = |seed| {
///     let dev = Cpu::seed_from_u64(seed);
///     draw_normal::<_, f32, _, NoneTape>(&dev, (Const::<2>, Const::<3>)).unwrap().array()
/// };
/// assert_eq!(draw(7), draw(7));
/// assert_ne!(draw(7), draw(8));
/// ```
pub fn draw_normal<S, E, D, T>(
    dev: &D,
    shape: S,
) -> Result<dfdx::tensor::Tensor<S, E, D, T>, D::Err>
where
    S: dfdx::shapes::Shape,
    E: Dtype,
    D: dfdx::tensor_ops::Device<E>,
    T: dfdx::tensor::Tape<E, D>,
{
    draw(dev, shape, crate::init::Draw::Normal(1.0))
}

/// `random.uniform(shape, minval, maxval)`: uniform draws in `[minval,
/// maxval)`, as [`draw_normal`] draws.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::draw_uniform;
///
/// let dev = Cpu::seed_from_u64(1);
/// let u = draw_uniform::<_, f64, _, NoneTape>(&dev, (Const::<4>, Const::<50>), -2.0, 3.0).unwrap();
/// assert!(u.as_vec().iter().all(|v| (-2.0..3.0).contains(v)));
/// ```
pub fn draw_uniform<S, E, D, T>(
    dev: &D,
    shape: S,
    minval: f64,
    maxval: f64,
) -> Result<dfdx::tensor::Tensor<S, E, D, T>, D::Err>
where
    S: dfdx::shapes::Shape,
    E: Dtype,
    D: dfdx::tensor_ops::Device<E>,
    T: dfdx::tensor::Tape<E, D>,
{
    draw(dev, shape, crate::init::Draw::Uniform(minval, maxval))
}

fn draw<S, E, D, T>(
    dev: &D,
    shape: S,
    d: crate::init::Draw,
) -> Result<dfdx::tensor::Tensor<S, E, D, T>, D::Err>
where
    S: dfdx::shapes::Shape,
    E: Dtype,
    D: dfdx::tensor_ops::Device<E>,
    T: dfdx::tensor::Tape<E, D>,
{
    use dfdx::tensor::PutTape;
    Ok(dev.try_sample_like(&shape, d)?.put_tape(T::default()))
}

/// `random.bernoulli(p, shape)`: a mask, true with probability `p` (JAX's
/// `uniform(key, shape) < p`), drawn as [`draw_normal`] draws.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::draw_bernoulli;
///
/// let dev = Cpu::seed_from_u64(2);
/// let m = draw_bernoulli::<_, f32, _>(&dev, (Const::<100>, Const::<100>), 0.3).unwrap();
/// let hits = m.as_vec().iter().filter(|b| **b).count();
/// assert!((2700..3300).contains(&hits));
/// ```
pub fn draw_bernoulli<S, E, D>(
    dev: &D,
    shape: S,
    p: f64,
) -> Result<dfdx::tensor::Tensor<S, bool, D>, D::Err>
where
    S: dfdx::shapes::Shape,
    E: Dtype,
    D: dfdx::tensor_ops::Device<E>,
{
    use dfdx::tensor_ops::TryLt;
    let u: dfdx::tensor::Tensor<S, E, D> = draw(dev, shape, crate::init::Draw::Uniform(0.0, 1.0))?;
    u.try_lt(scalar::<E>(p))
}

/// A batch of `[V, F]` embedding tables: an `Embed` of a calling model
/// passed to a nested one (wmt's shared embedding), broadcast over the
/// batch.
pub type Tables<B, const V: usize, const F: usize, E, D, T> =
    dfdx::tensor::Tensor<(B, dfdx::shapes::Const<V>, dfdx::shapes::Const<F>), E, D, T>;

/// `embed(ids)` for an `Embed` passed in as its table: row `ids[b, s]` of
/// `table[b]`, the gradient flowing back into the table (and through its
/// broadcast into the caller's parameter).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::table_lookup;
///
/// let dev: Cpu = Default::default();
/// let table: Tensor<Rank3<1, 3, 2>, f32, _> = dev.tensor([[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]]);
/// let ids: Tensor<Rank2<1, 2>, usize, _> = dev.tensor([[2, 0]]);
/// assert_eq!(table_lookup(table, ids).unwrap().array(), [[[4.0, 5.0], [0.0, 1.0]]]);
/// ```
pub fn table_lookup<B, const V: usize, const F: usize, const S: usize, E, D, T>(
    table: Tables<B, V, F, E, D, T>,
    ids: TokenIds<B, S, D, T>,
) -> Result<Sequence<B, S, F, E, D, T>, D::Err>
where
    B: dfdx::shapes::Dim,
    E: Dtype,
    D: dfdx::tensor_ops::Device<E>,
    T: dfdx::tensor::Tape<E, D>,
{
    use dfdx::tensor::{PutTape, SplitTape};
    use dfdx::tensor_ops::GatherTo;
    let (ids, it) = ids.split_tape();
    let (table, tt) = table.split_tape();
    table.put_tape(tt.merge(it)).try_gather(ids)
}

/// `embed.attend(x)` for an `Embed` passed in as its table: `x @
/// table[b].T` for each example.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::compact::table_attend;
///
/// let dev: Cpu = Default::default();
/// let table: Tensor<Rank3<1, 3, 2>, f32, _> = dev.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]);
/// let x: Tensor<Rank3<1, 1, 2>, f32, _> = dev.tensor([[[2.0, 3.0]]]);
/// assert_eq!(table_attend(x, table).unwrap().array(), [[[2.0, 3.0, 5.0]]]);
/// ```
pub fn table_attend<B, const V: usize, const F: usize, const S: usize, E, D, T>(
    x: Sequence<B, S, F, E, D, T>,
    table: Tables<B, V, F, E, D, T>,
) -> Result<Sequence<B, S, V, E, D, T>, D::Err>
where
    B: dfdx::shapes::Dim,
    E: Dtype,
    D: dfdx::tensor_ops::Device<E>,
    T: dfdx::tensor::Tape<E, D>,
{
    use dfdx::tensor_ops::{PermuteTo, TryMatMul};
    x.try_matmul(table.try_permute::<_, dfdx::shapes::Axes3<0, 2, 1>>()?)
}
