//! `Conv(features, kernel_size, strides = 1, padding = SAME, use_bias =
//! true)`: Flax's `nn.Conv` on `[channels, height, width]`.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::rules::{self, Site};
use crate::shape::{self, AxisPad, Window};
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &[
        "features",
        "kernel_size",
        "strides",
        "padding",
        "use_bias",
        "name",
    ],
    required: &["features", "kernel_size"],
    example: "Conv(features = 32, kernel_size = (3, 3))(x)",
};

/// A checked `Conv`.
pub struct Conv {
    channels: usize,
    features: usize,
    kernel: (usize, usize),
    strides: (usize, usize),
    hw: (usize, usize),
    win: [Window; 2],
    use_bias: bool,
}

/// `[c, h, w]` → `[features, h', w']`.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Conv, Vec<usize>)> {
    let features = b.req(cx, "features", |a| a.positive("`features`"));
    let kernel = b.req(cx, "kernel_size", |a| a.pair("a kernel size"));
    let strides = b.or(cx, "strides", (1, 1), |a| a.pair("a stride"));
    let padding = b.or(cx, "padding", (AxisPad::Same, AxisPad::Same), |a| {
        a.padding()
    });
    let use_bias = b.or(cx, "use_bias", true, |a| a.boolean("`use_bias`"));
    if site.shape.len() != 3 {
        site.needs_image(cx, "Conv");
        return None;
    }
    let (features, kernel, strides, padding, use_bias) =
        (features?, kernel?, strides?, padding?, use_bias?);
    let win = site.windows(cx, "Conv", kernel, strides, padding)?;
    let out = vec![features, win[0].out, win[1].out];
    let conv = Conv {
        channels: site.shape[0],
        features,
        kernel,
        strides,
        hw: (site.shape[1], site.shape[2]),
        win,
        use_bias,
    };
    Some((conv, out))
}

impl Conv {
    pub fn ty(&self) -> TokenStream {
        let (l, c, o) = (paths::layers(), lit(self.channels), lit(self.features));
        let g = rules::window_generics(self.kernel, self.strides, &self.win, self.hw);
        if self.use_bias {
            quote!(#l::Conv2D<#c, #o, #g, E, D>)
        } else {
            quote!(#l::UnbiasedConv2D<#c, #o, #g, E, D>)
        }
    }

    pub fn params(&self) -> usize {
        let w = shape::params(&[self.features, self.channels, self.kernel.0, self.kernel.1]);
        w.saturating_add(if self.use_bias { self.features } else { 0 })
    }

    pub fn doc(&self) -> String {
        let bias = if self.use_bias { "" } else { ", no bias" };
        format!(
            "`Conv({}, {}x{}, strides {}x{}{bias})`",
            self.features, self.kernel.0, self.kernel.1, self.strides.0, self.strides.1
        )
    }
}
