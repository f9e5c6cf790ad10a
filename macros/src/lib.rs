//! Procedural macros of flaxen: `#[compact]` (and `scan!`).
//!
//! This file holds only the entry points; each phase lives in its own
//! module: [`parse`] → [`check`] (shape inference and validation) →
//! [`expand`], with the shape arithmetic in [`shape`] and the vocabulary
//! (names, arguments, suggestions) in [`vocab`].

use proc_macro::TokenStream;

mod check;
mod expand;
mod parse;
mod shape;
mod vocab;

#[cfg(test)]
mod tests;

/// Turns a Flax-style `@nn.compact` model into a shape-checked dfdx module.
///
/// Use it through the `flaxen` crate (`flaxen::compact`), whose
/// documentation describes the language and what is generated; the
/// generated code names only `::flaxen::__private` paths.
#[proc_macro_attribute]
pub fn compact(attr: TokenStream, item: TokenStream) -> TokenStream {
    compact_impl(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn compact_impl(
    attr: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let model = parse::parse(attr, item)?;
    let plan = check::check(model)?;
    Ok(expand::expand(&plan))
}
