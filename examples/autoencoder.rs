//! A convolutional autoencoder, written as a Flax user writes one: strided
//! `Conv`s down to a small code, `ConvTranspose`s back up (Flax's SAME
//! transposed convolution doubles the size at stride 2), a sigmoid, and a
//! reconstruction loss on the embedded 8×8 digits (pixels in `[0, 1]`).
//!
//! ```text
//! cargo run --release --example autoencoder -- --epochs 10
//! ```

use clap::Parser;
use flaxen::prelude::*;

/// 1×8×8 → 32×2×2 → 1×8×8.
pub struct AutoEncoder;

#[compact]
impl AutoEncoder {
    fn forward(x: Input<1, 8, 8>) {
        let z = relu(Conv(16, (3, 3), strides = (2, 2))(x));
        let z = relu(Conv(32, (3, 3), strides = (2, 2))(z));
        let y = relu(ConvTranspose(16, (3, 3), strides = (2, 2))(z));
        sigmoid(ConvTranspose(1, (3, 3), strides = (2, 2))(y))
    }
}

/// Train the autoencoder on the embedded digits.
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
type Net = <AutoEncoder as BuildOnDevice<Dev, f32>>::Built;
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
    let mut state: State = TrainState::create(dev.build_module::<AutoEncoder, f32>(), adam(3e-3))
        .map_err(|e| format!("device error: {e:?}"))?;
    for epoch in 1..=args.epochs {
        let mut losses = Metrics::<f32, Dev>::new();
        for _ in 0..loader.batches_per_epoch() {
            let (x, _) = loader.next_batch()?;
            let (loss, grads) = state
                .value_and_grad(|model, tape| {
                    let y = model.forward(x.clone().put_tape(tape));
                    mse(y, x)
                })
                .map_err(|e| format!("device error: {e:?}"))?;
            state
                .apply_gradients(grads)
                .map_err(|e| format!("device error: {e:?}"))?;
            losses.add_loss(&loss);
        }
        // Reconstruction error on the test digits.
        let cfg = LoaderConfig::new(0).shuffle(false).drop_last(false);
        let mut eval: Loader<Rank3<1, 8, 8>, 128, f32, Dev> = Loader::new(test.clone(), &dev, cfg)?;
        let mut test_loss = Metrics::<f32, Dev>::new();
        for _ in 0..eval.batches_per_epoch() {
            let (x, _) = eval.next_batch_dyn()?;
            test_loss.add_loss(&mse(state.params.forward(x.clone()), x));
        }
        println!(
            "epoch {epoch:>2}: train mse {:.5}, test mse {:.5}",
            losses.mean_loss().unwrap_or(f64::NAN),
            test_loss.mean_loss().unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
