//! flaxen's `Rnn` (Flax's `nn.RNN` over `LSTMCell`, `GRUCell`,
//! `SimpleCell`):
//!
//! 1. Flax parity: every case of `tests/fixtures/flax_rnn.json` (see
//!    `tests/common/rnn.rs`), values and every gradient, f64 within 1e-9
//!    and f32 within 1e-4, on `Cpu` and (with the `cuda` feature) `Cuda`.
//! 2. Finite differences (f64, central, `|analytic - numeric| <= 1e-6 *
//!    max(|numeric|, 1)`) of the input and every parameter gradient of each
//!    cell, reversed and in order.
//! 3. A runtime sequence length (`usize`) gives what the `Const` one gives,
//!    and a sequence of no steps gives zeros, as Flax's scan over nothing.

#[path = "common/fixture.rs"]
mod fixture;

#[allow(unused_macros, unused_imports)]
#[path = "common/norm_act.rs"]
mod norm_act;

#[allow(unused_macros, unused_imports)]
#[path = "common/compact_v2.rs"]
mod compact_v2;

#[path = "common/gradcheck.rs"]
mod gradcheck;

#[path = "common/rnn.rs"]
#[macro_use]
mod rnn;

use gradcheck::{assert_grad, numeric_grad};

use flaxen::prelude::*;
use flaxen::runtime::dfdx::nn::tensor_collection::TensorCollection;
use flaxen::runtime::layers::builder::{GruCell, LstmCell, Rnn, SimpleCell};
use flaxen::runtime::optim::Params;

#[test]
fn rnn_matches_flax_f64() {
    rnn::all_rnn_cases!(&Cpu::default(), f64);
}

#[test]
fn rnn_matches_flax_f32() {
    rnn::all_rnn_cases!(&Cpu::default(), f32);
}

/// `loss = sum(m(x) * r)`: its gradients in `x` and in every parameter
/// (random biases, so that they matter) against finite differences.
fn gradcheck<M, X, Y>(what: &str)
where
    M: flaxen::runtime::dfdx::nn::BuildOnDevice<Cpu, f64>,
    M::Built: TensorCollection<f64, Cpu>
        + Clone
        + Module<Tensor<X, f64, Cpu>, Output = Tensor<Y, f64, Cpu>>
        + Module<
            Tensor<X, f64, Cpu, OwnedTape<f64, Cpu>>,
            Output = Tensor<Y, f64, Cpu, OwnedTape<f64, Cpu>>,
        >,
    X: ConstShape,
    Y: ConstShape,
{
    let dev: Cpu = Default::default();
    let mut m = dev.build_module::<M, f64>();
    let params = Params::of(&m).unwrap();
    let drawn: Vec<Vec<f64>> = params
        .leaves()
        .iter()
        .map(|l| {
            let t: Tensor<_, f64, _> = dev.sample_normal_like(l.shape());
            t.as_vec().iter().map(|v| v * 0.7).collect()
        })
        .collect();
    set_params(&mut m, &drawn);
    let x: Tensor<X, f64, _> = dev.sample_normal();
    let r: Tensor<Y, f64, _> = dev.sample_normal();
    let grads = (m.forward(x.leaky_trace()) * r.clone()).sum().backward();

    let loss_at = |m: &M::Built, x: &[f64]| -> f64 {
        let mut xt: Tensor<X, f64, _> = dev.zeros();
        xt.copy_from(x);
        (m.forward(xt) * r.clone()).sum::<Rank0, _>().array()
    };
    let gx = numeric_grad(|v| loss_at(&m, v), &x.as_vec());
    assert_grad(&format!("{what} x"), &grads.get(&x).as_vec(), &gx);

    let params = Params::of(&m).unwrap();
    for (k, (name, leaf)) in params.info().names.iter().zip(params.leaves()).enumerate() {
        let numeric = numeric_grad(
            |v| {
                let mut p = drawn.clone();
                p[k] = v.to_vec();
                let mut m2 = m.clone();
                set_params(&mut m2, &p);
                loss_at(&m2, &x.as_vec())
            },
            &drawn[k],
        );
        assert_grad(
            &format!("{what} {name}"),
            &grads.get(leaf).as_vec(),
            &numeric,
        );
    }
}

/// Writes `values` (in `Params` order) into the model's tensors.
fn set_params<M: TensorCollection<f64, Cpu>>(m: &mut M, values: &[Vec<f64>]) {
    use flaxen::runtime::checkpoint::load_module_state;
    use flaxen::runtime::checkpoint::save_module_state;
    let mut state = StateMap::new();
    save_module_state(m, "", &mut state);
    let names = Params::of(m).unwrap().info().names.clone();
    for (n, v) in names.iter().zip(values) {
        state.get_mut(n).unwrap().data = v.clone();
    }
    load_module_state(m, "", &state).unwrap();
}

#[test]
fn lstm_gradients_match_finite_differences() {
    gradcheck::<Rnn<LstmCell<3, 4>, false, false, false>, Rank3<2, 5, 3>, Rank3<2, 5, 4>>("lstm");
    gradcheck::<Rnn<LstmCell<2, 3>, true, false, true>, Rank3<2, 4, 2>, Rank2<2, 3>>(
        "lstm reversed, carry",
    );
}

#[test]
fn gru_gradients_match_finite_differences() {
    gradcheck::<Rnn<GruCell<3, 4>, false, false, false>, Rank3<2, 5, 3>, Rank3<2, 5, 4>>("gru");
    gradcheck::<Rnn<GruCell<2, 3>, true, true, false>, Rank3<1, 4, 2>, Rank3<1, 4, 3>>(
        "gru reversed, kept order",
    );
}

#[test]
fn simple_cell_gradients_match_finite_differences() {
    gradcheck::<Rnn<SimpleCell<3, 5>, false, false, false>, Rank3<2, 4, 3>, Rank3<2, 4, 5>>(
        "simple",
    );
    gradcheck::<Rnn<SimpleCell<3, 2>, true, false, true>, Rank3<3, 5, 3>, Rank2<3, 2>>(
        "simple reversed, carry",
    );
}

#[test]
fn runtime_sequence_length_matches_const() {
    let dev: Cpu = Default::default();
    let m = dev.build_module::<Rnn<GruCell<3, 4>, true, true, false>, f64>();
    let x: Tensor<Rank3<2, 6, 3>, f64, _> = dev.sample_normal();
    let want = m.forward(x.clone());
    let xs = x.clone().reshape_like(&(Const::<2>, 6usize, Const::<3>));
    let got: Tensor<(Const<2>, usize, Const<4>), f64, _> = m.forward(xs);
    assert_eq!(got.as_vec(), want.as_vec());

    let empty: Tensor<(Const<2>, usize, Const<3>), f64, _> = dev.zeros_like(&(Const, 0, Const));
    assert_eq!(m.forward(empty.clone()).shape().1, 0);
    let carry = dev.build_module::<Rnn<LstmCell<3, 4>, false, false, true>, f64>();
    assert_eq!(carry.forward(empty).as_vec(), vec![0.0; 8]);
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::rnn;
    use flaxen::prelude::*;

    #[test]
    fn cuda_rnn_matches_flax_f64() {
        rnn::all_rnn_cases!(&Cuda::default(), f64);
    }

    #[test]
    fn cuda_rnn_matches_flax_f32() {
        rnn::all_rnn_cases!(&Cuda::default(), f32);
    }
}
