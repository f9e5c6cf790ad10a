//! A recurrent sequence model, written as a Flax user writes one: each
//! embedded 8×8 digit is read as a sequence of 8 rows by a bidirectional
//! LSTM (`RNN(LSTMCell(..))` and its `reverse = true, keep_order = true`
//! twin, joined on the features), whose sequence a GRU sums up in its final
//! carry (`return_carry = true`) for a Dense head.
//!
//! ```text
//! cargo run --release --example lstm -- --epochs 10
//! ```

use clap::Parser;
use flaxen::prelude::*;

/// Rows in, class logits out.
pub struct RowRnn;

#[compact]
impl RowRnn {
    fn forward(x: Input<1, 8, 8>, hidden: Param<32>) {
        let x = reshape(x, (8, 8));
        let fwd = RNN(LSTMCell(features = hidden))(x);
        let bwd = RNN(
            LSTMCell(features = hidden),
            reverse = true,
            keep_order = true,
        )(x);
        let x = concatenate((fwd, bwd), axis = -1);
        let h = RNN(GRUCell(features = hidden * 2), return_carry = true)(x);
        Dense(10)(h)
    }
}

/// Train the row RNN on the embedded digits.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 10)]
    epochs: u64,
    /// Seed of the initial weights and of the data order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

const BATCH: usize = 32;
type Dev = AutoDevice;
type Net = <RowRnn as BuildOnDevice<Dev, f32>>::Built;
type State = TrainState<Net, flaxen::runtime::optim::Adam<f64>, f32, Dev>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    flaxen::runtime::malloc::keep_freed_memory();
    // The main thread runs its share of every kernel (no hand-off per kernel).
    flaxen::runtime::threads::use_this_thread();
    let args = Args::parse();
    let dev = Dev::seed_from_u64(args.seed);
    let (train, test) = flaxen::runtime::data::digits::load()?;
    let mut loader: Loader<Rank3<1, 8, 8>, BATCH, f32, Dev> =
        Loader::new(train, &dev, LoaderConfig::new(args.seed))?;
    let mut state: State = TrainState::create(dev.build_module::<RowRnn, f32>(), adam(3e-3))
        .map_err(|e| format!("device error: {e:?}"))?;
    for epoch in 1..=args.epochs {
        let mut losses = Metrics::<f32, Dev>::new();
        for _ in 0..loader.batches_per_epoch() {
            let (x, y) = loader.next_batch()?;
            let (loss, grads) = state
                .value_and_grad(|model, tape| {
                    softmax_cross_entropy_with_integer_labels(model.forward(x.put_tape(tape)), y)
                        .mean()
                })
                .map_err(|e| format!("device error: {e:?}"))?;
            state
                .apply_gradients(grads)
                .map_err(|e| format!("device error: {e:?}"))?;
            losses.add_loss(&loss);
        }
        let cfg = LoaderConfig::new(0).shuffle(false).drop_last(false);
        let mut eval: Loader<Rank3<1, 8, 8>, 128, f32, Dev> = Loader::new(test.clone(), &dev, cfg)?;
        let mut acc = Metrics::<f32, Dev>::new();
        for _ in 0..eval.batches_per_epoch() {
            let (x, y) = eval.next_batch_dyn()?;
            acc.add_accuracy(&state.params.forward(x), &y);
        }
        println!(
            "epoch {epoch:>2}: train loss {:.4}, test accuracy {:.2}%",
            losses.mean_loss().unwrap_or(f64::NAN),
            100.0 * acc.accuracy().unwrap_or(0.0)
        );
    }
    Ok(())
}
