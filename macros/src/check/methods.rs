//! Methods beside `fn forward` (Flax's `encode`, `decode`, `generate`)
//! over the layers of `fn setup`: each method is checked as a model of its
//! own inputs, then its fields are matched by name with the model's (a
//! layer of `fn setup` is one field, whichever methods apply it), and
//! `self.encode(x)` inlines a method where it is called.

use super::{check_body, Checker, Field, Instance, Kind, Plan};
use crate::ast::{Arg, Method, Model};
use crate::ctxt::Ctxt;
use crate::layers::Layer;
use crate::nest::Sources;
use crate::value::Val;
use proc_macro2::TokenStream;
use std::collections::HashMap;
use syn::Error;

/// A checked method: its steps read the model's fields.
pub struct MethodPlan {
    /// Its name (`generate`).
    pub name: syn::Ident,
    /// Its doc attributes.
    pub docs: Vec<syn::Attribute>,
    /// Its forward pass; its field indices are the model plan's.
    pub plan: Plan,
}

/// Checks every method and merges its fields into `plan`'s.
pub(super) fn check_methods(model: &Model, sources: &Sources, plan: &mut Plan) -> syn::Result<()> {
    let mut cx = Ctxt::new();
    for (k, m) in model.methods.iter().enumerate() {
        let inst = Instance {
            name: model.name.clone(),
            dims: m.inputs.iter().map(|i| i.dims.clone()).collect(),
            args: Vec::new(),
            tables: Vec::new(),
        };
        match check_body(model, inst, sources, 0, Some(k)) {
            Ok(mp) => {
                if let Err(e) = merge(plan, mp, m) {
                    cx.push(e);
                }
            }
            Err(e) => {
                cx.push_new(e);
            }
        }
    }
    cx.check()
}

/// Moves a method's fields into the model's, by name.
fn merge(plan: &mut Plan, mut mp: Plan, m: &Method) -> syn::Result<()> {
    let mut inlined = std::mem::take(&mut mp.inlined);
    let mut map = Vec::new();
    for f in std::mem::take(&mut mp.fields) {
        let sig = signature(&f, &inlined);
        match plan.fields.iter().position(|g| g.name == f.name) {
            Some(i) => {
                if signature(&plan.fields[i], &plan.inlined) != sig {
                    return Err(Error::new(m.name.span(), format!("`{}` has one set of parameters, so every method must apply it to inputs of the same shapes, but `{}` gives it other shapes than `fn forward` or an earlier method", f.name, m.name)));
                }
                map.push(i);
            }
            None => {
                if let Layer::Nested(n) = &f.layer {
                    if let Some(k) = inlined.iter().position(|p| p.name == n.ident) {
                        plan.inlined.push(inlined.remove(k));
                    }
                }
                plan.fields.push(f);
                map.push(plan.fields.len() - 1);
            }
        }
    }
    for s in &mut mp.steps {
        match &mut s.kind {
            Kind::Field { field, .. } | Kind::ConvBlock { field, .. } => *field = map[*field],
            _ => {}
        }
    }
    plan.nested_paths.append(&mut mp.nested_paths);
    plan.methods.push(MethodPlan {
        name: m.name.clone(),
        docs: m.docs.clone(),
        plan: mp,
    });
    Ok(())
}

/// What makes two fields the same: the layer's type, and a nested model's
/// input shapes and fields, recursively.
fn signature(f: &Field, inlined: &[Plan]) -> String {
    match &f.layer {
        Layer::Nested(n) => inlined
            .iter()
            .find(|p| p.name == n.ident)
            .map(plan_signature)
            .unwrap_or_default(),
        other => other.ty().to_string(),
    }
}

fn plan_signature(p: &Plan) -> String {
    let inputs: Vec<String> = p.steps[..p.num_inputs]
        .iter()
        .map(|s| format!("{:?}", s.shape))
        .collect();
    let fields: Vec<String> = p
        .fields
        .iter()
        .map(|f| format!("{}: {}", f.name, signature(f, &p.inlined)))
        .collect();
    format!("({}) {{{}}}", inputs.join(", "), fields.join("; "))
}

/// How deep methods may call each other.
const MAX_CALLS: usize = 16;

impl Checker<'_> {
    /// `self.encode(x)`: another method, inlined with `fn setup`'s
    /// bindings and its inputs in scope; `self.encoder(x)`: a layer of
    /// `fn setup`.
    pub(super) fn self_call(
        &mut self,
        ident: &syn::Ident,
        args: &[Arg],
        tokens: &TokenStream,
    ) -> Val {
        let model = self.model;
        let Some(m) = model.methods.iter().find(|m| m.name == *ident) else {
            let msg = match self.lookup(&ident.to_string()) {
                Some(_) => String::new(),
                None => {
                    let methods: Vec<String> = model
                        .methods
                        .iter()
                        .map(|m| format!("`self.{}(..)`", m.name))
                        .collect();
                    let also = match methods.is_empty() {
                        true => String::new(),
                        false => format!(" (the methods are {})", methods.join(", ")),
                    };
                    format!("`self.{ident}` is no layer of `fn setup` and no method{also}\nhelp: `let {ident} = Dense(..);` in `fn setup` binds a layer that every method applies as `self.{ident}(x)`")
                }
            };
            return self.local(ident, &msg, args, None, tokens);
        };
        if self.in_method >= MAX_CALLS {
            self.cx.error_at(tokens, format!("methods call each other more than {MAX_CALLS} deep: does `{ident}` call itself?"));
            return Val::Poison;
        }
        let vals = self.eval_args(args);
        if vals.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        let arity_ok = vals.len() == m.inputs.len() && vals.iter().all(|a| a.key.is_none());
        let tensors_ok = vals
            .iter()
            .zip(&m.inputs)
            .all(|(a, d)| matches!(a.val, Val::Tensor(i) if self.elem(i) == d.elem));
        if !arity_ok || !tensors_ok {
            let decl: Vec<String> = m
                .inputs
                .iter()
                .map(|d| format!("{}: {}<..>", d.var, d.elem.decl()))
                .collect();
            self.cx.error_at(
                tokens,
                format!(
                    "`self.{ident}` takes its inputs positionally, tensors as it declares them: {}",
                    decl.join(", ")
                ),
            );
            return Val::Poison;
        }
        // Lexical scope: the method sees the block parameters, `fn setup`'s
        // bindings and its inputs, not the caller's variables.
        let saved = std::mem::replace(&mut self.scopes, vec![self.setup_scope.clone()]);
        self.scopes.push(HashMap::new());
        for (d, a) in m.inputs.iter().zip(vals) {
            self.declare(&d.var, a.val, false);
        }
        self.in_method += 1;
        let v = self.block(&m.body, false);
        self.in_method -= 1;
        self.scopes = saved;
        v
    }

    /// In a method other than `fn forward`, a layer with parameters built
    /// where it is applied is an error: it would be a second set of
    /// parameters, which the other methods cannot reach.
    pub(super) fn built_in_method(&mut self, what: &str, tokens: &TokenStream) -> bool {
        if self.in_method == 0 {
            return false;
        }
        self.cx.error_at(tokens, format!("a method other than `fn forward` applies the layers of `fn setup`; a `{what}` built here would have parameters of its own that no other method reaches\nhelp: bind it in `fn setup` (`let head = {what}(..);`) and apply it here as `self.head(x)`"));
        true
    }
}
