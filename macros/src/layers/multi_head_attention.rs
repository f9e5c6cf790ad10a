//! `MultiHeadDotProductAttention(num_heads, qkv_features, out_features,
//! dropout_rate = 0.0)(q, kv, mask = m)`: Flax's
//! `nn.MultiHeadDotProductAttention`, queries from `q` `[Q, fq]`, keys and
//! values from `kv` `[K, fkv]` (`q` itself when left out), a `[Q, K]` mask.
//! [`Attention`] is shared with `SelfAttention`.

use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::shape::{self, show};
use proc_macro2::TokenStream;
use quote::quote;

/// The arguments of both attention layers, in Flax's order.
pub const PARAMS: &[&str] = &[
    "num_heads",
    "qkv_features",
    "out_features",
    "dropout_rate",
    "name",
    "broadcast_dropout",
    "use_bias",
    "kernel_init",
    "bias_init",
];

pub const SIG: Sig = Sig {
    params: PARAMS,
    required: &["num_heads"],
    example: "MultiHeadDotProductAttention(num_heads = 4)(q, kv, mask = m)",
};

/// A checked attention layer.
pub struct Attention {
    q_features: usize,
    kv_features: usize,
    qkv: usize,
    heads: usize,
    out: usize,
    dropout: f64,
    broadcast_dropout: bool,
    use_bias: bool,
    /// `kernel_init`, `bias_init`, on each projection.
    pub fills: Vec<crate::init::Fill>,
}

/// `[Q, fq]` (and `[K, fkv]`) → `[Q, out_features]`.
pub fn check(what: &str, b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Attention, Vec<usize>)> {
    let heads = b.req(cx, "num_heads", |a| a.positive("`num_heads`"));
    let fq = site.shape.last().copied().unwrap_or(0);
    // Flax's defaults: both from the queries' features.
    let qkv = b.or(cx, "qkv_features", fq, |a| a.positive("`qkv_features`"));
    let out = b.or(cx, "out_features", fq, |a| a.positive("`out_features`"));
    let dropout = b.or(cx, "dropout_rate", 0.0, |a| a.float("`dropout_rate`")).and_then(|r| {
        if (0.0..1.0).contains(&r) {
            Some(r)
        } else {
            if let Some(a) = b.get("dropout_rate") {
                cx.error_at(a, format!("`dropout_rate` is the probability of dropping an attention weight and must be in [0, 1), but is {r}"));
            }
            None
        }
    });
    let broadcast_dropout = b.or(cx, "broadcast_dropout", true, |a| {
        a.boolean("`broadcast_dropout`")
    })?;
    let use_bias = b.or(cx, "use_bias", true, |a| a.boolean("`use_bias`"))?;
    let kv = site.extra.first().unwrap_or(&site.shape.to_vec()).clone();
    for (shape, which) in [(site.shape, "queries'"), (&kv[..], "keys'")] {
        if shape.len() != 2 {
            cx.error_at(site.call, format!("`{what}` needs [seq, features] inputs, but the {which} input has shape {} here", show(shape)));
            return None;
        }
    }
    let (heads, qkv, out, dropout) = (heads?, qkv?, out?, dropout?);
    if !qkv.is_multiple_of(heads) {
        cx.error_at(site.call, format!("`{what}` splits its {qkv} qkv features into {heads} heads, which needs {qkv} divisible by {heads}"));
        return None;
    }
    if let Some(m) = &site.mask {
        let want = [site.shape[0], kv[0]];
        if m[..] != want[..] {
            cx.error_at(
                site.call,
                format!(
                    "`{what}`'s mask must be [queries, keys] = {}, but it has shape {} here",
                    show(&want),
                    show(m)
                ),
            );
            return None;
        }
    }
    // Flax's DenseGeneral kernels are `(in, heads, head_dim)` and
    // `(heads, head_dim, out)`, flattened to `(in, out)` before the
    // initialiser sees them: the fans are the projections' in and out.
    let mut fills = Vec::new();
    let projections = [
        (quote!(query), fq, qkv),
        (quote!(key), kv[1], qkv),
        (quote!(value), kv[1], qkv),
        (quote!(out), qkv, out),
    ];
    if let Some(init) = crate::init::get(b, cx, "kernel_init", false) {
        for (p, fan_in, fan_out) in &projections {
            let (fan_in, fan_out, out_first) = (*fan_in, *fan_out, true);
            let target = crate::init::Target::Kernel {
                fan_in,
                fan_out,
                out_first,
            };
            let path = quote!(#p.weight);
            fills.push(crate::init::Fill {
                path,
                init: init.clone(),
                target,
            });
        }
    }
    // Without biases, a `bias_init` is checked and unused, as in Flax.
    if let Some(init) = crate::init::get(b, cx, "bias_init", true).filter(|_| use_bias) {
        for (p, ..) in &projections {
            let (path, target) = (quote!(#p.bias), crate::init::Target::Vector);
            fills.push(crate::init::Fill {
                path,
                init: init.clone(),
                target,
            });
        }
    }
    let layer = Attention {
        q_features: fq,
        kv_features: kv[1],
        qkv,
        heads,
        out,
        dropout,
        broadcast_dropout,
        use_bias,
        fills,
    };
    Some((layer, vec![site.shape[0], out]))
}

impl Attention {
    /// Its `FlaxKind`.
    pub fn flax_kind(&self) -> TokenStream {
        let (fl, heads, bias) = (paths::flax(), lit(self.heads), self.use_bias);
        quote!(#fl::FlaxKind::Attention { heads: #heads, bias: #bias })
    }

    /// The attention weights' dropout rate (0 when off).
    pub fn dropout_rate(&self) -> f64 {
        self.dropout
    }

    pub fn ty(&self) -> TokenStream {
        let l = paths::layers();
        let (fq, fkv) = (lit(self.q_features), lit(self.kv_features));
        let (q, h, o) = (lit(self.qkv), lit(self.heads), lit(self.out));
        match self.use_bias {
            true => quote!(#l::MultiHeadAttention<#fq, #fkv, #q, #h, #o, E, D>),
            false => quote!(#l::MultiHeadAttention<#fq, #fkv, #q, #h, #o, E, D, #l::Unbiased>),
        }
    }

    pub fn init(&self) -> Vec<TokenStream> {
        let (r, b) = (self.dropout, self.broadcast_dropout);
        let mut stmts = Vec::new();
        if r > 0.0 {
            stmts.push(quote!(__f.dropout = #r;));
        }
        if !b {
            stmts.push(quote!(__f.broadcast_dropout = false;));
        }
        stmts
    }

    pub fn params(&self) -> usize {
        let bias = |n: usize| if self.use_bias { n } else { 0 };
        let proj = |f: usize| shape::params(&[f, self.qkv]).saturating_add(bias(self.qkv));
        proj(self.q_features)
            .saturating_add(proj(self.kv_features).saturating_mul(2))
            .saturating_add(shape::params(&[self.qkv, self.out]))
            .saturating_add(bias(self.out))
    }

    pub fn doc(&self, what: &str) -> String {
        let bias = if self.use_bias { "" } else { ", no biases" };
        format!(
            "`{what}({} heads, {} qkv features{bias})`",
            self.heads, self.qkv
        )
    }
}
