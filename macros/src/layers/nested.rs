//! A `#[compact]` model called as a layer of another: instantiated by the
//! checker for the call's input shape and arguments, expanded beside the
//! outer model as a hidden type.

use crate::paths;
use proc_macro2::TokenStream;
use quote::quote;

/// An instance of a nested model.
pub struct Nested {
    /// The hidden type of the instance (`__Net_block_0`).
    pub ident: syn::Ident,
    /// The model's path as written, for messages.
    pub path: String,
    /// Its trainable parameters.
    pub params: usize,
}

impl Nested {
    pub fn ty(&self) -> TokenStream {
        let (ident, rt) = (&self.ident, paths::compact());
        quote!(<#ident as #rt::Compact>::Module<E, D>)
    }
}
