//! Optional block parameters, Flax's `out_dim: Optional[int] = None` with
//! `out_dim or x.shape[-1]`: `out_dim: Param<None>`, then
//! `out_dim.unwrap_or(x.shape[-1])`, `if let Some(d) = out_dim`, or a
//! `match` with `Some(d)` / `None` arms, all decided at expansion.

use flaxen::prelude::*;

/// vit_jax's `MlpBlock`: `out_dim = self.out_dim or x.shape[-1]`.
pub struct MlpBlock;

#[compact]
impl MlpBlock {
    fn forward(x: Input<4, 8>, mlp_dim: Param<16>, out_dim: Param<None>) {
        let actual_out_dim = out_dim.unwrap_or(x.shape[-1]);
        let y = gelu(Dense(mlp_dim)(x));
        Dense(actual_out_dim)(y)
    }
}

/// The other spellings: `if let` and `match`.
pub struct Head;

#[compact]
impl Head {
    fn forward(x: Input<8>, hidden: Param<None>, classes: Param<None>) {
        let mut x = x;
        if let Some(h) = hidden {
            x = tanh(Dense(h)(x));
        }
        match classes {
            Some(c) => Dense(c)(x),
            None => x,
        }
    }
}

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<4, 8>) {
        let a = MlpBlock()(x); // out_dim None: 8
        let b = MlpBlock(out_dim = 3)(x); // 3
        let c = MlpBlock(mlp_dim = 5, out_dim = Some(6))(x); // 6
        let h = Head()(a[0]); // identity
        let h = Head(hidden = 5, classes = 2)(h); // 8 -> 5 -> 2
        concatenate((flatten(b), flatten(c), h), axis = -1)
    }
}

#[test]
fn optional_parameters_take_their_branch() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Net, f32>();
    // Widths as the branches decide (`dense_1` is the output projection).
    let _: &Tensor<Rank2<8, 16>, f32, Cpu> = &m.mlp_block_0.dense_1.weight;
    let _: &Tensor<Rank2<3, 16>, f32, Cpu> = &m.mlp_block_1.dense_1.weight;
    let _: &Tensor<Rank2<6, 5>, f32, Cpu> = &m.mlp_block_2.dense_1.weight;
    let _: &Tensor<Rank2<5, 8>, f32, Cpu> = &m.head_1.dense_0.weight;
    let _: &Tensor<Rank2<2, 5>, f32, Cpu> = &m.head_1.dense_1.weight;
    // `Head()` with neither given has no parameters at all.
    assert_eq!(m.head_0.num_trainable_params(), 0);
    let x: Tensor<Rank3<2, 4, 8>, f32, Cpu> = dev.sample_normal();
    let y: Tensor<Rank2<2, { 4 * 3 + 4 * 6 + 2 }>, f32, Cpu> = m.forward(x);
    assert!(y.as_vec().iter().all(|v| v.is_finite()));
}
