//! Procedural macros of flaxen. Use them through the `flaxen` crate.
//!
//! Each entry point only delegates to the module of its phase pipeline and
//! turns errors into `compile_error!`s at the user's spans.
//!
//! `#[compact]`: `parse` → `check` (shape inference and validation, every
//! error collected) → `expand`, with the shape arithmetic in `shape`, the
//! vocabulary (names, arguments, suggestions) in `vocab`, and the
//! collection of nested models' sources in `nest`.

use proc_macro::TokenStream;

mod check;
mod expand;
mod nest;
mod parse;
mod scan;
mod shape;
mod vocab;

#[cfg(test)]
mod tests;

/// Turns a Flax-style `@nn.compact` model into a shape-checked dfdx module.
///
/// See `flaxen::compact` for the full documentation; the generated code
/// names only `::flaxen::__private` paths.
#[proc_macro_attribute]
pub fn compact(attr: TokenStream, item: TokenStream) -> TokenStream {
    nest::compact(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Continues the expansion of a `#[compact]` model once a nested model
/// has handed over its source; generated code calls it, users do not.
#[doc(hidden)]
#[proc_macro]
pub fn __compact_resume(input: TokenStream) -> TokenStream {
    nest::resume(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// A fixed K-step training loop over K stacked batches, unrolled at compile
/// time: `let (state, losses) = scan!(K, step, state, batches);`.
///
/// See `flaxen::scan!` for the full documentation.
#[proc_macro]
pub fn scan(input: TokenStream) -> TokenStream {
    scan::expand(input.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
