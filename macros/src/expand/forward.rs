//! The body of a `Module` / `ModuleMut` impl: one `let` per step.

use crate::ast::Arith;
use crate::check::{Kind, Plan};
use crate::gen::{tensor_ty, Mode};
use crate::ops::Io;
use crate::paths;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// The where-clauses and body; with `no_input_grad`, the layers that can
/// skip the input's gradient get it as `NoInputGrad(__t0)`.
pub fn forward(plan: &Plan, mode: &Mode, no_input_grad: bool) -> (Vec<TokenStream>, TokenStream) {
    let dfdx = paths::dfdx();
    let rt = paths::compact();
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
        let in_ty = inputs
            .first()
            .map(|i| tensor_ty(&plan.steps[*i].shape))
            .unwrap_or_default();
        let args: Vec<TokenStream> = inputs.iter().map(|i| read(*i)).collect();
        let v = format_ident!("__t{}", k);
        let value = match &step.kind {
            Kind::Input => continue,
            Kind::Field { field, .. } => {
                let field = &plan.fields[*field];
                let (ty, n) = (field.layer.ty(), &field.name);
                let r = mode.by_ref();
                let x = &args[0];
                let (in_ty, x) = if no_input_grad && field.layer.skips_input_grad() && inputs == [0]
                {
                    let l = paths::layers();
                    (quote!(#l::NoInputGrad<#in_ty>), quote!(#l::NoInputGrad(#x)))
                } else {
                    (in_ty, x.clone())
                };
                let (value, w) = mode.apply(&ty, quote!(#r self.#n), x, &in_ty, &out);
                wheres.push(w);
                value
            }
            Kind::Op { op, .. } => {
                let (value, w) = op.expand(
                    Io {
                        args,
                        in_ty: &in_ty,
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
        stmts.push(quote!(let #v: #out = #value;));
    }
    let out = read(plan.output);
    (wheres, quote!(#(#stmts)* ::core::result::Result::Ok(#out)))
}

/// dfdx's arithmetic.
fn binop(op: Arith) -> TokenStream {
    let dfdx = paths::dfdx();
    match op {
        Arith::Add => quote!(#dfdx::tensor_ops::TryAdd::try_add),
        Arith::Sub => quote!(#dfdx::tensor_ops::TrySub::try_sub),
        Arith::Mul => quote!(#dfdx::tensor_ops::TryMul::try_mul),
        Arith::Div => quote!(#dfdx::tensor_ops::TryDiv::try_div),
    }
}
