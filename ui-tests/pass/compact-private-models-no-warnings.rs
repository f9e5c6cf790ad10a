//! Private model types, a private nested model, `missing_docs` and every
//! other warning denied: the expansion must not warn in the user's crate.
#![deny(warnings, missing_docs, unused)]

use flaxen::prelude::*;

struct Block;

#[compact]
impl Block {
    fn forward(x: Input<4, 5, 5>) {
        let unused = relu(x);
        Conv(4, 3)(x)
    }
}

struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4, 5, 5>) {
        let y = x + Block()(x);
        Dense(2)(flatten(y * y))
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Net, f32>();
    let x: Tensor<Rank4<1, 4, 5, 5>, f32, _> = dev.sample_normal();
    let _ = m.forward(x);
    let _ = m.clone();
    let _ = format!("{m:?}");
}
