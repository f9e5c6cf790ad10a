//! Code generation from a checked [`Plan`].
//!
//! For `struct Cnn` the expansion emits `CnnModule<E, D>` (one field per
//! layer with parameters), `BuildOnDevice` for `Cnn`, `TensorCollection`,
//! `Module` and `ModuleMut` for batched inputs, `Clone`, `Debug` and the
//! `Compact` consts. The `Module` impls state every layer's input and
//! output type in their where-clauses, so the body type-checks from the
//! where-clauses alone and rustc checks each shape again, against the layer
//! impls, wherever the model is used. When the checker failed, [`stub`]
//! emits the same items around an error type instead.

mod forward;
mod stub;

use crate::check::{Kind, Plan};
use crate::gen::Mode;
use crate::ops::Op;
use crate::paths;
use crate::shape;
use proc_macro2::TokenStream;
use quote::quote;

pub use stub::stub;

/// Fields grouped into nested tuples of at most 6, the largest arity dfdx's
/// `ModuleFields` is implemented for.
fn nest(items: Vec<TokenStream>) -> TokenStream {
    if items.len() <= 6 {
        return quote!((#(#items,)*));
    }
    let groups: Vec<TokenStream> = items.chunks(6).map(|c| quote!((#(#c,)*))).collect();
    nest(groups)
}

/// Generates everything for a checked model and the instances of the
/// models it nests.
pub fn expand(plan: &Plan, docs: &[syn::Attribute]) -> TokenStream {
    let dfdx = paths::dfdx();
    let rt = paths::compact();
    let Plan {
        name,
        module,
        fields,
        ..
    } = plan;
    let fnames: Vec<&syn::Ident> = fields.iter().map(|f| &f.name).collect();
    let ftys: Vec<TokenStream> = fields.iter().map(|f| f.layer.ty()).collect();
    let (in_shape, out_shape) = (&plan.steps[0].shape, &plan.steps[plan.output].shape);
    let struct_doc = module_doc(plan).into_iter().map(|l| quote!(#[doc = #l]));

    // TensorCollection: visit each field by name; rebuild with the same
    // layout, then restore Flax's settings where dfdx's defaults differ.
    let visits = fields.iter().map(|f| {
        let n = &f.name;
        let key = n.to_string();
        match &f.layer {
            crate::layers::Layer::Param(p) => p.visit(&key, n),
            _ => quote!(Self::module(#key, |s| &s.#n, |s| &mut s.#n)),
        }
    });
    let visit_tuple = nest(visits.collect());
    let pattern = nest(fnames.iter().map(|n| quote!(#n)).collect());
    let inits = fields.iter().filter_map(|f| {
        let (n, stmts) = (&f.name, f.layer.init());
        (!stmts.is_empty()).then(|| quote!({ let __f = &mut __m.#n; #(#stmts)* }))
    });
    let fills = fields.iter().filter_map(|f| {
        let (n, stmts) = (&f.name, f.layer.initialize());
        (!stmts.is_empty()).then(|| quote!({ let __f = &mut self.#n; #(#stmts)* }))
    });
    let phantom = fields.is_empty();
    let (marker_field, marker_init) = marker(phantom);

    // One input is the tensor itself; several are a tuple in declaration
    // order. Each tensor input after the first has a tape type of its own
    // (`__T1`, ..) that the first's tape must absorb (dfdx's `Merge`): an
    // input computed inside an outer model arrives with a share of its tape
    // (so the gradient reaches whatever computed it), one from the caller
    // usually with none.
    let (in_ty, extra_tapes, out_ty) = io_types(plan);
    let methods = methods(plan);
    // `Module` and `ModuleMut`, each for the input tensor and, for a model
    // of one float input, for the input marked `NoInputGrad(x)` (the
    // convolutions that read it skip its gradient; every other reader
    // computes it as usual).
    let modes: &[(bool, bool)] =
        if plan.num_inputs == 1 && plan.steps[0].elem == crate::ast::Elem::Float {
            &[(false, false), (true, false), (false, true), (true, true)]
        } else {
            &[(false, false), (true, false)]
        };
    let modules = modes.iter().map(|&(mutable, no_input_grad)| {
        let mode = Mode { mutable };
        let (wheres, body) = forward::forward(plan, &plan.fields, &mode, no_input_grad);
        let (tr, call) = (mode.tr(), mode.call());
        let this = if mutable { quote!(&mut self) } else { quote!(&self) };
        let (arg_ty, unwrap) = if no_input_grad {
            let l = paths::layers();
            (quote!(#l::NoInputGrad<#in_ty>), quote!(let __t0 = __t0.0;))
        } else {
            (in_ty.clone(), quote!())
        };
        quote! {
            impl<B: #dfdx::shapes::Dim, E: #dfdx::shapes::Dtype, D: #dfdx::tensor_ops::Device<E>, T: #dfdx::tensor::Tape<E, D> #(, #extra_tapes: #dfdx::tensor::Tape<E, D>)*>
                #tr<#arg_ty> for #module<E, D>
            where #(T: #dfdx::tensor::Merge<#extra_tapes>,)* #(#wheres,)*
            {
                type Output = #out_ty;
                type Error = D::Err;
                #[allow(unused_variables, clippy::let_and_return)]
                fn #call(#this, __t0: #arg_ty) -> ::core::result::Result<Self::Output, D::Err> {
                    #unwrap
                    #body
                }
            }
        }
    });
    let params: usize = fields
        .iter()
        .fold(0usize, |n, f| n.saturating_add(f.layer.params()));
    let consts = compact_consts(in_shape, out_shape, params);
    // Each field's place in a Flax checkpoint, from what the model says of
    // it: its Flax name, its kind, and the map a `Dense` reads flattened.
    let fl = paths::flax();
    let flax_leaves = fields.iter().enumerate().map(|(k, f)| {
        f.layer
            .flax(&f.name.to_string(), &f.flax, flattened(plan, k))
    });
    // Name each nested model as its user: a private model only called as a
    // layer is not dead code, and rustc checks the path is a model.
    let uses = plan
        .nested_paths
        .iter()
        .map(|p| quote!(const _: usize = <#p as #rt::Compact>::IN_RANK;));
    let instances = plan.inlined.iter().map(|p| {
        let (name, body) = (&p.name, expand(p, &[]));
        quote! {
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            pub struct #name;
            #body
        }
    });
    quote! {
        #(#instances)*

        #(#docs)*
        #(#struct_doc)*
        #[allow(non_camel_case_types)]
        pub struct #module<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> {
            #(#[allow(missing_docs)] pub #fnames: #ftys,)*
            #marker_field
        }

        impl<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> ::core::clone::Clone for #module<E, D>
        where #(#ftys: ::core::clone::Clone,)*
        {
            fn clone(&self) -> Self {
                Self { #(#fnames: ::core::clone::Clone::clone(&self.#fnames),)* #marker_init }
            }
        }

        impl<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> ::core::fmt::Debug for #module<E, D>
        where #(#ftys: ::core::fmt::Debug,)*
        {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(::core::stringify!(#module))
                    #(.field(::core::stringify!(#fnames), &self.#fnames))*
                    .finish()
            }
        }

        // Generics that no model name can shadow (a model may be named `E`).
        impl<__E: #rt::ParamDtype, __D: #dfdx::tensor_ops::Device<__E>> #dfdx::nn::BuildOnDevice<__D, __E> for #name {
            type Built = #module<__E, __D>;
            fn try_build_on_device(__device: &__D) -> ::core::result::Result<Self::Built, __D::Err> {
                let mut __m = <Self::Built as #dfdx::nn::BuildModule<__D, __E>>::try_build(__device)?;
                #rt::Initialize::<__E, __D>::try_initialize(&mut __m)?;
                ::core::result::Result::Ok(__m)
            }
        }

        impl<E: #rt::ParamDtype, D: #dfdx::tensor_ops::Device<E>> #rt::Initialize<E, D> for #module<E, D> {
            fn try_initialize(&mut self) -> ::core::result::Result<(), D::Err> {
                #(#fills)*
                ::core::result::Result::Ok(())
            }
        }

        impl<E: #rt::ParamDtype, D: #dfdx::tensor_ops::Device<E>> #dfdx::nn::TensorCollection<E, D> for #module<E, D> {
            type To<E2: #dfdx::shapes::Dtype, D2: #dfdx::tensor_ops::Device<E2>> = #module<E2, D2>;

            fn iter_tensors<V: #dfdx::nn::ModuleVisitor<Self, E, D>>(
                visitor: &mut V,
            ) -> ::core::result::Result<::core::option::Option<Self::To<V::E2, V::D2>>, V::Err> {
                visitor.visit_fields(#visit_tuple, |#pattern| {
                    #[allow(unused_mut)]
                    let mut __m = #module { #(#fnames,)* #marker_init };
                    #(#inits)*
                    __m
                })
            }
        }

        #(#modules)*

        #methods

        impl<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> #fl::FlaxLayout for #module<E, D> {
            fn flax_leaves(__out: &mut #fl::FlaxLeaves) {
                #(#flax_leaves)*
            }
        }

        impl #rt::Compact for #name {
            type Module<__E: #dfdx::shapes::Dtype, __D: #dfdx::tensor::Storage<__E>> = #module<__E, __D>;
            #consts
        }

        #(#uses)*
    }
}

/// The `[c, h, w]` map that field `field` (a `Dense`) reads through a
/// `flatten` or a `reshape` to one axis, past elementwise activations and
/// dropout: Flax flattens such maps in NHWC order, so its kernel's rows
/// need permuting. `None` for any other input, and for
/// `flatten(x, channels_first = true)`.
fn flattened(plan: &Plan, field: usize) -> Option<[usize; 3]> {
    let step = plan
        .steps
        .iter()
        .find(|s| matches!(&s.kind, Kind::Field { field: f, .. } if *f == field))?;
    let Kind::Field { inputs, .. } = &step.kind else {
        return None;
    };
    let mut at = *inputs.first()?;
    loop {
        match &plan.steps[at].kind {
            Kind::Op {
                op: Op::Activation(_) | Op::Dropout(_),
                inputs,
            } => at = *inputs.first()?,
            Kind::Op {
                op:
                    Op::FlattenImage {
                        chw,
                        channels_first,
                    },
                ..
            } => return (!channels_first).then_some(*chw),
            Kind::Op {
                op: Op::Reshape,
                inputs,
            } => {
                let from = &plan.steps[*inputs.first()?].shape;
                return match (from.as_slice(), plan.steps[at].shape.len()) {
                    (&[c, h, w], 1) => Some([c, h, w]),
                    _ => None,
                };
            }
            _ => return None,
        }
    }
}

/// The marker field of a module without fields (and its initialiser).
fn marker(phantom: bool) -> (TokenStream, TokenStream) {
    if phantom {
        (
            quote!(#[doc(hidden)] pub __marker: ::core::marker::PhantomData<fn() -> (E, D)>,),
            quote!(__marker: ::core::marker::PhantomData,),
        )
    } else {
        (quote!(), quote!())
    }
}

/// The `Compact` consts: shapes (unused axes 0) and the parameter count.
pub(super) fn compact_consts(
    in_shape: &[usize],
    out_shape: &[usize],
    params: usize,
) -> TokenStream {
    let dims = |s: &[usize]| -> [usize; 4] { [0, 1, 2, 3].map(|k| s.get(k).copied().unwrap_or(0)) };
    let [i0, i1, i2, i3] = dims(in_shape);
    let [o0, o1, o2, o3] = dims(out_shape);
    let (in_rank, out_rank) = (in_shape.len(), out_shape.len());
    quote! {
        const IN_RANK: usize = #in_rank;
        const IN_0: usize = #i0;
        const IN_1: usize = #i1;
        const IN_2: usize = #i2;
        const IN_3: usize = #i3;
        const OUT_RANK: usize = #out_rank;
        const OUT_0: usize = #o0;
        const OUT_1: usize = #o1;
        const OUT_2: usize = #o2;
        const OUT_3: usize = #o3;
        const NUM_PARAMS: usize = #params;
    }
}

/// The rustdoc of the generated module: a table of layers with output shape
/// and parameter count.
fn module_doc(plan: &Plan) -> Vec<String> {
    let name = &plan.name;
    let mut lines = vec![
        String::new(),
        format!("The module `#[compact]` built from `{name}` (`dev.build_module::<{name}, f32>()`)."),
        String::new(),
        format!(
            "Input per example: `{}`; output per example: `{}` (the batch axis comes first and may be any `Dim`).",
            shape::show(&plan.steps[0].shape),
            std::iter::once(plan.output)
                .chain(plan.more_outputs.iter().copied())
                .map(|o| shape::show(&plan.steps[o].shape))
                .collect::<Vec<_>>()
                .join("`, `")
        ),
        String::new(),
        "| layer | output shape | trainable parameters |".into(),
        "| --- | --- | --- |".into(),
    ];
    for s in &plan.steps {
        let row = match &s.kind {
            Kind::Field { field, .. } => {
                let f = &plan.fields[*field];
                Some((format!("`{}`: {}", f.name, f.layer.doc()), f.layer.params()))
            }
            Kind::Op { op, .. } => op.doc().map(|d| (d, 0)),
            _ => None,
        };
        if let Some((d, p)) = row {
            lines.push(format!("| {d} | `{}` | {p} |", shape::show(&s.shape)));
        }
    }
    let total = plan
        .fields
        .iter()
        .fold(0usize, |n, f| n.saturating_add(f.layer.params()));
    lines.push(String::new());
    lines.push(format!("Trainable parameters: {total}."));
    lines
}

/// The input type (one tensor, or a tuple of them), the tape types of the
/// inputs after the first, and the output type (a tuple for several).
fn io_types(plan: &Plan) -> (TokenStream, Vec<syn::Ident>, TokenStream) {
    let out_shape = &plan.steps[plan.output].shape;
    let in_ty = match plan.num_inputs {
        1 => plan.steps[0].ty(),
        n => {
            let tys = plan.steps[..n].iter().enumerate().map(|(k, s)| {
                crate::gen::input_tensor(&s.shape, s.elem, &crate::gen::input_tape(k))
            });
            quote!((#(#tys,)*))
        }
    };
    let extra_tapes: Vec<syn::Ident> = (1..plan.num_inputs)
        .filter(|&k| plan.steps[k].elem != crate::ast::Elem::Bool)
        .map(crate::gen::input_tape)
        .collect();
    let out_ty = match plan.more_outputs.is_empty() {
        true => crate::gen::tensor_ty(out_shape),
        false => {
            let tys = std::iter::once(plan.output)
                .chain(plan.more_outputs.iter().copied())
                .map(|o| crate::gen::tensor_ty(&plan.steps[o].shape));
            quote!((#(#tys,)*))
        }
    };
    (in_ty, extra_tapes, out_ty)
}

/// The model's other methods (`generate`), inherent methods of the module
/// over its fields: `try_generate` and `generate`, in inference mode
/// (`&self`, as `forward`).
fn methods(plan: &Plan) -> TokenStream {
    let dfdx = paths::dfdx();
    let module = &plan.module;
    let fns = plan.methods.iter().map(|m| {
        let (in_ty, extra_tapes, out_ty) = io_types(&m.plan);
        let mode = Mode { mutable: false };
        let (wheres, body) = forward::forward(&m.plan, &plan.fields, &mode, false);
        let (name, docs) = (&m.name, &m.docs);
        let try_name = quote::format_ident!("try_{}", name);
        let generics = quote!(<B: #dfdx::shapes::Dim, T: #dfdx::tensor::Tape<E, D> #(, #extra_tapes: #dfdx::tensor::Tape<E, D>)*>);
        let bounds = quote!(where #(T: #dfdx::tensor::Merge<#extra_tapes>,)* #(#wheres,)*);
        let try_doc = format!("[`Self::{name}`], returning the device's error instead of panicking.");
        quote! {
            #(#docs)*
            #[allow(clippy::type_complexity)]
            pub fn #name #generics(&self, __x: #in_ty) -> #out_ty #bounds {
                self.#try_name(__x).unwrap()
            }

            #[doc = #try_doc]
            #[allow(unused_variables, clippy::let_and_return, clippy::type_complexity)]
            pub fn #try_name #generics(&self, __t0: #in_ty) -> ::core::result::Result<#out_ty, D::Err> #bounds {
                #body
            }
        }
    });
    match plan.methods.is_empty() {
        true => quote!(),
        false => quote! {
            impl<E: #dfdx::shapes::Dtype, D: #dfdx::tensor_ops::Device<E>> #module<E, D> {
                #(#fns)*
            }
        },
    }
}
