//! NCCL's gradient all-reduce on one GPU (`--features nccl`; needs a GPU
//! and libnccl at run time, see docs/cuda.md for running it on a lent GPU).
//!
//! A group of one rank averages nothing, so the gradients must come back
//! bit for bit, after a trip through the flat device buffer and
//! `ncclAllReduce`; and a training step with it equals one without it.
#![cfg(feature = "nccl")]

use flaxen::dfdx::nn::builders::{Linear, ReLU};
use flaxen::dist::nccl::Nccl;
use flaxen::prelude::*;

type Model = (Linear<6, 16>, ReLU, Linear<16, 3>);

#[test]
fn one_rank_all_reduce_keeps_the_gradients() {
    let dev: Cuda = Cuda::seed_from_u64(4);
    let model = dev.build_module::<Model, f32>();
    let x: Tensor<Rank2<5, 6>, f32, _> = dev.sample_normal();
    let mut grads = model
        .forward(x.traced(model.alloc_grads()))
        .square()
        .mean()
        .backward();
    let before = [
        grads.get(&model.0.weight).as_vec(),
        grads.get(&model.0.bias).as_vec(),
        grads.get(&model.2.weight).as_vec(),
        grads.get(&model.2.bias).as_vec(),
    ];
    let mut nccl = Nccl::<f32>::single(&model).expect("NCCL on one GPU");
    assert_eq!((nccl.rank(), nccl.size()), (0, 1));
    for _ in 0..2 {
        // The second call reuses the flat buffers.
        nccl.all_reduce_mean(&model, &mut grads).unwrap();
        let after = [
            grads.get(&model.0.weight).as_vec(),
            grads.get(&model.0.bias).as_vec(),
            grads.get(&model.2.weight).as_vec(),
            grads.get(&model.2.bias).as_vec(),
        ];
        assert_eq!(after, before);
    }
    assert!(
        before[0].iter().any(|g| *g != 0.0),
        "the test needs gradients"
    );
}
