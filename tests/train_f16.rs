//! Mixed precision: a small MLP trained in dfdx's `AMP<f16>` on the CPU with
//! `TrainState` and flaxen's optimizers (`cargo test --features f16`).
#![cfg(feature = "f16")]

use flaxen::runtime::dfdx::dtypes::{f16, AMP};
use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::losses::softmax_cross_entropy_with_integer_labels;
use flaxen::runtime::metrics::Metrics;
use flaxen::runtime::optim::*;
use flaxen::runtime::state::{StateDict, StateMap};
use flaxen::runtime::train_state::TrainState;

type H = AMP<f16>;

/// dfdx's `Linear` is a `TensorCollection` only for `Float` dtypes, which
/// `AMP<f16>` is not, so the MLP is spelled out with raw tensors.
#[derive(Debug, Clone)]
struct Mlp<E: Dtype, D: Storage<E>> {
    w1: Tensor<Rank2<8, 32>, E, D>,
    b1: Tensor<Rank1<32>, E, D>,
    w2: Tensor<Rank2<32, 4>, E, D>,
    b2: Tensor<Rank1<4>, E, D>,
}

impl<E: Dtype, D: Device<E>> TensorCollection<E, D> for Mlp<E, D> {
    type To<E2: Dtype, D2: Device<E2>> = Mlp<E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::tensor(
                    "dense_0.kernel",
                    |s| &s.w1,
                    |s| &mut s.w1,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "dense_0.bias",
                    |s| &s.b1,
                    |s| &mut s.b1,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "dense_1.kernel",
                    |s| &s.w2,
                    |s| &mut s.w2,
                    TensorOptions::reset_to_zeros(),
                ),
                Self::tensor(
                    "dense_1.bias",
                    |s| &s.b2,
                    |s| &mut s.b2,
                    TensorOptions::reset_to_zeros(),
                ),
            ),
            |(w1, b1, w2, b2)| Mlp { w1, b1, w2, b2 },
        )
    }
}

impl Mlp<H, Cpu> {
    fn new(dev: &Cpu) -> Self {
        Mlp {
            w1: (dev.sample_normal::<Rank2<8, 32>>() * 0.35).to_dtype::<H>(),
            b1: dev.zeros::<Rank1<32>>(),
            w2: (dev.sample_normal::<Rank2<32, 4>>() * 0.18).to_dtype::<H>(),
            b2: dev.zeros::<Rank1<4>>(),
        }
    }

    fn forward(
        &self,
        x: Tensor<Rank2<64, 8>, H, Cpu, OwnedTape<H, Cpu>>,
    ) -> Tensor<Rank2<64, 4>, H, Cpu, OwnedTape<H, Cpu>> {
        let h = (x.matmul(self.w1.clone()) + self.b1.clone().broadcast()).relu();
        h.matmul(self.w2.clone()) + self.b2.clone().broadcast()
    }
}

fn batch(dev: &Cpu) -> (Tensor<Rank2<64, 8>, H, Cpu>, Tensor<Rank1<64>, usize, Cpu>) {
    let x: Tensor<Rank2<64, 8>, f32, Cpu> = dev.sample_normal();
    let labels: Vec<usize> = x
        .as_vec()
        .chunks(8)
        .map(|r| {
            let s = [r[0] + r[1], r[2] - r[3], r[4] - r[0], r[6] - r[7]];
            (0..4).max_by(|&a, &b| s[a].total_cmp(&s[b])).unwrap()
        })
        .collect();
    (
        x.to_dtype::<H>(),
        dev.tensor_from_vec(labels, (Const::<64>,)),
    )
}

fn train<O: GradientTransformation<H, Cpu>>(tx: O) -> (f64, f64) {
    let dev: Cpu = Cpu::seed_from_u64(9);
    let mut state = TrainState::create(Mlp::new(&dev), tx).unwrap();
    let (mut first, mut last) = (Metrics::new(), Metrics::new());
    for step in 0..150 {
        let (x, y) = batch(&dev);
        let (loss, grads) = state
            .value_and_grad(|model, tape| {
                let logits = model.forward(x.put_tape(tape));
                softmax_cross_entropy_with_integer_labels(logits, y).mean()
            })
            .unwrap();
        if step < 10 {
            first.add_loss(&loss);
        } else if step >= 130 {
            last.add_loss(&loss);
        }
        state.apply_gradients(grads).unwrap();
    }
    let mut saved: StateMap<H> = StateMap::new();
    state.save_state("", &mut saved);
    assert!(saved.contains_key("step"));
    (first.mean_loss().unwrap(), last.mean_loss().unwrap())
}

#[test]
fn amp_f16_mlp_trains_with_adam() {
    let (l0, l1) = train(adam(1e-2));
    eprintln!("AMP<f16> adam: loss {l0:.4} -> {l1:.4}");
    assert!(l1 * 3.0 < l0, "loss went from {l0} to {l1}");
}

#[test]
fn amp_f16_mlp_trains_with_a_chain() {
    let (l0, l1) = train(chain((
        clip_by_global_norm(1.0),
        sgd(0.1, Some(0.9), false),
    )));
    eprintln!("AMP<f16> clip+sgd: loss {l0:.4} -> {l1:.4}");
    assert!(l1 * 3.0 < l0, "loss went from {l0} to {l1}");
}
