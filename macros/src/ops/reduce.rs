//! `mean` / `sum(x, axis)` over per-example axes (global average pooling
//! is `mean(x, axis = (-2, -1))`).

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::{batched_shape, lit};
use crate::paths;
use crate::rules::Site;
use crate::shape::show;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["axis"],
    required: &["axis"],
    example: "NAME(x, axis = (-2, -1))",
};

pub fn check(mean: bool, b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let s = site.shape;
    let axes = b.req(cx, "axis", |a| a.axes_from_end(s.len()))?;
    let what = if mean { "mean" } else { "sum" };
    if axes.len() == s.len() {
        cx.error_at(site.call, format!("`{what}` over every axis of {} (shape {}) leaves nothing per example; keep at least one axis (the batch axis is never reduced)", site.input, show(s)));
        return None;
    }
    let out = s
        .iter()
        .enumerate()
        .filter(|(k, _)| !axes.contains(k))
        .map(|(_, d)| *d)
        .collect();
    Some((
        super::Op::Reduce {
            mean,
            axes: axes.iter().map(|a| a + 1).collect(),
        },
        out,
    ))
}

pub fn expand(mean: bool, axes: &[usize], x: TokenStream, out: &[usize]) -> TokenStream {
    let dfdx = paths::dfdx();
    let m = if mean {
        quote!(try_mean)
    } else {
        quote!(try_sum)
    };
    let ax: Vec<_> = axes.iter().map(|a| lit(*a)).collect();
    let axes_ty = match ax.len() {
        1 => quote!(#dfdx::shapes::Axis<#(#ax)*>),
        2 => quote!(#dfdx::shapes::Axes2<#(#ax),*>),
        _ => quote!(#dfdx::shapes::Axes3<#(#ax),*>),
    };
    let shape = batched_shape(out);
    quote!(#x.#m::<#shape, #axes_ty>()?)
}
