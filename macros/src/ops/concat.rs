//! `concatenate((x, y, ..), axis = -k)`: equal shapes but for axis `-k`,
//! whose sizes add up (U-Net skips).

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::batched_shape;
use crate::paths;
use crate::rules::Site;
use crate::shape::{self, show};
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["axis"],
    required: &["axis"],
    example: "concatenate((x, y), axis = -3)",
};

pub fn check(
    b: &Bound,
    shapes: &[Vec<usize>],
    names: &[String],
    site: &Site,
    cx: &mut Ctxt,
) -> Option<(super::Op, Vec<usize>)> {
    let first = shapes.first()?;
    let rank = first.len();
    let a = b.get("axis")?;
    let axis = cx.take(a.axis_from_end(rank))?;
    if let Some(why) = super::nhwc_axis(rank, axis) {
        cx.error_at(a, format!("{why}\nhelp: write `axis = -3` to join channels (`-2` and `-1` join along the height and the width)"));
        return None;
    }
    let without = |s: &[usize]| -> Vec<usize> {
        s.iter()
            .enumerate()
            .filter(|(k, _)| *k != axis)
            .map(|(_, d)| *d)
            .collect()
    };
    for (k, s) in shapes.iter().enumerate().skip(1) {
        if s.len() != rank || without(s) != without(first) {
            cx.error_at(site.call, format!(
                "`concatenate` along axis -{} needs the other axes to match, but {} has shape {} and {} has shape {} here",
                rank - axis, names[0], show(first), names[k], show(s)
            ));
            return None;
        }
    }
    let parts: Vec<usize> = shapes.iter().map(|s| s[axis]).collect();
    let Some(total) = shape::sum(&parts) else {
        cx.error_at(site.call, "this size overflows `usize`");
        return None;
    };
    let mut out = first.clone();
    out[axis] = total;
    Some((super::Op::Concat { axis: axis + 1 }, out))
}

pub fn expand(axis: usize, args: &[TokenStream], out: &[usize]) -> TokenStream {
    let dfdx = paths::dfdx();
    // dfdx adds `Const` sizes only on nightly: the running result has a
    // `usize` axis (usize + Const<N> is usize), realized to the macro's
    // total at the end.
    let dyn_dims = out.iter().enumerate().map(|(k, d)| {
        if k + 1 == axis {
            quote!(usize)
        } else {
            let d = crate::gen::lit(*d);
            quote!(#dfdx::shapes::Const<#d>)
        }
    });
    let full = batched_shape(out);
    let ax = crate::gen::lit(axis);
    let (first, rest) = (&args[0], &args[1..]);
    // `try_realize` fails only on other sizes, which the macro has ruled out.
    let realize = |t: TokenStream, shape: TokenStream| {
        quote!(match #dfdx::tensor_ops::RealizeTo::try_realize::<#shape>(#t) {
            ::core::result::Result::Ok(__t) => __t,
            ::core::result::Result::Err(_) => ::core::unreachable!("concatenate: sizes checked by #[compact]"),
        })
    };
    let start = realize(quote!(#first), quote!((B, #(#dyn_dims,)*)));
    let end = realize(quote!(__c), full);
    quote!({
        let __c = #start;
        #(let __c = #dfdx::tensor_ops::TryConcatAlong::try_concat_along((__c, #rest), #dfdx::shapes::Axis::<#ax>)?;)*
        #end
    })
}
