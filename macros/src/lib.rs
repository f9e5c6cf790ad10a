//! Procedural macros of flaxen. Use them through the `flaxen` crate.
//!
//! Each entry point only delegates to its module and turns errors into
//! `compile_error!`s at the user's spans.
//!
//! # How `#[compact]` is built
//!
//! Data flows one way, and no module imports a later phase or the driver:
//!
//! - `parse` turns the impl block into the `ast`, keeping every user
//!   token for messages; names are looked up once into the typed
//!   vocabulary of `symbol` (`LayerKind`, `OpKind`).
//! - `check` runs `fn forward` at expansion time: values known then
//!   (block parameters, loop indices, `x.shape[-1]`) are computed, loops
//!   unrolled, `if`/`match` decided, and each layer, op and arithmetic on a
//!   tensor becomes a step of a `Plan`; errors are collected in one
//!   `ctxt::Ctxt`. It writes no code.
//! - `expand` turns a `Plan` into the module type and its trait impls, or,
//!   when checking failed, into stubs around the errors so that the caller
//!   sees only the macro's messages.
//! - `compact` is the driver; `nest` speaks the protocol by which a model
//!   gets the sources of the models it nests.
//!
//! Shared vocabulary, used by check and expand alike: `layers` and `ops`
//! (one file per layer or op family: signature, shape rule, codegen),
//! `args` (binding a call's arguments), `value` (values known at
//! expansion), `rules` (call sites, sliding windows), `shape` (the size
//! arithmetic, held against the runtime's by the facade's tests), `gen`
//! and `paths` (every path generated code names).
//!
//! # How to add a layer
//!
//! 1. Runtime: one file in `runtime/src/layers/` with the dfdx module (a
//!    builder type for `BuildOnDevice`, the built module with
//!    `TensorCollection` and `Module`/`ModuleMut`), Flax's initialisers and
//!    checkpoint keys; re-export it from `layers/mod.rs`.
//! 2. Macro: add the word to `LayerKind` in `symbol.rs` (the compiler then
//!    lists every `match` that must handle it), and one file in
//!    `macros/src/layers/`: its `Sig` (names in Flax's positional order,
//!    required ones, an example), `check` (read each argument with
//!    `Bound::req`/`Bound::or` and the `ArgVal` readers, validate the input
//!    shape through `Site`, return the layer and its output shape), and the
//!    codegen methods `ty`, `params`, `doc` (and `init` for settings dfdx's
//!    defaults lack). Wire it into the `match`es of `layers/mod.rs`.
//! 3. Tests: values and gradients against a Flax fixture (generator in
//!    `tests/python/`), a finite-difference check, a Cuda variant, and a ui
//!    case per misuse in `ui-tests/fail/`.
//!
//! An op is the same with `OpKind`, `ops/` and `ops::Op`.

use proc_macro::TokenStream;

mod args;
mod ast;
mod check;
mod compact;
mod ctxt;
mod expand;
mod gen;
mod init;
mod layers;
mod nest;
mod ops;
mod parse;
mod paths;
mod rules;
mod scan;
mod shape;
mod symbol;
mod value;

#[cfg(test)]
mod tests;

/// Turns a Flax-style `@nn.compact` model into a shape-checked dfdx module.
///
/// See `flaxen::compact` for the full documentation; the generated code
/// names only `::flaxen::__private` paths.
#[proc_macro_attribute]
pub fn compact(attr: TokenStream, item: TokenStream) -> TokenStream {
    compact::compact(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Continues the expansion of a `#[compact]` model once a nested model
/// has handed over its source; generated code calls it, users do not.
#[doc(hidden)]
#[proc_macro]
pub fn __compact_resume(input: TokenStream) -> TokenStream {
    compact::resume(input.into())
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
