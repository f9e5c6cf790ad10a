//! Checking: shape inference and validation of a parsed model.
//!
//! The checker walks the body once, giving every value a per-example shape,
//! and lowers it to a [`Plan`]: a list of steps in evaluation order (one per
//! layer, op or arithmetic) that the expansion turns into code. Every
//! independent mistake is reported, each at the call it concerns; a value
//! whose expression failed is "poisoned", so later uses of it are skipped
//! rather than reported again.

use crate::parse::{BinOp, Expr, Model};
use crate::shape::{self, show, AxisPad, Dim, Same};
use crate::vocab::{self, bind, Errors, LAYERS, OPS};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use std::collections::HashMap;
use syn::Error;

mod layers;

/// What the expansion needs: the checked model.
pub struct Plan {
    /// The user's type (`Cnn`).
    pub name: syn::Ident,
    /// The generated module type (`CnnModule`).
    pub module: syn::Ident,
    /// Steps in evaluation order; step 0 is the input.
    pub steps: Vec<Step>,
    /// The step whose value is the output.
    pub output: usize,
    /// Parameterised sub-modules (struct fields), in call order.
    pub fields: Vec<Field>,
    /// Conditions rustc must check because the macro could not fold them.
    pub asserts: Vec<Assert>,
    /// Doc attributes of `fn forward`.
    pub docs: Vec<syn::Attribute>,
    /// Other impl items, passed through.
    pub passthrough: Vec<syn::ImplItem>,
    /// The impl block as written (absent for an instance).
    pub source: Option<TokenStream>,
    /// Nested models instantiated for this one, expanded next to it.
    pub inlined: Vec<Plan>,
}

/// A parameterised layer stored in the module.
pub struct Field {
    /// Field name and checkpoint key prefix (`conv_0`).
    pub name: syn::Ident,
    /// Its type, written with the generic parameters `E` and `D`.
    pub ty: TokenStream,
    /// Trainable parameters (a constant expression for nested models).
    pub params: Dim,
    /// Statements run on the freshly built field `__f` (Flax's defaults
    /// where dfdx's differ).
    pub init: Vec<TokenStream>,
    /// The layer takes `NoInputGrad(x)` and then skips `x`'s gradient.
    pub skips_input_grad: bool,
}

/// A `const` assertion.
pub struct Assert {
    /// The `bool` constant expression.
    pub cond: TokenStream,
    /// The message, written for the user.
    pub msg: String,
    /// Where to report it.
    pub span: Span,
}

/// One value of the forward pass.
pub struct Step {
    /// How it is computed.
    pub kind: Kind,
    /// Its per-example shape.
    pub shape: Vec<Dim>,
    /// A rustdoc line describing it (layers and ops only).
    pub doc: Option<String>,
}

/// How a step is computed from earlier steps (given by index).
pub enum Kind {
    /// The model input.
    Input,
    /// A field's module applied to a value.
    Field(usize, usize),
    /// A zero-sized module (pooling, flatten) applied to a value.
    Zst(TokenStream, usize),
    /// Dropout with this rate.
    Dropout(f64, usize),
    /// A method of dfdx tensors taking no argument (`try_relu`).
    Method(syn::Ident, usize),
    /// A function of `flaxen_runtime::activations` taking the tensor and
    /// these numbers (`try_elu(x, 1.0)`): ops dfdx lacks or gets wrong.
    Function(&'static str, usize, Vec<f64>),
    /// `softmax` / `log_softmax` along this axis of the batched tensor.
    Softmax {
        log: bool,
        axis: usize,
        input: usize,
    },
    /// `concatenate` of these steps along this axis of the batched tensor.
    Concat { inputs: Vec<usize>, axis: usize },
    /// `mean` / `sum` over these axes of the batched tensor (ascending).
    Reduce {
        mean: bool,
        axes: Vec<usize>,
        input: usize,
    },
    /// Merges the trailing `[seq, features]` axes.
    Reshape(usize),
    /// Tensor-tensor arithmetic.
    Binary(BinOp, usize, usize),
    /// Tensor-scalar arithmetic; `scalar_first` for `s - x` and the like.
    Scalar {
        op: BinOp,
        input: usize,
        value: f64,
        scalar_first: bool,
    },
    /// `-x`
    Neg(usize),
}

impl Kind {
    /// The steps this one reads, in the order the generated code reads them.
    pub fn inputs(&self) -> Vec<usize> {
        match self {
            Kind::Input => vec![],
            Kind::Field(_, i)
            | Kind::Zst(_, i)
            | Kind::Dropout(_, i)
            | Kind::Method(_, i)
            | Kind::Function(_, i, _)
            | Kind::Reshape(i)
            | Kind::Neg(i) => vec![*i],
            Kind::Softmax { input, .. }
            | Kind::Scalar { input, .. }
            | Kind::Reduce { input, .. } => {
                vec![*input]
            }
            Kind::Binary(_, a, b) => vec![*a, *b],
            Kind::Concat { inputs, .. } => inputs.clone(),
        }
    }
}

/// The value of an expression: a tensor (a step), a number, or poisoned.
#[derive(Clone, Copy)]
enum Val {
    Tensor(usize),
    Number(f64),
    Poison,
}

struct Checker {
    steps: Vec<Step>,
    fields: Vec<Field>,
    asserts: Vec<Assert>,
    errs: Errors,
    env: HashMap<String, Val>,
    counters: HashMap<String, usize>,
    names: HashMap<String, ()>,
    /// The input checks of the nested models called so far: a later
    /// assertion that depends on a nested model's output only applies when
    /// that call was valid, so one mistake gives one error.
    guards: Vec<TokenStream>,
    /// The model being checked (instance types are named after it).
    outer: syn::Ident,
    inlined: Vec<Plan>,
    /// Sources of the nested models this one calls.
    sources: crate::nest::Sources,
    depth: usize,
}

/// Path of dfdx's modules in generated code.
fn nn() -> TokenStream {
    quote!(::flaxen::__private::dfdx::nn::modules)
}

/// Path of flaxen's layers in generated code.
pub(crate) fn layers() -> TokenStream {
    quote!(::flaxen::__private::flaxen_runtime::layers)
}

/// Checks a parsed model and lowers it to a plan, or returns every error.
/// Checks a model whose nested models' sources are known (`depth`: how
/// deep this model is nested).
pub fn check_with(model: Model, sources: &crate::nest::Sources, depth: usize) -> syn::Result<Plan> {
    let mut c = Checker {
        steps: vec![Step {
            kind: Kind::Input,
            shape: model.input.dims.iter().map(|d| Dim::Known(*d)).collect(),
            doc: None,
        }],
        fields: Vec::new(),
        asserts: Vec::new(),
        errs: Errors::default(),
        env: HashMap::new(),
        counters: HashMap::new(),
        names: HashMap::new(),
        guards: Vec::new(),
        outer: model.name.clone(),
        inlined: Vec::new(),
        sources: sources.clone(),
        depth,
    };
    c.env.insert(model.input.var.to_string(), Val::Tensor(0));
    for l in &model.lets {
        let v = c.expr(&l.value);
        c.env.insert(l.var.to_string(), v);
    }
    let out = c.expr(&model.output);
    let output = match out {
        Val::Tensor(i) => Some(i),
        Val::Number(_) => {
            c.errs.push(Error::new_spanned(
                model.output.tokens(),
                "the model output must be a tensor, not a number",
            ));
            None
        }
        Val::Poison => None,
    };
    c.errs.finish()?;
    let output = output.ok_or_else(|| Error::new(Span::call_site(), "internal: no output"))?;
    let module = format_ident!("{}Module", model.name);
    Ok(Plan {
        name: model.name,
        module,
        steps: c.steps,
        output,
        fields: c.fields,
        asserts: c.asserts,
        docs: model.docs,
        passthrough: model.passthrough,
        source: model.source,
        inlined: c.inlined,
    })
}

impl Checker {
    /// Records a `const` assertion that depends on nested models' outputs.
    fn assert_dependent(&mut self, cond: TokenStream, msg: String, span: Span) {
        let guards = &self.guards;
        self.asserts.push(Assert {
            cond: quote!(!(true #(&& #guards)*) || (#cond)),
            msg,
            span,
        });
    }

    fn shape(&self, step: usize) -> &[Dim] {
        &self.steps[step].shape
    }

    fn push(&mut self, kind: Kind, shape: Vec<Dim>, doc: Option<String>) -> Val {
        self.steps.push(Step { kind, shape, doc });
        Val::Tensor(self.steps.len() - 1)
    }

    /// The field name: `name = ".."` or the next `kind_N`; reports duplicates.
    fn field_name(
        &mut self,
        base: &str,
        args: &std::collections::BTreeMap<&'static str, &syn::Expr>,
        call: &TokenStream,
    ) -> Option<syn::Ident> {
        let (name, tokens) = match args.get("name") {
            Some(e) => self.errs.take(vocab::layer_name(e))?,
            None => {
                let n = self.counters.entry(base.to_string()).or_insert(0);
                let name = format!("{base}_{n}");
                *n += 1;
                (name, TokenStream::new())
            }
        };
        if self.names.insert(name.clone(), ()).is_some() {
            if tokens.is_empty() {
                self.errs.push(Error::new_spanned(call, format!("duplicate name: this layer's automatic name `{name}` is already given to an earlier layer with `name = \"{name}\"`; rename that one")));
            } else {
                self.errs.push(Error::new_spanned(tokens, format!("duplicate name: `{name}` is already the name of an earlier layer; every parameterised layer needs its own name (it is the checkpoint key prefix)")));
            }
            return None;
        }
        Some(format_ident!("{}", name))
    }

    fn expr(&mut self, e: &Expr) -> Val {
        match e {
            Expr::Var(v) => match self.env.get(&v.to_string()) {
                Some(val) => *val,
                None => {
                    let known: Vec<String> = self.env.keys().cloned().collect();
                    let refs: Vec<&str> = known.iter().map(String::as_str).collect();
                    let mut msg = format!("unknown variable `{v}`");
                    if let Some(s) = vocab::nearest(&v.to_string(), &refs) {
                        msg.push_str(&format!("; did you mean `{s}`?"));
                    } else if OPS.contains(&v.to_string().as_str())
                        || LAYERS.contains(&v.to_string().as_str())
                    {
                        msg.push_str(&format!("; `{v}` is called, e.g. `{v}(x)`"));
                    }
                    self.errs.push(Error::new(v.span(), msg));
                    Val::Poison
                }
            },
            Expr::Scalar { value, .. } => Val::Number(*value),
            Expr::Neg { input, tokens } => match self.expr(input) {
                Val::Tensor(i) => {
                    let s = self.shape(i).to_vec();
                    self.push(Kind::Neg(i), s, None)
                }
                Val::Number(n) => Val::Number(-n),
                Val::Poison => {
                    let _ = tokens;
                    Val::Poison
                }
            },
            Expr::Binary {
                op,
                lhs,
                rhs,
                tokens,
            } => {
                let (l, r) = (self.expr(lhs), self.expr(rhs));
                self.binary(*op, l, r, lhs, rhs, tokens)
            }
            Expr::Op {
                name,
                input,
                args,
                tokens,
            } => {
                let x = self.expr(input);
                self.op(name, x, input, args, tokens)
            }
            Expr::Concat {
                inputs,
                args,
                tokens,
            } => {
                let vals: Vec<Val> = inputs.iter().map(|e| self.expr(e)).collect();
                self.concat(&vals, inputs, args, tokens)
            }
            Expr::Layer {
                path,
                args,
                input,
                tokens,
            } => {
                let x = self.expr(input);
                self.layer(path, x, input, args, tokens)
            }
        }
    }

    fn binary(
        &mut self,
        op: BinOp,
        l: Val,
        r: Val,
        le: &Expr,
        re: &Expr,
        tokens: &TokenStream,
    ) -> Val {
        let sym = op.symbol();
        match (l, r) {
            (Val::Poison, _) | (_, Val::Poison) => Val::Poison,
            (Val::Number(a), Val::Number(b)) => {
                let v = match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                };
                if v.is_finite() {
                    Val::Number(v)
                } else {
                    self.errs
                        .push(Error::new_spanned(tokens, "this number is not finite"));
                    Val::Poison
                }
            }
            (Val::Tensor(i), Val::Number(v)) => {
                let s = self.shape(i).to_vec();
                self.push(
                    Kind::Scalar {
                        op,
                        input: i,
                        value: v,
                        scalar_first: false,
                    },
                    s,
                    None,
                )
            }
            (Val::Number(v), Val::Tensor(i)) => {
                if op == BinOp::Div {
                    self.errs.push(Error::new_spanned(tokens, "dividing a number by a tensor is not supported; write `x * (1.0 / ..)` or use `sigmoid`/`softmax`"));
                    return Val::Poison;
                }
                let s = self.shape(i).to_vec();
                self.push(
                    Kind::Scalar {
                        op,
                        input: i,
                        value: v,
                        scalar_first: true,
                    },
                    s,
                    None,
                )
            }
            (Val::Tensor(a), Val::Tensor(b)) => {
                let (sa, sb) = (self.shape(a).to_vec(), self.shape(b).to_vec());
                match shape::same_shape(&sa, &sb) {
                    Same::Yes => {}
                    Same::No => {
                        self.errs.push(Error::new_spanned(tokens, format!(
                            "`{sym}` needs operands of the same shape, but {} has shape {} and {} has shape {} here",
                            le.describe(), show(&sa), re.describe(), show(&sb)
                        )));
                        return Val::Poison;
                    }
                    Same::IfConst(cond) => {
                        let msg = format!("`{sym}` needs operands of the same shape; {} has shape {} and {} has shape {} here", le.describe(), show(&sa), re.describe(), show(&sb));
                        self.assert_dependent(cond, msg, first_span(tokens));
                    }
                }
                self.push(Kind::Binary(op, a, b), sa, None)
            }
        }
    }

    /// `concatenate((a, b, ..), axis = -k)`: equal shapes but for the axis,
    /// whose sizes add up.
    fn concat(
        &mut self,
        vals: &[Val],
        inputs: &[Expr],
        args: &[crate::parse::Arg],
        tokens: &TokenStream,
    ) -> Val {
        let bound = bind("concatenate", "concatenate", args, tokens, &mut self.errs);
        let ids: Vec<Option<usize>> = vals
            .iter()
            .zip(inputs)
            .map(|(v, e)| self.tensor_input(*v, "concatenate", &e.tokens()))
            .collect();
        let Some(ids) = ids.into_iter().collect::<Option<Vec<usize>>>() else {
            return Val::Poison;
        };
        let first = self.shape(ids[0]).to_vec();
        let Some(axis) = bound
            .get("axis")
            .and_then(|e| self.errs.take(vocab::axis_from_end(e, first.len())))
        else {
            return Val::Poison;
        };
        let without = |s: &[Dim]| -> Vec<Dim> {
            s.iter()
                .enumerate()
                .filter(|(k, _)| *k != axis)
                .map(|(_, d)| d.clone())
                .collect()
        };
        let rest = without(&first);
        for (id, e) in ids.iter().zip(inputs).skip(1) {
            let s = self.shape(*id).to_vec();
            let msg = || {
                format!(
                    "`concatenate` along axis -{} needs the other axes to match, but {} has shape {} and {} has shape {} here",
                    first.len() - axis,
                    inputs[0].describe(),
                    show(&first),
                    e.describe(),
                    show(&s)
                )
            };
            if s.len() != first.len() {
                self.errs.push(Error::new_spanned(tokens, msg()));
                return Val::Poison;
            }
            match shape::same_shape(&rest, &without(&s)) {
                Same::Yes => {}
                Same::No => {
                    self.errs.push(Error::new_spanned(tokens, msg()));
                    return Val::Poison;
                }
                Same::IfConst(cond) => self.assert_dependent(cond, msg(), first_span(tokens)),
            }
        }
        let parts: Vec<Dim> = ids.iter().map(|i| self.shape(*i)[axis].clone()).collect();
        let Some(total) = shape::sum(&parts) else {
            return self.overflow(tokens);
        };
        let mut out = first;
        out[axis] = total;
        self.push(
            Kind::Concat {
                inputs: ids,
                axis: axis + 1,
            },
            out,
            Some("`concatenate`".into()),
        )
    }

    /// A tensor input of a layer or op, or an error if it is a number.
    fn tensor_input(&mut self, x: Val, what: &str, tokens: &TokenStream) -> Option<usize> {
        match x {
            Val::Tensor(i) => Some(i),
            Val::Number(_) => {
                self.errs.push(Error::new_spanned(
                    tokens,
                    format!("`{what}` needs a tensor input, not a number"),
                ));
                None
            }
            Val::Poison => None,
        }
    }

    fn op(
        &mut self,
        name: &syn::Ident,
        x: Val,
        input: &Expr,
        args: &[crate::parse::Arg],
        tokens: &TokenStream,
    ) -> Val {
        let n = name.to_string();
        if !OPS.contains(&n.as_str()) {
            let mut msg = format!("unknown op `{n}`");
            if let Some(s) = vocab::nearest(&n, OPS) {
                msg.push_str(&format!("; did you mean `{s}`?"));
            } else if let Some(s) = vocab::nearest(&n, LAYERS) {
                msg.push_str(&format!("; `{s}` is a layer, called as `{s}(..)(x)`"));
            } else {
                msg.push_str(&format!(
                    "\nhelp: the ops are: {}; layers are called as `Layer(..)(x)`: {}",
                    OPS.join(", "),
                    LAYERS.join(", ")
                ));
            }
            self.errs.push(Error::new(name.span(), msg));
            return Val::Poison;
        }
        let bound = bind(&n, &n, args, tokens, &mut self.errs);
        let Some(i) = self.tensor_input(x, &n, tokens) else {
            return Val::Poison;
        };
        let s = self.shape(i).to_vec();
        let method = |m: &str| Kind::Method(format_ident!("{}", m), i);
        match n.as_str() {
            // flaxen's own `Relu` (a parallel CPU kernel; dfdx's op on Cuda).
            "relu" => {
                let l = layers();
                self.push(Kind::Zst(quote!(#l::Relu), i), s, Some("`relu`".into()))
            }
            "sigmoid" | "tanh" => self.push(method(&format!("try_{n}")), s, Some(format!("`{n}`"))),
            "gelu" => {
                // Flax's `nn.gelu` defaults to the tanh approximation, which
                // is dfdx's `fast_gelu`; `approximate = false` is the erf
                // form, the runtime's fix of dfdx's `accurate_gelu`.
                let approximate = match bound.get("approximate") {
                    Some(e) => self.errs.take(vocab::boolean(e, "`approximate`")),
                    None => Some(true),
                };
                match approximate {
                    Some(true) => self.push(method("try_fast_gelu"), s, Some("`gelu`".into())),
                    Some(false) => self.push(
                        Kind::Function("try_gelu_exact", i, Vec::new()),
                        s,
                        Some("`gelu(approximate = false)`".into()),
                    ),
                    None => Val::Poison,
                }
            }
            "silu" | "swish" | "selu" | "softplus" | "log_sigmoid" | "relu6" | "hard_tanh"
            | "hard_sigmoid" | "hard_silu" | "hard_swish" => {
                let f = match n.as_str() {
                    "silu" => "try_silu",
                    "swish" => "try_swish",
                    "selu" => "try_selu",
                    "softplus" => "try_softplus",
                    "log_sigmoid" => "try_log_sigmoid",
                    "relu6" => "try_relu6",
                    "hard_tanh" => "try_hard_tanh",
                    "hard_sigmoid" => "try_hard_sigmoid",
                    _ => "try_hard_silu",
                };
                self.push(Kind::Function(f, i, Vec::new()), s, Some(format!("`{n}`")))
            }
            "leaky_relu" | "elu" => {
                // Flax's defaults: negative_slope 0.01, alpha 1.0.
                let (key, default, f) = if n == "elu" {
                    ("alpha", 1.0, "try_elu")
                } else {
                    ("negative_slope", 0.01, "try_leaky_relu")
                };
                let Some(v) = (match bound.get(key) {
                    Some(e) => self.errs.take(vocab::float(e, &format!("`{key}`"))),
                    None => Some(default),
                }) else {
                    return Val::Poison;
                };
                self.push(
                    Kind::Function(f, i, vec![v]),
                    s,
                    Some(format!("`{n}({key} = {v})`")),
                )
            }
            "softmax" | "log_softmax" => {
                let axis = match bound.get("axis") {
                    Some(e) => self.errs.take(vocab::axis_from_end(e, s.len())),
                    None => Some(s.len() - 1),
                };
                let Some(axis) = axis else {
                    return Val::Poison;
                };
                let doc = format!("`{n}` over axis {} from the end", s.len() - axis);
                self.push(
                    Kind::Softmax {
                        log: n == "log_softmax",
                        // The batched tensor has the batch axis in front.
                        axis: axis + 1,
                        input: i,
                    },
                    s,
                    Some(doc),
                )
            }
            "mean" | "sum" => {
                let axes = bound
                    .get("axis")
                    .and_then(|e| self.errs.take(vocab::axes_from_end(e, s.len())));
                let Some(axes) = axes else {
                    return Val::Poison;
                };
                if axes.len() == s.len() {
                    self.errs.push(Error::new_spanned(
                        tokens,
                        format!(
                            "`{n}` over every axis of {} (shape {}) leaves nothing per example; \
                             keep at least one axis (the batch axis is never reduced)",
                            input.describe(),
                            show(&s)
                        ),
                    ));
                    return Val::Poison;
                }
                let out: Vec<Dim> = s
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| !axes.contains(k))
                    .map(|(_, d)| d.clone())
                    .collect();
                let doc = format!("`{n}` over {} axis(es)", axes.len());
                self.push(
                    Kind::Reduce {
                        mean: n == "mean",
                        axes: axes.iter().map(|a| a + 1).collect(),
                        input: i,
                    },
                    out,
                    Some(doc),
                )
            }
            "flatten" => match s.len() {
                1 => Val::Tensor(i),
                2 => {
                    let Some(p) = shape::product(&s) else {
                        return self.overflow(tokens);
                    };
                    self.push(Kind::Reshape(i), vec![p], Some("`flatten`".into()))
                }
                _ => {
                    let Some(p) = shape::product(&s) else {
                        return self.overflow(tokens);
                    };
                    let (l, c, h, w, pg) = (
                        layers(),
                        s[0].generic(),
                        s[1].generic(),
                        s[2].generic(),
                        p.generic(),
                    );
                    self.push(
                        Kind::Zst(quote!(#l::Flatten2D<#c, #h, #w, #pg>), i),
                        vec![p],
                        Some("`flatten`".into()),
                    )
                }
            },
            _ => self.pool(&n, i, input, &bound, tokens),
        }
    }

    fn overflow(&mut self, tokens: &TokenStream) -> Val {
        self.errs
            .push(Error::new_spanned(tokens, "this size overflows `usize`"));
        Val::Poison
    }

    /// Reports that `what` needs an image input.
    fn needs_image(&mut self, what: &str, input: &Expr, s: &[Dim], tokens: &TokenStream) -> Val {
        let help = if s.len() == 1 {
            "\nhelp: declare an image input as `Input<channels, height, width>`"
        } else {
            ""
        };
        self.errs.push(Error::new_spanned(
            tokens,
            format!(
                "`{what}` needs a [channels, height, width] input, but {} has shape {} here{help}",
                input.describe(),
                show(s)
            ),
        ));
        Val::Poison
    }

    /// Sliding windows over both spatial axes, reporting a window that does
    /// not fit. Returns `(pads, outs)` per axis.
    #[allow(clippy::too_many_arguments)]
    fn windows(
        &mut self,
        what: &str,
        s: &[Dim],
        k: (usize, usize),
        st: (usize, usize),
        pad: (AxisPad, AxisPad),
        input: &Expr,
        tokens: &TokenStream,
    ) -> Option<[shape::Window; 2]> {
        let mut out = Vec::new();
        for (axis, (size, kk, ss, p)) in [(&s[1], k.0, st.0, pad.0), (&s[2], k.1, st.1, pad.1)]
            .into_iter()
            .enumerate()
        {
            match shape::window(size, kk, ss, p) {
                Ok(w) => {
                    if let Some(cond) = &w.requires {
                        let msg = format!(
                            "`{what}` window {}x{} does not fit: {} has shape {} here",
                            k.0,
                            k.1,
                            input.describe(),
                            show(s)
                        );
                        self.assert_dependent(cond.clone(), msg, first_span(tokens));
                    }
                    out.push(w);
                }
                Err(e) => {
                    let padded = if matches!(p, AxisPad::Valid) {
                        String::new()
                    } else {
                        format!(" (padded: {})", e.padded)
                    };
                    self.errs.push(Error::new_spanned(tokens, format!(
                        "`{what}` window {}x{} does not fit: {} has shape {} here, so its {} is {size}{padded}\nhelp: use a smaller window, `padding = SAME`, or a larger input",
                        k.0, k.1, input.describe(), show(s), if axis == 0 { "height" } else { "width" }
                    )));
                    return None;
                }
            }
        }
        let b = out.pop()?;
        let a = out.pop()?;
        Some([a, b])
    }

    fn pool(
        &mut self,
        n: &str,
        i: usize,
        input: &Expr,
        bound: &std::collections::BTreeMap<&'static str, &syn::Expr>,
        tokens: &TokenStream,
    ) -> Val {
        let win = bound
            .get("window_shape")
            .and_then(|e| self.errs.take(vocab::pair(e, "a window size")));
        let st = match bound.get("strides") {
            Some(e) => self.errs.take(vocab::pair(e, "a stride")),
            None => Some((1, 1)),
        };
        let pad = match bound.get("padding") {
            Some(e) => self.errs.take(vocab::padding(e)),
            None => Some((AxisPad::Valid, AxisPad::Valid)),
        };
        let s = self.shape(i).to_vec();
        if s.len() != 3 {
            return self.needs_image(n, input, &s, tokens);
        }
        let (Some(k), Some(st), Some(pad)) = (win, st, pad) else {
            return Val::Poison;
        };
        let Some([wh, ww]) = self.windows(n, &s, k, st, pad, input, tokens) else {
            return Val::Poison;
        };
        let l = layers();
        let ty = if n == "avg_pool" {
            quote!(AvgPool2D)
        } else {
            quote!(MaxPool2D)
        };
        let (c, h, w) = (s[0].generic(), s[1].generic(), s[2].generic());
        let (kh, kw, sh, sw) = (lit(k.0), lit(k.1), lit(st.0), lit(st.1));
        let (pt, pb, pl, pr) = (
            wh.pad_lo.generic(),
            wh.pad_hi.generic(),
            ww.pad_lo.generic(),
            ww.pad_hi.generic(),
        );
        let (oh, ow) = (wh.out.generic(), ww.out.generic());
        let out = vec![s[0].clone(), wh.out, ww.out];
        let doc = format!("`{n}` {kh}x{kw}, strides {sh}x{sw}");
        self.push(
            Kind::Zst(
                quote!(#l::#ty<#c, #kh, #kw, #sh, #sw, #pt, #pb, #pl, #pr, #h, #w, #oh, #ow>),
                i,
            ),
            out,
            Some(doc),
        )
    }
}

/// An unsuffixed integer literal (`32`, not `32usize`), so generated types
/// read like hand-written ones in rustdoc and compiler messages.
fn lit(n: usize) -> proc_macro2::Literal {
    proc_macro2::Literal::usize_unsuffixed(n)
}

/// The span of the first token (where `const` assertion errors point).
fn first_span(tokens: &TokenStream) -> Span {
    tokens
        .clone()
        .into_iter()
        .next()
        .map(|t| t.span())
        .unwrap_or_else(Span::call_site)
}
