//! What a model that has errors expands to: its errors, and its module type
//! with every trait impl a caller uses (tokio-macros' `entry.rs` idea), so
//! rustc reports the macro's messages and nothing after them.
//!
//! The outputs of the stub's `Module` impls are an array type whose length
//! is a block holding the `compile_error!`s: rustc gives such a type its
//! error type, and it does not report what follows from an error type (a
//! caller's `let y: Tensor<..> = model.forward(x)` or a loss on `y`).
//! Those impls never run, so they have no body to instrument: the
//! profiler's hooks (`forward.rs`) live in the checked model's steps only,
//! and a failed model names no profiler path.

use crate::paths;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// The stub of `name`'s module carrying `errors`; `input` is the declared
/// per-example shape when it parsed, `methods` the model's other methods
/// (`generate`), stubbed the same way.
pub fn stub(
    name: &syn::Ident,
    input: Option<&[usize]>,
    methods: &[syn::Ident],
    errors: &syn::Error,
) -> TokenStream {
    let dfdx = paths::dfdx();
    let rt = paths::compact();
    let fl = paths::flax();
    let module = format_ident!("{}Module", name);
    let invalid = format_ident!("__FlaxenInvalid{}", name);
    let errors = errors.to_compile_error();
    let (ph, ph_init) = (
        quote!(#[doc(hidden)] pub __marker: ::core::marker::PhantomData<fn() -> (E, D)>,),
        quote!(__marker: ::core::marker::PhantomData,),
    );
    // A failed model has no output and no parameters.
    let consts = super::compact_consts(input.unwrap_or(&[]), &[], 0);
    let modules = [quote!(#dfdx::nn::Module), quote!(#dfdx::nn::ModuleMut)].map(|tr| {
        let (call, this) = if tr.to_string().ends_with("ModuleMut") {
            (quote!(try_forward_mut), quote!(&mut self))
        } else {
            (quote!(try_forward), quote!(&self))
        };
        quote! {
            impl<X, E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> #tr<X> for #module<E, D> {
                type Output = #invalid;
                type Error = ::core::convert::Infallible;
                fn #call(#this, _: X) -> ::core::result::Result<Self::Output, Self::Error> {
                    ::core::unreachable!()
                }
            }
        }
    });
    let methods = methods.iter().map(|m| {
        let try_m = format_ident!("try_{}", m);
        quote! {
            #[allow(missing_docs)]
            pub fn #m<X>(&self, _: X) -> #invalid {
                ::core::unreachable!()
            }
            #[allow(missing_docs)]
            pub fn #try_m<X>(&self, _: X) -> ::core::result::Result<#invalid, ::core::convert::Infallible> {
                ::core::unreachable!()
            }
        }
    });
    quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        type #invalid = [(); { #errors 0 }];

        impl<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> #module<E, D> {
            #(#methods)*
        }

        #[allow(non_camel_case_types)]
        pub struct #module<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> { #ph }

        impl<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> ::core::clone::Clone for #module<E, D> {
            fn clone(&self) -> Self { Self { #ph_init } }
        }

        impl<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> ::core::fmt::Debug for #module<E, D> {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(::core::stringify!(#module))
            }
        }

        // Generics that no model name can shadow (a model may be named `E`).
        impl<__E: #rt::ParamDtype, __D: #dfdx::tensor_ops::Device<__E>> #dfdx::nn::BuildOnDevice<__D, __E> for #name {
            type Built = #module<__E, __D>;
        }

        impl<E: #rt::ParamDtype, D: #dfdx::tensor_ops::Device<E>> #dfdx::nn::TensorCollection<E, D> for #module<E, D> {
            type To<E2: #dfdx::shapes::Dtype, D2: #dfdx::tensor_ops::Device<E2>> = #module<E2, D2>;

            fn iter_tensors<V: #dfdx::nn::ModuleVisitor<Self, E, D>>(
                visitor: &mut V,
            ) -> ::core::result::Result<::core::option::Option<Self::To<V::E2, V::D2>>, V::Err> {
                visitor.visit_fields((), |()| #module { #ph_init })
            }
        }

        #(#modules)*

        impl<E: #rt::ParamDtype, D: #dfdx::tensor_ops::Device<E>> #rt::Initialize<E, D> for #module<E, D> {
            fn try_initialize(&mut self) -> ::core::result::Result<(), D::Err> {
                ::core::result::Result::Ok(())
            }
        }

        impl<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> #fl::FlaxLayout for #module<E, D> {
            fn flax_leaves(_: &mut #fl::FlaxLeaves) {}
        }

        impl #rt::Compact for #name {
            type Module<__E: #dfdx::shapes::Dtype, __D: #dfdx::tensor::Storage<__E>> = #module<__E, __D>;
            #consts
        }
    }
}
