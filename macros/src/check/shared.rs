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

/// A bound layer or model.
pub struct Bound {
    what: What,
    args: Vec<ArgVal>,
    /// The field name and Flax name reserved when it was built (`None`
    /// for `Dropout`, which has no parameters).
    name: Option<(syn::Ident, String)>,
    /// After its first application: its field, input shapes and output.
    first: Option<(usize, Vec<Vec<usize>>, Vec<usize>)>,
}

/// What is bound.
enum What {
    Layer(LayerKind),
    /// A model of the crate (`let block = Block(64);`), whose first
    /// application instantiates it for its inputs.
    Nested(syn::Path),
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
        if kind != LayerKind::Dropout && self.built_in_method(kind.name(), tokens) {
            return Val::Poison;
        }
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
            what: What::Layer(kind),
            args: vals,
            name,
            first: None,
        });
        Val::Layer(self.bound.len() - 1)
    }

    /// `Block(64)` not applied: a model value, named now, instantiated at
    /// its first application.
    pub(super) fn bind_nested(
        &mut self,
        path: &syn::Path,
        vals: Vec<ArgVal>,
        tokens: &TokenStream,
    ) -> Val {
        let text = crate::ast::compact_text(&quote::ToTokens::to_token_stream(path));
        if self.built_in_method(&text, tokens) {
            return Val::Poison;
        }
        if vals.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        if vals.iter().any(|a| matches!(a.val, Val::Tensor(_))) {
            let w = crate::ast::compact_text(&quote::ToTokens::to_token_stream(path));
            self.cx.error_at(
                tokens,
                format!("`{w}(..)` builds a model; apply it to its input: `{w}(..)(x)`"),
            );
            return Val::Poison;
        }
        let (named, params): (Vec<ArgVal>, Vec<ArgVal>) = vals
            .into_iter()
            .partition(|a| a.key.as_ref().is_some_and(|k| k == "name"));
        let Some(name) = self.nested_name(path, named.first(), tokens) else {
            return Val::Poison;
        };
        self.bound.push(Bound {
            what: What::Nested(path.clone()),
            args: params,
            name: Some(name),
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
            Some(Val::Table(step)) => return self.apply_table(ident, step, args, inputs, tokens),
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
        let kind = match &self.bound[id].what {
            What::Layer(kind) => *kind,
            What::Nested(path) => {
                let path = path.clone();
                return self.apply_bound_nested(id, ident, &path, args, tokens);
            }
        };
        let spec = layers::inputs(kind);
        let Some(applied) = self.applied(kind.name(), args, &spec, tokens) else {
            return Val::Poison;
        };
        let pos: Vec<usize> = applied.pos.iter().map(|(i, _)| *i).collect();
        let shapes: Vec<Vec<usize>> = pos.iter().map(|i| self.shape(*i).to_vec()).collect();
        let steps = layers::arrange(kind, &pos, applied.mask.or(applied.lengths));
        if let Some((field, first, _)) = self.bound[id].first.clone() {
            // Lent to a nested model before its first application here: its
            // output follows the token ids.
            if first.is_empty() {
                let mut out = shapes[0].clone();
                if let Layer::Embed(e) = &self.fields[field].layer {
                    out.push(e.features());
                }
                self.bound[id].first = Some((field, shapes, out.clone()));
                return self.push(
                    Kind::Field {
                        field,
                        inputs: steps,
                    },
                    out,
                );
            }
        }
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
            Some(Val::Table(step)) => {
                return match self.attend_input(ident, &vals, tokens) {
                    Some(x) => self.table_attend(ident, step, x, tokens),
                    None => Val::Poison,
                }
            }
            Some(Val::Layer(id))
                if matches!(self.bound[id].what, What::Layer(LayerKind::Embed)) =>
            {
                self.bound[id].first.clone()
            }
            Some(Val::Poison) => return Val::Poison,
            other => {
                let what = match other {
                    Some(Val::Layer(id)) => match &self.bound[id].what {
                        What::Layer(k) => format!("a `{}`", k.name()),
                        What::Nested(p) => format!(
                            "a `{}`",
                            crate::ast::compact_text(&quote::ToTokens::to_token_stream(p))
                        ),
                    },
                    Some(v) => v.kind().to_string(),
                    None => "not a variable".to_string(),
                };
                self.cx.error_at(tokens, format!("`{ident}` is {what}; `.attend(x)` is an `Embed`'s method: `let embed = Embed(vocab, features);`, then `embed(tokens)` and `embed.attend(x)`"));
                return Val::Poison;
            }
        };
        let Some((field, _, _)) = embed else {
            self.cx.error_at(tokens, format!("apply `{ident}` to token ids before `{ident}.attend(..)`: its table is made at its first application"));
            return Val::Poison;
        };
        let Some(x) = self.attend_input(ident, &vals, tokens) else {
            return Val::Poison;
        };
        let Layer::Embed(e) = &self.fields[field].layer else {
            return Val::Poison;
        };
        let (vocab, features) = (e.vocab(), e.features());
        let Some(out) = self.attended(ident, x, (vocab, features), tokens) else {
            return Val::Poison;
        };
        let name = self.fields[field].name.clone();
        self.push(
            Kind::Op {
                op: crate::ops::Op::Attend(name),
                inputs: vec![x],
            },
            out,
        )
    }

    /// The one float input of `.attend(x)`.
    fn attend_input(
        &mut self,
        ident: &syn::Ident,
        vals: &[ArgVal],
        tokens: &TokenStream,
    ) -> Option<usize> {
        match vals {
            [a] if a.key.is_none() => match &a.val {
                Val::Tensor(i) if self.elem(*i) == crate::ast::Elem::Float => Some(*i),
                Val::Poison => None,
                other => {
                    self.cx.error_at(
                        a,
                        format!("`.attend` takes float features, not {}", other.describe()),
                    );
                    None
                }
            },
            _ => {
                self.cx.error_at(
                    tokens,
                    format!("`.attend` takes one input: `{ident}.attend(x)`"),
                );
                None
            }
        }
    }

    /// The shape of `x @ table.T` for a `[vocab, features]` table.
    fn attended(
        &mut self,
        ident: &syn::Ident,
        x: usize,
        (vocab, features): (usize, usize),
        tokens: &TokenStream,
    ) -> Option<Vec<usize>> {
        let mut out = self.shape(x).to_vec();
        if out.last() != Some(&features) {
            self.cx.error_at(tokens, format!("`{ident}.attend(x)` multiplies by the [{vocab}, {features}] table, so `x`'s last axis must be {features}, but it has shape {}", crate::shape::show(&out)));
            return None;
        }
        if let Some(l) = out.last_mut() {
            *l = vocab;
        }
        Some(out)
    }
}

impl Checker<'_> {
    /// A bound model applied: instantiated at its first application, the
    /// same field (and instance) at every later one, whose inputs must
    /// have the first's shapes.
    fn apply_bound_nested(
        &mut self,
        id: usize,
        ident: &syn::Ident,
        path: &syn::Path,
        args: &[Arg],
        tokens: &TokenStream,
    ) -> Val {
        // The inputs first: `block(block(x))` applies the inner one first.
        let vals = self.eval_args(args);
        let Some((field, first, out)) = self.bound[id].first.clone() else {
            let (Some(name), params) = (self.bound[id].name.clone(), self.bound[id].args.clone())
            else {
                return Val::Poison;
            };
            let v = self.nested_named(path, name, params, (args, vals), tokens);
            if let Some((field, call)) = self.last_call() {
                let inputs = self.steps[call].kind.inputs();
                let shapes = inputs.iter().map(|i| self.shape(*i).to_vec()).collect();
                self.bound[id].first = Some((field, shapes, self.steps[call].shape.clone()));
            }
            return v;
        };
        let text = crate::ast::compact_text(&quote::ToTokens::to_token_stream(path));
        let n = first.len();
        let call = self
            .steps
            .iter()
            .position(|s| matches!(s.kind, Kind::Field { field: f, .. } if f == field));
        let (elems, more) = match call {
            Some(c) => (
                self.steps[c]
                    .kind
                    .inputs()
                    .iter()
                    .map(|i| self.elem(*i))
                    .collect(),
                self.steps[c].more.clone(),
            ),
            None => (Vec::new(), Vec::new()),
        };
        let spec = layers::InputSpec {
            min: n,
            max: n,
            mask: false,
            lengths: false,
            elems,
        };
        let Some(applied) = self.applied_vals(&text, vals, args, &spec, tokens) else {
            return Val::Poison;
        };
        let pos: Vec<usize> = applied.pos.iter().map(|(i, _)| *i).collect();
        let shapes: Vec<Vec<usize>> = pos.iter().map(|i| self.shape(*i).to_vec()).collect();
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
        let call = self.push(Kind::Field { field, inputs: pos }, out.clone());
        match (call, more.is_empty()) {
            (Val::Tensor(k), false) => self.items(k, out, more),
            (call, _) => call,
        }
    }

    /// The last field's index and the step that applied it.
    fn last_call(&self) -> Option<(usize, usize)> {
        let field = self.fields.len().checked_sub(1)?;
        let call = self
            .steps
            .iter()
            .rposition(|s| matches!(s.kind, Kind::Field { field: f, .. } if f == field))?;
        Some((field, call))
    }

    /// An `Embed` bound here and passed to a nested model (wmt's
    /// `Encoder(shared_embedding = self.shared_embedding)`): its field
    /// (made now if it has not been applied yet: its table needs no input)
    /// and a step holding its table, which the nested model takes as an
    /// input. Flax keeps such a module's parameters with the model that
    /// built it, as here.
    pub(super) fn lend(&mut self, id: usize, tokens: &TokenStream) -> Option<usize> {
        if !matches!(self.bound[id].what, What::Layer(LayerKind::Embed)) {
            self.cx.error_at(tokens, "only an `Embed` can be passed to a nested model (Flax's shared embedding); pass another layer's settings, or a partial (`partial(Dense, use_bias = false)`), and build it there");
            return None;
        }
        let field = match self.bound[id].first.clone() {
            Some((field, ..)) => field,
            None => {
                let name = self.bound[id].name.clone()?;
                let vals = self.bound[id].args.clone();
                let kind = LayerKind::Embed;
                let mut quiet = crate::ctxt::Ctxt::new();
                let b = args::bind(kind.name(), layers::sig(kind), &vals, tokens, &mut quiet);
                let _ = quiet.check();
                let site = Site {
                    shape: &[1],
                    input: "its token ids".into(),
                    call: tokens,
                    extra: Vec::new(),
                    mask: None,
                };
                let Some(Checked::Field(layer, _)) = layers::check(kind, &b, &site, &mut self.cx)
                else {
                    return None;
                };
                self.fields.push(super::Field {
                    name: name.0,
                    flax: name.1,
                    layer,
                });
                let field = self.fields.len() - 1;
                self.bound[id].first = Some((field, Vec::new(), Vec::new()));
                field
            }
        };
        let Layer::Embed(e) = &self.fields[field].layer else {
            return None;
        };
        let table = vec![e.vocab(), e.features()];
        let op = crate::ops::Op::Table(self.fields[field].name.clone());
        match self.push(
            Kind::Op {
                op,
                inputs: Vec::new(),
            },
            table,
        ) {
            Val::Tensor(step) => Some(step),
            _ => None,
        }
    }

    /// `embed(tokens)` for an `Embed` passed in: a lookup in its table.
    fn apply_table(
        &mut self,
        ident: &syn::Ident,
        table: usize,
        args: &[Arg],
        inputs: Option<&[Arg]>,
        tokens: &TokenStream,
    ) -> Val {
        if inputs.is_some() {
            self.cx.error_at(tokens, format!("`{ident}` is an `Embed` built already; apply it to token ids: `{ident}(tokens)`"));
            return Val::Poison;
        }
        let spec = layers::inputs(LayerKind::Embed);
        let Some(applied) = self.applied(&ident.to_string(), args, &spec, tokens) else {
            return Val::Poison;
        };
        let ids = applied.pos[0].0;
        let shape = self.shape(ids).to_vec();
        if shape.len() != 1 {
            self.cx.error_at(
                tokens,
                format!(
                    "an `Embed` passed in looks up a [seq] row of token ids, not {}",
                    crate::shape::show(&shape)
                ),
            );
            return Val::Poison;
        }
        let features = self.shape(table)[1];
        self.push(
            Kind::Op {
                op: crate::ops::Op::TableLookup,
                inputs: vec![table, ids],
            },
            vec![shape[0], features],
        )
    }

    /// `embed.attend(x)` for an `Embed` passed in.
    fn table_attend(
        &mut self,
        ident: &syn::Ident,
        table: usize,
        x: usize,
        tokens: &TokenStream,
    ) -> Val {
        let (vocab, features) = (self.shape(table)[0], self.shape(table)[1]);
        let Some(out) = self.attended(ident, x, (vocab, features), tokens) else {
            return Val::Poison;
        };
        if out.len() != 2 {
            self.cx.error_at(
                tokens,
                format!("`.attend` of an `Embed` passed in takes [seq, {features}] features"),
            );
            return Val::Poison;
        }
        self.push(
            Kind::Op {
                op: crate::ops::Op::TableAttend,
                inputs: vec![x, table],
            },
            out,
        )
    }
}
