//! Layers bound once and applied where they are called, as Flax's
//! `dense = nn.Dense(64)` then `dense(dense(x))`: one set of parameters
//! (named when the layer is built, as Flax names it), shared by every
//! application; and `embed.attend(x)`, an `Embed`'s table as the output
//! layer (tied embeddings).

use super::{Checker, Kind};
use crate::args;
use crate::ast::Arg;
use crate::layers::{self, Checked, Layer, Site};
use crate::symbol::LayerKind;
use crate::value::{ArgVal, Val};
use proc_macro2::TokenStream;

/// A bound layer.
pub struct Bound {
    kind: LayerKind,
    args: Vec<ArgVal>,
    /// The field name and Flax name reserved when it was built (`None`
    /// for `Dropout`, which has no parameters).
    name: Option<(syn::Ident, String)>,
    /// After its first application: its field, input shapes and output.
    first: Option<(usize, Vec<Vec<usize>>, Vec<usize>)>,
}

impl Checker<'_> {
    /// `Dense(64)` not applied: a layer value, named now as Flax names a
    /// module when it is built.
    pub(super) fn bind_layer(
        &mut self,
        kind: LayerKind,
        vals: Vec<ArgVal>,
        tokens: &TokenStream,
    ) -> Val {
        if vals.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        if vals.iter().any(|a| matches!(a.val, Val::Tensor(_))) {
            let w = kind.name();
            self.cx.error_at(
                tokens,
                format!("`{w}(..)` builds a layer; apply it to its input: `{w}(..)(x)`"),
            );
            return Val::Poison;
        }
        let bound = args::bind(kind.name(), layers::sig(kind), &vals, tokens, &mut self.cx);
        let name = match kind {
            LayerKind::Dropout => None,
            _ => match self.field_name(
                &layers::base_name(kind, &bound),
                layers::flax_class(kind, &bound),
                bound.get("name"),
                tokens,
            ) {
                Some(n) => Some(n),
                None => return Val::Poison,
            },
        };
        self.bound.push(Bound {
            kind,
            args: vals,
            name,
            first: None,
        });
        Val::Layer(self.bound.len() - 1)
    }

    /// `dense(x)`: the layer bound to `dense` applied to `x`; `act(x)`,
    /// `conv(64, (3, 3))(x)`: a partial called; any other unknown name
    /// called is the parser's message.
    pub(super) fn local(
        &mut self,
        ident: &syn::Ident,
        msg: &str,
        args: &[Arg],
        inputs: Option<&[Arg]>,
        tokens: &TokenStream,
    ) -> Val {
        let id = match self.lookup(&ident.to_string()).map(|b| b.val.clone()) {
            Some(Val::Partial(p)) => return self.call_partial(ident, &p, args, inputs, tokens),
            Some(Val::Layer(_)) if inputs.is_some() => {
                self.cx.error_at(
                    tokens,
                    format!(
                        "`{ident}` is a layer built already; apply it to its input: `{ident}(x)`"
                    ),
                );
                return Val::Poison;
            }
            Some(Val::Layer(id)) => id,
            Some(Val::Poison) => return Val::Poison,
            Some(other) => {
                self.cx.error_at(tokens, format!("`{ident}` is {}, not a layer or an activation: a bound layer (`let layer = Dense(..);`) is applied as `layer(x)`, an activation parameter (`act: Param<relu>`) as `act(x)`, a layer parameter (`conv: Param<Conv>`) as `conv(64, (3, 3))(x)`", other.kind()));
                return Val::Poison;
            }
            None => {
                self.cx.error_at(ident, msg);
                return Val::Poison;
            }
        };
        let kind = self.bound[id].kind;
        let spec = layers::inputs(kind);
        let Some(applied) = self.applied(kind.name(), args, &spec, tokens) else {
            return Val::Poison;
        };
        let pos: Vec<usize> = applied.pos.iter().map(|(i, _)| *i).collect();
        let shapes: Vec<Vec<usize>> = pos.iter().map(|i| self.shape(*i).to_vec()).collect();
        let steps = layers::arrange(kind, &pos, applied.mask);
        if let Some((field, first, out)) = self.bound[id].first.clone() {
            if first != shapes {
                let show = |s: &[Vec<usize>]| {
                    s.iter()
                        .map(|s| crate::shape::show(s))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                self.cx.error_at(tokens, format!("`{ident}` shares one set of parameters between its applications, so each input must have the shape of its first: {} here, {} at first", show(&shapes), show(&first)));
                return Val::Poison;
            }
            return self.push(
                Kind::Field {
                    field,
                    inputs: steps,
                },
                out,
            );
        }
        let (first, input) = applied.pos[0].clone();
        let shape = self.shape(first).to_vec();
        let mask = applied.mask.map(|m| self.shape(m).to_vec());
        let site = Site {
            shape: &shape,
            input,
            call: tokens,
            extra: shapes[1..].to_vec(),
            mask,
        };
        // Its arguments were checked when it was built: bound again
        // quietly.
        let vals = self.bound[id].args.clone();
        let mut quiet = crate::ctxt::Ctxt::new();
        let b = args::bind(kind.name(), layers::sig(kind), &vals, tokens, &mut quiet);
        let _ = quiet.check();
        match layers::check(kind, &b, &site, &mut self.cx) {
            Some(Checked::Field(layer, out)) => {
                let Some(name) = self.bound[id].name.clone() else {
                    return Val::Poison;
                };
                let v = self.add_field(name, layer, steps, out.clone());
                self.bound[id].first = Some((self.fields.len() - 1, shapes, out));
                v
            }
            Some(Checked::Op(op)) => self.push(Kind::Op { op, inputs: steps }, shape),
            None => Val::Poison,
        }
    }

    /// `embed.attend(x)`: `x @ embedding.T`, the bound `Embed`'s table as
    /// the output layer; `x`'s last axis is the table's features.
    pub(super) fn attend(&mut self, ident: &syn::Ident, args: &[Arg], tokens: &TokenStream) -> Val {
        let vals = self.eval_args(args);
        let embed = match self.lookup(&ident.to_string()).map(|b| b.val.clone()) {
            Some(Val::Layer(id)) if self.bound[id].kind == LayerKind::Embed => {
                self.bound[id].first.clone()
            }
            Some(Val::Poison) => return Val::Poison,
            other => {
                let what = match other {
                    Some(Val::Layer(id)) => format!("a `{}`", self.bound[id].kind.name()),
                    Some(v) => v.kind().to_string(),
                    None => "not a variable".to_string(),
                };
                self.cx.error_at(tokens, format!("`{ident}` is {what}; `.attend(x)` is an `Embed`'s method: `let embed = Embed(vocab, features);`, then `embed(tokens)` and `embed.attend(x)`"));
                return Val::Poison;
            }
        };
        let Some((field, _, table)) = embed else {
            self.cx.error_at(tokens, format!("apply `{ident}` to token ids before `{ident}.attend(..)`: its table is made at its first application"));
            return Val::Poison;
        };
        let x = match vals.as_slice() {
            [a] if a.key.is_none() => match &a.val {
                Val::Tensor(i) if self.elem(*i) == crate::ast::Elem::Float => *i,
                Val::Poison => return Val::Poison,
                other => {
                    self.cx.error_at(
                        a,
                        format!("`.attend` takes float features, not {}", other.describe()),
                    );
                    return Val::Poison;
                }
            },
            _ => {
                self.cx.error_at(
                    tokens,
                    format!("`.attend` takes one input: `{ident}.attend(x)`"),
                );
                return Val::Poison;
            }
        };
        let features = *table.last().unwrap_or(&0);
        let Layer::Embed(e) = &self.fields[field].layer else {
            return Val::Poison;
        };
        let vocab = e.vocab();
        let mut out = self.shape(x).to_vec();
        if out.last() != Some(&features) {
            self.cx.error_at(tokens, format!("`{ident}.attend(x)` multiplies by the [{vocab}, {features}] table, so `x`'s last axis must be {features}, but it has shape {}", crate::shape::show(&out)));
            return Val::Poison;
        }
        if let Some(l) = out.last_mut() {
            *l = vocab;
        }
        let name = self.fields[field].name.clone();
        self.push(
            Kind::Op {
                op: crate::ops::Op::Attend(name),
                inputs: vec![x],
            },
            out,
        )
    }
}
