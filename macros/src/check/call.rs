//! Calls: built-in layers, ops, and nested `#[compact]` models.

use super::{Checker, Field, Instance, Kind};
use crate::args::{self, Bound};
use crate::ast::{Arg, Callee, Elem};
use crate::layers::{self, Checked, InputSpec, Layer, Nested, Site};
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
            Callee::Layer(kind) => {
                let vals = self.eval_args(args);
                match inputs {
                    Some(inputs) => self.layer(*kind, vals, inputs, tokens),
                    None => self.bind_layer(*kind, vals, tokens),
                }
            }
            Callee::Op(kind) => {
                let vals = self.eval_args(args);
                self.op(*kind, vals, args, tokens)
            }
            Callee::Nested(path) => {
                let vals = self.eval_args(args);
                match inputs {
                    Some(inputs) => self.nested(path, vals, inputs, tokens),
                    None => self.bind_nested(path, vals, tokens),
                }
            }
            Callee::Param => self.param(args, tokens),
            Callee::Local(ident, msg) => self.local(ident, msg, args, inputs, tokens),
            Callee::Attend(ident) => self.attend(ident, args, tokens),
            Callee::SelfCall(ident) => self.self_call(ident, args, tokens),
            Callee::Builtin(kind) => self.builtin(*kind, args, tokens),
            Callee::Draw(kind) => self.draw(*kind, args, tokens),
            Callee::Init(kind) => {
                let vals = self.eval_args(args);
                let sig = crate::init::sig(*kind);
                let bound = args::bind(kind.name(), sig, &vals, tokens, &mut self.cx);
                match crate::init::call(*kind, &bound, tokens, &mut self.cx) {
                    Some(i) => Val::Init(i),
                    None => Val::Poison,
                }
            }
            Callee::Cell(kind) => {
                // `LSTMCell(64)`: a value for `RNN`, named and built there.
                let vals = self.eval_args(args);
                let bound =
                    args::bind(kind.name(), layers::cell_sig(), &vals, tokens, &mut self.cx);
                let f = bound.req(&mut self.cx, "features", |a| a.positive("`features`"));
                let cx = &mut self.cx;
                let inits = [
                    crate::init::get(&bound, cx, "kernel_init", false),
                    crate::init::get(&bound, cx, "recurrent_kernel_init", false),
                    crate::init::get(&bound, cx, "bias_init", true),
                ];
                if let Some(a) = bound.get("name") {
                    cx.error_at(
                        a,
                        format!(
                            "a cell is named by its `RNN`: `RNN({}(..), name = \"..\")`",
                            kind.name()
                        ),
                    );
                }
                match f {
                    Some(f) => Val::Cell(*kind, f, Box::new(inits)),
                    None => Val::Poison,
                }
            }
        }
    }

    pub(super) fn eval_args(&mut self, args: &[Arg]) -> Vec<ArgVal> {
        args.iter()
            .map(|a| {
                let v = self.expr(&a.value);
                ArgVal::new(a, v)
            })
            .collect()
    }

    /// The tensors a layer or model is applied to, `Layer(..)(x, y, mask =
    /// m)`, checked against what it takes.
    pub(super) fn applied(
        &mut self,
        what: &str,
        inputs: &[Arg],
        spec: &InputSpec,
        tokens: &TokenStream,
    ) -> Option<Applied> {
        let vals = self.eval_args(inputs);
        self.applied_vals(what, vals, inputs, spec, tokens)
    }

    /// [`Self::applied`] on inputs evaluated already.
    pub(super) fn applied_vals(
        &mut self,
        what: &str,
        vals: Vec<ArgVal>,
        inputs: &[Arg],
        spec: &InputSpec,
        tokens: &TokenStream,
    ) -> Option<Applied> {
        let mut ok = true;
        let mut mask = None;
        let mut lengths = None;
        let mut pos = Vec::new();
        for (k, a) in vals.iter().enumerate() {
            let name = describe(inputs, k);
            match &a.key {
                Some(key) if key == "mask" && spec.mask => mask = Some((a, name)),
                Some(key) if key == "seq_lengths" && spec.lengths => lengths = Some((a, name)),
                Some(key) => {
                    let msg = match args::flax_only(&key.to_string()) {
                        Some(why) => format!("drop `{key}`: {why}"),
                        None if spec.mask => format!("`{what}` takes its inputs positionally and a `mask = ..`; its arguments go in the first parentheses, `{what}(..)(x)`"),
                        None => format!("`{what}` is applied to its input only, `{what}(..)(x)`; its arguments go in the first parentheses"),
                    };
                    self.cx.push(Error::new(key.span(), msg));
                    ok = false;
                }
                None => pos.push((a, name)),
            }
        }
        if pos.len() < spec.min || pos.len() > spec.max {
            let mask_given = spec.mask
                && pos
                    .iter()
                    .skip(spec.max)
                    .any(|(a, _)| matches!(a.val, Val::Tensor(i) if self.elem(i) == Elem::Bool));
            let msg = match (spec.min, spec.max) {
                _ if mask_given => format!("`{what}` takes its mask by name: `{what}(..)(x, mask = m)`"),
                (1, 1) => format!("`{what}` is applied to exactly one input: `{what}(..)(x)`"),
                (a, b) if a == b => format!("`{what}` is applied to {a} inputs, as its `fn forward` declares, but is given {}", pos.len()),
                (a, b) => format!("`{what}` is applied to {a} to {b} inputs, but is given {}", pos.len()),
            };
            self.cx.error_at(tokens, msg);
            return None;
        }
        let mut out = Applied {
            pos: Vec::new(),
            mask: None,
            lengths: None,
        };
        for (k, (a, name)) in pos.into_iter().enumerate() {
            let want = spec.elems.get(k).copied().unwrap_or(Elem::Float);
            out.pos
                .push((self.tensor_of(what, a, &name, want, tokens)?, name));
        }
        if let Some((a, name)) = mask {
            out.mask = Some(self.tensor_of(what, a, &name, Elem::Bool, tokens)?);
        }
        if let Some((a, name)) = lengths {
            let l = self.tensor_of(what, a, &name, Elem::Index, tokens)?;
            if self.shape(l) != [1] {
                let shape = crate::shape::show(self.shape(l));
                self.cx.error_at(a, format!("`seq_lengths` is one length per example, a `Lengths` input (`lengths: Lengths`, [1] per example), but {name} has shape {shape}"));
                return None;
            }
            out.lengths = Some(l);
        }
        ok.then_some(out)
    }

    /// The step of an argument that must be a tensor holding `want`.
    fn tensor_of(
        &mut self,
        what: &str,
        a: &ArgVal,
        name: &str,
        want: Elem,
        tokens: &TokenStream,
    ) -> Option<usize> {
        match &a.val {
            Val::Tensor(i) if self.elem(*i) == want => Some(*i),
            Val::Tensor(i) => {
                let have = self.elem(*i);
                self.cx.error_at(
                    a,
                    format!(
                        "`{what}` needs {} here, but {name} holds {}{}",
                        holds(want),
                        holds(have),
                        elem_help(have, want)
                    ),
                );
                None
            }
            Val::Poison => None,
            other => {
                self.cx.error_at(
                    tokens,
                    format!("`{what}` needs a tensor input, not {}", other.describe()),
                );
                None
            }
        }
    }

    /// The field name: `name = ".."` or the next `kind_N` in construction
    /// order (Flax's autonaming); reports duplicates. With it, the name of
    /// the Flax module that holds the parameters: the given name where
    /// `flax_named` (it names the Flax module too), else the next
    /// `Class_N`.
    pub(super) fn field_name(
        &mut self,
        base: &str,
        (class, flax_named): (&str, bool),
        given: Option<&ArgVal>,
        call: &TokenStream,
    ) -> Option<(syn::Ident, String)> {
        let (written, name) = match given {
            // Its expression's error is reported already.
            Some(a) if a.val.is_poison() => return None,
            Some(a) => self.cx.take(a.layer_name())?,
            None => {
                let n = self.counters.entry(base.to_string()).or_insert(0);
                let name = format!("{base}_{n}");
                *n += 1;
                (String::new(), name)
            }
        };
        let flax = match given {
            Some(_) if flax_named => written,
            _ => {
                let n = self.flax_counters.entry(class.to_string()).or_insert(0);
                *n += 1;
                format!("{class}_{}", *n - 1)
            }
        };
        let at = given.map(|a| format!("{:?}", a.span()));
        if let Some(first) = self.names.insert(name.clone(), at.clone()) {
            // The same `name = ".."` met again: a loop's.
            let hint = match first == at {
                true => {
                    "; a name written in a loop needs the loop's index, `format!(\"block_{i}\")`"
                }
                false => "",
            };
            match given {
                None => self.cx.error_at(call, format!("duplicate name: this layer's automatic name `{name}` is already given to an earlier layer with `name = \"{name}\"`; rename that one")),
                Some(a) => self.cx.error_at(a, format!("duplicate name: `{name}` is already the name of an earlier layer; every layer with parameters needs its own name (it is the checkpoint key prefix){hint}")),
            }
            return None;
        }
        Some((format_ident!("{}", name), flax))
    }

    /// `param(name, init, shape)`: a field of the declared tensor, and a
    /// step of its value.
    fn param(&mut self, args: &[Arg], tokens: &TokenStream) -> Val {
        if self.built_in_method("param", tokens) {
            return Val::Poison;
        }
        let vals = self.eval_args(args);
        if vals.len() != 3 || vals.iter().any(|a| a.key.is_some()) {
            let example = layers::param::EXAMPLE;
            self.cx.error_at(tokens, format!("`param` takes its name, initialiser and shape, in that order and without keywords, as Flax's `self.param`: `{example}`"));
            return Val::Poison;
        }
        let name = self.field_name("param", ("param", true), Some(&vals[0]), tokens);
        let checked = layers::param::check(&vals[1], &vals[2], &mut self.cx);
        match (name, checked) {
            (Some(n), Some(p)) => {
                let out = p.value_shape();
                self.add_field(n, Layer::Param(p), Vec::new(), out)
            }
            _ => Val::Poison,
        }
    }

    pub(super) fn add_field(
        &mut self,
        (name, flax): (syn::Ident, String),
        layer: Layer,
        inputs: Vec<usize>,
        out: Vec<usize>,
    ) -> Val {
        self.fields.push(Field { name, flax, layer });
        let field = self.fields.len() - 1;
        self.push(Kind::Field { field, inputs }, out)
    }

    pub(super) fn layer(
        &mut self,
        kind: LayerKind,
        vals: Vec<ArgVal>,
        inputs: &[Arg],
        tokens: &TokenStream,
    ) -> Val {
        if kind != LayerKind::Dropout && self.built_in_method(kind.name(), tokens) {
            return Val::Poison;
        }
        let bound = args::bind(kind.name(), layers::sig(kind), &vals, tokens, &mut self.cx);
        // Flax names a submodule when it is constructed, before its input
        // is evaluated: `Dense(2)(Dense(3)(x))` has the outer one first.
        let name = match kind {
            LayerKind::Dropout => None,
            _ => Some(self.field_name(
                &layers::base_name(kind, &bound),
                layers::flax_class(kind, &bound),
                bound.get("name"),
                tokens,
            )),
        };
        let spec = layers::inputs(kind);
        let Some(applied) = self.applied(kind.name(), inputs, &spec, tokens) else {
            return Val::Poison;
        };
        if vals.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        let (first, input) = applied.pos[0].clone();
        let shape = self.shape(first).to_vec();
        let extra: Vec<Vec<usize>> = applied.pos[1..]
            .iter()
            .map(|(i, _)| self.shape(*i).to_vec())
            .collect();
        let mask = applied.mask.map(|m| self.shape(m).to_vec());
        let site = Site {
            shape: &shape,
            input,
            call: tokens,
            extra,
            mask,
        };
        let pos: Vec<usize> = applied.pos.iter().map(|(i, _)| *i).collect();
        let steps = layers::arrange(kind, &pos, applied.mask.or(applied.lengths));
        match layers::check(kind, &bound, &site, &mut self.cx) {
            Some(Checked::Field(layer, out)) => match name.flatten() {
                Some(n) => self.add_field(n, layer, steps, out),
                None => Val::Poison,
            },
            Some(Checked::Op(op)) => self.push(Kind::Op { op, inputs: steps }, shape),
            None => Val::Poison,
        }
    }

    /// An op on its evaluated arguments; `args` as written name its
    /// inputs in messages.
    pub(super) fn op(
        &mut self,
        kind: OpKind,
        vals: Vec<ArgVal>,
        args: &[Arg],
        tokens: &TokenStream,
    ) -> Val {
        let what = kind.name();
        // `log(10000.0)`, `sqrt(d)`: maths on numbers, at expansion.
        if let [a] = &vals[..] {
            if let (Val::Int(_) | Val::Float(_), None) = (&a.val, &a.key) {
                let x = match a.val {
                    Val::Int(n) => n as f64,
                    Val::Float(f) => f,
                    _ => 0.0,
                };
                let y = match kind {
                    OpKind::Exp => Some(x.exp()),
                    OpKind::Log => Some(x.ln()),
                    OpKind::Sqrt => Some(x.sqrt()),
                    OpKind::Rsqrt => Some(1.0 / x.sqrt()),
                    OpKind::Sin => Some(x.sin()),
                    OpKind::Cos => Some(x.cos()),
                    OpKind::Abs => Some(x.abs()),
                    OpKind::Square => Some(x * x),
                    _ => None,
                };
                match y {
                    Some(y) if y.is_finite() => return Val::Float(y),
                    Some(_) => {
                        self.cx
                            .error_at(tokens, format!("`{what}` of {x} is not a finite number"));
                        return Val::Poison;
                    }
                    None => {}
                }
            }
        }
        let n = ops::tensor_args(kind);
        if vals.len() < n || vals[..n].iter().any(|a| a.key.is_some()) {
            let example = if n == 1 {
                format!("`{what}(x, ..)`")
            } else {
                format!("`{what}(a, b)`")
            };
            let lead = if n == 1 {
                "the first argument"
            } else {
                "the first arguments"
            };
            self.cx.error_at(
                tokens,
                format!(
                    "{lead} of `{what}` {} its input tensor{}, e.g. {example}",
                    if n == 1 { "is" } else { "are" },
                    if n == 1 { "" } else { "s" }
                ),
            );
            return Val::Poison;
        }
        let (tensors, rest) = vals.split_at(n);
        let bound: Bound = args::bind(what, ops::sig(kind), rest, tokens, &mut self.cx);
        let mut ids = Vec::new();
        let mut names = Vec::new();
        for (k, t) in tensors.iter().enumerate() {
            match (&t.val, ops::takes_tuple(kind)) {
                (Val::Tensor(i), false) => {
                    ids.push(*i);
                    names.push(describe(args, k));
                }
                (Val::Tuple(items), true) if items.len() >= 2 => {
                    for item in items {
                        match item {
                            Val::Tensor(i) => ids.push(*i),
                            Val::Poison => return Val::Poison,
                            other => {
                                self.cx.error_at(
                                    t,
                                    format!(
                                        "`{what}` joins tensors, but one of them is {}",
                                        other.kind()
                                    ),
                                );
                                return Val::Poison;
                            }
                        }
                    }
                    names = match args.first().map(|a| &a.value) {
                        Some(crate::ast::Expr::Tuple(es, _)) if es.len() == ids.len() => {
                            es.iter().map(|e| e.describe()).collect()
                        }
                        _ => (0..ids.len())
                            .map(|k| format!("tensor {}", k + 1))
                            .collect(),
                    };
                }
                (Val::Poison, _) => return Val::Poison,
                (_, true) => {
                    self.cx.error_at(t, "`concatenate` joins two or more tensors given as a tuple or a list: `concatenate((x, y), axis = -3)`");
                    return Val::Poison;
                }
                (other, false) => {
                    self.cx.error_at(
                        tokens,
                        format!("`{what}` needs a tensor input, not {}", other.describe()),
                    );
                    return Val::Poison;
                }
            }
        }
        if rest.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        if let Some(want) = ops::input_elem(kind) {
            for (i, name) in ids.iter().zip(&names) {
                let have = self.elem(*i);
                if have != want {
                    self.cx.error_at(
                        tokens,
                        format!(
                            "`{what}` needs {}, but {name} holds {}{}",
                            holds(want),
                            holds(have),
                            elem_help(have, want)
                        ),
                    );
                    return Val::Poison;
                }
            }
        }
        // `mask = m` (`dot_product_attention`): a mask, the op's last input.
        let mask = match bound.get("mask").map(|a| (a, &a.val)) {
            None => None,
            Some((_, Val::Tensor(m))) if self.elem(*m) == Elem::Bool => Some(*m),
            Some((a, other)) => {
                let what = match other {
                    Val::Tensor(i) => holds(self.elem(*i)).to_string(),
                    other => other.describe(),
                };
                self.cx.error_at(
                    a,
                    format!(
                        "`mask` is a mask (a `Mask` input, `make_causal_mask(..)`, ..), not {what}"
                    ),
                );
                return Val::Poison;
            }
        };
        let shapes: Vec<Vec<usize>> = ids.iter().map(|i| self.shape(*i).to_vec()).collect();
        let site = Site {
            shape: &shapes[0],
            input: names[0].clone(),
            call: tokens,
            extra: shapes[1..].to_vec(),
            mask: mask.map(|m| self.shape(m).to_vec()),
        };
        let ids: Vec<usize> = ids.into_iter().chain(mask).collect();
        match ops::check(kind, &bound, &shapes, &names, &site, &mut self.cx) {
            Some((op, out)) => {
                // Moves rows: token ids stay token ids.
                let op = match op {
                    ops::Op::ShiftRight(_) => ops::Op::ShiftRight(self.elem(ids[0]) == Elem::Index),
                    other => other,
                };
                let elem = op.output_elem();
                self.push_elem(Kind::Op { op, inputs: ids }, out, elem)
            }
            None => Val::Poison,
        }
    }

    pub(super) fn nested(
        &mut self,
        path: &syn::Path,
        vals: Vec<ArgVal>,
        inputs: &[Arg],
        tokens: &TokenStream,
    ) -> Val {
        let text = crate::ast::compact_text(&path.to_token_stream());
        if self.built_in_method(&text, tokens) {
            return Val::Poison;
        }
        // `name` is the caller's; every other argument is a parameter of
        // the nested model.
        let (named, params): (Vec<ArgVal>, Vec<ArgVal>) = vals
            .into_iter()
            .partition(|a| a.key.as_ref().is_some_and(|k| k == "name"));
        let Some(name) = self.nested_name(path, named.first(), tokens) else {
            // Its inputs are still checked.
            let _ = self.eval_args(inputs);
            return Val::Poison;
        };
        let input_vals = self.eval_args(inputs);
        self.nested_named(path, name, params, (inputs, input_vals), tokens)
    }

    /// A nested model's field name: `name = ".."`, or the next automatic
    /// one.
    pub(super) fn nested_name(
        &mut self,
        path: &syn::Path,
        given: Option<&ArgVal>,
        tokens: &TokenStream,
    ) -> Option<(syn::Ident, String)> {
        let last = path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default();
        self.field_name(&symbol::snake(&last), (&last, true), given, tokens)
    }

    /// A nested model named already, instantiated for its inputs.
    pub(super) fn nested_named(
        &mut self,
        path: &syn::Path,
        name: (syn::Ident, String),
        params: Vec<ArgVal>,
        (inputs, input_vals): (&[Arg], Vec<ArgVal>),
        tokens: &TokenStream,
    ) -> Val {
        let text = crate::ast::compact_text(&path.to_token_stream());
        let model = match self
            .sources
            .get(&crate::nest::key(path))
            .map(|src| crate::parse::parse_model(src.clone()))
        {
            Some(Ok(m)) if m.errors.is_none() => m,
            // Its own expansion reports what is wrong with it.
            _ => {
                self.cx
                    .error_at(tokens, format!("`{text}` does not expand (see its errors)"));
                return Val::Poison;
            }
        };
        let n = model.inputs.len();
        let spec = InputSpec {
            min: n,
            max: n,
            mask: false,
            lengths: false,
            elems: model.inputs.iter().map(|i| i.elem).collect(),
        };
        let Some(applied) = self.applied_vals(&text, input_vals, inputs, &spec, tokens) else {
            return Val::Poison;
        };
        if params.iter().any(|a| a.val.is_poison()) {
            return Val::Poison;
        }
        if self.depth >= MAX_DEPTH {
            self.cx.error_at(
                tokens,
                format!("models nested more than {MAX_DEPTH} deep: does a model call itself?"),
            );
            return Val::Poison;
        }
        if !super::check_param_args(&model, &params, &mut self.cx) {
            return Val::Poison;
        }
        let dims: Vec<Vec<usize>> = applied
            .pos
            .iter()
            .map(|(i, _)| self.shape(*i).to_vec())
            .collect();
        let ident = format_ident!("__{}_{}", self.outer, name.0);
        // The caller's `Embed`s passed as parameters travel as their tables,
        // inputs after the declared ones.
        let mut params = params;
        let mut tables = Vec::new();
        let mut table_steps = Vec::new();
        for a in &mut params {
            let step = match a.val {
                Val::Layer(id) => match self.lend(id, &a.tokens) {
                    Some(step) => step,
                    None => return Val::Poison,
                },
                Val::Table(step) => step,
                _ => continue,
            };
            *a = a.with_val(Val::Table(tables.len()));
            tables.push(self.shape(step).to_vec());
            table_steps.push(step);
        }
        let inst = Instance {
            name: ident.clone(),
            dims: dims.clone(),
            args: params,
            tables,
        };
        let plan = match super::check_instance(&model, inst, self.sources, self.depth + 1) {
            Ok(p) => p,
            Err(e) => {
                // A mistake already reported through another instance is
                // one mistake: no second report, no second "in this
                // instance".
                if !self.cx.push_new(e) {
                    return Val::Poison;
                }
                let shapes: Vec<String> = dims.iter().map(|d| crate::shape::show(d)).collect();
                self.cx.error_at(
                    tokens,
                    format!(
                        "in this instance of `{text}` for {} of shape {}",
                        applied.pos[0].1,
                        shapes.join(", ")
                    ),
                );
                return Val::Poison;
            }
        };
        let out = plan.steps[plan.output].shape.clone();
        let more: Vec<Vec<usize>> = plan
            .more_outputs
            .iter()
            .map(|o| plan.steps[*o].shape.clone())
            .collect();
        let params = plan
            .fields
            .iter()
            .fold(0usize, |n, f| n.saturating_add(f.layer.params()));
        self.inlined.push(plan);
        self.nested_paths.push(path.clone());
        let steps = applied
            .pos
            .iter()
            .map(|(i, _)| *i)
            .chain(table_steps)
            .collect();
        let call = self.add_field(
            name,
            Layer::Nested(Nested {
                ident,
                path: text,
                params,
            }),
            steps,
            out.clone(),
        );
        match (call, more.is_empty()) {
            (Val::Tensor(k), false) => self.items(k, out, more),
            (call, _) => call,
        }
    }

    /// `let (mean, logvar) = Encoder()(x)`: the call's step holds the
    /// tuple; each output is a step of its own, made here once.
    pub(super) fn items(&mut self, call: usize, first: Vec<usize>, more: Vec<Vec<usize>>) -> Val {
        self.steps[call].more = more.clone();
        let shapes = std::iter::once(first).chain(more);
        let items = shapes
            .enumerate()
            .map(|(index, shape)| self.push(Kind::Item { of: call, index }, shape))
            .collect();
        Val::Tuple(items)
    }
}

/// The tensors a call is applied to.
pub(super) struct Applied {
    /// Positional inputs and how messages name them.
    pub(super) pos: Vec<(usize, String)>,
    /// `mask = m`.
    pub(super) mask: Option<usize>,
    /// `seq_lengths = lengths`.
    pub(super) lengths: Option<usize>,
}

/// What a value of this kind holds, for messages.
fn holds(e: Elem) -> &'static str {
    match e {
        Elem::Float => "float features",
        Elem::Index => "token ids",
        Elem::Bool => "a mask",
    }
}

/// What to do with a tensor that holds the wrong kind of value.
fn elem_help(have: Elem, want: Elem) -> &'static str {
    match (have, want) {
        (Elem::Index, Elem::Float) => "\nhelp: `Embed(num_embeddings, features)(tokens)` turns token ids into features",
        (Elem::Bool, Elem::Float) => "\nhelp: a mask is passed to attention as `mask = ..`",
        (Elem::Float, Elem::Bool) => "\nhelp: `make_causal_mask(x)` and `make_attention_mask(q_tokens, k_tokens)` build masks",
        (Elem::Float, Elem::Index) | (Elem::Bool, Elem::Index) => "\nhelp: token ids come in as `tokens: Tokens<seq>`",
        (Elem::Float, Elem::Float) | (Elem::Index, Elem::Index) | (Elem::Bool, Elem::Bool) | (Elem::Index, Elem::Bool) => "",
    }
}

/// How messages name the `k`-th argument.
fn describe(args: &[Arg], k: usize) -> String {
    args.get(k)
        .map(|a| a.value.describe())
        .unwrap_or_else(|| "its input".into())
}
