//! The loader: seeded order, batching, stacking, errors and resumable state.

use flaxen::dfdx::shapes::Rank5;
use flaxen::prelude::*;
use flaxen::runtime::data::{ArrayDataset, DataError, Dataset, Loader, LoaderConfig};
use flaxen::runtime::state::{StateDict, StateError, StateMap};

/// `n` examples of shape [2]; example `i` is `[i, -i]` with label `i`.
fn ramp(n: usize) -> ArrayDataset {
    let x = (0..n).flat_map(|i| [i as f32, -(i as f32)]).collect();
    ArrayDataset::new(vec![2], x, (0..n).collect()).unwrap()
}

type L<const B: usize> = Loader<Rank1<2>, B, f32, Cpu>;

fn labels<const B: usize>(l: &mut L<B>) -> Vec<usize> {
    let (x, y) = l.next_batch().unwrap();
    let y = y.as_vec();
    // Features follow the labels they belong to.
    let x = x.as_vec();
    for (k, &label) in y.iter().enumerate() {
        assert_eq!(x[2 * k], label as f32);
        assert_eq!(x[2 * k + 1], -(label as f32));
    }
    y
}

#[test]
fn order_is_a_seeded_permutation_per_epoch() {
    let dev = Cpu::default();
    let cfg = LoaderConfig::new(7).drop_last(false);
    let mut a = L::<5>::new(ramp(20), &dev, cfg).unwrap();
    let mut b = L::<5>::new(ramp(20), &dev, cfg).unwrap();
    let mut c = L::<5>::new(ramp(20), &dev, LoaderConfig::new(8)).unwrap();
    let mut epochs = vec![];
    for _ in 0..3 {
        let mut epoch = vec![];
        for _ in 0..4 {
            let (la, lb) = (labels(&mut a), labels(&mut b));
            assert_eq!(la, lb, "same seed, same batches");
            epoch.extend(la);
        }
        let mut sorted = epoch.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..20).collect::<Vec<_>>(),
            "each epoch visits every example once"
        );
        epochs.push(epoch);
    }
    assert_ne!(epochs[0], epochs[1], "epochs are shuffled differently");
    assert_ne!(epochs[0], (0..20).collect::<Vec<_>>());
    let other: Vec<usize> = (0..4).flat_map(|_| labels(&mut c)).collect();
    assert_ne!(other, epochs[0], "another seed, another order");
    assert_eq!(a.epoch(), 3);
}

#[test]
fn unshuffled_order_and_drop_last() {
    let dev = Cpu::default();
    let cfg = LoaderConfig::new(0).shuffle(false);
    let mut l = L::<4>::new(ramp(10), &dev, cfg).unwrap();
    assert_eq!(l.batches_per_epoch(), 2);
    assert_eq!(labels(&mut l), vec![0, 1, 2, 3]);
    assert_eq!(labels(&mut l), vec![4, 5, 6, 7]);
    // 8 and 9 are dropped; the next epoch starts.
    assert_eq!(l.epoch(), 1);
    assert_eq!(labels(&mut l), vec![0, 1, 2, 3]);
}

#[test]
fn short_last_batch_without_drop_last() {
    let dev = Cpu::default();
    let cfg = LoaderConfig::new(0).shuffle(false).drop_last(false);
    let mut l = L::<4>::new(ramp(10), &dev, cfg).unwrap();
    assert_eq!(l.batches_per_epoch(), 3);
    labels(&mut l);
    labels(&mut l);
    // A fixed-size batch cannot hold the last two examples...
    match l.next_batch() {
        Err(DataError::PartialBatch { len: 2, batch: 4 }) => {}
        other => panic!("expected PartialBatch, got {:?}", other.map(|_| ())),
    }
    assert!(matches!(
        l.next_stacked::<2>(),
        Err(DataError::PartialBatch { len: 2, batch: 4 })
    ));
    // ...and nothing was consumed: the dynamic batch delivers them.
    let (x, y) = l.next_batch_dyn().unwrap();
    assert_eq!(y.as_vec(), vec![8, 9]);
    assert_eq!(x.shape().concrete(), [2, 2]);
    assert_eq!(l.epoch(), 1);
    assert_eq!(labels(&mut l), vec![0, 1, 2, 3]);
}

#[test]
fn stacked_equals_consecutive_batches_across_epochs() {
    let dev = Cpu::default();
    let cfg = LoaderConfig::new(3);
    let mut one = L::<3>::new(ramp(10), &dev, cfg).unwrap();
    let mut many = L::<3>::new(ramp(10), &dev, cfg.prefetch(1)).unwrap();
    for _ in 0..3 {
        // 3 batches per epoch, 5 per call: calls straddle epoch boundaries.
        let (x, y) = many.next_stacked::<5>().unwrap();
        let _: &Tensor<Rank3<5, 3, 2>, f32, Cpu> = &x;
        let _: &Tensor<Rank2<5, 3>, usize, Cpu> = &y;
        let (xa, ya) = (x.array(), y.array());
        for k in 0..5 {
            let (xb, yb) = one.next_batch().unwrap();
            assert_eq!(xa[k], xb.array());
            assert_eq!(ya[k], yb.array());
        }
        assert_eq!(one.state(), many.state());
    }
    assert_eq!(many.epoch(), 5);
}

#[test]
fn small_dataset_and_wrong_shape_are_errors() {
    let dev = Cpu::default();
    let err = L::<16>::new(ramp(10), &dev, LoaderConfig::new(0)).unwrap_err();
    assert!(
        matches!(err, DataError::TooSmall { len: 10, batch: 16 }),
        "{err:?}"
    );
    assert!(err
        .to_string()
        .contains("10 examples, fewer than one batch of 16"));
    // Without drop_last, a small set is one short batch per epoch.
    let mut small = L::<16>::new(ramp(10), &dev, LoaderConfig::new(0).drop_last(false)).unwrap();
    assert_eq!(small.batches_per_epoch(), 1);
    assert!(matches!(
        small.next_batch(),
        Err(DataError::PartialBatch { .. })
    ));
    let (x, y) = small.next_batch_dyn().unwrap();
    assert_eq!((x.shape().0, y.shape().0), (10, 10));
    let err =
        Loader::<Rank1<3>, 2, f32, Cpu>::new(ramp(10), &dev, LoaderConfig::new(0)).unwrap_err();
    assert!(
        err.to_string().contains("[2]") && err.to_string().contains("[3]"),
        "{err}"
    );
}

#[test]
fn resume_from_state_is_exact() {
    let dev = Cpu::default();
    let cfg = LoaderConfig::new(11).prefetch(3);
    let mut a = L::<4>::new(ramp(18), &dev, cfg).unwrap();
    for _ in 0..6 {
        labels(&mut a);
    }
    // The worker has run ahead; the saved state counts only consumed batches.
    let mut saved = StateMap::new();
    a.save_state("data.", &mut saved);
    assert_eq!(saved["data.epoch"].data, vec![1]);
    assert_eq!(saved["data.position"].data, vec![8]);
    // A fresh loader with another seed takes the checkpoint's seed and order.
    let mut b = L::<4>::new(ramp(18), &dev, LoaderConfig::new(999).prefetch(3)).unwrap();
    labels(&mut b);
    b.load_state("data.", &saved).unwrap();
    for _ in 0..10 {
        assert_eq!(labels(&mut a), labels(&mut b));
    }
    // `set_state` alone does the same, seed included.
    let mut c = L::<4>::new(ramp(18), &dev, LoaderConfig::new(5)).unwrap();
    c.set_state(a.state()).unwrap();
    assert_eq!(c.config().seed, 11);
    for _ in 0..10 {
        assert_eq!(labels(&mut a), labels(&mut c));
    }
}

#[test]
fn incompatible_state_is_refused_and_changes_nothing() {
    let dev = Cpu::default();
    let mut a = L::<4>::new(ramp(18), &dev, LoaderConfig::new(1)).unwrap();
    let mut saved = StateMap::new();
    a.save_state("", &mut saved);
    let mut b = L::<4>::new(ramp(20), &dev, LoaderConfig::new(2)).unwrap();
    labels(&mut b);
    let before = b.state();
    match b.load_state("", &saved) {
        Err(StateError::Invalid { key, reason }) => {
            assert_eq!(key, "dataset_len");
            assert!(reason.contains("18") && reason.contains("20"), "{reason}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert_eq!(b.state(), before);
    saved.remove("position");
    assert!(matches!(
        a.load_state("", &saved),
        Err(StateError::Missing { .. })
    ));
}

/// A dataset whose example 5 cannot be read.
struct Flaky;
impl Dataset for Flaky {
    fn len(&self) -> usize {
        8
    }
    fn example_shape(&self) -> &[usize] {
        &[2]
    }
    fn get(&self, i: usize, x: &mut [f32]) -> Result<usize, DataError> {
        if i == 5 {
            return Err(DataError::Invalid("example 5 is unreadable".into()));
        }
        x.fill(i as f32);
        Ok(i)
    }
}

#[test]
fn dataset_errors_surface_as_values() {
    let dev = Cpu::default();
    let cfg = LoaderConfig::new(0).shuffle(false);
    let mut l = Loader::<Rank1<2>, 4, f32, Cpu>::new(Flaky, &dev, cfg).unwrap();
    assert_eq!(l.next_batch().unwrap().1.array(), [0, 1, 2, 3]);
    let err = l.next_batch().map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("example 5 is unreadable"), "{err}");
    // The stream did not move past the failure.
    assert_eq!(l.state().position, 4);
}

#[test]
fn digits_load_into_a_loader() {
    let dev = Cpu::default();
    let (train, test) = flaxen::runtime::data::digits::load().unwrap();
    let mut l =
        Loader::<Rank3<1, 8, 8>, 32, f32, Cpu>::new(train, &dev, LoaderConfig::new(0)).unwrap();
    assert_eq!(l.batches_per_epoch(), 46);
    let (x, y) = l.next_stacked::<5>().unwrap();
    let _: &Tensor<Rank5<5, 32, 1, 8, 8>, f32, Cpu> = &x;
    assert!(y.as_vec().iter().all(|&c| c < 10));
    let mut eval = Loader::<Rank3<1, 8, 8>, 100, f32, Cpu>::new(
        test,
        &dev,
        LoaderConfig::new(0).shuffle(false).drop_last(false),
    )
    .unwrap();
    let sizes: Vec<usize> = (0..eval.batches_per_epoch())
        .map(|_| eval.next_batch_dyn().unwrap().1.shape().0)
        .collect();
    assert_eq!(sizes, vec![100, 100, 97]);
}

/// Counts reads and remembers which thread made them.
struct Watched {
    reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    threads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}
impl Dataset for Watched {
    fn len(&self) -> usize {
        1000
    }
    fn example_shape(&self) -> &[usize] {
        &[2]
    }
    fn get(&self, i: usize, x: &mut [f32]) -> Result<usize, DataError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = std::thread::current().name().unwrap_or("?").to_string();
        let mut threads = self.threads.lock().unwrap();
        if !threads.contains(&name) {
            threads.push(name);
        }
        x.fill(i as f32);
        Ok(i % 10)
    }
}

#[test]
fn batches_are_assembled_ahead_on_a_bounded_worker_thread() {
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let threads = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let ds = Watched {
        reads: reads.clone(),
        threads: threads.clone(),
    };
    let dev = Cpu::default();
    let mut l =
        Loader::<Rank1<2>, 10, f32, Cpu>::new(ds, &dev, LoaderConfig::new(0).prefetch(2)).unwrap();
    assert_eq!(
        reads.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "lazy start"
    );
    l.next_batch().unwrap();
    // Wait (on a busy machine, up to 10 s) for the worker to fill the queue,
    // then give it time to overrun it if it could.
    let start = std::time::Instant::now();
    while reads.load(std::sync::atomic::Ordering::SeqCst) < 30 && start.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    let n = reads.load(std::sync::atomic::Ordering::SeqCst);
    // The batch taken, 2 queued and at most one waiting to be queued.
    assert!((30..=40).contains(&n), "{n} reads");
    assert_eq!(*threads.lock().unwrap(), vec!["flaxen-loader".to_string()]);
    drop(l); // joins the worker without hanging
}

#[test]
fn shards_split_every_global_batch_of_one_loader() {
    let dev = Cpu::default();
    let cfg = LoaderConfig::new(11);
    // 3 ranks with batch 4 = one loader with batch 12, over epochs.
    let mut whole: L<12> = Loader::new(ramp(50), &dev, cfg).unwrap();
    let mut ranks: Vec<L<4>> = (0..3)
        .map(|r| Loader::new(ramp(50), &dev, cfg.shard(r, 3)).unwrap())
        .collect();
    assert_eq!(ranks[0].batches_per_epoch(), whole.batches_per_epoch());
    for _ in 0..10 {
        let global = labels(&mut whole);
        let parts: Vec<usize> = ranks.iter_mut().flat_map(labels).collect();
        assert_eq!(parts, global);
        for l in &ranks {
            assert_eq!(l.state(), whole.state());
        }
    }
    // The saved state names the global batch, so a 1-rank loader of the
    // global batch resumes it.
    let mut saved = StateMap::new();
    ranks[1].save_state("", &mut saved);
    assert_eq!(saved["batch_size"].data, [12]);
    let mut resumed: L<12> = Loader::new(ramp(50), &dev, cfg).unwrap();
    resumed.load_state("", &saved).unwrap();
    assert_eq!(labels(&mut resumed), labels(&mut whole));
}

#[test]
fn bad_shards_are_errors() {
    let dev = Cpu::default();
    let cfg = LoaderConfig::new(0);
    let err = |r| L::<4>::new(ramp(50), &dev, r).unwrap_err().to_string();
    assert!(
        err(cfg.shard(2, 2)).contains("shard 2 of 2"),
        "{}",
        err(cfg.shard(2, 2))
    );
    assert!(err(cfg.shard(0, 0)).contains("shard 0 of 0"));
    assert!(err(cfg.shard(0, 2).drop_last(false)).contains("needs drop_last"));
    // 50 examples cannot make one global batch of 4 x 13.
    assert!(matches!(
        L::<4>::new(ramp(50), &dev, cfg.shard(0, 13)),
        Err(DataError::TooSmall { len: 50, batch: 52 })
    ));
}
