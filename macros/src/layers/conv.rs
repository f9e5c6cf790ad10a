//! `Conv(features, kernel_size, strides = 1, padding = SAME, input_dilation
//! = 1, kernel_dilation = 1, feature_group_count = 1, use_bias = true)`:
//! Flax's `nn.Conv` on `[channels, height, width]`, grouped (depthwise when
//! `feature_group_count` is the input's channels) and dilated.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::rules::{self, Site};
use crate::shape::{self, show, AxisPad, Window};
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &[
        "features",
        "kernel_size",
        "strides",
        "padding",
        "input_dilation",
        "kernel_dilation",
        "feature_group_count",
        "use_bias",
        "name",
        "kernel_init",
        "bias_init",
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
    dilation: (usize, usize),
    groups: usize,
    hw: (usize, usize),
    win: [Window; 2],
    use_bias: bool,
    /// `kernel_init`, `bias_init`.
    pub fills: Vec<crate::init::Fill>,
}

/// `[c, h, w]` → `[features, h', w']`, `h'` and `w'` those of the dilated
/// kernel `(k - 1) * d + 1`.
pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Conv, Vec<usize>)> {
    let features = b.req(cx, "features", |a| a.positive("`features`"));
    let kernel = b.req(cx, "kernel_size", |a| a.pair("a kernel size"));
    let strides = b.or(cx, "strides", (1, 1), |a| a.pair("a stride"));
    let padding = b.or(cx, "padding", (AxisPad::Same, AxisPad::Same), |a| {
        a.padding()
    });
    let input_dilation = b.or(cx, "input_dilation", (1, 1), |a| a.pair("`input_dilation`"));
    let dilation = b.or(cx, "kernel_dilation", (1, 1), |a| {
        a.pair("`kernel_dilation`")
    });
    let groups = b.or(cx, "feature_group_count", 1, |a| {
        a.positive("`feature_group_count`")
    });
    let use_bias = b.or(cx, "use_bias", true, |a| a.boolean("`use_bias`"));
    if let (Some(a), Some(d)) = (b.get("input_dilation"), input_dilation) {
        if d != (1, 1) {
            cx.error_at(a, "flaxen's `Conv` has no `input_dilation`: a convolution over a stride-dilated input is a transposed convolution\nhelp: write `ConvTranspose(features, kernel_size, strides = ..)`, or drop `input_dilation`");
        }
    }
    if site.shape.len() != 3 {
        site.needs_image(cx, "Conv");
        return None;
    }
    let (features, kernel, strides, padding, dilation, groups, use_bias) = (
        features?, kernel?, strides?, padding?, dilation?, groups?, use_bias?,
    );
    if input_dilation? != (1, 1) {
        return None;
    }
    let channels = site.shape[0];
    if groups != 1 {
        let at = arg_or_call(b, site, "feature_group_count");
        if !channels.is_multiple_of(groups) {
            cx.error_at(at, format!(
                "`feature_group_count = {groups}` must divide the input's channels, but {} has {channels} channels (shape {})\nhelp: the groups split the channels evenly; depthwise is `feature_group_count = {channels}`",
                site.input, show(site.shape)
            ));
            return None;
        }
        if !features.is_multiple_of(groups) {
            cx.error_at(at, format!(
                "`feature_group_count = {groups}` must divide `features = {features}`: each group makes `features / feature_group_count` of them\nhelp: use a multiple of {groups} for `features`"
            ));
            return None;
        }
    }
    let extent = (
        shape::dilate(kernel.0, dilation.0),
        shape::dilate(kernel.1, dilation.1),
    );
    let (Some(eh), Some(ew)) = extent else {
        cx.error_at(
            arg_or_call(b, site, "kernel_dilation"),
            "the dilated kernel is too large",
        );
        return None;
    };
    if dilation != (1, 1) {
        let fits = |size, k, s, p| shape::window(size, k, s, p).is_ok();
        let h_fits = fits(site.shape[1], eh, strides.0, padding.0);
        if !h_fits || !fits(site.shape[2], ew, strides.1, padding.1) {
            cx.error_at(arg_or_call(b, site, "kernel_dilation"), format!(
                "the {}x{} kernel dilated by ({}, {}) spans {eh}x{ew}, which does not fit: {} has shape {} here\nhelp: use a smaller `kernel_dilation` or kernel, `padding = SAME`, or a larger input",
                kernel.0, kernel.1, dilation.0, dilation.1, site.input, show(site.shape)
            ));
            return None;
        }
    }
    let win = site.windows(cx, "Conv", (eh, ew), strides, padding)?;
    let out = vec![features, win[0].out, win[1].out];
    let conv = Conv {
        channels,
        features,
        kernel,
        strides,
        dilation,
        groups,
        hw: (site.shape[1], site.shape[2]),
        win,
        use_bias,
        // Flax's fans count the receptive field on both sides, and one
        // group's inputs.
        fills: crate::init::weight_and_bias(
            b,
            cx,
            (
                kernel.0 * kernel.1 * (channels / groups),
                kernel.0 * kernel.1 * features,
            ),
            use_bias,
        ),
    };
    Some((conv, out))
}

/// Where an error about argument `name` points: the argument, or the call
/// when it was not given.
pub(super) fn arg_or_call(b: &Bound, site: &Site, name: &str) -> TokenStream {
    match b.get(name) {
        Some(a) => quote!(#a),
        None => site.call.clone(),
    }
}

impl Conv {
    /// Its `FlaxKind`.
    pub fn flax_kind(&self) -> TokenStream {
        let (fl, bias) = (paths::flax(), self.use_bias);
        quote!(#fl::FlaxKind::Conv { bias: #bias })
    }

    pub fn ty(&self) -> TokenStream {
        let (l, c, o) = (paths::layers(), lit(self.channels), lit(self.features));
        if self.groups == 1 && self.dilation == (1, 1) {
            let g = rules::window_generics(self.kernel, self.strides, &self.win, self.hw);
            return if self.use_bias {
                quote!(#l::Conv2D<#c, #o, #g, E, D>)
            } else {
                quote!(#l::UnbiasedConv2D<#c, #o, #g, E, D>)
            };
        }
        // `ConvGeneral2D<C, I, O, KH, KW, DH, DW, SH, SW, PT, PB, PL, PR, H, W, OH, OW>`.
        let i = lit(self.channels / self.groups);
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
        let g =
            quote!(#c, #i, #o, #kh, #kw, #dh, #dw, #sh, #sw, #pt, #pb, #pl, #pr, #h, #w, #oh, #ow);
        if self.use_bias {
            quote!(#l::ConvGeneral2D<#g, E, D>)
        } else {
            quote!(#l::UnbiasedConvGeneral2D<#g, E, D>)
        }
    }

    pub fn params(&self) -> usize {
        let per_group = self.channels / self.groups;
        let w = shape::params(&[self.features, per_group, self.kernel.0, self.kernel.1]);
        w.saturating_add(if self.use_bias { self.features } else { 0 })
    }

    pub fn doc(&self) -> String {
        let bias = if self.use_bias { "" } else { ", no bias" };
        let groups = match self.groups {
            1 => String::new(),
            g => format!(", {g} groups"),
        };
        let dilation = match self.dilation {
            (1, 1) => String::new(),
            (dh, dw) => format!(", dilation {dh}x{dw}"),
        };
        format!(
            "`Conv({}, {}x{}, strides {}x{}{dilation}{groups}{bias})`",
            self.features, self.kernel.0, self.kernel.1, self.strides.0, self.strides.1
        )
    }
}
