//! The TEXT workload of `examples/bench_layers.rs`: a Transformer text
//! classifier written with `#[compact]` (`Embed`, a padding mask made from
//! the ids, two pre-norm encoder blocks with masked `SelfAttention`, a CLS
//! head), batch 32, 64 tokens of 128 features, trained with Adam, f32 on the
//! Cpu. Prints one JSON line: the training step's time, the time of one
//! masked attention layer's forward and backward alone (`attention_ms`, with
//! its GFLOP/s: 2 * MACs of the projections and of `q kᵀ` and `w v`, three
//! times for forward and backward), and of `Embed` alone (`embed_ms`).

use std::time::Instant;

use flaxen::dfdx::optim::Optimizer;
use flaxen::dfdx::optim::{Adam, AdamConfig};
use flaxen::prelude::*;
use flaxen::runtime::layers::{builder, AttentionMask};

const BATCH: usize = 32;
const SEQ: usize = 64;
const F: usize = 128;
const VOCAB: usize = 1000;

/// One pre-norm encoder block.
pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<64, 128>, mask: Mask<64, 64>) {
        let x = x + SelfAttention(num_heads = 4)(LayerNorm()(x), mask = mask);
        let y = Dense(256)(LayerNorm()(x));
        x + Dense(128)(gelu(y))
    }
}

/// Token ids to two logits.
pub struct TextModel;

#[compact]
impl TextModel {
    fn forward(tokens: Tokens<64>) {
        let mask = make_attention_mask(tokens, tokens);
        let mut x = Embed(num_embeddings = 1000, features = 128)(tokens);
        for _ in 0..2 {
            x = Block()(x, mask);
        }
        Dense(2)(LayerNorm()(x)[0])
    }
}

/// Runs the workload: `warmup` untimed steps, then `steps` timed ones.
/// With `profile`, no figures: the timed steps run under flaxen's profiler
/// and its table is printed instead.
pub fn bench(warmup: usize, steps: usize, profile: bool) {
    let dev: Cpu = Default::default();
    let mut model = dev.build_module::<TextModel, f32>();
    let mut opt = Adam::new(
        &model,
        AdamConfig {
            lr: 1e-3,
            ..Default::default()
        },
    );
    // Ids with padding at the end of every row.
    let ids: Vec<usize> = (0..BATCH * SEQ)
        .map(|i| {
            if i % SEQ < SEQ - (i / SEQ) % 16 {
                1 + (i * 7919) % (VOCAB - 1)
            } else {
                0
            }
        })
        .collect();
    let tokens: Tensor<Rank2<BATCH, SEQ>, usize, Cpu> =
        dev.tensor_from_vec(ids, Default::default());
    let labels: Tensor<Rank1<BATCH>, usize, Cpu> =
        dev.tensor_from_vec((0..BATCH).map(|i| i % 2).collect(), Default::default());
    let mut grads = model.alloc_grads();
    let mut last_loss = 0.0f32;
    let mut step = |grads: Gradients<f32, Cpu>| {
        let _step = flaxen::runtime::profile::step_scope();
        let logits = model.forward_mut(tokens.clone().traced(grads));
        let loss = softmax_cross_entropy_with_integer_labels(logits, labels.clone()).mean();
        last_loss = loss.array();
        let mut grads = loss.backward();
        opt.update(&mut model, &grads)
            .expect("every parameter has a gradient");
        model.zero_grads(&mut grads);
        grads
    };
    for _ in 0..warmup {
        grads = step(grads);
    }
    if profile {
        let report = flaxen::runtime::profile::profile(|| {
            let mut grads = grads;
            for _ in 0..steps {
                grads = step(grads);
            }
        });
        println!("{}", report.table());
        return;
    }
    let start = Instant::now();
    for _ in 0..steps {
        grads = step(grads);
    }
    let step_s = start.elapsed().as_secs_f64() / steps as f64;
    assert!(last_loss.is_finite(), "the text model diverged");

    let attn = dev.build_module::<builder::SelfAttention<F, F, 4, F>, f32>();
    let mask = AttentionMask.forward((tokens.clone(), tokens.clone()));
    let x: Tensor<Rank3<BATCH, SEQ, F>, f32, Cpu> = dev.sample_normal();
    let mut g = attn.alloc_grads();
    let start = Instant::now();
    for _ in 0..steps {
        let xt = x.clone().traced(g);
        let y = attn.forward((xt.with_empty_tape(), xt, mask.clone()));
        let mut gg = y.sum().backward();
        attn.zero_grads(&mut gg);
        g = gg;
    }
    let attn_s = start.elapsed().as_secs_f64() / steps as f64;

    let embed = dev.build_module::<builder::Embed<VOCAB, F>, f32>();
    let mut g = embed.alloc_grads();
    let start = Instant::now();
    for _ in 0..steps {
        let y = embed.forward(tokens.clone().traced(g));
        let mut gg = y.sum().backward();
        embed.zero_grads(&mut gg);
        g = gg;
    }
    let embed_s = start.elapsed().as_secs_f64() / steps as f64;
    // Four [F -> F] projections per token, and q kᵀ and w v per head.
    let macs = BATCH * (4 * SEQ * F * F + 2 * SEQ * SEQ * F);
    let gflops = 3.0 * 2.0 * macs as f64 / attn_s / 1e9;
    println!(
        "{{\"workload\":\"TEXT\",\"batch\":{BATCH},\"seq\":{SEQ},\"features\":{F},\"samples_per_s\":{:.0},\"step_ms\":{:.3},\"attention_ms\":{:.3},\"attention_gflops\":{:.2},\"embed_ms\":{:.3},\"loss\":{last_loss}}}",
        BATCH as f64 / step_s,
        step_s * 1e3,
        attn_s * 1e3,
        gflops,
        embed_s * 1e3
    );
}
