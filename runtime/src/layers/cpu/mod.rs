//! flaxen's CPU kernels for convolution and pooling and their registration
//! on dfdx's tape through its public API (`split_tape`, `add_backward_op`,
//! `Gradients::get_or_alloc_mut`, `put_tape`).
//!
//! dfdx does not expose a tensor's buffer, so inputs are read with one
//! `copy_into` (a memcpy); everything else works in place: the output
//! gradient is moved out of the `Gradients` while the input gradients are
//! written, then put back.

pub(super) mod attention;
pub(super) mod conv;
mod conv_transpose;
mod dense;
mod direct;
pub(super) mod gelu;
mod gemm;
mod host;
mod im2col;
pub(super) mod lstm;
pub(super) mod math;
pub(super) mod norm;
mod pool;
pub(super) mod resize;
mod scratch;
mod wide;

use dfdx::prelude::*;

use super::{ConvGeometry, Epilogue, PoolKind, Window2D};
pub(crate) use host::Host;
use scratch::{Pooled, Scratch};

pub(super) use conv_transpose::conv_transpose2d;

/// The element types the CPU kernels are written for.
pub(crate) trait Elem: Dtype + num_traits::Float + Pooled {}
impl Elem for f32 {}
impl Elem for f64 {}

/// How many items each rayon task gets: one contiguous run per thread, so
/// per-task scratch buffers and partial sums stay few.
fn chunking(items: usize) -> usize {
    items.div_ceil(rayon::current_num_threads().max(1)).max(1)
}

/// [`chunking`] for tasks that carry their own scratch and partial sums
/// (the convolutions): four tasks per thread, so a thread that falls behind
/// (another process, a slower core) leaves work for the others to steal.
fn fine_chunking(items: usize) -> usize {
    items
        .div_ceil(4 * rayon::current_num_threads().max(1))
        .max(1)
}

/// `[f(0), f(1), ..]`, always inlined: `std::array::from_fn` measured
/// out of line (its `try_from_fn`), which compiled it without the caller's
/// SIMD instruction set.
#[inline(always)]
pub(super) fn lanes<T: Copy + Default, const N: usize>(f: impl Fn(usize) -> T) -> [T; N] {
    let mut v = [T::default(); N];
    for (l, x) in v.iter_mut().enumerate() {
        *x = f(l);
    }
    v
}

/// A raw pointer that rayon tasks share, each writing its own examples'
/// disjoint ranges through it.
#[derive(Clone, Copy)]
pub(super) struct Shared<T>(*mut T);
// SAFETY: the tasks write disjoint ranges (see `Shared::range`) and end
// before the buffer is used again (rayon joins them).
unsafe impl<T: Send> Send for Shared<T> {}
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub(super) fn new(buf: &mut [T]) -> Self {
        Self(buf.as_mut_ptr())
    }

    /// Elements `start..start + len`; an empty slice when `len` is 0,
    /// whatever `start` is (an empty buffer's pointer must not be offset).
    ///
    /// # Safety
    /// A non-empty range lies inside the buffer `new` saw, is initialised,
    /// and no other live reference overlaps it.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn range(&self, start: usize, len: usize) -> &mut [T] {
        if len == 0 {
            return &mut [];
        }
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// The tensor's values in row-major order (one memcpy when contiguous).
fn host_vec<S: Shape, E: Elem, T: Tape<E, Cpu>>(
    t: Tensor<S, E, Cpu, T>,
) -> Result<Scratch<E>, CpuError> {
    let t = t.try_contiguous()?;
    let mut buf = Scratch::new(t.shape().num_elements());
    t.copy_into(&mut buf);
    Ok(buf)
}

/// Lanes of the row kernels' reductions: independent partial results
/// that the compiler keeps in vector registers.
const LANES: usize = 16;

/// `f` folded over `xs` in [`LANES`] interleaved partial results, which
/// `combine` then joins: a reduction the compiler vectorises, where a
/// single running value is one dependent chain of scalar operations (a
/// LayerNorm's mean and variance over 128 features, a softmax's maximum
/// and sum).
#[inline(always)]
fn fold_lanes<E: Copy>(xs: &[E], init: E, f: impl Fn(E, E) -> E, combine: impl Fn(E, E) -> E) -> E {
    let mut acc = [init; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = f(*a, x);
        }
    }
    let acc = acc.into_iter().fold(init, &combine);
    tail.iter().fold(acc, |a, &x| f(a, x))
}

fn add_into<E: Elem>(dst: &mut [E], src: &[E]) {
    dst.iter_mut().zip(src).for_each(|(d, &s)| *d += s);
}

/// A convolution's host kernels, as [`conv_on_tape`] runs them: the
/// convolution's ([`conv`]) and the transposed one's
/// ([`conv_transpose`]).
pub(super) trait ConvKernels<E: Elem> {
    /// Names the op when the tensors' sizes disagree with the geometry.
    const NAME: &'static str;
    /// What the forward pass keeps for the backward one.
    type Saved: 'static;
    /// The weight's gradient, in `weight`'s layout.
    type WeightGrad: std::ops::Deref<Target = [E]>;
    /// Whether the kernels handle this geometry (its groups) and epilogue.
    fn supports(geom: &ConvGeometry, epi: &Epilogue) -> bool;
    /// `y` over `batch` examples, and what the backward pass needs (`keep`:
    /// there will be one).
    fn forward(
        geom: &ConvGeometry,
        epi: &Epilogue,
        batch: usize,
        x: Scratch<E>,
        weight: Scratch<E>,
        bias: Option<&[E]>,
        keep: bool,
    ) -> (Vec<E>, Self::Saved);
    /// Adds `x`'s gradient into `dx` when given, and returns the weight's
    /// and (when `bias_grad`, else empty) the bias's gradients.
    fn backward(
        geom: &ConvGeometry,
        epi: &Epilogue,
        batch: usize,
        saved: &Self::Saved,
        dy: &[E],
        dx: Option<&mut [E]>,
        bias_grad: bool,
    ) -> (Self::WeightGrad, Vec<E>);
}

/// The tape plumbing of a convolution, one body for [`conv2d`] and
/// [`conv_transpose2d`]: checks the tensors' sizes against `geom`, reads
/// them into host buffers, runs `Kn`'s forward kernel and, when `x` has a
/// tape, records the backward kernel on it (without `input_grad` it leaves
/// `x`'s gradient alone).
#[allow(clippy::too_many_arguments)]
fn conv_on_tape<Kn, E, X, K, Bs, Y, T>(
    dev: &Cpu,
    geom: &ConvGeometry,
    epi: &Epilogue,
    x: Tensor<X, E, Cpu, T>,
    weight: &Tensor<K, E, Cpu>,
    bias: Option<&Tensor<Bs, E, Cpu>>,
    y_shape: Y,
    input_grad: bool,
) -> Result<Tensor<Y, E, Cpu, T>, CpuError>
where
    Kn: ConvKernels<E>,
    E: Elem,
    X: Shape,
    K: Shape,
    Bs: Shape,
    Y: Shape,
    T: Tape<E, Cpu>,
{
    let chw = geom.c * geom.win.in_plane();
    let numel = x.shape().num_elements();
    let batch = numel / chw.max(1);
    assert!(
        batch * chw == numel
            && Kn::supports(geom, epi)
            && y_shape.num_elements() == batch * geom.o * epi.out_plane(geom)
            && weight.shape().num_elements() == geom.o * geom.patch()
            && bias.is_none_or(|b| b.shape().num_elements() == geom.o),
        "{}: tensor sizes disagree with {geom:?}, {epi:?}",
        Kn::NAME
    );
    // A permuted or broadcast `x` is copied into row-major order on its own
    // tape, so the gradient reaches its physical layout through dfdx.
    let x = x.try_contiguous()?;
    let (x, mut tape) = x.split_tape();
    let x_ghost = x.ghost();
    let xs = host_vec(x)?;
    let ws = host_vec(weight.clone())?;
    let bs = bias.map(|b| host_vec(b.clone())).transpose()?;
    let (ys, saved) = Kn::forward(geom, epi, batch, xs, ws, bs.as_deref(), T::OWNS_TAPE);
    let y = dev.try_tensor_from_vec(ys, y_shape)?;
    if T::OWNS_TAPE {
        let (w_ghost, y_ghost) = (weight.ghost(), y.ghost());
        let b_ghost = bias.map(|b| b.ghost());
        let (geom, epi) = (*geom, *epi);
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            let dx = match input_grad {
                true => Some(&mut grads.get_or_alloc_mut(&x_ghost)?[..]),
                false => None,
            };
            let with_bias = b_ghost.is_some();
            let (dw, db) = Kn::backward(&geom, &epi, batch, &saved, &dy, dx, with_bias);
            add_into(grads.get_or_alloc_mut(&w_ghost)?, &dw);
            if let Some(b_ghost) = &b_ghost {
                add_into(grads.get_or_alloc_mut(b_ghost)?, &db);
            }
            **grads.get_or_alloc_mut(&y_ghost)? = dy;
            Ok(())
        });
    }
    Ok(y.put_tape(tape))
}

/// See [`FlaxenDevice::try_conv2d_fused`](super::FlaxenDevice::try_conv2d_fused)
/// (and, with [`Epilogue::NONE`], [`FlaxenDevice::try_conv2d`](super::FlaxenDevice::try_conv2d));
/// without `input_grad` the backward pass leaves `x`'s gradient alone
/// ([`FlaxenDevice::try_conv2d_no_input_grad`](super::FlaxenDevice::try_conv2d_no_input_grad)),
/// and without `bias` the convolution has none
/// ([`FlaxenDevice::try_conv2d_unbiased`](super::FlaxenDevice::try_conv2d_unbiased)).
#[allow(clippy::too_many_arguments, private_bounds)]
pub(super) fn conv2d<E: Elem, X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<E, Cpu>>(
    dev: &Cpu,
    geom: &ConvGeometry,
    epi: &Epilogue,
    x: Tensor<X, E, Cpu, T>,
    weight: &Tensor<K, E, Cpu>,
    bias: Option<&Tensor<Bs, E, Cpu>>,
    y_shape: Y,
    input_grad: bool,
) -> Result<Tensor<Y, E, Cpu, T>, CpuError>
where
    conv::Kernels: ConvKernels<E>,
{
    conv_on_tape::<conv::Kernels, _, _, _, _, _, _>(
        dev, geom, epi, x, weight, bias, y_shape, input_grad,
    )
}

/// See [`FlaxenDevice::try_dense`](super::FlaxenDevice::try_dense): `x` is
/// `(batch, i)`, `weight` `(o, i)`, `bias` `(o,)`.
pub(super) fn dense<E: Host, X: Shape, K: Shape, Bs: Shape, Y: Shape, T: Tape<E, Cpu>>(
    dev: &Cpu,
    x: Tensor<X, E, Cpu, T>,
    weight: &Tensor<K, E, Cpu>,
    bias: &Tensor<Bs, E, Cpu>,
    y_shape: Y,
) -> Result<Tensor<Y, E, Cpu, T>, CpuError> {
    let o = bias.shape().num_elements();
    let i = weight.shape().num_elements() / o.max(1);
    let batch = x.shape().num_elements() / i.max(1);
    let x = x.try_contiguous()?;
    let (x, mut tape) = x.split_tape();
    let x_ghost = x.ghost();
    let xs = host_vec(x)?;
    let ws = host_vec(weight.clone())?;
    let bs = host_vec(bias.clone())?;
    let y = dev.try_tensor_from_vec(E::dense_forward(batch, i, o, &xs, &ws, &bs), y_shape)?;
    if T::OWNS_TAPE {
        let (w_ghost, b_ghost, y_ghost) = (weight.ghost(), bias.ghost(), y.ghost());
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            // Each gradient taken out while the three are written.
            let mut dw = std::mem::take(&mut **grads.get_or_alloc_mut(&w_ghost)?);
            let mut db = std::mem::take(&mut **grads.get_or_alloc_mut(&b_ghost)?);
            let dx = grads.get_or_alloc_mut(&x_ghost)?;
            E::dense_backward(batch, i, o, &xs, &ws, &dy, dx, &mut dw, &mut db);
            **grads.get_or_alloc_mut(&w_ghost)? = dw;
            **grads.get_or_alloc_mut(&b_ghost)? = db;
            **grads.get_or_alloc_mut(&y_ghost)? = dy;
            Ok(())
        });
    }
    Ok(y.put_tape(tape))
}

/// Elements per rayon task of the elementwise kernels: large enough that
/// a task outweighs its scheduling, small enough to split a conv output.
pub(super) const ELEMWISE_CHUNK: usize = 1 << 15;

/// An elementwise op on the tape, in one parallel pass each way:
/// `forward(xs, keep)` gives the output and what the backward pass keeps
/// (when `keep`), `backward(xs, kept, dy, dx)` adds `x`'s gradient.
fn elementwise<E, S, T, K>(
    dev: &Cpu,
    x: Tensor<S, E, Cpu, T>,
    forward: impl FnOnce(&[E], bool) -> (Vec<E>, K),
    backward: impl FnOnce(&[E], &K, &[E], &mut [E]) + 'static,
) -> Result<Tensor<S, E, Cpu, T>, CpuError>
where
    E: Elem,
    S: Shape,
    T: Tape<E, Cpu>,
    K: 'static,
{
    // A permuted `x` is copied into row-major order on its own tape (see
    // `conv_on_tape`).
    let x = x.try_contiguous()?;
    let shape = *x.shape();
    let (x, mut tape) = x.split_tape();
    let x_ghost = x.ghost();
    let xs = host_vec(x)?;
    let (ys, kept) = forward(&xs, T::OWNS_TAPE);
    let y = dev.try_tensor_from_vec(ys, shape)?;
    if T::OWNS_TAPE {
        let y_ghost = y.ghost();
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            backward(&xs, &kept, &dy, grads.get_or_alloc_mut(&x_ghost)?);
            **grads.get_or_alloc_mut(&y_ghost)? = dy;
            Ok(())
        });
    }
    Ok(y.put_tape(tape))
}

/// See [`FlaxenDevice::try_relu_fast`](super::FlaxenDevice::try_relu_fast).
pub(super) fn relu<E: Host, S: Shape, T: Tape<E, Cpu>>(
    dev: &Cpu,
    x: Tensor<S, E, Cpu, T>,
) -> Result<Tensor<S, E, Cpu, T>, CpuError> {
    elementwise(
        dev,
        x,
        |xs, _| (E::relu_forward(xs), ()),
        |xs, _, dy, dx| E::relu_backward(xs, dy, dx),
    )
}

/// See [`FlaxenDevice::try_gelu_tanh`](super::FlaxenDevice::try_gelu_tanh):
/// with a tape, each element's `tanh` is kept for the backward pass.
pub(super) fn gelu_tanh<E: Host, S: Shape, T: Tape<E, Cpu>>(
    dev: &Cpu,
    x: Tensor<S, E, Cpu, T>,
) -> Result<Tensor<S, E, Cpu, T>, CpuError> {
    elementwise(dev, x, E::gelu_forward, |xs, ts, dy, dx| {
        E::gelu_backward(xs, ts, dy, dx)
    })
}

/// See [`FlaxenDevice::try_pool2d`](super::FlaxenDevice::try_pool2d).
pub(super) fn pool2d<E: Host, X: Shape, Y: Shape, T: Tape<E, Cpu>>(
    dev: &Cpu,
    kind: PoolKind,
    channels: usize,
    win: &Window2D,
    x: Tensor<X, E, Cpu, T>,
    y_shape: Y,
) -> Result<Tensor<Y, E, Cpu, T>, CpuError> {
    let numel = x.shape().num_elements();
    let planes = numel / win.in_plane().max(1);
    assert!(
        planes * win.in_plane() == numel
            && planes.is_multiple_of(channels.max(1))
            && y_shape.num_elements() == planes * win.out_plane(),
        "pool2d: tensor sizes disagree with {channels} channels of {win:?}"
    );
    // A permuted or broadcast `x` is copied into row-major order on its own
    // tape, so the gradient reaches its physical layout through dfdx.
    let x = x.try_contiguous()?;
    let (x, mut tape) = x.split_tape();
    let x_ghost = x.ghost();
    let xs = host_vec(x)?;
    let win = *win;
    let (ys, arg) = E::pool_forward(kind, &win, planes, &xs);
    drop(xs);
    let y = dev.try_tensor_from_vec(ys, y_shape)?;
    if T::OWNS_TAPE {
        let y_ghost = y.ghost();
        tape.add_backward_op(move |grads| {
            let dy = std::mem::take(&mut **grads.get_or_alloc_mut(&y_ghost)?);
            let dx = grads.get_or_alloc_mut(&x_ghost)?;
            E::pool_backward(kind, &win, &arg, &dy, dx);
            **grads.get_or_alloc_mut(&y_ghost)? = dy;
            Ok(())
        });
    }
    Ok(y.put_tape(tape))
}
