use flaxen::prelude::*;

pub struct M;
#[compact]
impl M {
    fn forward(x: Input<30>) {
        let x = Dense(20, kernel_init = zeros, bias_init = constant(0.5))(x);
        let x = Dense(400, kernel_init = xavier_uniform())(x);
        let x = LayerNorm(scale_init = constant(2.0))(x);
        RNN(LSTMCell(8, kernel_init = ones, bias_init = constant(-1.0)))(reshape(x, (20, 20)))
    }
}

#[test]
fn t() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<M, f32>();
    assert!(m.dense_0.weight.as_vec().iter().all(|v| *v == 0.0));
    assert!(m.dense_0.bias.as_vec().iter().all(|v| *v == 0.5));
    let lim = (6.0f32 / 420.0).sqrt();
    let w = m.dense_1.weight.as_vec();
    assert!(w.iter().all(|v| v.abs() <= lim));
    let max = w.iter().fold(0f32, |a, b| a.max(b.abs()));
    assert!(max > lim * 0.99, "{max} {lim}");
    assert!(m.layer_norm_0.gamma.as_vec().iter().all(|v| *v == 2.0));
    assert!(m.lstm_cell_0.cell.ii.weight.as_vec().iter().all(|v| *v == 1.0));
    assert!(m.lstm_cell_0.cell.hf.bias.as_vec().iter().all(|v| *v == -1.0));
}
