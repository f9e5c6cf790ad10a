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
    params: &["num_embeddings", "features", "name", "embedding_init"],
    required: &["num_embeddings", "features"],
    example: "Embed(num_embeddings = 1000, features = 32)(tokens)",
};

/// A checked `Embed`.
pub struct Embed {
    vocab: usize,
    features: usize,
    /// `embedding_init`.
    pub fills: Vec<crate::init::Fill>,
}

/// `[seq]` token ids → `[seq, features]`.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Embed, Vec<usize>)> {
    let vocab = b.req(cx, "num_embeddings", |a| a.positive("`num_embeddings`"));
    let features = b.req(cx, "features", |a| a.positive("`features`"));
    let (vocab, features) = (vocab?, features?);
    let mut out = site.shape.to_vec();
    out.push(features);
    // Flax's `(num_embeddings, features)` table, its layout here too:
    // fans by Flax's default axes.
    let mut fills = Vec::new();
    let table = crate::init::Target::Kernel {
        fan_in: vocab,
        fan_out: features,
        out_first: false,
    };
    crate::init::read(
        b,
        cx,
        "embedding_init",
        table,
        quote!(embedding),
        &mut fills,
    );
    let embed = Embed {
        vocab,
        features,
        fills,
    };
    Some((embed, out))
}

impl Embed {
    /// The table's rows.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The table's columns.
    pub fn features(&self) -> usize {
        self.features
    }

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
