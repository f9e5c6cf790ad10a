//! `scan!` is K sequential calls of the step function: bit for bit the same
//! parameters and losses as K plain calls on the same batches.

use flaxen::dfdx::nn::builders::Linear;
use flaxen::prelude::*;
use flaxen::runtime::optim::Adam;
use flaxen::runtime::scan::{SelectStep, Stacked};

#[path = "common/mlp_adam.rs"]
mod mlp_adam;
use mlp_adam::{batches, init, params, plain_calls, stacked, train_step, Batch, State};

type Dev = Cpu;

#[test]
fn scan_equals_k_plain_calls_bit_for_bit() {
    let dev = Dev::default();
    let bs = batches(7, 5);
    let (plain, plain_losses) = plain_calls(&dev, 1, &bs);
    let (scanned, losses) = scan!(5, train_step, init(&dev, 1), stacked::<5, _>(&dev, &bs));
    let losses: Tensor<Rank1<5>, f32, Dev> = losses;

    assert_eq!(scanned.steps, 5);
    assert_eq!(losses.array().to_vec(), plain_losses);
    assert_eq!(params(&scanned), params(&plain));
    // Five sequential Adam updates really moved the parameters.
    assert_ne!(params(&scanned), params(&init(&dev, 1)));
}

#[test]
fn scan_with_const_k_and_closure() {
    const K: usize = 3;
    let dev = Dev::default();
    let bs = batches(9, K);
    let mut calls = 0;
    let (scanned, losses) = scan!(
        K,
        |s, b| {
            calls += 1;
            train_step(s, b)
        },
        init(&dev, 2),
        stacked::<K, _>(&dev, &bs)
    );
    assert_eq!(calls, K);
    let (plain, plain_losses) = plain_calls(&dev, 2, &bs);
    assert_eq!(losses.array().to_vec(), plain_losses);
    assert_eq!(params(&scanned), params(&plain));
}

#[test]
fn step_k_slices_exactly_one_batch() {
    let dev = Dev::default();
    let x: Tensor<Rank3<4, 2, 3>, f32, _> = dev.sample_normal();
    let y: Tensor<Rank2<4, 2>, usize, _> = dev.tensor([[0, 1], [2, 3], [4, 5], [6, 7]]);
    for k in 0..4 {
        let (xk, yk) = Stacked::<4>::step(&(x.clone(), y.clone()), k);
        assert_eq!(xk.array(), x.array()[k]);
        assert_eq!(yk.array(), [2 * k, 2 * k + 1]);
    }
}

fn scan_generic<const K: usize>(bs: [Batch<Dev>; K]) -> (State<Dev>, Tensor<Rank1<K>, f32, Dev>) {
    scan!(K, train_step, init(&Dev::default(), 3), stack_batches(bs))
}

#[test]
fn scan_with_const_generic_k() {
    let dev = Dev::default();
    let bs: [Batch<Dev>; 2] = batches(11, 2).try_into().unwrap_or_else(|_| unreachable!());
    let (s, losses) = scan_generic(bs.clone());
    assert_eq!(s.steps, 2);
    let (s1, l1) = train_step(init(&dev, 3), bs[0].clone());
    let (s2, l2) = train_step(s1, bs[1].clone());
    assert_eq!(losses.array(), [l1.array(), l2.array()]);
    assert_eq!(params(&s), params(&s2));
}

type Ts = TrainState<<Linear<6, 3> as BuildOnDevice<Dev, f32>>::Built, Adam<f64>, f32, Dev>;

fn ts_init(seed: u64) -> Ts {
    let model = Dev::seed_from_u64(seed).build_module::<Linear<6, 3>, f32>();
    TrainState::create(model, adam(0.05)).expect("cpu")
}

fn ts_step(mut s: Ts, (x, y): Batch<Dev>) -> (Ts, Loss<f32, Dev>) {
    let (loss, grads) = s
        .value_and_grad(|m, tape| {
            softmax_cross_entropy_with_integer_labels(m.forward(x.put_tape(tape)), y).mean()
        })
        .expect("cpu");
    s.apply_gradients(grads).expect("cpu");
    (s, loss)
}

/// A `TrainState` step (flaxen's Adam, which keeps its copy of the
/// parameters between steps) under `scan!` equals the plain calls.
#[test]
fn train_state_scan_equals_plain_calls() {
    let dev = Dev::default();
    let bs = batches(13, 3);
    let (scanned, losses) = scan!(3, ts_step, ts_init(4), stacked::<3, _>(&dev, &bs));
    let mut plain = ts_init(4);
    let mut plain_losses = Vec::new();
    for b in bs {
        let (s, l) = ts_step(plain, b);
        plain = s;
        plain_losses.push(l.array());
    }
    assert_eq!(losses.array().to_vec(), plain_losses);
    assert_eq!(scanned.params.weight.array(), plain.params.weight.array());
    assert_eq!(scanned.params.bias.array(), plain.params.bias.array());
    assert_eq!(scanned.step(), 3);
}

/// A step that is not `Send` (it holds an `Rc`) and a closure that
/// mutates what it captures both work: the steps run where `scan!` is.
#[test]
fn a_step_that_is_not_send() {
    let dev = Dev::default();
    let bs = batches(17, 3);
    let calls = std::rc::Rc::new(std::cell::Cell::new(0));
    let mut seen = Vec::new();
    let (scanned, losses) = scan!(
        3,
        |s, b| {
            calls.set(calls.get() + 1);
            seen.push(calls.get());
            train_step(s, b)
        },
        init(&dev, 5),
        stacked::<3, _>(&dev, &bs)
    );
    assert_eq!(calls.get(), 3);
    assert_eq!(seen, [1, 2, 3]);
    let (plain, plain_losses) = plain_calls(&dev, 5, &bs);
    assert_eq!(losses.array().to_vec(), plain_losses);
    assert_eq!(params(&scanned), params(&plain));
}

/// `scan!` in a function generic over the device.
fn scan_on<D>(dev: &D, bs: &[Batch<Cpu>]) -> (State<D>, Tensor<Rank1<2>, f32, D>)
where
    D: Device<f32> + SelectStep<f32> + SelectStep<usize>,
{
    scan!(2, train_step, init(dev, 7), stacked::<2, _>(dev, bs))
}

#[test]
fn scan_in_a_device_generic_function() {
    let dev = Dev::default();
    let bs = batches(23, 2);
    let (scanned, losses) = scan_on(&dev, &bs);
    let (plain, plain_losses) = plain_calls(&dev, 7, &bs);
    assert_eq!(losses.array().to_vec(), plain_losses);
    assert_eq!(params(&scanned), params(&plain));
}
