use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    /// Positional arguments in Flax's order, a named layer, `&self`.
    fn forward(&self, x: Input<20>) {
        let x = silu(Dense(16)(x));
        let x = Dropout(0.1)(x);
        log_softmax(Dense(4, name = "head")(x))
    }
}

fn main() {
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<Mlp, f64>();
    let x: Tensor<(usize, Const<20>), f64, _> = dev.sample_normal_like(&(7, Const));
    let y: Tensor<(usize, Const<4>), f64, _> = m.forward(x.clone());
    let _ = y;
    let g = m.alloc_grads();
    let y = m.forward_mut(x.traced(g));
    let _: Tensor<(usize, Const<4>), f64, _, OwnedTape<f64, Cpu>> = y;
    let _ = &m.head;
}
