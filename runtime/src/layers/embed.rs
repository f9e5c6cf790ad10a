//! [`Embed`]: Flax's `nn.Embed`, token ids to feature vectors.

use crate::dtype::scalar;
use dfdx::nn::{BuildModule, BuildOnDevice, Module, ModuleVisitor, NonMutableModule};
use dfdx::prelude::*;
use dfdx::tensor::CpuError;
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

/// Builders of the layers.
pub mod builder {
    /// Builds an [`Embed`](super::Embed) with
    /// `dev.build_module::<Embed<V, F>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct Embed<const V: usize, const F: usize>;
}

/// Flax's `Embed(num_embeddings = V, features = F)`: token ids `[batch, S]`
/// (`usize`, with or without a tape) to `[batch, S, F]`, row `id` of the
/// `embedding` table `(V, F)` (Flax's name and layout), initialised as
/// Flax's `default_embed_init` (a normal of variance `1 / F`).
///
/// An id of `V` or more is an error: the call returns `Err` (the device's
/// error, as dfdx reports a bad size) and reads nothing, where Flax would
/// give NaNs. [`check_tokens`] says which id at which position, for a data
/// loader to call once per data set.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder;
///
/// let dev: Cpu = Default::default();
/// let embed = dev.build_module::<builder::Embed<10, 4>, f32>();
/// let tokens: Tensor<Rank2<2, 3>, usize, _> = dev.tensor([[1, 2, 3], [9, 0, 0]]);
/// let y: Tensor<Rank3<2, 3, 4>, f32, _, _> = embed.forward(tokens.clone().traced(embed.alloc_grads()));
/// let grads = y.sum().backward();
/// // Row 0 was read twice.
/// assert_eq!(grads.get(&embed.embedding).array()[0], [2.0; 4]);
/// assert!(embed.try_forward(dev.tensor([[1, 10, 3]])).is_err());
/// ```
#[derive(Clone, Debug)]
pub struct Embed<const V: usize, const F: usize, E: Dtype, D: Storage<E>> {
    /// The table, `(V, F)`.
    pub embedding: Tensor<Rank2<V, F>, E, D>,
}

/// Flax's `default_embed_init`: `variance_scaling(1.0, "fan_in", "normal",
/// out_axis=0)`, which for a `(V, F)` table is a normal of variance `1 / F`.
#[derive(Debug, Clone, Copy)]
struct EmbedInit {
    features: usize,
}

impl<E: Dtype> Distribution<E> for EmbedInit {
    fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> E {
        let z: f64 = StandardNormal.sample(rng);
        scalar::<E>(z / (self.features.max(1) as f64).sqrt())
    }
}

impl<const V: usize, const F: usize, E: Dtype, D: Device<E>> BuildOnDevice<D, E>
    for builder::Embed<V, F>
where
    Embed<V, F, E, D>: BuildModule<D, E>,
{
    type Built = Embed<V, F, E, D>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        Self::Built::try_build(device)
    }
}

impl<const V: usize, const F: usize, E: Dtype, D: Storage<E>> NonMutableModule
    for Embed<V, F, E, D>
{
}

impl<const V: usize, const F: usize, E: Dtype, D: Device<E>> TensorCollection<E, D>
    for Embed<V, F, E, D>
{
    type To<E2: Dtype, D2: Device<E2>> = Embed<V, F, E2, D2>;

    fn iter_tensors<W: ModuleVisitor<Self, E, D>>(
        visitor: &mut W,
    ) -> Result<Option<Self::To<W::E2, W::D2>>, W::Err> {
        visitor.visit_fields(
            Self::tensor(
                "embedding",
                |s| &s.embedding,
                |s| &mut s.embedding,
                TensorOptions::reset_with(|t| t.try_fill_with_distr(EmbedInit { features: F })),
            ),
            |embedding| Embed { embedding },
        )
    }
}

/// A token id outside the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("token id {id} at position {position} is not below the vocabulary size {vocab}")]
pub struct TokenOutOfRange {
    /// The id.
    pub id: usize,
    /// Its index in the flattened tokens.
    pub position: usize,
    /// The number of embeddings.
    pub vocab: usize,
}

/// The first token id that is not below `vocab`, as an error naming it.
///
/// ```
/// use flaxen_runtime::layers::check_tokens;
///
/// assert!(check_tokens(&[1, 2, 3], 4).is_ok());
/// assert_eq!(check_tokens(&[1, 7], 4).unwrap_err().position, 1);
/// ```
pub fn check_tokens(ids: &[usize], vocab: usize) -> Result<(), TokenOutOfRange> {
    match ids.iter().position(|id| *id >= vocab) {
        Some(position) => Err(TokenOutOfRange {
            id: ids[position],
            position,
            vocab,
        }),
        None => Ok(()),
    }
}

impl<const V: usize, const F: usize, B: Dim, S: Dim, E: Dtype, D: Device<E>, T: Tape<E, D>>
    Module<Tensor<(B, S), usize, D, T>> for Embed<V, F, E, D>
where
    D::Err: From<CpuError>,
{
    type Output = Tensor<(B, S, Const<F>), E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, tokens: Tensor<(B, S), usize, D, T>) -> Result<Self::Output, D::Err> {
        // dfdx's gather would panic (Cpu) or read out of bounds (Cuda).
        if check_tokens(&tokens.as_vec(), V).is_err() {
            return Err(CpuError::WrongNumElements.into());
        }
        let (tokens, tape) = tokens.split_tape();
        self.embedding.clone().put_tape(tape).try_gather(tokens)
    }
}

/// Flax's `Embed.attend(query)`: `query @ embedding.T`, the table as the
/// output layer (tied embeddings); `[.., F]` rows to `[.., V]` logits, on
/// the query's tape, the gradient reaching the table.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{builder, embed_attend};
///
/// let dev: Cpu = Default::default();
/// let embed = dev.build_module::<builder::Embed<10, 4>, f32>();
/// let x: Tensor<Rank3<2, 3, 4>, f32, _> = dev.sample_normal();
/// let logits = embed_attend(&embed, x.leaky_trace()).unwrap();
/// let grads = logits.sum().backward();
/// assert!(grads.get(&embed.embedding).as_vec().iter().any(|g| *g != 0.0));
/// ```
pub fn embed_attend<S, const V: usize, const F: usize, E, D, T>(
    embed: &Embed<V, F, E, D>,
    x: Tensor<S, E, D, T>,
) -> Result<Tensor<S::WithLast<V>, E, D, T>, D::Err>
where
    S: Rows<F>,
    E: Dtype,
    D: Device<E>,
    T: Tape<E, D>,
{
    S::attend(x, embed.embedding.retaped::<T>())
}

/// A shape `[.., F]` whose rows `attend` multiplies by a `[V, F]` table.
pub trait Rows<const F: usize>: Shape {
    /// The shape with its last axis `V`.
    type WithLast<const V: usize>: Shape;
    /// `x @ table.T`.
    fn attend<const V: usize, E: Dtype, D: Device<E>, T: Tape<E, D>>(
        x: Tensor<Self, E, D, T>,
        table: Tensor<Rank2<V, F>, E, D, T>,
    ) -> Result<Tensor<Self::WithLast<V>, E, D, T>, D::Err>;
}

impl<B: Dim, const F: usize> Rows<F> for (B, Const<F>) {
    type WithLast<const V: usize> = (B, Const<V>);
    fn attend<const V: usize, E: Dtype, D: Device<E>, T: Tape<E, D>>(
        x: Tensor<Self, E, D, T>,
        table: Tensor<Rank2<V, F>, E, D, T>,
    ) -> Result<Tensor<(B, Const<V>), E, D, T>, D::Err> {
        x.try_matmul(table.try_permute::<_, Axes2<1, 0>>()?)
    }
}

impl<B: Dim, S: Dim, const F: usize> Rows<F> for (B, S, Const<F>) {
    type WithLast<const V: usize> = (B, S, Const<V>);
    fn attend<const V: usize, E: Dtype, D: Device<E>, T: Tape<E, D>>(
        x: Tensor<Self, E, D, T>,
        table: Tensor<Rank2<V, F>, E, D, T>,
    ) -> Result<Tensor<(B, S, Const<V>), E, D, T>, D::Err> {
        let (b, s, _) = *x.shape();
        let rows = x.try_reshape_like(&(b.size() * s.size(), Const::<F>))?;
        rows.try_matmul(table.try_permute::<_, Axes2<1, 0>>()?)?
            .try_reshape_like(&(b, s, Const::<V>))
    }
}
