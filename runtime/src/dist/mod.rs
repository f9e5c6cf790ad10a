//! Data-parallel training across processes: Flax's `pmap` with
//! `lax.pmean` of the gradients, on an existing distributed engine (MPI on
//! CPUs with the `mpi` feature, NCCL on GPUs with the `nccl` feature).
//!
//! The contract, the same on every engine:
//!
//! - Every rank builds the same model from the same seed, so the replicas
//!   start equal; [`DataParallel::check_agree`] compares a fingerprint of
//!   the model's parameter names, shapes and values (and of whatever
//!   options the program passes) across ranks at start, and every rank
//!   gets the same error when one differs.
//! - The loader shards each global batch by rank
//!   ([`LoaderConfig::shard`](crate::data::LoaderConfig::shard)): the global
//!   order of examples is the one a single process with the global batch
//!   size sees, rank `r` taking the `r`-th slice of every global batch.
//! - Between the backward pass and the optimizer,
//!   [`DataParallel::all_reduce_mean`] replaces every rank's gradients by
//!   their mean over the ranks: one all-reduce per step over one flat
//!   buffer holding every gradient, not one per tensor. Every rank then
//!   applies the same update to the same parameters, so the replicas stay
//!   equal bit for bit.
//! - Metrics are reduced with [`DataParallel::mean`]; rank 0
//!   ([`DataParallel::is_root`]) writes checkpoints and logs. Every rank
//!   holds the whole state, and the loader's state counts global examples,
//!   so a checkpoint resumes on any number of ranks that divides the
//!   global batch.
//!
//! A single process is the group of one, [`Local`]: the same program runs
//! with and without `mpirun`.
//!
//! ```
//! use flaxen_runtime::dfdx::prelude::*;
//! use flaxen_runtime::dist::{DataParallel, Local};
//!
//! let dev: Cpu = Default::default();
//! let model = dev.build_module::<Linear<3, 2>, f32>();
//! let mut dp = DataParallel::new(Local);
//! dp.check_agree(&model, &[("batch", 32)]).unwrap();
//! let x: Tensor<Rank2<4, 3>, f32, _> = dev.sample_normal();
//! let mut grads = model.forward(x.traced(model.alloc_grads())).sum().backward();
//! let before = grads.get(&model.weight).as_vec();
//! dp.all_reduce_mean(&model, &mut grads).unwrap();
//! assert_eq!(grads.get(&model.weight).as_vec(), before); // a group of one
//! assert_eq!(dp.mean(0.25), 0.25);
//! ```

use dfdx::nn::tensor_collection::TensorCollection;
use dfdx::prelude::{Cpu, Dtype, Gradients, HasShape};
use dfdx::tensor_ops::Device;

use crate::optim::{Leaf, Params};

mod fingerprint;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "nccl")]
pub mod nccl;

pub use fingerprint::{model_fingerprint, params_fingerprint, Fnv64};
#[cfg(feature = "mpi")]
pub use mpi::Mpi;

/// What can go wrong in data-parallel training.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// The engine could not start (MPI initialized twice, no MPI runtime).
    #[error("could not start the process group: {0}")]
    Init(String),
    /// The ranks disagree on something that must be equal on all of them.
    #[error(
        "rank {rank} disagrees with rank 0 on {what} (fingerprint {found:#018x} vs {expected:#018x}): \
         every rank must run the same program with the same model, seed and options"
    )]
    Mismatch {
        /// What was compared (e.g. `"model structure"`).
        what: String,
        /// The first rank that differs from rank 0.
        rank: usize,
        /// Rank 0's value.
        expected: u64,
        /// That rank's value.
        found: u64,
    },
    /// A device error while reading or writing gradients.
    #[error("device error: {0}")]
    Device(String),
    /// A size the collective cannot carry.
    #[error("{0}")]
    Invalid(String),
}

/// A process group that sums buffers across its members: the engine under
/// [`DataParallel`] ([`Local`], `Mpi` with the `mpi` feature).
///
/// Every member must make the same calls in the same order (collectives
/// are matched by order, as in MPI).
///
/// ```
/// use flaxen_runtime::dist::{Communicator, Local};
/// let mut out = [0.0f32; 2];
/// Local.all_reduce_sum_f32(&[1.0, 2.0], &mut out);
/// assert_eq!((Local.rank(), Local.size(), out), (0, 1, [1.0, 2.0]));
/// ```
pub trait Communicator {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> usize;
    /// Number of processes in the group.
    fn size(&self) -> usize;
    /// `recv[i] = sum over ranks of send[i]`, the same on every rank.
    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32]);
    /// As [`Communicator::all_reduce_sum_f32`], in f64.
    fn all_reduce_sum_f64(&self, send: &[f64], recv: &mut [f64]);
    /// Every rank's `value`, in rank order.
    fn all_gather_u64(&self, value: u64) -> Vec<u64>;
    /// Waits until every rank has called it.
    fn barrier(&self);
    /// Ends every process of the group with `code` (a rank that cannot go
    /// on must not leave the others waiting in a collective).
    fn abort(&self, code: i32) -> !;
}

impl<C: Communicator + ?Sized> Communicator for &C {
    fn rank(&self) -> usize {
        (**self).rank()
    }
    fn size(&self) -> usize {
        (**self).size()
    }
    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32]) {
        (**self).all_reduce_sum_f32(send, recv)
    }
    fn all_reduce_sum_f64(&self, send: &[f64], recv: &mut [f64]) {
        (**self).all_reduce_sum_f64(send, recv)
    }
    fn all_gather_u64(&self, value: u64) -> Vec<u64> {
        (**self).all_gather_u64(value)
    }
    fn barrier(&self) {
        (**self).barrier()
    }
    fn abort(&self, code: i32) -> ! {
        (**self).abort(code)
    }
}

/// The group of one process: every collective is the identity.
///
/// ```
/// use flaxen_runtime::dist::{Communicator, Local};
/// assert_eq!(Local.all_gather_u64(7), [7]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl Communicator for Local {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32]) {
        recv.copy_from_slice(send);
    }
    fn all_reduce_sum_f64(&self, send: &[f64], recv: &mut [f64]) {
        recv.copy_from_slice(send);
    }
    fn all_gather_u64(&self, value: u64) -> Vec<u64> {
        vec![value]
    }
    fn barrier(&self) {}
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// A dtype whose sums a [`Communicator`] carries (`f32`, `f64`).
pub trait ReduceDtype: Dtype {
    /// `recv = sum over ranks of send`.
    fn all_reduce_sum<C: Communicator + ?Sized>(comm: &C, send: &[Self], recv: &mut [Self]);
    /// This dtype's pair of flat buffers in `scratch`.
    #[doc(hidden)]
    fn buffers(scratch: &mut Scratch) -> (&mut Vec<Self>, &mut Vec<Self>);
}

/// The flat send and receive buffers of each dtype, kept across steps so
/// that a step allocates nothing.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct Scratch {
    f32: (Vec<f32>, Vec<f32>),
    f64: (Vec<f64>, Vec<f64>),
}

impl ReduceDtype for f32 {
    fn all_reduce_sum<C: Communicator + ?Sized>(comm: &C, send: &[f32], recv: &mut [f32]) {
        comm.all_reduce_sum_f32(send, recv)
    }
    fn buffers(scratch: &mut Scratch) -> (&mut Vec<f32>, &mut Vec<f32>) {
        (&mut scratch.f32.0, &mut scratch.f32.1)
    }
}

impl ReduceDtype for f64 {
    fn all_reduce_sum<C: Communicator + ?Sized>(comm: &C, send: &[f64], recv: &mut [f64]) {
        comm.all_reduce_sum_f64(send, recv)
    }
    fn buffers(scratch: &mut Scratch) -> (&mut Vec<f64>, &mut Vec<f64>) {
        (&mut scratch.f64.0, &mut scratch.f64.1)
    }
}

/// A device whose gradient buffers can be copied to and from host memory,
/// for a host-side collective (MPI). `Cpu` reads them in place; `Cuda`
/// stages them through the host.
pub trait HostGradients<E: Dtype>: Device<E> {
    /// Copies the gradient of `leaf` into `out` (allocating a zero
    /// gradient if backward did not reach it).
    fn read_grad(
        grads: &mut Gradients<E, Self>,
        leaf: &Leaf<E, Self>,
        out: &mut [E],
    ) -> Result<(), Self::Err>;
    /// Overwrites the gradient of `leaf` with `src`.
    fn write_grad(
        grads: &mut Gradients<E, Self>,
        leaf: &Leaf<E, Self>,
        src: &[E],
    ) -> Result<(), Self::Err>;
}

macro_rules! cpu_host_gradients {
    ($($e:ty),*) => {$(
        impl HostGradients<$e> for Cpu {
            fn read_grad(
                grads: &mut Gradients<$e, Cpu>,
                leaf: &Leaf<$e, Cpu>,
                out: &mut [$e],
            ) -> Result<(), Self::Err> {
                out.copy_from_slice(&grads.get_or_alloc_mut(leaf)?[..]);
                Ok(())
            }
            fn write_grad(
                grads: &mut Gradients<$e, Cpu>,
                leaf: &Leaf<$e, Cpu>,
                src: &[$e],
            ) -> Result<(), Self::Err> {
                grads.get_or_alloc_mut(leaf)?.copy_from_slice(src);
                Ok(())
            }
        }
    )*};
}

cpu_host_gradients!(f32, f64);

#[cfg(feature = "cuda")]
macro_rules! cuda_host_gradients {
    ($($e:ty),*) => {$(
        impl HostGradients<$e> for dfdx::prelude::Cuda {
            fn read_grad(
                grads: &mut Gradients<$e, Self>,
                leaf: &Leaf<$e, Self>,
                out: &mut [$e],
            ) -> Result<(), Self::Err> {
                let buf = grads.get_or_alloc_mut(leaf)?;
                buf.device().dtoh_sync_copy_into(&**buf, out)?;
                Ok(())
            }
            fn write_grad(
                grads: &mut Gradients<$e, Self>,
                leaf: &Leaf<$e, Self>,
                src: &[$e],
            ) -> Result<(), Self::Err> {
                let buf = grads.get_or_alloc_mut(leaf)?;
                buf.device().htod_sync_copy_into(src, &mut **buf)?;
                Ok(())
            }
        }
    )*};
}

#[cfg(feature = "cuda")]
cuda_host_gradients!(f32, f64);

/// Data-parallel training over a [`Communicator`]: gradient averaging,
/// metric reduction and the start-up agreement check (see the module
/// example).
#[derive(Debug)]
pub struct DataParallel<C> {
    comm: C,
    scratch: Scratch,
}

impl<C: Communicator> DataParallel<C> {
    /// Wraps a process group.
    pub fn new(comm: C) -> Self {
        Self {
            comm,
            scratch: Scratch::default(),
        }
    }

    /// The process group.
    pub fn comm(&self) -> &C {
        &self.comm
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// Whether this is rank 0, which writes checkpoints and logs.
    pub fn is_root(&self) -> bool {
        self.comm.rank() == 0
    }

    /// Checks that every rank has the same model (parameter names, shapes,
    /// dtype and values: the same program and seed) and the same `options`
    /// (name, fingerprint) pairs, e.g. the batch size or a hash of the
    /// command line. Every rank returns the same result; on a mismatch it
    /// names the first rank and item that differ.
    pub fn check_agree<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
        &self,
        model: &M,
        options: &[(&str, u64)],
    ) -> Result<(), DistError> {
        let structure = model_fingerprint::<E, D, M>(model).map_err(device)?;
        let values = params_fingerprint::<E, D, M>(model).map_err(device)?;
        let mut items = vec![
            ("the model's parameter names, shapes and dtype", structure),
            ("the initial parameter values (the seed)", values),
        ];
        items.extend(options.iter().copied());
        for (what, value) in items {
            let all = self.comm.all_gather_u64(value);
            if let Some((rank, &found)) = all.iter().enumerate().find(|(_, v)| **v != all[0]) {
                return Err(DistError::Mismatch {
                    what: what.to_string(),
                    rank,
                    expected: all[0],
                    found,
                });
            }
        }
        Ok(())
    }

    /// Replaces `grads` (the gradients of `model`'s parameters) by their
    /// mean over the ranks: one all-reduce of one flat buffer, then the
    /// sum divided by the number of ranks. With one rank nothing changes.
    pub fn all_reduce_mean<E, D, M>(
        &mut self,
        model: &M,
        grads: &mut Gradients<E, D>,
    ) -> Result<(), DistError>
    where
        E: ReduceDtype,
        D: HostGradients<E>,
        M: TensorCollection<E, D>,
    {
        let n = self.comm.size();
        if n == 1 {
            return Ok(());
        }
        let params = Params::of(model).map_err(device)?;
        let total: usize = params.leaves().iter().map(|l| l.shape().0).sum();
        if total > usize::try_from(i32::MAX).unwrap_or(usize::MAX) {
            return Err(DistError::Invalid(format!(
                "{total} gradient values do not fit one MPI message (at most {})",
                i32::MAX
            )));
        }
        let (send, recv) = E::buffers(&mut self.scratch);
        send.resize(total, E::default());
        recv.resize(total, E::default());
        let mut at = 0;
        for leaf in params.leaves() {
            let len = leaf.shape().0;
            D::read_grad(grads, leaf, &mut send[at..at + len]).map_err(device)?;
            at += len;
        }
        E::all_reduce_sum(&self.comm, send, recv);
        let ranks = E::from_usize(n).expect("the number of ranks fits the dtype");
        for v in recv.iter_mut() {
            *v /= ranks;
        }
        let mut at = 0;
        for leaf in params.leaves() {
            let len = leaf.shape().0;
            D::write_grad(grads, leaf, &recv[at..at + len]).map_err(device)?;
            at += len;
        }
        Ok(())
    }

    /// The mean of `value` over the ranks (a metric: a loss, an accuracy).
    pub fn mean(&self, value: f64) -> f64 {
        self.sum(value) / self.comm.size() as f64
    }

    /// The sum of `value` over the ranks.
    ///
    /// ```
    /// use flaxen_runtime::dist::{DataParallel, Local};
    /// assert_eq!(DataParallel::new(Local).sum(3.0), 3.0);
    /// ```
    pub fn sum(&self, value: f64) -> f64 {
        let mut out = [0.0];
        self.comm.all_reduce_sum_f64(&[value], &mut out);
        out[0]
    }

    /// Waits for every rank.
    pub fn barrier(&self) {
        self.comm.barrier()
    }

    /// Prints `error` with this rank's number and ends every rank of the
    /// group: the others must not wait for this one in their next
    /// collective. Call it when a rank cannot go on.
    pub fn abort(&self, error: &dyn std::fmt::Display) -> ! {
        eprintln!(
            "error on rank {} of {}: {error}",
            self.comm.rank(),
            self.comm.size()
        );
        self.comm.abort(1)
    }
}

fn device<E: std::fmt::Debug>(e: E) -> DistError {
    DistError::Device(format!("{e:?}"))
}
