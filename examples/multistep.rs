//! Seed 000 in flaxen: load K = 5 consecutive batches at once, stack them on a
//! new leading axis, and run 5 training steps in one `scan!` call; 10 outer
//! iterations, each printing the average loss of its 5 steps.
//!
//! ```text
//! cargo run --release --example multistep
//! ```
//!
//! Unlike the seed's comment, this is not "5× gradient accumulation": a scan
//! makes K sequential updates, each on its own batch (bit for bit the same
//! as K plain calls). Accumulating K gradients into one update is Optax's
//! `MultiSteps`, flaxen's `multi_steps(K, adam(..))`.
//!
//! The SimpleCNN here is the seed CNN adapted to the embedded 8×8 digits
//! (two 2×2 poolings leave 64×2×2 features), so it runs with no download.

use flaxen::prelude::*;

/// The seed's SimpleCNN on 1×8×8 inputs.
pub struct SimpleCnn;

#[compact]
impl SimpleCnn {
    fn forward(x: Input<1, 8, 8>) {
        let x = Conv(32, (3, 3))(x);
        let x = relu(x);
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = Conv(64, (3, 3))(x);
        let x = relu(x);
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        let x = flatten(x);
        let x = Dense(256)(x);
        let x = relu(x);
        Dense(10)(x)
    }
}

const K: usize = 5;
const BATCH: usize = 32;
type Dev = AutoDevice;
type Net = <SimpleCnn as BuildOnDevice<Dev, f32>>::Built;
type State = TrainState<Net, flaxen::runtime::optim::Adam<f64>, f32, Dev>;
type Batch = (
    Tensor<Rank4<BATCH, 1, 8, 8>, f32, Dev>,
    Tensor<Rank1<BATCH>, usize, Dev>,
);

/// The seed's `train_step`: one Adam update on one batch.
fn train_step(mut state: State, (x, y): Batch) -> (State, Loss<f32, Dev>) {
    let (loss, grads) = state
        .value_and_grad(|model, tape| {
            let logits = model.forward(x.put_tape(tape));
            softmax_cross_entropy_with_integer_labels(logits, y).mean()
        })
        .expect("forward/backward on the device");
    state
        .apply_gradients(grads)
        .expect("optimizer update on the device");
    (state, loss)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // dfdx allocates every activation afresh; keep freed blocks in the
    // process instead of page-faulting them in again each step.
    flaxen::runtime::malloc::keep_freed_memory();
    // The main thread runs its share of every kernel (no hand-off per kernel).
    flaxen::runtime::threads::use_this_thread();
    let dev = Dev::seed_from_u64(0);
    let (train, _test) = flaxen::runtime::data::digits::load()?;
    let mut loader: Loader<Rank3<1, 8, 8>, BATCH, f32, Dev> =
        Loader::new(train, &dev, LoaderConfig::new(0))?;
    // dfdx's `CudaError` is not a `std::error::Error`, hence the `map_err`.
    let mut state = TrainState::create(dev.build_module::<SimpleCnn, f32>(), adam(1e-3))
        .map_err(|e| format!("device error: {e:?}"))?;

    for i in 0..10 {
        // `get_multistep_batch`: K batches in one host-to-device copy.
        let batches = loader.next_stacked::<K>()?;
        let (next, losses) = scan!(K, train_step, state, batches);
        state = next;
        // The K losses stayed on the device; this is the one read per scan.
        println!(
            "iteration {i:>2}: step {:>3}, average loss {:.4}",
            state.step(),
            losses.mean().array()
        );
    }
    Ok(())
}
