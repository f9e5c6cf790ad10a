//! A user's own models are never taken for misspelled vocabulary words:
//! `Mlp`, `MLP`, `Head`, `Stem`, `Cnn` (edit distance 1-2 from `elu`,
//! `mean`, `RNN`, ...) nest as models, and a model may be named `E` or `D`
//! (the names of the generated code's generic parameters).
#![allow(clippy::upper_case_acronyms)]

use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<16>) {
        Dense(16)(relu(Dense(32)(x)))
    }
}

pub struct MLP;

#[compact]
impl MLP {
    fn forward(x: Input<16>) {
        gelu(Dense(16)(x))
    }
}

pub struct Stem;

#[compact]
impl Stem {
    fn forward(x: Input<1, 8, 8>) {
        relu(Conv(4, (3, 3))(x))
    }
}

pub struct Head;

#[compact]
impl Head {
    fn forward(x: Input<16>) {
        Dense(3)(x)
    }
}

pub struct E;

#[compact]
impl E {
    fn forward(x: Input<16>) {
        tanh(x)
    }
}

pub struct D;

#[compact]
impl D {
    fn forward(x: Input<16>) {
        x * 0.5
    }
}

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 8, 8>) {
        let x = Stem()(x);
        let x = Dense(16)(flatten(x));
        let x = D()(E()(MLP()(Mlp()(x))));
        Head()(x)
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Cnn, f32>();
    let x: Tensor<Rank4<2, 1, 8, 8>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 3>, f32, _> = m.forward(x);
    let _ = (&m.mlp_0, &m.mlp_1, &m.stem_0, &m.head_0, &m.e_0, &m.d_0);
    let e = dev.build_module::<E, f64>();
    let _: Tensor<Rank2<2, 16>, f64, _> = e.forward(dev.sample_normal::<Rank2<2, 16>>());
}
