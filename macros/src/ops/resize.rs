//! `resize(x, (c, h, w), method = "nearest", antialias = true)`:
//! `jax.image.resize` of a `[c, h, w]` image to the per-example shape
//! given, keeping the channels.

use crate::args::{Bound, Sig};
use crate::ctxt::Ctxt;
use crate::gen::lit;
use crate::paths;
use crate::rules::Site;
use crate::shape::show;
use crate::symbol;
use crate::value::{ArgVal, Val};
use proc_macro2::TokenStream;
use quote::quote;

pub const SIG: Sig = Sig {
    params: &["shape", "method", "antialias"],
    required: &["shape", "method"],
    example: "resize(x, (c, 2 * h, 2 * w), method = \"nearest\")",
};

/// jax's method names and aliases, with the runtime's marker type.
const METHODS: &[(&str, &str)] = &[
    ("nearest", "Nearest"),
    ("linear", "Linear"),
    ("bilinear", "Linear"),
    ("trilinear", "Linear"),
    ("triangle", "Linear"),
    ("cubic", "Cubic"),
    ("bicubic", "Cubic"),
    ("tricubic", "Cubic"),
    ("lanczos3", "Lanczos3"),
    ("lanczos5", "Lanczos5"),
];

const METHOD_HELP: &str = "help: the methods are jax.image.resize's: \"nearest\", \"linear\" (\"bilinear\"), \"cubic\" (\"bicubic\"), \"lanczos3\", \"lanczos5\"";

/// Whether a lowercase bare word is a method name, so that `method =
/// nearest` reads as `method = "nearest"` rather than as a variable.
pub fn is_method_word(word: &str) -> bool {
    METHODS.iter().any(|(m, _)| *m == word)
}

/// A checked resize.
pub struct Resize {
    /// The runtime's method type (`Nearest`, `Linear`, ..).
    method: &'static str,
    /// jax's spelling, for the docs.
    name: String,
    antialias: bool,
    chw: [usize; 3],
    out: [usize; 2],
}

fn method(a: &ArgVal) -> syn::Result<(&'static str, String)> {
    let word = match &a.val {
        Val::Str(s) | Val::Word(s) => s.to_lowercase(),
        other => {
            return Err(syn::Error::new_spanned(
                &a.tokens,
                format!(
                "`method` is a name such as \"nearest\" or \"bilinear\", but is {}\n{METHOD_HELP}",
                other.kind()
            ),
            ))
        }
    };
    if let Some((_, ty)) = METHODS.iter().find(|(m, _)| *m == word) {
        return Ok((ty, word));
    }
    let names: Vec<&str> = METHODS.iter().map(|(m, _)| *m).collect();
    let mut msg = format!("unknown resize method \"{word}\"");
    match word.as_str() {
        "area" | "box" | "antialias" => msg.push_str(
            "; jax.image.resize has no such method: downsampling with \"linear\" already averages (its default `antialias = true`)",
        ),
        _ => {
            if let Some(s) = symbol::nearest(&word, &names) {
                msg.push_str(&format!("; did you mean \"{s}\"?"));
            }
        }
    }
    Err(syn::Error::new_spanned(
        &a.tokens,
        format!("{msg}\n{METHOD_HELP}"),
    ))
}

/// The target shape `(c, h, w)`: three sizes of at least 1.
fn target(a: &ArgVal, site: &Site) -> syn::Result<[usize; 3]> {
    let err = |msg: String| syn::Error::new_spanned(&a.tokens, msg);
    let items = a.val.elems().unwrap_or_else(|| vec![a.val.clone()]);
    if items.len() != 3 {
        let help = if items.len() == 4 {
            "; the batch axis is implicit, so leave it out (Flax's `(b, h, w, c)` is `(c, h, w)` in flaxen's NCHW layout)"
        } else {
            ""
        };
        return Err(err(format!(
            "`resize` takes the per-example output shape `(channels, height, width)`, 3 sizes, but {} are given{help}",
            items.len()
        )));
    }
    let mut dims = [0; 3];
    for (d, v) in dims.iter_mut().zip(&items) {
        *d = match v {
            Val::Int(n) if *n >= 1 => usize::try_from(*n)
                .map_err(|_| err("a size of `resize` must fit in `usize`".into()))?,
            Val::Int(n) => {
                return Err(err(format!(
                    "the sizes of `resize` must be at least 1, but one is {n}"
                )))
            }
            other => {
                return Err(err(format!(
                    "the sizes of `resize` are integers known when the macro expands (numbers, block parameters, `x.shape[-1] * 2`), but one is {}",
                    other.describe()
                )))
            }
        };
    }
    let c = site.shape[0];
    if dims[0] != c {
        let nhwc = dims[2] == c;
        let help = if nhwc {
            format!("\nhelp: this looks like Flax's NHWC `(height, width, channels)`; flaxen's layout is NCHW: write `({c}, {}, {})`", dims[0], dims[1])
        } else {
            format!("\nhelp: write `({c}, {}, {})`; to change the number of channels, follow with `Conv(features, (1, 1))`", dims[1], dims[2])
        };
        return Err(err(format!(
            "`resize` keeps the channels: {} has {c} channels (shape {}), but the output shape {} has {}; flaxen does not interpolate across channels{help}",
            site.input,
            show(site.shape),
            show(&dims),
            dims[0]
        )));
    }
    Ok(dims)
}

pub fn check(b: &Bound, site: &Site, cx: &mut Ctxt) -> Option<(super::Op, Vec<usize>)> {
    let method = b.req(cx, "method", method);
    let antialias = b.or(cx, "antialias", true, |a| a.boolean("`antialias`"));
    if site.shape.len() != 3 {
        site.needs_image(cx, "resize");
        return None;
    }
    let dims = b.req(cx, "shape", |a| target(a, site));
    let ((ty, name), antialias, dims) = (method?, antialias?, dims?);
    let s = site.shape;
    Some((
        super::Op::Resize(Resize {
            method: ty,
            name,
            antialias,
            chw: [s[0], s[1], s[2]],
            out: [dims[1], dims[2]],
        }),
        dims.to_vec(),
    ))
}

impl Resize {
    pub fn ty(&self) -> TokenStream {
        let l = paths::layers();
        let [c, h, w] = self.chw.map(lit);
        let [oh, ow] = self.out.map(lit);
        let m = syn::Ident::new(self.method, proc_macro2::Span::call_site());
        let aa = self.antialias;
        quote!(#l::Resize2D<#c, #h, #w, #oh, #ow, #l::resize::#m, #aa>)
    }

    pub fn doc(&self) -> String {
        let [_, h, w] = self.chw;
        let [oh, ow] = self.out;
        let aa = if self.antialias || self.method == "Nearest" {
            ""
        } else {
            ", no antialias"
        };
        format!("`resize` {h}x{w} to {oh}x{ow}, \"{}\"{aa}", self.name)
    }
}
