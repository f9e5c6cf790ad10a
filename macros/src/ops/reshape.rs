//! `flatten(x)` and `reshape(x, shape)`: per-example shapes, the batch axis
//! kept (Flax's `x.reshape((x.shape[0], -1))` is `flatten(x)`).

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::rules::Site;
use crate::shape::{self, show};
use proc_macro2::TokenStream;
use quote::quote;

pub const FLATTEN: Sig = Sig {
    params: &["channels_first"],
    required: &[],
    example: "flatten(x)",
};
pub const RESHAPE: Sig = Sig {
    params: &["shape"],
    required: &["shape"],
    example: "reshape(x, (16, 49))",
};

/// `flatten(x)`; `channels_first = true` says the Flax model it ports
/// flattened its map channel-first (a transpose to NCHW before its
/// reshape), which only the Flax checkpoint mapping reads: the values are
/// flaxen's (c, h, w) order either way.
pub fn flatten(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let channels_first = b.or(cx, "channels_first", false, |a| {
        a.boolean("`channels_first`")
    })?;
    let Some(n) = shape::product(site.shape) else {
        cx.error_at(site.call, "this size overflows `usize`");
        return None;
    };
    match *site.shape {
        [c, h, w] => Some((
            super::Op::FlattenImage {
                chw: [c, h, w],
                channels_first,
            },
            vec![n],
        )),
        _ => Some((super::Op::Reshape, vec![n])),
    }
}

/// `reshape(x, (d1, ..))`: 1 to 3 per-example sizes, one of them may be
/// `-1` (inferred); the element count must not change.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let a = b.get("shape")?;
    let items = a.val.elems().unwrap_or_else(|| vec![a.val.clone()]);
    let total = shape::product(site.shape)?;
    let mut dims = Vec::new();
    let mut infer = None;
    for (k, v) in items.iter().enumerate() {
        match v {
            crate::value::Val::Int(-1) if infer.is_none() => {
                infer = Some(k);
                dims.push(1);
            }
            crate::value::Val::Int(n) if *n >= 1 => dims.push(*n as usize),
            _ => {
                cx.error_at(a, "`reshape` takes the per-example shape as sizes of at least 1, one of which may be `-1` (inferred); the batch axis is implicit, so leave it out");
                return None;
            }
        }
    }
    if dims.is_empty() || dims.len() > 3 {
        cx.error_at(a, format!("`reshape` makes 1 to 3 per-example axes, but {} are given (the batch axis is implicit)", dims.len()));
        return None;
    }
    let known = shape::product(&dims)?;
    if let Some(k) = infer {
        if total % known != 0 {
            cx.error_at(a, format!("`reshape` cannot infer `-1`: {} has {total} elements per example (shape {}), not a multiple of {known}", site.input, show(site.shape)));
            return None;
        }
        dims[k] = total / known;
    } else if known != total {
        cx.error_at(a, format!("`reshape` must keep the number of elements: {} has shape {} ({total} elements per example), but {} holds {known}", site.input, show(site.shape), show(&dims)));
        return None;
    }
    Some((super::Op::Reshape, dims))
}

pub fn flatten_image_ty(chw: [usize; 3]) -> TokenStream {
    let l = paths::layers();
    let [c, h, w] = chw.map(lit);
    let n = lit(chw.iter().product());
    quote!(#l::Flatten2D<#c, #h, #w, #n>)
}

pub fn expand(x: TokenStream, out: &[usize]) -> TokenStream {
    let dfdx = paths::dfdx();
    let dims = out.iter().map(|d| {
        let d = lit(*d);
        quote!(#dfdx::shapes::Const::<#d>)
    });
    quote!({
        let __x = #x;
        let __b = #dfdx::shapes::HasShape::shape(&__x).0;
        #dfdx::tensor_ops::ReshapeTo::try_reshape_like(__x, &(__b, #(#dims,)*))?
    })
}
