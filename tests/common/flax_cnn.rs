//! The CNN of the tests, written once (`seed_cnn!`), and the Flax
//! `lax.scan` fixture (`tests/fixtures/flax_cnn_scan5.json`, written by
//! `tests/python/make_flax_cnn_scan5.py`) with its network
//! (`fixture_cnn!`), shared by `tests/scan_flax.rs` (Cpu),
//! `tests/cuda_scan.rs` (Cuda), `tests/compact_cnn.rs`, `tests/train_cnn.rs`,
//! `tests/cuda_train.rs` and `tests/profile.rs`: include with
//! `#[path = "common/flax_cnn.rs"] mod flax_cnn;`, and instantiate the
//! device-typed half of the fixture check with
//! `flax_cnn::small_cnn_on!(Device)` (which needs
//! `#[path = "common/fixture.rs"] mod fixture;` too).
#![allow(dead_code)]

use std::collections::BTreeMap;

use flaxen::prelude::*;

/// Defines `pub struct $name`, the seed CNN in the DSL, on 1×`$hw`×`$hw`
/// images: Conv `$c0` 3×3, relu, avg_pool 2/2, Conv `$c1` 3×3, relu,
/// avg_pool 2/2, flatten, Dense `$d`, relu, Dense `$out` (Flax's defaults:
/// SAME padding, biases). The tests train it at the seed's widths (32, 64,
/// 256) and at the Flax fixture's (8, 16, 32); one definition keeps them
/// the same network as the one Flax trained.
#[allow(unused_macros)] // each test uses some of them
macro_rules! seed_cnn {
    ($(#[$attr:meta])* $name:ident: $hw:tt, conv($c0:tt, $c1:tt), dense($d:tt), out($out:tt)) => {
        $(#[$attr])*
        pub struct $name;

        #[compact]
        impl $name {
            fn forward(x: Input<1, $hw, $hw>) {
                let x = Conv(features = $c0, kernel_size = (3, 3))(x);
                let x = relu(x);
                let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
                let x = Conv(features = $c1, kernel_size = (3, 3))(x);
                let x = relu(x);
                let x = avg_pool(x, window_shape = (2, 2), strides = (2, 2));
                let x = flatten(x);
                let x = Dense(features = $d)(x);
                let x = relu(x);
                Dense(features = $out)(x)
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use seed_cnn;

/// Defines `pub struct $name`, the network of the fixture: the seed CNN
/// on 8×8 images at widths 8, 16, 32 (see `make_flax_cnn_scan5.py`).
#[allow(unused_macros)] // each test uses some of them
macro_rules! fixture_cnn {
    ($name:ident) => {
        flax_cnn::seed_cnn!(
            /// The network of `tests/fixtures/flax_cnn_scan5.json`.
            $name: 8, conv(8, 16), dense(32), out(10)
        );
    };
}
#[allow(unused_imports)]
pub(crate) use fixture_cnn;

/// Defines `fn $name(state: $state, (x, y): $batch) -> ($state, Loss<f32,
/// $dev>)`, the step the CNN tests train with, as a Flax user writes it:
/// softmax cross-entropy with integer labels, then the optimizer's update.
#[allow(unused_macros)] // each test uses some of them
macro_rules! cross_entropy_step {
    ($name:ident($state:ty, $batch:ty) on $dev:ty) => {
        fn $name(mut state: $state, (x, y): $batch) -> ($state, Loss<f32, $dev>) {
            let (loss, grads) = state
                .value_and_grad(|model, tape| {
                    let logits = model.forward(x.put_tape(tape));
                    softmax_cross_entropy_with_integer_labels(logits, y).mean()
                })
                .expect("forward and backward pass");
            state.apply_gradients(grads).expect("optimizer update");
            (state, loss)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use cross_entropy_step;

#[derive(serde::Deserialize)]
pub struct Arr {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

#[derive(serde::Deserialize)]
pub struct Fixture {
    pub k_steps: usize,
    pub init_params: BTreeMap<String, Arr>,
    pub final_params: BTreeMap<String, Arr>,
    pub xs: Arr,
    pub labels: Vec<Vec<usize>>,
    pub losses: Vec<f32>,
}

pub fn fixture() -> Fixture {
    serde_json::from_str(include_str!("../fixtures/flax_cnn_scan5.json")).unwrap()
}

/// Flax's parameter names -> the DSL's tensor keys.
pub fn key(flax: &str) -> String {
    flax.replace("_oihw", "")
        .replace("_out_in", "")
        .replace("conv0", "conv_0")
        .replace("conv1", "conv_1")
        .replace("dense0", "dense_0")
        .replace("dense1", "dense_1")
}

pub fn to_map(f: &BTreeMap<String, Arr>) -> StateMap<f32> {
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

/// Defines, for device `$dev`: the fixture's network `SmallCnn` in the DSL,
/// its `CnnState` (TrainState + `adam(1e-3)`), `cnn_step`, `cnn_init`,
/// `saved`, and `scan5_matches_flax`, the parity check itself.
#[allow(unused_macros)] // each test uses some of them
macro_rules! small_cnn_on {
    ($dev:ty) => {
        flax_cnn::fixture_cnn!(SmallCnn);

        type CnnNet = <SmallCnn as BuildOnDevice<$dev, f32>>::Built;
        type CnnState = TrainState<CnnNet, flaxen::runtime::optim::Adam<f64>, f32, $dev>;
        type CnnBatch = (
            Tensor<Rank4<4, 1, 8, 8>, f32, $dev>,
            Tensor<Rank1<4>, usize, $dev>,
        );

        flax_cnn::cross_entropy_step!(cnn_step(CnnState, CnnBatch) on $dev);

        /// The fixture's initial state on `dev`.
        fn cnn_init(dev: &$dev, f: &flax_cnn::Fixture) -> CnnState {
            let mut model = dev.build_module::<SmallCnn, f32>();
            let init = flax_cnn::to_map(&f.init_params);
            flaxen::runtime::checkpoint::load_module_state(&mut model, "", &init).unwrap();
            TrainState::create(model, adam(1e-3)).unwrap()
        }

        fn saved(state: &CnnState) -> StateMap<f32> {
            let mut got = StateMap::new();
            flaxen::runtime::checkpoint::save_module_state(&state.params, "", &mut got);
            got
        }

        /// `scan!(5)` over the fixture's batches reproduces Flax's 5 losses
        /// and final parameters within `1e-4 * max(|flax|, 1)`.
        fn scan5_matches_flax(dev: &$dev) {
            let f = flax_cnn::fixture();
            assert_eq!(f.k_steps, 5);
            let state = cnn_init(dev, &f);
            let xs: Tensor<flaxen::dfdx::shapes::Rank5<5, 4, 1, 8, 8>, f32, $dev> =
                dev.tensor(f.xs.data.clone());
            let ys: Tensor<Rank2<5, 4>, usize, $dev> = dev.tensor(f.labels.concat());
            let (state, losses) = scan!(5, cnn_step, state, (xs, ys));

            fixture::assert_rel("losses vs Flax", &losses.array(), &f.losses, 1e-4, 1.0);
            let got = saved(&state);
            for (k, want) in flax_cnn::to_map(&f.final_params) {
                let g = &got[&k];
                assert_eq!(g.shape, want.shape, "{k}");
                fixture::assert_rel(&format!("{k} vs Flax"), &g.data, &want.data, 1e-4, 1.0);
            }
            assert_eq!(state.step(), 5);
        }
    };
}
#[allow(unused_imports)]
pub(crate) use small_cnn_on;
