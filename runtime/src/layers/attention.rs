//! [`SelfAttention`]: Flax linen's `SelfAttention` (multi-head dot-product
//! attention of a sequence with itself) as a dfdx module.

use dfdx::nn::{BuildModule, BuildOnDevice, Module, ModuleVisitor, NonMutableModule};
use dfdx::prelude::*;

use super::{Dense, FlaxenDevice};

/// Builders of the layers.
pub mod builder {
    /// Builds a [`SelfAttention`](super::SelfAttention) with
    /// `dev.build_module::<SelfAttention<F, QKV, H, OUT>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct SelfAttention<const F: usize, const QKV: usize, const H: usize, const OUT: usize>;
}

/// Flax linen's `SelfAttention(num_heads = H, qkv_features = QKV,
/// out_features = OUT)` on `[batch, S, F]` inputs, with or without a tape:
/// `query`, `key` and `value` project the `F` features to `H` heads of
/// `QKV / H` features; each head attends with
/// `softmax(q kᵀ / sqrt(QKV / H)) v` over the sequence; `out` projects the
/// joined heads to `OUT` features. No mask and no dropout (Flax's
/// `deterministic=True`, `dropout_rate=0`).
///
/// The projections are [`Dense`] layers, named and laid out as dfdx's
/// `Linear` (`query.weight` is `(QKV, F)`: Flax's `query.kernel`, `(F, H,
/// QKV / H)`, flattened to `(F, QKV)` and transposed) and initialised like
/// Flax's (lecun_normal with fan-in `F`, and `QKV` for `out`; zero biases).
/// `QKV % H != 0` does not compile.
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
#[derive(Clone, Debug)]
pub struct SelfAttention<
    const F: usize,
    const QKV: usize,
    const H: usize,
    const OUT: usize,
    E: Dtype,
    D: Storage<E>,
> {
    /// Query projection.
    pub query: Dense<F, QKV, E, D>,
    /// Key projection.
    pub key: Dense<F, QKV, E, D>,
    /// Value projection.
    pub value: Dense<F, QKV, E, D>,
    /// Output projection of the joined heads.
    pub out: Dense<QKV, OUT, E, D>,
}

impl<
        const F: usize,
        const QKV: usize,
        const H: usize,
        const OUT: usize,
        E: Dtype,
        D: Device<E>,
    > BuildOnDevice<D, E> for builder::SelfAttention<F, QKV, H, OUT>
where
    SelfAttention<F, QKV, H, OUT, E, D>: BuildModule<D, E>,
{
    type Built = SelfAttention<F, QKV, H, OUT, E, D>;
    fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
        Self::Built::try_build(device)
    }
}

impl<
        const F: usize,
        const QKV: usize,
        const H: usize,
        const OUT: usize,
        E: Dtype,
        D: Storage<E>,
    > NonMutableModule for SelfAttention<F, QKV, H, OUT, E, D>
{
}

impl<
        const F: usize,
        const QKV: usize,
        const H: usize,
        const OUT: usize,
        E: Dtype,
        D: Device<E>,
    > TensorCollection<E, D> for SelfAttention<F, QKV, H, OUT, E, D>
{
    type To<E2: Dtype, D2: Device<E2>> = SelfAttention<F, QKV, H, OUT, E2, D2>;

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
            |(query, key, value, out)| SelfAttention {
                query,
                key,
                value,
                out,
            },
        )
    }
}

impl<
        const F: usize,
        const QKV: usize,
        const H: usize,
        const OUT: usize,
        E: Dtype,
        D: Storage<E>,
    > SelfAttention<F, QKV, H, OUT, E, D>
{
    /// Features per head; naming it checks `QKV % H == 0` at compile time.
    pub const HEAD_FEATURES: usize = {
        assert!(
            H >= 1 && QKV.is_multiple_of(H),
            "SelfAttention needs qkv_features divisible by num_heads"
        );
        QKV / H
    };
}

impl<
        const F: usize,
        const QKV: usize,
        const H: usize,
        const OUT: usize,
        B: Dim,
        S: Dim,
        E: Dtype,
        D: FlaxenDevice<E>,
        T: Tape<E, D>,
    > Module<Tensor<(B, S, Const<F>), E, D, T>> for SelfAttention<F, QKV, H, OUT, E, D>
{
    type Output = Tensor<(B, S, Const<OUT>), E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<(B, S, Const<F>), E, D, T>) -> Result<Self::Output, D::Err> {
        let (b, s, _) = *x.shape();
        let dh = Self::HEAD_FEATURES;
        // [B, S, QKV] -> [B, H, S, QKV / H]
        let heads = |t: Tensor<(B, S, Const<QKV>), E, D, T>| {
            t.try_reshape_like(&(b, s, Const::<H>, dh))?
                .try_permute::<_, Axes4<0, 2, 1, 3>>()
        };
        let q = heads(self.query.try_forward(x.with_empty_tape())?)?
            .try_mul(E::from_f64(1.0 / (dh as f64).sqrt()).unwrap())?;
        let k = heads(self.key.try_forward(x.with_empty_tape())?)?;
        let v = heads(self.value.try_forward(x)?)?;
        let weights = q
            .try_matmul(k.try_permute::<_, Axes4<0, 1, 3, 2>>()?)?
            .try_softmax::<Axis<3>>()?;
        let joined = weights
            .try_matmul(v)?
            .try_permute::<_, Axes4<0, 2, 1, 3>>()?
            .try_reshape_like(&(b, s, Const::<QKV>))?;
        self.out.try_forward(joined)
    }
}
