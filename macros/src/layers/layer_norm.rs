//! `LayerNorm(epsilon = 1e-6)`: Flax's `nn.LayerNorm` over the last axis
//! of `[f]` or `[seq, f]` (the runtime's `layers::LayerNorm`).

use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["epsilon", "name", "scale_init", "bias_init"],
    required: &[],
    example: "LayerNorm()(x)",
};

/// A checked `LayerNorm`.
pub struct LayerNorm {
    features: usize,
    epsilon: f64,
    /// `scale_init`, `bias_init` (dfdx's `gamma` and `beta`).
    pub fills: Vec<crate::init::Fill>,
}

/// Unchanged shape.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(LayerNorm, Vec<usize>)> {
    let epsilon = super::epsilon(b, cx, 1e-6);
    let features = last_axis(site, cx, "LayerNorm")?;
    Some((
        LayerNorm {
            features,
            epsilon: epsilon?,
            fills: crate::init::norm(b, cx, quote!(gamma), Some(quote!(beta))),
        },
        site.shape.to_vec(),
    ))
}

/// The feature axis of a norm over the last axis of `[f]` or `[seq, f]`.
pub fn last_axis(site: &Site, cx: &mut Ctxt, what: &str) -> Option<usize> {
    match site.shape {
        [.., f] if site.shape.len() <= 2 => Some(*f),
        _ => {
            let help = if site.shape.len() == 3 {
                "\nhelp: on images, `GroupNorm` or `BatchNorm` normalise per channel"
            } else {
                ""
            };
            site.wrong_input(cx, what, "[features] or [seq, features]", help);
            None
        }
    }
}

impl LayerNorm {
    pub fn ty(&self) -> TokenStream {
        let (l, f) = (paths::layers(), lit(self.features));
        quote!(#l::LayerNorm<#f, E, D>)
    }

    pub fn init(&self) -> Vec<TokenStream> {
        let e = self.epsilon;
        vec![quote!(__f.epsilon = #e;)]
    }

    pub fn params(&self) -> usize {
        self.features.saturating_mul(2)
    }
}
