//! `x[i]` (an element of the first per-example axis: the CLS token, the
//! last time step) and `swapaxes(x, a, b)` (per-example axes, counted from
//! the end).

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::rules::Site;
use crate::shape::show;
use proc_macro2::TokenStream;
use quote::quote;

pub const SWAPAXES: Sig = Sig {
    params: &["axis1", "axis2"],
    required: &["axis1", "axis2"],
    example: "swapaxes(x, -1, -2)",
};

pub const TRANSPOSE: Sig = Sig {
    params: &["axes"],
    required: &["axes"],
    example: "transpose(x, (-1, -2))",
};

/// `transpose(x, axes)`: output axis `k` is input axis `axes[k]`, every
/// per-example axis once, counted from the end (`transpose(x, (-1, -2))`
/// swaps the two axes of `[s, f]`; Flax's `jnp.transpose(x, (0, 2, 1))`
/// names the batch axis too).
pub fn transpose(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let rank = site.shape.len();
    let a = b.get("axes")?;
    let axes = cx.take(a.axes_in_order(rank))?;
    if axes.len() != rank {
        cx.error_at(a, format!("`transpose` lists every per-example axis once: {rank} axes here (the batch axis stays first and is not listed), but {} are given", axes.len()));
        return None;
    }
    let out = axes.iter().map(|k| site.shape[*k]).collect();
    let perm = std::iter::once(0)
        .chain(axes.iter().map(|k| k + 1))
        .collect();
    Some((super::Op::Permute(perm), out))
}

/// `swapaxes(x, a, b)`: the two axes exchanged.
pub fn swapaxes(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let rank = site.shape.len();
    let a1 = b.req(cx, "axis1", |a| a.axis_from_end(rank));
    let a2 = b.req(cx, "axis2", |a| a.axis_from_end(rank));
    let (a1, a2) = (a1?, a2?);
    let mut out = site.shape.to_vec();
    out.swap(a1, a2);
    // The batch axis stays first.
    let mut perm: Vec<usize> = (0..=rank).collect();
    perm.swap(a1 + 1, a2 + 1);
    Some((super::Op::Permute(perm), out))
}

/// `x[i]` on a value of at least two per-example axes; `i` may count from
/// the end (`x[-1]`).
pub fn take(index: i64, shape: &[usize], what: &str) -> Result<(super::Op, Vec<usize>), String> {
    if shape.len() < 2 {
        return Err(format!("`{what}[..]` picks an element of the first axis, which needs at least two axes per example, but {what} has shape {} here", show(shape)));
    }
    let n = shape[0] as i64;
    let i = if index < 0 { n + index } else { index };
    if !(0..n).contains(&i) {
        return Err(format!(
            "index {index} is out of range for the first axis of {what}, of size {n} (shape {})",
            show(shape)
        ));
    }
    Ok((super::Op::Take(i as usize), shape[1..].to_vec()))
}

/// The permutation as dfdx's axes type.
pub fn permute(perm: &[usize], x: TokenStream, out: &[usize]) -> TokenStream {
    let dfdx = paths::dfdx();
    let ax: Vec<_> = perm.iter().map(|a| lit(*a)).collect();
    let axes = match ax.len() {
        2 => quote!(#dfdx::shapes::Axes2<#(#ax),*>),
        3 => quote!(#dfdx::shapes::Axes3<#(#ax),*>),
        _ => quote!(#dfdx::shapes::Axes4<#(#ax),*>),
    };
    let shape = crate::gen::batched_shape(out);
    quote!(#dfdx::tensor_ops::PermuteTo::try_permute::<#shape, #axes>(#x)?)
}

/// Element `i` of the first per-example axis of `x`: dfdx's `select` with
/// the same index for every example.
pub fn take_expand(i: usize, x: TokenStream) -> TokenStream {
    let (dfdx, rt) = (paths::dfdx(), paths::compact());
    quote!({
        let __x = #x;
        let __i = #rt::same_index(__x.device(), #dfdx::shapes::HasShape::shape(&__x).0, #i)?;
        #dfdx::tensor_ops::SelectTo::try_select(__x, __i)?
    })
}
