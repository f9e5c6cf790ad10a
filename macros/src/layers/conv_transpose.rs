//! `ConvTranspose(features, kernel_size, strides = 1, padding = SAME,
//! kernel_dilation = 1, use_bias = true)`: Flax's `nn.ConvTranspose`
//! (`jax.lax.conv_transpose`) on `[channels, height, width]`. `SAME` gives
//! `size * stride`; `VALID` `size * stride + max(kernel - stride, 0)`;
//! explicit padding pads the stride-dilated input, as Flax passes it on.

use super::conv::arg_or_call;
use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::rules::Site;
use crate::shape::{self, show, AxisPad, Window};
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &[
        "features",
        "kernel_size",
        "strides",
        "padding",
        "kernel_dilation",
        "use_bias",
        "name",
        "kernel_init",
        "bias_init",
    ],
    required: &["features", "kernel_size"],
    example: "ConvTranspose(features = 32, kernel_size = (3, 3), strides = (2, 2))(x)",
};

/// A checked `ConvTranspose`.
pub struct ConvTranspose {
    channels: usize,
    features: usize,
    kernel: (usize, usize),
    strides: (usize, usize),
    dilation: (usize, usize),
    hw: (usize, usize),
    win: [Window; 2],
    use_bias: bool,
    /// `kernel_init`, `bias_init`.
    pub fills: Vec<crate::init::Fill>,
}

/// `[c, h, w]` → `[features, h', w']`.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(ConvTranspose, Vec<usize>)> {
    let features = b.req(cx, "features", |a| a.positive("`features`"));
    let kernel = b.req(cx, "kernel_size", |a| a.pair("a kernel size"));
    let strides = b.or(cx, "strides", (1, 1), |a| a.pair("a stride"));
    let padding = b.or(cx, "padding", (AxisPad::Same, AxisPad::Same), |a| {
        a.padding()
    });
    let dilation = b.or(cx, "kernel_dilation", (1, 1), |a| {
        a.pair("`kernel_dilation`")
    });
    let use_bias = b.or(cx, "use_bias", true, |a| a.boolean("`use_bias`"));
    if site.shape.len() != 3 {
        site.needs_image(cx, "ConvTranspose");
        return None;
    }
    let (features, kernel, strides, padding, dilation, use_bias) =
        (features?, kernel?, strides?, padding?, dilation?, use_bias?);
    let axes = [
        (site.shape[1], kernel.0, dilation.0, strides.0, padding.0),
        (site.shape[2], kernel.1, dilation.1, strides.1, padding.1),
    ];
    let mut win = [Window {
        pad_lo: 0,
        pad_hi: 0,
        out: 0,
    }; 2];
    for (slot, (size, k, d, s, p)) in win.iter_mut().zip(axes) {
        let fit = shape::dilate(k, d).map(|e| shape::transpose_window(size, e, s, p));
        match fit {
            Some(Ok(w)) => *slot = w,
            Some(Err(_)) | None => {
                let at = match (p, dilation) {
                    (AxisPad::Explicit(..), _) => arg_or_call(b, site, "padding"),
                    (_, (1, 1)) => site.call.clone(),
                    _ => arg_or_call(b, site, "kernel_dilation"),
                };
                cx.error_at(at, format!(
                    "`ConvTranspose` kernel {}x{} (dilated by ({}, {})) does not fit: {} has shape {} here, and its input dilated by the strides and padded is smaller than the kernel\nhelp: use more padding, `padding = SAME`, or a smaller kernel",
                    kernel.0, kernel.1, dilation.0, dilation.1, site.input, show(site.shape)
                ));
                return None;
            }
        }
    }
    let out = vec![features, win[0].out, win[1].out];
    let layer = ConvTranspose {
        channels: site.shape[0],
        features,
        kernel,
        strides,
        dilation,
        hw: (site.shape[1], site.shape[2]),
        win,
        use_bias,
        // Flax's `(kh, kw, in, out)` kernel: the receptive field on both
        // sides.
        fills: crate::init::weight_and_bias(
            b,
            cx,
            (
                kernel.0 * kernel.1 * site.shape[0],
                kernel.0 * kernel.1 * features,
            ),
            use_bias,
        ),
    };
    Some((layer, out))
}

impl ConvTranspose {
    /// Its `FlaxKind`: Flax's `ConvTranspose` kernel is HWIO as `Conv`'s.
    pub fn flax_kind(&self) -> TokenStream {
        let (fl, bias) = (paths::flax(), self.use_bias);
        quote!(#fl::FlaxKind::Conv { bias: #bias })
    }

    /// `ConvTranspose2D<C, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>`.
    pub fn ty(&self) -> TokenStream {
        let (l, c, o) = (paths::layers(), lit(self.channels), lit(self.features));
        let (kh, kw, dh, dw) = (
            lit(self.kernel.0),
            lit(self.kernel.1),
            lit(self.dilation.0),
            lit(self.dilation.1),
        );
        let (sh, sw) = (lit(self.strides.0), lit(self.strides.1));
        let [wh, ww] = &self.win;
        let (pt, pb, pl, pr) = (
            lit(wh.pad_lo),
            lit(wh.pad_hi),
            lit(ww.pad_lo),
            lit(ww.pad_hi),
        );
        let (h, w, oh, ow) = (lit(self.hw.0), lit(self.hw.1), lit(wh.out), lit(ww.out));
        let g = quote!(#c, #o, #kh, #kw, #dh, #dw, #sh, #sw, #pt, #pb, #pl, #pr, #h, #w, #oh, #ow);
        if self.use_bias {
            quote!(#l::ConvTranspose2D<#g, E, D>)
        } else {
            quote!(#l::UnbiasedConvTranspose2D<#g, E, D>)
        }
    }

    pub fn params(&self) -> usize {
        let w = shape::params(&[self.features, self.channels, self.kernel.0, self.kernel.1]);
        w.saturating_add(if self.use_bias { self.features } else { 0 })
    }

    pub fn doc(&self) -> String {
        let bias = if self.use_bias { "" } else { ", no bias" };
        format!(
            "`ConvTranspose({}, {}x{}, strides {}x{}{bias})`",
            self.features, self.kernel.0, self.kernel.1, self.strides.0, self.strides.1
        )
    }
}
