//! `pad(x, pad_width, constant_values = 0.0)` (`jnp.pad` in its constant
//! mode) and `slice(x, start, stop, axis = -1)` (`jax.lax.slice_in_dim`):
//! the per-example axes grown by constant rows, or cut to a range, on any
//! axis.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::{batched_shape, lit};
use crate::paths;
use crate::rules::Site;
use crate::shape::show;
use crate::value::Val;
use proc_macro2::TokenStream;
use quote::quote;

pub const PAD: Sig = Sig {
    params: &["pad_width", "mode", "constant_values"],
    required: &["pad_width"],
    example: "pad(x, ((0, 0), (1, 1), (1, 1)))",
};

pub const SLICE: Sig = Sig {
    params: &["start", "stop", "axis"],
    required: &["start", "stop"],
    example: "slice(x, 1, 3, axis = -1)",
};

/// `(before, after)` per per-example axis: `((b0, a0), (b1, a1), ..)`, one
/// pair for every axis, or one number for every side.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let rank = site.shape.len();
    let a = b.get("pad_width")?;
    let amount = |v: &Val| match v {
        Val::Int(n) if *n >= 0 => usize::try_from(*n).ok(),
        _ => None,
    };
    let pair = |v: &Val| match v.elems().as_deref() {
        Some([lo, hi]) => Some((amount(lo)?, amount(hi)?)),
        _ => None,
    };
    let widths: Option<Vec<(usize, usize)>> = match (&a.val, a.val.elems()) {
        (v @ Val::Int(_), _) => amount(v).map(|n| vec![(n, n); rank]),
        (_, Some(items)) if items.len() == rank && items.iter().all(|i| i.elems().is_some()) => {
            items.iter().map(pair).collect()
        }
        (v, Some(_)) => pair(v).map(|p| vec![p; rank]),
        _ => None,
    };
    let Some(widths) = widths else {
        cx.error_at(a, format!("`pad_width` is `((before, after), ..)` with one pair for each of the {rank} per-example axes of {} (shape {}; the batch axis is not padded, so it has no pair), a single `(before, after)` for every axis, or one number; each a size of 0 or more", site.input, show(site.shape)));
        return None;
    };
    if let Some(m) = b.get("mode") {
        if !matches!(&m.val, Val::Str(s) | Val::Word(s) if s == "constant") {
            cx.error_at(
                m,
                "flaxen pads with a constant (`mode = \"constant\"`, the default)",
            );
            return None;
        }
    }
    let value = b.or(cx, "constant_values", 0.0, |a| a.float("`constant_values`"))?;
    let out = site
        .shape
        .iter()
        .zip(&widths)
        .map(|(d, (lo, hi))| d + lo + hi)
        .collect();
    Some((super::Op::Pad { widths, value }, out))
}

/// `slice(x, start, stop, axis)`: `start..stop` of one axis (negative ends
/// count from its end).
pub fn check_slice(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let rank = site.shape.len();
    let axis = b.or(cx, "axis", rank - 1, |a| a.axis_from_end(rank));
    let start = b.req(cx, "start", |a| a.int("`start`"));
    let stop = b.req(cx, "stop", |a| a.int("`stop`"));
    let (axis, start, stop) = (axis?, start?, stop?);
    let n = site.shape[axis] as i64;
    let at = |k: i64| if k < 0 { n + k } else { k };
    let (a, z) = (at(start), at(stop));
    if !(0 <= a && a < z && z <= n) {
        cx.error_at(site.call, format!("`slice({start}, {stop})` of an axis of {n} is empty or out of range: {} has shape {}", site.input, show(site.shape)));
        return None;
    }
    let mut out = site.shape.to_vec();
    out[axis] = (z - a) as usize;
    Some((
        super::Op::SliceAxis {
            axis,
            start: a as usize,
            stop: z as usize,
        },
        out,
    ))
}

/// The padded tensor: per padded axis, constant blocks joined before and
/// after it (on the input's tape, so the gradient flows through).
pub fn expand(
    widths: &[(usize, usize)],
    value: f64,
    x: TokenStream,
    shape_in: &[usize],
) -> TokenStream {
    let (dfdx, rt) = (paths::dfdx(), paths::compact());
    let mut shape = shape_in.to_vec();
    let mut steps = Vec::new();
    for (k, &(lo, hi)) in widths.iter().enumerate() {
        if lo == 0 && hi == 0 {
            continue;
        }
        let block = |n: usize, shape: &[usize]| {
            let mut s = shape.to_vec();
            s[k] = n;
            let ty = batched_shape(&s);
            let dims = s.iter().map(|d| {
                let d = lit(*d);
                quote!(#dfdx::shapes::Const::<#d>)
            });
            quote!({
                let __z: #dfdx::tensor::Tensor<#ty, E, D> = #dfdx::tensor::OnesTensor::try_ones_like(&__device, &(__b, #(#dims,)*))?;
                #dfdx::tensor_ops::TryMul::try_mul(__z, #rt::scalar::<E>(#value))?.retaped::<T>()
            })
        };
        let mut args = Vec::new();
        if lo > 0 {
            args.push(block(lo, &shape));
        }
        args.push(quote!(__p));
        if hi > 0 {
            args.push(block(hi, &shape));
        }
        shape[k] += lo + hi;
        let joined = super::concat::expand(k + 1, &args, &shape);
        steps.push(quote!(let __p = #joined;));
    }
    quote!({
        let __p = #x;
        let __device = ::core::clone::Clone::clone(__p.device());
        let __b = #dfdx::shapes::HasShape::shape(&__p).0;
        #(#steps)*
        __p
    })
}

/// `start..stop` of batched axis `axis + 1`, as `x[a..b]` does for the
/// first.
pub fn expand_slice(
    axis: usize,
    start: usize,
    stop: usize,
    x: TokenStream,
    out: &[usize],
) -> TokenStream {
    let dfdx = paths::dfdx();
    let ranges = (0..out.len()).map(|k| {
        if k == axis {
            let (a, b) = (lit(start), lit(stop));
            quote!(#a..#b)
        } else {
            quote!(..)
        }
    });
    let shape = batched_shape(out);
    let x = super::axes::fresh(x);
    quote!({
        let __s = #x.try_slice((.., #(#ranges,)*))?;
        match #dfdx::tensor_ops::RealizeTo::try_realize::<#shape>(__s) {
            ::core::result::Result::Ok(__t) => __t,
            ::core::result::Result::Err(_) => ::core::unreachable!("slice: sizes checked by #[compact]"),
        }
    })
}
