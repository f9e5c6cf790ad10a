//! `flaxen::dist` without an MPI runtime: a stand-in two-rank group whose
//! peer is simulated in process, so the default test run checks the
//! gradient flattening, the mean and the agreement check (the real 2-rank
//! runs are `tests/dist_mpi.rs`, with `--features mpi`).

use std::cell::RefCell;

use flaxen::dist::{Communicator, DataParallel, DistError};
use flaxen::prelude::*;
use flaxen::runtime::optim::Params;

pub struct Net;

#[compact]
impl Net {
    fn forward(x: Input<1, 6, 6>) {
        let x = relu(Conv(3, (3, 3))(x));
        Dense(4)(flatten(x))
    }
}

type Built = <Net as BuildOnDevice<Cpu, f64>>::Built;

/// Rank 0 of two; the other rank's contributions are given up front.
struct Pair {
    peer_sum: Vec<f64>,
    peer_gather: Vec<u64>,
    gathered: RefCell<usize>,
}

impl Communicator for Pair {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        2
    }
    fn all_reduce_sum_f32(&self, _: &[f32], _: &mut [f32]) {
        unreachable!("the test trains in f64")
    }
    fn all_reduce_sum_f64(&self, send: &[f64], recv: &mut [f64]) {
        assert_eq!(send.len(), self.peer_sum.len(), "one flat buffer");
        for ((r, s), p) in recv.iter_mut().zip(send).zip(&self.peer_sum) {
            *r = s + p;
        }
    }
    fn all_gather_u64(&self, value: u64) -> Vec<u64> {
        let mut n = self.gathered.borrow_mut();
        let peer = self.peer_gather.get(*n).copied().unwrap_or(value);
        *n += 1;
        vec![value, peer]
    }
    fn barrier(&self) {}
    fn abort(&self, code: i32) -> ! {
        panic!("abort({code})")
    }
}

fn grads_on(model: &Built, dev: &Cpu, seed: u64) -> Gradients<f64, Cpu> {
    let x: Tensor<Rank4<3, 1, 6, 6>, f64, _> = Cpu::seed_from_u64(seed).sample_normal();
    let x = dev.tensor_from_vec(x.as_vec(), x.shape().to_owned());
    model
        .forward(x.traced(model.alloc_grads()))
        .square()
        .sum()
        .backward()
}

/// Every gradient, in the visiting order of the parameters.
fn flat(model: &Built, grads: &Gradients<f64, Cpu>) -> Vec<f64> {
    let params = Params::of(model).unwrap();
    params
        .leaves()
        .iter()
        .flat_map(|l| grads.get(l).as_vec())
        .collect()
}

#[test]
fn two_ranks_average_every_gradient() {
    let dev = Cpu::seed_from_u64(1);
    let model = dev.build_module::<Net, f64>();
    let mine = grads_on(&model, &dev, 10);
    let theirs = grads_on(&model, &dev, 11);
    let (a, b) = (flat(&model, &mine), flat(&model, &theirs));
    assert_ne!(a, b);
    let mut dp = DataParallel::new(Pair {
        peer_sum: b.clone(),
        peer_gather: vec![],
        gathered: RefCell::new(0),
    });
    let mut grads = mine;
    dp.all_reduce_mean(&model, &mut grads).unwrap();
    let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| (x + y) / 2.0).collect();
    assert_eq!(flat(&model, &grads), want);
    // The buffers are kept: a second step gives the same.
    let mut again = grads_on(&model, &dev, 10);
    dp.all_reduce_mean(&model, &mut again).unwrap();
    assert_eq!(flat(&model, &again), want);
}

#[test]
fn metrics_are_averaged_over_the_ranks() {
    let dp = DataParallel::new(Pair {
        peer_sum: vec![5.0],
        peer_gather: vec![],
        gathered: RefCell::new(0),
    });
    assert_eq!((dp.mean(3.0), dp.sum(3.0)), (4.0, 8.0));
    assert_eq!((dp.rank(), dp.size(), dp.is_root()), (0, 2, true));
}

#[test]
fn a_rank_that_disagrees_is_named() {
    let dev = Cpu::seed_from_u64(1);
    let model = dev.build_module::<Net, f64>();
    // The peer agrees on the structure and the values, not on the batch.
    let structure = flaxen::dist::model_fingerprint(&model).unwrap();
    let values = flaxen::dist::params_fingerprint(&model).unwrap();
    let dp = DataParallel::new(Pair {
        peer_sum: vec![],
        peer_gather: vec![structure, values, 64],
        gathered: RefCell::new(0),
    });
    let err = dp
        .check_agree(&model, &[("the global batch", 32)])
        .unwrap_err();
    match &err {
        DistError::Mismatch {
            what,
            rank,
            expected,
            found,
        } => assert_eq!(
            (what.as_str(), *rank, *expected, *found),
            ("the global batch", 1, 32, 64)
        ),
        other => panic!("{other}"),
    }
    assert!(
        err.to_string()
            .starts_with("rank 1 disagrees with rank 0 on the global batch"),
        "{err}"
    );
    // Another seed is caught by the values' fingerprint.
    let other = Cpu::seed_from_u64(2).build_module::<Net, f64>();
    let dp = DataParallel::new(Pair {
        peer_sum: vec![],
        peer_gather: vec![structure, flaxen::dist::params_fingerprint(&other).unwrap()],
        gathered: RefCell::new(0),
    });
    let err = dp.check_agree(&model, &[]).unwrap_err().to_string();
    assert!(err.contains("the initial parameter values"), "{err}");
}
