//! `SelfAttention(num_heads, qkv_features = f, out_features = f)`: Flax's
//! `nn.SelfAttention` on `[seq, f]` (no mask, no dropout).

use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::shape;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["num_heads", "qkv_features", "out_features", "name"],
    required: &["num_heads"],
    example: "SelfAttention(num_heads = 4)(x)",
};

/// A checked `SelfAttention`.
pub struct SelfAttention {
    features: usize,
    qkv: usize,
    heads: usize,
    out: usize,
}

/// `[seq, f]` → `[seq, out_features]`.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(SelfAttention, Vec<usize>)> {
    let heads = b.req(cx, "num_heads", |a| a.positive("`num_heads`"));
    let f = site.shape.last().copied().unwrap_or(0);
    let qkv = b.or(cx, "qkv_features", f, |a| a.positive("`qkv_features`"));
    let out = b.or(cx, "out_features", f, |a| a.positive("`out_features`"));
    if site.shape.len() != 2 {
        site.wrong_input(cx, "SelfAttention", "[seq, features]", "");
        return None;
    }
    let (heads, qkv, out) = (heads?, qkv?, out?);
    if qkv % heads != 0 {
        cx.error_at(site.call, format!("`SelfAttention` splits its {qkv} qkv features into {heads} heads, which needs {qkv} divisible by {heads}"));
        return None;
    }
    let layer = SelfAttention {
        features: f,
        qkv,
        heads,
        out,
    };
    Some((layer, vec![site.shape[0], out]))
}

impl SelfAttention {
    pub fn ty(&self) -> TokenStream {
        let l = paths::layers();
        let (f, q, h, o) = (
            lit(self.features),
            lit(self.qkv),
            lit(self.heads),
            lit(self.out),
        );
        quote!(#l::SelfAttention<#f, #q, #h, #o, E, D>)
    }

    pub fn params(&self) -> usize {
        let proj = shape::params(&[self.features, self.qkv]).saturating_add(self.qkv);
        proj.saturating_mul(3)
            .saturating_add(shape::params(&[self.qkv, self.out]))
            .saturating_add(self.out)
    }

    pub fn doc(&self) -> String {
        format!(
            "`SelfAttention({} heads, {} qkv features)`",
            self.heads, self.qkv
        )
    }
}
