use flaxen::prelude::*;

/// Loops, `if`/`else if`, `match` with a guard, `let mut`, reassignment,
/// `+=`, shadowing and blocks, all decided when the macro expands.
pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(&self, x: Input<20>, hidden: Param<24>, depth: Param<3>, act: Param<2>) {
        let mut x = x;
        for i in 0..self.depth {
            x = Dense(self.hidden * (i + 1))(x);
            x = match act {
                0 => relu(x),
                n if n % 2 == 0 => gelu(x),
                _ => tanh(x),
            };
        }
        for _ in 1..=2 {
            let h = Dense(x.shape[-1])(x);
            x += h;
        }
        let x = if depth > 5 {
            Dropout(0.5)(x)
        } else if depth > 2 {
            LayerNorm()(x)
        } else {
            x
        };
        let x = {
            let y = Dense(16)(x);
            y * 0.5
        };
        Dense(10)(x)
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Mlp, f32>();
    let x: Tensor<Rank2<2, 20>, f32, _> = dev.sample_normal();
    let _: Tensor<Rank2<2, 10>, f32, _> = m.forward(x);
    // Names continue across loop iterations, as Flax's `Dense_0`, `Dense_1`.
    let _ = (&m.dense_0, &m.dense_2, &m.dense_4, &m.dense_6, &m.layer_norm_0);
}
