//! [`Remat`]: Flax's `nn.remat` (`jax.checkpoint`) for dfdx modules, trading
//! compute for memory: a block's activations are dropped after its forward
//! pass and recomputed from its input in the backward pass.
//!
//! dfdx records a backward op per tensor op, and each op's closure keeps the
//! tensors its gradient needs: a deep network holds every block's
//! activations until `backward`. Under [`Remat`] a block keeps only its
//! input; its one backward op on the outer tape runs the block again on a
//! tape of its own, backpropagates the output's gradient through it and
//! hands the gradients of the input and of the parameters to the outer
//! pass. dfdx also keeps every intermediate gradient until a backward pass
//! ends; the recomputation's are freed when its op returns.

use std::any::TypeId;

use dfdx::nn::tensor_collection::{ModuleFields, RecursiveWalker, TensorVisitor, ViewTensorRef};
use dfdx::nn::{
    BuildOnDevice, Module, ModuleMut, ModuleVisitor, ScalarOptions, TensorCollection, TensorOptions,
};
use dfdx::prelude::*;
use dfdx::tensor::{Gradients, Trace};
use num_traits::NumCast;

use crate::profile;

/// A block whose activations are recomputed in the backward pass instead of
/// kept: Flax's `nn.remat(Block)` (`jax.checkpoint`).
///
/// - **Values and gradients** are those of the block itself, bit for bit:
///   the backward pass runs the same ops on the same input and parameters,
///   and the output's gradient is handed to the recomputation as it is (no
///   `(y * dy).sum()` rounding). The block's parameter and input gradients
///   accumulate into the outer ones in the order the plain block's would.
/// - **Parameter keys** are the block's own: `Remat` adds no level to
///   [`TensorCollection`] paths, so `Remat<M>` and `M` read and write the
///   same checkpoints, and optimizers, `zero_grads`, `to_device` see the
///   block's tensors.
/// - **Modes** follow the block: `forward` and `forward_mut` without a tape
///   are the block's own calls (inference saves nothing anyway); with an
///   [`OwnedTape`] the block runs as it would on a tape (so `BatchNorm`
///   normalises with batch statistics) and its tape is dropped when the
///   block returns, so at most one block's activations are alive at once.
/// - **`BatchNorm` statistics** are updated exactly once per call, by the
///   forward pass: the recomputation runs on a snapshot of the block taken
///   before the call (tensor clones share storage and ids, so the snapshot
///   costs no copy), whose copy-on-write running statistics are discarded.
/// - **Dropout is refused**: the recomputation must draw the same random
///   numbers as the forward pass, and dfdx's `Dropout` draws from the
///   device's generator, which moves on. A block under `Remat` must be a
///   function of its input and parameters; `#[compact]` refuses
///   `remat(..)` of a block that applies `Dropout` or attention dropout.
///   In debug builds on the CPU each recomputation is checked against the
///   forward pass's output and a mismatch panics (its gradient would be
///   wrong).
///
/// The cost is one more forward pass of the block per training step.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::Remat;
///
/// type Block = (Linear<8, 32>, ReLU, Linear<32, 8>);
/// let dev: Cpu = Default::default();
/// let plain = dev.build_module::<Block, f64>();
/// let remat = Remat::new(plain.clone());
/// let x: Tensor<Rank2<4, 8>, f64, _> = dev.sample_normal();
///
/// let g1 = plain.forward(x.trace(plain.alloc_grads())).square().sum().backward();
/// let g2 = remat.forward(x.trace(remat.alloc_grads())).square().sum().backward();
/// assert_eq!(g1.get(&plain.0.weight).as_vec(), g2.get(&remat.inner.0.weight).as_vec());
///
/// // The block's checkpoint keys.
/// use flaxen_runtime::checkpoint::save_module_state;
/// let (mut a, mut b) = (Default::default(), Default::default());
/// save_module_state(&plain, "", &mut a);
/// save_module_state(&remat, "", &mut b);
/// assert!(a.keys().eq(b.keys()));
/// assert!(b.contains_key("2.weight"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Remat<M> {
    /// The block.
    pub inner: M,
}

impl<M> Remat<M> {
    /// Wraps a built block (`dev.build_module::<Remat<B>, E>()` builds one
    /// from the block's builder `B`).
    ///
    /// ```
    /// use dfdx::prelude::*;
    /// use flaxen_runtime::layers::Remat;
    ///
    /// let dev: Cpu = Default::default();
    /// let block = dev.build_module::<(Linear<4, 4>, Tanh), f32>();
    /// let m = Remat::new(block.clone());
    /// let x: Tensor<Rank2<3, 4>, f32, _> = dev.sample_normal();
    /// assert_eq!(m.forward(x.clone()).array(), block.forward(x).array());
    /// ```
    pub fn new(inner: M) -> Self {
        Remat { inner }
    }
}

/// A tensor on an [`OwnedTape`]: what a block under [`Remat`] returns when
/// it is called on a taped input. Implemented for every
/// `Tensor<S, E, D, OwnedTape<E, D>>`, and sealed.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::TapedTensor;
///
/// let dev: Cpu = Default::default();
/// let y = dev.tensor([1.0f32, 2.0]).leaky_trace();
/// let (t, tape) = y.into_parts();
/// let y = <Tensor<Rank1<2>, f32, Cpu, OwnedTape<f32, Cpu>>>::from_parts(t, tape);
/// assert_eq!(y.array(), [1.0, 2.0]);
/// ```
pub trait TapedTensor<E: Dtype, D: Device<E>>: Sized + sealed::Sealed {
    /// The tensor's shape.
    type Shape: Shape;
    /// The tensor and its tape.
    fn into_parts(self) -> (Tensor<Self::Shape, E, D>, OwnedTape<E, D>);
    /// The tensor on `tape`.
    fn from_parts(t: Tensor<Self::Shape, E, D>, tape: OwnedTape<E, D>) -> Self;
}

mod sealed {
    pub trait Sealed {}
    impl<S, E, D: dfdx::tensor::Storage<E>> Sealed
        for dfdx::tensor::Tensor<S, E, D, dfdx::tensor::OwnedTape<E, D>>
    where
        S: dfdx::shapes::Shape,
    {
    }
}

impl<S: Shape, E: Dtype, D: Device<E>> TapedTensor<E, D> for Tensor<S, E, D, OwnedTape<E, D>> {
    type Shape = S;
    fn into_parts(self) -> (Tensor<S, E, D>, OwnedTape<E, D>) {
        self.split_tape()
    }
    fn from_parts(t: Tensor<S, E, D>, tape: OwnedTape<E, D>) -> Self {
        t.put_tape(tape)
    }
}

impl<D: Device<E>, E: Dtype, B: BuildOnDevice<D, E>> BuildOnDevice<D, E> for Remat<B>
where
    B::Built: 'static,
{
    type Built = Remat<B::Built>;
}

impl<E: Dtype, D: Device<E>, M: TensorCollection<E, D> + 'static> TensorCollection<E, D>
    for Remat<M>
{
    type To<E2: Dtype, D2: Device<E2>> = Remat<M::To<E2, D2>>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        let inner = M::iter_tensors(&mut Transparent {
            outer: visitor,
            wrapper: core::marker::PhantomData::<fn() -> Self>,
        })?;
        Ok(inner.map(|inner| Remat { inner }))
    }
}

/// A module that holds another and adds nothing to its parameters
/// ([`Remat`], [`StdConv`](super::StdConv)): its `TensorCollection`
/// visits the inner module's fields under their own names.
pub(super) trait Wrapper<M> {
    fn inner(&self) -> &M;
    fn inner_mut(&mut self) -> &mut M;
}

impl<M> Wrapper<M> for Remat<M> {
    fn inner(&self) -> &M {
        &self.inner
    }
    fn inner_mut(&mut self) -> &mut M {
        &mut self.inner
    }
}

/// Visits `M`'s fields as fields of the wrapper `W` under their own
/// names, so that `W` adds no level to the paths (a `visit_module("",
/// ..)` would give `block_0..conv_0`).
pub(super) struct Transparent<'a, V, W> {
    pub(super) outer: &'a mut V,
    pub(super) wrapper: core::marker::PhantomData<fn() -> W>,
}

impl<M, E, D, V, W> ModuleVisitor<M, E, D> for Transparent<'_, V, W>
where
    M: TensorCollection<E, D> + 'static,
    E: Dtype,
    D: Device<E>,
    W: Wrapper<M> + TensorCollection<E, D> + 'static,
    V: ModuleVisitor<W, E, D>,
{
    type Err = V::Err;
    type E2 = V::E2;
    type D2 = V::D2;

    fn visit_module<Field, GetRef, GetMut>(
        &mut self,
        name: &str,
        mut get_refs: GetRef,
        mut get_muts: GetMut,
    ) -> Result<Option<Field::To<Self::E2, Self::D2>>, Self::Err>
    where
        GetRef: FnMut(&M) -> &Field,
        GetMut: FnMut(&mut M) -> &mut Field,
        Field: TensorCollection<E, D>,
    {
        self.outer
            .visit_module(name, |r| get_refs(r.inner()), |r| get_muts(r.inner_mut()))
    }

    fn visit_tensor<S: Shape, GetRef, GetMut>(
        &mut self,
        name: &str,
        mut get_refs: GetRef,
        mut get_muts: GetMut,
        opts: TensorOptions<S, E, D>,
    ) -> Result<Option<Tensor<S, Self::E2, Self::D2>>, Self::Err>
    where
        GetRef: FnMut(&M) -> &Tensor<S, E, D>,
        GetMut: FnMut(&mut M) -> &mut Tensor<S, E, D>,
    {
        self.outer.visit_tensor(
            name,
            |r| get_refs(r.inner()),
            |r| get_muts(r.inner_mut()),
            opts,
        )
    }

    fn visit_scalar<N, GetRef, GetMut>(
        &mut self,
        name: &str,
        mut get_refs: GetRef,
        mut get_muts: GetMut,
        opts: ScalarOptions<N>,
    ) -> Result<Option<N>, Self::Err>
    where
        N: NumCast,
        GetRef: FnMut(&M) -> &N,
        GetMut: FnMut(&mut M) -> &mut N,
    {
        self.outer.visit_scalar(
            name,
            |r| get_refs(r.inner()),
            |r| get_muts(r.inner_mut()),
            opts,
        )
    }

    fn visit_fields<F: ModuleFields<M, E, D>>(
        &mut self,
        fields: F,
        builder: impl FnOnce(F::Output<Self::E2, Self::D2>) -> M::To<Self::E2, Self::D2>,
    ) -> Result<Option<M::To<Self::E2, Self::D2>>, Self::Err> {
        let options = fields.visit_fields(self)?;
        Ok(F::handle_options(options).map(builder))
    }
}

// Without a tape the block saves nothing: its own calls.

impl<S: Shape, E: Dtype, D: Device<E>, M> Module<Tensor<S, E, D, NoneTape>> for Remat<M>
where
    M: Module<Tensor<S, E, D, NoneTape>>,
{
    type Output = M::Output;
    type Error = M::Error;

    fn try_forward(&self, x: Tensor<S, E, D, NoneTape>) -> Result<Self::Output, M::Error> {
        self.inner.try_forward(x)
    }
}

impl<S: Shape, E: Dtype, D: Device<E>, M> ModuleMut<Tensor<S, E, D, NoneTape>> for Remat<M>
where
    M: ModuleMut<Tensor<S, E, D, NoneTape>>,
{
    type Output = M::Output;
    type Error = M::Error;

    fn try_forward_mut(&mut self, x: Tensor<S, E, D, NoneTape>) -> Result<Self::Output, M::Error> {
        self.inner.try_forward_mut(x)
    }
}

impl<S: Shape, E: Dtype, D: Device<E>, M> Module<Tensor<S, E, D, OwnedTape<E, D>>> for Remat<M>
where
    M: Module<Tensor<S, E, D, OwnedTape<E, D>>, Error = D::Err>
        + TensorCollection<E, D>
        + Clone
        + 'static,
    M::Output: TapedTensor<E, D>,
{
    type Output = M::Output;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<S, E, D, OwnedTape<E, D>>) -> Result<M::Output, D::Err> {
        let snapshot = self.inner.clone();
        checkpointed(
            snapshot,
            x,
            |x| self.inner.try_forward(x),
            |m, x| m.try_forward(x),
        )
    }
}

impl<S: Shape, E: Dtype, D: Device<E>, M> ModuleMut<Tensor<S, E, D, OwnedTape<E, D>>> for Remat<M>
where
    M: ModuleMut<Tensor<S, E, D, OwnedTape<E, D>>, Error = D::Err>
        + TensorCollection<E, D>
        + Clone
        + 'static,
    M::Output: TapedTensor<E, D>,
{
    type Output = M::Output;
    type Error = D::Err;

    fn try_forward_mut(
        &mut self,
        x: Tensor<S, E, D, OwnedTape<E, D>>,
    ) -> Result<M::Output, D::Err> {
        // Taken before the call: the forward pass is the one that updates
        // running statistics.
        let snapshot = self.inner.clone();
        checkpointed(
            snapshot,
            x,
            |x| self.inner.try_forward_mut(x),
            |m, x| m.try_forward_mut(x),
        )
    }
}

/// What a block under [`Remat`] can be called on with a tape: a float
/// tensor on an [`OwnedTape`], or a tuple whose first element is one and
/// whose others are float tensors on a tape or masks (`bool`, no tape), as
/// a `#[compact]` block of several inputs or attention with a mask takes.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::RematInput;
///
/// fn takes<X: RematInput<f32, Cpu>>() {}
/// takes::<Tensor<Rank2<2, 3>, f32, Cpu, OwnedTape<f32, Cpu>>>();
/// takes::<(
///     Tensor<Rank2<2, 3>, f32, Cpu, OwnedTape<f32, Cpu>>,
///     Tensor<Rank2<2, 4>, f32, Cpu, OwnedTape<f32, Cpu>>,
///     Tensor<Rank2<3, 4>, bool, Cpu>,
/// )>();
/// ```
pub trait RematInput<E: Dtype, D: Device<E>>: Sized {
    /// The inputs without their tapes, kept for the recomputation.
    type Plain: Clone + 'static;
    /// The inputs without tapes, and every tape merged into one.
    fn split(self) -> (Self::Plain, OwnedTape<E, D>);
    /// The inputs again, the first on `tape`, the other float inputs on
    /// empty tapes (merged into it where their paths meet).
    fn retrace(plain: &Self::Plain, tape: OwnedTape<E, D>) -> Self;
    /// Swaps the float inputs' gradient buffers between `a` and `b`.
    fn swap_grads(
        plain: &Self::Plain,
        a: &mut Gradients<E, D>,
        b: &mut Gradients<E, D>,
    ) -> Result<(), D::Err>;
}

/// One input after the first of a block under [`Remat`]: a float tensor on
/// an [`OwnedTape`] or a mask.
pub trait RematPart<E: Dtype, D: Device<E>>: Sized {
    /// The input without its tape.
    type Plain: Clone + 'static;
    /// The input without its tape, and the tape if it has one.
    fn split_part(self) -> (Self::Plain, Option<OwnedTape<E, D>>);
    /// The input again, on an empty tape if it takes one.
    fn retrace_part(plain: &Self::Plain) -> Self;
    /// Swaps its gradient buffer between `a` and `b` (a mask has none).
    fn swap_part(
        plain: &Self::Plain,
        a: &mut Gradients<E, D>,
        b: &mut Gradients<E, D>,
    ) -> Result<(), D::Err>;
    /// The address of its gradient buffer in `g`, allocated if need be
    /// (`None` for a mask): a block may read one tensor twice (attention's
    /// `(x, x, mask)`), and its buffer is swapped once.
    fn grad_addr(plain: &Self::Plain, g: &mut Gradients<E, D>) -> Result<Option<usize>, D::Err>;
}

impl<S: Shape, E: Dtype, D: Device<E>> RematPart<E, D> for Tensor<S, E, D, OwnedTape<E, D>> {
    type Plain = Tensor<S, E, D>;
    fn split_part(self) -> (Self::Plain, Option<OwnedTape<E, D>>) {
        let (t, tape) = self.split_tape();
        (t, Some(tape))
    }
    fn retrace_part(plain: &Self::Plain) -> Self {
        plain.clone().put_tape(OwnedTape::default())
    }
    fn swap_part(
        plain: &Self::Plain,
        a: &mut Gradients<E, D>,
        b: &mut Gradients<E, D>,
    ) -> Result<(), D::Err> {
        std::mem::swap(a.get_or_alloc_mut(plain)?, b.get_or_alloc_mut(plain)?);
        Ok(())
    }
    fn grad_addr(plain: &Self::Plain, g: &mut Gradients<E, D>) -> Result<Option<usize>, D::Err> {
        Ok(Some(g.get_or_alloc_mut(plain)? as *const _ as usize))
    }
}

impl<S: Shape, E: Dtype, D: Device<E> + Storage<bool>> RematPart<E, D> for Tensor<S, bool, D> {
    type Plain = Self;
    fn split_part(self) -> (Self, Option<OwnedTape<E, D>>) {
        (self, None)
    }
    fn retrace_part(plain: &Self) -> Self {
        plain.clone()
    }
    fn swap_part(_: &Self, _: &mut Gradients<E, D>, _: &mut Gradients<E, D>) -> Result<(), D::Err> {
        Ok(())
    }
    fn grad_addr(_: &Self, _: &mut Gradients<E, D>) -> Result<Option<usize>, D::Err> {
        Ok(None)
    }
}

impl<S: Shape, E: Dtype, D: Device<E>> RematInput<E, D> for Tensor<S, E, D, OwnedTape<E, D>> {
    type Plain = Tensor<S, E, D>;
    fn split(self) -> (Self::Plain, OwnedTape<E, D>) {
        self.split_tape()
    }
    fn retrace(plain: &Self::Plain, tape: OwnedTape<E, D>) -> Self {
        plain.clone().put_tape(tape)
    }
    fn swap_grads(
        plain: &Self::Plain,
        a: &mut Gradients<E, D>,
        b: &mut Gradients<E, D>,
    ) -> Result<(), D::Err> {
        <Self as RematPart<E, D>>::swap_part(plain, a, b)
    }
}

/// `RematInput` for a tuple of a taped float tensor and `RematPart`s.
macro_rules! remat_tuple {
    ($($p:ident $i:tt),+) => {
        impl<S: Shape, E: Dtype, D: Device<E>, $($p: RematPart<E, D>),+> RematInput<E, D>
            for (Tensor<S, E, D, OwnedTape<E, D>>, $($p,)+)
        {
            type Plain = (Tensor<S, E, D>, $($p::Plain,)+);
            fn split(self) -> (Self::Plain, OwnedTape<E, D>) {
                let (x, mut tape) = self.0.split_tape();
                let plain = (x, $({
                    let (p, t) = self.$i.split_part();
                    if let Some(t) = t {
                        tape = tape.merge(t);
                    }
                    p
                },)+);
                (plain, tape)
            }
            fn retrace(plain: &Self::Plain, tape: OwnedTape<E, D>) -> Self {
                (plain.0.clone().put_tape(tape), $($p::retrace_part(&plain.$i),)+)
            }
            fn swap_grads(
                plain: &Self::Plain,
                a: &mut Gradients<E, D>,
                b: &mut Gradients<E, D>,
            ) -> Result<(), D::Err> {
                // Every buffer first (an allocation may move the others),
                // then each distinct one swapped once.
                $($p::grad_addr(&plain.$i, a)?;)+
                let first = a.get_or_alloc_mut(&plain.0)? as *const _ as usize;
                let mut seen = vec![first];
                std::mem::swap(a.get_or_alloc_mut(&plain.0)?, b.get_or_alloc_mut(&plain.0)?);
                $(
                    if let Some(addr) = $p::grad_addr(&plain.$i, a)? {
                        if !seen.contains(&addr) {
                            seen.push(addr);
                            $p::swap_part(&plain.$i, a, b)?;
                        }
                    }
                )+
                Ok(())
            }
        }

        // Without a tape the block saves nothing: its own calls.
        impl<S: Shape, E: Dtype, D: Device<E>, M, $($p),+> Module<(Tensor<S, E, D>, $($p,)+)> for Remat<M>
        where
            M: Module<(Tensor<S, E, D>, $($p,)+)>,
        {
            type Output = M::Output;
            type Error = M::Error;
            fn try_forward(&self, x: (Tensor<S, E, D>, $($p,)+)) -> Result<Self::Output, M::Error> {
                self.inner.try_forward(x)
            }
        }

        impl<S: Shape, E: Dtype, D: Device<E>, M, $($p),+> ModuleMut<(Tensor<S, E, D>, $($p,)+)> for Remat<M>
        where
            M: ModuleMut<(Tensor<S, E, D>, $($p,)+)>,
        {
            type Output = M::Output;
            type Error = M::Error;
            fn try_forward_mut(&mut self, x: (Tensor<S, E, D>, $($p,)+)) -> Result<Self::Output, M::Error> {
                self.inner.try_forward_mut(x)
            }
        }

        impl<S: Shape, E: Dtype, D: Device<E>, M, $($p: RematPart<E, D>),+>
            Module<(Tensor<S, E, D, OwnedTape<E, D>>, $($p,)+)> for Remat<M>
        where
            M: Module<(Tensor<S, E, D, OwnedTape<E, D>>, $($p,)+), Error = D::Err>
                + TensorCollection<E, D>
                + Clone
                + 'static,
            M::Output: TapedTensor<E, D>,
        {
            type Output = M::Output;
            type Error = D::Err;
            fn try_forward(
                &self,
                x: (Tensor<S, E, D, OwnedTape<E, D>>, $($p,)+),
            ) -> Result<M::Output, D::Err> {
                let snapshot = self.inner.clone();
                checkpointed(snapshot, x, |x| self.inner.try_forward(x), |m, x| m.try_forward(x))
            }
        }

        impl<S: Shape, E: Dtype, D: Device<E>, M, $($p: RematPart<E, D>),+>
            ModuleMut<(Tensor<S, E, D, OwnedTape<E, D>>, $($p,)+)> for Remat<M>
        where
            M: ModuleMut<(Tensor<S, E, D, OwnedTape<E, D>>, $($p,)+), Error = D::Err>
                + TensorCollection<E, D>
                + Clone
                + 'static,
            M::Output: TapedTensor<E, D>,
        {
            type Output = M::Output;
            type Error = D::Err;
            fn try_forward_mut(
                &mut self,
                x: (Tensor<S, E, D, OwnedTape<E, D>>, $($p,)+),
            ) -> Result<M::Output, D::Err> {
                let snapshot = self.inner.clone();
                checkpointed(
                    snapshot,
                    x,
                    |x| self.inner.try_forward_mut(x),
                    |m, x| m.try_forward_mut(x),
                )
            }
        }
    };
}

remat_tuple!(P1 1);
remat_tuple!(P1 1, P2 2);
remat_tuple!(P1 1, P2 2, P3 3);

/// Runs `first` on `x` with a tape that is dropped when it returns, and
/// registers on `x`'s tape the op that reruns the block (`again` on
/// `snapshot`) in the backward pass.
fn checkpointed<X, E, D, M, Y>(
    snapshot: M,
    x: X,
    first: impl FnOnce(X) -> Result<Y, D::Err>,
    again: impl FnOnce(&mut M, X) -> Result<Y, D::Err> + 'static,
) -> Result<Y, D::Err>
where
    X: RematInput<E, D>,
    E: Dtype,
    D: Device<E>,
    M: TensorCollection<E, D> + 'static,
    Y: TapedTensor<E, D>,
{
    let (x, mut tape) = x.split();
    // The block's calls are named under the block that holds this one;
    // the recomputation names its calls the same way.
    let scope = profile::scope();
    // A tape, not none: a block runs as in training (`BatchNorm` on batch
    // statistics), and its backward ops, with the activations they hold,
    // go when this tape does.
    let (y, activations) = first(X::retrace(&x, OwnedTape::default()))?.into_parts();
    drop(activations);
    let check = digest(&y);
    let y_ghost = y.ghost();
    let dev = y.device().clone();
    tape.add_backward_op(move |grads| {
        let mut snapshot = snapshot;
        let dy = grads.get_or_alloc_mut(&y_ghost)?.clone();
        // The outer accumulators of the inputs' and the parameters'
        // gradients move into the recomputation's gradients and back, so
        // its ops add into them exactly as the plain block's ops would.
        let mut local = Gradients::leaky();
        exchange::<X, _, _, _>(grads, &mut local, &x, &snapshot)?;
        // A tape that records into `local`: the one a traced tensor has.
        let probe: Tensor<Rank0, E, D> = dev.try_zeros()?;
        let (_, local_tape) = Trace::<E, D>::traced(probe, local).split_tape();
        let again_x = X::retrace(&x, local_tape);
        let (y2, mut t2) = profile::reenter(scope, || again(&mut snapshot, again_x))?.into_parts();
        if let (Some(a), Some(b)) = (check, digest(&y2)) {
            assert_eq!(
                a, b,
                "Remat: the block's recomputation in the backward pass gave another output \
                 than its forward pass, so its gradients would be wrong; a block under Remat \
                 must be a function of its input and parameters (no Dropout)"
            );
        }
        // The output's gradient, as it is, seeds the recomputation's
        // backward pass: this op runs before the block's own ops.
        let y2_ghost = y2.ghost();
        t2.add_backward_op(move |g| {
            *g.get_or_alloc_mut(&y2_ghost)? = dy;
            Ok(())
        });
        let seed: Tensor<Rank0, E, D> = dev.try_zeros()?;
        let mut local = seed.put_tape(t2).try_backward()?;
        exchange::<X, _, _, _>(grads, &mut local, &x, &snapshot)
    });
    Ok(Y::from_parts(y, tape))
}

/// Swaps the gradient buffers of the float inputs `x` and of every
/// trainable tensor of `m` between `a` and `b` (allocating zeros where one
/// has none).
fn exchange<X: RematInput<E, D>, E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    a: &mut Gradients<E, D>,
    b: &mut Gradients<E, D>,
    x: &X::Plain,
    m: &M,
) -> Result<(), D::Err> {
    X::swap_grads(x, a, b)?;
    let mut swap = Swap { a, b };
    M::iter_tensors(&mut RecursiveWalker { m, f: &mut swap })?;
    Ok(())
}

struct Swap<'a, E, D: Storage<E>> {
    a: &'a mut Gradients<E, D>,
    b: &'a mut Gradients<E, D>,
}

impl<E: Dtype, D: Device<E>> TensorVisitor<E, D> for Swap<'_, E, D> {
    type Viewer = ViewTensorRef;
    type Err = D::Err;
    type E2 = E;
    type D2 = D;

    fn visit<S: Shape>(
        &mut self,
        opts: TensorOptions<S, E, D>,
        t: &Tensor<S, E, D>,
    ) -> Result<Option<Tensor<S, E, D>>, D::Err> {
        // Running statistics have no gradient; allocating one would add
        // keys the plain block does not have.
        if opts.do_gradient_update {
            std::mem::swap(self.a.get_or_alloc_mut(t)?, self.b.get_or_alloc_mut(t)?);
        }
        Ok(None)
    }
}

/// A hash of a tensor's values, on the CPU in debug builds only: the check
/// that a recomputation gave the forward pass's output. Elsewhere it would
/// cost a device-to-host copy, and reductions on a GPU need not be
/// reproducible bit for bit.
fn digest<S: Shape, E: Dtype, D: Device<E>>(t: &Tensor<S, E, D>) -> Option<u64> {
    if !cfg!(debug_assertions) || TypeId::of::<D>() != TypeId::of::<Cpu>() {
        return None;
    }
    let mut h = crate::dist::Fnv64::new();
    h.write_values(&t.as_vec());
    Some(h.finish())
}
