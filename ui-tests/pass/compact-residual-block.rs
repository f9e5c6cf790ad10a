use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<8, 10, 10>) {
        let h = relu(Conv(8, (3, 3))(x));
        Conv(8, (3, 3))(h)
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<3, 10, 10>) {
        let x = Conv(8, (1, 1))(x);
        let x = relu(x + Block()(x));
        let x = max_pool(x, (2, 2), strides = (2, 2), padding = SAME);
        Dense(10)(flatten(x))
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Net, f32>();
    let x: Tensor<Rank4<2, 3, 10, 10>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x.clone());
    // The input feeds a conv and the residual sum: only the conv skips its
    // gradient.
    let y: Tensor<Rank2<2, 10>, f32, _, _> = m.forward(NoInputGrad(x.leaky_trace()));
    let _ = y.sum().backward();
    let _ = &m.block_0.conv_1;
}
