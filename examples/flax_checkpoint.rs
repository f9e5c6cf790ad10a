//! Loads a Flax checkpoint (`flax.serialization.to_bytes` of a CNN's
//! `{"params", "batch_stats"}`) into the same model written with
//! `#[compact]`, evaluates it on the embedded 8×8 digits' test split, and
//! optionally saves it back in Flax's format.
//!
//! ```text
//! cargo run --release --example flax_checkpoint
//! cargo run --release --example flax_checkpoint -- --path my.msgpack --save back.msgpack
//! ```
//!
//! With no `--path` it loads `tests/fixtures/flax_interop_digits.msgpack`,
//! the model trained in Flax on the digits' training split
//! (`tests/python/make_flax_interop.py`), and scores 282 of the 297 test
//! digits, as it does in Flax. In Python,
//! `flax.serialization.from_bytes(variables, open("back.msgpack", "rb").read())`
//! reads what `--save` writes.

use std::path::PathBuf;

use clap::Parser;
use flaxen::interop::flax;
use flaxen::prelude::*;

/// The Flax model of `tests/python/make_flax_interop.py`, in flaxen.
pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 8, 8>) {
        let x = relu(BatchNorm()(Conv(8, (3, 3))(x)));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        // The Flax model transposes its map to NCHW before the reshape.
        let x = relu(Dense(16)(flatten(x, channels_first = true)));
        Dense(10)(x)
    }
}

/// Evaluate a Flax checkpoint on the embedded digits.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// The Flax checkpoint (msgpack); the Flax-trained digits fixture when
    /// absent.
    #[arg(long)]
    path: Option<PathBuf>,
    /// Write the model back here, as Flax bytes.
    #[arg(long)]
    save: Option<PathBuf>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let dev = Cpu::default();
    let mut model = dev.build_module::<Cnn, f32>();
    let path = args.path.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/flax_interop_digits.msgpack")
    });
    flax::load_file(&mut model, &path)?;
    println!("loaded {}", path.display());

    let (_, test) = flaxen::runtime::data::digits::load()?;
    let cfg = LoaderConfig::new(0).shuffle(false).drop_last(false);
    let mut eval: Loader<Rank3<1, 8, 8>, 128, f32, Cpu> = Loader::new(test, &dev, cfg)?;
    let mut acc = Metrics::<f32, Cpu>::new();
    for _ in 0..eval.batches_per_epoch() {
        let (x, y) = eval.next_batch_dyn()?;
        acc.add_accuracy(&model.forward(x), &y);
    }
    println!(
        "test accuracy on the digits: {:.2}%",
        100.0 * acc.accuracy().unwrap_or(0.0)
    );

    if let Some(out) = args.save {
        flax::save_file(&model, &out)?;
        println!("saved {}", out.display());
    }
    Ok(())
}
