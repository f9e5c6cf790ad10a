//! Checking: runs the model's body at expansion time and lowers it to a
//! [`Plan`].
//!
//! The checker evaluates `fn forward` like an interpreter whose tensors
//! are shapes: values known at expansion (block parameters, loop indices,
//! `x.shape[-1]`) are computed, `for` loops unrolled and `if`/`match`
//! decided, and every layer, op and arithmetic on tensors becomes a step in
//! evaluation order. Every independent mistake is recorded in the [`Ctxt`],
//! each at the call it concerns; a value whose expression failed is
//! "poisoned", so later uses of it are skipped rather than reported again.
//! The checker writes no code: it records typed layers and ops, whose own
//! modules generate it.

mod builtin;
mod call;
mod eval;
mod fuse;
mod loops;
pub mod methods;
pub(crate) mod partial;
mod random;
mod shared;
mod transform;

use crate::ast::{Arith, Elem, Model};
use crate::ctxt::Ctxt;
use crate::layers::Layer;
use crate::nest::Sources;
use crate::ops::Op;
use crate::value::{ArgVal, Val};
use quote::format_ident;
use std::collections::{BTreeSet, HashMap};
use syn::Error;

/// What the expansion needs: the checked model.
pub struct Plan {
    /// The model's type (`Cnn`, or a hidden instance type).
    pub name: syn::Ident,
    /// The generated module type (`CnnModule`).
    pub module: syn::Ident,
    /// Steps in evaluation order; the first `num_inputs` are the inputs.
    pub steps: Vec<Step>,
    /// How many inputs the model takes.
    pub num_inputs: usize,
    /// The step whose value is the output (the first, when the model
    /// returns a tuple).
    pub output: usize,
    /// The tuple's later outputs, `(policy, value)`'s `value`.
    pub more_outputs: Vec<usize>,
    /// Layers with parameters (struct fields), in call order.
    pub fields: Vec<Field>,
    /// Nested models instantiated for this one, expanded next to it.
    pub inlined: Vec<Plan>,
    /// The nested models' paths as written, which the expansion names so
    /// that rustc checks they are `#[compact]` models.
    pub nested_paths: Vec<syn::Path>,
    /// The model's other methods (`generate`), over [`Plan::fields`].
    pub methods: Vec<methods::MethodPlan>,
}

/// A layer with parameters, stored in the module.
pub struct Field {
    /// Field name and checkpoint key prefix (`conv_0`).
    pub name: syn::Ident,
    /// The name Flax gives the module holding its parameters: `name = ".."`
    /// as written, else the class and its index (`Conv_0`, `ResUnit_1`,
    /// `DecoderLSTMCell_0`).
    pub flax: String,
    /// The layer.
    pub layer: Layer,
}

/// One tensor of the forward pass.
pub struct Step {
    /// How it is computed.
    pub kind: Kind,
    /// Its per-example shape.
    pub shape: Vec<usize>,
    /// What it holds.
    pub elem: Elem,
    /// The shapes of a nested model's later outputs, when the step is its
    /// call and its value the tuple (read through [`Kind::Item`]).
    pub more: Vec<Vec<usize>>,
}

/// How a step is computed from earlier steps (given by index).
pub enum Kind {
    /// The model's input of this index.
    Input,
    /// A field's module applied to these values (one, or several as a
    /// tuple).
    Field { field: usize, inputs: Vec<usize> },
    /// An op on these steps.
    Op { op: Op, inputs: Vec<usize> },
    /// Tensor-tensor arithmetic.
    Binary(Arith, usize, usize),
    /// Tensor-scalar arithmetic; `scalar_first` for `s - x` and the like.
    Scalar {
        op: Arith,
        input: usize,
        value: f64,
        scalar_first: bool,
    },
    /// `-x`
    Neg(usize),
    /// A `Conv` field on `input` with the `relu` (and the pooling) that
    /// read it, as one op (see [`fuse`]); its value is the last op's.
    ConvBlock {
        field: usize,
        input: usize,
        relu: bool,
        pool: Option<crate::ops::Pool>,
    },
    /// A step folded into a later [`Kind::ConvBlock`]: nothing reads it
    /// and it computes nothing.
    Folded,
    /// Output `index` of the tuple a nested model's call (step `of`)
    /// returned; each is made once, right after the call.
    Item { of: usize, index: usize },
}

impl Step {
    /// Its batched tensor type in generated code: float values and token
    /// ids carry the tape `T`, masks none.
    pub fn ty(&self) -> proc_macro2::TokenStream {
        let first = crate::gen::typed_tensor(&self.shape, self.elem, true);
        match self.more.is_empty() {
            true => first,
            false => {
                let rest = self.more.iter().map(|s| crate::gen::tensor_ty(s));
                quote::quote!((#first, #(#rest,)*))
            }
        }
    }
}

impl Kind {
    /// The steps this one reads, in the order the generated code reads them.
    pub fn inputs(&self) -> Vec<usize> {
        match self {
            Kind::Input | Kind::Folded => vec![],
            Kind::Scalar { input, .. } | Kind::Neg(input) | Kind::ConvBlock { input, .. } => {
                vec![*input]
            }
            Kind::Item { of, .. } => vec![*of],
            Kind::Field { inputs, .. } | Kind::Op { inputs, .. } => inputs.clone(),
            Kind::Binary(_, a, b) => vec![*a, *b],
        }
    }
}

/// How a model is instantiated: as declared, or inside another model for
/// the caller's input shape and parameter values.
pub struct Instance {
    /// The type the plan is for.
    pub name: syn::Ident,
    /// The per-example shape of each input.
    pub dims: Vec<Vec<usize>>,
    /// Parameter values given by the caller (positional or by keyword).
    pub args: Vec<ArgVal>,
    /// The shapes of the tables of the caller's `Embed`s passed as block
    /// parameters ([`Val::Table`]): inputs after the declared ones.
    pub tables: Vec<Vec<usize>>,
}

/// A variable.
#[derive(Clone)]
struct Binding {
    val: Val,
    mutable: bool,
}

struct Checker<'a> {
    cx: Ctxt,
    steps: Vec<Step>,
    fields: Vec<Field>,
    inlined: Vec<Plan>,
    nested_paths: Vec<syn::Path>,
    /// Lexical scopes, innermost last.
    scopes: Vec<HashMap<String, Binding>>,
    /// Block parameters (`features`, also `self.features`).
    params: HashMap<String, Val>,
    /// The next automatic index per layer kind (`dense` → 2).
    counters: HashMap<String, usize>,
    /// The next index of Flax's automatic names per class (`Dense` → 2),
    /// which count apart from flaxen's where two classes snake-case alike.
    flax_counters: HashMap<String, usize>,
    /// The field names given so far, with where an explicit one was
    /// written (a name met twice at one place is a loop's).
    names: HashMap<String, Option<String>>,
    /// Layers bound once and applied where they are called (`let dense =
    /// Dense(64); dense(dense(x))`), by `Val::Layer` index.
    bound: Vec<shared::Bound>,
    model: &'a Model,
    /// The model's type name (instance types are named after it).
    outer: syn::Ident,
    sources: &'a Sources,
    depth: usize,
    /// How deep in the bodies of methods other than `fn forward` the
    /// checker is: they use `fn setup`'s layers, and build none.
    in_method: usize,
    /// The outermost scope after `fn setup` (the block parameters and its
    /// bindings): what a method inlined by `self.encode(x)` sees.
    setup_scope: HashMap<String, Binding>,
}

/// Checks a model as declared (input shape and parameter defaults).
pub fn check(model: &Model, sources: &Sources) -> syn::Result<Plan> {
    let inst = Instance {
        name: model.name.clone(),
        dims: model.inputs.iter().map(|i| i.dims.clone()).collect(),
        args: Vec::new(),
        tables: Vec::new(),
    };
    let mut plan = check_instance(model, inst, sources, 0);
    if let Ok(p) = &mut plan {
        methods::check_methods(model, sources, p)?;
    }
    plan
}

/// Checks a model for an instance (its `fn forward`), or returns every
/// error.
pub fn check_instance(
    model: &Model,
    inst: Instance,
    sources: &Sources,
    depth: usize,
) -> syn::Result<Plan> {
    check_body(model, inst, sources, depth, None)
}

/// Checks `fn forward`, or with `method` that method of the model.
fn check_body(
    model: &Model,
    inst: Instance,
    sources: &Sources,
    depth: usize,
    method: Option<usize>,
) -> syn::Result<Plan> {
    let (inputs, body) = match method {
        Some(k) => (&model.methods[k].inputs, &model.methods[k].body),
        None => (&model.inputs, &model.body),
    };
    let mut c = Checker {
        cx: Ctxt::new(),
        steps: inputs
            .iter()
            .map(|decl| decl.elem)
            .zip(&inst.dims)
            .chain(inst.tables.iter().map(|t| (Elem::Float, t)))
            .map(|(elem, dims)| Step {
                kind: Kind::Input,
                shape: dims.clone(),
                elem,
                more: Vec::new(),
            })
            .collect(),
        fields: Vec::new(),
        inlined: Vec::new(),
        nested_paths: Vec::new(),
        scopes: vec![HashMap::new()],
        params: HashMap::new(),
        counters: HashMap::new(),
        flax_counters: HashMap::new(),
        bound: Vec::new(),
        names: HashMap::new(),
        model,
        outer: inst.name.clone(),
        sources,
        depth,
        in_method: 0,
        setup_scope: HashMap::new(),
    };
    // Lines that did not parse are reported first; the rest is checked.
    if let Some(e) = &model.errors {
        c.cx.push(e.clone());
    }
    // A table passed in is the input after the declared ones.
    let args: Vec<ArgVal> = inst
        .args
        .iter()
        .map(|a| match a.val {
            Val::Table(k) => a.with_val(Val::Table(inputs.len() + k)),
            _ => a.clone(),
        })
        .collect();
    c.bind_params(&args);
    // `fn setup`'s bindings, then the inputs: every method sees both.
    if let Some(setup) = &model.setup {
        for s in &setup.stmts {
            c.stmt(s);
        }
    }
    c.setup_scope = c.scopes[0].clone();
    for (k, decl) in inputs.iter().enumerate() {
        c.declare(&decl.var, Val::Tensor(k), false);
    }
    if method.is_some() {
        c.in_method += 1;
    }
    let out = c.block(body, true);
    let out_tokens = body.value.as_ref().map(|v| v.tokens()).unwrap_or_default();
    // `(policy, value)`: several outputs, each a float tensor.
    let (out, more_outputs) = match out {
        Val::Tuple(items) if items.len() >= 2 => {
            let mut rest = Vec::new();
            for v in &items[1..] {
                match v {
                    Val::Tensor(i) if c.steps[*i].elem == Elem::Float => rest.push(*i),
                    Val::Poison => {}
                    other => c.cx.error_at(
                        &out_tokens,
                        format!(
                            "each output of the model must be a float tensor, but one is {}",
                            other.kind()
                        ),
                    ),
                }
            }
            if items.len() > 6 {
                c.cx.error_at(
                    &out_tokens,
                    format!("a model returns at most 6 outputs, not {}", items.len()),
                );
            }
            (items[0].clone(), rest)
        }
        other => (other, Vec::new()),
    };
    let output = match out {
        Val::Tensor(i) if c.steps[i].elem == Elem::Float => Some(i),
        Val::Tensor(i) => {
            let what = match c.steps[i].elem {
                Elem::Index => "token ids",
                _ => "a mask",
            };
            c.cx.error_at(
                body.value.as_ref().map(|v| v.tokens()).unwrap_or_default(),
                format!("the model output must be a float tensor, not {what}"),
            );
            None
        }
        Val::Poison => None,
        other => {
            c.cx.error_at(
                body.value.as_ref().map(|v| v.tokens()).unwrap_or_default(),
                format!("the model output must be a tensor, not {}", other.kind()),
            );
            None
        }
    };
    if output.is_none() && !c.cx.has_errors() {
        c.cx.push(Error::new(body.close, "the model has no output"));
    }
    c.cx.check()?;
    let output = output.ok_or_else(|| Error::new(body.close, "the model has no output"))?;
    let mut plan = Plan {
        module: format_ident!("{}Module", inst.name),
        name: inst.name,
        steps: c.steps,
        num_inputs: inputs.len() + inst.tables.len(),
        output,
        more_outputs,
        fields: c.fields,
        inlined: c.inlined,
        nested_paths: c.nested_paths,
        methods: Vec::new(),
    };
    fuse::conv_blocks(&mut plan);
    Ok(plan)
}

/// Checks the arguments a caller gives a nested model: positional ones in
/// declaration order, then keywords, each a parameter it declares, each a
/// value known at expansion. Errors go to the caller's context.
pub fn check_param_args(model: &Model, args: &[ArgVal], outer: &mut Ctxt) -> bool {
    let mut cx = Ctxt::new();
    let decls = &model.params;
    let names: Vec<String> = decls.iter().map(|d| d.name.to_string()).collect();
    let mut seen = BTreeSet::new();
    for (k, a) in args.iter().enumerate() {
        let name = match &a.key {
            Some(key) if names.contains(&key.to_string()) => key.to_string(),
            Some(key) => {
                let name = &model.name;
                let msg = if names.is_empty() {
                    format!("`{name}` takes no parameters besides `name`; declare one as `fn forward(x: Input<..>, {key}: Param<default>)`")
                } else {
                    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                    let near = crate::symbol::nearest(&key.to_string(), &refs)
                        .map(|s| format!("; did you mean `{s}`?"))
                        .unwrap_or_default();
                    format!(
                        "`{name}` has no parameter `{key}`{near}\nhelp: its parameters are: {}",
                        names.join(", ")
                    )
                };
                cx.push(Error::new(key.span(), msg));
                continue;
            }
            None if k >= names.len() || args[..k].iter().any(|p| p.key.is_some()) => {
                cx.error_at(a, format!("`{}` takes {} parameter(s), positional ones first, in declaration order: {}", model.name, names.len(), names.join(", ")));
                continue;
            }
            None => names[k].clone(),
        };
        if !a.val.is_constant() && !a.val.is_poison() {
            cx.error_at(a, format!("`{name}` is a block parameter, a value known when the macro expands (a number, a boolean, a tuple), not {}; pass tensors as inputs", a.val.kind()));
        }
        if !seen.insert(name.clone()) {
            cx.push(Error::new(a.span(), format!("`{name}` is given twice")));
        }
    }
    match cx.check() {
        Ok(()) => true,
        Err(e) => {
            outer.push(e);
            false
        }
    }
}

impl Checker<'_> {
    /// Binds block parameters: the caller's values (checked by
    /// [`check_param_args`]) over the defaults.
    fn bind_params(&mut self, args: &[ArgVal]) {
        let decls = &self.model.params;
        let mut given: HashMap<String, Val> = HashMap::new();
        for (k, a) in args.iter().enumerate() {
            let slot = match &a.key {
                Some(key) => decls.iter().find(|d| d.name == *key),
                None => decls.get(k),
            };
            if let Some(d) = slot {
                given.insert(d.name.to_string(), a.val.clone());
            }
        }
        for d in decls {
            let v = match given.remove(&d.name.to_string()) {
                Some(v) => v,
                None => self.const_expr(&d.default),
            };
            self.params.insert(d.name.to_string(), v.clone());
            self.declare(&d.name, v, false);
        }
    }

    fn declare(&mut self, var: &syn::Ident, val: Val, mutable: bool) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(var.to_string(), Binding { val, mutable });
        }
    }

    fn lookup(&self, name: &str) -> Option<&Binding> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    /// Every variable in scope, for suggestions.
    fn visible(&self) -> Vec<String> {
        let mut v: Vec<String> = self.scopes.iter().flat_map(|s| s.keys().cloned()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Adds a float step.
    fn push(&mut self, kind: Kind, shape: Vec<usize>) -> Val {
        self.push_elem(kind, shape, Elem::Float)
    }

    fn push_elem(&mut self, kind: Kind, shape: Vec<usize>, elem: Elem) -> Val {
        self.steps.push(Step {
            kind,
            shape,
            elem,
            more: Vec::new(),
        });
        Val::Tensor(self.steps.len() - 1)
    }

    fn elem(&self, step: usize) -> Elem {
        self.steps[step].elem
    }

    fn shape(&self, step: usize) -> &[usize] {
        &self.steps[step].shape
    }
}
