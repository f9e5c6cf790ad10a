//! `Dense(features, use_bias = true, axis = -1)`: Flax's `nn.Dense` on the
//! last axis of `[f]` or `[seq, f]`; with `axis = -3`, on the channels of a
//! `[c, h, w]` map, which is what Flax's `Dense` on an NHWC map computes
//! (a 1x1 convolution, Flax's `(in, out)` kernel in checkpoints).

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::init::{self, Fill};
use crate::paths;
use crate::rules::Site;
use crate::shape;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &[
        "features",
        "use_bias",
        "name",
        "axis",
        "kernel_init",
        "bias_init",
    ],
    required: &["features"],
    example: "Dense(features = 10)(x)",
};

/// A checked `Dense`.
pub struct Dense {
    inputs: usize,
    features: usize,
    use_bias: bool,
    /// `axis = -3` on a `[c, h, w]` map: its height and width.
    on_channels: Option<(usize, usize)>,
    /// `kernel_init`, `bias_init`.
    pub fills: Vec<Fill>,
}

/// `[.., f]` → `[.., features]` on `[f]` or `[seq, f]`.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Dense, Vec<usize>)> {
    let features = b.req(cx, "features", |a| a.positive("`features`"));
    let use_bias = b.or(cx, "use_bias", true, |a| a.boolean("`use_bias`"));
    let axis = b.or(cx, "axis", -1, |a| a.int("`axis`"))?;
    // The input's shape is checked before the arguments are unwrapped: a
    // wrong size and a wrong input are two mistakes, both reported.
    let on_channels = match (site.shape, axis) {
        (&[_, h, w], -3) => Some((h, w)),
        ([_, _, _], -1) => {
            let x = site.input.trim_matches('`');
            let n = features.map_or("..".to_string(), |f| f.to_string());
            site.wrong_input(
                cx,
                "Dense",
                "[features] (or [seq, features])",
                &format!("\nhelp: call `flatten({x})` first, or write `Dense({n}, axis = -3)` to act on the channels, as Flax's `Dense` on an NHWC map does"),
            );
            return None;
        }
        (_, -1) if site.shape.len() <= 2 => None,
        _ => {
            if let Some(a) = b.get("axis") {
                cx.error_at(a, format!("`Dense` acts on the last axis (`axis = -1`) of `[features]` or `[seq, features]`, or on the channels (`axis = -3`) of a `[c, h, w]` map; the input has shape {} here", shape::show(site.shape)));
            }
            return None;
        }
    };
    let (features, use_bias) = (features?, use_bias?);
    if let Some((h, w)) = on_channels {
        let layer = Dense {
            inputs: site.shape[0],
            features,
            use_bias,
            on_channels,
            fills: init::weight_and_bias(b, cx, (site.shape[0], features), use_bias),
        };
        return Some((layer, vec![features, h, w]));
    }
    let mut out = site.shape.to_vec();
    let inputs = std::mem::replace(out.last_mut()?, features);
    Some((
        Dense {
            inputs,
            features,
            use_bias,
            on_channels: None,
            fills: init::weight_and_bias(b, cx, (inputs, features), use_bias),
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
        if self.on_channels.is_some() {
            return quote!(#fl::FlaxKind::DenseOnChannels { bias: #bias });
        }
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
        // On the channels: a 1x1 convolution (`Conv2D<C, O, 1, 1, stride
        // 1, no padding, H, W, H, W>`), whose init is Flax's Dense's
        // (lecun_normal over the `c` inputs, zero bias).
        if let Some((h, w)) = self.on_channels {
            let (h, w) = (lit(h), lit(w));
            let g = quote!(#i, #o, 1, 1, 1, 1, 0, 0, 0, 0, #h, #w, #h, #w);
            return match self.use_bias {
                true => quote!(#l::Conv2D<#g, E, D>),
                false => quote!(#l::UnbiasedConv2D<#g, E, D>),
            };
        }
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
        let axis = match self.on_channels {
            Some(_) => ", axis = -3",
            None => "",
        };
        format!("`Dense({}{bias}{axis})`", self.features)
    }
}
