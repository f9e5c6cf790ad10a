//! Fingerprints that ranks compare at start: a stable 64-bit hash of a
//! model's structure and of its parameter values.

use dfdx::nn::tensor_collection::TensorCollection;
use dfdx::prelude::Dtype;
use dfdx::tensor_ops::Device;

use crate::optim::Params;

/// FNV-1a, 64 bits: the same value for the same bytes in every process and
/// on every build (std's `DefaultHasher` promises neither).
///
/// ```
/// use flaxen_runtime::dist::Fnv64;
/// let mut h = Fnv64::new();
/// h.write(b"a");
/// assert_eq!(h.finish(), 0xaf63dc4c8601ec8c);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv64 {
    /// The empty hash.
    pub fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
    /// Adds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    /// Adds a length-prefixed string, so that `("ab", "c")` and `("a", "bc")`
    /// differ.
    pub fn write_str(&mut self, s: &str) {
        self.write(&(s.len() as u64).to_le_bytes());
        self.write(s.as_bytes());
    }
    /// Adds the bit patterns of `values` (as f64: every dfdx float dtype
    /// converts exactly), so that equal hashes mean equal values bit for
    /// bit, signs of zeros included.
    ///
    /// ```
    /// use flaxen_runtime::dist::Fnv64;
    /// let (mut a, mut b) = (Fnv64::new(), Fnv64::new());
    /// a.write_values(&[0.0f32]);
    /// b.write_values(&[-0.0f32]);
    /// assert_ne!(a.finish(), b.finish());
    /// ```
    pub fn write_values<E: Dtype>(&mut self, values: &[E]) {
        for v in values {
            let bits = v.to_f64().map_or(u64::MAX, f64::to_bits);
            self.write(&bits.to_le_bytes());
        }
    }
    /// The hash.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// A hash of `model`'s trainable tensors' names and shapes and of its
/// dtype: equal on two ranks that build the same model type.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::dist::model_fingerprint;
/// let dev: Cpu = Default::default();
/// let a = model_fingerprint(&dev.build_module::<Linear<3, 2>, f32>()).unwrap();
/// let b = model_fingerprint(&dev.build_module::<Linear<3, 4>, f32>()).unwrap();
/// assert_ne!(a, b);
/// ```
pub fn model_fingerprint<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    model: &M,
) -> Result<u64, D::Err> {
    let params = Params::of(model)?;
    let mut h = Fnv64::new();
    h.write_str(std::any::type_name::<E>());
    let info = params.info();
    for (name, shape) in info.names.iter().zip(&info.shapes) {
        h.write_str(name);
        h.write(&(shape.len() as u64).to_le_bytes());
        for d in shape {
            h.write(&(*d as u64).to_le_bytes());
        }
    }
    Ok(h.finish())
}

/// A hash of `model`'s parameter values (bit patterns): equal on two ranks
/// whose replicas are equal bit for bit.
///
/// ```
/// use flaxen_runtime::dfdx::prelude::*;
/// use flaxen_runtime::dist::params_fingerprint;
/// let m = Cpu::seed_from_u64(1).build_module::<Linear<3, 2>, f32>();
/// let same = Cpu::seed_from_u64(1).build_module::<Linear<3, 2>, f32>();
/// let other = Cpu::seed_from_u64(2).build_module::<Linear<3, 2>, f32>();
/// assert_eq!(params_fingerprint(&m).unwrap(), params_fingerprint(&same).unwrap());
/// assert_ne!(params_fingerprint(&m).unwrap(), params_fingerprint(&other).unwrap());
/// ```
pub fn params_fingerprint<E: Dtype, D: Device<E>, M: TensorCollection<E, D>>(
    model: &M,
) -> Result<u64, D::Err> {
    let params = Params::of(model)?;
    let mut h = Fnv64::new();
    for leaf in params.leaves() {
        h.write_values(&leaf.as_vec());
    }
    Ok(h.finish())
}
