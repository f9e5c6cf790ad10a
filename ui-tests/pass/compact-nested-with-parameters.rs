use flaxen::prelude::*;

/// A residual conv block with Flax-style attributes and their defaults.
pub struct ResBlock;

#[compact]
impl ResBlock {
    fn forward(x: Input<8, 8, 8>, features: Param<8>, kernel: Param<3>) {
        let h = relu(Conv(features, kernel)(x));
        x + Conv(features, kernel)(h)
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 16, 16>) {
        let x = Conv(32, 3)(x);
        let x = ResBlock(features = 32)(x);
        let x = ResBlock(features = 32, kernel = 5)(x);
        let x = max_pool(x, (2, 2), strides = (2, 2));
        Dense(10)(flatten(x))
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Net, f32>();
    let x: Tensor<Rank4<2, 1, 16, 16>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x);
    let _ = &m.res_block_1.conv_1;
}
