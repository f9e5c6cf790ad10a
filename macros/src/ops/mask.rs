//! Attention masks: `make_causal_mask(x)`, `make_attention_mask(q_tokens,
//! k_tokens)`, `combine_masks(a, b)`, as Flax's `nn.make_causal_mask`,
//! `nn.make_attention_mask(q > 0, k > 0)` and `nn.combine_masks`; per
//! example `[Q, K]` `bool`, true where a query may look at a key.

use crate::args::Sig;
use crate::ctxt::Ctxt;
use crate::paths;
use crate::rules::Site;
use crate::shape::show;
use proc_macro2::TokenStream;
use quote::quote;

pub const CAUSAL: Sig = Sig {
    params: &[],
    required: &[],
    example: "make_causal_mask(tokens)",
};
pub const ATTENTION: Sig = Sig {
    params: &[],
    required: &[],
    example: "make_attention_mask(tokens, tokens)",
};
pub const COMBINE: Sig = Sig {
    params: &[],
    required: &[],
    example: "combine_masks(causal, padding)",
};

/// Which mask.
#[derive(Clone, Copy)]
pub enum Mask {
    /// `make_causal_mask`
    Causal,
    /// `make_attention_mask`
    Attention,
    /// `combine_masks`
    Combine,
}

/// `[S]` or `[S, F]` → `[S, S]`.
pub fn causal(site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    if !(1..=2).contains(&site.shape.len()) {
        site.wrong_input(cx, "make_causal_mask", "[seq] or [seq, features]", "");
        return None;
    }
    let s = site.shape[0];
    Some((super::Op::Mask(Mask::Causal), vec![s, s]))
}

/// `[Q]`, `[K]` → `[Q, K]`.
pub fn attention(site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let k = site.extra.first()?;
    if site.shape.len() != 1 || k.len() != 1 {
        cx.error_at(site.call, format!("`make_attention_mask` takes token ids [q_len] and [k_len], but they have shapes {} and {} here", show(site.shape), show(k)));
        return None;
    }
    Some((super::Op::Mask(Mask::Attention), vec![site.shape[0], k[0]]))
}

/// Two masks of the same shape.
pub fn combine(site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let b = site.extra.first()?;
    if site.shape != &b[..] {
        cx.error_at(site.call, format!("`combine_masks` needs masks of the same shape, but they have shapes {} and {} here", show(site.shape), show(b)));
        return None;
    }
    Some((super::Op::Mask(Mask::Combine), site.shape.to_vec()))
}

impl Mask {
    /// The runtime module.
    pub fn ty(self) -> TokenStream {
        let l = paths::layers();
        match self {
            Mask::Causal => quote!(#l::CausalMask),
            Mask::Attention => quote!(#l::AttentionMask),
            Mask::Combine => quote!(#l::CombineMasks),
        }
    }

    pub fn doc(self) -> &'static str {
        match self {
            Mask::Causal => "`make_causal_mask`",
            Mask::Attention => "`make_attention_mask`",
            Mask::Combine => "`combine_masks`",
        }
    }
}
