//! Support for the `scan!` macro: batches stacked along a leading axis of
//! length `K`, and the per-step losses stacked back into a `[K]` tensor.
//!
//! `scan!(K, step, state, batches)` is K sequential calls of `step`, each on
//! slice `k` of every stacked tensor in `batches`. It is *not* gradient
//! accumulation; for that, see Optax's `MultiSteps` (flaxen's `multi_steps`).

use dfdx::prelude::*;

/// A value holding `K` batches stacked along a leading axis: a tensor of
/// shape `[K, ...]`, or a tuple of such values (e.g. `(images, labels)`).
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::scan::{stack_batches, Stacked};
/// let dev: Cpu = Default::default();
/// let x: Tensor<Rank3<5, 4, 3>, f32, _> = dev.sample_normal();
/// let y: Tensor<Rank2<5, 4>, usize, _> = dev.zeros();
/// let (x2, y2) = Stacked::<5>::step(&(x.clone(), y), 2);
/// assert_eq!(x2.array(), x.array()[2]);
/// assert_eq!(y2.array(), [0; 4]);
/// ```
#[diagnostic::on_unimplemented(
    message = "`scan!` runs {K} steps, but `{Self}` is not stacked along a leading axis of length {K}",
    label = "expected batches stacked as `[{K}, ...]` (a tensor or a tuple of tensors)",
    note = "stack the batches with `stack_batches` or `Loader::next_stacked::<{K}>()`, or change K"
)]
pub trait Stacked<const K: usize> {
    /// What one step sees: the same structure without the leading axis.
    type Step;
    /// Slice `k` (`k < K`) of every stacked tensor. Copies one batch, not all K.
    fn step(&self, k: usize) -> Self::Step;

    /// All `K` slices, in order: what `scan!` feeds its steps. A CPU tensor
    /// reads its memory once for all of them.
    fn steps(&self) -> Vec<Self::Step> {
        (0..K).map(|k| self.step(k)).collect()
    }

    /// Whether the steps run on the CPU (any stacked tensor is in host
    /// memory), where `scan!` keeps rayon's threads awake for its K steps
    /// ([`keep_awake`](crate::threads::keep_awake)).
    fn on_host(&self) -> bool {
        false
    }
}

/// A device that can take slice `k` of a stacked tensor's leading axis.
///
/// Implemented for `Cpu` (every dtype, including `usize` labels) and for
/// `Cuda` (float dtypes on the device; `usize` labels, which dfdx 0.13 cannot
/// `select` on the GPU, through one small host round trip of the labels).
pub trait SelectStep<E: Unit>: Storage<E> {
    /// Whether this device's tensors live in host memory (its kernels run
    /// on rayon's threads).
    const ON_HOST: bool = false;

    /// `t[k]`, a copy of one slice.
    fn select_step<Src: Shape + RemoveDimTo<Dst, ()>, Dst: Shape>(
        t: &Tensor<Src, E, Self>,
        k: usize,
    ) -> Tensor<Dst, E, Self>;

    /// Every slice `t[0], t[1], ..` along the leading axis (`k` of them).
    fn select_steps<Src: Shape + RemoveDimTo<Dst, ()>, Dst: Shape>(
        t: &Tensor<Src, E, Self>,
        k: usize,
    ) -> Vec<Tensor<Dst, E, Self>> {
        (0..k).map(|i| Self::select_step(t, i)).collect()
    }
}

impl<E: Dtype> SelectStep<E> for Cpu {
    const ON_HOST: bool = true;

    /// Slice `k` as a copy of memory: dfdx's `select` computes an index per
    /// element, 2.5x slower for a batch of 32 digits (67 vs 27 µs,
    /// measured), which a scan pays every step.
    fn select_step<Src: Shape + RemoveDimTo<Dst, ()>, Dst: Shape>(
        t: &Tensor<Src, E, Self>,
        k: usize,
    ) -> Tensor<Dst, E, Self> {
        let mut one = host_slices(t, k..k + 1);
        one.pop().expect("one slice")
    }

    /// One read of the stack's memory for every slice.
    fn select_steps<Src: Shape + RemoveDimTo<Dst, ()>, Dst: Shape>(
        t: &Tensor<Src, E, Self>,
        k: usize,
    ) -> Vec<Tensor<Dst, E, Self>> {
        host_slices(t, 0..k)
    }
}

/// Slices `range` of `t`'s leading axis, each a tensor of its own: one copy
/// of the stack into a staging buffer kept between scans (see
/// [`with_staging`]), then one copy per slice.
fn host_slices<Src: Shape + RemoveDimTo<Dst, ()>, Dst: Shape, E: Dtype>(
    t: &Tensor<Src, E, Cpu>,
    range: std::ops::Range<usize>,
) -> Vec<Tensor<Dst, E, Cpu>> {
    let dst = t.shape().remove(());
    let n = dst.num_elements();
    // A no-op on a stack built by `stack_batches` or a loader.
    let t = t.clone().contiguous();
    with_staging(t.shape().num_elements(), |all: &mut [E]| {
        t.copy_into(all);
        range
            .map(|i| {
                t.device()
                    .tensor_from_vec(all[i * n..(i + 1) * n].to_vec(), dst)
            })
            .collect()
    })
}

/// Staging buffers larger than this are freed after the scan instead of
/// kept: a scan over a huge stack should not pin its size for the rest of
/// the process.
const KEEP_STAGING: usize = 64 << 20;

std::thread_local! {
    /// One host buffer per element type, reused by every scan on this
    /// thread.
    static STAGING: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on a buffer of `len` elements (with unspecified contents) kept
/// between calls on this thread. A fresh `vec![0; len]` per scan would zero
/// the whole stack before the copy overwrites it, a pass that a naive loop
/// over the same batches does not make.
fn with_staging<E: Dtype, R>(len: usize, f: impl FnOnce(&mut [E]) -> R) -> R {
    let taken = STAGING.with_borrow_mut(|pool| {
        let i = pool.iter().position(|b| b.is::<Vec<E>>())?;
        pool.swap_remove(i).downcast::<Vec<E>>().ok()
    });
    let mut buf = taken.map_or_else(Vec::new, |b| *b);
    // Only the part beyond the old length is written here; the rest is
    // overwritten by the caller's copy.
    buf.resize(len, E::default());
    let out = f(&mut buf);
    if buf.capacity() * std::mem::size_of::<E>() <= KEEP_STAGING {
        STAGING.with_borrow_mut(|pool| pool.push(Box::new(buf)));
    }
    out
}

#[cfg(feature = "cuda")]
mod cuda_select {
    use super::*;

    macro_rules! impl_float {
        ($($e:ty),*) => {$(
            impl SelectStep<$e> for Cuda {
                fn select_step<Src: Shape + RemoveDimTo<Dst, ()>, Dst: Shape>(
                    t: &Tensor<Src, $e, Self>,
                    k: usize,
                ) -> Tensor<Dst, $e, Self> {
                    let idx = t.device().tensor(k);
                    t.clone().select(idx)
                }
            }
        )*};
    }
    impl_float!(f32, f64);
    #[cfg(feature = "f16")]
    impl_float!(dfdx::dtypes::f16, dfdx::dtypes::AMP<dfdx::dtypes::f16>);

    impl SelectStep<usize> for Cuda {
        fn select_step<Src: Shape + RemoveDimTo<Dst, ()>, Dst: Shape>(
            t: &Tensor<Src, usize, Self>,
            k: usize,
        ) -> Tensor<Dst, usize, Self> {
            let all = t.as_vec();
            let dst = t.shape().remove(());
            let n = dst.num_elements();
            t.device()
                .tensor_from_vec(all[k * n..(k + 1) * n].to_vec(), dst)
        }
    }
}

macro_rules! impl_stacked_tensor {
    ($($d:ident),+) => {
        impl<const K: usize, $($d: Dim,)+ E: Unit, D: SelectStep<E>> Stacked<K>
            for Tensor<(Const<K>, $($d,)+), E, D>
        {
            type Step = Tensor<($($d,)+), E, D>;
            fn step(&self, k: usize) -> Self::Step {
                D::select_step(self, k)
            }
            fn steps(&self) -> Vec<Self::Step> {
                D::select_steps(self, K)
            }
            fn on_host(&self) -> bool {
                D::ON_HOST
            }
        }
    };
}
impl_stacked_tensor!(A);
impl_stacked_tensor!(A, B);
impl_stacked_tensor!(A, B, C);
impl_stacked_tensor!(A, B, C, F);
impl_stacked_tensor!(A, B, C, F, G);

macro_rules! impl_stacked_tuple {
    ($($t:ident $i:tt),+) => {
        impl<const K: usize, $($t: Stacked<K>,)+> Stacked<K> for ($($t,)+) {
            type Step = ($($t::Step,)+);
            fn step(&self, k: usize) -> Self::Step {
                ($(self.$i.step(k),)+)
            }
            fn steps(&self) -> Vec<Self::Step> {
                // Each component's slices, then zipped step by step.
                #[allow(non_snake_case)]
                let ($(mut $t,)+) = ($(self.$i.steps().into_iter(),)+);
                (0..K)
                    .map(|_| ($($t.next().expect("K slices"),)+))
                    .collect()
            }
            fn on_host(&self) -> bool {
                $(self.$i.on_host())||+
            }
        }
    };
}
impl_stacked_tuple!(P 0);
impl_stacked_tuple!(P 0, Q 1);
impl_stacked_tuple!(P 0, Q 1, R 2);
impl_stacked_tuple!(P 0, Q 1, R 2, S 3);

impl<const K: usize, T: Stacked<K>> Stacked<K> for &T {
    type Step = T::Step;
    fn step(&self, k: usize) -> Self::Step {
        (**self).step(k)
    }
    fn steps(&self) -> Vec<Self::Step> {
        (**self).steps()
    }
    fn on_host(&self) -> bool {
        (**self).on_host()
    }
}

/// Stacks `K` batches into one value with a leading axis of length `K`, the
/// input `scan!` expects. Each component is stacked separately, so
/// `[(x0, y0), (x1, y1)]` becomes `(stack[x0, x1], stack[y0, y1])`.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::scan::{stack_batches, Stacked};
/// let dev: Cpu = Default::default();
/// let b = |v: f32| (dev.tensor([[v; 3]; 2]), dev.tensor([1usize, 0]));
/// let (x, y) = stack_batches([b(0.0), b(1.0), b(2.0)]);
/// let _: &Tensor<Rank3<3, 2, 3>, f32, _> = &x;
/// assert_eq!(y.array(), [[1, 0]; 3]);
/// ```
pub fn stack_batches<B: StackBatches>(batches: B) -> B::Stacked {
    batches.stack_batches()
}

/// `K` batches that [`stack_batches`] can stack: an array `[T; K]` of tensors
/// or of tuples of tensors.
pub trait StackBatches {
    /// The stacked value.
    type Stacked;
    /// Stacks the items.
    fn stack_batches(self) -> Self::Stacked;
}

impl<S: Shape, E: Unit, D: Storage<E>, const K: usize> StackBatches for [Tensor<S, E, D>; K]
where
    [Tensor<S, E, D>; K]: TryStack,
{
    type Stacked = <[Tensor<S, E, D>; K] as TryStack>::Stacked;
    fn stack_batches(self) -> Self::Stacked {
        self.stack()
    }
}

macro_rules! impl_stack_tuple {
    ($($t:ident $i:tt),+) => {
        impl<const K: usize, $($t,)+> StackBatches for [($($t,)+); K]
        where
            $([$t; K]: StackBatches,)+
        {
            type Stacked = ($(<[$t; K] as StackBatches>::Stacked,)+);
            fn stack_batches(self) -> Self::Stacked {
                let mut parts = ($(Vec::<$t>::with_capacity(K),)+);
                for item in self {
                    $(parts.$i.push(item.$i);)+
                }
                ($(to_array::<$t, K>(parts.$i).stack_batches(),)+)
            }
        }
    };
}
impl_stack_tuple!(P 0, Q 1);
impl_stack_tuple!(P 0, Q 1, R 2);
impl_stack_tuple!(P 0, Q 1, R 2, S 3);

fn to_array<T, const K: usize>(v: Vec<T>) -> [T; K] {
    match v.try_into() {
        Ok(a) => a,
        // The caller pushed exactly one element per item of a `[_; K]`.
        Err(_) => unreachable!("stack_batches: one element per batch"),
    }
}

/// Stacks the K per-step losses into one `[K]` tensor that stays on the
/// device. Called by the code `scan!` generates.
#[doc(hidden)]
pub fn stack_losses<E: Dtype, D: Device<E>, const K: usize>(
    losses: [Tensor<Rank0, E, D>; K],
) -> Tensor<Rank1<K>, E, D> {
    losses.stack()
}

/// The rolled form used by `scan!` when K is a `const` item rather than a
/// literal (the macro cannot read the item's value): the loop bound is the
/// compile-time constant `K`, so the calls are the same K sequential steps.
#[doc(hidden)]
pub fn scan_const<const K: usize, St, B, F, E, D>(
    mut step: F,
    mut state: St,
    batches: &B,
) -> (St, Tensor<Rank1<K>, E, D>)
where
    B: Stacked<K>,
    F: FnMut(St, B::Step) -> (St, Tensor<Rank0, E, D>),
    E: Dtype,
    D: Device<E>,
{
    const { assert!(K > 0, "`scan!` needs at least one step (K = 0)") };
    let awake = awake_for::<K, B>(batches);
    let mut losses = Vec::with_capacity(K);
    for batch in batches.steps() {
        let (next, loss) = call_step(&mut step, state, batch);
        state = next;
        losses.push(loss);
    }
    drop(awake);
    (state, stack_losses(to_array(losses)))
}

/// One of the K calls a literal `scan!` writes out (and the `const` form's
/// loop makes). Not inlined: the K calls share one copy of the step's code
/// instead of K inlined copies in one function, which measured 3-7% slower
/// on a CNN's step (alternated `bench_scan` runs, W2) and builds slower.
#[doc(hidden)]
#[inline(never)]
pub fn call_step<Step, State, Batch, StateAndLoss>(
    step: &mut Step,
    state: State,
    batch: Batch,
) -> StateAndLoss
where
    // Named for the error a step of the wrong signature gets, which quotes
    // this bound.
    Step: FnMut(State, Batch) -> StateAndLoss,
{
    step(state, batch)
}

/// Compile-time check used by `scan!`: the batches are stacked `[K, ...]`.
/// A mismatch is reported through [`Stacked`]'s diagnostic, which names K and
/// the batches' type (and so their leading axis).
#[doc(hidden)]
pub fn assert_stacked<const K: usize, B: Stacked<K>>(_: &B) {}

/// What `scan!` holds for its K steps: the pool kept awake
/// ([`keep_awake`](crate::threads::keep_awake)) when the batches are in
/// host memory and [`set_awake_in_scan`](crate::threads::set_awake_in_scan)
/// has not turned it off. A device's steps leave the CPU threads alone.
#[doc(hidden)]
pub fn awake_for<const K: usize, B: Stacked<K>>(batches: &B) -> Option<crate::threads::KeepAwake> {
    (batches.on_host() && crate::threads::awake_in_scan()).then(crate::threads::keep_awake)
}
