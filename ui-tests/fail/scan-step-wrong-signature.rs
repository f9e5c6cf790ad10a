use flaxen::prelude::*;

// The step must take (state, batch) and return (state, loss).
fn step(_b: Tensor<Rank1<2>, f32, Cpu>) -> Tensor<Rank0, f32, Cpu> {
    let dev: Cpu = Default::default();
    dev.zeros()
}

fn run(batches: Tensor<Rank2<3, 2>, f32, Cpu>) {
    let _ = scan!(3, step, 0u32, batches);
}

fn main() {}
