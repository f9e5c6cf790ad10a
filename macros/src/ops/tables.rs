//! Constant tables built with the model: `sinusoidal_positions(x)`, the
//! fixed position embedding of Flax's lm1b / wmt / nlp_seq examples.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::paths;
use crate::rules::Site;
use crate::shape::show;
use proc_macro2::TokenStream;
use quote::quote;

pub const SINUSOIDAL: Sig = Sig {
    params: &["max_len", "min_scale", "max_scale"],
    required: &[],
    example: "x + sinusoidal_positions(x)",
};

/// `[s, f]` → the table's first `s` rows, `[s, f]`; `s <= max_len`.
pub fn sinusoidal(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let max_len = b.or(cx, "max_len", 2048, |a| a.positive("`max_len`"));
    let lo = b.or(cx, "min_scale", 1.0, |a| a.float("`min_scale`"));
    let hi = b.or(cx, "max_scale", 10000.0, |a| a.float("`max_scale`"));
    let (max_len, lo, hi) = (max_len?, lo?, hi?);
    match *site.shape {
        [s, f] if s <= max_len && f >= 4 && lo > 0.0 && hi > 0.0 => Some((
            super::Op::Sinusoidal {
                min_scale: lo,
                max_scale: hi,
            },
            vec![s, f],
        )),
        [s, _] if s > max_len => {
            cx.error_at(site.call, format!("`sinusoidal_positions` has {max_len} positions (`max_len`), but {} has {s} here", site.input));
            None
        }
        [_, f] if f < 4 => {
            cx.error_at(site.call, format!("`sinusoidal_positions` splits the features into sines and cosines of at least 2 frequencies each, which needs 4 or more features, but {} has {f}", site.input));
            None
        }
        [_, _] => {
            cx.error_at(
                site.call,
                "`min_scale` and `max_scale` are frequency scales greater than 0",
            );
            None
        }
        _ => {
            site.wrong_input(cx, "sinusoidal_positions", "[seq, features]", "");
            let _ = show;
            None
        }
    }
}

pub fn expand(min_scale: f64, max_scale: f64, x: TokenStream) -> TokenStream {
    let rt = paths::compact();
    quote!(#rt::sinusoidal_like(#x, #min_scale, #max_scale)?)
}
