//! Statements, control flow and the expressions that are not calls.

use super::{Binding, Checker, Kind};
use crate::ast::{Arith, BinOp, Block, Elem, Expr, Lit, Stmt, UnOp};
use crate::shape::show;
use crate::symbol::{self, LayerKind, OpKind};
use crate::value::Val;
use proc_macro2::TokenStream;
use std::collections::HashMap;
use syn::Error;

impl Checker<'_> {
    /// A block's value (`()` as an empty tuple when it has none), in a new
    /// scope; `fn forward`'s body (`outermost`) keeps the parameters' scope.
    pub(super) fn block(&mut self, b: &Block, outermost: bool) -> Val {
        if !outermost {
            self.scopes.push(HashMap::new());
        }
        for s in &b.stmts {
            self.stmt(s);
        }
        let v = match &b.value {
            Some(e) => self.expr(e),
            None if outermost => {
                self.cx.push(Error::new(b.close, "`fn forward` must end with its output expression (without `;`), e.g. `Dense(10)(x)`"));
                Val::Poison
            }
            None => Val::Tuple(Vec::new()),
        };
        if !outermost {
            self.scopes.pop();
        }
        v
    }

    pub(super) fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Let {
                var,
                mutable,
                value,
            } => {
                let v = self.expr(value);
                self.declare(var, v, *mutable);
            }
            Stmt::LetTuple { vars, value, pat } => {
                let v = self.expr(value);
                let elems = match v.elems() {
                    Some(e) if e.len() == vars.len() => e,
                    _ => {
                        if !v.is_poison() {
                            let have = match v.elems() {
                                Some(e) => format!("a tuple of {}", e.len()),
                                None => v.kind().to_string(),
                            };
                            self.cx.error_at(
                                pat,
                                format!(
                                    "`let` binds {} names here, but the value is {have}",
                                    vars.len()
                                ),
                            );
                        }
                        vec![Val::Poison; vars.len()]
                    }
                };
                for (var, v) in vars.iter().zip(elems) {
                    if let Some((var, mutable)) = var {
                        self.declare(var, v, *mutable);
                    }
                }
            }
            Stmt::Assign { var, value } => {
                let v = self.expr(value);
                let name = var.to_string();
                let problem = match self.lookup(&name) {
                    None => Some(self.unknown_variable(var)),
                    Some(b) if !b.mutable => Some(
                        if self.params.contains_key(&name) && self.scopes[0].contains_key(&name) {
                            format!("`{name}` is a block parameter and cannot be reassigned; bind a new variable: `let {name}2 = ..;`")
                        } else {
                            format!("cannot assign twice to `{name}`: declare it `let mut {name} = ..;` to reassign it, or shadow it with `let {name} = ..;`")
                        },
                    ),
                    Some(_) => None,
                };
                match problem {
                    Some(msg) => self.cx.push(Error::new(var.span(), msg)),
                    None => {
                        if let Some(b) = self.scopes.iter_mut().rev().find_map(|s| s.get_mut(&name))
                        {
                            b.val = v;
                        }
                    }
                }
            }
            Stmt::For {
                var,
                start,
                end,
                inclusive,
                body,
                tokens,
            } => self.for_loop(var.as_ref(), start, end, *inclusive, body, tokens),
            Stmt::ForEach {
                index,
                start,
                var,
                items,
                body,
                tokens,
            } => self.for_each(
                (index.as_ref(), start.as_deref()),
                var.as_ref(),
                items,
                body,
                tokens,
            ),
            Stmt::Expr(e) => {
                let v = self.expr(e);
                if !matches!(&v, Val::Poison) && !matches!(&v, Val::Tuple(t) if t.is_empty()) {
                    self.cx.error_at(
                        e.tokens(),
                        "this value is not used: bind it with `let` or assign it (`x = ..;`)",
                    );
                }
            }
        }
    }

    /// The message for a variable that is not in scope.
    pub(super) fn unknown_variable(&self, v: &syn::Ident) -> String {
        let name = v.to_string();
        let known = self.visible();
        let refs: Vec<&str> = known.iter().map(String::as_str).collect();
        let mut msg = format!("unknown variable `{name}`");
        if ["train", "training", "deterministic", "is_training"].contains(&name.as_str()) {
            msg.push_str("; modes come from the call, not from a flag: `model.forward(x)` runs inference, `model.forward_mut(x)` with a tape trains");
        } else if let Some(s) = symbol::nearest(&name, &refs) {
            msg.push_str(&format!("; did you mean `{s}`?"));
        } else if OpKind::from_name(&name).is_some() || LayerKind::from_name(&name).is_some() {
            msg.push_str(&format!(
                "; `{name}` is called, e.g. {}",
                symbol::call_form(&name)
            ));
        }
        msg
    }

    /// A value known at expansion (a parameter's default).
    pub(super) fn const_expr(&mut self, e: &Expr) -> Val {
        let v = self.expr(e);
        if !v.is_constant() && !v.is_poison() {
            self.cx.error_at(e.tokens(), "a parameter's default is a value known when the macro expands: a number, a boolean, a tuple or a word such as `SAME`");
            return Val::Poison;
        }
        v
    }

    /// `format!`'s string: each value as Rust's `Display` writes it.
    fn format(&mut self, pieces: &[crate::ast::Piece], tokens: &proc_macro2::TokenStream) -> Val {
        let mut out = String::new();
        for p in pieces {
            let e = match p {
                crate::ast::Piece::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                crate::ast::Piece::Value(e) => e,
            };
            match self.expr(e) {
                Val::Int(n) => out.push_str(&n.to_string()),
                Val::Float(f) => out.push_str(&f.to_string()),
                Val::Bool(b) => out.push_str(&b.to_string()),
                Val::Str(s) | Val::Word(s) => out.push_str(&s),
                Val::Poison => return Val::Poison,
                other => {
                    self.cx.error_at(tokens, format!("`format!` writes numbers, booleans and strings known when the macro expands, not {}", other.kind()));
                    return Val::Poison;
                }
            }
        }
        Val::Str(out)
    }

    pub(super) fn expr(&mut self, e: &Expr) -> Val {
        match e {
            // Its parse error is reported already.
            Expr::Poison(_) => Val::Poison,
            Expr::Format(pieces, tokens) => self.format(pieces, tokens),
            Expr::Range(a, b, tokens) => {
                let mut end = |e: &Option<Box<Expr>>| -> Result<Option<i64>, ()> {
                    let Some(e) = e else { return Ok(None) };
                    match self.expr(e) {
                        Val::Int(n) => Ok(Some(n)),
                        Val::Poison => Err(()),
                        other => {
                            self.cx.error_at(e.tokens(), format!("a slice's ends are integers known when the macro expands, not {}", other.kind()));
                            Err(())
                        }
                    }
                };
                let _ = tokens;
                match (end(a), end(b)) {
                    (Ok(a), Ok(b)) => Val::Range(a, b),
                    _ => Val::Poison,
                }
            }
            Expr::Var(v) => match self.lookup(&v.to_string()) {
                Some(Binding { val, .. }) => val.clone(),
                None => match v.to_string().as_str() {
                    // A bare constant-like name: a word whose reader says
                    // what it expected (`unknown padding `FULL``).
                    w if is_constant_name(w) => Val::Word(w.to_string()),
                    "True" => Val::Bool(true),
                    "None" => Val::None,
                    w if crate::symbol::InitKind::from_name(w).is_some() => {
                        let kind = crate::symbol::InitKind::from_name(w);
                        match kind.map(crate::init::bare) {
                            Some(Ok(i)) => Val::Init(i),
                            Some(Err(msg)) => {
                                self.cx.push(Error::new(v.span(), msg));
                                Val::Poison
                            }
                            None => Val::Poison,
                        }
                    }
                    "False" => Val::Bool(false),
                    // `method = nearest`: jax's resize methods as bare words.
                    w if crate::ops::is_method_word(w) => Val::Word(w.to_string()),
                    // `act: Param<relu>`, `conv: Param<Conv>`: an
                    // activation or a layer as a value, called later.
                    w if crate::check::partial::bare(w).is_some() => {
                        crate::check::partial::bare(w).unwrap_or(Val::Poison)
                    }
                    _ => {
                        let msg = self.unknown_variable(v);
                        self.cx.push(Error::new(v.span(), msg));
                        Val::Poison
                    }
                },
            },
            Expr::SelfField(f, tokens) => {
                match self.params.get(&f.to_string()) {
                    Some(v) => v.clone(),
                    None => {
                        let names: Vec<String> = self
                            .model
                            .params
                            .iter()
                            .map(|d| d.name.to_string())
                            .collect();
                        let msg = if names.is_empty() {
                            format!("`self.{f}`: `{}` has no block parameters; declare one as `{f}: Param<default>` after the input", self.model.name)
                        } else {
                            format!("`self.{f}` is not a block parameter of `{}`; its parameters are: {}", self.model.name, names.join(", "))
                        };
                        self.cx.error_at(tokens, msg);
                        Val::Poison
                    }
                }
            }
            Expr::Lit(l, _) => match l {
                Lit::Int(n) => Val::Int(*n),
                Lit::Float(f) => Val::Float(*f),
                Lit::Bool(b) => Val::Bool(*b),
                Lit::Str(s) => Val::Str(s.clone()),
            },
            Expr::Tuple(items, _) => Val::Tuple(items.iter().map(|i| self.expr(i)).collect()),
            Expr::Unary { op, input, tokens } => {
                let v = self.expr(input);
                self.unary(*op, v, tokens)
            }
            Expr::Binary {
                op,
                lhs,
                rhs,
                tokens,
            } => {
                let l = self.expr(lhs);
                // `&&` and `||` short-circuit, as in Rust and Python.
                match (op, &l) {
                    (BinOp::And, Val::Bool(false)) => return Val::Bool(false),
                    (BinOp::Or, Val::Bool(true)) => return Val::Bool(true),
                    _ => {}
                }
                let r = self.expr(rhs);
                self.binary(*op, l, r, lhs, rhs, tokens)
            }
            Expr::Field {
                base,
                member,
                tokens,
            } => {
                let v = self.expr(base);
                match (&v, member.to_string().as_str()) {
                    (Val::Poison, _) => Val::Poison,
                    (Val::Tensor(i), "shape") => Val::Shape(self.shape(*i).to_vec()),
                    (Val::Tensor(i), "ndim") => Val::Int(self.shape(*i).len() as i64),
                    (Val::Tensor(_), m) => {
                        self.cx.error_at(tokens, format!("tensors have `.shape` and `.ndim` here, not `.{m}`; ops are called as functions, e.g. `relu(x)`"));
                        Val::Poison
                    }
                    (other, m) => {
                        self.cx.error_at(
                            tokens,
                            format!(
                                "`.{m}` of {}: only tensors have fields (`x.shape`)",
                                other.kind()
                            ),
                        );
                        Val::Poison
                    }
                }
            }
            Expr::Index {
                base,
                index,
                tokens,
            } => {
                let (b, i) = (self.expr(base), self.expr(index));
                self.index(b, i, tokens)
            }
            Expr::Call {
                callee,
                name,
                args,
                inputs,
                tokens,
            } => self.call(callee, name, args, inputs.as_deref(), tokens),
            Expr::Transform {
                kind,
                call,
                word,
                tokens,
            } => self.transform(*kind, call, word, tokens),
            Expr::If {
                then,
                els: None,
                tokens,
                ..
            } if then.value.is_some() => {
                self.cx.error_at(tokens, "an `if` without `else` has no value: add an `else` branch, or assign in the branch (`if c { x = f(x); }`)");
                Val::Poison
            }
            Expr::If {
                cond,
                then,
                els,
                tokens,
            } => match self.condition(cond) {
                Some(true) => self.block(then, false),
                Some(false) => match els {
                    Some(e) => self.expr(e),
                    None => Val::Tuple(Vec::new()),
                },
                None => {
                    let _ = tokens;
                    Val::Poison
                }
            },
            Expr::Match {
                scrutinee,
                arms,
                tokens,
            } => {
                let v = self.expr(scrutinee);
                if v.is_poison() {
                    return Val::Poison;
                }
                if !v.is_constant() {
                    self.cx.error_at(scrutinee.tokens(), format!("`match` is decided when the macro expands, on values it knows (block parameters, loop indices, shapes), not on {}", v.kind()));
                    return Val::Poison;
                }
                for arm in arms {
                    let mut hit = match arm.some {
                        true => !matches!(v, Val::None),
                        false => arm.pats.is_empty(),
                    };
                    for p in &arm.pats {
                        let pv = self.expr(p);
                        hit |= equal(&v, &pv) == Some(true);
                    }
                    if hit {
                        self.scopes.push(HashMap::new());
                        if let Some(name) = &arm.bind {
                            self.declare(name, v.clone(), false);
                        }
                        let guard = match &arm.guard {
                            Some(g) => self.condition(g),
                            None => Some(true),
                        };
                        let out = match guard {
                            Some(true) => Some(self.expr(&arm.body)),
                            Some(false) => None,
                            None => Some(Val::Poison),
                        };
                        self.scopes.pop();
                        if let Some(out) = out {
                            return out;
                        }
                    }
                }
                self.cx.error_at(
                    tokens,
                    format!(
                        "no arm of this `match` matches {}; add `_ => ..`",
                        show_val(&v)
                    ),
                );
                Val::Poison
            }
            Expr::Block(b, _) => self.block(b, false),
            Expr::List { var, push, tokens } => self.list(var, push.as_deref(), tokens),
        }
    }

    /// A condition decided at expansion.
    fn condition(&mut self, cond: &Expr) -> Option<bool> {
        match self.expr(cond) {
            Val::Bool(b) => Some(b),
            Val::Poison => None,
            Val::Tensor(_) => {
                self.cx.error_at(cond.tokens(), "an `if` on a tensor cannot be decided when the macro expands; conditions use block parameters, loop indices and shapes (`x.shape[-1] != features`)");
                None
            }
            other => {
                self.cx.error_at(
                    cond.tokens(),
                    format!(
                        "a condition must be a boolean (`s != 1`, `use_proj`), not {}",
                        other.kind()
                    ),
                );
                None
            }
        }
    }

    fn unary(&mut self, op: UnOp, v: Val, tokens: &TokenStream) -> Val {
        match (op, v) {
            (_, Val::Poison) => Val::Poison,
            (UnOp::Neg, Val::Tensor(i)) => {
                let s = self.shape(i).to_vec();
                self.push(Kind::Neg(i), s)
            }
            (UnOp::Neg, Val::Int(n)) => Val::Int(-n),
            (UnOp::Neg, Val::Float(f)) => Val::Float(-f),
            (UnOp::Not, Val::Bool(b)) => Val::Bool(!b),
            (op, other) => {
                let sym = if op == UnOp::Neg { "-" } else { "!" };
                self.cx.error_at(
                    tokens,
                    format!("`{sym}` does not apply to {}", other.kind()),
                );
                Val::Poison
            }
        }
    }

    fn index(&mut self, b: Val, i: Val, tokens: &TokenStream) -> Val {
        match (b, i) {
            (Val::Poison, _) | (_, Val::Poison) => Val::Poison,
            (Val::Shape(s), Val::Int(n)) if n < 0 && (n.unsigned_abs() as usize) <= s.len() => {
                Val::Int(s[s.len() - n.unsigned_abs() as usize] as i64)
            }
            (Val::Shape(s), Val::Int(n)) if n < 0 => {
                self.cx.error_at(
                    tokens,
                    format!(
                        "`shape[{n}]` is out of range: the value has {} per-example axes ({})",
                        s.len(),
                        show(&s)
                    ),
                );
                Val::Poison
            }
            (Val::Shape(_), Val::Int(_)) => {
                self.cx.error_at(tokens, "index a shape from the end (`x.shape[-1]` is the last axis): flaxen's shapes leave out the batch axis that Flax's arrays have, so an index counted from the front would be ambiguous");
                Val::Poison
            }
            (Val::Tuple(t), Val::Int(n)) => {
                let k = if n < 0 { t.len() as i64 + n } else { n };
                match usize::try_from(k).ok().and_then(|k| t.get(k)) {
                    Some(v) => v.clone(),
                    None => {
                        self.cx.error_at(
                            tokens,
                            format!("index {n} is out of range for a tuple of {}", t.len()),
                        );
                        Val::Poison
                    }
                }
            }
            // `t[1..]`: Python's `t[1:]` of a tuple known at expansion.
            (v @ (Val::Tuple(_) | Val::Shape(_)), Val::Range(a, b)) => {
                let items = v.elems().unwrap_or_default();
                let n = items.len() as i64;
                let end = |e: Option<i64>, default: i64| match e {
                    None => default,
                    Some(k) if k < 0 => (n + k).max(0),
                    Some(k) => k.min(n),
                };
                let (a, b) = (end(a, 0), end(b, n));
                Val::Tuple(items[a as usize..b.max(a) as usize].to_vec())
            }
            (Val::Tensor(t), Val::Range(a, b)) => {
                let shape = self.shape(t).to_vec();
                if self.elem(t) == Elem::Bool {
                    self.cx.error_at(
                        tokens,
                        "a mask is not sliced: build the mask for the sliced sequence",
                    );
                    return Val::Poison;
                }
                let what = crate::ast::compact_text(tokens)
                    .split('[')
                    .next()
                    .unwrap_or("x")
                    .to_string();
                let ids = self.elem(t) == Elem::Index;
                match crate::ops::slice(a, b, &shape, ids, &format!("`{what}`")) {
                    Ok((op, out)) => {
                        let elem = op.output_elem();
                        self.push_elem(
                            Kind::Op {
                                op,
                                inputs: vec![t],
                            },
                            out,
                            elem,
                        )
                    }
                    Err(msg) => {
                        self.cx.error_at(tokens, msg);
                        Val::Poison
                    }
                }
            }
            (Val::Tensor(t), Val::Int(n)) => {
                let shape = self.shape(t).to_vec();
                if self.elem(t) != Elem::Float {
                    self.cx.error_at(tokens, "only float values are indexed (`x[0]`, the CLS token); token ids and masks are not");
                    return Val::Poison;
                }
                let what = crate::ast::compact_text(tokens)
                    .split('[')
                    .next()
                    .unwrap_or("x")
                    .to_string();
                match crate::ops::take(n, &shape, &format!("`{what}`")) {
                    Ok((op, out)) => self.push(
                        Kind::Op {
                            op,
                            inputs: vec![t],
                        },
                        out,
                    ),
                    Err(msg) => {
                        self.cx.error_at(tokens, msg);
                        Val::Poison
                    }
                }
            }
            (b, i) => {
                self.cx.error_at(
                    tokens,
                    format!("cannot index {} with {}", b.kind(), i.kind()),
                );
                Val::Poison
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
            // `x ** p`: jnp.power by a number.
            (Val::Tensor(i), n @ (Val::Int(_) | Val::Float(_))) if op == BinOp::Pow => {
                let p = number(&n);
                let act = crate::ops::Activation::Function("try_pow", vec![p], format!("`** {p}`"));
                let s = self.shape(i).to_vec();
                self.push(
                    Kind::Op {
                        op: crate::ops::Op::Activation(act),
                        inputs: vec![i],
                    },
                    s,
                )
            }
            (
                l @ (Val::Tensor(_) | Val::Int(_) | Val::Float(_)),
                r @ (Val::Tensor(_) | Val::Int(_) | Val::Float(_)),
            ) if op.is_arithmetic()
                && (matches!(l, Val::Tensor(_)) || matches!(r, Val::Tensor(_))) =>
            {
                let Some(arith) = op.arith() else {
                    return Val::Poison;
                };
                self.arith(arith, l, r, (&le.describe(), &re.describe()), tokens)
            }
            (l @ Val::Tensor(_), r) | (l, r @ Val::Tensor(_)) => {
                let ids = [&l, &r]
                    .iter()
                    .any(|v| matches!(v, Val::Tensor(t) if self.elem(*t) == Elem::Index));
                let msg = if ids && !op.is_arithmetic() {
                    format!("`{sym}` on token ids cannot be decided when the macro expands\nhelp: Flax's `make_attention_mask(tokens > 0, tokens > 0)` is `make_attention_mask(tokens, tokens)` here: it takes the ids themselves, and id 0 is padding")
                } else if op == BinOp::Pow {
                    "`**` raises a tensor to a number known when the macro expands (`x ** 2`)"
                        .to_string()
                } else if op.is_arithmetic() || op == BinOp::Rem {
                    format!(
                        "`{sym}` works on two tensors of the same shape or a tensor and a number"
                    )
                } else {
                    format!("`{sym}` on a tensor cannot be decided when the macro expands; conditions use block parameters, loop indices and shapes (`x.shape[-1]`)")
                };
                self.cx.error_at(tokens, msg);
                Val::Poison
            }
            (l, r) => match constant_binary(op, &l, &r) {
                Ok(v) => v,
                Err(msg) => {
                    self.cx.error_at(tokens, msg);
                    Val::Poison
                }
            },
        }
    }

    /// Elementwise `arith` of two values, one of them at least a tensor,
    /// with NumPy broadcasting; `names` describe the operands for
    /// messages.
    pub(super) fn arith(
        &mut self,
        arith: Arith,
        l: Val,
        r: Val,
        names: (&str, &str),
        tokens: &TokenStream,
    ) -> Val {
        let sym = arith.symbol();
        match (l, r) {
            (Val::Tensor(a), Val::Tensor(b)) => {
                let (sa, sb) = (self.shape(a).to_vec(), self.shape(b).to_vec());
                let Some(out) = crate::ops::broadcast::shape(&sa, &sb) else {
                    self.cx.error_at(tokens, format!("`{sym}` needs operands whose shapes broadcast (NumPy's rules: aligned from the right, each axis equal or 1), but {} has shape {} and {} has shape {} here", names.0, show(&sa), names.1, show(&sb)));
                    return Val::Poison;
                };
                // An operand of another shape is broadcast first (a step of
                // its own), so the arithmetic itself stays elementwise.
                let mut operand = |i: usize, s: &[usize]| -> usize {
                    if s == out {
                        return i;
                    }
                    let op = crate::ops::Op::Broadcast(s.to_vec());
                    match self.push(
                        Kind::Op {
                            op,
                            inputs: vec![i],
                        },
                        out.clone(),
                    ) {
                        Val::Tensor(j) => j,
                        _ => i,
                    }
                };
                let (a, b) = (operand(a, &sa), operand(b, &sb));
                self.push(Kind::Binary(arith, a, b), out)
            }
            (Val::Tensor(i), n) => {
                let s = self.shape(i).to_vec();
                self.push(
                    Kind::Scalar {
                        op: arith,
                        input: i,
                        value: number(&n),
                        scalar_first: false,
                    },
                    s,
                )
            }
            (n, Val::Tensor(i)) => {
                if arith == Arith::Div {
                    self.cx.error_at(tokens, "dividing a number by a tensor is not supported; write `x * (1.0 / ..)` or use `sigmoid`/`softmax`");
                    return Val::Poison;
                }
                let s = self.shape(i).to_vec();
                self.push(
                    Kind::Scalar {
                        op: arith,
                        input: i,
                        value: number(&n),
                        scalar_first: true,
                    },
                    s,
                )
            }
            _ => Val::Poison,
        }
    }
}

fn number(v: &Val) -> f64 {
    match v {
        Val::Int(n) => *n as f64,
        Val::Float(f) => *f,
        _ => 0.0,
    }
}

/// Equality of values known at expansion; `None` when they cannot be
/// compared.
fn equal(a: &Val, b: &Val) -> Option<bool> {
    Some(match (a, b) {
        (Val::Int(x), Val::Int(y)) => x == y,
        (Val::Int(_) | Val::Float(_), Val::Int(_) | Val::Float(_)) => number(a) == number(b),
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::None, Val::None) => true,
        (Val::None, _) | (_, Val::None) => false,
        (Val::Str(x) | Val::Word(x), Val::Str(y) | Val::Word(y)) => x == y,
        _ => match (a.elems(), b.elems()) {
            (Some(x), Some(y)) => {
                x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| equal(p, q) == Some(true))
            }
            _ => return None,
        },
    })
}

/// Arithmetic, comparison and logic on values known at expansion: integer
/// arithmetic stays integer (`/` truncates, as in Rust), a float makes it
/// float.
fn constant_binary(op: BinOp, l: &Val, r: &Val) -> Result<Val, String> {
    let sym = op.symbol();
    let mismatch = || format!("`{sym}` does not apply to {} and {}", l.kind(), r.kind());
    match op {
        BinOp::And | BinOp::Or => match (l, r) {
            (Val::Bool(a), Val::Bool(b)) => Ok(Val::Bool(if op == BinOp::And {
                *a && *b
            } else {
                *a || *b
            })),
            _ => Err(mismatch()),
        },
        BinOp::Eq | BinOp::Ne => match equal(l, r) {
            Some(e) => Ok(Val::Bool(e == (op == BinOp::Eq))),
            None => Err(mismatch()),
        },
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
            if !matches!(l, Val::Int(_) | Val::Float(_))
                || !matches!(r, Val::Int(_) | Val::Float(_))
            {
                return Err(mismatch());
            }
            let (a, b) = (number(l), number(r));
            Ok(Val::Bool(match op {
                BinOp::Lt => a < b,
                BinOp::Le => a <= b,
                BinOp::Gt => a > b,
                _ => a >= b,
            }))
        }
        BinOp::Pow => match (l, r) {
            (Val::Int(a), Val::Int(b)) if *b >= 0 => u32::try_from(*b)
                .ok()
                .and_then(|b| a.checked_pow(b))
                .map(Val::Int)
                .ok_or_else(|| "this integer overflows".to_string()),
            (Val::Int(_) | Val::Float(_), Val::Int(_) | Val::Float(_)) => {
                let v = number(l).powf(number(r));
                if v.is_finite() {
                    Ok(Val::Float(v))
                } else {
                    Err("this number is not finite".to_string())
                }
            }
            _ => Err(mismatch()),
        },
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => match (l, r) {
            (Val::Int(a), Val::Int(b)) => {
                let v = match op {
                    BinOp::Add => a.checked_add(*b),
                    BinOp::Sub => a.checked_sub(*b),
                    BinOp::Mul => a.checked_mul(*b),
                    BinOp::Div => a.checked_div(*b),
                    _ => a.checked_rem(*b),
                };
                v.map(Val::Int).ok_or_else(|| {
                    if *b == 0 && matches!(op, BinOp::Div | BinOp::Rem) {
                        "division by zero".to_string()
                    } else {
                        "this integer overflows".to_string()
                    }
                })
            }
            (Val::Int(_) | Val::Float(_), Val::Int(_) | Val::Float(_)) => {
                let (a, b) = (number(l), number(r));
                let v = match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    BinOp::Mul => a * b,
                    BinOp::Div => a / b,
                    _ => a % b,
                };
                if v.is_finite() {
                    Ok(Val::Float(v))
                } else {
                    Err("this number is not finite".to_string())
                }
            }
            _ => Err(mismatch()),
        },
    }
}

/// `SAME`, `HIDDEN`: a name that reads as a constant.
fn is_constant_name(name: &str) -> bool {
    name.len() > 1
        && name.starts_with(|c: char| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// A value as messages show it.
pub(super) fn show_val(v: &Val) -> String {
    match v {
        Val::Int(n) => format!("`{n}`"),
        Val::Float(f) => format!("`{f}`"),
        Val::Bool(b) => format!("`{b}`"),
        Val::Str(s) => format!("`{s:?}`"),
        Val::Word(w) => format!("`{w}`"),
        Val::Shape(s) => format!("`{}`", show(s)),
        other => other.kind().to_string(),
    }
}
