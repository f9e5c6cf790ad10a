//! Calls: built-in layers, ops, and nested `#[compact]` models.

use super::{Checker, Field, Instance, Kind};
use crate::args::{self, Bound};
use crate::ast::{Arg, Callee};
use crate::layers::{self, Checked, Layer, Nested, Site};
use crate::ops;
use crate::symbol::{self, LayerKind, OpKind};
use crate::value::{ArgVal, Val};
use proc_macro2::TokenStream;
use quote::{format_ident, ToTokens};
use syn::Error;

/// How deep models may nest (a model that calls itself stops here).
const MAX_DEPTH: usize = 16;

impl Checker<'_> {
    pub(super) fn call(
        &mut self,
        callee: &Callee,
        name: &TokenStream,
        args: &[Arg],
        inputs: Option<&[Arg]>,
        tokens: &TokenStream,
    ) -> Val {
        match callee {
            Callee::Unknown(msg) => {
                // Its arguments are not checked: what they should be is
                // unknown (`Sequential([Dense(10), relu])`).
                let _ = (args, inputs);
                self.cx.error_at(name, msg);
                Val::Poison
            }
            Callee::Layer(kind) => self.layer(*kind, args, inputs.unwrap_or_default(), tokens),
            Callee::Op(kind) => self.op(*kind, args, tokens),
            Callee::Nested(path) => self.nested(path, args, inputs.unwrap_or_default(), tokens),
        }
    }

    fn eval_args(&mut self, args: &[Arg]) -> Vec<ArgVal> {
        args.iter()
            .map(|a| {
                let v = self.expr(&a.value);
                ArgVal::new(a, v)
            })
            .collect()
    }

    /// The one tensor a layer is applied to: `Layer(..)(x)`.
    fn layer_input(
        &mut self,
        what: &str,
        inputs: &[Arg],
        tokens: &TokenStream,
    ) -> Option<(usize, String)> {
        let vals = self.eval_args(inputs);
        let mut ok = true;
        for a in &vals {
            if let Some(k) = &a.key {
                let msg = match args::flax_only(&k.to_string()) {
                    Some(why) => format!("drop `{k}`: {why}"),
                    None => format!("`{what}` is applied to its input only, `{what}(..)(x)`; its arguments go in the first parentheses"),
                };
                self.cx.push(Error::new(k.span(), msg));
                ok = false;
            }
        }
        let positional: Vec<&ArgVal> = vals.iter().filter(|a| a.key.is_none()).collect();
        if positional.len() > 1 {
            self.cx.error_at(
                &positional[1].tokens,
                format!("`{what}` is applied to exactly one input: `{what}(..)(x)`"),
            );
            return None;
        }
        let first = positional.first().copied()?;
        match &first.val {
            Val::Tensor(i) if ok => Some((*i, describe(inputs, 0))),
            Val::Tensor(_) | Val::Poison => None,
            other => {
                self.cx.error_at(
                    tokens,
                    format!("`{what}` needs a tensor input, not {}", other.kind()),
                );
                None
            }
        }
    }

    /// The field name: `name = ".."` or the next `kind_N` in construction
    /// order (Flax's autonaming); reports duplicates.
    fn field_name(
        &mut self,
        base: &str,
        given: Option<&ArgVal>,
        call: &TokenStream,
    ) -> Option<syn::Ident> {
        let name = match given {
            Some(a) => self.cx.take(a.layer_name())?,
            None => {
                let n = self.counters.entry(base.to_string()).or_insert(0);
                let name = format!("{base}_{n}");
                *n += 1;
                name
            }
        };
        if !self.names.insert(name.clone()) {
            match given {
                None => self.cx.error_at(call, format!("duplicate name: this layer's automatic name `{name}` is already given to an earlier layer with `name = \"{name}\"`; rename that one")),
                Some(a) => self.cx.error_at(a, format!("duplicate name: `{name}` is already the name of an earlier layer; every layer with parameters needs its own name (it is the checkpoint key prefix)")),
            }
            return None;
        }
        Some(format_ident!("{}", name))
    }

    fn add_field(&mut self, name: syn::Ident, layer: Layer, input: usize, out: Vec<usize>) -> Val {
        self.fields.push(Field { name, layer });
        let field = self.fields.len() - 1;
        self.push(Kind::Field { field, input }, out)
    }

    fn layer(
        &mut self,
        kind: LayerKind,
        args: &[Arg],
        inputs: &[Arg],
        tokens: &TokenStream,
    ) -> Val {
        let vals = self.eval_args(args);
        let bound = args::bind(kind.name(), layers::sig(kind), &vals, tokens, &mut self.cx);
        // Flax names a submodule when it is constructed, before its input
        // is evaluated: `Dense(2)(Dense(3)(x))` has the outer one first.
        let name = match kind {
            LayerKind::Dropout => None,
            _ => Some(self.field_name(&symbol::snake(kind.name()), bound.get("name"), tokens)),
        };
        let Some((i, input)) = self.layer_input(kind.name(), inputs, tokens) else {
            return Val::Poison;
        };
        if vals.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        let shape = self.shape(i).to_vec();
        let site = Site {
            shape: &shape,
            input,
            call: tokens,
        };
        match layers::check(kind, &bound, &site, &mut self.cx) {
            Some(Checked::Field(layer, out)) => match name.flatten() {
                Some(n) => self.add_field(n, layer, i, out),
                None => Val::Poison,
            },
            Some(Checked::Op(op)) => self.push(
                Kind::Op {
                    op,
                    inputs: vec![i],
                },
                shape,
            ),
            None => Val::Poison,
        }
    }

    fn op(&mut self, kind: OpKind, args: &[Arg], tokens: &TokenStream) -> Val {
        let what = kind.name();
        let vals = self.eval_args(args);
        let (first, rest) = match vals.split_first() {
            Some((f, r)) if f.key.is_none() => (f, r),
            _ => {
                self.cx.error_at(
                    tokens,
                    format!(
                        "the first argument of `{what}` is its input tensor, e.g. `{what}(x, ..)`"
                    ),
                );
                return Val::Poison;
            }
        };
        let bound: Bound = args::bind(what, ops::sig(kind), rest, tokens, &mut self.cx);
        let ids: Vec<usize> = match (&first.val, ops::takes_tuple(kind)) {
            (Val::Tensor(i), false) => vec![*i],
            (Val::Tuple(items), true) if items.len() >= 2 => {
                let mut ids = Vec::new();
                for item in items {
                    match item {
                        Val::Tensor(i) => ids.push(*i),
                        Val::Poison => return Val::Poison,
                        other => {
                            self.cx.error_at(
                                first,
                                format!(
                                    "`{what}` joins tensors, but one of them is {}",
                                    other.kind()
                                ),
                            );
                            return Val::Poison;
                        }
                    }
                }
                ids
            }
            (Val::Poison, _) => return Val::Poison,
            (_, true) => {
                self.cx.error_at(first, "`concatenate` joins two or more tensors given as a tuple or a list: `concatenate((x, y), axis = -3)`");
                return Val::Poison;
            }
            (other, false) => {
                self.cx.error_at(
                    tokens,
                    format!("`{what}` needs a tensor input, not {}", other.kind()),
                );
                return Val::Poison;
            }
        };
        if rest.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        let shapes: Vec<Vec<usize>> = ids.iter().map(|i| self.shape(*i).to_vec()).collect();
        let names: Vec<String> = match args.first().map(|a| &a.value) {
            Some(crate::ast::Expr::Tuple(items, _)) if items.len() == ids.len() => {
                items.iter().map(|i| i.describe()).collect()
            }
            _ => (0..ids.len())
                .map(|k| format!("tensor {}", k + 1))
                .collect(),
        };
        let site = Site {
            shape: &shapes[0],
            input: describe(args, 0),
            call: tokens,
        };
        match ops::check(kind, &bound, &shapes, &names, &site, &mut self.cx) {
            Some((op, out)) => self.push(Kind::Op { op, inputs: ids }, out),
            None => Val::Poison,
        }
    }

    fn nested(
        &mut self,
        path: &syn::Path,
        args: &[Arg],
        inputs: &[Arg],
        tokens: &TokenStream,
    ) -> Val {
        let text = crate::ast::compact_text(&path.to_token_stream());
        let vals = self.eval_args(args);
        // `name` is the caller's; every other argument is a parameter of
        // the nested model.
        let (named, params): (Vec<ArgVal>, Vec<ArgVal>) = vals
            .into_iter()
            .partition(|a| a.key.as_ref().is_some_and(|k| k == "name"));
        let last = path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default();
        let name = self.field_name(&symbol::snake(&last), named.first(), tokens);
        let Some((i, input)) = self.layer_input(&text, inputs, tokens) else {
            return Val::Poison;
        };
        let (Some(name), false) = (name, params.iter().any(|a| a.val.is_poison())) else {
            return Val::Poison;
        };
        if self.depth >= MAX_DEPTH {
            self.cx.error_at(
                tokens,
                format!("models nested more than {MAX_DEPTH} deep: does a model call itself?"),
            );
            return Val::Poison;
        }
        let model = match self
            .sources
            .get(&crate::nest::key(path))
            .map(|src| crate::parse::parse_model(src.clone()))
        {
            Some(Ok(m)) => m,
            // Its own expansion reports what is wrong with it.
            _ => {
                self.cx
                    .error_at(tokens, format!("`{text}` does not expand (see its errors)"));
                return Val::Poison;
            }
        };
        if !super::check_param_args(&model, &params, &mut self.cx) {
            return Val::Poison;
        }
        let shape = self.shape(i).to_vec();
        let ident = format_ident!("__{}_{}", self.outer, name);
        let inst = Instance {
            name: ident.clone(),
            dims: shape.clone(),
            args: params,
        };
        let plan = match super::check_instance(&model, inst, self.sources, self.depth + 1) {
            Ok(p) => p,
            Err(e) => {
                self.cx.push(e);
                self.cx.error_at(
                    tokens,
                    format!(
                        "in this instance of `{text}` for {input} of shape {}",
                        crate::shape::show(&shape)
                    ),
                );
                return Val::Poison;
            }
        };
        let out = plan.steps[plan.output].shape.clone();
        let params = plan
            .fields
            .iter()
            .fold(0usize, |n, f| n.saturating_add(f.layer.params()));
        self.inlined.push(plan);
        self.nested_paths.push(path.clone());
        self.add_field(
            name,
            Layer::Nested(Nested {
                ident,
                path: text,
                params,
            }),
            i,
            out,
        )
    }
}

/// How messages name the `k`-th argument.
fn describe(args: &[Arg], k: usize) -> String {
    args.get(k)
        .map(|a| a.value.describe())
        .unwrap_or_else(|| "its input".into())
}
