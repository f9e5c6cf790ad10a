//! A small MLP, written with `#[compact]`, on the embedded 8×8 digits seen as
//! 64 features: the shortest complete flaxen program (data, model, Optax-style
//! optimizer, `scan!`, evaluation).
//!
//! ```text
//! cargo run --release --example mlp -- --epochs 20
//! ```

use clap::Parser;
use flaxen::prelude::*;

/// 64 → 128 → 10 with a GELU, as one would write it in Flax.
pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<64>) {
        let x = Dense(features = 128)(x);
        let x = gelu(x);
        Dense(features = 10)(x)
    }
}

/// Train a small MLP on the embedded digits.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 20)]
    epochs: u64,
    /// Seed of the initial weights and of the data order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

const K: usize = 4;
const BATCH: usize = 64;
type Dev = AutoDevice;
type Net = <Mlp as BuildOnDevice<Dev, f32>>::Built;
type State = TrainState<Net, flaxen::runtime::optim::Sgd<f64>, f32, Dev>;
type Batch = (
    Tensor<Rank2<BATCH, 64>, f32, Dev>,
    Tensor<Rank1<BATCH>, usize, Dev>,
);

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

/// The digits as flat 64-feature vectors.
fn flat(d: &ArrayDataset) -> Result<ArrayDataset, DataError> {
    ArrayDataset::new(vec![64], d.features().to_vec(), d.labels().to_vec())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // dfdx allocates every activation afresh; keep freed blocks in the
    // process instead of page-faulting them in again each step.
    flaxen::runtime::malloc::keep_freed_memory();
    // The main thread runs its share of every kernel (no hand-off per kernel).
    flaxen::runtime::threads::use_this_thread();
    let args = Args::parse();
    let dev = Dev::seed_from_u64(args.seed);
    let (train, test) = flaxen::runtime::data::digits::load()?;
    let (train, test) = (flat(&train)?, flat(&test)?);
    let mut loader: Loader<Rank1<64>, BATCH, f32, Dev> =
        Loader::new(train, &dev, LoaderConfig::new(args.seed))?;
    // dfdx's `CudaError` is not a `std::error::Error`, hence the `map_err`.
    let mut state = TrainState::create(dev.build_module::<Mlp, f32>(), sgd(0.1, Some(0.9), true))
        .map_err(|e| format!("device error: {e:?}"))?;

    let scans_per_epoch = (loader.batches_per_epoch() / K).max(1) as u64;
    for epoch in 1..=args.epochs {
        let mut losses = Metrics::<f32, Dev>::new();
        for _ in 0..scans_per_epoch {
            let (xs, ys) = loader.next_stacked::<K>()?;
            let (next, l) = scan!(K, train_step, state, (xs, ys));
            state = next;
            losses.add_loss(&l.mean());
        }
        let cfg = LoaderConfig::new(0).shuffle(false).drop_last(false);
        let mut eval: Loader<Rank1<64>, 128, f32, Dev> = Loader::new(test.clone(), &dev, cfg)?;
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
