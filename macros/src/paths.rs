//! Every path that generated code names, in one place (pin-project's
//! `crate_path`): generated code reaches the runtime only through the
//! hidden `::flaxen::__private` module.

use proc_macro2::TokenStream;
use quote::quote;

/// dfdx, as re-exported by flaxen.
pub fn dfdx() -> TokenStream {
    quote!(::flaxen::__private::dfdx)
}

/// flaxen's layers.
pub fn layers() -> TokenStream {
    quote!(::flaxen::__private::flaxen_runtime::layers)
}

/// The runtime's support module for generated code (`Compact`, `scalar`).
pub fn compact() -> TokenStream {
    quote!(::flaxen::__private::flaxen_runtime::compact)
}

/// The runtime's activations (ops dfdx lacks or gets wrong).
pub fn activations() -> TokenStream {
    quote!(::flaxen::__private::flaxen_runtime::activations)
}

/// The macro that continues an expansion once a nested model's source
/// has arrived.
pub fn compact_resume() -> TokenStream {
    quote!(::flaxen::__private::compact_resume)
}

/// The runtime's Flax checkpoint mapping (`FlaxLayout`, `FlaxKind`).
pub fn flax() -> TokenStream {
    quote!(::flaxen::__private::flaxen_runtime::interop::flax)
}

/// The runtime's profiler hooks, called around each layer and op.
pub fn profile() -> TokenStream {
    quote!(::flaxen::__private::flaxen_runtime::profile)
}

/// The runtime's initialisers (`Init`, `Fans`).
pub fn init() -> TokenStream {
    quote!(::flaxen::__private::flaxen_runtime::init)
}
