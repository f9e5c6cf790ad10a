//! Shape arithmetic: every size the macro computes comes from here.
//!
//! A dimension is either a number the macro knows ([`Dim::Known`]) or a
//! constant expression it cannot fold ([`Dim::Sym`]), which only arises from
//! a nested `#[compact]` block (`<Block as Compact>::OUT_0`). Known sizes are
//! checked here and produce a [`ShapeError`]; for symbolic ones the functions
//! return the condition that must hold, which the expansion turns into a
//! `const` assertion so rustc checks it instead.

use proc_macro2::TokenStream;
use quote::quote;
use std::fmt;

/// Path of the runtime support module, as generated code must spell it.
pub fn rt_compact() -> TokenStream {
    quote!(::flaxen::__private::flaxen_runtime::compact)
}

/// Path of the runtime's activations, as generated code must spell it.
pub fn rt_activations() -> TokenStream {
    quote!(::flaxen::__private::flaxen_runtime::activations)
}

/// One dimension of a per-example shape.
#[derive(Clone, Debug)]
pub enum Dim {
    /// A size the macro computed.
    Known(usize),
    /// A `usize` constant expression (from a nested block's consts) and a
    /// short text for messages.
    Sym(TokenStream, String),
}

impl Dim {
    /// The size, when the macro knows it.
    pub fn known(&self) -> Option<usize> {
        match self {
            Dim::Known(n) => Some(*n),
            Dim::Sym(..) => None,
        }
    }

    /// A `usize` expression for this dimension.
    pub fn expr(&self) -> TokenStream {
        match self {
            Dim::Known(n) => quote!(#n),
            Dim::Sym(t, _) => quote!((#t)),
        }
    }

    /// This dimension as a const-generic argument.
    pub fn generic(&self) -> TokenStream {
        match self {
            Dim::Known(n) => {
                let lit = proc_macro2::Literal::usize_unsuffixed(*n);
                quote!(#lit)
            }
            Dim::Sym(t, _) => quote!({ #t }),
        }
    }

    fn sym(tokens: TokenStream, text: String) -> Dim {
        Dim::Sym(tokens, text)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Sym(_, text) => f.write_str(text),
        }
    }
}

/// Formats a per-example shape the way messages show it: `[64, 7, 7]`.
pub fn show(shape: &[Dim]) -> String {
    let parts: Vec<String> = shape.iter().map(ToString::to_string).collect();
    format!("[{}]", parts.join(", "))
}

/// Padding of one spatial axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxisPad {
    /// XLA/Flax `SAME`: output size `ceil(size / stride)`.
    Same,
    /// No padding.
    Valid,
    /// Explicit `(low, high)` padding.
    Explicit(usize, usize),
}

/// A sliding window (convolution or pooling) along one axis.
#[derive(Clone, Debug)]
pub struct Window {
    /// Padding before the first element.
    pub pad_lo: Dim,
    /// Padding after the last element.
    pub pad_hi: Dim,
    /// Output size.
    pub out: Dim,
    /// For a symbolic input: a `bool` constant expression that must hold
    /// (the window fits in the padded input).
    pub requires: Option<TokenStream>,
}

/// Why a window does not fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// The padded input size along the axis.
    pub padded: usize,
}

/// XLA's `SAME` padding split: total padding so that the output has
/// `ceil(size / stride)` elements, the smaller half before.
pub fn same_padding(size: usize, kernel: usize, stride: usize) -> (usize, usize) {
    let out = size.div_ceil(stride.max(1));
    let needed = out
        .saturating_sub(1)
        .saturating_mul(stride)
        .saturating_add(kernel);
    let total = needed.saturating_sub(size);
    (total / 2, total - total / 2)
}

/// Output size of a window of `kernel` with `stride` over a padded axis, or
/// `None` when the window does not fit even once.
pub fn conv_out_size(
    size: usize,
    kernel: usize,
    stride: usize,
    lo: usize,
    hi: usize,
) -> Option<usize> {
    let padded = size.checked_add(lo)?.checked_add(hi)?;
    if padded < kernel || stride == 0 {
        return None;
    }
    Some((padded - kernel) / stride + 1)
}

/// The window arithmetic for one axis (kernel and stride are at least 1; the
/// checker rejects 0 before calling this).
pub fn window(size: &Dim, kernel: usize, stride: usize, pad: AxisPad) -> Result<Window, TooLarge> {
    match size {
        Dim::Known(n) => {
            let (lo, hi) = match pad {
                AxisPad::Same => same_padding(*n, kernel, stride),
                AxisPad::Valid => (0, 0),
                AxisPad::Explicit(lo, hi) => (lo, hi),
            };
            match conv_out_size(*n, kernel, stride, lo, hi) {
                Some(out) => Ok(Window {
                    pad_lo: Dim::Known(lo),
                    pad_hi: Dim::Known(hi),
                    out: Dim::Known(out),
                    requires: None,
                }),
                None => Err(TooLarge {
                    padded: n.saturating_add(lo).saturating_add(hi),
                }),
            }
        }
        Dim::Sym(t, text) => {
            let rt = rt_compact();
            let (lo, hi) = match pad {
                AxisPad::Same => (
                    quote!(#rt::same_padding(#t, #kernel, #stride).0),
                    quote!(#rt::same_padding(#t, #kernel, #stride).1),
                ),
                AxisPad::Valid => (quote!(0usize), quote!(0usize)),
                AxisPad::Explicit(lo, hi) => (quote!(#lo), quote!(#hi)),
            };
            let out = quote!(#rt::conv_out_size(#t, #kernel, #stride, #lo, #hi));
            let requires = quote!((#t) + (#lo) + (#hi) >= #kernel);
            Ok(Window {
                pad_lo: Dim::sym(lo, format!("pad({text})")),
                pad_hi: Dim::sym(hi, format!("pad({text})")),
                out: Dim::sym(out, format!("out({text})")),
                requires: Some(requires),
            })
        }
    }
}

/// The product of dimensions (what `flatten` produces).
pub fn product(dims: &[Dim]) -> Option<Dim> {
    if dims.iter().all(|d| d.known().is_some()) {
        let mut p: usize = 1;
        for d in dims {
            p = p.checked_mul(d.known()?)?;
        }
        return Some(Dim::Known(p));
    }
    let exprs = dims.iter().map(Dim::expr);
    let text: Vec<String> = dims.iter().map(ToString::to_string).collect();
    Some(Dim::sym(quote!(1usize #(* #exprs)*), text.join("*")))
}

/// The sum of dimensions (what `concatenate` makes of its axis).
pub fn sum(dims: &[Dim]) -> Option<Dim> {
    if dims.iter().all(|d| d.known().is_some()) {
        let mut t: usize = 0;
        for d in dims {
            t = t.checked_add(d.known()?)?;
        }
        return Some(Dim::Known(t));
    }
    let exprs = dims.iter().map(Dim::expr);
    let text: Vec<String> = dims.iter().map(ToString::to_string).collect();
    Some(Dim::sym(quote!(0usize #(+ #exprs)*), text.join("+")))
}

/// Whether two dimensions are equal.
pub enum Same {
    /// Known to be equal.
    Yes,
    /// Known to differ.
    No,
    /// Equal exactly when this `bool` constant expression holds.
    IfConst(TokenStream),
}

/// Compares two shapes dimension by dimension.
pub fn same_shape(a: &[Dim], b: &[Dim]) -> Same {
    if a.len() != b.len() {
        return Same::No;
    }
    let mut conds = Vec::new();
    for (x, y) in a.iter().zip(b) {
        match (x.known(), y.known()) {
            (Some(p), Some(q)) if p != q => return Same::No,
            (Some(_), Some(_)) => {}
            _ => {
                let (ex, ey) = (x.expr(), y.expr());
                conds.push(quote!(#ex == #ey));
            }
        }
    }
    if conds.is_empty() {
        Same::Yes
    } else {
        Same::IfConst(quote!(true #(&& #conds)*))
    }
}

/// Parameter count of a layer, saturating (a model whose count overflows
/// `usize` cannot be built anyway; the message stays readable).
pub fn params(parts: &[usize]) -> usize {
    parts.iter().fold(1usize, |acc, p| acc.saturating_mul(*p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_of_dims() {
        assert_eq!(
            sum(&[Dim::Known(3), Dim::Known(4)]).unwrap().known(),
            Some(7)
        );
        assert!(sum(&[Dim::Known(usize::MAX), Dim::Known(1)]).is_none());
        let s = sum(&[Dim::Known(3), Dim::sym(quote!(N), "N".into())]).unwrap();
        assert_eq!(s.known(), None);
        assert_eq!(s.to_string(), "3+N");
    }

    fn known(w: &Window) -> (usize, usize, usize) {
        (
            w.pad_lo.known().unwrap(),
            w.pad_hi.known().unwrap(),
            w.out.known().unwrap(),
        )
    }

    #[test]
    fn same_keeps_size_at_stride_one() {
        for size in 1..20 {
            for k in 1..6 {
                let w = window(&Dim::Known(size), k, 1, AxisPad::Same).unwrap();
                assert_eq!(w.out.known(), Some(size), "size {size} kernel {k}");
            }
        }
    }

    #[test]
    fn same_matches_xla_split() {
        // XLA: total = max((ceil(n/s)-1)*s + k - n, 0), low = total / 2.
        assert_eq!(same_padding(28, 3, 1), (1, 1));
        assert_eq!(same_padding(28, 4, 1), (1, 2));
        assert_eq!(same_padding(28, 2, 2), (0, 0));
        assert_eq!(same_padding(7, 3, 2), (1, 1));
        assert_eq!(same_padding(8, 3, 2), (0, 1));
        assert_eq!(same_padding(1, 5, 1), (2, 2));
        let w = window(&Dim::Known(7), 3, 2, AxisPad::Same).unwrap();
        assert_eq!(known(&w), (1, 1, 4));
    }

    #[test]
    fn valid_and_explicit() {
        let w = window(&Dim::Known(28), 3, 1, AxisPad::Valid).unwrap();
        assert_eq!(known(&w), (0, 0, 26));
        let w = window(&Dim::Known(26), 2, 2, AxisPad::Valid).unwrap();
        assert_eq!(known(&w), (0, 0, 13));
        let w = window(&Dim::Known(5), 3, 2, AxisPad::Explicit(1, 1)).unwrap();
        assert_eq!(known(&w), (1, 1, 3));
        assert_eq!(
            window(&Dim::Known(3), 5, 1, AxisPad::Valid).unwrap_err(),
            TooLarge { padded: 3 }
        );
        assert_eq!(
            window(&Dim::Known(3), 6, 1, AxisPad::Explicit(1, 1)).unwrap_err(),
            TooLarge { padded: 5 }
        );
    }

    #[test]
    fn seed_cnn_shapes() {
        // Conv SAME keeps 28, pool 2/2 halves it, twice: 64 * 7 * 7 = 3136.
        let mut s = Dim::Known(28);
        for _ in 0..2 {
            s = window(&s, 3, 1, AxisPad::Same).unwrap().out;
            s = window(&s, 2, 2, AxisPad::Valid).unwrap().out;
        }
        assert_eq!(s.known(), Some(7));
        let flat = product(&[Dim::Known(64), s.clone(), s]).unwrap();
        assert_eq!(flat.known(), Some(3136));
    }

    #[test]
    fn no_overflow_panics() {
        assert_eq!(conv_out_size(usize::MAX, 3, 1, 1, 1), None);
        assert!(product(&[Dim::Known(usize::MAX), Dim::Known(2)]).is_none());
        let _ = same_padding(usize::MAX, 3, 1);
        let _ = same_padding(usize::MAX, usize::MAX, usize::MAX);
        assert_eq!(params(&[usize::MAX, 2]), usize::MAX);
    }

    #[test]
    fn symbolic_dims_make_expressions() {
        let s = Dim::Sym(quote!(<B as C>::OUT_1), "B.1".into());
        let w = window(&s, 3, 1, AxisPad::Same).unwrap();
        assert!(w.out.known().is_none() && w.requires.is_some());
        assert!(w.out.generic().to_string().contains("conv_out_size"));
        assert!(matches!(
            same_shape(std::slice::from_ref(&s), &[Dim::Known(4)]),
            Same::IfConst(_)
        ));
        assert!(matches!(
            same_shape(&[Dim::Known(3)], &[Dim::Known(4)]),
            Same::No
        ));
        assert!(matches!(
            same_shape(&[Dim::Known(4)], &[Dim::Known(4)]),
            Same::Yes
        ));
        assert!(matches!(same_shape(&[Dim::Known(4)], &[]), Same::No));
        assert_eq!(show(&[Dim::Known(64), s]), "[64, B.1]");
    }
}
