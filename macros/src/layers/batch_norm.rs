//! `BatchNorm(momentum = 0.99, epsilon = 1e-5)`: Flax's `nn.BatchNorm`
//! per feature of `[f]` or per channel of `[c, h, w]`.

use super::Site;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &[
        "momentum",
        "epsilon",
        "axis",
        "name",
        "scale_init",
        "bias_init",
    ],
    required: &[],
    example: "BatchNorm()(x)",
};

/// A checked `BatchNorm`.
pub struct BatchNorm {
    features: usize,
    momentum: f64,
    epsilon: f64,
    /// `scale_init`, `bias_init`.
    pub fills: Vec<crate::init::Fill>,
}

/// Unchanged shape; statistics per channel (axis -3 of an image).
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(BatchNorm, Vec<usize>)> {
    // Flax's defaults, which differ from dfdx's: momentum 0.99, epsilon 1e-5.
    let epsilon = super::epsilon(b, cx, 1e-5);
    let momentum = b.or(cx, "momentum", 0.99, |a| a.float("`momentum`")).and_then(|m| {
        if (0.0..=1.0).contains(&m) {
            Some(m)
        } else {
            if let Some(a) = b.get("momentum") {
                cx.error_at(a, format!("`momentum` is the weight of the old running statistics and must be in [0, 1], but is {m}"));
            }
            None
        }
    });
    let rank = site.shape.len();
    if rank != 1 && rank != 3 {
        site.wrong_input(
            cx,
            "BatchNorm",
            "[features] or [channels, height, width]",
            "",
        );
        return None;
    }
    // `axis` may only name the feature axis: Flax's NHWC default `-1` is
    // the width of an NCHW image.
    if let Some(a) = b.get("axis") {
        let want = -(rank as i64);
        match cx.take(a.int("`axis`")) {
            Some(n) if n == want => {}
            Some(n) if rank == 3 => {
                cx.error_at(a, format!("on a [channels, height, width] value the channel axis is -3, not {n} (Flax's `-1` is the channel axis of NHWC images, and the width here)\nhelp: write `axis = -3`, or leave `axis` out"));
                return None;
            }
            Some(n) => {
                cx.error_at(a, format!("`BatchNorm` normalises per feature, axis -1 of a [features] value, not {n}"));
                return None;
            }
            None => return None,
        }
    }
    let bn = BatchNorm {
        features: site.shape[0],
        momentum: momentum?,
        epsilon: epsilon?,
        fills: crate::init::norm(b, cx, quote!(scale), Some(quote!(bias))),
    };
    Some((bn, site.shape.to_vec()))
}

impl BatchNorm {
    pub fn ty(&self) -> TokenStream {
        let (l, f) = (paths::layers(), lit(self.features));
        quote!(#l::BatchNorm<#f, E, D>)
    }

    pub fn init(&self) -> Vec<TokenStream> {
        let (m, e) = (self.momentum, self.epsilon);
        vec![quote!(__f.momentum = #m;), quote!(__f.epsilon = #e;)]
    }

    pub fn params(&self) -> usize {
        self.features.saturating_mul(2)
    }
}
