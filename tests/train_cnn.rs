//! The seed CNN, written with `#[compact]`, learns a synthetic task with
//! flaxen's `TrainState`, `adam` and `scan!`: which quadrant of a noisy 8×8
//! image holds a bright 3×3 blob. Chance is log(4) ≈ 1.386; the mean loss of
//! the last 5 steps must be at least 5× below that of the first 5.

use flaxen::dfdx::shapes::Rank5;
use flaxen::prelude::*;

#[path = "common/flax_cnn.rs"]
mod flax_cnn;

flax_cnn::seed_cnn!(
    /// The seed CNN with a 4-way head, one class a quadrant.
    SeedCnn: 8, conv(32, 64), dense(256), out(4)
);

const B: usize = 32;
const K: usize = 5;
type Net = <SeedCnn as BuildOnDevice<Cpu, f32>>::Built;
type State = TrainState<Net, flaxen::runtime::optim::Adam<f64>, f32, Cpu>;
type Batch = (
    Tensor<Rank4<B, 1, 8, 8>, f32, Cpu>,
    Tensor<Rank1<B>, usize, Cpu>,
);

flax_cnn::cross_entropy_step!(train_step(State, Batch) on Cpu);

/// K batches of the quadrant task, as stacked host data.
fn task(seed: u64) -> (Vec<f32>, Vec<usize>) {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut rand = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f32 / (1u64 << 53) as f32
    };
    let mut x = Vec::with_capacity(K * B * 64);
    let mut y = Vec::with_capacity(K * B);
    for _ in 0..K * B {
        let q = (rand() * 4.0) as usize % 4;
        let (r0, c0) = ((q / 2) * 4, (q % 2) * 4);
        let (dr, dc) = ((rand() * 2.0) as usize, (rand() * 2.0) as usize);
        for r in 0..8 {
            for c in 0..8 {
                let blob =
                    (r0 + dr..r0 + dr + 3).contains(&r) && (c0 + dc..c0 + dc + 3).contains(&c);
                x.push(0.3 * rand() + if blob { 1.0 } else { 0.0 });
            }
        }
        y.push(q);
    }
    (x, y)
}

#[test]
fn seed_cnn_learns_the_quadrant_task() {
    let dev = Cpu::seed_from_u64(0);
    let mut state = TrainState::create(dev.build_module::<SeedCnn, f32>(), adam(1e-3)).unwrap();
    let mut losses = Vec::new();
    for i in 0..8 {
        let (x, y) = task(i);
        let xs: Tensor<Rank5<K, B, 1, 8, 8>, f32, _> = dev.tensor(x);
        let ys: Tensor<Rank2<K, B>, usize, _> = dev.tensor(y);
        let (next, l) = scan!(K, train_step, state, (xs, ys));
        state = next;
        losses.extend(l.array());
    }
    let first: f32 = losses[..5].iter().sum::<f32>() / 5.0;
    let last: f32 = losses[losses.len() - 5..].iter().sum::<f32>() / 5.0;
    eprintln!("mean loss of the first 5 steps {first}, of the last 5 {last}");
    assert!((first - 4f32.ln()).abs() < 0.3, "first losses {first}");
    assert!(
        last * 5.0 < first,
        "loss fell from {first} to only {last}: {losses:?}"
    );
    assert_eq!(state.step(), 40);
}
