//! A Flax-style training loop written against `flaxen::prelude::*` only:
//! every optimizer, schedule, loss and metric name resolves without clashing
//! with dfdx's prelude.

use flaxen::dfdx::nn::builders::Linear;
use flaxen::dfdx::nn::builders::ReLU;
use flaxen::prelude::*;

type Mlp = (Linear<6, 16>, ReLU, Linear<16, 3>);
type Model = <Mlp as BuildOnDevice<Cpu, f32>>::Built;
type Batch = (
    Tensor<Rank2<32, 6>, f32, Cpu>,
    Tensor<Rank1<32>, usize, Cpu>,
);

fn train_step<O: GradientTransformation<f32, Cpu>>(
    mut state: TrainState<Model, O, f32, Cpu>,
    (x, y): Batch,
) -> (TrainState<Model, O, f32, Cpu>, Loss<f32, Cpu>) {
    let (loss, grads) = state
        .value_and_grad(|model, tape| {
            let logits = model.forward(x.put_tape(tape));
            softmax_cross_entropy_with_integer_labels(logits, y).mean()
        })
        .unwrap();
    state.apply_gradients(grads).unwrap();
    (state, loss)
}

fn batch(dev: &Cpu) -> Batch {
    let x: Tensor<Rank2<32, 6>, f32, Cpu> = dev.sample_normal();
    let labels = x
        .as_vec()
        .chunks(6)
        .map(|r| usize::from(r[0] > 0.0) + usize::from(r[1] > 0.5))
        .collect();
    (x, dev.tensor_from_vec(labels, (Const::<32>,)))
}

#[test]
fn prelude_train_loop() {
    let dev: Cpu = Cpu::seed_from_u64(11);
    // Every schedule and transformation is reachable from the prelude.
    let _ = (
        constant(0.1),
        exponential_decay(1e-2, 10, 0.5, false),
        linear(1.0, 0.0, 10),
        piecewise_constant(0.1, &[(10, 0.5)]),
        cosine_decay(1e-2, 10, 0.0),
    );
    let _ = chain((
        identity(),
        scale(-1.0),
        scale_by_schedule(constant(1.0)),
        rmsprop(1e-3),
    ));
    let _ = (
        sgd(0.1, None, false),
        adam(1e-3),
        multi_steps(2, add_decayed_weights(1e-4)),
    );
    let tx = chain((
        clip_by_global_norm(1.0),
        adamw(warmup_cosine_decay(0.0, 1e-2, 5, 100, 1e-4), 1e-4),
    ));
    let mut state = TrainState::create(dev.build_module::<Mlp, f32>(), tx).unwrap();
    let mut metrics = Metrics::new();
    let mut losses = Vec::new();
    for _ in 0..100 {
        let (s, loss) = train_step(state, batch(&dev));
        state = s;
        metrics.add_loss(&loss);
        losses.push(loss);
    }
    // Read the device once, at the end.
    let first: f32 = losses[..10].iter().map(|l| l.array()).sum::<f32>() / 10.0;
    let last: f32 = losses[90..].iter().map(|l| l.array()).sum::<f32>() / 10.0;
    assert!(last * 2.0 < first, "{first} -> {last}");
    assert!(metrics.mean_loss().unwrap().is_finite());
    let mut ckpt = StateMap::new();
    state.save_state("", &mut ckpt);
    assert_eq!(ckpt["step"].data, [100.0]);
    let _ = (
        mse::<Rank1<2>, f32, Cpu, NoneTape>,
        squared_error::<Rank1<2>, f32, Cpu, NoneTape>,
    );
    let _ = sigmoid_binary_cross_entropy::<Rank1<2>, f32, Cpu, NoneTape>;
    let _ = softmax_cross_entropy::<Const<2>, Const<3>, f32, Cpu, NoneTape>;
    let _: fn(&mut Model, _) -> _ = apply_updates::<f32, Cpu, Model>;
}
