use flaxen::prelude::*;

/// Every form a block parameter takes: passed on by keyword, in tuples, in
/// arithmetic, as `self.name`, an integer, a float, a boolean, a tuple and
/// a padding word.
pub struct Block;

#[compact]
impl Block {
    fn forward(
        &self,
        x: Input<8, 16, 16>,
        features: Param<8>,
        strides: Param<1>,
        kernel: Param<{ (3, 3) }>,
        padding: Param<SAME>,
        rate: Param<0.1>,
        use_proj: Param<true>,
    ) {
        let y = Conv(features = features, kernel_size = kernel, strides = (strides, strides), padding = padding)(x);
        let y = Dropout(rate = self.rate)(relu(y));
        let r = if self.use_proj { Conv(features, (1, 1), strides = strides, use_bias = false)(x) } else { x };
        r + y
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<3, 16, 16>, width: Param<8>) {
        let x = Conv(width, (3, 3))(x);
        let x = Block(features = width * 2, strides = 2, rate = 0.25)(x);
        let x = Block(features = self.width * 2, use_proj = false, kernel = (5, 5))(x);
        let x = flatten(x);
        Dense(features = width + 2, use_bias = false)(x)
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<Net, f32>();
    let x: Tensor<Rank4<2, 3, 16, 16>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x.clone());
    let _: Tensor<Rank2<2, 10>, f32, Cpu, OwnedTape<f32, Cpu>> = m.forward_mut(x.traced(m.alloc_grads()));
    // `use_proj = false` leaves the second block without a projection.
    let _ = (&m.block_0.conv_1, &m.block_1.conv_0, &m.dense_0);
}
