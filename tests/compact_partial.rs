//! Layers, models and activations passed with some arguments fixed, as
//! Flax's ImageNet ResNet passes `conv = partial(nn.Conv, use_bias=False)`,
//! `norm = partial(nn.BatchNorm, momentum=0.9)` and `act = nn.relu` to its
//! blocks: `partial(Conv, use_bias = false)`, a bare `Conv` as a block
//! parameter's default, `partial(Block, ..)` for a model of the crate, and
//! `partial(leaky_relu, negative_slope = 0.2)`. The model written with
//! them computes exactly what the same model written out does (values and
//! gradients bit for bit, after loading the same parameters); the ImageNet
//! ResNet against Flax is in `flax_ports.rs`.

use flaxen::interop::flax;
use flaxen::prelude::*;

pub struct Block;

#[compact]
impl Block {
    fn forward(
        x: Input<4, 8, 8>,
        filters: Param<4>,
        conv: Param<Conv>,
        norm: Param<BatchNorm>,
        act: Param<relu>,
        strides: Param<{ (1, 1) }>,
    ) {
        let y = conv(filters, (3, 3), strides)(x);
        let y = act(norm()(y));
        let y = conv(filters, (3, 3))(y);
        let y = norm(scale_init = zeros_init(), epsilon = 1e-3)(y);
        act(x + y)
    }
}

pub struct WithPartials;

#[compact]
impl WithPartials {
    fn forward(x: Input<3, 8, 8>) {
        let conv = partial(Conv, use_bias = false);
        let norm = partial(BatchNorm, momentum = 0.9, epsilon = 1e-5);
        let x = conv(4, (3, 3), name = "conv_init")(x);
        let x = norm(name = "bn_init")(x);
        let leaky = partial(leaky_relu, negative_slope = 0.2);
        let x = Block(4, conv = conv, norm = norm, act = leaky)(x);
        // A partial of a partial: the later keyword wins, as in Python.
        let block = partial(Block, conv = partial(conv, use_bias = true), norm = norm);
        let x = block(4)(x);
        let dense = partial(Dense, use_bias = false);
        dense(3)(mean(x, axis = (-2, -1)))
    }
}

pub struct BlockWrittenOut;

#[compact]
impl BlockWrittenOut {
    fn forward(x: Input<4, 8, 8>, bias: Param<false>, slope: Param<0.0>) {
        let y = Conv(4, (3, 3), use_bias = bias)(x);
        let y = leaky_relu(
            BatchNorm(momentum = 0.9, epsilon = 1e-5)(y),
            negative_slope = slope,
        );
        let y = Conv(4, (3, 3), use_bias = bias)(y);
        let y = BatchNorm(momentum = 0.9, epsilon = 1e-3, scale_init = zeros_init())(y);
        leaky_relu(x + y, negative_slope = slope)
    }
}

pub struct WrittenOut;

#[compact]
impl WrittenOut {
    fn forward(x: Input<3, 8, 8>) {
        let x = Conv(4, (3, 3), use_bias = false, name = "conv_init")(x);
        let x = BatchNorm(momentum = 0.9, epsilon = 1e-5, name = "bn_init")(x);
        let x = BlockWrittenOut(slope = 0.2, name = "Block_0")(x);
        let x = BlockWrittenOut(bias = true, name = "Block_1")(x);
        Dense(3, use_bias = false)(mean(x, axis = (-2, -1)))
    }
}

#[test]
fn partial_layers_compute_what_the_model_written_out_computes() {
    let dev = Cpu::seed_from_u64(3);
    let mut a = dev.build_module::<WithPartials, f64>();
    let mut b = dev.build_module::<WrittenOut, f64>();
    let saved = flax::save(&a).unwrap();
    let keys: Vec<String> = flax::read_arrays(&saved).unwrap().into_keys().collect();
    assert!(keys.contains(&"params/Block_1/Conv_0/bias".to_string()));
    assert!(!keys.contains(&"params/Block_0/Conv_0/bias".to_string()));
    assert!(!keys.contains(&"params/conv_init/bias".to_string()));
    flax::load(&mut b, &saved).unwrap();
    assert_eq!(flax::save(&b).unwrap(), saved);
    let x: Tensor<Rank4<2, 3, 8, 8>, f64, _> = dev.sample_normal();
    assert_eq!(a.forward(x.clone()).as_vec(), b.forward(x.clone()).as_vec());
    // Training mode: batch statistics, and the same running averages.
    let ga = a.forward_mut(x.leaky_trace()).square().sum().backward();
    let gb = b.forward_mut(x.leaky_trace()).square().sum().backward();
    assert_eq!(ga.get(&x).as_vec(), gb.get(&x).as_vec());
    assert_eq!(flax::save(&a).unwrap(), flax::save(&b).unwrap());
}
