//! Element types a checkpoint can hold, with their safetensors dtype names.

use safetensors::Dtype;

/// A scalar type stored in checkpoints: its safetensors dtype and its
/// little-endian bytes.
///
/// Implemented for `f32`, `f64`, `u8`, `i32`, `u32`, `i64`, `u64` (and
/// dfdx's `f16` with the `f16` feature).
///
/// ```
/// use flaxen_runtime::checkpoint::Element;
///
/// let mut bytes = vec![];
/// 1.5f32.write_le(&mut bytes);
/// assert_eq!(f32::read_le(&bytes), 1.5);
/// assert_eq!(f32::NAME, "F32");
/// ```
pub trait Element: Copy + Send + Sync + 'static {
    /// The safetensors dtype name (`"F32"`, `"U64"`, ...).
    const NAME: &'static str;
    /// Bytes per element.
    const SIZE: usize;
    /// Appends the little-endian bytes of `self`.
    fn write_le(self, out: &mut Vec<u8>);
    /// Reads one element from the first `SIZE` bytes of `bytes`.
    fn read_le(bytes: &[u8]) -> Self;
    #[doc(hidden)]
    fn dtype() -> Dtype;
}

macro_rules! element {
    ($t:ty, $name:literal, $dtype:ident) => {
        impl Element for $t {
            const NAME: &'static str = $name;
            const SIZE: usize = std::mem::size_of::<$t>();
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&bytes[..Self::SIZE]);
                <$t>::from_le_bytes(a)
            }
            fn dtype() -> Dtype {
                Dtype::$dtype
            }
        }
    };
}

element!(f32, "F32", F32);
element!(f64, "F64", F64);
element!(u8, "U8", U8);
element!(i32, "I32", I32);
element!(u32, "U32", U32);
element!(i64, "I64", I64);
element!(u64, "U64", U64);
#[cfg(feature = "f16")]
element!(crate::dfdx::dtypes::f16, "F16", F16);

/// The safetensors name of a dtype, as Python's `safetensors` spells it.
pub(crate) fn dtype_name(d: Dtype) -> String {
    format!("{d:?}")
}
