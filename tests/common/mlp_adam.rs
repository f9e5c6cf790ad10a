//! The small MLP + dfdx Adam training step that `tests/scan.rs` (Cpu) and
//! `tests/cuda_scan.rs` (Cuda) run through `scan!` and through plain calls,
//! on any device: include with `#[path = "common/mlp_adam.rs"] mod mlp_adam;`.
//!
//! Parameters and batches are drawn on a seeded `Cpu` and copied to the
//! device, so a seed means the same numbers everywhere.
#![allow(dead_code)]

use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::nn::builders::ReLU;
use flaxen::dfdx::nn::ToDevice;
use flaxen::dfdx::optim::{Adam, AdamConfig, Optimizer};
use flaxen::dfdx::tensor::TensorToArray;
use flaxen::prelude::*;

pub type Mlp = (Linear<6, 16>, ReLU, Linear<16, 3>);
pub type Net<D> = <Mlp as BuildOnDevice<D, f32>>::Built;

pub struct State<D: Device<f32>> {
    pub model: Net<D>,
    pub opt: Adam<Net<D>, f32, D>,
    pub grads: Gradients<f32, D>,
    pub steps: usize,
}

pub type Batch<D> = (Tensor<Rank2<8, 6>, f32, D>, Tensor<Rank1<8>, usize, D>);

/// The same parameters for the same seed on every device.
pub fn init<D: Device<f32>>(dev: &D, seed: u64) -> State<D> {
    let model = Cpu::seed_from_u64(seed)
        .build_module::<Mlp, f32>()
        .to_device(dev);
    let grads = model.alloc_grads();
    let opt = Adam::new(&model, AdamConfig::default());
    State {
        model,
        opt,
        grads,
        steps: 0,
    }
}

/// One Adam step on the mean cross-entropy; returns the loss, on the device.
pub fn train_step<D: Device<f32>>(
    mut s: State<D>,
    (x, y): Batch<D>,
) -> (State<D>, Tensor<Rank0, f32, D>) {
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

/// `k` batches drawn on the Cpu from `seed`.
pub fn batches(seed: u64, k: usize) -> Vec<Batch<Cpu>> {
    let cpu = Cpu::seed_from_u64(seed);
    (0..k)
        .map(|i| {
            let x = cpu.sample_normal();
            let y = cpu.tensor([0, 1, 2, 0, 1, 2, i % 3, (i + 1) % 3]);
            (x, y)
        })
        .collect()
}

/// `bs` stacked on the Cpu (dfdx 0.13 has no `stack` for `usize` tensors on
/// Cuda), then one copy of each stacked tensor to `dev`.
pub fn stacked<const K: usize, D: Device<f32>>(
    dev: &D,
    bs: &[Batch<Cpu>],
) -> (
    Tensor<Rank3<K, 8, 6>, f32, D>,
    Tensor<Rank2<K, 8>, usize, D>,
) {
    let arr: [Batch<Cpu>; K] = bs.to_vec().try_into().unwrap_or_else(|_| unreachable!());
    let (xs, ys) = stack_batches(arr);
    (xs.to_device(dev), ys.to_device(dev))
}

/// `train_step` called once per batch from `init(dev, seed)`: the final
/// state and the losses.
pub fn plain_calls<D>(dev: &D, seed: u64, bs: &[Batch<Cpu>]) -> (State<D>, Vec<f32>)
where
    D: Device<f32> + TensorToArray<Rank0, f32, Array = f32>,
{
    let mut state = init(dev, seed);
    let mut losses = Vec::new();
    for (x, y) in bs {
        let (s, l) = train_step(state, (x.to_device(dev), y.to_device(dev)));
        state = s;
        losses.push(l.array());
    }
    (state, losses)
}

/// Every parameter, in order.
pub fn params<D: Device<f32>>(s: &State<D>) -> Vec<f32> {
    let mut v = s.model.0.weight.as_vec();
    v.extend(s.model.0.bias.as_vec());
    v.extend(s.model.2.weight.as_vec());
    v.extend(s.model.2.bias.as_vec());
    v
}
