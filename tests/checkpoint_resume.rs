//! Resuming continues bit for bit: 2N steps equal N steps, save, load into
//! fresh objects, N steps (on Cpu, with a stateless SGD so that parameters
//! and data order are the whole training state).

use flaxen::dfdx::data::OneHotEncode;
use flaxen::dfdx::losses::cross_entropy_with_logits_loss;
use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::nn::builders::ReLU;
use flaxen::dfdx::optim::{Optimizer, Sgd, SgdConfig};
use flaxen::prelude::*;
use flaxen::runtime::checkpoint::{Checkpoint, CheckpointManager};
use flaxen::runtime::data::{digits, Loader, LoaderConfig};

type Model = (Linear<64, 32>, ReLU, Linear<32, 10>);
type Built = <Model as BuildOnDevice<Cpu, f32>>::Built;
type Data = Loader<Rank3<1, 8, 8>, 16, f32, Cpu>;

fn fresh(seed: u64) -> (Cpu, Built, Data) {
    let dev = Cpu::seed_from_u64(seed);
    let model = dev.build_module::<Model, f32>();
    let (train, _) = digits::load().unwrap();
    let data = Loader::new(train, &dev, LoaderConfig::new(seed).prefetch(3)).unwrap();
    (dev, model, data)
}

fn train(dev: &Cpu, model: &mut Built, data: &mut Data, steps: usize) {
    let mut opt = Sgd::new(
        &*model,
        SgdConfig {
            lr: 0.1,
            momentum: None,
            weight_decay: None,
        },
    );
    let mut grads = model.alloc_grads();
    for _ in 0..steps {
        let (x, y) = data.next_batch().unwrap();
        let x = x.reshape::<Rank2<16, 64>>();
        let targets = dev.one_hot_encode(Const::<10>, y.array());
        let logits = model.forward_mut(x.traced(grads));
        let loss = cross_entropy_with_logits_loss(logits, targets);
        grads = loss.backward();
        opt.update(model, &grads).unwrap();
        model.zero_grads(&mut grads);
    }
}

fn bits(m: &Built) -> Vec<u32> {
    [
        m.0.weight.as_vec(),
        m.0.bias.as_vec(),
        m.2.weight.as_vec(),
        m.2.bias.as_vec(),
    ]
    .concat()
    .into_iter()
    .map(f32::to_bits)
    .collect()
}

#[test]
fn resume_is_bit_exact() {
    // 93 batches per epoch: the 2N = 120 steps cross an epoch boundary after
    // the resume point.
    const N: usize = 60;
    let (dev, mut straight, mut data) = fresh(1);
    train(&dev, &mut straight, &mut data, 2 * N);

    let (dev, mut first, mut data) = fresh(1);
    train(&dev, &mut first, &mut data, N);
    let dir = std::env::temp_dir().join(format!("flaxen-resume-{}", std::process::id()));
    let manager = CheckpointManager::new(&dir, 2).unwrap();
    let mut ckpt = Checkpoint::new(N as u64);
    ckpt.add_module("params", &first)
        .unwrap()
        .add("data", &data)
        .unwrap();
    manager.save(&ckpt).unwrap();
    drop((first, data));

    // Another process would start from other random weights and seed.
    let (dev, mut resumed, mut data) = fresh(2);
    let step = manager
        .restore_latest()
        .unwrap()
        .unwrap()
        .restore()
        .module("params", &mut resumed)
        .part("data", &mut data)
        .apply()
        .unwrap();
    assert_eq!(step, N as u64);
    train(&dev, &mut resumed, &mut data, N);
    assert_eq!(bits(&straight), bits(&resumed));
    let _ = std::fs::remove_dir_all(dir);
}
