use flaxen::prelude::*;

/// A U-Net decoder stage as Flax code writes it: upsample, join the skip
/// connection along the channels, convolve.
pub struct UpBlock;

#[compact]
impl UpBlock {
    fn forward(x: Input<16, 8, 8>, features: Param<8>) {
        let skip = Conv(features, (3, 3))(resize(x, (16, 16, 16), method = "nearest"));
        let u = resize(x, (x.shape[-3], x.shape[-2] * 2, x.shape[-1] * 2), method = bilinear);
        let u = Conv(features, (3, 3))(u);
        let x = concatenate((u, skip), axis = -3);
        let x = relu(Conv(features, (3, 3))(x));
        // Odd sizes, down again with jax's antialiasing.
        resize(x, (features, 5, 7), method = "linear")
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<UpBlock, f32>();
    let x: Tensor<Rank4<2, 16, 8, 8>, f32, _> = dev.sample_normal();
    let y: Tensor<Rank4<2, 8, 5, 7>, f32, _, _> = m.forward(x.leaky_trace());
    let _ = y.sum().backward();
}
