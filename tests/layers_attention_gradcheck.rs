//! Finite-difference checks (f64) of attention under a mask (self and
//! cross, with a fully masked query row) and of `Embed`: `loss =
//! sum(layer(inputs) * r)` for a random `r`; tolerance in
//! `tests/common/gradcheck.rs`.

#[path = "common/fixture.rs"]
mod fixture;

#[path = "common/gradcheck.rs"]
mod gradcheck;

use flaxen::prelude::*;
use flaxen::runtime::layers::{builder, AttentionMask};
use gradcheck::{assert_grad, numeric_grad};

type Q = Rank3<2, 3, 4>;
type Kv = Rank3<2, 5, 3>;
type Y = Rank3<2, 3, 6>;

#[test]
fn masked_cross_attention_gradients_match_finite_differences() {
    let dev = Cpu::seed_from_u64(11);
    let attn = dev.build_module::<builder::MultiHeadAttention<4, 3, 4, 2, 6>, f64>();
    let q: Tensor<Q, f64, _> = dev.sample_normal();
    let kv: Tensor<Kv, f64, _> = dev.sample_normal();
    let r: Tensor<Y, f64, _> = dev.sample_normal();
    // The second example's last query sees no key at all.
    let mut m = [[[true; 5]; 3]; 2];
    m[0][0][4] = false;
    m[1][1][0] = false;
    m[1][2] = [false; 5];
    let mask: Tensor<Rank3<2, 3, 5>, bool, _> = dev.tensor(m);
    let loss = |qs: &[f64], kvs: &[f64], wk: &[f64]| {
        let mut a = attn.clone();
        a.key.weight.copy_from(wk);
        let q: Tensor<Q, f64, _> = dev.tensor_from_vec(qs.to_vec(), Default::default());
        let kv: Tensor<Kv, f64, _> = dev.tensor_from_vec(kvs.to_vec(), Default::default());
        (a.forward((q, kv, mask.clone())) * r.clone())
            .sum::<Rank0, _>()
            .array()
    };
    let grads = (attn.forward((q.leaky_trace(), kv.clone(), mask.clone())) * r.clone())
        .sum()
        .backward();
    let (qs, kvs, wk) = (q.as_vec(), kv.as_vec(), attn.key.weight.as_vec());
    assert_grad(
        "q",
        &grads.get(&q).as_vec(),
        &numeric_grad(|v| loss(v, &kvs, &wk), &qs),
    );
    assert_grad(
        "kv",
        &grads.get(&kv).as_vec(),
        &numeric_grad(|v| loss(&qs, v, &wk), &kvs),
    );
    assert_grad(
        "key.weight",
        &grads.get(&attn.key.weight).as_vec(),
        &numeric_grad(|v| loss(&qs, &kvs, v), &wk),
    );
}

#[test]
fn masked_self_attention_and_embed_gradients_match_finite_differences() {
    let dev = Cpu::seed_from_u64(12);
    let embed = dev.build_module::<builder::Embed<9, 4>, f64>();
    let attn = dev.build_module::<builder::SelfAttention<4, 4, 2, 4>, f64>();
    let tokens: Tensor<Rank2<2, 5>, usize, _> = dev.tensor([[3, 1, 8, 0, 0], [2, 2, 7, 5, 0]]);
    let mask = AttentionMask.forward((tokens.clone(), tokens.clone()));
    let r: Tensor<Rank3<2, 5, 4>, f64, _> = dev.sample_normal();
    let loss = |table: &[f64]| {
        let mut e = embed.clone();
        e.embedding.copy_from(table);
        let x = e.forward(tokens.clone());
        (attn.forward((x.clone(), x, mask.clone())) * r.clone())
            .sum::<Rank0, _>()
            .array()
    };
    let x = embed.forward(tokens.clone().traced(embed.alloc_grads()));
    let grads = (attn.forward((x.with_empty_tape(), x, mask.clone())) * r.clone())
        .sum()
        .backward();
    let table = embed.embedding.as_vec();
    assert_grad(
        "embedding",
        &grads.get(&embed.embedding).as_vec(),
        &numeric_grad(loss, &table),
    );
}

/// Flax's `use_bias=False`: no bias tensors anywhere, and the gradients of
/// the queries and of `out`'s kernel still match finite differences.
#[test]
fn unbiased_attention_gradients_match_finite_differences() {
    use flaxen::runtime::layers::Unbiased;
    let dev = Cpu::seed_from_u64(13);
    let attn = dev.build_module::<builder::MultiHeadAttention<4, 3, 4, 2, 6, Unbiased>, f64>();
    assert_eq!(attn.num_trainable_params(), 4 * 4 + 2 * 3 * 4 + 4 * 6);
    let q: Tensor<Q, f64, _> = dev.sample_normal();
    let kv: Tensor<Kv, f64, _> = dev.sample_normal();
    let r: Tensor<Y, f64, _> = dev.sample_normal();
    let loss = |qs: &[f64], wo: &[f64]| {
        let mut a = attn.clone();
        a.out.weight.copy_from(wo);
        let q: Tensor<Q, f64, _> = dev.tensor_from_vec(qs.to_vec(), Default::default());
        (a.forward((q, kv.clone())) * r.clone())
            .sum::<Rank0, _>()
            .array()
    };
    let grads = (attn.forward((q.leaky_trace(), kv.clone())) * r.clone())
        .sum()
        .backward();
    let (qs, wo) = (q.as_vec(), attn.out.weight.as_vec());
    assert_grad(
        "q",
        &grads.get(&q).as_vec(),
        &numeric_grad(|v| loss(v, &wo), &qs),
    );
    assert_grad(
        "out.weight",
        &grads.get(&attn.out.weight).as_vec(),
        &numeric_grad(|v| loss(&qs, v), &wo),
    );
}
