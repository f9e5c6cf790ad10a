//! `add_decayed_weights` (Optax).

use dfdx::prelude::Dtype;
use dfdx::tensor_ops::Device;

use crate::optim::alias::{Primitive, Step};
use crate::optim::fused::Fusion;
use crate::optim::masked::Mask;
use crate::optim::{LeafInfo, OptimError};

/// Optax's `add_decayed_weights(weight_decay, mask=None)`: `updates +=
/// weight_decay * params`, on every parameter or, with
/// [`mask`](AddDecayedWeights::mask), on those whose checkpoint key it
/// selects. No state.
///
/// ```
/// use flaxen_runtime::optim::{add_decayed_weights, chain, decay_mask, sgd};
/// let tx = chain((add_decayed_weights(1e-4).mask(decay_mask), sgd(0.1, None, false)));
/// # let _ = tx;
/// ```
pub fn add_decayed_weights(weight_decay: f64) -> AddDecayedWeights {
    AddDecayedWeights {
        weight_decay,
        mask: None,
        label: "add_decayed_weights(..).mask",
    }
}

/// The primitive built by [`add_decayed_weights`].
///
/// ```
/// let p: flaxen_runtime::optim::AddDecayedWeights = flaxen_runtime::optim::add_decayed_weights(1e-4);
/// # let _ = p;
/// ```
#[derive(Debug, Clone)]
pub struct AddDecayedWeights {
    pub(crate) weight_decay: f64,
    pub(crate) mask: Option<Mask>,
    /// How a mask that selects nothing is reported.
    pub(crate) label: &'static str,
}

impl AddDecayedWeights {
    /// Decays only the parameters whose checkpoint key `mask` selects
    /// (Optax's `mask`); [`decay_mask`](crate::optim::decay_mask) leaves
    /// out biases and normalisation scales.
    ///
    /// ```
    /// use flaxen_runtime::optim::add_decayed_weights;
    /// let p = add_decayed_weights(1e-4).mask(|key: &str| key.ends_with(".weight"));
    /// # let _ = p;
    /// ```
    pub fn mask(mut self, mask: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.mask = Some(Mask::new(mask));
        self
    }
}

impl<E: Dtype, D: Device<E>> Primitive<E, D> for AddDecayedWeights {
    fn update(&self, step: &mut Step<'_, E, D>) -> Result<(), D::Err> {
        let (_, _, updates, params) = step.parts();
        if self.weight_decay == 0.0 {
            return Ok(());
        }
        let decayed = match &self.mask {
            None => (0..params.len()).collect(),
            Some(m) => m.select(&params.info().names),
        };
        for i in decayed {
            // `u * 1 + p * wd`: Optax's `u + wd * p`, rounded alike.
            let p = &params.leaves()[i];
            updates
                .tensor(i, params)?
                .try_axpy(1.0, p, self.weight_decay)?;
        }
        Ok(())
    }

    fn validate(&self, info: &LeafInfo) -> Result<(), OptimError> {
        match &self.mask {
            Some(m) => m.check(self.label, info),
            None => Ok(()),
        }
    }

    fn fusion(&self, _count: u64) -> Fusion {
        if self.weight_decay == 0.0 {
            Fusion::Skip
        } else if self.mask.is_some() {
            // One kernel configuration serves every leaf.
            Fusion::No
        } else {
            Fusion::Decay(self.weight_decay)
        }
    }
}
