//! `scan!` is K sequential calls of the step function: bit for bit the same
//! parameters and losses as K plain calls on the same batches.

use flaxen::dfdx::optim::{Adam, AdamConfig};
use flaxen::prelude::*;

type Model = (Linear<6, 16>, ReLU, Linear<16, 3>);
type Dev = Cpu;

struct State {
    model: <Model as BuildOnDevice<Dev, f32>>::Built,
    opt: Adam<<Model as BuildOnDevice<Dev, f32>>::Built, f32, Dev>,
    grads: Gradients<f32, Dev>,
    steps: usize,
}

type Batch = (Tensor<Rank2<8, 6>, f32, Dev>, Tensor<Rank1<8>, usize, Dev>);

fn init(seed: u64) -> State {
    let dev = Dev::seed_from_u64(seed);
    let model = dev.build_module::<Model, f32>();
    let grads = model.alloc_grads();
    let opt = Adam::new(&model, AdamConfig::default());
    State {
        model,
        opt,
        grads,
        steps: 0,
    }
}

fn train_step(mut s: State, (x, y): Batch) -> (State, Tensor<Rank0, f32, Dev>) {
    let grads = std::mem::replace(&mut s.grads, Gradients::leaky());
    let logits = s.model.forward(x.traced(grads));
    let loss = -logits.log_softmax::<Axis<1>>().select(y).mean();
    let value = loss.retaped::<NoneTape>();
    let mut grads = loss.backward();
    s.opt
        .update(&mut s.model, &grads)
        .expect("all params have grads");
    s.model.zero_grads(&mut grads);
    s.grads = grads;
    s.steps += 1;
    (s, value)
}

fn batches(dev: &Dev, k: usize) -> Vec<Batch> {
    (0..k)
        .map(|i| {
            let x = dev.sample_normal();
            let y = dev.tensor([0, 1, 2, 0, 1, 2, i % 3, (i + 1) % 3]);
            (x, y)
        })
        .collect()
}

fn params(s: &State) -> Vec<f32> {
    let mut v = s.model.0.weight.as_vec();
    v.extend(s.model.0.bias.as_vec());
    v.extend(s.model.2.weight.as_vec());
    v.extend(s.model.2.bias.as_vec());
    v
}

#[test]
fn scan_equals_k_plain_calls_bit_for_bit() {
    let dev = Dev::seed_from_u64(7);
    let bs = batches(&dev, 5);

    let mut plain = init(1);
    let mut plain_losses = Vec::new();
    for b in bs.iter().cloned() {
        let (s, l) = train_step(plain, b);
        plain = s;
        plain_losses.push(l.array());
    }

    let stacked = stack_batches::<[Batch; 5]>(bs.try_into().unwrap_or_else(|_| unreachable!()));
    let (scanned, losses) = scan!(5, train_step, init(1), stacked);
    let losses: Tensor<Rank1<5>, f32, Dev> = losses;

    assert_eq!(scanned.steps, 5);
    assert_eq!(losses.array().to_vec(), plain_losses);
    assert_eq!(params(&scanned), params(&plain));
    // Five sequential Adam updates really moved the parameters.
    assert_ne!(params(&scanned), params(&init(1)));
}

#[test]
fn scan_with_const_k_and_closure() {
    const K: usize = 3;
    let dev = Dev::seed_from_u64(9);
    let bs = batches(&dev, K);
    let stacked =
        stack_batches::<[Batch; K]>(bs.clone().try_into().unwrap_or_else(|_| unreachable!()));
    let mut calls = 0;
    let (scanned, losses) = scan!(
        K,
        |s, b| {
            calls += 1;
            train_step(s, b)
        },
        init(2),
        stacked
    );
    assert_eq!(calls, K);
    let mut plain = init(2);
    let mut plain_losses = Vec::new();
    for b in bs {
        let (s, l) = train_step(plain, b);
        plain = s;
        plain_losses.push(l.array());
    }
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

fn scan_generic<const K: usize>(bs: [Batch; K]) -> (State, Tensor<Rank1<K>, f32, Dev>) {
    scan!(K, train_step, init(3), stack_batches(bs))
}

#[test]
fn scan_with_const_generic_k() {
    let dev = Dev::seed_from_u64(11);
    let bs: [Batch; 2] = batches(&dev, 2)
        .try_into()
        .unwrap_or_else(|_| unreachable!());
    let (s, losses) = scan_generic(bs.clone());
    assert_eq!(s.steps, 2);
    let (s1, l1) = train_step(init(3), bs[0].clone());
    let (s2, l2) = train_step(s1, bs[1].clone());
    assert_eq!(losses.array(), [l1.array(), l2.array()]);
    assert_eq!(params(&s), params(&s2));
}
