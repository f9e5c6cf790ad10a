//! Attention masks, Flax's `nn.make_causal_mask`, `nn.make_attention_mask`
//! and `nn.combine_masks`, as modules without parameters.
//!
//! A mask is a `[batch, Q, K]` `bool` tensor, true where query `q` may look
//! at key `k` (Flax's `[batch, 1, Q, K]` without the heads axis, which
//! [`MultiHeadAttention`](super::MultiHeadAttention) broadcasts). Masks are
//! small and made from token ids, so they are computed on the host and
//! copied to the device once per call; nothing of them is differentiated.

use dfdx::nn::{Module, NonMutableModule};
use dfdx::prelude::*;
use dfdx::tensor::TensorFromVec;

/// `make_causal_mask(x)`: query `i` may look at keys `0..=i`, for token ids
/// `[batch, S]` or features `[batch, S, F]` (only the length is read).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::CausalMask;
///
/// let dev: Cpu = Default::default();
/// let tokens: Tensor<Rank2<1, 3>, usize, _> = dev.tensor([[5, 2, 0]]);
/// let mask = CausalMask.forward(tokens);
/// assert_eq!(mask.array(), [[[true, false, false], [true, true, false], [true, true, true]]]);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CausalMask;

/// `make_attention_mask(q_tokens, k_tokens)`: query `q` may look at key `k`
/// where both token ids are non-zero (Flax's
/// `make_attention_mask(q_tokens > 0, k_tokens > 0)`: id 0 is padding).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::AttentionMask;
///
/// let dev: Cpu = Default::default();
/// let q: Tensor<Rank2<1, 2>, usize, _> = dev.tensor([[7, 0]]);
/// let k: Tensor<Rank2<1, 3>, usize, _> = dev.tensor([[1, 2, 0]]);
/// let mask = AttentionMask.forward((q, k));
/// assert_eq!(mask.array(), [[[true, true, false], [false, false, false]]]);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AttentionMask;

/// `combine_masks(a, b)`: true where both are (Flax's `nn.combine_masks`).
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::{AttentionMask, CausalMask, CombineMasks};
///
/// let dev: Cpu = Default::default();
/// let tokens: Tensor<Rank2<1, 2>, usize, _> = dev.tensor([[3, 0]]);
/// let causal = CausalMask.forward(tokens.clone());
/// let padding = AttentionMask.forward((tokens.clone(), tokens));
/// let mask = CombineMasks.forward((causal, padding));
/// assert_eq!(mask.array(), [[[true, false], [false, false]]]);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CombineMasks;

impl NonMutableModule for CausalMask {}
impl NonMutableModule for AttentionMask {}
impl NonMutableModule for CombineMasks {}

/// A `[batch, Q, K]` mask.
type MaskOf<B, const Q: usize, const K: usize, D> = Tensor<(B, Const<Q>, Const<K>), bool, D>;

/// A `[batch, Q, K]` mask from `f(b, q, k)`, on `dev`.
fn mask<B: Dim, const Q: usize, const K: usize, D: Storage<bool> + TensorFromVec<bool>>(
    dev: &D,
    b: B,
    f: impl Fn(usize, usize, usize) -> bool,
) -> Result<MaskOf<B, Q, K, D>, D::Err> {
    let mut data = Vec::with_capacity(b.size() * Q * K);
    for i in 0..b.size() {
        for q in 0..Q {
            for k in 0..K {
                data.push(f(i, q, k));
            }
        }
    }
    dev.try_tensor_from_vec(data, (b, Const, Const))
}

impl<B: Dim, const S: usize, D: Storage<usize> + Storage<bool> + TensorFromVec<bool>, T>
    Module<Tensor<(B, Const<S>), usize, D, T>> for CausalMask
{
    type Output = Tensor<(B, Const<S>, Const<S>), bool, D>;
    type Error = <D as HasErr>::Err;

    fn try_forward(
        &self,
        x: Tensor<(B, Const<S>), usize, D, T>,
    ) -> Result<Self::Output, Self::Error> {
        mask(x.device(), x.shape().0, |_, q, k| k <= q)
    }
}

impl<
        B: Dim,
        const S: usize,
        const F: usize,
        E: Unit,
        D: Storage<E> + Storage<bool> + TensorFromVec<bool>,
        T,
    > Module<Tensor<(B, Const<S>, Const<F>), E, D, T>> for CausalMask
{
    type Output = Tensor<(B, Const<S>, Const<S>), bool, D>;
    type Error = <D as HasErr>::Err;

    fn try_forward(
        &self,
        x: Tensor<(B, Const<S>, Const<F>), E, D, T>,
    ) -> Result<Self::Output, Self::Error> {
        mask(x.device(), x.shape().0, |_, q, k| k <= q)
    }
}

impl<
        B: Dim,
        const Q: usize,
        const K: usize,
        D: Storage<usize> + Storage<bool> + TensorFromVec<bool>,
        T1,
        T2,
    >
    Module<(
        Tensor<(B, Const<Q>), usize, D, T1>,
        Tensor<(B, Const<K>), usize, D, T2>,
    )> for AttentionMask
{
    type Output = Tensor<(B, Const<Q>, Const<K>), bool, D>;
    type Error = <D as HasErr>::Err;

    fn try_forward(
        &self,
        (q, k): (
            Tensor<(B, Const<Q>), usize, D, T1>,
            Tensor<(B, Const<K>), usize, D, T2>,
        ),
    ) -> Result<Self::Output, Self::Error> {
        let (qv, kv) = (q.as_vec(), k.as_vec());
        mask(q.device(), q.shape().0, |b, i, j| {
            qv[b * Q + i] != 0 && kv[b * K + j] != 0
        })
    }
}

impl<B: Dim, const Q: usize, const K: usize, D: Storage<bool> + TensorFromVec<bool>>
    Module<(
        Tensor<(B, Const<Q>, Const<K>), bool, D>,
        Tensor<(B, Const<Q>, Const<K>), bool, D>,
    )> for CombineMasks
{
    type Output = Tensor<(B, Const<Q>, Const<K>), bool, D>;
    type Error = <D as HasErr>::Err;

    fn try_forward(
        &self,
        (a, b): (
            Tensor<(B, Const<Q>, Const<K>), bool, D>,
            Tensor<(B, Const<Q>, Const<K>), bool, D>,
        ),
    ) -> Result<Self::Output, Self::Error> {
        let (av, bv) = (a.as_vec(), b.as_vec());
        mask(a.device(), a.shape().0, |n, i, j| {
            let at = (n * Q + i) * K + j;
            av[at] && bv[at]
        })
    }
}
