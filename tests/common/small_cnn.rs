//! A small CNN trained with flaxen's Adam, for the tests of how the kernels
//! are scheduled (`tests/threads.rs`, `tests/scan_awake.rs`): its kernels
//! split their work over rayon's threads, so scheduling shows if it changes
//! a bit. Include with `#[path = "common/small_cnn.rs"] mod small_cnn;`.
#![allow(dead_code)]

use flaxen::prelude::*;
use flaxen::runtime::optim::Adam;

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 12, 12>) {
        let x = relu(Conv(8, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        Dense(10)(flatten(x))
    }
}

pub type Dev = Cpu;
pub type State = TrainState<<Cnn as BuildOnDevice<Dev, f32>>::Built, Adam<f64>, f32, Dev>;
pub type Batch = (
    Tensor<Rank4<64, 1, 12, 12>, f32, Dev>,
    Tensor<Rank1<64>, usize, Dev>,
);

/// The model drawn from seed 3, with `adam(0.05)`.
pub fn init() -> State {
    let dev = Dev::seed_from_u64(3);
    TrainState::create(dev.build_module::<Cnn, f32>(), adam(0.05)).unwrap()
}

/// One Adam step on the mean cross-entropy; returns the loss.
pub fn step(mut s: State, (x, y): Batch) -> (State, Loss<f32, Dev>) {
    let (loss, grads) = s
        .value_and_grad(|m, tape| {
            softmax_cross_entropy_with_integer_labels(m.forward(x.put_tape(tape)), y).mean()
        })
        .unwrap();
    s.apply_gradients(grads).unwrap();
    (s, loss)
}

/// Every parameter and optimizer value, in the order of their names.
pub fn values(s: &State) -> Vec<f32> {
    let mut out = StateMap::new();
    s.save_state("", &mut out);
    let mut keys: Vec<_> = out.keys().cloned().collect();
    keys.sort();
    keys.iter().flat_map(|k| out[k].data.clone()).collect()
}
