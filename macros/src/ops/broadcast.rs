//! NumPy broadcasting of the per-example shapes of `a + b`, `a * b`, ...:
//! shapes aligned from the right, an axis of size 1 (or a missing leading
//! one) stretched to the other operand's. The batch axis is never
//! broadcast: both operands have it.

use crate::gen::lit;
use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

/// The broadcast shape of `a` and `b`, or `None` when an axis differs and
/// neither is 1.
pub fn shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let at = |s: &[usize], k: usize| -> usize {
        // Axis `k` of the right-aligned shapes (1 where `s` has none).
        (k + s.len()).checked_sub(n).map_or(1, |i| s[i])
    };
    (0..n)
        .map(|k| match (at(a, k), at(b, k)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// How `from` becomes `to` (a broadcast of it): the axes of `from` that
/// stay (its shape once the stretched size-1 axes are dropped), and the
/// axes of the batched output that are new.
pub fn plan(from: &[usize], to: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let offset = to.len() - from.len();
    let mut kept = Vec::new();
    let mut new = Vec::new();
    for (k, &d) in to.iter().enumerate() {
        match k.checked_sub(offset).map(|i| from[i]) {
            Some(f) if f == d => kept.push(f),
            // +1: the batch axis comes first.
            _ => new.push(k + 1),
        }
    }
    (kept, new)
}

/// The code that broadcasts `x` (per-example shape `from`) to the
/// per-example shape `to`.
pub fn expand(from: &[usize], to: &[usize], x: TokenStream) -> TokenStream {
    let dfdx = paths::dfdx();
    let (kept, new) = plan(from, to);
    let dims = |s: &[usize]| {
        let d = s.iter().map(|d| {
            let d = lit(*d);
            quote!(#dfdx::shapes::Const::<#d>)
        });
        quote!((__b, #(#d,)*))
    };
    let (kept_shape, to_shape) = (dims(&kept), dims(to));
    let axes = {
        let a = new.iter().map(|k| lit(*k));
        match new.len() {
            1 => quote!(#dfdx::shapes::Axis<#(#a)*>),
            2 => quote!(#dfdx::shapes::Axes2<#(#a),*>),
            _ => quote!(#dfdx::shapes::Axes3<#(#a),*>),
        }
    };
    let reshape = if kept[..] != *from {
        quote!(let __x = #dfdx::tensor_ops::ReshapeTo::try_reshape_like(__x, &#kept_shape)?;)
    } else {
        quote!()
    };
    quote!({
        let __x = #x;
        let __b = #dfdx::shapes::HasShape::shape(&__x).0;
        #reshape
        #dfdx::tensor_ops::BroadcastTo::try_broadcast_like::<_, #axes>(__x, &#to_shape)?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_rules() {
        assert_eq!(shape(&[8, 1, 1], &[8, 4, 4]), Some(vec![8, 4, 4]));
        assert_eq!(shape(&[4, 1], &[1, 5]), Some(vec![4, 5]));
        assert_eq!(shape(&[5], &[3, 5]), Some(vec![3, 5]));
        assert_eq!(shape(&[3, 5], &[3, 4]), None);
        assert_eq!(plan(&[8, 1, 1], &[8, 4, 4]), (vec![8], vec![2, 3]));
        assert_eq!(plan(&[5], &[3, 5]), (vec![5], vec![1]));
        assert_eq!(plan(&[4, 1], &[4, 5]), (vec![4], vec![2]));
    }
}
