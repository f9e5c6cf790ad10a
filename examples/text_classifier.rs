//! A small Transformer text classifier, written as a Flax user writes one:
//! `Embed` on token ids, a padding mask made from the ids, pre-norm encoder
//! blocks stacked with a `for` loop, and a head on the CLS token.
//!
//! The task is synthetic, so that the example needs no data files: each
//! sequence starts with the CLS id, holds 3 to 15 random tokens, and is
//! padded with id 0; it is of class 1 when token 3 comes before token 4
//! in it, else 0 (either may be missing; the order needs attention across
//! positions, and the padding must be ignored). A model that ignores the
//! mask or the order stays near 75% (always guessing from presence); the
//! encoder learns it.
//!
//! ```text
//! cargo run --release --example text_classifier -- --steps 300
//! ```

use clap::Parser;
use flaxen::prelude::*;

const SEQ: usize = 16;
const VOCAB: usize = 24;
const CLS: usize = 1;
const BATCH: usize = 32;

/// One pre-norm encoder block: masked self-attention and an MLP, each on a
/// residual.
pub struct EncoderBlock;

#[compact]
impl EncoderBlock {
    fn forward(x: Input<16, 32>, mask: Mask<16, 16>, num_heads: Param<4>, mlp_dim: Param<64>) {
        let y = SelfAttention(num_heads = num_heads)(LayerNorm()(x), mask = mask);
        let x = x + y;
        let y = Dense(mlp_dim)(LayerNorm()(x));
        let y = Dense(x.shape[-1])(gelu(y));
        x + y
    }
}

/// Token ids in, two logits out. Positions come from a second `Embed` of
/// the position ids (Flax's learned positional embedding).
pub struct TextClassifier;

#[compact]
impl TextClassifier {
    fn forward(tokens: Tokens<16>, positions: Tokens<16>, num_layers: Param<2>) {
        let mask = make_attention_mask(tokens, tokens);
        let x = Embed(num_embeddings = 24, features = 32)(tokens);
        let mut x = x + Embed(num_embeddings = 16, features = 32)(positions);
        for _ in 0..num_layers {
            x = EncoderBlock(num_heads = 4, mlp_dim = 64)(x, mask);
        }
        let x = LayerNorm()(x);
        Dense(2)(x[0])
    }
}

/// Train the text classifier on a synthetic task.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Optimizer steps.
    #[arg(long, default_value_t = 300)]
    steps: u64,
    /// Seed of the weights and of the data.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

type Dev = AutoDevice;
type Net = <TextClassifier as BuildOnDevice<Dev, f32>>::Built;
type State = TrainState<Net, flaxen::runtime::optim::Adam<f64>, f32, Dev>;

/// A small deterministic generator (the example needs no `rand`).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// A batch of sequences (CLS, tokens, padding) and their classes.
fn batch(rng: &mut Lcg, n: usize) -> (Vec<usize>, Vec<usize>) {
    let (mut tokens, mut labels) = (Vec::with_capacity(n * SEQ), Vec::with_capacity(n));
    for _ in 0..n {
        let len = 3 + rng.below(SEQ - 3);
        let mut row = vec![CLS];
        row.extend((0..len).map(|_| 2 + rng.below(VOCAB - 2)));
        let (first3, first4) = (
            row.iter().position(|t| *t == 3),
            row.iter().position(|t| *t == 4),
        );
        labels.push(match (first3, first4) {
            (Some(a), Some(b)) => usize::from(a < b),
            (Some(_), None) => 1,
            _ => 0,
        });
        row.resize(SEQ, 0);
        tokens.extend(row);
    }
    (tokens, labels)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    flaxen::runtime::malloc::keep_freed_memory();
    // The main thread runs its share of every kernel (no hand-off per kernel).
    flaxen::runtime::threads::use_this_thread();
    let args = Args::parse();
    let dev = Dev::seed_from_u64(args.seed);
    let mut rng = Lcg(args.seed ^ 0x5eed);
    let positions: Vec<usize> = (0..BATCH).flat_map(|_| 0..SEQ).collect();
    let positions: Tensor<Rank2<BATCH, SEQ>, usize, Dev> =
        dev.tensor_from_vec(positions, Default::default());
    let mut state: State =
        TrainState::create(dev.build_module::<TextClassifier, f32>(), adam(3e-3))
            .map_err(|e| format!("device error: {e:?}"))?;
    let mut losses = Metrics::<f32, Dev>::new();
    for step in 1..=args.steps {
        let (tokens, labels) = batch(&mut rng, BATCH);
        let tokens: Tensor<Rank2<BATCH, SEQ>, usize, Dev> =
            dev.tensor_from_vec(tokens, Default::default());
        let labels: Tensor<Rank1<BATCH>, usize, Dev> =
            dev.tensor_from_vec(labels, Default::default());
        let (loss, grads) = state
            .value_and_grad(|model, tape| {
                let logits = model.forward((tokens.put_tape(tape), positions.clone()));
                softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            })
            .map_err(|e| format!("device error: {e:?}"))?;
        state
            .apply_gradients(grads)
            .map_err(|e| format!("device error: {e:?}"))?;
        losses.add_loss(&loss);
        if step % 100 == 0 || step == args.steps {
            println!(
                "step {step:>4}: train loss {:.4}",
                losses.mean_loss().unwrap_or(f64::NAN)
            );
            losses = Metrics::new();
        }
    }
    // Accuracy on fresh sequences.
    let mut acc = Metrics::<f32, Dev>::new();
    for _ in 0..16 {
        let (tokens, labels) = batch(&mut rng, BATCH);
        let tokens: Tensor<Rank2<BATCH, SEQ>, usize, Dev> =
            dev.tensor_from_vec(tokens, Default::default());
        let labels: Tensor<Rank1<BATCH>, usize, Dev> =
            dev.tensor_from_vec(labels, Default::default());
        acc.add_accuracy(&state.params.forward((tokens, positions.clone())), &labels);
    }
    println!(
        "test accuracy {:.2}%",
        100.0 * acc.accuracy().unwrap_or(0.0)
    );
    Ok(())
}
