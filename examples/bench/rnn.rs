//! The RNN workload of `examples/bench_layers.rs`: a row-LSTM digit
//! classifier (each of the 28 rows of a 28x28 image is a step of 28
//! features), `RNN(LSTMCell(features = 64), return_carry = true)` then
//! `Dense(10)`, trained with Adam on random inputs, batch 32, f32 on the
//! Cpu. Prints one JSON line: the training step's time, and the share of it
//! spent in the LSTM's forward and backward passes alone (`lstm_ms`), with
//! the LSTM's GFLOP/s (2 * MACs of its products, three times for forward
//! and backward).

use std::time::Instant;

use flaxen::dfdx::losses::cross_entropy_with_logits_loss;
use flaxen::dfdx::optim::Optimizer;
use flaxen::dfdx::optim::{Adam, AdamConfig};
use flaxen::prelude::*;
use flaxen::runtime::layers::builder::{Dense, LstmCell, Rnn};

const BATCH: usize = 32;
const SEQ: usize = 28;
const IN: usize = 28;
const H: usize = 64;

type Lstm = Rnn<LstmCell<IN, H>, false, false, true>;
type Model = (Lstm, Dense<H, 10>);

/// Runs the workload: `warmup` untimed steps, then `steps` timed ones.
pub fn bench(warmup: usize, steps: usize) {
    let dev: Cpu = Default::default();
    let mut model = dev.build_module::<Model, f32>();
    let mut opt = Adam::new(
        &model,
        AdamConfig {
            lr: 1e-3,
            ..Default::default()
        },
    );
    let x: Tensor<Rank3<BATCH, SEQ, IN>, f32, Cpu> = dev.sample_normal();
    let labels: Vec<f32> = (0..BATCH * 10)
        .map(|i| {
            if i % 10 == (i / 10 * 7) % 10 {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    let y: Tensor<Rank2<BATCH, 10>, f32, Cpu> = dev.tensor_from_vec(labels, Default::default());
    let mut grads = model.alloc_grads();
    let mut last_loss = 0.0f32;
    let mut step = |grads: Gradients<f32, Cpu>| {
        let logits = model.forward_mut(x.clone().traced(grads));
        let loss = cross_entropy_with_logits_loss(logits, y.clone());
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
    let start = Instant::now();
    for _ in 0..steps {
        grads = step(grads);
    }
    let step_s = start.elapsed().as_secs_f64() / steps as f64;
    assert!(last_loss.is_finite(), "the LSTM diverged");

    let lstm = dev.build_module::<Lstm, f32>();
    let mut lstm_grads = lstm.alloc_grads();
    let start = Instant::now();
    for _ in 0..steps {
        let h = lstm.forward(x.clone().traced(lstm_grads));
        let mut g = h.sum().backward();
        lstm.zero_grads(&mut g);
        lstm_grads = g;
    }
    let lstm_s = start.elapsed().as_secs_f64() / steps as f64;
    // Per sample: 4 gates of [IN -> H] and [H -> H] products at every step.
    let flops = 3.0 * 2.0 * (4 * (IN + H) * H * SEQ * BATCH) as f64;
    println!(
        "{{\"workload\":\"LSTM\",\"batch\":{BATCH},\"seq\":{SEQ},\"features\":{H},\"samples_per_s\":{:.0},\"step_ms\":{:.3},\"lstm_ms\":{:.3},\"lstm_gflop_per_s\":{:.2}}}",
        BATCH as f64 / step_s,
        step_s * 1e3,
        lstm_s * 1e3,
        flops / lstm_s / 1e9
    );
}
