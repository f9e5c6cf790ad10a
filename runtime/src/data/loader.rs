//! The batching, shuffling, prefetching loader.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::dfdx::prelude::{Const, ConstShape, Device, Dtype, Shape, Tensor};
use crate::dfdx::tensor::AutoDevice;
use crate::state::{HostTensor, StateDict, StateError, StateMap};

use super::shape::PrependDim;
use super::{rng, DataError, Dataset};

/// The batch shape `(Const<B>, ..S)` for a per-example shape `S`.
pub type BatchOf<S, const B: usize> = <S as PrependDim<Const<B>>>::Out;
/// The stacked shape `(Const<K>, Const<B>, ..S)` of `K` batches.
pub type StackedOf<S, const B: usize, const K: usize> =
    <BatchOf<S, B> as PrependDim<Const<K>>>::Out;

/// How a [`Loader`] orders and batches examples.
///
/// ```
/// use flaxen_runtime::data::LoaderConfig;
///
/// let cfg = LoaderConfig::new(42).shuffle(false).drop_last(false).prefetch(2);
/// assert_eq!((cfg.seed, cfg.shuffle, cfg.drop_last, cfg.prefetch), (42, false, false, 2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoaderConfig {
    /// Seed of the per-epoch shuffles. Epoch `e` visits the examples in the
    /// order of a Fisher–Yates shuffle driven by SplitMix64 seeded from
    /// `(seed, e)`; the same seed gives the same batches on every machine.
    pub seed: u64,
    /// Whether to shuffle each epoch (otherwise examples come in index order).
    pub shuffle: bool,
    /// Whether to drop an epoch's last batch when it is short. With `false`
    /// the short batch is delivered by [`Loader::next_batch_dyn`].
    pub drop_last: bool,
    /// How many batches the worker thread prepares ahead (at least 1).
    pub prefetch: usize,
    /// This loader's part of each global batch, for data-parallel training
    /// (see [`LoaderConfig::shard`]); `Shard { index: 0, count: 1 }` alone.
    pub shard: Shard,
}

/// Which slice of every global batch a data-parallel rank takes.
///
/// ```
/// use flaxen_runtime::data::Shard;
/// assert_eq!(Shard::default(), Shard { index: 0, count: 1 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// This rank, `0..count`.
    pub index: usize,
    /// Number of ranks sharing each global batch.
    pub count: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Self { index: 0, count: 1 }
    }
}

impl LoaderConfig {
    /// Shuffled, `drop_last`, 4 batches prefetched.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            shuffle: true,
            drop_last: true,
            prefetch: 4,
            shard: Shard::default(),
        }
    }
    /// Sets [`LoaderConfig::shuffle`].
    pub fn shuffle(mut self, on: bool) -> Self {
        self.shuffle = on;
        self
    }
    /// Sets [`LoaderConfig::drop_last`].
    pub fn drop_last(mut self, on: bool) -> Self {
        self.drop_last = on;
        self
    }
    /// Sets [`LoaderConfig::prefetch`].
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches;
        self
    }
    /// Makes the loader rank `index` of `count` data-parallel ranks (Flax's
    /// per-device batch under `pmap`): with a batch size `B`, the stream is
    /// the one a single loader of batch `B * count` gives (same seed, same
    /// order, same epochs), and this rank receives examples
    /// `index * B .. (index + 1) * B` of every global batch. The state
    /// counts global examples, so it is equal on every rank and a
    /// checkpoint resumes on any number of ranks with the same global batch.
    /// Needs `drop_last` (a short global batch cannot be split evenly).
    ///
    /// ```
    /// use flaxen_runtime::data::{ArrayDataset, Loader, LoaderConfig};
    /// use flaxen_runtime::dfdx::prelude::*;
    ///
    /// let ds = || ArrayDataset::new(vec![1], (0..10).map(|v| v as f32).collect(), (0..10).collect()).unwrap();
    /// let cfg = LoaderConfig::new(3);
    /// let mut whole = Loader::<Rank1<1>, 4, f32, Cpu>::new(ds(), &Cpu::default(), cfg).unwrap();
    /// let mut rank1 = Loader::<Rank1<1>, 2, f32, Cpu>::new(ds(), &Cpu::default(), cfg.shard(1, 2)).unwrap();
    /// let (_, y) = whole.next_batch().unwrap();
    /// let (_, y1) = rank1.next_batch().unwrap();
    /// assert_eq!(y1.array(), [y.array()[2], y.array()[3]]);
    /// assert_eq!(rank1.state(), whole.state());
    /// ```
    pub fn shard(mut self, index: usize, count: usize) -> Self {
        self.shard = Shard { index, count };
        self
    }
}

/// Where a loader is in its stream of batches: enough to continue it bit
/// for bit. Counts only batches the caller has received, not prefetched ones.
///
/// ```
/// use flaxen_runtime::data::LoaderState;
/// let s = LoaderState { seed: 1, epoch: 0, position: 0 };
/// assert_eq!(s.epoch, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LoaderState {
    /// The shuffle seed.
    pub seed: u64,
    /// The epoch the next batch comes from.
    pub epoch: u64,
    /// How many examples of that epoch's order have been delivered.
    pub position: u64,
}

/// One batch assembled on the worker thread.
struct HostBatch<E> {
    x: Vec<E>,
    y: Vec<usize>,
    /// The loader state after this batch.
    after: LoaderState,
}

struct Worker<E> {
    rx: Option<Receiver<Result<HostBatch<E>, DataError>>>,
    handle: Option<JoinHandle<()>>,
}

impl<E> Drop for Worker<E> {
    fn drop(&mut self) {
        // Dropping the receiver wakes a worker blocked in `send`, which then
        // returns, so the join cannot hang.
        drop(self.rx.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Batches of a [`Dataset`] as device tensors, prepared by a background thread.
///
/// `S` is the per-example shape (e.g. `Rank3<1, 8, 8>`), `B` the batch size,
/// `E` the dtype and `D` the device. The loader is an endless stream over
/// epochs; [`Loader::state`] tells where it is, and it implements
/// [`StateDict<u64>`] (keys `seed`, `epoch`, `position`, plus `dataset_len`,
/// `batch_size`, `shuffle`, `drop_last` that a resume checks; `batch_size`
/// is the global batch, `B` times the number of shards) so a checkpoint
/// restores the exact data order, on any number of shards.
///
/// ```
/// use flaxen_runtime::data::{ArrayDataset, Loader, LoaderConfig};
/// use flaxen_runtime::dfdx::prelude::*;
///
/// let ds = ArrayDataset::new(vec![2], (0..20).map(|v| v as f32).collect(), (0..10).collect())
///     .unwrap();
/// let dev = Cpu::default();
/// let cfg = LoaderConfig::new(0).shuffle(false);
/// let mut loader = Loader::<Rank1<2>, 4, f32, Cpu>::new(ds, &dev, cfg).unwrap();
/// let (x, y) = loader.next_batch().unwrap();
/// assert_eq!(y.array(), [0, 1, 2, 3]);
/// assert_eq!(x.array()[1], [2.0, 3.0]);
/// assert_eq!(loader.batches_per_epoch(), 2); // 10 examples, the short batch dropped
/// ```
pub struct Loader<S, const B: usize, E = f32, D = AutoDevice> {
    dataset: Arc<dyn Dataset>,
    dev: D,
    config: LoaderConfig,
    state: LoaderState,
    pending: VecDeque<HostBatch<E>>,
    worker: Option<Worker<E>>,
    _shape: PhantomData<S>,
}

impl<S, const B: usize, E, D> std::fmt::Debug for Loader<S, B, E, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("len", &self.dataset.len())
            .field("batch", &B)
            .field("config", &self.config)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<S, const B: usize, E, D> Loader<S, B, E, D>
where
    S: ConstShape,
    E: Dtype,
    D: Device<E>,
{
    /// A loader over `dataset` that puts batches on `dev`.
    ///
    /// Fails if the dataset's example shape is not `S`, if it is empty, or
    /// if it holds fewer than `B` examples and `drop_last` is on (no batch
    /// could ever be made). Without `drop_last` a small dataset is one short
    /// batch per epoch, for [`Loader::next_batch_dyn`] (e.g. a small test set).
    pub fn new(
        dataset: impl Dataset + 'static,
        dev: &D,
        config: LoaderConfig,
    ) -> Result<Self, DataError> {
        let dataset: Arc<dyn Dataset> = Arc::new(dataset);
        let expected: Vec<usize> = S::default().concrete().into_iter().collect();
        if dataset.example_shape() != expected.as_slice() {
            return Err(DataError::Shape {
                expected,
                found: dataset.example_shape().to_vec(),
            });
        }
        if B == 0 {
            return Err(DataError::Invalid("the batch size is 0".into()));
        }
        let Shard { index, count } = config.shard;
        if count == 0 || index >= count {
            return Err(DataError::Invalid(format!(
                "shard {index} of {count}: the index must be below the number of shards"
            )));
        }
        if count > 1 && !config.drop_last {
            return Err(DataError::Invalid(
                "a sharded loader needs drop_last (a short global batch cannot be split evenly between the ranks)".into(),
            ));
        }
        let global = B * count;
        if dataset.is_empty() || (config.drop_last && dataset.len() < global) {
            return Err(DataError::TooSmall {
                len: dataset.len(),
                batch: global,
            });
        }
        Ok(Self {
            dataset,
            dev: dev.clone(),
            config,
            state: LoaderState {
                seed: config.seed,
                epoch: 0,
                position: 0,
            },
            pending: VecDeque::new(),
            worker: None,
            _shape: PhantomData,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// Examples in the dataset.
    pub fn dataset_len(&self) -> usize {
        self.dataset.len()
    }

    /// Batches per epoch: `len / B`, rounded up unless `drop_last` (with
    /// [`LoaderConfig::shard`], `len / (B * count)`: global batches).
    pub fn batches_per_epoch(&self) -> usize {
        let n = self.dataset.len();
        if self.config.drop_last {
            n / self.global_batch()
        } else {
            n.div_ceil(self.global_batch())
        }
    }

    /// Examples per global batch: `B` times the number of shards.
    fn global_batch(&self) -> usize {
        B * self.config.shard.count
    }

    /// Where the stream is, counting batches already returned to the caller.
    ///
    /// ```
    /// use flaxen_runtime::data::{digits, Loader, LoaderConfig, LoaderState};
    /// use flaxen_runtime::dfdx::prelude::*;
    ///
    /// let (train, _) = digits::load().unwrap();
    /// let mut l = Loader::<Rank3<1, 8, 8>, 500, f32, Cpu>::new(train, &Cpu::default(), LoaderConfig::new(9))
    ///     .unwrap();
    /// l.next_batch().unwrap();
    /// assert_eq!(l.state(), LoaderState { seed: 9, epoch: 0, position: 500 });
    /// l.next_stacked::<2>().unwrap(); // 1,500 examples: the epoch is over
    /// assert_eq!(l.state(), LoaderState { seed: 9, epoch: 1, position: 0 });
    /// ```
    pub fn state(&self) -> LoaderState {
        self.state
    }

    /// The epoch the next batch comes from.
    pub fn epoch(&self) -> u64 {
        self.state.epoch
    }

    /// Continues the stream from `state`, including its seed (drops
    /// prefetched batches).
    ///
    /// Fails if `state.position` is past the end of the dataset.
    pub fn set_state(&mut self, state: LoaderState) -> Result<(), DataError> {
        if state.position > self.dataset.len() as u64 {
            return Err(DataError::Invalid(format!(
                "position {} is past the end of a dataset of {}",
                state.position,
                self.dataset.len()
            )));
        }
        self.worker = None;
        self.pending.clear();
        // The shuffles follow the state's seed from now on.
        self.config.seed = state.seed;
        self.state = state;
        Ok(())
    }

    /// The next batch of `B` examples: `x` of shape `(Const<B>, ..S)` and
    /// integer labels `y` of shape `(Const<B>,)`.
    ///
    /// Fails with [`DataError::PartialBatch`] (consuming nothing) if the next
    /// batch is an epoch's short last batch; only possible without `drop_last`.
    #[allow(clippy::type_complexity)]
    pub fn next_batch(
        &mut self,
    ) -> Result<(Tensor<BatchOf<S, B>, E, D>, Tensor<(Const<B>,), usize, D>), DataError>
    where
        S: PrependDim<Const<B>>,
    {
        let batches = self.take_full(1)?;
        let shape = S::default().prepend(Const::<B>);
        self.upload(batches, shape, (Const::<B>,))
    }

    /// `K` consecutive batches stacked on a leading axis, with one
    /// host-to-device copy for `x` and one for `y`: `x` of shape
    /// `(Const<K>, Const<B>, ..S)`, `y` of shape `(Const<K>, Const<B>)`.
    ///
    /// The batches may span an epoch boundary. Fails with
    /// [`DataError::PartialBatch`] (consuming nothing) if one of them would be
    /// short.
    #[allow(clippy::type_complexity)]
    pub fn next_stacked<const K: usize>(
        &mut self,
    ) -> Result<
        (
            Tensor<StackedOf<S, B, K>, E, D>,
            Tensor<(Const<K>, Const<B>), usize, D>,
        ),
        DataError,
    >
    where
        S: PrependDim<Const<B>>,
        BatchOf<S, B>: PrependDim<Const<K>>,
    {
        let batches = self.take_full(K)?;
        let shape = S::default().prepend(Const::<B>).prepend(Const::<K>);
        self.upload(batches, shape, (Const::<K>, Const::<B>))
    }

    /// The next batch with a runtime batch axis: `B` examples, or fewer for
    /// an epoch's short last batch when `drop_last` is off. Use it for
    /// evaluation, where every example must be seen once.
    ///
    /// ```
    /// use flaxen_runtime::data::{digits, Loader, LoaderConfig};
    /// use flaxen_runtime::dfdx::prelude::*;
    ///
    /// let (_, test) = digits::load().unwrap();
    /// let cfg = LoaderConfig::new(0).shuffle(false).drop_last(false);
    /// let mut l = Loader::<Rank3<1, 8, 8>, 256, f32, Cpu>::new(test, &Cpu::default(), cfg).unwrap();
    /// let (x, _) = l.next_batch_dyn().unwrap();
    /// assert_eq!(x.shape().concrete(), [256, 1, 8, 8]);
    /// let (x, y) = l.next_batch_dyn().unwrap();
    /// assert_eq!((x.shape().0, y.shape().0), (41, 41)); // 297 = 256 + 41
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn next_batch_dyn(
        &mut self,
    ) -> Result<
        (
            Tensor<<S as PrependDim<usize>>::Out, E, D>,
            Tensor<(usize,), usize, D>,
        ),
        DataError,
    >
    where
        S: PrependDim<usize>,
    {
        let batch = self.next_host()?;
        let len = batch.y.len();
        self.upload(vec![batch], S::default().prepend(len), (len,))
    }

    /// Takes `k` full batches, or puts them all back and fails.
    fn take_full(&mut self, k: usize) -> Result<Vec<HostBatch<E>>, DataError> {
        let mut taken = Vec::with_capacity(k);
        for _ in 0..k {
            match self.next_host() {
                Ok(b) if b.y.len() == B => taken.push(b),
                Ok(b) => {
                    let len = b.y.len();
                    self.pending.push_front(b);
                    self.unread(taken);
                    return Err(DataError::PartialBatch { len, batch: B });
                }
                Err(e) => {
                    self.unread(taken);
                    return Err(e);
                }
            }
        }
        Ok(taken)
    }

    fn unread(&mut self, taken: Vec<HostBatch<E>>) {
        for b in taken.into_iter().rev() {
            self.pending.push_front(b);
        }
    }

    /// Copies host batches to the device as one `x` and one `y` tensor, and
    /// only then advances the state. On a device error nothing is consumed:
    /// the prefetched batches are dropped and regenerated (deterministically)
    /// from the unchanged state.
    #[allow(clippy::type_complexity)]
    fn upload<XS: Shape, YS: Shape>(
        &mut self,
        mut batches: Vec<HostBatch<E>>,
        x_shape: XS,
        y_shape: YS,
    ) -> Result<(Tensor<XS, E, D>, Tensor<YS, usize, D>), DataError> {
        let Some(after) = batches.last().map(|b| b.after) else {
            return Err(DataError::Invalid("no batch to upload".into()));
        };
        let (x, y) = if batches.len() == 1 {
            // Common case: hand the worker's buffers over, no host copy.
            let b = batches.pop().expect("one batch");
            (b.x, b.y)
        } else {
            let mut x = Vec::with_capacity(x_shape.num_elements());
            let mut y = Vec::with_capacity(y_shape.num_elements());
            for b in &batches {
                x.extend_from_slice(&b.x);
                y.extend_from_slice(&b.y);
            }
            (x, y)
        };
        let result = self
            .dev
            .try_tensor_from_vec(x, x_shape)
            .and_then(|x| Ok((x, self.dev.try_tensor_from_vec(y, y_shape)?)));
        match result {
            Ok(pair) => {
                self.state = after;
                Ok(pair)
            }
            Err(e) => {
                self.worker = None;
                self.pending.clear();
                Err(DataError::Device(format!("{e:?}")))
            }
        }
    }

    fn next_host(&mut self) -> Result<HostBatch<E>, DataError> {
        if let Some(b) = self.pending.pop_front() {
            return Ok(b);
        }
        if self.worker.is_none() {
            self.worker = Some(self.spawn());
        }
        let worker = self.worker.as_ref().expect("just spawned");
        let received = worker.rx.as_ref().expect("live worker").recv();
        match received {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(e)) => {
                // The worker stops after an error; a later call restarts it
                // from the consumed state.
                self.worker = None;
                Err(e)
            }
            Err(_) => {
                self.worker = None;
                Err(DataError::Worker("it exited without a batch".into()))
            }
        }
    }

    /// Starts a worker producing batches after the last pending batch, or
    /// after the consumed state when nothing is pending.
    fn spawn(&self) -> Worker<E> {
        let start = self.pending.back().map_or(self.state, |b| b.after);
        let (tx, rx) = sync_channel(self.config.prefetch.max(1));
        let dataset = Arc::clone(&self.dataset);
        let config = self.config;
        let handle = std::thread::Builder::new()
            .name("flaxen-loader".into())
            .spawn(move || produce::<E, B>(&*dataset, config, start, &tx));
        match handle {
            Ok(h) => Worker {
                rx: Some(rx),
                handle: Some(h),
            },
            Err(e) => {
                // No thread: report the error through the channel's place.
                let (tx, rx) = sync_channel(1);
                let _ = tx.send(Err(DataError::Worker(format!("could not start: {e}"))));
                Worker {
                    rx: Some(rx),
                    handle: None,
                }
            }
        }
    }
}

/// Moves `state` past an exhausted epoch (or past a short batch that
/// `drop_last` skips), so that every stored state is canonical.
fn normalize(mut state: LoaderState, n: u64, batch: u64, drop_last: bool) -> LoaderState {
    if state.position >= n || (drop_last && state.position + batch > n) {
        state.epoch += 1;
        state.position = 0;
    }
    state
}

/// The worker loop: assembles batches in order until the receiver hangs up.
fn produce<E: Dtype, const B: usize>(
    dataset: &dyn Dataset,
    config: LoaderConfig,
    start: LoaderState,
    tx: &SyncSender<Result<HostBatch<E>, DataError>>,
) {
    let n = dataset.len();
    let numel: usize = dataset.example_shape().iter().product();
    let order_of = |epoch: u64| -> Vec<usize> {
        if config.shuffle {
            rng::permutation(n, config.seed, epoch)
        } else {
            (0..n).collect()
        }
    };
    let Shard { index, count } = config.shard;
    let global = (B * count) as u64;
    let mut state = normalize(start, n as u64, global, config.drop_last);
    let mut order_epoch = state.epoch;
    let mut order = order_of(order_epoch);
    let mut scratch = vec![0f32; numel];
    loop {
        if order_epoch != state.epoch {
            order_epoch = state.epoch;
            order = order_of(order_epoch);
        }
        let global_begin = state.position as usize;
        let global_end = (global_begin + B * count).min(n);
        // This rank's slice of the global batch (all of it unsharded).
        let begin = (global_begin + index * B).min(global_end);
        let end = (begin + B).min(global_end);
        let mut x = Vec::with_capacity((end - begin) * numel);
        let mut y = Vec::with_capacity(end - begin);
        for &i in &order[begin..end] {
            let label = match dataset.get(i, &mut scratch) {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            for &v in &scratch {
                match E::from_f32(v) {
                    Some(v) => x.push(v),
                    None => {
                        let _ = tx.send(Err(DataError::Invalid(format!(
                            "example {i}: value {v} does not fit the dtype"
                        ))));
                        return;
                    }
                }
            }
            y.push(label);
        }
        state.position = global_end as u64;
        state = normalize(state, n as u64, global, config.drop_last);
        if tx.send(Ok(HostBatch { x, y, after: state })).is_err() {
            return;
        }
    }
}

const STATE_KEYS: [&str; 7] = [
    "seed",
    "epoch",
    "position",
    "dataset_len",
    "batch_size",
    "shuffle",
    "drop_last",
];

impl<S, const B: usize, E, D> StateDict<u64> for Loader<S, B, E, D>
where
    S: ConstShape,
    E: Dtype,
    D: Device<E>,
{
    fn save_state(&self, prefix: &str, out: &mut StateMap<u64>) {
        let values = [
            self.state.seed,
            self.state.epoch,
            self.state.position,
            self.dataset.len() as u64,
            self.global_batch() as u64,
            self.config.shuffle as u64,
            self.config.drop_last as u64,
        ];
        for (k, v) in STATE_KEYS.iter().zip(values) {
            out.insert(
                format!("{prefix}{k}"),
                HostTensor {
                    shape: vec![],
                    data: vec![v],
                },
            );
        }
    }

    fn load_state(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
        let mut v = [0u64; 7];
        for (slot, k) in v.iter_mut().zip(STATE_KEYS) {
            let key = format!("{prefix}{k}");
            let t = src
                .get(&key)
                .ok_or_else(|| StateError::Missing { key: key.clone() })?;
            if !t.shape.is_empty() || t.data.len() != 1 {
                return Err(StateError::Shape {
                    key,
                    expected: vec![],
                    found: t.shape.clone(),
                });
            }
            *slot = t.data[0];
        }
        let [seed, epoch, position, len, batch, shuffle, drop_last] = v;
        let live = [
            ("dataset_len", len, self.dataset.len() as u64),
            ("batch_size", batch, self.global_batch() as u64),
            ("shuffle", shuffle, self.config.shuffle as u64),
            ("drop_last", drop_last, self.config.drop_last as u64),
        ];
        for (k, stored, now) in live {
            if stored != now {
                return Err(StateError::Invalid {
                    key: format!("{prefix}{k}"),
                    reason: format!(
                        "the checkpoint's data order was made with {k} = {stored}, this loader has {now}"
                    ),
                });
            }
        }
        if position > len {
            return Err(StateError::Invalid {
                key: format!("{prefix}position"),
                reason: format!("position {position} is past the end of {len} examples"),
            });
        }
        self.set_state(LoaderState {
            seed,
            epoch,
            position,
        })
        .map_err(|e| StateError::Invalid {
            key: format!("{prefix}position"),
            reason: e.to_string(),
        })
    }
}
