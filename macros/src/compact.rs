//! The `#[compact]` driver: parse → (collect nested sources) → check →
//! expand. The phases never call back into it.

use crate::ast::Model;
use crate::nest::{self, Sources};
use crate::{check, expand, parse};
use proc_macro2::TokenStream;
use quote::quote;

/// `#[compact]` on an impl block.
pub fn compact(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    match parse::parse(attr, item.clone()) {
        Ok(model) => Ok(run(&model, &item, &Sources::new())),
        Err(e) => failed(&item, e),
    }
}

/// `compact_resume!`: one more nested source delivered.
pub fn resume(input: TokenStream) -> syn::Result<TokenStream> {
    let (item, sources) = nest::parse_resume(input)?;
    match parse::parse_model(item.clone()) {
        Ok(model) => Ok(run(&model, &item, &sources)),
        Err(e) => failed(&item, e),
    }
}

/// A model that does not parse: its errors, and stubs of its items when
/// at least its name is known, so the caller compiles.
fn failed(item: &TokenStream, e: syn::Error) -> syn::Result<TokenStream> {
    let e = parse::keyword_call(item).unwrap_or(e);
    match parse::model_name(item) {
        Some(name) => {
            let stub = expand::stub(&name, None, &parse::method_names(item), &e);
            let source = nest::source_macro(&name, item);
            Ok(quote!(#stub #source))
        }
        None => Err(e),
    }
}

fn run(model: &Model, item: &TokenStream, sources: &Sources) -> TokenStream {
    if let Some(path) = nest::missing(model, sources) {
        return nest::request(&path, item, sources);
    }
    // The checker reports the errors of lines that did not parse too.
    let body = match check::check(model, sources) {
        Ok(plan) => expand::expand(&plan, &model.docs),
        Err(e) => {
            let methods: Vec<syn::Ident> = model.methods.iter().map(|m| m.name.clone()).collect();
            expand::stub(&model.name, Some(&model.inputs[0].dims), &methods, &e)
        }
    };
    let name = &model.name;
    let source = nest::source_macro(name, item);
    let passthrough = &model.passthrough;
    let passthrough = if passthrough.is_empty() {
        quote!()
    } else {
        quote!(impl #name { #(#passthrough)* })
    };
    quote!(#passthrough #source #body)
}
