//! `Dense(features, use_bias = true)`: Flax's `nn.Dense` on the last axis.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::rules::Site;
use crate::shape;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["features", "use_bias", "name"],
    required: &["features"],
    example: "Dense(features = 10)(x)",
};

/// A checked `Dense`.
pub struct Dense {
    inputs: usize,
    features: usize,
    use_bias: bool,
}

/// `[.., f]` → `[.., features]` on `[f]` or `[seq, f]`.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Dense, Vec<usize>)> {
    let features = b.req(cx, "features", |a| a.positive("`features`"));
    let use_bias = b.or(cx, "use_bias", true, |a| a.boolean("`use_bias`"));
    if site.shape.len() > 2 {
        let x = site.input.trim_matches('`');
        site.wrong_input(
            cx,
            "Dense",
            "[features] (or [seq, features])",
            &format!("\nhelp: call `flatten({x})` first"),
        );
        return None;
    }
    let (features, use_bias) = (features?, use_bias?);
    let mut out = site.shape.to_vec();
    let inputs = std::mem::replace(out.last_mut()?, features);
    Some((
        Dense {
            inputs,
            features,
            use_bias,
        },
        out,
    ))
}

impl Dense {
    /// Its `FlaxKind`; `flattened` is the `[c, h, w]` map its input is a
    /// flatten of (Flax's rows then run over (h, w, c)).
    pub fn flax_kind(&self, flattened: Option<[usize; 3]>) -> TokenStream {
        let fl = paths::flax();
        let bias = self.use_bias;
        let flattened = match flattened {
            Some([c, h, w]) => {
                let (c, h, w) = (lit(c), lit(h), lit(w));
                quote!(::core::option::Option::Some([#c, #h, #w]))
            }
            None => quote!(::core::option::Option::None),
        };
        quote!(#fl::FlaxKind::Dense { bias: #bias, flattened: #flattened })
    }

    pub fn ty(&self) -> TokenStream {
        let (l, i, o) = (paths::layers(), lit(self.inputs), lit(self.features));
        // flaxen's own layers: Flax's lecun_normal init, which dfdx's
        // `Linear` lacks, with Flax's keys and layout.
        if self.use_bias {
            quote!(#l::Dense<#i, #o, E, D>)
        } else {
            quote!(#l::UnbiasedDense<#i, #o, E, D>)
        }
    }

    pub fn params(&self) -> usize {
        shape::params(&[self.inputs, self.features]).saturating_add(if self.use_bias {
            self.features
        } else {
            0
        })
    }

    pub fn doc(&self) -> String {
        let bias = if self.use_bias { "" } else { ", no bias" };
        format!("`Dense({}{bias})`", self.features)
    }
}
