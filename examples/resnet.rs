//! A small residual network with BatchNorm, Dropout and global average
//! pooling, written with `#[compact]`, on the embedded 8×8 digits: the
//! training/inference modes in practice. Training steps call `forward_mut`
//! on a taped batch (batch statistics, running averages updated, dropout
//! on); evaluation calls `forward` on an untaped one (running statistics,
//! dropout off), as Flax's `train=True` / `train=False`.
//!
//! ```text
//! cargo run --release --example resnet -- --epochs 10
//! ```

use clap::Parser;
use flaxen::prelude::*;

/// Two 3×3 convolutions with BatchNorm and an identity shortcut.
pub struct ResBlock;

#[compact]
impl ResBlock {
    fn forward(x: Input<16, 8, 8>) {
        let h = relu(BatchNorm(momentum = 0.9)(Conv(16, (3, 3))(x)));
        let h = BatchNorm(momentum = 0.9)(Conv(16, (3, 3))(h));
        relu(x + h)
    }
}

/// Stem, two residual blocks, global average pooling, a dropout head.
pub struct ResNet;

#[compact]
impl ResNet {
    fn forward(x: Input<1, 8, 8>) {
        let x = relu(BatchNorm(momentum = 0.9)(Conv(16, (3, 3))(x)));
        let x = ResBlock()(x);
        let x = ResBlock()(x);
        let x = mean(x, axis = (-2, -1));
        Dense(10)(Dropout(0.1)(x))
    }
}

/// Train a small ResNet on the embedded digits.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Passes over the training set.
    #[arg(long, default_value_t = 10)]
    epochs: u64,
    /// Seed of the initial weights, the dropout masks and the data order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

const K: usize = 5;
const BATCH: usize = 32;
type Dev = AutoDevice;
type Net = <ResNet as BuildOnDevice<Dev, f32>>::Built;
type Tx = flaxen::runtime::optim::Adam<f64>;
type State = TrainState<Net, Tx, f32, Dev>;
type Batch = (
    Tensor<Rank4<BATCH, 1, 8, 8>, f32, Dev>,
    Tensor<Rank1<BATCH>, usize, Dev>,
);

fn train_step(mut state: State, (x, y): Batch) -> (State, Loss<f32, Dev>) {
    let (loss, grads) = state
        .value_and_grad(|model, tape| {
            // Training mode: `forward_mut` on a taped input.
            let logits = model.forward_mut(NoInputGrad(x.put_tape(tape)));
            softmax_cross_entropy_with_integer_labels(logits, y).mean()
        })
        .expect("forward/backward on the device");
    state
        .apply_gradients(grads)
        .expect("optimizer update on the device");
    (state, loss)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    flaxen::runtime::malloc::keep_freed_memory();
    // The main thread runs its share of every kernel (no hand-off per kernel).
    flaxen::runtime::threads::use_this_thread();
    let args = Args::parse();
    let dev = Dev::seed_from_u64(args.seed);
    let (train, test) = flaxen::runtime::data::digits::load()?;
    let mut loader: Loader<Rank3<1, 8, 8>, BATCH, f32, Dev> =
        Loader::new(train, &dev, LoaderConfig::new(args.seed))?;
    // dfdx's `CudaError` is not a `std::error::Error`, hence the `map_err`.
    let mut state = TrainState::create(dev.build_module::<ResNet, f32>(), adam(3e-3))
        .map_err(|e| format!("device error: {e:?}"))?;
    println!(
        "ResNet: {} trainable parameters",
        state.params.num_trainable_params()
    );

    let scans_per_epoch = (loader.batches_per_epoch() / K).max(1) as u64;
    for epoch in 1..=args.epochs {
        let mut losses = Metrics::<f32, Dev>::new();
        for _ in 0..scans_per_epoch {
            let (xs, ys) = loader.next_stacked::<K>()?;
            let (next, l) = scan!(K, train_step, state, (xs, ys));
            state = next;
            losses.add_loss(&l.mean());
        }
        // Inference mode: `forward` without a tape.
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
