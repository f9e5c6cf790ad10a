//! `avg_pool` / `max_pool(x, window_shape, strides = 1, padding = VALID)`
//! on `[c, h, w]`.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::rules::{self, Site};
use crate::shape::{AxisPad, Window};
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["window_shape", "strides", "padding"],
    required: &["window_shape"],
    example: "NAME(x, window_shape = (2, 2), strides = (2, 2))",
};

/// A checked pooling.
pub struct Pool {
    avg: bool,
    channels: usize,
    window: (usize, usize),
    strides: (usize, usize),
    hw: (usize, usize),
    win: [Window; 2],
}

pub fn check(avg: bool, b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(Pool, Vec<usize>)> {
    let what = if avg { "avg_pool" } else { "max_pool" };
    let window = b.req(cx, "window_shape", |a| a.pair("a window size"));
    let strides = b.or(cx, "strides", (1, 1), |a| a.pair("a stride"));
    let padding = b.or(cx, "padding", (AxisPad::Valid, AxisPad::Valid), |a| {
        a.padding()
    });
    if site.shape.len() != 3 {
        site.needs_image(cx, what);
        return None;
    }
    let (window, strides, padding) = (window?, strides?, padding?);
    let win = site.windows(cx, what, window, strides, padding)?;
    let s = site.shape;
    let out = vec![s[0], win[0].out, win[1].out];
    Some((
        Pool {
            avg,
            channels: s[0],
            window,
            strides,
            hw: (s[1], s[2]),
            win,
        },
        out,
    ))
}

impl Pool {
    pub fn ty(&self) -> TokenStream {
        let l = paths::layers();
        let ty = if self.avg {
            quote!(AvgPool2D)
        } else {
            quote!(MaxPool2D)
        };
        let c = lit(self.channels);
        let g = rules::window_generics(self.window, self.strides, &self.win, self.hw);
        quote!(#l::#ty<#c, #g>)
    }

    /// `avg_pool` or `max_pool`.
    pub fn word(&self) -> &'static str {
        if self.avg {
            "avg_pool"
        } else {
            "max_pool"
        }
    }

    pub fn doc(&self) -> String {
        let what = self.word();
        format!(
            "`{what}` {}x{}, strides {}x{}",
            self.window.0, self.window.1, self.strides.0, self.strides.1
        )
    }
}
