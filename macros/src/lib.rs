//! Procedural macros of flaxen. Use them through the `flaxen` crate.
//!
//! Each entry point only delegates to the module of its phase pipeline and
//! turns errors into `compile_error!`s at the user's spans.

use proc_macro::TokenStream;

mod scan;

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
