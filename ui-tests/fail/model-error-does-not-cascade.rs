use flaxen::prelude::*;

pub struct Mlp;

#[compact]
impl Mlp {
    fn forward(x: Input<784>) {
        let x = relu(Dense(0)(x));
        Dense(10)(x)
    }
}

// Code that uses the model: rustc reports only the macro's message above,
// nothing here.
fn main() {
    let dev: Cpu = Default::default();
    let model = dev.build_module::<Mlp, f32>();
    let x: Tensor<Rank2<2, 784>, f32, _> = dev.sample_normal();
    let y: Tensor<Rank2<2, 10>, f32, _> = model.forward(x);
    let _loss = softmax_cross_entropy(y, dev.zeros());
    let _: &MlpModule<f32, Cpu> = &model;
}
