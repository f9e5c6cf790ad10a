//! `format!("encoderblock_{i}")`: names computed at expansion, Flax's
//! `name=f'encoderblock_{lyr}'`.

use super::expr::parse_expr;
use crate::ast::{Expr, Piece};
use quote::ToTokens;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Error, Result, Token};

/// `format!(template, args..)`: the template's text and placeholders, each
/// `{}` (the next positional argument), `{name}` (a variable, or an
/// argument `name = ..`); `{{` and `}}` are braces. Format specs are not
/// part of the language.
pub(super) fn parse(m: &syn::ExprMacro) -> Result<Expr> {
    let parser = Punctuated::<syn::Expr, Token![,]>::parse_terminated;
    let items = parser.parse2(m.mac.tokens.clone())?;
    let mut items = items.into_iter();
    let Some(syn::Expr::Lit(syn::ExprLit {
        lit: syn::Lit::Str(template),
        ..
    })) = items.next()
    else {
        return Err(Error::new_spanned(
            &m.mac,
            "`format!` takes a string literal first: `format!(\"block_{i}\")`",
        ));
    };
    let mut positional = Vec::new();
    let mut named = Vec::new();
    for item in items {
        match item {
            syn::Expr::Assign(a) => match &*a.left {
                syn::Expr::Path(p) if p.path.get_ident().is_some() => {
                    named.push((p.path.get_ident().cloned(), parse_expr(&a.right)?))
                }
                other => {
                    return Err(Error::new_spanned(
                        other,
                        "a named `format!` argument is written `name = value`",
                    ))
                }
            },
            other => positional.push(parse_expr(&other)?),
        }
    }
    let text = template.value();
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut positional = positional.into_iter();
    let mut chars = text.chars().peekable();
    let bad = |msg: &str| Error::new_spanned(&template, msg);
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '}' => return Err(bad("a `}` without its `{`: write `}}` for a brace")),
            '{' => {
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => inner.push(c),
                        None => return Err(bad("a `{` without its `}`: write `{{` for a brace")),
                    }
                }
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                let inner = inner.trim();
                let value = if inner.is_empty() {
                    positional
                        .next()
                        .ok_or_else(|| bad("more `{}` than arguments"))?
                } else if inner.contains(':') {
                    return Err(bad("format specs (`{i:02}`) are not part of the model language: names are built from plain values"));
                } else {
                    let ident: syn::Ident = syn::parse_str(inner)
                        .map_err(|_| bad(&format!("`{{{inner}}}` is not a variable name")))?;
                    match named.iter().position(|(n, _)| n.as_ref() == Some(&ident)) {
                        Some(k) => named.remove(k).1,
                        None => {
                            let mut var = ident;
                            var.set_span(template.span());
                            Expr::Var(var)
                        }
                    }
                };
                pieces.push(Piece::Value(value));
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    if positional.next().is_some() {
        return Err(Error::new_spanned(
            &m.mac,
            "more arguments than `{}` in the `format!` string",
        ));
    }
    Ok(Expr::Format(pieces, m.to_token_stream()))
}
