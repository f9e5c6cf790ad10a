//! The NaN/Inf guard names the first bad parameter or gradient and the step.

use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::nn::builders::ReLU;
use flaxen::prelude::*;
use flaxen::runtime::guard::{check_finite, GuardError, TensorKind};

type Mlp = (Linear<3, 4>, ReLU, Linear<4, 2>);

fn poison<S: Shape>(t: &mut Tensor<S, f32, Cpu>, index: usize, value: f32) {
    let mut v = t.as_vec();
    v[index] = value;
    t.copy_from(&v);
}

fn non_finite(step: u64, kind: TensorKind, path: &str) -> GuardError {
    GuardError::NonFinite {
        step,
        kind,
        path: path.into(),
    }
}

#[test]
fn names_the_first_bad_parameter() {
    let dev = Cpu::default();
    let mut m = dev.build_module::<Mlp, f32>();
    assert_eq!(check_finite(&m, None, 0), Ok(()));
    poison(&mut m.2.weight, 5, f32::NEG_INFINITY);
    assert_eq!(
        check_finite(&m, None, 7),
        Err(non_finite(7, TensorKind::Parameter, "2.weight"))
    );
    poison(&mut m.0.bias, 1, f32::NAN);
    let err = check_finite(&m, None, 8).unwrap_err();
    assert_eq!(err, non_finite(8, TensorKind::Parameter, "0.bias"));
    assert_eq!(
        err.to_string(),
        "step 8: parameter `0.bias` contains NaN or infinity"
    );
}

#[test]
fn large_finite_values_are_not_a_false_alarm() {
    let dev = Cpu::default();
    let mut m = dev.build_module::<Mlp, f32>();
    // Their plain sum overflows to infinity; the guard's sum(t * 0) does not.
    m.0.weight.copy_from(&[f32::MAX; 12]);
    m.2.bias.copy_from(&[-f32::MAX, f32::MAX]);
    assert_eq!(check_finite(&m, None, 1), Ok(()));
}

#[test]
fn names_the_first_bad_gradient() {
    let dev = Cpu::default();
    let m = dev.build_module::<Mlp, f32>();
    let mut grads = m.alloc_grads();
    let x: Tensor<Rank2<2, 3>, f32, Cpu> = dev.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]);
    let loss = m.forward(x.trace(grads)).square().mean();
    grads = loss.backward();
    assert_eq!(check_finite(&m, Some(&grads), 4), Ok(()));

    // Blow up the input: the first layer's weight gradient goes infinite.
    let x: Tensor<Rank2<2, 3>, f32, Cpu> =
        dev.tensor([[f32::INFINITY, 2.0, 3.0], [0.5, -1.0, 2.0]]);
    m.zero_grads(&mut grads);
    let loss = m.forward(x.trace(grads)).square().mean();
    let grads = loss.backward();
    // The parameters are still finite; every gradient is bad, and the first
    // in dfdx's path order is named.
    let err = check_finite(&m, Some(&grads), 5).unwrap_err();
    assert_eq!(err, non_finite(5, TensorKind::Gradient, "0.weight"));
    assert_eq!(
        err.to_string(),
        "step 5: gradient `0.weight` contains NaN or infinity"
    );
}
