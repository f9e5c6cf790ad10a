//! `softmax` / `log_softmax(x, axis = -1)`.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::paths;
use crate::rules::Site;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["axis"],
    required: &[],
    example: "NAME(x, axis = -1)",
};

pub fn check(log: bool, b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let rank = site.shape.len();
    let axis = b.or(cx, "axis", rank - 1, |a| a.axis_from_end(rank))?;
    if let Some(why) = super::nhwc_axis(rank, axis) {
        let what = if log { "log_softmax" } else { "softmax" };
        match b.get("axis") {
            Some(a) => cx.error_at(a, format!("{why}\nhelp: write `axis = -3` for the channels")),
            None => cx.error_at(site.call, format!("`{what}` defaults to axis -1: {why}\nhelp: write `{what}(x, axis = -3)` for the channels")),
        }
        return None;
    }
    // The batched tensor has the batch axis in front.
    Some((
        super::Op::Softmax {
            log,
            axis: axis + 1,
        },
        site.shape.to_vec(),
    ))
}

pub fn expand(log: bool, axis: usize, x: TokenStream) -> TokenStream {
    let dfdx = paths::dfdx();
    let m = if log {
        quote!(try_log_softmax)
    } else {
        quote!(try_softmax)
    };
    let axis = proc_macro2::Literal::isize_unsuffixed(axis as isize);
    quote!(#x.#m::<#dfdx::shapes::Axis<#axis>>()?)
}
