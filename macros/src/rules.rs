//! Shape rules shared by several layers and ops: the call site (input
//! shape and messages) and sliding windows.

use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::shape::{self, show, AxisPad, Window};
use proc_macro2::TokenStream;
use quote::quote;

/// Where a layer or op is called: for shape rules and messages.
pub struct Site<'a> {
    /// The per-example shape of the (first) input.
    pub shape: &'a [usize],
    /// How messages name the input (`` `x` ``).
    pub input: String,
    /// The whole call, where errors point.
    pub call: &'a TokenStream,
    /// The shapes of further positional inputs (cross-attention's `kv`).
    pub extra: Vec<Vec<usize>>,
    /// The shape of a `mask = ..` input.
    pub mask: Option<Vec<usize>>,
}

impl Site<'_> {
    /// Reports that the input has the wrong shape for `what`.
    pub fn wrong_input(&self, cx: &mut Ctxt, what: &str, want: &str, help: &str) {
        cx.error_at(
            self.call,
            format!(
                "`{what}` needs a {want} input, but {} has shape {} here{help}",
                self.input,
                show(self.shape)
            ),
        );
    }

    /// Reports that `what` needs an image input.
    pub fn needs_image(&self, cx: &mut Ctxt, what: &str) {
        let help = if self.shape.len() == 1 {
            "\nhelp: declare an image input as `Input<channels, height, width>`"
        } else {
            ""
        };
        self.wrong_input(cx, what, "[channels, height, width]", help);
    }

    /// A sliding window over both spatial axes (convolution or pooling);
    /// an error at the call when it does not fit.
    pub fn windows(
        &self,
        cx: &mut Ctxt,
        what: &str,
        k: (usize, usize),
        st: (usize, usize),
        pad: (AxisPad, AxisPad),
    ) -> Option<[Window; 2]> {
        let s = self.shape;
        let axes = [
            (s[1], k.0, st.0, pad.0, "height"),
            (s[2], k.1, st.1, pad.1, "width"),
        ];
        let mut out = [Window {
            pad_lo: 0,
            pad_hi: 0,
            out: 0,
        }; 2];
        for (slot, (size, kk, ss, p, name)) in out.iter_mut().zip(axes) {
            match shape::window(size, kk, ss, p) {
                Ok(w) => *slot = w,
                Err(padded) => {
                    let padded = if p == AxisPad::Valid {
                        String::new()
                    } else {
                        format!(" (padded: {padded})")
                    };
                    cx.error_at(self.call, format!(
                        "`{what}` window {}x{} does not fit: {} has shape {} here, so its {name} is {size}{padded}\nhelp: use a smaller window, `padding = SAME`, or a larger input",
                        k.0, k.1, self.input, show(s)
                    ));
                    return None;
                }
            }
        }
        Some(out)
    }
}

/// The const generics shared by the conv and pool modules: kernel,
/// strides, padding, input and output sizes.
pub fn window_generics(
    k: (usize, usize),
    st: (usize, usize),
    win: &[Window; 2],
    hw: (usize, usize),
) -> TokenStream {
    let (kh, kw, sh, sw) = (lit(k.0), lit(k.1), lit(st.0), lit(st.1));
    let (pt, pb, pl, pr) = (
        lit(win[0].pad_lo),
        lit(win[0].pad_hi),
        lit(win[1].pad_lo),
        lit(win[1].pad_hi),
    );
    let (h, w, oh, ow) = (lit(hw.0), lit(hw.1), lit(win[0].out), lit(win[1].out));
    quote!(#kh, #kw, #sh, #sw, #pt, #pb, #pl, #pr, #h, #w, #oh, #ow)
}
