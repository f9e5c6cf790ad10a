//! Nested models whose later inputs are float tensors or tokens: the
//! forward passes with and without a tape, and the gradients that reach
//! what computed those inputs (an encoder–decoder trains end to end).

use flaxen::dfdx::optim::Optimizer;
use flaxen::prelude::*;

/// A decoder block over `(targets, memory)`: cross-attention to a float
/// second input.
pub struct Cross;

#[compact]
impl Cross {
    fn forward(x: Input<6, 16>, mem: Input<5, 16>) {
        let h = MultiHeadDotProductAttention(num_heads = 2)(LayerNorm()(x), mem);
        let x = x + h;
        x + Dense(16)(gelu(Dense(32)(LayerNorm()(x))))
    }
}

/// Encoder (a Dense over the source) and decoder (`Cross`) in one model.
pub struct EncDec;

#[compact]
impl EncDec {
    fn forward(src: Input<5, 16>, tgt: Input<6, 16>) {
        let mem = relu(Dense(16)(src));
        let y = Cross()(tgt, mem);
        Dense(3)(y[0])
    }
}

/// A block whose second input is token ids, embedded inside the block.
pub struct AddTokens;

#[compact]
impl AddTokens {
    fn forward(x: Input<4, 8>, ids: Tokens<4>) {
        x + Embed(num_embeddings = 11, features = 8)(ids)
    }
}

/// Tokens first, then a float tensor computed by the outer model.
pub struct TokensSecond;

#[compact]
impl TokensSecond {
    fn forward(ids: Tokens<4>, x: Input<4, 8>) {
        let pos = Dense(8)(x);
        let y = AddTokens()(pos, ids);
        Dense(2)(flatten(y))
    }
}

fn batch(
    dev: &Cpu,
) -> (
    Tensor<Rank3<2, 5, 16>, f32, Cpu>,
    Tensor<Rank3<2, 6, 16>, f32, Cpu>,
) {
    (dev.sample_normal(), dev.sample_normal())
}

#[test]
fn encoder_decoder_trains_end_to_end() {
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<EncDec, f32>();
    let (src, tgt) = batch(&dev);
    let plain: Tensor<Rank2<2, 3>, f32, _> = m.forward((src.clone(), tgt.clone()));

    // `forward_mut` and a taped `forward` give the same values, and the
    // encoder's weights get gradients through the decoder's second input.
    let g = m.alloc_grads();
    let y = m.forward_mut((src.clone().traced(g), tgt.clone()));
    assert_eq!(y.as_vec(), plain.as_vec());
    let g = y.sum().backward();
    let enc = g.get(&m.dense_0.weight).as_vec();
    assert!(
        enc.iter().any(|v| *v != 0.0),
        "no gradient reached the encoder"
    );
    let mha = g
        .get(&m.cross_0.multi_head_dot_product_attention_0.key.weight)
        .as_vec();
    assert!(
        mha.iter().any(|v| *v != 0.0),
        "no gradient reached the keys"
    );

    let g2 = m.alloc_grads();
    let g2 = m
        .forward((src.clone().traced(g2), tgt.clone()))
        .sum()
        .backward();
    assert_eq!(g2.get(&m.dense_0.weight).as_vec(), enc);

    // An optimizer step changes the encoder.
    let mut opt = flaxen::dfdx::optim::Sgd::new(&m, Default::default());
    let before = m.dense_0.weight.as_vec();
    opt.update(&mut m, &g).unwrap();
    assert_ne!(m.dense_0.weight.as_vec(), before);
}

#[test]
fn gradients_reach_every_float_input() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Cross, f64>();
    let x: Tensor<Rank3<2, 6, 16>, f64, _> = dev.sample_normal();
    let mem: Tensor<Rank3<2, 5, 16>, f64, _> = dev.sample_normal();
    // The caller's second input carries its own tape, merged into the
    // first's (leaky tapes keep every gradient, the inputs' too).
    let y = m.forward((x.clone().leaky_traced(), mem.clone().leaky_traced()));
    let g = y.sum().backward();
    let gx = g.get(&x).as_vec();
    let gm = g.get(&mem).as_vec();
    assert!(
        gm.iter().any(|v| *v != 0.0),
        "no gradient for the second input"
    );

    // Central differences on a few entries of each input.
    let loss = |x: &Tensor<Rank3<2, 6, 16>, f64, Cpu>, mem: &Tensor<Rank3<2, 5, 16>, f64, Cpu>| {
        let y: Tensor<Rank3<2, 6, 16>, f64, Cpu> = m.forward((x.clone(), mem.clone()));
        y.sum::<Rank0, _>().array()
    };
    let h = 1e-6;
    for i in [0usize, 17, 95, 159] {
        let mut d = mem.as_vec();
        d[i] += h;
        let up = loss(
            &x,
            &dev.tensor_from_vec(d.clone(), (Const::<2>, Const::<5>, Const::<16>)),
        );
        d[i] -= 2.0 * h;
        let down = loss(
            &x,
            &dev.tensor_from_vec(d, (Const::<2>, Const::<5>, Const::<16>)),
        );
        let fd = (up - down) / (2.0 * h);
        assert!(
            (fd - gm[i]).abs() < 1e-6 * (1.0 + fd.abs()),
            "mem[{i}]: {fd} vs {}",
            gm[i]
        );
    }
    for i in [3usize, 40, 191] {
        let mut d = x.as_vec();
        d[i] += h;
        let up = loss(
            &dev.tensor_from_vec(d.clone(), (Const::<2>, Const::<6>, Const::<16>)),
            &mem,
        );
        d[i] -= 2.0 * h;
        let down = loss(
            &dev.tensor_from_vec(d, (Const::<2>, Const::<6>, Const::<16>)),
            &mem,
        );
        let fd = (up - down) / (2.0 * h);
        assert!(
            (fd - gx[i]).abs() < 1e-6 * (1.0 + fd.abs()),
            "x[{i}]: {fd} vs {}",
            gx[i]
        );
    }
}

#[test]
fn tokens_in_a_later_position_train() {
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<TokensSecond, f32>();
    let ids: Tensor<Rank2<3, 4>, usize, _> =
        dev.tensor([[1, 2, 3, 4], [0, 5, 6, 10], [7, 7, 7, 7]]);
    let x: Tensor<Rank3<3, 4, 8>, f32, _> = dev.sample_normal();
    let plain = m.forward((ids.clone(), x.clone()));
    let g = m.alloc_grads();
    let y = m.forward_mut((ids.traced(g), x));
    assert_eq!(y.as_vec(), plain.as_vec());
    let g = y.sum().backward();
    // Through the block's second input (tokens) to its embedding, and
    // through its first (a float computed outside) to the outer Dense.
    assert!(g
        .get(&m.add_tokens_0.embed_0.embedding)
        .as_vec()
        .iter()
        .any(|v| *v != 0.0));
    assert!(g.get(&m.dense_0.weight).as_vec().iter().any(|v| *v != 0.0));
}
