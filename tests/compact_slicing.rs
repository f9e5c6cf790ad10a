//! Slices of the first per-example axis (`x[1..]`, `x[..-1]`, `x[a..b]`,
//! Python's `x[:, 1:]`) and Flax's `shift_right` (lm1b's `shift_inputs`),
//! on features and on token ids: values by hand, gradients against central
//! finite differences (f64, 1e-6).

#[path = "common/fixture.rs"]
mod fixture;
#[path = "common/gradcheck.rs"]
mod gradcheck;

use flaxen::prelude::*;

pub struct Slices;

#[compact]
impl Slices {
    fn forward(x: Input<5, 3>) {
        let head = x[..-1]; // rows 0..4
        let tail = x[1..]; // rows 1..5
        let mid = x[1..3]; // rows 1, 2
        let d = tail - head; // differences of neighbours
        concatenate((d, mid, shift_right(x)), axis = -2)
    }
}

/// lm1b's decoder input: the targets shifted right, then embedded.
pub struct ShiftTokens;

#[compact]
impl ShiftTokens {
    fn forward(tokens: Tokens<4>) {
        let t = shift_right(tokens);
        Embed(num_embeddings = 7, features = 2)(t)
    }
}

#[test]
fn slices_and_shift_right_of_features() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Slices, f64>();
    let x: Tensor<Rank3<2, 5, 3>, f64, Cpu> = dev.sample_normal();
    let y: Tensor<Rank3<2, { 4 + 2 + 5 }, 3>, f64, Cpu> = m.forward(x.clone());
    let (xv, yv) = (x.as_vec(), y.as_vec());
    let at = |b: usize, r: usize, c: usize| xv[(b * 5 + r) * 3 + c];
    for b in 0..2 {
        for c in 0..3 {
            let out = |r: usize| yv[(b * 11 + r) * 3 + c];
            for r in 0..4 {
                assert_eq!(out(r), at(b, r + 1, c) - at(b, r, c));
            }
            assert_eq!((out(4), out(5)), (at(b, 1, c), at(b, 2, c)));
            assert_eq!(out(6), 0.0);
            for r in 1..5 {
                assert_eq!(out(6 + r), at(b, r - 1, c));
            }
        }
    }
    let w: Tensor<Rank3<2, 11, 3>, f64, Cpu> = dev.sample_normal();
    let g = (m.forward(x.leaky_trace()) * w.clone()).sum().backward();
    let numeric = gradcheck::numeric_grad(
        |v| {
            let x: Tensor<Rank3<2, 5, 3>, f64, Cpu> = dev.tensor(v.to_vec());
            (m.forward(x) * w.clone()).sum::<Rank0, _>().array()
        },
        &xv,
    );
    gradcheck::assert_grad("d / d x", &g.get(&x).as_vec(), &numeric);
}

#[test]
fn shift_right_of_token_ids() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<ShiftTokens, f64>();
    let t: Tensor<Rank2<2, 4>, usize, Cpu> = dev.tensor([[3, 1, 4, 6], [2, 5, 0, 1]]);
    let y = m.forward(t).as_vec();
    let table = m.embed_0.embedding.as_vec();
    // Row 0 of each sequence is token 0's embedding, then tokens 0..3.
    for (b, ids) in [[0usize, 3, 1, 4], [0, 2, 5, 0]].iter().enumerate() {
        for (r, id) in ids.iter().enumerate() {
            assert_eq!(
                &y[(b * 4 + r) * 2..(b * 4 + r) * 2 + 2],
                &table[id * 2..id * 2 + 2]
            );
        }
    }
}
