//! Nested models with parameters, Flax style: `Block(features = 64)(x)`.
//!
//! The expansion of one model cannot see another item, so every
//! `#[compact]` model also defines a `macro_rules!` under its own name (in
//! the macro namespace) that hands its source on: `Block! { @source .. }`
//! calls `compact_resume! { { <Block's impl> } .. }`. A model that nests
//! others first collects their sources this way, one call per model (the
//! request carries the sources gathered so far), and only then checks and
//! expands itself, instantiating each nested call for its input shape and
//! arguments. So every shape stays known to the macro.

use crate::parse::{self, Expr, Model};
use crate::vocab::{self, LAYERS, OPS};
use proc_macro2::{Literal, TokenStream};
use quote::{quote, ToTokens};
use std::collections::BTreeMap;
use syn::parse::{ParseStream, Parser};
use syn::{Error, Result};

/// Sources of nested models by path (as written, without spaces).
pub type Sources = BTreeMap<String, TokenStream>;

/// The key of a nested model's path.
pub fn key(path: &syn::Path) -> String {
    path.to_token_stream().to_string().replace(' ', "")
}

/// Whether a layer path names a nested model rather than a built-in layer
/// (or a misspelt one, which the checker reports).
pub fn is_nested(path: &syn::Path) -> bool {
    let last = path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    if path.segments.len() == 1 {
        !LAYERS.contains(&last.as_str())
            && !OPS.contains(&last.as_str())
            && vocab::nearest(&last, LAYERS)
                .or_else(|| vocab::nearest(&last, OPS))
                .is_none()
    } else {
        true
    }
}

fn collect(e: &Expr, out: &mut Vec<syn::Path>) {
    match e {
        Expr::Layer { path, input, .. } => {
            if is_nested(path) {
                out.push(path.clone());
            }
            collect(input, out);
        }
        Expr::Op { input, .. } | Expr::Neg { input, .. } => collect(input, out),
        Expr::Binary { lhs, rhs, .. } => {
            collect(lhs, out);
            collect(rhs, out);
        }
        Expr::Concat { inputs, .. } => inputs.iter().for_each(|e| collect(e, out)),
        Expr::Var(_) | Expr::Scalar { .. } => {}
    }
}

/// The nested models a model calls.
pub fn nested_paths(m: &Model) -> Vec<syn::Path> {
    let mut out = Vec::new();
    for l in &m.lets {
        collect(&l.value, &mut out);
    }
    collect(&m.output, &mut out);
    out
}

/// The first nested model, of `m` or (transitively) of a known source,
/// whose source is still missing.
fn missing(m: &Model, sources: &Sources) -> Result<Option<syn::Path>> {
    let mut todo = nested_paths(m);
    let mut seen = std::collections::BTreeSet::new();
    while let Some(p) = todo.pop() {
        let k = key(&p);
        if !seen.insert(k.clone()) {
            continue;
        }
        match sources.get(&k) {
            None => return Ok(Some(p)),
            Some(src) => {
                // A source that does not parse is reported when it is
                // instantiated; here it just has nothing more to fetch.
                if let Ok(inner) = parse::parse_model(src.clone(), None) {
                    todo.extend(nested_paths(&inner));
                }
            }
        }
    }
    Ok(None)
}

/// `#[compact]`: expands at once, or starts collecting nested sources.
pub fn compact(attr: TokenStream, item: TokenStream) -> Result<TokenStream> {
    let model = parse::parse(attr, item.clone())?;
    run(model, item, Sources::new())
}

fn run(model: Model, item: TokenStream, sources: Sources) -> Result<TokenStream> {
    match missing(&model, &sources)? {
        None => {
            let plan = crate::check::check_with(model, &sources, 0)?;
            Ok(crate::expand::expand(&plan))
        }
        Some(path) => {
            let k = Literal::string(&key(&path));
            let known = sources.iter().map(|(k, v)| {
                let k = Literal::string(k);
                quote!(#k { #v })
            });
            Ok(quote!(#path! { @source #k { #item } { #(#known)* } }))
        }
    }
}

/// `compact_resume! { { <source> } "key" { <item> } { "k" { <src> } .. } }`:
/// one more source delivered; fetch the next or expand.
pub fn resume(input: TokenStream) -> Result<TokenStream> {
    let parser = |ps: ParseStream| -> Result<(TokenStream, String, TokenStream, Sources)> {
        let src;
        syn::braced!(src in ps);
        let src: TokenStream = src.parse()?;
        let k: syn::LitStr = ps.parse()?;
        let item;
        syn::braced!(item in ps);
        let item: TokenStream = item.parse()?;
        let known;
        syn::braced!(known in ps);
        let mut sources = Sources::new();
        while !known.is_empty() {
            let kk: syn::LitStr = known.parse()?;
            let v;
            syn::braced!(v in known);
            sources.insert(kk.value(), v.parse()?);
        }
        Ok((src, k.value(), item, sources))
    };
    let (src, k, item, mut sources) = parser.parse2(input)?;
    sources.insert(k, src);
    let model = parse::parse_model(item.clone(), None)?;
    run(model, item, sources)
}

/// Rejects a value that cannot be a nested model's source.
pub fn check_depth(depth: usize, call: &TokenStream) -> Result<()> {
    if depth > 16 {
        return Err(Error::new_spanned(
            call,
            "nested models more than 16 deep: does a model call itself?",
        ));
    }
    Ok(())
}
