//! Small pieces of generated code shared by the layers, the ops and the
//! expansion.

use crate::ast::Elem;
use crate::paths;
use proc_macro2::{Literal, TokenStream};
use quote::quote;

/// An unsuffixed integer literal (`32`, not `32usize`), so generated types
/// read like hand-written ones in rustdoc and compiler messages.
pub fn lit(n: usize) -> Literal {
    Literal::usize_unsuffixed(n)
}

/// `(B, Const<d0>, Const<d1>, ..)`: the batched shape of a per-example one.
pub fn batched_shape(shape: &[usize]) -> TokenStream {
    let dfdx = paths::dfdx();
    let dims = shape.iter().map(|d| {
        let d = lit(*d);
        quote!(#dfdx::shapes::Const<#d>)
    });
    quote!((B, #(#dims,)*))
}

/// The batched tensor type of a per-example shape, with tape `T`.
pub fn tensor_ty(shape: &[usize]) -> TokenStream {
    typed_tensor(shape, Elem::Float, true)
}

/// The batched tensor type of a per-example shape holding `elem`, with the
/// tape `T` or none. A mask never carries a tape.
pub fn typed_tensor(shape: &[usize], elem: Elem, taped: bool) -> TokenStream {
    let dfdx = paths::dfdx();
    let s = batched_shape(shape);
    match (elem, taped) {
        (Elem::Float, true) => quote!(#dfdx::tensor::Tensor<#s, E, D, T>),
        (Elem::Float, false) => quote!(#dfdx::tensor::Tensor<#s, E, D>),
        (Elem::Index, true) => quote!(#dfdx::tensor::Tensor<#s, usize, D, T>),
        (Elem::Index, false) => quote!(#dfdx::tensor::Tensor<#s, usize, D>),
        (Elem::Bool, _) => quote!(#dfdx::tensor::Tensor<#s, bool, D>),
    }
}

/// The tape type of a model's `k`-th input: `T` for the first, `__T1`,
/// `__T2`, .. for the others.
pub fn input_tape(k: usize) -> syn::Ident {
    match k {
        0 => quote::format_ident!("T"),
        k => quote::format_ident!("__T{}", k),
    }
}

/// The batched tensor type of a model input holding `elem`, with the tape
/// `tape` (a mask never carries one).
pub fn input_tensor(shape: &[usize], elem: Elem, tape: &syn::Ident) -> TokenStream {
    let dfdx = paths::dfdx();
    let s = batched_shape(shape);
    match elem {
        Elem::Float => quote!(#dfdx::tensor::Tensor<#s, E, D, #tape>),
        Elem::Index => quote!(#dfdx::tensor::Tensor<#s, usize, D, #tape>),
        Elem::Bool => quote!(#dfdx::tensor::Tensor<#s, bool, D>),
    }
}

/// The trait a forward pass implements: `Module` (inference) or
/// `ModuleMut` (training).
pub struct Mode {
    /// `ModuleMut` rather than `Module`.
    pub mutable: bool,
}

impl Mode {
    /// The trait's path.
    pub fn tr(&self) -> TokenStream {
        let dfdx = paths::dfdx();
        if self.mutable {
            quote!(#dfdx::nn::ModuleMut)
        } else {
            quote!(#dfdx::nn::Module)
        }
    }

    /// The trait's method.
    pub fn call(&self) -> TokenStream {
        if self.mutable {
            quote!(try_forward_mut)
        } else {
            quote!(try_forward)
        }
    }

    /// `&mut` or `&`.
    pub fn by_ref(&self) -> TokenStream {
        if self.mutable {
            quote!(&mut)
        } else {
            quote!(&)
        }
    }

    /// Runs the module `module` (an expression) of type `ty` on `arg` with
    /// input type `in_ty` and output type `out_ty`: the call and the
    /// where-clause that states it, so the body type-checks from the
    /// where-clauses alone.
    pub fn apply(
        &self,
        ty: &TokenStream,
        module: TokenStream,
        arg: TokenStream,
        in_ty: &TokenStream,
        out_ty: &TokenStream,
    ) -> (TokenStream, TokenStream) {
        let (tr, call) = (self.tr(), self.call());
        (
            quote!(#tr::#call(#module, #arg)?),
            quote!(#ty: #tr<#in_ty, Output = #out_ty, Error = D::Err>),
        )
    }
}
