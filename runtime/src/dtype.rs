//! Converting `f64` constants to a model's dtype.

use dfdx::prelude::Dtype;

/// An `f64` constant as the dtype `E`: a float literal of a model's source
/// (`x * 0.5`), an optimizer's hyper-parameter, an initializer's sample.
/// The one conversion every part of flaxen uses.
///
/// ```
/// assert_eq!(flaxen_runtime::dtype::scalar::<f32>(0.5), 0.5f32);
/// ```
pub fn scalar<E: Dtype>(value: f64) -> E {
    // Every dfdx dtype is `FromPrimitive`; `None` only for out-of-range
    // values of a narrow type, where the saturated value is what a user of
    // `x * 1e9` in f16 would get from a cast too.
    E::from_f64(value).unwrap_or_else(|| {
        if value > 0.0 {
            E::from_f32(f32::MAX).unwrap_or_default()
        } else {
            E::from_f32(f32::MIN).unwrap_or_default()
        }
    })
}
