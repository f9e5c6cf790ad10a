//! Values and finite-difference gradient checks of the losses (in f64).

use flaxen::runtime::dfdx::prelude::*;
use flaxen::runtime::losses::*;

type L = Tensor<Rank2<3, 4>, f64, Cpu>;

/// Checks d loss / d logits from backward against central differences.
fn check_grad(
    name: &str,
    logits: &L,
    f: impl Fn(
        Tensor<Rank2<3, 4>, f64, Cpu, OwnedTape<f64, Cpu>>,
    ) -> Tensor<Rank0, f64, Cpu, OwnedTape<f64, Cpu>>,
) {
    let g = f(logits.leaky_trace()).backward();
    let analytic = g.get(logits).as_vec();
    let base = logits.as_vec();
    let dev = logits.device().clone();
    let h = 1e-6;
    for i in 0..base.len() {
        let eval = |delta: f64| {
            let mut v = base.clone();
            v[i] += delta;
            let t: L = dev.tensor_from_vec(v, (Const, Const));
            f(t.leaky_trace()).retaped::<NoneTape>().array()
        };
        let numeric = (eval(h) - eval(-h)) / (2.0 * h);
        assert!(
            (numeric - analytic[i]).abs() <= 1e-6 * analytic[i].abs().max(1.0),
            "{name}[{i}]: backward {} vs finite difference {numeric}",
            analytic[i]
        );
    }
}

fn logsumexp(r: &[f64]) -> f64 {
    let m = r.iter().cloned().fold(f64::MIN, f64::max);
    m + r.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

#[test]
fn integer_label_cross_entropy() {
    let dev: Cpu = Cpu::seed_from_u64(5);
    let logits: L = dev.sample_normal();
    let labels = [2usize, 0, 3];
    let per = softmax_cross_entropy_with_integer_labels(logits.clone(), dev.tensor(labels)).array();
    for (b, row) in logits.as_vec().chunks(4).enumerate() {
        assert!((per[b] - (logsumexp(row) - row[labels[b]])).abs() < 1e-12);
    }
    check_grad("ce int", &logits, |l| {
        softmax_cross_entropy_with_integer_labels(l, dev.tensor(labels)).mean()
    });
}

#[test]
fn soft_label_cross_entropy_matches_one_hot() {
    let dev: Cpu = Cpu::seed_from_u64(6);
    let logits: L = dev.sample_normal();
    let one_hot = dev.tensor([
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
        [1.0, 0.0, 0.0, 0.0],
    ]);
    let soft = softmax_cross_entropy(logits.clone(), one_hot).array();
    let hard =
        softmax_cross_entropy_with_integer_labels(logits.clone(), dev.tensor([1usize, 3, 0]))
            .array();
    for b in 0..3 {
        assert!((soft[b] - hard[b]).abs() < 1e-12);
    }
    let probs = dev.tensor([[0.1, 0.2, 0.3, 0.4], [0.25; 4], [0.7, 0.1, 0.1, 0.1]]);
    check_grad("ce soft", &logits, |l| {
        softmax_cross_entropy(l, probs.clone()).mean()
    });
}

#[test]
fn sigmoid_bce_and_mse() {
    let dev: Cpu = Cpu::seed_from_u64(7);
    let logits: L = dev.sample_normal::<Rank2<3, 4>>() * 3.0;
    let labels: L = dev.sample_uniform();
    let got = sigmoid_binary_cross_entropy(logits.clone(), labels.clone()).as_vec();
    for ((x, y), g) in logits.as_vec().iter().zip(labels.as_vec()).zip(got) {
        let p = 1.0 / (1.0 + (-x).exp());
        let want = -(y * p.ln() + (1.0 - y) * (1.0 - p).ln());
        assert!((g - want).abs() < 1e-9, "bce {g} vs {want}");
    }
    check_grad("bce", &logits, |l| {
        sigmoid_binary_cross_entropy(l, labels.clone()).mean()
    });
    let target: L = dev.sample_normal();
    let m = mse(logits.clone(), target.clone()).array();
    let want = logits
        .as_vec()
        .iter()
        .zip(target.as_vec())
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        / 12.0;
    assert!((m - want).abs() < 1e-12);
    check_grad("mse", &logits, |l| mse(l, target.clone()));
}
