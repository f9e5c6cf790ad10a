//! `dot_product_attention(q, k, v, mask = m)`: Flax's functional
//! `nn.dot_product_attention` on per-head features, `q` `[Q, H, Dk]`, `k`
//! `[K, H, Dk]`, `v` `[K, H, Dv]`, a `[Q, K]` mask shared by the heads.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::paths;
use crate::rules::Site;
use crate::shape::show;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["mask"],
    required: &[],
    example: "dot_product_attention(q, k, v, mask = m)",
};

/// `[Q, H, Dv]`.
pub fn check(
    b: &Bound,
    shapes: &[Vec<usize>],
    site: &Site,
    cx: &mut Ctxt,
) -> Option<(super::Op, Vec<usize>)> {
    let [q, k, v] = [&shapes[0], &shapes[1], &shapes[2]];
    let fits = q.len() == 3
        && k.len() == 3
        && v.len() == 3
        && k[0] == v[0]
        && q[1] == k[1]
        && k[1] == v[1]
        && q[2] == k[2];
    if !fits {
        cx.error_at(site.call, format!("`dot_product_attention` takes queries `[Q, heads, depth]`, keys `[K, heads, depth]` and values `[K, heads, v_depth]` (Flax's layout without the batch axis), but they have shapes {}, {} and {} here", show(q), show(k), show(v)));
        return None;
    }
    if let (Some(m), Some(a)) = (&site.mask, b.get("mask")) {
        if m[..] != [q[0], k[0]] {
            cx.error_at(a, format!("the mask of `dot_product_attention` is [queries, keys] = {}, shared by the heads, but it has shape {} here", show(&[q[0], k[0]]), show(m)));
            return None;
        }
    }
    let masked = site.mask.is_some();
    Some((
        super::Op::DotProductAttention { masked },
        vec![q[0], q[1], v[2]],
    ))
}

pub fn expand(masked: bool, args: &[TokenStream]) -> TokenStream {
    let l = paths::layers();
    let (q, k, v) = (&args[0], &args[1], &args[2]);
    let mask = match masked {
        true => {
            let m = &args[3];
            quote!(::core::option::Option::Some(#m))
        }
        false => quote!(::core::option::Option::None),
    };
    quote!(#l::dot_product_attention(#q, #k, #v, #mask)?)
}
