use flaxen::prelude::*;

fn main() {
    let dev: Cpu = Default::default();
    let _x: Tensor<Rank1<3>, f32, _> = dev.zeros();
}
