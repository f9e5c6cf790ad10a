//! Nested models, Flax style: `Block(features = 64)(x)`.
//!
//! The expansion of one model cannot see another item, so every
//! `#[compact]` model also defines a `macro_rules!` under its own name (in
//! the macro namespace) that hands its source on: `Block! { @source .. }`
//! calls `compact_resume! { { <Block's impl> } .. }`. A model that nests
//! others first collects their sources this way, one call per model (the
//! request carries the sources gathered so far), and only then is checked
//! and expanded, instantiating each nested call for its input shape and
//! arguments. So every shape stays known to the macro.
//!
//! This module only speaks the protocol; the driver decides what to do.

use crate::ast::{Arm, Block, Callee, Expr, Model, Stmt};
use crate::paths;
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote, ToTokens};
use std::collections::{BTreeMap, BTreeSet};
use syn::parse::{ParseStream, Parser};
use syn::Result;

/// Sources of nested models by path (as written, without spaces).
pub type Sources = BTreeMap<String, TokenStream>;

/// The key of a nested model's path.
pub fn key(path: &syn::Path) -> String {
    path.to_token_stream().to_string().replace(' ', "")
}

/// The nested models a model calls, in every branch.
pub fn nested_paths(m: &Model) -> Vec<syn::Path> {
    let mut out = Vec::new();
    block(&m.body, &mut out);
    m.setup.iter().for_each(|b| block(b, &mut out));
    m.methods.iter().for_each(|k| block(&k.body, &mut out));
    m.params.iter().for_each(|p| expr(&p.default, &mut out));
    out
}

fn block(b: &Block, out: &mut Vec<syn::Path>) {
    for s in &b.stmts {
        match s {
            Stmt::Let { value, .. }
            | Stmt::LetTuple { value, .. }
            | Stmt::Assign { value, .. }
            | Stmt::Expr(value) => expr(value, out),
            Stmt::For {
                start, end, body, ..
            } => {
                expr(start, out);
                expr(end, out);
                block(body, out);
            }
            Stmt::ForEach { items, body, .. } => {
                expr(items, out);
                block(body, out);
            }
        }
    }
    if let Some(v) = &b.value {
        expr(v, out);
    }
}

fn expr(e: &Expr, out: &mut Vec<syn::Path>) {
    match e {
        Expr::Var(_) | Expr::SelfField(..) | Expr::Lit(..) | Expr::Poison(_) => {}
        Expr::Range(a, b, _) => a.iter().chain(b).for_each(|e| expr(e, out)),
        Expr::Tuple(items, _) => items.iter().for_each(|i| expr(i, out)),
        Expr::Format(pieces, _) => pieces.iter().for_each(|p| {
            if let crate::ast::Piece::Value(v) = p {
                expr(v, out)
            }
        }),
        Expr::Unary { input, .. } => expr(input, out),
        Expr::Binary { lhs, rhs, .. } => {
            expr(lhs, out);
            expr(rhs, out);
        }
        Expr::Field { base, .. } => expr(base, out),
        Expr::Index { base, index, .. } => {
            expr(base, out);
            expr(index, out);
        }
        Expr::Call {
            callee,
            args,
            inputs,
            ..
        } => {
            if let Callee::Nested(p) = callee {
                out.push(p.clone());
            }
            // `partial(Block, ..)`: a model named as a value.
            if let (Callee::Builtin(crate::symbol::BuiltinKind::Partial), Some(first)) =
                (callee, args.first())
            {
                if let Expr::Var(v) = &first.value {
                    let w = v.to_string();
                    if w.starts_with(|c: char| c.is_ascii_uppercase())
                        && crate::symbol::LayerKind::from_name(&w).is_none()
                    {
                        out.push(v.clone().into());
                    }
                }
            }
            args.iter()
                .chain(inputs.iter().flatten())
                .for_each(|a| expr(&a.value, out));
        }
        Expr::Transform { call, .. } => expr(call, out),
        Expr::If {
            cond, then, els, ..
        } => {
            expr(cond, out);
            block(then, out);
            if let Some(e) = els {
                expr(e, out);
            }
        }
        Expr::Match {
            scrutinee, arms, ..
        } => {
            expr(scrutinee, out);
            for Arm {
                pats, guard, body, ..
            } in arms
            {
                pats.iter().chain(guard).for_each(|p| expr(p, out));
                expr(body, out);
            }
        }
        Expr::Block(b, _) => block(b, out),
        Expr::List { push, .. } => push.iter().for_each(|e| expr(e, out)),
    }
}

/// The first nested model, of `m` or (transitively) of a known source,
/// whose source is still missing.
pub fn missing(m: &Model, sources: &Sources) -> Option<syn::Path> {
    let mut todo = nested_paths(m);
    let mut seen = BTreeSet::new();
    while let Some(p) = todo.pop() {
        let k = key(&p);
        if !seen.insert(k.clone()) {
            continue;
        }
        match sources.get(&k) {
            None => return Some(p),
            Some(src) => {
                // A source that does not parse is reported by its own
                // expansion; here it just has nothing more to fetch.
                if let Ok(inner) = crate::parse::parse_model(src.clone()) {
                    todo.extend(nested_paths(&inner));
                }
            }
        }
    }
    None
}

/// The request for `path`'s source, carrying the item and the sources
/// gathered so far.
pub fn request(path: &syn::Path, item: &TokenStream, sources: &Sources) -> TokenStream {
    let k = Literal::string(&key(path));
    let known = sources.iter().map(|(k, v)| {
        let k = Literal::string(k);
        quote!(#k { #v })
    });
    quote!(#path! { @source #k { #item } { #(#known)* } })
}

/// `compact_resume! { { <source> } "key" { <item> } { "k" { <src> } .. } }`:
/// the item being expanded and every source known now.
pub fn parse_resume(input: TokenStream) -> Result<(TokenStream, Sources)> {
    let parser = |ps: ParseStream| -> Result<(TokenStream, Sources)> {
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
        sources.insert(k.value(), src);
        Ok((item, sources))
    };
    parser.parse2(input)
}

/// The `macro_rules!` under the model's own name that hands its source to
/// a model nesting it.
pub fn source_macro(name: &syn::Ident, source: &TokenStream) -> TokenStream {
    let mac = format_ident!("__flaxen_compact_{}", name);
    let resume = paths::compact_resume();
    quote! {
        #[doc(hidden)]
        #[allow(unused_macros)]
        macro_rules! #mac {
            (@source $($rest:tt)*) => {
                #resume! { { #source } $($rest)* }
            };
        }
        #[doc(hidden)]
        #[allow(unused_imports)]
        pub(crate) use #mac as #name;
    }
}
