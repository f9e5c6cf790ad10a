//! The resize workload of `examples/bench_layers.rs`: one U-Net decoder
//! step's upsampling, `resize` of a batch of 32 x 64 x 14 x 14 feature maps
//! to 28 x 28 (nearest, bilinear) and a downsampling to 9 x 11 (bilinear,
//! antialiased), forward and backward, f32 on the Cpu, against the
//! `Conv(64, (3, 3))` that follows the upsampling in a U-Net (`conv_ms`).
//! Prints one JSON line per method: milliseconds per forward + backward,
//! the share of the conv's time, and the bytes moved per second (input
//! and output, read and written once each way).

use std::time::Instant;

use flaxen::prelude::*;
use flaxen::runtime::layers::resize::{Linear, Method, Nearest};
use flaxen::runtime::layers::{builder, Resize2D};

const BATCH: usize = 32;
const C: usize = 64;

type Conv = builder::Conv2D<C, C, 3, 3, 1, 1, 1, 1, 1, 1, 28, 28, 28, 28>;

/// Milliseconds per call of `f` after `warmup` untimed calls.
fn time(warmup: usize, steps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warmup {
        f();
    }
    let start = Instant::now();
    for _ in 0..steps {
        f();
    }
    start.elapsed().as_secs_f64() * 1e3 / steps as f64
}

fn run<M: Method, const OH: usize, const OW: usize>(
    name: &str,
    warmup: usize,
    steps: usize,
    conv_ms: f64,
) {
    let dev: Cpu = Default::default();
    let layer = Resize2D::<C, 14, 14, OH, OW, M>::default();
    let x: Tensor<Rank4<BATCH, C, 14, 14>, f32, Cpu> = dev.sample_normal();
    let ms = time(warmup, steps, || {
        let y = layer.forward(x.leaky_trace());
        let g = y.sum().backward();
        assert!(g.get(&x).as_vec()[0].is_finite());
    });
    let bytes = 2.0 * 4.0 * (BATCH * C * (14 * 14 + OH * OW)) as f64;
    println!(
        "{{\"workload\":\"{name}\",\"batch\":{BATCH},\"shape\":[{C},14,14],\"out\":[{C},{OH},{OW}],\"fwd_bwd_ms\":{ms:.3},\"conv_ms\":{conv_ms:.3},\"of_conv\":{:.3},\"gb_per_s\":{:.2}}}",
        ms / conv_ms,
        bytes / (ms * 1e-3) / 1e9
    );
}

/// Runs the workload: `warmup` untimed steps, then `steps` timed ones.
pub fn bench(warmup: usize, steps: usize) {
    let dev: Cpu = Default::default();
    let conv = dev.build_module::<Conv, f32>();
    let x: Tensor<Rank4<BATCH, C, 28, 28>, f32, Cpu> = dev.sample_normal();
    let conv_ms = time(warmup, steps, || {
        let y = conv.forward(x.leaky_trace());
        let g = y.sum().backward();
        assert!(g.get(&x).as_vec()[0].is_finite());
    });
    run::<Nearest, 28, 28>("resize_nearest_x2", warmup, steps, conv_ms);
    run::<Linear, 28, 28>("resize_bilinear_x2", warmup, steps, conv_ms);
    run::<Linear, 9, 11>("resize_bilinear_down", warmup, steps, conv_ms);
}
