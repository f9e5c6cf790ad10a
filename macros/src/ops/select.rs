//! `select(mask, a, b)` (`jnp.where(mask, a, b)`, spelt `select` since
//! `where` is a Rust keyword) and `arange(start, stop)`, a constant row.

use crate::gen::lit;
use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

/// `mask.choose(a, b)`: the tensors `args` (the mask first), a number
/// standing in for `a` or `b` as a tensor of it without a tape. The tape
/// is the first float tensor's, merged with the other's.
pub fn expand(on_true: Option<f64>, on_false: Option<f64>, args: &[TokenStream]) -> TokenStream {
    let (dfdx, rt) = (paths::dfdx(), paths::compact());
    let mask = &args[0];
    let constant = |v: f64, like: &TokenStream| {
        quote!(#dfdx::tensor_ops::TryMul::try_mul(
            #dfdx::tensor::OnesTensor::try_ones_like(#like.device(), #dfdx::shapes::HasShape::shape(&#like))?,
            #rt::scalar::<E>(#v),
        )?)
    };
    let choose = quote!(#dfdx::tensor_ops::ChooseFrom::try_choose);
    match (on_true, on_false) {
        (None, None) => {
            let (a, b) = (&args[1], &args[2]);
            quote!(#choose(#mask, #a, #b)?)
        }
        (None, Some(v)) => {
            let a = &args[1];
            let c = constant(v, &quote!(__a));
            quote!({ let __a = #a; let __c = #c; #choose(#mask, __a, __c)? })
        }
        (Some(v), None) => {
            // `choose` keeps its first operand's tape: swap the branches
            // and negate the mask instead.
            let b = &args[1];
            let c = constant(v, &quote!(__b));
            quote!({ let __b = #b; let __c = #c; #choose(!#mask, __b, __c)? })
        }
        (Some(_), Some(_)) => unreachable!("the checker refuses two numbers"),
    }
}

/// The `[n]` row `start, start + 1, ..` of every example, built once per
/// call from the batch (`__batch`) on the tape `T`.
pub fn arange(start: i64, out: &[usize]) -> TokenStream {
    let rt = paths::compact();
    let n = lit(out[0]);
    quote!(#rt::arange::<_, #n, E, D, T>(&__device, __batch, #start as f64)?)
}
