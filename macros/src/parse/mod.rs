//! Parsing: the `#[compact] impl` block into the [`ast`](crate::ast).
//!
//! Parsing reports only what is malformed, with a message that says what to
//! write; shapes, argument values and names are the checker's.

mod expr;
mod format;
mod transform;

use crate::ast::{Block, Elem, InputDecl, Model, ParamDecl};
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{Error, Result};

const FORM: &str = "`#[compact]` expects `impl Name { fn forward(x: Input<..>) { .. } }`";

/// Parses the attribute arguments and the impl block.
pub fn parse(attr: TokenStream, item: TokenStream) -> Result<Model> {
    if !attr.is_empty() {
        return Err(Error::new_spanned(attr, "`#[compact]` takes no arguments"));
    }
    parse_model(item)
}

/// The type name of an impl block, if that much parses: the driver still
/// emits the model's items under it when the rest fails.
pub fn model_name(item: &TokenStream) -> Option<syn::Ident> {
    let item: syn::ItemImpl = syn::parse2(item.clone()).ok()?;
    match &*item.self_ty {
        syn::Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            Some(p.path.segments[0].ident.clone())
        }
        _ => None,
    }
}

/// The names of the model's methods beside `fn forward`, for the stub of
/// a model that did not parse (so calls of them report nothing more).
pub fn method_names(item: &TokenStream) -> Vec<syn::Ident> {
    let Ok(item) = syn::parse2::<syn::ItemImpl>(item.clone()) else {
        return Vec::new();
    };
    item.items
        .iter()
        .filter_map(|it| match it {
            syn::ImplItem::Fn(f) if f.sig.ident != "forward" && is_method(&f.sig) => {
                Some(f.sig.ident.clone())
            }
            _ => None,
        })
        .collect()
}

/// Parses an impl block as written.
pub fn parse_model(item: TokenStream) -> Result<Model> {
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
        return Err(Error::new_spanned(&item.generics, "a `#[compact]` model cannot be generic: the macro computes every shape, so they must be fixed; give sizes as block parameters (`features: Param<64>`) instead"));
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
    let mut setup = None;
    let mut setup_params = Vec::new();
    let mut methods = Vec::new();
    let mut cx = crate::ctxt::Ctxt::new();
    for it in item.items {
        match it {
            syn::ImplItem::Fn(f) if f.sig.ident == "forward" || f.sig.ident == "__call__" => {
                if f.sig.ident == "__call__" {
                    return Err(Error::new_spanned(
                        &f.sig.ident,
                        "a `#[compact]` model's method is `fn forward`, not Flax's `__call__`",
                    ));
                }
                if forward.is_some() {
                    return Err(Error::new_spanned(
                        &f.sig.ident,
                        "a model has one `fn forward`",
                    ));
                }
                forward = Some(f);
            }
            syn::ImplItem::Fn(f) if f.sig.ident == "setup" => {
                // Its arguments are reported, and read as block parameters
                // so that its body reports nothing more.
                for a in &f.sig.inputs {
                    if let syn::FnArg::Typed(t) = a {
                        cx.error_at(a, "`fn setup` takes no arguments: it reads the block parameters `fn forward` declares, as Flax's `setup` reads the module's attributes");
                        if let Ok(p) = parse_param(t) {
                            setup_params.push(p);
                        }
                    }
                }
                let (body, errors) = expr::parse_body(&f.block);
                if let Some(e) = errors {
                    cx.push(e);
                }
                setup = Some(setup_names(body));
            }
            syn::ImplItem::Fn(f) if is_method(&f.sig) => match parse_signature(&f.sig) {
                Ok((inputs, params)) => {
                    if let Some(p) = params.first() {
                        cx.error_at(&p.name, format!("block parameters are declared on `fn forward`; `{}` reads them as every method does", f.sig.ident));
                    }
                    let (body, errors) = expr::parse_body(&f.block);
                    if let Some(e) = errors {
                        cx.push(e);
                    }
                    methods.push(crate::ast::Method {
                        name: f.sig.ident.clone(),
                        inputs,
                        body,
                        docs: docs_of(&f.attrs),
                    });
                }
                Err(e) => cx.push(e),
            },
            other => passthrough.push(other),
        }
    }
    let Some(f) = forward else {
        return Err(Error::new(
            Span::call_site(),
            format!("{FORM}: `fn forward` is missing"),
        ));
    };
    let (body, errors) = expr::parse_body(&f.block);
    // A bad signature stops here, with the body's own errors beside it.
    let (inputs, mut params) = match parse_signature(&f.sig) {
        Ok(sig) => sig,
        Err(mut e) => {
            e.extend(errors);
            return Err(e);
        }
    };
    params.append(&mut setup_params);
    let docs = docs_of(&f.attrs);
    // The other methods' lines that did not parse are reported with the
    // body's.
    let errors = match (errors, cx.check()) {
        (Some(mut a), Err(b)) => {
            a.extend(b);
            Some(a)
        }
        (a, Err(b)) => a.or(Some(b)),
        (a, Ok(())) => a,
    };
    Ok(Model {
        name,
        inputs,
        params,
        body,
        docs,
        setup,
        methods,
        passthrough,
        errors,
    })
}

fn docs_of(attrs: &[syn::Attribute]) -> Vec<syn::Attribute> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .cloned()
        .collect()
}

/// A method of the model language: its first argument after `&self` is an
/// input (`Input<..>`, `Tokens<..>`, `Mask<..>`). Any other `fn` is plain
/// Rust, passed through.
fn is_method(sig: &syn::Signature) -> bool {
    sig.inputs.iter().find_map(|a| match a {
        syn::FnArg::Typed(t) => Some(input_elem(&t.ty).is_some()),
        syn::FnArg::Receiver(_) => None,
    }) == Some(true)
}

/// `let encoder = Encoder(..);` in `fn setup` names the model `encoder`,
/// as Flax names `self.encoder = Encoder(..)`, also when a branch builds it
/// (`let e = if share { Embed(..) } else { None };`): an explicit `name =
/// ".."` wins.
fn setup_names(mut body: Block) -> Block {
    use crate::ast::Stmt;
    for s in &mut body.stmts {
        if let Stmt::Let { var, value, .. } = s {
            name_built(value, var);
        }
    }
    body
}

/// Names the layer or model `value` builds (in any branch) after `var`.
fn name_built(value: &mut crate::ast::Expr, var: &syn::Ident) {
    use crate::ast::{Arg, Callee, Expr, Lit};
    match value {
        Expr::Call {
            callee,
            args,
            inputs: None,
            ..
        } => {
            let named = matches!(callee, Callee::Nested(_))
                || matches!(callee, Callee::Layer(k) if *k != crate::symbol::LayerKind::Dropout);
            if named
                && !args
                    .iter()
                    .any(|a| a.key.as_ref().is_some_and(|k| k == "name"))
            {
                args.push(Arg {
                    key: Some(syn::Ident::new("name", var.span())),
                    value: Expr::Lit(
                        Lit::Str(var.to_string()),
                        quote::ToTokens::to_token_stream(var),
                    ),
                });
            }
        }
        Expr::If { then, els, .. } => {
            if let Some(v) = then.value.as_deref_mut() {
                name_built(v, var);
            }
            if let Some(e) = els.as_deref_mut() {
                name_built(e, var);
            }
        }
        Expr::Block(b, _) => {
            if let Some(v) = b.value.as_deref_mut() {
                name_built(v, var);
            }
        }
        Expr::Match { arms, .. } => arms.iter_mut().for_each(|a| name_built(&mut a.body, var)),
        _ => {}
    }
}

fn find_dollar(ts: &TokenStream) -> Option<Span> {
    ts.clone().into_iter().find_map(|t| match t {
        TokenTree::Punct(p) if p.as_char() == '$' => Some(p.span()),
        TokenTree::Group(g) => find_dollar(&g.stream()),
        _ => None,
    })
}

/// Names Flax code gives a mode flag; flaxen's modes come from the call.
const MODE_FLAGS: &[&str] = &[
    "train",
    "training",
    "is_training",
    "deterministic",
    "use_running_average",
];

const MODES: &str = "modes come from the call, not from a flag: `model.forward(x)` runs inference (Dropout off, BatchNorm on its running statistics), `model.forward_mut(x)` with a tape trains (Dropout on, BatchNorm on batch statistics)";

fn parse_signature(sig: &syn::Signature) -> Result<(Vec<InputDecl>, Vec<ParamDecl>)> {
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
    let mut inputs = Vec::new();
    let mut params = Vec::new();
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
            syn::FnArg::Typed(t) => match input_elem(&t.ty) {
                Some(elem) => {
                    if !params.is_empty() {
                        return Err(Error::new_spanned(
                            t,
                            "declare the inputs first, then the block parameters",
                        ));
                    }
                    inputs.push(parse_input(t, elem, inputs.is_empty())?);
                }
                None if inputs.is_empty() && !is_param(&t.ty) => {
                    // The first argument is the input: report its type.
                    parse_input_type(&t.ty, Elem::Float, false)?;
                }
                None => params.push(parse_param(t)?),
            },
        }
    }
    if inputs.is_empty() {
        return Err(Error::new_spanned(
            &sig.ident,
            "`fn forward` needs its input: `fn forward(x: Input<1, 28, 28>)`",
        ));
    }
    Ok((inputs, params))
}

/// `Input`, `Tokens` or `Mask`, by the type's name.
fn input_elem(ty: &syn::Type) -> Option<Elem> {
    let syn::Type::Path(p) = ty else { return None };
    let seg = p
        .path
        .segments
        .last()
        .filter(|_| p.qself.is_none() && p.path.segments.len() == 1)?;
    if seg.ident == "Lengths" {
        return Some(Elem::Index);
    }
    [Elem::Float, Elem::Index, Elem::Bool]
        .into_iter()
        .find(|e| seg.ident == e.decl())
}

fn is_param(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Param"))
}

/// One input declaration; the first carries the tape, so it cannot be a
/// mask.
fn parse_input(t: &syn::PatType, elem: Elem, first: bool) -> Result<InputDecl> {
    let var = plain_name(
        &t.pat,
        "name an input with a plain identifier: `x: Input<..>`",
    )?;
    let nchw = t.attrs.iter().any(|a| a.path().is_ident("nchw"));
    if let Some(a) = t.attrs.iter().find(|a| !a.path().is_ident("nchw")) {
        return Err(Error::new_spanned(
            a,
            "the only attribute an input takes is `#[nchw]`",
        ));
    }
    if first && elem == Elem::Bool {
        return Err(Error::new_spanned(t, "the first input carries the gradient tape, so it is the data (`Input<..>` or `Tokens<..>`); declare the mask after it"));
    }
    let dims = parse_input_type(&t.ty, elem, nchw)?;
    Ok(InputDecl { var, elem, dims })
}

fn plain_name(pat: &syn::Pat, msg: &str) -> Result<syn::Ident> {
    match pat {
        syn::Pat::Ident(p)
            if p.by_ref.is_none() && p.subpat.is_none() && p.mutability.is_none() =>
        {
            Ok(p.ident.clone())
        }
        other => Err(Error::new_spanned(other, msg)),
    }
}

const PARAM_HELP: &str = "after its input, `fn forward` takes block parameters with a default, written `name: Param<default>` (e.g. `features: Param<64>`, `use_proj: Param<true>`, `rate: Param<0.1>`, `kernel: Param<{ (3, 3) }>`)";

/// `features: Param<64>`.
fn parse_param(p: &syn::PatType) -> Result<ParamDecl> {
    let name = plain_name(&p.pat, PARAM_HELP)?;
    if MODE_FLAGS.contains(&name.to_string().as_str()) {
        return Err(Error::new_spanned(
            p,
            format!("drop the `{name}` flag: {MODES}"),
        ));
    }
    if let syn::Type::Path(tp) = &*p.ty {
        if tp.qself.is_none() && tp.path.is_ident("Input") {
            return Err(Error::new_spanned(p, "a model takes one `Input<..>`; further arguments are block parameters, `name: Param<default>`"));
        }
        let seg = tp
            .path
            .segments
            .last()
            .filter(|s| s.ident == "Param" && tp.path.segments.len() == 1);
        if let Some(syn::PathArguments::AngleBracketed(a)) = seg.map(|s| &s.arguments) {
            if a.args.len() == 1 {
                let default = match &a.args[0] {
                    // `Param<{ (3, 3) }>`: a tuple must be braced in a
                    // generic argument; the value is what is inside.
                    syn::GenericArgument::Const(syn::Expr::Block(b)) => {
                        match b.block.stmts.as_slice() {
                            [syn::Stmt::Expr(inner, None)] => expr::parse_expr(inner)?,
                            _ => return Err(Error::new_spanned(b, PARAM_HELP)),
                        }
                    }
                    syn::GenericArgument::Const(e) => expr::parse_expr(e)?,
                    // `Param<SAME>` parses as a type.
                    syn::GenericArgument::Type(syn::Type::Path(t))
                        if t.qself.is_none() && t.path.get_ident().is_some() =>
                    {
                        crate::ast::Expr::Var(t.path.segments[0].ident.clone())
                    }
                    other => return Err(Error::new_spanned(other, PARAM_HELP)),
                };
                return Ok(ParamDecl { name, default });
            }
        }
    }
    Err(Error::new_spanned(&p.ty, PARAM_HELP))
}

const INPUT_HELP: &str = "declare the per-example input shape as `Input<D1, ..>` with 1 to 3 positive integer literals, e.g. `Input<1, 28, 28>` (NCHW; the batch axis is implicit), token ids as `Tokens<seq>`, a mask as `Mask<q, k>`";

fn parse_input_type(ty: &syn::Type, elem: Elem, nchw: bool) -> Result<Vec<usize>> {
    let bad = |msg: &str| Error::new_spanned(ty, format!("bad input declaration: {msg}"));
    let seg = match ty {
        syn::Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            &p.path.segments[0]
        }
        _ => return Err(bad(INPUT_HELP)),
    };
    // `lengths: Lengths`: one length per example, as token ids of [1].
    if seg.ident == "Lengths" && seg.arguments.is_none() {
        return Ok(vec![1]);
    }
    if seg.ident != elem.decl() {
        return Err(bad(INPUT_HELP));
    }
    let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
        return Err(bad(&format!(
            "`{}` needs its sizes; {INPUT_HELP}",
            elem.decl()
        )));
    };
    let mut dims = Vec::new();
    let mut errors = crate::ctxt::Ctxt::new();
    for a in &args.args {
        let r = match a {
            syn::GenericArgument::Const(e) => expr::size_literal(e, "an input size"),
            other => Err(Error::new_spanned(other, format!("bad input declaration: this size is not an integer literal; the macro computes shapes when it expands, so {INPUT_HELP}"))),
        };
        match r {
            Ok(0) => errors.error_at(a, "bad input declaration: a size of 0 leaves nothing to compute; sizes must be at least 1"),
            Ok(n) => dims.push(n),
            Err(e) => errors.push(e),
        }
    }
    errors.check()?;
    let rank = match elem {
        Elem::Float => 1..=3,
        Elem::Index => 1..=1,
        Elem::Bool => 2..=2,
    };
    if !rank.contains(&dims.len()) {
        let want = match elem {
            Elem::Float => "1 to 3 sizes",
            Elem::Index => "one size, the sequence length (`Tokens<16>`)",
            Elem::Bool => "two sizes, query and key lengths (`Mask<16, 16>`)",
        };
        return Err(bad(&format!(
            "`{}` takes {want}, but {} are given; {INPUT_HELP}",
            elem.decl(),
            dims.len()
        )));
    }
    if let (Elem::Float, [h, w, c]) = (elem, &dims[..]) {
        let (h, w, c) = (*h, *w, *c);
        // NHWC habit: `Input<28, 28, 1>` would compile into a model of 28
        // channels of 28x1 images.
        if !nchw && c <= 4 && h > 4 && w > 4 {
            return Err(Error::new_spanned(ty, format!(
                "`Input<{h}, {w}, {c}>` looks like Flax's NHWC layout (height {h}, width {w}, {c} channel(s)); flaxen's images are [channels, height, width]\nhelp: write `Input<{c}, {h}, {w}>`, or `#[nchw] x: Input<{h}, {w}, {c}>` if you do mean {h} channels of {w}x{c} images"
            )));
        }
    }
    Ok(dims)
}

/// `where(c, a, b)` in a body: JAX's `jnp.where`, a Rust keyword, so the
/// body does not parse; the error that says what to write instead.
pub fn keyword_call(item: &TokenStream) -> Option<Error> {
    use proc_macro2::{Delimiter, TokenTree};
    fn scan(ts: &TokenStream, in_body: bool) -> Option<Error> {
        let tokens: Vec<TokenTree> = ts.clone().into_iter().collect();
        for (k, t) in tokens.iter().enumerate() {
            match t {
                TokenTree::Ident(i) if in_body && i == "where" => {
                    if let Some(TokenTree::Group(g)) = tokens.get(k + 1) {
                        if g.delimiter() == Delimiter::Parenthesis {
                            return Some(Error::new(i.span(), "`where` is a Rust keyword: JAX's `jnp.where(cond, a, b)` is `select(mask, a, b)` here (`a` where the mask holds, else `b`)"));
                        }
                    }
                }
                TokenTree::Group(g) => {
                    let body = in_body || g.delimiter() == Delimiter::Brace;
                    if let Some(e) = scan(&g.stream(), body) {
                        return Some(e);
                    }
                }
                _ => {}
            }
        }
        None
    }
    scan(item, false)
}
