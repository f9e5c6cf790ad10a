//! `threads::use_this_thread` (its own test binary: it builds the process's
//! rayon pool, which other tests would have built first).

use flaxen::prelude::*;
use flaxen::runtime::optim::Adam;

pub struct Cnn;

#[compact]
impl Cnn {
    fn forward(x: Input<1, 12, 12>) {
        let x = relu(Conv(8, (3, 3))(x));
        let x = avg_pool(x, (2, 2), strides = (2, 2));
        Dense(10)(flatten(x))
    }
}

type Dev = Cpu;
type State = TrainState<<Cnn as BuildOnDevice<Dev, f32>>::Built, Adam<f64>, f32, Dev>;

/// Three Adam steps of a small CNN on a fixed batch: the parameters after.
fn train() -> Vec<f32> {
    let dev = Dev::seed_from_u64(3);
    let mut s: State = TrainState::create(dev.build_module::<Cnn, f32>(), adam(0.05)).unwrap();
    let x: Tensor<Rank4<64, 1, 12, 12>, f32, Dev> = dev.sample_normal();
    let y: Tensor<Rank1<64>, usize, Dev> = dev.tensor([3; 64]);
    for _ in 0..3 {
        let (_, grads) = s
            .value_and_grad(|m, tape| {
                softmax_cross_entropy_with_integer_labels(
                    m.forward(x.clone().put_tape(tape)),
                    y.clone(),
                )
                .mean()
            })
            .unwrap();
        s.apply_gradients(grads).unwrap();
    }
    let mut out = StateMap::new();
    s.save_state("", &mut out);
    let mut keys: Vec<_> = out.keys().cloned().collect();
    keys.sort();
    keys.iter().flat_map(|k| out[k].data.clone()).collect()
}

/// The test's thread joins the pool (before any kernel built it), trains,
/// and a thread outside the pool trains the same: the same parameters, bit
/// for bit. A second call finds the pool built and changes nothing.
#[test]
fn training_from_a_pool_thread_gives_the_same_bits() {
    assert!(flaxen::runtime::threads::use_this_thread());
    assert!(!flaxen::runtime::threads::use_this_thread());
    let inside = train();
    let outside = std::thread::spawn(train).join().unwrap();
    assert!(!inside.is_empty());
    assert_eq!(inside, outside);
}
