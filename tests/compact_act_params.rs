//! Activations as block parameters, as Flax's `act: Callable = nn.relu`
//! passed down to nested blocks (the imagenet ResNet's `act`): `act:
//! Param<relu>`, applied as `act(x)`, given as `Block(act = swish)`.

use flaxen::interop::flax;
use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<6>, act: Param<relu>) {
        act(Dense(6)(x))
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<6>) {
        let y = Block(act = swish)(x);
        let y = Block()(y);
        let leaky = leaky_relu;
        leaky(y, negative_slope = 0.2)
    }
}

pub struct Inner;

#[compact]
impl Inner {
    fn forward(x: Input<6>) {
        silu(Dense(6)(x))
    }
}

pub struct Inner2;

#[compact]
impl Inner2 {
    fn forward(x: Input<6>) {
        relu(Dense(6)(x))
    }
}

pub struct Explicit;

#[compact]
impl Explicit {
    fn forward(x: Input<6>) {
        let y = Inner(name = "Block_0")(x);
        let y = Inner2(name = "Block_1")(y);
        leaky_relu(y, negative_slope = 0.2)
    }
}

#[test]
fn activations_passed_as_parameters_apply_where_called() {
    let dev = Cpu::seed_from_u64(5);
    let a = dev.build_module::<Net, f64>();
    let mut b = dev.build_module::<Explicit, f64>();
    flax::load(&mut b, &flax::save(&a).unwrap()).unwrap();
    let x: Tensor<Rank2<3, 6>, f64, _> = dev.sample_normal();
    assert_eq!(a.forward(x.clone()).as_vec(), b.forward(x).as_vec());
}
