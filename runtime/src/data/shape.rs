//! Type-level "add a leading axis" for per-example shapes.
//!
//! dfdx has the same idea (`AddDim`) but keeps it private, so flaxen spells
//! its own: the loader turns a per-example shape `S` into the batch shape
//! `(Const<B>, ..S)` and the stacked shape `(Const<K>, Const<B>, ..S)`.

use crate::dfdx::shapes::{Dim, Shape};

/// A shape with one more axis in front.
///
/// ```
/// use flaxen_runtime::data::PrependDim;
/// use flaxen_runtime::dfdx::prelude::*;
///
/// let s: Rank3<32, 8, 8> = Rank2::<8, 8>::default().prepend(Const::<32>);
/// let d: (usize, Const<8>) = (Const::<8>,).prepend(5usize);
/// assert_eq!(d.concrete(), [5, 8]);
/// # let _ = s;
/// ```
pub trait PrependDim<N: Dim>: Shape {
    /// `(N, ..Self)`.
    type Out: Shape;
    /// The value of the larger shape.
    fn prepend(&self, n: N) -> Self::Out;
}

impl<N: Dim> PrependDim<N> for () {
    type Out = (N,);
    fn prepend(&self, n: N) -> Self::Out {
        (n,)
    }
}

macro_rules! prepend {
    ($($d:ident $i:tt),+) => {
        impl<N: Dim, $($d: Dim),+> PrependDim<N> for ($($d,)+) {
            type Out = (N, $($d,)+);
            fn prepend(&self, n: N) -> Self::Out {
                (n, $(self.$i,)+)
            }
        }
    };
}
prepend!(D0 0);
prepend!(D0 0, D1 1);
prepend!(D0 0, D1 1, D2 2);
prepend!(D0 0, D1 1, D2 2, D3 3);
prepend!(D0 0, D1 1, D2 2, D3 3, D4 4);
