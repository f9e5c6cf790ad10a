//! Training with `TrainState`: a small MLP on a synthetic classification
//! task, metrics, and checkpoint (StateDict) round trips.

use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::losses::softmax_cross_entropy_with_integer_labels;
use flaxen::runtime::metrics::Metrics;
use flaxen::runtime::optim::*;
use flaxen::runtime::schedule::warmup_cosine_decay;
use flaxen::runtime::state::{StateDict, StateError, StateMap};
use flaxen::runtime::train_state::{Loss, TrainState};

type Mlp = (Linear<8, 32>, ReLU, Linear<32, 4>);
type Model = <Mlp as BuildOnDevice<Cpu, f32>>::Built;
type X = Tensor<Rank2<64, 8>, f32, Cpu>;
type Y = Tensor<Rank1<64>, usize, Cpu>;
type State<O> = TrainState<Model, O, f32, Cpu>;

/// Four classes: the label is the argmax of a fixed linear map of x.
fn batch(dev: &Cpu) -> (X, Y) {
    let x: X = dev.sample_normal();
    let v = x.as_vec();
    let labels: Vec<usize> = v
        .chunks(8)
        .map(|r| {
            let s = [
                r[0] + r[1],
                r[2] - r[3],
                r[4] + r[5] - r[0],
                r[6] - r[7] + r[2],
            ];
            (0..4).max_by(|&a, &b| s[a].total_cmp(&s[b])).unwrap()
        })
        .collect();
    (x, dev.tensor_from_vec(labels, (Const::<64>,)))
}

fn train_step<O: GradientTransformation<f32, Cpu>>(
    mut state: State<O>,
    (x, y): (X, Y),
    metrics: &mut Metrics<f32, Cpu>,
) -> (State<O>, Loss<f32, Cpu>) {
    let mut logits_out = None;
    let (loss, grads) = state
        .value_and_grad(|model, tape| {
            let logits = model.forward(x.put_tape(tape));
            logits_out = Some(logits.retaped::<NoneTape>());
            softmax_cross_entropy_with_integer_labels(logits, y.clone()).mean()
        })
        .unwrap();
    metrics.add_loss(&loss);
    metrics.add_accuracy(&logits_out.unwrap(), &y);
    state.apply_gradients(grads).unwrap();
    (state, loss)
}

#[test]
fn mlp_loss_falls_by_a_factor_of_eight() {
    let dev: Cpu = Cpu::seed_from_u64(0);
    let tx = chain((
        clip_by_global_norm(1.0),
        adamw(warmup_cosine_decay(0.0, 1e-2, 10, 300, 1e-4), 1e-4),
    ));
    let mut state = TrainState::create(dev.build_module::<Mlp, f32>(), tx).unwrap();
    let mut first = Metrics::new();
    for _ in 0..10 {
        let (s, _) = train_step(state, batch(&dev), &mut first);
        state = s;
    }
    let mut middle = Metrics::new();
    for _ in 0..290 {
        state = train_step(state, batch(&dev), &mut middle).0;
    }
    let mut last = Metrics::new();
    for _ in 0..20 {
        let (s, _) = train_step(state, batch(&dev), &mut last);
        state = s;
    }
    let (l0, l1) = (first.mean_loss().unwrap(), last.mean_loss().unwrap());
    eprintln!(
        "mean loss: first 10 steps {l0:.4}, last 20 steps {l1:.4}; accuracy {:.3}",
        last.accuracy().unwrap()
    );
    assert_eq!(state.step(), 320);
    assert!(l1 * 8.0 < l0, "loss went from {l0} to {l1}");
    assert!(
        last.accuracy().unwrap() > 0.85,
        "accuracy {:?}",
        last.accuracy()
    );
}

#[test]
fn checkpoint_resume_is_bit_for_bit() {
    let dev: Cpu = Cpu::seed_from_u64(1);
    let tx = chain((
        clip_by_global_norm(1.0),
        multi_steps(2, adam(1e-2)),
        add_decayed_weights(1e-4),
    ));
    let mut a = TrainState::create(dev.build_module::<Mlp, f32>(), tx.clone()).unwrap();
    let batches: Vec<_> = (0..8).map(|_| batch(&dev)).collect();
    let mut m = Metrics::new();
    for b in &batches[..3] {
        a = train_step(a, b.clone(), &mut m).0;
    }
    let mut saved = StateMap::new();
    a.save_state("", &mut saved);
    assert!(saved.contains_key("step"));
    assert!(saved.contains_key("params.0.weight"));
    assert!(saved.contains_key("opt.1.mini_step"));
    assert!(saved.contains_key("opt.1.inner.count"));
    assert!(saved.contains_key("opt.1.inner.mu.0.weight"));
    assert_eq!(saved["opt.1.inner.nu.2.bias"].shape, [4]);

    // A fresh state (other initial weights) resumes from the checkpoint.
    let mut b = TrainState::create(dev.build_module::<Mlp, f32>(), tx).unwrap();
    b.load_state("", &saved).unwrap();
    assert_eq!(b.step(), 3);
    for batch in &batches[3..] {
        a = train_step(a, batch.clone(), &mut m).0;
        b = train_step(b, batch.clone(), &mut m).0;
    }
    assert_eq!(a.params.0.weight.as_vec(), b.params.0.weight.as_vec());
    assert_eq!(a.params.2.bias.as_vec(), b.params.2.bias.as_vec());
}

#[test]
fn bad_checkpoints_change_nothing() {
    let dev: Cpu = Cpu::seed_from_u64(2);
    let mut s = TrainState::create(dev.build_module::<Mlp, f32>(), adam(1e-3)).unwrap();
    s = train_step(s, batch(&dev), &mut Metrics::new()).0;
    let mut good = StateMap::new();
    s.save_state("run.", &mut good);
    let before = s.params.0.weight.as_vec();

    let mut missing = good.clone();
    missing.remove("run.opt.nu.2.weight");
    let mut other = TrainState::create(dev.build_module::<Mlp, f32>(), adam(1e-3)).unwrap();
    let other_before = other.params.0.weight.as_vec();
    assert_eq!(
        other.load_state("run.", &missing),
        Err(StateError::Missing {
            key: "run.opt.nu.2.weight".into()
        })
    );
    assert_eq!(other.params.0.weight.as_vec(), other_before);
    assert_eq!(other.step(), 0);

    let mut reshaped = good.clone();
    reshaped.get_mut("run.opt.mu.0.bias").unwrap().shape = vec![2, 16];
    assert!(matches!(
        other.load_state("run.", &reshaped),
        Err(StateError::Shape { .. })
    ));

    let mut bad_count = good.clone();
    bad_count.get_mut("run.opt.count").unwrap().data[0] = -1.0;
    assert!(matches!(
        other.load_state("run.", &bad_count),
        Err(StateError::Invalid { .. })
    ));
    assert_eq!(other.params.0.weight.as_vec(), other_before);

    other.load_state("run.", &good).unwrap();
    assert_eq!(other.params.0.weight.as_vec(), before);
}
