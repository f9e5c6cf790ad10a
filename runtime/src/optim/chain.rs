//! `chain`: run transformations one after the other (Optax `chain`).

use dfdx::prelude::{Dtype, Gradients, TensorCollection};
use dfdx::tensor_ops::Device;

use super::{GradientTransformation, LeafInfo, OptimError, Params, Updates};
use crate::state::{StateDict, StateError, StateMap};

/// Chains transformations given as a tuple (up to 8): each one transforms
/// the updates of the previous one. The state is the tuple of their states,
/// saved under `{prefix}0.`, `{prefix}1.`, ...
///
/// ```
/// use flaxen_runtime::optim::*;
/// let tx = chain((clip_by_global_norm(1.0), scale(-0.1)));
/// # let _ = tx;
/// ```
pub fn chain<T>(transformations: T) -> Chain<T> {
    Chain(transformations)
}

/// See [`chain`].
///
/// ```
/// use flaxen_runtime::optim::*;
/// let tx: Chain<(ClipByGlobalNorm, Scale)> = chain((clip_by_global_norm(1.0), scale(-0.1)));
/// # let _ = tx;
/// ```
#[derive(Debug, Clone)]
pub struct Chain<T>(pub T);

macro_rules! tuple_impls {
    ([$($T:ident $i:tt),*] $Last:ident $last:tt) => {
        impl<E: Dtype, D: Device<E>, $($T: GradientTransformation<E, D>,)* $Last: GradientTransformation<E, D>>
            GradientTransformation<E, D> for Chain<($($T,)* $Last,)>
        {
            type State = ($($T::State,)* $Last::State,);

            fn init(&self, params: &Params<E, D>) -> Result<Self::State, D::Err> {
                Ok(($(self.0.$i.init(params)?,)* self.0.$last.init(params)?,))
            }

            fn update(
                &self,
                state: &mut Self::State,
                updates: &mut Updates<E, D>,
                params: &Params<E, D>,
            ) -> Result<(), D::Err> {
                $(self.0.$i.update(&mut state.$i, updates, params)?;)*
                self.0.$last.update(&mut state.$last, updates, params)
            }

            fn validate(&self, info: &LeafInfo) -> Result<(), OptimError> {
                $(GradientTransformation::<E, D>::validate(&self.0.$i, info)?;)*
                GradientTransformation::<E, D>::validate(&self.0.$last, info)
            }

            // The last member's that has one.
            fn learning_rate(&self, state: &Self::State) -> Option<f64> {
                let rate = self.0.$last.learning_rate(&state.$last);
                $(let rate = rate.or_else(|| self.0.$i.learning_rate(&state.$i));)*
                rate
            }

            // The last member applies its own updates, so a chain ending in
            // a fused optimizer keeps the one-pass, in-place update.
            #[allow(unused_mut, unused_variables)]
            fn update_and_apply<M: TensorCollection<E, D>>(
                &self,
                state: &mut Self::State,
                mut updates: Updates<E, D>,
                model: &mut M,
            ) -> Result<Gradients<E, D>, D::Err> {
                {
                    let params = Params::of(model)?;
                    $(self.0.$i.update(&mut state.$i, &mut updates, &params)?;)*
                }
                self.0.$last.update_and_apply(&mut state.$last, updates, model)
            }
        }

        impl<E, $($T: StateDict<E> + Clone,)* $Last: StateDict<E> + Clone> StateDict<E> for ($($T,)* $Last,) {
            fn save_state(&self, prefix: &str, out: &mut StateMap<E>) {
                $(self.$i.save_state(&format!("{prefix}{}.", $i), out);)*
                self.$last.save_state(&format!("{prefix}{}.", $last), out);
            }

            fn load_state(&mut self, prefix: &str, src: &StateMap<E>) -> Result<(), StateError> {
                // Load into a copy first so that a failure leaves `self` intact.
                let mut next = self.clone();
                $(next.$i.load_state(&format!("{prefix}{}.", $i), src)?;)*
                next.$last.load_state(&format!("{prefix}{}.", $last), src)?;
                *self = next;
                Ok(())
            }

            fn save_counters(&self, prefix: &str, out: &mut StateMap<u64>) {
                $(self.$i.save_counters(&format!("{prefix}{}.", $i), out);)*
                self.$last.save_counters(&format!("{prefix}{}.", $last), out);
            }

            fn load_counters(&mut self, prefix: &str, src: &StateMap<u64>) -> Result<(), StateError> {
                let mut next = self.clone();
                $(next.$i.load_counters(&format!("{prefix}{}.", $i), src)?;)*
                next.$last.load_counters(&format!("{prefix}{}.", $last), src)?;
                *self = next;
                Ok(())
            }
        }
    };
}

tuple_impls!([] A 0);
tuple_impls!([A 0] B 1);
tuple_impls!([A 0, B 1] C 2);
tuple_impls!([A 0, B 1, C 2] F 3);
tuple_impls!([A 0, B 1, C 2, F 3] G 4);
tuple_impls!([A 0, B 1, C 2, F 3, G 4] H 5);
tuple_impls!([A 0, B 1, C 2, F 3, G 4, H 5] I 6);
tuple_impls!([A 0, B 1, C 2, F 3, G 4, H 5, I 6] J 7);
