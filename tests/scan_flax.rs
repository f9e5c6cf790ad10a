//! Flax parity of a whole `scan!`: the CNN of
//! `tests/fixtures/flax_cnn_scan5.json` in the DSL, `adam(1e-3)` and
//! `scan!(5)` over the fixture's 5 stacked batches reproduce the 5 losses and
//! the final parameters of `jax.lax.scan` with `optax.adam(1e-3)`.
//!
//! Tolerance: 1e-4, relative to max(1, |value|) — f32 on both sides, but XLA
//! and flaxen sum the convolutions in different orders, and Adam's first
//! steps (update ≈ lr · sign(g)) amplify rounding of tiny gradients.

use std::collections::BTreeMap;

use flaxen::prelude::*;

/// The fixture's network.
pub struct SmallCnn;

#[compact]
impl SmallCnn {
    fn forward(x: Input<1, 8, 8>) {
        let x = relu(Conv(8, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = relu(Conv(16, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = relu(Dense(32)(flatten(x)));
        Dense(10)(x)
    }
}

#[derive(serde::Deserialize)]
struct Arr {
    shape: Vec<usize>,
    data: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct Fixture {
    k_steps: usize,
    init_params: BTreeMap<String, Arr>,
    final_params: BTreeMap<String, Arr>,
    xs: Arr,
    labels: Vec<Vec<usize>>,
    losses: Vec<f32>,
}

type Net = <SmallCnn as BuildOnDevice<Cpu, f32>>::Built;
type State = TrainState<Net, flaxen::runtime::optim::Adam<f64>, f32, Cpu>;
type Batch = (
    Tensor<Rank4<4, 1, 8, 8>, f32, Cpu>,
    Tensor<Rank1<4>, usize, Cpu>,
);

fn train_step(mut state: State, (x, y): Batch) -> (State, Loss<f32, Cpu>) {
    let (loss, grads) = state
        .value_and_grad(|model, tape| {
            let logits = model.forward(x.put_tape(tape));
            softmax_cross_entropy_with_integer_labels(logits, y).mean()
        })
        .unwrap();
    state.apply_gradients(grads).unwrap();
    (state, loss)
}

/// Flax's parameter names -> the DSL's tensor keys.
fn key(flax: &str) -> String {
    flax.replace("_oihw", "")
        .replace("_out_in", "")
        .replace("conv0", "conv_0")
        .replace("conv1", "conv_1")
        .replace("dense0", "dense_0")
        .replace("dense1", "dense_1")
}

fn to_map(f: &BTreeMap<String, Arr>) -> StateMap<f32> {
    f.iter()
        .map(|(k, a)| {
            let t = flaxen::runtime::state::HostTensor {
                shape: a.shape.clone(),
                data: a.data.clone(),
            };
            (key(k), t)
        })
        .collect()
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-4 * b.abs().max(1.0)
}

#[test]
fn scan5_reproduces_flax_losses_and_final_params() {
    let f: Fixture = serde_json::from_str(include_str!("fixtures/flax_cnn_scan5.json")).unwrap();
    assert_eq!(f.k_steps, 5);
    let dev: Cpu = Default::default();
    let mut model = dev.build_module::<SmallCnn, f32>();
    flaxen::runtime::checkpoint::load_module_state(&mut model, "", &to_map(&f.init_params))
        .unwrap();
    let state = TrainState::create(model, adam(1e-3)).unwrap();

    let xs: Tensor<Rank5<5, 4, 1, 8, 8>, f32, _> = dev.tensor(f.xs.data.clone());
    let labels: Vec<usize> = f.labels.concat();
    let ys: Tensor<Rank2<5, 4>, usize, _> = dev.tensor(labels);
    let (state, losses) = scan!(5, train_step, state, (xs, ys));

    for (i, (got, want)) in losses.array().iter().zip(&f.losses).enumerate() {
        assert!(close(*got, *want), "loss {i}: {got} vs Flax {want}");
    }
    let mut got = StateMap::new();
    flaxen::runtime::checkpoint::save_module_state(&state.params, "", &mut got);
    for (k, want) in to_map(&f.final_params) {
        let g = &got[&k];
        assert_eq!(g.shape, want.shape, "{k}");
        let worst = g
            .data
            .iter()
            .zip(&want.data)
            .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
            .fold(0.0f32, f32::max);
        assert!(worst <= 1e-4, "{k}: worst relative error {worst}");
    }
    assert_eq!(state.step(), 5);
}
