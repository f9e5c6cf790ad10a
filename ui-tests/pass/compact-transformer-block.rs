use flaxen::prelude::*;

/// A pre-LayerNorm transformer block over 16 tokens of `width` features.
pub struct Block;

#[compact]
impl Block {
    fn forward(x: Input<16, 32>, width: Param<32>) {
        let x = x + SelfAttention(num_heads = 4)(LayerNorm()(x));
        let h = gelu(Dense(64)(LayerNorm()(x)));
        x + Dense(width)(h)
    }
}

pub struct Encoder;

#[compact]
impl Encoder {
    fn forward(x: Input<16, 8>) {
        let x = Dense(32)(x);
        let x = Block()(x);
        let x = Block()(x);
        let x = mean(RMSNorm()(x), axis = -2);
        Dense(10)(x)
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Encoder, f32>();
    let x: Tensor<(usize, Const<16>, Const<8>), f32, _> =
        dev.sample_normal_like(&(3, Const, Const));
    let y: Tensor<(usize, Const<10>), f32, _, _> = m.forward(x.leaky_trace());
    let grads = y.square().mean().backward();
    let _ = grads.get(&m.block_1.self_attention_0.query.weight);
}
