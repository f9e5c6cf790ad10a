//! The Flax `lax.scan` fixture (`tests/fixtures/flax_cnn_scan5.json`) and its
//! network, shared by `tests/scan_flax.rs` (Cpu) and `tests/cuda_scan.rs`
//! (Cuda): include with `#[path = "common/flax_cnn.rs"] mod flax_cnn;` and
//! instantiate the device-typed half with `flax_cnn::small_cnn_on!(Device)`.
#![allow(dead_code)]

use std::collections::BTreeMap;

use flaxen::prelude::*;

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

/// The largest `|a - b| / max(|b|, 1)`.
pub fn worst(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / y.abs().max(1.0))
        .fold(0.0, f32::max)
}

/// Defines, for device `$dev`: the fixture's network `SmallCnn` in the DSL,
/// its `CnnState` (TrainState + `adam(1e-3)`), `cnn_step`, `cnn_init`,
/// `saved`, and `scan5_matches_flax`, the parity check itself.
macro_rules! small_cnn_on {
    ($dev:ty) => {
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

        type CnnNet = <SmallCnn as BuildOnDevice<$dev, f32>>::Built;
        type CnnState = TrainState<CnnNet, flaxen::runtime::optim::Adam<f64>, f32, $dev>;
        type CnnBatch = (
            Tensor<Rank4<4, 1, 8, 8>, f32, $dev>,
            Tensor<Rank1<4>, usize, $dev>,
        );

        fn cnn_step(mut state: CnnState, (x, y): CnnBatch) -> (CnnState, Loss<f32, $dev>) {
            let (loss, grads) = state
                .value_and_grad(|model, tape| {
                    let logits = model.forward(x.put_tape(tape));
                    softmax_cross_entropy_with_integer_labels(logits, y).mean()
                })
                .unwrap();
            state.apply_gradients(grads).unwrap();
            (state, loss)
        }

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

            let got = losses.array();
            let lw = flax_cnn::worst(&got, &f.losses);
            assert!(lw <= 1e-4, "losses {got:?} vs Flax {:?}", f.losses);
            let got = saved(&state);
            for (k, want) in flax_cnn::to_map(&f.final_params) {
                let g = &got[&k];
                assert_eq!(g.shape, want.shape, "{k}");
                let w = flax_cnn::worst(&g.data, &want.data);
                assert!(w <= 1e-4, "{k}: worst relative error {w} vs Flax");
            }
            assert_eq!(state.step(), 5);
        }
    };
}
pub(crate) use small_cnn_on;
