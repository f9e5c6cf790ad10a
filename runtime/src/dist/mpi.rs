//! The MPI engine (rsmpi over the system's MPI, e.g. OpenMPI).

use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::environment::Universe;
use mpi::topology::{Communicator as _, SimpleCommunicator};
use mpi::Threading;

use super::{Communicator, DistError};

/// `MPI_COMM_WORLD` of a program started by `mpirun -np N` (or alone, as
/// the group of one). MPI is finalized when it is dropped.
///
/// A rank that panics while holding it aborts the whole job
/// (`MPI_Abort`), so the other ranks do not wait in their next collective;
/// a rank that is killed is noticed by `mpirun`, which ends the others.
///
/// ```no_run
/// use flaxen_runtime::dist::{DataParallel, Mpi};
/// let dp = DataParallel::new(Mpi::init().unwrap());
/// println!("rank {} of {}", dp.rank(), dp.size());
/// ```
pub struct Mpi {
    world: SimpleCommunicator,
    // Dropped last: finalizes MPI.
    _universe: Universe,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.rank())
            .field("size", &self.size())
            .finish()
    }
}

impl Mpi {
    /// Initializes MPI. Only the calling thread makes MPI calls (the
    /// `Funneled` level; rayon's kernel threads never do).
    pub fn init() -> Result<Self, DistError> {
        let (universe, level) = mpi::initialize_with_threading(Threading::Funneled)
            .ok_or_else(|| DistError::Init("MPI is already initialized".into()))?;
        if level < Threading::Funneled {
            return Err(DistError::Init(format!(
                "this MPI offers thread level {level:?}, flaxen needs Funneled"
            )));
        }
        Ok(Self {
            world: universe.world(),
            _universe: universe,
        })
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "rank {} of {} panicked: aborting the job",
                self.rank(),
                self.size()
            );
            self.world.abort(101);
        }
    }
}

impl Communicator for Mpi {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }
    fn size(&self) -> usize {
        self.world.size() as usize
    }
    fn all_reduce_sum_f32(&self, send: &[f32], recv: &mut [f32]) {
        self.world
            .all_reduce_into(send, recv, SystemOperation::sum());
    }
    fn all_reduce_sum_f64(&self, send: &[f64], recv: &mut [f64]) {
        self.world
            .all_reduce_into(send, recv, SystemOperation::sum());
    }
    fn all_gather_u64(&self, value: u64) -> Vec<u64> {
        let mut all = vec![0u64; self.size()];
        self.world.all_gather_into(&value, &mut all[..]);
        all
    }
    fn barrier(&self) {
        self.world.barrier();
    }
    fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
}
