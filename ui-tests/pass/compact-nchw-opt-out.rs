use flaxen::prelude::*;

/// 28 channels of 28x1 columns: `#[nchw]` says the shape is meant.
pub struct Columns;

#[compact]
impl Columns {
    fn forward(#[nchw] x: Input<28, 28, 1>) {
        let x = relu(Conv(8, (3, 1))(x));
        Dense(10)(flatten(x))
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Columns, f32>();
    let x: Tensor<Rank4<2, 28, 28, 1>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x);
}
