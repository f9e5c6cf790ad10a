//! [`Rnn`]: Flax linen's `nn.RNN` over its `LSTMCell`, `GRUCell` and
//! `SimpleCell`, as dfdx modules built from dfdx's differentiable ops (so
//! they run, and train, on every device).
//!
//! # Layout and names
//!
//! Each cell keeps Flax's gates as separate [`Dense`]/[`UnbiasedDense`]
//! layers, named as Flax names them (`ii`, `if`, `ig`, `io`, `hi`, …) and
//! laid out as dfdx's `Linear` (`weight` is Flax's `kernel` transposed). In
//! Flax the cell, not the `RNN`, owns the parameters (`RNN` has none, and a
//! model's first LSTM cell is `LSTMCell_0`), so [`Rnn`] adds no level to the
//! checkpoint keys: Flax's `LSTMCell_0/ii/kernel` is flaxen's
//! `lstm_cell_0.ii.weight` (transposed) when the field is `lstm_cell_0`.
//!
//! # The time loop
//!
//! A runtime loop over the steps, not an unrolled one: the code is the same
//! for every length, and the input projections of all steps are one product
//! per gate before the loop (`[S * B, I] x [I, H]`), which leaves each step
//! the recurrent products and the elementwise gate arithmetic. On the CPU
//! (`f32`, `f64`), an LSTM then runs all its steps as one op
//! ([`FlaxenDevice::try_lstm_scan`]): the batch split over the threads
//! once, one product of the hidden state with the four recurrent kernels
//! per step, the gate arithmetic in one pass, and the recurrent kernels'
//! gradients as one product per gate over all steps.
//! `examples/bench_layers.rs` measures it.

use dfdx::nn::{BuildModule, BuildOnDevice, Module, NonMutableModule};
use dfdx::prelude::*;

use super::{Dense, FlaxenDevice, UnbiasedDense};

/// Builders of the RNN and its cells, for `dev.build_module::<M, E>()`.
pub mod builder {
    use std::marker::PhantomData;

    /// Flax's `LSTMCell(features = H)` on `I` input features.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct LstmCell<const I: usize, const H: usize>;

    /// Flax's `GRUCell(features = H)` on `I` input features.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct GruCell<const I: usize, const H: usize>;

    /// Flax's `SimpleCell(features = H)` on `I` input features.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct SimpleCell<const I: usize, const H: usize>;

    /// Builds an [`Rnn`](super::Rnn) over the cell that builder `C` builds:
    /// `dev.build_module::<Rnn<LstmCell<I, H>, REVERSE, KEEP_ORDER,
    /// RETURN_CARRY>, E>()`.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct Rnn<C, const REVERSE: bool, const KEEP_ORDER: bool, const RETURN_CARRY: bool>(
        PhantomData<C>,
    );
}

/// A batch of `N`-feature rows.
type Rows<B, const N: usize, E, D, T = NoneTape> = Tensor<(B, Const<N>), E, D, T>;

/// Flax linen's `nn.RNN(cell, reverse = REVERSE, keep_order = KEEP_ORDER,
/// return_carry = RETURN_CARRY)` on `[batch, S, I]` inputs, with or without
/// a tape. The carry starts at zeros (Flax's `carry_init`).
///
/// - `RETURN_CARRY = false`: the outputs of every step, `[batch, S, H]`, in
///   the order the steps ran: with `REVERSE` the first row is the step that
///   read the last input, unless `KEEP_ORDER` puts them back in the
///   inputs' order (as Flax's `keep_order`, for bidirectional RNNs).
/// - `RETURN_CARRY = true`: the final hidden state, `[batch, H]` (the last
///   step's output). Flax returns the tuple `(carry, outputs)`; flaxen
///   returns only the part a classifier reads. An `LSTMCell`'s memory `c`
///   stays inside.
///
/// ```
/// use dfdx::prelude::*;
/// use flaxen_runtime::layers::builder::{LstmCell, Rnn};
///
/// let dev: Cpu = Default::default();
/// let lstm = dev.build_module::<Rnn<LstmCell<3, 5>, false, false, false>, f32>();
/// let x: Tensor<Rank3<2, 7, 3>, f32, _> = dev.sample_normal();
/// let y: Tensor<Rank3<2, 7, 5>, f32, _, _> = lstm.forward(x.leaky_trace());
/// let grads = y.sum().backward();
/// let _ = grads.get(&lstm.cell.hi.weight);
///
/// let last = dev.build_module::<Rnn<LstmCell<3, 5>, true, false, true>, f32>();
/// let h: Tensor<Rank2<2, 5>, f32, _> = last.forward(dev.sample_normal::<Rank3<2, 7, 3>>());
/// ```
#[derive(Debug, Clone)]
pub struct Rnn<C, const REVERSE: bool, const KEEP_ORDER: bool, const RETURN_CARRY: bool> {
    /// The cell run at every step.
    pub cell: C,
}

/// Flax's `LSTMCell(features = H)`: with `σ` the sigmoid,
/// `i = σ(ii x + hi h)`, `f = σ(if x + hf h)`, `g = tanh(ig x + hg h)`,
/// `o = σ(io x + ho h)`, `c' = f c + i g`, `h' = o tanh(c')`.
///
/// The input kernels have no bias and Flax's `lecun_normal` init; the
/// recurrent ones have a zero bias and Flax's `orthogonal` init.
#[derive(Debug, Clone)]
pub struct LstmCell<const I: usize, const H: usize, E: Dtype, D: Storage<E>> {
    /// Input to the input gate (Flax's `ii`).
    pub ii: UnbiasedDense<I, H, E, D>,
    /// Input to the forget gate (Flax's `if`).
    pub if_: UnbiasedDense<I, H, E, D>,
    /// Input to the candidate memory (Flax's `ig`).
    pub ig: UnbiasedDense<I, H, E, D>,
    /// Input to the output gate (Flax's `io`).
    pub io: UnbiasedDense<I, H, E, D>,
    /// Hidden state to the input gate (Flax's `hi`).
    pub hi: Dense<H, H, E, D>,
    /// Hidden state to the forget gate (Flax's `hf`).
    pub hf: Dense<H, H, E, D>,
    /// Hidden state to the candidate memory (Flax's `hg`).
    pub hg: Dense<H, H, E, D>,
    /// Hidden state to the output gate (Flax's `ho`).
    pub ho: Dense<H, H, E, D>,
}

/// Flax's `GRUCell(features = H)`: `r = σ(ir x + hr h)`,
/// `z = σ(iz x + hz h)`, `n = tanh(in x + r (hn h))`, `h' = (1 - z) n + z h`.
///
/// The input kernels have a zero bias and `lecun_normal` init; `hr` and
/// `hz` have no bias, `hn` a zero one, all three `orthogonal` init.
#[derive(Debug, Clone)]
pub struct GruCell<const I: usize, const H: usize, E: Dtype, D: Storage<E>> {
    /// Input to the reset gate (Flax's `ir`).
    pub ir: Dense<I, H, E, D>,
    /// Input to the update gate (Flax's `iz`).
    pub iz: Dense<I, H, E, D>,
    /// Input to the candidate (Flax's `in`).
    pub in_: Dense<I, H, E, D>,
    /// Hidden state to the reset gate (Flax's `hr`).
    pub hr: UnbiasedDense<H, H, E, D>,
    /// Hidden state to the update gate (Flax's `hz`).
    pub hz: UnbiasedDense<H, H, E, D>,
    /// Hidden state to the candidate (Flax's `hn`).
    pub hn: Dense<H, H, E, D>,
}

/// Flax's `SimpleCell(features = H)`: `h' = tanh(i x + h h)`, `i` with a
/// zero bias and `lecun_normal` init, `h` without bias, `orthogonal` init.
#[derive(Debug, Clone)]
pub struct SimpleCell<const I: usize, const H: usize, E: Dtype, D: Storage<E>> {
    /// Input to the state (Flax's `i`).
    pub i: Dense<I, H, E, D>,
    /// Hidden state to the state (Flax's `h`).
    pub h: UnbiasedDense<H, H, E, D>,
}

/// What [`Rnn`] needs of a cell: its input projections for every step at
/// once, its zero carry and one step. Implemented by [`LstmCell`],
/// [`GruCell`] and [`SimpleCell`].
pub trait RecurrentCell<E: Dtype, D: FlaxenDevice<E>> {
    /// Input features, `Const<I>`.
    type In: ConstDim;
    /// Output (hidden) features, `Const<H>`.
    type Out: ConstDim;
    /// The state between steps, without tapes (`(c, h)` or `h`).
    type Carry<B: Dim>;

    /// The input projections (one per gate) of all `S` steps,
    /// `[S, B, I] -> [S, B, H]`, without tapes; the returned tape holds
    /// their backward passes and `x`'s.
    #[allow(clippy::type_complexity)]
    fn try_project<B: Dim, S: Dim, T: Tape<E, D>>(
        &self,
        x: Tensor<(S, B, Self::In), E, D, T>,
    ) -> Result<(Vec<Tensor<(S, B, Self::Out), E, D>>, T), D::Err>;

    /// The zero carry of a batch of `b`.
    fn try_zero_carry<B: Dim>(dev: &D, b: B) -> Result<Self::Carry<B>, D::Err>;

    /// Every step in one op, where the device has a kernel for this cell:
    /// the outputs `[S, B, H]` in the order the steps ran (by time with
    /// `keep_order`), their backward pass on `tape`. `None`: run
    /// [`try_step`](Self::try_step) step by step.
    #[allow(clippy::type_complexity)]
    fn try_scan<B: Dim, S: Dim, T: Tape<E, D>>(
        &self,
        proj: &[Tensor<(S, B, Self::Out), E, D>],
        tape: &mut T,
        reverse: bool,
        keep_order: bool,
    ) -> Option<Result<Tensor<(S, B, Self::Out), E, D>, D::Err>> {
        let _ = (proj, tape, reverse, keep_order);
        None
    }

    /// One step from the step's input projections (as `try_project` orders
    /// them): the new carry and the step's output, whose tape holds the
    /// step's backward pass.
    #[allow(clippy::type_complexity)]
    fn try_step<B: Dim, T: Tape<E, D>>(
        &self,
        x: Vec<Tensor<(B, Self::Out), E, D, T>>,
        carry: Self::Carry<B>,
    ) -> Result<(Self::Carry<B>, Tensor<(B, Self::Out), E, D, T>), D::Err>;
}

/// Projects `x` through every layer of `gates`, splitting the tapes off.
#[allow(clippy::type_complexity)]
fn project<B, S, const I: usize, const H: usize, E, D, T, L>(
    gates: &[&L],
    x: Tensor<(S, B, Const<I>), E, D, T>,
) -> Result<(Vec<Tensor<(S, B, Const<H>), E, D>>, T), D::Err>
where
    B: Dim,
    S: Dim,
    E: Dtype,
    D: FlaxenDevice<E>,
    T: Tape<E, D>,
    L: Module<
        Tensor<(S, B, Const<I>), E, D, T>,
        Output = Tensor<(S, B, Const<H>), E, D, T>,
        Error = D::Err,
    >,
{
    let (x, mut tape) = x.split_tape();
    let mut out = Vec::with_capacity(gates.len());
    for g in gates {
        let (y, t) = g
            .try_forward(x.clone().put_tape(T::default()))?
            .split_tape();
        tape = tape.merge(t);
        out.push(y);
    }
    Ok((out, tape))
}

/// `x` on a fresh, empty tape of type `T`.
fn taped<S: Shape, E: Dtype, D: Storage<E>, T: Tape<E, D>>(
    x: &Tensor<S, E, D>,
) -> Tensor<S, E, D, T> {
    x.clone().put_tape(T::default())
}

/// Splits `y`'s tape off into `acc`.
fn untape<S: Shape, E: Dtype, D: Storage<E>, T: Tape<E, D>>(
    y: Tensor<S, E, D, T>,
    acc: T,
) -> (Tensor<S, E, D>, T) {
    let (y, t) = y.split_tape();
    (y, acc.merge(t))
}

impl<const I: usize, const H: usize, E: Dtype, D: FlaxenDevice<E>> RecurrentCell<E, D>
    for LstmCell<I, H, E, D>
{
    type In = Const<I>;
    type Out = Const<H>;
    /// `(c, h)`.
    type Carry<B: Dim> = (Rows<B, H, E, D>, Rows<B, H, E, D>);

    fn try_project<B: Dim, S: Dim, T: Tape<E, D>>(
        &self,
        x: Tensor<(S, B, Const<I>), E, D, T>,
    ) -> Result<(Vec<Tensor<(S, B, Const<H>), E, D>>, T), D::Err> {
        project(&[&self.ii, &self.if_, &self.ig, &self.io], x)
    }

    fn try_zero_carry<B: Dim>(dev: &D, b: B) -> Result<Self::Carry<B>, D::Err> {
        Ok((
            dev.try_zeros_like(&(b, Const))?,
            dev.try_zeros_like(&(b, Const))?,
        ))
    }

    fn try_scan<B: Dim, S: Dim, T: Tape<E, D>>(
        &self,
        proj: &[Tensor<(S, B, Const<H>), E, D>],
        tape: &mut T,
        reverse: bool,
        keep_order: bool,
    ) -> Option<Result<Tensor<(S, B, Const<H>), E, D>, D::Err>> {
        let xp: &[_; 4] = proj.try_into().ok()?;
        let (w, b) = (
            [
                &self.hi.weight,
                &self.hf.weight,
                &self.hg.weight,
                &self.ho.weight,
            ],
            [&self.hi.bias, &self.hf.bias, &self.hg.bias, &self.ho.bias],
        );
        let dev = xp[0].device().clone();
        dev.try_lstm_scan(xp, tape, w, b, reverse, keep_order)
    }

    fn try_step<B: Dim, T: Tape<E, D>>(
        &self,
        x: Vec<Rows<B, H, E, D, T>>,
        (c, h): Self::Carry<B>,
    ) -> Result<(Self::Carry<B>, Rows<B, H, E, D, T>), D::Err> {
        let [xi, xf, xg, xo]: [_; 4] = x.try_into().unwrap_or_else(|_| unreachable!());
        let i = xi
            .try_add(self.hi.try_forward(taped::<_, _, _, T>(&h))?)?
            .try_sigmoid()?;
        let f = xf
            .try_add(self.hf.try_forward(taped::<_, _, _, T>(&h))?)?
            .try_sigmoid()?;
        let g = xg
            .try_add(self.hg.try_forward(taped::<_, _, _, T>(&h))?)?
            .try_tanh()?;
        let o = xo
            .try_add(self.ho.try_forward(taped::<_, _, _, T>(&h))?)?
            .try_sigmoid()?;
        let c = f.try_mul(taped::<_, _, _, T>(&c))?.try_add(i.try_mul(g)?)?;
        let (c, tape) = c.split_tape();
        let h = o.try_mul(taped::<_, _, _, T>(&c).try_tanh()?)?;
        let (h, t) = h.split_tape();
        let tape = tape.merge(t);
        Ok(((c, h.clone()), h.put_tape(tape)))
    }
}

impl<const I: usize, const H: usize, E: Dtype, D: FlaxenDevice<E>> RecurrentCell<E, D>
    for GruCell<I, H, E, D>
{
    type In = Const<I>;
    type Out = Const<H>;
    /// `h`.
    type Carry<B: Dim> = Rows<B, H, E, D>;

    fn try_project<B: Dim, S: Dim, T: Tape<E, D>>(
        &self,
        x: Tensor<(S, B, Const<I>), E, D, T>,
    ) -> Result<(Vec<Tensor<(S, B, Const<H>), E, D>>, T), D::Err> {
        project(&[&self.ir, &self.iz, &self.in_], x)
    }

    fn try_zero_carry<B: Dim>(dev: &D, b: B) -> Result<Self::Carry<B>, D::Err> {
        dev.try_zeros_like(&(b, Const))
    }

    fn try_step<B: Dim, T: Tape<E, D>>(
        &self,
        x: Vec<Rows<B, H, E, D, T>>,
        h: Self::Carry<B>,
    ) -> Result<(Self::Carry<B>, Rows<B, H, E, D, T>), D::Err> {
        let [xr, xz, xn]: [_; 3] = x.try_into().unwrap_or_else(|_| unreachable!());
        let r = xr
            .try_add(self.hr.try_forward(taped::<_, _, _, T>(&h))?)?
            .try_sigmoid()?;
        let z = xz
            .try_add(self.hz.try_forward(taped::<_, _, _, T>(&h))?)?
            .try_sigmoid()?;
        let n = xn
            .try_add(r.try_mul(self.hn.try_forward(taped::<_, _, _, T>(&h))?)?)?
            .try_tanh()?;
        // (1 - z) n + z h as n + z (h - n): one op fewer.
        let (n, tape) = n.split_tape();
        let d = taped::<_, _, _, T>(&h).try_sub(taped::<_, _, _, T>(&n))?;
        let y = taped::<_, _, _, T>(&n).try_add(z.try_mul(d)?)?;
        let (y, t) = y.split_tape();
        let tape = tape.merge(t);
        Ok((y.clone(), y.put_tape(tape)))
    }
}

impl<const I: usize, const H: usize, E: Dtype, D: FlaxenDevice<E>> RecurrentCell<E, D>
    for SimpleCell<I, H, E, D>
{
    type In = Const<I>;
    type Out = Const<H>;
    /// `h`.
    type Carry<B: Dim> = Rows<B, H, E, D>;

    fn try_project<B: Dim, S: Dim, T: Tape<E, D>>(
        &self,
        x: Tensor<(S, B, Const<I>), E, D, T>,
    ) -> Result<(Vec<Tensor<(S, B, Const<H>), E, D>>, T), D::Err> {
        project(&[&self.i], x)
    }

    fn try_zero_carry<B: Dim>(dev: &D, b: B) -> Result<Self::Carry<B>, D::Err> {
        dev.try_zeros_like(&(b, Const))
    }

    fn try_step<B: Dim, T: Tape<E, D>>(
        &self,
        x: Vec<Rows<B, H, E, D, T>>,
        h: Self::Carry<B>,
    ) -> Result<(Self::Carry<B>, Rows<B, H, E, D, T>), D::Err> {
        let [xi]: [_; 1] = x.try_into().unwrap_or_else(|_| unreachable!());
        let y = xi
            .try_add(self.h.try_forward(taped::<_, _, _, T>(&h))?)?
            .try_tanh()?;
        let (y, tape) = y.split_tape();
        Ok((y.clone(), y.put_tape(tape)))
    }
}

impl<C, const R: bool, const K: bool, const RC: bool> Rnn<C, R, K, RC> {
    /// Runs the cell over the steps of `x` (from the last with `reverse`):
    /// all steps in one op where the device has a kernel for the cell
    /// ([`Ran::All`], by time with `keep_order`), else step by step, the
    /// outputs in the order the steps ran (only the last step's with
    /// `last_only`) and the tape of the whole computation.
    #[allow(clippy::type_complexity)]
    pub(super) fn try_run<B: Dim, S: Dim, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>>(
        &self,
        x: Tensor<(B, S, C::In), E, D, T>,
        reverse: bool,
        last_only: bool,
        keep_order: bool,
    ) -> Result<Ran<B, S, C::Out, E, D, T>, D::Err>
    where
        C: RecurrentCell<E, D>,
    {
        let (b, s, _) = *x.shape();
        let steps = s.size();
        if steps == 0 {
            return Ok(Ran::Steps(Vec::new(), x.split_tape().1));
        }
        let dev = x.device().clone();
        let (proj, mut tape) = self
            .cell
            .try_project(x.try_permute::<_, Axes3<1, 0, 2>>()?)?;
        if let Some(hs) = self.cell.try_scan(&proj, &mut tape, reverse, keep_order) {
            return Ok(Ran::All(hs?.put_tape(tape)));
        }
        let mut carry = C::try_zero_carry(&dev, b)?;
        let mut ys = Vec::with_capacity(if last_only { 1 } else { steps });
        for k in 0..steps {
            let t = if reverse { steps - 1 - k } else { k };
            let idx = dev.try_tensor(t)?;
            let xs = proj
                .iter()
                .map(|p| taped::<_, _, _, T>(p).try_select(idx.clone()))
                .collect::<Result<Vec<_>, _>>()?;
            let (next, y) = self.cell.try_step(xs, carry)?;
            carry = next;
            if last_only {
                // Only the last output is returned; keep the others' tapes.
                let (y, t) = untape(y, tape);
                tape = t;
                ys.clear();
                ys.push(y.put_tape(T::default()));
            } else {
                ys.push(y);
            }
        }
        if reverse && keep_order {
            ys.reverse();
        }
        Ok(Ran::Steps(ys, tape))
    }

    /// The outputs of every step, `[B, S, H]`, in the order the steps ran
    /// (by time with `keep_order`).
    #[allow(clippy::type_complexity)]
    pub(super) fn try_run_stacked<B: Dim, S: Dim, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>>(
        &self,
        x: Tensor<(B, S, C::In), E, D, T>,
        reverse: bool,
        keep_order: bool,
    ) -> Result<Tensor<(B, S, C::Out), E, D, T>, D::Err>
    where
        C: RecurrentCell<E, D>,
    {
        let (b, s, _) = *x.shape();
        let dev = x.device().clone();
        match self.try_run(x, reverse, false, keep_order)? {
            Ran::Steps(ys, tape) => stacked(ys, tape, &dev, (b, s)),
            Ran::All(hs) => hs.try_permute::<_, Axes3<1, 0, 2>>(),
        }
    }
}

/// What [`Rnn::try_run`] ran: the steps one by one (their outputs, and the
/// tape of everything), or all in one op (`[S, B, H]` on the tape).
pub(super) enum Ran<B: Dim, S: Dim, H: ConstDim, E: Dtype, D: Storage<E>, T> {
    Steps(Vec<Tensor<(B, H), E, D, T>>, T),
    All(Tensor<(S, B, H), E, D, T>),
}

impl<C, const R: bool, const K: bool, B, S, E, D, T> Module<Tensor<(B, S, C::In), E, D, T>>
    for Rnn<C, R, K, false>
where
    C: RecurrentCell<E, D>,
    B: Dim,
    S: Dim,
    E: Dtype,
    D: FlaxenDevice<E>,
    T: Tape<E, D>,
{
    type Output = Tensor<(B, S, C::Out), E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<(B, S, C::In), E, D, T>) -> Result<Self::Output, D::Err> {
        self.try_run_stacked(x, R, K)
    }
}

impl<C, const R: bool, const K: bool, B, S, E, D, T> Module<Tensor<(B, S, C::In), E, D, T>>
    for Rnn<C, R, K, true>
where
    C: RecurrentCell<E, D>,
    B: Dim,
    S: Dim,
    E: Dtype,
    D: FlaxenDevice<E>,
    T: Tape<E, D>,
{
    type Output = Tensor<(B, C::Out), E, D, T>;
    type Error = D::Err;

    fn try_forward(&self, x: Tensor<(B, S, C::In), E, D, T>) -> Result<Self::Output, D::Err> {
        let (b, s, _) = *x.shape();
        let dev = x.device().clone();
        let (mut ys, tape) = match self.try_run(x, R, true, false)? {
            Ran::Steps(ys, tape) => (ys, tape),
            // The carry is the output of the step run last.
            Ran::All(hs) => return hs.try_select(dev.try_tensor(s.size() - 1)?),
        };
        let (y, t) = match ys.pop() {
            Some(y) => y.split_tape(),
            // No steps: the zero carry, as Flax's scan over nothing.
            None => (dev.try_zeros_like(&(b, C::Out::default()))?, T::default()),
        };
        Ok(y.put_tape(t.merge(tape)))
    }
}

impl<C, const R: bool, const K: bool, const RC: bool> NonMutableModule for Rnn<C, R, K, RC> {}

/// The steps' outputs as `[B, S, H]` on `tape` (zeros when there are no
/// steps).
#[allow(clippy::type_complexity)]
pub(super) fn stacked<B: Dim, S: Dim, H: ConstDim, E: Dtype, D: FlaxenDevice<E>, T: Tape<E, D>>(
    ys: Vec<Tensor<(B, H), E, D, T>>,
    tape: T,
    dev: &D,
    (b, s): (B, S),
) -> Result<Tensor<(B, S, H), E, D, T>, D::Err> {
    if ys.is_empty() {
        return Ok(dev.try_zeros_like(&(b, s, H::default()))?.put_tape(tape));
    }
    // [S, B, H] (`stack` merges the steps' tapes), then [B, S, H].
    let (y, t) = ys
        .try_stack()?
        .try_reshape_like(&(s, b, H::default()))?
        .try_permute::<_, Axes3<1, 0, 2>>()?
        .split_tape();
    Ok(y.put_tape(t.merge(tape)))
}

/// Flax's `orthogonal()` init (scale 1) of a square recurrent kernel.
fn orthogonal<const H: usize, E: Dtype, D: Device<E>>(
    t: &mut Tensor<Rank2<H, H>, E, D>,
) -> Result<(), D::Err> {
    crate::init::Init::Orthogonal { scale: 1.0 }.try_fill(t, crate::init::Fans::out_first(H, H))
}

/// The fields of a cell inside `Rnn`: input layers as modules (their own
/// `lecun_normal` init), recurrent ones as `weight`/`bias` tensors with
/// `orthogonal`/zeros init, all keyed as Flax names them, without a `cell`
/// level.
macro_rules! input_gate {
    ($name:literal, $f:ident) => {
        Self::module($name, |s| &s.cell.$f, |s| &mut s.cell.$f)
    };
}
macro_rules! recurrent_weight {
    ($name:literal, $f:ident) => {
        Self::tensor(
            concat!($name, ".weight"),
            |s| &s.cell.$f.weight,
            |s| &mut s.cell.$f.weight,
            TensorOptions::reset_with(orthogonal),
        )
    };
}
macro_rules! recurrent_bias {
    ($name:literal, $f:ident) => {
        Self::tensor(
            concat!($name, ".bias"),
            |s| &s.cell.$f.bias,
            |s| &mut s.cell.$f.bias,
            TensorOptions::reset_to_zeros(),
        )
    };
}

/// `Rnn` over each cell: `TensorCollection` (hence `BuildModule`) and
/// `BuildOnDevice` from the cell's builder.
macro_rules! rnn_params {
    ($cell:ident, $fields:expr, |$pat:pat_param| $built:expr) => {
        impl<
                const I: usize,
                const H: usize,
                const R: bool,
                const K: bool,
                const RC: bool,
                E: Dtype,
                D: Device<E>,
            > TensorCollection<E, D> for Rnn<$cell<I, H, E, D>, R, K, RC>
        {
            type To<E2: Dtype, D2: Device<E2>> = Rnn<$cell<I, H, E2, D2>, R, K, RC>;

            fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
                visitor: &mut V,
            ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
                visitor.visit_fields($fields, |$pat| Rnn { cell: $built })
            }
        }

        impl<
                const I: usize,
                const H: usize,
                const R: bool,
                const K: bool,
                const RC: bool,
                E: Dtype,
                D: Device<E>,
            > BuildOnDevice<D, E> for builder::Rnn<builder::$cell<I, H>, R, K, RC>
        where
            Rnn<$cell<I, H, E, D>, R, K, RC>: BuildModule<D, E>,
        {
            type Built = Rnn<$cell<I, H, E, D>, R, K, RC>;
            fn try_build_on_device(device: &D) -> Result<Self::Built, D::Err> {
                Self::Built::try_build(device)
            }
        }
    };
}

rnn_params!(
    LstmCell,
    (
        (
            input_gate!("ii", ii),
            input_gate!("if", if_),
            input_gate!("ig", ig),
            input_gate!("io", io),
        ),
        (
            recurrent_weight!("hi", hi),
            recurrent_weight!("hf", hf),
            recurrent_weight!("hg", hg),
            recurrent_weight!("ho", ho),
        ),
        (
            recurrent_bias!("hi", hi),
            recurrent_bias!("hf", hf),
            recurrent_bias!("hg", hg),
            recurrent_bias!("ho", ho),
        ),
    ),
    |((ii, if_, ig, io), (hi, hf, hg, ho), (bi, bf, bg, bo))| LstmCell {
        ii,
        if_,
        ig,
        io,
        hi: Dense {
            weight: hi,
            bias: bi
        },
        hf: Dense {
            weight: hf,
            bias: bf
        },
        hg: Dense {
            weight: hg,
            bias: bg
        },
        ho: Dense {
            weight: ho,
            bias: bo
        },
    }
);

rnn_params!(
    GruCell,
    (
        (
            input_gate!("ir", ir),
            input_gate!("iz", iz),
            input_gate!("in", in_),
        ),
        (
            recurrent_weight!("hr", hr),
            recurrent_weight!("hz", hz),
            recurrent_weight!("hn", hn),
            recurrent_bias!("hn", hn),
        ),
    ),
    |((ir, iz, in_), (hr, hz, hn, bn))| GruCell {
        ir,
        iz,
        in_,
        hr: UnbiasedDense { weight: hr },
        hz: UnbiasedDense { weight: hz },
        hn: Dense {
            weight: hn,
            bias: bn
        },
    }
);

rnn_params!(
    SimpleCell,
    (input_gate!("i", i), recurrent_weight!("h", h)),
    |(i, h)| SimpleCell {
        i,
        h: UnbiasedDense { weight: h },
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use dfdx::tensor::Cpu;

    #[test]
    fn orthogonal_init_is_orthogonal() {
        let dev: Cpu = Default::default();
        let rnn =
            dev.build_module::<builder::Rnn<builder::LstmCell<3, 7>, false, false, false>, f64>();
        let w = rnn.cell.hf.weight.as_vec();
        for i in 0..7 {
            for j in 0..7 {
                let dot: f64 = (0..7).map(|k| w[i * 7 + k] * w[j * 7 + k]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-12, "row {i} . row {j} = {dot}");
            }
        }
        assert_eq!(rnn.cell.hf.bias.as_vec(), vec![0.0; 7]);
    }

    /// The CPU's one-op LSTM against the cell run step by step in dfdx's
    /// ops (`try_step`), in f64, for every direction and order: outputs,
    /// and the gradients of the input and of every kernel and bias.
    #[test]
    fn fused_lstm_matches_the_steps() {
        type Cell = builder::LstmCell<3, 5>;
        let dev = Cpu::seed_from_u64(11);
        let mut rnn = dev.build_module::<builder::Rnn<Cell, false, false, false>, f64>();
        // Non-zero recurrent biases, so their gradients are tested too.
        for d in [
            &mut rnn.cell.hi,
            &mut rnn.cell.hf,
            &mut rnn.cell.hg,
            &mut rnn.cell.ho,
        ] {
            d.bias = dev.sample_normal();
        }
        let x: Tensor<Rank3<4, 6, 3>, f64, _> = dev.sample_normal::<Rank3<4, 6, 3>>() * 2.0;
        let w: Tensor<Rank3<4, 6, 5>, f64, _> = dev.sample_normal();
        let params = |g: &Gradients<f64, Cpu>| -> Vec<Vec<f64>> {
            let c = &rnn.cell;
            let mut v = vec![g.get(&x).as_vec()];
            for d in [&c.ii, &c.if_, &c.ig, &c.io] {
                v.push(g.get(&d.weight).as_vec());
            }
            for d in [&c.hi, &c.hf, &c.hg, &c.ho] {
                v.push(g.get(&d.weight).as_vec());
                v.push(g.get(&d.bias).as_vec());
            }
            v
        };
        for (reverse, keep_order) in [(false, false), (true, false), (true, true)] {
            let fused = match rnn
                .try_run(x.leaky_trace(), reverse, false, keep_order)
                .unwrap()
            {
                Ran::All(hs) => hs.try_permute::<_, Axes3<1, 0, 2>>().unwrap(),
                Ran::Steps(..) => panic!("the CPU runs the LSTM in one op"),
            };
            // The steps, as `try_run` runs them without the kernel.
            let (proj, mut tape) = rnn
                .cell
                .try_project(x.leaky_trace().permute::<_, Axes3<1, 0, 2>>())
                .unwrap();
            let mut carry = LstmCell::<3, 5, f64, Cpu>::try_zero_carry(&dev, Const::<4>).unwrap();
            let mut ys = Vec::new();
            for k in 0..6 {
                let t = if reverse { 5 - k } else { k };
                let xs = proj
                    .iter()
                    .map(|p| taped::<_, _, _, OwnedTape<f64, Cpu>>(p).select(dev.tensor(t)))
                    .collect();
                let (next, y) = rnn.cell.try_step(xs, carry).unwrap();
                carry = next;
                ys.push(y);
            }
            if keep_order {
                ys.reverse();
            }
            let steps = stacked(
                ys,
                std::mem::take(&mut tape),
                &dev,
                (Const::<4>, Const::<6>),
            )
            .unwrap();
            assert_eq!(fused.shape(), steps.shape());
            for (a, b) in fused.as_vec().iter().zip(steps.as_vec()) {
                assert!((a - b).abs() < 1e-12, "{reverse} {keep_order}: {a} {b}");
            }
            let ga = params(&(fused * w.clone()).sum().backward());
            let gb = params(&(steps * w.clone()).sum().backward());
            for (a, b) in ga.iter().zip(&gb) {
                assert_eq!(a.len(), b.len());
                for (a, b) in a.iter().zip(b) {
                    assert!((a - b).abs() < 1e-12, "{reverse} {keep_order}: {a} {b}");
                }
            }
        }
    }

    #[test]
    fn keys_follow_flax() {
        let dev: Cpu = Default::default();
        let m = dev.build_module::<builder::Rnn<builder::GruCell<2, 3>, true, true, true>, f32>();
        let mut state = crate::state::StateMap::new();
        crate::checkpoint::save_module_state(&m, "gru_cell_0.", &mut state);
        let names: Vec<_> = state
            .keys()
            .map(|k| k.trim_start_matches("gru_cell_0."))
            .collect();
        assert_eq!(
            names,
            [
                "hn.bias",
                "hn.weight",
                "hr.weight",
                "hz.weight",
                "in.bias",
                "in.weight",
                "ir.bias",
                "ir.weight",
                "iz.bias",
                "iz.weight"
            ]
        );
    }
}
