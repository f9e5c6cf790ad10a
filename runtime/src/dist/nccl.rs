//! The NCCL engine: gradients averaged on the GPUs, without a trip through
//! host memory (cudarc's NCCL bindings, the cudarc that dfdx uses).
//!
//! One process per GPU, as with MPI: each builds its `Cuda` device for its
//! own GPU, rank 0 makes an [`Id`] with [`Id::new`] and hands its bytes
//! ([`Id::internal`]) to the others by any means (an MPI broadcast, a file),
//! which rebuild it with [`Id::uninit`]; then every rank calls
//! [`Nccl::from_rank`]. A single process on one GPU is [`Nccl::single`].

use std::sync::Arc;

use cudarc::driver::{CudaDevice, CudaSlice, DeviceSlice};
use dfdx::nn::tensor_collection::TensorCollection;
use dfdx::prelude::{Cuda, Gradients, HasShape};

pub use cudarc::nccl::safe::Id;
use cudarc::nccl::safe::{Comm, ReduceOp};

use super::DistError;
use crate::optim::Params;

/// A NCCL communicator that averages a model's gradients in place on the
/// GPU: every gradient is copied into one flat device buffer, one
/// `ncclAllReduce` with `ncclAvg` runs over it, and the means are copied
/// back.
///
/// ```no_run
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::dist::nccl::Nccl;
///
/// let dev: Cuda = Default::default();
/// let model = dev.build_module::<Linear<3, 2>, f32>();
/// let x: Tensor<Rank2<4, 3>, f32, _> = dev.sample_normal();
/// let mut grads = model.forward(x.traced(model.alloc_grads())).sum().backward();
/// let mut nccl = Nccl::<f32>::single(&model).unwrap();
/// nccl.all_reduce_mean(&model, &mut grads).unwrap(); // one rank: unchanged
/// ```
pub struct Nccl<E> {
    comm: Comm,
    // The flat send and receive buffers, kept across steps.
    buffers: Option<(CudaSlice<E>, CudaSlice<E>)>,
}

impl<E> std::fmt::Debug for Nccl<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl")
            .field("rank", &self.comm.rank())
            .field("size", &self.comm.world_size())
            .finish()
    }
}

fn nccl_err(e: impl std::fmt::Debug) -> DistError {
    DistError::Init(format!("NCCL: {e:?}"))
}

fn device_err(e: impl std::fmt::Debug) -> DistError {
    DistError::Device(format!("{e:?}"))
}

macro_rules! nccl_dtypes {
    ($($e:ty),*) => {$(
impl Nccl<$e> {
    /// Rank `rank` of `size` on `device` (the `CudaDevice` of this
    /// process's GPU), joining the group named by `id`.
    pub fn from_rank(
        device: Arc<CudaDevice>,
        rank: usize,
        size: usize,
        id: Id,
    ) -> Result<Self, DistError> {
        let comm = Comm::from_rank(device, rank, size, id).map_err(nccl_err)?;
        Ok(Self {
            comm,
            buffers: None,
        })
    }

    /// The group of one process on the GPU that holds `model`.
    pub fn single<M: TensorCollection<$e, Cuda>>(model: &M) -> Result<Self, DistError> {
        // The device of the model's first parameter.
        let params = Params::of(model).map_err(device_err)?;
        let leaf = params
            .leaves()
            .first()
            .ok_or_else(|| DistError::Invalid("the model has no trainable tensor".into()))?;
        let mut grads: Gradients<$e, Cuda> = Gradients::leaky();
        let device = grads.get_or_alloc_mut(leaf).map_err(device_err)?.device();
        Self::from_rank(device, 0, 1, Id::new().map_err(nccl_err)?)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.comm.world_size()
    }

    /// Replaces `grads` by their mean over the ranks (see [`Nccl`]).
    pub fn all_reduce_mean<M: TensorCollection<$e, Cuda>>(
        &mut self,
        model: &M,
        grads: &mut Gradients<$e, Cuda>,
    ) -> Result<(), DistError> {
        let params = Params::of(model).map_err(device_err)?;
        let total: usize = params.leaves().iter().map(|l| l.shape().0).sum();
        let device = self.comm.device();
        let fits = matches!(&self.buffers, Some((s, _)) if s.len() == total);
        if !fits {
            let send = device.alloc_zeros::<$e>(total).map_err(device_err)?;
            let recv = device.alloc_zeros::<$e>(total).map_err(device_err)?;
            self.buffers = Some((send, recv));
        }
        let (send, recv) = self.buffers.as_mut().expect("just allocated");
        let mut at = 0;
        for leaf in params.leaves() {
            let len = leaf.shape().0;
            let g = grads.get_or_alloc_mut(leaf).map_err(device_err)?;
            device
                .dtod_copy(&**g, &mut send.slice_mut(at..at + len))
                .map_err(device_err)?;
            at += len;
        }
        self.comm
            .all_reduce(send, recv, &ReduceOp::Avg)
            .map_err(nccl_err)?;
        let mut at = 0;
        for leaf in params.leaves() {
            let len = leaf.shape().0;
            let g = grads.get_or_alloc_mut(leaf).map_err(device_err)?;
            device
                .dtod_copy(&recv.slice(at..at + len), &mut **g)
                .map_err(device_err)?;
            at += len;
        }
        Ok(())
    }
}

)*};
}

nccl_dtypes!(f32, f64);
