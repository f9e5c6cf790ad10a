//! Transforms of a layer call: `remat(Block(..))(x)`, Flax's
//! `nn.remat(Block)(..)(x)`.
//!
//! Flax's transforms take a module class and are then constructed and
//! applied; flaxen's take the layer or model *built* with its arguments, as
//! it is written everywhere else, and are applied to its input. The Flax
//! spelling and the other mistakes are errors that show the flaxen one.

use super::expr::{both, callee, method_call, parse_args, strip, transform};
use crate::ast::{compact_text, Expr};
use crate::symbol::{LayerKind, OpKind, TransformKind};
use quote::ToTokens;
use syn::{Error, Result};

/// `remat(Block(args))(inputs)`: `inner` is `remat(Block(args))`, `c` the
/// whole call.
pub fn parse(inner: &syn::ExprCall, c: &syn::ExprCall) -> Result<Expr> {
    let word = inner.to_token_stream();
    let Some(kind) = transform(&inner.func) else {
        return Err(Error::new_spanned(&inner.func, "not a transform"));
    };
    let what = kind.name();
    if let Some(syn::Expr::Assign(a)) = inner
        .args
        .iter()
        .find(|a| matches!(a, syn::Expr::Assign(_)))
    {
        let key = compact_text(&a.left.to_token_stream());
        return Err(Error::new_spanned(a, format!("`{what}` takes only the block: Flax's `{key}` has no counterpart here; flaxen's `{what}` keeps the block's input and recomputes everything else, as `jax.checkpoint` does by default")));
    }
    let mut it = inner.args.iter();
    let (Some(target), None) = (it.next(), it.next()) else {
        let msg = match inner.args.len() {
            0 => format!("`{what}` takes the block to recompute, built with its arguments: `{what}(Block(..))(x)`"),
            _ => format!("`{what}` wraps one block: `{what}(Block(..))(x)`; write one `{what}(..)` per block"),
        };
        return Err(Error::new_spanned(&word, msg));
    };
    let block = match strip(target) {
        syn::Expr::Call(b) => b,
        syn::Expr::Path(p) => return Err(Error::new_spanned(p, path_message(kind, p))),
        syn::Expr::MethodCall(m) => return Err(method_call(m)),
        other => {
            let text = compact_text(&other.to_token_stream());
            return Err(Error::new_spanned(other, format!("`{what}` takes a layer or a `#[compact]` model built with its arguments, `{what}(Block(..))(x)`, not `{text}`")));
        }
    };
    let path = match strip(&block.func) {
        syn::Expr::Path(p) if p.qself.is_none() => &p.path,
        // `remat(Block()(x))`: applied inside.
        syn::Expr::Call(applied) => {
            let (b, x) = (text(&applied.func), text_args(&block.args));
            return Err(Error::new_spanned(
                block,
                format!("apply `{what}` to the block's input, outside: `{what}({b})({x})`"),
            ));
        }
        syn::Expr::MethodCall(m) => return Err(method_call(m)),
        other => {
            return Err(Error::new_spanned(
                other,
                format!(
                    "`{what}` takes a layer or model named by a path, as in `{what}(Block(..))(x)`"
                ),
            ))
        }
    };
    if path
        .get_ident()
        .is_some_and(|i| TransformKind::from_name(&i.to_string()).is_some())
    {
        return Err(Error::new_spanned(
            block,
            format!("`{what}` of `{what}`: wrap the block once, `{what}(Block(..))(x)`"),
        ));
    }
    if c.args.is_empty() {
        return Err(Error::new_spanned(
            c,
            format!(
                "apply `{}` to the block's input: `{}(x)`",
                text(&word),
                text(&word)
            ),
        ));
    }
    let (args, inputs) = both(parse_args(&block.args), parse_args(&c.args))?;
    let tokens = c.to_token_stream();
    let call = Expr::Call {
        callee: callee(path, true),
        name: path.to_token_stream(),
        args,
        inputs: Some(inputs),
        tokens: tokens.clone(),
    };
    Ok(Expr::Transform {
        kind,
        call: Box::new(call),
        word,
        tokens,
    })
}

/// `remat(relu)`, `remat(Block)`, `remat(x)`: a name where the built block
/// goes.
fn path_message(kind: TransformKind, p: &syn::ExprPath) -> String {
    let what = kind.name();
    let name = text(&p.to_token_stream());
    let last = p
        .path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    if OpKind::from_name(&last).is_some() {
        format!("`{name}` is an op, with no parameters and nothing worth recomputing alone: `{what}` wraps a layer or a `#[compact]` model, `{what}(Block(..))(x)`; call `{name}` inside the block")
    } else if last.starts_with(|c: char| c.is_ascii_uppercase()) {
        let example = match LayerKind::from_name(&last) {
            Some(_) => format!("{name}(..)"),
            None => format!("{name}()"),
        };
        format!("build the block inside `{what}`: `{what}({example})(x)` (Flax's `nn.{what}({name})` takes the class; flaxen takes the block built with its arguments)")
    } else {
        format!("`{what}` takes a block, not `{name}`: `{what}(Block(..))({name})` recomputes `Block` from `{name}` in the backward pass")
    }
}

/// Flax's `remat(Block)(args)(x)`: `t` is `remat(Block)`, `inner` is
/// `remat(Block)(args)`.
pub fn flax_form(t: &syn::ExprCall, inner: &syn::ExprCall, c: &syn::ExprCall) -> Error {
    let what = transform(&t.func).map_or("remat", TransformKind::name);
    let block = text_args(&t.args);
    let (args, x) = (text_args(&inner.args), text_args(&c.args));
    Error::new_spanned(inner, format!("flaxen's `{what}` takes the block built with its arguments: write `{what}({block}({args}))({x})` (Flax's `nn.{what}({block})({args})` takes the class)"))
}

/// `remat(Block())` or `remat(x)` not applied to an input.
pub fn not_applied(kind: TransformKind, c: &syn::ExprCall) -> Error {
    let what = kind.name();
    let msg = match c.args.first().map(strip) {
        Some(syn::Expr::Path(p)) if c.args.len() == 1 => path_message(kind, p),
        Some(syn::Expr::Call(_)) if c.args.len() == 1 => {
            let w = text(&c.to_token_stream());
            format!("`{w}` wraps the block; apply it to the block's input: `{w}(x)`")
        }
        _ => format!("`{what}` takes a block built with its arguments and is applied to the block's input: `{what}(Block(..))(x)`"),
    };
    Error::new_spanned(c, msg)
}

fn text(t: &impl ToTokens) -> String {
    compact_text(&t.to_token_stream())
}

fn text_args(args: &syn::punctuated::Punctuated<syn::Expr, syn::Token![,]>) -> String {
    text(args)
}
