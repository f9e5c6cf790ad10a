//! Token ids, masks and several inputs: `Tokens`, `Mask`, `Embed`, masked
//! and cross attention, `make_causal_mask`, `make_attention_mask`,
//! `combine_masks`, `x[i]` and `swapaxes`, built and run forward and
//! backward on the Cpu.

use flaxen::dfdx::tensor_ops::TryGe;
use flaxen::prelude::*;

/// A text classifier: the padding mask comes in beside the tokens.
pub struct Classifier;

#[compact]
impl Classifier {
    fn forward(tokens: Tokens<16>, mask: Mask<16, 16>) {
        let x = Embed(num_embeddings = 1000, features = 64)(tokens);
        let x = SelfAttention(num_heads = 4, qkv_features = 64, out_features = 64)(x, mask = mask);
        Dense(2)(x[0])
    }
}

/// A language model: masks made inside the model.
pub struct Lm;

#[compact]
impl Lm {
    fn forward(tokens: Tokens<12>) {
        let mask = combine_masks(
            make_causal_mask(tokens),
            make_attention_mask(tokens, tokens),
        );
        let x = Embed(100, 32)(tokens);
        let x = x + SelfAttention(4, dropout_rate = 0.1)(LayerNorm()(x), mask = mask);
        Dense(100)(x)
    }
}

/// Cross-attention between sequences of different lengths (and two
/// transposes that cancel).
pub struct Cross;

#[compact]
impl Cross {
    fn forward(q: Input<5, 8>, kv: Input<7, 6>, mask: Mask<5, 7>) {
        let y = MultiHeadDotProductAttention(num_heads = 2, qkv_features = 8)(q, kv, mask = mask);
        let z = transpose(swapaxes(y, -1, -2), (-1, -2));
        Dense(3)(swapaxes(z, -1, -2)[-1])
    }
}

#[test]
fn classifier_runs_and_counts_flax_parameters() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Classifier, f32>();
    assert_eq!(
        m.num_trainable_params(),
        1000 * 64 + 4 * (64 * 64 + 64) + 64 * 2 + 2
    );
    let tokens: Tensor<Rank2<2, 16>, usize, _> = dev.tensor([[3; 16], [5; 16]]);
    let mask: Tensor<Rank3<2, 16, 16>, bool, _> = dev.tensor([[[true; 16]; 16]; 2]);
    let y: Tensor<Rank2<2, 2>, f32, _, _> = m.forward((tokens.traced(m.alloc_grads()), mask));
    let grads = y.sum().backward();
    assert!(grads
        .get(&m.embed_0.embedding)
        .as_vec()
        .iter()
        .any(|g| *g != 0.0));
    assert!(grads
        .get(&m.self_attention_0.key.weight)
        .as_vec()
        .iter()
        .any(|g| *g != 0.0));
}

#[test]
fn masks_made_in_the_model_hide_padding_and_the_future() {
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<Lm, f64>();
    let a: Tensor<Rank2<1, 12>, usize, _> = dev.tensor([[7, 8, 9, 1, 2, 3, 4, 5, 6, 0, 0, 0]]);
    // Changing a later token does not change an earlier position's output.
    let b: Tensor<Rank2<1, 12>, usize, _> = dev.tensor([[7, 8, 9, 1, 2, 3, 4, 5, 99, 0, 0, 0]]);
    let (ya, yb) = (m.forward(a.clone()).as_vec(), m.forward(b).as_vec());
    assert_eq!(ya[..8 * 100], yb[..8 * 100]);
    assert_ne!(ya[8 * 100..9 * 100], yb[8 * 100..9 * 100]);
    // Training drops attention weights, inference never does.
    let y0 = m.forward(a.clone()).as_vec();
    assert_eq!(y0, m.forward(a.clone()).as_vec());
    let grads = m.alloc_grads();
    let y = m.forward_mut(a.traced(grads));
    let _ = y.sum().backward();
}

#[test]
fn cross_attention_reads_both_inputs() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Cross, f32>();
    let q: Tensor<Rank3<2, 5, 8>, f32, _> = dev.sample_normal();
    let kv: Tensor<Rank3<2, 7, 6>, f32, _> = dev.sample_normal();
    let mask: Tensor<Rank3<2, 5, 7>, bool, _> = dev.sample_normal::<Rank3<2, 5, 7>>().ge(0.0);
    let y: Tensor<Rank2<2, 3>, f32, _, _> = m.forward((q.traced(m.alloc_grads()), kv, mask));
    let grads = y.sum().backward();
    assert!(grads
        .get(&m.multi_head_dot_product_attention_0.value.weight)
        .as_vec()
        .iter()
        .any(|g| *g != 0.0));
}

#[test]
fn out_of_range_tokens_are_an_error() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Lm, f32>();
    let bad: Tensor<Rank2<1, 12>, usize, _> =
        dev.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 100]]);
    assert!(m.try_forward(bad).is_err());
}

/// `transpose` and `swapaxes` move values as `jnp.transpose` does.
pub struct Moves;

#[compact]
impl Moves {
    fn forward(x: Input<2, 3, 4>) {
        transpose(x, (-1, -3, -2))
    }
}

#[test]
fn transpose_moves_axes_as_jnp() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Moves, f32>();
    let x: Tensor<Rank4<1, 2, 3, 4>, f32, _> =
        dev.tensor_from_vec((0..24).map(|v| v as f32).collect(), Default::default());
    let y: Tensor<Rank4<1, 4, 2, 3>, f32, _> = m.forward(x);
    // y[0][k][i][j] = x[0][i][j][k]
    let (xa, ya) = ((0..24).map(|v| v as f32).collect::<Vec<_>>(), y.array());
    for i in 0..2 {
        for j in 0..3 {
            for k in 0..4 {
                assert_eq!(ya[0][k][i][j], xa[i * 12 + j * 4 + k]);
            }
        }
    }
}
