// A 3x3 kernel with stride 1 and one cell of padding on each side keeps an
// 8x8 input 8x8, so declaring a 7x8 output must not compile.
use flaxen::prelude::*;

type Bad = flaxen::runtime::layers::builder::Conv2D<1, 4, 3, 3, 1, 1, 1, 1, 1, 1, 8, 8, 7, 8>;

fn run() {
    let dev: Cpu = Default::default();
    let conv = dev.build_module::<Bad, f32>();
    let x: Tensor<Rank4<2, 1, 8, 8>, f32, _> = dev.zeros();
    let _y = conv.forward(x);
}

fn main() {
    run();
}
