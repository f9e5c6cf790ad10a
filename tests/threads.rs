//! `threads::use_this_thread` (its own test binary: it builds the process's
//! rayon pool, which other tests would have built first).

use flaxen::prelude::*;

#[path = "common/small_cnn.rs"]
mod small_cnn;
use small_cnn::{init, step, values, Dev};

/// Three Adam steps of a small CNN on a fixed batch: the parameters after.
fn train() -> Vec<f32> {
    let dev = Dev::seed_from_u64(3);
    let mut s = init();
    let x: Tensor<Rank4<64, 1, 12, 12>, f32, Dev> = dev.sample_normal();
    let y: Tensor<Rank1<64>, usize, Dev> = dev.tensor([3; 64]);
    for _ in 0..3 {
        s = step(s, (x.clone(), y.clone())).0;
    }
    values(&s)
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
