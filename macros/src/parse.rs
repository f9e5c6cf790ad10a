//! Parsing: the `#[compact] impl` block into a small AST.
//!
//! Every node keeps the user's tokens, so later phases can report errors on
//! the exact call (`syn::Error::new_spanned` underlines the whole range on
//! stable Rust, where a single joined `Span` is not available). Parsing
//! reports only what is malformed; shapes and arguments are the checker's.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::ToTokens;
use std::collections::HashMap;
use syn::spanned::Spanned;
use syn::{Error, Result};

/// A parsed `#[compact] impl Name { fn forward(x: Input<..>) { .. } }`.
pub struct Model {
    /// The type the impl is for (`Cnn`).
    pub name: syn::Ident,
    /// The input variable and its declared per-example shape.
    pub input: InputDecl,
    /// `let` bindings, in order.
    pub lets: Vec<Let>,
    /// The final expression (the model output).
    pub output: Expr,
    /// Doc attributes of `fn forward`, copied onto the generated module.
    pub docs: Vec<syn::Attribute>,
    /// Other items of the impl block, passed through unchanged.
    pub passthrough: Vec<syn::ImplItem>,
    /// The impl block as written, for instantiating the model with other
    /// parameters inside another one; `None` for such an instance.
    pub source: Option<TokenStream>,
    /// The input shape as declared (an instance replaces `input.dims`).
    pub declared: Vec<usize>,
}

/// `x: Input<1, 28, 28>`.
pub struct InputDecl {
    /// The variable name.
    pub var: syn::Ident,
    /// Sizes with their tokens (for messages).
    pub dims: Vec<usize>,
}

/// `let name = value;`
pub struct Let {
    /// The bound variable.
    pub var: syn::Ident,
    /// Its value.
    pub value: Expr,
}

/// An argument of a layer or op call: `features = 10` or `10`.
pub struct Arg {
    /// The keyword, for keyword arguments.
    pub key: Option<syn::Ident>,
    /// The value as written.
    pub value: syn::Expr,
}

/// Binary operators on tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

impl BinOp {
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
        }
    }
}

/// An expression of the model body.
pub enum Expr {
    /// A variable (`x`).
    Var(syn::Ident),
    /// `Layer(args)(input)`: a parameterised layer or a nested model.
    Layer {
        /// The layer's path (`Dense`, `blocks::Res`).
        path: syn::Path,
        /// Construction arguments.
        args: Vec<Arg>,
        /// The input expression.
        input: Box<Expr>,
        /// The whole call, for messages.
        tokens: TokenStream,
    },
    /// `op(input, args)`: a functional op (`relu(x)`, `avg_pool(x, (2, 2))`).
    Op {
        /// The op name.
        name: syn::Ident,
        /// The input expression.
        input: Box<Expr>,
        /// The remaining arguments.
        args: Vec<Arg>,
        /// The whole call, for messages.
        tokens: TokenStream,
    },
    /// `concatenate((a, b, ..), axis = -k)`: tensors joined along an axis.
    Concat {
        /// The tensors, in order.
        inputs: Vec<Expr>,
        /// The remaining arguments (`axis`).
        args: Vec<Arg>,
        /// The whole call, for messages.
        tokens: TokenStream,
    },
    /// `lhs op rhs`.
    Binary {
        /// Which operator.
        op: BinOp,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
        /// The whole expression, for messages.
        tokens: TokenStream,
    },
    /// `-x`
    Neg {
        /// The operand.
        input: Box<Expr>,
        /// The whole expression, for messages.
        tokens: TokenStream,
    },
    /// A number literal (`0.5`, `2`).
    Scalar {
        /// Its value.
        value: f64,
        /// The literal, for messages.
        tokens: TokenStream,
    },
}

impl Expr {
    /// The tokens of the expression, for messages.
    pub fn tokens(&self) -> TokenStream {
        match self {
            Expr::Var(v) => v.to_token_stream(),
            Expr::Layer { tokens, .. }
            | Expr::Op { tokens, .. }
            | Expr::Concat { tokens, .. }
            | Expr::Binary { tokens, .. }
            | Expr::Neg { tokens, .. }
            | Expr::Scalar { tokens, .. } => tokens.clone(),
        }
    }

    /// How messages name the value: `` `x` `` for a variable, else `its input`.
    pub fn describe(&self) -> String {
        match self {
            Expr::Var(v) => format!("`{v}`"),
            other => {
                let text = compact_text(&other.tokens());
                if text.len() <= 40 {
                    format!("`{text}`")
                } else {
                    "its input".to_string()
                }
            }
        }
    }
}

const FORM: &str = "`#[compact]` expects `impl Name { fn forward(x: Input<..>) { .. } }`";

/// Parses the attribute arguments and the impl block.
pub fn parse(attr: TokenStream, item: TokenStream) -> Result<Model> {
    if !attr.is_empty() {
        return Err(Error::new_spanned(attr, "`#[compact]` takes no arguments"));
    }
    parse_model(item, None)
}

/// Parses an impl block, as written or instantiated inside another model
/// with the caller's input shape and parameter values.
pub fn parse_model(item: TokenStream, inst: Option<&Instance>) -> Result<Model> {
    let source = item.clone();
    if let Some(dollar) = find_dollar(&item) {
        return Err(Error::new(
            dollar,
            "`$` cannot appear in a `#[compact]` model",
        ));
    }
    let item: syn::ItemImpl = syn::parse2(item)?;
    if let Some((_, path, _)) = &item.trait_ {
        return Err(Error::new_spanned(
            path,
            format!("{FORM}, not a trait impl"),
        ));
    }
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        return Err(Error::new_spanned(&item.generics, "a `#[compact]` model cannot be generic: the macro computes every shape, so they must be fixed"));
    }
    let name = match &*item.self_ty {
        syn::Type::Path(p)
            if p.qself.is_none()
                && p.path.segments.len() == 1
                && p.path.segments[0].arguments.is_none() =>
        {
            p.path.segments[0].ident.clone()
        }
        other => {
            return Err(Error::new_spanned(
                other,
                format!("{FORM}: the model must be a plain type name"),
            ))
        }
    };
    let mut forward = None;
    let mut passthrough = Vec::new();
    for it in item.items {
        match it {
            syn::ImplItem::Fn(f) if f.sig.ident == "forward" => {
                if forward.is_some() {
                    return Err(Error::new_spanned(
                        &f.sig.ident,
                        "a model has one `fn forward`",
                    ));
                }
                forward = Some(f);
            }
            other => passthrough.push(other),
        }
    }
    let Some(f) = forward else {
        return Err(Error::new(
            Span::call_site(),
            format!("{FORM}: `fn forward` is missing"),
        ));
    };
    let (mut input, params) = parse_signature(&f.sig)?;
    let mut docs: Vec<syn::Attribute> = f
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .cloned()
        .collect();
    let mut values: HashMap<String, TokenStream> = params
        .iter()
        .map(|(n, d)| (n.to_string(), d.clone()))
        .collect();
    let (mut name, mut source) = (name, Some(source));
    let declared = input.dims.clone();
    if let Some(inst) = inst {
        let names: Vec<String> = params.iter().map(|(n, _)| n.to_string()).collect();
        for (key, value) in &inst.args {
            let k = key.to_string();
            if !values.contains_key(&k) {
                let msg = if names.is_empty() {
                    format!("`{name}` takes no parameters besides `name`; declare one as `fn forward(x: Input<..>, {k}: Param<default>)`")
                } else {
                    format!(
                        "`{name}` has no parameter `{k}`; its parameters are: {}",
                        names.join(", ")
                    )
                };
                return Err(Error::new(key.span(), msg));
            }
            values.insert(k, value.clone());
        }
        input.dims = inst.dims.clone();
        name = inst.ident.clone();
        passthrough.clear();
        docs.clear();
        source = None;
    }
    let (lets, output) = if values.is_empty() {
        parse_body(&f.block)?
    } else {
        let body = substitute(f.block.to_token_stream(), &values);
        parse_body(&syn::parse2::<syn::Block>(body)?)?
    };
    Ok(Model {
        name,
        input,
        lets,
        output,
        docs,
        passthrough,
        source,
        declared,
    })
}

/// A model instantiated inside another one: `Block(features = 64)(x)`.
pub struct Instance {
    /// The type the instance gets (`__Net_block_0`).
    pub ident: syn::Ident,
    /// The caller's per-example input shape.
    pub dims: Vec<usize>,
    /// Parameter values, as the caller wrote them.
    pub args: Vec<(syn::Ident, TokenStream)>,
}

/// Replaces each parameter name in `ts` by its value, as one undelimited
/// group (so `-1` or `(3, 3)` stay one expression and keep the caller's
/// spans for messages).
pub fn substitute(ts: TokenStream, values: &HashMap<String, TokenStream>) -> TokenStream {
    ts.into_iter()
        .map(|t| match t {
            TokenTree::Ident(i) if values.contains_key(&i.to_string()) => {
                let mut g = Group::new(Delimiter::None, values[&i.to_string()].clone());
                g.set_span(i.span());
                TokenTree::Group(g)
            }
            TokenTree::Group(g) => {
                let mut n = Group::new(g.delimiter(), substitute(g.stream(), values));
                n.set_span(g.span());
                TokenTree::Group(n)
            }
            other => other,
        })
        .collect()
}

fn find_dollar(ts: &TokenStream) -> Option<Span> {
    ts.clone().into_iter().find_map(|t| match t {
        TokenTree::Punct(p) if p.as_char() == '$' => Some(p.span()),
        TokenTree::Group(g) => find_dollar(&g.stream()),
        _ => None,
    })
}

fn parse_signature(sig: &syn::Signature) -> Result<(InputDecl, Vec<(syn::Ident, TokenStream)>)> {
    if let Some(t) = sig
        .constness
        .as_ref()
        .map(ToTokens::to_token_stream)
        .or(sig.asyncness.as_ref().map(ToTokens::to_token_stream))
        .or(sig.unsafety.as_ref().map(ToTokens::to_token_stream))
    {
        return Err(Error::new_spanned(
            t,
            "`fn forward` of a `#[compact]` model is a plain `fn`",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(Error::new_spanned(&sig.generics, "`fn forward` takes no generic parameters; the batch size, dtype and device are generic already"));
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output {
        return Err(Error::new_spanned(
            ty,
            "leave out the return type: the macro infers the output shape",
        ));
    }
    let mut typed = Vec::new();
    for arg in &sig.inputs {
        match arg {
            syn::FnArg::Receiver(r) => {
                if r.reference.is_none() || r.mutability.is_some() || r.colon_token.is_some() {
                    return Err(Error::new_spanned(
                        r,
                        "the receiver of `fn forward` can only be `&self`",
                    ));
                }
            }
            syn::FnArg::Typed(t) => typed.push(t),
        }
    }
    let (t, rest) = match typed.split_first() {
        Some((t, rest)) => (*t, rest),
        None => {
            return Err(Error::new_spanned(
                &sig.ident,
                "`fn forward` needs its input: `fn forward(x: Input<1, 28, 28>)`",
            ))
        }
    };
    let mut params = Vec::new();
    for p in rest {
        params.push(parse_param(p)?);
    }
    let var = match &*t.pat {
        syn::Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
        other => {
            return Err(Error::new_spanned(
                other,
                "name the input with a plain identifier: `x: Input<..>`",
            ))
        }
    };
    let dims = parse_input_type(&t.ty)?;
    Ok((InputDecl { var, dims }, params))
}

const PARAM_HELP: &str = "after its input, `fn forward` takes only model parameters with a default, written `name: Param<default>` (e.g. `features: Param<64>`); the input is `x: Input<..>`";

/// `features: Param<64>`: a parameter of the model and its default value.
fn parse_param(p: &syn::PatType) -> Result<(syn::Ident, TokenStream)> {
    let name = match &*p.pat {
        syn::Pat::Ident(i) if i.by_ref.is_none() && i.subpat.is_none() => i.ident.clone(),
        other => return Err(Error::new_spanned(other, PARAM_HELP)),
    };
    if let syn::Type::Path(tp) = &*p.ty {
        if let Some(seg) = tp
            .path
            .segments
            .last()
            .filter(|s| s.ident == "Param" && tp.path.segments.len() == 1)
        {
            if let syn::PathArguments::AngleBracketed(a) = &seg.arguments {
                if let [syn::GenericArgument::Const(e)] =
                    a.args.iter().collect::<Vec<_>>().as_slice()
                {
                    // `Param<{ (3, 3) }>`: a tuple must be braced in a
                    // generic argument; the value is what is inside.
                    if let syn::Expr::Block(b) = e {
                        if let [syn::Stmt::Expr(inner, None)] = b.block.stmts.as_slice() {
                            return Ok((name, inner.to_token_stream()));
                        }
                    }
                    return Ok((name, e.to_token_stream()));
                }
                if let [syn::GenericArgument::Type(t)] =
                    a.args.iter().collect::<Vec<_>>().as_slice()
                {
                    return Ok((name, t.to_token_stream()));
                }
            }
        }
    }
    Err(Error::new_spanned(&p.ty, PARAM_HELP))
}

const INPUT_HELP: &str = "declare the per-example input shape as `Input<D1, ..>` with 1 to 3 positive integer literals, e.g. `Input<1, 28, 28>` (the batch axis is implicit)";

fn parse_input_type(ty: &syn::Type) -> Result<Vec<usize>> {
    let seg = match ty {
        syn::Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            &p.path.segments[0]
        }
        _ => {
            return Err(Error::new_spanned(
                ty,
                format!("bad input declaration: {INPUT_HELP}"),
            ))
        }
    };
    if seg.ident != "Input" {
        return Err(Error::new_spanned(
            ty,
            format!("bad input declaration: {INPUT_HELP}"),
        ));
    }
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
        return Err(Error::new_spanned(
            ty,
            format!("bad input declaration: `Input` needs its sizes; {INPUT_HELP}"),
        ));
    };
    let mut dims = Vec::new();
    let mut errors: Option<Error> = None;
    for a in &args.args {
        let r = match a {
            syn::GenericArgument::Const(e) => int_literal(e, "an input size"),
            other => Err(Error::new_spanned(other, format!("bad input declaration: this size is not an integer literal; the macro computes shapes when it expands, so {INPUT_HELP}"))),
        };
        match r {
            Ok(0) => push_err(&mut errors, Error::new_spanned(a, "bad input declaration: a size of 0 leaves nothing to compute; sizes must be at least 1")),
            Ok(n) => dims.push(n),
            Err(e) => push_err(&mut errors, e),
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }
    if dims.is_empty() || dims.len() > 3 {
        return Err(Error::new_spanned(
            ty,
            format!(
                "bad input declaration: {} sizes given; {INPUT_HELP}",
                dims.len()
            ),
        ));
    }
    Ok(dims)
}

/// Parses an integer literal (`usize`), with `what` for messages.
pub fn int_literal(e: &syn::Expr, what: &str) -> Result<usize> {
    match e {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => i
            .base10_parse::<usize>()
            .map_err(|_| Error::new_spanned(i, format!("{what} must fit in `usize`"))),
        syn::Expr::Group(g) => int_literal(&g.expr, what),
        syn::Expr::Paren(p) => int_literal(&p.expr, what),
        syn::Expr::Unary(syn::ExprUnary { op: syn::UnOp::Neg(_), .. }) => {
            Err(Error::new_spanned(e, format!("{what} cannot be negative")))
        }
        _ => Err(Error::new_spanned(e, format!("non-constant size: {what} must be an integer literal such as `32`, because the macro computes every shape when it expands and cannot see the value of `{}`", e.to_token_stream()))),
    }
}

fn push_err(acc: &mut Option<Error>, e: Error) {
    match acc {
        Some(a) => a.combine(e),
        None => *acc = Some(e),
    }
}

fn parse_body(block: &syn::Block) -> Result<(Vec<Let>, Expr)> {
    let mut lets = Vec::new();
    let mut output = None;
    let mut errors: Option<Error> = None;
    let n = block.stmts.len();
    for (i, stmt) in block.stmts.iter().enumerate() {
        let last = i + 1 == n;
        match stmt {
            syn::Stmt::Local(local) => match parse_let(local) {
                Ok(l) => lets.push(l),
                Err(e) => push_err(&mut errors, e),
            },
            syn::Stmt::Expr(e, None) if last => match parse_expr(e) {
                Ok(x) => output = Some(x),
                Err(err) => push_err(&mut errors, err),
            },
            syn::Stmt::Expr(e, _) => push_err(&mut errors, Error::new_spanned(e, "this value is not used: bind it with `let`, or make it the last expression (without `;`) to return it")),
            other => push_err(&mut errors, Error::new_spanned(other, "only `let` bindings and a final output expression may appear in `fn forward`")),
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }
    let output = output.ok_or_else(|| {
        let span = block.brace_token.span.close();
        Error::new(
            span,
            "`fn forward` must end with its output expression (without `;`), e.g. `Dense(10)(x)`",
        )
    })?;
    Ok((lets, output))
}

fn parse_let(local: &syn::Local) -> Result<Let> {
    let var = match &local.pat {
        syn::Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => p.ident.clone(),
        syn::Pat::Type(t) => {
            return Err(Error::new_spanned(
                &t.ty,
                "leave out the type: the macro infers every shape",
            ))
        }
        other => {
            return Err(Error::new_spanned(
                other,
                "bind a plain name: `let x = ...;`",
            ))
        }
    };
    let Some(init) = &local.init else {
        return Err(Error::new_spanned(
            local,
            "`let` needs a value: `let x = relu(x);`",
        ));
    };
    if let Some((_, d)) = &init.diverge {
        return Err(Error::new_spanned(
            d,
            "`let ... else` is not part of the model language",
        ));
    }
    Ok(Let {
        var,
        value: parse_expr(&init.expr)?,
    })
}

const EXPR_HELP: &str = "write a layer call `Dense(10)(x)`, an op `relu(x)`, a variable, a number, or `x + y`, `x - y`, `x * y`, `x / 2.0`";

/// Converts one `syn` expression into the model AST.
pub fn parse_expr(e: &syn::Expr) -> Result<Expr> {
    match e {
        syn::Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() && p.attrs.is_empty() => {
            Ok(Expr::Var(p.path.segments[0].ident.clone()))
        }
        syn::Expr::Paren(p) => parse_expr(&p.expr),
        syn::Expr::Group(g) => parse_expr(&g.expr),
        syn::Expr::Lit(l) => match &l.lit {
            syn::Lit::Int(i) => match i.base10_parse::<f64>() {
                Ok(value) => Ok(Expr::Scalar { value, tokens: e.to_token_stream() }),
                Err(_) => Err(Error::new_spanned(i, "this number is not a valid `f64`")),
            },
            syn::Lit::Float(f) => match f.base10_parse::<f64>() {
                Ok(value) if !value.is_finite() => Err(Error::new_spanned(f, "this number is not finite")),
                Ok(value) => Ok(Expr::Scalar { value, tokens: e.to_token_stream() }),
                Err(_) => Err(Error::new_spanned(f, "this number is not a valid `f64`")),
            },
            _ => Err(Error::new_spanned(e, format!("a tensor or number was expected here; {EXPR_HELP}"))),
        },
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => {
            let inner = parse_expr(&u.expr)?;
            match inner {
                Expr::Scalar { value, .. } => Ok(Expr::Scalar { value: -value, tokens: e.to_token_stream() }),
                other => Ok(Expr::Neg { input: Box::new(other), tokens: e.to_token_stream() }),
            }
        }
        syn::Expr::Binary(b) => {
            let op = match b.op {
                syn::BinOp::Add(_) => BinOp::Add,
                syn::BinOp::Sub(_) => BinOp::Sub,
                syn::BinOp::Mul(_) => BinOp::Mul,
                syn::BinOp::Div(_) => BinOp::Div,
                _ => return Err(Error::new_spanned(b.op, format!("only `+ - * /` work on tensors; {EXPR_HELP}"))),
            };
            let lhs = parse_expr(&b.left);
            let rhs = parse_expr(&b.right);
            let (lhs, rhs) = match (lhs, rhs) {
                (Ok(l), Ok(r)) => (l, r),
                (Err(mut a), Err(b)) => {
                    a.combine(b);
                    return Err(a);
                }
                (Err(a), _) | (_, Err(a)) => return Err(a),
            };
            Ok(Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs), tokens: e.to_token_stream() })
        }
        syn::Expr::Call(c) => parse_call(c),
        syn::Expr::MethodCall(m) => Err(Error::new_spanned(&m.method, format!("method calls are not part of the model language; write `{}(x)` instead of `x.{}()`", m.method, m.method))),
        _ => Err(Error::new_spanned(e, format!("`#[compact]` does not understand this expression; {EXPR_HELP}"))),
    }
}

fn parse_args(args: &syn::punctuated::Punctuated<syn::Expr, syn::Token![,]>) -> Result<Vec<Arg>> {
    let mut out = Vec::new();
    for a in args {
        match a {
            syn::Expr::Assign(asg) => match &*asg.left {
                syn::Expr::Path(p) if p.path.get_ident().is_some() => out.push(Arg {
                    key: p.path.get_ident().cloned(),
                    value: (*asg.right).clone(),
                }),
                other => {
                    return Err(Error::new_spanned(
                        other,
                        "a keyword argument is written `name = value`",
                    ))
                }
            },
            other => out.push(Arg {
                key: None,
                value: other.clone(),
            }),
        }
    }
    Ok(out)
}

fn parse_call(c: &syn::ExprCall) -> Result<Expr> {
    let tokens = c.to_token_stream();
    match &*c.func {
        // `Layer(args)(input)`
        syn::Expr::Call(inner) => {
            let path = match &*inner.func {
                syn::Expr::Path(p) if p.qself.is_none() => p.path.clone(),
                other => {
                    return Err(Error::new_spanned(
                        other,
                        "a layer is named by a path, as in `Dense(10)(x)`",
                    ))
                }
            };
            let args = parse_args(&inner.args)?;
            let input = match c.args.len() {
                1 => parse_expr(&c.args[0])?,
                0 => {
                    return Err(Error::new_spanned(
                        &tokens,
                        "apply the layer to its input: `Dense(10)(x)`",
                    ))
                }
                _ => {
                    return Err(Error::new_spanned(
                        &c.args,
                        "a layer is applied to exactly one input: `Dense(10)(x)`",
                    ))
                }
            };
            Ok(Expr::Layer {
                path,
                args,
                input: Box::new(input),
                tokens,
            })
        }
        // `op(input, args)`
        syn::Expr::Path(p) if p.qself.is_none() => {
            let Some(name) = p.path.get_ident().cloned() else {
                return Err(Error::new_spanned(&p.path, "functional ops are plain names such as `relu`; a layer is called as `Layer(args)(x)`"));
            };
            let mut it = c.args.iter();
            let Some(first) = it.next() else {
                let msg = if name.to_string().starts_with(char::is_uppercase) {
                    format!("`{name}()` builds a layer; apply it to its input: `{name}()(x)`")
                } else {
                    format!("`{name}` needs its input: `{name}(x)`")
                };
                return Err(Error::new_spanned(&tokens, msg));
            };
            if let syn::Expr::Assign(_) = first {
                return Err(Error::new_spanned(
                    first,
                    format!(
                        "the first argument of `{name}` is its input tensor, e.g. `{name}(x, ..)`"
                    ),
                ));
            }
            let rest: syn::punctuated::Punctuated<syn::Expr, syn::Token![,]> =
                it.cloned().collect();
            let args = parse_args(&rest)?;
            if name == "concatenate" {
                return parse_concat(first, args, tokens);
            }
            let input = parse_expr(first)?;
            Ok(Expr::Op {
                name,
                input: Box::new(input),
                args,
                tokens,
            })
        }
        other => Err(Error::new_spanned(
            other,
            format!("`#[compact]` does not understand this call; {EXPR_HELP}"),
        )),
    }
}

/// `concatenate((a, b, ..), ..)` / `concatenate([a, b, ..], ..)`.
fn parse_concat(first: &syn::Expr, args: Vec<Arg>, tokens: TokenStream) -> Result<Expr> {
    let items: Vec<&syn::Expr> = match first {
        syn::Expr::Tuple(t) => t.elems.iter().collect(),
        syn::Expr::Array(a) => a.elems.iter().collect(),
        syn::Expr::Paren(p) => vec![&*p.expr],
        _ => Vec::new(),
    };
    if items.len() < 2 {
        return Err(Error::new_spanned(
            first,
            "`concatenate` joins two or more tensors given as a tuple or a list: \
             `concatenate((x, y), axis = -1)`",
        ));
    }
    let inputs = items
        .into_iter()
        .map(parse_expr)
        .collect::<Result<Vec<_>>>()?;
    Ok(Expr::Concat {
        inputs,
        args,
        tokens,
    })
}

/// The span to report an argument error at.
pub fn arg_span(a: &Arg) -> Span {
    a.key
        .as_ref()
        .map(|k| k.span())
        .unwrap_or_else(|| a.value.span())
}

/// Source-like text of tokens: `Block()(x)` rather than `Block () (x)`.
pub fn compact_text(tokens: &TokenStream) -> String {
    let raw = tokens.to_string();
    let mut out = String::with_capacity(raw.len());
    let chars: Vec<char> = raw.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if *c == ' ' {
            let prev = if i > 0 { chars[i - 1] } else { ' ' };
            let next = chars.get(i + 1).copied().unwrap_or(' ');
            if matches!(next, '(' | ')' | ',' | '.' | ']') || matches!(prev, '(' | '[' | '.') {
                continue;
            }
        }
        out.push(*c);
    }
    out
}
