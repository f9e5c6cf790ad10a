//! Statements and expressions of `fn forward`.

use crate::ast::{Arg, Arm, BinOp, Block, Callee, Expr, Lit, Stmt, UnOp};
use crate::ctxt::Ctxt;
use crate::symbol::{self, CellKind, LayerKind, OpKind, TransformKind};
use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::{Error, Result};

const EXPR_HELP: &str = "write a layer call `Dense(10)(x)`, an op `relu(x)`, a variable, a number, arithmetic (`x + y`, `x * 0.5`), `if`/`match` on block parameters, or `x.shape[-1]`";

/// Prefixes of Flax and JAX code that flaxen's words do without.
const PREFIXES: &[&str] = &[
    "nn", "jnp", "jax", "lax", "linen", "F", "torch", "np", "optax",
];

/// Parses a block; every malformed statement is reported.
pub fn parse_block(block: &syn::Block) -> Result<Block> {
    match parse_body(block) {
        (body, None) => Ok(body),
        (_, Some(e)) => Err(e),
    }
}

/// Parses the body of `fn forward`, going on past a statement that does
/// not parse: its error is returned, and a `let` of it binds a poisoned
/// value (others are left out), so the checker still runs on the rest and
/// reports independent mistakes, without cascades from the bad line.
pub fn parse_body(block: &syn::Block) -> (Block, Option<Error>) {
    let mut cx = Ctxt::new();
    let mut stmts = Vec::new();
    let mut value = None;
    let n = block.stmts.len();
    for (i, stmt) in block.stmts.iter().enumerate() {
        let last = i + 1 == n;
        match parse_stmt(stmt, last) {
            Ok(Parsed::Stmt(s)) => stmts.push(s),
            Ok(Parsed::Value(e)) => value = Some(Box::new(e)),
            Err(e) => {
                cx.push(e);
                match stmt {
                    syn::Stmt::Local(syn::Local {
                        pat: syn::Pat::Ident(p),
                        ..
                    }) => stmts.push(Stmt::Let {
                        var: p.ident.clone(),
                        mutable: p.mutability.is_some(),
                        value: Expr::Poison(stmt.to_token_stream()),
                    }),
                    // The last line was meant as the output (`return y;`
                    // too): no second error that the output is missing.
                    syn::Stmt::Expr(e, _) if last => {
                        value = Some(Box::new(Expr::Poison(e.to_token_stream())))
                    }
                    _ => {}
                }
            }
        }
    }
    let body = Block {
        stmts,
        value,
        close: block.brace_token.span.close(),
    };
    (body, cx.check().err())
}

enum Parsed {
    Stmt(Stmt),
    Value(Expr),
}

/// Whether an expression is a statement on its own when written without
/// `;` before the end of a block (`for`, `if` without a value...).
fn block_like(e: &syn::Expr) -> bool {
    matches!(
        e,
        syn::Expr::ForLoop(_)
            | syn::Expr::If(_)
            | syn::Expr::Match(_)
            | syn::Expr::Block(_)
            | syn::Expr::While(_)
            | syn::Expr::Loop(_)
    )
}

fn parse_stmt(stmt: &syn::Stmt, last: bool) -> Result<Parsed> {
    match stmt {
        syn::Stmt::Local(local) => parse_let(local).map(Parsed::Stmt),
        syn::Stmt::Expr(e, semi) => match e {
            syn::Expr::Assign(a) => parse_assign(&a.left, &a.right, None, e).map(Parsed::Stmt),
            syn::Expr::Binary(b) if compound(b.op).is_some() => {
                parse_assign(&b.left, &b.right, compound(b.op), e).map(Parsed::Stmt)
            }
            syn::Expr::ForLoop(f) => parse_for(f).map(Parsed::Stmt),
            syn::Expr::While(_) | syn::Expr::Loop(_) => Err(Error::new_spanned(e, "only `for` loops over a constant range (`for i in 0..n`) are part of the model language: the macro unrolls them")),
            syn::Expr::Return(r) => Err(Error::new_spanned(r, "`return` is not part of the model language: end `fn forward` with its output expression, without `;` (e.g. `Dense(10)(x)`)")),
            _ if semi.is_none() && last => parse_expr(e).map(Parsed::Value),
            _ if semi.is_none() && block_like(e) => parse_expr(e).map(|e| Parsed::Stmt(Stmt::Expr(e))),
            syn::Expr::If(_) | syn::Expr::Match(_) | syn::Expr::Block(_) => parse_expr(e).map(|e| Parsed::Stmt(Stmt::Expr(e))),
            // `hs.push(h);`: a list grown in place.
            syn::Expr::MethodCall(m) if matches!(m.method.to_string().as_str(), "push" | "append") => {
                parse_expr(e).map(|e| Parsed::Stmt(Stmt::Expr(e)))
            }
            _ => Err(Error::new_spanned(e, "this value is not used: bind it with `let`, assign it (`x = ..;`), or make it the last expression (without `;`) to return it")),
        },
        syn::Stmt::Macro(m) => Err(Error::new_spanned(&m.mac.path, "macros are not part of the model language")),
        syn::Stmt::Item(i) => Err(Error::new_spanned(i, "items cannot be declared inside `fn forward`; put them next to the impl block")),
    }
}

fn compound(op: syn::BinOp) -> Option<BinOp> {
    Some(match op {
        syn::BinOp::AddAssign(_) => BinOp::Add,
        syn::BinOp::SubAssign(_) => BinOp::Sub,
        syn::BinOp::MulAssign(_) => BinOp::Mul,
        syn::BinOp::DivAssign(_) => BinOp::Div,
        _ => return None,
    })
}

fn parse_let(local: &syn::Local) -> Result<Stmt> {
    let (var, mutable) = match &local.pat {
        syn::Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
            (p.ident.clone(), p.mutability.is_some())
        }
        syn::Pat::Type(t) => {
            return Err(Error::new_spanned(
                &t.ty,
                "leave out the type: the macro infers every shape",
            ))
        }
        syn::Pat::Tuple(t) => {
            let vars = t
                .elems
                .iter()
                .map(|p| match p {
                    syn::Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                        Ok(Some((p.ident.clone(), p.mutability.is_some())))
                    }
                    syn::Pat::Wild(_) => Ok(None),
                    other => Err(Error::new_spanned(
                        other,
                        "bind plain names: `let (a, b) = ...;` (`_` skips one)",
                    )),
                })
                .collect::<Result<Vec<_>>>()?;
            let value = match &local.init {
                Some(init) if init.diverge.is_none() => parse_expr(&init.expr)?,
                _ => {
                    return Err(Error::new_spanned(
                        local,
                        "`let (a, b)` needs a tuple: `let (c, h, w) = x.shape;`",
                    ))
                }
            };
            return Ok(Stmt::LetTuple {
                vars,
                value,
                pat: t.to_token_stream(),
            });
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
    Ok(Stmt::Let {
        var,
        mutable,
        value: parse_expr(&init.expr)?,
    })
}

fn parse_assign(
    left: &syn::Expr,
    right: &syn::Expr,
    op: Option<BinOp>,
    whole: &syn::Expr,
) -> Result<Stmt> {
    let var = match strip(left) {
        syn::Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
            p.path.segments[0].ident.clone()
        }
        other => {
            return Err(Error::new_spanned(
                other,
                "only a variable can be assigned: `x = Dense(10)(x);`",
            ))
        }
    };
    let rhs = parse_expr(right)?;
    let value = match op {
        None => rhs,
        Some(op) => Expr::Binary {
            op,
            lhs: Box::new(Expr::Var(var.clone())),
            rhs: Box::new(rhs),
            tokens: whole.to_token_stream(),
        },
    };
    Ok(Stmt::Assign { var, value })
}

fn parse_for(f: &syn::ExprForLoop) -> Result<Stmt> {
    if let Some(l) = &f.label {
        return Err(Error::new_spanned(
            l,
            "loop labels are not part of the model language",
        ));
    }
    let name = |p: &syn::Pat| {
        match p {
        syn::Pat::Ident(p)
            if p.by_ref.is_none() && p.subpat.is_none() && p.mutability.is_none() =>
        {
            Ok(Some(p.ident.clone()))
        }
        syn::Pat::Wild(_) => Ok(None),
        other => Err(Error::new_spanned(
            other,
            "a loop variable is a plain name or `_`: `for i in 0..n`, `for m in mults`, `for (i, m) in enumerate(mults)`",
        )),
    }
    };
    // `for (i, m) in enumerate(t)` and `for m in t`: over a tuple.
    let enumerated = match strip(&f.expr) {
        syn::Expr::Call(c)
            if matches!(&*c.func, syn::Expr::Path(p) if p.path.is_ident("enumerate"))
                && (1..=2).contains(&c.args.len()) =>
        {
            Some((&c.args[0], c.args.get(1)))
        }
        _ => None,
    };
    if let Some((items, start)) = enumerated {
        let syn::Pat::Tuple(t) = &*f.pat else {
            return Err(Error::new_spanned(
                &f.pat,
                "`enumerate` gives pairs: `for (i, m) in enumerate(t)`",
            ));
        };
        let [i, m] = [t.elems.first(), t.elems.get(1)];
        let (Some(i), Some(m), 2) = (i, m, t.elems.len()) else {
            return Err(Error::new_spanned(
                t,
                "`enumerate` gives pairs: `for (i, m) in enumerate(t)`",
            ));
        };
        return Ok(Stmt::ForEach {
            index: name(i)?,
            start: start.map(parse_expr).transpose()?.map(Box::new),
            var: name(m)?,
            items: Box::new(parse_expr(items)?),
            body: parse_block(&f.body)?,
            tokens: f.to_token_stream(),
        });
    }
    let var = name(&f.pat)?;
    if !matches!(strip(&f.expr), syn::Expr::Range(_) | syn::Expr::Call(_)) {
        return Ok(Stmt::ForEach {
            index: None,
            start: None,
            var,
            items: Box::new(parse_expr(&f.expr)?),
            body: parse_block(&f.body)?,
            tokens: f.to_token_stream(),
        });
    }
    let (start, end, inclusive) = match strip(&f.expr) {
        syn::Expr::Range(r) => {
            let (Some(start), Some(end)) = (&r.start, &r.end) else {
                return Err(Error::new_spanned(r, "the macro unrolls a loop, so its range needs both ends: `for i in 0..n`"));
            };
            (Box::new(parse_expr(start)?), Box::new(parse_expr(end)?), matches!(r.limits, syn::RangeLimits::Closed(_)))
        }
        syn::Expr::Call(c) if matches!(&*c.func, syn::Expr::Path(p) if p.path.is_ident("range")) => {
            return Err(Error::new_spanned(&f.expr, "Python's `range(n)` is written `0..n` (and `range(a, b)` is `a..b`)"));
        }
        other => return Err(Error::new_spanned(other, "a loop runs over a constant range, `for i in 0..n` with `n` a number or a block parameter; the macro unrolls it")),
    };
    Ok(Stmt::For {
        var,
        start,
        end,
        inclusive,
        body: parse_block(&f.body)?,
        tokens: f.to_token_stream(),
    })
}

/// `a * *b`: how Rust reads Python's `a ** b`.
fn is_pow(b: &syn::ExprBinary) -> bool {
    matches!(b.op, syn::BinOp::Mul(_))
        && matches!(strip(&b.right), syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)))
}

/// `left ** exponent` with Python's precedence. Rust's `*` took the whole
/// product on its left (`x * y ** 2` reads `(x * y) * *2`), its `-` the
/// operand (`-x ** 2` reads `(-x) * *2`), and chains associate left; in
/// Python `**` binds only the operand next to it, from the right: so the
/// exponent goes to the rightmost operand of a product or quotient, under
/// a negation, and into the exponent of a power (`a ** b ** c` is
/// `a ** (b ** c)`).
fn attach(left: &syn::Expr, exponent: Expr, tokens: &TokenStream) -> Result<Expr> {
    let pow = |base, exponent| Expr::Binary {
        op: BinOp::Pow,
        lhs: Box::new(base),
        rhs: Box::new(exponent),
        tokens: tokens.clone(),
    };
    match left {
        syn::Expr::Binary(b) if is_pow(b) => {
            let syn::Expr::Unary(u) = strip(&b.right) else {
                unreachable!()
            };
            let inner = pow(parse_expr(&u.expr)?, exponent);
            attach(&b.left, inner, tokens)
        }
        syn::Expr::Binary(b)
            if matches!(
                b.op,
                syn::BinOp::Mul(_) | syn::BinOp::Div(_) | syn::BinOp::Rem(_)
            ) =>
        {
            Ok(Expr::Binary {
                op: binop(b.op)?,
                lhs: Box::new(parse_expr(&b.left)?),
                rhs: Box::new(attach(&b.right, exponent, tokens)?),
                tokens: tokens.clone(),
            })
        }
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => Ok(Expr::Unary {
            op: UnOp::Neg,
            input: Box::new(attach(&u.expr, exponent, tokens)?),
            tokens: tokens.clone(),
        }),
        other => Ok(pow(parse_expr(other)?, exponent)),
    }
}

pub(super) fn strip(e: &syn::Expr) -> &syn::Expr {
    match e {
        syn::Expr::Paren(p) => strip(&p.expr),
        syn::Expr::Group(g) => strip(&g.expr),
        _ => e,
    }
}

/// An integer literal that is a size (`Input<28>`).
pub fn size_literal(e: &syn::Expr, what: &str) -> Result<usize> {
    match strip(e) {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => i
            .base10_parse::<usize>()
            .map_err(|_| Error::new_spanned(i, format!("{what} must fit in `usize`"))),
        syn::Expr::Unary(syn::ExprUnary { op: syn::UnOp::Neg(_), .. }) => Err(Error::new_spanned(e, format!("{what} cannot be negative"))),
        _ => Err(Error::new_spanned(e, format!("non-constant size: {what} must be an integer literal such as `32`, because the macro computes every shape when it expands and cannot see the value of `{}`", e.to_token_stream()))),
    }
}

/// Converts one `syn` expression into the model AST.
pub fn parse_expr(e: &syn::Expr) -> Result<Expr> {
    let tokens = || e.to_token_stream();
    match e {
        syn::Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => match p.path.get_ident() {
            Some(i) if i == "self" => Err(Error::new_spanned(e, "`self` alone is not a value; its block parameters are, as `self.features`")),
            Some(i) => Ok(Expr::Var(i.clone())),
            None => Err(Error::new_spanned(e, format!("`{}` is not a value of the model language; {EXPR_HELP}", compact(&tokens())))),
        },
        syn::Expr::Paren(p) => parse_expr(&p.expr),
        syn::Expr::Group(g) => parse_expr(&g.expr),
        syn::Expr::Lit(l) => Ok(Expr::Lit(literal(&l.lit)?, tokens())),
        syn::Expr::Tuple(t) => Ok(Expr::Tuple(t.elems.iter().map(parse_expr).collect::<Result<_>>()?, tokens())),
        syn::Expr::Array(a) => Ok(Expr::Tuple(a.elems.iter().map(parse_expr).collect::<Result<_>>()?, tokens())),
        syn::Expr::Unary(u) => {
            let op = match u.op {
                syn::UnOp::Neg(_) => UnOp::Neg,
                syn::UnOp::Not(_) => UnOp::Not,
                _ => return Err(Error::new_spanned(u.op, format!("`{}` is not part of the model language; {EXPR_HELP}", u.op.to_token_stream()))),
            };
            Ok(Expr::Unary { op, input: Box::new(parse_expr(&u.expr)?), tokens: tokens() })
        }
        // Python's `a ** b`, which Rust reads as `a * (*b)`.
        syn::Expr::Binary(b) if is_pow(b) => {
            let syn::Expr::Unary(u) = strip(&b.right) else { unreachable!() };
            attach(&b.left, parse_expr(&u.expr)?, &tokens())
        }
        syn::Expr::Binary(b) => {
            let op = binop(b.op)?;
            let (lhs, rhs) = both(parse_expr(&b.left), parse_expr(&b.right))?;
            Ok(Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs), tokens: tokens() })
        }
        syn::Expr::Field(f) => {
            let syn::Member::Named(member) = &f.member else {
                return Err(Error::new_spanned(&f.member, "tuple fields are read by index: `t[0]`"));
            };
            if matches!(strip(&f.base), syn::Expr::Path(p) if p.path.is_ident("self")) {
                return Ok(Expr::SelfField(member.clone(), tokens()));
            }
            if let Some(msg) = init_prefix(&f.base, &member.to_string(), false) {
                return Err(Error::new_spanned(&f.base, msg));
            }
            Ok(Expr::Field { base: Box::new(parse_expr(&f.base)?), member: member.clone(), tokens: tokens() })
        }
        syn::Expr::Index(i) => {
            let index = match &*i.index {
                // `x[1..]`, `x[..-1]`: a slice of the first axis.
                syn::Expr::Range(r) if matches!(r.limits, syn::RangeLimits::HalfOpen(_)) => {
                    let end = |e: &Option<Box<syn::Expr>>| -> Result<Option<Box<Expr>>> {
                        e.as_deref().map(|e| parse_expr(e).map(Box::new)).transpose()
                    };
                    Expr::Range(end(&r.start)?, end(&r.end)?, r.to_token_stream())
                }
                syn::Expr::Range(r) => return Err(Error::new_spanned(r, "a slice is written `x[a..b]` (`b` excluded, as Python's `x[a:b]`)")),
                other => parse_expr(other)?,
            };
            Ok(Expr::Index { base: Box::new(parse_expr(&i.expr)?), index: Box::new(index), tokens: tokens() })
        }
        // `Some(64)`: a given optional value is the value itself.
        syn::Expr::Call(c) if matches!(&*c.func, syn::Expr::Path(p) if p.path.is_ident("Some")) && c.args.len() == 1 => parse_expr(&c.args[0]),
        syn::Expr::Call(c) => parse_call(c),
        syn::Expr::MethodCall(m) if m.method == "unwrap_or" => unwrap_or(m),
        // `hs.push(h)` / `hs.append(h)`, `hs.pop()`: lists as Python's.
        syn::Expr::MethodCall(m) if matches!(m.method.to_string().as_str(), "push" | "append" | "pop") && matches!(strip(&m.receiver), syn::Expr::Path(p) if p.path.get_ident().is_some()) => {
            let syn::Expr::Path(p) = strip(&m.receiver) else { unreachable!() };
            let var = p.path.get_ident().cloned().unwrap_or_else(|| m.method.clone());
            let push = match (m.method == "pop", m.args.len()) {
                (true, 0) => None,
                (false, 1) => Some(Box::new(parse_expr(&m.args[0])?)),
                _ => return Err(Error::new_spanned(m, "a list is grown with `hs.push(h)` and shrunk with `hs.pop()`")),
            };
            Ok(Expr::List { var, push, tokens: tokens() })
        }
        // `embed.attend(x)`: tied input and output embeddings.
        syn::Expr::MethodCall(m) if m.method == "attend" && matches!(strip(&m.receiver), syn::Expr::Path(p) if p.path.get_ident().is_some()) => {
            let syn::Expr::Path(p) = strip(&m.receiver) else { unreachable!() };
            let ident = p.path.get_ident().cloned().unwrap_or_else(|| m.method.clone());
            Ok(Expr::Call {
                callee: Callee::Attend(ident),
                name: m.to_token_stream(),
                args: parse_args(&m.args)?,
                inputs: None,
                tokens: tokens(),
            })
        }
        // `self.encoder(x)`, `self.encode(x)`: a layer of `fn setup`, or a
        // method. (`self.param(..)` is the message below.)
        syn::Expr::MethodCall(m) if m.method != "param" && matches!(strip(&m.receiver), syn::Expr::Path(p) if p.path.is_ident("self")) => {
            Ok(Expr::Call {
                callee: Callee::SelfCall(m.method.clone()),
                name: m.to_token_stream(),
                args: parse_args(&m.args)?,
                inputs: None,
                tokens: tokens(),
            })
        }
        // `self.embed.attend(x)`: tied embeddings through `fn setup`'s `Embed`.
        syn::Expr::MethodCall(m) if m.method == "attend" && matches!(strip(&m.receiver), syn::Expr::Field(f) if matches!(strip(&f.base), syn::Expr::Path(p) if p.path.is_ident("self")) && matches!(f.member, syn::Member::Named(_))) => {
            let syn::Expr::Field(f) = strip(&m.receiver) else { unreachable!() };
            let syn::Member::Named(ident) = &f.member else { unreachable!() };
            Ok(Expr::Call {
                callee: Callee::Attend(ident.clone()),
                name: m.to_token_stream(),
                args: parse_args(&m.args)?,
                inputs: None,
                tokens: tokens(),
            })
        }
        // `random.normal(shape)`: `jax.random`'s draws, without the key.
        syn::Expr::MethodCall(m) if matches!(strip(&m.receiver), syn::Expr::Path(p) if p.path.is_ident("random")) => {
            let method = m.method.to_string();
            match crate::symbol::DrawKind::from_name(&method) {
                Some(kind) => Ok(Expr::Call {
                    callee: Callee::Draw(kind),
                    name: m.to_token_stream(),
                    args: parse_args(&m.args)?,
                    inputs: None,
                    tokens: tokens(),
                }),
                None => {
                    let near = symbol::nearest(&method, crate::symbol::DrawKind::NAMES)
                        .map(|w| format!("did you mean `random.{w}`? "))
                        .unwrap_or_default();
                    Err(Error::new_spanned(&m.method, format!("`random.{method}` is not a flaxen draw; {near}the draws are `random.normal(shape)`, `random.uniform(shape, minval, maxval)` and `random.bernoulli(p, shape)`")))
                }
            }
        }
        syn::Expr::MethodCall(m) => Err(method_call(m)),
        syn::Expr::If(i) => parse_if(i),
        syn::Expr::Match(m) => parse_match(m),
        syn::Expr::Block(b) if b.label.is_none() => Ok(Expr::Block(parse_block(&b.block)?, tokens())),
        syn::Expr::Return(r) => Err(Error::new_spanned(r, "`return` is not part of the model language: end `fn forward` with its output expression, without `;` (e.g. `Dense(10)(x)`)")),
        syn::Expr::Macro(m) if m.mac.path.is_ident("format") => super::format::parse(m),
        // `vec![a, b]`: a list, as `[a, b]`.
        syn::Expr::Macro(m) if m.mac.path.is_ident("vec") => {
            let items = m.mac.parse_body_with(syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated)?;
            let items = items.iter().map(parse_expr).collect::<Result<Vec<_>>>()?;
            Ok(Expr::Tuple(items, tokens()))
        }
        syn::Expr::Assign(a) => Err(Error::new_spanned(a, "an assignment is a statement: `x = Dense(10)(x);`; in a call, a keyword argument is written `name = value`")),
        syn::Expr::Range(r) => Err(Error::new_spanned(r, "a range is only the bounds of a `for` loop")),
        _ => Err(Error::new_spanned(e, format!("`#[compact]` does not understand this expression; {EXPR_HELP}"))),
    }
}

pub(super) fn both<A, B>(a: Result<A>, b: Result<B>) -> Result<(A, B)> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(mut a), Err(b)) => {
            a.combine(b);
            Err(a)
        }
        (Err(a), _) | (_, Err(a)) => Err(a),
    }
}

fn literal(l: &syn::Lit) -> Result<Lit> {
    match l {
        syn::Lit::Int(i) => i
            .base10_parse::<i64>()
            .map(Lit::Int)
            .map_err(|_| Error::new_spanned(i, "this integer is too large")),
        syn::Lit::Float(f) => match f.base10_parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Lit::Float(v)),
            _ => Err(Error::new_spanned(f, "this number is not a finite `f64`")),
        },
        syn::Lit::Bool(b) => Ok(Lit::Bool(b.value)),
        syn::Lit::Str(s) => Ok(Lit::Str(s.value())),
        other => Err(Error::new_spanned(
            other,
            format!("a number, `true`/`false` or a string was expected here; {EXPR_HELP}"),
        )),
    }
}

fn binop(op: syn::BinOp) -> Result<BinOp> {
    Ok(match op {
        syn::BinOp::Add(_) => BinOp::Add,
        syn::BinOp::Sub(_) => BinOp::Sub,
        syn::BinOp::Mul(_) => BinOp::Mul,
        syn::BinOp::Div(_) => BinOp::Div,
        syn::BinOp::Rem(_) => BinOp::Rem,
        syn::BinOp::Eq(_) => BinOp::Eq,
        syn::BinOp::Ne(_) => BinOp::Ne,
        syn::BinOp::Lt(_) => BinOp::Lt,
        syn::BinOp::Le(_) => BinOp::Le,
        syn::BinOp::Gt(_) => BinOp::Gt,
        syn::BinOp::Ge(_) => BinOp::Ge,
        syn::BinOp::And(_) => BinOp::And,
        syn::BinOp::Or(_) => BinOp::Or,
        syn::BinOp::BitAnd(_) | syn::BinOp::BitOr(_) => {
            return Err(Error::new_spanned(
                op,
                "conditions combine with `&&` and `||`",
            ))
        }
        other => {
            return Err(Error::new_spanned(
                other,
                format!(
                    "`{}` is not part of the model language; {EXPR_HELP}",
                    other.to_token_stream()
                ),
            ))
        }
    })
}

/// `x.reshape(..)`, `nn.relu(x)`, `x.mean()`: always an error, saying the
/// flaxen spelling.
pub(super) fn method_call(m: &syn::ExprMethodCall) -> Error {
    let method = m.method.to_string();
    if let Some(msg) = init_prefix(&m.receiver, &method, true) {
        return Error::new_spanned(&m.receiver, msg);
    }
    if method == "param"
        && matches!(strip(&m.receiver), syn::Expr::Path(p) if p.path.is_ident("self"))
    {
        return Error::new_spanned(&m.receiver, "drop `self.`: a declared parameter is `param(\"name\", init, shape)`, e.g. `param(\"cls\", zeros, (1, 1, 64))`");
    }
    if let syn::Expr::Path(p) = strip(&m.receiver) {
        if let Some(prefix) = p
            .path
            .get_ident()
            .map(ToString::to_string)
            .filter(|p| PREFIXES.contains(&p.as_str()))
        {
            return Error::new_spanned(m, prefix_message(&prefix, &method));
        }
    }
    let x = compact(&m.receiver.to_token_stream());
    let msg = match method.as_str() {
        "reshape" => format!("method calls are not part of the model language; write `reshape({x}, (..))` with the per-example shape (the batch axis is implicit), or `flatten({x})`"),
        "flatten" | "ravel" => format!("method calls are not part of the model language; write `flatten({x})`"),
        "mean" | "sum" => format!("method calls are not part of the model language; write `{method}({x}, axis = ..)`"),
        "transpose" | "T" => format!("method calls are not part of the model language; write `transpose({x}, (..))` with the per-example axes (flaxen's images are NCHW already, so an NHWC transpose is not needed)"),
        _ if OpKind::from_name(&method).is_some() => format!("method calls are not part of the model language; write `{method}({x})` instead of `{x}.{method}()`"),
        _ => format!("method calls are not part of the model language (`.{method}()`); {EXPR_HELP}"),
    };
    Error::new_spanned(&m.method, msg)
}

/// The message for `nn.initializers.zeros` and `nn.initializers.normal(..)`
/// (`called`): initialisers are plain words too.
fn init_prefix(base: &syn::Expr, word: &str, called: bool) -> Option<String> {
    let prefix = compact(&base.to_token_stream());
    if !prefix.ends_with("initializers") || crate::symbol::InitKind::from_name(word).is_none() {
        return None;
    }
    let args = if called { "(..)" } else { "" };
    Some(format!(
        "drop the `{prefix}.` prefix: Flax's initialisers are plain names, `{word}{args}`"
    ))
}

/// The transform `func` names, if it is the bare word (`remat`).
pub(super) fn transform(func: &syn::Expr) -> Option<TransformKind> {
    match strip(func) {
        syn::Expr::Path(p) if p.qself.is_none() => p
            .path
            .get_ident()
            .and_then(|i| TransformKind::from_name(&i.to_string())),
        _ => None,
    }
}

/// The message for `nn.Dense`, `jnp.mean`, `nn::relu`.
fn prefix_message(prefix: &str, word: &str) -> String {
    if TransformKind::from_name(word).is_some() {
        return format!("drop the `{prefix}.` prefix: flaxen's `{word}` is a plain name, and it takes the block built with its arguments, then the block's input: `{word}(Block(..))(x)`");
    }
    match (LayerKind::from_name(word), OpKind::from_name(word)) {
        (Some(_), _) => format!("drop the `{prefix}.` prefix: flaxen's layers are plain names, `{word}(..)(x)`"),
        (_, Some(_)) => format!("drop the `{prefix}.` prefix: flaxen's ops are plain names, `{word}(x, ..)`"),
        _ => match symbol::foreign(word) {
            Some((hint, _)) => format!("drop the `{prefix}.` prefix; `{word}`: {hint}"),
            None => match symbol::nearest_word(word) {
                Some(s) => format!("drop the `{prefix}.` prefix; `{word}` is not a flaxen word, did you mean {}?", symbol::call_form(s)),
                None => format!("drop the `{prefix}.` prefix; `{word}` is not a flaxen word (layers: {}; ops: {})", LayerKind::NAMES.join(", "), OpKind::NAMES.join(", ")),
            },
        },
    }
}

pub(super) fn parse_args(
    args: &syn::punctuated::Punctuated<syn::Expr, syn::Token![,]>,
) -> Result<Vec<Arg>> {
    let mut cx = Ctxt::new();
    let mut out = Vec::new();
    for a in args {
        let parsed = match a {
            syn::Expr::Assign(asg) => match strip(&asg.left) {
                syn::Expr::Path(p) if p.path.get_ident().is_some() => {
                    parse_expr(&asg.right).map(|value| Arg {
                        key: p.path.get_ident().cloned(),
                        value,
                    })
                }
                other => Err(Error::new_spanned(
                    other,
                    "a keyword argument is written `name = value`",
                )),
            },
            other => parse_expr(other).map(|value| Arg { key: None, value }),
        };
        if let Some(arg) = cx.take(parsed) {
            out.push(arg);
        }
    }
    cx.check()?;
    Ok(out)
}

/// The callee of `Layer(..)(x)` (`applied`) or of `op(x, ..)`.
pub(super) fn callee(path: &syn::Path, applied: bool) -> Callee {
    match (word(path, applied), path.get_ident()) {
        // `dense(x)`: perhaps a layer bound to `dense`; the checker knows.
        // `conv(64, (3, 3))(x)`: perhaps a partial layer bound to `conv`.
        (Callee::Unknown(msg), Some(ident)) => Callee::Local(ident.clone(), msg),
        (c, _) => c,
    }
}

fn word(path: &syn::Path, applied: bool) -> Callee {
    let segs: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let last = segs.last().cloned().unwrap_or_default();
    if segs.len() > 1 {
        return match PREFIXES.contains(&segs[0].as_str()) {
            true => Callee::Unknown(prefix_message(&segs[0], &last)),
            // `blocks::Block(..)`, applied or bound (`let b = blocks::Block(..);`).
            false if applied || last.starts_with(|c: char| c.is_ascii_uppercase()) => {
                Callee::Nested(path.clone())
            }
            false => Callee::Unknown(format!(
                "a layer or model is built, then applied to its input: `{}(..)(x)`",
                compact(&path.to_token_stream())
            )),
        };
    }
    if let Some(k) = crate::symbol::BuiltinKind::from_name(&last) {
        return match applied {
            false => Callee::Builtin(k),
            true => Callee::Unknown(format!(
                "`{last}(..)` is a function: `{last}(a, b)`, not applied to a tensor"
            )),
        };
    }
    if last == "param" {
        return match applied {
            false => Callee::Param,
            true => Callee::Unknown("`param(name, init, shape)` declares a parameter, whose value is used as a tensor: `let cls = param(\"cls\", zeros, (1, 1, 64));`".into()),
        };
    }
    if let Some(init) = crate::symbol::InitKind::from_name(&last) {
        return match applied {
            false => Callee::Init(init),
            true => Callee::Unknown(format!(
                "`{last}(..)` is an initialiser, the value of an argument such as `kernel_init = {last}(..)`; it is not applied to a tensor"
            )),
        };
    }
    if let Some(cell) = CellKind::from_name(&last) {
        return match applied {
            false => Callee::Cell(cell),
            true => Callee::Unknown(format!(
                "a cell runs over a sequence inside `RNN`: `RNN({last}(features = 64))(x)`"
            )),
        };
    }
    match (
        LayerKind::from_name(&last),
        OpKind::from_name(&last),
        applied,
    ) {
        (Some(k), _, true) => return Callee::Layer(k),
        (_, Some(k), false) => return Callee::Op(k),
        // `let dense = Dense(64);`: a layer bound before it is applied.
        (Some(k), _, false) => return Callee::Layer(k),
        (_, Some(_), true) => {
            return Callee::Unknown(format!(
                "`{last}` is an op, not a layer: call it as `{last}(x, ..)`"
            ))
        }
        _ => {}
    }
    let camel = last.starts_with(|c: char| c.is_ascii_uppercase());
    // A user's own model is never shadowed by a guess: only Flax's own
    // layer names are reserved; rustc reports a model that does not exist.
    if camel && !symbol::is_flax_class(&last) {
        return Callee::Nested(path.clone());
    }
    let kind = if applied { "layer" } else { "op" };
    if let Some((hint, near)) = symbol::foreign(&last) {
        return Callee::Unknown(match near {
            Some(w) => format!("unknown {kind} `{last}`: {hint} ({})", symbol::call_form(w)),
            None => format!("unknown {kind} `{last}`: {hint}"),
        });
    }
    if let Some(s) = symbol::nearest_word(&last) {
        return Callee::Unknown(format!(
            "unknown {kind} `{last}`; did you mean {}?",
            symbol::call_form(s)
        ));
    }
    match (applied, camel) {
        (true, true) => Callee::Nested(path.clone()),
        (false, true) => Callee::Unknown(format!(
            "`{last}(..)` builds a layer or model; apply it to its input: `{last}(..)(x)`"
        )),
        _ => Callee::Unknown(format!(
            "unknown {kind} `{last}`\nhelp: the layers are: {}; the ops are: {}",
            LayerKind::NAMES.join(", "),
            OpKind::NAMES.join(", ")
        )),
    }
}

fn parse_call(c: &syn::ExprCall) -> Result<Expr> {
    let tokens = c.to_token_stream();
    match strip(&c.func) {
        // `remat(Block(..))(inputs)`
        syn::Expr::Call(inner) if transform(&inner.func).is_some() => {
            super::transform::parse(inner, c)
        }
        // `Layer(args)(inputs)`
        syn::Expr::Call(inner) => {
            let path = match strip(&inner.func) {
                syn::Expr::Path(p) if p.qself.is_none() => p.path.clone(),
                syn::Expr::MethodCall(m) => return Err(method_call(m)),
                // Flax's `nn.remat(Block)(args)(x)`.
                syn::Expr::Call(t) if transform(&t.func).is_some() => {
                    return Err(super::transform::flax_form(t, inner, c))
                }
                other => {
                    return Err(Error::new_spanned(
                        other,
                        "a layer is named by a path, as in `Dense(10)(x)`",
                    ))
                }
            };
            let (args, inputs) = both(parse_args(&inner.args), parse_args(&c.args))?;
            if inputs.is_empty() {
                return Err(Error::new_spanned(
                    &tokens,
                    "apply the layer to its input: `Dense(10)(x)`",
                ));
            }
            Ok(Expr::Call {
                callee: callee(&path, true),
                name: path.to_token_stream(),
                args,
                inputs: Some(inputs),
                tokens,
            })
        }
        syn::Expr::MethodCall(m) => Err(method_call(m)),
        // `op(input, args)`
        syn::Expr::Path(p) if p.qself.is_none() => {
            let last = p
                .path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            if let Some(kind) = transform(&c.func) {
                return Err(super::transform::not_applied(kind, c));
            }
            let init = crate::symbol::InitKind::from_name(&last).is_some()
                || LayerKind::from_name(&last).is_some();
            // `Block()` unapplied is a model bound once (`let b = Block();`).
            if c.args.is_empty() && !init && !last.starts_with(char::is_uppercase) {
                let msg = format!("`{last}` needs its input: `{last}(x)`");
                return Err(Error::new_spanned(&tokens, msg));
            }
            if let Some(syn::Expr::Assign(first)) = c.args.first() {
                if OpKind::from_name(&last).is_some() && !init {
                    return Err(Error::new_spanned(first, format!("the first argument of `{last}` is its input tensor, e.g. `{last}(x, ..)`")));
                }
            }
            Ok(Expr::Call {
                callee: callee(&p.path, false),
                name: p.path.to_token_stream(),
                args: parse_args(&c.args)?,
                inputs: None,
                tokens,
            })
        }
        other => Err(Error::new_spanned(
            other,
            format!("`#[compact]` does not understand this call; {EXPR_HELP}"),
        )),
    }
}

fn parse_if(i: &syn::ExprIf) -> Result<Expr> {
    if let syn::Expr::Let(l) = &*i.cond {
        return parse_if_let(i, l);
    }
    let cond = parse_expr(&i.cond)?;
    let then = parse_block(&i.then_branch)?;
    let els = match &i.else_branch {
        None => None,
        Some((_, e)) => Some(Box::new(parse_expr(e)?)),
    };
    Ok(Expr::If {
        cond: Box::new(cond),
        then,
        els,
        tokens: i.to_token_stream(),
    })
}

fn parse_pat(p: &syn::Pat, out: &mut Vec<Expr>) -> Result<()> {
    match p {
        syn::Pat::Wild(_) => Ok(()),
        syn::Pat::Lit(l) => {
            out.push(parse_expr(&syn::Expr::Lit(l.clone()))?);
            Ok(())
        }
        syn::Pat::Or(o) => o.cases.iter().try_for_each(|c| parse_pat(c, out)),
        syn::Pat::Paren(p) => parse_pat(&p.pat, out),
        other => Err(Error::new_spanned(other, "a `match` arm's pattern is a literal (`1`, `true`, `\"SAME\"`), `a | b`, `_`, or a name (`n if n > 2 =>`)")),
    }
}

fn parse_match(m: &syn::ExprMatch) -> Result<Expr> {
    let scrutinee = parse_expr(&m.expr)?;
    let mut arms = Vec::new();
    for arm in &m.arms {
        let mut pats = Vec::new();
        let mut some = false;
        let bind = match &arm.pat {
            // `None` is the value, not a name to bind.
            syn::Pat::Ident(p) if p.ident == "None" => {
                pats.push(Expr::Var(p.ident.clone()));
                None
            }
            syn::Pat::Ident(p)
                if p.by_ref.is_none() && p.subpat.is_none() && p.mutability.is_none() =>
            {
                Some(p.ident.clone())
            }
            other => match some_binding(other) {
                Some(b) => {
                    some = true;
                    b
                }
                None => {
                    parse_pat(other, &mut pats)?;
                    None
                }
            },
        };
        // `1 | _` matches anything: keep it a wildcard.
        if has_wild(&arm.pat) {
            pats.clear();
        }
        let guard = match &arm.guard {
            Some((_, g)) => Some(parse_expr(g)?),
            None => None,
        };
        arms.push(Arm {
            pats,
            bind,
            some,
            guard,
            body: parse_expr(&arm.body)?,
        });
    }
    Ok(Expr::Match {
        scrutinee: Box::new(scrutinee),
        arms,
        tokens: m.to_token_stream(),
    })
}

/// `Some(n)` (`Some(_)`): the pattern of an optional value that is
/// given, and the name it binds.
fn some_binding(p: &syn::Pat) -> Option<Option<syn::Ident>> {
    let syn::Pat::TupleStruct(t) = p else {
        return None;
    };
    if !t.path.is_ident("Some") || t.elems.len() != 1 {
        return None;
    }
    match &t.elems[0] {
        syn::Pat::Ident(i) if i.subpat.is_none() => Some(Some(i.ident.clone())),
        syn::Pat::Wild(_) => Some(None),
        _ => None,
    }
}

/// `if let Some(n) = v { a } else { b }` as `match v { Some(n) => a, _ =>
/// b }`: decided at expansion like any `match`.
fn parse_if_let(i: &syn::ExprIf, l: &syn::ExprLet) -> Result<Expr> {
    let Some(bind) = some_binding(&l.pat) else {
        return Err(Error::new_spanned(&l.pat, "`if let` takes an optional block parameter apart: `if let Some(d) = out_dim { .. } else { .. }`"));
    };
    let then = parse_block(&i.then_branch)?;
    let els = match &i.else_branch {
        Some((_, e)) => parse_expr(e)?,
        None => Expr::Block(
            Block {
                stmts: Vec::new(),
                value: None,
                close: i.then_branch.brace_token.span.close(),
            },
            i.to_token_stream(),
        ),
    };
    let tokens = i.to_token_stream();
    Ok(Expr::Match {
        scrutinee: Box::new(parse_expr(&l.expr)?),
        arms: vec![
            Arm {
                pats: Vec::new(),
                bind,
                some: true,
                guard: None,
                body: Expr::Block(then, tokens.clone()),
            },
            Arm {
                pats: Vec::new(),
                bind: None,
                some: false,
                guard: None,
                body: els,
            },
        ],
        tokens,
    })
}

/// `v.unwrap_or(d)`: `match v { Some(x) => x, _ => d }`.
fn unwrap_or(m: &syn::ExprMethodCall) -> Result<Expr> {
    let [default] = m.args.iter().collect::<Vec<_>>()[..] else {
        return Err(Error::new_spanned(
            &m.method,
            "`unwrap_or` takes the value to use for `None`: `out_dim.unwrap_or(x.shape[-1])`",
        ));
    };
    let value = syn::Ident::new("__value", m.method.span());
    Ok(Expr::Match {
        scrutinee: Box::new(parse_expr(&m.receiver)?),
        arms: vec![
            Arm {
                pats: Vec::new(),
                bind: Some(value.clone()),
                some: true,
                guard: None,
                body: Expr::Var(value),
            },
            Arm {
                pats: Vec::new(),
                bind: None,
                some: false,
                guard: None,
                body: parse_expr(default)?,
            },
        ],
        tokens: m.to_token_stream(),
    })
}

fn has_wild(p: &syn::Pat) -> bool {
    match p {
        syn::Pat::Wild(_) => true,
        syn::Pat::Or(o) => o.cases.iter().any(has_wild),
        syn::Pat::Paren(p) => has_wild(&p.pat),
        _ => false,
    }
}

fn compact(t: &TokenStream) -> String {
    crate::ast::compact_text(t)
}
