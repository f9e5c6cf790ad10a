//! The model language's vocabulary: layer and op names, their arguments in
//! Flax's positional order, argument values, and "did you mean" suggestions.

use crate::parse::{arg_span, int_literal, Arg};
use crate::shape::AxisPad;
use proc_macro2::TokenStream;
use quote::ToTokens;
use std::collections::BTreeMap;
use syn::Error;

/// Parameterised layers, called as `Layer(args)(x)`.
pub const LAYERS: &[&str] = &[
    "Dense",
    "Conv",
    "Dropout",
    "BatchNorm",
    "LayerNorm",
    "RMSNorm",
    "GroupNorm",
    "SelfAttention",
];

/// Functional ops, called as `op(x, args)`.
pub const OPS: &[&str] = &[
    "relu",
    "gelu",
    "sigmoid",
    "tanh",
    "silu",
    "swish",
    "leaky_relu",
    "elu",
    "selu",
    "softplus",
    "log_sigmoid",
    "relu6",
    "hard_tanh",
    "hard_sigmoid",
    "hard_silu",
    "hard_swish",
    "softmax",
    "log_softmax",
    "mean",
    "sum",
    "concatenate",
    "avg_pool",
    "max_pool",
    "flatten",
];

/// The arguments of a layer or op, in Flax's positional order, and which of
/// them are required. `name` is keyword-only.
pub fn signature(kind: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match kind {
        "Dense" => (&["features", "use_bias", "name"], &["features"]),
        "Conv" => (
            &[
                "features",
                "kernel_size",
                "strides",
                "padding",
                "use_bias",
                "name",
            ],
            &["features", "kernel_size"],
        ),
        "Dropout" => (&["rate", "name"], &["rate"]),
        "BatchNorm" => (&["momentum", "epsilon", "name"], &[]),
        "LayerNorm" | "RMSNorm" => (&["epsilon", "name"], &[]),
        "GroupNorm" => (&["num_groups", "group_size", "epsilon", "name"], &[]),
        "SelfAttention" => (
            &["num_heads", "qkv_features", "out_features", "name"],
            &["num_heads"],
        ),
        "avg_pool" | "max_pool" => (&["window_shape", "strides", "padding"], &["window_shape"]),
        "gelu" => (&["approximate"], &[]),
        "leaky_relu" => (&["negative_slope"], &[]),
        "elu" => (&["alpha"], &[]),
        "softmax" | "log_softmax" => (&["axis"], &[]),
        "mean" | "sum" | "concatenate" => (&["axis"], &["axis"]),
        // Other activations and flatten take only their input; nested
        // models only a name.
        "nested" => (&["name"], &[]),
        _ => (&[], &[]),
    }
}

/// Edit distance (Levenshtein), for suggestions.
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The nearest candidate within a small distance, case-insensitively.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lw = word.to_lowercase().replace('_', "");
    candidates
        .iter()
        .map(|c| (distance(&lw, &c.to_lowercase().replace('_', "")), *c))
        .filter(|(d, _)| *d <= 2.max(word.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Matches call arguments to a signature: keyword and positional (Flax's
/// order), reporting unknown keywords (with the valid ones), too many
/// positionals, duplicates and missing required arguments. Returns the
/// matched values by name; errors go to `errs`.
pub fn bind<'a>(
    what: &str,
    kind: &str,
    args: &'a [Arg],
    call: &TokenStream,
    errs: &mut Errors,
) -> BTreeMap<&'static str, &'a syn::Expr> {
    let (names, required) = signature(kind);
    let positional: Vec<&str> = names.iter().copied().filter(|n| *n != "name").collect();
    let mut out: BTreeMap<&'static str, &'a syn::Expr> = BTreeMap::new();
    let mut seen_keyword = false;
    let mut misplaced = false;
    let mut pos = 0;
    for a in args {
        let slot = match &a.key {
            Some(k) => {
                seen_keyword = true;
                let key = k.to_string();
                match names.iter().find(|n| **n == key) {
                    Some(n) => Some(*n),
                    None => {
                        let mut msg = if names.is_empty() {
                            format!(
                                "`{what}` takes no arguments besides its input, but got `{key}`"
                            )
                        } else {
                            format!("`{what}` has no argument `{key}`")
                        };
                        if let Some(s) = nearest(&key, names) {
                            msg.push_str(&format!("; did you mean `{s}`?"));
                        }
                        if !names.is_empty() {
                            msg.push_str(&format!(
                                "\nhelp: the arguments of `{what}` are: {}",
                                names.join(", ")
                            ));
                        }
                        errs.push(Error::new(k.span(), msg));
                        misplaced = true;
                        None
                    }
                }
            }
            None if seen_keyword => {
                errs.push(Error::new_spanned(
                    &a.value,
                    "positional arguments must come before keyword arguments",
                ));
                misplaced = true;
                None
            }
            None => {
                let n = positional.get(pos).copied();
                pos += 1;
                if n.is_none() {
                    let msg = if positional.is_empty() {
                        format!("`{what}` takes no positional arguments besides its input")
                    } else {
                        format!(
                            "`{what}` takes at most {} positional argument(s): {}",
                            positional.len(),
                            positional.join(", ")
                        )
                    };
                    errs.push(Error::new_spanned(&a.value, msg));
                    misplaced = true;
                }
                n.and_then(|n| names.iter().copied().find(|m| *m == n))
            }
        };
        if let Some(n) = slot {
            if out.insert(n, &a.value).is_some() {
                errs.push(Error::new(arg_span(a), format!("`{n}` is given twice")));
            }
        }
    }
    // A misplaced or misspelt argument usually is the missing one: report
    // only that.
    for r in required.iter().filter(|_| !misplaced) {
        if !out.contains_key(r) {
            let example = match *r {
                "features" if kind == "Conv" => {
                    "`Conv(features = 32, kernel_size = (3, 3))`".to_string()
                }
                "features" => format!("`{what}(features = 10)`"),
                "kernel_size" => "`Conv(features = 32, kernel_size = (3, 3))`".to_string(),
                "rate" => "`Dropout(rate = 0.5)`".to_string(),
                "window_shape" => format!("`{what}(x, window_shape = (2, 2))`"),
                _ => String::new(),
            };
            errs.push(Error::new_spanned(
                call,
                format!("missing required argument: `{what}` needs `{r}`, e.g. {example}"),
            ));
        }
    }
    out
}

/// A growing list of errors, combined into one `syn::Error` at the end.
#[derive(Default)]
pub struct Errors(Option<Error>);

impl Errors {
    /// Adds an error.
    pub fn push(&mut self, e: Error) {
        match &mut self.0 {
            Some(a) => a.combine(e),
            None => self.0 = Some(e),
        }
    }

    /// `Err` with every error, or `Ok(())`.
    pub fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Records the error of a result and returns its value.
    pub fn take<T>(&mut self, r: syn::Result<T>) -> Option<T> {
        r.map_err(|e| self.push(e)).ok()
    }
}

/// A size argument that must be at least 1.
pub fn positive(e: &syn::Expr, what: &str) -> syn::Result<usize> {
    match int_literal(e, what)? {
        0 => Err(Error::new_spanned(
            e,
            format!("{what} must be at least 1, but is 0"),
        )),
        n => Ok(n),
    }
}

fn unparen(e: &syn::Expr) -> &syn::Expr {
    match e {
        syn::Expr::Paren(p) => unparen(&p.expr),
        syn::Expr::Group(g) => unparen(&g.expr),
        _ => e,
    }
}

fn elems(e: &syn::Expr) -> Option<Vec<&syn::Expr>> {
    match unparen(e) {
        syn::Expr::Tuple(t) => Some(t.elems.iter().collect()),
        syn::Expr::Array(a) => Some(a.elems.iter().collect()),
        _ => None,
    }
}

/// `(h, w)`, `[h, w]` or one number for both, each at least 1.
pub fn pair(e: &syn::Expr, what: &str) -> syn::Result<(usize, usize)> {
    match elems(e) {
        Some(v) if v.len() == 2 => Ok((positive(v[0], what)?, positive(v[1], what)?)),
        Some(v) => Err(Error::new_spanned(
            e,
            format!(
                "{what} needs 2 numbers (height, width), but {} are given",
                v.len()
            ),
        )),
        None => {
            let n = positive(e, what)?;
            Ok((n, n))
        }
    }
}

const PAD_HELP: &str =
    "padding is `SAME`, `VALID`, a number `p`, `(ph, pw)`, or `((top, bottom), (left, right))`";

/// A Flax padding: `SAME`, `VALID` (also as strings), `p`, `(ph, pw)` or
/// `((pt, pb), (pl, pr))`; one [`AxisPad`] per spatial axis.
pub fn padding(e: &syn::Expr) -> syn::Result<(AxisPad, AxisPad)> {
    let word = match unparen(e) {
        syn::Expr::Path(p) => p.path.get_ident().map(ToString::to_string),
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Some(s.value()),
        _ => None,
    };
    if let Some(w) = word {
        return match w.as_str() {
            "SAME" => Ok((AxisPad::Same, AxisPad::Same)),
            "VALID" => Ok((AxisPad::Valid, AxisPad::Valid)),
            other => Err(Error::new_spanned(
                e,
                format!("unknown padding `{other}`; {PAD_HELP}"),
            )),
        };
    }
    let amount = |x: &syn::Expr| int_literal(x, "a padding");
    match elems(e) {
        None => {
            let p = amount(e)?;
            Ok((AxisPad::Explicit(p, p), AxisPad::Explicit(p, p)))
        }
        Some(v) if v.len() == 2 => {
            let axis = |x: &syn::Expr| match elems(x) {
                Some(w) if w.len() == 2 => Ok(AxisPad::Explicit(amount(w[0])?, amount(w[1])?)),
                Some(_) => Err(Error::new_spanned(x, PAD_HELP)),
                None => amount(x).map(|p| AxisPad::Explicit(p, p)),
            };
            Ok((axis(v[0])?, axis(v[1])?))
        }
        Some(_) => Err(Error::new_spanned(e, PAD_HELP)),
    }
}

/// A float literal (an integer literal is accepted too).
pub fn float(e: &syn::Expr, what: &str) -> syn::Result<f64> {
    let v = float_lit(e, what)?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(Error::new_spanned(
            e,
            format!("{what} must be a finite number"),
        ))
    }
}

fn float_lit(e: &syn::Expr, what: &str) -> syn::Result<f64> {
    match unparen(e) {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Float(f), .. }) => f.base10_parse(),
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => i.base10_parse(),
        _ => Err(Error::new_spanned(e, format!("{what} must be a number literal such as `0.5`, because the macro reads it when it expands"))),
    }
}

/// An axis of a per-example shape of `rank` axes, counted from the end as
/// Flax code does (`-1` is the last). Counting from the front is refused:
/// Flax's arrays include the batch axis and flaxen's shapes do not, so
/// `axis = 1` would mean different axes to a reader of either.
pub fn axis_from_end(e: &syn::Expr, rank: usize) -> syn::Result<usize> {
    let from_end = match unparen(e) {
        syn::Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            expr,
            ..
        }) => crate::parse::int_literal(expr, "`axis`")?,
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(_),
            ..
        }) => {
            return Err(Error::new_spanned(
                e,
                "write `axis` from the end (`-1` is the last axis): flaxen's shapes leave out \
                 the batch axis that Flax's arrays have, so an axis counted from the front \
                 would be ambiguous",
            ))
        }
        _ => crate::parse::int_literal(e, "`axis`")?,
    };
    if (1..=rank).contains(&from_end) {
        Ok(rank - from_end)
    } else {
        Err(Error::new_spanned(
            e,
            format!(
                "`axis` must be between -{rank} and -1 for an input of {rank} axes (the batch \
                 axis is not one of them), but is -{from_end}"
            ),
        ))
    }
}

/// One axis or a tuple of distinct axes, each counted from the end as in
/// [`axis_from_end`]; returned sorted, as indices into the per-example shape.
pub fn axes_from_end(e: &syn::Expr, rank: usize) -> syn::Result<Vec<usize>> {
    let items = elems(e).unwrap_or_else(|| vec![e]);
    let mut axes = Vec::new();
    for item in items {
        let a = axis_from_end(item, rank)?;
        if axes.contains(&a) {
            return Err(Error::new_spanned(item, "this axis is listed twice"));
        }
        axes.push(a);
    }
    axes.sort_unstable();
    Ok(axes)
}

/// `true`/`false` (Python's `True`/`False` too).
pub fn boolean(e: &syn::Expr, what: &str) -> syn::Result<bool> {
    match unparen(e) {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Bool(b),
            ..
        }) => Ok(b.value),
        syn::Expr::Path(p) if p.path.is_ident("True") => Ok(true),
        syn::Expr::Path(p) if p.path.is_ident("False") => Ok(false),
        _ => Err(Error::new_spanned(
            e,
            format!("{what} must be `true` or `false`"),
        )),
    }
}

/// A `name = "..."` value: a snake_case identifier, which becomes the field
/// name and the checkpoint key prefix.
pub fn layer_name(e: &syn::Expr) -> syn::Result<(String, TokenStream)> {
    match unparen(e) {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => {
            let v = s.value();
            let ok = !v.is_empty()
                && !v.starts_with("__")
                && v.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                && v.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && syn::parse_str::<syn::Ident>(&v).is_ok();
            if ok {
                Ok((v, s.to_token_stream()))
            } else {
                Err(Error::new_spanned(s, format!("the name `{v}` must be a snake_case identifier (it becomes a field and the checkpoint key prefix), e.g. `\"head\"`")))
            }
        }
        other => Err(Error::new_spanned(
            other,
            "a layer name is a string literal, e.g. `name = \"head\"`",
        )),
    }
}

/// `CamelCase` to `snake_case` (Flax's `BatchNorm_0` becomes `batch_norm_0`).
pub fn snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            // A word starts at an uppercase letter after a lowercase one or
            // a digit, and at the last capital of an acronym that a
            // lowercase letter follows (`RMSNorm` is `rms_norm`).
            let prev = i.checked_sub(1).map(|p| chars[p]);
            let next = chars.get(i + 1);
            let starts = match prev {
                None => false,
                Some(p) if !p.is_uppercase() => true,
                Some(_) => next.is_some_and(|n| n.is_lowercase()),
            };
            if starts {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(nearest("Desne", LAYERS), Some("Dense"));
        assert_eq!(nearest("dense", LAYERS), Some("Dense"));
        assert_eq!(nearest("Conv2D", LAYERS), Some("Conv"));
        assert_eq!(nearest("ResidualBlock", LAYERS), None);
        assert_eq!(nearest("logsoftmax", OPS), Some("log_softmax"));
        assert_eq!(nearest("featurs", signature("Dense").0), Some("features"));
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn values() {
        let e: syn::Expr = syn::parse_quote!((3, 3));
        assert_eq!(pair(&e, "k").unwrap(), (3, 3));
        let e: syn::Expr = syn::parse_quote!(5);
        assert_eq!(pair(&e, "k").unwrap(), (5, 5));
        let e: syn::Expr = syn::parse_quote!((0, 3));
        assert!(pair(&e, "k").is_err());
        let e: syn::Expr = syn::parse_quote!(SAME);
        assert_eq!(padding(&e).unwrap(), (AxisPad::Same, AxisPad::Same));
        let e: syn::Expr = syn::parse_quote!("VALID");
        assert_eq!(padding(&e).unwrap(), (AxisPad::Valid, AxisPad::Valid));
        let e: syn::Expr = syn::parse_quote!(((1, 2), 3));
        assert_eq!(
            padding(&e).unwrap(),
            (AxisPad::Explicit(1, 2), AxisPad::Explicit(3, 3))
        );
        let e: syn::Expr = syn::parse_quote!(FULL);
        assert!(padding(&e).is_err());
        let e: syn::Expr = syn::parse_quote!("Head");
        assert!(layer_name(&e).is_err());
        let e: syn::Expr = syn::parse_quote!("head_1");
        assert_eq!(layer_name(&e).unwrap().0, "head_1");
        assert_eq!(snake("BatchNorm"), "batch_norm");
        assert_eq!(snake("ResBlock"), "res_block");
        assert_eq!(snake("RMSNorm"), "rms_norm");
        assert_eq!(snake("GroupNorm"), "group_norm");
        assert_eq!(snake("MLPBlock2D"), "mlp_block2_d");
        assert_eq!(snake("Mlp"), "mlp");
    }
}
