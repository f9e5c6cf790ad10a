use flaxen::prelude::*;

fn step(s: u32, _b: Tensor<Rank1<2>, f32, Cpu>) -> (u32, Tensor<Rank0, f32, Cpu>) {
    let dev: Cpu = Default::default();
    (s + 1, dev.zeros())
}

fn run(batches: Tensor<Rank2<3, 2>, f32, Cpu>) {
    let _ = scan!(5, step, 0u32, batches);
}

fn main() {}
