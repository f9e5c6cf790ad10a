//! Code generation from a checked [`Plan`].
//!
//! For `struct Cnn` the expansion emits `CnnModule<E, D>` (one field per
//! parameterised layer), `BuildOnDevice` for `Cnn`, `TensorCollection`,
//! `Module` and `ModuleMut` for batched inputs, `Clone`, `Debug`, the
//! [`Compact`](../flaxen_runtime/compact/trait.Compact.html) consts, and
//! `const` assertions for what the macro could not fold. The `Module` impls
//! state every layer's input and output type in their where-clauses, so the
//! body type-checks from the where-clauses alone and rustc checks each shape
//! again, against the layer impls, wherever the model is used.

use crate::check::{layers, Assert, Kind, Plan};
use crate::parse::BinOp;
use crate::shape::{self, Dim};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};

fn dfdx() -> TokenStream {
    quote!(::flaxen::__private::dfdx)
}

/// The batched tensor type of a per-example shape, with tape `T`.
fn tensor_ty(shape: &[Dim]) -> TokenStream {
    let dfdx = dfdx();
    let dims = shape.iter().map(|d| {
        let g = d.generic();
        quote!(#dfdx::shapes::Const<#g>)
    });
    quote!(#dfdx::tensor::Tensor<(B, #(#dims,)*), E, D, T>)
}

/// Fields grouped into nested tuples of at most 6, the largest arity dfdx's
/// `ModuleFields` is implemented for.
fn nest(items: Vec<TokenStream>) -> TokenStream {
    if items.len() <= 6 {
        return quote!((#(#items,)*));
    }
    let groups: Vec<TokenStream> = items.chunks(6).map(|c| quote!((#(#c,)*))).collect();
    nest(groups)
}

/// For a model as written: a `macro_rules!` under the model's own name
/// (in the macro namespace) that hands its source to a model nesting it
/// (see `nest`). For an instance: nothing.
fn source_macro(plan: &Plan) -> TokenStream {
    let Some(source) = &plan.source else {
        return quote!();
    };
    let name = &plan.name;
    let mac = format_ident!("__flaxen_compact_{}", name);
    quote! {
        #[doc(hidden)]
        #[allow(unused_macros)]
        macro_rules! #mac {
            (@source $($rest:tt)*) => {
                ::flaxen::__private::compact_resume! { { #source } $($rest)* }
            };
        }
        #[doc(hidden)]
        #[allow(unused_imports)]
        pub(crate) use #mac as #name;
    }
}

/// The nested models instantiated for this one: a hidden unit type each,
/// with its full expansion.
fn inlined(plan: &Plan) -> TokenStream {
    let items = plan.inlined.iter().map(|p| {
        let name = &p.name;
        let body = expand(p);
        quote! {
            #[doc(hidden)]
            #[allow(non_camel_case_types)]
            pub struct #name;
            #body
        }
    });
    quote!(#(#items)*)
}

/// Generates everything for a checked model.
pub fn expand(plan: &Plan) -> TokenStream {
    let dfdx = dfdx();
    let rt = shape::rt_compact();
    let Plan {
        name,
        module,
        fields,
        docs,
        ..
    } = plan;
    let fnames: Vec<&syn::Ident> = fields.iter().map(|f| &f.name).collect();
    let ftys: Vec<&TokenStream> = fields.iter().map(|f| &f.ty).collect();
    let phantom = fields.is_empty();
    let marker_field = if phantom {
        quote!(#[doc(hidden)] pub __marker: ::core::marker::PhantomData<fn() -> (E, D)>,)
    } else {
        quote!()
    };
    let marker_init = if phantom {
        quote!(__marker: ::core::marker::PhantomData,)
    } else {
        quote!()
    };

    let in_shape = &plan.steps[0].shape;
    let out_shape = &plan.steps[plan.output].shape;
    let doc = module_doc(plan);
    let struct_doc = doc.iter().map(|l| quote!(#[doc = #l]));

    // TensorCollection: visit each field by name; rebuild with the same
    // layout, then restore Flax's defaults where dfdx's differ.
    let visits = fields.iter().map(|f| {
        let n = &f.name;
        let key = n.to_string();
        quote!(Self::module(#key, |s| &s.#n, |s| &mut s.#n))
    });
    let visit_tuple = nest(visits.collect());
    let pattern = nest(fnames.iter().map(|n| quote!(#n)).collect());
    let inits = fields.iter().filter(|f| !f.init.is_empty()).map(|f| {
        let n = &f.name;
        let stmts = &f.init;
        quote!({ let __f = &mut __m.#n; #(#stmts)* })
    });

    let (in_ty, out_ty) = (tensor_ty(in_shape), tensor_ty(out_shape));
    // `Module` and `ModuleMut`, each for the input tensor and for the input
    // marked `NoInputGrad(x)` (the convolutions that read it skip its
    // gradient; every other reader computes it as usual).
    let modules = [(false, false), (true, false), (false, true), (true, true)].map(
        |(mutable, no_input_grad)| {
            let (wheres, body) = forward(plan, mutable, no_input_grad);
            let (tr, call, this) = if mutable {
                (quote!(#dfdx::nn::ModuleMut), quote!(try_forward_mut), quote!(&mut self))
            } else {
                (quote!(#dfdx::nn::Module), quote!(try_forward), quote!(&self))
            };
            let (arg_ty, unwrap) = if no_input_grad {
                let l = layers();
                (quote!(#l::NoInputGrad<#in_ty>), quote!(let __t0 = __t0.0;))
            } else {
                (in_ty.clone(), quote!())
            };
            quote! {
                impl<B: #dfdx::shapes::Dim, E: #dfdx::shapes::Dtype, D: #dfdx::tensor_ops::Device<E>, T: #dfdx::tensor::Tape<E, D>>
                    #tr<#arg_ty> for #module<E, D>
                where #(#wheres,)*
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
        },
    );
    let dims = |s: &[Dim]| -> Vec<TokenStream> {
        (0..4)
            .map(|k| s.get(k).map(Dim::expr).unwrap_or(quote!(0usize)))
            .collect()
    };
    let (ind, outd) = (dims(in_shape), dims(out_shape));
    let [i0, i1, i2, i3] = [&ind[0], &ind[1], &ind[2], &ind[3]];
    let [o0, o1, o2, o3] = [&outd[0], &outd[1], &outd[2], &outd[3]];
    let (in_rank, out_rank) = (in_shape.len(), out_shape.len());
    let params = fields.iter().map(|f| f.params.expr());
    let asserts = plan.asserts.iter().map(assert);
    let passthrough = &plan.passthrough;
    let passthrough = if passthrough.is_empty() {
        quote!()
    } else {
        quote!(impl #name { #(#passthrough)* })
    };

    let instantiator = source_macro(plan);
    let instances = inlined(plan);
    quote! {
        #passthrough
        #instantiator
        #instances

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

        impl<E: #rt::ParamDtype, D: #dfdx::tensor_ops::Device<E>> #dfdx::nn::BuildOnDevice<D, E> for #name {
            type Built = #module<E, D>;
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

        impl #rt::Compact for #name {
            type Module<E: #dfdx::shapes::Dtype, D: #dfdx::tensor::Storage<E>> = #module<E, D>;
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
            const NUM_PARAMS: usize = 0usize #(+ #params)*;
        }

        #(#asserts)*
    }
}

/// The `Module` (or `ModuleMut`) where-clauses and body; with
/// `no_input_grad`, the layers that can skip the input's gradient get it
/// as `NoInputGrad(__t0)`.
fn forward(plan: &Plan, mutable: bool, no_input_grad: bool) -> (Vec<TokenStream>, TokenStream) {
    let dfdx = dfdx();
    let rt = shape::rt_compact();
    let (tr, call, this) = if mutable {
        (
            quote!(#dfdx::nn::ModuleMut),
            quote!(try_forward_mut),
            quote!(&mut self.),
        )
    } else {
        (
            quote!(#dfdx::nn::Module),
            quote!(try_forward),
            quote!(&self.),
        )
    };
    // How many reads of each step remain; every read but the last clones
    // the tensor with an empty tape (dfdx's idiom for a reused value).
    let mut remaining = vec![0usize; plan.steps.len()];
    for s in &plan.steps {
        for i in s.kind.inputs() {
            remaining[i] += 1;
        }
    }
    remaining[plan.output] += 1;
    let mut read = |i: usize| -> TokenStream {
        let v = format_ident!("__t{}", i);
        remaining[i] -= 1;
        if remaining[i] > 0 {
            quote!(#dfdx::tensor::WithEmptyTape::with_empty_tape(&#v))
        } else {
            quote!(#v)
        }
    };
    let mut wheres = Vec::new();
    let mut stmts = Vec::new();
    for (k, step) in plan.steps.iter().enumerate().skip(1) {
        let out = tensor_ty(&step.shape);
        let inputs = step.kind.inputs();
        let in_ty = inputs.first().map(|i| tensor_ty(&plan.steps[*i].shape));
        let args: Vec<TokenStream> = inputs.iter().map(|i| read(*i)).collect();
        let v = format_ident!("__t{}", k);
        let value = match &step.kind {
            Kind::Input => continue,
            Kind::Field(f, _) => {
                let field = &plan.fields[*f];
                let (ty, n) = (&field.ty, &field.name);
                let (in_ty, args) = if no_input_grad && field.skips_input_grad && inputs == [0] {
                    let l = layers();
                    (
                        quote!(#l::NoInputGrad<#in_ty>),
                        vec![quote!(#l::NoInputGrad(#(#args)*))],
                    )
                } else {
                    (quote!(#in_ty), args)
                };
                wheres.push(quote!(#ty: #tr<#in_ty, Output = #out, Error = D::Err>));
                quote!(#tr::#call(#this #n, #(#args)*)?)
            }
            Kind::Zst(ty, _) => {
                wheres.push(quote!(#ty: #tr<#in_ty, Output = #out, Error = D::Err>));
                let m = if mutable { quote!(&mut) } else { quote!(&) };
                quote!(#tr::#call(#m <#ty as ::core::default::Default>::default(), #(#args)*)?)
            }
            Kind::Dropout(rate, _) => {
                let ty = quote!(#dfdx::nn::modules::Dropout);
                wheres.push(quote!(#ty: #tr<#in_ty, Output = #out, Error = D::Err>));
                let p = *rate as f32;
                let m = if mutable { quote!(&mut) } else { quote!(&) };
                quote!(#tr::#call(#m #ty { p: #p }, #(#args)*)?)
            }
            Kind::Method(m, _) => quote!(#(#args)*.#m()?),
            Kind::Function(f, _, numbers) => {
                let f = format_ident!("{}", f);
                let act = shape::rt_activations();
                quote!(#act::#f(#(#args)* #(, #numbers)*)?)
            }
            Kind::Softmax { log, axis, .. } => {
                let m = if *log {
                    quote!(try_log_softmax)
                } else {
                    quote!(try_softmax)
                };
                let axis = proc_macro2::Literal::isize_unsuffixed(*axis as isize);
                quote!(#(#args)*.#m::<#dfdx::shapes::Axis<#axis>>()?)
            }
            Kind::Concat { axis, .. } => {
                // dfdx adds `Const` sizes only on nightly: the running result
                // has a `usize` axis (usize + Const<N> is usize), realized to
                // the macro's total at the end.
                let dyn_dims = step.shape.iter().enumerate().map(|(k, d)| {
                    if k + 1 == *axis {
                        quote!(usize)
                    } else {
                        let g = d.generic();
                        quote!(#dfdx::shapes::Const<#g>)
                    }
                });
                let dims = step.shape.iter().map(|d| {
                    let g = d.generic();
                    quote!(#dfdx::shapes::Const<#g>)
                });
                let ax = proc_macro2::Literal::usize_unsuffixed(*axis);
                let first = &args[0];
                let rest = &args[1..];
                // `try_realize` fails only on other sizes, which the macro
                // has ruled out.
                let realize = |t: TokenStream, dims: TokenStream| {
                    quote!(match #dfdx::tensor_ops::RealizeTo::try_realize::<(B, #dims)>(#t) {
                        ::core::result::Result::Ok(__t) => __t,
                        ::core::result::Result::Err(_) => ::core::unreachable!("concatenate: sizes checked by #[compact]"),
                    })
                };
                let start = realize(quote!(#first), quote!(#(#dyn_dims,)*));
                let end = realize(quote!(__c), quote!(#(#dims,)*));
                quote!({
                    let __c = #start;
                    #(let __c = #dfdx::tensor_ops::TryConcatAlong::try_concat_along((__c, #rest), #dfdx::shapes::Axis::<#ax>)?;)*
                    #end
                })
            }
            Kind::Reduce { mean, axes, .. } => {
                let m = if *mean {
                    quote!(try_mean)
                } else {
                    quote!(try_sum)
                };
                let ax: Vec<_> = axes
                    .iter()
                    .map(|a| proc_macro2::Literal::usize_unsuffixed(*a))
                    .collect();
                let axes_ty = match ax.len() {
                    1 => quote!(#dfdx::shapes::Axis<#(#ax)*>),
                    2 => quote!(#dfdx::shapes::Axes2<#(#ax),*>),
                    _ => quote!(#dfdx::shapes::Axes3<#(#ax),*>),
                };
                let dims = step.shape.iter().map(|d| {
                    let g = d.generic();
                    quote!(#dfdx::shapes::Const<#g>)
                });
                quote!(#(#args)*.#m::<(B, #(#dims,)*), #axes_ty>()?)
            }
            Kind::Reshape(_) => {
                let n = step.shape[0].generic();
                quote!({
                    let __x = #(#args)*;
                    let __b = #dfdx::shapes::HasShape::shape(&__x).0;
                    #dfdx::tensor_ops::ReshapeTo::try_reshape_like(__x, &(__b, #dfdx::shapes::Const::<#n>))?
                })
            }
            Kind::Binary(op, l, r) => {
                let (a, b) = (&args[0], &args[1]);
                let f = binop(*op);
                let (ls, rs) = (&plan.steps[*l].shape, &plan.steps[*r].shape);
                if ls.iter().chain(rs).any(|d| d.known().is_none()) {
                    // Shapes from a nested model's consts: the equality is a
                    // `const` assertion; stating the op in the where-clause
                    // keeps a mismatch from also surfacing as a trait error
                    // in the body.
                    let (lt, rt_) = (tensor_ty(ls), tensor_ty(rs));
                    let tr = binop_trait(*op);
                    wheres.push(quote!(#lt: #tr<#rt_, Err = D::Err>));
                }
                quote!(#f(#a, #b)?)
            }
            Kind::Scalar {
                op,
                value,
                scalar_first,
                ..
            } => {
                let x = &args[0];
                let s = quote!(#rt::scalar::<E>(#value));
                match (op, scalar_first) {
                    (BinOp::Sub, true) => {
                        quote!(#dfdx::tensor_ops::TryAdd::try_add(#x.try_negate()?, #s)?)
                    }
                    _ => {
                        let f = binop(*op);
                        quote!(#f(#x, #s)?)
                    }
                }
            }
            Kind::Neg(_) => quote!(#(#args)*.try_negate()?),
        };
        stmts.push(quote!(let #v: #out = #value;));
    }
    let out = read(plan.output);
    (wheres, quote!(#(#stmts)* ::core::result::Result::Ok(#out)))
}

fn binop_trait(op: BinOp) -> TokenStream {
    let dfdx = dfdx();
    match op {
        BinOp::Add => quote!(#dfdx::tensor_ops::TryAdd),
        BinOp::Sub => quote!(#dfdx::tensor_ops::TrySub),
        BinOp::Mul => quote!(#dfdx::tensor_ops::TryMul),
        BinOp::Div => quote!(#dfdx::tensor_ops::TryDiv),
    }
}

fn binop(op: BinOp) -> TokenStream {
    let dfdx = dfdx();
    match op {
        BinOp::Add => quote!(#dfdx::tensor_ops::TryAdd::try_add),
        BinOp::Sub => quote!(#dfdx::tensor_ops::TrySub::try_sub),
        BinOp::Mul => quote!(#dfdx::tensor_ops::TryMul::try_mul),
        BinOp::Div => quote!(#dfdx::tensor_ops::TryDiv::try_div),
    }
}

/// `const _: () = assert!(cond, "msg");`, reported at the user's call.
fn assert(a: &Assert) -> TokenStream {
    let (cond, msg, span): (&TokenStream, &str, Span) = (&a.cond, &a.msg, a.span);
    quote_spanned! {span=>
        const _: () = ::core::assert!(#cond, #msg);
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
        format!("Input per example: `{}`; output per example: `{}` (the batch axis comes first and may be any `Dim`).", shape::show(&plan.steps[0].shape), shape::show(&plan.steps[plan.output].shape)),
        String::new(),
        "| layer | output shape | trainable parameters |".into(),
        "| --- | --- | --- |".into(),
    ];
    let mut field_params = plan.fields.iter().map(|f| f.params.to_string());
    for s in &plan.steps {
        if let Some(d) = &s.doc {
            let p = if matches!(s.kind, Kind::Field(..)) {
                field_params.next().unwrap_or_default()
            } else {
                "0".into()
            };
            lines.push(format!("| {d} | `{}` | {p} |", shape::show(&s.shape)));
        }
    }
    let total: Vec<String> = plan.fields.iter().map(|f| f.params.to_string()).collect();
    let known: Option<usize> = plan.fields.iter().map(|f| f.params.known()).sum();
    lines.push(String::new());
    match known {
        Some(t) => lines.push(format!("Trainable parameters: {t}.")),
        None => lines.push(format!("Trainable parameters: {}.", total.join(" + "))),
    }
    lines
}
