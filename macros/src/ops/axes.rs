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

pub const SHIFT_RIGHT: Sig = Sig {
    params: &[],
    required: &[],
    example: "shift_right(x)",
};

/// Flax's `shift_right(x)` (lm1b's `shift_inputs`) on the first
/// per-example axis: the same shape.
pub fn shift_right(site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    if site.shape.is_empty() || site.shape[0] < 2 {
        cx.error_at(site.call, format!("`shift_right` moves the first axis down one row, which needs at least 2 rows, but {} has shape {} here", site.input, show(site.shape)));
        return None;
    }
    // On token ids or features: the checker sets which (`with_ids`).
    Some((super::Op::ShiftRight(false), site.shape.to_vec()))
}

/// `x` copied to a tensor of its own before dfdx's slice: its backward
/// pass writes the gradient into its input's (`=`, not `+=`), which would
/// drop what other readers of `x` added there; the copy's gradient is
/// written by the slice alone, and the copy adds it to `x`'s.
pub(super) fn fresh(x: TokenStream) -> TokenStream {
    let (dfdx, rt) = (paths::dfdx(), paths::compact());
    quote!(#dfdx::tensor_ops::TryMul::try_mul(#x, #rt::scalar::<E>(1.0))?)
}

/// `x[a..b]` (either end may be left out; negative ends count from the
/// end): rows `a..b` of the first per-example axis.
pub fn slice(
    start: Option<i64>,
    end: Option<i64>,
    shape: &[usize],
    ids: bool,
    what: &str,
) -> Result<(super::Op, Vec<usize>), String> {
    let n = shape[0] as i64;
    let at = |e: i64| if e < 0 { n + e } else { e };
    let (a, b) = (at(start.unwrap_or(0)), at(end.unwrap_or(n)));
    if !(0..=n).contains(&a) || !(0..=n).contains(&b) || a >= b {
        return Err(format!(
            "the slice `[{}..{}]` of {what} is empty or out of range: its first axis has {n} rows (shape {}); ends count from the end when negative",
            start.map(|s| s.to_string()).unwrap_or_default(),
            end.map(|s| s.to_string()).unwrap_or_default(),
            show(shape)
        ));
    }
    let mut out = shape.to_vec();
    out[0] = (b - a) as usize;
    Ok((super::Op::Slice(a as usize, b as usize, ids), out))
}

/// dfdx's slice of rows `a..b` of batched axis 1, as the step's type.
pub fn slice_expand(a: usize, b: usize, x: TokenStream, out: &[usize]) -> TokenStream {
    let dfdx = paths::dfdx();
    let rest = (1..out.len()).map(|_| quote!(..));
    let (a, b) = (lit(a), lit(b));
    let shape = crate::gen::batched_shape(out);
    let x = fresh(x);
    quote!({
        let __s = #x.try_slice((.., #a..#b, #(#rest,)*))?;
        match #dfdx::tensor_ops::RealizeTo::try_realize::<#shape>(__s) {
            ::core::result::Result::Ok(__t) => __t,
            ::core::result::Result::Err(_) => ::core::unreachable!("slice: sizes checked by #[compact]"),
        }
    })
}

/// Flax's `shift_right` on batched axis 1: a row of zeros in front, the
/// last row dropped.
pub fn shift_right_expand(x: TokenStream, out: &[usize]) -> TokenStream {
    let dfdx = paths::dfdx();
    let n = out[0];
    let rest: Vec<TokenStream> = out[1..]
        .iter()
        .map(|d| {
            let d = lit(*d);
            quote!(#dfdx::shapes::Const<#d>)
        })
        .collect();
    let full = crate::gen::batched_shape(out);
    let keep = lit(n - 1);
    let dots = (1..out.len()).map(|_| quote!(..));
    let x = fresh(x);
    quote!({
        let __x = #x;
        let __b = #dfdx::shapes::HasShape::shape(&__x).0;
        // The slice is recorded on the tape, which then moves to the zeros
        // (concatenation takes the tape from its first part).
        let __s = __x.try_slice((.., 0..#keep, #(#dots,)*))?;
        let (__s, __tape) = #dfdx::tensor::SplitTape::split_tape(__s);
        let __z = #dfdx::tensor::ZerosTensor::try_zeros_like(
            __s.device(),
            &(__b, #dfdx::shapes::Const::<1>, #(<#rest>::default(),)*),
        )?;
        let __z = #dfdx::tensor::PutTape::put_tape(__z, __tape);
        let __c = #dfdx::tensor_ops::TryConcatAlong::try_concat_along((__z, __s), #dfdx::shapes::Axis::<1>)?;
        match #dfdx::tensor_ops::RealizeTo::try_realize::<#full>(__c) {
            ::core::result::Result::Ok(__t) => __t,
            ::core::result::Result::Err(_) => ::core::unreachable!("shift_right: sizes checked by #[compact]"),
        }
    })
}

/// `ids[a..]` and `shift_right(ids)` on token ids: the runtime's
/// `token_rows`, which needs only `TensorFromVec<usize>` of the device
/// (dfdx's slice and concat kernels for `usize` are not public bounds).
pub fn token_rows(
    x: TokenStream,
    io: super::Io,
    from: usize,
    shift: bool,
) -> (TokenStream, Vec<TokenStream>) {
    let (dfdx, rt) = (paths::dfdx(), paths::compact());
    let m = lit(io.out[0]);
    let from_lit = lit(from);
    (
        quote!(#rt::token_rows::<_, _, #m, _, _>(#x, #from_lit, #shift)?),
        vec![quote!(D: #dfdx::tensor::TensorFromVec<usize>)],
    )
}
