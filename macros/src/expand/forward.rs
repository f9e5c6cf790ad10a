//! The body of a `Module` / `ModuleMut` impl: one `let` per step.

use crate::ast::Arith;
use crate::ast::Elem;
use crate::check::{Field, Kind, Plan};
use crate::gen::Mode;
use crate::ops::Io;
use crate::paths;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use std::collections::HashMap;

/// The where-clauses and body; with `no_input_grad`, the layers that can
/// skip the input's gradient get it as `NoInputGrad(__t0)`.
///
/// Every step but the inputs runs between the profiler's hooks:
/// `let __s = enter("conv_0");` before it (`enter_block` for a nested
/// model, whose calls are then named under its own), `mark(&__s, x)` on its
/// first tensor input (the "backward ends" marker on the tape) and
/// `exit(y, __s)` on its output ("backward starts"; `exit_untaped` for a
/// mask). Without a running profiler each is one atomic load and moves.
pub fn forward(
    plan: &Plan,
    fields: &[Field],
    mode: &Mode,
    no_input_grad: bool,
) -> (Vec<TokenStream>, TokenStream) {
    let dfdx = paths::dfdx();
    let rt = paths::compact();
    let prof = paths::profile();
    let names = span_names(plan, fields);
    // How many reads of each step remain; every read but the last clones
    // the tensor with an empty tape (dfdx's idiom for a reused value).
    let mut remaining = vec![0usize; plan.steps.len()];
    for s in &plan.steps {
        for i in s.kind.inputs() {
            remaining[i] += 1;
        }
    }
    remaining[plan.output] += 1;
    for &o in &plan.more_outputs {
        remaining[o] += 1;
    }
    let masks: Vec<bool> = plan.steps.iter().map(|s| s.elem == Elem::Bool).collect();
    let roots = id_roots(plan);
    let mut read = |i: usize| -> TokenStream {
        let v = format_ident!("__t{}", i);
        remaining[i] -= 1;
        match (remaining[i] > 0, masks[i]) {
            (false, _) => quote!(#v),
            (true, true) => quote!(::core::clone::Clone::clone(&#v)),
            (true, false) => quote!(#dfdx::tensor::WithEmptyTape::with_empty_tape(&#v)),
        }
    };
    let mut wheres = Vec::new();
    let mut stmts = Vec::new();
    // Several inputs arrive as a tuple. The tapes of those after the first
    // move onto the first (what computed them is recorded there, so their
    // gradients flow back to it); each then gets an empty tape of the
    // first's type, merged back where their paths meet, so the layers that
    // read them record their gradients.
    let n = plan.num_inputs;
    if n > 1 {
        let vars = (0..n).map(|k| format_ident!("__t{}", k));
        stmts.push(quote!(let (#(#vars,)*) = __t0;));
        let taped: Vec<usize> = (1..n)
            .filter(|&k| plan.steps[k].elem != Elem::Bool)
            .collect();
        if !taped.is_empty() {
            stmts
                .push(quote!(let (__t0, mut __tape) = #dfdx::tensor::SplitTape::split_tape(__t0);));
            for &k in &taped {
                let v = format_ident!("__t{}", k);
                let ty = plan.steps[k].ty();
                stmts.push(quote! {
                    let (#v, __tk) = #dfdx::tensor::SplitTape::split_tape(#v);
                    __tape = #dfdx::tensor::Merge::merge(__tape, __tk);
                    let #v: #ty = #dfdx::tensor::PutTape::put_tape(#v, ::core::default::Default::default());
                });
            }
            stmts.push(quote!(let __t0 = #dfdx::tensor::PutTape::put_tape(__t0, __tape);));
        }
    }
    // The batch (and device) that a declared parameter's value and a
    // constant row are broadcast over.
    let params = plan.steps.iter().any(|s| {
        matches!(s.kind, Kind::Field { field, .. }
            if matches!(fields[field].layer, crate::layers::Layer::Param(_)))
    });
    let rows = plan.steps.iter().any(|s| {
        matches!(
            s.kind,
            Kind::Op {
                op: crate::ops::Op::Arange { .. }
                    | crate::ops::Op::Draw(_)
                    | crate::ops::Op::Table(_),
                ..
            }
        )
    });
    if params || rows {
        stmts.push(quote!(let __batch = #dfdx::shapes::HasShape::shape(&__t0).0;));
        stmts.push(quote!(let __device = ::core::clone::Clone::clone(__t0.device());));
    }
    for (k, step) in plan.steps.iter().enumerate().skip(n) {
        // An output of a nested model's tuple, moved out once.
        if let Kind::Item { of, index } = step.kind {
            let (v, part) = (
                format_ident!("__t{}", k),
                format_ident!("__t{}_{}", of, index),
            );
            let ty = step.ty();
            stmts.push(quote!(let #v: #ty = #part;));
            continue;
        }
        let out = step.ty();
        let inputs = step.kind.inputs();
        let in_tys: Vec<TokenStream> = inputs.iter().map(|i| plan.steps[*i].ty()).collect();
        let in_ty = in_tys.first().cloned().unwrap_or_default();
        let mut args: Vec<TokenStream> = inputs.iter().map(|i| read(*i)).collect();
        if let (Some(first), Some(x)) = (inputs.first(), args.first_mut()) {
            if !masks[*first] {
                *x = quote!(#prof::mark(&__s, #x));
            }
        }
        let v = format_ident!("__t{}", k);
        let value = match &step.kind {
            Kind::Input | Kind::Folded | Kind::Item { .. } => continue,
            Kind::ConvBlock {
                field, relu, pool, ..
            } => {
                let f = &fields[*field];
                let (ty, n) = (f.layer.ty(), &f.name);
                let l = paths::layers();
                let x = &args[0];
                // The network's input batch needs no gradient (as
                // `NoInputGrad` for a plain layer).
                let input_grad = !(no_input_grad && inputs == [0]);
                let pool = match pool {
                    Some(p) => {
                        let p = p.ty();
                        quote!(::core::option::Option::Some((<#p>::KIND, <#p>::GEOMETRY)))
                    }
                    None => quote!(::core::option::Option::None),
                };
                wheres.push(quote!(#ty: #l::ConvLayer<E, D>));
                wheres.push(quote!(D: #l::FlaxenDevice<E>));
                let c = quote!(#dfdx::shapes::Const);
                quote!({
                    let __x = #x;
                    let __b = #dfdx::shapes::HasShape::shape(&__x).0;
                    let __epi = #l::Epilogue { relu: #relu, pool: #pool };
                    #l::conv_block(&self.#n, &__epi, __x, (__b, #c, #c, #c), #input_grad)?
                })
            }
            Kind::Field { field, .. } => {
                let field = &fields[*field];
                if let crate::layers::Layer::Param(p) = &field.layer {
                    p.value(&field.name)
                } else {
                    let (ty, n) = (field.layer.ty(), &field.name);
                    let r = mode.by_ref();
                    let (in_ty, x) = match &args[..] {
                        [x] if no_input_grad && field.layer.skips_input_grad() && inputs == [0] => {
                            let l = paths::layers();
                            (quote!(#l::NoInputGrad<#in_ty>), quote!(#l::NoInputGrad(#x)))
                        }
                        [x] => (in_ty, x.clone()),
                        several => (quote!((#(#in_tys,)*)), quote!((#(#several,)*))),
                    };
                    let (value, w) = mode.apply(&ty, quote!(#r self.#n), x, &in_ty, &out);
                    wheres.push(w);
                    value
                }
            }
            Kind::Op { op, .. } => {
                let (value, w) = op.expand(
                    Io {
                        args,
                        in_ty: &in_ty,
                        in_tys: &in_tys,
                        out_ty: &out,
                        out: &step.shape,
                    },
                    mode,
                );
                wheres.extend(w);
                value
            }
            Kind::Binary(op, ..) => {
                let (a, b) = (&args[0], &args[1]);
                let f = binop(*op);
                // dfdx's binary ops need operands of two tensor ids, and
                // views (reshape, transpose, broadcast) keep their input's:
                // `x * x` or `x + transpose(x)` reads one id twice. The
                // right operand then goes through a copy of its own.
                let b = if roots[inputs[0]] == roots[inputs[1]] {
                    let one = quote!(#rt::scalar::<E>(1.0));
                    quote!(#dfdx::tensor_ops::TryMul::try_mul(#b, #one)?)
                } else {
                    b.clone()
                };
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
                    // Against a number: a tensor of it, without a tape.
                    (Arith::Max | Arith::Min, _) => {
                        let f = binop(*op);
                        quote!({
                            let __x = #x;
                            let __shape = *#dfdx::shapes::HasShape::shape(&__x);
                            let __c = #dfdx::tensor::OnesTensor::try_ones_like(__x.device(), &__shape)?;
                            #f(__x, #dfdx::tensor_ops::TryMul::try_mul(__c, #s)?)?
                        })
                    }
                    (Arith::Sub, true) => {
                        quote!(#dfdx::tensor_ops::TryAdd::try_add(#x.try_negate()?, #s)?)
                    }
                    _ => {
                        let f = binop(*op);
                        quote!(#f(#x, #s)?)
                    }
                }
            }
            Kind::Neg(_) => {
                let x = &args[0];
                quote!(#x.try_negate()?)
            }
        };
        let (name, block) = &names[k];
        let enter = if *block {
            quote!(enter_block)
        } else {
            quote!(enter)
        };
        let exit = if masks[k] {
            quote!(exit_untaped)
        } else {
            quote!(exit)
        };
        if step.more.is_empty() {
            stmts.push(quote! {
                let __s = #prof::#enter(#name);
                let #v: #out = #prof::#exit(#value, __s);
            });
        } else {
            // A tuple: the first output carries the call's tape.
            let parts: Vec<syn::Ident> = (0..=step.more.len())
                .map(|i| format_ident!("__t{}_{}", k, i))
                .collect();
            let first = &parts[0];
            stmts.push(quote! {
                let __s = #prof::#enter(#name);
                let (#(#parts,)*): #out = #value;
                let #first = #prof::#exit(#first, __s);
            });
        }
    }
    // Several outputs: the whole tape goes with the first (each output's
    // share is merged onto it), the others get empty tapes. A loss that
    // reads the first, alone or with the others, has every gradient; a
    // share left on an output the loss ignores would silently lose the
    // gradients of what that output's tape recorded (a shared trunk).
    let out = match plan.more_outputs.is_empty() {
        true => read(plan.output),
        false => {
            let all: Vec<TokenStream> = std::iter::once(plan.output)
                .chain(plan.more_outputs.iter().copied())
                .map(&mut read)
                .collect();
            let vars: Vec<syn::Ident> = (0..all.len()).map(|k| format_ident!("__o{}", k)).collect();
            let (first, rest) = (&vars[0], &vars[1..]);
            let first_value = &all[0];
            let rest_values = &all[1..];
            let split = quote!(#dfdx::tensor::SplitTape::split_tape);
            let put = quote!(#dfdx::tensor::PutTape::put_tape);
            stmts.push(quote! {
                let (#first, mut __tape) = #split(#first_value);
                #(
                    let (#rest, __share) = #split(#rest_values);
                    __tape = #dfdx::tensor::Merge::merge(__tape, __share);
                )*
            });
            quote!((#put(#first, __tape), #(#put(#rest, ::core::default::Default::default()),)*))
        }
    };
    (wheres, quote!(#(#stmts)* ::core::result::Result::Ok(#out)))
}

/// Each step's profiler name and whether it is a nested model's call: a
/// layer's field name (`conv_0`), an op's word counted per model in call
/// order (`relu_0`, `relu_1`), `add_0` / `sub_0` / `mul_0` / `div_0` for
/// arithmetic (with a tensor or a number), `neg_0`.
fn span_names(plan: &Plan, fields: &[Field]) -> Vec<(String, bool)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut counted = |word: String| {
        let n = counts.entry(word.clone()).or_default();
        *n += 1;
        format!("{word}_{}", *n - 1)
    };
    plan.steps
        .iter()
        .map(|s| match &s.kind {
            Kind::Input | Kind::Folded | Kind::Item { .. } => (String::new(), false),
            // The ops a block absorbed keep their counts: `conv_0+relu_0+avg_pool_0`.
            Kind::ConvBlock { field, pool, .. } => {
                let mut name = format!("{}+{}", fields[*field].name, counted("relu".into()));
                if let Some(p) = pool {
                    name = format!("{name}+{}", counted(p.word().into()));
                }
                (name, false)
            }
            Kind::Field { field, .. } => {
                let f = &fields[*field];
                (f.name.to_string(), f.layer.is_block())
            }
            Kind::Op { op, .. } => (counted(op.word()), false),
            Kind::Binary(op, ..) | Kind::Scalar { op, .. } => {
                let word = match op {
                    Arith::Add => "add",
                    Arith::Sub => "sub",
                    Arith::Mul => "mul",
                    Arith::Div => "div",
                    Arith::Max => "maximum",
                    Arith::Min => "minimum",
                };
                (counted(word.into()), false)
            }
            Kind::Neg(_) => (counted("neg".into()), false),
        })
        .collect()
}

/// Each step's tensor id, as the step whose id it has: dfdx's reshape (of
/// a contiguous tensor), permute and broadcast are views that keep their
/// input's id; every other op makes a new one.
fn id_roots(plan: &Plan) -> Vec<usize> {
    let mut roots: Vec<usize> = (0..plan.steps.len()).collect();
    for (k, s) in plan.steps.iter().enumerate() {
        if let Kind::Op {
            op:
                crate::ops::Op::Reshape
                | crate::ops::Op::FlattenImage { .. }
                | crate::ops::Op::Permute(_)
                | crate::ops::Op::Broadcast(_),
            inputs,
        } = &s.kind
        {
            if let Some(&i) = inputs.first() {
                roots[k] = roots[i];
            }
        }
    }
    roots
}

/// dfdx's arithmetic.
fn binop(op: Arith) -> TokenStream {
    let dfdx = paths::dfdx();
    match op {
        Arith::Add => quote!(#dfdx::tensor_ops::TryAdd::try_add),
        Arith::Sub => quote!(#dfdx::tensor_ops::TrySub::try_sub),
        Arith::Mul => quote!(#dfdx::tensor_ops::TryMul::try_mul),
        Arith::Div => quote!(#dfdx::tensor_ops::TryDiv::try_div),
        Arith::Max => quote!(#dfdx::tensor::Tensor::try_maximum),
        Arith::Min => quote!(#dfdx::tensor::Tensor::try_minimum),
    }
}
