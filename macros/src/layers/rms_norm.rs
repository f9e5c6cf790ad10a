//! `RMSNorm(epsilon = 1e-6)`: Flax's `nn.RMSNorm` over the last axis of
//! `[f]` or `[seq, f]`.

use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["epsilon", "name", "scale_init"],
    required: &[],
    example: "RMSNorm()(x)",
};

/// A checked `RMSNorm`.
pub struct RmsNorm {
    features: usize,
    epsilon: f64,
    /// `scale_init`.
    pub fills: Vec<crate::init::Fill>,
}

/// Unchanged shape.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(RmsNorm, Vec<usize>)> {
    let epsilon = super::epsilon(b, cx, 1e-6);
    let features = super::layer_norm::last_axis(site, cx, "RMSNorm")?;
    Some((
        RmsNorm {
            features,
            epsilon: epsilon?,
            fills: crate::init::norm(b, cx, quote!(scale), None),
        },
        site.shape.to_vec(),
    ))
}

impl RmsNorm {
    pub fn ty(&self) -> TokenStream {
        let (l, f) = (paths::layers(), lit(self.features));
        quote!(#l::RmsNorm<#f, E, D>)
    }

    pub fn init(&self) -> Vec<TokenStream> {
        let e = self.epsilon;
        vec![quote!(__f.epsilon = #e;)]
    }

    pub fn params(&self) -> usize {
        self.features
    }
}
