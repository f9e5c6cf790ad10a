//! `Embed(num_embeddings, features)`: Flax's `nn.Embed`, token ids `[seq]`
//! to features `[seq, features]`.

use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::shape;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["num_embeddings", "features", "name"],
    required: &["num_embeddings", "features"],
    example: "Embed(num_embeddings = 1000, features = 32)(tokens)",
};

/// A checked `Embed`.
pub struct Embed {
    vocab: usize,
    features: usize,
}

/// `[seq]` token ids → `[seq, features]`.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Embed, Vec<usize>)> {
    let vocab = b.req(cx, "num_embeddings", |a| a.positive("`num_embeddings`"));
    let features = b.req(cx, "features", |a| a.positive("`features`"));
    let (vocab, features) = (vocab?, features?);
    let mut out = site.shape.to_vec();
    out.push(features);
    Some((Embed { vocab, features }, out))
}

impl Embed {
    pub fn ty(&self) -> TokenStream {
        let (l, v, f) = (paths::layers(), lit(self.vocab), lit(self.features));
        quote!(#l::Embed<#v, #f, E, D>)
    }

    pub fn params(&self) -> usize {
        shape::params(&[self.vocab, self.features])
    }

    pub fn doc(&self) -> String {
        format!("`Embed({}, {})`", self.vocab, self.features)
    }
}
