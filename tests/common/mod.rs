//! Shared helpers of the optimizer tests: the fixtures' `w` (3x4) / `b` (4)
//! parameter tree as a dfdx module.
#![allow(dead_code)]

use flaxen::runtime::dfdx::nn::tensor_collection::*;
use flaxen::runtime::dfdx::prelude::*;

/// The Optax fixtures' parameter tree: `w` (3x4) and `b` (4).
#[derive(Debug, Clone)]
pub struct Wb<E: Dtype, D: Storage<E>> {
    pub w: Tensor<Rank2<3, 4>, E, D>,
    pub b: Tensor<Rank1<4>, E, D>,
}

impl<E: Dtype, D: Device<E>> TensorCollection<E, D> for Wb<E, D> {
    type To<E2: Dtype, D2: Device<E2>> = Wb<E2, D2>;

    fn iter_tensors<V: ModuleVisitor<Self, E, D>>(
        visitor: &mut V,
    ) -> Result<Option<Self::To<V::E2, V::D2>>, V::Err> {
        visitor.visit_fields(
            (
                Self::tensor("w", |s| &s.w, |s| &mut s.w, TensorOptions::reset_to_zeros()),
                Self::tensor("b", |s| &s.b, |s| &mut s.b, TensorOptions::reset_to_zeros()),
            ),
            |(w, b)| Wb { w, b },
        )
    }
}

/// Builds gradients equal to `gw` / `gb` for `model` with one backward pass
/// (d/dw sum(w * gw) = gw exactly).
pub fn grads_of<E: Dtype, D: Device<E>>(model: &Wb<E, D>, gw: &[E], gb: &[E]) -> Gradients<E, D> {
    let dev = model.w.device().clone();
    let gw = dev.tensor_from_vec(gw.to_vec(), (Const::<3>, Const::<4>));
    let gb = dev.tensor_from_vec(gb.to_vec(), (Const::<4>,));
    let lw = (model.w.clone().traced(model.alloc_grads()) * gw).sum();
    let (lw, tape) = lw.split_tape();
    let lb = (model.b.clone().put_tape(tape) * gb).sum();
    (lb + lw).backward()
}

/// `|a - b| <= rel * max(|b|, floor)` for every element.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], rel: f32, floor: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = rel * w.abs().max(floor);
        assert!(
            (g - w).abs() <= tol,
            "{what}[{i}]: got {g}, want {w} (diff {}, tol {tol})",
            (g - w).abs()
        );
    }
}
