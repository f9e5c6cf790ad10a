//! Training metrics accumulated on the device.
//!
//! Adding a step's loss or accuracy is a device op (a sum into a scalar
//! tensor); nothing is read until the caller asks for
//! [`Metrics::mean_loss`] or [`Metrics::accuracy`], which sync once.
//!
//! ```
//! use flaxen_runtime::dfdx::prelude::*;
//! use flaxen_runtime::metrics::Metrics;
//!
//! let dev: Cpu = Default::default();
//! let mut m = Metrics::new();
//! m.add_loss(&dev.tensor(1.0f32));
//! m.add_loss(&dev.tensor(3.0f32));
//! let logits: Tensor<Rank2<2, 2>, f32, _> = dev.tensor([[1.0, 0.0], [1.0, 0.0]]);
//! m.add_accuracy(&logits, &dev.tensor([0usize, 1]));
//! assert_eq!(m.mean_loss(), Some(2.0));
//! assert_eq!(m.accuracy(), Some(0.5));
//! ```

use dfdx::prelude::*;
use dfdx::tensor_ops::Device;

/// Sums of losses and of correct predictions, kept as device scalars (see
/// the module example).
#[derive(Debug, Clone)]
pub struct Metrics<E, D: Storage<E>> {
    loss_sum: Option<Tensor<Rank0, E, D>>,
    losses: usize,
    correct: Option<Tensor<Rank0, E, D>>,
    examples: usize,
}

impl<E: Dtype, D: Device<E>> Default for Metrics<E, D> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Dtype, D: Device<E>> Metrics<E, D> {
    /// Empty metrics.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::metrics::Metrics;
    /// let m = Metrics::<f32, Cpu>::new();
    /// assert_eq!(m.mean_loss(), None);
    /// ```
    pub fn new() -> Self {
        Self {
            loss_sum: None,
            losses: 0,
            correct: None,
            examples: 0,
        }
    }

    /// Adds one step's (scalar) loss, on the device.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::metrics::Metrics;
    /// # let dev: Cpu = Default::default();
    /// let mut m = Metrics::new();
    /// m.add_loss(&dev.tensor(0.5f32));
    /// assert_eq!(m.mean_loss(), Some(0.5));
    /// ```
    pub fn add_loss<T>(&mut self, loss: &Tensor<Rank0, E, D, T>) {
        let loss = loss.retaped::<NoneTape>();
        self.loss_sum = Some(match self.loss_sum.take() {
            None => loss,
            Some(sum) => sum + loss,
        });
        self.losses += 1;
    }

    /// Adds the number of examples whose label has the highest logit, on the
    /// device. A label whose logit ties the maximum counts as correct.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::metrics::Metrics;
    /// # let dev: Cpu = Default::default();
    /// let mut m = Metrics::new();
    /// let logits: Tensor<Rank2<1, 3>, f32, _> = dev.tensor([[0.1, 0.7, 0.2]]);
    /// m.add_accuracy(&logits, &dev.tensor([1usize]));
    /// assert_eq!(m.accuracy(), Some(1.0));
    /// ```
    pub fn add_accuracy<B: Dim, C: Dim, T>(
        &mut self,
        logits: &Tensor<(B, C), E, D, T>,
        labels: &Tensor<(B,), usize, D>,
    ) {
        let logits = logits.retaped::<NoneTape>();
        let (b, _) = *logits.shape();
        let best = logits.clone().max::<(B,), Axis<1>>();
        let picked = logits.select(labels.clone());
        let dev = picked.device().clone();
        let hits = picked
            .ge(&best)
            .choose(dev.ones_like(&(b,)), dev.zeros_like(&(b,)))
            .sum();
        self.correct = Some(match self.correct.take() {
            None => hits,
            Some(sum) => sum + hits,
        });
        self.examples += b.size();
    }

    /// Mean of the added losses (reads the device once), or `None` if none.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::metrics::Metrics;
    /// # let dev: Cpu = Default::default();
    /// let mut m = Metrics::new();
    /// m.add_loss(&dev.tensor(1.0f32));
    /// m.add_loss(&dev.tensor(2.0f32));
    /// assert_eq!((m.mean_loss(), m.steps()), (Some(1.5), 2));
    /// ```
    pub fn mean_loss(&self) -> Option<f64> {
        let sum = self.loss_sum.as_ref()?.as_vec()[0].to_f64()?;
        Some(sum / self.losses as f64)
    }

    /// Fraction of correct predictions (reads the device once), or `None`
    /// if no example was added.
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::metrics::Metrics;
    /// # let dev: Cpu = Default::default();
    /// let mut m = Metrics::new();
    /// let logits: Tensor<Rank2<4, 2>, f32, _> = dev.tensor([[1.0, 0.0]; 4]);
    /// m.add_accuracy(&logits, &dev.tensor([0usize, 0, 0, 1]));
    /// assert_eq!((m.accuracy(), m.examples()), (Some(0.75), 4));
    /// ```
    pub fn accuracy(&self) -> Option<f64> {
        let sum = self.correct.as_ref()?.as_vec()[0].to_f64()?;
        Some(sum / self.examples as f64)
    }

    /// Number of losses added (see [`Metrics::mean_loss`]).
    pub fn steps(&self) -> usize {
        self.losses
    }

    /// Number of examples counted for accuracy (see [`Metrics::accuracy`]).
    pub fn examples(&self) -> usize {
        self.examples
    }

    /// Forgets everything (e.g. at the start of an epoch).
    ///
    /// ```
    /// # use flaxen_runtime::dfdx::prelude::*;
    /// # use flaxen_runtime::metrics::Metrics;
    /// # let dev: Cpu = Default::default();
    /// let mut m = Metrics::new();
    /// m.add_loss(&dev.tensor(0.5f32));
    /// m.reset();
    /// assert_eq!(m.steps(), 0);
    /// ```
    pub fn reset(&mut self) {
        *self = Self::new();
    }
}
