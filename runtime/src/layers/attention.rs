//! [`MultiHeadAttention`]: Flax linen's `MultiHeadDotProductAttention` and
//! its `SelfAttention`, with Flax's masking and attention dropout, as a
//! dfdx module.

use crate::dtype::scalar;
use dfdx::nn::{BuildModule, BuildOnDevice, Module, ModuleMut, ModuleVisitor};
use dfdx::prelude::*;

use super::{Dense, FlaxenDevice, UnbiasedDense};

/// The projections of an attention layer: [`Dense`] with biases
/// ([`Biased`], Flax's default) or [`UnbiasedDense`] without
/// ([`Unbiased`], Flax's `use_bias=False`).
pub trait Projections: 'static + Clone + Copy + std::fmt::Debug + Default {
    /// One projection, `I` features to `O`.
    type Dense<const I: usize, const O: usize, E: Dtype, D: Storage<E>>: Clone
        + std::fmt::Debug
        + Project<I, O, E, D>;
}

/// Projections with biases.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Biased;

/// Projections without biases (Flax's `use_bias=False`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Unbiased;

impl Projections for Biased {
    type Dense<const I: usize, const O: usize, E: Dtype, D: Storage<E>> = Dense<I, O, E, D>;
}

impl Projections for Unbiased {
    type Dense<const I: usize, const O: usize, E: Dtype, D: Storage<E>> = UnbiasedDense<I, O, E, D>;
}

/// `[batch, seq, F]` rows.
type Rows<B, S, const F: usize, E, D, T> = Tensor<(B, S, Const<F>), E, D, T>;

/// A projection of `[batch, seq, I]` to `[batch, seq, O]`.
pub trait Project<const I: usize, const O: usize, E: Dtype, D: Storage<E>> {
    /// Projects every row.
    fn project<B: Dim, S: Dim, T: Tape<E, D>>(
        &self,
        x: Tensor<(B, S, Const<I>), E, D, T>,
    ) -> Result<Rows<B, S, O, E, D, T>, D::Err>
    where
        D: FlaxenDevice<E>;
}

macro_rules! project {
    ($dense:ident) => {
        impl<const I: usize, const O: usize, E: Dtype, D: Storage<E>> Project<I, O, E, D>
            for $dense<I, O, E, D>
        {
            fn project<B: Dim, S: Dim, T: Tape<E, D>>(
                &self,
                x: Tensor<(B, S, Const<I>), E, D, T>,
            ) -> Result<Rows<B, S, O, E, D, T>, D::Err>
            where
                D: FlaxenDevice<E>,
            {
                self.try_forward(x)
            }
        }
    };
}
project!(Dense);
project!(UnbiasedDense);

/// Builders of the layers.
pub mod builder {
    /// Builds a [`MultiHeadAttention`](super::MultiHeadAttention) with
    /// `dev.build_module::<MultiHeadAttention<FQ, FKV, QKV, H, OUT>, E>()`
    /// (`MultiHeadAttention<FQ, FKV, QKV, H, OUT, Unbiased>` without
    /// biases).
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct MultiHeadAttention<
        const FQ: usize,
        const FKV: usize,
        const QKV: usize,
        const H: usize,
        const OUT: usize,
        P = super::Biased,
    >(core::marker::PhantomData<P>);

    /// Builds a [`SelfAttention`](super::SelfAttention): attention whose
    /// keys and values come from its queries' input.
    pub type SelfAttention<
        const F: usize,
        const QKV: usize,
        const H: usize,
        const OUT: usize,
        P = super::Biased,
    > = MultiHeadAttention<F, F, QKV, H, OUT, P>;
}

/// Flax linen's `MultiHeadDotProductAttention(num_heads = H, qkv_features =
/// QKV, out_features = OUT, dropout_rate)`: `query` projects the `FQ`
/// features of the queries' input, `key` and `value` the `FKV` features of
/// the keys' input, to `H` heads of `QKV / H` features; each head attends
/// with `softmax(q kᵀ / sqrt(QKV / H)) v`; `out` projects the joined heads
/// to `OUT` features.
///
/// Inputs, each with or without a tape: `x` (`[batch, S, FQ]`, attention of
/// a sequence with itself, when `FQ == FKV`), `(q, kv)` (`[batch, Q, FQ]`
/// and `[batch, K, FKV]`, sequences of different lengths) and
/// `(q, kv, mask)` (self-attention with a mask is `(x, x, mask)`). A mask is a `[batch, Q, K]` `bool` tensor, true
/// where a query may look at a key; as in Flax, a masked logit becomes the
/// dtype's minimum before the softmax (so a query with nothing to look at
/// attends uniformly). In `forward_mut` with a tape, the attention weights
/// are dropped with probability `dropout` and the kept ones scaled by
/// `1 / (1 - dropout)`, one keep-mask over `[Q, K]` shared by the batch and
/// the heads (Flax's default `broadcast_dropout=True`; with
/// `broadcast_dropout` false, one per example and head); `forward` never
/// drops.
///
/// The projections are [`Dense`] layers (or [`UnbiasedDense`] ones with
/// `P = Unbiased`, Flax's `use_bias=False`), named and laid out as dfdx's
/// `Linear` (`query.weight` is `(QKV, FQ)`: Flax's `query.kernel`, `(FQ, H,
/// QKV / H)`, flattened to `(FQ, QKV)` and transposed) and initialised like
/// Flax's (lecun_normal with the input's fan-in, zero biases).
/// `QKV % H != 0` does not compile.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// // Cross-attention: 5 queries of 4 features attend to 7 keys of 3.
/// let attn = dev.build_module::<builder::MultiHeadAttention<4, 3, 8, 2, 6>, f32>();
/// let q: Tensor<Rank3<2, 5, 4>, f32, _> = dev.sample_normal();
/// let kv: Tensor<Rank3<2, 7, 3>, f32, _> = dev.sample_normal();
/// let mask: Tensor<Rank3<2, 5, 7>, bool, _> = dev.sample_normal::<Rank3<2, 5, 7>>().ge(0.0);
/// let y: Tensor<Rank3<2, 5, 6>, f32, _, _> = attn.forward((q.leaky_trace(), kv, mask));
/// let grads = y.mean().backward();
/// let _ = grads.get(&attn.key.weight);
/// ```
#[derive(Clone, Debug)]
pub struct MultiHeadAttention<
    const FQ: usize,
    const FKV: usize,
    const QKV: usize,
    const H: usize,
    const OUT: usize,
    E: Dtype,
    D: Storage<E>,
    P: Projections = Biased,
> {
    /// Query projection.
    pub query: P::Dense<FQ, QKV, E, D>,
    /// Key projection.
    pub key: P::Dense<FKV, QKV, E, D>,
    /// Value projection.
    pub value: P::Dense<FKV, QKV, E, D>,
    /// Output projection of the joined heads.
    pub out: P::Dense<QKV, OUT, E, D>,
    /// Dropout rate of the attention weights in `forward_mut` (Flax's
    /// `dropout_rate`); 0 by default.
    pub dropout: f64,
    /// Whether one keep-mask over `[Q, K]` serves the whole batch and
    /// every head (Flax's `broadcast_dropout`, true by default) rather
    /// than one per example and head.
    pub broadcast_dropout: bool,
}

/// Flax linen's `SelfAttention(num_heads = H, qkv_features = QKV,
/// out_features = OUT)` on `[batch, S, F]`: a [`MultiHeadAttention`] whose
/// keys and values come from its queries' input.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// let attn = dev.build_module::<builder::SelfAttention<4, 8, 2, 6>, f32>();
/// let x: Tensor<Rank3<3, 5, 4>, f32, _> = dev.sample_normal();
/// let y: Tensor<Rank3<3, 5, 6>, f32, _, _> = attn.forward(x.leaky_trace());
/// let grads = y.mean().backward();
/// let _ = grads.get(&attn.query.weight);
/// ```
pub type SelfAttention<
    const F: usize,
    const QKV: usize,
    const H: usize,
    const OUT: usize,
    E,
    D,
    P = Biased,
> = MultiHeadAttention<F, F, QKV, H, OUT, E, D, P>;

/// The output of attention: `[batch, Q, OUT]` on the queries' tape.
type Attended<B, Q, const OUT: usize, E, D, T> = Tensor<(B, Q, Const<OUT>), E, D, T>;

macro_rules! attention_generics {
    ($($rest:tt)*) => {
        impl<
            const FQ: usize,
            const FKV: usize,
            const QKV: usize,
            const H: usize,
            const OUT: usize,
            P: Projections,
            $($rest)*
    };
}

attention_generics! { E: Dtype, D: Device<E>> BuildOnDevice<D, E> for builder::MultiHeadAttention<FQ, FKV, QKV, H, OUT, P>
where
    MultiHeadAttention<FQ, FKV, QKV, H, OUT, E, D, P>: BuildModule<D, E>,
{
    type Built = MultiHeadAttention<FQ, FKV, QKV, H, OUT, E, D, P>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        Self::Built::try_build(device)
    }
}}

/// `TensorCollection` for each kind of projection (the rebuilt module's
/// fields are that kind's on the new dtype and device).
macro_rules! collection {
    ($p:ident) => {
        impl<
                const FQ: usize,
                const FKV: usize,
                const QKV: usize,
                const H: usize,
                const OUT: usize,
                E: Dtype,
                D: Device<E>,
            > TensorCollection<E, D> for MultiHeadAttention<FQ, FKV, QKV, H, OUT, E, D, $p>
        {
            type To<E2: Dtype, D2: Device<E2>> =
                MultiHeadAttention<FQ, FKV, QKV, H, OUT, E2, D2, $p>;

            fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
                visitor: &mut V,
            ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
                visitor.visit_fields(
                    (
                        Self::module("query", |s| &s.query, |s| &mut s.query),
                        Self::module("key", |s| &s.key, |s| &mut s.key),
                        Self::module("value", |s| &s.value, |s| &mut s.value),
                        Self::module("out", |s| &s.out, |s| &mut s.out),
                    ),
                    // The rates are not tensors: whoever rebuilds the
                    // module (the `#[compact]` expansion) sets them again.
                    |(query, key, value, out)| MultiHeadAttention {
                        query,
                        key,
                        value,
                        out,
                        dropout: 0.0,
                        broadcast_dropout: true,
                    },
                )
            }
        }
    };
}
collection!(Biased);
collection!(Unbiased);

attention_generics! { E: Dtype, D: Storage<E>> MultiHeadAttention<FQ, FKV, QKV, H, OUT, E, D, P> {
    /// Features per head; naming it checks `QKV % H == 0` at compile time.
    pub const HEAD_FEATURES: usize = {
        assert!(
            H >= 1 && QKV.is_multiple_of(H),
            "attention needs qkv_features divisible by num_heads"
        );
        QKV / H
    };
}}

attention_generics! { E: Dtype + num_traits::Float, D: FlaxenDevice<E>> MultiHeadAttention<FQ, FKV, QKV, H, OUT, E, D, P> {
    /// The forward pass: `train` drops attention weights (when the rate is
    /// above 0 and `q` carries a tape).
    fn attend<B: Dim, Q: Dim, K: Dim, T: Tape<E, D> + Merge<Tk>, Tk: Tape<E, D>>(
        &self,
        q_in: Tensor<(B, Q, Const<FQ>), E, D, T>,
        kv_in: Tensor<(B, K, Const<FKV>), E, D, Tk>,
        mask: Option<Tensor<(B, Q, K), bool, D>>,
        train: bool,
    ) -> Result<Attended<B, Q, OUT, E, D, T>, D::Err> {
        // Evaluated for its compile-time check that `H` divides `QKV`.
        let _ = Self::HEAD_FEATURES;
        // One tape for both inputs: the key and value projections record
        // their gradients even when the keys' input came without a tape.
        let (q_in, tape) = q_in.split_tape();
        let (kv_in, kv_tape) = kv_in.split_tape();
        let kv_in = kv_in.put_tape(tape.merge(kv_tape));
        let k = self.key.project(kv_in.with_empty_tape())?;
        let (v, tape) = self.value.project(kv_in)?.split_tape();
        let q = self.query.project(q_in.put_tape(tape))?;
        let v = v.put_tape(T::default());
        let joined = if train && T::OWNS_TAPE && self.dropout > 0.0 {
            let dropout = (self.dropout, self.broadcast_dropout);
            heads_composite(H, q, k, v, mask, Some(dropout))?
        } else {
            q.device().clone().try_attention(H, q, k, v, mask)?
        };
        self.out.project(joined)
    }
}}

/// `Module` (no dropout) and `ModuleMut` (dropout when training) for one
/// input form, through `attend`.
macro_rules! forms {
    ($(#[$m:meta])* [$($g:tt)*] $input:ty, ($($pat:tt)*) => ($q:expr, $kv:expr, $mask:expr)) => {
        attention_generics! { $($g)* E: Dtype + num_traits::Float, D: FlaxenDevice<E>, T: Tape<E, D> + Merge<Tk>>
            Module<$input> for MultiHeadAttention<FQ, FKV, QKV, H, OUT, E, D, P>
        {
            type Output = Tensor<(B, Q, Const<OUT>), E, D, T>;
            type Error = D::Err;
            fn try_forward(&self, $($pat)*: $input) -> Result<Self::Output, D::Err> {
                self.attend($q, $kv, $mask, false)
            }
        }}
        attention_generics! { $($g)* E: Dtype + num_traits::Float, D: FlaxenDevice<E>, T: Tape<E, D> + Merge<Tk>>
            ModuleMut<$input> for MultiHeadAttention<FQ, FKV, QKV, H, OUT, E, D, P>
        {
            type Output = Tensor<(B, Q, Const<OUT>), E, D, T>;
            type Error = D::Err;
            fn try_forward_mut(&mut self, $($pat)*: $input) -> Result<Self::Output, D::Err> {
                self.attend($q, $kv, $mask, true)
            }
        }}
    };
}

// Self-attention needs the keys' features to be the queries'.
macro_rules! self_forms {
    ($input:ty, ($($pat:tt)*) => ($x:ident, $mask:expr)) => {
        impl<const F: usize, const QKV: usize, const H: usize, const OUT: usize, P: Projections, B: Dim, Q: Dim, E: Dtype + num_traits::Float, D: FlaxenDevice<E>, T: Tape<E, D>>
            Module<$input> for MultiHeadAttention<F, F, QKV, H, OUT, E, D, P>
        {
            type Output = Tensor<(B, Q, Const<OUT>), E, D, T>;
            type Error = D::Err;
            fn try_forward(&self, $($pat)*: $input) -> Result<Self::Output, D::Err> {
                self.attend($x.with_empty_tape(), $x, $mask, false)
            }
        }
        impl<const F: usize, const QKV: usize, const H: usize, const OUT: usize, P: Projections, B: Dim, Q: Dim, E: Dtype + num_traits::Float, D: FlaxenDevice<E>, T: Tape<E, D>>
            ModuleMut<$input> for MultiHeadAttention<F, F, QKV, H, OUT, E, D, P>
        {
            type Output = Tensor<(B, Q, Const<OUT>), E, D, T>;
            type Error = D::Err;
            fn try_forward_mut(&mut self, $($pat)*: $input) -> Result<Self::Output, D::Err> {
                self.attend($x.with_empty_tape(), $x, $mask, true)
            }
        }
    };
}

self_forms!(Tensor<(B, Q, Const<F>), E, D, T>, (x) => (x, None));
forms!([B: Dim, Q: Dim, K: Dim, Tk: Tape<E, D>,] (Tensor<(B, Q, Const<FQ>), E, D, T>, Tensor<(B, K, Const<FKV>), E, D, Tk>), ((q, kv)) => (q, kv, None));
forms!([B: Dim, Q: Dim, K: Dim, Tk: Tape<E, D>,] (Tensor<(B, Q, Const<FQ>), E, D, T>, Tensor<(B, K, Const<FKV>), E, D, Tk>, Tensor<(B, Q, K), bool, D>), ((q, kv, mask)) => (q, kv, Some(mask)));

/// [`FlaxenDevice::try_attention`] in dfdx's ops, with attention dropout
/// when `dropout` is `Some((rate, broadcast))` (Flax's `dropout_rate` and
/// `broadcast_dropout`): every device's default, and the path of a training
/// pass with dropout.
pub(crate) fn heads_composite<B, Q, K, const F: usize, E, D, T>(
    heads: usize,
    q: Tensor<(B, Q, Const<F>), E, D, T>,
    k: Tensor<(B, K, Const<F>), E, D, T>,
    v: Tensor<(B, K, Const<F>), E, D, T>,
    mask: Option<Tensor<(B, Q, K), bool, D>>,
    dropout: Option<(f64, bool)>,
) -> Result<Rows<B, Q, F, E, D, T>, D::Err>
where
    B: Dim,
    Q: Dim,
    K: Dim,
    E: Dtype + num_traits::Float,
    D: Device<E>,
    T: Tape<E, D>,
{
    let (b, nq, _) = *q.shape();
    let nk = k.shape().1;
    let dh = F / heads;
    let scale = scalar::<E>(1.0 / (dh as f64).sqrt());
    // [B, S, F] -> [B, heads, S, F / heads]
    let q = q
        .try_reshape_like(&(b, nq, heads, dh))?
        .try_permute::<_, Axes4<0, 2, 1, 3>>()?
        .try_mul(scale)?;
    let k = k
        .try_reshape_like(&(b, nk, heads, dh))?
        .try_permute::<_, Axes4<0, 2, 3, 1>>()?;
    let v = v
        .try_reshape_like(&(b, nk, heads, dh))?
        .try_permute::<_, Axes4<0, 2, 1, 3>>()?;
    let mut weights = masked_softmax(q.try_matmul(k)?, mask)?;
    if let Some((rate, broadcast)) = dropout.filter(|&(rate, _)| rate > 0.0) {
        let shape = *weights.shape();
        let dev = weights.device().clone();
        weights = if broadcast {
            let keep = dev.try_ones_like(&(nq, nk))?.try_dropout(rate)?;
            weights.try_mul(keep.try_broadcast_like::<_, Axes2<0, 1>>(&shape)?)?
        } else {
            weights.try_mul(dev.try_ones_like(&shape)?.try_dropout(rate)?)?
        };
    }
    weights
        .try_matmul(v)?
        .try_permute::<_, Axes4<0, 2, 1, 3>>()?
        .try_reshape_like(&(b, nq, Const::<F>))
}

/// Flax's masking and softmax over the keys of `[batch, heads, Q, K]`
/// logits: a logit whose `[batch, Q, K]` mask entry is false becomes the
/// dtype's minimum.
#[allow(clippy::type_complexity)]
fn masked_softmax<B: Dim, H: Dim, Q: Dim, K: Dim, E, D, T>(
    logits: Tensor<(B, H, Q, K), E, D, T>,
    mask: Option<Tensor<(B, Q, K), bool, D>>,
) -> Result<Tensor<(B, H, Q, K), E, D, T>, D::Err>
where
    E: Dtype + num_traits::Float,
    D: Device<E>,
    T: Tape<E, D>,
{
    let logits = match mask {
        Some(mask) => {
            let shape = *logits.shape();
            let floor = logits
                .device()
                .try_ones_like(&shape)?
                .try_mul(E::min_value())?;
            mask.try_broadcast_like::<_, Axis<1>>(&shape)?
                .try_choose(logits, floor)?
        }
        None => logits,
    };
    logits.try_softmax::<Axis<3>>()
}

/// Flax's functional `nn.dot_product_attention(query, key, value, mask=..)`
/// on `[batch, Q, H, Dk]` queries, `[batch, K, H, Dk]` keys and
/// `[batch, K, H, Dv]` values: each head attends with `softmax(q kᵀ /
/// sqrt(Dk)) v`, a masked logit (a `[batch, Q, K]` mask shared by the
/// heads, false where a query may not look) replaced by the dtype's
/// minimum; the result is `[batch, Q, H, Dv]` on the queries' tape. No
/// dropout (Flax's `deterministic=True`).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::dot_product_attention;
///
/// let dev: Cpu = Default::default();
/// let q: Tensor<Rank4<2, 3, 2, 4>, f32, _> = dev.sample_normal();
/// let kv: Tensor<Rank4<2, 5, 2, 4>, f32, _> = dev.sample_normal();
/// let y = dot_product_attention(q.leaky_trace(), kv.clone(), kv, None).unwrap();
/// assert_eq!(y.shape(), &(Const::<2>, Const::<3>, Const::<2>, Const::<4>));
/// ```
#[allow(clippy::type_complexity)]
pub fn dot_product_attention<
    B: Dim,
    const Q: usize,
    const K: usize,
    const H: usize,
    const DK: usize,
    const DV: usize,
    E: Dtype + num_traits::Float,
    D: Device<E>,
    T: Tape<E, D> + Merge<Tk> + Merge<Tv>,
    Tk: Tape<E, D>,
    Tv: Tape<E, D>,
>(
    q: Tensor<(B, Const<Q>, Const<H>, Const<DK>), E, D, T>,
    k: Tensor<(B, Const<K>, Const<H>, Const<DK>), E, D, Tk>,
    v: Tensor<(B, Const<K>, Const<H>, Const<DV>), E, D, Tv>,
    mask: Option<Tensor<(B, Const<Q>, Const<K>), bool, D>>,
) -> Result<Tensor<(B, Const<Q>, Const<H>, Const<DV>), E, D, T>, D::Err> {
    let scale = scalar::<E>(1.0 / (DK as f64).sqrt());
    let one = scalar::<E>(1.0);
    // Each operand through an op of its own: the three may be one tensor
    // (`dot_product_attention(x, x, x)`), and dfdx's binary ops need
    // operands of two ids.
    let q = q.try_permute::<_, Axes4<0, 2, 1, 3>>()?.try_mul(scale)?;
    let k = k.try_permute::<_, Axes4<0, 2, 3, 1>>()?.try_mul(one)?;
    let v = v.try_permute::<_, Axes4<0, 2, 1, 3>>()?.try_mul(one)?;
    masked_softmax(q.try_matmul(k)?, mask)?
        .try_matmul(v)?
        .try_permute::<_, Axes4<0, 2, 1, 3>>()
}
