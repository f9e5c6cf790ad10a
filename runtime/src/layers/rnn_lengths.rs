//! [`Rnn`] over padded sequences with per-example lengths, Flax's
//! `nn.RNN(cell)(x, seq_lengths = lengths)`, step for step as Flax's
//! `recurrent.py` runs it:
//!
//! - the cell runs over every step, padding included, as Flax's scan does
//!   (the outputs at padded steps are computed, not masked);
//! - with `REVERSE`, each row is reversed within its length and its
//!   padding block within itself (Flax's `flip_sequences`: step `s` of a
//!   row of length `L` reads position `(S - 1 - s + L) mod S`), and
//!   `KEEP_ORDER` flips the outputs back the same way;
//! - with `RETURN_CARRY`, the hidden state after each row's last valid
//!   step (Flax's `_select_last_carry`), not after the padding.
//!
//! The lengths are `[batch, 1]` integers read on the host. A length of 0
//! does what Flax's does (the carry index wraps round to the last step); a
//! length above `S` is taken as `S`.

use dfdx::nn::Module;
use dfdx::prelude::*;

use super::rnn::RecurrentCell;
use super::{FlaxenDevice, Rnn};

/// The per-example lengths, clamped to `1..=steps`.
fn lengths<B: Dim, D: TensorFromVec<usize>, T>(
    l: &Tensor<(B, Const<1>), usize, D, T>,
    steps: usize,
) -> Vec<usize> {
    l.as_vec()
        .into_iter()
        .map(|n| n.clamp(1, steps.max(1)))
        .collect()
}

/// For each example, the position each step reads when the row is
/// reversed within its length and its padding within itself: `(S - 1 - t
/// + L) mod S` (a reflection, so applying it twice gives the row back).
fn flip<B: Dim, S: Dim, D: TensorFromVec<usize>>(
    dev: &D,
    (b, s): (B, S),
    lens: &[usize],
) -> Result<Tensor<(B, S), usize, D>, D::Err> {
    let steps = s.size();
    let idx = lens
        .iter()
        .flat_map(|&n| (0..steps).map(move |t| (steps - 1 - t + n) % steps))
        .collect();
    dev.try_tensor_from_vec(idx, (b, s))
}

/// Runs the cell over `x`, reversed within the lengths when `REVERSE`;
/// every step's output `[B, S, H]` in the order the steps ran, the flip
/// used, and the lengths.
#[allow(clippy::type_complexity)]
fn run<C, const R: bool, const K: bool, const RC: bool, B, S, E, D, T>(
    rnn: &Rnn<C, R, K, RC>,
    x: Tensor<(B, S, C::In), E, D, T>,
    l: Tensor<(B, Const<1>), usize, D, T>,
) -> Result<
    (
        Tensor<(B, S, C::Out), E, D, T>,
        Option<Tensor<(B, S), usize, D>>,
        Vec<usize>,
    ),
    D::Err,
>
where
    C: RecurrentCell<E, D>,
    B: Dim,
    S: Dim,
    E: Dtype,
    D: FlaxenDevice<E> + TensorFromVec<usize>,
    T: Tape<E, D>,
{
    let (b, s, _) = *x.shape();
    let dev = x.device().clone();
    // The lengths carry no gradient; their (empty) tape joins x's.
    let (l, lt) = l.split_tape();
    let lens = lengths(&l, s.size());
    let (x, xt) = x.split_tape();
    let x = x.put_tape(xt.merge(lt));
    let flipped = match R {
        true => Some(flip(&dev, (b, s), &lens)?),
        false => None,
    };
    let x = match &flipped {
        Some(i) => x.try_gather(i.clone())?,
        None => x,
    };
    Ok((rnn.try_run_stacked(x, false, false)?, flipped, lens))
}

impl<C, const R: bool, const K: bool, B, S, E, D, T>
    Module<(
        Tensor<(B, S, C::In), E, D, T>,
        Tensor<(B, Const<1>), usize, D, T>,
    )> for Rnn<C, R, K, false>
where
    C: RecurrentCell<E, D>,
    B: Dim,
    S: Dim,
    E: Dtype,
    D: FlaxenDevice<E> + TensorFromVec<usize>,
    T: Tape<E, D>,
{
    type Output = Tensor<(B, S, C::Out), E, D, T>;
    type Error = D::Err;

    fn try_forward(
        &self,
        (x, l): (
            Tensor<(B, S, C::In), E, D, T>,
            Tensor<(B, Const<1>), usize, D, T>,
        ),
    ) -> Result<Self::Output, D::Err> {
        let (y, flipped, _) = run(self, x, l)?;
        match (flipped, K) {
            (Some(i), true) => y.try_gather(i),
            _ => Ok(y),
        }
    }
}

impl<C, const R: bool, const K: bool, B, S, E, D, T>
    Module<(
        Tensor<(B, S, C::In), E, D, T>,
        Tensor<(B, Const<1>), usize, D, T>,
    )> for Rnn<C, R, K, true>
where
    C: RecurrentCell<E, D>,
    B: Dim,
    S: Dim,
    E: Dtype,
    D: FlaxenDevice<E> + TensorFromVec<usize>,
    T: Tape<E, D>,
{
    type Output = Tensor<(B, C::Out), E, D, T>;
    type Error = D::Err;

    fn try_forward(
        &self,
        (x, l): (
            Tensor<(B, S, C::In), E, D, T>,
            Tensor<(B, Const<1>), usize, D, T>,
        ),
    ) -> Result<Self::Output, D::Err> {
        let b = x.shape().0;
        let dev = x.device().clone();
        let (y, _, lens) = run(self, x, l)?;
        // Flax's index `L - 1` wraps round to the last step for `L = 0`.
        let steps = y.shape().1.size();
        let last = lens
            .iter()
            .map(|&n| (n + steps).saturating_sub(1) % steps.max(1))
            .collect();
        let last = dev.try_tensor_from_vec(last, (b,))?;
        y.try_select(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::builder::{self, LstmCell};

    /// A sequence padded to 6 steps gives, up to its length, what the same
    /// sequence unpadded gives; the carry is the one at its last step.
    #[test]
    fn padding_changes_nothing_up_to_the_length() {
        let dev = Cpu::seed_from_u64(0);
        let fwd = dev.build_module::<builder::Rnn<LstmCell<3, 4>, false, false, false>, f64>();
        let bwd = dev.build_module::<builder::Rnn<LstmCell<3, 4>, true, true, false>, f64>();
        let last = dev.build_module::<builder::Rnn<LstmCell<3, 4>, true, false, true>, f64>();
        let short: Tensor<Rank3<1, 4, 3>, f64, _> = dev.sample_normal();
        let pad: Tensor<Rank3<1, 2, 3>, f64, _> = dev.sample_normal();
        let long: Tensor<Rank3<1, 6, 3>, f64, _> =
            dev.tensor([short.as_vec(), pad.as_vec()].concat());
        let l: Tensor<Rank2<1, 1>, usize, _> = dev.tensor([[4]]);
        let head = |y: Vec<f64>| y[..16].to_vec();
        assert_eq!(
            head(fwd.forward((long.clone(), l.clone())).as_vec()),
            fwd.forward(short.clone()).as_vec()
        );
        let (a, b) = (
            head(bwd.forward((long.clone(), l.clone())).as_vec()),
            bwd.forward(short.clone()).as_vec(),
        );
        assert!(
            a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-12),
            "{a:?} {b:?}"
        );
        let (a, b) = (
            last.forward((long, l)).as_vec(),
            last.forward(short).as_vec(),
        );
        assert!(
            a.iter().zip(&b).all(|(a, b)| (a - b).abs() < 1e-12),
            "{a:?} {b:?}"
        );
    }
}
